#!/usr/bin/env bats
# Native tool use, the planner's side: a reply with the provider's own
# tool calls is carried out like a text call, its result goes back as a
# tool message, and the run replays from the provider's objects. The
# model is a scripted stand-in speaking sfma-model's protocol.

load helpers
load plan-standin

CAND='{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
	standin_bin
	cat >m.json <<'JSON'
{"name":"t","workspace":"ws","taskStatement":"copy in.txt to out.txt",
 "modelEndpoints":[{"name":"a","provider":"anthropic","model":"m"}],
 "allowedCommands":["echo"],"inputs":["in.txt"],"outputs":["out.txt"],"maxTurns":12,
 "dryRunDefault":false}
JSON
	mkdir ws
	printf 'hello\n' >ws/in.txt
}

cand() { jq -n --arg c "$CAND" '$c'; }

@test "a native call is carried out and its result goes back as a tool message" {
	script "$(cand)" '{"calls":[["read",{"path":"in.txt"}]]}' \
		'{"calls":[["write",{"path":"out.txt","content":"hello\n"}]]}' '{"calls":[["done",{"summary":"copied"}]]}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(cat ws/out.txt)" = hello ]
	# the bootstrap request offers no tools, every later one does
	[ "$(request 1 | jq .tools)" = false ]
	[ "$(request 2 | jq .tools)" = true ]
	# the assistant message keeps the call, the tool message answers it by id
	request 3 | jq -e '.messages[-2] == {"role":"assistant","content":"",
		"toolCalls":[{"id":"toolu_2_0","name":"read","input":{"path":"in.txt"}}]}'
	request 3 | jq -e '.messages[-1] == {"role":"tool","results":[{"id":"toolu_2_0","name":"read","content":"hello\n"}]}'
	# the hard tier saw the same call object a text reply makes
	jq -e -s '[.[] | select(.kind == "task") | .data.call] == [{"tool":"read","path":"in.txt"},{"tool":"write","path":"out.txt"},{"tool":"done"}]' \
		ws/.sfma/trace.jsonl
	# the reply blob is the provider's objects: {"native","provider","text"}
	sha=$(jq -r 'select(.kind == "call" and .data.toolCalls == 1) | .evidence.reply.sha256' ws/.sfma/trace.jsonl | head -1)
	jq -e '.provider == "anthropic" and .text == "" and .native[0].type == "tool_use" and .native[0].input.path == "in.txt"' \
		"ws/.sfma/evidence/$sha"
	# the tool result sent is the verdict's output, and the next message
	out=$(jq -r 'select(.kind == "verdict" and .data.reason == "read 6 bytes") | .evidence.output.sha256' ws/.sfma/trace.jsonl)
	jq -e '.role == "tool" and .results[0].content == "hello\n"' "ws/.sfma/evidence/$out"
	run sfma verify ws
	[ "$status" -eq 0 ]
	replays_ok 1
}

@test "several calls in one reply: the first is carried out, each other one gets the reminder" {
	script "$(cand)" '{"text":"two at once","calls":[["write",{"path":"out.txt","content":"one"}],["run",{"cmd":"echo two"}],["write",{"path":"out.txt","content":"three"}]]}' \
		'{"calls":[["done",{"summary":"s"}]]}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(cat ws/out.txt)" = one ]
	[ "$(grep -c '"kind":"task"' ws/.sfma/trace.jsonl)" -eq 2 ]
	request 3 | jq -e '.messages[-2].content == "two at once" and (.messages[-2].toolCalls | length) == 3'
	request 3 | jq -e '[.messages[-1].results[] | .id] == ["toolu_2_0","toolu_2_1","toolu_2_2"]'
	request 3 | jq -e '.messages[-1].results[0].content | startswith("wrote 3 bytes")'
	request 3 | jq -e '[.messages[-1].results[1:][] | .content] == ["one call per turn: only the first call was carried out","one call per turn: only the first call was carried out"]'
	replays_ok 1
}

@test "a native call that is no call object is an invalid reply: answered, the turn spent, no hard-tier failure" {
	script "$(cand)" '{"calls":[["teleport",{"to":"mars"}]]}' '{"calls":[["read",{"tool":"run","path":"in.txt"}]]}' \
		'{"calls":[["write",{"path":"out.txt","content":"x"}]]}' '{"calls":[["done",{"summary":"s"}]]}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	jq -e '.turns == 5 and .hardTierFailures == 0' ws/.sfma/result.json
	[ "$(jq -s '[.[] | select(.kind == "verdict" and .data.tier == "protocol")] | length' ws/.sfma/trace.jsonl)" -eq 2 ]
	jq -e -s '[.[] | select(.kind == "verdict" and .data.tier == "protocol") | .data.reason | startswith("invalid reply: bad tool call: ")] == [true,true]' \
		ws/.sfma/trace.jsonl
	# the model is told why, in the result of its own call
	request 3 | jq -e '.messages[-1].role == "tool" and (.messages[-1].results[0].content | startswith("invalid reply: bad tool call: "))'
	replays_ok 1
}

@test "a native call before the candidate is adopted gets the candidate-first reminder" {
	script '{"calls":[["read",{"path":"in.txt"}]]}' "$(cand)" '{"calls":[["write",{"path":"out.txt","content":"x"}]]}' \
		'{"calls":[["done",{"summary":"s"}]]}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	grep -q '"reason":"tool call before a candidate was adopted"' ws/.sfma/trace.jsonl
	[ "$(request 2 | jq .tools)" = false ]
	request 2 | jq -e '.messages[-1].role == "tool" and (.messages[-1].results[0].content | startswith("no bootstrap candidate"))'
	[ "$(grep -c '"kind":"task"' ws/.sfma/trace.jsonl)" -eq 2 ]
	replays_ok 1
}

@test "text replies after native ones are read as text, and the mix replays" {
	script "$(cand)" '{"calls":[["read",{"path":"in.txt"}]]}' '"{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"}"' \
		'{"calls":[["done",{"summary":"s"}]]}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	request 4 | jq -e '.messages[-2] == {"role":"assistant","content":"{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"}"}'
	request 4 | jq -e '.messages[-1].role == "user" and (.messages[-1].content | fromjson | .toolResult | startswith("wrote 1 bytes"))'
	replays_ok 1
}

@test "a native reply altered in the trace does not replay" {
	script "$(cand)" '{"calls":[["read",{"path":"in.txt"}],["run",{"cmd":"echo hi"}]]}' \
		'{"calls":[["write",{"path":"out.txt","content":"x"}]]}' '{"calls":[["done",{"summary":"s"}]]}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	replays_ok 1
	cp -r ws saved
	# the count of calls the blob holds
	rewrite '
for e in es:
    if e["kind"] == "call" and e["data"].get("toolCalls") == 2:
        e["data"]["toolCalls"] = 1
'
	run sfma replay ws
	[ "$status" -eq 1 ] || { echo "$output"; return 1; }
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (call): trace has toolCalls 1, replay derives toolCalls 2" ]] || { echo "$output"; return 1; }
	# a native reply passed off as text
	rm -rf ws && cp -r saved ws
	rewrite '
for e in es:
    if e["kind"] == "call" and e["data"].get("toolCalls") == 2:
        del e["data"]["toolCalls"]
'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: "* ]] || { echo "$output"; return 1; }
	# the carried-out call swapped for the second one
	rm -rf ws && cp -r saved ws
	rewrite '
for e in es:
    if e["kind"] == "task" and e["data"]["call"].get("tool") == "read":
        e["data"]["call"] = {"tool":"run","cmd":"echo hi"}
'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (task): trace has call {\"cmd\":\"echo hi\",\"tool\":\"run\"}, replay derives call {\"path\":\"in.txt\",\"tool\":\"read\"}" ]] ||
		{ echo "$output"; return 1; }
}

@test "sfma-plan --tools prints the tool definitions as one canonical line" {
	run sfma-plan --tools
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 1 ]
	echo "$output" | jq -e 'type == "array" and ([.[] | .name] | index("read") != null) and all(.[]; .parameters.type == "object")'
	[ "$output" = "$(echo "$output" | sfma-verify --canonicalize)" ]
	run sfma-plan --tools extra
	[ "$status" -eq 2 ]
}
