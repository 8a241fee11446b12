#!/usr/bin/env bats
# sfma endpoints WS: the endpoint state a workspace's memory.json holds,
# one line per endpoint or NDJSON; --reset NAME and --all clear an outage
# (consecutiveFailures, downUntil, outages) and record the reset, never
# while a run holds the workspace; a hostile memory is shown, not obeyed.
# Last, the whole story against a fake provider: an endpoint answering 500
# goes down, the next run names the reset, the reset lets a run try again.

load helpers
load fixtures/model/helpers
bats_require_minimum_version 1.5.0

setup() {
	model_setup
	mkdir -p ws/.sfma
	FUTURE=$(( ($(date +%s) + 300) * 1000 ))
	FUTURE_ISO=$(date -u -d "@$(( FUTURE / 1000 ))" +%Y-%m-%dT%H:%M:%S.000Z)
}
teardown() {
	model_teardown
}

# memory ENDPOINTS_JSON: ws/.sfma/memory.json as the planner writes it.
memory() {
	jq -n --argjson e "$1" '{version:1,runs:[{at:"2026-12-01T00:00:00.000Z",verdict:"failed",turns:1}],pinned:null,endpoints:$e}' \
		> ws/.sfma/memory.json
}

STATE_A='{"calls":9,"failures":4,"latencyMsEwma":812.4,"availability":0.657,"consecutiveFailures":3,"outages":2,"passRate":{"reasoning":0.62,"mechanical":0.5},"costUsd":0.01234}'
STATE_B='{"calls":2,"failures":0,"latencyMsEwma":null,"availability":1,"consecutiveFailures":0,"downUntil":null,"outages":0}'

@test "a line per endpoint, in name order: calls, failures, availability, latency, pass rate, downUntil or up, cost" {
	memory "{\"b\":$STATE_B,\"a\":$(jq -c --argjson t "$FUTURE" '.downUntil = $t' <<<"$STATE_A")}"
	run sfma endpoints ws
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "a calls=9 failures=4 availability=0.657 latencyMs=812 passRate=reasoning:0.620,mechanical:0.500 downUntil=$FUTURE_ISO costUsd=0.0123" ]
	[ "${lines[1]}" = "b calls=2 failures=0 availability=1.000 latencyMs=- passRate=- downUntil=up costUsd=-" ]
	[ "${#lines[@]}" -eq 2 ]
	# a downUntil in the past is up
	memory "{\"a\":$(jq -c '.downUntil = 1000' <<<"$STATE_A")}"
	run sfma endpoints ws
	[[ "$output" == *" downUntil=up "* ]]
}

@test "--json: one object per endpoint, the downUntil as ISO-8601 and whether it is down" {
	memory "{\"a\":$(jq -c --argjson t "$FUTURE" '.downUntil = $t' <<<"$STATE_A"),\"b\":$STATE_B}"
	run sfma endpoints --json ws
	[ "$status" -eq 0 ]
	jq -e -s --arg iso "$FUTURE_ISO" '.[0] == {"endpoint":"a","calls":9,"failures":4,"availability":0.657,
	  "latencyMsEwma":812.4,"consecutiveFailures":3,"outages":2,"costUsd":0.01234,
	  "passRate":{"reasoning":0.62,"mechanical":0.5},"reset":null,"downUntil":$iso,"down":true}' <<<"$output"
	jq -e -s '.[1] | .endpoint == "b" and .down == false and .downUntil == null and .costUsd == null and .latencyMsEwma == null' <<<"$output"
}

@test "--reset NAME clears its outage and failure count and records the reset; nothing else in the memory changes" {
	memory "{\"a\":$(jq -c --argjson t "$FUTURE" '.downUntil = $t' <<<"$STATE_A"),\"b\":$(jq -c '.consecutiveFailures = 2' <<<"$STATE_B")}"
	cp ws/.sfma/memory.json before.json
	t0=$(date +%s%3N)
	run sfma endpoints ws --reset a
	[ "$status" -eq 0 ]
	[ "$output" = "a: reset (was down until $FUTURE_ISO, 3 consecutive failures)" ]
	jq -e '.endpoints.a | .consecutiveFailures == 0 and .downUntil == null and .outages == 0 and .reset.by == "sfma endpoints"
	       and .calls == 9 and .failures == 4 and .availability == 0.657 and .costUsd == 0.01234' ws/.sfma/memory.json
	# the reset's time, ISO-8601 UTC, now
	at=$(jq -r '.endpoints.a.reset.at' ws/.sfma/memory.json)
	[[ "$at" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$ ]]
	[ $(( $(date -u -d "$at" +%s%3N) - t0 )) -gt -1000 ]
	# b and the rest are as they were
	jq -e --slurpfile was before.json '.endpoints.b == $was[0].endpoints.b and .runs == $was[0].runs and .pinned == $was[0].pinned' ws/.sfma/memory.json
	[ "$(stat -c %a ws/.sfma/memory.json)" = 600 ]
	run sfma endpoints ws
	[[ "${lines[0]}" == "a "*" downUntil=up costUsd=0.0123 reset=$at" ]]
}

@test "--all resets every endpoint; --json says the state each is left in" {
	memory "{\"a\":$(jq -c --argjson t "$FUTURE" '.downUntil = $t' <<<"$STATE_A"),\"b\":$(jq -c --argjson t "$FUTURE" '.downUntil = $t | .consecutiveFailures = 5' <<<"$STATE_B")}"
	run sfma endpoints --all --json ws
	[ "$status" -eq 0 ]
	jq -e -s 'length == 2 and all(.[]; .down == false and .consecutiveFailures == 0 and .outages == 0 and .reset.by == "sfma endpoints")' <<<"$output"
	jq -e '[.endpoints[] | .downUntil == null and .consecutiveFailures == 0] | all' ws/.sfma/memory.json
}

@test "a reset while a run holds the workspace is refused (workspace busy) and changes nothing; a listing still works" {
	memory "{\"a\":$(jq -c --argjson t "$FUTURE" '.downUntil = $t' <<<"$STATE_A")}"
	cp ws/.sfma/memory.json before.json
	require flock
	# the lock a run takes: flock(2) on the .sfma directory, held here on
	# a descriptor of this shell's own
	exec 9<ws/.sfma
	flock -n 9
	run sfma endpoints ws --reset a
	[ "$status" -eq 1 ]
	[ "$output" = "sfma-endpoints: workspace busy: another sfma run holds ws/.sfma" ]
	cmp ws/.sfma/memory.json before.json
	run sfma endpoints ws
	[ "$status" -eq 0 ]
	[[ "$output" == "a calls=9 "* ]]
	exec 9<&-
	run sfma endpoints ws --reset a
	[ "$status" -eq 0 ]
}

@test "an unknown endpoint, a workspace without memory or without .sfma are one-line errors; usage errors exit 2" {
	memory "{\"a\":$STATE_A,\"b\":$STATE_B}"
	run sfma endpoints ws --reset c
	[ "$status" -eq 1 ]
	[ "$output" = "sfma-endpoints: ws: no endpoint c in its memory (known: a, b)" ]
	rm ws/.sfma/memory.json
	run sfma endpoints ws
	[ "$status" -eq 0 ]
	[ "$output" = "sfma-endpoints: ws: no endpoint state yet (no run has called a model)" ]
	run sfma endpoints ws --all
	[ "$status" -eq 1 ]
	[ "$output" = "sfma-endpoints: ws: no memory.json: no run has called a model" ]
	mkdir bare
	run sfma endpoints bare
	[ "$status" -eq 1 ]
	[ "$output" = "sfma-endpoints: bare: no .sfma: no run has used this workspace" ]
	run sfma endpoints
	[ "$status" -eq 2 ]
	run sfma endpoints ws --reset a --all
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == *"--reset NAME and --all exclude each other"* ]]
}

@test "a hostile memory: control bytes shown visibly, wrong-typed members as unknown, a link or a non-memory refused" {
	jq -n '{version:1,runs:[],endpoints:{"evil\u001b[2J\nname":{"calls":"many","availability":[1],"downUntil":"soon","passRate":7},"x":3}}' \
		> ws/.sfma/memory.json
	run sfma endpoints ws
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = 'evil\x1b[2J\nname calls=0 failures=0 availability=- latencyMs=- passRate=- downUntil=up costUsd=-' ]
	[ "${lines[1]}" = 'x calls=0 failures=0 availability=- latencyMs=- passRate=- downUntil=up costUsd=-' ]
	run sfma endpoints ws --json
	jq -e -s '.[0].calls == null and .[0].passRate == null and .[1].endpoint == "x"' <<<"$output"
	# a state that is no object is made one by a reset
	run sfma endpoints ws --reset x
	[ "$status" -eq 0 ]
	jq -e '.endpoints.x.reset.by == "sfma endpoints" and .endpoints.x.downUntil == null' ws/.sfma/memory.json
	echo '[1,2]' > elsewhere.json
	rm ws/.sfma/memory.json
	ln -s ../../elsewhere.json ws/.sfma/memory.json
	run sfma endpoints ws --all
	[ "$status" -eq 1 ]
	[[ "$output" == "sfma-endpoints: ws/.sfma/memory.json: "* ]]
	[ "$(cat elsewhere.json)" = '[1,2]' ]
	rm ws/.sfma/memory.json
	echo '{"runs":3}' > ws/.sfma/memory.json
	run sfma endpoints ws
	[ "$status" -eq 1 ]
	[ "$output" = "sfma-endpoints: ws/.sfma/memory.json: not a memory document" ]
}

@test "a run against an endpoint answering 500 leaves it down; the next run says how to reset; after the reset a run asks it again" {
	serve '{"/v1/messages":[{"status":500,"body":"{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}"}]}'
	port=$(cat port)
	jq -n --arg b "$BASE" '{name:"down",workspace:"ws",modelEndpoints:[{name:"remote",provider:"anthropic",model:"m-x",baseUrl:$b}],
	  allowedCommands:[],inputs:[],outputs:["out.txt"],maxTurns:4,dryRunDefault:false}' > m.json
	export ANTHROPIC_API_KEY=$ANTHROPIC_KEY
	run sfma run m.json
	[ "$status" -eq 1 ]
	[ "$(requests_to /v1/messages)" -eq 3 ]
	jq -e '.endpoints.remote | .consecutiveFailures == 3 and (.downUntil | type) == "number"' ws/.sfma/memory.json
	# the next run: no request, and the error names the way out
	rm -f log.jsonl
	run sfma run m.json
	[ "$status" -eq 1 ]
	[[ "$output" == *"all endpoints down until "*"; sfma endpoints $PWD/ws --reset remote to try again now"* ]]
	[ "$(requests_to /v1/messages)" -eq 0 ]
	run sfma endpoints ws
	[[ "$output" == "remote calls=3 failures=3 availability=0.343 "*" downUntil=20"* ]]
	run sfma endpoints ws --reset remote
	[ "$status" -eq 0 ]
	jq -e '.endpoints.remote.reset.by == "sfma endpoints"' ws/.sfma/memory.json
	# back on the same port, answering
	stop_server
	cand=$(jq -Rn --arg c '{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}' '$c')
	serve "{\"/v1/messages\":[{\"json\":{\"type\":\"message\",\"role\":\"assistant\",\"stop_reason\":\"end_turn\",\"content\":[{\"type\":\"text\",\"text\":$cand}]}},
	  {\"json\":{\"type\":\"message\",\"role\":\"assistant\",\"stop_reason\":\"tool_use\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"done\",\"input\":{\"summary\":\"s\"}}]}},
	  {\"json\":{\"type\":\"message\",\"role\":\"assistant\",\"stop_reason\":\"end_turn\",\"content\":[{\"type\":\"text\",\"text\":\"{\\\"pass\\\":false,\\\"reason\\\":\\\"no out.txt\\\"}\"}]}}]}" "$port"
	run sfma run m.json
	[ "$(requests_to /v1/messages)" -ge 1 ]
	# the reset was read once: the state the run leaves has no reset in it
	jq -e '.endpoints.remote | has("reset") | not' ws/.sfma/memory.json
	jq -e '.endpoints.remote | .consecutiveFailures == 0 and .downUntil == null' ws/.sfma/memory.json
}
