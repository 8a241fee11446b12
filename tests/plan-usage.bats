#!/usr/bin/env bats
# Token usage: each call entry carries what the provider reported, the
# record sums it, maxTokens halts the run, and sfma log / sfma report show
# it. The model is a scripted stand-in speaking sfma-model's protocol.

load helpers
load plan-standin

CAND='{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
	standin_bin
	cat >m.json <<'JSON'
{"name":"t","workspace":"ws","taskStatement":"write out.txt",
 "modelEndpoints":[{"name":"a","provider":"anthropic","model":"m"}],
 "allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":12,
 "dryRunDefault":false}
JSON
}

cand() { jq -n --arg c "$CAND" '$c'; }
u() { echo "{\"inputTokens\":$1,\"outputTokens\":$2${3:+,\"cachedInputTokens\":$3}}"; }

@test "each call entry carries its usage and its attempt's facts; the record sums the usage" {
	script "{\"text\":$(cand),\"usage\":$(u 100 20 40)}" \
		"{\"calls\":[[\"write\",{\"path\":\"out.txt\",\"content\":\"x\"}]],\"usage\":$(u 150 30),
		  \"attempts\":[{\"ok\":false,\"status\":429,\"errorClass\":\"rate-limited\",\"error\":\"HTTP 429\",\"latencyMs\":2,\"waitMs\":0}]}" \
		"{\"calls\":[[\"done\",{\"summary\":\"s\"}]],\"usage\":$(u 200 10 60)}"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	jq -e '.usage == {"inputTokens":450,"outputTokens":60,"cachedInputTokens":100,"reasoningTokens":0,"cacheWriteTokens":0,"costUsd":null}' ws/.sfma/result.json
	jq -e '.budget | has("maxTokens") | not' ws/.sfma/result.json
	jq -e -s '[.[] | select(.kind == "call") | .data.usage] == [
		{"inputTokens":100,"outputTokens":20,"cachedInputTokens":40}, null,
		{"inputTokens":150,"outputTokens":30}, {"inputTokens":200,"outputTokens":10,"cachedInputTokens":60}]' \
		ws/.sfma/trace.jsonl
	# the failed attempt: its status, error class and wait; every attempt its request's size
	jq -e -s '[.[] | select(.kind == "call")][1].data | .status == 429 and .errorClass == "rate-limited" and .waitMs == 0 and .ok == false' \
		ws/.sfma/trace.jsonl
	jq -e -s 'all(.[] | select(.kind == "call"); .data.requestBytes > 0)' ws/.sfma/trace.jsonl
	jq -e '.modelCalls == 4 and .turns == 3' ws/.sfma/result.json
	replays_ok 1
	# shown per call and in total
	run sfma log ws
	[ "$status" -eq 0 ]
	[[ "$output" == *"tokens in 150 out 30"* ]] || { echo "$output"; return 1; }
	[[ "$output" == *"failed (HTTP 429) [rate-limited]"* ]] || { echo "$output"; return 1; }
	[[ "$output" == *"tokens in 450 out 60 cached 100"* ]] || { echo "$output"; return 1; }
	run sfma log ws --json
	echo "$output" | jq -e -s '.[-1].usage == {"inputTokens":450,"outputTokens":60,"cachedInputTokens":100,"reasoningTokens":0,"cacheWriteTokens":0,"costUsd":null}'
	echo "$output" | jq -e -s '[.[] | select(.kind == "call")][1] | .status == 429 and .errorClass == "rate-limited"'
	sfma report ws -o r.html
	grep -q '<div class="v ">450 / 60</div>' r.html
	grep -q 'cached input tokens</div><div class="v ">100</div>' r.html
}

@test "without any usage reported the record says zeros" {
	script "$(cand)" '{"calls":[["write",{"path":"out.txt","content":"x"}]]}' '{"calls":[["done",{"summary":"s"}]]}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	jq -e '.usage == {"inputTokens":0,"outputTokens":0,"cachedInputTokens":0,"reasoningTokens":0,"cacheWriteTokens":0,"costUsd":0}' ws/.sfma/result.json
	replays_ok 1
}

@test "maxTokens: the run halts halted-budget once a call takes input + output past it; sealed, verifies, replays" {
	jq '.maxTokens = 250' m.json >t.json
	script "{\"text\":$(cand),\"usage\":$(u 100 20)}" \
		"{\"calls\":[[\"run\",{\"cmd\":\"echo a\"}]],\"usage\":$(u 100 20)}" \
		"{\"calls\":[[\"write\",{\"path\":\"out.txt\",\"content\":\"x\"}]],\"usage\":$(u 100 20)}" \
		'{"calls":[["done",{"summary":"s"}]]}'
	run sfma run t.json --apply
	[ "$status" -eq 1 ]
	[[ "$output" == *"HALTED-BUDGET turns=2 "* ]] || { echo "$output"; return 1; }
	jq -e '.verdict == "halted-budget" and .budget.maxTokens == 250 and .usage.inputTokens == 300 and .usage.outputTokens == 60' \
		ws/.sfma/result.json
	jq -e -s '[.[] | select(.kind == "result")][-1].data | .halt == "maxTokens" and .trigger == "maxTokens"' \
		ws/.sfma/trace.jsonl
	# the reply that took it past the budget was not acted on
	[ ! -e ws/out.txt ]
	[ "$(grep -c '"kind":"task"' ws/.sfma/trace.jsonl)" -eq 1 ]
	run sfma verify ws
	[ "$status" -eq 0 ]
	replays_ok 1
	# at exactly the budget the run goes on
	jq '.maxTokens = 360' m.json >e.json
	rm -rf ws
	run sfma run e.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	replays_ok 1
}

@test "a tampered usage does not replay: the record's total, a call's figure, a forged maxTokens halt" {
	jq '.maxTokens = 1000' m.json >t.json
	script "{\"text\":$(cand),\"usage\":$(u 100 20)}" \
		"{\"calls\":[[\"write\",{\"path\":\"out.txt\",\"content\":\"x\"}]],\"usage\":$(u 100 20)}" \
		"{\"calls\":[[\"done\",{\"summary\":\"s\"}]],\"usage\":$(u 100 20)}"
	run sfma run t.json --apply
	[ "$status" -eq 0 ]
	replays_ok 1
	cp -r ws saved
	rewrite 'pass' '.usage.inputTokens = 299'
	run sfma verify ws
	[ "$status" -eq 0 ]
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*"trace has record usage {\"cacheWriteTokens\":0,\"cachedInputTokens\":0,\"costUsd\":null,\"inputTokens\":299,\"outputTokens\":60,\"reasoningTokens\":0}, replay derives usage {\"cacheWriteTokens\":0,\"cachedInputTokens\":0,\"costUsd\":null,\"inputTokens\":300,\"outputTokens\":60,\"reasoningTokens\":0}" ]] ||
		{ echo "$output"; return 1; }
	rm -rf ws && cp -r saved ws
	rewrite '
for e in es:
    if e["kind"] == "call":
        e["data"]["usage"]["outputTokens"] = 1
        break
'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: "*"record usage"* ]] || { echo "$output"; return 1; }
	# a maxTokens halt the figures do not allow
	rm -rf ws && cp -r saved ws
	rewrite '
import copy
i = [k for k, e in enumerate(es) if e["kind"] == "call"][1]
halt = copy.deepcopy(es[i])
halt["kind"], halt["id"] = "result", "result-%d" % halt["seq"]
halt["data"] = {"halt": "maxTokens", "trigger": "maxTokens", "reason": "maxTokens (1000) exceeded"}
halt.pop("refs", None); halt.pop("evidence", None)
tail = [e for e in es[i:] if e["kind"] in ("lifecycle", "clock-anchor")]
tail[-2]["data"]["to"] = "halted-budget"
es[i:] = [halt] + tail[-2:]
for k, e in enumerate(es):
    e["seq"] = k + 1
    e["id"] = "%s-%d" % (e["kind"], k + 1)
' '.verdict = "halted-budget"'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: "*"(result): trace has a halt by maxTokens, replay derives no halt by maxTokens here" ]] ||
		{ echo "$output"; return 1; }
}
