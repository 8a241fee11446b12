#!/usr/bin/env bats
# Sudden death. Each stage is killed with SIGKILL at fixed points of a run,
# and a disk fills up mid-run. Whatever dies: the chain stays intact (a torn
# final line at most, which sfma-chain --recover-torn repairs), no lock,
# process or staging copy is left, sfma-verify says AUDIT_OK or
# AUDIT_UNSEALED (exit 3) - never AUDIT_INVALID - and the next run records
# the interrupted one in the trace and verifies.
#
# Kill points are states, not moments: the run is held where it cannot
# move on (a lock the test holds, a model reply that never comes, a command
# that sleeps, a stage stopped with SIGSTOP) and the test waits, bounded,
# until the run is there.

load helpers

CAND='{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'
WRITE='{"tool":"write","path":"out.txt","content":"x"}'
DONE='{"tool":"done","summary":"s"}'
QUICK="[$CAND,$WRITE,$DONE]"
# The second turn runs a command that outlives any test.
HOLD="[$CAND,{\"tool\":\"run\",\"cmd\":\"sleep 600\"},$WRITE,$DONE]"
STAGES="sfma-plan sfma-model sfma-exec sfma-chain sfma-seal"

setup() {
	require jq
	require python3
	require flock
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
	unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
	helpers=()
	manifest '[{"name":"mock","provider":"mock","model":"m"}]'
}

teardown() {
	# A failed assertion must not leave a run, a lock holder or a server behind.
	local p
	for p in ${sfma_pid:-} "${helpers[@]}"; do
		kill -CONT "$p" 2>/dev/null || true
		kill -KILL "$p" 2>/dev/null || true
	done
}

manifest() { # manifest ENDPOINTS
	jq -n --argjson eps "$1" \
		'{name:"crash",workspace:"ws",modelEndpoints:$eps,allowedCommands:["sleep"],
		  inputs:[],outputs:["out.txt"],maxTurns:8,maxSeconds:300,dryRunDefault:false}' > m.json
}

# within WHAT CMD...: poll CMD until it succeeds, for at most 60 s.
within() {
	local what=$1 i
	shift
	for i in $(seq 1200); do
		"$@" && return 0
		sleep 0.05
	done
	echo "timed out waiting for $what" >&2
	return 1
}

gone() { ! kill -0 "$1" 2>/dev/null; }

# A first run that completes: the workspace has a sealed record to extend.
sealed_run() {
	SFMA_MOCK=$QUICK run sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	sealed_head=$(jq -r .integrity.headHash ws/.sfma/result.json)
	sealed_entries=$(jq -r .integrity.entries ws/.sfma/result.json)
}

start_run() { # start_run MOCK: sfma in the background, stdout in out, stderr in err
	SFMA_MOCK=$1 sfma run m.json > out 2> err &
	sfma_pid=$!
}

# stage_pid NAME: the pid of that stage among sfma's children (the planner
# of the run, not the `sfma-plan --check` before it).
stage_pid() {
	local p argv
	for p in $(pgrep -P "$sfma_pid"); do
		mapfile -d '' argv 2>/dev/null < "/proc/$p/cmdline" || continue
		[ "${argv[0]##*/}" = "$1" ] || continue
		[ "$1" != sfma-plan ] || [ "${argv[1]:-}" = run ] || continue
		echo "$p"
		return 0
	done
	return 1
}

all_stages_up() {
	local s p
	for s in $STAGES; do
		p=$(stage_pid "$s") || return 1
		pid[$s]=$p
	done
}

# The descendants of pid $1 (the sandboxed command runs in its own pid
# namespace, but from here it is still a descendant of sfma-exec).
descendants() {
	local queue=$1 p
	while [ -n "$queue" ]; do
		set -- $queue
		p=$1
		shift
		queue="$* $(pgrep -P "$p" | tr '\n' ' ')"
		queue=${queue# }
		queue=${queue% }
		echo "$p"
	done
}

sandboxed_sleep() {
	local p
	for p in $(descendants "${pid[sfma-exec]}"); do
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" = sleep ] && { sleep_pid=$p; return 0; }
	done
	return 1
}

# The trace file among the descriptors of pid $1.
holds_trace() {
	local fd
	for fd in /proc/"$1"/fd/*; do
		[ "$(readlink "$fd" 2>/dev/null)" = "$BATS_TEST_TMPDIR/ws/.sfma/trace.jsonl" ] && return 0
	done
	return 1
}

# The pipe on fd 0 of $1 has no writer left in $2: the planner has handed
# sfma-seal the whole body and closed its end.
closed_input() {
	local pipe fd
	pipe=$(readlink "/proc/$1/fd/0") || return 1
	for fd in /proc/"$2"/fd/*; do
		[ "$(readlink "$fd" 2>/dev/null)" = "$pipe" ] && return 1
	done
	return 0
}

# Hold the trace's lock (the one sfma-chain takes before its first append).
hold_trace_lock() {
	python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(600)' ws/.sfma/trace.jsonl > lock.out &
	lock_pid=$!
	disown "$lock_pid" # killed on purpose: no job notice
	helpers+=("$lock_pid")
	within "the trace lock" grep -q locked lock.out
}

# The fake provider: two replies, then a third request that is never
# answered (the run is then mid-turn, waiting for the model).
serve_slow_model() {
	local reply
	rm -f port requests.log
	reply() { jq -cn --arg t "$1" '{json:{choices:[{message:{role:"assistant",content:$t}}]}}'; }
	printf '{"/v1/chat/completions":[%s,%s,%s]}' "$(reply "$CAND")" "$(reply "$WRITE")" \
		"$(jq -c '. + {delay: 600}' <<<"$(reply "$DONE")")" > script.json
	python3 "$REPO/tests/fixtures/model/fake_server.py" script.json requests.log port 2> server.err &
	server_pid=$!
	disown "$server_pid"
	helpers+=("$server_pid")
	within "the fake provider" test -s port
	manifest "[{\"name\":\"gpt\",\"provider\":\"openai\",\"model\":\"x\",\"baseUrl\":\"http://127.0.0.1:$(cat port)\"}]"
	export OPENAI_API_KEY=sk-crash-test
}

requests() { [ "$(wc -l < requests.log 2>/dev/null || echo 0)" -ge "$1" ]; }

# crash STAGE POINT: start a run, hold it at POINT, SIGKILL STAGE there, let
# the run end. POINT is one of
#   start    before the first append (sfma-chain waits for the trace lock)
#   turn     mid-turn (the model's third reply never comes)
#   command  during a command (the sandbox runs `sleep 600`)
#   seal     during sealing (sfma-seal, stopped, has the whole body)
crash() {
	local stage=$1 point=$2 mock=$QUICK
	declare -gA pid=()
	sleep_pid= base=
	case $point in
	start) hold_trace_lock ;;
	turn) serve_slow_model ;;
	command | seal) mock=$HOLD ;;
	esac
	start_run "$mock"
	within "the stages" all_stages_up
	case $point in
	start) within "sfma-chain at the trace lock" holds_trace "${pid[sfma-chain]}" ;;
	turn) within "the third model request" requests 3 ;;
	command) within "the sandboxed sleep" sandboxed_sleep ;;
	seal)
		# Stopped while idle, then the command is let go: the run goes on
		# to its end and hands its record to a stage that cannot move.
		within "the sandboxed sleep" sandboxed_sleep
		kill -STOP "${pid[sfma-seal]}"
		kill -KILL "$sleep_pid"
		within "the planner to hand over the record" closed_input "${pid[sfma-seal]}" "${pid[sfma-plan]}"
		;;
	esac
	# The staging base of sfma-exec, if it made one: a private mount.
	base=$(awk '$5 ~ /\/sfma-exec\.[^\/]*$/ {print $5; exit}' "/proc/${pid[sfma-exec]}/mountinfo" 2>/dev/null || true)
	kill -KILL "${pid[$stage]}"
	case $point in
	start) kill -KILL "$lock_pid" ;;
	seal) kill -CONT "${pid[sfma-seal]}" 2>/dev/null || true ;;
	esac
	# Once the planner has ended, what held the run is let go, as a
	# provider that answers late or a command that ends would be; except
	# when the planner died during a command: then sfma kills the busy
	# sfma-exec after its grace period, and that must leave nothing either.
	if [ "$stage" != sfma-plan ] || [ "$point" != command ]; then
		within "the planner to end" gone "${pid[sfma-plan]}"
		case $point in
		turn) kill -KILL "$server_pid" ;;
		command) kill -KILL "$sleep_pid" 2>/dev/null || true ;;
		esac
	fi
	within "sfma to end" gone "$sfma_pid"
	run_status=0
	wait "$sfma_pid" || run_status=$?
	sfma_pid=
}

# Nothing of the run is left: no process, no lock held, no staging copy.
nothing_left() {
	local s
	for s in $STAGES; do
		within "$s (${pid[$s]}) to be gone" gone "${pid[$s]}"
	done
	[ -z "$sleep_pid" ] || within "the sandboxed sleep to be gone" gone "$sleep_pid"
	flock -n ws/.sfma true || { echo "the workspace lock is still held" >&2; return 1; }
	flock -n ws/.sfma/trace.jsonl true || { echo "the trace lock is still held" >&2; return 1; }
	# The staging copies lived on a tmpfs in sfma-exec's own mount
	# namespace, gone with it. A sfma-exec that could clean up removed
	# the mount point too; one killed by SIGKILL leaves it, empty.
	if [ -n "$base" ] && [ -e "$base" ]; then
		[ -z "$(ls -A "$base")" ] || { echo "staging copy left in $base:" >&2; ls -lA "$base" >&2; return 1; }
		[ "$1" = sfma-exec ] || grep -q 'stage sfma-exec still running' err ||
			{ echo "$base left behind by a sfma-exec that exited on its own" >&2; return 1; }
		rmdir "$base"
	fi
}

# audit: sfma-verify must say AUDIT_OK (unsealed=0) or AUDIT_UNSEALED
# (unsealed=N, exit 3); a torn final line is recovered first.
audit() {
	local out status=0
	out=$(sfma-verify ws 2>&1) || status=$?
	if [ "$status" -eq 3 ] && [[ "$out" == *"torn final line"* ]]; then
		sfma-chain --recover-torn ws/.sfma/trace.jsonl > /dev/null
		status=0
		out=$(sfma-verify ws 2>&1) || status=$?
	fi
	case $status in
	0)
		[[ "$out" == "AUDIT_OK "* ]] || { echo "$out"; return 1; }
		unsealed=0
		;;
	3)
		[[ "$out" =~ ^AUDIT_UNSEALED:\ ([0-9]+)\ entr(y|ies)\ after\ the\ sealed\ head\ \(an\ interrupted\ run\;\ the\ next\ run\ records\ it\)$ ]] ||
			{ echo "unexpected: $out"; return 1; }
		unsealed=${BASH_REMATCH[1]}
		;;
	*)
		echo "sfma-verify exited $status: $out"
		return 1
		;;
	esac
}

# The next run completes, seals and verifies; an unsealed tail left before
# it is recorded as an interrupted run, referring to its first and last
# entries, after the head the last record sealed.
next_run_records() {
	local head entries
	head=$(jq -r .integrity.headHash ws/.sfma/result.json)
	entries=$(jq -r .integrity.entries ws/.sfma/result.json)
	manifest '[{"name":"mock","provider":"mock","model":"m"}]'
	SFMA_MOCK=$QUICK run sfma run m.json
	[ "$status" -eq 0 ] || { echo "next run: $output"; return 1; }
	run sfma-verify ws
	[ "$status" -eq 0 ] || { echo "after the next run: $output"; return 1; }
	local n
	n=$(jq -s --arg h "$head" '[.[] | select(.kind == "result" and .data.interrupted.headHash == $h)] | length' ws/.sfma/trace.jsonl)
	if [ "$unsealed" -eq 0 ]; then
		[ "$n" -eq 0 ]
		return
	fi
	[ "$n" -eq 1 ]
	jq -s -e --arg h "$head" --argjson sealed "$entries" --argjson n "$unsealed" '
		(map(select(.kind == "result" and .data.interrupted.headHash == $h)) | .[0]) as $r
		| .[$sealed] as $first | .[$sealed + $n - 1] as $last
		| $r.data.interrupted == {afterSeq: .[$sealed - 1].seq, entries: $n, firstSeq: $first.seq,
		                          lastSeq: $last.seq, headHash: $h}
		  and $r.refs == (if $n == 1 then [$first.id] else [$first.id, $last.id] end)
		  and .[$sealed + $n].id == $r.id
		  and .[$sealed + $n + 1].kind == "clock-anchor"' ws/.sfma/trace.jsonl > /dev/null ||
		{ echo "no faithful interrupted-run entry"; grep interrupted ws/.sfma/trace.jsonl; return 1; }
	# This run's own clock range still begins at its clock-anchor.
	jq -s -e --argjson f "$(jq .clock.firstSeq ws/.sfma/result.json)" \
		'map(select(.seq == $f)) | length == 1 and .[0].kind == "clock-anchor"' ws/.sfma/trace.jsonl > /dev/null
}

# crashed STAGE POINT WANT: one kill, checked; WANT is what the verifier
# must say right after it: sealed (AUDIT_OK: the run noticed the death and
# sealed what it had) or unsealed (AUDIT_UNSEALED, exit 3).
crashed() {
	rm -rf ws
	sealed_run
	crash "$1" "$2"
	[ "$run_status" -eq 1 ] || { echo "$1 at $2: sfma exited $run_status"; cat out err; return 1; }
	nothing_left "$1"
	audit || { echo "$1 at $2"; cat err; return 1; }
	case $3 in
	sealed) [ "$unsealed" -eq 0 ] || { echo "$1 at $2: $unsealed unsealed entries, expected none"; cat err; return 1; } ;;
	unsealed) [ "$unsealed" -gt 0 ] || { echo "$1 at $2: sealed, expected an unsealed tail"; cat err; return 1; } ;;
	esac
}

# kill_at STAGE POINT WANT: crashed, then the next run.
kill_at() {
	crashed "$@"
	next_run_records
}

last_entry() { tail -n 1 ws/.sfma/trace.jsonl | jq -e "$1" > /dev/null; }

@test "SIGKILL before the first append: nothing is lost, the next run records what was appended" {
	crashed sfma-plan start unsealed
	# the clock-anchor sfma-chain had taken when the planner died
	[ "$unsealed" -eq 1 ]
	last_entry '.kind == "clock-anchor"'
	next_run_records
	crashed sfma-model start unsealed
	# the planner gave up on the append that sfma-chain still made
	[ "$unsealed" -eq 1 ]
	next_run_records
	kill_at sfma-exec start unsealed
	kill_at sfma-chain start sealed
	kill_at sfma-seal start unsealed
}

@test "SIGKILL mid-turn, while the model's reply is awaited" {
	kill_at sfma-plan turn unsealed
	crashed sfma-model turn sealed
	jq -e '.verdict == "failed" and .error == "stage sfma-model died"' ws/.sfma/result.json
	next_run_records
	kill_at sfma-exec turn sealed
	kill_at sfma-chain turn sealed
	crashed sfma-seal turn unsealed
	grep -q 'sealing failed (stage sfma-seal died): no result record was written' err
	next_run_records
}

@test "SIGKILL during a command in the sandbox" {
	crashed sfma-plan command unsealed
	grep -q 'stage sfma-exec still running 5 s after the planner ended; killing it' err
	next_run_records
	kill_at sfma-model command sealed
	crashed sfma-exec command sealed
	jq -e '.verdict == "failed" and .error == "stage sfma-exec died"' ws/.sfma/result.json
	next_run_records
	kill_at sfma-chain command sealed
	kill_at sfma-seal command unsealed
}

# By then the planner has closed the other stages' input: they are gone.
@test "SIGKILL during sealing" {
	crashed sfma-seal seal unsealed
	# the whole run is the tail, up to its closing clock-anchor
	[ "$unsealed" -eq $(($(wc -l < ws/.sfma/trace.jsonl) - sealed_entries)) ]
	last_entry '.kind == "clock-anchor"'
	next_run_records
	crashed sfma-plan seal sealed
	# sfma-seal had the whole body: it wrote the record after the planner died
	jq -e '.verdict == "completed"' ws/.sfma/result.json
	[ "$(jq .integrity.entries ws/.sfma/result.json)" -eq "$(wc -l < ws/.sfma/trace.jsonl)" ]
	next_run_records
}
