#!/bin/sh
# One array task: the run of one manifest, verified on the node that ran it.
# Submitted by submit.sh; task N runs line N+1 of the manifest list ($1).
#SBATCH --job-name=sfma-run
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
set -u
list=$1
sfma=${SFMA:-sfma}
: "${SLURM_ARRAY_TASK_ID:?run as an array task: sbatch --array=0-N run-task.sh LIST}"

manifest=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" "$list")
[ -n "$manifest" ] || { echo "task $SLURM_ARRAY_TASK_ID: no line $((SLURM_ARRAY_TASK_ID + 1)) in $list" >&2; exit 1; }
name=$(basename "$manifest" .json)
ws=$(jq -er '.workspace | strings' "$manifest") || { echo "$manifest: no workspace" >&2; exit 1; }
mkdir -p "$(dirname "$ws")" stamps
rm -f "stamps/$name.verified"

# The run's line ("<VERDICT> turns=N dryRun=B record=PATH") says it sealed
# a record; without it there is nothing new to verify.
line=$("$sfma" run "$manifest" ${SFMA_RUN_FLAGS:-})
rc=$?
case "$line" in
*" record="*) ;;
*) echo "$manifest: the run sealed no record (exit $rc)" >&2; exit 1 ;;
esac
# Verified here, where the run wrote it, before any other node reads it.
audit=$("$sfma" verify "$ws") || { echo "$manifest: $ws does not verify on ${SLURMD_NODENAME:-?}" >&2; exit 1; }
printf '%s\n%s\n%s\nnode=%s job=%s_%s\n' "$ws" "$line" "$audit" "${SLURMD_NODENAME:-?}" \
	"${SLURM_ARRAY_JOB_ID:-?}" "$SLURM_ARRAY_TASK_ID" >"stamps/$name.verified.tmp"
mv "stamps/$name.verified.tmp" "stamps/$name.verified"
echo "$name: $line on ${SLURMD_NODENAME:-?}"
