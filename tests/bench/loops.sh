#!/bin/sh
# Concurrent loops: six independent tasks, every mock reply delayed by
# SFMA_MOCK_LATENCY_MS=300 (without blocking other requests), two mock
# endpoints; the wall time of the same run with maxLoops 1 and with
# maxLoops 3, side by side. Each task is one write and one done, and its
# judgment (the object form of SFMA_MOCK scripts each task and the judge,
# so every judgment is a real, delayed mock call).
# Budget: three loops take at most half the wall time of one (the ideal
# is about a third: 1 + 6x3 + 1 replies in a row against 1 + 2x3 + 1).
# It shows that only with a sfma-model that serves requests concurrently.
# The planner's side alone: SFMA_BENCH_STANDIN=1 with SFMA_BINDIR a copy of
# bin/ whose sfma-model is tests/plan-model-standin.py (which honours
# SFMA_MOCK_LATENCY_MS concurrently).
set -eu
BIN=${SFMA_BINDIR:-$(cd "$(dirname "$0")/../../bin" && pwd)}
export PATH="$BIN:$PATH"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
unset SFMA_AUDIT_PRIVATE_KEY
if [ -z "${SFMA_BENCH_STANDIN:-}" ] && ! printf '' | SFMA_MOCK='{"bootstrap":[]}' sfma-model /dev/null >/dev/null 2>&1 &&
   ! (echo '{"name":"x","workspace":"w","modelEndpoints":[{"name":"a","provider":"mock","model":"m"}],"allowedCommands":[],"inputs":[],"outputs":[],"maxTurns":1,"dryRunDefault":true}' >probe.json &&
      printf '' | SFMA_MOCK='{"bootstrap":[]}' sfma-model probe.json >/dev/null 2>&1); then
	echo "loops: this sfma-model does not serve the object form of SFMA_MOCK (concurrent requests): nothing measured"
	exit 0
fi
tasks=$(jq -nc '[range(1;7) | tostring | {id:("T" + .), description:("write o" + . + ".txt"), role:"w", class:"mechanical"}]')
cand=$(printf '%s' "$tasks" | jq -c '{mission:"six files",successCriteria:["six files exist"],loopRoles:[{name:"w",duty:"write"}],firstTasks:.,schedule:[]}')
export SFMA_MOCK=$(printf '%s' "$cand" | jq -c '. as $c | {bootstrap:[$c | tojson],
	tasks:([range(1;7) | tostring | {key:("T" + .), value:[({tool:"write",path:("o" + . + ".txt"),content:"x"} | tojson),
		({tool:"done",summary:"wrote"} | tojson)]}] | from_entries),
	judge:([range(6) | ({pass:true,reason:"ok"} | tojson)] + [({criteria:[{criterion:"six files exist",pass:true,evidence:[]}]} | tojson)])}')
export SFMA_MOCK_LATENCY_MS=300
wall() { # wall MAXLOOPS: seconds of one run
	rm -rf ws && mkdir ws
	cat >m.json <<JSON
{"name":"bench","workspace":"ws","modelEndpoints":[{"name":"a","provider":"mock","model":"m"},
 {"name":"b","provider":"mock","model":"m"}],"allowedCommands":[],"inputs":[],
 "outputs":["o1.txt","o2.txt","o3.txt","o4.txt","o5.txt","o6.txt"],"maxTurns":40,"maxLoops":$1,"dryRunDefault":false}
JSON
	start=$(date +%s%N)
	sfma run m.json --apply >out 2>err || { cat out err >&2; exit 1; }
	end=$(date +%s%N)
	echo "$(( (end - start) / 1000000 ))"
}
one=$(wall 1)
three=$(wall 3)
echo "loops: six tasks, 300 ms per mock reply: maxLoops 1 ${one} ms, maxLoops 3 ${three} ms" \
     "(ratio $(echo "scale=2; $three / $one" | bc), budget <= 0.50)"
