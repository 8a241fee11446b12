#!/bin/sh
# tests/lint.sh [FILE.bats...] - what `make check` refuses before it runs a test.
#
# 1. In bats, a bare `! cmd` that is not the last command of its test never
#    fails the test (bash ignores the status of a negated pipeline under
#    `set -e`). Write `run ! cmd` with a status check, or `cmd && return 1`.
# 2. Nothing in the repository may reach outside it: a user's clone has
#    nothing beside it (no sibling folder, no sibling checkout).
# 3. No .c file includes another (nor does a header): one translation unit
#    per .c; a harness that needs a static function gets a header for it.
# Exits 1 naming each offending line, 0 when clean.
set -u
cd "$(dirname "$0")/.." || exit 2
status=0

if [ $# -gt 0 ]; then files="$*"; else files=$(ls tests/*.bats); fi
weak=$(for f in $files; do
	awk -v f="$f" '
	/^[[:space:]]*![[:space:]]/ { if (pend) print f ":" pend; pend = FNR; next }
	pend && /^[[:space:]]*(#|$)/ { next }
	pend { if ($0 !~ /^[[:space:]]*}[[:space:]]*$/) print f ":" pend; pend = 0 }' "$f"
done)
if [ -n "$weak" ]; then
	echo "lint: bare '! cmd' that can never fail its test (use 'run ! cmd' and check \$status, or 'cmd && return 1'):" >&2
	echo "$weak" >&2
	status=1
fi

if [ $# -eq 0 ] && command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1; then
	# The folder's name is spelled in pieces so that this line is not a hit.
	s=sha; s=${s}red
	outside=$(git grep -n -I -E "\.\./(\.\./)*$s\b|$s/interop|$s folder beside" -- . 2>/dev/null)
	if [ -n "$outside" ]; then
		echo "lint: these lines read a folder outside the repository, which a clone does not have:" >&2
		echo "$outside" >&2
		status=1
	fi
fi
if [ $# -eq 0 ]; then
	# The one left: tests/fuzz/fuzz_chain.c includes lib/chain.c. Remove
	# this exception once chain.c has a seam its harness can link against.
	included=$(grep -rn -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^">]*\.c[">]' \
	           --include='*.c' --include='*.h' lib src tests 2>/dev/null |
	           grep -v -e '^tests/fuzz/fuzz_chain\.c:')
	if [ -n "$included" ]; then
		echo "lint: a .c file included (link it as an object; give what it needs a header):" >&2
		echo "$included" >&2
		status=1
	fi
fi
[ $status -eq 0 ] && echo "lint: clean"
exit $status
