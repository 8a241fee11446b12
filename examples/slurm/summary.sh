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
# Every workspace, NUL-separated (a workspace may have any name). One jq
# reads every manifest, and lists their workspaces only when each holds
# one JSON value whose workspace is a string: a jq per manifest (some
# 50 ms each on a busy node) would add most of a minute to a batch of a
# thousand, after its last task. Otherwise each manifest gets a jq of
# its own, to say which names no workspace (an empty file, no JSON, no
# string).
set --
while IFS= read -r m; do set -- "$@" "$m"; done <"$list"
jq -nj --rawfile list "$list" '[inputs | [input_filename, .workspace]]
	| if map(.[0]) == ($list | split("\n") | map(select(length > 0))) and all(.[1] | type == "string")
	  then map(.[1] + "\u0000") | join("") else error("not one workspace each") end' "$@" \
	>summary.ws.$$ 2>/dev/null ||
	while IFS= read -r m; do
		jq -enj 'input | .workspace | strings | . + "\u0000"' "$m" 2>/dev/null ||
			{ echo "$m: names no workspace, not summarised" | tee -a summary.txt.tmp >&2; bad=1; }
	done <"$list" >summary.ws.$$
xargs -0 "$sfma" summary <summary.ws.$$ >>summary.txt.tmp
rc=$?
rm -f summary.ws.$$
mv summary.txt.tmp summary.txt
cat summary.txt
[ "$rc" -eq 0 ] && [ "$bad" -eq 0 ]
