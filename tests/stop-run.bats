#!/usr/bin/env bats
# How a provider ended a reply, through a whole run: sfma-model says
# (stop, maxOutputTokens, errorClass refusal, costUsd), the planner acts on
# it (a reply cut off at the output token limit is never carried out, a
# refusal no endpoint could fall over from is an invalid reply, the cost is
# summed), and the replay derives the same from the record alone.
#
# The fake provider (tests/fixtures/model/fake_server.py, on 127.0.0.1)
# answers in the OpenAI Chat Completions shape as the OpenAPI document
# defines it (openai/openai-openapi: CreateChatCompletionResponse
# choices[].finish_reason stop | length | tool_calls | content_filter;
# ChatCompletionResponseMessage.refusal beside a null content;
# CompletionUsage prompt_tokens, completion_tokens,
# prompt_tokens_details.cached_tokens).

load helpers
load fixtures/model/helpers

setup() {
	model_setup
	mkdir ws
	export OPENAI_API_KEY=$OPENAI_KEY
}

teardown() {
	model_teardown
}

CAND='{"mission":"write out.txt","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'

# text REPLY [FINISH] [PROMPT_TOKENS] [COMPLETION_TOKENS]: one answer whose
# message content is REPLY (a JSON string value).
text() {
	jq -cn --arg c "$1" --arg f "${2:-stop}" --argjson i "${3:-100}" --argjson o "${4:-10}" \
		'{json:{id:"c",object:"chat.completion",choices:[{index:0,finish_reason:$f,
		  message:{role:"assistant",content:$c}}],usage:{prompt_tokens:$i,completion_tokens:$o}}}'
}

refusal() { # refusal TEXT
	jq -cn --arg r "$1" '{json:{id:"c",object:"chat.completion",choices:[{index:0,finish_reason:"stop",
	  message:{role:"assistant",content:null,refusal:$r}}],usage:{prompt_tokens:30,completion_tokens:5}}}'
}

audit_ok() {
	run sfma verify ws
	[ "$status" -eq 0 ] && [[ "$output" == AUDIT_OK* ]] || { echo "$output"; return 1; }
}

JUDGE_PASS='{"pass":true,"reason":"out.txt is there"}'
CRITERIA_PASS='{"criteria":[{"criterion":"out.txt exists","pass":true,"evidence":[]}]}'
WRITE='{"tool":"write","path":"out.txt","content":"x"}'
DONE='{"tool":"done","summary":"wrote out.txt"}'

# run_manifest ENDPOINTS [EXTRA_JQ]: text-protocol endpoints of the fake server.
run_manifest() {
	jq -n --argjson eps "$1" '{name:"stops",workspace:"ws",modelEndpoints:$eps,
	  allowedCommands:[],inputs:[],outputs:["out.txt"],maxTurns:8,dryRunDefault:false}' | jq "${2:-.}" > m.json
}

ep() { # ep NAME PATH [EXTRA_JSON]
	jq -cn --arg n "$1" --arg b "$BASE$2" --argjson x "${3:-{\}}" \
		'{name:$n,provider:"openai",model:"m-x",baseUrl:$b,maxOutputTokens:64,toolProtocol:"text"} + $x'
}

@test "a reply cut off at the output token limit is never carried out, the model is told, and the run replays" {
	# The cut reply holds a whole-looking write: it must not run.
	serve "{\"/v1/chat/completions\":[$(text "$CAND"),
	  $(text '{"tool":"write","path":"out.txt","content":"CUT"}' length 120 64),
	  $(text "$WRITE"),$(text "$DONE"),$(text "$JUDGE_PASS"),$(text "$CRITERIA_PASS")]}"
	run_manifest "[$(ep gpt '')]"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; cat server.err; return 1; }
	[ "$(cat ws/out.txt)" = x ]
	# the call says how it ended, the verdict why nothing came of it
	jq -s -e 'map(select(.kind == "call" and .data.stop == "length")) | length == 1 and .[0].data.stopReason == "length"' \
		ws/.sfma/trace.jsonl >/dev/null
	jq -s -e 'map(select(.kind == "verdict" and .data.tier == "protocol")) | length == 1 and
	  .[0].data.reason == "reply cut off at the output token limit (64)"' ws/.sfma/trace.jsonl >/dev/null ||
		{ jq -c 'select(.kind == "verdict")' ws/.sfma/trace.jsonl; return 1; }
	# no write of CUT reached sfma-exec: no task entry holds it
	jq -e 'select(.kind == "task" and (.data.call.content? // "") == "CUT")' ws/.sfma/trace.jsonl >/dev/null && return 1
	# the model is told, in the next request
	grep -q 'cut off at the output token limit (64 tokens)' log.jsonl
	audit_ok
	replays_ok 1
}

@test "a refusal with no endpoint left is an invalid reply the model is told of; the run goes on and replays" {
	serve "{\"/v1/chat/completions\":[$(text "$CAND"),$(refusal "I can't help with that."),
	  $(text "$WRITE"),$(text "$DONE"),$(text "$JUDGE_PASS"),$(text "$CRITERIA_PASS")]}"
	run_manifest "[$(ep gpt '')]"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; cat server.err; return 1; }
	# the refused attempt is the answer: the call entry says whose
	jq -s -e 'map(select(.kind == "call" and .data.errorClass == "refusal")) | length == 1 and
	  .[0].data.ok == false and .[0].data.stop == "refusal" and .[0].data.answeredBy == "gpt"' \
		ws/.sfma/trace.jsonl >/dev/null || { jq -c 'select(.kind == "call") | .data' ws/.sfma/trace.jsonl; return 1; }
	jq -s -e "map(select(.kind == \"verdict\" and .data.tier == \"protocol\")) | length == 1 and
	  .[0].data.reason == \"provider refused: I can't help with that.\"" ws/.sfma/trace.jsonl >/dev/null
	audit_ok
	replays_ok 1
}

@test "a refusal falls over to the next endpoint, which answers; the run replays" {
	serve "{\"/a/v1/chat/completions\":[$(text "$CAND"),$(refusal 'Not this one.'),
	  $(text "$DONE"),$(text "$JUDGE_PASS")],
	  \"/b/v1/chat/completions\":[$(text "$WRITE"),$(text "$JUDGE_PASS"),$(text "$CRITERIA_PASS")]}"
	run_manifest "[$(ep a /a),$(ep b /b)]"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; cat server.err; return 1; }
	[ "$(cat ws/out.txt)" = x ]
	# no protocol verdict: b's answer was the reply
	jq -e 'select(.kind == "verdict" and .data.tier == "protocol")' ws/.sfma/trace.jsonl >/dev/null && return 1
	jq -s -e 'map(select(.kind == "call" and .data.errorClass == "refusal")) | length == 1 and
	  .[0].data.endpoint == "a" and (.[0].data | has("answeredBy") | not)' ws/.sfma/trace.jsonl >/dev/null
	audit_ok
	replays_ok 1
}

@test "cost: each priced call's costUsd, the record's sum of them, and a maxCostUsd halt before the call past it; both replay" {
	# $2 per million input tokens, $10 per million output: 100 in and 10
	# out is 0.0003 a call.
	local price='{"pricing":{"inputPerMTok":2,"outputPerMTok":10}}'
	serve "{\"/v1/chat/completions\":[$(text "$CAND"),$(text "$WRITE"),$(text "$DONE"),
	  $(text "$JUDGE_PASS"),$(text "$CRITERIA_PASS")]}"
	run_manifest "[$(ep gpt '' "$price")]"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; cat server.err; return 1; }
	jq -s -e 'map(select(.kind == "call")) | length == 5 and all(.data.costUsd == 0.0003)' ws/.sfma/trace.jsonl >/dev/null ||
		{ jq -c 'select(.kind == "call") | .data' ws/.sfma/trace.jsonl; return 1; }
	jq -e '.usage.costUsd > 0.00149 and .usage.costUsd < 0.00151 and .usage.inputTokens == 500' ws/.sfma/result.json >/dev/null ||
		{ jq .usage ws/.sfma/result.json; return 1; }
	audit_ok
	replays_ok 1
	# the cost where the runs are listed: sfma summary, text and --json
	run sfma summary ws
	[[ "${lines[0]}" == *" cost \$0.0015 "* ]] || { echo "$output"; return 1; }
	run sfma summary --json ws
	jq -e '.usage.costUsd > 0.00149 and .usage.costUsd < 0.00151' <<<"${lines[0]}" >/dev/null || { echo "$output"; return 1; }
	# The same against a ceiling of two calls' worth: the third is not made.
	stop_server
	rm -rf ws && mkdir ws
	serve "{\"/v1/chat/completions\":[$(text "$CAND"),$(text "$WRITE"),$(text "$DONE"),
	  $(text "$JUDGE_PASS"),$(text "$CRITERIA_PASS")]}"
	run_manifest "[$(ep gpt '' "$price")]" '.maxCostUsd = 0.0005'
	run sfma run m.json --apply
	[ "$status" -eq 1 ] || { echo "$output"; return 1; }
	[[ "$output" == *"HALTED-BUDGET "* ]] || { echo "$output"; return 1; }
	[ "$(wc -l < log.jsonl)" -eq 2 ] || { cat log.jsonl | wc -l; return 1; }
	jq -s -e 'map(select(.kind == "result" and .data.trigger == "maxCostUsd")) | length == 1' ws/.sfma/trace.jsonl >/dev/null
	audit_ok
	replays_ok 1
}
