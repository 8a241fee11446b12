#!/bin/sh
# What evidence costs a run: a 100-turn mock run (a bootstrap candidate,
# 98 reads of a small file, done) with the programs under test, against the
# same programs built without evidence (sfma-plan compiled with
# -DSFMA_BENCH_NO_EVIDENCE into a temporary directory; no built program has
# that switch). Two scripts: the same read repeated (replies and results
# repeat, so the store deduplicates them) and reads that differ in every
# reply and result (every turn stores new blobs: appended to the store's
# journal, one fdatasync before the entry that names them, filed under
# their names by a thread beside the run, one syncfs at the end). Best of
# ROUNDS runs each, interleaved.
# Budget: both scripts at most 1.2x.
set -eu
BIN=${SFMA_BINDIR:-$(cd "$(dirname "$0")/../../bin" && pwd)}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${ROUNDS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s -C "$SRC" BUILD="$tmp/build" BINDIR="$tmp/bin" \
	CFLAGS="-O2 -g -DSFMA_BENCH_NO_EVIDENCE" "$tmp/bin/sfma-plan" >/dev/null
# The baseline differs only in sfma-plan: every other stage is the one under test.
mkdir -p "$tmp/base"
for p in "$BIN"/sfma*; do ln -s "$p" "$tmp/base/"; done
rm "$tmp/base/sfma-plan" "$tmp/base/sfma"
cp "$tmp/bin/sfma-plan" "$tmp/base/"
cp "$BIN/sfma" "$tmp/base/" # sfma starts the stages found beside it

cd "$tmp"
mkdir ws
i=0
while [ $i -lt 100 ]; do echo "file $i" >"ws/f$i.txt"; i=$((i + 1)); done
cat >m.json <<'JSON'
{"name":"bench","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":[],"inputs":[],"outputs":[],"maxTurns":200,"maxModelCalls":300,
 "dryRunDefault":false}
JSON
script() { # script same|distinct
	cand='{"mission":"m","successCriteria":[],"loopRoles":[{"name":"r","duty":"d"}],"firstTasks":[],"schedule":[]}'
	printf '[%s' "$cand"
	i=0
	while [ $i -lt 98 ]; do
		if [ "$1" = same ]; then printf ',{"tool":"read","path":"f0.txt"}'
		else printf ',{"tool":"read","path":"f%d.txt"}' "$i"; fi
		i=$((i + 1))
	done
	printf ',{"tool":"done","summary":"read them"}]'
}
once() { # once BINDIR: wall time of one run in ms
	rm -rf ws/.sfma
	t0=$(date +%s%N)
	"$1/sfma" run m.json --apply >/dev/null 2>&1 || { echo "run failed" >&2; exit 1; }
	t1=$(date +%s%N)
	echo $(( (t1 - t0) / 1000000 ))
}
min() { if [ -z "$1" ] || [ "$2" -lt "$1" ]; then echo "$2"; else echo "$1"; fi; }
for kind in same distinct; do
	SFMA_MOCK=$(script $kind)
	export SFMA_MOCK
	# Interleaved, so that the machine's other load falls on both alike.
	without="" with=""
	r=0
	while [ $r -lt "$ROUNDS" ]; do
		without=$(min "$without" "$(once "$tmp/base")")
		with=$(min "$with" "$(once "$BIN")")
		r=$((r + 1))
	done
	turns=$(jq .turns ws/.sfma/result.json)
	blobs=$(ls ws/.sfma/evidence | wc -l)
	ratio=$(awk -v a="$with" -v b="$without" 'BEGIN { printf "%.2f", a / b }')
	echo "evidence: $kind replies, $turns turns: ${without} ms without, ${with} ms with ($blobs blobs): ${ratio}x"
done
