#!/usr/bin/env bats
# sfma-model: the request/reply protocol, the mock, every provider against a
# fake server on 127.0.0.1, OAuth, failover, bounds, and secret hygiene.

load helpers
bats_require_minimum_version 1.5.0

load fixtures/model/helpers

# Beyond the provider keys of fixtures/model/helpers: the OAuth secrets.
CLIENT_SECRET=client-secret-Hy64sR5secretE
ISSUED_TOKEN=issued-bearer-Jk55tY6secretF

setup() {
	model_setup
}

teardown() {
	model_teardown
}

# manifest ENDPOINTS [OUTPUTS] [ALLOWED]
manifest() {
	jq -n --argjson eps "$1" --argjson outs "${2:-[\"out.txt\"]}" --argjson allowed "${3:-[\"echo\"]}" \
		'{name:"probe",workspace:"ws",modelEndpoints:$eps,allowedCommands:$allowed,
		  inputs:[],outputs:$outs,maxTurns:4,dryRunDefault:true}' > m.json
}

# req ID CLASS CALLS_LEFT [DEADLINE_IN_MS]: one request line.
req() {
	local deadline=$(( $(date +%s%3N) + ${4:-10000} ))
	jq -cn --argjson id "$1" --arg c "$2" --argjson n "$3" --argjson d "$deadline" \
		'{id:$id,system:"be brief",class:$c,deadlineMs:$d,callsLeft:$n,
		  messages:[{role:"user",content:"hello"},{role:"assistant",content:"hi"},{role:"user",content:"go on"}]}'
}

# model: run the stage on requests.jsonl, one request at a time (each
# sent after the reply to the one before, as a single loop does: replies
# come in request order); output in out.jsonl, err.txt.
model() {
	python3 "$REPO/tests/fixtures/model/feed.py" sfma-model m.json < requests.jsonl > out.jsonl 2> err.txt
}

# No key, token or client secret anywhere in what the stage printed.
secret_free() {
	local s
	for s in "$ANTHROPIC_KEY" "$OPENAI_KEY" "$GEMINI_KEY" "$CODEX_TOKEN" "$CLIENT_SECRET" "$ISSUED_TOKEN"; do
		if grep -rqF -- "$s" out.jsonl err.txt; then
			echo "secret $s leaked:" >&2
			cat out.jsonl err.txt >&2
			return 1
		fi
	done
}

# line N QUERY: jq -e QUERY on the Nth reply line.
line() {
	sed -n "${1}p" out.jsonl | jq -e "$2" >/dev/null || {
		echo "line $1 fails $2:" >&2
		sed -n "${1}p" out.jsonl >&2
		return 1
	}
}

# logged N QUERY: jq -e QUERY on the Nth request the fake server received.
logged() {
	sed -n "${1}p" log.jsonl | jq -e "$2" >/dev/null || {
		echo "request $1 fails $2:" >&2
		sed -n "${1}p" log.jsonl >&2
		return 1
	}
}

OPENAI_OK='{"json":{"choices":[{"message":{"role":"assistant","content":"openai says hi"}}]}}'

# ---- mock --------------------------------------------------------------

@test "mock default script: candidate for reasoning, then every output, echo, done" {
	manifest '[{"name":"m","provider":"mock","model":"x"}]' '["notes/a.txt","data.json"]'
	{ req 1 reasoning 5; for i in 2 3 4 5 6; do req $i mechanical 5; done; } > requests.jsonl
	model
	[ "$(wc -l < out.jsonl)" -eq 6 ]
	line 1 '.id == 1 and .ok and .endpoint == "m"'
	line 1 '.text | fromjson | (.mission | test("probe")) and .successCriteria == ["notes/a.txt exists and names the task","data.json exists and names the task"] and .schedule == [] and .loopRoles[0].name == "worker" and ([.firstTasks[].description] == ["write notes/a.txt","write data.json"]) and .firstTasks[0].class == "mechanical"'
	line 2 '.text | fromjson | .tool == "write" and .path == "notes/a.txt" and (.content | test("probe") and test("notes/a.txt"))'
	line 3 '.text | fromjson | .tool == "write" and .path == "data.json" and (.content | fromjson) == {"file":"data.json","task":"probe"}'
	line 4 '.text | fromjson == {"tool":"run","cmd":"echo hello from the sandbox"}'
	line 5 '.text | fromjson | .tool == "done"'
	line 6 '.text | fromjson | .tool == "done"'
	line 6 '.calls == [{"endpoint":"m","class":"mechanical","latencyMs":.calls[0].latencyMs,"ok":true,"status":null,"waitMs":0,"requestBytes":.calls[0].requestBytes}] and .calls[0].requestBytes > 0 and .provider == "mock"'
	line 6 '.endpoints.m.calls == 6 and .endpoints.m.failures == 0 and (.endpoints.m.latencyMsEwma | type) == "number"'
}

@test "mock default script skips the echo step when echo is not allowed" {
	manifest '[{"name":"m","provider":"mock","model":"x"}]' '["out.txt"]' '["ls"]'
	{ req 1 mechanical 5; req 2 mechanical 5; } > requests.jsonl
	model
	line 1 '.text | fromjson | .tool == "write"'
	line 2 '.text | fromjson | .tool == "done"'
}

@test "SFMA_MOCK: strings verbatim, objects canonical, then queue exhausted" {
	manifest '[{"name":"m","provider":"mock","model":"x"}]'
	export SFMA_MOCK='["```json\n{\"tool\":\"done\"}\n```",{"tool":"write","path":"out.txt","content":"é"}]'
	{ req 1 reasoning 5; req 2 mechanical 5; req 3 mechanical 5; } > requests.jsonl
	model
	line 1 '.text == "```json\n{\"tool\":\"done\"}\n```"'
	line 2 '.text == "{\"content\":\"é\",\"path\":\"out.txt\",\"tool\":\"write\"}"'
	line 3 '.text == "{\"summary\":\"mock queue exhausted\",\"tool\":\"done\"}"'
}

@test "an invalid SFMA_MOCK is a clear error" {
	manifest '[{"name":"m","provider":"mock","model":"x"}]'
	SFMA_MOCK='{"tool":"done"}' run sfma-model m.json < /dev/null
	[ "$status" -eq 2 ]
	[[ "$output" == *"SFMA_MOCK: must be a JSON array"* ]]
	SFMA_MOCK='[1,2]' run sfma-model m.json < /dev/null
	[ "$status" -eq 2 ]
	[[ "$output" == *"SFMA_MOCK[0]"* ]]
	SFMA_MOCK='[' run sfma-model m.json < /dev/null
	[ "$status" -eq 2 ]
	[[ "$output" == *"SFMA_MOCK: invalid JSON"* ]]
}

# ---- providers ---------------------------------------------------------

@test "anthropic: exact request and reply parsing" {
	serve '{"/v1/messages":[{"json":{"content":[{"type":"text","text":"claude says hi"}]}}]}'
	manifest "[{\"name\":\"claude\",\"provider\":\"anthropic\",\"model\":\"claude-x\",\"baseUrl\":\"$BASE/\"}]"
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	req 1 reasoning 3 > requests.jsonl
	model
	line 1 '.ok and .text == "claude says hi" and .endpoint == "claude"'
	line 1 '.calls | length == 1 and .[0].ok and .[0].endpoint == "claude" and .[0].class == "reasoning"'
	logged 1 '.path == "/v1/messages" and .query == ""'
	logged 1 ".headers[\"x-api-key\"] == \"$ANTHROPIC_KEY\" and .headers[\"anthropic-version\"] == \"2023-06-01\""
	logged 1 '.headers["content-type"] == "application/json" and (.headers | has("authorization") | not)'
	logged 1 '.body | fromjson | .model == "claude-x" and (.max_tokens | type) == "number" and .system == [{"type":"text","text":"be brief","cache_control":{"type":"ephemeral"}}]'
	# every content is blocks (a message reads the same in every later request), the newest one marked for the cache
	logged 1 '.body | fromjson | .messages == [{"role":"user","content":[{"type":"text","text":"hello"}]},{"role":"assistant","content":[{"type":"text","text":"hi"}]},{"role":"user","content":[{"type":"text","text":"go on","cache_control":{"type":"ephemeral"}}]}]'
	secret_free
}

@test "openai: exact request and reply parsing" {
	serve "{\"/v1/chat/completions\":[$OPENAI_OK]}"
	manifest "[{\"name\":\"gpt\",\"provider\":\"openai\",\"model\":\"gpt-x\",\"baseUrl\":\"$BASE\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY
	req '"r1"' mechanical 3 > requests.jsonl
	model
	line 1 '.id == "r1" and .ok and .text == "openai says hi" and .endpoint == "gpt"'
	logged 1 ".path == \"/v1/chat/completions\" and .headers.authorization == \"Bearer $OPENAI_KEY\""
	logged 1 '.body | fromjson | .model == "gpt-x" and .messages == [{"role":"system","content":"be brief"},{"role":"user","content":"hello"},{"role":"assistant","content":"hi"},{"role":"user","content":"go on"}]'
	secret_free
}

@test "gemini: exact request, key in the query only, reply parsing" {
	serve '{"/v1beta/models/gem-x:generateContent":[{"json":{"candidates":[{"content":{"role":"model","parts":[{"text":"gemini says hi"}]}}]}}]}'
	manifest "[{\"name\":\"gem\",\"provider\":\"gemini\",\"model\":\"gem-x\",\"baseUrl\":\"$BASE\"}]"
	export GEMINI_API_KEY=$GEMINI_KEY
	req 1 mechanical 3 > requests.jsonl
	model
	line 1 '.ok and .text == "gemini says hi"'
	logged 1 ".path == \"/v1beta/models/gem-x:generateContent\" and .query == \"key=$GEMINI_KEY\""
	logged 1 '.headers | has("authorization") | not'
	logged 1 '.body | fromjson | .system_instruction == {"parts":[{"text":"be brief"}]}'
	logged 1 '.body | fromjson | .contents == [{"role":"user","parts":[{"text":"hello"}]},{"role":"model","parts":[{"text":"hi"}]},{"role":"user","parts":[{"text":"go on"}]}]'
	secret_free
}

@test "codex: SSE request; the text split over delta events (and mid-event writes)" {
	serve '{"/responses":[{"split":true,"sse":[
		{"type":"response.created","response":{}},
		{"type":"response.output_text.delta","delta":"{\"tool\":"},
		{"type":"response.output_text.delta","delta":"\"done\",\"summary\":"},
		{"type":"response.output_text.delta","delta":"\"ok ✓\"}"},
		{"type":"response.completed","response":{"output":[{"type":"message","content":[{"type":"output_text","text":"IGNORED"}]}]}}]}]}'
	manifest "[{\"name\":\"cx\",\"provider\":\"codex\",\"model\":\"codex-x\",\"baseUrl\":\"$BASE\"}]"
	export OPENAI_CODEX_TOKEN=$CODEX_TOKEN OPENAI_CODEX_ACCOUNT=acct-42
	req 1 mechanical 3 > requests.jsonl
	model
	line 1 '.ok and .text == "{\"tool\":\"done\",\"summary\":\"ok ✓\"}"'
	logged 1 ".path == \"/responses\" and .headers.authorization == \"Bearer $CODEX_TOKEN\""
	logged 1 '.headers["chatgpt-account-id"] == "acct-42" and .headers["openai-beta"] == "responses=experimental"'
	logged 1 '.body | fromjson | .model == "codex-x" and .instructions == "be brief" and .store == false and .stream == true'
	logged 1 '.body | fromjson | .input | length == 3 and .[0].role == "user" and .[0].content[0].text == "hello" and .[1].role == "assistant"'
	secret_free
}

@test "codex: the response.completed-only form" {
	serve '{"/responses":[{"sse":[
		{"type":"response.created","response":{}},
		{"type":"response.completed","response":{"output":[
			{"type":"reasoning","summary":[]},
			{"type":"message","content":[{"type":"output_text","text":"part one, "},{"type":"output_text","text":"part two"}]}]}}]}]}'
	manifest "[{\"name\":\"cx\",\"provider\":\"codex\",\"model\":\"codex-x\",\"baseUrl\":\"$BASE\"}]"
	export OPENAI_CODEX_TOKEN=$CODEX_TOKEN OPENAI_CODEX_ACCOUNT=acct-42
	req 1 mechanical 3 > requests.jsonl
	model
	line 1 '.ok and .text == "part one, part two"'
}

@test "codex: a stream without text, or a failed response, is an error" {
	serve '{"/responses":[
		{"sse":[{"type":"response.created","response":{}}]},
		{"sse":[{"type":"response.failed","response":{"error":{"message":"overloaded"}}}]}]}'
	manifest "[{\"name\":\"cx\",\"provider\":\"codex\",\"model\":\"codex-x\",\"baseUrl\":\"$BASE\"}]"
	export OPENAI_CODEX_TOKEN=$CODEX_TOKEN OPENAI_CODEX_ACCOUNT=acct-42
	{ req 1 mechanical 3; req 2 mechanical 3; } > requests.jsonl
	model
	line 1 '(.ok | not) and .error == "cx: no output text in event stream"'
	line 2 '(.ok | not) and .error == "cx: stream failed: overloaded"'
}

# ---- OAuth -------------------------------------------------------------

oauth_endpoint() { # oauth_endpoint NAME [SCOPE]
	printf '{"name":"%s","provider":"openai","model":"gpt-x","baseUrl":"%s","auth":{"type":"oauth2-client-credentials","tokenUrl":"%s/token","clientIdEnv":"PROBE_CLIENT_ID","clientSecretEnv":"PROBE_CLIENT_SECRET","scope":"models.read"}}' "$1" "$BASE" "$BASE"
}

@test "oauth: three calls cost one token request and all carry the bearer token" {
	serve "{\"/token\":[{\"json\":{\"access_token\":\"$ISSUED_TOKEN\",\"token_type\":\"Bearer\",\"expires_in\":3600}}],
	        \"/v1/chat/completions\":[$OPENAI_OK]}"
	manifest "[$(oauth_endpoint corp)]"
	export PROBE_CLIENT_ID=probe-client PROBE_CLIENT_SECRET=$CLIENT_SECRET
	{ req 1 reasoning 3; req 2 mechanical 3; req 3 mechanical 3; } > requests.jsonl
	model
	for i in 1 2 3; do line $i '.ok and .text == "openai says hi"'; done
	[ "$(jq -r .path log.jsonl | grep -c '^/token$')" -eq 1 ]
	[ "$(jq -r .path log.jsonl | grep -c '^/v1/chat/completions$')" -eq 3 ]
	logged 1 '.path == "/token" and .headers["content-type"] == "application/x-www-form-urlencoded"'
	logged 1 ".body | split(\"&\") | sort == [\"client_id=probe-client\",\"client_secret=$CLIENT_SECRET\",\"grant_type=client_credentials\",\"scope=models.read\"]"
	for i in 2 3 4; do logged $i ".headers.authorization == \"Bearer $ISSUED_TOKEN\""; done
	secret_free
}

@test "oauth: a token within 60 s of expiry is fetched anew" {
	serve "{\"/token\":[{\"json\":{\"access_token\":\"$ISSUED_TOKEN\",\"expires_in\":45}},
	                    {\"json\":{\"access_token\":\"second-token-Ab12\",\"expires_in\":3600}}],
	        \"/v1/chat/completions\":[$OPENAI_OK]}"
	manifest "[$(oauth_endpoint corp)]"
	export PROBE_CLIENT_ID=probe-client PROBE_CLIENT_SECRET=$CLIENT_SECRET
	{ req 1 mechanical 3; req 2 mechanical 3; req 3 mechanical 3; } > requests.jsonl
	model
	[ "$(jq -r .path log.jsonl | tr '\n' ' ')" = "/token /v1/chat/completions /token /v1/chat/completions /v1/chat/completions " ]
	logged 2 ".headers.authorization == \"Bearer $ISSUED_TOKEN\""
	logged 4 '.headers.authorization == "Bearer second-token-Ab12"'
	logged 5 '.headers.authorization == "Bearer second-token-Ab12"'
	secret_free
}

@test "oauth: a failing token endpoint fails over like a transport failure" {
	serve "{\"/token\":[{\"status\":500,\"body\":\"token service down; secret was $CLIENT_SECRET\"}]}"
	manifest "[$(oauth_endpoint corp),{\"name\":\"fallback\",\"provider\":\"mock\",\"model\":\"m\"}]"
	export PROBE_CLIENT_ID=probe-client PROBE_CLIENT_SECRET=$CLIENT_SECRET
	req 1 mechanical 3 > requests.jsonl
	model
	line 1 '.ok and .endpoint == "fallback" and (.calls | length) == 2'
	line 1 '.calls[0] | .endpoint == "corp" and (.ok | not) and (.error | startswith("corp: token endpoint: HTTP 500"))'
	line 1 '.calls[1] | .endpoint == "fallback" and .ok'
	line 1 '.endpoints.corp.failures == 1 and .endpoints.fallback.calls == 1'
	grep -q 'redacted' out.jsonl
	secret_free
}

@test "oauth: missing client variables make the endpoint unusable, named in the error" {
	manifest "[{\"name\":\"corp\",\"provider\":\"openai\",\"model\":\"g\",\"auth\":{\"type\":\"oauth2-client-credentials\",\"tokenUrl\":\"http://127.0.0.1:9/token\",\"clientIdEnv\":\"PROBE_CLIENT_ID\",\"clientSecretEnv\":\"PROBE_CLIENT_SECRET\"}}]"
	req 1 mechanical 3 > requests.jsonl
	model
	line 1 '.error == "no usable endpoint: set PROBE_CLIENT_ID and PROBE_CLIENT_SECRET or configure a mock endpoint" and .calls == []'
}

# ---- grid, failover, budget -------------------------------------------

@test "failover: a 400 then a success are two calls, both counted" {
	serve "{\"/a/v1/chat/completions\":[{\"status\":400,\"body\":\"{\\\"error\\\":\\\"boom\\\"}\"}],
	        \"/b/v1/chat/completions\":[$OPENAI_OK]}"
	manifest "[{\"name\":\"a\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/a\"},
	           {\"name\":\"b\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/b\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY
	req 1 mechanical 5 > requests.jsonl
	model
	line 1 '.ok and .endpoint == "b" and .text == "openai says hi"'
	line 1 '.calls | length == 2 and .[0].endpoint == "a" and (.[0].ok | not) and .[0].error == "a: HTTP 400: {\"error\":\"boom\"}" and .[1].endpoint == "b" and .[1].ok'
	line 1 '.calls[0] | .status == 400 and .errorClass == "client" and .waitMs == 0'
	line 1 '.calls | all(has("latencyMs") and .class == "mechanical")'
	line 1 '.endpoints | (.a | .calls == 1 and .failures == 1 and .latencyMsEwma == null) and (.b | .calls == 1 and .failures == 0 and (.latencyMsEwma | type) == "number")'
	secret_free
}

@test "callsLeft bounds the attempts; 0 means no call at all" {
	serve '{"/a/v1/chat/completions":[{"status":400,"body":"busy"}],"/b/v1/chat/completions":[{"status":400,"body":"busy"}]}'
	manifest "[{\"name\":\"a\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/a\"},
	           {\"name\":\"b\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/b\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY
	{ req 1 mechanical 1; req 2 mechanical 0; req 3 mechanical 2; } > requests.jsonl
	model
	line 1 '(.ok | not) and (.calls | length) == 1 and (.error | startswith("model call budget spent"))'
	line 2 '(.ok | not) and .calls == [] and .error == "model call budget spent"'
	line 3 '(.ok | not) and (.calls | length) == 2 and (.error | startswith("all 2 usable endpoints failed"))'
	[ "$(wc -l < log.jsonl)" -eq 3 ]
}

@test "ranking: priors per class, then measured state; state seeds and replaces" {
	serve "{\"/a/v1/chat/completions\":[$OPENAI_OK],\"/b/v1/chat/completions\":[$OPENAI_OK]}"
	manifest "[{\"name\":\"a\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/a\",\"priors\":{\"reasoning\":0.9,\"mechanical\":0.2}},
	           {\"name\":\"b\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/b\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY
	{
		req 1 reasoning 3
		req 2 mechanical 3
		# a measured as unreachable every time: b wins reasoning too.
		req 3 reasoning 3 | jq -c '.state = {"a":{"calls":20,"failures":20,"latencyMsEwma":null,"availability":0},"b":{"calls":4,"failures":0,"latencyMsEwma":12.5}}'
		req 4 reasoning 3 | jq -c '.state = {"a":{"calls":3,"failures":5}}'
		req 5 reasoning 3 | jq -c '.state = []'
	} > requests.jsonl
	model
	line 1 '.endpoint == "a"'
	line 2 '.endpoint == "b"'
	line 3 '.endpoint == "b" and .endpoints.a.calls == 20 and .endpoints.b.calls == 5'
	line 3 '.endpoints.b.latencyMsEwma >= 0 and .endpoints.b.latencyMsEwma != 12.5'
	line 5 '.id == 5 and (.ok | not) and .error == "bad request: state must be an object of endpoint states"'
	# A malformed entry (failures > calls) counts as unmeasured: a wins again on its prior.
	line 4 '.id == 4 and .ok and .endpoint == "a" and (.endpoints.a | .calls == 1 and .failures == 0 and .availability == 1) and .endpoints.b.calls == 0'
}

@test "latency above tuning.targetLatencyMs lowers the score" {
	manifest '[{"name":"slow","provider":"mock","model":"m"},{"name":"quick","provider":"mock","model":"m"}]'
	jq '.tuning = {"targetLatencyMs":100}' m.json > m2.json && mv m2.json m.json
	{
		req 1 mechanical 3 | jq -c '.state = {"slow":{"calls":10,"failures":0,"latencyMsEwma":1000},"quick":{"calls":10,"failures":1,"latencyMsEwma":50}}'
		req 2 mechanical 3 | jq -c '.state = {"slow":{"calls":10,"failures":0,"latencyMsEwma":90},"quick":{"calls":10,"failures":1,"latencyMsEwma":50}}'
	} > requests.jsonl
	model
	line 1 '.endpoint == "quick"'
	line 2 '.endpoint == "slow"'
}

@test "no usable endpoint names what to set" {
	manifest '[{"name":"gpt","provider":"openai","model":"g"}]'
	req 1 mechanical 3 > requests.jsonl
	model
	line 1 '(.ok | not) and .error == "no usable endpoint: set OPENAI_API_KEY or configure a mock endpoint" and .calls == []'
	manifest '[{"name":"gpt","provider":"openai","model":"g"},{"name":"cx","provider":"codex","model":"c"}]'
	model
	line 1 '.error == "no usable endpoint: set OPENAI_API_KEY or OPENAI_CODEX_TOKEN and OPENAI_CODEX_ACCOUNT, or configure a mock endpoint"'
}

# ---- bounds and hostile input ----------------------------------------

@test "a slow server meets the deadline" {
	serve "{\"/v1/chat/completions\":[{\"delay\":8,\"json\":{}}]}"
	manifest "[{\"name\":\"slow\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY
	req 1 mechanical 3 1200 > requests.jsonl
	start=$(date +%s%3N)
	model
	elapsed=$(( $(date +%s%3N) - start ))
	line 1 '(.ok | not) and (.error | startswith("slow: deadline reached"))'
	line 1 '.calls[0].latencyMs < 4000'
	[ "$elapsed" -lt 5000 ]
	# A deadline already past: no attempt at all.
	req 2 mechanical 3 -5 > requests.jsonl
	model
	line 1 '.error == "deadline passed" and .calls == []'
}

@test "a 100 MB body meets the size ceiling, streamed or declared" {
	serve '{"/v1/chat/completions":[{"stream_bytes":104857600},{"stream_bytes":104857600,"declare_length":true}]}'
	manifest "[{\"name\":\"big\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY
	{ req 1 mechanical 3; req 2 mechanical 3; } > requests.jsonl
	model
	line 1 '(.ok | not) and (.error | test("^big: response larger than [0-9]+ bytes$"))'
	line 2 '(.ok | not) and (.error | test("^big: response larger than [0-9]+ bytes$"))'
	secret_free
}

@test "a 200 with the wrong shape, non-JSON, an empty body or empty text is an error" {
	serve '{"/v1/chat/completions":[{"json":{"choices":[]}},{"body":"<html>hi</html>"},{"body":""},
	        {"json":{"choices":[{"message":{"content":""}}]}},{"json":{"choices":[{"message":{"content":null}}]}}]}'
	manifest "[{\"name\":\"odd\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY
	for i in 1 2 3 4 5; do req $i mechanical 1; done > requests.jsonl
	model
	line 1 '.error == "odd: reply has no choices[0].message.content"'
	line 2 '.error == "odd: reply is not JSON"'
	line 3 '.error == "odd: empty reply body"'
	line 4 '.error == "odd: empty reply text"'
	line 5 '.error == "odd: reply has no choices[0].message.content"'
	secret_free
}

@test "a key echoed by a server never reaches an error; excerpts are clipped" {
	long=$(printf 'z%.0s' $(seq 600))
	serve "{\"/v1/chat/completions\":[{\"status\":401,\"body\":\"invalid api key: $OPENAI_KEY\"}],
	        \"/v1beta/models/g:generateContent\":[{\"status\":400,\"body\":\"bad request for ?key=$GEMINI_KEY $long\"}]}"
	manifest "[{\"name\":\"o\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE\"},
	           {\"name\":\"g\",\"provider\":\"gemini\",\"model\":\"g\",\"baseUrl\":\"$BASE\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY GEMINI_API_KEY=$GEMINI_KEY
	req 1 mechanical 3 > requests.jsonl
	model
	line 1 '.calls[0].error == "o: HTTP 401: invalid api key: [redacted]"'
	line 1 '.calls[1].error | startswith("g: HTTP 400: bad request for ?key=[redacted] zzz") and endswith("...") and length < 260'
	secret_free
}

# A 99-character anthropic-style key, and the pieces of it no output may hold.
LONG_KEY=sk-ant-api03-GdVJNS3EcGLm4hwvNxsIHSJPVg0929UuogbDtYXJksd3q5IAk5Mt5eP96kTQJnfbrxi2_jY6vByVJFIk0i626S

# no_key_piece FILE...: no 8-byte run of LONG_KEY in any FILE.
no_key_piece() {
	python3 - "$LONG_KEY" "$@" <<'PY'
import sys
key, files = sys.argv[1], sys.argv[2:]
pieces = {key[i:i + 8] for i in range(len(key) - 7)}
bad = 0
for f in files:
    text = open(f, encoding="utf-8", errors="replace").read()
    for p in sorted(pieces):
        if p in text:
            print("%s holds %r of the key" % (f, p), file=sys.stderr)
            bad = 1
if bad:
    for f in files:
        print("--- " + f + "\n" + open(f, errors="replace").read(), file=sys.stderr)
sys.exit(bad)
PY
}

# echo_body PAD COPIES [TAIL]: PAD bytes of 'a', COPIES copies of the key
# separated by spaces, then TAIL; as a JSON string.
echo_body() {
	python3 -c 'import json, sys; pad, n, tail = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
print(json.dumps("a" * pad + " ".join([sys.argv[1]] * n) + tail))' "$LONG_KEY" "$1" "$2" "${3:-}"
}

@test "a 99-character key echoed by a 401 leaves no 8-byte piece anywhere, wherever the copies fall" {
	[ "${#LONG_KEY}" -eq 99 ]
	# 8 copies from byte 0 (earlier copies shrink to [redacted] and pull the
	# 712-byte cut into view); one copy straddling the 200-byte clip; one
	# straddling 712; a run of copies crossing both; a key the server cut short.
	local routes="" i=0 spec
	for spec in "0 8" "10 8" "150 1" "190 1" "199 1" "650 1" "700 1" "705 1" "711 1" "180 9" \
	            "0 7 ${LONG_KEY:0:60}" "100 0 ${LONG_KEY:20:30} tail" "190 0 ${LONG_KEY:0:12}"; do
		set -- $spec
		routes+="${routes:+,}\"/e$i/v1/messages\":[{\"status\":401,\"body\":$(echo_body "$1" "$2" "${3:+ $3}${4:+ $4}")}]"
		i=$((i + 1))
	done
	serve "{$routes}"
	local eps="" j
	for ((j = 0; j < i; j++)); do
		eps+="${eps:+,}{\"name\":\"e$j\",\"provider\":\"anthropic\",\"model\":\"c\",\"baseUrl\":\"$BASE/e$j\"}"
	done
	manifest "[$eps]"
	export ANTHROPIC_API_KEY=$LONG_KEY
	req 1 mechanical "$i" > requests.jsonl
	model
	[ "$(jq '.calls | length' out.jsonl)" -eq "$i" ]
	jq -e '[.calls[].error] | all(test("^e[0-9]+: HTTP 401: "))' out.jsonl
	# the shown excerpt keeps its bound
	jq -e '[.calls[].error | length] | max < 260' out.jsonl
	no_key_piece out.jsonl err.txt
	# the whole copies were recognised as the key, not just cut away
	jq -e '.calls[] | select(.endpoint == "e0") | .error | startswith("e0: HTTP 401: [redacted] [redacted] [redacted]")' out.jsonl
}

@test "pieces of a key are redacted in every message, not only in excerpts" {
	# a libcurl-style error quoting a URL cut inside the key, and a message
	# cut short right after the key's first bytes
	serve "{\"/v1/messages\":[{\"status\":500,\"body\":$(echo_body 0 0 "see https://x/${LONG_KEY:0:40}")},
	        {\"status\":500,\"body\":$(echo_body 0 0 "bad key ${LONG_KEY:0:6}")}]}"
	manifest "[{\"name\":\"a\",\"provider\":\"anthropic\",\"model\":\"c\",\"baseUrl\":\"$BASE\"}]"
	export ANTHROPIC_API_KEY=$LONG_KEY
	{ req 1 mechanical 1; req 2 mechanical 1; } > requests.jsonl
	model
	line 1 '.error == "model call budget spent (last: a: HTTP 500: see https://x/[redacted])"'
	line 2 '.error == "model call budget spent (last: a: HTTP 500: bad key [redacted])"'
	no_key_piece out.jsonl err.txt
}

@test "a key echoed by a failing endpoint reaches no trace, record or output of a whole run" {
	serve "{\"/v1/messages\":[{\"status\":401,\"body\":$(echo_body 0 8)}]}"
	manifest "[{\"name\":\"leaky\",\"provider\":\"anthropic\",\"model\":\"c\",\"baseUrl\":\"$BASE\",\"priors\":{\"reasoning\":0.99,\"mechanical\":0.99}},
	           {\"name\":\"m\",\"provider\":\"mock\",\"model\":\"m\",\"priors\":{\"reasoning\":0.01,\"mechanical\":0.01}}]"
	export ANTHROPIC_API_KEY=$LONG_KEY
	run sfma run m.json
	echo "$output" > run.out
	[ -s ws/.sfma/trace.jsonl ]
	# the failing endpoint was really called, and its error is in the trace
	grep -q 'leaky: HTTP 401: \[redacted\] \[redacted\]' ws/.sfma/trace.jsonl
	# every file the run left, and the history of its git memory store
	find ws/.sfma -path ws/.sfma/mem -prune -o -type f -print > files
	[ "$(wc -l < files)" -ge 3 ]
	git -C ws/.sfma/mem log --all -p > mem.log
	[ -s mem.log ]
	no_key_piece run.out mem.log $(cat files)
}

@test "a redirect is not followed" {
	serve '{"/v1/chat/completions":[{"status":302,"body":""}]}'
	manifest "[{\"name\":\"r\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY
	req 1 mechanical 1 > requests.jsonl
	model
	line 1 '.error == "r: HTTP 302"'
}

@test "hostile request lines are answered, and the stream goes on" {
	manifest '[{"name":"m","provider":"mock","model":"x"}]'
	{
		echo 'not json'
		python3 -c 'import sys; sys.stdout.write("[" * 100000 + "]" * 100000 + "\n")'
		printf '{"id":1,"system":"\xff\xfe","messages":[]}\n'
		python3 -c 'import sys; sys.stdout.write("{\"id\":\"" + "a" * (17 << 20) + "\"}\n")'
		echo '[1,2]'
		echo '{"id":{"k":[1]},"messages":[{"role":"system","content":"x"}],"class":"mechanical","deadlineMs":1,"callsLeft":1}'
		echo '{"id":5,"messages":[{"role":"user","content":"x"}],"class":"fast","deadlineMs":1,"callsLeft":1}'
		echo '{"id":6,"messages":[{"role":"user","content":"x"}],"class":"mechanical","deadlineMs":1,"callsLeft":-1}'
		echo '{"id":7,"id":8}'
		req 9 mechanical 1
	} > requests.jsonl
	model
	[ "$(wc -l < out.jsonl)" -eq 10 ]
	line 1 '.id == null and (.ok | not) and (.error | startswith("bad request: invalid JSON"))'
	line 2 '.id == null and (.error | startswith("bad request: invalid JSON"))'
	line 3 '.id == null and (.error | startswith("bad request: invalid JSON"))'
	line 4 '.id == null and .error == "bad request: line 4: longer than 16777216 bytes"'
	line 5 '.error == "bad request: a request must be a JSON object"'
	line 6 '.id == {"k":[1]} and (.error | test("role"))'
	line 7 '.id == 5 and (.error | test("class"))'
	line 8 '.id == 6 and (.error | test("callsLeft"))'
	line 9 '.id == null and (.error | test("duplicate"))'
	line 10 '.id == 9 and .ok'
}

@test "an over-long line between good ones is skipped in step; a torn last line is answered" {
	manifest '[{"name":"m","provider":"mock","model":"x"}]'
	{
		req 1 mechanical 1
		head -c $((16 << 20)) /dev/zero | tr '\0' ' '; echo '{"id":"hidden"}'
		req 3 mechanical 1
		req 4 mechanical 1 | tr -d '\n'
	} > requests.jsonl
	model
	[ "$(wc -l < out.jsonl)" -eq 4 ]
	line 1 '.id == 1 and .ok'
	line 2 '.id == null and .error == "bad request: line 2: longer than 16777216 bytes"'
	line 3 '.id == 3 and .ok'
	line 4 '.id == null and (.error | startswith("bad request: line 4: torn final line"))'
	[ ! -s err.txt ]
	# a stdin that cannot be read is no request: exit 1, nothing answered
	mkdir dir
	run --separate-stderr sfma-model m.json < dir
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[ "$stderr" = "sfma-model: stdin: read: Is a directory" ]
}

@test "an invalid manifest is TASK_INVALID, exit 2; usage errors exit 2" {
	echo '{"name":"x"}' > m.json
	run sfma-model m.json
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "TASK_INVALID" ]
	[[ "$output" == *"- workspace is required"* ]]
	manifest '[{"name":"m","provider":"mock","model":"x"}]'
	jq '.modelAdapter = "x"' m.json > m2.json
	run sfma-model m2.json
	[ "$status" -eq 2 ]
	[[ "$output" == *"- modelAdapter was replaced by modelEndpoints"* ]]
	run --separate-stderr sfma-model
	[ "$status" -eq 2 ]
	[ -z "$output" ]
	[ "${stderr_lines[0]}" = "sfma-model: a MANIFEST is required" ]
	[ "${stderr_lines[1]}" = "usage: sfma-model MANIFEST < requests > replies" ]
	run --separate-stderr sfma-model m.json m2.json
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sfma-model: one MANIFEST only (unexpected m2.json)" ]
}

@test "an unknown provider or an unusable auth block is an invalid manifest" {
	manifest '[{"name":"x","provider":"llama","model":"m"},{"name":"y","provider":"openai","model":"m","auth":{"type":"basic"}},{"name":"m","provider":"mock","model":"m"}]'
	run sfma-model m.json
	[ "$status" -eq 2 ]
	[[ "$output" == *TASK_INVALID* ]]
	[[ "$output" == *"- modelEndpoints[0].provider llama is not one of anthropic, openai, gemini, codex, mock"* ]]
	[[ "$output" == *"- modelEndpoints[1].auth.type must be oauth2-client-credentials"* ]]
	[[ "$output" == *"- modelEndpoints[1].auth.tokenUrl must be a non-empty string"* ]]
}

@test "no leaks in a normal session (valgrind, or the sanitizer's leak check)" {
	serve "{\"/token\":[{\"json\":{\"access_token\":\"$ISSUED_TOKEN\",\"expires_in\":3600}}],
	        \"/v1/chat/completions\":[{\"status\":500,\"body\":\"x\"},$OPENAI_OK],
	        \"/responses\":[{\"sse\":[{\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}]}]}"
	manifest "[$(oauth_endpoint corp),{\"name\":\"cx\",\"provider\":\"codex\",\"model\":\"c\",\"baseUrl\":\"$BASE\"},{\"name\":\"m\",\"provider\":\"mock\",\"model\":\"m\"}]"
	export PROBE_CLIENT_ID=probe-client PROBE_CLIENT_SECRET=$CLIENT_SECRET
	export OPENAI_CODEX_TOKEN=$CODEX_TOKEN OPENAI_CODEX_ACCOUNT=acct
	{ req 1 reasoning 3; req 2 mechanical 3; req 3 mechanical 3; echo junk; } > requests.jsonl
	if [ -n "${SFMA_SANITIZED:-}" ]; then
		# ASan's leak check runs at exit and fails the run (exitcode 99) on a leak.
		python3 "$REPO/tests/fixtures/model/feed.py" sfma-model m.json < requests.jsonl > out.jsonl 2> err.txt
	else
		require valgrind
		python3 "$REPO/tests/fixtures/model/feed.py" valgrind -q --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
			--error-exitcode=97 sfma-model m.json < requests.jsonl > out.jsonl 2> err.txt || {
			cat err.txt >&2
			return 1
		}
	fi
	[ "$(wc -l < out.jsonl)" -eq 4 ]
	line 2 '.ok'
	secret_free
}
