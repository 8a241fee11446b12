#!/bin/sh
# The end of the batch: sfma summary over every workspace of the manifest
# list ($1), into summary.txt. Submitted by submit.sh with
# --dependency=afterany on the array, so it runs however the tasks ended.
# Exit 1 when any record does not verify or is missing, or a manifest
# names no workspace (said first in summary.txt; the rest are summarised).
#SBATCH --job-name=sfma-summary
#SBATCH --ntasks=1
set -u
list=$1
sfma=${SFMA:-sfma}
bad=0
: >summary.txt.tmp
# NUL-separated, so a workspace may have any name
while IFS= read -r m; do
	jq -ej '.workspace | strings | . + "\u0000"' "$m" 2>/dev/null ||
		{ echo "$m: names no workspace, not summarised" | tee -a summary.txt.tmp >&2; bad=1; }
done <"$list" >summary.ws.$$
xargs -0 "$sfma" summary <summary.ws.$$ >>summary.txt.tmp
rc=$?
rm -f summary.ws.$$
mv summary.txt.tmp summary.txt
cat summary.txt
[ "$rc" -eq 0 ] && [ "$bad" -eq 0 ]
