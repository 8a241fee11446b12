#!/bin/sh
# replay-sweep.sh DIR: replay every honest record the test suite left
# behind under DIR (`make check` runs bats with --no-tempdir-cleanup into a
# directory of its own, then this). A record is honest when sfma-verify
# accepts it as it stands (AUDIT_OK, with evidence: records of the earlier
# runner and those made before evidence existed cannot be derived again)
# and no test changed it on purpose or built it by hand (tests/helpers.bash
# `tampered` leaves .sfma/tampered-by-test in it; `rewrite` calls it). Every honest record must replay
# REPLAY_OK: the planner and the replay decide with the same code, so an
# honest record that diverges is a bug. Prints a count; exit 1 on any
# that does not replay.
set -u
dir=$1
bindir=${SFMA_BINDIR:?}
checked=0 skipped=0 failed=0
list=$(mktemp)
find "$dir" -path '*/.sfma/result.json' -type f 2>/dev/null | sort >"$list"
while IFS= read -r record; do
	ws=${record%/.sfma/result.json}
	if [ -e "$ws/.sfma/tampered-by-test" ]; then
		skipped=$((skipped + 1))
		continue
	fi
	ok=$("$bindir/sfma-verify" "$ws" 2>/dev/null) || { skipped=$((skipped + 1)); continue; }
	case $ok in
	*" evidence="*) ;;
	*) skipped=$((skipped + 1)); continue ;;
	esac
	checked=$((checked + 1))
	out=$("$bindir/sfma-replay" "$ws" 2>&1)
	case $out in
	REPLAY_OK*) ;;
	*) failed=$((failed + 1)); echo "replay-sweep: $ws: $out" >&2 ;;
	esac
done <"$list"
rm -f "$list"
echo "replay-sweep: $checked honest records replayed, $failed did not; $skipped left out (tampered, not verifying, or without evidence)"
[ "$failed" -eq 0 ]
