#!/usr/bin/env bats
# A whole run against a provider that answers with native tool calls: the
# planner and sfma-model together, a fake provider on 127.0.0.1 in the
# provider's own shapes (tests/fixtures/model/fake_server.py checks every
# request body and answers 400 to one in the wrong shape). The record
# verifies and replays, the usage is summed, and no key is anywhere.

load helpers
load fixtures/model/helpers

setup() {
	model_setup
	mkdir ws
}

teardown() {
	model_teardown
}

CAND='{"mission":"write out.txt","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'

run_manifest() { # run_manifest PROVIDER
	jq -n --arg p "$1" --arg b "$BASE" '{name:"native",workspace:"ws",
	  modelEndpoints:[{name:"remote",provider:$p,model:"m-x",baseUrl:$b}],
	  allowedCommands:[],inputs:[],outputs:["out.txt"],maxTurns:6,dryRunDefault:false}' >m.json
}

# Nothing the run left - trace, record, evidence, memory, outputs - holds a key.
no_key_anywhere() {
	local s
	for s in "$ANTHROPIC_KEY" "$OPENAI_KEY"; do
		if grep -rqF -- "$s" ws out.txt 2>/dev/null; then
			echo "secret $s leaked into:" >&2
			grep -rlF -- "$s" ws >&2
			return 1
		fi
	done
}

@test "anthropic: the run's calls are carried out natively, results go back as tool_result blocks, and it verifies and replays" {
	local cand_py
	cand_py=$(jq -Rn --arg c "$CAND" '$c')
	serve "$(cat <<JSON
{"/v1/messages":[
 {"expect":["'tools' not in b"],
  "json":{"id":"m1","type":"message","role":"assistant","stop_reason":"end_turn",
   "content":[{"type":"text","text":$cand_py}],"usage":{"input_tokens":100,"output_tokens":20}}},
 {"expect":["[t['name'] for t in b['tools']][:3] == ['read','write','run']"],
  "json":{"id":"m2","type":"message","role":"assistant","stop_reason":"tool_use",
   "content":[{"type":"tool_use","id":"toolu_w","name":"write","input":{"path":"out.txt","content":"NATIVE_MARKER"}},
              {"type":"tool_use","id":"toolu_x","name":"read","input":{"path":"out.txt"}}],
   "usage":{"input_tokens":200,"output_tokens":30,"cache_read_input_tokens":150}}},
 {"expect":["b['messages'][-2]['content'][0]['id'] == 'toolu_w'",
            "b['messages'][-1]['role'] == 'user'",
            "[c['tool_use_id'] for c in b['messages'][-1]['content']] == ['toolu_w','toolu_x']",
            "'wrote 13 bytes to out.txt' in json.dumps(b['messages'][-1]['content'][0]['content'])",
            "'one call per turn' in json.dumps(b['messages'][-1]['content'][1]['content'])"],
  "json":{"id":"m3","type":"message","role":"assistant","stop_reason":"tool_use",
   "content":[{"type":"tool_use","id":"toolu_d","name":"done","input":{"summary":"wrote it natively"}}],
   "usage":{"input_tokens":300,"output_tokens":10}}},
 {"expect":["b['system'][0]['text'].startswith('sfma soft-tier judgment 1')", "'tools' not in b"],
  "json":{"id":"m4","type":"message","role":"assistant","stop_reason":"end_turn",
   "content":[{"type":"text","text":"{\"pass\":true,\"reason\":\"out.txt holds the marker\"}"}],
   "usage":{"input_tokens":50,"output_tokens":5}}},
 {"expect":["b['system'][0]['text'].startswith('sfma soft-tier judgment 1')"],
  "json":{"id":"m5","type":"message","role":"assistant","stop_reason":"end_turn",
   "content":[{"type":"text","text":"{\"criteria\":[{\"criterion\":\"out.txt exists\",\"pass\":true,\"evidence\":[]}]}"}],
   "usage":{"input_tokens":40,"output_tokens":4}}}]}
JSON
)"
	run_manifest anthropic
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; cat server.err; return 1; }
	[[ "$output" == *"COMPLETED turns=3"* ]]
	[ "$(cat ws/out.txt)" = NATIVE_MARKER ]
	grep -q 'shape check failed' server.err && return 1
	# three turns, the soft tier's judgment of the done (by the one endpoint
	# there is, so not independent) and the criteria judgment: each a call
	# entry with usage, and the record sums them
	[ "$(wc -l <log.jsonl)" -eq 5 ]
	jq -e '.usage == {"inputTokens":690,"outputTokens":69,"cachedInputTokens":150,"reasoningTokens":0,"cacheWriteTokens":0,"costUsd":null}' ws/.sfma/result.json
	jq -s -e '[.[] | select(.kind=="call")] | length == 5 and all(.[]; .data.status == 200 and .data.usage)' \
		ws/.sfma/trace.jsonl
	jq -s -e 'any(.[]; .kind == "verdict" and .data.tier == "soft" and .data.pass and .data.judge == "remote"
		and .data.independent == false)' ws/.sfma/trace.jsonl
	jq -e '.criteria == [{"criterion":"out.txt exists","pass":true,"evidence":[]}]' ws/.sfma/result.json
	# the native reply is kept as the provider's own call objects
	local sha
	sha=$(jq -r 'select(.kind=="call" and .data.toolCalls == 2) | .evidence.reply.sha256' ws/.sfma/trace.jsonl)
	jq -e '.provider == "anthropic" and (.native | map(.id)) == ["toolu_w","toolu_x"]' "ws/.sfma/evidence/$sha"
	run sfma-verify ws
	[ "$status" -eq 0 ] && [[ "$output" == "AUDIT_OK "*" evidence="* ]]
	run sfma replay ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == "REPLAY_OK runs=1 entries="* ]]
	no_key_anywhere
}

@test "openai: tool_calls carried out, role tool messages answer each call id, maxTokens halts a run that spends more" {
	local cand_py
	cand_py=$(jq -Rn --arg c "$CAND" '$c')
	serve "$(cat <<JSON
{"/v1/chat/completions":[
 {"json":{"id":"c1","choices":[{"index":0,"message":{"role":"assistant","content":$cand_py},"finish_reason":"stop"}],
   "usage":{"prompt_tokens":100,"completion_tokens":20}}},
 {"expect":["b['tools'][0]['type'] == 'function'"],
  "json":{"id":"c2","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
   "tool_calls":[{"id":"call_w","type":"function","function":{"name":"write","arguments":"{\"path\":\"out.txt\",\"content\":\"OPENAI_MARKER\"}"}}]}}],
   "usage":{"prompt_tokens":200,"completion_tokens":30}}},
 {"expect":["b['messages'][-1] == {'role':'tool','tool_call_id':'call_w','content':b['messages'][-1]['content']}",
            "'wrote 13 bytes' in b['messages'][-1]['content']"],
  "json":{"id":"c3","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
   "tool_calls":[{"id":"call_r","type":"function","function":{"name":"read","arguments":"{\"path\":\"out.txt\"}"}}]}}],
   "usage":{"prompt_tokens":5000,"completion_tokens":10}}}]}
JSON
)"
	run_manifest openai
	jq '.maxTokens = 1000' m.json >m2.json && mv m2.json m.json
	export OPENAI_API_KEY=$OPENAI_KEY
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	[[ "$output" == *"HALTED-BUDGET turns=2"* ]] || { echo "$output"; return 1; }
	grep -q 'shape check failed' server.err && return 1
	[ "$(cat ws/out.txt)" = OPENAI_MARKER ]
	jq -e '.verdict == "halted-budget" and .usage.inputTokens == 5300 and .budget.maxTokens == 1000' ws/.sfma/result.json
	jq -s -e 'any(.[]; .kind == "result" and .data.trigger == "maxTokens")' ws/.sfma/trace.jsonl
	run sfma-verify ws
	[ "$status" -eq 0 ]
	run sfma replay ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	no_key_anywhere
}

@test "an endpoint that is down is skipped by the next run without a request: the state lives in memory.json" {
	serve '{"/v1/messages":[{"drop":true}]}'
	jq -n --arg b "$BASE" '{name:"down",workspace:"ws",
	  modelEndpoints:[{name:"remote",provider:"anthropic",model:"m-x",baseUrl:$b,
	                   priors:{reasoning:0.9,mechanical:0.9}},
	                  {name:"offline",provider:"mock",model:"builtin",priors:{reasoning:0.1,mechanical:0.1}}],
	  allowedCommands:["echo"],inputs:[],outputs:["out.txt"],maxTurns:6,dryRunDefault:false}' >m.json
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	# three transport failures (the first try and two backed-off retries), then the mock
	[ "$(wc -l <log.jsonl)" -eq 3 ]
	jq -s -e '[.[] | select(.kind=="call" and .data.endpoint=="remote")] | length == 3 and
		all(.[]; .data.ok == false and .data.errorClass == "transport" and .data.status == null)' ws/.sfma/trace.jsonl
	jq -s -e '[.[] | select(.kind=="call" and .data.endpoint=="remote")] | .[1].data.waitMs > 0' ws/.sfma/trace.jsonl
	jq -e '.endpoints.remote.downUntil > 0 and .endpoints.remote.consecutiveFailures >= 3' ws/.sfma/memory.json
	# the next run asks the mock only: no request reaches the down endpoint
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(wc -l <log.jsonl)" -eq 3 ]
	[ "$(jq -s '[.[] | select(.kind=="call" and .data.endpoint=="remote")] | length' ws/.sfma/trace.jsonl)" -eq 3 ]
	run sfma-verify ws
	[ "$status" -eq 0 ]
	no_key_anywhere
}
