#!/usr/bin/env bats
# sfma-exec: the sandbox prepared ahead of its command (sfma-exec(1), "The
# prepared sandbox"). A harness (fixtures/exec/prepared.py) runs the stage
# as a child subreaper and watches its sandbox inits from outside: their
# namespaces, cgroups and descriptors, and what is left when the stage ends.

load helpers

FIX=$BATS_TEST_DIRNAME/fixtures/exec

setup() {
	require jq
	require python3
	W=$BATS_TEST_TMPDIR
	mkdir -p "$W/ws/src"
	printf 'hello\n' >"$W/ws/src/a.txt"
	printf 'secret\n' >"$W/ws/undeclared.txt"
	export TMPDIR=$W/stage
	mkdir -p "$TMPDIR"
	# The first command leaves traces everywhere it may write, and a
	# daemon; the second looks for them.
	cat >"$W/ws/mark.sh" <<'SH'
echo one >/tmp/mark
echo one >/mark
echo one >/workspace/left
echo one >/workspace/src/a.txt
setsid sleep 3174 </dev/null >/dev/null 2>&1 &
echo marked
SH
	cat >"$W/ws/look.sh" <<'SH'
for f in /tmp/mark /mark /workspace/left /workspace/undeclared.txt; do
	if [ -e "$f" ]; then echo "present $f"; else echo "absent $f"; fi
done
cat /workspace/src/a.txt
hostname
SH
	manifest '["true","sh","echo"]' '["src","mark.sh","look.sh"]' '["out.txt"]' false
	mountinfo_before=$(mount_points)
}

manifest() { # manifest ALLOWED INPUTS OUTPUTS DRYRUN
	cat >"$W/m.json" <<JSON
{"name":"t","workspace":"$W/ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],
 "allowedCommands":$1,"inputs":$2,"outputs":$3,"maxTurns":5,"dryRunDefault":$4}
JSON
}

harness() { python3 "$FIX/prepared.py" "$W/m.json" "$@" >"$W/events"; }
event() { jq -c --arg e "$1" 'select(.event == $e)' "$W/events" | sed -n "${2:-1}p"; }
run_call() { printf 'req:{"tool":"run","cmd":"%s"}' "$1"; }
mount_points() { awk '{ print $5 }' /proc/self/mountinfo | sort; }

# After the stage: no sandbox process was left for the kernel to kill, no
# descendant at all remains, no process holds a namespace of a sandbox,
# no cgroup of the stage is left, and the host's mount table is as before.
nothing_left() {
	local ended stage
	ended=$(event ended)
	[ -n "$ended" ] || { cat "$W/events"; return 1; }
	[ "$(jq -c .namespaces_held <<<"$ended")" = '[]' ] || { echo "namespaces still held: $ended"; return 1; }
	stage=$(event ready | jq -r '.cgroups[0] // empty' | sed -n 's|.*/sfma-exec-\([0-9]*\)-[0-9]*$|\1|p')
	[ -n "$stage" ] || { echo "no cgroup recorded: $(event ready)"; return 1; }
	for _ in $(seq 100); do
		[ -z "$(find /sys/fs/cgroup -maxdepth 8 -type d -name "sfma-exec-$stage-*" 2>/dev/null)" ] && break
		sleep 0.05
	done
	[ -z "$(find /sys/fs/cgroup -maxdepth 8 -type d -name "sfma-exec-$stage-*" 2>/dev/null)" ] ||
		{ echo "cgroup left: $(find /sys/fs/cgroup -maxdepth 8 -type d -name "sfma-exec-$stage-*")"; return 1; }
	[ "$(mount_points)" = "$mountinfo_before" ] || { diff <(echo "$mountinfo_before") <(mount_points); return 1; }
	if pgrep -f 'sleep 3174'; then echo "a command's daemon survived"; return 1; fi
	[ -z "$(ls -A "$TMPDIR")" ]
}

@test "a sandbox is ready before the first request, and the command runs in it" {
	harness ready "$(run_call true)" eof
	local ready reply
	ready=$(event ready)
	reply=$(event reply | jq -c .reply)
	[ "$(jq -r .run.exit <<<"$reply")" = 0 ] || { echo "$reply"; return 1; }
	# the prepared init sat in the cgroup the command then ran in
	[ "$(jq -r '.cgroups | length' <<<"$ready")" -ge 1 ]
	[ "$(jq -r '.run.limits.cgroup | .pidsPath // .path' <<<"$reply" | sed 's|.*/||')" = \
		"$(jq -r '.cgroups[0]' <<<"$ready" | sed 's|.*/||')" ] || { echo "ready: $ready"; echo "reply: $reply"; return 1; }
	[ "$(event ended | jq -r .status)" = 0 ]
	nothing_left
}

@test "each command gets a sandbox of its own, prepared after the last reply: nothing of one is seen by the next" {
	harness ready "$(run_call 'sh mark.sh')" ready "$(run_call 'sh look.sh')" ready "$(run_call true)" eof
	local r1 r2 n
	r1=$(event reply 1 | jq -c .reply)
	r2=$(event reply 2 | jq -c .reply)
	[ "$(jq -r .result <<<"$r1")" = $'exit=0\nstdout:marked\n\nstderr:' ] || { echo "$r1"; return 1; }
	[ "$(jq -r .result <<<"$r2")" = $'exit=0\nstdout:absent /tmp/mark\nabsent /mark\nabsent /workspace/left\nabsent /workspace/undeclared.txt\nhello\nsfma\n\nstderr:' ] ||
		{ echo "$r2"; return 1; }
	[ "$(cat "$W/ws/src/a.txt")" = hello ] # an input is not an output
	# three inits, three sets of namespaces, three cgroups: none shared
	[ "$(event ready 3)" != "" ]
	for n in mnt net pid user uts ipc time; do
		[ "$(jq -s --arg n "$n" '[.[] | select(.event == "ready") | .ns[$n]] | unique | length' "$W/events")" = 3 ] ||
			{ echo "$n namespace shared:"; cat "$W/events"; return 1; }
	done
	[ "$(jq -s '[.[] | select(.event == "ready") | .cgroups[]] | unique | length' "$W/events")" = \
		"$(jq -s '[.[] | select(.event == "ready") | .cgroups[]] | length' "$W/events")" ]
	[[ "$(jq -r '.run.limits.cgroup | .pidsPath // .path' <<<"$r2")" == */sfma-exec-*-2 ]]
	nothing_left
}

# init keeps its go pipe (3) and report socket (6); the command's process
# it forked, waiting for a command, the same two and its standard three:
# stdin /dev/null, stdout and stderr the pipes the stage reads.
@test "the ready init and the waiting command hold no descriptor of the stage: not the workspace, not its stdin or stdout" {
	harness ready fds eof
	local fds cmd
	fds=$(event fds | jq -c .fds)
	cmd=$(event fds | jq -c .command)
	[ "$(jq -r 'keys | sort_by(tonumber) | join(" ")' <<<"$fds")" = "0 1 2 3 6" ] || { echo "$fds"; return 1; }
	[ "$(jq -r '."0"' <<<"$fds")" = /dev/null ] && [ "$(jq -r '."1"' <<<"$fds")" = /dev/null ]
	[ "$(jq -r 'keys | sort_by(tonumber) | join(" ")' <<<"$cmd")" = "0 1 2 3 6" ] || { echo "$cmd"; return 1; }
	[ "$(jq -r '."0"' <<<"$cmd")" = /dev/null ] || { echo "$cmd"; return 1; }
	[ "$(jq -r '[."1", ."2", ."3"] | map(startswith("pipe:")) | all' <<<"$cmd")" = true ] &&
		[[ "$(jq -r '."6"' <<<"$cmd")" == socket:* ]] || { echo "$cmd"; return 1; }
	if jq -r '.[]' <<<"$fds $cmd" | grep -F -e "$W" -e /workspace; then echo "$fds $cmd"; return 1; fi
	nothing_left
}

@test "an unused sandbox is torn down at the end of input: no process, no cgroup, no namespace, no mount" {
	harness ready eof
	[ "$(event ended | jq -r .status)" = 0 ]
	# the stage killed and reaped its sandbox itself before exiting
	[ "$(event ended | jq -c .sandboxes_at_exit)" = '[]' ] || { cat "$W/events"; return 1; }
	nothing_left
}

@test "an unused sandbox is torn down when the stage gets SIGTERM or SIGINT" {
	local sig
	for sig in TERM INT; do
		harness ready "$sig"
		[ "$(event ended | jq -r .status)" = "-$(kill -l "$sig")" ] || { cat "$W/events"; return 1; }
		[ "$(event ended | jq -c .sandboxes_at_exit)" = '[]' ] || { echo "SIG$sig:"; cat "$W/events"; return 1; }
		nothing_left
	done
}

@test "an unused sandbox dies with a stage killed outright (SIGKILL): nothing is left" {
	harness ready KILL
	[ "$(event ended | jq -r .status)" = -9 ]
	nothing_left
}

@test "a used sandbox and the next, prepared one are both gone after SIGTERM between commands" {
	harness ready "$(run_call true)" ready TERM
	[ "$(event reply | jq -r .reply.run.exit)" = 0 ]
	[ "$(event ended | jq -c .sandboxes_at_exit)" = '[]' ] || { cat "$W/events"; return 1; }
	nothing_left
}

@test "a prepared sandbox that died meanwhile is replaced: the command still runs, isolated" {
	harness ready kill-ready "$(run_call 'sh look.sh')" eof
	local reply
	reply=$(event reply | jq -c .reply)
	[ "$(jq -r .pass <<<"$reply")" = true ] || { echo "$reply"; return 1; }
	[[ "$(jq -r .result <<<"$reply")" == *"absent /workspace/undeclared.txt"*hello*sfma* ]]
	nothing_left
}

@test "no sandbox is prepared in a dry run or without allowed commands" {
	local read='req:{"tool":"read","path":"src/a.txt"}'
	# the check sees one where one is due: applied, with allowed commands
	harness idle "$read" idle sandboxes eof
	[ "$(event sandboxes | jq -r '.pids | length')" = 1 ] || { cat "$W/events"; return 1; }
	manifest '["true"]' '["src"]' '[]' true
	harness --dry idle "$read" idle sandboxes eof
	[ "$(event reply | jq -r .reply.result)" = hello ]
	[ "$(event sandboxes | jq -c .pids)" = '[]' ] || { cat "$W/events"; return 1; }
	manifest '[]' '["src"]' '[]' false
	harness idle "$read" idle sandboxes eof
	[ "$(event sandboxes | jq -c .pids)" = '[]' ] || { cat "$W/events"; return 1; }
	[ "$(event ended | jq -c .namespaces_held)" = '[]' ]
}

@test "a request already waiting is served at once; the sandbox is made for it then" {
	# all requests and the end of input at once: nothing is prepared ahead
	# that nobody waits for, and every command still runs in its own sandbox
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"sh mark.sh"}}' \
		'{"id":2,"call":{"tool":"run","cmd":"sh look.sh"}}' >"$W/req"
	require strace
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
		strace -f -qq -e trace=clone -o "$W/clones" sfma-exec --apply "$W/m.json" <"$W/req" >"$W/out" &
	local spid=$!
	wait "$spid"
	# two commands, two sandboxes: none made ahead for a third
	# (a clone interrupted by a signal is restarted: count those that returned)
	[ "$(grep -cE 'CLONE_NEWUSER.*\) = [0-9]+$' "$W/clones")" = 2 ] || { cat "$W/clones"; return 1; }
	spid=$(grep -m1 'CLONE_NEWUSER' "$W/clones" | cut -d' ' -f1)
	[ "$(sed -n 1p "$W/out" | jq -r .result)" = $'exit=0\nstdout:marked\n\nstderr:' ]
	[[ "$(sed -n 2p "$W/out" | jq -r .result)" == *"absent /tmp/mark"*"absent /mark"*"absent /workspace/left"* ]]
	[[ "$(sed -n 2p "$W/out" | jq -r '.run.limits.cgroup | .pidsPath // .path')" == */sfma-exec-$spid-2 ]]
	[ -z "$(find /sys/fs/cgroup -maxdepth 8 -type d -name "sfma-exec-$spid-*" 2>/dev/null)" ]
	if pgrep -f 'sleep 3174'; then echo "a command's daemon survived"; return 1; fi
}
