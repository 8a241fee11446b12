#!/usr/bin/env bats
# Acceptance (sfma-manifest(5) acceptance, sfma-plan(1) Acceptance): a
# completed run means the task was done. The checks run in the sandbox over
# the workspace as it stands when the model says done; a failing one
# refuses the done and hands the model its output; completed requires them
# all to pass; the record counts them; the replay derives them again.

load helpers
bats_require_minimum_version 1.5.0

CAND='{"mission":"fix add","successCriteria":[],"loopRoles":[{"name":"w","duty":"d"}],"firstTasks":[],"schedule":[]}'
EARLY='{"tool":"done","summary":"looks fine"}'
FIX='{"tool":"write","path":"calc.py","content":"def add(a, b):\n    return a + b\n"}'
DONE='{"tool":"done","summary":"fixed"}'

setup() {
	require python3
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
	mkdir -p ws
	printf 'def add(a, b):\n    return a - b\n' >ws/calc.py
	printf 'import sys\nsys.exit(int(sys.argv[1]))\n' >ws/status.py
	printf 'import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n' >ws/test_calc.py
	manifest false
}

manifest() { # manifest DRY-RUN-DEFAULT
	cat >m.json <<JSON
{"name":"calc","workspace":"ws","taskStatement":"make test_calc pass",
 "modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["python3"],"inputs":["test_calc.py","status.py"],"outputs":["calc.py"],"maxTurns":8,
 "dryRunDefault":$1,"acceptance":[{"cmd":"python3 -m unittest test_calc"}]}
JSON
}

# The text the model was sent with request N (its call entry's message).
sent() {
	local h
	h=$(jq -r 'select(.kind == "call") | .evidence.message.sha256' ws/.sfma/trace.jsonl | sed -n "${1}p")
	cat "ws/.sfma/evidence/$h"
}

@test "a done before the fix is refused with the check's output; the fix, then done: completed, both attempts recorded, verified, replayed" {
	mock "$CAND" "$EARLY" "$FIX" "$DONE"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	jq -e '.verdict == "completed" and .acceptance == {"commands":1,"attempts":2,"passed":true}' ws/.sfma/result.json
	run jq -c 'select(.kind == "verdict" and .data.tier == "acceptance") | .data.acceptance' ws/.sfma/trace.jsonl
	[ "${lines[0]}" = '{"cmd":"python3 -m unittest test_calc","exit":1,"expected":0,"index":0,"pass":false,"ran":true}' ]
	[ "${lines[1]}" = '{"cmd":"python3 -m unittest test_calc","exit":0,"expected":0,"index":0,"pass":true,"ran":true}' ]
	# the refused done: the model's next request carries unittest's output
	sent 3 | jq -e '.toolResult | startswith("acceptance failed: python3 -m unittest test_calc: exit=1 (expected 0)\nexit=1\n") and contains("AssertionError: -1 != 5")'
	# an acceptance check changes nothing in the workspace; not a hard-tier failure
	jq -e '.hardTierFailures == 0' ws/.sfma/result.json
	run sfma-verify ws
	[ "$status" -eq 0 ]
	replays_ok 1
}

@test "the same run on an empty workspace never completes" {
	rm -f ws/calc.py ws/test_calc.py
	mock "$CAND" "$EARLY" "$DONE"
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	jq -e '.verdict != "completed" and .acceptance.passed == false' ws/.sfma/result.json
	replays_ok 1
}

@test "a check that must fail passes when it does; the checks run in order and stop at the first failure" {
	jq '.acceptance = [{"cmd":"python3 status.py 0"},{"cmd":"python3 -m unittest test_calc","exit":1},{"cmd":"python3 status.py 7","exit":7}]' m.json >t.json
	mock "$CAND" "$DONE"
	run sfma run t.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(jq -c 'select(.data.tier == "acceptance") | .data.acceptance.index' ws/.sfma/trace.jsonl | tr '\n' ' ')" = "0 1 2 " ]
	rm -rf ws/.sfma
	jq '.acceptance = [{"cmd":"python3 status.py 3"},{"cmd":"python3 status.py 0"}]' m.json >t.json
	mock "$CAND" "$DONE"
	run sfma run t.json --apply
	[ "$status" -eq 1 ]
	# only the first ran, each time a done came
	[ "$(jq -c 'select(.data.tier == "acceptance") | .data.acceptance.index' ws/.sfma/trace.jsonl | sort -u)" = "0" ]
	replays_ok 1
}

@test "a dry run runs no check and says so; the record says passed null" {
	manifest true
	mock "$CAND" "$FIX" "$DONE"
	run --separate-stderr sfma run m.json
	[ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
	[[ "$stderr" == *"acceptance checks not run"* ]]
	jq -e '.acceptance == {"commands":1,"attempts":0,"passed":null}' ws/.sfma/result.json
	run jq -c 'select(.data.tier == "acceptance")' ws/.sfma/trace.jsonl
	[ -z "$output" ]
	replays_ok 1
}

@test "a forged acceptance pass does not replay" {
	mock "$CAND" "$EARLY" "$FIX" "$DONE"
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	rewrite '
v = [e for e in es if e["kind"] == "verdict" and e["data"].get("tier") == "acceptance"][0]
v["data"]["pass"] = True
v["data"]["acceptance"]["pass"] = True
'
	run sfma-verify ws
	[ "$status" -eq 0 ]
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (verdict): trace has "* ]] || { echo "$output"; return 1; }
}

@test "certification counts no judgment of a run whose acceptance did not pass as passed" {
	# Memory of one earlier run whose five judgments passed; whether it
	# counts decides certification (window 6, pass rate 0.5, completion 0).
	seed() { # seed ACCEPTANCE
		rm -rf ws/.sfma
		mkdir -p ws/.sfma
		jq -n --argjson a "$1" '{runs:[{at:"2026-01-01T00:00:00.000Z",verdict:"failed",turns:3,modelCalls:3,
		  hardTierFailures:0,dryRun:false,summary:null,soft:{judged:5,passed:5},acceptance:$a}]}' >ws/.sfma/memory.json
	}
	jq '.tuning = {certWindow:6, certCompletion:0, certPass:0.5}' m.json >t.json && mv t.json m.json
	printf 'def add(a, b):\n    return a + b\n' >ws/calc.py
	seed true
	mock "$CAND" "$DONE"
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	jq -e '.runs[-1].acceptance == true and .pinned.candidate.mission == "fix add"' ws/.sfma/memory.json >/dev/null ||
		{ jq . ws/.sfma/memory.json; return 1; }
	grep -q '"to":"certified"' ws/.sfma/trace.jsonl
	# the same, after a run whose checks failed: 1 pass in 6 judgments
	seed false
	run sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	jq -e '.runs[-1].acceptance == true and .pinned == null' ws/.sfma/memory.json >/dev/null ||
		{ jq . ws/.sfma/memory.json; return 1; }
	grep -q '"to":"certified"' ws/.sfma/trace.jsonl && return 1
	replays_ok 1
}
