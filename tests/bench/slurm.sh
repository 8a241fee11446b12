#!/bin/sh
# A batch on Slurm against the same batch with make: N mock runs
# (default 1000) submitted as ONE job array with examples/slurm/submit.sh
# on a single-node Slurm started here (tests/slurm-cluster.sh, as
# tests/slurm.bats does; the node has this machine's CPUs, a task each),
# against the same N through examples/batch's Makefile with make -j2, in
# one run. Each side: every run and its verification, then the summary.
# Prints, per side, the time until the last run was verified and the
# runs per second to it, then the time from submission (or make's start)
# to the verified summary; with REPEAT > 1 the medians. The machine's
# load (/proc/loadavg) is printed before each side and at the end.
#   SFMA_BINDIR  where sfma is (default: bin/ beside tests/)
#   N            runs per side (default 1000; above 1001 the cluster is
#                started with a larger MaxArraySize)
#   JOBS         make's -j (default 2)
#   REPEAT       rounds, each side once a round (default 1)
# A side takes about N times a run's wall time over the CPUs: N=1000
# took 11 minutes in all on 2 cores shared with other work (load 10 to
# 17); N=100 takes a minute and a half.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bindir=$(cd "${SFMA_BINDIR:-$here/../../bin}" && pwd)
n=${N:-1000}
jobs=${JOBS:-2}
repeat=${REPEAT:-1}
for v in "$n" "$jobs" "$repeat"; do
	case "$v" in '' | *[!0-9]* | 0) echo "slurm bench: N, JOBS and REPEAT must be positive numbers" >&2; exit 2 ;; esac
done
# One line when Slurm is missing: it is a test dependency (make test-deps).
for t in munged slurmctld slurmd sbatch make jq python3; do
	command -v "$t" >/dev/null || { echo "slurm bench: $t missing (make test-deps installs Slurm and munge)" >&2; exit 1; }
done

# shellcheck source=tests/bench/batch.subr
. "$here/batch.subr"

max_array=
[ "$n" -le 1001 ] || max_array=--max-array-size=$((n + 1))
# shellcheck disable=SC2086 # max_array: one word or none
cluster=$(sh "$here/../slurm-cluster.sh" start $max_array) ||
	{ echo "slurm bench: the Slurm cluster did not start" >&2; exit 1; }
work=$cluster/batch
trap 'sh "$here/../slurm-cluster.sh" stop "$cluster"' EXIT
trap 'exit 1' INT TERM HUP
export SLURM_CONF="$cluster/slurm.conf"

# slurm_batch DIR: submit.sh --wait in DIR (N manifests): one array of N
# tasks, each with a log of its own, and the summary job's summary.txt
# naming all N verified, or the benchmark fails.
slurm_batch() {
	(cd "$1" && env PATH="$bindir:$PATH" "$here/../../examples/slurm/submit.sh" --wait manifests) \
		>"$1/submit.out" 2>&1 ||
		{ tail -n 5 "$1/submit.out" "$1/summary.txt" >&2 || true; echo "slurm bench: the Slurm batch failed" >&2; exit 1; }
	array=$(sed -n 's/^array job \([0-9]*\): .*/\1/p' "$1/submit.out")
	tasks=$(find "$1/logs" -name "sfma-run-${array:-none}_*.out" | wc -l)
	[ "$tasks" -eq "$n" ] || { cat "$1/submit.out" >&2; echo "slurm bench: not one array of $n tasks" >&2; exit 1; }
	batch_check_summary slurm "$1/summary.txt" "$n"
}

# side LABEL DIR COMMAND...: one side's batch in DIR, from its start on: when
# its last run was verified, when summary.txt was written and when
# COMMAND returned, in ms after the start, appended to $work/LABEL.times.
side() {
	label=$1
	dir=$2
	shift 2
	echo "round $round: $label, load $(load)"
	side_t0=$(now_ms)
	"$@" >/dev/null
	side_t1=$(now_ms)
	echo "$(($(batch_last_stamp_ms "$dir") - side_t0)) $(($(mtime_ms "$dir/summary.txt") - side_t0)) $((side_t1 - side_t0))" \
		>>"$work/$label.times"
}

: >"$work/slurm.times"
: >"$work/make.times"
round=1
while [ "$round" -le "$repeat" ]; do
	batch_manifests "$work/slurm$round" "$n"
	side slurm "$work/slurm$round" slurm_batch "$work/slurm$round"
	batch_side "$work/make$round" "$n"
	side make "$work/make$round" batch_make "make$round" "$work/make$round" "-j$jobs" "$n"
	# what a round leaves (N workspaces a side) is not needed any more
	rm -rf "$work/slurm$round" "$work/make$round"
	round=$((round + 1))
done

row() {
	awk -v label="$1" -v n="$n" -v runs="$(median "$work/$2.times" 1)" \
		-v summary="$(median "$work/$2.times" 2)" -v returned="$(median "$work/$2.times" 3)" 'BEGIN {
		printf "  %-24s %9.2f s %8.2f %14.2f s %10.2f s\n", label, runs / 1000, n * 1000 / runs, summary / 1000, returned / 1000
	}'
}
echo "batch of $n mock runs (run + verify each, then the summary), $(nproc) CPUs, $(
	[ "$repeat" -eq 1 ] && echo "one round" || echo "medians of $repeat rounds"):"
printf '  %-24s %11s %8s %16s %12s\n' "" "runs done" "runs/s" "summary written" "returned"
row "Slurm, one array" slurm
row "make -j$jobs" make
awk -v s="$(median "$work/slurm.times" 2)" -v m="$(median "$work/make.times" 2)" -v j="$jobs" 'BEGIN {
	printf "  to the verified summary Slurm takes %.2fx the time of make -j%d\n", s / m, j
}'
echo "  (returned: submit.sh --wait is sbatch --wait, which polls after 2 s, 8 s, then every 32 s)"
echo "load at the end: $(load)"
