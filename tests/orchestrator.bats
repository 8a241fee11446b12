#!/usr/bin/env bats
# sfma, the orchestrator: wiring, least-privilege environments, supervision
# (a dying stage, an operator's signal), one run per workspace, and relay.
# Every run that got past validation must leave a record sfma-verify accepts.

load helpers
bats_require_minimum_version 1.5.0

CANDIDATE='{"mission":"m","successCriteria":["out.txt written"],"loopRoles":[],"firstTasks":[],"schedule":"now"}'
# A script whose second turn keeps sfma-exec busy in the sandbox, so that a
# test can look at the live stages; release_sleep lets the run go on.
HOLD="[$CANDIDATE,{\"tool\":\"run\",\"cmd\":\"sleep 40\"},{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"done\",\"summary\":\"ok\"}]"
QUICK="[$CANDIDATE,{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"done\",\"summary\":\"ok\"}]"

setup() {
	require jq
	cd "$BATS_TEST_TMPDIR"
	write_manifest manifest.json '[{"name":"m","provider":"mock","model":"x"}]'
}

teardown() {
	# A failed assertion must not leave a run behind.
	if [ -n "${sfma_pid:-}" ]; then
		kill -KILL "$sfma_child" "$sfma_pid" 2>/dev/null || true
	fi
}

write_manifest() {
	cat >"$1" <<-EOF
	{"name":"orch","workspace":"ws","modelEndpoints":$2,"allowedCommands":["sleep"],
	 "inputs":[],"outputs":["out.txt"],"maxTurns":6,"maxSeconds":60,"dryRunDefault":false}
	EOF
}

# Start `sfma ARGS...` in the background (stdout in out, stderr in err).
start_sfma() {
	timeout -s KILL 60 sfma "$@" >out 2>err &
	sfma_pid=$!
	# timeout(1) forks sfma itself: follow it.
	for _ in $(seq 300); do
		child=$(pgrep -P "$sfma_pid" -x sfma || true)
		[ -n "$child" ] && break
		sleep 0.05
	done
	[ -n "$child" ] || { echo "sfma did not start: $(cat err)" >&2; return 1; }
	sfma_child=$child
}

finish_sfma() {
	status=0
	wait "$sfma_pid" || status=$?
	sfma_pid=
	output=$(cat out)
	stderr=$(cat err)
}

# Wait until the planner has handed `sleep` to sfma-exec: the run is held.
wait_for_sleep() {
	for _ in $(seq 200); do
		grep -q '"cmd":"sleep' ws/.sfma/trace.jsonl 2>/dev/null && return 0
		sleep 0.05
	done
	echo "the run never reached its sleep" >&2
	return 1
}

# End the held command: kill the `sleep` inside sfma-exec's sandbox (from
# here it is a descendant of the stage, whatever its pid in there).
release_sleep() {
	local exec_pid; exec_pid=$(stage_pid sfma-exec) || return 1
	for _ in $(seq 200); do
		local queue=$exec_pid p
		while [ -n "$queue" ]; do
			set -- $queue
			p=$1; shift; queue="$* $(pgrep -P "$p" | tr '\n' ' ')"
			queue=${queue# }
			if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = sleep ]; then
				kill -KILL "$p"
				return 0
			fi
		done
		sleep 0.05
	done
	echo "no sleep to release under sfma-exec" >&2
	return 1
}

# pid of the stage NAME among sfma's children.
# (A relay's stages are its run's: the children of the sfma it forked
# for that run.)
stage_pid() {
	for q in "$sfma_child" $(pgrep -P "$sfma_child" -x sfma); do
		for p in $(pgrep -P "$q"); do
			read -r -d '' argv0 <"/proc/$p/cmdline" || true
			[ "$(basename "$argv0")" = "$1" ] && { echo "$p"; return 0; }
		done
	done
	echo "stage $1 not found" >&2
	return 1
}

verdict() { jq -r .verdict ws/.sfma/result.json; }

# grep that must not match (a plain `! grep` never fails a bats test).
refute_grep() {
	if grep -Eq -- "$1" "$2"; then
		echo "$2 unexpectedly matches $1" >&2
		return 1
	fi
}
runs() { jq '.runs | length' ws/.sfma/memory.json; }

@test "run: the stages complete a run, the planner's summary is printed, the record verifies" {
	SFMA_MOCK=$QUICK run sfma run manifest.json
	[ "$status" -eq 0 ]
	[ "$output" = "COMPLETED turns=3 dryRun=false record=ws/.sfma/result.json" ]
	[ "$(cat ws/out.txt)" = x ]
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == "AUDIT_OK signature=none "* ]]
}

@test "run: stages are found next to sfma even when PATH lacks them" {
	SFMA_MOCK=$QUICK PATH=/usr/bin:/bin run "$SFMA_BINDIR/sfma" run manifest.json
	[ "$status" -eq 0 ]
	[[ "$output" == COMPLETED* ]]
	sfma-verify ws
}

@test "run: a signed run starts sfma-seal once, first, and the other stages only after it has the key" {
	require openssl
	mkdir wrapped
	cp "$SFMA_BINDIR/sfma" wrapped/
	for s in sfma-plan sfma-model sfma-exec sfma-chain sfma-seal; do
		printf '#!/bin/sh\necho "%s $*" >> %s/started\nexec %s/%s "$@"\n' "$s" "$PWD" "$SFMA_BINDIR" "$s" > "wrapped/$s"
		chmod +x "wrapped/$s"
	done
	key=$(openssl genpkey -algorithm ed25519)
	SFMA_MOCK=$QUICK SFMA_AUDIT_PRIVATE_KEY=$key run wrapped/sfma run manifest.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(grep -c '^sfma-seal ' started)" -eq 1 ] || { cat started; return 1; }
	run grep -e '--check-key' started
	[ "$status" -eq 1 ]
	# the seal came right after the planner and before every other stage
	[ "$(sed -n 2p started | cut -d' ' -f1)" = sfma-seal ]
	grep -q '^sfma-seal --allow-empty --key-ready-fd [0-9]* ' started
	jq -e '.integrity.signature.algorithm == "ed25519"' ws/.sfma/result.json
	sfma-verify ws
}

@test "run: a missing stage program is a clear runtime error and nothing is created" {
	mkdir lone
	cp "$SFMA_BINDIR/sfma" lone/
	PATH=/usr/bin:/bin run lone/sfma run manifest.json
	[ "$status" -eq 1 ]
	[[ "$output" == *"sfma: sfma-model: not found next to sfma nor on PATH"* ]]
	[ ! -e ws ]
}

@test "run: each stage sees only its own secrets, in its own process group, without stray descriptors" {
	write_manifest manifest.json '[{"name":"m","provider":"mock","model":"x","auth":{"type":"oauth2-client-credentials",
		"tokenUrl":"http://127.0.0.1:9/token","clientIdEnv":"ORCH_CLIENT_ID","clientSecretEnv":"ORCH_CLIENT_SECRET"}}]'
	key=$(openssl genpkey -algorithm ed25519)
	exec 9>stray-marker
	SFMA_MOCK=$HOLD OPENAI_API_KEY=sk-orch-test ANTHROPIC_API_KEY=ak-orch-test \
		ORCH_CLIENT_ID=cid-orch ORCH_CLIENT_SECRET=csecret-orch SFMA_AUDIT_PRIVATE_KEY=$key \
		HTTPS_PROXY=http://127.0.0.1:9 UNRELATED_SECRET=leak-me start_sfma run manifest.json
	exec 9>&-
	wait_for_sleep
	for s in sfma-plan sfma-model sfma-exec sfma-chain sfma-seal sfma-mem; do
		p=$(stage_pid "$s")
		tr '\0' '\n' <"/proc/$p/environ" >"env.$s"
		# Its own process group: a terminal's ^C reaches sfma alone.
		[ "$(ps -o pgid= -p "$p" | tr -d ' ')" = "$p" ]
		# Nothing sfma inherited from its caller crosses into a stage.
		for fd in /proc/"$p"/fd/*; do
			[ "$(readlink "$fd")" != "$BATS_TEST_TMPDIR/stray-marker" ]
		done
		grep -qx 'PATH=.*' "env.$s"
		refute_grep 'UNRELATED_SECRET|leak-me' "env.$s"
	done
	# Provider keys, OAuth variables, SFMA_MOCK and proxies: sfma-model only.
	grep -qx 'OPENAI_API_KEY=sk-orch-test' env.sfma-model
	grep -qx 'ANTHROPIC_API_KEY=ak-orch-test' env.sfma-model
	grep -qx 'ORCH_CLIENT_ID=cid-orch' env.sfma-model
	grep -qx 'ORCH_CLIENT_SECRET=csecret-orch' env.sfma-model
	grep -qx 'HTTPS_PROXY=http://127.0.0.1:9' env.sfma-model
	grep -q '^SFMA_MOCK=' env.sfma-model
	refute_grep SFMA_AUDIT_PRIVATE_KEY env.sfma-model
	for s in sfma-plan sfma-exec sfma-chain sfma-seal sfma-mem; do
		refute_grep 'OPENAI_API_KEY|ANTHROPIC_API_KEY|ORCH_CLIENT|HTTPS_PROXY|SFMA_MOCK' "env.$s"
		refute_grep 'sk-orch-test|ak-orch-test|cid-orch|csecret-orch' "env.$s"
	done
	# The signing key: sfma-seal only (it wipes the value once loaded, so
	# only the name is certain to be seen here).
	grep -q '^SFMA_AUDIT_PRIVATE_KEY=' env.sfma-seal
	for s in sfma-plan sfma-model sfma-exec sfma-chain sfma-mem; do
		refute_grep 'SFMA_AUDIT_PRIVATE_KEY|PRIVATE KEY' "env.$s"
	done
	release_sleep
	finish_sfma
	[ "$status" -eq 0 ]
	[[ "$output" == COMPLETED* ]]
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == "AUDIT_OK signature=untrusted-key "* ]]
}

@test "run: a stage killed mid-run ends the run failed, names the stage, and the record verifies" {
	SFMA_MOCK=$HOLD start_sfma run manifest.json
	wait_for_sleep
	kill -KILL "$(stage_pid sfma-exec)"
	finish_sfma
	[ "$status" -eq 1 ]
	[[ "$output" == "FAILED turns="* ]]
	[[ "$stderr" == *"sfma: stage sfma-exec killed by signal 9"* ]]
	[[ "$stderr" == *"sfma-exec"*"died"* ]]
	[ "$(verdict)" = failed ]
	sfma-verify ws
}

@test "run: sfma-mem is a stage: started on the workspace, asked to say why it stops, and its death ends the run" {
	SFMA_MOCK=$HOLD start_sfma run manifest.json
	wait_for_sleep
	p=$(stage_pid sfma-mem)
	[ "$(tr '\0' ' ' <"/proc/$p/cmdline")" = "$SFMA_BINDIR/sfma-mem $PWD/ws " ]
	tr '\0' '\n' <"/proc/$p/environ" | grep -qx SFMA_ERROR_LINE=1
	kill -KILL "$p"
	# the planner ends the run: sfma-exec, whose answer nobody is left to
	# read, may already have stopped the command and gone
	if stage_pid sfma-exec >/dev/null 2>&1; then release_sleep; fi
	finish_sfma
	[ "$status" -eq 1 ]
	[[ "$output" == "FAILED turns="* ]]
	[[ "$stderr" == *"sfma: stage sfma-mem killed by signal 9"* ]]
	[[ "$stderr" == *"sfma-plan: failed: stage sfma-mem died"* ]] || { echo "$stderr"; return 1; }
	[[ "$stderr" == *"memory store: the run was not kept (stage sfma-mem died); memory.json is as the run before left it"* ]] || { echo "$stderr"; return 1; }
	[ "$(verdict)" = failed ]
	sfma-verify ws
}

@test "run: a stage that stops on an error is named with its error, not as a death, in stderr and the record" {
	# sfma-model stops at once: its script is not JSON
	run --separate-stderr env SFMA_MOCK='[{bad' sfma run manifest.json
	[ "$status" -eq 1 ] || { echo "$output $stderr"; return 1; }
	local said="sfma-model: SFMA_MOCK: invalid JSON: string or '}' expected near 'bad' at line 1 column 5"
	[[ "$stderr" == *"sfma-plan: failed: $said"* ]] || { echo "$stderr"; return 1; }
	[[ "$stderr" != *"died"* ]] || { echo "$stderr"; return 1; }
	[ "$(jq -r .error ws/.sfma/result.json)" = "$said" ]
	sfma-verify ws
	# sfma-seal stops: the checkpoint directory it writes is a file
	rm -rf ws
	mkdir -p ws/.sfma
	: > ws/.sfma/checkpoints
	run --separate-stderr env SFMA_MOCK="$QUICK" sfma run manifest.json
	[ "$status" -eq 1 ] || { echo "$output $stderr"; return 1; }
	[ -z "$output" ] || { echo "a summary line for a record not written: $output"; return 1; }
	[[ "$stderr" =~ sfma-plan:\ the\ run\ was\ not\ sealed\ \(sfma-seal:\ [^$'\n']*checkpoints[^$'\n']*\):\ no\ result\ record\ was\ written ]] ||
		{ echo "$stderr"; return 1; }
	[[ "$stderr" != *"died"* ]] || { echo "$stderr"; return 1; }
	[ ! -e ws/.sfma/result.json ]
	# Wired by hand, without sfma, a stage prints only what it always did.
	run env SFMA_MOCK='[{bad' sfma-model manifest.json < /dev/null
	[ "$status" -eq 2 ] && [ "$output" = "$said" ] || { echo "$output"; return 1; }
}

@test "run: SIGTERM to sfma halts the run as halted-operator, sealed and verifiable" {
	SFMA_MOCK=$HOLD start_sfma run manifest.json
	wait_for_sleep
	kill -TERM "$sfma_child"
	# the held command stops with the run (nobody reads its answer)
	finish_sfma
	[ "$status" -eq 1 ]
	[[ "$output" == "HALTED-OPERATOR turns=2 "* ]]
	[ "$(verdict)" = halted-operator ]
	# The record names what the operator did.
	jq -s -e 'any(.[]; .kind=="result" and .data.halt=="SIGTERM" and .data.trigger=="SIGTERM")' ws/.sfma/trace.jsonl
	# No model call after the halt: the two calls made before it, no more.
	[ "$(grep -c '"kind":"call"' ws/.sfma/trace.jsonl)" -eq 2 ]
	# Only the planner was told: no stage is reported dead.
	[[ "$stderr" != *"sfma: stage"* ]]
	sfma-verify ws
}

@test "run: SIGINT (an operator's ^C) halts the same way" {
	SFMA_MOCK=$HOLD start_sfma run manifest.json
	wait_for_sleep
	kill -INT "$sfma_child"
	# the held command stops with the run (nobody reads its answer)
	finish_sfma
	[ "$status" -eq 1 ]
	[[ "$output" == HALTED-OPERATOR* ]]
	jq -s -e 'any(.[]; .kind=="result" and .data.halt=="SIGINT" and .data.trigger=="SIGINT")' ws/.sfma/trace.jsonl
	[[ "$stderr" != *"signal 13"* && "$stderr" != *"sfma-seal"* ]]
	sfma-verify ws
}

@test "run: ^C during a long command stops the command at once, with no word of a stage still running" {
	SFMA_MOCK=$HOLD start_sfma run manifest.json
	wait_for_sleep
	local exec_pid before
	exec_pid=$(stage_pid sfma-exec)
	before=$(date +%s%N)
	kill -INT "$sfma_child"
	# no release_sleep: the sleep 40 is the stage's to stop
	finish_sfma
	local took_ms=$(( ($(date +%s%N) - before) / 1000000 ))
	[ "$status" -eq 1 ]
	[[ "$output" == "HALTED-OPERATOR turns=2 "* ]]
	# not the 5 s grace, nor the command's 40 s
	[ "$took_ms" -lt 3000 ] || { echo "sfma took $took_ms ms after ^C"; cat err; return 1; }
	[[ "$stderr" != *"still running"* ]] || { echo "$stderr"; return 1; }
	[[ "$stderr" != *"sfma: stage"* ]] || { echo "$stderr"; return 1; }
	# the stage and its sandbox are gone: no sleep 40 is left anywhere
	[ ! -d "/proc/$exec_pid" ]
	run pgrep -f -x 'sleep 40'
	[ "$status" -eq 1 ]
	jq -s -e 'any(.[]; .kind=="result" and .data.trigger=="SIGINT")' ws/.sfma/trace.jsonl
	sfma-verify ws
}

@test "run: a second run on a busy workspace fails at once and touches nothing" {
	SFMA_MOCK=$HOLD start_sfma run manifest.json
	wait_for_sleep
	before=$(sha256sum ws/.sfma/trace.jsonl)
	SFMA_MOCK=$QUICK run sfma run manifest.json
	[ "$status" -eq 1 ]
	[[ "$output" == *"workspace busy"* ]]
	# It returned while the first run still holds the workspace.
	kill -0 "$sfma_child"
	[ "$(sha256sum ws/.sfma/trace.jsonl)" = "$before" ]
	release_sleep
	finish_sfma
	[ "$status" -eq 0 ]
	[ "$(runs)" -eq 1 ]
	sfma-verify ws
}

@test "run: an invalid manifest exits 2 and creates nothing" {
	echo '{"name":"bad","workspace":"ws","modelAdapter":"x"}' >bad.json
	run sfma run bad.json --apply
	[ "$status" -eq 2 ]
	[[ "$output" == *TASK_INVALID* ]]
	[[ "$output" == *"modelAdapter was replaced by modelEndpoints"* ]]
	[ ! -e ws ]
}

# The programs execve'd under `strace -f -o FILE ...`, one per line, in
# order (a call strace shows as unfinished is resumed later; failed calls,
# = -1, are left out).
execs() { grep -v ' = -1 ' "$1" | sed -n 's/^[0-9]* *execve("\([^"]*\)".*/\1/p' | sed 's|.*/||'; }

@test "run: one sfma-plan process both validates the manifest and runs it" {
	require strace
	cp "$BATS_TEST_DIRNAME/../examples/hello/manifest.json" hello.json
	strace -f -qq -e trace=execve -o trace.st sfma run hello.json --apply >out 2>err
	[[ "$(cat out)" == "COMPLETED turns=4 dryRun=false "* ]] || { cat out err; return 1; }
	[ "$(execs trace.st | grep -cx sfma-plan)" -eq 1 ] || { execs trace.st; return 1; }
	# Every stage once, the planner first of them.
	[ "$(execs trace.st | grep -x 'sfma-[a-z]*' | head -1)" = sfma-plan ]
	for s in sfma-model sfma-exec sfma-chain sfma-seal; do
		[ "$(execs trace.st | grep -cx "$s")" -eq 1 ]
	done
	sfma-verify ws
	# A relay: one planner per run.
	SFMA_MOCK=$QUICK strace -f -qq -e trace=execve -o relay.st sfma relay manifest.json --max-runs=2 >out 2>err
	[ "$(execs relay.st | grep -cx sfma-plan)" -eq 2 ] || { execs relay.st; return 1; }
}

@test "run: an invalid manifest in an existing workspace exits 2, starts no other stage, creates no .sfma" {
	require strace
	mkdir ws
	echo '{"name":"bad","workspace":"ws","modelAdapter":"x"}' >bad.json
	strace -f -qq -e trace=execve -o trace.st sfma run bad.json --apply >out 2>err && return 1
	run sfma run bad.json --apply
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = TASK_INVALID ] || { echo "$output"; return 1; }
	[[ "$output" == *"modelAdapter was replaced by modelEndpoints"* ]]
	[ "$(execs trace.st | grep -x 'sfma-[a-z]*' | tr '\n' ' ')" = "sfma-plan " ] || { execs trace.st; return 1; }
	[ -z "$(ls -A ws)" ]
}

# A copy of the programs in which stage $1 is a file that cannot be
# executed (its interpreter is missing), so that it fails only at its
# execve, after sfma has found it and the planner has started.
broken_stage() {
	mkdir -p broken
	cp "$SFMA_BINDIR"/sfma* broken/
	printf '#!/no/such/interpreter\n' >"broken/$1"
	chmod +x "broken/$1"
}

@test "run: a stage that cannot start ends the run at once, exit 1, leaving nothing behind" {
	for stage in sfma-exec sfma-model sfma-chain sfma-seal; do
		rm -rf broken ws
		broken_stage "$stage"
		SFMA_MOCK=$QUICK PATH=/usr/bin:/bin run --separate-stderr broken/sfma run manifest.json
		[ "$status" -eq 1 ] || { echo "$stage: $status $stderr"; return 1; }
		# The one message is sfma's: the planner, never let go, is silent.
		[ "$stderr" = "sfma: $PWD/broken/$stage: No such file or directory" ] || { echo "$stage: $stderr"; return 1; }
		[ -z "$output" ]
		[ ! -e ws ]
	done
	# The same with the workspace in place: no .sfma, no lock, no trace.
	mkdir ws
	SFMA_MOCK=$QUICK PATH=/usr/bin:/bin run broken/sfma run manifest.json
	[ "$status" -eq 1 ]
	[ -z "$(ls -A ws)" ]
	# A relay ends there too, before any run.
	SFMA_MOCK=$QUICK PATH=/usr/bin:/bin run broken/sfma relay manifest.json --max-runs=2
	[ "$status" -eq 1 ]
	[ -z "$(ls -A ws)" ]
}

# A copy of the programs in which stage $1 first sends SIGTERM to sfma (its
# parent), then becomes itself: the operator's signal arrives while sfma
# is still starting the run.
signalling_stage() {
	mkdir -p signalling
	cp "$SFMA_BINDIR"/sfma* signalling/
	rm "signalling/$1"
	printf '#!/bin/sh\nkill -TERM $PPID\nexec %s/%s "$@"\n' "$SFMA_BINDIR" "$1" >"signalling/$1"
	chmod +x "signalling/$1"
}

@test "run: a signal while the planner validates the manifest starts no run and touches nothing" {
	signalling_stage sfma-plan
	mkdir ws
	SFMA_MOCK=$QUICK run --separate-stderr signalling/sfma run manifest.json
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma: interrupted before the run started" ]
	[ -z "$(ls -A ws)" ]
}

@test "run: a signal while the other stages start reaches the planner, which halts and seals" {
	signalling_stage sfma-model
	SFMA_MOCK=$QUICK run --separate-stderr signalling/sfma run manifest.json
	[ "$status" -eq 1 ]
	[[ "$output" == "HALTED-OPERATOR turns="* ]] || { echo "$output $stderr"; return 1; }
	jq -s -e 'any(.[]; .kind=="result" and .data.halt=="SIGTERM" and .data.trigger=="SIGTERM")' ws/.sfma/trace.jsonl
	sfma-verify ws
}

@test "usage errors exit 2 with the usage on stderr" {
	for args in "" "help" "teleport manifest.json" "run" "run a.json b.json" \
	            "run manifest.json --bogus" "relay manifest.json --every=soon" \
	            "relay manifest.json --max-runs=0" "run manifest.json --every=1" \
	            "run manifest.json --task" "relay manifest.json --every soon" "-x run"; do
		run --separate-stderr sfma $args
		[ "$status" -eq 2 ] || { echo "sfma $args: status $status"; return 1; }
		[ -z "$output" ] || { echo "sfma $args: stdout: $output"; return 1; }
		[[ "${stderr_lines[0]}" == "sfma: "* ]] || { echo "sfma $args: $stderr"; return 1; }
		[[ "$stderr" == *"usage: sfma run MANIFEST"* ]]
	done
	[ ! -e ws ]
}

@test "relay: two runs with --max-runs=2, each announced and each summarised in memory" {
	SFMA_MOCK=$QUICK run sfma relay manifest.json --max-runs=2
	[ "$status" -eq 0 ]
	[[ "$output" == *"sfma: relay: run 1/2"*"sfma: relay: run 2/2"* ]]
	[ "$(grep -c '^COMPLETED ' <<<"$output")" -eq 2 ]
	[ "$(runs)" -eq 2 ]
	sfma-verify ws
}

@test "relay: a HALT file stops the current run and the relay" {
	SFMA_MOCK=$HOLD start_sfma relay manifest.json --max-runs=3
	wait_for_sleep
	touch ws/.sfma/HALT
	release_sleep
	finish_sfma
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"relay: run 1/3"* ]]
	[[ "$stderr" != *"relay: run 2/3"* ]]
	[[ "$stderr" == *"relay: halted by .sfma/HALT"* ]]
	[ "$(verdict)" = halted-operator ]
	[ "$(runs)" -eq 1 ]
	sfma-verify ws
}

@test "relay: a HALT file present before the first run starts no run" {
	mkdir -p ws/.sfma
	touch ws/.sfma/HALT
	run sfma relay manifest.json
	[ "$status" -eq 0 ]
	[[ "$output" == *"relay: halted by .sfma/HALT"* ]]
	[[ "$output" != *"relay: run 1"* ]]
	[ ! -e ws/.sfma/trace.jsonl ]
}

@test "relay: a signal lets the current run halt and seal, then ends the relay" {
	SFMA_MOCK=$HOLD start_sfma relay manifest.json
	wait_for_sleep
	kill -TERM "$sfma_child"
	# the held command stops with the run (nobody reads its answer)
	finish_sfma
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"relay: run 1/inf"* ]]
	[[ "$stderr" != *"relay: run 2/inf"* ]]
	[[ "$stderr" == *"relay: stopped by signal"* ]]
	[ "$(verdict)" = halted-operator ]
	[ "$(runs)" -eq 1 ]
	sfma-verify ws
}

@test "relay: an invalid manifest exits 2 before any run, and creates nothing" {
	echo '{"name":"bad"}' >bad.json
	run sfma relay bad.json --max-runs=2
	[ "$status" -eq 2 ]
	[[ "$output" == *TASK_INVALID* ]]
	[[ "$output" != *"relay: run"* ]]
	[ ! -e ws ]
}

@test "relay: the manifest is checked again before each run; an edit that breaks it ends the relay with 2" {
	SFMA_MOCK=$HOLD start_sfma relay manifest.json --max-runs=3
	wait_for_sleep
	echo '{"name":"broken"' >manifest.json
	release_sleep
	finish_sfma
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"relay: run 1/3"* ]]
	[[ "$stderr" != *"relay: run 2/3"* ]]
	[[ "$stderr" == *TASK_INVALID* ]]
	[ "$(runs)" -eq 1 ]
	sfma-verify ws
}

@test "relay: --every spaces the starts of runs" {
	SFMA_MOCK=$QUICK run sfma relay manifest.json --max-runs=2 --every=1.5
	[ "$status" -eq 0 ]
	first=$(jq -r '.runs[0].at' ws/.sfma/memory.json)
	second=$(jq -r '.runs[1].at' ws/.sfma/memory.json)
	gap=$(( $(date -d "$second" +%s%3N) - $(date -d "$first" +%s%3N) ))
	# Both runs take about as long: their ends are as far apart as their starts.
	[ "$gap" -ge 1000 ]
	sfma-verify ws
}
