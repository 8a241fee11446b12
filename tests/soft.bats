#!/usr/bin/env bats
# The soft tier: every done is judged by softCalls reasoning calls
# (majority, a tie fails), by another endpoint than the producer when one
# is usable; it can fail what the hard tier passed and never revive what
# it failed; a failed task is retried once; the success criteria are
# judged at the end; certification counts the soft window. The model is
# the scripted stand-in (tests/plan-model-standin.py).

load helpers
load plan-standin

CAND='{"mission":"write out.txt","successCriteria":["out.txt exists","out.txt says hi"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
	standin_bin
	manifest '"a","b"' 1
	mkdir ws
}

# manifest ENDPOINT-NAMES SOFTCALLS [EXTRA TUNING]
manifest() {
	local eps
	eps=$(jq -nc --argjson n "[$1]" '[$n[] | {name:., provider:"mock", model:"m"}]')
	cat >m.json <<JSON
{"name":"t","workspace":"ws","taskStatement":"write out.txt",
 "modelEndpoints":$eps,"allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":12,
 "maxLoops":1,"dryRunDefault":false,"tuning":{"softCalls":$2${3:+,$3}}}
JSON
}

WRITE='"{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"hi\\n\"}"'
DONE='"{\"tool\":\"done\",\"summary\":\"wrote out.txt\"}"'
pass() { jq -nc --arg r "$1" '{pass:true,reason:$r} | tojson'; }
fail() { jq -nc --arg r "$1" '{pass:false,reason:$r} | tojson'; }
CRIT='"{\"criteria\":[{\"criterion\":\"out.txt exists\",\"pass\":true,\"evidence\":[\"task-9\"]},{\"criterion\":\"out.txt says hi\",\"pass\":false,\"evidence\":[]}]}"'

# standin ENDPOINTS JUDGE-ITEMS... (none: the array-form mock judge, no calls)
standin() {
	local eps=$1
	shift
	local judge=null
	[ $# -gt 0 ] && judge="[$(IFS=,; echo "$*")]"
	export SFMA_MOCK=$(jq -nc --arg c "$CAND" --arg log "$BATS_TEST_TMPDIR/requests.jsonl" --argjson e "[$eps]" \
		--argjson j "$judge" --argjson w "[$WRITE,$DONE,$WRITE,$DONE]" \
		'{log:$log,endpoints:$e,bootstrap:[$c],replies:$w} + (if $j then {judge:$j} else {} end)')
}

soft() { jq -s -c '[.[] | select(.kind == "verdict" and .data.tier == "soft")]' ws/.sfma/trace.jsonl; }

verifies() {
	run sfma-verify ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
}

@test "two endpoints: the judge is the endpoint that did not produce the work, and the request says so" {
	standin '"a","b"' "$(pass "it is there")" "$CRIT"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	# the judgment is recognisable on the wire and avoids the producer
	jq -s -e '[.[] | select(.purpose == "judge")] | length == 1 and .[0].avoid == "a" and .[0].class == "reasoning" and
		(.[0].system | startswith("sfma soft-tier judgment 1\n")) and .[0].tools == false and .[0].task == "main" and
		(.[0].messages[0].content | fromjson | .mission == "write out.txt" and .summary == "wrote out.txt" and
		 .outputs == [{"path":"out.txt","exists":true,"content":"hi\n","clipped":false}] and .task.id == "main" and
		 .successCriteria == ["out.txt exists","out.txt says hi"])' requests.jsonl
	soft | jq -e 'length == 1 and .[0].data == {"tier":"soft","pass":true,"reason":"it is there","task":"main",
		"judge":"b","producer":"a","judgments":[{"judge":"b","pass":true,"reason":"it is there"}]} and
		(.[0].refs | length >= 3)'
	# the judge's call is a counted model call of the task's loop
	jq -s -e '[.[] | select(.kind == "call" and .data.purpose == "judge")] | length == 1 and .[0].data.endpoint == "b" and .[0].loop == 1' \
		ws/.sfma/trace.jsonl
	jq -e '.modelCalls == 5' ws/.sfma/result.json
	# the outcome goes back to sfma-model as feedback for the producer's pass rate
	jq -s -e '[.[] | select(.verdicts)][0].verdicts == [{"endpoint":"a","class":"mechanical","pass":true}]' requests.jsonl
	verifies
	replays_ok 1
}

@test "one endpoint: the judge cannot be another, and the verdict records it as not independent" {
	manifest '"a"' 1
	standin '"a"' "$(pass "ok")" "$CRIT"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	soft | jq -e '.[0].data.judge == "a" and .[0].data.producer == "a" and .[0].data.independent == false'
	verifies
	replays_ok 1
}

@test "the success criteria are judged at the end and fill criteria[] in the record" {
	standin '"a","b"' "$(pass "ok")" "$CRIT"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	jq -e '.criteria == [{"criterion":"out.txt exists","pass":true,"evidence":["task-9"]},
		{"criterion":"out.txt says hi","pass":false,"evidence":[]}]' ws/.sfma/result.json
	jq -s -e '[.[] | select(.purpose == "criteria")] | length == 1 and .[0].task == null and
		(.[0].system | startswith("sfma soft-tier judgment 1\n"))' requests.jsonl
	jq -s -e '[.[] | select(.kind == "verdict" and .data.tier == "criteria")] | length == 1 and .[0].loop == 0' ws/.sfma/trace.jsonl
}

@test "a soft failure fails a run whose hard tier passed: retried once with the judge's reason, then failed" {
	standin '"a","b"' "$(fail "out.txt is empty of meaning")" "$(fail "still not it")"
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	[[ "$output" == *"task main failed the soft tier: still not it"* ]] || { echo "$output"; return 1; }
	jq -e '.verdict == "failed" and .hardTierFailures == 0' ws/.sfma/result.json
	soft | jq -e 'map(.data.pass) == [false,false]'
	# the retry starts a conversation of its own, told why the first attempt failed
	jq -s -e '[.[] | select(.kind == "clarification" and .data.source == "soft-tier")] | length == 1 and
		.[0].data == {"source":"soft-tier","task":"main","text":"out.txt is empty of meaning"}' ws/.sfma/trace.jsonl
	jq -s -e '[.[] | select(.purpose == "work")] | map(select(.messages[0].content | test("assignedTask"))) | length == 2 and
		(.[0].messages[0].content | fromjson | .clarification == "out.txt is empty of meaning" and .assignedTask.id == "main")' \
		requests.jsonl
	verifies
	replays_ok 1
}

@test "a task failed once passes on its retry: the run completes" {
	standin '"a","b"' "$(fail "try again")" "$(pass "now")" "$CRIT"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	soft | jq -e 'map(.data.pass) == [false,true]'
	replays_ok 1
}

@test "a hard-tier failure is never judged back to a pass: no judgment is asked" {
	export SFMA_MOCK=$(jq -nc --arg c "$CAND" --arg log "$BATS_TEST_TMPDIR/requests.jsonl" \
		--argjson w "[\"{\\\"tool\\\":\\\"write\\\",\\\"path\\\":\\\"other.txt\\\",\\\"content\\\":\\\"x\\\"}\",$WRITE,$DONE]" \
		--argjson j "[$(pass "looks fine")]" '{log:$log,endpoints:["a","b"],bootstrap:[$c],replies:$w,judge:$j}')
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	jq -e '.verdict == "failed" and .hardTierFailures == 1' ws/.sfma/result.json
	soft | jq -e 'length == 0'
	jq -s -e 'map(select(.purpose == "judge")) | length == 0' requests.jsonl
	verifies
	replays_ok 1
}

@test "softCalls 3: the majority decides; softCalls 2 with a split is a tie, which fails" {
	manifest '"a","b"' 3
	standin '"a","b"' "$(pass "yes")" "$(fail "no")" "$(fail "no again")" "$(pass "yes")" "$(fail "no")" "$(pass "yes")" "$CRIT"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	# 1 pass, 2 fail: fails; then pass, fail, pass: passes
	soft | jq -e 'map(.data.pass) == [false,true] and (.[0].data.judgments | map(.reason)) == ["yes","no","no again"]'
	jq -s -e '[.[] | select(.purpose == "judge")] | length == 6' requests.jsonl
	# the retry's conversation replays too
	replays_ok 1
	rm -rf ws requests.jsonl && mkdir ws
	manifest '"a","b"' 2
	standin '"a","b"' "$(pass "yes")" "$(fail "no")" "$(fail "no")" "$(fail "no")"
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	soft | jq -e '.[0].data.pass == false and .[0].data.reason == "no"'
}

@test "tuning.softCalls is 1..5" {
	for n in 0 6 1.5 '"2"'; do
		manifest '"a"' "$n"
		run sfma-plan --check m.json
		[ "$status" -eq 2 ] || { echo "$n: $output"; return 1; }
		[[ "$output" == *softCalls* ]]
	done
	manifest '"a"' 5
	run sfma-plan --check m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
}

@test "the array-form mock answers judgments itself: nothing counted, judge mock-judge, the run replays" {
	standin '"a","b"'
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	jq -e '.modelCalls == 3 and .turns == 3 and (.criteria | map(.pass)) == [true,true]' ws/.sfma/result.json
	soft | jq -e '.[0].data.judge == "mock-judge" and .[0].data.pass == true'
	jq -s -e '[.[] | select(.kind == "call")] | length == 3' ws/.sfma/trace.jsonl
	replays_ok 1
}

@test "replay derives the soft verdict from the judge's recorded reply: a forged verdict diverges" {
	standin '"a","b"' "$(pass "fine")" "$CRIT"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	replays_ok 1
	rewrite '
for e in es:
    if e["kind"] == "verdict" and e["data"].get("tier") == "soft":
        e["data"]["pass"] = False
        e["data"]["judgments"][0]["pass"] = False
'
	run sfma-verify ws
	[ "$status" -eq 0 ]
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*"(verdict): trace has judgment 1 pass=false, replay derives pass=true \"fine\""* ]] ||
		{ echo "$output"; return 1; }
}

# two_runs JUDGMENT...: two runs of m.json, each completed, the stand-in
# answering the judgments with JUDGMENT... and the criteria with CRIT.
two_runs() {
	for i in 1 2; do
		standin '"a","b"' "$@" "$CRIT"
		run sfma run m.json --apply
		[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	done
}

@test "certification counts the soft window: completed runs whose judgments mostly failed are not certified" {
	manifest '"a","b"' 1 '"certWindow":4,"certPass":0.85'
	# every run completes, but half of its judgments fail (a retry each time)
	two_runs "$(fail "weak")" "$(pass "ok")"
	jq -e '.pinned == null and (.runs | map(.soft) == [{"judged":2,"passed":1},{"judged":2,"passed":1}])' ws/.sfma/memory.json
	jq -e '.lifecycle | index("certified") == null' ws/.sfma/result.json
	# four completed runs, but the last four judgments hold a failure: not yet
	two_runs "$(pass "ok")"
	jq -e '.pinned == null' ws/.sfma/memory.json
	# judgments that pass fill the window and certify
	two_runs "$(pass "ok")"
	jq -e '.pinned.candidate.mission == "write out.txt"' ws/.sfma/memory.json
	jq -e '.lifecycle | index("certified") != null' ws/.sfma/result.json
	replays_ok 6
}

@test "a pinned configuration whose soft pass rate falls below demotePass is demoted" {
	manifest '"a","b"' 1 '"certWindow":2,"demotePass":0.6'
	for i in 1 2; do
		standin '"a","b"' "$(pass "ok")" "$CRIT"
		run sfma run m.json --apply
		[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	done
	jq -e '.pinned != null' ws/.sfma/memory.json
	# a pinned run's first request is already work: the judge fails twice
	export SFMA_MOCK=$(jq -nc --arg log "$BATS_TEST_TMPDIR/requests.jsonl" --argjson w "[$WRITE,$DONE,$WRITE,$DONE]" \
		--argjson j "[$(fail "bad"),$(fail "bad")]" '{log:$log,endpoints:["a","b"],replies:$w,judge:$j}')
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	jq -e '.pinned == null' ws/.sfma/memory.json
	jq -e '.lifecycle | index("demoted") != null' ws/.sfma/result.json
	replays_ok 3
}

# sfma-plan(1), The soft tier: a judge that cannot answer is not evidence
# against the work.
@test "a reply that is no judgment is asked again on another endpoint, then once on the same; a valid one decides" {
	manifest '"a","b"' 1
	standin '"a","b"' '"not a judgment"' "$(pass "fine after all")" "$CRIT"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	soft | jq -e '.[0].data | .pass == true and .reason == "fine after all" and .judgments[0].attempts == 2'
	# the producer was avoided first; the retry avoided the judge that could not answer
	jq -s -e '[.[] | select(.purpose == "judge") | .avoid] == ["a","b"]' requests.jsonl
	verifies
	replays_ok 1
}

@test "no valid judgment after three tries: unjudged - the task stands, the run completes, and certification does not count it a pass" {
	manifest '"a","b"' 1
	standin '"a","b"' '"nonsense"' '"still nonsense"' '"no"' "$CRIT"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	jq -e '.verdict == "completed"' ws/.sfma/result.json
	soft | jq -e '.[0].data | .pass == null and .unjudged == true and .reason == "unjudged: no valid judgment" and .judgments[0].attempts == 3'
	jq -s -e '[.[] | select(.purpose == "judge") | .avoid] == ["a","b","a"]' requests.jsonl
	jq -e '.runs[-1].soft == {"judged":1,"passed":0,"unjudged":1}' ws/.sfma/memory.json
	verifies
	replays_ok 1
}
