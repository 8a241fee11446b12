#!/bin/sh
# Batch throughput: N mock runs (default 200) through the make example of
# examples/batch/ - each run, its verification and the summary at the end -
# one after another (make -j1) against the same N with make -j2, side by
# side in one run. Prints wall time, runs per second and the speed-up,
# and the machine's load before each round and at the end.
#   SFMA_BINDIR  where sfma is (default: bin/ beside tests/)
#   N            runs per side (default 200)
#   JOBS         parallel side's -j (default 2)
#   REPEAT       rounds (default 1), each side once a round; then medians
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bindir=$(cd "${SFMA_BINDIR:-$here/../../bin}" && pwd)
n=${N:-200}
jobs=${JOBS:-2}
repeat=${REPEAT:-1}
for t in make jq; do
	command -v "$t" >/dev/null || { echo "batch bench: $t missing" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# shellcheck source=tests/bench/batch.subr
. "$here/batch.subr"

# Each round both sides, the first one in turn (the load drifts).
: >"$work/serial.ms"
: >"$work/parallel.ms"
round=1
while [ "$round" -le "$repeat" ]; do
	batch_side "$work/serial$round" "$n"
	batch_side "$work/parallel$round" "$n"
	echo "round $round: load $(load)"
	if [ $((round % 2)) -eq 1 ]; then
		batch_make "serial$round" "$work/serial$round" -j1 "$n" >>"$work/serial.ms"
		batch_make "parallel$round" "$work/parallel$round" "-j$jobs" "$n" >>"$work/parallel.ms"
	else
		batch_make "parallel$round" "$work/parallel$round" "-j$jobs" "$n" >>"$work/parallel.ms"
		batch_make "serial$round" "$work/serial$round" -j1 "$n" >>"$work/serial.ms"
	fi
	rm -rf "$work/serial$round" "$work/parallel$round"
	round=$((round + 1))
done
awk -v n="$n" -v s="$(median "$work/serial.ms")" -v p="$(median "$work/parallel.ms")" -v j="$jobs" \
	-v r="$repeat" -v cpus="$(nproc)" 'BEGIN {
	printf "batch of %d mock runs (run + verify each, summary at the end), %d CPUs, %s:\n", n, cpus,
		(r > 1 ? "medians of " r " rounds" : "one round")
	printf "  one after another (make -j1): %7.2f s  %6.1f runs/s  %6.1f ms/run\n", s / 1000, n * 1000 / s, s / n
	printf "  make -j%d:                     %7.2f s  %6.1f runs/s  %6.1f ms/run\n", j, p / 1000, n * 1000 / p, p / n
	printf "  speed-up: %.2fx\n", s / p
}'
echo "load at the end: $(load)"
