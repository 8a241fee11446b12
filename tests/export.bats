#!/usr/bin/env bats
# sfma export --otlp: a record as OpenTelemetry traces (OTLP/JSON), read
# back with a protobuf library that is not ours (protobufjs, tests/
# package.json) against the official opentelemetry-proto definitions
# (tests/otlp-decode.js), its attributes checked against the pinned
# semantic conventions' own definitions (tests/otlp-semconv.py), and sent
# to a collector stand-in on 127.0.0.1 (tests/otlp-collector.py).

bats_require_minimum_version 1.5.0
load helpers
load plan-standin

setup() {
	require jq
	require node
	require python3
	python3 -c 'import yaml' || { echo "python3-yaml missing (make deps)" >&2; return 1; }
	[ -d "$REPO/tests/node_modules/protobufjs" ] || { echo "protobufjs missing: make deps (npm ci in tests/)" >&2; return 1; }
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_MOCK_LATENCY_MS SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY TRACEPARENT
	unset OTEL_EXPORTER_OTLP_HEADERS OTEL_EXPORTER_OTLP_TRACES_HEADERS OTEL_EXPORTER_OTLP_TIMEOUT OTEL_EXPORTER_OTLP_TRACES_TIMEOUT
}

teardown() {
	[ -z "${COLLECTOR_PID:-}" ] || kill "$COLLECTOR_PID" 2>/dev/null || true
}

# decode FILE: what protobufjs reads of the export, into FILE.decoded.
decode() {
	node "$REPO/tests/otlp-decode.js" "$1" >"$1.decoded" || return 1
}

conforms() {
	run python3 "$REPO/tests/otlp-semconv.py" "$1"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == "semconv 1.41.0: "*" conform" ]]
}

# The spans of an export, each as {name, id, parent, start, end, status, a: {key: value}, events}.
SPANS='[.resourceSpans[].scopeSpans[].spans[] | {name, trace: .traceId, id: .spanId, parent: .parentSpanId,
	start: .startTimeUnixNano, end: .endTimeUnixNano, kind, flags, status,
	a: ([.attributes[] | {(.key): (.value | to_entries[0].value)}] | add),
	events: [.events[]? | {name, t: .timeUnixNano, a: ([.attributes[] | {(.key): (.value | to_entries[0].value)}] | add)}]}]'

# jq: a time in nanoseconds (a decimal string past 2^53) as a number of
# its last 15 digits, exact, for differences within a run.
NS='def ns: .[-15:] | tonumber; '

hello() {
	cp "$REPO/examples/hello/manifest.json" m.json
	sfma run m.json --apply >/dev/null
}

CAND2=$(jq -nc '{mission:"m",successCriteria:["the files exist"],loopRoles:[{name:"w",duty:"d"}],
	firstTasks:[{id:"A",description:"write a"},{id:"B",description:"write b"}],schedule:[]} | tojson')

# two_loops: a run of two loops on the scripted model (native anthropic
# calls and usage): loop 1 reads big.txt twice (the context budget
# compacts), is refused a write outside the workspace, writes a.txt and
# is done; loop 2 is rate-limited once, writes b.txt and is done. The
# refusal fails the run.
two_loops() {
	standin_bin
	cat >m.json <<'JSON'
{"name":"pair","workspace":"ws","taskStatement":"two files",
 "modelEndpoints":[{"name":"a","provider":"anthropic","model":"claude-test"},{"name":"b","provider":"openai","model":"gpt-test"}],
 "allowedCommands":["echo"],"inputs":["big.txt"],"outputs":["a.txt","b.txt"],"maxTurns":30,"maxLoops":2,
 "maxContextBytes":16384,"dryRunDefault":false}
JSON
	mkdir -p ws
	python3 -c 'import sys; sys.stdout.write("".join(("line %05d of big.txt" % i).ljust(63, ".") + "\n" for i in range(128)))' >ws/big.txt
	export SFMA_MOCK=$(jq -nc --argjson c "$CAND2" --arg log "$BATS_TEST_TMPDIR/requests.jsonl" '{log:$log,endpoints:["a","b"],bootstrap:[$c],
	 tasks:{A:[{calls:[["read",{path:"big.txt"}]],usage:{inputTokens:100,outputTokens:20,cachedInputTokens:50}},
	           {calls:[["read",{path:"big.txt"}]],usage:{inputTokens:3000,outputTokens:10}},
	           {calls:[["write",{path:"../x",content:"x"}]]},
	           {calls:[["write",{path:"a.txt",content:"a"}]]},{calls:[["done",{summary:"a done"}]]}],
	       B:[{attempts:[{ok:false,status:429,errorClass:"rate-limited",error:"slow down",latencyMs:2,waitMs:0}],
	           calls:[["write",{path:"b.txt",content:"b"}]]},{calls:[["done",{summary:"b done"}]]}]}}')
	run sfma run m.json --apply
	[[ "$output" == *"FAILED turns="* ]] || { echo "$output"; return 1; }
	unset SFMA_MOCK
}

# hand_built: the two_loops record with what other stages add by hand,
# rechained and resealed (tests/helpers.bash, rewrite): the acceptance
# command of loop 1's done, which fails, and the second it took; the provider's stop word and
# class on the calls that made native calls; cache writes, reasoning
# tokens and a cost on the first call with usage.
hand_built() {
	rewrite '
done1 = next(i for i, e in enumerate(es) if e["kind"] == "task" and e["loop"] == 1 and e["data"]["call"]["tool"] == "done")
seq = max(e["seq"] for e in es) + 1
es.insert(done1 + 2, {"anchor": es[done1]["anchor"], "id": "verdict-%d" % seq, "kind": "verdict", "loop": 1,
    "refs": [es[done1]["id"]], "seq": seq,
    "data": {"acceptance": {"cmd": "echo check", "exit": 1, "expected": 0, "index": 0, "pass": False},
             "run": {"durationMs": 12.5, "exit": 1, "timedOut": False}}})
# the command took wall time as well: every anchor after it a second later,
# so its 12.5 ms are never compressed into a gap the loops already fill
for e in es[done1 + 3:]:
    if e["kind"] == "clock-anchor":
        e["data"]["wallMs"] += 1000
for e in es:
    if e["kind"] == "call" and e["data"].get("toolCalls"):
        e["data"].update(stopReason="tool_use", stop="tool")
first = next(e for e in es if e["kind"] == "call" and "usage" in e["data"])
first["data"]["usage"].update(cacheWriteTokens=7, reasoningTokens=5)
first["data"]["costUsd"] = 0.0125
'
	sfma-verify ws >/dev/null
}

@test "the hello run decodes with protobufjs against opentelemetry-proto: ids from entry hashes, times from the anchors" {
	hello
	run sfma export --otlp ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	echo "$output" >e.json
	# one line of canonical JSON
	[ "$(wc -l <e.json)" -eq 1 ]
	decode e.json
	jq "$SPANS" e.json.decoded >spans.json
	t=ws/.sfma/trace.jsonl
	first=$(head -1 $t | jq -r .hash)
	# the trace id is the first 16 bytes of the run's first entry hash, the run span the next 8
	jq -e --arg h "$first" 'all(.[]; .trace == $h[0:32]) and (.[0].id == $h[32:48]) and .[0].parent == null' spans.json
	# every span made of an entry is named by its hash, and carries its line
	jq -e 'all(.[1:][] | select(.a["sfma.loop"] == null or .name != "invoke_agent hello"); .id == .a["sfma.entry.hash"][0:16])' spans.json
	for s in $(jq -c '.[] | select(.a["sfma.entry.id"] != null) | [.a["sfma.trace.line"], .a["sfma.entry.hash"]]' spans.json); do
		line=$(jq -r '.[0]' <<<"$s")
		[ "$(sed -n "${line}p" $t | jq -r .hash)" = "$(jq -r '.[1]' <<<"$s")" ]
	done
	# a span per call and per tool call, a loop span, the run span
	[ "$(jq 'map(select(.name | startswith("chat "))) | length' spans.json)" -eq "$(jq -s 'map(select(.kind == "call")) | length' $t)" ]
	[ "$(jq 'map(select(.name | startswith("execute_tool "))) | length' spans.json)" -eq "$(jq -s 'map(select(.kind == "task")) | length' $t)" ]
	jq -e 'map(select(.name == "invoke_agent hello")) | length == 2' spans.json
	# the run span runs from the opening anchor to the closing one, on the trace's clock
	open=$(jq -s -r 'map(select(.kind == "clock-anchor"))[0].data.wallMs' $t)
	close=$(jq -s -r 'map(select(.kind == "clock-anchor"))[-1].data.wallMs' $t)
	jq -e --arg s "${open}000000" --arg e "${close}000000" '.[0].start == $s and .[0].end == $e' spans.json
	# the verdict is the status: completed is OK
	jq -e '.[0].status.code == 1 and .[0].a["gen_ai.agent.name"] == "hello" and .[0].a["sfma.record.sealed"] == true' spans.json
	# the command's span lasts its durationMs
	dur=$(jq -s 'map(select(.kind == "verdict" and .data.run.durationMs))[0].data.run.durationMs * 1000000 | round' $t)
	jq -e --argjson d "$dur" "$NS"'map(select(.name == "execute_tool run"))[0] | (.end | ns) - (.start | ns) == $d' spans.json
	conforms e.json.decoded
	# the resource says which conventions and record
	jq -e '.resourceSpans[0] | .schemaUrl == "https://opentelemetry.io/schemas/1.41.0" and
		(.resource.attributes | map({(.key): (.value | to_entries[0].value)}) | add |
		 .["sfma.semconv.version"] == "1.41.0" and .["service.name"] == "sfma" and .["sfma.workspace"] == "ws")' e.json.decoded
}

@test "sfma export is sfma-export, and one record always exports to the same bytes, wherever it lies" {
	hello
	sfma export --otlp ws >a.json
	sfma-export --otlp ws >b.json
	cmp a.json b.json
	sfma export --otlp --content ws >c1.json
	sfma export --otlp --content ws >c2.json
	cmp c1.json c2.json
	# a copy elsewhere, later, named alike: the same bytes (nothing of the
	# host, the clock or the path beyond its name goes in)
	mkdir other && cp -a ws other/ws && touch -d '2001-01-01' other/ws/.sfma/trace.jsonl
	(cd other && sfma export --otlp ws) >d.json
	cmp a.json d.json
}

@test "a multi-loop run with a refusal, a compaction and an acceptance failure exports every one of them" {
	two_loops
	hand_built
	sfma export --otlp ws >e.json
	decode e.json
	conforms e.json.decoded
	jq "$SPANS" e.json.decoded >spans.json
	t=ws/.sfma/trace.jsonl
	# the loops are sibling subtrees under the run span
	run_id=$(jq -r '.[0].id' spans.json)
	jq -e --arg r "$run_id" '[.[] | select(.a["sfma.loop"] != null and (.name | startswith("invoke_agent")))] |
		length == 2 and all(.[]; .parent == $r) and (map(.a["sfma.loop"] | tonumber) | sort) == [1,2]' spans.json
	loop1=$(jq -r '.[] | select(.name == "invoke_agent pair" and .a["sfma.loop"] == "1") | .id' spans.json)
	loop2=$(jq -r '.[] | select(.name == "invoke_agent pair" and .a["sfma.loop"] == "2") | .id' spans.json)
	# every entry of a loop is under its loop's span
	jq -e --arg l1 "$loop1" --arg l2 "$loop2" 'all(.[] | select(.a["sfma.loop"] != null and (.name | startswith("invoke_agent") | not));
		.parent == (if .a["sfma.loop"] == "1" then $l1 else $l2 end))' spans.json
	# the refusal: an execute_tool span in error, the hard tier's reason as its message
	jq -e '[.[] | select(.a["error.type"] == "refused")] | length == 1 and .[0].name == "execute_tool write" and
		.[0].status == {"code":2,"message":"write ../x: outside workspace"} and .[0].a["sfma.hard_tier.pass"] == false and
		.[0].a["sfma.tool.path"] == "../x"' spans.json
	# every compaction, as an event of its loop's span
	n=$(jq -s 'map(select(.kind == "compaction")) | length' $t)
	[ "$n" -ge 1 ]
	jq -e --argjson n "$n" --arg l1 "$loop1" '[.[] | .id as $id | .events[] | select(.name == "sfma.compaction") |
		{span: $id, a}] | length == $n and all(.[]; .span == $l1 and (.a["sfma.compaction.after_bytes"] | tonumber) <= 16384)' spans.json
	# the acceptance failure: a span of its own, in error
	jq -e "$NS"'[.[] | select(.name == "execute_tool acceptance")] | length == 1 and
		.[0].status == {"code":2,"message":"acceptance failed: echo check: exit=1 (expected 0)"} and
		.[0].a["error.type"] == "acceptance_failed" and .[0].a["sfma.exit_code"] == "1" and .[0].a["sfma.acceptance.cmd"] == "echo check" and
		(.[0].end | ns) - (.[0].start | ns) == 12500000' spans.json
	# the soft tier's verdicts, as the conventions' evaluation results
	n=$(jq -s 'map(select(.kind == "verdict" and .data.tier == "soft")) | length' $t)
	[ "$n" -ge 1 ]
	jq -e --argjson n "$n" '[.[].events[] | select(.name == "gen_ai.evaluation.result" and .a["gen_ai.evaluation.name"] == "sfma.soft_tier")] |
		length == $n and all(.[]; .a["gen_ai.evaluation.score.label"] == "pass")' spans.json
	# the run failed: its status says why
	jq -e '.[0].status.code == 2 and (.[0].status.message | test("refused by the hard tier")) and .[0].a["error.type"] == "failed" and
		([.[0].events[].name] | index("sfma.error") != null)' spans.json
	# the rate-limited attempt: a chat span in error with the error class
	jq -e '[.[] | select(.a["error.type"] == "rate-limited")] | length == 1 and .[0].status == {"code":2,"message":"slow down"} and
		.[0].a["sfma.http.status"] == "429"' spans.json
	# native calls: the provider's call id names the tool span
	jq -s -r 'map(select(.kind == "task")) | length' $t >tasks
	jq -e --argjson n "$(cat tasks)" '[.[] | select(.name | startswith("execute_tool ")) | select(.name != "execute_tool acceptance")] |
		length == $n and all(.[]; .a["gen_ai.tool.call.id"] | test("^toolu_[0-9]+_0$"))' spans.json
	# usage as the pinned conventions count it: Anthropic's input plus its cache reads and writes
	jq -e '[.[] | select((.name | startswith("chat ")) and .a["gen_ai.usage.cache_creation.input_tokens"] != null)][0].a |
		.["gen_ai.usage.input_tokens"] == "157" and .["gen_ai.usage.cache_read.input_tokens"] == "50" and
		.["gen_ai.usage.cache_creation.input_tokens"] == "7" and .["gen_ai.usage.reasoning.output_tokens"] == "5" and
		.["gen_ai.usage.output_tokens"] == "20" and .["sfma.cost_usd"] == 0.0125 and .["gen_ai.provider.name"] == "anthropic" and
		.["gen_ai.request.model"] == "claude-test"' spans.json
	jq -e '.[0].a["gen_ai.usage.input_tokens"] == "3157" and .[0].a["gen_ai.usage.output_tokens"] == "30"' spans.json
	# the stop word as the finish reason
	jq -e '[.[] | select(.a["sfma.stop"] == "tool")] | length > 0 and all(.[]; .a["gen_ai.response.finish_reasons"] == {"values":[{"stringValue":"tool_use"}]})' spans.json
}

@test "TRACEPARENT: the run joins the caller's trace under the caller's span; a malformed one is ignored with one line" {
	export TRACEPARENT=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
	hello
	jq -s -e '.[1].kind == "lifecycle" and .[1].data.traceparent == env.TRACEPARENT' ws/.sfma/trace.jsonl
	sfma export --otlp ws >e.json
	decode e.json
	jq "$SPANS" e.json.decoded >spans.json
	# the caller's trace id, the run span under the caller's span, its parent known to be remote
	jq -e 'all(.[]; .trace == "0af7651916cd43dd8448eb211c80319c") and .[0].parent == "b7ad6b7169203331" and
		.[0].flags == 769 and all(.[1:][]; .flags == 257) and .[0].a["sfma.traceparent"] == env.TRACEPARENT' spans.json
	# the ids are still the record's: the same bytes again
	sfma export --otlp ws | cmp - e.json
	conforms e.json.decoded
	# malformed: the run goes on without it, says so once, records none
	rm -rf ws
	TRACEPARENT=00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01 run sfma run m.json --apply
	[ "$status" -eq 0 ]
	[ "$(grep -c 'TRACEPARENT ignored' <<<"$output")" -eq 1 ]
	jq -s -e '.[1].data | has("traceparent") | not' ws/.sfma/trace.jsonl
	sfma export --otlp ws >f.json
	decode f.json
	jq -e "$SPANS"' | .[0].parent == null and .[0].flags == 1 and .[0].trace != "0af7651916cd43dd8448eb211c80319c"' f.json.decoded
}

@test "message contents leave the machine only with --content, in the conventions' message shapes" {
	hello
	greeting=$(cat ws/hello.txt)
	sfma export --otlp ws >plain.json
	grep -q -F "written by the mock model" plain.json && return 1
	grep -q 'gen_ai.input.messages\|gen_ai.output.messages\|gen_ai.system_instructions\|gen_ai.tool.call.arguments\|gen_ai.tool.call.result' \
		plain.json && return 1
	sfma export --otlp --content ws >full.json
	decode full.json
	conforms full.json.decoded
	jq "$SPANS" full.json.decoded >spans.json
	# the system prompt once, on the first call; each request's new message; each reply
	jq -e '[.[] | select(.a["gen_ai.system_instructions"] != null)] | length == 1 and
		(.[0].a["gen_ai.system_instructions"] | fromjson | .[0].type == "text" and (.[0].content | test("sfma genesis")))' spans.json
	jq -e '[.[] | select(.name | startswith("chat "))] | all(.[]; (.a["gen_ai.input.messages"] | fromjson | .[0].role == "user" and .[0].parts[0].type == "text") and
		(.a["gen_ai.output.messages"] | fromjson | .[0].role == "assistant" and .[0].finish_reason == "stop"))' spans.json
	# the write's content as the call's arguments, the command's output as its result
	jq -e --arg g "$greeting" '.[] | select(.name == "execute_tool write") | .a["gen_ai.tool.call.arguments"] | fromjson | .content == $g + "\n" and .path == "hello.txt"' spans.json
	jq -e '.[] | select(.name == "execute_tool run") | .a["gen_ai.tool.call.result"] | fromjson | startswith("exit=0\nstdout:hello from the sandbox")' spans.json
}

@test "--content with native calls: the tool message and the provider's calls in the conventions' parts" {
	two_loops
	sfma export --otlp --content ws >e.json
	decode e.json
	conforms e.json.decoded
	jq "$SPANS" e.json.decoded >spans.json
	jq -e '[.[] | select(.a["sfma.tool_calls"] != null)] | length > 0 and all(.[]; .a["gen_ai.output.messages"] | fromjson |
		.[0].finish_reason == "tool_call" and (.[0].parts | map(select(.type == "tool_call")) | length == 1 and (.[0].id | startswith("toolu_"))))' spans.json
	jq -e '[.[] | select(.a["gen_ai.input.messages"] != null) | .a["gen_ai.input.messages"] | fromjson | select(.[0].role == "tool")] |
		length > 0 and all(.[]; .[0].parts[0].type == "tool_call_response" and (.[0].parts[0].id | startswith("toolu_")))' spans.json
}

@test "the attributes follow the pinned conventions' definitions, and the check catches a misspelt or mistyped one" {
	two_loops
	hand_built
	sfma export --otlp --content ws >e.json
	decode e.json
	conforms e.json.decoded
	# the checker is not a rubber stamp: one name misspelt, one value of the wrong type, one unlisted
	jq -c '(.. | objects | select(.key? == "gen_ai.usage.input_tokens")).key = "gen_ai.usage.input_token"' e.json.decoded >bad1.json
	run python3 "$REPO/tests/otlp-semconv.py" bad1.json
	[ "$status" -eq 1 ] && [[ "$output" == *"gen_ai.usage.input_token is not an attribute of semantic conventions 1.41.0"* ]]
	jq -c '(.. | objects | select(.key? == "gen_ai.usage.output_tokens")).value = {"stringValue":"20"}' e.json.decoded >bad2.json
	run python3 "$REPO/tests/otlp-semconv.py" bad2.json
	[ "$status" -eq 1 ] && [[ "$output" == *"gen_ai.usage.output_tokens is int, written as stringValue"* ]]
	jq -c '(.. | objects | select(.key? == "gen_ai.tool.type")).key = "gen_ai.agent.id"' e.json.decoded >bad3.json
	run python3 "$REPO/tests/otlp-semconv.py" bad3.json
	[ "$status" -eq 1 ] && [[ "$output" == *"gen_ai.agent.id is not an attribute of this span's definition"* ]]
	jq -c 'walk(if type == "array" then map(select((type == "object" and .key == "gen_ai.provider.name") | not)) else . end)' \
		e.json.decoded >bad4.json
	run python3 "$REPO/tests/otlp-semconv.py" bad4.json
	[ "$status" -eq 1 ] && [[ "$output" == *"gen_ai.provider.name is required"* ]]
}

@test "the decoder is no rubber stamp either: base64 ids, enum names, numbers for int64 and snake_case keys are refused" {
	hello
	sfma export --otlp ws >e.json
	jq -c '.resourceSpans[0].scopeSpans[0].spans[0].spanId = "SmCxFFSSsY4="' e.json >b64.json
	run node "$REPO/tests/otlp-decode.js" b64.json
	[ "$status" -eq 1 ] && [[ "$output" == *"spanId: not 8 bytes as 16 lowercase hex digits"* ]]
	jq -c '.resourceSpans[0].scopeSpans[0].spans[0].kind = "SPAN_KIND_INTERNAL"' e.json >enum.json
	run node "$REPO/tests/otlp-decode.js" enum.json
	[ "$status" -eq 1 ] && [[ "$output" == *"an enum is written as one of its integers"* ]]
	jq -c '.resourceSpans[0].scopeSpans[0].spans[0].startTimeUnixNano |= tonumber' e.json >num.json
	run node "$REPO/tests/otlp-decode.js" num.json
	[ "$status" -eq 1 ] && [[ "$output" == *"a 64-bit integer is a decimal string"* ]]
	jq -c '.resourceSpans[0].scope_spans = .resourceSpans[0].scopeSpans | del(.resourceSpans[0].scopeSpans)' e.json >snake.json
	run node "$REPO/tests/otlp-decode.js" snake.json
	[ "$status" -eq 1 ] && [[ "$output" == *"scope_spans is not a field of ResourceSpans"* ]]
	jq -c '.resourceSpans[0].scopeSpans[0].spans[2].parentSpanId = "1111111111111111"' e.json >orphan.json
	run node "$REPO/tests/otlp-decode.js" orphan.json
	[ "$status" -eq 1 ] && [[ "$output" == *"roots for 1 runs"* ]]
}

@test "a halt is an event of the run, and the run span's status says why" {
	cp "$REPO/examples/hello/manifest.json" m.json
	jq '.maxTurns = 2' m.json >h.json
	run sfma run h.json --apply
	[[ "$output" == *"HALTED-MAXTURNS turns=2 "* ]]
	sfma export --otlp ws >e.json
	decode e.json
	conforms e.json.decoded
	jq -e "$SPANS"' | .[0] | .status.code == 2 and .a["error.type"] == "halted-maxTurns" and .a["sfma.verdict"] == "halted-maxTurns" and
		([.events[] | select(.name == "sfma.halt")] | length == 1 and .[0].a["sfma.halt.trigger"] == "maxTurns")' e.json.decoded
}

@test "every run of the trace is a trace of its own; --run picks one; the earlier runner's records export too" {
	hello
	sfma run m.json --apply >/dev/null
	sfma export --otlp ws >e.json
	decode e.json
	jq -e "$SPANS"' | (map(.trace) | unique | length == 2) and (map(select(.a["sfma.run"] != null)) | map(.a["sfma.run"]) == ["1","2"])' e.json.decoded
	# only the last run's record seals it
	jq -e "$SPANS"' | map(select(.a["sfma.run"] != null) | .a["sfma.record.sealed"]) == [false, true]' e.json.decoded
	sfma export --otlp --run -1 ws >last.json
	decode last.json
	jq -e "$SPANS"' | map(select(.a["sfma.run"] != null) | .a["sfma.run"]) == ["2"]' last.json.decoded
	run sfma export --otlp --run 3 ws
	[ "$status" -eq 1 ] && [ "$output" = "sfma-export: ws: no run 3 (the trace holds 2)" ]
	# the earlier runner's records: a legacy prefix has no hashes, its ids come from its lines' bytes
	for f in legacy multirun unicode signed unsigned; do
		cp -r "$INTEROP/$f" "$f"
		run sfma export --otlp "$f/ws"
		[ "$status" -eq 0 ] || { echo "$f: $output"; return 1; }
		echo "$output" >"$f.json"
		decode "$f.json"
		conforms "$f.json.decoded"
	done
	runs=$(sfma log multirun/ws --all --json | jq -s 'map(select(.row == "header")) | length')
	[ "$(jq "$SPANS"' | map(.trace) | unique | length' multirun.json.decoded)" -eq "$runs" ]
}

# collector [ANSWER...]: the stand-in collector, its port in $PORT.
collector() {
	mkdir -p col
	python3 "$REPO/tests/otlp-collector.py" col "$@" >/dev/null 2>&1 &
	COLLECTOR_PID=$!
	for _ in $(seq 100); do [ -s col/port ] && break; sleep 0.05; done
	PORT=$(cat col/port)
}

@test "--endpoint: one POST to URL/v1/traces, JSON, the OTEL headers percent-decoded, the body the same bytes" {
	hello
	collector
	export OTEL_EXPORTER_OTLP_HEADERS='api-key = s3cr%20t%2C,x-team=blue,empty='
	run sfma export --otlp --endpoint "http://127.0.0.1:$PORT" ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == "EXPORT_OK spans=9 traces=1 workspaces=1 endpoint=http://127.0.0.1:$PORT/v1/traces" ]]
	jq -e '.path == "/v1/traces" and .headers["content-type"] == "application/json" and .headers["api-key"] == "s3cr t," and
		.headers["x-team"] == "blue" and .headers.empty == "" and (.headers["user-agent"] | startswith("sfma-export/"))' col/req-1.json
	sfma export --otlp ws | head -c -1 | cmp - col/req-1.body
	# the signal's own variable overrides; a base with a path keeps it
	OTEL_EXPORTER_OTLP_TRACES_HEADERS='x-only=1' run sfma export --otlp --endpoint "http://localhost:$PORT/" ws
	[ "$status" -eq 0 ]
	jq -e '.path == "/v1/traces" and .headers["x-only"] == "1" and (.headers | has("api-key") | not)' col/req-2.json
	run sfma export --otlp --endpoint "http://127.0.0.1:$PORT/base" ws
	[ "$status" -eq 1 ] && [[ "$output" == "sfma-export: POST http://127.0.0.1:$PORT/base/v1/traces: HTTP 404: no such path" ]]
}

@test "--endpoint failures are one line and exit 1: a 400, a refused connection, a partial success that rejected spans" {
	hello
	collector '{"status":400,"body":"{\"code\":3,\"message\":\"bad data\\nsecond line\"}"}' \
		'{"status":200,"body":"{\"partialSuccess\":{\"rejectedSpans\":\"2\",\"errorMessage\":\"too old\"}}"}' \
		'{"status":200,"body":"{\"partialSuccess\":{\"rejectedSpans\":\"0\",\"errorMessage\":\"deprecated field\"}}"}' \
		'{"status":503,"headers":{"Retry-After":"0"}}' '{"status":200}'
	url="http://127.0.0.1:$PORT"
	run sfma export --otlp --endpoint "$url" ws
	[ "$status" -eq 1 ] && [ "${#lines[@]}" -eq 1 ]
	[ "$output" = "sfma-export: POST $url/v1/traces: HTTP 400: bad data?second line" ]
	run sfma export --otlp --endpoint "$url" ws
	[ "$status" -eq 1 ] && [ "$output" = "sfma-export: POST $url/v1/traces: the collector rejected 2 of 9 spans: too old" ]
	run --separate-stderr sfma export --otlp --endpoint "$url" ws
	[ "$status" -eq 0 ] && [[ "$output" == EXPORT_OK* ]]
	[ "$stderr" = "sfma-export: POST $url/v1/traces: the collector took every span and says: deprecated field" ]
	# 503 is retried (after its Retry-After), then taken
	run sfma export --otlp --endpoint "$url" ws
	[ "$status" -eq 0 ] && [[ "$output" == EXPORT_OK* ]]
	[ -f col/req-5.json ]
	kill "$COLLECTOR_PID"
	wait "$COLLECTOR_PID" 2>/dev/null || true
	run sfma export --otlp --endpoint "$url" ws
	[ "$status" -eq 1 ] && [ "${#lines[@]}" -eq 1 ]
	[[ "$output" == "sfma-export: POST $url/v1/traces: "*"onnect"* ]]
}

@test "--endpoint is https, or http to loopback only; OTEL headers that are not the specification's format are refused unquoted" {
	hello
	run sfma export --otlp --endpoint http://collector.example:4318 ws
	[ "$status" -eq 2 ] && [[ "$output" == "sfma-export: --endpoint: must be https://"* ]]
	run sfma export --otlp --endpoint 'https://c.example/?k=v' ws
	[ "$status" -eq 2 ] && [[ "$output" == "sfma-export: --endpoint: no user, query or fragment allowed"* ]]
	run sfma export --otlp --endpoint ftp://127.0.0.1/ ws
	[ "$status" -eq 2 ]
	for bad in 'Authorization=Basic dG9rZW4=' 'k=v;p=1' 'k=a%0db' 'noequals' 'k=v,' 'Content-Type=text/plain' 'k=%zz' 'a b=c'; do
		OTEL_EXPORTER_OTLP_HEADERS=$bad run sfma export --otlp --endpoint http://127.0.0.1:9 ws
		[ "$status" -eq 2 ] || { echo "$bad: $output"; return 1; }
		[[ "$output" == "sfma-export: OTEL_EXPORTER_OTLP_HEADERS: entry "* ]] || { echo "$bad: $output"; return 1; }
		grep -q -F 'dG9rZW4' <<<"$output" && return 1
	done
	OTEL_EXPORTER_OTLP_TIMEOUT=soon run sfma export --otlp --endpoint http://127.0.0.1:9 ws
	[ "$status" -eq 2 ] && [[ "$output" == "sfma-export: OTEL_EXPORTER_OTLP_TIMEOUT: milliseconds"* ]]
}

@test "a batch is one request, a resourceSpans per workspace; make export sends the batch example's runs" {
	require make
	unset MAKEFLAGS MFLAGS MAKELEVEL
	for n in alpha beta; do
		mkdir -p $n && jq --arg n "$n" '.name = $n | .workspace = "ws"' "$REPO/examples/hello/manifest.json" >$n/m.json
		(cd $n && sfma run m.json --apply >/dev/null)
	done
	sfma export --otlp alpha/ws beta/ws >e.json
	decode e.json
	jq -e '.resourceSpans | length == 2 and (map(.resource.attributes | map(select(.key == "sfma.workspace"))[0].value.stringValue) == ["alpha/ws","beta/ws"])' e.json.decoded
	jq -e "$SPANS"' | map(select(.a["sfma.run"] != null) | .name) == ["invoke_agent alpha","invoke_agent beta"]' e.json.decoded
	# a workspace named twice (a path, another path or a link to it) goes out once
	ln -s alpha al
	run --separate-stderr sfma export --otlp alpha/ws ./alpha/ws beta/ws al/ws
	[ "$status" -eq 0 ]
	[ "$stderr" = "$(printf 'sfma-export: ./alpha/ws: the same workspace as alpha/ws, exported once\nsfma-export: al/ws: the same workspace as alpha/ws, exported once')" ]
	jq -e '.resourceSpans | length == 2' <<<"$output"
	# all of it or nothing: one workspace that cannot be read, nothing printed
	run --separate-stderr sfma export --otlp alpha/ws missing/ws
	[ "$status" -eq 1 ] && [ -z "$output" ] && [[ "$stderr" == "sfma-export: missing/ws: No such file or directory" ]]
	# the batch example: its runs, then one request to the collector
	cp -r "$REPO/examples/batch" batch
	rm -rf batch/runs batch/stamps batch/summary.txt
	collector
	run make -C batch -j2 export ENDPOINT="http://127.0.0.1:$PORT" SFMA=sfma
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == *"EXPORT_OK "*"traces=4 workspaces=4 endpoint=http://127.0.0.1:$PORT/v1/traces"* ]]
	decode col/req-1.body
	jq -e '.resourceSpans | length == 4' col/req-1.body.decoded
	[ ! -f col/req-2.json ]
	# without ENDPOINT, the request goes to traces.json
	run make -C batch export SFMA=sfma
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	decode batch/traces.json
	jq -e '.resourceSpans | length == 4' batch/traces.json.decoded
}

@test "hostile workspaces: a FIFO or a link for the trace or the record, a broken chain - one line, exit 1, nothing printed" {
	hello
	cp -a ws good
	mv ws/.sfma/trace.jsonl t && mkfifo ws/.sfma/trace.jsonl
	run --separate-stderr timeout 10 sfma export --otlp ws
	[ "$status" -eq 1 ] && [ -z "$output" ] && [ "$stderr" = "sfma-export: ws/.sfma/trace.jsonl: not a regular file" ]
	rm ws/.sfma/trace.jsonl && ln -s "$PWD/t" ws/.sfma/trace.jsonl
	run timeout 10 sfma export --otlp ws
	[ "$status" -eq 1 ] && [ "$output" = "sfma-export: ws/.sfma/trace.jsonl: is a symbolic link, not followed" ]
	rm ws/.sfma/trace.jsonl && mv t ws/.sfma/trace.jsonl
	mv ws/.sfma/result.json r && mkfifo ws/.sfma/result.json
	run timeout 10 sfma export --otlp ws
	[ "$status" -eq 1 ] && [ "$output" = "sfma-export: ws/.sfma/result.json: not a regular file" ]
	rm ws/.sfma/result.json && mv r ws/.sfma/result.json
	# one byte changed in the chain: nothing of it goes out
	sed -i '0,/"endpoint":"offline"/s//"endpoint":"offlinX"/' ws/.sfma/trace.jsonl
	run --separate-stderr sfma export --otlp ws
	[ "$status" -eq 1 ] && [ -z "$output" ]
	[[ "$stderr" == "sfma-export: ws: the trace does not verify: "*"(nothing exported; sfma-verify tells more)" ]]
	# a torn final line (a run still writing) is left out, as every reader does
	printf '{"kind":"call","da' >>good/.sfma/trace.jsonl
	run sfma export --otlp good
	[ "$status" -eq 0 ]
	usage=(sfma export ws)
	run "${usage[@]}"
	[ "$status" -eq 2 ] && [[ "$output" == "sfma-export: --otlp is required"* ]]
	run sfma export --otlp
	[ "$status" -eq 2 ]
	run sfma export --otlp --run 0 good
	[ "$status" -eq 2 ]
}

@test "hostile entries (wrong types, huge or negative numbers, U+0000, clocks set back, unknown kinds) still export what decodes" {
	hello
	# (c: the confinement entries after the first lifecycle)
	rewrite '
c = sum(1 for e in es if e["kind"] == "confinement")
es[0]["data"]["wallMs"] = 1e300
es[4 + c]["data"]["latencyMs"] = -5
es[4 + c]["data"]["usage"] = {"inputTokens": 1e30, "outputTokens": "many", "cachedInputTokens": -1}
es[4 + c]["data"]["endpoint"] = "off\u0000line"
es[4 + c]["loop"] = 1e300
es[7 + c]["data"]["latencyMs"] = 86400001
es[8 + c]["data"]["call"] = {"tool": "wr\u0000ite\u202e", "path": ["not", "a", "string"]}
es[9 + c]["refs"] = [{"not": "an id"}]
es[12 + c]["loop"] = -3
es[13 + c]["data"]["run"] = {"durationMs": "long", "exit": 1e20}
es[-1]["data"]["wallMs"] = 1000
es.insert(6 + c, {"anchor": "x", "data": [1, 2], "id": 7, "kind": "no-such-kind", "loop": 0, "refs": [], "seq": 1})
es.insert(7 + c, {"kind": "lifecycle", "data": {"from": None, "to": "probation", "traceparent": "00-" + "0" * 32 + "-b7ad6b7169203331-01"}, "seq": 3})
'
	# the run marker inserted makes two runs; the first has no anchor with a time
	run --separate-stderr sfma export --otlp --content ws
	[ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
	[ "$stderr" = "sfma-export: ws: run 1 left out: no clock anchor holds a time for its spans" ]
	echo "$output" >e.json
	decode e.json
	conforms e.json.decoded
	jq -e "$SPANS"' | (.[0].end | tonumber) >= (.[0].start | tonumber) and (map(select(.name | test("wr\u0000ite"))) | length == 1)' e.json.decoded
}

@test "a workspace named with bytes that are not UTF-8 is named with U+FFFD in their place" {
	hello
	mkdir "$(printf 'w\377')" && cp -a ws "$(printf 'w\377')/ws"
	sfma export --otlp "$(printf 'w\377')/ws" >e.json
	decode e.json
	jq -e '.resourceSpans[0].resource.attributes | map(select(.key == "sfma.workspace"))[0].value.stringValue == "w\ufffd/ws"' e.json.decoded
}
