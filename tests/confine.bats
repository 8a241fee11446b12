#!/usr/bin/env bats
# Every program confined (sfma(1), CONFINEMENT): each, the real binary,
# made to try from inside what it must not - read a file outside its
# grant, write one it does not own, connect to a port listening on
# 127.0.0.1, execute /bin/true, signal its parent - by an LD_PRELOAD
# library (tests/shim/confine-shim.c) that makes those calls right after
# the program has confined itself, and the kernel's answer. Then the
# run's confinement entries, a kernel without Landlock (simulated by a
# seccomp filter, tests/shim/no-landlock.c) and requireConfinement.
# Landlock and seccomp work on the machines the suite runs on: nothing
# here is skipped when they are missing, it fails.

load helpers
bats_require_minimum_version 1.5.0

CANDIDATE='{"mission":"m","successCriteria":["out.txt written"],"loopRoles":[],"firstTasks":[],"schedule":"now"}'
# A run that goes through every process of the pipeline: a command
# (sfma-exec's own process), a write and a read (its tools process).
QUICK="[$CANDIDATE,{\"tool\":\"run\",\"cmd\":\"echo hi\"},{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"read\",\"path\":\"out.txt\"},{\"tool\":\"done\",\"summary\":\"ok\"}]"
HOLD="[$CANDIDATE,{\"tool\":\"run\",\"cmd\":\"sleep 40\"},{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"done\",\"summary\":\"ok\"}]"
# The processes of a run, in the order their entries come.
PROCESSES="sfma sfma-plan sfma-model sfma-exec sfma-exec/tools sfma-chain sfma-seal sfma-mem sfma-tap"

setup_file() {
	# Built with the system compiler, unsanitized: a library preloaded
	# into a sanitized program (ASan allows it; see shim_env).
	cc -std=c11 -Wall -Wextra -Werror -shared -fPIC -o "$BATS_FILE_TMPDIR/confine-shim.so" \
		"$BATS_TEST_DIRNAME/shim/confine-shim.c"
	cc -std=c11 -Wall -Wextra -Werror -o "$BATS_FILE_TMPDIR/no-landlock" "$BATS_TEST_DIRNAME/shim/no-landlock.c" -lseccomp
}

setup() {
	require jq
	require python3
	cd "$BATS_TEST_TMPDIR"
	SHIM=$BATS_FILE_TMPDIR/confine-shim.so
	SECRET=$BATS_TEST_TMPDIR/secret
	echo "not yours" >"$SECRET"
	manifest m.json false
	# The observer's file, there before the run as another stage would
	# leave it: a file no stage here may write.
	mkdir -p ws/.sfma
	: >ws/.sfma/observed.jsonl
	LISTENER_PID=
}

teardown() {
	[ -z "${LISTENER_PID:-}" ] || kill "$LISTENER_PID" 2>/dev/null || true
	[ -z "${sfma_pid:-}" ] || kill -KILL "$sfma_pid" 2>/dev/null || true
}

manifest() { # manifest FILE REQUIRE
	cat >"$1" <<-EOF
	{"name":"confine","workspace":"ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],
	 "allowedCommands":["echo","sleep"],"inputs":[],"outputs":["out.txt"],"maxTurns":8,"maxSeconds":60,
	 "dryRunDefault":false,"requireConfinement":$2}
	EOF
}

# listen: a TCP port listening on 127.0.0.1 (PORT), which this shell can
# reach: a connection a stage makes to it that fails was refused by the
# kernel, not by the port.
listen() {
	python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept(); c.close()
' >port &
	LISTENER_PID=$!
	for _ in $(seq 100); do [ -s port ] && break; sleep 0.05; done
	PORT=$(cat port)
	python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5).close()' "$PORT"
}

# shim_env: the environment that preloads the shim (ASan wants to come
# first among the libraries, and is told not to mind).
shim_env() {
	printf 'LD_PRELOAD=%s ASAN_OPTIONS=%s' "$SHIM" "${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
}

# wrapped STAGE VAR=VALUE...: a copy of the programs in ./wrapped (sfma
# starts the stages it finds beside itself) where STAGE is the real
# binary started with the shim preloaded and the variables set.
wrapped() {
	local stage=$1
	shift
	rm -rf wrapped && mkdir wrapped
	cp "$SFMA_BINDIR/sfma" wrapped/
	for p in "$SFMA_BINDIR"/sfma-*; do ln -s "$p" wrapped/; done
	rm "wrapped/$stage"
	printf '#!/bin/sh\nexec env %s %s %s "$@"\n' "$(shim_env)" "$*" "$SFMA_BINDIR/$stage" >"wrapped/$stage"
	chmod +x "wrapped/$stage"
}

# refused WHO WHAT ARG ERRNO: the shim's line for that call in $stderr.
said() {
	local line="confine-shim: $1: $2 $3: $4"
	grep -Fqx -- "$line" <<<"$stderr" || { echo "expected: $line"; echo "$stderr"; return 1; }
}

# release_sleep PID: kill the `sleep` the run holds, a descendant of PID
# (inside sfma-exec's sandbox, whatever its pid in there).
release_sleep() {
	local root=$1 queue p
	for _ in $(seq 200); do
		queue=$root
		while [ -n "$queue" ]; do
			p=${queue%% *}
			queue="${queue#"$p"} $(pgrep -P "$p" | tr '\n' ' ')"
			queue=$(echo $queue)
			if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = sleep ]; then
				kill -KILL "$p"
				return 0
			fi
		done
		sleep 0.05
	done
	echo "no sleep to release" >&2
	return 1
}

# The confinement entries of the last run: one line per process,
# "STAGE LANDLOCK SECCOMP NO_NEW_PRIVS".
entries() {
	jq -r 'select(.kind == "confinement") | .data | "\(.stage) \(.landlock // "none") \(.seccomp // "none") \(.noNewPrivs // "none")"' \
		ws/.sfma/trace.jsonl | tail -n "${1:-9}"
}

# The Landlock ABI the kernel offers (landlock_create_ruleset(2) with
# LANDLOCK_CREATE_RULESET_VERSION), or a failure.
kernel_abi() {
	python3 -c '
import ctypes, sys
abi = ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1)
if abi < 1:
    sys.exit("this kernel offers no Landlock (errno %d): the suite needs it" % ctypes.get_errno())
print(abi)'
}

@test "every process of a run reports Landlock at the kernel's ABI, seccomp and no_new_privs; the kernel agrees" {
	abi=$(kernel_abi)
	[ "$abi" -ge 1 ]
	SFMA_MOCK=$HOLD sfma run m.json >out 2>err &
	sfma_pid=$!
	for _ in $(seq 200); do grep -q '"cmd":"sleep' ws/.sfma/trace.jsonl 2>/dev/null && break; sleep 0.05; done
	# Each stage, as /proc sees it: a seccomp filter, no_new_privs.
	for s in sfma-plan sfma-model sfma-exec sfma-chain sfma-seal sfma-mem sfma-tap; do
		p=$(pgrep -P "$sfma_pid" -x "$s" | head -1)
		[ -n "$p" ] || { echo "no $s"; return 1; }
		grep -qx 'Seccomp:[[:space:]]*2' "/proc/$p/status"
		grep -qx 'NoNewPrivs:[[:space:]]*1' "/proc/$p/status"
	done
	grep -qx 'Seccomp:[[:space:]]*2' "/proc/$sfma_pid/status"
	release_sleep "$(pgrep -P "$sfma_pid" -x sfma-exec)"
	wait "$sfma_pid"
	sfma_pid=
	# The run's entries, right after its first lifecycle, in order.
	[ "$(jq -r 'select(.kind != "clock-anchor") | .kind' ws/.sfma/trace.jsonl | sed -n '2,10p' | sort -u)" = confinement ]
	expected=""
	for s in $PROCESSES; do expected+="$s $abi true true"$'\n'; done
	[ "$(entries)" = "${expected%$'\n'}" ] || { entries; return 1; }
	# sfma-exec's own process handles no file access (it mounts) and says so.
	jq -e -s '[.[] | select(.kind == "confinement" and .data.stage == "sfma-exec")] | length == 1 and
		(.[0].data.why | test("no file rules"))' ws/.sfma/trace.jsonl
	sfma-verify ws
	replays_ok 1
}

@test "sfma, once its stages have started: no file, no internet socket, no exec" {
	listen
	SFMA_MOCK=$QUICK run --separate-stderr env $(shim_env) SFMA_SHIM_READ="$SECRET" \
		SFMA_SHIM_WRITE=ws/.sfma/observed.jsonl SFMA_SHIM_CONNECT="$PORT" SFMA_SHIM_EXEC=/bin/true \
		sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output $stderr"; return 1; }
	said sfma read "$SECRET" EACCES
	said sfma write ws/.sfma/observed.jsonl EACCES
	said sfma connect "127.0.0.1:$PORT" EPERM
	said sfma exec /bin/true EPERM
	# the observer's file is the tap's alone: its chain verifies below
	sfma-verify ws
}

@test "sfma-plan: the workspace read, its evidence written, the observer's chain out of reach, no internet socket, no process started" {
	listen
	wrapped sfma-plan SFMA_SHIM_READ="$SECRET" SFMA_SHIM_WRITE="$PWD/ws/.sfma/observed.jsonl" \
		SFMA_SHIM_REMOVE="$PWD/ws/.sfma/observed.jsonl" SFMA_SHIM_CREATE="$PWD/ws/.sfma/planted" \
		SFMA_SHIM_CONNECT="$PORT" SFMA_SHIM_EXEC=/bin/true SFMA_SHIM_SIGNAL=parent
	SFMA_MOCK=$QUICK run --separate-stderr wrapped/sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output $stderr"; return 1; }
	said sfma-plan read "$SECRET" EACCES
	# the observer's chain: neither written, nor removed, nor replaced by
	# a file made beside it and renamed over it
	said sfma-plan write "$PWD/ws/.sfma/observed.jsonl" EACCES
	said sfma-plan remove "$PWD/ws/.sfma/observed.jsonl" EACCES
	said sfma-plan create "$PWD/ws/.sfma/planted" EACCES
	said sfma-plan connect "127.0.0.1:$PORT" EPERM
	# The memory stage runs git: the planner starts no process at all.
	said sfma-plan exec /bin/true EPERM
	grep -q '^confine-shim: sfma-plan: signal [0-9]*: EPERM$' <<<"$stderr"
	[ ! -e ws/.sfma/planted ]
	# what it must write still is: the evidence, and the inbox emptied;
	# memory.json is sfma-mem's to write
	[ -n "$(ls ws/.sfma/evidence)" ]
	jq -e '.runs | length == 1' ws/.sfma/memory.json
	# the observer's file is the tap's alone: its chain verifies below
	run sfma-verify ws
	[ "$status" -eq 0 ] && [[ "$output" == *" observed="[1-9]* ]] || { echo "$output"; return 1; }
}

@test "sfma-mem: the store alone (and the trace, read), git and nothing else, no internet socket" {
	listen
	wrapped sfma-mem SFMA_SHIM_READ="$SECRET" SFMA_SHIM_WRITE="$PWD/ws/.sfma/observed.jsonl" \
		SFMA_SHIM_CREATE="$PWD/ws/planted" SFMA_SHIM_CONNECT="$PORT" SFMA_SHIM_EXEC=/bin/true \
		SFMA_SHIM_SIGNAL=parent
	SFMA_MOCK=$QUICK run --separate-stderr wrapped/sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output $stderr"; return 1; }
	said sfma-mem read "$SECRET" EACCES
	said sfma-mem write "$PWD/ws/.sfma/observed.jsonl" EACCES
	said sfma-mem create "$PWD/ws/planted" EACCES
	said sfma-mem connect "127.0.0.1:$PORT" EPERM
	# it may exec, and Landlock lets it execute git alone
	said sfma-mem exec /bin/true EACCES
	grep -q '^confine-shim: sfma-mem: signal [0-9]*: EPERM$' <<<"$stderr"
	# the observer's file is the tap's alone: its chain verifies below
	# and the store works: the run is committed
	jq -e '.memory.store.commit | test("^[0-9a-f]{40}$")' ws/.sfma/result.json
	sfma-verify ws
}

@test "sfma-tap: once its chain is open, .sfma alone, no internet socket, no exec" {
	listen
	wrapped sfma-tap SFMA_SHIM_READ="$SECRET" SFMA_SHIM_CREATE="$PWD/ws/planted" \
		SFMA_SHIM_CONNECT="$PORT" SFMA_SHIM_EXEC=/bin/true
	SFMA_MOCK=$QUICK run --separate-stderr wrapped/sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output $stderr"; return 1; }
	said sfma-tap read "$SECRET" EACCES
	said sfma-tap create "$PWD/ws/planted" EACCES
	said sfma-tap connect "127.0.0.1:$PORT" EPERM
	said sfma-tap exec /bin/true EPERM
	[ ! -e ws/planted ]
	# and it observed the run: the chain verifies, one to one with the trace
	run sfma-verify ws
	[ "$status" -eq 0 ] && [[ "$output" == *" observed="[1-9]* ]] || { echo "$output"; return 1; }
}

@test "sfma-model: no file of the workspace, TCP only to its endpoints' ports, no exec" {
	listen
	wrapped sfma-model SFMA_SHIM_READ="$SECRET" SFMA_SHIM_WRITE="$PWD/ws/.sfma/observed.jsonl" \
		SFMA_SHIM_CONNECT="$PORT" SFMA_SHIM_EXEC=/bin/true SFMA_SHIM_SIGNAL=parent
	SFMA_MOCK=$QUICK run --separate-stderr wrapped/sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output $stderr"; return 1; }
	said sfma-model read "$SECRET" EACCES
	said sfma-model write "$PWD/ws/.sfma/observed.jsonl" EACCES
	# An internet socket it may open; Landlock refuses the port.
	said sfma-model connect "127.0.0.1:$PORT" EACCES
	said sfma-model exec /bin/true EPERM
	grep -q '^confine-shim: sfma-model: signal [0-9]*: EPERM$' <<<"$stderr"
	# the observer's file is the tap's alone: its chain verifies below
	sfma-verify ws
}

@test "sfma-exec: its own process no internet socket and no signal outside; its tools process the workspace alone, no exec" {
	listen
	wrapped sfma-exec SFMA_SHIM_READ="$SECRET" SFMA_SHIM_CREATE="$BATS_TEST_TMPDIR/planted" \
		SFMA_SHIM_CONNECT="$PORT" SFMA_SHIM_EXEC=/bin/true SFMA_SHIM_SIGNAL=parent
	SFMA_MOCK=$QUICK run --separate-stderr wrapped/sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output $stderr"; return 1; }
	said sfma-exec connect "127.0.0.1:$PORT" EPERM
	grep -q '^confine-shim: sfma-exec: signal [0-9]*: EPERM$' <<<"$stderr"
	# it starts the commands: exec is its to do
	said sfma-exec exec /bin/true ok
	said sfma-exec/child read "$SECRET" EACCES
	said sfma-exec/child create "$BATS_TEST_TMPDIR/planted" EACCES
	said sfma-exec/child connect "127.0.0.1:$PORT" EPERM
	said sfma-exec/child exec /bin/true EPERM
	[ ! -e planted ]
	# and the tools it serves still work: the write and the read went through
	[ "$(cat ws/out.txt)" = x ]
	sfma-verify ws
}

@test "sfma-chain and sfma-seal: .sfma alone, no internet socket, no exec" {
	listen
	for s in sfma-chain sfma-seal; do
		wrapped "$s" SFMA_SHIM_READ="$SECRET" SFMA_SHIM_CREATE="$PWD/ws/planted" SFMA_SHIM_CONNECT="$PORT" \
			SFMA_SHIM_EXEC=/bin/true SFMA_SHIM_SIGNAL=parent
		SFMA_MOCK=$QUICK run --separate-stderr wrapped/sfma run m.json
		[ "$status" -eq 0 ] || { echo "$output $stderr"; return 1; }
		said "$s" read "$SECRET" EACCES
		said "$s" create "$PWD/ws/planted" EACCES
		said "$s" connect "127.0.0.1:$PORT" EPERM
		said "$s" exec /bin/true EPERM
		grep -q "^confine-shim: $s: signal [0-9]*: EPERM\$" <<<"$stderr"
		[ ! -e ws/planted ]
		sfma-verify ws
	done
}

# reader PROGRAM ARGS...: PROGRAM ARGS run with the shim trying a secret,
# the trace, a file in the workspace, the listening port and /bin/true.
reader() {
	run --separate-stderr env $(shim_env) SFMA_SHIM_READ="$SECRET" SFMA_SHIM_WRITE=ws/.sfma/trace.jsonl \
		SFMA_SHIM_CREATE=ws/planted SFMA_SHIM_CONNECT="$PORT" SFMA_SHIM_EXEC=/bin/true "$@"
}

@test "the readers: read-only on what they read, no internet socket, no exec" {
	listen
	SFMA_MOCK=$QUICK sfma run m.json >/dev/null
	trace=$(sha256sum <ws/.sfma/trace.jsonl)
	n_lines=$(wc -l <ws/.sfma/trace.jsonl)
	for cmd in "sfma-verify ws" "sfma-replay ws" "sfma-log ws" "sfma-report ws" "sfma-prove ws 1" \
	           "sfma-check m.json" "sfma-export --otlp ws" "sfma-endpoints ws" "sfma-summary ws"; do
		set -- $cmd
		reader "$@"
		[ "$status" -le 1 ] || { echo "$cmd: $status $stderr"; return 1; }
		said "$1" read "$SECRET" EACCES
		said "$1" write ws/.sfma/trace.jsonl EACCES
		said "$1" create ws/planted EACCES
		said "$1" connect "127.0.0.1:$PORT" EPERM
		if [ "$1" = sfma-summary ]; then
			# it starts sfma-verify, and nothing else
			said "$1" exec /bin/true EACCES
		else
			said "$1" exec /bin/true EPERM
		fi
		[ "$(sha256sum <ws/.sfma/trace.jsonl)" = "$trace" ]
		[ ! -e ws/planted ]
	done
	[ "$(wc -l <ws/.sfma/trace.jsonl)" -eq "$n_lines" ]
	# and each did its work: the record verifies and replays, as printed above
	sfma-verify ws
	replays_ok 1
}

@test "the tools that write: sfma-report -o, sfma-endpoints --reset, sfma-chat only where they write; sfma-export --endpoint, sfma-telegram only to their ports" {
	listen
	SFMA_MOCK=$QUICK sfma run m.json >/dev/null
	mkdir pages
	reader sfma-report -o pages/run.html ws
	[ "$status" -eq 0 ] && [ -s pages/run.html ]
	said sfma-report create ws/planted EACCES
	said sfma-report write ws/.sfma/trace.jsonl EACCES
	reader sfma-endpoints --reset m ws
	[ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
	said sfma-endpoints create ws/planted EACCES
	said sfma-endpoints read "$SECRET" EACCES
	said sfma-endpoints exec /bin/true EPERM
	reader sfma-chat ws </dev/null
	[ "$status" -eq 0 ]
	said sfma-chat create ws/planted EACCES
	said sfma-chat connect "127.0.0.1:$PORT" EPERM
	# The collector is on another port: this one is not its to reach.
	reader sfma-export --otlp --endpoint http://127.0.0.1:9/ ws
	said sfma-export connect "127.0.0.1:$PORT" EACCES
	said sfma-export exec /bin/true EPERM
	said sfma-export read "$SECRET" EACCES
	TELEGRAM_BOT_TOKEN=1:abc TELEGRAM_CHAT_ID=7 TELEGRAM_API_BASE=http://127.0.0.1:9 reader sfma-telegram --once ws
	said sfma-telegram connect "127.0.0.1:$PORT" EACCES
	said sfma-telegram create ws/planted EACCES
	said sfma-telegram exec /bin/true EPERM
	[ ! -e ws/planted ]
	sfma-verify ws
}

@test "a kernel without Landlock: the run goes on and records unavailable for every process" {
	SFMA_MOCK=$QUICK run --separate-stderr "$BATS_FILE_TMPDIR/no-landlock" sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output $stderr"; return 1; }
	[[ "$output" == COMPLETED* ]]
	expected=""
	for s in $PROCESSES; do expected+="$s unavailable true true"$'\n'; done
	[ "$(entries)" = "${expected%$'\n'}" ] || { entries; return 1; }
	jq -e -s '[.[] | select(.kind == "confinement")] | all(.data.why == "the kernel has no Landlock (ENOSYS)")' \
		ws/.sfma/trace.jsonl
	sfma-verify ws
	replays_ok 1
	# Without the filter the same workspace's next run has Landlock again.
	SFMA_MOCK=$QUICK sfma run m.json >/dev/null
	[ "$(entries 1)" = "sfma-tap $(kernel_abi) true true" ]
}

@test "requireConfinement: a kernel without Landlock refuses the run with one line, sealed, before any model call" {
	manifest m.json true
	SFMA_MOCK=$QUICK run --separate-stderr "$BATS_FILE_TMPDIR/no-landlock" sfma run m.json
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-plan: failed: requireConfinement: sfma: the kernel has no Landlock (ENOSYS)" ] ||
		{ echo "$stderr"; return 1; }
	[[ "$output" == "FAILED turns=0 "* ]]
	jq -e '.verdict == "failed" and .modelCalls == 0' ws/.sfma/result.json
	[ "$(jq -s '[.[] | select(.kind == "call")] | length' ws/.sfma/trace.jsonl)" -eq 0 ]
	[ ! -e ws/out.txt ]
	sfma-verify ws
	replays_ok 1
	# With Landlock the same manifest runs.
	SFMA_MOCK=$QUICK run sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	replays_ok 2
}

@test "the replay derives the refusal from the entries: a record whose entries were changed does not replay" {
	manifest m.json true
	SFMA_MOCK=$QUICK sfma run m.json >/dev/null
	# A host actor rewrites one entry to say Landlock was missing, and
	# re-seals: the chain and record verify, the run they hold could not
	# have completed.
	rewrite 'es[[i for i, e in enumerate(es) if e["kind"] == "confinement"][2]]["data"]["landlock"] = "unavailable"'
	sfma-verify ws
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: "* ]] || { echo "$output"; return 1; }
}

# wire: a run wired by hand (PIPELINE.md), without sfma and so without
# report channels.
wire() {
	mkfifo to-model from-model to-exec from-exec to-chain from-chain to-seal from-seal to-mem from-mem
	sfma-model m.json <to-model >from-model &
	sfma-exec --apply m.json <to-exec >from-exec &
	sfma-chain ws/.sfma/trace.jsonl <to-chain >from-chain &
	sfma-seal --allow-empty ws <to-seal >from-seal &
	sfma-mem ws <to-mem >from-mem &
	run --separate-stderr sfma-plan run m.json --apply --to-model to-model --from-model from-model \
		--to-exec to-exec --from-exec from-exec --to-chain to-chain --from-chain from-chain \
		--to-seal to-seal --from-seal from-seal --to-mem to-mem --from-mem from-mem
	wait
}

@test "a run wired by hand: the stages without a channel confine at once, and the run says none reported" {
	SFMA_MOCK=$QUICK wire
	[ "$status" -eq 0 ] || { echo "$output $stderr"; return 1; }
	[ "$(entries 6)" = "sfma-plan $(kernel_abi) true true
sfma-model none none none
sfma-exec none none none
sfma-chain none none none
sfma-seal none none none
sfma-mem none none none" ] || { entries 6; return 1; }
	jq -e -s '[.[] | select(.kind == "confinement") | .data | select(.stage != "sfma-plan")] |
		all(.reported == false)' ws/.sfma/trace.jsonl
	sfma-verify ws
	replays_ok 1
	rm -f to-* from-*
	manifest m.json true
	SFMA_MOCK=$QUICK wire
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-plan: failed: requireConfinement: sfma-model: did not report its confinement" ] ||
		{ echo "$stderr"; return 1; }
}

@test "a report is what its stage says of itself: junk or another stage's name is recorded as none, and only a report's own members are kept" {
	# sfma-model's report channel given a lie before the real program
	# starts (without the channel: it confines at once, unheard).
	rm -rf wrapped && mkdir wrapped
	cp "$SFMA_BINDIR/sfma" wrapped/
	for p in "$SFMA_BINDIR"/sfma-*; do ln -s "$p" wrapped/; done
	rm wrapped/sfma-model
	for lie in 'not json' '{"stage":"sfma-chain","landlock":7,"seccomp":true,"noNewPrivs":true}' \
	           '{"stage":"sfma-model","landlock":7,"seccomp":"yes","noNewPrivs":true}' \
	           '{"stage":"sfma-model","landlock":7,"seccomp":true,"noNewPrivs":true,"ports":"all"}'; do
		printf '%s\n' "$lie" >lie
		cat >wrapped/sfma-model <<-EOF
		#!/usr/bin/python3
		import os, socket, sys
		s = socket.socket(fileno=int(os.environ.pop("SFMA_CONFINE_FD")))
		s.recv(1)
		s.send(open("$PWD/lie", "rb").read().rstrip(b"\\n"))
		s.close()
		os.execv("$SFMA_BINDIR/sfma-model", ["sfma-model"] + sys.argv[1:])
		EOF
		chmod +x wrapped/sfma-model
		SFMA_MOCK=$QUICK run --separate-stderr wrapped/sfma run m.json
		[ "$status" -eq 0 ] || { echo "$output $stderr"; return 1; }
		jq -e -s --arg lie "$lie" '[.[] | select(.kind == "confinement")][-7].data |
			if ($lie | test("ports")) then . == {"stage":"sfma-model","landlock":7,"seccomp":true,"noNewPrivs":true}
			else .stage == "sfma-model" and .reported == false and .why == "its report is not one" end' \
			ws/.sfma/trace.jsonl || { jq -c 'select(.kind == "confinement") | .data' ws/.sfma/trace.jsonl; return 1; }
	done
	sfma-verify ws
	replays_ok 4
}
