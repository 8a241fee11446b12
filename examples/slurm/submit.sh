#!/bin/sh
# Submit a batch to Slurm: one array task per manifest of MANIFEST_DIR
# (run, then verified on its node), and the summary as a job that depends
# on the whole array (afterany: it runs however the tasks ended).
#
#   submit.sh [--wait] [MANIFEST_DIR]      (default: manifests)
#
# Run it from the batch directory on the shared filesystem: the jobs start
# there (sbatch's default working directory is where it was called), and
# the manifests' relative workspaces resolve against it. With --wait it
# returns when the summary job has ended, with its exit status: 0 when
# every record verifies (sbatch --wait polls the summary job after 2 s,
# 8 s, then every 32 s, so it returns up to half a minute after the end).
# Extra sbatch options: SBATCH_OPTS (e.g. "--partition=batch --time=30").
#
# One array holds at most MaxArraySize tasks (slurm.conf; Slurm's default
# 1001): a larger folder is refused before anything is submitted. The
# array runs as many tasks at once as the cluster gives it; to run at
# most K (a provider's rate limit), after submitting:
#   scontrol update JobId=ARRAY ArrayTaskThrottle=K
set -eu
here=$(cd "$(dirname "$0")" && pwd)
wait=
if [ "${1:-}" = --wait ]; then wait=--wait; shift; fi
dir=${1:-manifests}

mkdir -p logs
# The list is fixed at submission: task N runs line N+1 whatever the
# folder holds by the time the task starts.
list=logs/manifests.$$.list
find "$dir" -maxdepth 1 -name '*.json' -type f | LC_ALL=C sort >"$list"
n=$(wc -l <"$list")
[ "$n" -gt 0 ] || { echo "submit.sh: no manifests in $dir/" >&2; exit 1; }
# One array holds at most MaxArraySize tasks (its indices run from 0 to
# MaxArraySize - 1; Slurm's default is 1001): a larger folder is refused
# here, before anything is submitted, in words rather than sbatch's
# "Invalid job array specification".
max=$(scontrol show config 2>/dev/null | awk '$1 == "MaxArraySize" { print $3 }')
case "$max" in
'' | *[!0-9]*) ;;
*)
	[ "$n" -le "$max" ] || {
		echo "submit.sh: $n manifests in $dir/, more than the $max tasks an array may have here (MaxArraySize in slurm.conf): split the folder" >&2
		exit 1
	}
	;;
esac

# shellcheck disable=SC2086
array=$(sbatch --parsable ${SBATCH_OPTS:-} --array=0-$((n - 1)) \
	--output=logs/%x-%A_%a.out "$here/run-task.sh" "$list")
array=${array%%;*}
echo "array job $array: $n manifests"
# shellcheck disable=SC2086
summary=$(sbatch --parsable $wait ${SBATCH_OPTS:-} --dependency=afterany:"$array" \
	--output=logs/%x-%j.out "$here/summary.sh" "$list") || status=$?
echo "summary job ${summary%%;*}"
exit "${status:-0}"
