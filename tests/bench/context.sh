#!/bin/sh
# What the context budget saves: a 40-turn run (a bootstrap candidate, 40
# reads of an 8 KiB file, a write, done) with maxContextBytes 32768 against
# 16777216 (the whole history always fits), side by side: the largest
# request and the bytes sent over the run, from the requestBytes of the
# call entries (the canonical JSON of {system, messages, tools}, as the
# model stage measures it).
# The mock model stage reports requestBytes; where the sfma-model under
# test does not yet, the run uses tests/plan-model-standin.py, which
# measures the same thing, in its place.
set -eu
BIN=${SFMA_BINDIR:-$(cd "$(dirname "$0")/../../bin" && pwd)}
TESTS=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
mkdir bin
for p in "$BIN"/sfma*; do cp "$p" bin/; done
python3 -c 'import sys; sys.stdout.write("".join(("line %05d of big.txt" % i).ljust(63, ".") + "\n" for i in range(128)))' >big.txt
cand='{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'
q=$cand
i=0
while [ $i -lt 40 ]; do q="$q,{\"tool\":\"read\",\"path\":\"big.txt\"}"; i=$((i + 1)); done
q="[$q,{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"done\",\"summary\":\"s\"}]"

manifest() { # manifest BUDGET WORKSPACE
	printf '{"name":"ctx","workspace":"%s","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo"],"inputs":["big.txt"],"outputs":["out.txt"],"maxTurns":50,
 "maxContextBytes":%s,"dryRunDefault":false}\n' "$2" "$1"
}

# Does the mock model stage report requestBytes?
mkdir probe && cp big.txt probe/
manifest 32768 probe >probe.json
SFMA_MOCK="[$cand,{\"tool\":\"done\",\"summary\":\"s\"}]" bin/sfma run probe.json --apply >/dev/null 2>&1 || true
model="sfma-model (mock)"
if ! jq -e -s 'any(.[]; .kind == "call" and (.data.requestBytes | type) == "number")' probe/.sfma/trace.jsonl >/dev/null; then
	cp "$TESTS/plan-model-standin.py" bin/sfma-model
	model="tests/plan-model-standin.py (sfma-model's mock does not report requestBytes yet)"
	q=$(jq -c '{replies: map(tojson)}' <<EOF2
$q
EOF2
)
fi
echo "model stage: $model"
printf '%-16s %8s %12s %14s %16s %8s\n' maxContextBytes verdict compactions largest_bytes total_sent_bytes seconds
for budget in 32768 16777216; do
	mkdir "w$budget" && cp big.txt "w$budget/"
	manifest "$budget" "w$budget" >"m$budget.json"
	t0=$(date +%s.%N)
	SFMA_MOCK=$q bin/sfma run "m$budget.json" --apply >/dev/null 2>&1 || true
	t1=$(date +%s.%N)
	jq -r -s --arg b "$budget" --arg s "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" '
		[.[] | select(.kind == "call") | .data.requestBytes] as $r
		| [.[] | select(.kind == "lifecycle")][-1].data.to as $v
		| [.[] | select(.kind == "compaction")] | length as $c
		| "\($b) \($v) \($c) \($r | max) \($r | add) \($s)"' "w$budget/.sfma/trace.jsonl" |
		awk '{printf "%-16s %8s %12s %14s %16s %8.3f\n", $1, $2, $3, $4, $5, $6}'
	jq -e -s --arg b "$budget" 'all(.[] | select(.kind == "call"); .data.requestBytes <= ($b | tonumber))' \
		"w$budget/.sfma/trace.jsonl" >/dev/null || { echo "a request exceeded maxContextBytes $budget"; exit 1; }
done
