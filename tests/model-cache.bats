#!/usr/bin/env bats
# sfma-model: prompt caching in the requests, as the fake server records
# them. Anthropic (prompt caching guide of its Messages API): cache_control
# {"type":"ephemeral"} on the last tool definition, the system prompt and
# the newest message block (and after a compaction the newest stub's
# exchange), at most 4 breakpoints a request, the cached
# prefix read in the order tools, system, messages. OpenAI (the OpenAPI
# document: CreateChatCompletionRequest.prompt_cache_key, and the same
# member of the Responses API the codex backend takes, as the Codex CLI
# sends it): a prompt_cache_key stable for the workspace and manifest.

load helpers
load fixtures/model/helpers
bats_require_minimum_version 1.5.0

setup() { model_setup; }
teardown() { model_teardown; }

ep() {
	printf '{"name":"%s","provider":"%s","model":"m-x","baseUrl":"%s%s"%s}' "$1" "$2" "$BASE" "${4:-}" "${3:-}"
}

ANTHROPIC_OK='{"json":{"type":"message","role":"assistant","stop_reason":"end_turn","content":[{"type":"text","text":"ok"}]}}'

# marks N: how many cache_control members request N holds, anywhere.
marks() {
	sed -n "${1}p" log.jsonl | jq '.body | fromjson | [.. | objects | select(has("cache_control"))] | length'
}

@test "anthropic: the last tool, the system prompt and the newest block are marked, nothing else, each ephemeral" {
	serve "{\"/v1/messages\":[$ANTHROPIC_OK]}"
	manifest "[$(ep claude anthropic)]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	req 1 mechanical 3 10000 ".tools = true | .messages = $(native_messages toolu_a toolu_b)" > requests.jsonl
	model
	line 1 '.ok'
	[ "$(marks 1)" -eq 3 ]
	logged 1 '.body | fromjson | .tools[-1].cache_control == {"type":"ephemeral"} and ([.tools[:-1][] | has("cache_control")] | any | not)'
	logged 1 '.body | fromjson | .system == [{"type":"text","text":"be brief","cache_control":{"type":"ephemeral"}}]'
	logged 1 '.body | fromjson | .messages[-1].content[-1] == {"type":"text","text":"go on","cache_control":{"type":"ephemeral"}}'
	logged 1 '.body | fromjson | [.messages[:-1][] | .content[] | has("cache_control")] | any | not'
}

@test "anthropic: a newest tool_result block is the one marked; the text protocol marks the system and the newest message" {
	serve "{\"/v1/messages\":[$ANTHROPIC_OK]}"
	manifest "[$(ep claude anthropic)]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	{
		req 1 mechanical 3 10000 ".tools = true | .messages = ($(native_messages toolu_a toolu_b) | .[:3])"
		req 2 reasoning 3
	} > requests.jsonl
	model
	[ "$(marks 1)" -eq 3 ]
	logged 1 '.body | fromjson | .messages[-1].content | (.[0] | has("cache_control") | not) and .[1].type == "tool_result" and .[1].cache_control == {"type":"ephemeral"}'
	# no tools offered: two marks
	[ "$(marks 2)" -eq 2 ]
	logged 2 '.body | fromjson | (has("tools") | not) and .messages[-1].content[-1].cache_control == {"type":"ephemeral"}'
}

@test "anthropic: the next turn's request is the last one, but for the moved mark, followed by the new messages" {
	serve "{\"/v1/messages\":[$ANTHROPIC_OK]}"
	manifest "[$(ep claude anthropic)]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	msgs=$(native_messages toolu_a toolu_b)
	more=$(jq -c '. + [{role:"assistant",content:"",toolCalls:[{id:"toolu_c",name:"read",input:{path:"b.txt"}}]},
	                   {role:"tool",results:[{id:"toolu_c",name:"read",content:"more"}]}]' <<<"$msgs")
	{
		req 1 mechanical 3 10000 ".tools = true | .messages = $msgs"
		req 2 mechanical 3 10000 ".tools = true | .messages = $more"
	} > requests.jsonl
	model
	# unmarked, request 1 is a prefix of request 2, block for block
	python3 - <<'PY'
import json
rows = [json.loads(json.loads(l)["body"]) for l in open("log.jsonl")]
def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if k != "cache_control"}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v
a, b = strip(rows[0]), strip(rows[1])
assert a["tools"] == b["tools"] and a["system"] == b["system"], "tools or system changed"
assert b["messages"][:len(a["messages"])] == a["messages"], "an earlier message changed"
assert len(b["messages"]) == len(a["messages"]) + 2
PY
}

@test "anthropic: after a compaction the model's message after the newest stub is marked too, where the next compaction's request still agrees" {
	serve "{\"/v1/messages\":[$ANTHROPIC_OK]}"
	manifest "[$(ep claude anthropic)]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	# what lib/context.c makes of an elided result: its evidence and the recall
	h=$(printf '%064d' 7)
	stub='{"elided":{"bytes":8192,"sha256":"'$h'"},"recall":{"id":"'$h'","mode":"referential","tool":"recall"}}'
	msgs=$(jq -cn --arg s "$stub" '[{role:"user",content:"hello"},
		{role:"assistant",content:"",toolCalls:[{id:"toolu_a",name:"read",input:{path:"a.txt"}}]},
		{role:"tool",results:[{id:"toolu_a",name:"read",content:$s}]},
		{role:"assistant",content:"",toolCalls:[{id:"toolu_b",name:"read",input:{path:"b.txt"}}]},
		{role:"tool",results:[{id:"toolu_b",name:"read",content:"b body"}]},
		{role:"user",content:"go on"}]')
	# the stub right before the newest message: its own block is marked
	last=$(jq -c '.[:3] + [{role:"user",content:"go on"}]' <<<"$msgs")
	# a result that only mentions a stub is none
	plain=$(jq -c '.[2].results[0].content = "see {\"elided\":{}}"' <<<"$msgs")
	{
		req 1 mechanical 3 10000 ".tools = true | .messages = $msgs"
		req 2 mechanical 3 10000 ".tools = true | .messages = $last"
		req 3 mechanical 3 10000 ".tools = true | .messages = $plain"
	} > requests.jsonl
	model
	[ "$(marks 1)" -eq 4 ]
	logged 1 '.body | fromjson | .messages | .[3].content[-1].cache_control == {"type":"ephemeral"} and
		([.[0,1,2,4] | .content[] | has("cache_control")] | any | not) and .[5].content[-1].cache_control != null'
	[ "$(marks 2)" -eq 4 ]
	logged 2 '.body | fromjson | .messages | .[2].content[-1].type == "tool_result" and .[2].content[-1].cache_control != null and
		([.[0,1] | .content[] | has("cache_control")] | any | not)'
	[ "$(marks 3)" -eq 3 ]
}

@test "openai and codex: prompt_cache_key is one per workspace and manifest, holds no secret, and changes with either" {
	serve '{"/v1/chat/completions":[{"json":{"choices":[{"finish_reason":"stop","message":{"content":"x"}}]}}],
	        "/responses":[{"sse":[{"type":"response.output_text.delta","delta":"x"},{"type":"response.completed","response":{"status":"completed","output":[]}}]}]}'
	export OPENAI_API_KEY=$OPENAI_KEY OPENAI_CODEX_TOKEN=$CODEX_TOKEN OPENAI_CODEX_ACCOUNT=acct-1
	manifest "[$(ep gpt openai),$(ep cx codex)]"
	down='{"calls":0,"failures":0,"downUntil":9999999999999}'
	{
		req 1 mechanical 3 10000 '.tools = true'
		req 2 mechanical 3 10000 '.tools = false'
		req 3 mechanical 3 10000 ".tools = true | .state = {gpt:$down}"
	} > requests.jsonl
	model
	line 3 '.endpoint == "cx"'
	k1=$(sed -n 1p log.jsonl | jq -r '.body | fromjson | .prompt_cache_key')
	k2=$(sed -n 2p log.jsonl | jq -r '.body | fromjson | .prompt_cache_key')
	k3=$(sed -n 3p log.jsonl | jq -r '.body | fromjson | .prompt_cache_key')
	[[ "$k1" =~ ^sfma-[0-9a-f]{32}$ ]]
	[ "$k1" = "$k2" ] && [ "$k1" = "$k3" ]
	# the same manifest run again: the same key
	rm log.jsonl
	req 4 mechanical 3 > requests.jsonl
	model
	[ "$(jq -r '.body | fromjson | .prompt_cache_key' log.jsonl)" = "$k1" ]
	# another workspace, or another manifest: another key
	rm log.jsonl
	jq '.workspace = "ws2"' m.json > m2.json && mv m2.json m.json
	model
	kw=$(jq -r '.body | fromjson | .prompt_cache_key' log.jsonl)
	[ "$kw" != "$k1" ]
	rm log.jsonl
	jq '.maxTurns = 5' m.json > m2.json && mv m2.json m.json
	model
	km=$(jq -r '.body | fromjson | .prompt_cache_key' log.jsonl)
	[ "$km" != "$kw" ] && [ "$km" != "$k1" ]
	# the key is no function of the credentials: another key, the same cache key
	rm log.jsonl
	OPENAI_API_KEY=sk-other-key-0000000000 model
	[ "$(jq -r '.body | fromjson | .prompt_cache_key' log.jsonl)" = "$km" ]
	secret_free
}
