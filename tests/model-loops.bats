#!/usr/bin/env bats
# sfma-model serving several requests at once (loops): replies as they
# finish, matched by id; waits of one request never holding up another;
# SFMA_MOCK_LATENCY_MS; the object form of SFMA_MOCK and the stage's own
# judgments for the array form; judge independence (avoid, independent);
# soft-tier verdicts folded into passRate; the end of input with requests
# in flight; hostile input among requests in flight. No timed assertion:
# overlap shows in the order of the replies and in the order in which the
# fake server saw requests arrive and answered them (LOG.events), which a
# stage serving one request at a time cannot produce.

load helpers
load fixtures/model/helpers
bats_require_minimum_version 1.5.0

setup() { model_setup; }
teardown() { model_teardown; }

OPENAI_OK='{"json":{"choices":[{"message":{"role":"assistant","content":"openai says hi"}}]}}'
SLOW=/slow/v1/chat/completions
FAST=/fast/v1/chat/completions
JUDGMENT=$'sfma soft-tier judgment 1\nJudge the work.'

# slow_fast: endpoint slow (first for reasoning) and fast (first for mechanical).
slow_fast() {
	manifest "[{\"name\":\"slow\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/slow\",
	            \"priors\":{\"reasoning\":0.9,\"mechanical\":0.1}},
	           {\"name\":\"fast\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/fast\",
	            \"priors\":{\"reasoning\":0.1,\"mechanical\":0.9}}]"
	export OPENAI_API_KEY=$OPENAI_KEY
}

# at_once: every request of requests.jsonl written without waiting.
at_once() {
	sfma-model m.json < requests.jsonl > out.jsonl 2> err.txt
}

# reply ID QUERY: some reply whose id is ID satisfies QUERY.
reply() {
	jq -se --argjson id "$1" "any(.[] | select(.id == \$id); $2)" out.jsonl >/dev/null || {
		echo "reply $1 fails $2:" >&2
		cat out.jsonl >&2
		return 1
	}
}

# events: the fake server's arrivals and answers, "arrive /slow/..." per line.
events() {
	jq -r '"\(.event) \(.path)"' log.jsonl.events
}

@test "two requests at once: the fast endpoint answers first, and the slow one was still unanswered when the fast one arrived" {
	# slow answers only once fast has answered: a stage that waited for
	# slow's answer before sending fast's request would show the opposite
	# order (slow's answer after its 20 s hold, then fast).
	serve "{\"$SLOW\":[{\"await\":{\"path\":\"$FAST\",\"event\":\"answer\"},\"delay\":0.2,
	                   \"json\":{\"choices\":[{\"message\":{\"content\":\"slow\"}}]}}],
	        \"$FAST\":[{\"json\":{\"choices\":[{\"message\":{\"content\":\"fast\"}}]}}]}"
	slow_fast
	{ req 1 reasoning 3; req 2 mechanical 3; } > requests.jsonl
	at_once
	[ "$(wc -l < out.jsonl)" -eq 2 ]
	line 1 '.id == 2 and .ok and .endpoint == "fast" and .text == "fast"'
	line 2 '.id == 1 and .ok and .endpoint == "slow" and .text == "slow"'
	# both were in flight before either was answered (in whichever order they arrived)
	[ "$(events | sed -n 1,2p | sort | tr '\n' ' ')" = "arrive $FAST arrive $SLOW " ]
	[ "$(events | sed -n 3,4p | tr '\n' ' ')" = "answer $FAST answer $SLOW " ]
}

@test "a Retry-After wait of one request does not delay another" {
	# slow answers 429 Retry-After: 1; fast answers only after that 429;
	# slow's retry is answered only once fast has answered. A stage that
	# sat out slow's wait before sending fast's request could not get
	# fast's answer in between.
	serve "{\"$SLOW\":[{\"status\":429,\"headers\":{\"Retry-After\":\"1\"},\"body\":\"later\"},
	                   {\"await\":{\"path\":\"$FAST\",\"event\":\"answer\"},\"delay\":0.2,$(echo "$OPENAI_OK" | sed 's/^{//')],
	        \"$FAST\":[{\"await\":{\"path\":\"$SLOW\",\"event\":\"answer\"},$(echo "$OPENAI_OK" | sed 's/^{//')]}"
	slow_fast
	{ req 1 reasoning 3; req 2 mechanical 3; } > requests.jsonl
	at_once
	line 1 '.id == 2 and .ok and .endpoint == "fast"'
	line 2 '.id == 1 and .ok and [.calls[] | .status] == [429,200] and .calls[1].waitMs == 1000'
	[ "$(events | grep '^answer' | tr '\n' ' ')" = "answer $SLOW answer $FAST answer $SLOW " ]
}

@test "the backoff after a 500 of one request does not delay another" {
	serve "{\"$SLOW\":[{\"status\":500,\"body\":\"oops\"},
	                   {\"await\":{\"path\":\"$FAST\",\"event\":\"answer\"},\"delay\":0.2,$(echo "$OPENAI_OK" | sed 's/^{//')],
	        \"$FAST\":[{\"await\":{\"path\":\"$SLOW\",\"event\":\"answer\"},$(echo "$OPENAI_OK" | sed 's/^{//')]}"
	slow_fast
	{ req 1 reasoning 3; req 2 mechanical 3; } > requests.jsonl
	at_once
	line 1 '.id == 2 and .ok'
	line 2 '.id == 1 and .ok and [.calls[] | .status] == [500,200]'
}

@test "SFMA_MOCK_LATENCY_MS delays every mock reply without holding up another request" {
	serve "{\"$FAST\":[$OPENAI_OK]}"
	manifest "[{\"name\":\"m\",\"provider\":\"mock\",\"model\":\"x\",\"priors\":{\"reasoning\":0.9,\"mechanical\":0.1}},
	           {\"name\":\"fast\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/fast\",
	            \"priors\":{\"reasoning\":0.1,\"mechanical\":0.9}}]"
	export OPENAI_API_KEY=$OPENAI_KEY SFMA_MOCK='["one","two","three"]' SFMA_MOCK_LATENCY_MS=1500
	{ req 1 reasoning 3; req 2 reasoning 3; req 3 mechanical 3; req 4 reasoning 3; } > requests.jsonl
	at_once
	[ "$(wc -l < out.jsonl)" -eq 4 ]
	# the real endpoint's answer overtakes three mock replies sent before it
	line 1 '.id == 3 and .endpoint == "fast"'
	# the mock's queue is drawn in arrival order, whichever finishes first
	reply 1 '.text == "one" and .calls[0].latencyMs >= 1500'
	reply 2 '.text == "two" and .calls[0].latencyMs >= 1500'
	reply 4 '.text == "three" and .calls[0].latencyMs >= 1500'
	# a value that is not a count of milliseconds is refused at the start
	for bad in -1 x 1.5 '' 600001 ' 5'; do
		SFMA_MOCK_LATENCY_MS=$bad run --separate-stderr sfma-model m.json < /dev/null
		[ "$status" -eq 2 ]
		[[ "$stderr" == *"SFMA_MOCK_LATENCY_MS: must be an integer 0..600000"* ]]
	done
}

@test "the object form: bootstrap, each task's queue and the judge's, each draw a counted attempt" {
	manifest '[{"name":"m","provider":"mock","model":"x"}]'
	export SFMA_MOCK='{"bootstrap":["cand"],"tasks":{"t1":["t1-a","t1-b"],"judge":["task named judge"],"t2":[{"tool":"done","summary":"t2"}]},
	                   "judge":["{\"pass\":false,\"reason\":\"no\"}"]}'
	{
		req 1 reasoning 5 10000 '.purpose = "bootstrap" | .task = null'
		req 2 mechanical 5 10000 '.purpose = "work" | .task = "t1"'
		req 3 mechanical 5 10000 '.purpose = "work" | .task = "t2"'
		req 4 mechanical 5 10000 '.purpose = "work" | .task = "t1"'
		req 5 reasoning 5 10000 ".purpose = \"judge\" | .task = \"t1\" | .system = \"$JUDGMENT\""
		req 6 reasoning 5 10000 ".purpose = \"criteria\" | .task = null | .system = \"$JUDGMENT\""
		req 7 mechanical 5 10000 '.purpose = "work" | .task = "t1"'
		req 8 mechanical 5 10000 '.purpose = "work" | .task = "judge"'
		req 9 mechanical 5 10000 '.purpose = "work" | .task = "t9"'
		req 10 reasoning 5 10000 '.purpose = "bootstrap"'
		req 11 mechanical 5 10000 '.purpose = "work"'
	} > requests.jsonl
	at_once
	[ "$(wc -l < out.jsonl)" -eq 11 ]
	export EXHAUSTED='{"summary":"mock queue exhausted","tool":"done"}'
	reply 1 '.text == "cand" and (.calls | length) == 1'
	reply 2 '.text == "t1-a"'
	reply 3 '.text == "{\"summary\":\"t2\",\"tool\":\"done\"}"'
	reply 4 '.text == "t1-b"'
	reply 5 '.text == "{\"pass\":false,\"reason\":\"no\"}" and .endpoint == "m" and (.calls | length) == 1 and .independent == true'
	reply 6 ".text == \$ENV.EXHAUSTED and (.calls | length) == 1"
	reply 7 ".text == \$ENV.EXHAUSTED"
	reply 8 '.text == "task named judge"'
	reply 9 ".text == \$ENV.EXHAUSTED"
	reply 10 ".text == \$ENV.EXHAUSTED"
	reply 11 ".text == \$ENV.EXHAUSTED"
	# work requests carry no independent
	reply 2 'has("independent") | not'
	# an object of anything else is refused, naming what it takes
	SFMA_MOCK='{"tasks":{"t1":"x"}}' run --separate-stderr sfma-model m.json < /dev/null
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"SFMA_MOCK.tasks.t1: must be a JSON array"* ]]
	SFMA_MOCK='{"judge":[1]}' run --separate-stderr sfma-model m.json < /dev/null
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"SFMA_MOCK.judge[0]: a reply must be a string or an object"* ]]
	SFMA_MOCK='{"tasks":[]}' run --separate-stderr sfma-model m.json < /dev/null
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"SFMA_MOCK.tasks: must be an object"* ]]
	SFMA_MOCK='{"work":[]}' run --separate-stderr sfma-model m.json < /dev/null
	[ "$status" -eq 2 ]
	[[ "$stderr" == *'unknown member "work"'* ]]
}

@test "the array form: judgments are the stage's own - no call, the queue untouched - and criteria all pass" {
	manifest '[{"name":"m","provider":"mock","model":"x"}]'
	export SFMA_MOCK='["first","second"]'
	crit=$(jq -cn '{successCriteria:["out.txt exists","it names the task"],mission:"m"}|tojson')
	{
		req 1 mechanical 5 10000 '.purpose = "work" | .task = "t0"'
		req 2 reasoning 5 10000 ".purpose = \"judge\" | .task = \"t0\" | .avoid = \"m\" | .system = \"$JUDGMENT\""
		req 3 reasoning 0 10000 ".purpose = \"judge\" | .task = \"t0\" | .system = \"$JUDGMENT\""
		req 4 reasoning 5 10000 ".purpose = \"criteria\" | .system = \"$JUDGMENT\" | .messages = [{role:\"user\",content:$crit}]"
		req 5 mechanical 5 10000 '.purpose = "work" | .task = "t0"'
	} > requests.jsonl
	at_once
	[ "$(wc -l < out.jsonl)" -eq 5 ]
	reply 1 '.text == "first"'
	reply 2 '.ok and .text == "{\"pass\":true,\"reason\":\"mock judge\"}" and .endpoint == "mock-judge" and .calls == [] and .independent == true'
	# no model call, so not even a spent budget stops it
	reply 3 '.ok and .endpoint == "mock-judge" and .calls == []'
	reply 4 '.ok and .calls == [] and (.text | fromjson) == {"criteria":[{"criterion":"out.txt exists","pass":true,"evidence":[]},{"criterion":"it names the task","pass":true,"evidence":[]}]}'
	reply 5 '.text == "second"'
	# each reply carries the endpoints' state when its request finished,
	# and requests 1 and 5 finish in either order: the later snapshot has
	# both calls, and none has a third (the judgments counted none)
	jq -se '[.[].endpoints.m.calls] | max == 2' out.jsonl >/dev/null
	# without SFMA_MOCK (the built-in script) too; a criteria request that lists none passes none
	unset SFMA_MOCK
	req 6 reasoning 5 10000 ".purpose = \"criteria\" | .system = \"$JUDGMENT\"" > requests.jsonl
	at_once
	reply 6 '.endpoint == "mock-judge" and .text == "{\"criteria\":[]}"'
}

@test "avoid: with two endpoints the other one judges; with only the producer, independent is false" {
	export SFMA_MOCK='{"judge":["{\"pass\":true,\"reason\":\"j1\"}","{\"pass\":true,\"reason\":\"j2\"}","{\"pass\":true,\"reason\":\"j3\"}"]}'
	manifest '[{"name":"a","provider":"mock","model":"x"},{"name":"b","provider":"mock","model":"x"}]'
	{
		req 1 reasoning 5 10000 ".purpose = \"judge\" | .task = \"t0\" | .avoid = \"a\" | .system = \"$JUDGMENT\""
		req 2 reasoning 5 10000 ".purpose = \"judge\" | .task = \"t0\" | .avoid = \"b\" | .system = \"$JUDGMENT\""
		req 3 reasoning 5 10000 ".purpose = \"judge\" | .task = \"t0\" | .avoid = \"nobody\" | .system = \"$JUDGMENT\""
	} > requests.jsonl
	at_once
	reply 1 '.endpoint == "b" and .independent == true and .calls[0].endpoint == "b"'
	reply 2 '.endpoint == "a" and .independent == true'
	reply 3 '.endpoint == "a" and .independent == true'
	# one endpoint: it judges its own work, and says so
	manifest '[{"name":"a","provider":"mock","model":"x"}]'
	req 4 reasoning 5 10000 ".purpose = \"judge\" | .task = \"t0\" | .avoid = \"a\" | .system = \"$JUDGMENT\"" > requests.jsonl
	at_once
	reply 4 '.ok and .endpoint == "a" and .independent == false and (.calls | length) == 1'
	# the other endpoint failing: the producer answers after it, not independent
	serve "{\"$FAST\":[{\"status\":400,\"body\":\"bad\"}]}"
	manifest "[{\"name\":\"fast\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/fast\"},
	           {\"name\":\"a\",\"provider\":\"mock\",\"model\":\"x\",\"priors\":{\"reasoning\":0.9}}]"
	export OPENAI_API_KEY=$OPENAI_KEY
	req 5 reasoning 5 10000 ".purpose = \"judge\" | .task = \"t0\" | .avoid = \"a\" | .system = \"$JUDGMENT\"" > requests.jsonl
	at_once
	reply 5 '.ok and .endpoint == "a" and .independent == false and [.calls[] | .endpoint] == ["fast","a"]'
	# a malformed avoid is a bad request
	req 6 reasoning 5 10000 '.purpose = "judge" | .avoid = 7' > requests.jsonl
	at_once
	reply 6 '(.ok | not) and .error == "bad request: avoid must be an endpoint name"'
}

@test "verdicts move passRate (an EWMA from 0.5) and with it the ranking" {
	manifest '[{"name":"a","provider":"mock","model":"x"},{"name":"b","provider":"mock","model":"x"}]'
	export SFMA_MOCK='["r1","r2","r3","r4"]'
	{
		req 1 mechanical 5
		req 2 mechanical 5 10000 '.verdicts = [{endpoint:"a",class:"mechanical",pass:false},{endpoint:"b",class:"mechanical",pass:true},{endpoint:"mock-judge",class:"mechanical",pass:false}]'
		req 3 reasoning 5
		req 4 mechanical 5 10000 '.verdicts = [{endpoint:"b",class:"mechanical",pass:false},{endpoint:"b",class:"mechanical",pass:false}]'
	} > requests.jsonl
	model
	# equal scores: manifest order
	line 1 '.endpoint == "a" and (.endpoints.a | has("passRate") | not)'
	# a failed, b passed: b first; 0.3*0 + 0.7*0.5 and 0.3*1 + 0.7*0.5
	line 2 '.endpoint == "b" and .endpoints.a.passRate == {"mechanical":0.35} and .endpoints.b.passRate == {"mechanical":0.65}'
	# the other class is unmeasured: manifest order again
	line 3 '.endpoint == "a"'
	# b failed twice since: 0.65 -> 0.455 -> 0.3185, below a's 0.35
	line 4 '.endpoint == "a" and (.endpoints.b.passRate.mechanical * 10000 | round) == 3185'
	# the state the planner hands back keeps the pass rates
	jq -c '.endpoints' <(sed -n 4p out.jsonl) > state.json
	req 5 mechanical 5 10000 ".state = $(cat state.json)" > requests.jsonl
	model
	line 1 '.endpoint == "a" and (.endpoints.b.passRate.mechanical * 10000 | round) == 3185'
	# malformed verdicts are a bad request: none of them is folded in
	{
		req 6 mechanical 5 10000 '.state = {"a":{"calls":5,"failures":5}} | .verdicts = [{endpoint:"b",class:"mechanical",pass:true},{endpoint:"a",class:"mechanical",pass:"yes"}]'
		req 7 mechanical 5 10000 '.verdicts = {}'
		req 8 mechanical 5 10000 '.verdicts = [{endpoint:"b",class:"fast",pass:true}]'
		req 9 mechanical 5
	} > requests.jsonl
	model
	line 1 '.id == 6 and .error == "bad request: verdicts[1] must be {\"endpoint\":S,\"class\":\"reasoning\"|\"mechanical\",\"pass\":BOOL}"'
	line 2 '.id == 7 and (.error | startswith("bad request: verdicts must be an array"))'
	line 3 '.id == 8 and (.error | startswith("bad request: verdicts[0]"))'
	# nor is the state of the bad request
	line 4 '.id == 9 and .ok and (.endpoints | has("b") and (.b | has("passRate") | not)) and .endpoints.a.calls + .endpoints.b.calls == 1'
}

@test "the end of input with requests in flight: every one is answered, then the stage exits" {
	serve "{\"$SLOW\":[{\"delay\":0.5,\"json\":{\"choices\":[{\"message\":{\"content\":\"late\"}}]}}]}"
	slow_fast
	for i in 1 2 3 4 5; do req $i reasoning 3; done > requests.jsonl
	at_once
	[ "$(wc -l < out.jsonl)" -eq 5 ]
	[ "$(jq -r 'select(.ok and .text == "late") | .id' out.jsonl | sort | tr '\n' ' ')" = "1 2 3 4 5 " ]
	[ ! -s err.txt ]
	# and so with the mock's latency
	manifest '[{"name":"m","provider":"mock","model":"x"}]'
	for i in 1 2 3; do req $i mechanical 3; done > requests.jsonl
	SFMA_MOCK='["a","b","c"]' SFMA_MOCK_LATENCY_MS=300 at_once
	[ "$(jq -r '.text' out.jsonl | sort | tr '\n' ' ')" = "a b c " ]
}

@test "two requests at once to one endpoint: two connections, each kept for the requests after" {
	serve "{\"$SLOW\":[{\"await\":{\"path\":\"$SLOW\",\"event\":\"arrive\",\"count\":2},$(echo "$OPENAI_OK" | sed 's/^{//'),
	                   $OPENAI_OK]}"
	slow_fast
	{ req 1 reasoning 3; req 2 reasoning 3; echo '#sync'; req 3 reasoning 3; echo '#sync'; req 4 reasoning 3; } > requests.jsonl
	python3 "$REPO/tests/fixtures/model/feed.py" --at-once sfma-model m.json < requests.jsonl > out.jsonl 2> err.txt
	[ "$(jq -s 'map(select(.ok)) | length' out.jsonl)" -eq 4 ]
	# the first request was answered only once the second had arrived: they overlapped
	[ "$(events | head -3 | tr '\n' ' ')" = "arrive $SLOW arrive $SLOW answer $SLOW " ]
	peers=$(jq -r .peer log.jsonl | tr '\n' ' ')
	set -- $peers
	[ "$1" != "$2" ]
	[ "$3" = "$1" ] || [ "$3" = "$2" ]
	[ "$4" = "$1" ] || [ "$4" = "$2" ]
}

@test "hostile input among requests in flight: reused ids, junk, an over-long line - each answered, no crash" {
	serve "{\"$SLOW\":[{\"delay\":0.3,$(echo "$OPENAI_OK" | sed 's/^{//')]}"
	slow_fast
	{
		req 1 reasoning 3
		req 1 reasoning 3
		echo 'junk'
		python3 -c 'import sys; sys.stdout.write("{\"id\":\"" + "a" * (17 << 20) + "\"}\n")'
		req 1 reasoning 3 10000 '.verdicts = "x"'
		req 1 reasoning 3 10000 '.purpose = "chat"'
		req 1 reasoning 3 10000 '.task = 5'
		req 2 reasoning 3 10000 '.state = {"slow":{"calls":1,"failures":0,"passRate":{"reasoning":7}}}'
		req 1 reasoning 3
		printf '{"id":3,'
	} > requests.jsonl
	at_once
	[ "$(wc -l < out.jsonl)" -eq 10 ]
	[ "$(jq -s 'map(select(.ok and .id == 1)) | length' out.jsonl)" -eq 3 ]
	[ "$(jq -s 'map(select(.ok and .id == 2)) | length' out.jsonl)" -eq 1 ]
	reply null '(.error // "") | test("longer than 16777216")'
	reply null '(.error // "") | test("torn final line")'
	reply null '(.error // "") | test("invalid JSON")'
	reply 1 '.error == "bad request: purpose must be \"work\", \"bootstrap\", \"judge\" or \"criteria\""'
	reply 1 '.error == "bad request: task must be a task id or null"'
	reply 1 '(.error // "") | startswith("bad request: verdicts must be an array")'
	[ ! -s err.txt ]
}

@test "no leaks with requests at once: retries, the object form, judgments, latency (valgrind, or the sanitizer's leak check)" {
	serve "{\"$SLOW\":[{\"status\":429,\"headers\":{\"Retry-After\":\"1\"},\"body\":\"x\"},$OPENAI_OK],
	        \"$FAST\":[{\"drop\":true},$OPENAI_OK]}"
	manifest "[{\"name\":\"slow\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/slow\",
	            \"priors\":{\"reasoning\":0.9,\"mechanical\":0.1}},
	           {\"name\":\"fast\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE/fast\",
	            \"priors\":{\"reasoning\":0.1,\"mechanical\":0.9}},
	           {\"name\":\"m\",\"provider\":\"mock\",\"model\":\"x\",\"priors\":{\"reasoning\":0,\"mechanical\":0}}]"
	export OPENAI_API_KEY=$OPENAI_KEY SFMA_MOCK_LATENCY_MS=100
	export SFMA_MOCK='{"tasks":{"t1":["a"]},"judge":["{\"pass\":true,\"reason\":\"ok\"}"]}'
	{
		req 1 reasoning 3
		req 2 mechanical 3
		req 3 mechanical 3 10000 '.purpose = "judge" | .avoid = "fast" | .verdicts = [{endpoint:"slow",class:"reasoning",pass:true}]'
		req 4 reasoning 3 10000 '.purpose = "criteria" | .avoid = "slow"'
		echo junk
	} > requests.jsonl
	if [ -n "${SFMA_SANITIZED:-}" ]; then
		at_once
	else
		require valgrind
		valgrind -q --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
			--error-exitcode=97 sfma-model m.json < requests.jsonl > out.jsonl 2> err.txt || {
			cat err.txt >&2
			return 1
		}
	fi
	[ "$(wc -l < out.jsonl)" -eq 5 ]
	# which request met the 429 or the drop depends on who came first
	[ "$(jq -s 'map(select(.ok)) | length' out.jsonl)" -eq 4 ]
	[ "$(jq -s 'map(select([.calls[]? | .status] == [429,200])) | length' out.jsonl)" -eq 1 ]
	reply 3 '.ok and .independent == true'
	reply 4 '.ok and .independent == true'
}
