#!/bin/sh
# What the observer costs a run: the programs under test, with sfma-tap
# on the pipes to sfma-model, sfma-exec and sfma-mem, against the same programs
# with an sfma built with -DSFMA_BENCH_NO_TAP into a temporary directory,
# which starts no tap (only for this bench: no built program has that
# switch, and a record of such a run says observed=none). Two runs, side
# by side: a 100-turn mock run (a bootstrap candidate, 98 reads of a
# distinct small file, done: 200 model lines and 196 exec lines through
# the tap) and a 40-command run (a candidate, 40 sandboxed `echo`s, done:
# every command waits for the tap's fdatasync before it reaches
# sfma-exec). The median of ROUNDS runs each, interleaved, each run in a
# workspace of its own (see evidence.sh for why none is removed until the
# end). Budget: the tap costs at most 10 % of either.
set -eu
BIN=${SFMA_BINDIR:-$(cd "$(dirname "$0")/../../bin" && pwd)}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${ROUNDS:-15}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s -C "$SRC" BUILD="$tmp/build" BINDIR="$tmp/bin" \
	CFLAGS="-O2 -g -DSFMA_BENCH_NO_TAP" "$tmp/bin/sfma" >/dev/null
# The baseline differs only in sfma: every stage is the one under test.
mkdir -p "$tmp/base"
for p in "$BIN"/sfma-*; do ln -s "$p" "$tmp/base/"; done
cp "$tmp/bin/sfma" "$tmp/base/" # sfma starts the stages found beside it

cd "$tmp"
mkdir inputs
i=0
while [ $i -lt 100 ]; do echo "file $i" >"inputs/f$i.txt"; i=$((i + 1)); done
cat >m.json <<'JSON'
{"name":"bench","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo"],"inputs":[],"outputs":[],"maxTurns":200,"maxModelCalls":300,
 "dryRunDefault":false}
JSON
cand='{"mission":"m","successCriteria":[],"loopRoles":[{"name":"r","duty":"d"}],"firstTasks":[],"schedule":[]}'
script() { # script reads|commands
	printf '[%s' "$cand"
	i=0
	if [ "$1" = reads ]; then
		while [ $i -lt 98 ]; do printf ',{"tool":"read","path":"f%d.txt"}' "$i"; i=$((i + 1)); done
	else
		while [ $i -lt 40 ]; do printf ',{"tool":"run","cmd":"echo %d"}' "$i"; i=$((i + 1)); done
	fi
	printf ',{"tool":"done","summary":"done"}]'
}
. "$SRC/tests/bench/runs.subr"
over=0
for kind in reads commands; do
	SFMA_MOCK=$(script $kind)
	export SFMA_MOCK
	: >"$tmp/without"
	: >"$tmp/with"
	r=0
	while [ $r -lt "$ROUNDS" ]; do
		once "$tmp/base" >>"$tmp/without"
		once "$BIN" >>"$tmp/with"
		r=$((r + 1))
	done
	last=$(cat "$tmp/last")
	turns=$(jq .turns "$last/ws/.sfma/result.json")
	lines=$(grep -c '"kind":"line"' "$last/ws/.sfma/observed.jsonl")
	"$BIN/sfma-verify" "$last/ws" >/dev/null
	without=$(median "$tmp/without") with=$(median "$tmp/with")
	x=$(ratio "$with" "$without")
	echo "tap: $kind, $turns turns, $lines lines observed, median of $ROUNDS: $without ms without the tap, $with ms with: ${x}x (best: $(best "$tmp/without") and $(best "$tmp/with") ms)"
	awk -v x="$x" 'BEGIN { exit !(x > 1.10) }' && over=1
done
[ "$over" -eq 0 ] || echo "tap: over the budget of 1.10x"
