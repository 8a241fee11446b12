#!/usr/bin/env bats
# sfma-model: how each provider ends a reply (stopReason, stop), refusals
# and filters, thinking tokens, codex in-stream failures, x-should-retry,
# outages of endpoints that answer 5xx, and costUsd.
#
# Every answer the fake server gives below is in the provider's published
# shape, written from its definition, not from sfma-model's parser:
#  - Anthropic: Messages API reference (POST /v1/messages, response
#    "stop_reason": end_turn | max_tokens | stop_sequence | tool_use |
#    pause_turn | refusal | model_context_window_exceeded; "usage":
#    input_tokens, output_tokens, cache_creation_input_tokens,
#    cache_read_input_tokens, output_tokens_details.thinking_tokens), as
#    the SDK types have them (anthropic-sdk-python src/anthropic/types/
#    stop_reason.py, usage.py, output_tokens_details.py), and the guide
#    "Stop reasons and fallback" (platform.claude.com).
#  - OpenAI: the OpenAPI document (openai/openai-openapi): CreateChatCompletion-
#    Response choices[].finish_reason stop | length | tool_calls |
#    content_filter | function_call, ChatCompletionResponseMessage.refusal
#    (content null beside it), CompletionUsage prompt_tokens_details.
#    cached_tokens and completion_tokens_details.reasoning_tokens.
#  - Google: the generateContent reference (ai.google.dev/api/generate-content):
#    GenerateContentResponse candidates[].finishReason (FinishReason STOP,
#    MAX_TOKENS, SAFETY, RECITATION, ..., MALFORMED_FUNCTION_CALL),
#    promptFeedback.blockReason (no candidates when the prompt is blocked),
#    usageMetadata promptTokenCount, candidatesTokenCount,
#    cachedContentTokenCount, thoughtsTokenCount.
#  - Codex: the Responses stream as the Codex CLI's client reads it
#    (openai/codex codex-rs/codex-api/src/sse/responses.rs: response.failed
#    with response.error {code, message}, context_length_exceeded /
#    insufficient_quota / usage_not_included fatal, others retried after the
#    "try again in" of the message), the streaming events of the Responses
#    API (error {code, message, param}, response.incomplete with
#    incomplete_details.reason max_output_tokens | content_filter), and
#    usage.output_tokens_details.reasoning_tokens.
#  - x-should-retry: the header the OpenAI and Anthropic SDKs obey before
#    any status rule (their _base_client.py, _should_retry).

load helpers
load fixtures/model/helpers
bats_require_minimum_version 1.5.0

setup() { model_setup; }
teardown() { model_teardown; }

# ep NAME PROVIDER [EXTRA] [PATH]: one endpoint of the fake server, as JSON.
ep() {
	printf '{"name":"%s","provider":"%s","model":"m-x","baseUrl":"%s%s","maxOutputTokens":1234%s}' \
		"$1" "$2" "$BASE" "${4:-}" "${3:-}"
}

tools_req() { # tools_req ID [CALLS_LEFT] [DEADLINE_IN_MS]
	req "$1" mechanical "${2:-3}" "${3:-10000}" '.tools = true'
}

OPENAI_OK='{"json":{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"fine"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}}'
codex_env() { export OPENAI_CODEX_TOKEN=$CODEX_TOKEN OPENAI_CODEX_ACCOUNT=acct-1; }

# ---- anthropic -------------------------------------------------------------

@test "anthropic: max_tokens with a write cut before its content is ok, stop length, the call as received, the ceiling given" {
	serve '{"/v1/messages":[{"json":{"id":"msg_1","type":"message","role":"assistant","model":"m-x",
	  "stop_reason":"max_tokens","stop_sequence":null,
	  "content":[{"type":"text","text":"Writing the file."},
	             {"type":"tool_use","id":"toolu_1","name":"write","input":{"path":"out.txt"}}],
	  "usage":{"input_tokens":100,"output_tokens":1234}}}]}'
	manifest "[$(ep claude anthropic)]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	tools_req 1 > requests.jsonl
	model
	line 1 '.ok and .stop == "length" and .maxOutputTokens == 1234 and .text == "Writing the file."'
	line 1 '.toolCalls == [{"id":"toolu_1","name":"write","input":{"path":"out.txt"}}]'
	line 1 '.calls | length == 1 and (.[0] | .ok and .stopReason == "max_tokens" and .stop == "length" and .maxOutputTokens == 1234)'
	secret_free
}

@test "anthropic: each stop_reason has its class; an unknown or absent one is end or tool by the calls" {
	local answers='' w
	for w in end_turn stop_sequence pause_turn model_context_window_exceeded tool_use brand_new; do
		answers="$answers{\"json\":{\"type\":\"message\",\"role\":\"assistant\",\"stop_reason\":\"$w\",
		  \"content\":[{\"type\":\"text\",\"text\":\"t $w\"}],\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}},"
	done
	answers="$answers{\"json\":{\"type\":\"message\",\"role\":\"assistant\",\"stop_reason\":\"tool_use\",
	  \"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"done\",\"input\":{\"summary\":\"s\"}}]}}"
	serve "{\"/v1/messages\":[$answers]}"
	manifest "[$(ep claude anthropic)]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	for i in 1 2 3 4 5 6 7; do tools_req $i; done > requests.jsonl
	model
	line 1 '.stop == "end" and .calls[0].stopReason == "end_turn" and .calls[0].stop == "end"'
	line 2 '.stop == "end" and .calls[0].stopReason == "stop_sequence"'
	line 3 '.stop == "end" and .calls[0].stopReason == "pause_turn"'
	line 4 '.ok and .stop == "length" and .maxOutputTokens == 1234 and .calls[0].stopReason == "model_context_window_exceeded"'
	line 5 '.stop == "end" and .calls[0].stopReason == "tool_use"'
	line 6 '.stop == "end" and .calls[0].stopReason == "brand_new"'
	line 7 '.stop == "tool" and .calls[0].stop == "tool" and (.toolCalls | length) == 1 and (has("maxOutputTokens") | not)'
}

@test "anthropic: a refusal is class refusal with its text, and the next endpoint answers" {
	serve "{\"/a/v1/messages\":[{\"json\":{\"type\":\"message\",\"role\":\"assistant\",\"stop_reason\":\"refusal\",
	  \"content\":[{\"type\":\"text\",\"text\":\"I will not write malware.\"}],\"usage\":{\"input_tokens\":40,\"output_tokens\":6}}}],
	  \"/b/v1/chat/completions\":[$OPENAI_OK]}"
	manifest "[$(ep a anthropic '' /a),$(ep b openai '' /b)]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY OPENAI_API_KEY=$OPENAI_KEY
	tools_req 1 > requests.jsonl
	model
	line 1 '.ok and .endpoint == "b" and .stop == "end" and .text == "fine"'
	line 1 '.calls[0] | (.ok | not) and .errorClass == "refusal" and .status == 200 and .stopReason == "refusal" and .stop == "refusal"'
	line 1 '.calls[0].error == "a: refused (refusal): I will not write malware."'
	# the refused answer was billed: its usage is on its call
	line 1 '.calls[0].usage == {"inputTokens":40,"outputTokens":6}'
	# one attempt: a refusal is not retried at the same endpoint
	[ "$(requests_to /a/v1/messages)" -eq 1 ]
	line 1 '.endpoints.a | .failures == 1 and .consecutiveFailures == 0 and .availability == 1'
}

@test "a refusal with no endpoint left is the reply: ok, stop refusal, the provider's text (a judgment says whether it was independent)" {
	serve "{\"/a/v1/messages\":[{\"json\":{\"type\":\"message\",\"role\":\"assistant\",\"stop_reason\":\"refusal\",
	  \"content\":[{\"type\":\"text\",\"text\":\"No, and here is why: $ANTHROPIC_KEY\"}],\"usage\":{\"input_tokens\":9,\"output_tokens\":3}}}],
	  \"/b/v1/chat/completions\":[{\"status\":404,\"body\":\"no such model\"}]}"
	manifest "[$(ep claude anthropic '' /a),$(ep gpt openai '' /b)]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY OPENAI_API_KEY=$OPENAI_KEY
	{ tools_req 1; req 2 mechanical 3 10000 '.purpose = "judge" | .avoid = "claude"'; } > requests.jsonl
	model
	line 1 '.ok and .stop == "refusal" and .endpoint == "claude" and .provider == "anthropic" and (has("toolCalls") | not)'
	line 1 '.text == "No, and here is why: [redacted]"'
	line 1 '[.calls[] | .endpoint + ":" + .errorClass] == ["claude:refusal","gpt:client"]'
	# the refusal's usage is on its call alone: a caller that gives the
	# reply's usage to the last call (gpt's) would count it twice
	line 1 '.calls[0].usage == {"inputTokens":9,"outputTokens":3} and (has("usage") | not)'
	# a judgment: the refusing endpoint is the avoided one
	line 2 '.ok and .stop == "refusal" and .endpoint == "claude" and .independent == false'
	secret_free
}

@test "anthropic: cache writes and thinking tokens are counted" {
	serve '{"/v1/messages":[{"json":{"type":"message","role":"assistant","stop_reason":"end_turn",
	  "content":[{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"text","text":"done"}],
	  "usage":{"input_tokens":21,"cache_creation_input_tokens":1800,"cache_read_input_tokens":0,
	           "output_tokens":393,"output_tokens_details":{"thinking_tokens":300}}}}]}'
	manifest "[$(ep claude anthropic)]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	tools_req 1 > requests.jsonl
	model
	line 1 '.usage == {"inputTokens":21,"outputTokens":393,"cachedInputTokens":0,"cacheWriteTokens":1800,"reasoningTokens":300}'
	line 1 '.calls[0].usage == .usage and .text == "done"'
}

# ---- openai ----------------------------------------------------------------

@test "openai: finish_reason length keeps the cut text; arguments cut mid-JSON drop the calls; stop and tool_calls map" {
	serve '{"/v1/chat/completions":[
	  {"json":{"choices":[{"index":0,"finish_reason":"length","message":{"role":"assistant","content":"The answer is","refusal":null}}],
	           "usage":{"prompt_tokens":10,"completion_tokens":1234}}},
	  {"json":{"choices":[{"index":0,"finish_reason":"length","message":{"role":"assistant","content":null,
	           "tool_calls":[{"id":"call_1","type":"function","function":{"name":"write","arguments":"{\"path\":\"out.txt\",\"content\":\"hel"}}]}}]}},
	  {"json":{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
	           "tool_calls":[{"id":"call_2","type":"function","function":{"name":"done","arguments":"{\"summary\":\"s\"}"}}]}}]}},
	  {"json":{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"whole"}}]}}]}'
	manifest "[$(ep gpt openai)]"
	export OPENAI_API_KEY=$OPENAI_KEY
	for i in 1 2 3 4; do tools_req $i; done > requests.jsonl
	model
	line 1 '.ok and .stop == "length" and .text == "The answer is" and .maxOutputTokens == 1234 and .calls[0].stopReason == "length"'
	line 2 '.ok and .stop == "length" and .text == "" and (has("toolCalls") | not) and (has("native") | not)'
	line 3 '.stop == "tool" and .calls[0].stopReason == "tool_calls" and .toolCalls[0].name == "done"'
	line 4 '.stop == "end" and .calls[0].stopReason == "stop" and .text == "whole"'
}

@test "openai: a refusal field (content null) is a refusal with that text; content_filter is filtered; both fall over" {
	serve "{\"/a/v1/chat/completions\":[
	  {\"json\":{\"choices\":[{\"index\":0,\"finish_reason\":\"stop\",\"message\":{\"role\":\"assistant\",\"content\":null,\"refusal\":\"I can't help with that.\"}}]}},
	  {\"json\":{\"choices\":[{\"index\":0,\"finish_reason\":\"content_filter\",\"message\":{\"role\":\"assistant\",\"content\":null}}]}}],
	  \"/b/v1/chat/completions\":[$OPENAI_OK]}"
	manifest "[$(ep a openai '' /a),$(ep b openai '' /b)]"
	export OPENAI_API_KEY=$OPENAI_KEY
	{ tools_req 1; tools_req 2; } > requests.jsonl
	model
	line 1 '.ok and .endpoint == "b" and .calls[0].errorClass == "refusal" and .calls[0].stop == "refusal" and .calls[0].stopReason == "stop"'
	line 1 ".calls[0].error == \"a: refused (stop): I can't help with that.\""
	line 2 '.ok and .endpoint == "b" and .calls[0].errorClass == "refusal" and .calls[0].stop == "filter" and .calls[0].stopReason == "content_filter"'
	line 2 '.calls[0].error == "a: filtered (content_filter): content_filter"'
}

@test "openai: the refusal text is the reply when no endpoint is left" {
	serve '{"/v1/chat/completions":[{"json":{"choices":[{"index":0,"finish_reason":"stop",
	  "message":{"role":"assistant","content":null,"refusal":"I can'"'"'t help with that."}}]}}]}'
	manifest "[$(ep gpt openai)]"
	export OPENAI_API_KEY=$OPENAI_KEY
	tools_req 1 > requests.jsonl
	model
	line 1 ".ok and .stop == \"refusal\" and .text == \"I can't help with that.\" and .endpoint == \"gpt\""
}

@test "openai: reasoning tokens are part of the output and counted apart" {
	serve '{"/v1/chat/completions":[{"json":{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"x"}}],
	  "usage":{"prompt_tokens":100,"completion_tokens":80,"total_tokens":180,
	           "prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":70}}}}]}'
	manifest "[$(ep gpt openai)]"
	export OPENAI_API_KEY=$OPENAI_KEY
	tools_req 1 > requests.jsonl
	model
	line 1 '.usage == {"inputTokens":100,"outputTokens":80,"cachedInputTokens":64,"reasoningTokens":70}'
}

# ---- gemini ----------------------------------------------------------------

GEM=/v1beta/models/m-x:generateContent

@test "gemini: thoughtsTokenCount is output (candidates 8 + thoughts 120 = 128); MAX_TOKENS spent on thoughts is an empty cut-off reply" {
	serve "{\"$GEM\":[
	  {\"json\":{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"4\"}]},\"finishReason\":\"STOP\",\"index\":0}],
	           \"usageMetadata\":{\"promptTokenCount\":30,\"candidatesTokenCount\":8,\"thoughtsTokenCount\":120,\"totalTokenCount\":158}}},
	  {\"json\":{\"candidates\":[{\"content\":{\"role\":\"model\"},\"finishReason\":\"MAX_TOKENS\",\"index\":0}],
	           \"usageMetadata\":{\"promptTokenCount\":30,\"thoughtsTokenCount\":1234,\"totalTokenCount\":1264}}},
	  {\"json\":{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"done\",\"args\":{\"summary\":\"s\"}}}]},\"finishReason\":\"STOP\"}]}}]}"
	manifest "[$(ep gem gemini)]"
	export GEMINI_API_KEY=$GEMINI_KEY
	for i in 1 2 3; do tools_req $i; done > requests.jsonl
	model
	line 1 '.ok and .stop == "end" and .calls[0].stopReason == "STOP" and .usage == {"inputTokens":30,"outputTokens":128,"reasoningTokens":120}'
	line 2 '.ok and .stop == "length" and .text == "" and .maxOutputTokens == 1234 and .calls[0].stopReason == "MAX_TOKENS"'
	line 2 '.usage == {"inputTokens":30,"outputTokens":1234,"reasoningTokens":1234}'
	line 3 '.stop == "tool" and .calls[0].stopReason == "STOP"'
}

@test "gemini: SAFETY is filtered, a blocked prompt refused, MALFORMED_FUNCTION_CALL an invalid reply; each falls over" {
	serve "{\"/a$GEM\":[
	  {\"json\":{\"candidates\":[{\"finishReason\":\"SAFETY\",\"index\":0,\"safetyRatings\":[{\"category\":\"HARM_CATEGORY_DANGEROUS_CONTENT\",\"probability\":\"HIGH\",\"blocked\":true}]}]}},
	  {\"json\":{\"promptFeedback\":{\"blockReason\":\"PROHIBITED_CONTENT\",\"blockReasonMessage\":\"The prompt was blocked.\"},
	           \"usageMetadata\":{\"promptTokenCount\":12,\"totalTokenCount\":12}}},
	  {\"json\":{\"candidates\":[{\"finishReason\":\"MALFORMED_FUNCTION_CALL\",\"finishMessage\":\"Malformed function call: write(\",\"index\":0}],
	           \"usageMetadata\":{\"promptTokenCount\":2595,\"totalTokenCount\":2595}}}],
	  \"/b/v1/chat/completions\":[$OPENAI_OK]}"
	manifest "[$(ep a gemini '' /a),$(ep b openai '' /b)]"
	export GEMINI_API_KEY=$GEMINI_KEY OPENAI_API_KEY=$OPENAI_KEY
	for i in 1 2 3; do tools_req $i; done > requests.jsonl
	model
	line 1 '.ok and .endpoint == "b" and (.calls[0] | .errorClass == "refusal" and .stop == "filter" and .stopReason == "SAFETY")'
	line 1 '.calls[0].error == "a: filtered (SAFETY): SAFETY"'
	line 2 '.ok and .endpoint == "b" and (.calls[0] | .errorClass == "refusal" and .stop == "refusal" and .stopReason == "blockReason:PROHIBITED_CONTENT")'
	line 2 '.calls[0].error == "a: refused (blockReason:PROHIBITED_CONTENT): The prompt was blocked." and .calls[0].usage.inputTokens == 12'
	line 3 '.ok and .endpoint == "b" and (.calls[0] | .errorClass == "reply" and .stopReason == "MALFORMED_FUNCTION_CALL" and (has("stop") | not))'
	line 3 '.calls[0].error == "a: invalid reply (MALFORMED_FUNCTION_CALL): Malformed function call: write("'
	[ "$(requests_to "/a$GEM")" -eq 3 ]
}

@test "gemini: a blocked prompt with no endpoint left is the reply, its words when no message came" {
	serve "{\"$GEM\":[{\"json\":{\"promptFeedback\":{\"blockReason\":\"SAFETY\"}}}]}"
	manifest "[$(ep gem gemini)]"
	export GEMINI_API_KEY=$GEMINI_KEY
	tools_req 1 > requests.jsonl
	model
	line 1 '.ok and .stop == "refusal" and .text == "blockReason:SAFETY" and .calls[0].stopReason == "blockReason:SAFETY"'
}

# ---- codex -----------------------------------------------------------------

@test "codex: response.incomplete max_output_tokens is stop length with its text; content_filter is filtered; completed is end" {
	serve '{"/responses":[
	  {"sse":[{"type":"response.created","response":{"id":"resp_1","status":"in_progress"}},
	          {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"The answer"},
	          {"type":"response.incomplete","response":{"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},
	           "output":[],"usage":{"input_tokens":50,"output_tokens":900,"output_tokens_details":{"reasoning_tokens":700},"total_tokens":950}}}]},
	  {"sse":[{"type":"response.incomplete","response":{"id":"resp_2","status":"incomplete","incomplete_details":{"reason":"content_filter"},"output":[]}}]},
	  {"sse":[{"type":"response.output_text.delta","delta":"fine"},
	          {"type":"response.completed","response":{"id":"resp_3","status":"completed","output":[],"usage":{"input_tokens":5,"output_tokens":1}}}]}]}'
	manifest "[$(ep cx codex)]"
	codex_env
	for i in 1 2 3; do tools_req $i; done > requests.jsonl
	model
	line 1 '.ok and .stop == "length" and .text == "The answer" and .calls[0].stopReason == "incomplete:max_output_tokens"'
	# codex sends no ceiling: the reply names the output it reached
	line 1 '.maxOutputTokens == 900 and .usage == {"inputTokens":50,"outputTokens":900,"reasoningTokens":700}'
	line 2 '.ok and .stop == "refusal" and .calls[0].stop == "filter" and .calls[0].stopReason == "incomplete:content_filter"'
	line 3 '.ok and .stop == "end" and .text == "fine" and .calls[0].stopReason == "completed"'
}

@test "codex: an in-stream rate_limit_exceeded waits the 'try again in' it names, then the same endpoint answers" {
	serve '{"/responses":[
	  {"sse":[{"type":"error","code":"rate_limit_exceeded","message":"Rate limit reached for gpt-5 on tokens per min. Please try again in 1.2s.","param":null,"sequence_number":1}]},
	  {"sse":[{"type":"response.output_text.delta","delta":"after the wait"},
	          {"type":"response.completed","response":{"id":"r","status":"completed","output":[]}}]}]}'
	manifest "[$(ep cx codex)]"
	codex_env
	tools_req 1 > requests.jsonl
	model
	line 1 '.ok and .text == "after the wait" and [.calls[].endpoint] == ["cx","cx"]'
	line 1 '.calls[0] | .errorClass == "rate-limited" and .status == 200 and (.error | startswith("cx: stream failed: rate_limit_exceeded: Rate limit reached"))'
	line 1 '.calls[1].waitMs == 1200'
}

@test "codex: a rate limit whose wait does not fit before the deadline falls over at once" {
	serve '{"/a/responses":[{"sse":[{"type":"error","code":"rate_limit_exceeded","message":"Please try again in 30s."}]}],
	        "/b/responses":[{"sse":[{"type":"response.output_text.delta","delta":"b"},{"type":"response.completed","response":{"status":"completed","output":[]}}]}]}'
	manifest "[$(ep a codex '' /a),$(ep b codex '' /b)]"
	codex_env
	tools_req 1 3 5000 > requests.jsonl
	model
	line 1 '.ok and .endpoint == "b" and [.calls[].endpoint] == ["a","b"] and .calls[1].waitMs == 0'
}

@test "codex: response.failed server_error is retried with backoff and counts toward down" {
	serve '{"/responses":[
	  {"sse":[{"type":"response.created","response":{"id":"r1","status":"in_progress"}},
	          {"type":"response.failed","response":{"id":"r1","status":"failed","error":{"code":"server_error","message":"The server had an error."}}}]},
	  {"sse":[{"type":"response.output_text.delta","delta":"ok now"},{"type":"response.completed","response":{"status":"completed","output":[]}}]}]}'
	manifest "[$(ep cx codex)]"
	codex_env
	tools_req 1 > requests.jsonl
	model
	line 1 '.ok and .text == "ok now" and (.calls | length) == 2 and .calls[0].errorClass == "transient" and .calls[1].waitMs <= 500'
	line 1 '.calls[0].error == "cx: stream failed: server_error: The server had an error."'
	# the success after it ends the streak
	line 1 '.endpoints.cx.consecutiveFailures == 0 and .endpoints.cx.availability < 1'
}

@test "codex: context_length_exceeded, insufficient_quota and usage_not_included fall over at once" {
	local code answers=''
	for code in context_length_exceeded insufficient_quota usage_not_included; do
		answers="$answers{\"sse\":[{\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"$code\",\"message\":\"no: $code\"}}}]},"
	done
	serve "{\"/a/responses\":[${answers%,}],
	        \"/b/responses\":[{\"sse\":[{\"type\":\"response.output_text.delta\",\"delta\":\"b\"},{\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"output\":[]}}]}]}"
	manifest "[$(ep a codex '' /a),$(ep b codex '' /b)]"
	codex_env
	for i in 1 2 3; do tools_req $i; done > requests.jsonl
	model
	for i in 1 2 3; do
		line $i '.ok and .endpoint == "b" and [.calls[].endpoint] == ["a","b"] and .calls[0].errorClass == "client"'
	done
	line 1 '.calls[0].error == "a: stream failed: context_length_exceeded: no: context_length_exceeded"'
	line 3 '.endpoints.a | .consecutiveFailures == 0 and .availability == 1'
	[ "$(requests_to /a/responses)" -eq 3 ]
}

# ---- x-should-retry, outages -------------------------------------------------

@test "x-should-retry: false is obeyed: a 500 and a 429 carrying it are not retried" {
	serve "{\"/a/v1/chat/completions\":[{\"status\":500,\"body\":\"boom\",\"headers\":{\"x-should-retry\":\"false\"}},
	                                   {\"status\":429,\"body\":\"slow\",\"headers\":{\"Retry-After\":\"0\",\"X-Should-Retry\":\"False\"}},
	                                   {\"status\":500,\"body\":\"boom\",\"headers\":{\"x-should-retry\":\"true\"}},
	                                   $OPENAI_OK],
	        \"/b/v1/chat/completions\":[$OPENAI_OK]}"
	# a ranks first throughout (its prior outweighs what one 500 costs it)
	manifest "[$(ep a openai ',"priors":{"mechanical":1}' /a),$(ep b openai ',"priors":{"mechanical":0}' /b)]"
	export OPENAI_API_KEY=$OPENAI_KEY
	for i in 1 2 3; do tools_req $i; done > requests.jsonl
	model
	line 1 '.ok and .endpoint == "b" and [.calls[].endpoint] == ["a","b"] and .calls[0].status == 500'
	line 2 '.ok and .endpoint == "b" and [.calls[].endpoint] == ["a","b"] and .calls[0].status == 429'
	# without the veto a 500 is retried as ever
	line 3 '.ok and .endpoint == "a" and [.calls[].endpoint] == ["a","a"]'
}

@test "an endpoint answering 500 to everything goes down after 3; availability counts them; the next run sends it nothing" {
	serve "{\"/a/v1/chat/completions\":[{\"status\":500,\"body\":\"internal\"}],\"/b/v1/chat/completions\":[$OPENAI_OK]}"
	manifest "[$(ep a openai '' /a),$(ep b openai '' /b)]"
	export OPENAI_API_KEY=$OPENAI_KEY
	before=$(date +%s%3N)
	tools_req 1 8 > requests.jsonl
	model
	line 1 '.ok and .endpoint == "b" and [.calls[].endpoint] == ["a","a","a","b"]'
	line 1 ".endpoints.a | .consecutiveFailures == 3 and .outages == 1 and .failures == 3 and .downUntil >= $before + 30000"
	# 0.7^3 of 1: each 500 counted as unavailable
	line 1 '.endpoints.a.availability > 0.342 and .endpoints.a.availability < 0.344'
	state=$(sed -n 1p out.jsonl | jq -c .endpoints)
	tools_req 2 8 | jq -c --argjson s "$state" '.state = $s' > requests.jsonl
	rm -f log.jsonl
	model
	line 1 '.ok and .endpoint == "b" and [.calls[].endpoint] == ["b"]'
	[ "$(requests_to /a/v1/chat/completions)" -eq 0 ]
}

@test "502, 503, 504 and 529 count toward down; 429 and 400 neither count nor end the streak" {
	serve '{"/v1/chat/completions":[{"status":502},{"status":429},{"status":503},{"status":400},{"status":529},{"status":504}]}'
	manifest "[$(ep a openai)]"
	export OPENAI_API_KEY=$OPENAI_KEY
	# one attempt per request (callsLeft 1), the state kept by the stage
	for i in 1 2 3 4 5; do tools_req $i 1; done > requests.jsonl
	model
	line 1 '.endpoints.a | .consecutiveFailures == 1 and .downUntil == null'
	line 2 '.calls[0].status == 429 and (.endpoints.a | .consecutiveFailures == 1 and .availability > 0.78 and .availability < 0.8)'
	line 3 '.calls[0].status == 503 and .endpoints.a.consecutiveFailures == 2'
	line 4 '.calls[0].status == 400 and .endpoints.a.consecutiveFailures == 2'
	line 5 '.calls[0].status == 529 and (.endpoints.a | .consecutiveFailures == 3 and .downUntil != null)'
}

# ---- cost ------------------------------------------------------------------

PRICED=',"pricing":{"inputPerMTok":3,"outputPerMTok":15,"cachedInputPerMTok":0.3,"cacheWritePerMTok":3.75}'

@test "costUsd: anthropic bills input_tokens (no cache in it) + cache reads + cache writes + output" {
	serve '{"/v1/messages":[{"json":{"type":"message","role":"assistant","stop_reason":"end_turn","content":[{"type":"text","text":"x"}],
	  "usage":{"input_tokens":1000,"cache_read_input_tokens":2000,"cache_creation_input_tokens":500,"output_tokens":100}}}]}'
	manifest "[$(ep claude anthropic "$PRICED")]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	{ tools_req 1; tools_req 2; } > requests.jsonl
	model
	# (1000*3 + 2000*0.3 + 500*3.75 + 100*15) / 1e6
	line 1 '.calls[0].costUsd == 0.006975'
	line 2 '.calls[0].costUsd == 0.006975 and .endpoints.claude.costUsd == 0.01395'
}

@test "costUsd: openai, gemini and codex count the cached tokens inside the input; cache prices default to the input price" {
	serve '{"/v1/chat/completions":[{"json":{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"x"}}],
	          "usage":{"prompt_tokens":3000,"completion_tokens":200,"prompt_tokens_details":{"cached_tokens":2000},"completion_tokens_details":{"reasoning_tokens":150}}}}],
	        "/v1beta/models/m-x:generateContent":[{"json":{"candidates":[{"content":{"role":"model","parts":[{"text":"x"}]},"finishReason":"STOP"}],
	          "usageMetadata":{"promptTokenCount":3000,"cachedContentTokenCount":2000,"candidatesTokenCount":50,"thoughtsTokenCount":150}}}],
	        "/responses":[{"sse":[{"type":"response.output_text.delta","delta":"x"},{"type":"response.completed","response":{"status":"completed","output":[],
	          "usage":{"input_tokens":3000,"input_tokens_details":{"cached_tokens":2000},"output_tokens":200,"output_tokens_details":{"reasoning_tokens":150}}}}]}]}'
	manifest "[$(ep gpt openai "$PRICED"),$(ep gem gemini "$PRICED"),$(ep cx codex ',"pricing":{"inputPerMTok":2,"outputPerMTok":8}')]"
	export OPENAI_API_KEY=$OPENAI_KEY GEMINI_API_KEY=$GEMINI_KEY
	codex_env
	down='{"calls":0,"failures":0,"downUntil":9999999999999}'
	{
		tools_req 1 | jq -c ".state = {gem:$down,cx:$down}"
		tools_req 2 | jq -c ".state = {gpt:$down,cx:$down}"
		tools_req 3 | jq -c ".state = {gpt:$down,gem:$down}"
	} > requests.jsonl
	model
	# (1000*3 + 2000*0.3 + 200*15) / 1e6
	line 1 '.endpoint == "gpt" and .calls[0].costUsd == 0.0066'
	line 2 '.endpoint == "gem" and .calls[0].costUsd == 0.0066'
	# no cache prices: 3000*2 + 200*8
	line 3 '.endpoint == "cx" and .calls[0].costUsd == 0.0076'
}

@test "costUsd: on every attempt of a priced endpoint (0 without usage), summed across invocations; none without pricing" {
	serve "{\"/a/v1/chat/completions\":[{\"status\":404,\"body\":\"no\"}],
	        \"/b/v1/chat/completions\":[{\"json\":{\"choices\":[{\"finish_reason\":\"stop\",\"message\":{\"content\":\"x\"}}],\"usage\":{\"prompt_tokens\":1000000,\"completion_tokens\":0}}}]}"
	manifest "[$(ep a openai "$PRICED" /a),$(ep b openai '' /b)]"
	export OPENAI_API_KEY=$OPENAI_KEY
	tools_req 1 | jq -c '.state = {"a":{"calls":7,"failures":0,"costUsd":1.25}}' > requests.jsonl
	model
	line 1 '.calls[0].costUsd == 0 and (.calls[1] | has("costUsd") | not)'
	line 1 '.endpoints.a.costUsd == 1.25 and (.endpoints.b | has("costUsd") | not)'
}

@test "a malformed pricing is the manifest's error: the stage does not start, and says where" {
	serve "{\"/v1/chat/completions\":[$OPENAI_OK]}"
	manifest "[$(ep gpt openai ',"pricing":{"inputPerMTok":-1,"outputPerMTok":2}')]"
	export OPENAI_API_KEY=$OPENAI_KEY
	tools_req 1 > requests.jsonl
	run -2 model
	grep -qx -- '- modelEndpoints\[0\].pricing.inputPerMTok must be a number >= 0' out.jsonl err.txt ||
		{ cat out.jsonl err.txt; return 1; }
	[ ! -s log.jsonl ] || { echo "a request went out"; return 1; }
}
