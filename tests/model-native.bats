#!/usr/bin/env bats
# sfma-model: native tool use per provider (the tools offered, calls parsed
# into toolCalls, assistant calls and tool results sent back in each
# provider's own shapes), maxOutputTokens, token usage, toolProtocol text,
# and bad native replies. The fake server checks each request body's shape
# (its "expect" list) and answers a 400 naming the check that failed.

load helpers
load fixtures/model/helpers
bats_require_minimum_version 1.5.0

setup() { model_setup; }
teardown() { model_teardown; }

# ep NAME PROVIDER [EXTRA]: one endpoint of the fake server, as JSON.
ep() {
	printf '{"name":"%s","provider":"%s","model":"m-x","baseUrl":"%s","maxOutputTokens":1234%s}' \
		"$1" "$2" "$BASE" "${3:-}"
}

# native_req ID1 ID2: a mechanical request offering the tools, with a turn of two calls.
native_req() {
	req 1 mechanical 3 10000 ".tools = true | .messages = $(native_messages "$1" "$2")"
}

# The tool names in the table's order, as the fake server's checks read them.
NAMES="['read','write','run','notify','ask','recall','task','done']"
REMINDER_PY="'one call per turn: only the first call was carried out'"

@test "anthropic: tools offered, tool_use parsed, tool_use/tool_result blocks sent back, usage" {
	serve "$(cat <<JSON
{"/v1/messages":[{"expect":[
  "[t['name'] for t in b['tools']] == $NAMES",
  "all(set(t) == {'name','description','input_schema'} for t in b['tools'][:-1])",
  "set(b['tools'][-1]) == {'name','description','input_schema','cache_control'}",
  "b['tools'][0]['input_schema']['required'] == ['path']",
  "b['max_tokens'] == 1234 and b['system'] == [{'type':'text','text':'be brief','cache_control':{'type':'ephemeral'}}]",
  "b['messages'][0] == {'role':'user','content':[{'type':'text','text':'hello'}]}",
  "b['messages'][1] == {'role':'assistant','content':[{'type':'tool_use','id':'toolu_a','name':'read','input':{'path':'a.txt'}},{'type':'tool_use','id':'toolu_b','name':'done','input':{'summary':'x'}}]}",
  "b['messages'][2] == {'role':'user','content':[{'type':'tool_result','tool_use_id':'toolu_a','content':'file body'},{'type':'tool_result','tool_use_id':'toolu_b','content':$REMINDER_PY}]}",
  "b['messages'][3] == {'role':'user','content':[{'type':'text','text':'go on','cache_control':{'type':'ephemeral'}}]} and len(b['messages']) == 4"],
 "json":{"id":"msg_1","type":"message","role":"assistant","stop_reason":"tool_use",
  "content":[{"type":"text","text":"Writing it."},
             {"type":"tool_use","id":"toolu_c","name":"write","input":{"path":"out.txt","content":"hi"}}],
  "usage":{"input_tokens":120,"output_tokens":30,"cache_read_input_tokens":100}}}]}
JSON
)"
	manifest "[$(ep claude anthropic)]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	native_req toolu_a toolu_b > requests.jsonl
	model
	line 1 '.ok and .provider == "anthropic" and .endpoint == "claude" and .text == "Writing it."'
	line 1 '.toolCalls == [{"id":"toolu_c","name":"write","input":{"path":"out.txt","content":"hi"}}]'
	line 1 '.native == [{"type":"tool_use","id":"toolu_c","name":"write","input":{"path":"out.txt","content":"hi"}}]'
	line 1 '.usage == {"inputTokens":120,"outputTokens":30,"cachedInputTokens":100} and .calls[0].usage == .usage'
	line 1 '.calls[0] | .status == 200 and .waitMs == 0 and .requestBytes > 0 and (has("errorClass") | not)'
	# requestBytes is the body as sent
	[ "$(jq '.calls[0].requestBytes' out.jsonl)" -eq "$(jq -j .body log.jsonl | wc -c)" ]
	secret_free
}

@test "openai: tools offered, tool_calls parsed, tool_calls and role tool messages sent back, usage" {
	serve "$(cat <<JSON
{"/v1/chat/completions":[{"expect":[
  "[t['function']['name'] for t in b['tools']] == $NAMES",
  "all(t['type'] == 'function' and set(t['function']) == {'name','description','parameters'} for t in b['tools'])",
  "b['max_completion_tokens'] == 1234 and 'max_tokens' not in b",
  "b['messages'][0] == {'role':'system','content':'be brief'}",
  "b['messages'][2]['role'] == 'assistant' and b['messages'][2]['content'] is None",
  "[(c['id'], c['type'], c['function']['name'], json.loads(c['function']['arguments'])) for c in b['messages'][2]['tool_calls']] == [('call_a','function','read',{'path':'a.txt'}),('call_b','function','done',{'summary':'x'})]",
  "b['messages'][3] == {'role':'tool','tool_call_id':'call_a','content':'file body'}",
  "b['messages'][4] == {'role':'tool','tool_call_id':'call_b','content':$REMINDER_PY}",
  "b['messages'][5] == {'role':'user','content':'go on'}"],
 "json":{"choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
  "tool_calls":[{"id":"call_c","type":"function","function":{"name":"run","arguments":"{\"cmd\":\"echo hi\"}"}}]}}],
  "usage":{"prompt_tokens":50,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":7}}}}]}
JSON
)"
	manifest "[$(ep gpt openai)]"
	export OPENAI_API_KEY=$OPENAI_KEY
	native_req call_a call_b > requests.jsonl
	model
	line 1 '.ok and .provider == "openai" and .text == ""'
	line 1 '.toolCalls == [{"id":"call_c","name":"run","input":{"cmd":"echo hi"}}]'
	line 1 '.native == [{"id":"call_c","type":"function","function":{"name":"run","arguments":"{\"cmd\":\"echo hi\"}"}}]'
	line 1 '.usage == {"inputTokens":50,"outputTokens":10,"cachedInputTokens":7} and .calls[0].usage == .usage'
	secret_free
}

@test "gemini: functionDeclarations offered, functionCall parsed, functionCall/functionResponse parts sent back, usage" {
	serve "$(cat <<JSON
{"/v1beta/models/m-x:generateContent":[{"expect":[
  "[d['name'] for d in b['tools'][0]['functionDeclarations']] == $NAMES and len(b['tools']) == 1",
  "all(set(d) == {'name','description','parameters'} for d in b['tools'][0]['functionDeclarations'])",
  "b['generationConfig'] == {'maxOutputTokens':1234}",
  "b['system_instruction'] == {'parts':[{'text':'be brief'}]}",
  "b['contents'][1] == {'role':'model','parts':[{'functionCall':{'name':'read','args':{'path':'a.txt'}}},{'functionCall':{'id':'given-id','name':'done','args':{'summary':'x'}}}]}",
  "b['contents'][2] == {'role':'user','parts':[{'functionResponse':{'name':'read','response':{'result':'file body'}}},{'functionResponse':{'id':'given-id','name':'done','response':{'result':$REMINDER_PY}}}]}",
  "b['contents'][3] == {'role':'user','parts':[{'text':'go on'}]}"],
 "json":{"candidates":[{"content":{"role":"model","parts":[
  {"text":"thinking","thought":true},
  {"functionCall":{"name":"recall","args":{"mode":"lexical","query":"x"}},"thoughtSignature":"c2ln"}]}}],
  "usageMetadata":{"promptTokenCount":40,"candidatesTokenCount":5,"cachedContentTokenCount":8}}}]}
JSON
)"
	manifest "[$(ep gem gemini)]"
	export GEMINI_API_KEY=$GEMINI_KEY
	# an id numbered by sfma-model is never sent back; one gemini gave is
	native_req gemini-call-0 given-id > requests.jsonl
	model
	line 1 '.ok and .provider == "gemini" and .text == ""'
	line 1 '.toolCalls == [{"id":"gemini-call-0","name":"recall","input":{"mode":"lexical","query":"x"}}]'
	line 1 '.native == [{"functionCall":{"name":"recall","args":{"mode":"lexical","query":"x"}},"thoughtSignature":"c2ln"}]'
	line 1 '.usage == {"inputTokens":40,"outputTokens":5,"cachedInputTokens":8}'
	logged 1 ".query == \"key=$GEMINI_KEY\""
	secret_free
}

@test "codex: tools offered, function_call items parsed, function_call/function_call_output items sent back, usage" {
	item='{"type":"function_call","id":"fc_1","call_id":"call_z","name":"done","arguments":"{\"summary\":\"ok\"}"}'
	serve "$(cat <<JSON
{"/responses":[{"expect":[
  "[t['name'] for t in b['tools']] == $NAMES",
  "all(t['type'] == 'function' and t['strict'] is False and set(t) == {'type','name','description','parameters','strict'} for t in b['tools'])",
  "'max_output_tokens' not in b and b['stream'] is True and b['store'] is False and b['instructions'] == 'be brief'",
  "[i['type'] for i in b['input']] == ['message','function_call','function_call','function_call_output','function_call_output','message']",
  "b['input'][1] == {'type':'function_call','call_id':'call_a','name':'read','arguments':json.dumps({'path':'a.txt'},separators=(',',':'))}",
  "b['input'][3] == {'type':'function_call_output','call_id':'call_a','output':'file body'}",
  "b['input'][4] == {'type':'function_call_output','call_id':'call_b','output':$REMINDER_PY}",
  "b['input'][5]['role'] == 'user' and b['input'][5]['content'][0]['text'] == 'go on'"],
 "sse":[{"type":"response.created","response":{}},
        {"type":"response.output_item.added","item":{"type":"function_call","call_id":"call_z","name":"done","arguments":""}},
        {"type":"response.function_call_arguments.delta","delta":"{\"summary\":"},
        {"type":"response.output_item.done","item":$item},
        {"type":"response.completed","response":{"output":[$item],
          "usage":{"input_tokens":70,"output_tokens":9,"input_tokens_details":{"cached_tokens":3}}}}]}]}
JSON
)"
	manifest "[$(ep cx codex)]"
	export OPENAI_CODEX_TOKEN=$CODEX_TOKEN OPENAI_CODEX_ACCOUNT=acct-42
	native_req call_a call_b > requests.jsonl
	model
	line 1 '.ok and .provider == "codex" and .text == ""'
	line 1 '.toolCalls == [{"id":"call_z","name":"done","input":{"summary":"ok"}}]'
	line 1 ".native == [$item]"
	line 1 '.usage == {"inputTokens":70,"outputTokens":9,"cachedInputTokens":3}'
	secret_free
}

@test "a text reply to a native request is text, without toolCalls" {
	serve '{"/v1/messages":[{"json":{"content":[{"type":"text","text":"part one, "},{"type":"text","text":"part two"}],"usage":{"input_tokens":3,"output_tokens":4}}}]}'
	manifest "[$(ep claude anthropic)]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	req 1 mechanical 3 10000 '.tools = true' > requests.jsonl
	model
	line 1 '.ok and .text == "part one, part two" and (has("toolCalls") | not) and (has("native") | not)'
	line 1 '.usage == {"inputTokens":3,"outputTokens":4}'
}

@test "tools false (the bootstrap) or absent: no tools in the request, and the default maxOutputTokens" {
	serve '{"/v1/messages":[{"expect":["\"tools\" not in b","b[\"max_tokens\"] == 4096"],"json":{"content":[{"type":"text","text":"{}"}]}}],
	        "/v1/chat/completions":[{"expect":["\"tools\" not in b","b[\"max_completion_tokens\"] == 4096"],"json":{"choices":[{"message":{"content":"{}"}}]}}],
	        "/v1beta/models/g:generateContent":[{"expect":["\"tools\" not in b","b[\"generationConfig\"] == {\"maxOutputTokens\":4096}"],"json":{"candidates":[{"content":{"parts":[{"text":"{}"}]}}]}}]}'
	manifest "[{\"name\":\"a\",\"provider\":\"anthropic\",\"model\":\"c\",\"baseUrl\":\"$BASE\"},
	           {\"name\":\"o\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE\"},
	           {\"name\":\"g\",\"provider\":\"gemini\",\"model\":\"g\",\"baseUrl\":\"$BASE\"}]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY OPENAI_API_KEY=$OPENAI_KEY GEMINI_API_KEY=$GEMINI_KEY
	{
		req 1 reasoning 1 10000 '.tools = false'
		req 2 reasoning 1 10000 '.state = {"a":{"calls":0,"failures":0,"downUntil":9999999999999},"g":{"calls":0,"failures":0,"downUntil":9999999999999}}'
		req 3 reasoning 1 10000 '.state = {"a":{"calls":0,"failures":0,"downUntil":9999999999999},"o":{"calls":0,"failures":0,"downUntil":9999999999999}}'
	} > requests.jsonl
	model
	line 1 '.ok and .endpoint == "a" and .text == "{}"'
	line 2 '.ok and .endpoint == "o"'
	line 3 '.ok and .endpoint == "g"'
}

@test "toolProtocol text: no tools sent, calls and results rendered as text, the reply stays text" {
	serve '{"/v1/chat/completions":[{"expect":["\"tools\" not in b",
		"b[\"messages\"][2] == {\"role\":\"assistant\",\"content\":\"{\\\"path\\\":\\\"a.txt\\\",\\\"tool\\\":\\\"read\\\"}\"}",
		"b[\"messages\"][3] == {\"role\":\"user\",\"content\":\"file body\"}",
		"b[\"messages\"][4] == {\"role\":\"user\",\"content\":\"go on\"} and len(b[\"messages\"]) == 5"],
		"json":{"choices":[{"message":{"content":"{\"tool\":\"done\",\"summary\":\"ok\"}",
		  "tool_calls":[{"id":"x","type":"function","function":{"name":"read","arguments":"{}"}}]}}]}}]}'
	manifest "[$(ep local openai ',"toolProtocol":"text"')]"
	export OPENAI_API_KEY=$OPENAI_KEY
	native_req c1 c2 > requests.jsonl
	model
	line 1 '.ok and .text == "{\"tool\":\"done\",\"summary\":\"ok\"}" and (has("toolCalls") | not) and (has("native") | not)'
}

@test "an assistant message with text and calls keeps its text in the text protocol; a mock endpoint is text" {
	serve '{"/v1/messages":[{"expect":["\"tools\" not in b",
		"b[\"messages\"][1] == {\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"let me look\"}]}"],
		"json":{"content":[{"type":"text","text":"ok"}]}}]}'
	manifest "[$(ep t anthropic ',"toolProtocol":"text"'),{\"name\":\"m\",\"provider\":\"mock\",\"model\":\"m\"}]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	{
		native_req c1 c2 | jq -c '.messages[1].content = "let me look"'
		native_req c1 c2 | jq -c '.state = {"t":{"calls":0,"failures":0,"downUntil":9999999999999}}'
	} > requests.jsonl
	export SFMA_MOCK='[{"tool":"done","summary":"s"}]'
	model
	line 1 '.ok and .endpoint == "t" and .text == "ok"'
	line 2 '.ok and .endpoint == "m" and .provider == "mock" and .text == "{\"summary\":\"s\",\"tool\":\"done\"}" and (has("toolCalls") | not)'
	# a mock request weighs the canonical {system, messages} (and tools when offered)
	native_req c1 c2 | jq -c '.tools = false | .state = {"t":{"calls":0,"failures":0,"downUntil":9999999999999}}' > requests.jsonl
	want=$(python3 -c 'import json, sys; r = json.load(sys.stdin)
print(len(json.dumps({"system": r["system"], "messages": r["messages"]}, sort_keys=True,
                     separators=(",", ":"), ensure_ascii=False).encode()))' < requests.jsonl)
	with_tools=$(jq '.calls[0].requestBytes' <(sed -n 2p out.jsonl))
	model
	line 1 ".ok and .endpoint == \"m\" and .calls[0].requestBytes == $want"
	[ "$with_tools" -gt $((want + 1000)) ]
}

# A mock request is weighed without being written out (canon_size): still
# to the byte the canonical text sfma-verify --canonicalize makes of it,
# escapes, raw unicode and numbers in every part of the conversation.
@test "a mock request weighs its canonical {messages, system, tools} to the byte, tools offered or not" {
	manifest '[{"name":"m","provider":"mock","model":"m"}]'
	export SFMA_MOCK='["a","b"]'
	local msgs
	msgs=$(native_messages c1 c2 | jq -c '.[0].content = "tab\there \u0001\u001f \u2028 ﬁ é 😀 \\ \"q\"" |
		.[1].toolCalls[0].input = {"path":"dir/é\u0000\n","n":[0.1,1e21,-0,5e-324,1e-7,123456789012345678,1.5,-2]}')
	{
		req 1 mechanical 3 10000 ".messages = $msgs | .system = \"s\\u0000ÿs \\\"\""
		req 2 mechanical 3 10000 ".messages = $msgs | .tools = true"
	} > requests.jsonl
	model
	local plain tools
	plain=$(sed -n 1p requests.jsonl | jq -c '{messages, system}' | sfma-verify --canonicalize | head -c -1 | wc -c)
	tools=$(sed -n 2p requests.jsonl | jq -c --argjson t "$(sfma-plan --tools)" '{messages, system, tools: $t}' |
		sfma-verify --canonicalize | head -c -1 | wc -c)
	line 1 ".ok and .calls[0].requestBytes == $plain"
	line 2 ".ok and .calls[0].requestBytes == $tools"
	[ "$tools" -gt $((plain + 1000)) ]
}

@test "bad native replies are a clear error (reply class), never a crash, and fail over" {
	serve '{"/v1/chat/completions":[
		{"json":{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"read","arguments":"{not json"}}]}}]}},
		{"json":{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"arguments":"{}"}}]}}]}},
		{"json":{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"read","arguments":"[1,2]"}}]}}]}},
		{"json":{"choices":[{"message":{"content":null,"tool_calls":"read"}}]}},
		{"json":{"choices":[{"message":{"content":null}}]}}],
	        "/v1/messages":[{"json":{"content":[{"type":"tool_use","id":"t","input":{}}]}},
		{"json":{"content":[{"type":"tool_use","id":"t","name":"read","input":"path"}]}}],
	        "/v1beta/models/m-x:generateContent":[{"json":{"candidates":[{"content":{"parts":[{"functionCall":{"args":{}}}]}}]}},
		{"json":{"candidates":[{"content":{"parts":[{"functionCall":{"name":"run","args":"ls"}}]}}]}}],
	        "/responses":[{"sse":[{"type":"response.output_item.done","item":{"type":"function_call","name":"done","arguments":"{}"}}]}]}'
	manifest "[$(ep o openai),$(ep a anthropic),$(ep g gemini),$(ep c codex)]"
	export OPENAI_API_KEY=$OPENAI_KEY ANTHROPIC_API_KEY=$ANTHROPIC_KEY GEMINI_API_KEY=$GEMINI_KEY
	export OPENAI_CODEX_TOKEN=$CODEX_TOKEN OPENAI_CODEX_ACCOUNT=acct
	only() { # only NAME: a state that leaves only endpoint NAME up
		local s='{}' n
		for n in o a g c; do
			[ "$n" = "$1" ] || s=$(jq -c --arg n "$n" '.[$n] = {"calls":0,"failures":0,"downUntil":9999999999999}' <<< "$s")
		done
		echo "$s"
	}
	for i in 1 2 3 4 5; do req $i mechanical 1 10000 ".tools = true | .state = $(only o)"; done > requests.jsonl
	for i in 6 7; do req $i mechanical 1 10000 ".tools = true | .state = $(only a)"; done >> requests.jsonl
	for i in 8 9; do req $i mechanical 1 10000 ".tools = true | .state = $(only g)"; done >> requests.jsonl
	req 10 mechanical 1 10000 ".tools = true | .state = $(only c)" >> requests.jsonl
	# and one with every endpoint up: the bad reply fails over to the next
	req 11 mechanical 4 10000 '.tools = true | .state = {}' >> requests.jsonl
	run model
	[ "$status" -eq 0 ]
	[ "$(wc -l < out.jsonl)" -eq 11 ]
	line 1 '.error == "o: bad tool call: call 0: arguments are not a JSON object" and .calls[0].errorClass == "reply" and .calls[0].status == 200'
	line 2 '.error == "o: bad tool call: call 0: a tool call needs an id and a function name"'
	line 3 '.error == "o: bad tool call: call 0: arguments are not a JSON object"'
	line 4 '.error == "o: bad tool call: tool_calls is not an array"'
	line 5 '.error == "o: reply has neither text nor a tool call"'
	line 6 '.error == "a: bad tool call: call 0: a tool_use block needs an id and a name"'
	line 7 '.error == "a: bad tool call: call 0: input is not a JSON object"'
	line 8 '.error == "g: bad tool call: call 0: a functionCall needs a name"'
	line 9 '.error == "g: bad tool call: call 0: args is not a JSON object"'
	line 10 '.error == "c: bad tool call: call 0: a function_call needs a call_id and a name"'
	line 11 '(.ok | not) and ([.calls[] | .errorClass] == ["reply","reply","reply","reply"]) and (.error | startswith("all 4 usable endpoints failed"))'
	secret_free
}

@test "malformed tool messages in a request are a bad request, answered in step" {
	manifest '[{"name":"m","provider":"mock","model":"x"}]'
	calls='{"role":"assistant","content":"","toolCalls":[{"id":"a","name":"read","input":{"path":"p"}}]}'
	{
		req 1 mechanical 1 10000 '.messages = [{"role":"user","content":"x"},{"role":"tool","results":[{"id":"a","name":"read","content":"r"}]}]'
		req 2 mechanical 1 10000 ".messages = [{\"role\":\"user\",\"content\":\"x\"},$calls,{\"role\":\"tool\",\"results\":[]}]"
		req 3 mechanical 1 10000 ".messages = [{\"role\":\"user\",\"content\":\"x\"},$calls,{\"role\":\"tool\",\"results\":[{\"id\":\"b\",\"name\":\"read\",\"content\":\"r\"}]}]"
		req 4 mechanical 1 10000 ".messages = [{\"role\":\"user\",\"content\":\"x\"},$calls,{\"role\":\"tool\",\"results\":[{\"id\":\"a\",\"name\":\"read\",\"content\":\"r\"},{\"id\":\"a\",\"name\":\"read\",\"content\":\"r\"}]}]"
		req 5 mechanical 1 10000 '.messages = [{"role":"assistant","content":"","toolCalls":[{"id":"a","name":"read","input":"p"}]}]'
		req 6 mechanical 1 10000 '.messages = [{"role":"user","content":"x","toolCalls":[{"id":"a","name":"read","input":{}}]}]'
		req 7 mechanical 1 10000 '.tools = "yes"'
		req 8 mechanical 1 10000 ".tools = true | .messages = [{\"role\":\"user\",\"content\":\"x\"},$calls,{\"role\":\"tool\",\"results\":[{\"id\":\"a\",\"name\":\"read\",\"content\":\"r\"}]}]"
	} > requests.jsonl
	model
	line 1 '.id == 1 and .error == "bad request: messages[1]: a tool message must follow an assistant message with toolCalls"'
	line 2 '.error == "bad request: messages[2].results must be a non-empty array"'
	line 3 '.error == "bad request: messages[2].results[0].id is not the id of tool call 0"'
	line 4 '.error == "bad request: messages[2]: 2 results for 1 tool calls"'
	line 5 '.error | startswith("bad request: messages[0].toolCalls[0] must be")'
	line 6 '.error == "bad request: messages[0]: only an assistant message has toolCalls"'
	line 7 '.error == "bad request: tools must be true or false"'
	line 8 '.id == 8 and .ok'
}

@test "no leaks with native calls, bad native replies, retries and downs (valgrind, or the sanitizer's leak check)" {
	item='{"type":"function_call","call_id":"c9","name":"done","arguments":"{}"}'
	serve "{\"/v1/messages\":[{\"status\":429,\"headers\":{\"retry-after-ms\":\"5\"}},{\"json\":{\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"read\",\"input\":{\"path\":\"p\"}}],\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}],
	        \"/v1/chat/completions\":[{\"json\":{\"choices\":[{\"message\":{\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"run\",\"arguments\":\"{bad\"}}]}}]}},{\"drop\":true}],
	        \"/v1beta/models/m-x:generateContent\":[{\"json\":{\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"done\",\"args\":{}}}]}}]}}],
	        \"/responses\":[{\"sse\":[{\"type\":\"response.output_item.done\",\"item\":$item},{\"type\":\"response.completed\",\"response\":{\"output\":[$item],\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}]}]}"
	manifest "[$(ep a anthropic),$(ep o openai),$(ep g gemini),$(ep c codex)]"
	export OPENAI_API_KEY=$OPENAI_KEY ANTHROPIC_API_KEY=$ANTHROPIC_KEY GEMINI_API_KEY=$GEMINI_KEY
	export OPENAI_CODEX_TOKEN=$CODEX_TOKEN OPENAI_CODEX_ACCOUNT=acct
	down='{"calls":0,"failures":0,"downUntil":9999999999999}'
	{
		native_req t1 t2
		native_req t1 t2 | jq -c ".state = {\"a\":$down}"
		native_req t1 t2 | jq -c ".state = {\"a\":$down,\"o\":$down}"
		native_req t1 t2 | jq -c ".state = {\"a\":$down,\"o\":$down,\"g\":$down}"
		native_req t1 t2 | jq -c ".state = {\"a\":$down,\"o\":$down,\"g\":$down,\"c\":$down}"
		echo junk
	} > requests.jsonl
	if [ -n "${SFMA_SANITIZED:-}" ]; then
		python3 "$REPO/tests/fixtures/model/feed.py" sfma-model m.json < requests.jsonl > out.jsonl 2> err.txt
	else
		require valgrind
		python3 "$REPO/tests/fixtures/model/feed.py" valgrind -q --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
			--error-exitcode=97 sfma-model m.json < requests.jsonl > out.jsonl 2> err.txt || {
			cat err.txt >&2
			return 1
		}
	fi
	[ "$(wc -l < out.jsonl)" -eq 6 ]
	line 1 '.ok and .endpoint == "a" and .toolCalls[0].name == "read" and [.calls[] | .status] == [429,200]'
	line 2 '.ok and .endpoint == "g" and [.calls[] | .errorClass] == ["reply",null]'
	line 3 '.ok and .endpoint == "g"'
	line 4 '.ok and .endpoint == "c" and .toolCalls[0].id == "c9"'
	line 5 '.error | startswith("all endpoints down until ")'
	secret_free
}

@test "gemini: a call's thoughtSignature goes back with that call in the next request of the run" {
	serve "$(cat <<'JSON'
{"/v1beta/models/m-x:generateContent":[
 {"json":{"candidates":[{"content":{"role":"model","parts":[
   {"functionCall":{"name":"read","args":{"path":"a.txt"}},"thoughtSignature":"U0lHLTE="},
   {"functionCall":{"name":"done","args":{"summary":"x"}}}]}}]}},
 {"expect":[
   "b['contents'][1]['parts'][0] == {'functionCall':{'name':'read','args':{'path':'a.txt'}},'thoughtSignature':'U0lHLTE='}",
   "b['contents'][1]['parts'][1] == {'functionCall':{'name':'done','args':{'summary':'x'}}}"],
  "json":{"candidates":[{"content":{"role":"model","parts":[{"text":"fine"}]}}]}}]}
JSON
)"
	manifest "[$(ep gem gemini)]"
	export GEMINI_API_KEY=$GEMINI_KEY
	{ req 1 mechanical 1 10000 '.tools = true'; native_req gemini-call-0 gemini-call-1; } > requests.jsonl
	model
	line 1 '.ok and [.toolCalls[] | .id] == ["gemini-call-0","gemini-call-1"]'
	line 2 '.ok and .text == "fine"'
}

@test "a key a server echoes in a 200 answer, text or tool call, never reaches the reply" {
	serve "{\"/v1/chat/completions\":[
		{\"json\":{\"choices\":[{\"message\":{\"content\":\"your key is $OPENAI_KEY, ok\"}}]}},
		{\"json\":{\"choices\":[{\"message\":{\"content\":\"k=$OPENAI_KEY\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"notify\",\"arguments\":\"{\\\"text\\\":\\\"$OPENAI_KEY\\\"}\"}}]}}]}}],
	        \"/responses\":[{\"sse\":[{\"type\":\"response.output_text.delta\",\"delta\":\"$CODEX_TOKEN\"}]}]}"
	manifest "[$(ep o openai),$(ep c codex)]"
	export OPENAI_API_KEY=$OPENAI_KEY OPENAI_CODEX_TOKEN=$CODEX_TOKEN OPENAI_CODEX_ACCOUNT=acct
	{
		req 1 mechanical 1
		req 2 mechanical 1 10000 '.tools = true'
		req 3 mechanical 1 10000 '.state = {"o":{"calls":0,"failures":0,"downUntil":9999999999999}}'
	} > requests.jsonl
	model
	line 1 '.ok and .text == "your key is [redacted], ok"'
	line 2 '.ok and .text == "k=[redacted]" and .toolCalls == [{"id":"c","name":"notify","input":{"text":"[redacted]"}}]'
	line 2 '.native[0].function.arguments == "{\"text\":\"[redacted]\"}"'
	line 3 '.ok and .text == "[redacted]"'
	secret_free
}

@test "one connection per endpoint, kept across calls and across a failed attempt" {
	serve '{"/a/v1/chat/completions":[{"json":{"choices":[{"message":{"content":"a"}}]}},{"status":500,"body":"x"},{"json":{"choices":[{"message":{"content":"a"}}]}}],
	        "/b/v1/chat/completions":[{"json":{"choices":[{"message":{"content":"b"}}]}}]}'
	manifest "[{\"name\":\"a\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/a\"},
	           {\"name\":\"b\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/b\",\"priors\":{\"reasoning\":0,\"mechanical\":0}}]"
	export OPENAI_API_KEY=$OPENAI_KEY
	{
		req 1 mechanical 3; req 2 mechanical 3; req 3 mechanical 3
		req 4 mechanical 3 10000 '.state = {"a":{"calls":0,"failures":0,"downUntil":9999999999999}}'
		req 5 mechanical 3 10000 '.state = {"a":{"calls":0,"failures":0,"downUntil":9999999999999}}'
	} > requests.jsonl
	model
	line 2 '.ok and [.calls[] | .status] == [500,200]'
	line 5 '.ok and .endpoint == "b"'
	[ "$(jq -r 'select(.path == "/a/v1/chat/completions") | .peer' log.jsonl | sort -u | wc -l)" -eq 1 ]
	[ "$(jq -r 'select(.path == "/b/v1/chat/completions") | .peer' log.jsonl | sort -u | wc -l)" -eq 1 ]
	[ "$(jq -r .peer log.jsonl | sort -u | wc -l)" -eq 2 ]
	[ "$(wc -l < log.jsonl)" -eq 6 ]
}
