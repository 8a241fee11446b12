#!/usr/bin/env bats
# sfma-model: rate limits waited out, transient failures backed off, other
# 4xx failed over at once, endpoints down after transport failures (and
# skipped by the next invocation without a request), every attempt a call
# element, and no secret in any retry error.

load helpers
load fixtures/model/helpers
bats_require_minimum_version 1.5.0

setup() { model_setup; }
teardown() { model_teardown; }

OPENAI_OK='{"json":{"choices":[{"message":{"role":"assistant","content":"openai says hi"}}],"usage":{"prompt_tokens":11,"completion_tokens":2}}}'

# two: endpoints a and b of the fake server (openai, under /a and /b).
two() {
	manifest "[{\"name\":\"a\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/a\"},
	           {\"name\":\"b\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/b\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY
}

one() {
	manifest "[{\"name\":\"a\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/a\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY
}

@test "429 with Retry-After: 1 is waited out, then the same endpoint answers" {
	serve "{\"/a/v1/chat/completions\":[{\"status\":429,\"headers\":{\"Retry-After\":\"1\"},\"body\":\"slow down\"},$OPENAI_OK]}"
	one
	req 1 mechanical 5 > requests.jsonl
	start=$(date +%s%3N)
	model
	elapsed=$(( $(date +%s%3N) - start ))
	line 1 '.ok and .endpoint == "a" and .text == "openai says hi" and (.calls | length) == 2'
	line 1 '.calls[0] | .status == 429 and .errorClass == "rate-limited" and .waitMs == 0 and .error == "a: HTTP 429: slow down"'
	line 1 '.calls[1] | .ok and .status == 200 and .waitMs == 1000 and .usage == {"inputTokens":11,"outputTokens":2}'
	line 1 '.usage == {"inputTokens":11,"outputTokens":2}'
	# the wait really happened
	[ "$elapsed" -ge 1000 ]
	[ "$(requests_to /a/v1/chat/completions)" -eq 2 ]
}

@test "retry-after-ms wins over Retry-After; an HTTP-date Retry-After counts from now; 503 and 529 wait too" {
	# 4 s ahead, in whole seconds: time enough for the server to start on a busy machine
	date_4s=$(python3 -c 'import email.utils, time; print(email.utils.formatdate(time.time() + 4, usegmt=True))')
	serve "{\"/a/v1/chat/completions\":[
		{\"status\":503,\"headers\":{\"Retry-After\":\"30\",\"retry-after-ms\":\"250\"},\"body\":\"busy\"},
		{\"status\":529,\"headers\":{\"Retry-After\":\"$date_4s\"},\"body\":\"overloaded\"},
		$OPENAI_OK]}"
	one
	req 1 mechanical 5 20000 > requests.jsonl
	model
	line 1 '.ok and (.calls | length) == 3'
	line 1 '.calls[0] | .status == 503 and .errorClass == "rate-limited"'
	line 1 '.calls[1] | .status == 529 and .errorClass == "rate-limited" and .waitMs == 250'
	line 1 '.calls[2] | .ok and .waitMs > 0 and .waitMs <= 4000'
}

@test "a Retry-After past the deadline falls through to the next endpoint at once" {
	serve "{\"/a/v1/chat/completions\":[{\"status\":429,\"headers\":{\"Retry-After\":\"3600\"},\"body\":\"quota\"}],
	        \"/b/v1/chat/completions\":[$OPENAI_OK]}"
	two
	req 1 mechanical 5 > requests.jsonl
	model
	line 1 '.ok and .endpoint == "b" and [.calls[] | .endpoint] == ["a","b"] and .calls[1].waitMs == 0'
	# one endpoint: the call fails with the rate limit, no wait
	one
	req 2 mechanical 5 5000 > requests.jsonl
	model
	line 1 '(.ok | not) and .error == "a: HTTP 429: quota" and (.calls | length) == 1'
}

@test "500s back off (full jitter, 0.5 s then 1 s at most), two retries, then fail over" {
	serve "{\"/a/v1/chat/completions\":[{\"status\":500,\"body\":\"boom\"}],\"/b/v1/chat/completions\":[$OPENAI_OK]}"
	two
	req 1 mechanical 8 > requests.jsonl
	model
	line 1 '.ok and .endpoint == "b" and [.calls[] | .endpoint] == ["a","a","a","b"]'
	line 1 '[.calls[0:3][] | .status == 500 and .errorClass == "transient"] | all'
	line 1 '.calls[0].waitMs == 0 and .calls[1].waitMs <= 500 and .calls[2].waitMs <= 1000 and .calls[3].waitMs == 0'
	[ "$(requests_to /a/v1/chat/completions)" -eq 3 ]
	# three 500s in a row are an outage (tests/model-stop.bats has more)
	line 1 '.endpoints.a | .consecutiveFailures == 3 and .downUntil != null and .failures == 3'
}

@test "408, 502 and 504 are transient too; other 4xx fail over at once" {
	serve "{\"/a/v1/chat/completions\":[{\"status\":408},{\"status\":502},{\"status\":504}],
	        \"/b/v1/chat/completions\":[{\"status\":404,\"body\":\"no such model\"},{\"status\":422,\"body\":\"bad\"}]}"
	two
	{ req 1 mechanical 8; req 2 mechanical 8 10000 '.state = {"a":{"calls":0,"failures":0,"downUntil":9999999999999}}'; } > requests.jsonl
	model
	line 1 '[.calls[] | "\(.endpoint) \(.status) \(.errorClass)"] == ["a 408 transient","a 502 transient","a 504 transient","b 404 client"]'
	line 1 '.error == "all 2 usable endpoints failed (last: b: HTTP 404: no such model)"'
	line 2 '[.calls[] | "\(.endpoint) \(.status) \(.errorClass)"] == ["b 422 client"]'
}

@test "401 is an auth failure: no retry" {
	serve "{\"/a/v1/chat/completions\":[{\"status\":401,\"body\":\"invalid key $OPENAI_KEY\",\"headers\":{\"Retry-After\":\"0\"}}],\"/b/v1/chat/completions\":[$OPENAI_OK]}"
	two
	req 1 mechanical 8 > requests.jsonl
	model
	line 1 '.ok and [.calls[] | .errorClass] == ["auth",null] and .calls[0].error == "a: HTTP 401: invalid key [redacted]"'
	secret_free
}

@test "callsLeft bounds the retries: a wanted retry past it is not made" {
	serve '{"/a/v1/chat/completions":[{"status":500,"body":"boom"}]}'
	one
	req 1 mechanical 2 > requests.jsonl
	model
	line 1 '(.ok | not) and (.calls | length) == 2 and .error == "model call budget spent (last: a: HTTP 500: boom)"'
	[ "$(requests_to /a/v1/chat/completions)" -eq 2 ]
}

@test "3 transport failures make an endpoint down; the next invocation, given the state, sends it nothing" {
	serve "{\"/a/v1/chat/completions\":[{\"drop\":true}],\"/b/v1/chat/completions\":[$OPENAI_OK]}"
	two
	req 1 mechanical 8 > requests.jsonl
	before=$(date +%s%3N)
	model
	line 1 '.ok and .endpoint == "b" and [.calls[] | "\(.endpoint) \(.errorClass)"] == ["a transport","a transport","a transport","b null"]'
	line 1 '.calls[0:3] | all(.status == null and .ok == false)'
	line 1 ".endpoints.a | .consecutiveFailures == 3 and .outages == 1 and .downUntil >= $before + 30000 and .downUntil <= $before + 40000"
	line 1 '.endpoints.a.availability < 0.5 and .endpoints.b.availability == 1'
	[ "$(requests_to /a/v1/chat/completions)" -eq 3 ]
	# a new process, seeded with the state the first one returned
	state=$(jq -c .endpoints out.jsonl)
	req 2 mechanical 8 10000 ".state = $state" > requests.jsonl
	model
	line 1 '.ok and .endpoint == "b" and [.calls[] | .endpoint] == ["b"]'
	line 1 ".endpoints.a.downUntil == $(jq .a.downUntil <<< "$state")"
	[ "$(requests_to /a/v1/chat/completions)" -eq 3 ]
}

@test "after an outage one more transport failure is a new outage, twice as long; a success ends it" {
	serve "{\"/a/v1/chat/completions\":[{\"drop\":true},$OPENAI_OK]}"
	one
	{
		req 1 mechanical 1 10000 '.state = {"a":{"calls":3,"failures":3,"consecutiveFailures":3,"outages":1,"downUntil":null,"availability":0.3}}'
		req 2 mechanical 1 10000 '.state = {"a":{"calls":3,"failures":3,"consecutiveFailures":4,"outages":2,"downUntil":1}}'
	} > requests.jsonl
	before=$(date +%s%3N)
	model
	line 1 '(.ok | not) and (.calls | length) == 1 and .calls[0].errorClass == "transport"'
	line 1 ".endpoints.a | .consecutiveFailures == 4 and .outages == 2 and .downUntil >= $before + 60000 and .downUntil <= $before + 70000"
	line 2 '.ok and (.endpoints.a | .consecutiveFailures == 0 and .outages == 0 and .downUntil == null)'
}

@test "outages double up to 10 minutes; a downUntil beyond that in the state is cut to it" {
	serve "{\"/a/v1/chat/completions\":[{\"drop\":true}]}"
	one
	{
		req 1 mechanical 1 10000 '.state = {"a":{"calls":9,"failures":9,"consecutiveFailures":9,"outages":40}}'
		req 2 mechanical 1 10000 '.state = {"a":{"calls":0,"failures":0,"downUntil":99999999999999}}'
	} > requests.jsonl
	before=$(date +%s%3N)
	model
	after=$(date +%s%3N)
	line 1 ".endpoints.a.downUntil >= $before + 600000 and .endpoints.a.downUntil <= $after + 600000"
	line 2 ".calls == [] and .endpoints.a.downUntil <= $after + 600000"
}

@test "all endpoints down: no request, and the time the first comes back" {
	serve "{\"/a/v1/chat/completions\":[$OPENAI_OK],\"/b/v1/chat/completions\":[$OPENAI_OK]}"
	two
	now=$(date +%s)
	back_a=$(( (now + 90) * 1000 )) back_b=$(( (now + 60) * 1000 ))
	iso=$(date -u -d "@$((now + 60))" +%Y-%m-%dT%H:%M:%S.000Z)
	req 1 mechanical 8 10000 ".state = {\"a\":{\"calls\":3,\"failures\":3,\"downUntil\":$back_a},\"b\":{\"calls\":3,\"failures\":3,\"downUntil\":$back_b}}" > requests.jsonl
	model
	line 1 "(.ok | not) and .error == \"all endpoints down until $iso; sfma endpoints $PWD/ws --all to try again now\" and .calls == []"
	[ ! -s log.jsonl ]
	# one down, one without credentials: still all down (the usable ones)
	manifest "[{\"name\":\"a\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/a\"},
	           {\"name\":\"c\",\"provider\":\"anthropic\",\"model\":\"g\",\"baseUrl\":\"$BASE/c\"}]"
	req 2 mechanical 8 10000 ".state = {\"a\":{\"calls\":3,\"failures\":3,\"downUntil\":$back_b}}" > requests.jsonl
	model
	line 1 ".error == \"all endpoints down until $iso; sfma endpoints $PWD/ws --reset a to try again now\""
	[ ! -s log.jsonl ]
}

@test "the score: availability and tuning.routing weights decide; one endpoint is only health-gated" {
	serve "{\"/a/v1/chat/completions\":[$OPENAI_OK],\"/b/v1/chat/completions\":[$OPENAI_OK]}"
	two
	{
		# a's prior beats b's, until its availability is measured low
		req 1 reasoning 3 10000 '.state = {}'
		req 2 reasoning 3 10000 '.state = {"a":{"calls":9,"failures":9,"availability":0.1}}'
		# the planner's pass rate counts: b measured failing its soft tier
		req 3 mechanical 3 10000 '.state = {"b":{"calls":9,"failures":0,"passRate":{"mechanical":0.0}}}'
	} > requests.jsonl
	jq '.modelEndpoints[0].priors = {"reasoning":0.9,"mechanical":0.1}' m.json > m2.json && mv m2.json m.json
	model
	line 1 '.endpoint == "a"'
	line 2 '.endpoint == "b"'
	line 3 '.endpoint == "a" and .endpoints.b.passRate == {"mechanical":0}'
	# weights that ignore availability: a wins again
	jq '.tuning = {"routing":{"reasoning":{"prior":1,"pass":0,"avail":0,"lat":0}}}' m.json > m2.json && mv m2.json m.json
	req 4 reasoning 3 10000 '.state = {"a":{"calls":9,"failures":9,"availability":0.1}}' > requests.jsonl
	model
	line 1 '.endpoint == "a"'
}

@test "no key in the errors of retried, rate-limited or dropped attempts" {
	serve "{\"/a/v1/chat/completions\":[{\"status\":429,\"headers\":{\"Retry-After\":\"0\"},\"body\":\"limit for key $OPENAI_KEY\"},
	                                    {\"status\":500,\"body\":\"echo ?key=$OPENAI_KEY\"},{\"drop\":true}],
	        \"/b/v1beta/models/g:generateContent\":[{\"status\":503,\"body\":\"busy ?key=$GEMINI_KEY\",\"headers\":{\"retry-after-ms\":\"10\"}},{\"drop\":true}]}"
	manifest "[{\"name\":\"a\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/a\"},
	           {\"name\":\"b\",\"provider\":\"gemini\",\"model\":\"g\",\"baseUrl\":\"$BASE/b\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY GEMINI_API_KEY=$GEMINI_KEY
	req 1 mechanical 8 > requests.jsonl
	model
	line 1 '(.ok | not) and (.calls | length) == 6'
	grep -q 'redacted' out.jsonl
	secret_free
}

@test "malformed state members start unmeasured, each alone" {
	# a 400 leaves the streak and the outages as they were read
	serve '{"/a/v1/chat/completions":[{"status":400,"body":"no"}]}'
	one
	req 1 mechanical 1 10000 '.state = {"a":{"calls":5,"failures":1,"latencyMsEwma":-3,"availability":7,
		"consecutiveFailures":-5,"outages":1.5,"downUntil":"soon","passRate":{"reasoning":"high","mechanical":0.25}}}' > requests.jsonl
	model
	line 1 '(.ok | not) and .endpoints.a == {"calls":6,"failures":2,"latencyMsEwma":null,"availability":1,
		"consecutiveFailures":0,"outages":0,"downUntil":null,"passRate":{"mechanical":0.25}}'
}
