#!/usr/bin/env bats
# sfma-log: a run read back from its trace - text, NDJSON rows, --run/--all,
# --follow, colour rules, evidence, and traces that are hostile.

bats_require_minimum_version 1.5.0
load helpers
load fixtures/report/eventful
load fixtures/model/helpers
load fixtures/report/native
load fixtures/report/acceptance

setup() {
	require jq
	require python3
	model_setup
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY NO_COLOR SFMA_PAGER PAGER
}

teardown() {
	model_teardown
}

# Every file under a directory with its size and modification time.
snapshot() {
	find "$1" -printf '%p %s %T@ %m\n' | sort
}

@test "the text shows each kind of entry of a run, the refusal's reason and the final verdict" {
	eventful_run
	run sfma-log ws
	[ "$status" -eq 0 ]
	echo "$output"
	[[ "${lines[0]}" == "run 1 of 1  started 20"*"Z  trace line 1" ]]
	[[ "$output" == *"message       in 001.txt: please be brief"$'\n'* ]]
	[[ "$output" == *"clarification --task: do it"* ]]
	[[ "$output" == *"call          mock 0 ms ok"* ]]
	[[ "$output" == *"candidate     adopted: Write out.txt and show the sandbox"* ]]
	[[ "$output" == *"REFUSED invalid reply: not a JSON object"* ]]
	[[ "$output" == *"task          run echo MARKER-42"* ]]
	[[ "$output" == *"allowed run echo MARKER-42: exit=0"* ]]
	[[ "$output" == *"mutation      wrote out.txt, 11 bytes, sha256 26c60a61d01d"* ]]
	[[ "$output" == *"REFUSED write ../evil: outside workspace"* ]]
	[[ "$output" == *"message       out notify: status ok"* ]]
	[[ "$output" == *"ERROR error: done, but 2 calls were refused by the hard tier"* ]]
	[[ "$output" == *"clock-anchor  run end"* ]]
	# the endpoint's standing is the workspace's, over every run, and says so
	[[ "$output" == *"weight        endpoint mock: 8 calls so far (all runs), 0 failures"* ]]
	[[ "${lines[-3]}" == "verdict failed  turns 8  model calls 8  refused 2  invalid replies 1  "*" s  tokens in 0 out 0 cached 0  sealed by result.json" ]]
	# the done summary, from the evidence the run kept
	[[ "${lines[-2]}" == "summary Wrote out.txt; SUMMARY-7 all done" ]]
	[[ "${lines[-1]}" == "why done, but 2 calls were refused by the hard tier"* ]]
	# turns and loops: the eighth model reply is turn 8 of loop 1
	[[ "$output" == *"L1  T8    task          done"* ]]
}

@test "--json prints one object per row that jq reads, with the documented fields" {
	eventful_run
	run sfma-log ws --json
	[ "$status" -eq 0 ]
	echo "$output" | jq -e . >/dev/null
	local rows="$BATS_TEST_TMPDIR/rows" n
	echo "$output" >"$rows"
	n=$(wc -l <ws/.sfma/trace.jsonl)
	# a header, one row per trace line in order, a footer
	jq -s -e --argjson n "$n" '.[0].row == "header" and .[-1].row == "footer" and
		([.[] | select(.row == "entry") | .line] == [range(1; $n + 1)])' "$rows"
	jq -s -e '.[0] | .run == 1 and .runs == 1 and .firstLine == 1 and (.start | test("^20..-..-..T..:..:..\\....Z$"))' "$rows"
	jq -e -s 'all(.[] | select(.row == "entry"); (.t | type) == "number" and (.at | type) == "string" and
		(.seq | type) == "number" and (.kind | type) == "string" and (.display | type) == "string")' "$rows"
	jq -e -s 'any(.[]; .kind == "verdict" and .pass == false and .tier == "hard" and .tool == "write" and
		.path == "../evil" and (.reason | contains("outside workspace")))' "$rows"
	jq -e -s 'any(.[]; .kind == "verdict" and .pass == false and .tier == "protocol" and
		.reason == "invalid reply: not a JSON object" and .turn == 2)' "$rows"
	jq -e -s 'any(.[]; .kind == "verdict" and .pass and .tool == "run" and .cmd == "echo MARKER-42" and .exit == 0)' "$rows"
	# the command's duration as sfma-exec measured it: the run's own, not 0
	jq -e -s 'any(.[]; .kind == "verdict" and .tool == "run" and .durationMs > 0)' "$rows"
	jq -e -s 'any(.[]; .kind == "mutation" and .path == "out.txt" and .bytes == 11 and .applied and
		.sha256 == "26c60a61d01db5836ca70fefd44a6a016620413c8ef5f259a6c5612d4f79d3b8")' "$rows"
	jq -e -s 'any(.[]; .kind == "message" and .dir == "in" and .file == "001.txt" and .text == "please be brief")' "$rows"
	jq -e -s 'any(.[]; .kind == "message" and .dir == "out" and .messageKind == "notify" and .text == "status ok")' "$rows"
	jq -e -s 'any(.[]; .kind == "clarification" and .source == "--task" and .text == "do it")' "$rows"
	jq -e -s 'any(.[]; .kind == "result" and (.error | startswith("done, but 2 calls were refused")))' "$rows"
	jq -e -s '[.[] | select(.kind == "call") | .turn] == [1,2,3,4,5,6,7,8]' "$rows"
	jq -e -s '[.[] | select(.kind == "clock-anchor") | .anchor] == ["start","end"]' "$rows"
	jq -e -s '.[-1] | .verdict == "failed" and .sealed and .closed and .turns == 8 and .modelCalls == 8 and
		.hardTierFailures == 2 and .protocolRefusals == 1 and .record.verdict == "failed" and
		.record.name == "eventful" and (.durationMs | type) == "number"' "$rows"
}

@test "evidence that is kept is shown: the model's replies, the command's output, the written content, the summary" {
	eventful_run evidence
	run sfma-log ws
	[ "$status" -eq 0 ]
	echo "$output"
	# a reply that is one JSON object: the call by its name and members
	[[ "$output" == *'reply: run cmd=echo MARKER-42'* ]]
	[[ "$output" == *'reply: write path=out.txt content=hello\nworld'* ]]
	[[ "$output" == *"reply: not json <script>document.title='PWNED1'</script></svg>"* ]]
	[[ "$output" == *'output: exit=0\nstdout:MARKER-42\n\nstderr:'* ]]
	[[ "$output" == *'content: hello\nworld'* ]]
	[[ "$output" == *"summary Wrote out.txt; SUMMARY-7 all done"* ]]
	[[ "$output" == *"call          mock 115 ms ok, tokens in 1350 out 51"* ]]
	[[ "$output" == *"tokens in 12600 out 492 cached 0"* ]]
	# the derived clock: the command ran 180 ms after its call's 115 ms
	[[ "$output" == *"   +0.450s  L1  T3    verdict       allowed run echo MARKER-42: exit=0"* ]]
	run sfma-log ws --json
	echo "$output" >rows
	jq -e -s 'any(.[]; .kind == "call" and .reply == "{\"tool\":\"run\",\"cmd\":\"echo MARKER-42\"}" and
		any(.evidence[]; .state == "present" and .field == "reply"))' rows
	jq -e -s 'any(.[]; .kind == "verdict" and .output == "exit=0\nstdout:MARKER-42\n\nstderr:" and .durationMs == 180)' rows
	jq -e -s 'any(.[]; .kind == "mutation" and .content == "hello\nworld")' rows
	jq -e -s '.[-1] | .summary == "Wrote out.txt; SUMMARY-7 all done" and .usage.inputTokens == 12600 and
		.usage.outputTokens == 492' rows
}

@test "evidence that is missing or altered is flagged and its bytes are never shown" {
	eventful_run evidence
	local marker_out done_summary
	marker_out=$(jq -r 'select(.kind == "verdict" and .data.run) | .evidence.output.sha256' ws/.sfma/trace.jsonl)
	done_summary=$(jq -r 'select(.kind == "task" and .data.call.tool == "done") | .evidence.summary.sha256' ws/.sfma/trace.jsonl)
	printf 'exit=0\nstdout:FORGED\n\nstderr:' >"ws/.sfma/evidence/$marker_out"
	rm "ws/.sfma/evidence/$done_summary"
	run sfma-log ws
	[ "$status" -eq 0 ]
	echo "$output"
	[[ "$output" == *"evidence output altered"* ]]
	[[ "$output" == *"evidence summary missing"* ]]
	[[ "$output" != *FORGED* ]]
	[[ "$output" != *$'\nsummary '* ]]
	run sfma-log ws --json
	echo "$output" >rows
	jq -e -s 'any(.[]; .kind == "verdict" and .evidence[0].state == "altered" and (has("output") | not))' rows
	jq -e -s '.[-1].summary == null' rows
}

@test "a reference-shaped object in data is data: the reader opens no blob for it (sfma-formats(5), Evidence)" {
	eventful_run
	local sha bytes
	sha=$(jq -r 'select(.kind == "task" and .data.call.tool == "done") | .evidence.summary.sha256' ws/.sfma/trace.jsonl)
	bytes=$(jq -r 'select(.kind == "task" and .data.call.tool == "done") | .evidence.summary.bytes' ws/.sfma/trace.jsonl)
	# the model's own object (the candidate) names a blob that is kept
	jq -c --arg s "$sha" --argjson b "$bytes" \
		'if .kind == "candidate" then .data.planted = {"sha256": $s, "bytes": $b} else . end' \
		ws/.sfma/trace.jsonl >t && mv t ws/.sfma/trace.jsonl
	run sfma-log ws --json
	echo "$output" >rows
	jq -e -s 'any(.[]; .kind == "candidate" and .evidence == null and (has("summary") | not))' rows
	# the entry that references it in its evidence member still shows it
	jq -e -s 'any(.[]; .kind == "task" and .summary == "Wrote out.txt; SUMMARY-7 all done" and
		.evidence[0].field == "summary")' rows
}

@test "colour only on a terminal, never with NO_COLOR set, never into a pipe or with --json" {
	require script
	eventful_run
	# the pager's part is tested below; here the text reaches the terminal
	export SFMA_PAGER=cat
	script -qec "sfma-log ws" /dev/null >tty.out
	grep -q $'\033\\[1;31mREFUSED' tty.out
	grep -q $'\033\\[32mallowed' tty.out
	# an empty NO_COLOR is not set (no-color.org: any non-empty value)
	NO_COLOR= script -qec "sfma-log ws" /dev/null >tty-empty.out
	grep -q $'\033\\[' tty-empty.out
	NO_COLOR=1 script -qec "sfma-log ws" /dev/null >tty-nocolor.out
	grep -q 'REFUSED' tty-nocolor.out
	run grep -c $'\033' tty-nocolor.out
	[ "$output" = 0 ]
	script -qec "sfma-log ws --json" /dev/null >tty-json.out
	run grep -c $'\033' tty-json.out
	[ "$output" = 0 ]
	sfma-log ws | cat >pipe.out
	grep -q REFUSED pipe.out
	run grep -c $'\033' pipe.out
	[ "$output" = 0 ]
}

@test "--run and --all choose among the three runs of one trace" {
	cp -r "$INTEROP/multirun/ws" mr && chmod -R u+w mr
	run sfma-log mr --all --json
	[ "$status" -eq 0 ]
	echo "$output" >all
	jq -e -s '[.[] | select(.row == "header") | [.run, .runs, .firstLine]] == [[1,3,1],[2,3,17],[3,3,43]]' all
	jq -e -s '[.[] | select(.row == "footer") | [.verdict, .sealed, .lastLine]] ==
		[["completed",false,16],["failed",false,42],["completed",true,58]]' all
	jq -e -s '[.[] | select(.row == "entry")] | length == 58' all
	run sfma-log mr --run 2
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "run 2 of 3  started 2026-11-29T20:47:16.155Z  trace line 17" ]]
	[ "$(grep -c REFUSED <<<"$output")" -eq 3 ]
	[[ "$output" == *"REFUSED run echo hi; curl x: shell metacharacters are not allowed"* ]]
	[[ "$output" == *"REFUSED write ../x: outside workspace: ../x"* ]]
	[[ "$output" == *"REFUSED run git push origin: git subcommand not permitted: push"* ]]
	[ "$(sfma-log mr --run -1)" = "$(sfma-log mr)" ]
	[ "$(sfma-log mr --run -3)" = "$(sfma-log mr --run 1)" ]
	[[ "$(sfma-log mr)" == "run 3 of 3"* ]]
	run sfma-log mr --run 4
	[ "$status" -eq 1 ]
	[ "$output" = "sfma-log: mr: no run 4 (the trace holds 3)" ]
	run sfma-log mr --run 0
	[ "$status" -eq 2 ]
	run sfma-log mr --run two
	[ "$status" -eq 2 ]
	run sfma-log mr --run 1 --all
	[ "$status" -eq 2 ]
	[[ "$output" == *"--run and --all exclude each other"* ]]
}

@test "a legacy prefix that never finished is a run of its own" {
	run sfma-log "$INTEROP/legacy/ws" --all --json
	[ "$status" -eq 0 ]
	echo "$output" | jq -e -s '[.[] | select(.row == "footer") | [.firstLine, .lastLine, .verdict, .sealed]] ==
		[[1,2,null,false],[3,18,"completed",true]]'
}

@test "--follow prints a live run's rows as they arrive and exits once the run is sealed" {
	cat >m.json <<'JSON'
{"name":"slow","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["sleep","echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":8,"dryRunDefault":false}
JSON
	export SFMA_MOCK="[$EVENTFUL_CAND,{\"tool\":\"run\",\"cmd\":\"sleep 2\"},{\"tool\":\"run\",\"cmd\":\"echo FOLLOWED\"},
		{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"done\",\"summary\":\"s\"}]"
	# the follower starts first, before the workspace exists, and waits for it
	timeout 60 sfma-log ws --follow --json >follow.out 2>follow.err &
	local follower=$!
	sfma run m.json >/dev/null 2>&1
	local follow_status=0
	wait "$follower" || follow_status=$?
	cat follow.err
	[ "$follow_status" -eq 0 ]
	# the rows it printed live are the rows of the finished run
	sfma-log ws --json >after.out
	diff follow.out after.out
	jq -e -s '.[-1] | .row == "footer" and .sealed and .verdict == "completed"' follow.out
	grep -q 'echo FOLLOWED' follow.out
}

@test "--follow after a sealed run waits for the next run and shows that one only, to its seal" {
	# a workspace whose last run is sealed: the follower waits, printing nothing
	run timeout 2 sfma-log "$INTEROP/multirun/ws" --follow
	[ "$status" -eq 124 ]
	[ -z "$output" ]
	cat >m.json <<'JSON'
{"name":"again","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":8,"dryRunDefault":false}
JSON
	export SFMA_MOCK="[$EVENTFUL_CAND,{\"tool\":\"run\",\"cmd\":\"echo FIRST-RUN\"},{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"done\",\"summary\":\"s\"}]"
	sfma run m.json >/dev/null 2>&1
	# started after that run and before the next: the next is what it shows
	timeout 60 sfma-log ws --follow --json >follow.out 2>follow.err &
	local follower=$!
	sleep 1
	export SFMA_MOCK="[$EVENTFUL_CAND,{\"tool\":\"run\",\"cmd\":\"sleep 1\"},{\"tool\":\"run\",\"cmd\":\"echo SECOND-RUN\"},{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"y\"},{\"tool\":\"done\",\"summary\":\"s\"}]"
	jq '.allowedCommands += ["sleep"]' m.json >m2.json
	sfma run m2.json >/dev/null 2>&1
	local follow_status=0
	wait "$follower" || follow_status=$?
	cat follow.err
	[ "$follow_status" -eq 0 ]
	jq -e -s '.[0] | .row == "header" and .run == 2 and .runs == 2' follow.out
	jq -e -s '.[-1] | .row == "footer" and .run == 2 and .sealed and .verdict == "completed"' follow.out
	grep -q 'echo SECOND-RUN' follow.out
	grep -c 'FIRST-RUN' follow.out && return 1
	# exactly the second run's rows
	sfma-log ws --json --run 2 >after.out
	diff follow.out after.out
}

@test "a hostile trace: lines that are not entries are shown as such, escapes come out escaped, exit 1" {
	mkdir -p h/.sfma
	python3 - <<'PY'
import json
out = open("h/.sfma/trace.jsonl", "wb")
def entry(**e):
    out.write(json.dumps(e).encode() + b"\n")
entry(seq=1, kind="clock-anchor", loop=0, id="clock-anchor-1", refs=[], data={"wallMs": 1e300, "source": "x"})
entry(seq=2, kind="lifecycle", loop=0, id="lifecycle-2", refs=[], data={"from": None, "to": "probation"})
out.write(b"not json at all\n")
out.write(b'{"a":1,"a":2}\n')
out.write(b"[1,2,3]\n")
entry(seq=3, kind="task", loop=1, id="task-3", refs=[], data={"call": {"tool": "write",
      "path": "\x1b[31mRED\x1b]0;pwned\x07\u009b2J\u202eevil\x00nul"}})
entry(seq=4, kind="verdict", loop=1, id="verdict-4", refs=["task-3"],
      data={"tier": "hard", "pass": False, "reason": "not a declared output: \x1b[2J"})
entry(seq=5, kind="call", loop="x", id=5, refs="no", data={"endpoint": ["a"], "latencyMs": -5, "ok": "yes"})
entry(seq=6, kind="verdict", loop=1, refs=[7], data={"pass": True, "reason": None, "run": {"exit": "x", "durationMs": 1e308}})
entry(kind=None, data=[])
out.write(b'{"bad utf-8":"\xff\xfe"}\n')
out.write(b"\x1b[31m a raw escape line\n")
out.write(b'{"kind":"message","data":{"dir":"out","text":"' + b"A" * (17 << 20) + b'"}}\n')
entry(seq=7, kind="\x1b[2Jkind\u009b", data={})
entry(seq=8, kind="lifecycle", data={"from": "probation", "to": "halted-\x1b]0;title\x07"})
entry(seq=9, kind="clock-anchor", data={"wallMs": -1})
entry(seq=10, kind="message", data={"dir": "in", "text": "a DEL: \x7f"})
out.write(b'{"torn":')
PY
	local before
	before=$(snapshot h)
	run --separate-stderr sfma-log h
	[ "$status" -eq 1 ]
	echo "$output"
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ "$stderr" == "sfma-log: h/.sfma/trace.jsonl: line 3: invalid JSON: "*"(and more lines that are not entries)" ]]
	# no control byte of the trace reaches the output: they are spelled out
	run grep -c $'[\001-\010\013-\037\177]' <<<"$output"
	[ "$output" = 0 ]
	run --separate-stderr sfma-log h
	[[ "$output" == *'write \x1b[31mRED\x1b]0;pwned\x07\u{009b}2J\u{202e}evil\x00nul'* ]]
	[[ "$output" == *'REFUSED write \x1b[31mRED'*': not a declared output: \x1b[2J'* ]]
	[[ "$output" == *"line 3         -             INVALID not a trace entry: invalid JSON"* ]]
	[[ "$output" == *"line 4         -             INVALID not a trace entry: invalid JSON: duplicate object key"* ]]
	[[ "$output" == *"line 5         -             INVALID not a trace entry: not a JSON object"* ]]
	[[ "$output" == *"INVALID not a trace entry: longer than 16777216 bytes"* ]]
	[[ "$output" == *"INVALID not a trace entry: torn final line (no newline)"* ]]
	[[ "$output" == *' \x1b[2Jkind\u{009b} '* ]]
	[[ "${lines[-1]}" == 'verdict halted-\x1b]0;title\x07  turns 0  model calls 1 (1 failed)  refused 1  not sealed by result.json' ]]
	# on a terminal too: only the program's own colour sequences
	SFMA_PAGER=cat script -qec "sfma-log h" /dev/null >tty.out || true
	grep -q 'INVALID' tty.out
	run grep -c $'\033\\]\\|\033\\[31mRED\\|\033\\[2J\\|\302\233' tty.out
	[ "$output" = 0 ]
	# --json is ASCII, one valid object per line
	run --separate-stderr sfma-log h --json
	[ "$status" -eq 1 ]
	echo "$output" | jq -e -s 'length == 20' >/dev/null
	run grep -c -P '[^\x20-\x7e]' <<<"$output"
	[ "$output" = 0 ]
	# a reader: nothing in the workspace changed
	[ "$(snapshot h)" = "$before" ]
}

@test "an entry with evidence but no kind, or a kind that is not a string, is a row: no crash" {
	mkdir -p ws/.sfma
	# the reproduction of the crash: a reference, and no kind
	echo '{"evidence":{"reply":{"bytes":1,"sha256":"2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"}}}' \
		>ws/.sfma/trace.jsonl
	run --separate-stderr sfma-log ws
	[ "$status" -eq 0 ]
	[[ "${lines[1]}" == *" -             entry without a kind" ]]
	[[ "${lines[2]}" == *"evidence reply missing" ]]
	run --separate-stderr sfma-log ws --json
	[ "$status" -eq 0 ]
	jq -e -s '.[1] | .kind == null and .evidence[0].field == "reply" and .evidence[0].state == "missing"' <<<"$output"
	# the blob kept, and kinds of every other type
	mkdir -m 700 ws/.sfma/evidence
	printf 'x' >ws/.sfma/evidence/2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881
	local ref='{"reply":{"bytes":1,"sha256":"2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"}}'
	for kind in '' '"kind":null,' '"kind":7,' '"kind":["call"],' '"kind":{"call":1},' '"kind":"call\u0000",'; do
		echo "{${kind}\"data\":[1],\"evidence\":$ref}"
	done >ws/.sfma/trace.jsonl
	run --separate-stderr sfma-log ws
	[ "$status" -eq 0 ]
	run --separate-stderr sfma-log ws --json
	[ "$status" -eq 0 ]
	jq -e -s 'length == 8 and ([.[1:7][] | .evidence[0].state] | unique) == ["present"]' <<<"$output"
}

@test "a reader never writes into the workspace" {
	eventful_run evidence
	local before
	before=$(snapshot ws)
	sfma-log ws >/dev/null
	sfma-log ws --json --all >/dev/null
	sfma-log ws --turn 3 >/dev/null
	# a sealed run: --follow waits for the next, still reading only
	run timeout 2 sfma-log ws --follow
	[ "$status" -eq 124 ]
	[ "$(snapshot ws)" = "$before" ]
}

@test "an unreadable trace is one line and exit 1; usage errors exit 2" {
	run --separate-stderr sfma-log nowhere
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-log: nowhere: No such file or directory" ]
	mkdir -p empty/.sfma && : >empty/.sfma/trace.jsonl
	run --separate-stderr sfma-log empty
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-log: empty/.sfma/trace.jsonl: no entries" ]
	mkdir -p fifo/.sfma && mkfifo fifo/.sfma/trace.jsonl
	run --separate-stderr timeout 10 sfma-log fifo
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-log: fifo/.sfma/trace.jsonl: not a regular file" ]
	run sfma-log
	[ "$status" -eq 2 ]
	run sfma-log --bogus ws
	[ "$status" -eq 2 ]
	[[ "$output" == "sfma-log: unknown option --bogus"* ]]
	run sfma-log a b
	[ "$status" -eq 2 ]
	run sfma-log --run
	[ "$status" -eq 2 ]
	run sfma-log --version
	[ "$status" -eq 0 ]
	[[ "$output" == "sfma-log "[0-9]* ]]
	run sfma-log --help
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: sfma-log WORKSPACE"* ]]
}

@test "a FIFO or a link in place of result.json or the trace is refused before any row; a FIFO elsewhere is never waited on" {
	eventful_run evidence
	cp -r ws keep
	rm ws/.sfma/result.json && mkfifo ws/.sfma/result.json
	run --separate-stderr timeout 5 sfma-log ws
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[ "$stderr" = "sfma-log: ws/.sfma/result.json: not a regular file" ]
	run --separate-stderr timeout 5 sfma-log ws --json
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-log: ws/.sfma/result.json: not a regular file" ]
	rm ws/.sfma/result.json && ln -s ../../keep/.sfma/result.json ws/.sfma/result.json
	run --separate-stderr timeout 5 sfma-log ws
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-log: ws/.sfma/result.json: is a symbolic link, not followed" ]
	rm -r ws && cp -r keep ws
	rm ws/.sfma/trace.jsonl && ln -s ../../keep/.sfma/trace.jsonl ws/.sfma/trace.jsonl
	run --separate-stderr timeout 5 sfma-log ws
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-log: ws/.sfma/trace.jsonl: is a symbolic link, not followed" ]
	# a FIFO as a blob, as the journal, as memory.json: the log is shown, the blob flagged
	rm -r ws && cp -r keep ws
	local out_sha
	out_sha=$(jq -r 'select(.kind == "verdict" and .data.run) | .evidence.output.sha256' ws/.sfma/trace.jsonl)
	rm "ws/.sfma/evidence/$out_sha" && mkfifo "ws/.sfma/evidence/$out_sha"
	mkfifo ws/.sfma/evidence/journal
	rm -f ws/.sfma/memory.json && mkfifo ws/.sfma/memory.json
	run --separate-stderr timeout 5 sfma-log ws
	[ "$status" -eq 0 ]
	[[ "$output" == *"evidence output altered"* ]]
	[[ "${lines[-3]}" == "verdict failed"*"sealed by result.json" ]]
}

@test "sfma log runs sfma-log" {
	eventful_run
	run sfma log ws --json
	[ "$status" -eq 0 ]
	[ "$output" = "$(sfma-log ws --json)" ]
}

@test "a native OpenAI-shaped run reads in the provider's words: calls by name and input, results as text, nothing escaped twice" {
	native_run
	run --separate-stderr sfma-log ws --no-pager
	[ "$status" -eq 0 ]
	echo "$output"
	# the calls the provider made, decoded: no JSON inside JSON
	[[ "$output" == *'reply: write path=notes.txt content=first line\nsays "hello" \\ there\nthird line\n'* ]]
	[[ "$output" == *'reply: read path=notes.txt; run cmd=echo never'* ]]
	[[ "$output" == *'reply: done summary=notes written, "twice"'* ]]
	# a result that went back in a tool message: its text
	[[ "$output" == *'output: exit=0\nstdout:one two\n\nstderr:'* ]]
	[[ "$output" != *'{"results"'* && "$output" != *'"native"'* && "$output" != *'"function"'* ]]
	# no escaped quote, no escaped escape before an n: nothing was escaped twice
	run grep -c -F '\"' <<<"$output"
	[ "$output" = 0 ]
	run grep -c -F '\\n' <<<"$(sfma-log ws)"
	[ "$output" = 0 ]
	# --json keeps the reply as received, and beside it the decoded calls
	sfma-log ws --json >rows
	jq -e -s 'any(.[]; .kind == "call" and (.reply | fromjson | .provider == "openai") and
		.replyCalls[0].name == "write" and .replyCalls[0].input.path == "notes.txt")' rows
	jq -e -s 'any(.[]; .kind == "call" and (.sentResults | length) == 2 and .sentResults[0].name == "read" and
		.sentResults[1].content == "one call per turn: only the first call was carried out")' rows
	jq -e -s 'any(.[]; .kind == "verdict" and .output == "exit=0\nstdout:one two\n\nstderr:")' rows
}

@test "--turn N shows every entry of one turn whole: the message sent, the reply, the output, the diff, unclipped" {
	native_run
	run --separate-stderr sfma-log ws --turn 3
	[ "$status" -eq 0 ]
	echo "$output"
	[[ "${lines[0]}" == "run 1 of 1  started "*", turn 3" ]]
	# only turn 3 of loop 1, every entry of it
	[ "$(grep -c '^ *+[0-9.]*s  L' <<<"$output")" -eq 4 ]
	[ "$(grep -c '  L1  T3  ' <<<"$output")" -eq 4 ]
	# the tool message that went out, its results one by one
	[[ "$output" == *"result for write (call_w1):"*"wrote 43 bytes to notes.txt"* ]]
	# the native call as key: value, its content as lines
	grep -qx '                             tool: write' <<<"$output"
	grep -qx '                             path: notes.txt' <<<"$output"
	grep -qx '                               says "goodbye" \\ there' <<<"$output"
	# the write against the one before it
	grep -qx '                             -says "hello" \\ there' <<<"$output"
	grep -qx '                             +says "goodbye" \\ there' <<<"$output"
	# turn 1 carries the system prompt; nothing is clipped there
	sfma-log ws --turn 1 >t1
	grep -q 'system prompt:' t1
	grep -q 'OPERATOR MESSAGES may only narrow the task' t1
	sfma-log ws --turn 1 --json | jq -r 'select(.prompt) | .prompt' >prompt.txt
	[ "$(wc -l <prompt.txt)" -gt 20 ]
	while IFS= read -r l; do
		[ -z "$l" ] || grep -qxF "                             $l" t1 || { echo "not shown: $l"; return 1; }
	done <prompt.txt
	# --json: the same rows, one object each
	run sfma-log ws --turn 3 --json
	[ "$(jq -s '[.[] | select(.row == "entry")] | length' <<<"$output")" -eq 4 ]
	jq -e -s 'any(.[]; .kind == "mutation" and .previous.bytes == 43 and (.diff | contains("+says")))' <<<"$output"
	# a turn the run does not have, and what is no turn number
	run --separate-stderr sfma-log ws --turn 9
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[ "$stderr" = "sfma-log: ws: run 1 has no turn 9 (its last is 6)" ]
	run sfma-log ws --turn 0
	[ "$status" -eq 2 ]
	run sfma-log ws --turn 3 --all
	[ "$status" -eq 2 ]
	run sfma-log ws --turn 3 --follow
	[ "$status" -eq 2 ]
}

@test "a long output is clipped on its row and whole with --turn" {
	cat >m.json <<'JSON'
{"name":"long","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":[],"inputs":[],"outputs":["big.txt"],"maxTurns":8,"dryRunDefault":false}
JSON
	local big
	big=$(python3 -c 'print("".join("line %04d of the big file\n" % i for i in range(600)), end="")')
	export SFMA_MOCK="[$EVENTFUL_CAND,$(jq -cn --arg c "$big" '{tool:"write",path:"big.txt",content:$c}'),{\"tool\":\"done\",\"summary\":\"s\"}]"
	sfma run m.json >/dev/null 2>&1
	run sfma-log ws
	[[ "$output" == *"content: line 0000 of the big file\nline 0001"*"..."* ]]
	[[ "$output" != *"line 0599"* ]]
	run sfma-log ws --turn 2
	echo "$output"
	# the reply, the task and the write, each whole; the write is a new file
	[ "$(grep -c '^ *line 0599 of the big file$' <<<"$output")" -eq 3 ]
	[ "$(grep -c '^ *line [0-9]* of the big file$' <<<"$output")" -eq 1800 ]
	grep -qx ' *new file' <<<"$output"
}

# A pager that notes how it was started and passes its input on.
fake_pager() {
	mkdir -p pagerbin
	cat >pagerbin/"$1" <<EOF
#!/bin/sh
echo "\$0 \$*" >>"$BATS_TEST_TMPDIR/paged"
cat
EOF
	chmod +x pagerbin/"$1"
}

@test "on a terminal the text goes through a pager as git's does: SFMA_PAGER, then PAGER, then less -FRX" {
	require script
	eventful_run
	fake_pager less
	fake_pager mypager
	fake_pager other
	local P="$BATS_TEST_TMPDIR/pagerbin:$PATH"
	# the default: less -FRX, which gets the text, colours and all
	PATH=$P script -qec "sfma-log ws" /dev/null >tty.out
	[ "$(cat paged)" = "$BATS_TEST_TMPDIR/pagerbin/less -FRX" ]
	grep -q 'REFUSED' tty.out
	grep -q $'\033\\[1;31mREFUSED' tty.out
	rm paged
	PATH=$P PAGER=other script -qec "sfma-log ws" /dev/null >/dev/null
	[ "$(cat paged)" = "$BATS_TEST_TMPDIR/pagerbin/other " ]
	rm paged
	PATH=$P PAGER=other SFMA_PAGER="mypager -x" script -qec "sfma-log ws" /dev/null >/dev/null
	[ "$(cat paged)" = "$BATS_TEST_TMPDIR/pagerbin/mypager -x" ]
	rm paged
	# empty, or cat: none
	PATH=$P SFMA_PAGER= script -qec "sfma-log ws" /dev/null >none.out
	[ ! -e paged ]
	grep -q REFUSED none.out
	PATH=$P PAGER=cat script -qec "sfma-log ws" /dev/null >/dev/null
	[ ! -e paged ]
}

@test "never a pager with --no-pager, into a pipe or a file, with --json or --follow" {
	require script
	eventful_run
	fake_pager less
	local P="$BATS_TEST_TMPDIR/pagerbin:$PATH"
	PATH=$P script -qec "sfma-log ws --no-pager" /dev/null >tty.out
	grep -q REFUSED tty.out
	PATH=$P script -qec "sfma-log ws --json" /dev/null >/dev/null
	PATH=$P script -qec "sfma-log ws | cat" /dev/null >/dev/null
	PATH=$P script -qec "sfma-log ws >file.out" /dev/null >/dev/null
	grep -q REFUSED file.out
	PATH=$P sfma-log ws | grep -q REFUSED
	# a sealed run: --follow waits for the next (and never pages)
	PATH=$P script -qec "timeout 1 sfma-log ws --follow" /dev/null >/dev/null || true
	[ ! -e paged ] || { cat paged; return 1; }
}

@test "verdicts say what was decided: allowed beside the outcome, an acceptance check passed or FAILED, its runs and last output" {
	acceptance_run
	run --separate-stderr sfma-log ws
	[ "$status" -eq 0 ]
	echo "$output"
	# the hard tier allowed the call; what it did is its outcome
	[[ "$output" == *"verdict       allowed run python3 status.py 3: exit=3"* ]]
	[[ "$output" == *"verdict       allowed run sleep 5: exit=124: timed out after 1 s (commandTimeoutSeconds)"$'\n'* ]]
	# PASS is the judges' word only
	[ -z "$(grep PASS <<<"$output" | grep -v 'PASS soft tier: \|PASS criteria: ')" ]
	[[ "$output" != *"(timed out)"* ]]
	# the check that refused the done, and the one that let it through
	[[ "$output" == *"verdict       FAILED acceptance check 1: python3 -m unittest test_calc: exit 1 (expected 0)"* ]]
	[[ "$output" == *"verdict       passed acceptance check 1: python3 -m unittest test_calc: exit 0 (expected 0)"* ]]
	# a failed check is no refusal of the hard tier
	[[ "$output" == *"verdict completed  turns 6  model calls 6  refused 0  "* ]]
	[[ "$output" == *$'\nacceptance passed  1 check  2 attempts\n  check 1 python3 -m unittest test_calc: ran 2 times, passed 1; last exit 0 (expected 0) at line '[0-9]*$'\n'*'output: exit=0\nstdout:\nstderr:.\n'*'OK\n'* ]]
	# the loop's last done is its summary, not the refused one
	[ "${lines[-1]}" = "summary fixed" ]
	# a non-zero exit stands out on a terminal; a refusal is red
	SFMA_PAGER=cat script -qec "sfma-log ws" /dev/null >tty.out
	grep -q $'\033\\[33mallowed\033\\[0m run python3 status.py 3' tty.out
	grep -q $'\033\\[33mallowed\033\\[0m run sleep 5' tty.out
	grep -q $'\033\\[32mallowed\033\\[0m write calc.py' tty.out
	grep -q $'\033\\[1;31mFAILED\033\\[0m acceptance' tty.out
	# --json: the footer's checks
	sfma-log ws --json | jq -e -s '.[-1].acceptance | .passed == true and .commands == 1 and .attempts == 2 and
		(.checks | length) == 1 and .checks[0].runs == 2 and .checks[0].passes == 1 and .checks[0].last.exit == 0 and
		(.checks[0].last.output | endswith("OK\n"))'
}

@test "on a terminal the text is wrapped to its width, each line going on under its text; never into a pipe or a file" {
	require script
	native_run
	SFMA_PAGER=cat script -qec "stty cols 72; sfma-log ws" /dev/null | sed 's/\x1b\[[0-9;]*m//g; s/\r$//' >tty.out
	sfma-log ws >pipe.out
	cat tty.out
	# no line wider than the terminal
	[ "$(awk '{ if (length($0) > 72) n++ } END { print n + 0 }' tty.out)" -eq 0 ]
	# a row goes on under its text (column 37), an extra line under its label's text
	local row wrapped
	row=$(grep 'L1  T4    call' pipe.out)
	[ "${#row}" -gt 72 ]
	wrapped=$(grep -A1 'L1  T4    call' tty.out)
	[[ "$(sed -n 2p <<<"$wrapped")" =~ ^\ {36}[^\ ] ]]
	[ "$(sed -n 1p <<<"$wrapped") $(sed -n 2p <<<"$wrapped" | sed 's/^ *//')" = "$row" ]
	grep -m1 -A1 '^ *reply: write path=notes.txt content=first' tty.out | sed -n 2p | grep -Eq '^ {29}[^ ]'
	# into a pipe or a file: one line a row, as wide as it is
	[ "$(awk '{ if (length($0) > 72) n++ } END { print n + 0 }' pipe.out)" -gt 10 ]
}
