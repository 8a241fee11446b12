#!/usr/bin/env bats
# sfma-exec: the staging copy and the sandbox's own file systems, in every
# mode the stage can run in: as root (the command is nobody on the host),
# and as an unprivileged user, entered here with setpriv. Nothing a command
# makes - depth, file count, size - may outlive its call, and the next call
# starts clean.

load helpers
bats_require_minimum_version 1.5.0

FIX=$BATS_TEST_DIRNAME/fixtures/exec

setup() {
	require jq
	require python3
	require setpriv
	# Not under BATS_TEST_TMPDIR: the unprivileged stage must reach it.
	W=$(mktemp -d /tmp/sfma-exec-test.XXXXXX)
	chmod 0755 "$W"
	mkdir -p "$W/ws/src" "$W/tmp"
	chmod 1777 "$W/tmp"
	printf 'hello\n' >"$W/ws/src/a.txt"
	# The stage's TMPDIR: where staging copies used to be made.
	export TMPDIR=$W/tmp
	cat >"$W/ws/deep.py" <<'PY'
# 5000 files, then a tree 4100 directories deep with 1 MiB at the bottom.
import os
for i in range(5000):
    open("many-%d" % i, "w").close()
for i in range(4100):
    os.mkdir("d")
    os.chdir("d")
with open("bottom", "wb") as f:
    f.write(b"\0" * (1 << 20))
print("made", len(os.getcwd().split("/")) - 2)
PY
	cat >"$W/ws/shm.py" <<'PY'
# Shared memory outside the address space: memfd, SysV, POSIX.
import ctypes, errno, os
def name(e): return errno.errorcode.get(e, str(e))
try:
    fd = os.memfd_create("x")
    os.ftruncate(fd, 1 << 20)
    os.write(fd, b"x" * 4096)
    print("memfd ok")
except OSError as e:
    print("memfd", name(e.errno))
libc = ctypes.CDLL(None, use_errno=True)
r = libc.shmget(0, 1 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
print("shmget", "ok" if r >= 0 else name(ctypes.get_errno()))
try:
    from multiprocessing import shared_memory
    shared_memory.SharedMemory(create=True, size=1 << 20).unlink()
    print("shm_open ok")
except OSError as e:
    print("shm_open", name(e.errno))
PY
	cp "$FIX/ipc.py" "$FIX/clocks.py" "$W/ws/"
	cp "$FIX/neighbour.py" "$W/"
	manifest '["python3","stat","ls","sleep","echo","touch","dd"]' \
		'["src","deep.py","shm.py","ipc.py","clocks.py"]' '["out/r.txt"]'
}

teardown() {
	rm -rf "$W"
}

manifest() { # manifest ALLOWED INPUTS OUTPUTS
	cat >"$W/m.json" <<JSON
{"name":"t","workspace":"$W/ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],
 "allowedCommands":$1,"inputs":$2,"outputs":$3,"maxTurns":5,"dryRunDefault":false}
JSON
}

# as MODE CMD...: run CMD as the stage of that mode, in place of this
# shell (so that $! of "as MODE ... &" is the stage itself).
as() {
	local mode=$1
	shift
	if [ "$mode" = nobody ]; then
		chown -R 65534:65534 "$W/ws"
		exec setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"
	fi
	exec "$@"
}

calls() { # calls MODE CMD...: one run request per CMD; replies in $W/out
	local mode=$1 i=0
	shift
	for c in "$@"; do
		i=$((i + 1))
		printf '{"id":%d,"call":{"tool":"run","cmd":"%s"}}\n' "$i" "$c"
	done >"$W/req"
	(as "$mode" sfma-exec --apply "$W/m.json" <"$W/req" >"$W/out")
}

reply() { sed -n "${1}p" "$W/out"; }
field() { reply "$1" | jq -r "$2"; }
stdout_of() { field "$1" .result | sed -n '2s/^stdout://p'; }

# Nothing of a staging copy on the host: not in TMPDIR (a directory in
# /tmp of this test's own, where staging copies were once made; /tmp itself
# is shared with whatever else runs here), no mount, no process of ours.
nothing_left() {
	[ -z "$(ls -A "$TMPDIR")" ] || { echo "left in TMPDIR:"; ls -A "$TMPDIR"; return 1; }
	if grep -q "$W" /proc/self/mountinfo; then echo "mount left:"; grep "$W" /proc/self/mountinfo; return 1; fi
	if pgrep -f 'sleep 31(7[3-9]|8[0-9])'; then echo "processes left behind"; return 1; fi
}

deep_tree_leaves_nothing() { # MODE
	calls "$1" 'stat -f -c %f /workspace' 'python3 deep.py' 'stat -f -c %f /workspace' 'ls -A /workspace'
	[ "$(field 2 .run.exit)" = 0 ] && [ "$(stdout_of 2)" = "made 4100" ] || { reply 2; return 1; }
	# the next command's staging copy is as empty as the first one's
	[ "$(stdout_of 3)" = "$(stdout_of 1)" ] || { echo "free blocks $(stdout_of 1), then $(stdout_of 3)"; return 1; }
	[ "$(field 4 .result)" = $'exit=0\nstdout:clocks.py\ndeep.py\nipc.py\nout\nshm.py\nsrc\n\nstderr:' ] || { reply 4; return 1; }
	[ ! -e "$W/ws/d" ] && [ ! -e "$W/ws/many-1" ]
	nothing_left
}

@test "as root: a 4100-deep tree and 5000 files leave nothing, the next call starts clean" {
	deep_tree_leaves_nothing root
}

@test "unprivileged: a 4100-deep tree and 5000 files leave nothing, the next call starts clean" {
	deep_tree_leaves_nothing nobody
}

killed_mid_command_leaves_nothing() { # MODE SLEEP-SECONDS
	printf '{"id":1,"call":{"tool":"run","cmd":"sleep %s"}}\n' "$2" >"$W/req"
	as "$1" sfma-exec --apply "$W/m.json" <"$W/req" >"$W/out" &
	local spid=$!
	for _ in $(seq 100); do pgrep -f "sleep $2" >/dev/null && break; sleep 0.05; done
	pgrep -f "sleep $2" >/dev/null || { echo "the command never started"; return 1; }
	kill -KILL "$spid"
	wait "$spid" || true
	for _ in $(seq 100); do pgrep -f "sleep $2" >/dev/null || break; sleep 0.05; done
	nothing_left
	calls "$1" 'echo alive'
	[ "$(field 1 .result)" = $'exit=0\nstdout:alive\n\nstderr:' ] || { reply 1; return 1; }
	nothing_left
}

@test "as root: SIGKILL of the stage mid-command leaves nothing; the next stage works" {
	killed_mid_command_leaves_nothing root 3173
}

@test "unprivileged: SIGKILL of the stage mid-command leaves nothing; the next stage works" {
	killed_mid_command_leaves_nothing nobody 3174
}

sizes_capped() { # MODE
	calls "$1" "stat -f -c %b*%S /workspace" "stat -f -c %b*%S /" "stat -f -c %b*%S /tmp" \
		'touch ../beside' 'dd if=/dev/zero of=../fill bs=1M count=32' 'ls -A /'
	[ "$(( $(stdout_of 1) ))" = 2147483648 ] || { reply 1; return 1; }
	[ "$(( $(stdout_of 2) ))" = 16777216 ] || { reply 2; return 1; }
	[ "$(( $(stdout_of 3) ))" = 268435456 ] || { reply 3; return 1; }
	[ "$(field 1 .run.limits.workspaceBytes)" = 2147483648 ]
	[ "$(field 1 .run.limits.rootBytes)" = 16777216 ]
	# the root is writable beside the working directory, within its cap
	[ "$(field 4 .run.exit)" = 0 ] || { reply 4; return 1; }
	[ "$(field 5 .run.exit)" = 1 ] && [[ "$(field 5 .result)" == *"No space left on device"* ]] || { reply 5; return 1; }
	# and each command has its own: nothing of the last one is there
	[ "$(field 6 .run.exit)" = 0 ] || { reply 6; return 1; }
	if grep -qx -e beside -e fill <<<"$(field 6 .result | tail -n +2)"; then reply 6; return 1; fi
	[ ! -e "$W/beside" ] && [ ! -e /beside ] && [ ! -e "$W/fill" ]
	nothing_left
}

@test "as root: the staging copy, the root and /tmp are size-capped tmpfs of the command's own" {
	sizes_capped root
}

@test "unprivileged: the staging copy, the root and /tmp are size-capped tmpfs of the command's own" {
	sizes_capped nobody
}

# A mount below /usr on the host (here: in a mount namespace of the
# test's own) is copied along by the recursive bind; it must be read-only
# inside as well, keeping its own locked flags (noexec).
nested_mounts_read_only() { # MODE
	require unshare
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"touch /usr/local/src/f"}}' \
		'{"id":2,"call":{"tool":"run","cmd":"touch /usr/local/src/sub/g"}}' \
		'{"id":3,"call":{"tool":"run","cmd":"touch /usr/f"}}' \
		'{"id":4,"call":{"tool":"run","cmd":"echo alive"}}' >"$W/req"
	[ "$1" = root ] || chown -R 65534:65534 "$W/ws"
	local priv=()
	[ "$1" = root ] || priv=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
	unshare --mount --propagation private sh -c '
		w=$1; shift
		mount -t tmpfs -o mode=1777 x /usr/local/src &&
		mkdir -m 1777 /usr/local/src/sub &&
		mount -t tmpfs -o mode=1777,noexec y /usr/local/src/sub || exit 1
		"$@" --apply "$w/m.json" <"$w/req" >"$w/out"
		ls -A /usr/local/src /usr/local/src/sub >"$w/after"' sh "$W" "${priv[@]}" sfma-exec
	for n in 1 2 3; do
		[ "$(field $n .run.exit)" = 1 ] && [[ "$(field $n .result)" == *"Read-only file system"* ]] ||
			{ reply $n; return 1; }
	done
	[ "$(field 4 .result)" = $'exit=0\nstdout:alive\n\nstderr:' ] || { reply 4; return 1; }
	[ "$(cat "$W/after")" = $'/usr/local/src:\nsub\n\n/usr/local/src/sub:' ] || { cat "$W/after"; return 1; }
	nothing_left
}

@test "as root: a mount nested below /usr is read-only inside too" {
	nested_mounts_read_only root
}

@test "unprivileged: a mount nested below /usr is read-only inside too" {
	nested_mounts_read_only nobody
}

@test "as root with a memory cgroup: shared memory works and is counted by the cgroup" {
	calls root 'python3 shm.py'
	[ "$(field 1 .run.limits.cgroup.memoryMaxBytes)" = 4294967296 ] || { reply 1; return 1; }
	[ "$(field 1 .run.limits.sharedMemory)" = memoryCgroup ]
	[[ "$(field 1 .result)" == *"memfd ok"*"shmget ok"* ]] || { reply 1; return 1; }
}

@test "as root with a memory cgroup: memfd_secret, SysV queues and semaphores work, counted by the cgroup" {
	calls root 'python3 ipc.py memfd_secret' 'python3 ipc.py msgget' 'python3 ipc.py semget'
	[ "$(field 1 .run.limits.sharedMemory)" = memoryCgroup ] || { reply 1; return 1; }
	[[ "$(stdout_of 1)" == "memfd_secret held 64 MiB"* ]] || { reply 1; return 1; }
	[ "$(stdout_of 2)" = "msgget ok" ] || { reply 2; return 1; }
	[ "$(stdout_of 3)" = "semget ok" ] || { reply 3; return 1; }
}

# Memory outside every address space, one call each, where no memory cgroup
# counts it: refused, and limits.sharedMemory says so. memfd_secret's pages
# stay in its file when the window mapping them goes (8 MiB windows held
# 5 GiB under a 4 GiB RLIMIT_AS); SysV message queues and semaphores are
# charged to no rlimit at all.
refused_without_cgroup() { # CALL
	calls nobody "python3 ipc.py $1" 'echo alive'
	[ "$(field 1 .run.limits.cgroup)" = null ]
	[ "$(field 1 .run.limits.sharedMemory)" = refused ] || { reply 1; return 1; }
	[ "$(field 1 .run.exit)" = 0 ] && [ "$(stdout_of 1)" = "$1 ENOSYS" ] || { reply 1; return 1; }
	[ "$(field 2 .result)" = $'exit=0\nstdout:alive\n\nstderr:' ]
}

@test "unprivileged (no cgroup): memfd_secret is refused" {
	refused_without_cgroup memfd_secret
}

@test "unprivileged (no cgroup): SysV message queues (msgget) are refused" {
	refused_without_cgroup msgget
}

@test "unprivileged (no cgroup): SysV semaphores (semget) are refused" {
	refused_without_cgroup semget
}

# POSIX message queues are charged to RLIMIT_MSGQUEUE, which the sandbox
# gets set to 800 KiB whatever the stage runs under: here unlimited where
# root may raise a limit (CAP_SYS_RESOURCE; this one counts too, per host
# user, kernel/ucount.c inc_rlimit_ucounts). A queue of the default size
# reserves 10 x 8 KiB and its bookkeeping.
message_queues_bounded() { # MODE
	(ulimit -q unlimited 2>/dev/null || true; calls "$1" 'python3 ipc.py mq_open')
	[ "$(field 1 .run.limits.messageQueueBytes)" = 819200 ] || { reply 1; return 1; }
	local word n err
	read -r word n err <<<"$(stdout_of 1)"
	[ "$word" = mq_open ] && [ "$err" = EMFILE ] && [ "$n" -ge 1 ] && [ "$n" -le 9 ] ||
		{ reply 1; return 1; }
}

@test "unprivileged: POSIX message queues stop at 800 KiB in all" {
	message_queues_bounded nobody
}

@test "as root: POSIX message queues stop at 800 KiB in all" {
	message_queues_bounded root
}

# RLIMIT_AS counts mappings; a memfd need not be mapped, and RLIMIT_FSIZE
# caps each, not their number: without a cgroup memory limit one process
# could hold any amount. There they are refused.
@test "unprivileged (no cgroup): memfd_create and shmget are refused, POSIX shm has no /dev/shm" {
	calls nobody 'python3 shm.py' 'echo alive'
	[ "$(field 1 .run.limits.cgroup)" = null ]
	[ "$(field 1 .run.limits.sharedMemory)" = refused ] || { reply 1; return 1; }
	[ "$(field 1 .run.exit)" = 0 ] || { reply 1; return 1; }
	[ "$(stdout_of 1)" = "memfd ENOSYS" ] || { reply 1; return 1; }
	[[ "$(field 1 .result)" == *$'\nshmget ENOSYS\nshm_open ENOENT\n'* ]] || { reply 1; return 1; }
	[ "$(field 2 .result)" = $'exit=0\nstdout:alive\n\nstderr:' ]
}

# Root without CAP_SYS_ADMIN on the host: the sandbox needs none (the user
# namespace gives init its own), and the staging copy is never a host
# directory that a host process as nobody could read or rewrite.
@test "as root without CAP_SYS_ADMIN: the command runs isolated, its staging copy out of the host's reach" {
	require capsh
	printf 'marker-%s\n' "$$" >"$W/ws/src/a.txt"
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"sleep 3175"}}' >"$W/req"
	capsh --drop=cap_sys_admin -- -c 'exec sfma-exec --apply --timeout=3 "$1" <"$2" >"$3"' \
		sh "$W/m.json" "$W/req" "$W/out" &
	local spid=$!
	for _ in $(seq 100); do pgrep -f 'sleep 3175' >/dev/null && break; sleep 0.05; done
	pgrep -f 'sleep 3175' >/dev/null || { echo "the command never started"; return 1; }
	# a host process as nobody, while the command runs: no staging copy to see
	run setpriv --reuid=65534 --regid=65534 --clear-groups -- \
		sh -c 'find "$1" -mindepth 1; grep -rl "marker-$2" "$1" 2>/dev/null' sh "$TMPDIR" "$$"
	[ -z "$output" ] || { echo "visible to nobody: $output"; return 1; }
	wait "$spid"
	[ "$(field 1 .pass)" = true ] && [ "$(field 1 .run.exit)" = 124 ] || { reply 1; return 1; }
	nothing_left
}

@test "fail closed: without the capabilities to map ids, root's command is refused, not run" {
	require capsh
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"touch out/r.txt"}}' >"$W/req"
	capsh --drop=cap_setuid,cap_setgid -- -c 'exec sfma-exec --apply "$1" <"$2" >"$3"' \
		sh "$W/m.json" "$W/req" "$W/out"
	[ "$(field 1 .pass)" = false ]
	[[ "$(field 1 .reason)" == "secure command sandbox unavailable: "* ]] || { reply 1; return 1; }
	[ "$(field 1 .run.exit)" = null ]
	[ ! -e "$W/ws/out/r.txt" ]
	nothing_left
}

# A time namespace of the sandbox's own, and sysinfo(2) answered with the
# sandbox's figures: none of the host's uptime, load, memory or process
# count reaches a command, and the C library's memory size is the
# sandbox's ceiling.
host_counters_hidden() { # MODE
	local host_up out total
	host_up=$(cut -d. -f1 /proc/uptime)
	[ "$host_up" -gt 60 ] || { echo "the host is up for ${host_up}s only: nothing to tell apart"; return 1; }
	calls "$1" 'python3 clocks.py'
	out=$(field 1 .result | sed 's/^stdout://')
	val() { sed -n "s/^$1 //p" <<<"$out"; }
	[ "$(field 1 .run.exit)" = 0 ] && [ "$(field 1 .run.sandbox.sysinfo)" = answered ] || { reply 1; return 1; }
	[ "$(val uptime)" -le 10 ] && [ "$(val monotonic)" -le 10 ] && [ "$(val boottime)" -le 10 ] ||
		{ echo "host up ${host_up}s:"; reply 1; return 1; }
	[ "$(val loads)" = "0 0 0" ] || { reply 1; return 1; }
	total=$(field 1 '.run.limits.cgroup.memoryMaxBytes // .run.limits.addressSpaceBytes')
	[ "$total" = 4294967296 ] && [ "$(val totalram)" = "$total" ] && [ "$(val physmem)" = "$total" ] ||
		{ reply 1; return 1; }
	[ "$(val freeram)" -le "$total" ]
	[ "$(val procs)" -ge 1 ] && [ "$(val procs)" -le 4 ] || { reply 1; return 1; }
}

@test "as root: no host uptime, load, memory or process count inside (time namespace, sysinfo)" {
	host_counters_hidden root
}

@test "unprivileged: no host uptime, load, memory or process count inside (time namespace, sysinfo)" {
	host_counters_hidden nobody
}

# sleeping MODE SECONDS: the stage of MODE in the background, running
# "sleep SECONDS"; sets spid (the stage), cmd and init (the command and its
# sandbox's init, host pids).
sleeping() {
	printf '{"id":1,"call":{"tool":"run","cmd":"sleep %s"}}\n' "$2" >"$W/req-$2"
	as "$1" sfma-exec --apply "$W/m.json" <"$W/req-$2" >"$W/out-$2" &
	spid=$!
	cmd=
	for _ in $(seq 100); do cmd=$(pgrep -xf "sleep $2") && break; sleep 0.05; done
	[ -n "$cmd" ] || { echo "the command never started"; return 1; }
	init=$(ps -o ppid= -p "$cmd" | tr -d ' ')
}

# neighbour ID ARGS...: fixtures/exec/neighbour.py run on the host as uid and
# gid ID (the interpreter the sandbox runs too: /usr/bin is what it binds).
neighbour() {
	local id=$1
	shift
	setpriv --reuid="$id" --regid="$id" --clear-groups -- /usr/bin/python3 "$W/neighbour.py" "$@"
}

# stop_stage: end the background stage (its sandbox dies with it).
stop_stage() {
	kill "$spid"
	wait "$spid" || true
	for _ in $(seq 100); do pgrep -f 'sleep 31(7[7-9]|8[0-9])' >/dev/null || break; sleep 0.05; done
}

# A host process as nobody is the neighbour the sandbox once shared a uid
# with: it could SIGSTOP the sandbox's init (every command then timed out).
@test "as root: a host process as nobody cannot signal a running sandbox's processes, SIGSTOP included" {
	sleeping root 3177
	local probe p
	probe=$(neighbour 65534 "$cmd" "$init")
	stop_stage
	for p in "$cmd" "$init"; do
		grep -q "^$p kill=EPERM stop=EPERM " <<<"$probe" || { echo "$probe"; return 1; }
	done
	nothing_left
}

# It cannot trace either: a process in another user namespace may be traced
# only with CAP_SYS_PTRACE over it, and nobody holds none over a namespace
# root made (kernel/ptrace.c, security/commoncap.c cap_ptrace_access_check).
@test "as root: a host process as nobody can neither trace nor read a sandbox's processes, nor reach its staging copy" {
	sleeping root 3178
	local probe p
	probe=$(neighbour 65534 --fds "$spid" "$cmd" "$init")
	stop_stage
	for p in "$cmd" "$init"; do
		grep -q "^$p .* seize=EPERM attach=EPERM mem=EACCES environ=EACCES root=EACCES write=EACCES$" <<<"$probe" ||
			{ echo "$probe"; return 1; }
	done
	grep -qx 'fds=EACCES' <<<"$probe" || { echo "$probe"; return 1; }
	nothing_left
}

# A process of one sandbox cannot even name another's processes (each has
# a PID namespace of its own); what could reach them is a host uid in
# common. Each sandbox has its own: a process with one's ids, on the host,
# gets nowhere with the other.
@test "as root: two concurrent sandboxes have host ids of their own: neither can signal, trace or read the other" {
	sleeping root 3179
	local spid_a=$spid cmd_a=$cmd init_a=$init
	sleeping root 3180
	local spid_b=$spid cmd_b=$cmd init_b=$init ids uid_a uid_b probe_ab probe_ba probe
	# each sandbox's init and command run as one uid and gid, the same number
	ids=$(stat -c %u:%g /proc/"$cmd_a" /proc/"$init_a" /proc/"$cmd_b" /proc/"$init_b" | tr '\n' ' ')
	uid_a=$(stat -c %u /proc/"$cmd_a") uid_b=$(stat -c %u /proc/"$cmd_b")
	probe_ab=$(neighbour "$uid_a" "$cmd_b" "$init_b")
	probe_ba=$(neighbour "$uid_b" "$cmd_a" "$init_a")
	spid=$spid_a stop_stage
	spid=$spid_b stop_stage
	[ "$ids" = "$uid_a:$uid_a $uid_a:$uid_a $uid_b:$uid_b $uid_b:$uid_b " ] || { echo "ids: $ids"; return 1; }
	[ "$uid_a" != "$uid_b" ] || { echo "both sandboxes are uid $uid_a"; return 1; }
	if cut -d: -f3 /etc/passwd | grep -qx -e "$uid_a" -e "$uid_b"; then echo "$ids: a uid of /etc/passwd"; return 1; fi
	for probe in "$probe_ab" "$probe_ba"; do
		[ "$(grep -c '^[0-9]* kill=EPERM stop=EPERM seize=EPERM attach=EPERM mem=EACCES environ=EACCES root=EACCES write=EACCES$' <<<"$probe")" = 2 ] ||
			{ echo "$probe"; return 1; }
	done
	nothing_left
}

# Unprivileged, the user's own uid is the only one the kernel lets it map
# (user_namespaces(7)): its other processes are the sandbox's peers, and as
# owner of the sandbox's user namespace they hold every capability over it
# (sfma-exec(1), THREAT BOUNDARY). Other users' processes get nowhere.
@test "unprivileged: a process of the same user can signal, trace and read the sandbox; another user's cannot" {
	sleeping nobody 3181
	local same other p
	same=$(neighbour 65534 --fds "$spid" "$cmd" "$init")
	other=$(neighbour 12345 --fds "$spid" "$cmd" "$init")
	stop_stage
	for p in "$cmd" "$init"; do
		grep -qx "$p kill=ok stop=ok seize=ok attach=ok mem=ok environ=ok root=ok write=ok" <<<"$same" ||
			{ echo "$same"; return 1; }
		grep -qx "$p kill=EPERM stop=EPERM seize=EPERM attach=EPERM mem=EACCES environ=EACCES root=EACCES write=EACCES" <<<"$other" ||
			{ echo "$other"; return 1; }
	done
	grep -qx 'fds=ok' <<<"$same" && grep -qx 'fds=EACCES' <<<"$other" || { echo "$same"; echo "$other"; return 1; }
	nothing_left
}
