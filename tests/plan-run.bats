#!/usr/bin/env bats
# What a run says and leaves behind when something is wrong: a missing
# workspace parent, a bad signing key, a refused call, a dry run, a halt;
# progress on request; the mailbox directories from the first run on.

load helpers
bats_require_minimum_version 1.5.0

CAND='{"mission":"m","successCriteria":[],"loopRoles":[],"firstTasks":[],"schedule":[]}'
WRITE='{"tool":"write","path":"out.txt","content":"x"}'
DONE='{"tool":"done","summary":"s"}'

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
	manifest m.json ws
}

manifest() { # manifest FILE WORKSPACE [dryRunDefault]
	cat >"$1" <<JSON
{"name":"t","workspace":"$2","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],
 "allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":6,"dryRunDefault":${3:-false}}
JSON
}


# A listing of everything under a directory with each file's digest.
snapshot() {
	(cd "$1" && find . -printf '%y %p %s\n' | sort && find . -type f -exec sha256sum {} + | sort)
}

@test "a workspace whose parent does not exist is one clear error, exit 1, and nothing is created" {
	manifest deep.json "no/such/parent/ws"
	mock "$CAND" "$WRITE" "$DONE"
	run --separate-stderr sfma run deep.json
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[ "$stderr" = "sfma-plan: workspace $PWD/no/such/parent/ws: parent directory $PWD/no/such/parent does not exist; create it first (nothing was created)" ]
	[ ! -e no ]
	# with the parent in place the same manifest runs
	mkdir -p no/such/parent
	mock "$CAND" "$WRITE" "$DONE"
	run sfma run deep.json
	[ "$status" -eq 0 ]
	sfma-verify no/such/parent/ws
}

@test "a bad signing key: one message, the same every time, and the workspace untouched" {
	require openssl
	echo 'not a key at all' >garbage.pem
	openssl genpkey -algorithm ed448 -out ed448.pem 2>/dev/null
	# no workspace yet: none may appear
	for k in 1 2 3 4; do
		mock "$CAND" "$WRITE" "$DONE"
		SFMA_AUDIT_PRIVATE_KEY=$(cat garbage.pem) run --separate-stderr sfma run m.json
		[ "$status" -eq 1 ]
		[ -z "$output" ]
		echo "$stderr" >"stderr.$k"
		[ ! -e ws ]
	done
	for k in 2 3 4; do cmp stderr.1 "stderr.$k"; done
	[ "$(cat stderr.1)" = "sfma-seal: SFMA_AUDIT_PRIVATE_KEY: not a PEM PKCS#8 private key; refusing to write an unsigned record" ]
	# an existing workspace: trace, record and memory stay exactly as they were
	mock "$CAND" "$WRITE" "$DONE"
	sfma run m.json >/dev/null
	snapshot ws >before
	for k in 1 2 3 4; do
		mock "$CAND" "$WRITE" "$DONE"
		SFMA_AUDIT_PRIVATE_KEY=$(cat ed448.pem) run --separate-stderr sfma run m.json
		[ "$status" -eq 1 ]
		echo "$stderr" >"stderr.$k"
	done
	for k in 2 3 4; do cmp stderr.1 "stderr.$k"; done
	[ "$(cat stderr.1)" = "sfma-seal: SFMA_AUDIT_PRIVATE_KEY: not an Ed25519 key; refusing to write an unsigned record" ]
	snapshot ws >after
	diff before after
	# relay checks it before its first run too
	SFMA_AUDIT_PRIVATE_KEY=$(cat garbage.pem) run --separate-stderr sfma relay m.json --max-runs 2
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-seal: SFMA_AUDIT_PRIVATE_KEY: not a PEM PKCS#8 private key; refusing to write an unsigned record" ]
	snapshot ws >after
	diff before after
}

@test "no follow-on noise when the planner stops before sealing" {
	mock "$CAND" "$WRITE" "$DONE"
	sfma run m.json >/dev/null
	sed -i '2s/"probation"/"certified"/' ws/.sfma/trace.jsonl
	for k in 1 2 3; do
		run --separate-stderr sfma run m.json
		[ "$status" -eq 1 ]
		[ -z "$output" ]
		[[ "${stderr_lines[0]}" == "sfma-chain: "*"failed hash-chain verification"* ]]
		[ "${#stderr_lines[@]}" -eq 2 ]
		[ "${stderr_lines[1]}" = "sfma-plan: the run did not start: the trace refused its first entry; nothing was appended" ]
	done
}

@test "a halt says why once, with nothing from the other stages" {
	mkdir -p ws/.sfma && touch ws/.sfma/HALT
	run --separate-stderr sfma run m.json
	[ "$status" -eq 1 ]
	[ "$output" = "HALTED-OPERATOR turns=0 dryRun=false record=ws/.sfma/result.json" ]
	[ "$stderr" = "sfma-plan: halted-operator: halted by .sfma/HALT" ]
	jq -s -e 'any(.[]; .kind=="result" and .data == {"halt":"HALT file","trigger":"HALT file","reason":"halted by .sfma/HALT"})' ws/.sfma/trace.jsonl
	sfma-verify ws
}

@test "ceilings name their trigger in the result entry" {
	sed -i 's/"maxTurns":6/"maxTurns":2/' m.json
	mock "$CAND" '{"tool":"read","path":"nothing"}' "$DONE"
	run sfma run m.json
	[ "$status" -eq 1 ]
	jq -s -e 'any(.[]; .kind=="result" and .data.halt=="maxTurns" and .data.trigger=="maxTurns")' ws/.sfma/trace.jsonl
	rm -rf ws
	jq '.maxModelCalls = 1' m.json >m2.json
	mock "$CAND" "$WRITE" "$DONE"
	run sfma run m2.json
	[ "$status" -eq 1 ]
	jq -s -e 'any(.[]; .kind=="result" and .data.halt=="maxModelCalls" and .data.trigger=="maxModelCalls")' ws/.sfma/trace.jsonl
	sfma-verify ws
}

@test "the failure line names the refused call as the cause" {
	mock "$CAND" '{"tool":"write","path":"../escape","content":"x"}' "$DONE"
	run --separate-stderr sfma run m.json
	[ "$status" -eq 1 ]
	[[ "$output" == "FAILED turns=3 "* ]]
	[ "$stderr" = "sfma-plan: failed: done, but 1 call was refused by the hard tier (the first: write ../escape: outside workspace)" ]
	[ "$(jq -r .error ws/.sfma/result.json)" = "done, but 1 call was refused by the hard tier (the first: write ../escape: outside workspace)" ]
	# a ceiling reached after refusals names them too
	rm -rf ws
	sed -i 's/"maxTurns":6/"maxTurns":3/' m.json
	mock "$CAND" '{"tool":"run","cmd":"rm -rf /"}' '{"tool":"run","cmd":"cat x"}' "$DONE"
	run --separate-stderr sfma run m.json
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-plan: halted-maxTurns: maxTurns (3) reached; 2 calls were refused by the hard tier (the first: run: rm: not in allowedCommands)" ]
	sfma-verify ws
}

@test "a dry run says on stderr that nothing was applied, and how to apply" {
	manifest dry.json ws true
	mock "$CAND" "$WRITE" "$DONE"
	run --separate-stderr sfma run dry.json
	[ "$status" -eq 0 ]
	[[ "$output" == *"dryRun=true"* ]]
	[ "$stderr" = "sfma-plan: dry run: nothing was applied (writes were recorded, commands not run); run again with --apply to apply" ]
	[ ! -e ws/out.txt ]
	mock "$CAND" "$WRITE" "$DONE"
	run --separate-stderr sfma run dry.json --apply
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	[ -e ws/out.txt ]
}

@test "-v and --progress print timed progress with each write's path, even when stderr is a file" {
	for flag in -v --progress; do
		rm -rf ws
		mock "$CAND" "$WRITE" '{"tool":"write","path":"bad\u001b[2Jname","content":"x"}' '{"tool":"run","cmd":"echo hi"}' "$DONE"
		sfma run m.json "$flag" >out 2>err || true
		grep -Eq '^sfma-plan: \+[0-9]+\.[0-9]{3}s turn 1: bootstrap candidate adopted$' err
		grep -Eq '^sfma-plan: \+[0-9]+\.[0-9]{3}s turn 2: write out.txt: allowed, wrote [0-9]+ bytes to out.txt$' err
		grep -Eq '^sfma-plan: \+[0-9]+\.[0-9]{3}s turn 4: run echo hi: allowed, exit=0$' err
		grep -Eq '^sfma-plan: \+[0-9]+\.[0-9]{3}s turn 5: done$' err
		# model text never drives the terminal
		grep -qF 'write bad\x1b[2Jname: refused' err
		run grep -c $'\e' err
		[ "$output" -eq 0 ]
	done
	# without the option, and stderr not a terminal: no progress
	rm -rf ws
	mock "$CAND" "$WRITE" "$DONE"
	run --separate-stderr sfma run m.json
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
}

@test "the mailbox directories exist after the first run" {
	mock "$CAND" "$WRITE" "$DONE"
	run sfma run m.json
	[ "$status" -eq 0 ]
	[ -d ws/.sfma/inbox ]
	[ ! -L ws/.sfma/inbox ]
	[ -d ws/.sfma/outbox ]
	[ ! -L ws/.sfma/outbox ]
	# a link planted in their place is neither followed nor replaced
	rm -rf ws/.sfma/outbox
	mkdir elsewhere
	ln -s "$PWD/elsewhere" ws/.sfma/outbox
	mock "$CAND" '{"tool":"notify","text":"hi"}' "$WRITE" "$DONE"
	run sfma run m.json
	[ -L ws/.sfma/outbox ]
	[ -z "$(ls -A elsewhere)" ]
}
