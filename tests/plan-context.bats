#!/usr/bin/env bats
# The context budget (maxContextBytes): no request is larger; the oldest
# tool results, then the oldest exchanges, become stubs naming their
# evidence and the recall that brings them back; each compaction is a
# `compaction` entry the replay derives again.

load helpers
load plan-standin

CAND='{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'
READ='"{\"tool\":\"read\",\"path\":\"big.txt\"}"'

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
	standin_bin
	cat >m.json <<'JSON'
{"name":"t","workspace":"ws","taskStatement":"read big.txt, then write out.txt",
 "modelEndpoints":[{"name":"a","provider":"anthropic","model":"m"}],
 "allowedCommands":["echo"],"inputs":["big.txt"],"outputs":["out.txt"],"maxTurns":60,
 "maxContextBytes":32768,"dryRunDefault":false}
JSON
	mkdir ws
	# 8 KiB: 128 numbered lines of 64 bytes
	python3 -c 'import sys; sys.stdout.write("".join(("line %05d of big.txt" % i).ljust(63, ".") + "\n" for i in range(128)))' >ws/big.txt
	[ "$(wc -c <ws/big.txt)" -eq 8192 ]
}

cand() { jq -n --arg c "$CAND" '$c'; }

# forty_reads: the stand-in's script of the 40-turn run.
forty_reads() {
	local q=("$(cand)")
	for i in $(seq 40); do q+=("$READ"); done
	q+=('"{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"}"' '"{\"tool\":\"done\",\"summary\":\"s\"}"')
	script "${q[@]}"
}

@test "40 turns reading 8 KiB each: no request over maxContextBytes, the run completes, and replays" {
	forty_reads
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	jq -e '.turns == 43' ws/.sfma/result.json
	# measured by the model stage, independently of the planner's count
	max=$(jq -s '[.[] | select(.kind == "call") | .data.requestBytes] | max' ws/.sfma/trace.jsonl)
	[ "$max" -le 32768 ] || { echo "largest request $max"; return 1; }
	# the turns' requests (the soft tier's judgments come beside them)
	[ "$(jq -s 'map(select(.purpose == "work" or .purpose == "bootstrap")) | length' requests.jsonl)" -eq 43 ]
	# every compaction shrank the request to the budget, and the planner's
	# count of the request it sent is the model stage's
	jq -e -s 'map(select(.kind == "compaction")) | length > 20 and all(.[]; .data.afterBytes <= 32768 and .data.beforeBytes > 32768 and (.data.elided | length) > 0)' \
		ws/.sfma/trace.jsonl
	# ... and to half of it (sfma-plan(1), "Context"), so that the next
	# requests grow from there; later ones stop at the stubs the elided
	# messages leave, which the budget's other half holds
	jq -e -s 'map(select(.kind == "compaction")) | .[0].data.afterBytes <= 16384' ws/.sfma/trace.jsonl ||
		{ jq -c -s 'map(select(.kind == "compaction") | .data.afterBytes)' ws/.sfma/trace.jsonl; return 1; }
	jq -e -s '[range(length - 1) as $i | select(.[$i].kind == "compaction") | .[$i].data.afterBytes == .[$i + 1].data.requestBytes] | all' \
		ws/.sfma/trace.jsonl
	# never the first message, the candidate or the latest exchange
	# (of the turns' requests: a judgment has a conversation of its own)
	local turns='map(select(.purpose == "work" or .purpose == "bootstrap"))'
	jq -e -s --arg c "$CAND" "$turns"' | all(.[]; (.messages[0].content | startswith("Begin:")))' requests.jsonl
	jq -e -s --arg c "$CAND" "$turns"' | all(.[1:][]; .messages[1].content == $c)' requests.jsonl
	jq -e -s "$turns"' | all(.[2:][]; (.messages[-2:][] | .content | test("\"elided\"") | not))' requests.jsonl
	# a stub names the evidence reference and the recall call that brings it back
	stub=$(request 43 | jq -r '[.messages[] | .content | select(test("^\\{\"elided\""))][0]')
	echo "$stub" | jq -e '(.elided | keys) == ["bytes","sha256"] and .recall == {"tool":"recall","mode":"referential","id":.elided.sha256}'
	[ -f "ws/.sfma/evidence/$(echo "$stub" | jq -r .elided.sha256)" ]
	run sfma verify ws
	[ "$status" -eq 0 ]
	replays_ok 1
}

@test "compaction is deterministic: the same run compacts the same way" {
	forty_reads
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	jq -c 'select(.kind == "compaction") | .data' ws/.sfma/trace.jsonl >first
	mkdir -p again/ws && cp m.json again/ && cp ws/big.txt again/ws/
	cd again
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	cd ..
	jq -c 'select(.kind == "compaction") | .data' again/ws/.sfma/trace.jsonl >second
	[ -s first ]
	cmp first second
}

@test "with a budget the full history fits in there is no compaction" {
	jq '.maxContextBytes = 16777216' m.json >full.json
	forty_reads
	run sfma run full.json --apply
	[ "$status" -eq 0 ]
	run grep -c '"kind":"compaction"' ws/.sfma/trace.jsonl
	[ "$output" -eq 0 ]
	max=$(jq -s '[.[] | select(.kind == "call") | .data.requestBytes] | max' ws/.sfma/trace.jsonl)
	[ "$max" -gt 300000 ]
	replays_ok 1
}

@test "an elided tool result comes back to the model by the recall its stub names" {
	script "$(cand)" '{"calls":[["read",{"path":"big.txt"}]]}' '{"calls":[["read",{"path":"big.txt"}]]}' \
		'{"calls":[["read",{"path":"big.txt"}]]}' '{"calls":[["read",{"path":"big.txt"}]]}' '{"recallStub":true}' \
		'{"calls":[["write",{"path":"out.txt","content":"x"}]]}' '{"calls":[["done",{"summary":"s"}]]}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	# the first read's result was elided: its stub in the recall's request
	first=$(jq -r 'select(.kind == "verdict" and .data.reason == "read 8192 bytes") | .evidence.output.sha256' ws/.sfma/trace.jsonl | head -1)
	jq -e -s --arg id "$first" 'map(select(.kind == "compaction") | .data.elided[]) | index($id) != null' ws/.sfma/trace.jsonl
	request 7 | jq -e --arg id "$first" '.messages[-2].toolCalls[0] == {"id":"toolu_6_0","name":"recall","input":{"mode":"referential","id":$id}}'
	# ... and the recall's result, sent with the next request, holds the file again
	request 7 | jq -e '.messages[-1].role == "tool" and (.messages[-1].results[0].content | fromjson | .found == true and .tier == "evidence")'
	got=$(request 7 | jq -r '.messages[-1].results[0].content | fromjson | .content | fromjson | .results[0].content')
	[ "$got" = "$(cat ws/big.txt)" ]
	grep -q '"reason":"recall"' ws/.sfma/trace.jsonl
	replays_ok 1
}

@test "recall of an evidence id that is not there answers found:false" {
	script "$(cand)" "{\"calls\":[[\"recall\",{\"mode\":\"referential\",\"id\":\"$(printf '%064d' 0)\"}]]}" \
		'{"calls":[["write",{"path":"out.txt","content":"x"}]]}' '{"calls":[["done",{"summary":"s"}]]}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	request 3 | jq -e '.messages[-1].results[0].content | fromjson | .found == false'
	replays_ok 1
}

@test "a context that cannot fit fails the run with that reason; sealed, verifies, replays" {
	jq '.maxContextBytes = 8192' m.json >small.json
	script "$(cand)" "$READ" "$READ"
	run sfma run small.json --apply
	[ "$status" -eq 1 ]
	[[ "$output" == *"context budget: the next request needs "*" bytes with every elidable message elided, maxContextBytes is 8192"* ]] ||
		{ echo "$output"; return 1; }
	jq -e '.verdict == "failed" and (.error | startswith("context budget: "))' ws/.sfma/result.json
	# the request was never sent
	[ "$(wc -l <requests.jsonl)" -eq 2 ]
	run sfma verify ws
	[ "$status" -eq 0 ]
	replays_ok 1
}

@test "compaction with the mock model stage as it is replays; a tampered compaction does not" {
	local q="[$CAND"
	for i in $(seq 12); do q="$q,{\"tool\":\"read\",\"path\":\"big.txt\"}"; done
	export SFMA_MOCK="$q,{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"done\",\"summary\":\"s\"}]"
	jq '.modelEndpoints = [{"name":"mock","provider":"mock","model":"m"}]' m.json >mock.json
	PATH=$SFMA_BINDIR:$PATH run sfma run mock.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	grep -q '"kind":"compaction"' ws/.sfma/trace.jsonl
	replays_ok 1
	cp -r ws saved
	rewrite '
c = [e for e in es if e["kind"] == "compaction"][0]
c["data"]["afterBytes"] -= 1
'
	run sfma verify ws
	[ "$status" -eq 0 ]
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (compaction): trace has {\"afterBytes\":"* ]] || { echo "$output"; return 1; }
	# another message named as elided
	rm -rf ws && cp -r saved ws
	rewrite '
c = [e for e in es if e["kind"] == "compaction"][0]
c["data"]["elided"] = ["0" * 64]
'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (compaction): "* ]] || { echo "$output"; return 1; }
	# a compaction left out
	rm -rf ws && cp -r saved ws
	rewrite '
i = [k for k, e in enumerate(es) if e["kind"] == "compaction"][0]
del es[i]
for k, e in enumerate(es):
    e["seq"] = k + 1
    e["id"] = "%s-%d" % (e["kind"], k + 1)
'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (call): trace has a call entry, replay derives a compaction entry ({\"afterBytes\":"*"\"elided\":[\""*"\"]})" ]] ||
		{ echo "$output"; return 1; }
	# a compaction where the request fits
	rm -rf ws && cp -r saved ws
	rewrite '
import copy
i = [k for k, e in enumerate(es) if e["kind"] == "call"][1]
c = copy.deepcopy([e for e in es if e["kind"] == "compaction"][0])
es.insert(i, c)
for k, e in enumerate(es):
    e["seq"] = k + 1
    e["id"] = "%s-%d" % (e["kind"], k + 1)
'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (compaction): trace has a compaction, replay derives none (the request fits)" ]] ||
		{ echo "$output"; return 1; }
}

@test "sfma log shows a compaction" {
	forty_reads
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	run sfma log ws
	[ "$status" -eq 0 ]
	[[ "$output" == *"compaction"*"context "*" -> "*" bytes, 1 elided"* ]] || { echo "$output"; return 1; }
	run sfma log ws --json
	echo "$output" | jq -e -s 'map(select(.kind == "compaction")) | length > 0 and all(.[]; .afterBytes <= 32768 and (.elided | length) > 0)'
}
