#!/bin/sh
# What confinement costs (sfma(1), CONFINEMENT), measured two ways.
#
# 1. Per program start: confine_apply for every row of the table, in a
#    process of its own each time (tests/bench/confine-cost.c, built
#    against the library under test): the median of ROUNDS, in
#    microseconds.
# 2. Per run: a short mock run (a bootstrap candidate, one command, a
#    write, done: every process of the pipeline starts and confines
#    itself, the planner waits for every report) with the programs under
#    test, against the same programs built without confinement
#    (-DSFMA_BENCH_NO_CONFINE into a temporary directory: confine_apply
#    then does nothing; no built program has that switch), and sfma-verify
#    of its record the same way. Medians of RUN_ROUNDS, interleaved, each
#    run in a workspace of its own.
set -eu
BIN=${SFMA_BINDIR:-$(cd "$(dirname "$0")/../../bin" && pwd)}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${ROUNDS:-200}
RUN_ROUNDS=${RUN_ROUNDS:-21}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
LIBA=${SFMA_LIBA:-$(dirname "$BIN")/build/libsfma.a}
[ -f "$LIBA" ] || LIBA=$SRC/build/libsfma.a
cc -std=c11 -O2 -D_GNU_SOURCE -I"$SRC/lib" -o "$tmp/confine-cost" "$SRC/tests/bench/confine-cost.c" "$LIBA" \
	-ljansson -lcrypto -lpthread -lm -lseccomp
make -s -C "$SRC" BUILD="$tmp/build" BINDIR="$tmp/bin" CFLAGS="-O2 -g -DSFMA_BENCH_NO_CONFINE" all >/dev/null

cd "$tmp"
mkdir -p ws/.sfma
echo "confine_apply per program (median of $ROUNDS; Linux $(uname -r)):"
./confine-cost "$tmp/ws" "$ROUNDS"

cat >m.json <<'JSON'
{"name":"bench","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":8,"dryRunDefault":false}
JSON
export SFMA_MOCK='[{"mission":"m","successCriteria":[],"loopRoles":[{"name":"r","duty":"d"}],"firstTasks":[],"schedule":[]},
 {"tool":"run","cmd":"echo hi"},{"tool":"write","path":"out.txt","content":"x"},{"tool":"done","summary":"ok"}]'
ms() { # ms COMMAND...: wall milliseconds
	s=$(date +%s%N)
	"$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
	echo $(( ($(date +%s%N) - s) / 1000 ))
}
median() { sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)] / 1000}'; }
i=0
: >run.on; : >run.off; : >verify.on; : >verify.off
while [ $i -lt "$RUN_ROUNDS" ]; do
	for v in on off; do
		b=$BIN; [ $v = off ] && b=$tmp/bin
		d=r$i$v; mkdir "$d"; cp m.json "$d/"
		(cd "$d" && ms "$b/sfma" run m.json) >>run.$v
		(cd "$d" && ms "$b/sfma-verify" ws) >>verify.$v
	done
	i=$((i + 1))
done
on=$(median <run.on); off=$(median <run.off)
von=$(median <verify.on); voff=$(median <verify.off)
echo "a short run (every process of the pipeline), median of $RUN_ROUNDS:"
printf '  confined %8s ms   without %8s ms   (+%s ms)\n' "$on" "$off" "$(echo "$on $off" | awk '{printf "%.1f", $1 - $2}')"
echo "sfma-verify of its record:"
printf '  confined %8s ms   without %8s ms   (+%s ms)\n' "$von" "$voff" "$(echo "$von $voff" | awk '{printf "%.1f", $1 - $2}')"
