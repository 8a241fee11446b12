#!/usr/bin/env bats
# sfma-exec: the command sandbox (sfma-exec(1)). Probes run inside
# for real; every bomb is bounded itself (at most 2000 processes, 6 GiB of
# memory, 3 GB of disk), so a sandbox bug fails a test instead of taking the
# machine down. These tests run as root in CI: the fork bomb must hold there.

load helpers

FIX=$BATS_TEST_DIRNAME/fixtures/exec

setup() {
	require jq
	require python3
	W=$BATS_TEST_TMPDIR
	mkdir -p "$W/ws/src" "$W/host"
	printf 'hello\n' >"$W/ws/src/a.txt"
	printf 'undeclared\n' >"$W/ws/undeclared.txt"
	cp "$FIX"/*.sh "$FIX"/*.py "$W/ws/"
	# A TMPDIR of the test's own, where staging copies were once made: it
	# must stay empty (no staging copy is ever a host directory).
	export TMPDIR=$W/stage
	mkdir -p "$TMPDIR"
	manifest '["sh","python3","env","echo","dd","head","true","touch","ls"]' \
		'["src","probe.sh","escape.sh","outputs.sh","fork.sh","mem.py","loop.sh","connect.py","seccomp.py","lnk"]' \
		'["out/r.txt","out/link.txt","out/dir/passwd","out/fifo","out/big.bin","out/ok.txt"]'
}

manifest() { # manifest ALLOWED INPUTS OUTPUTS
	cat >"$W/m.json" <<JSON
{"name":"t","workspace":"$W/ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],
 "allowedCommands":$1,"inputs":$2,"outputs":$3,"maxTurns":5,"dryRunDefault":false}
JSON
}

calls() { # calls [--flags] CALL...: replies in $W/out
	local flags=()
	while [[ ${1:-} == --* ]]; do flags+=("$1"); shift; done
	local i=0
	for c in "$@"; do
		i=$((i + 1))
		printf '{"id":%d,"call":%s}\n' "$i" "$c"
	done | sfma-exec --apply "${flags[@]}" "$W/m.json" >"$W/out" &
	echo $! >>"$W/stages" # its cgroups are named after its pid
	wait $!
}

run_cmd() { printf '{"tool":"run","cmd":"%s"}' "$1"; }
reply() { sed -n "${1}p" "$W/out"; }
field() { reply "$1" | jq -r "$2"; }
alive() { [ "$(field "$1" .result)" = $'exit=0\nstdout:alive\n\nstderr:' ] || { reply "$1"; return 1; }; }
no_leftovers() {
	if pgrep -f 'sleep 31[37][12]'; then echo "processes left behind"; return 1; fi
	[ -z "$(ls -A "$TMPDIR")" ] || { echo "staging copy left behind:"; ls -A "$TMPDIR"; return 1; }
	cgroup_leftovers
}
# A command's cgroup is sfma-exec-<pid>-<n>, in every hierarchy (v1 or v2):
# none may outlive the stages this test ran.
cgroup_leftovers() {
	local p
	for p in $(cat "$W/stages" 2>/dev/null); do
		[ -z "$(cgroup_dirs "$p")" ] || { echo "cgroup left behind: $(cgroup_dirs "$p")"; return 1; }
	done
}
cgroup_dirs() { find /sys/fs/cgroup -maxdepth 8 -type d -name "sfma-exec-$1-*" 2>/dev/null; }
# await_cgroups PID CMDLINE: print the cgroup directories of sfma-exec PID
# once the command CMDLINE runs inside every one of them.
await_cgroups() {
	local dirs d p inside
	for _ in $(seq 100); do
		dirs=$(cgroup_dirs "$1")
		inside=0
		for d in $dirs; do
			for p in $(cat "$d/cgroup.procs" 2>/dev/null); do
				if [ "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" = "$2 " ]; then
					inside=$((inside + 1))
					break
				fi
			done
		done
		if [ -n "$dirs" ] && [ "$inside" = "$(wc -l <<<"$dirs")" ]; then
			echo "$dirs"
			return 0
		fi
		sleep 0.05
	done
	echo "'$2' never ran inside the cgroups of sfma-exec $1: ${dirs:-none made}" >&2
	return 1
}

@test "a probe inside sees no host files, no /proc, only declared inputs" {
	calls "$(run_cmd 'sh probe.sh')"
	local r
	r=$(field 1 .result)
	[[ "$r" == exit=0* ]] || { echo "$r"; return 1; }
	for f in /etc/passwd /etc/shadow /proc/1/environ /proc/self/environ /root /home /workspace/undeclared.txt; do
		[[ "$r" == *"absent $f"* ]] || { echo "$f visible: $r"; return 1; }
	done
	[[ "$r" == *"present /workspace/src/a.txt"* ]]
	[[ "$r" == *"hostname sfma"* ]]
	[[ "$r" == *"cwd /workspace"* ]]
	no_leftovers
}

@test "the environment is rebuilt from the fixed minimum; a runner secret is absent" {
	SFMA_TEST_SECRET=s3cr3t-value ANTHROPIC_API_KEY=k3y-value calls "$(run_cmd env)"
	[ "$(field 1 .result)" = $'exit=0\nstdout:PATH=/usr/bin:/bin\nHOME=/workspace\nTMPDIR=/tmp\nLANG=C.UTF-8\n\nstderr:' ]
	! grep -q -e s3cr3t -e k3y "$W/out"
}

@test "a TCP connect to a listener on the host's 127.0.0.1 fails" {
	python3 "$FIX/listen.py" "$W/port" "$W/verdict" 3 &
	local lpid=$!
	for _ in $(seq 50); do [ -s "$W/port" ] && break; sleep 0.1; done
	[ -s "$W/port" ]
	calls "$(run_cmd "python3 connect.py $(cat "$W/port")")"
	wait "$lpid"
	[[ "$(field 1 .result)" == *"connect failed:"* ]] || { reply 1; return 1; }
	[ "$(cat "$W/verdict")" = none ]
}

@test "writes past /workspace stay in the sandbox's own root; /usr refuses; outputs copy back" {
	calls "$(run_cmd 'sh escape.sh')" "$(run_cmd 'ls -A /')"
	local r
	r=$(field 1 .result)
	[[ "$r" != *WROTE* ]] || { echo "$r"; return 1; }
	[[ "$r" == *"wrote ../outside"*"wrote /workspace/../x"*"wrote /sfma-x"*"tmp writable"*"output writable"*done* ]] ||
		{ echo "$r"; return 1; }
	[ ! -e "$W/outside" ] && [ ! -e "$W/x" ] && [ ! -e /usr/sfma-x ] && [ ! -e /sfma-x ] &&
		[ ! -e /outside ] && [ ! -e /x ] && [ ! -e /usr/local/sfma-x ]
	[ ! -e "$TMPDIR/outside" ] && [ ! -e "$TMPDIR/x" ]
	# the next command's root is a fresh one: nothing of the last is left
	[ "$(field 2 .run.exit)" = 0 ] && [[ "$(field 2 .result)" == *workspace* ]] || { reply 2; return 1; }
	if grep -qx -e outside -e x -e sfma-x <<<"$(field 2 .result)"; then reply 2; return 1; fi
	# the declared output it wrote was copied back
	[ "$(cat "$W/ws/out/r.txt")" = x ]
	[ "$(reply 1 | jq -c .run.copiedBack)" = '["out/r.txt"]' ]
	no_leftovers
}

@test "copy-back refuses a symlink, a linked directory, a FIFO and an oversize file" {
	printf 'orig\n' >"$W/ws/host-view"
	calls "$(run_cmd 'sh outputs.sh')"
	local refused
	refused=$(reply 1 | jq -c '.run.refused | map({(.path): .reason}) | add')
	[ "$(jq -r '."out/link.txt"' <<<"$refused")" = "is a symlink" ]
	[ "$(jq -r '."out/dir/passwd"' <<<"$refused")" = "a directory on its path is a symlink" ]
	[ "$(jq -r '."out/fifo"' <<<"$refused")" = "is a FIFO" ]
	[ "$(jq -r '."out/big.bin"' <<<"$refused")" = "over the copy-back size ceiling" ]
	[ "$(reply 1 | jq -c .run.copiedBack)" = '["out/ok.txt"]' ]
	[ "$(cat "$W/ws/out/ok.txt")" = fine ]
	[ ! -e "$W/ws/out/link.txt" ] && [ ! -e "$W/ws/out/fifo" ] && [ ! -e "$W/ws/out/big.bin" ]
	[ ! -e "$W/ws/out/dir" ]
	no_leftovers
}

@test "a symlinked input is refused while staging and absent inside" {
	ln -s /etc/passwd "$W/ws/lnk"
	ln -s /etc "$W/ws/src/etc"
	calls "$(run_cmd 'sh probe.sh')"
	[ "$(reply 1 | jq -c '[.run.refused[] | select(.reason == "symlink refused while staging") | .path] | sort')" = '["lnk","src/etc"]' ]
	[[ "$(field 1 .result)" == *"absent /etc/passwd"* ]]
}

@test "the seccomp filter refuses the listed kernel surface" {
	[ "$(uname -m)" = x86_64 ] || skip "seccomp.py uses x86_64 system call numbers"
	calls "$(run_cmd 'python3 seccomp.py')"
	local r
	r=$(field 1 .result)
	[[ "$r" == *"seccomp-mode 2"* ]] || { echo "$r"; return 1; }
	[[ "$r" == *"no-new-privs 1"* ]]
	[[ "$r" == *"bounding-cap-sys-admin 0"* ]]
	[[ "$r" == *"clone3 ENOSYS"* ]]
	for s in keyctl io_uring_setup perf_event_open process_vm_readv unshare-newuser clone-newuser \
		tiocsti ptrace bpf userfaultfd mount umount2 pivot_root add_key request_key kexec_load \
		init_module finit_module; do
		[[ "$r" == *"$s EPERM"* ]] || { echo "$s not refused: $r"; return 1; }
	done
}

# The order is the point: init needs mount, umount2 and pivot_root, which
# the filter refuses, and the command's own set-up (capabilities, rlimits,
# descriptors) comes before it. strace shows it from outside: in the
# command's process, forked once the sandbox is ready, the filter comes
# before the command does; after it run only the hand-over of its listener
# (the stage answers sysinfo) and the closing of its own copy, the read of
# the command from the go pipe,
# the two limits that depend on it (CPU seconds, address space) and the
# execve that succeeds; and every step the filter would refuse ran earlier
# in init.
@test "the seccomp filter is the command's last set-up step: after it only the command's read, two limits and execve" {
	require strace
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"true"}}' >"$W/req"
	# one file per process: trace.PID (LeakSanitizer cannot run under ptrace)
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 strace --pidns-translation -ff -qq -o "$W/trace" sfma-exec --apply "$W/m.json" <"$W/req" >"$W/out"
	[ "$(field 1 .run.exit)" = 0 ] || { reply 1; return 1; }
	local cmd cmd_pid forked init seccomp_line exec_line fork_line call line
	# init: the one that forked the command (the stage prepares another
	# sandbox after the reply, whose command process waits for a command
	# until the end of input kills it unused). init's fork returns the
	# child's pid in the sandbox's PID namespace; strace adds the host's.
	cmd=$(grep -l 'execve("/usr/bin/true"' "$W"/trace.*) && cmd_pid=${cmd##*.} &&
		forked="^clone\(child_stack=NULL, flags=[^)]*SIGCHLD[^)]*\) = [0-9]+ /\* $cmd_pid in strace's PID NS \*/\$" &&
		init=$(grep -lE "$forked" "$W"/trace.*) ||
		{ echo "command or init not traced"; return 1; }
	local listener
	seccomp_line=$(grep -n -m1 '^seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, .* = [0-9]*$' "$cmd" | cut -d: -f1)
	exec_line=$(grep -n -m1 'execve("/usr/bin/true"' "$cmd" | cut -d: -f1)
	[ -n "$seccomp_line" ] && [ -n "$exec_line" ] && [ "$exec_line" -gt $((seccomp_line + 1)) ] ||
		{ echo "seccomp at ${seccomp_line:-none}, execve at ${exec_line:-none}:"; cat "$cmd"; return 1; }
	listener=$(sed -n "${seccomp_line}s/.* = //p" "$cmd")
	sed -n "$((seccomp_line + 1))p" "$cmd" | grep -q "^sendmsg(.*cmsg_type=SCM_RIGHTS, cmsg_data=\[$listener\]}.* = [0-9]*$" ||
		{ echo "not the listener's hand-over after the filter:"; cat "$cmd"; return 1; }
	# between the hand-over and execve: the listener's own copy closed, the
	# command read from the go pipe (descriptor 3), then its CPU and
	# address-space limits, nothing else
	sed -n "$((seccomp_line + 2))p" "$cmd" | grep -q "^close($listener) *= 0$" ||
		{ echo "the listener's copy not closed after its hand-over:"; cat "$cmd"; return 1; }
	sed -n "$((seccomp_line + 3)),$((exec_line - 1))p" "$cmd" >"$W/between"
	while IFS= read -r line; do
		[[ "$line" == "read(3, "* || "$line" == "prlimit64(0, RLIMIT_CPU, "*") = 0" ||
			"$line" == "prlimit64(0, RLIMIT_AS, "*") = 0" ]] ||
			{ echo "between the filter and execve: $line"; cat "$cmd"; return 1; }
	done <"$W/between"
	grep -q '^read(3, ' "$W/between" && grep -q 'RLIMIT_CPU' "$W/between" && tail -n1 "$W/between" | grep -q 'RLIMIT_AS' ||
		{ echo "no read of the command, or the limits out of order:"; cat "$cmd"; return 1; }
	# before it, in the command: capabilities, death signal, descriptors, ceilings
	for call in 'capset(' 'PR_SET_PDEATHSIG' 'close_range(3, ' 'RLIMIT_NPROC' 'RLIMIT_FSIZE'; do
		head -n "$seccomp_line" "$cmd" | grep -qF "$call" || { echo "no $call before the filter"; cat "$cmd"; return 1; }
	done
	# and in init, before it forked the command, the calls the filter refuses
	# succeeded, and init dropped the bounding set and its capabilities
	fork_line=$(grep -n -m1 -E "$forked" "$init" | cut -d: -f1)
	[ -n "$fork_line" ] || { cat "$init"; return 1; }
	for call in 'pivot_root(".", ".")' 'umount2(".", MNT_DETACH)' 'mount("tmpfs", "/tmp"' \
		'prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN)' 'capset('; do
		head -n "$fork_line" "$init" | grep -F "$call" | grep -q ' = 0$' ||
			{ echo "no successful $call before the command"; cat "$init"; return 1; }
	done
}

@test "a fork bomb stops at the process ceiling, as root too, leaving nothing behind" {
	calls "$(run_cmd 'sh fork.sh')" "$(run_cmd 'echo alive')"
	local r last
	r=$(field 1 .result)
	[[ "$r" == *"fork"* ]] || { echo "$r"; return 1; }
	[[ "$r" != *"started 2000"* ]]
	last=$(grep -o '^[0-9]*$' <<<"$(field 1 .result)" | tail -1)
	[ "${last:-0}" -le 256 ]
	[ "$(field 1 .run.limits.processes)" = 256 ]
	[ "$(field 1 .run.limits.cgroup.pidsMax)" = 256 ]
	alive 2
	no_leftovers
}

@test "a memory bomb stops at the address-space ceiling" {
	calls "$(run_cmd 'python3 mem.py')" "$(run_cmd 'echo alive')"
	local r
	r=$(field 1 .result)
	[[ "$r" == *"MemoryError after"* ]] || { echo "$r"; return 1; }
	[ "$(grep -o 'after [0-9]*' <<<"$r" | cut -d' ' -f2)" -le 4096 ]
	[ "$(field 1 .run.limits.addressSpaceBytes)" = 4294967296 ]
	alive 2
}

@test "disk bombs stop at the file-size ceiling and the /tmp size" {
	calls "$(run_cmd 'dd if=/dev/zero of=big bs=1M count=2900')" \
		"$(run_cmd 'dd if=/dev/zero of=sparse bs=1 count=1 seek=10G')" \
		"$(run_cmd 'dd if=/dev/zero of=/tmp/fill bs=1M count=400')" \
		"$(run_cmd 'echo alive')"
	# SIGXFSZ (25): exit=128+25
	[ "$(field 1 .run.exit)" = 153 ] || { reply 1; return 1; }
	[ "$(field 2 .run.exit)" = 153 ]
	[[ "$(field 3 .result)" == *"No space left on device"* ]]
	alive 4
	no_leftovers
}

@test "an endless loop times out: the whole PID namespace dies, the stage serves on" {
	local t0=$SECONDS
	calls --timeout=2 "$(run_cmd 'sh loop.sh')" "$(run_cmd 'echo alive')"
	[ $((SECONDS - t0)) -lt 15 ]
	[ "$(field 1 .run.exit)" = 124 ]
	[ "$(field 1 .run.timedOut)" = true ]
	[[ "$(field 1 .result)" == exit=124* ]]
	[ "$(field 1 .run.limits.timeoutMs)" = 2000 ]
	alive 2
	no_leftovers
}

@test "the run's deadline shortens the timeout" {
	local deadline=$(( $(date +%s%3N) + 1500 ))
	printf '{"id":1,"deadlineMs":%s,"call":{"tool":"run","cmd":"sh loop.sh"}}\n' "$deadline" |
		sfma-exec --apply "$W/m.json" >"$W/out"
	[ "$(field 1 .run.exit)" = 124 ]
	[ "$(field 1 .run.limits.timeoutMs)" -le 1500 ]
	no_leftovers
}

@test "gigabytes on stdout cost bounded memory and a clipped result" {
	cat >"$W/rss.py" <<'PY'
import resource, subprocess, sys
req = b'{"id":1,"call":{"tool":"run","cmd":"head -c 1G /dev/zero"}}\n'
p = subprocess.run(["sfma-exec", "--apply", sys.argv[1]], input=req, capture_output=True)
sys.stdout.buffer.write(p.stdout)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
	python3 "$W/rss.py" "$W/m.json" >"$W/out"
	local r
	r=$(field 1 .result)
	[ "${#r}" -le 8192 ]
	[[ "$r" == *"[clipped: "*" bytes not shown]"* ]]
	[ "$(field 1 .run.exit)" = 0 ]
	# peak RSS (KiB) of the stage and its children, for 1 GiB of output
	[ "$(reply 2)" -lt $((160 * 1024)) ] || { echo "peak RSS $(reply 2) KiB"; return 1; }
}

@test "fail closed: without user namespaces nothing runs, everything else works" {
	require unshare
	printf '%s\n' \
		'{"id":1,"call":{"tool":"run","cmd":"touch out/r.txt"}}' \
		'{"id":2,"call":{"tool":"write","path":"out/ok.txt","content":"w"}}' \
		'{"id":3,"call":{"tool":"read","path":"src/a.txt"}}' \
		'{"id":4,"seq":9,"call":{"tool":"notify","text":"n"}}' >"$W/req"
	# A user namespace of the test's own, whose limit of nested user
	# namespaces is 0: the sandbox's clone fails with ENOSPC.
	unshare --user --map-root-user sh -c \
		'echo 0 >/proc/sys/user/max_user_namespaces && exec sfma-exec --apply "$1" <"$2" >"$3"' \
		sh "$W/m.json" "$W/req" "$W/out"
	[ "$(field 1 .pass)" = false ]
	[ "$(field 1 .reason)" = "secure command sandbox unavailable: clone namespaces: No space left on device (the limit of user namespaces is reached: see sysctl user.max_user_namespaces)" ] ||
		{ reply 1; return 1; }
	[ "$(field 1 .result)" = "EPSILON_HARD_FAIL: $(field 1 .reason)" ]
	[ "$(field 1 .run.exit)" = null ]
	[ ! -e "$W/ws/out/r.txt" ]
	[ "$(field 2 .pass)" = true ] && [ "$(cat "$W/ws/out/ok.txt")" = w ]
	[ "$(field 3 .result)" = hello ]
	[ -e "$W/ws/.sfma/outbox/0000000000000009-notify.json" ]
	no_leftovers
}

# An input the stage cannot read makes an incomplete staging copy: the
# command must not run on it. A sysfs attribute that fails every read
# (lo has no link speed: EINVAL) is bound over an input, in a mount
# namespace of the test's own.
@test "fail closed: an input that fails to copy refuses the command" {
	require unshare
	[ -e /sys/class/net/lo/speed ] || { echo "no /sys/class/net/lo/speed to fail a read"; return 1; }
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"touch out/r.txt"}}' >"$W/req"
	unshare --mount --propagation private sh -c \
		'mount --bind /sys/class/net/lo/speed "$1" && exec sfma-exec --apply "$2" <"$3" >"$4"' \
		sh "$W/ws/src/a.txt" "$W/m.json" "$W/req" "$W/out"
	[ "$(field 1 .reason)" = "secure command sandbox unavailable: staging inputs: Invalid argument" ] ||
		{ reply 1; return 1; }
	[ "$(field 1 .run.exit)" = null ]
	[ ! -e "$W/ws/out/r.txt" ]
	no_leftovers
}

@test "the limits in force are recorded with every command" {
	calls "$(run_cmd true)"
	[ "$(reply 1 | jq -c '.run.limits | keys')" = '["addressSpaceBytes","cgroup","cgroupReason","copyBackBytes","coreBytes","cpuSeconds","fileSizeBytes","messageQueueBytes","openFiles","outputBytes","processes","rootBytes","sharedMemory","timeoutMs","tmpBytes","workspaceBytes"]' ]
	[ "$(field 1 .run.limits.messageQueueBytes)" = 819200 ]
	[ "$(field 1 .run.limits.rootBytes)" = 16777216 ]
	[ "$(field 1 .run.limits.tmpBytes)" = 268435456 ]
	[ "$(field 1 .run.limits.workspaceBytes)" = 2147483648 ]
	[ "$(field 1 .run.limits.coreBytes)" = 0 ]
	[ "$(field 1 .run.limits.cpuSeconds)" = 61 ]
	[ "$(field 1 .run.exit)" = 0 ]
	[ "$(field 1 .run.timedOut)" = false ]
}

@test "an unknown program inside is exit 127, not a sandbox failure" {
	manifest '["no-such-program-x"]' '[]' '[]'
	calls "$(run_cmd no-such-program-x)"
	[ "$(field 1 .pass)" = true ]
	[ "$(field 1 .run.exit)" = 127 ]
	[[ "$(field 1 .result)" == *"no-such-program-x: command not found"* ]]
}

# This host (and CI) delegates cgroups: v1 pids and memory hierarchies we may
# create children in. The test fails loudly where that is not so.
@test "cgroup ceilings hold the whole sandbox, entered before the command starts" {
	manifest '["sleep","true"]' '[]' '[]'
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"sleep 2"}}' \
		'{"id":2,"call":{"tool":"run","cmd":"true"}}' |
		sfma-exec --apply "$W/m.json" >"$W/out" &
	local spid=$! dirs d
	echo "$spid" >>"$W/stages"
	dirs=$(await_cgroups "$spid" 'sleep 2') || return 1
	for d in $dirs; do
		[ ! -e "$d/pids.max" ] || [ "$(cat "$d/pids.max")" = 256 ]
		[ ! -e "$d/memory.limit_in_bytes" ] || [ "$(cat "$d/memory.limit_in_bytes")" = 4294967296 ]
		[ ! -e "$d/memory.max" ] || [ "$(cat "$d/memory.max")" = 4294967296 ]
	done
	wait "$spid"
	[ "$(field 1 .run.exit)" = 0 ]
	[ "$(field 1 .run.limits.cgroup.pidsMax)" = 256 ]
	[ "$(field 1 .run.limits.cgroup.memoryMaxBytes)" = 4294967296 ]
	[ "$(field 1 .run.limits.cgroupReason)" = null ]
	[[ "$(field 1 .run.limits.cgroup.version)" == [12] ]]
	# one cgroup per command
	[ "$(field 1 '.run.limits.cgroup | .pidsPath // .path')" = "$(grep -m1 pids <<<"$dirs" || head -1 <<<"$dirs")" ]
	[[ "$(field 2 '.run.limits.cgroup | .pidsPath // .path')" == */sfma-exec-$spid-2 ]]
	[ -z "$(cgroup_dirs "$spid")" ] || { echo "left behind: $(cgroup_dirs "$spid")"; return 1; }
	no_leftovers
}

@test "where cgroups are not delegated: rlimits only, null with a reason, the command runs" {
	require unshare
	# A mount namespace of the test's own in which every cgroup file system
	# is read-only, as for a user the host delegates nothing to.
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"echo alive"}}' >"$W/req"
	unshare --mount sh -c '
		for m in $(awk "\$9 == \"cgroup\" || \$9 == \"cgroup2\" { print \$5 }" /proc/self/mountinfo); do
			mount -o remount,bind,ro "$m" || exit 1
		done
		exec sfma-exec --apply "$1" <"$2" >"$3"' sh "$W/m.json" "$W/req" "$W/out"
	alive 1
	[ "$(field 1 .run.limits.cgroup)" = null ]
	[[ "$(field 1 .run.limits.cgroupReason)" == "not delegated: /sys/fs/cgroup/"*" not writable (Read-only file system)" ]] ||
		{ reply 1; return 1; }
	[ "$(field 1 .run.limits.processes)" = 256 ]
	no_leftovers
}

@test "a stage stopped by SIGTERM or SIGINT mid-command leaves no cgroup, no process, no message" {
	manifest '["sleep"]' '[]' '[]'
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"sleep 3172"}}' >"$W/req"
	local sig spid
	for sig in TERM INT; do
		sfma-exec --apply "$W/m.json" <"$W/req" >"$W/out" 2>"$W/err" &
		spid=$!
		echo "$spid" >>"$W/stages"
		await_cgroups "$spid" 'sleep 3172' >/dev/null || return 1
		kill -"$sig" "$spid"
		wait "$spid" || true
		[ -z "$(cgroup_dirs "$spid")" ] || { echo "left behind: $(cgroup_dirs "$spid")"; return 1; }
		for _ in $(seq 50); do pgrep -f 'sleep 3172' >/dev/null || break; sleep 0.1; done
		[ ! -s "$W/err" ] || { echo "SIG$sig: follow-on noise:"; cat "$W/err"; return 1; }
		no_leftovers
	done
}

@test "a stage killed outright (SIGKILL) mid-command still leaves no cgroup behind" {
	manifest '["sleep"]' '[]' '[]'
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"sleep 3171"}}' >"$W/req"
	sfma-exec --apply "$W/m.json" <"$W/req" >"$W/out" &
	local spid=$!
	echo "$spid" >>"$W/stages"
	await_cgroups "$spid" 'sleep 3171' >/dev/null || return 1
	kill -KILL "$spid"
	wait "$spid" || true
	# Its keeper removes them once the sandbox is gone.
	for _ in $(seq 50); do [ -z "$(cgroup_dirs "$spid")" ] && break; sleep 0.1; done
	[ -z "$(cgroup_dirs "$spid")" ] || { echo "left behind: $(cgroup_dirs "$spid")"; return 1; }
	for _ in $(seq 50); do pgrep -f 'sleep 3171' >/dev/null || break; sleep 0.1; done
	run pgrep -f 'sleep 3171'
	[ "$status" -eq 1 ] || { echo "left running: $output"; return 1; }
}

# The ids the host's account files name: uids and gids of /etc/passwd, gids
# of /etc/group, ranges delegated in /etc/subuid and /etc/subgid.
named_ids() {
	awk -F: '{ print $3; print $4 }' /etc/passwd
	awk -F: '{ print $3 }' /etc/group
	cat /etc/subuid /etc/subgid 2>/dev/null | awk -F: '$3 > 0 && $3 < 100000 { for (i = 0; i < $3; i++) print $2 + i }'
}
# An id n that /etc/passwd names as a uid, with n+1 named nowhere.
named_then_free() {
	local named
	named=$(named_ids | sort -un)
	awk -F: '{ print $3 }' /etc/passwd | sort -n | while read -r n; do
		[ "$n" -gt 0 ] && ! grep -qx "$((n + 1))" <<<"$named" && { echo "$n"; break; }
	done
}

@test "as root, each sandbox runs as host ids of its own, leased from the range, none of /etc/passwd" {
	manifest '["sleep"]' '[]' '[]'
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"sleep 1.5"}}' >"$W/req"
	sfma-exec --apply "$W/m.json" <"$W/req" >"$W/out" &
	local spid=$! cmd= ids uid
	echo "$spid" >>"$W/stages"
	for _ in $(seq 100); do cmd=$(pgrep -xf 'sleep 1.5') && break; sleep 0.05; done
	[ -n "$cmd" ] || { echo "the command never started"; return 1; }
	ids=$(stat -c %u:%g /proc/"$cmd")
	wait "$spid"
	[ "$(field 1 '.run.sandbox | "\(.hostUid):\(.hostGid)"')" = "$ids" ] || { echo "runs as $ids:"; reply 1; return 1; }
	[ "$(field 1 .run.sandbox.ids)" = leased ]
	uid=${ids%:*}
	[ "$uid" = "${ids#*:}" ] && [ "$uid" -ge 2147000000 ] && [ "$uid" -le 2147065535 ]
	if named_ids | grep -qx "$uid"; then echo "$uid is named by the account files"; return 1; fi
	# the leases: a file per id, in a directory root's alone
	[ "$(stat -c %U:%a /run/sfma/uids)" = root:700 ] && [ -f "/run/sfma/uids/$uid" ]
	no_leftovers
}

@test "SFMA_EXEC_UIDS sets the range; an id the account files name is skipped" {
	local n
	n=$(named_then_free)
	[ -n "$n" ] || { echo "no uid of /etc/passwd with a free id above it"; return 1; }
	SFMA_EXEC_UIDS="$n-$((n + 1))" calls "$(run_cmd 'echo alive')"
	alive 1
	[ "$(field 1 .run.sandbox.hostUid)" = $((n + 1)) ] && [ "$(field 1 .run.sandbox.hostGid)" = $((n + 1)) ] ||
		{ echo "range $n-$((n + 1)):"; reply 1; return 1; }
}

# Leases hold between sfma-exec processes: a range of one id serves one
# sandbox at a time. A stage killed outright cannot release anything
# itself; the kernel drops its lock.
@test "a range whose ids are all leased refuses the command; a stage killed outright releases its lease" {
	local f=2147100000
	while named_ids | grep -qx "$f"; do f=$((f + 1)); done
	manifest '["sleep","echo"]' '[]' '[]'
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"sleep 3172"}}' >"$W/req"
	SFMA_EXEC_UIDS=$f-$f sfma-exec --apply "$W/m.json" <"$W/req" >"$W/out-a" &
	local spid=$!
	echo "$spid" >>"$W/stages"
	for _ in $(seq 100); do pgrep -xf 'sleep 3172' >/dev/null && break; sleep 0.05; done
	pgrep -xf 'sleep 3172' >/dev/null || { echo "the command never started"; return 1; }
	SFMA_EXEC_UIDS=$f-$f calls "$(run_cmd 'echo alive')"
	[ "$(field 1 .reason)" = "secure command sandbox unavailable: lease host ids: Resource temporarily unavailable (every id of the range is in use: see SFMA_EXEC_UIDS)" ] ||
		{ reply 1; return 1; }
	[ "$(field 1 .run.exit)" = null ]
	kill -KILL "$spid"
	wait "$spid" || true
	SFMA_EXEC_UIDS=$f-$f calls "$(run_cmd 'echo alive')"
	alive 1
	[ "$(field 1 .run.sandbox.hostUid)" = "$f" ]
	for _ in $(seq 50); do pgrep -f 'sleep 3172' >/dev/null || break; sleep 0.1; done
	no_leftovers
}

@test "an SFMA_EXEC_UIDS that is not FIRST-LAST is a usage error" {
	local v
	for v in '' x 5-1 0-5 1- -5 1-2x 1-4294967294 '1 -2'; do
		run env SFMA_EXEC_UIDS="$v" sfma-exec --apply "$W/m.json" </dev/null
		[ "$status" -eq 2 ] || { echo "'$v': status $status: $output"; return 1; }
		[ "${lines[0]}" = "sfma-exec: SFMA_EXEC_UIDS: expected FIRST-LAST, 1 <= FIRST <= LAST <= 4294967293" ] ||
			{ echo "'$v': $output"; return 1; }
	done
}
