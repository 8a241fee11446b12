#!/usr/bin/env bats
# Loops on a blackboard, the planner's side: several conversations at
# once, each on one task, the task tool, the ceilings, the budgets of all
# loops together. The model is a scripted stand-in speaking sfma-model's
# protocol (tests/plan-model-standin.py) that holds the requests arriving
# together and answers them newest first, as a concurrent sfma-model may.

load helpers
load plan-standin

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_MOCK_LATENCY_MS SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
	standin_bin
	manifest 3 20
	mkdir ws
}

# manifest MAXLOOPS MAXTURNS [EXTRA JSON MEMBERS]
manifest() {
	cat >m.json <<JSON
{"name":"t","workspace":"ws","taskStatement":"three files",
 "modelEndpoints":[{"name":"a","provider":"mock","model":"m"},{"name":"b","provider":"mock","model":"m"}],
 "allowedCommands":["echo"],"inputs":[],"outputs":["a.txt","b.txt","c.txt"],"maxTurns":$2,
 "maxLoops":$1,"dryRunDefault":false${3:+,$3}}
JSON
}

# The candidate with the given task ids as its firstTasks.
cand() {
	jq -nc --arg ids "$*" '{mission:"m",successCriteria:["the files exist"],loopRoles:[{name:"w",duty:"d"}],
		firstTasks:[$ids | split(" ")[] | {id:., description:("write " + .)}],schedule:[]} | tojson'
}
write() { jq -nc --arg p "$1" '{tool:"write",path:$p,content:$p} | tojson'; }
done_() { jq -nc --arg s "$1" '{tool:"done",summary:$s} | tojson'; }
post() { jq -nc --arg i "$1" '{tool:"task",id:$i,description:("then " + $i)} | tojson'; }

# standin TASKS-OBJECT [EXTRA]: the object form, the first endpoint working
standin() {
	export SFMA_MOCK=$(jq -nc --argjson c "$(cand A B C)" --argjson t "$1" --arg log "$BATS_TEST_TMPDIR/requests.jsonl" \
		"{log:\$log,batchMs:150,endpoints:[\"a\",\"b\"],bootstrap:[\$c],tasks:\$t}${2:+ + $2}")
}

three_tasks() {
	standin "{\"A\":[$(write a.txt),$(done_ a)],\"B\":[$(write b.txt),$(done_ b)],\"C\":[$(write c.txt),$(done_ c)]}"
}

verifies() {
	run sfma-verify ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == AUDIT_OK* ]]
}

@test "three loops really overlap: their requests are in flight together, the trace interleaves their calls" {
	three_tasks
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == "COMPLETED turns=7 "* ]]
	# the three first work requests went out before any of them was answered
	# (the stand-in answers what arrives together newest first)
	jq -s -e '[.[] | select(.purpose == "work")][0:3] | map(.task) == ["A","B","C"]' requests.jsonl
	jq -s -e '[.[] | select(.kind == "call" and .data.purpose == null and .loop > 0)] | .[1:4] | map(.loop) == [3,2,1]' \
		ws/.sfma/trace.jsonl
	# each loop holds its own conversation: the system prompt, its assignment, its exchanges
	jq -s -e '[.[] | select(.purpose == "work" and .task == "B")] | length == 2 and
		(.[0].messages | length == 1) and (.[0].messages[0].content | fromjson) ==
		{"assignedTask":{"id":"B","description":"write B","role":null,"class":"mechanical"},"loop":2} and
		(.[1].messages | length == 3) and (.[1].messages[1].content | fromjson | .path == "b.txt")' requests.jsonl
	# every entry a loop causes carries its number; the runner's own carry 0
	jq -s -e 'all(.[]; .loop >= 0 and .loop <= 3) and
		([.[] | select(.kind == "task")] | map(.loop) | unique) == [1,2,3] and
		all(.[] | select(.kind == "lifecycle" or .kind == "clock-anchor"); .loop == 0)' ws/.sfma/trace.jsonl
	jq -e '.verdict == "completed" and .turns == 7 and .budget.maxLoops == 3' ws/.sfma/result.json
	for f in a b c; do [ "$(cat ws/$f.txt)" = $f.txt ]; done
	verifies
	replays_ok 1
}

@test "a loop posts a task with the task tool and another loop then does it" {
	manifest 3 20 '"maxPendingTasks":4'
	standin "{\"A\":[$(post D),$(write a.txt),$(done_ a)],\"B\":[$(write b.txt),$(done_ b)],\"C\":[$(write c.txt),$(done_ c)],
		\"D\":[$(done_ d)]}"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	# the post: a hard verdict that passes and names the task
	jq -s -e '[.[] | select(.kind == "verdict" and .data.posted)] | length == 1 and .[0].loop == 1 and
		.[0].data.posted == {"id":"D","description":"then D","role":null,"class":"mechanical"}' ws/.sfma/trace.jsonl
	# D went to a loop that was free, not the one that posted it, in a conversation of its own
	poster=$(jq -s '[.[] | select(.kind == "verdict" and .data.posted)][0].loop' ws/.sfma/trace.jsonl)
	doer=$(jq -s '[.[] | select(.kind == "verdict" and .data.tier == "soft" and .data.task == "D")][0].loop' ws/.sfma/trace.jsonl)
	[ "$doer" != "$poster" ]
	jq -s -e '[.[] | select(.task == "D" and .purpose == "work")][0].messages[0].content | fromjson | .assignedTask.id == "D"' \
		requests.jsonl
	jq -s -e '[.[] | select(.kind == "verdict" and .data.tier == "soft")] | map(.data.task) | sort == ["A","B","C","D"]' \
		ws/.sfma/trace.jsonl
	verifies
	replays_ok 1
}

@test "the task tool: 'pending task ceiling' past maxPendingTasks and 'duplicate task id' for a reused id" {
	manifest 3 20 '"maxPendingTasks":1'
	# A and B are taken at once; C waits (maxLoops 2) and fills the ceiling
	sed -i 's/"maxLoops":3/"maxLoops":2/' m.json
	standin "{\"A\":[$(post D),$(post B),$(write a.txt),$(done_ a)],\"B\":[$(write b.txt),$(done_ b)],
		\"C\":[$(write c.txt),$(done_ c)]}"
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	jq -s -e '[.[] | select(.kind == "verdict" and .loop == 1 and (.data.reason | test("pending task ceiling|duplicate task id")))] |
		map(.data.reason) == ["pending task ceiling (1) reached","duplicate task id B"]'  \
		ws/.sfma/trace.jsonl
	jq -s -e '[.[] | select(.kind == "task" and .data.call.tool == "task")] | map(.data.call.id) == ["D","B"]' ws/.sfma/trace.jsonl
	# the model is told, as for every refusal
	grep -q 'EPSILON_HARD_FAIL: pending task ceiling (1) reached' requests.jsonl
	# refusals are hard-tier failures: the loop's task fails without a judgment, and the run with it
	jq -e '.verdict == "failed" and .hardTierFailures == 2 and (.error | test("refused by the hard tier"))' ws/.sfma/result.json
	jq -s -e '[.[] | select(.kind == "verdict" and .data.tier == "soft" and .data.task == "A")] | length == 0' ws/.sfma/trace.jsonl
	verifies
	replays_ok 1
}

@test "maxModelCalls counts every loop's calls together: the run halts cleanly, sealed and verifiable" {
	manifest 3 20 '"maxModelCalls":5'
	three_tasks
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	[[ "$output" == *"HALTED-BUDGET "* ]] || { echo "$output"; return 1; }
	jq -e '.verdict == "halted-budget" and .modelCalls <= 5' ws/.sfma/result.json
	# every call the loops made is in the trace and counted, and no request asked past the budget
	[ "$(jq -s '[.[] | select(.kind == "call")] | length' ws/.sfma/trace.jsonl)" -eq "$(jq .modelCalls ws/.sfma/result.json)" ]
	jq -s -e '[.[] | select(.purpose == "work")][0:3] | map(.callsLeft) | add <= 4' requests.jsonl
	jq -s -e '[.[] | select(.kind == "result")][-1].data.trigger == "maxModelCalls"' ws/.sfma/trace.jsonl
	verifies
	replays_ok 1
}

@test "maxTurns counts every loop's turns together" {
	manifest 3 4
	three_tasks
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	[[ "$output" == *"HALTED-MAXTURNS turns=4 "* ]] || { echo "$output"; return 1; }
	# no more work requests than turns: none was sent that could not be taken
	[ "$(jq -s '[.[] | select(.purpose == "work" or .purpose == "bootstrap")] | length' requests.jsonl)" -eq 4 ]
	verifies
	replays_ok 1
}

@test "the calls left are shared among the requests in flight" {
	manifest 3 20 '"maxModelCalls":30'
	three_tasks
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	# the three first work requests together never hold more than the budget left
	jq -s -e '[.[] | select(.purpose == "work")][0:3] | map(.callsLeft) | add <= 29' requests.jsonl
}

@test "one loop (maxLoops 1): the conversation that adopted the candidate does the first task, as a run always did" {
	manifest 1 20
	three_tasks
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	jq -s -e 'all(.[]; .loop <= 1)' ws/.sfma/trace.jsonl
	# the first task goes on in the bootstrap conversation, the next ones start their own
	jq -s -e '[.[] | select(.purpose == "work")] | (.[0].messages | length == 3) and
		(.[2].messages[0].content | fromjson | .assignedTask.id == "B" and .loop == 1)' requests.jsonl
	jq -s -e '[.[] | select(.kind == "verdict" and .data.tier == "soft")] | map(.data.task) == ["A","B","C"]' ws/.sfma/trace.jsonl
	verifies
	replays_ok 1
}

@test "a multi-loop record replays, each loop's conversation re-derived; a forged soft verdict or loop diverges" {
	three_tasks
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	verifies
	replays_ok 1
	cp -a ws ws.orig
	# a soft verdict turned around, its judgment with it, the chain recomputed
	rewrite '
for e in es:
    if e["kind"] == "verdict" and e["data"].get("tier") == "soft" and e["data"]["task"] == "B":
        e["data"]["pass"] = False
        e["data"]["judgments"][0]["pass"] = False
'
	verifies
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*"(verdict): trace has judgment 1 pass=false, replay derives pass=true \"mock judge\""* ]] ||
		{ echo "$output"; return 1; }
	# a loop's turn told as another loop's: that conversation is not the one it came from
	rm -rf ws && cp -a ws.orig ws
	rewrite '
calls = [e for e in es if e["kind"] == "call" and e["loop"] == 2]
tail = [e for e in es if e["seq"] > calls[0]["seq"]]
for e in [calls[0]] + tail[:3]:
    e["loop"] = 3
'
	verifies
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == REPLAY_DIVERGED:* ]] || { echo "$output"; return 1; }
}

# The real, concurrent sfma-model (the object form of SFMA_MOCK and
# SFMA_MOCK_LATENCY_MS), not the stand-in.
@test "REAL sfma-model: three loops' calls overlap with the real model stage" {
	cp "$SFMA_BINDIR/sfma-model" "$BATS_TEST_TMPDIR/bin/sfma-model"
	export SFMA_MOCK_LATENCY_MS=300
	three_tasks
	# the object form: each task's queue, and the judge's (three tasks, then the criteria)
	export SFMA_MOCK=$(jq -c 'del(.log, .batchMs, .endpoints) | .judge = ([range(3) | "{\"pass\":true,\"reason\":\"ok\"}"] +
		["{\"criteria\":[{\"criterion\":\"the files exist\",\"pass\":true,\"evidence\":[]}]}"])' <<<"$SFMA_MOCK")
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	# the work calls of loops 1-3 interleave: the second call of some loop comes after calls of the others
	jq -s -e '[.[] | select(.kind == "call" and .loop > 0 and .data.purpose == null)] | .[1:4] | map(.loop) | sort == [1,2,3]' \
		ws/.sfma/trace.jsonl
	verifies
	replays_ok 1
}

@test "sfma log shows each row's loop and the soft verdicts with task, judge and producer" {
	three_tasks
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	run env NO_COLOR=1 sfma log ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	for k in 1 2 3; do
		[[ "$output" == *"  L$k  "*"task          write "* ]] || { echo "$output"; return 1; }
	done
	[[ "$output" == *"PASS soft tier: task B judged by mock-judge, produced by a: mock judge"* ]] || { echo "$output"; return 1; }
	[[ "$output" == *"PASS criteria: 1 of 1 pass (judge mock-judge)"* ]]
	# every loop's done, in the order of the loops, not only the last
	[ "${lines[-3]}" = "summary (loop 1) a" ]
	[ "${lines[-2]}" = "summary (loop 2) b" ]
	[ "${lines[-1]}" = "summary (loop 3) c" ]
	run sfma log ws --json
	echo "$output" | jq -s -e '[.[] | select(.tier == "soft")] | length == 3 and all(.[]; .judge == "mock-judge" and .producer == "a") and
		(map(.loop) | sort) == [1,2,3] and (map(.task) | sort) == ["A","B","C"]'
}

@test "a HALT file while loops are in flight: their replies are read and counted, not acted on; sealed and replayable" {
	halt=$(jq -nc --arg p "$BATS_TEST_TMPDIR/ws/.sfma/HALT" --arg t "$(write a.txt | jq -r .)" '{text:$t,touch:$p}')
	standin "{\"A\":[$halt],\"B\":[$(write b.txt),$(done_ b)],\"C\":[$(write c.txt),$(done_ c)]}"
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	[[ "$output" == *"HALTED-OPERATOR "* ]] || { echo "$output"; return 1; }
	# the first reply served was acted on; the two still in flight were drained
	jq -s -e '[.[] | select(.kind == "call" and .data.drained)] | length == 2' ws/.sfma/trace.jsonl
	jq -s -e '[.[] | select(.kind == "task")] | length == 1' ws/.sfma/trace.jsonl
	jq -e '.modelCalls == 4 and .turns == 2' ws/.sfma/result.json
	verifies
	replays_ok 1
}
