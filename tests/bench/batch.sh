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

# side DIR: a copy of the example with N manifests of its own (the
# built-in mock script: a bootstrap, the outputs written, a command run in
# the sandbox, done).
side() {
	mkdir -p "$1/manifests"
	cp "$here/../../examples/batch/Makefile" "$1/"
	i=1
	while [ "$i" -le "$n" ]; do
		cat >"$1/manifests/t$i.json" <<JSON
{"name":"t$i","workspace":"runs/t$i","modelEndpoints":[{"name":"mock","provider":"mock","model":"builtin"}],
 "allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":8,"dryRunDefault":false}
JSON
		i=$((i + 1))
	done
}

now_ms() { date +%s%3N; }

# timed LABEL DIR -jK: the batch, its wall time in ms on stdout.
timed() {
	t0=$(now_ms)
	# a make of its own, whatever make (and jobserver) runs the benchmarks
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PATH="$bindir:$PATH" \
		make -s -C "$2" "$3" SFMA="$bindir/sfma" >"$work/$1.out" 2>&1 ||
		{ cat "$work/$1.out" >&2; echo "batch bench: the $1 batch failed" >&2; exit 1; }
	t1=$(now_ms)
	tail -n 1 "$work/$1.out" | grep -q "^total $n: verified $n," ||
		{ tail -n 3 "$work/$1.out" >&2; echo "batch bench: $1: not every record verified" >&2; exit 1; }
	echo $((t1 - t0))
}

side "$work/serial"
side "$work/parallel"
serial=$(timed serial "$work/serial" -j1)
parallel=$(timed parallel "$work/parallel" "-j$jobs")
awk -v n="$n" -v s="$serial" -v p="$parallel" -v j="$jobs" 'BEGIN {
	printf "batch of %d mock runs (run + verify each, summary at the end), %d CPUs:\n", n, '"$(nproc)"'
	printf "  one after another (make -j1): %7.2f s  %6.1f runs/s  %6.1f ms/run\n", s / 1000, n * 1000 / s, s / n
	printf "  make -j%d:                     %7.2f s  %6.1f runs/s  %6.1f ms/run\n", j, p / 1000, n * 1000 / p, p / n
	printf "  speed-up: %.2fx\n", s / p
}'
