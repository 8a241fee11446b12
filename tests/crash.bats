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

# stage_pid NAME: the pid of that stage among sfma's children (for the
# planner, its `sfma-plan run` process).
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
	sleep_pid=
	touch "$BATS_TEST_TMPDIR/crash-started"
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
	# The staging copy lives on a tmpfs in the command's own mount
	# namespace: no host path names it, so nothing of it may appear in
	# /tmp, however the stage died.
	local left
	left=$(find /tmp -maxdepth 1 -name 'sfma-exec.*' -newer "$BATS_TEST_TMPDIR/crash-started" 2>/dev/null)
	[ -z "$left" ] || { echo "staging left behind in /tmp: $left" >&2; return 1; }
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
	# sfma log shows it with the run that recorded it
	sfma-log ws | grep -q 'the previous run was interrupted' ||
		{ echo "sfma log does not show the interrupted run"; sfma-log ws; return 1; }
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
	# the planner waits for sfma-chain's answer to the append it had sent,
	# so it sees the model die and seals a failed record
	crashed sfma-model start sealed
	jq -e '.verdict == "failed" and .error == "stage sfma-model died"' ws/.sfma/result.json
	next_run_records
	kill_at sfma-exec start sealed
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
	grep -q 'the run was not sealed (stage sfma-seal died): no result record was written' err
	next_run_records
}

@test "SIGKILL during a command in the sandbox" {
	crashed sfma-plan command unsealed
	# nobody is left to read the command's answer: sfma-exec stops it at
	# once instead of letting it run out the grace (and being killed)
	grep -q 'still running' err && { cat err; return 1; }
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

@test "a first run killed before it seals: no record yet, AUDIT_UNSEALED, the next run records it from the start" {
	crash sfma-plan turn
	nothing_left sfma-plan
	[ ! -e ws/.sfma/result.json ]
	n=$(wc -l < ws/.sfma/trace.jsonl)
	run sfma-verify ws
	[ "$status" -eq 3 ]
	[ "$output" = "AUDIT_UNSEALED: $n entries and no result record (an interrupted run; the next run records it)" ]
	# a record named explicitly must exist
	run sfma-verify ws/.sfma/result.json
	[ "$status" -eq 1 ]
	[[ "$output" == "AUDIT_INVALID: ws/.sfma/result.json: No such file or directory" ]]
	manifest '[{"name":"mock","provider":"mock","model":"m"}]'
	SFMA_MOCK=$QUICK run sfma run m.json
	[ "$status" -eq 0 ]
	[[ "$output" == *"the previous run was interrupted before it sealed: its $n entries are recorded (result-$((n + 1)))"* ]]
	jq -s -e --argjson n "$n" '.[$n].data.interrupted == {afterSeq: 0, entries: $n, firstSeq: 1, lastSeq: $n,
		headHash: ("0" * 64)} and .[$n].refs == ["clock-anchor-1", .[$n - 1].id]' ws/.sfma/trace.jsonl > /dev/null
	run sfma-verify ws
	[ "$status" -eq 0 ]
}

# A workspace sealed by sfma-seal over three entries.
sealed_by_hand() {
	rm -rf w && mkdir -p w/.sfma
	printf '%s\n' '{"kind":"clock-anchor","data":{"wallMs":1,"source":"system-wall"}}' \
		'{"kind":"lifecycle","data":{"from":null,"to":"probation"}}' \
		'{"kind":"clock-anchor","data":{"wallMs":2,"source":"system-wall"}}' |
		sfma-chain w/.sfma/trace.jsonl > /dev/null
	sfma-seal w <<<'{"manifest":{"name":"w","workspace":"w"},"verdict":"completed","turns":1}' > /dev/null
	cp w/.sfma/trace.jsonl sealed.jsonl
	cp w/.sfma/result.json sealed.json
}

append() { printf '%s\n' "$@" | sfma-chain w/.sfma/trace.jsonl > /dev/null; }
ANCHOR='{"kind":"clock-anchor","data":{"wallMs":3,"source":"system-wall"}}'
TASK='{"kind":"task","data":{"call":{"tool":"done"}},"loop":1}'

# verify_says STATUS LINE: sfma-verify w exits STATUS with LINE alone on
# stderr and nothing on stdout.
verify_says() {
	local err status=0
	err=$(sfma-verify w 2>&1 > verify.out) || status=$?
	[ "$status" -eq "$1" ] && [ ! -s verify.out ] && [ "$err" = "$2" ] ||
		{ echo "status $status, stdout '$(cat verify.out)', stderr '$err'; wanted $1 '$2'"; return 1; }
}

@test "a trace writer gone right after a run's clock anchor: the run is sealed as it is, and it replays cut short before the next" {
	# sfma-chain takes the run's first event, the clock anchor, and ends.
	mkdir short
	cp "$SFMA_BINDIR/sfma" short/
	for p in "$SFMA_BINDIR"/sfma-*; do ln -s "$p" short/; done
	rm short/sfma-chain
	cat >short/sfma-chain <<-EOF
	#!/usr/bin/python3
	import os, subprocess, sys
	channel = os.environ.get("SFMA_CONFINE_FD")
	chain = subprocess.Popen(["$SFMA_BINDIR/sfma-chain"] + sys.argv[1:], stdin=subprocess.PIPE,
	                         pass_fds=(int(channel),) if channel else ())
	if channel:
	    os.close(int(channel))
	chain.stdin.write(sys.stdin.buffer.readline())
	chain.stdin.close()
	sys.exit(chain.wait())
	EOF
	chmod +x short/sfma-chain
	SFMA_MOCK=$QUICK run short/sfma run m.json
	[ "$status" -eq 1 ]
	[ "$(jq -r .kind ws/.sfma/trace.jsonl)" = clock-anchor ]
	jq -e '.verdict == "failed"' ws/.sfma/result.json
	SFMA_MOCK=$QUICK run sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	sfma-verify ws
	replays_ok 2
	run sfma replay --run 1 ws
	[ "$status" -eq 0 ] && [[ "$output" == "REPLAY_OK run=1 runs=2 "* ]]
}

@test "sfma-verify: AUDIT_UNSEALED (exit 3) only for an intact tail after the sealed head that begins as a run does" {
	sealed_by_hand
	append "$ANCHOR" "$TASK"
	verify_says 3 "AUDIT_UNSEALED: 2 entries after the sealed head (an interrupted run; the next run records it)"
	cp sealed.jsonl w/.sfma/trace.jsonl && append "$ANCHOR"
	verify_says 3 "AUDIT_UNSEALED: 1 entry after the sealed head (an interrupted run; the next run records it)"
	# the two result entries that may come before a run's clock-anchor
	cp sealed.jsonl w/.sfma/trace.jsonl
	append '{"kind":"result","data":{"interrupted":{"afterSeq":3,"entries":1,"firstSeq":4,"lastSeq":4,"headHash":"x"}}}' "$ANCHOR"
	verify_says 3 "AUDIT_UNSEALED: 2 entries after the sealed head (an interrupted run; the next run records it)"
	cp sealed.jsonl w/.sfma/trace.jsonl
	append '{"kind":"result","data":{"error":"torn-write-recovered","tornBytes":3}}'
	verify_says 3 "AUDIT_UNSEALED: 1 entry after the sealed head (an interrupted run; the next run records it)"

	# Entries that no run begins with are not a crash's doing.
	for first in "$TASK" '{"kind":"result","data":{"error":"x"}}' '{"kind":"lifecycle","data":{"from":null,"to":"x"}}'; do
		cp sealed.jsonl w/.sfma/trace.jsonl && append "$first" "$ANCHOR"
		kind=$(jq -r .kind <<<"$first")
		verify_says 1 "AUDIT_INVALID: integrity.entries says 3 but the trace has 5 entries, and line 4 ($kind) does not begin a run"
	done
	# The tail is part of the chain: a break in it is a break.
	cp sealed.jsonl w/.sfma/trace.jsonl && append "$ANCHOR" "$TASK"
	cp w/.sfma/trace.jsonl tailed.jsonl
	sed -i '5s/"done"/"run"/' w/.sfma/trace.jsonl
	verify_says 1 "AUDIT_INVALID: trace line 5: hash mismatch (the entry's content was altered)"
	sed 4d tailed.jsonl > w/.sfma/trace.jsonl
	verify_says 1 "AUDIT_INVALID: trace line 4: prevHash does not match the previous entry (a line was deleted, inserted or reordered)"
	{ cat tailed.jsonl; echo '{"seq":9}'; } > w/.sfma/trace.jsonl
	verify_says 1 "AUDIT_INVALID: trace line 6: unchained line after chained entries"
	# The prefix must be the one the record sealed, entry for entry.
	cp tailed.jsonl w/.sfma/trace.jsonl
	head=$(jq -r .integrity.headHash sealed.json)
	jq '.integrity.entries = 2' sealed.json > w/.sfma/result.json
	verify_says 1 "AUDIT_INVALID: integrity.headHash does not match the trace head $(tail -n 1 tailed.jsonl | jq -r .hash)"
	jq --arg h "$(sed -n 2p tailed.jsonl | jq -r .hash)" '.integrity.headHash = $h' sealed.json > w/.sfma/result.json
	verify_says 1 "AUDIT_INVALID: integrity.headHash does not match the trace head $(tail -n 1 tailed.jsonl | jq -r .hash)"
	# and the record itself intact
	jq '.verdict = "failed"' sealed.json > w/.sfma/result.json
	verify_says 1 "AUDIT_INVALID: integrity.resultSha256 does not match the record (a result field was altered)"
	# A rewritten prefix, however long the rest, is not an unsealed tail.
	cp sealed.json w/.sfma/result.json
	{ sed -n 1p tailed.jsonl; sed -n 3p tailed.jsonl; } > w/.sfma/trace.jsonl
	verify_says 1 "AUDIT_INVALID: trace line 2: prevHash does not match the previous entry (a line was deleted, inserted or reordered)"
	# Deleting entries of the sealed prefix is still named as before.
	head -n 2 sealed.jsonl > w/.sfma/trace.jsonl
	verify_says 1 "AUDIT_INVALID: integrity.headHash does not match the trace head $(sed -n 2p sealed.jsonl | jq -r .hash)"
}

@test "sfma-verify: a signed record and --trusted-head still hold over an unsealed tail" {
	openssl genpkey -algorithm ed25519 -out key.pem 2> /dev/null
	openssl pkey -in key.pem -pubout -out pub.pem
	openssl genpkey -algorithm ed25519 2> /dev/null | openssl pkey -pubout -out other.pem
	SFMA_AUDIT_PRIVATE_KEY=$(cat key.pem) sealed_by_hand
	append "$ANCHOR" "$TASK"
	UNSEALED="AUDIT_UNSEALED: 2 entries after the sealed head (an interrupted run; the next run records it)"
	SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) verify_says 3 "$UNSEALED"
	SFMA_AUDIT_PUBLIC_KEY=$(cat other.pem) verify_says 1 "AUDIT_INVALID: invalid audit signature
sfma-verify: expected key $(openssl pkey -pubin -in other.pem -outform DER | sha256sum | cut -c1-16) (SFMA_AUDIT_PUBLIC_KEY), the record is signed with key $(openssl pkey -pubin -in pub.pem -outform DER | sha256sum | cut -c1-16) (integrity.signature.publicKey; SHA-256 of each SubjectPublicKeyInfo, first 16 hex)"
	# the record made to claim the tail: the signature no longer holds
	jq --arg h "$(tail -n 1 w/.sfma/trace.jsonl | jq -r .hash)" '.integrity.entries = 5 | .integrity.headHash = $h' \
		w/.sfma/result.json > r && cp r w/.sfma/result.json
	SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) verify_says 1 "AUDIT_INVALID: invalid audit signature"
	cp sealed.json w/.sfma/result.json
	# a trusted head inside the tail, or in the prefix
	h5=$(sed -n 5p w/.sfma/trace.jsonl | jq -r .hash)
	h2=$(sed -n 2p w/.sfma/trace.jsonl | jq -r .hash)
	run sfma-verify --trusted-head "$h5:5" w
	[ "$status" -eq 3 ]
	run sfma-verify --trusted-head "$h2:2" w
	[ "$status" -eq 3 ]
	run sfma-verify --trusted-head "$h2:5" w
	[ "$status" -eq 1 ]
	[[ "$output" == "AUDIT_INVALID: trace line 5: trusted head not found"* ]]
	run sfma-verify --trusted-head "$h5:6" w
	[ "$status" -eq 1 ]
	[[ "$output" == "AUDIT_INVALID: trace trusted head not found: the trace has 5 entries, fewer than 6 (it was truncated)" ]]
	printf '{"seq":6,"ki' >> w/.sfma/trace.jsonl
	run sfma-verify --trusted-head "$h5:6" w
	[ "$status" -eq 1 ]
	[[ "$output" == "AUDIT_INVALID: trace trusted head not found: the trace has 5 complete entries, fewer than 6" ]]
}

@test "a torn final line: AUDIT_UNSEALED; a run refuses it naming sfma-chain --recover-torn; recovered, the next run records it" {
	sealed_run
	T=ws/.sfma/trace.jsonl
	cp "$T" sealed.jsonl
	torn='{"anchor":"clock-anchor-99","data":{"wal'
	printf '%s' "$torn" >> "$T"
	run sfma-verify ws
	[ "$status" -eq 3 ]
	[ "$output" = "AUDIT_UNSEALED: a torn final line after the sealed head (an interrupted write; sfma-chain --recover-torn repairs it, then the next run records it)" ]
	# the way a crash mid-append leaves it: entries of the run, then a torn one
	cp sealed.jsonl "$T"
	printf '%s\n' "${ANCHOR}" '{"kind":"lifecycle","data":{"from":null,"to":"probation"}}' | sfma-chain "$T" > /dev/null
	printf '%s' "$torn" >> "$T"
	run sfma-verify ws
	[ "$status" -eq 3 ]
	[ "$output" = "AUDIT_UNSEALED: 2 entries and a torn final line after the sealed head (an interrupted write; sfma-chain --recover-torn repairs it, then the next run records it)" ]
	before=$(sha256sum < "$T")
	SFMA_MOCK=$QUICK run sfma run m.json
	[ "$status" -eq 1 ]
	want="sfma-plan: failed hash-chain verification: line $((sealed_entries + 3)): torn final line (${#torn} bytes without a newline): a write was cut short; recover it with \`sfma-chain --recover-torn $BATS_TEST_TMPDIR/ws/.sfma/trace.jsonl\`, then run again; nothing was appended"
	grep -Fxq -- "$want" <<<"$output" || { echo "$output"; return 1; }
	[ "$(sha256sum < "$T")" = "$before" ]
	flock -n ws/.sfma true
	# The operator recovers; the recovery is an entry of the tail.
	sfma-chain --recover-torn "$T" > /dev/null
	audit
	[ "$unsealed" -eq 3 ]
	last_entry '.kind == "result" and .data.error == "torn-write-recovered"'
	next_run_records
}

@test "a disk that fills mid-run: a clear error, the chain intact, and the next run on a larger disk records it" {
	require unshare
	outs=$(printf '"o%d.txt",' $(seq 24))
	jq -n --argjson outs "[${outs%,}]" '{name:"full",workspace:"ws",modelEndpoints:[{name:"mock",provider:"mock",model:"m"}],
		allowedCommands:["sleep"],inputs:[],outputs:$outs,maxTurns:40,maxSeconds:300,dryRunDefault:false}' > m.json
	content=$(head -c 4000 /dev/zero | tr '\0' a)
	writes=$(for i in $(seq 24); do printf '{"tool":"write","path":"o%d.txt","content":"%s"},' "$i" "$content"; done)
	export FILL="[$CAND,${writes%,},$DONE]" NONE="[$CAND,$DONE]"
	# Everything on the small disk happens in a private mount namespace
	# (mount_namespaces(7)): the tmpfs is nobody else's and goes with it.
	# Its trace and record are copied out at each step for the checks.
	run unshare -m --propagation private bash -c '
		set -u
		mkdir ws && mount -t tmpfs -o size=1m tmpfs ws || exit 99
		SFMA_MOCK=$NONE sfma run m.json > run1.out 2>&1; echo $? > run1.status
		# The evidence has a disk of its own (what it holds copied onto it):
		# the trace is the writer that meets the full disk, not whichever
		# of the two comes first (the evidence on a full disk is the test
		# after this one).
		mkdir kept && cp -a ws/.sfma/evidence/. kept/ && mount -t tmpfs -o size=8m tmpfs ws/.sfma/evidence &&
			cp -a kept/. ws/.sfma/evidence/ || exit 98
		# leave 16 pages: the 24 new files of the next run cannot all fit
		avail=$(df -B1 --output=avail ws | tail -n 1)
		fallocate -l $((avail - 16 * 4096)) ws/filler
		SFMA_MOCK=$FILL sfma run -v m.json > run2.out 2> run2.err; echo $? > run2.status
		sfma-verify ws > verify2.out 2>&1; echo $? > verify2.status
		cp ws/.sfma/trace.jsonl trace2.jsonl
		cp ws/.sfma/result.json result2.json
		mount -o remount,size=4m ws
		SFMA_MOCK=$FILL sfma run m.json > run3.out 2>&1; echo $? > run3.status
		sfma-verify ws > verify3.out 2>&1; echo $? > verify3.status
		cp ws/.sfma/trace.jsonl trace3.jsonl
	'
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	# a first run that writes nothing: failed, but sealed
	[ "$(cat run1.status)" -eq 1 ] && grep -q '^FAILED ' run1.out || { cat run1.out; return 1; }
	# The full disk ends the run with the reason: the trace writer could not
	# append, and without it there is no record to seal.
	[ "$(cat run2.status)" -eq 1 ] || { cat run2.out run2.err; return 1; }
	# no summary line: it would name a record this run did not write
	[ ! -s run2.out ] || { cat run2.out; return 1; }
	# (the trace's writer, or the observer's, whichever appends first)
	grep -Eq '^sfma-(chain|tap): .*/ws/.sfma/(trace|observed)\.jsonl: write: No space left on device$' run2.err ||
		{ cat run2.err; return 1; }
	grep -q '^sfma-plan: the run was not sealed' run2.err
	# Each stage that stopped on the full disk said why, and the planner
	# repeats that, never a death; no message names a thing twice.
	if grep -E 'stage sfma-(seal|chain) died|evidence: evidence|sfma-plan: memory\.json: /' run2.err; then
		cat run2.err; return 1
	fi
	# The run stops at the first append that failed: no more model calls
	# that no trace could show (24 writes were queued).
	turns=$(grep -c '^sfma-plan: +[0-9.]*s turn [0-9]*:' run2.err || true)
	[ "$turns" -lt 24 ] || { echo "the run went on for $turns turns after the disk filled"; cat run2.err; return 1; }
	# The chain is intact: whole lines only (the short write was undone),
	# and the unsealed tail of an interrupted run.
	[ "$(tail -c 1 trace2.jsonl | od -An -c | tr -d ' ')" = '\n' ]
	[ "$(cat verify2.status)" -eq 3 ] || { cat verify2.out; return 1; }
	[[ "$(cat verify2.out)" =~ ^AUDIT_UNSEALED:\ ([0-9]+)\ entries\ after\ the\ sealed\ head\ \(an\ interrupted\ run ]]
	n=${BASH_REMATCH[1]}
	[ "$n" -eq $(($(wc -l < trace2.jsonl) - $(jq .integrity.entries result2.json))) ]
	# On a larger disk the next run records it and seals.
	jq -s -e --arg h "$(jq -r .integrity.headHash result2.json)" --argjson n "$n" \
		'map(select(.kind == "result" and .data.interrupted.headHash == $h and .data.interrupted.entries == $n)) | length == 1' \
		trace3.jsonl > /dev/null
	[ "$(cat run3.status)" -eq 0 ] || { cat run3.out; return 1; }
	[ "$(cat verify3.status)" -eq 0 ]
	grep -q '^AUDIT_OK ' verify3.out
}

@test "evidence on a full disk while the trace goes on: the run fails and seals, the replay names why and --run replays the next" {
	require unshare
	outs=$(printf '"o%d.txt",' $(seq 24))
	jq -n --argjson outs "[${outs%,}]" '{name:"full",workspace:"ws",modelEndpoints:[{name:"mock",provider:"mock",model:"m"}],
		allowedCommands:["sleep"],inputs:[],outputs:$outs,maxTurns:40,maxSeconds:300,dryRunDefault:false}' > m.json
	content=$(head -c 4000 /dev/zero | tr '\0' a)
	writes=$(for i in $(seq 24); do printf '{"tool":"write","path":"o%d.txt","content":"%s%d"},' "$i" "$content" "$i"; done)
	SFMA_MOCK="[$CAND,$DONE]" sfma run m.json > run1.out 2>&1 || true
	# Only .sfma/evidence is on the small disk (a tmpfs in a private mount
	# namespace, mount_namespaces(7)): the trace and the seal go on. What
	# the disk took is copied back before it goes with the namespace, as
	# the files of a disk that filled stay on it.
	export FILL="[$CAND,${writes%,},$DONE]"
	run unshare -m --propagation private bash -c '
		mount -t tmpfs -o size=64k tmpfs ws/.sfma/evidence || exit 99
		sfma run m.json > run2.out 2> run2.err; echo $? > run2.status
		mkdir kept && cp -a ws/.sfma/evidence/. kept/ && umount ws/.sfma/evidence && cp -a kept/. ws/.sfma/evidence/
	' </dev/null
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	export -n FILL
	# the run fails, says why once, and is sealed
	[ "$(cat run2.status)" -eq 1 ] || { cat run2.out run2.err; return 1; }
	grep -q '^FAILED ' run2.out
	grep -q '^sfma-plan: failed: evidence[ :].*No space left on device$' run2.err || { cat run2.err; return 1; }
	if grep -q 'evidence: evidence' run2.err; then cat run2.err; return 1; fi
	# a run after it on the freed disk (it fails: not every output is there)
	SFMA_MOCK="[$CAND,$DONE]" sfma run m.json > run3.out 2>&1 || true
	grep -q ' record=ws/.sfma/result.json$' run3.out || { cat run3.out; return 1; }
	run sfma verify ws
	[ "$status" -eq 0 ] && [[ "$output" == AUDIT_OK* ]] || { echo "$output"; return 1; }
	# The whole trace cannot be derived again: run 2 lost its evidence. The
	# replay says so, with the seq of the result that said why, and how to
	# replay the run after it - not that the record is older than evidence.
	run sfma replay ws
	[ "$status" -eq 1 ] || { echo "$output"; return 1; }
	[[ "$output" =~ ^REPLAY_INCOMPLETE:\ run\ 2,\ seq\ [0-9]+\ \([a-z-]+\):\ no\ evidence\.[a-z0-9]+:\ the\ run\ could\ not\ store\ its\ evidence\ \(seq\ ([0-9]+):\ evidence[\ :].*No\ space\ left\ on\ device\)\;\ --run\ 3\ replays\ the\ next\ run$ ]] ||
		{ echo "$output"; return 1; }
	jq -s -e --argjson s "${BASH_REMATCH[1]}" 'map(select(.seq == $s)) | length == 1 and .[0].kind == "result" and (.[0].data.error | test("No space left"))' \
		ws/.sfma/trace.jsonl > /dev/null
	# one run, counted from either end; the record's is checked with the last
	run sfma replay --run 3 ws
	[ "$status" -eq 0 ] && [ "$output" = "REPLAY_OK run=3 runs=3 entries=$(wc -l < ws/.sfma/trace.jsonl)" ] || { echo "$output"; return 1; }
	run sfma replay --run -1 ws
	[ "$output" = "REPLAY_OK run=3 runs=3 entries=$(wc -l < ws/.sfma/trace.jsonl)" ] || { echo "$output"; return 1; }
	run sfma replay --run=1 ws
	[ "$status" -eq 0 ] && [[ "$output" == "REPLAY_OK run=1 runs=3 "* ]] || { echo "$output"; return 1; }
	run sfma replay --run -3 ws
	[ "$status" -eq 0 ] && [[ "$output" == "REPLAY_OK run=1 runs=3 "* ]] || { echo "$output"; return 1; }
	run sfma replay --run 2 ws
	[ "$status" -eq 1 ] && [[ "$output" == "REPLAY_INCOMPLETE: run 2, seq "* ]] || { echo "$output"; return 1; }
	run sfma replay --run 4 ws
	[ "$status" -eq 1 ] && [ "$output" = "REPLAY_INCOMPLETE: no run 4: the trace holds 3" ] || { echo "$output"; return 1; }
	run sfma replay --run -4 ws
	[ "$status" -eq 1 ] && [ "$output" = "REPLAY_INCOMPLETE: no run -4: the trace holds 3" ] || { echo "$output"; return 1; }
	for bad in 0 x 1x ''; do
		run sfma replay --run "$bad" ws
		[ "$status" -eq 2 ] && [[ "$output" == *"--run: a run number (1 the first, -1 the last)"* ]] || { echo "$bad: $output"; return 1; }
	done
	# not one for tests/replay-sweep.sh, which replays whole records
	tampered ws
}

# tests/fuzz/sudden-death.sh: a random stage SIGKILLed at a random moment,
# then a run that ends normally on the same workspace; a fixed seed here,
# a random one in `make fuzz`.
@test "sudden death: 40 runs, a random stage killed at a random moment, then run again: each record verifies and replays" {
	require jq
	run bash "$REPO/tests/fuzz/sudden-death.sh" 20261201 40
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == *"40 runs (seed 20261201), 0 not both verified and replayed"* ]] || { echo "$output"; return 1; }
}
