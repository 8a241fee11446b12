#!/bin/sh
# Batch throughput: N mock runs (default 200) through the make example of
# examples/batch/ - each run, its verification and the summary at the end -
# one after another (make -j1) against the same N with make -j2, side by
# side in one run. Prints wall time, runs per second and the speed-up.
#   SFMA_BINDIR  where sfma is (default: bin/ beside tests/)
#   N            runs per side (default 200)
#   JOBS         parallel side's -j (default 2)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bindir=$(cd "${SFMA_BINDIR:-$here/../../bin}" && pwd)
n=${N:-200}
jobs=${JOBS:-2}
for t in make jq; do
	command -v "$t" >/dev/null || { echo "batch bench: $t missing" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# shellcheck source=tests/bench/batch.subr
. "$here/batch.subr"

batch_side "$work/serial" "$n"
batch_side "$work/parallel" "$n"
serial=$(batch_make serial "$work/serial" -j1 "$n")
parallel=$(batch_make parallel "$work/parallel" "-j$jobs" "$n")
awk -v n="$n" -v s="$serial" -v p="$parallel" -v j="$jobs" 'BEGIN {
	printf "batch of %d mock runs (run + verify each, summary at the end), %d CPUs:\n", n, '"$(nproc)"'
	printf "  one after another (make -j1): %7.2f s  %6.1f runs/s  %6.1f ms/run\n", s / 1000, n * 1000 / s, s / n
	printf "  make -j%d:                     %7.2f s  %6.1f runs/s  %6.1f ms/run\n", j, p / 1000, n * 1000 / p, p / n
	printf "  speed-up: %.2fx\n", s / p
}'
