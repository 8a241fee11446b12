#!/bin/sh
# The end of the batch: sfma summary over every workspace of the manifest
# list ($1), into summary.txt. Submitted by submit.sh with
# --dependency=afterany on the array, so it runs however the tasks ended.
# Exit 1 when any record does not verify (or is missing).
#SBATCH --job-name=sfma-summary
#SBATCH --ntasks=1
set -u
list=$1
sfma=${SFMA:-sfma}
tr '\n' '\0' <"$list" | xargs -0 jq -j '.workspace + "\u0000"' | xargs -0 "$sfma" summary >summary.txt.tmp
rc=$?
mv summary.txt.tmp summary.txt
cat summary.txt
[ "$rc" -eq 0 ]
