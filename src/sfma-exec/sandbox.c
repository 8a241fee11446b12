/* sandbox.c - run one allowed command in fresh namespaces (sfma-exec(1)),
 * written directly against the kernel.
 *
 * Three processes: this stage; the sandbox init (PID 1 of a new PID
 * namespace, also the owner of new user, mount, network, IPC, UTS and time
 * namespaces), which builds the new root and then waits; and the command,
 * forked by init, which drops everything and execs. When init exits the
 * kernel kills every process left in its PID namespace (pid_namespaces(7)),
 * so "kill init" is how a timeout ends daemonized grandchildren too (setsid
 * escapes a process group, never a PID namespace).
 *
 * A sandbox is prepared ahead of its command: everything that does not
 * depend on the command (namespaces, id maps, cgroup, the new root and its
 * mounts, pivot_root, dropping init's capabilities) is done while the
 * model thinks - when the stage starts and right after each command's
 * reply - and the command pays only for the staging copy, its own last
 * steps, exec and the copy back. A network namespace alone costs half a
 * millisecond to make (and more to take down), and moving a process into
 * a cgroup v1 hierarchy waits for an RCU grace period, milliseconds after
 * an idle moment: the writer of cgroup.procs takes cgroup_threadgroup_rwsem,
 * a percpu_rw_semaphore, for writing, and its rcu_sync_enter waits for one
 * (kernel/cgroup/cgroup.c cgroup_attach_lock, kernel/rcu/sync.c). Each
 * sandbox serves one command and is never reused; one that is never used
 * is killed at exit.
 *
 * Nothing of a command lives in the host's file system. init mounts, in
 * its own mount namespace, the tmpfs that becomes the new root and the
 * staging tmpfs that becomes /workspace, and hands this stage a directory
 * descriptor of the latter over the report socket (SCM_RIGHTS, unix(7)).
 * Through it the stage fills the staging copy before the command starts
 * and copies the declared outputs back after it ended. A mount lives as
 * long as a namespace or an open file refers to it (umount2(2) MNT_DETACH
 * semantics; mount_namespaces(7): a namespace's mounts go with its last
 * process): once init is gone and the stage closes the descriptor, the
 * kernel frees the whole tree, however deep or large, and the same
 * happens when the stage itself is killed with SIGKILL.
 *
 * Order, as STYLE and bubblewrap fix it: no-new-privileges (main) ->
 * validate everything (seccomp filters compiled, groups shed, host ids
 * leased) -> clone -> setgroups deny and id maps, cgroup placement (by the
 * stage) -> time namespace -> make / private -> tmpfs root and staging
 * tmpfs -> binds, every runtime mount read-only -> pivot_root, detach the
 * old root -> drop capabilities -> [ready] -> [fork the command's
 * process] -> death signal (again after each fork and credential change)
 * -> close stray fds -> rlimits but CPU and address space -> seccomp (its
 * listener handed to the stage) -> [wait for the command; the stage fills
 * the staging copy, then sends it] -> CPU and address-space rlimits ->
 * execve. */
#include "exec.h"
#include "staging.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "errors.h"
#include "ndjson.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef SECBIT_NOROOT
#define SECBIT_NOROOT                 (1 << 0)
#define SECBIT_NOROOT_LOCKED          (1 << 1)
#define SECBIT_NO_SETUID_FIXUP        (1 << 2)
#define SECBIT_NO_SETUID_FIXUP_LOCKED (1 << 3)
#define SECBIT_KEEP_CAPS_LOCKED       (1 << 5)
#define SECBIT_NO_CAP_AMBIENT_RAISE        (1 << 6)
#define SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED (1 << 7)
#endif

/* What init tells the stage over the report socket: a failed isolation
 * step (step named, err its errno), the staging descriptor (step
 * "staging", with the descriptor attached), or the command's end (step
 * empty, err its exit code). */
struct step_report {
	char step[48];
	int err;
};

/* What the stage sends a ready init for its command, on the go pipe: the
 * CPU seconds, then argc NUL-terminated arguments, bytes long in all. */
struct run_request {
	long cpu_s;
	uint32_t argc;
	uint32_t bytes;
};

/* Where init mounts the new root, in its own mount namespace only: any
 * directory of the host will do, as bubblewrap uses /tmp (its base_path);
 * the host never sees the mount (the tree was made private first). */
#define NEW_ROOT "/tmp"

/* Fixed and non-secret: nothing of the runner's environment is inherited. */
static char *const command_env[] = {
	"PATH=/usr/bin:/bin", "HOME=/workspace", "TMPDIR=/tmp", "LANG=C.UTF-8", NULL,
};

/* The read-only runtime: the host's /usr and the usual links or
 * directories beside it. /etc is not among them: the host's users,
 * hostnames and configuration stay out. */
static const char *const runtime_dirs[] = {
	"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", NULL,
};

static const char *const device_nodes[] = {"null", "zero", "full", "random", "urandom", NULL};

/* ---- inside the sandbox ---- */

static _Noreturn void fail_step(int report_fd, const char *step)
{
	struct step_report r = {.err = errno};
	snprintf(r.step, sizeof r.step, "%s", step);
	ssize_t w = write(report_fd, &r, sizeof r);
	(void)w;
	_exit(127);
}

struct mount_entry {
	int id, parent;
	int noexec;
	int marked;             /* at or below a runtime bind */
	char *point;
};

/* The mount table of our namespace as proc(5) /proc/self/mountinfo shows
 * it: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ...". Returns the count,
 * or -1 (errno set). */
static int read_mounts(struct mount_entry **out)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -1;
	struct mount_entry *list = NULL;
	size_t n = 0, cap = 0;
	char *line = NULL;
	size_t len = 0;
	while (getline(&line, &len, f) > 0) {
		char *save = NULL, *id = strtok_r(line, " ", &save), *parent = strtok_r(NULL, " ", &save);
		char *dev = strtok_r(NULL, " ", &save), *root = strtok_r(NULL, " ", &save);
		char *point = strtok_r(NULL, " ", &save), *opts = strtok_r(NULL, " ", &save);
		if (!id || !parent || !dev || !root || !point || !opts)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			list = xrealloc(list, cap * sizeof *list);
		}
		mountinfo_unescape(point);
		list[n] = (struct mount_entry){.id = atoi(id), .parent = atoi(parent),
		                               .point = xstrdup(point)};
		for (char *o, *os = NULL, *p = opts; (o = strtok_r(p, ",", &os)); p = NULL)
			list[n].noexec |= strcmp(o, "noexec") == 0;
		n++;
	}
	free(line);
	int failed = ferror(f);
	fclose(f);
	if (failed) {
		errno = EIO;
		return -1;
	}
	*out = list;
	return (int)n;
}

/* Make every mount at or below the runtime binds read-only.
 *
 * A bind mount ignores MS_RDONLY until it is remounted, and a remount
 * without MS_REC changes that one mount only, while MS_BIND|MS_REC copied
 * the whole subtree: a tmpfs or a writable disk mounted below /usr on the
 * host would stay writable inside (mount(2), "Creating a bind mount" and
 * "Changing the mount flags"). So each mount of the copied subtrees is
 * remounted, found through the mount table by parent ID, as bubblewrap's
 * bind_mount() does. Inside a user namespace a remount must keep the
 * flags the kernel locked when the mounts were copied into it (nosuid,
 * nodev, noexec, the atime flags, ro), or it fails with EPERM
 * (mount_namespaces(7), "Restrictions on mount namespaces"; the locks
 * came with CVE-2014-5206 and CVE-2014-5207, Linux 3.17): noexec is kept
 * from the table, nosuid and nodev are wanted anyway, and without an atime
 * flag a remount keeps the current one (Linux 4.1, commit ffbc6f0ead47).
 * A remount fails with EPERM where a lock would be broken, so nothing is
 * silently left writable. The last mount
 * at a mount point is the top one, which is ours; a host mount hidden
 * under NEW_ROOT at the same path is not a descendant and is left alone. */
static void remount_runtime_ro(int report, unsigned bound)
{
	/* The table names mount points by their real path, which is where
	 * the working directory (the new root) really is: NEW_ROOT may be a
	 * symlink. */
	char here[4096];
	if (!getcwd(here, sizeof here))
		fail_step(report, "find the new root");
	struct mount_entry *m = NULL;
	int n = read_mounts(&m);
	if (n < 0)
		fail_step(report, "read the mount table");
	for (size_t d = 0; runtime_dirs[d]; d++) {
		if (!(bound & (1u << d)))
			continue;
		char point[4200];
		snprintf(point, sizeof point, "%s/%s", strcmp(here, "/") ? here : "", runtime_dirs[d]);
		int top = -1;
		for (int i = 0; i < n; i++)
			if (strcmp(m[i].point, point) == 0)
				top = i;
		/* A bind that is not in the table would stay writable: refuse. */
		if (top < 0) {
			errno = ENOENT;
			fail_step(report, "find a runtime mount");
		}
		m[top].marked = 1;
	}
	/* Descendants of a marked mount, until nothing changes (the table is
	 * not ordered parent first). */
	for (int changed = 1; changed;) {
		changed = 0;
		for (int i = 0; i < n; i++) {
			if (m[i].marked)
				continue;
			for (int j = 0; j < n; j++) {
				if (m[j].marked && m[j].id == m[i].parent) {
					m[i].marked = changed = 1;
					break;
				}
			}
		}
	}
	for (int i = 0; i < n; i++) {
		if (!m[i].marked)
			continue;
		unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV |
		                      (m[i].noexec ? MS_NOEXEC : 0);
		/* A mount point the contained ids cannot reach (a directory of
		 * the host they may not search, in which init, uid 0 of a
		 * namespace mapping nobody of the host's ids, has no rights
		 * either) cannot be remounted, and cannot be reached by the
		 * command: skipped, as bubblewrap skips it. */
		if (mount(NULL, m[i].point, NULL, flags, NULL) < 0 && errno != EACCES)
			fail_step(report, "remount runtime read-only");
	}
	for (int i = 0; i < n; i++)
		free(m[i].point);
	free(m);
}

/* Populate the new root; the working directory is its top. */
static void build_root(int report)
{
	unsigned bound = 0; /* runtime_dirs bound, by index */
	for (size_t i = 0; runtime_dirs[i]; i++) {
		char host[32], target[256];
		snprintf(host, sizeof host, "/%s", runtime_dirs[i]);
		struct stat sb;
		if (lstat(host, &sb) < 0)
			continue;
		if (S_ISLNK(sb.st_mode)) {
			/* "/bin -> usr/bin": the same relative link in the new root. */
			ssize_t n = readlink(host, target, sizeof target - 1);
			if (n < 0)
				fail_step(report, "runtime link");
			target[n] = '\0';
			if (symlink(target, runtime_dirs[i]) < 0)
				fail_step(report, "runtime link");
		} else if (S_ISDIR(sb.st_mode)) {
			if (mkdir(runtime_dirs[i], 0755) < 0 ||
			    mount(host, runtime_dirs[i], NULL, MS_BIND | MS_REC, NULL) < 0)
				fail_step(report, "bind runtime");
			bound |= 1u << i;
		}
	}
	remount_runtime_ro(report, bound);
	/* A minimal /dev: bind the few harmless host nodes onto empty files
	 * (mknod is not allowed in a user namespace, user_namespaces(7), and a
	 * tmpfs mounted there is nodev anyway). No tty: TIOCSTI needs one. No
	 * /dev/shm: POSIX shared memory has no place to live. */
	if (mkdir("dev", 0755) < 0)
		fail_step(report, "mkdir /dev");
	for (size_t i = 0; device_nodes[i]; i++) {
		char host[32], here[32];
		snprintf(host, sizeof host, "/dev/%s", device_nodes[i]);
		snprintf(here, sizeof here, "dev/%s", device_nodes[i]);
		int fd = open(here, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd < 0)
			fail_step(report, "create device node");
		close(fd);
		if (mount(host, here, NULL, MS_BIND, NULL) < 0)
			fail_step(report, "bind device node");
	}
	if (symlink("/proc/self/fd", "dev/fd") < 0)
		fail_step(report, "create /dev/fd");
	/* A private, size-capped /tmp: its pages are memory, so it is a
	 * ceiling too (tmpfs(5) size=, nr_inodes=). */
	char opts[96];
	snprintf(opts, sizeof opts, "mode=1777,size=%llu,nr_inodes=%u",
	         (unsigned long long)LIMIT_TMP_BYTES, LIMIT_TMP_INODES);
	if (mkdir("tmp", 01777) < 0 ||
	    mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		fail_step(report, "mount private /tmp");
}

/* A command's RLIMIT_MSGQUEUE: LIMIT_MSGQUEUE_BYTES, or the stage's own
 * hard limit where that is lower (raising one takes CAP_SYS_RESOURCE,
 * setrlimit(2), which even root may lack). The command inherits the
 * stage's limits through init, so both compute the same. */
static rlim_t msgqueue_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_MSGQUEUE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
	    rl.rlim_max < LIMIT_MSGQUEUE_BYTES)
		return rl.rlim_max;
	return LIMIT_MSGQUEUE_BYTES;
}

/* Hand the stage a descriptor over the report socket (SCM_RIGHTS,
 * unix(7)), in a report named step. */
static int send_fd(int report, const char *step, int fd)
{
	struct step_report r = {.err = 0};
	snprintf(r.step, sizeof r.step, "%s", step);
	struct iovec iov = {.iov_base = &r, .iov_len = sizeof r};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
	                     .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof fd);
	return sendmsg(report, &msg, MSG_NOSIGNAL) == (ssize_t)sizeof r ? 0 : -1;
}

static int read_full(int fd, void *p, size_t n)
{
	char *at = p;
	while (n > 0) {
		ssize_t got = read(fd, at, n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return -1;
		at += got;
		n -= (size_t)got;
	}
	return 0;
}

/* Wait for the stage's next go byte; its end of the pipe closing means it
 * gave up (or died), and so does the sandbox. */
static char await_go(int go)
{
	char byte;
	if (read_full(go, &byte, 1) < 0)
		_exit(127);
	return byte;
}

/* Wait for the command (struct run_request, then its arguments). The
 * stage closing the pipe instead means no command comes: the prepared
 * sandbox ends unused, and so does anything malformed. */
static char **await_request(int go, long *cpu_s)
{
	struct run_request rq;
	if (read_full(go, &rq, sizeof rq) < 0 || rq.argc == 0 || rq.argc > rq.bytes ||
	    rq.bytes > NDJSON_DEFAULT_MAX || rq.cpu_s < 1)
		_exit(0);
	char *text = malloc(rq.bytes);
	char **argv = malloc(((size_t)rq.argc + 1) * sizeof *argv);
	if (!text || !argv || read_full(go, text, rq.bytes) < 0 || text[rq.bytes - 1] != '\0')
		_exit(127);
	size_t k = 0;
	char *p = text;
	for (; p < text + rq.bytes && k < rq.argc; p += strlen(p) + 1)
		argv[k++] = p;
	if (k != rq.argc || p != text + rq.bytes)
		_exit(127);
	argv[k] = NULL;
	*cpu_s = rq.cpu_s;
	return argv; /* the command's until its execve */
}

/* One resource limit to set, named for the step a failure reports. */
struct limit {
	int res;
	rlim_t soft, hard;
	const char *what;
};

static void set_limits(int report, const struct limit *l, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct rlimit rl = {l[i].soft, l[i].hard};
		if (setrlimit(l[i].res, &rl) < 0)
			fail_step(report, l[i].what);
	}
}

/* The command's process: forked by init once the sandbox is ready, it
 * takes every step that does not depend on the command (its session,
 * credentials, descriptors, most limits, the seccomp filter) before the
 * command comes, then waits for it on the go pipe, sets the two limits
 * that depend on it and execs. Never returns. Signal dispositions and the
 * signal mask come from init, which reset them all while preparing. */
static _Noreturn void exec_command(int go, int out, int err, int report, int refuse_shm,
                                   const struct command_limits *lim)
{
	/* A new session: no controlling terminal, so no TIOCSTI target. */
	if (setsid() < 0)
		fail_step(report, "setsid");
	if (chdir("/workspace") < 0)
		fail_step(report, "chdir /workspace");

	/* init dropped every capability before this fork, and fork copies
	 * credentials, securebits and the bounding set (capabilities(7)). The
	 * current sets are emptied once more in this process, which needs no
	 * privilege, so that whatever init held, nothing reaches execve. */
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct none[2] = {{0, 0, 0}, {0, 0, 0}};
	if (syscall(SYS_capset, &hdr, none) < 0)
		fail_step(report, "drop capabilities");
	/* no-new-privileges was set by main() and is inherited across fork,
	 * clone and execve (prctl(2) PR_SET_NO_NEW_PRIVS); the seccomp filter
	 * needs it now that no capability is left (seccomp(2)). */
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
		fail_step(report, "no-new-privileges");

	/* Death signal. PR_SET_PDEATHSIG is cleared by fork (prctl(2)): set it
	 * again. init is the parent here, and init's own death ends the
	 * namespace anyway. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		fail_step(report, "death signal");

	/* Close stray descriptors: every one but the standard three closes at
	 * execve; the report socket stays usable until then and its closing
	 * tells the stage the exec happened. */
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		fail_step(report, "standard descriptors");
	/* While it waits for the command it holds only what it uses: the
	 * standard three, the go pipe and the report socket. */
	close(null);
	close(out);
	close(err);
	if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) < 0)
		fail_step(report, "close stray descriptors");

	/* Ceilings. RLIMIT_NPROC counts processes of the real user: that is
	 * why the command is never host uid 0, which is exempt from it
	 * (setrlimit(2)). RLIMIT_MSGQUEUE bounds the bytes all POSIX message
	 * queues of a user may reserve, counted per user of each user
	 * namespace (since Linux 5.14; per host user before) and checked at
	 * mq_open(3) against the opener's limit (ipc/mqueue.c
	 * mqueue_get_inode, kernel/ucount.c inc_rlimit_ucounts), which no
	 * process of the sandbox can raise: that takes CAP_SYS_RESOURCE in
	 * the initial user namespace (kernel/sys.c do_prlimit). RLIMIT_AS is
	 * last: nothing after it allocates (the seccomp filters are
	 * prebuilt). RLIMIT_CPU sends SIGXCPU at the soft limit and SIGKILL
	 * at the hard one (setrlimit(2)). The figures are the manifest's
	 * limits (memoryBytes, fileSizeBytes, processes), or the maxima.
	 * RLIMIT_CPU waits for the command, which brings its figure, and
	 * RLIMIT_AS for the allocation that reads it. */
	struct limit rlim[] = {
		{RLIMIT_CORE, 0, 0, "RLIMIT_CORE"},
		{RLIMIT_FSIZE, (rlim_t)lim->file_size_bytes, (rlim_t)lim->file_size_bytes, "RLIMIT_FSIZE"},
		{RLIMIT_NOFILE, LIMIT_NOFILE, LIMIT_NOFILE, "RLIMIT_NOFILE"},
		{RLIMIT_NPROC, (rlim_t)lim->processes, (rlim_t)lim->processes, "RLIMIT_NPROC"},
		{RLIMIT_MSGQUEUE, msgqueue_limit(), msgqueue_limit(), "RLIMIT_MSGQUEUE"},
		{RLIMIT_CPU, 0, 0, "RLIMIT_CPU"},
		{RLIMIT_AS, (rlim_t)lim->memory_bytes, (rlim_t)lim->memory_bytes, "RLIMIT_AS"},
	};
	/* All but the last two (CPU, address space) before the command comes. */
	const size_t all = sizeof rlim / sizeof rlim[0], early = all - 2;
	set_limits(report, rlim, early);
	/* seccomp before the command comes: the filter refuses what init
	 * needed for the steps before (mount, umount2, pivot_root), and
	 * nothing after it runs but the hand-over of its listener, the read of
	 * the command, two setrlimit(2) calls that only lower limits, and
	 * execve. The stage answers sysinfo (notify.c) and gets the listener
	 * over the report socket. Should that fail, the listener's last copy
	 * closes here, and every call that would wait on it fails with ENOSYS
	 * instead (kernel/seccomp.c seccomp_notify_detach). */
	int listener = seccomp_install(refuse_shm);
	if (listener == -1)
		fail_step(report, "seccomp");
	if (listener >= 0) {
		(void)send_fd(report, "sysinfo", listener);
		close(listener); /* the stage's now: no reason to hold it */
	}

	long cpu_s = 0;
	char **argv = await_request(go, &cpu_s);
	rlim[early].soft = (rlim_t)cpu_s;
	rlim[early].hard = (rlim_t)cpu_s + 1;
	set_limits(report, rlim + early, all - early);

	/* No execvp: on ENOEXEC it would hand the file to /bin/sh. */
	static const char *const dirs[] = {"/usr/bin/", "/bin/"};
	int saved = ENOENT;
	for (size_t i = 0; i < 2; i++) {
		char path[4096];
		if ((size_t)snprintf(path, sizeof path, "%s%s", dirs[i], argv[0]) >= sizeof path)
			break;
		execve(path, argv, command_env);
		if (errno != ENOENT)
			saved = errno;
	}
	char msg[512];
	int n = snprintf(msg, sizeof msg, "%s: %s\n", argv[0],
	                 saved == ENOENT ? "command not found" : strerror(saved));
	ssize_t w = write(2, msg, (size_t)n);
	(void)w;
	_exit(saved == ENOENT ? 127 : 126);
}

/* Drop every capability of init, and with it of the command it forks.
 * The command is uid 0 of its user namespace: lock root's special
 * treatment away (SECBIT_NOROOT: execve grants no capabilities to uid 0,
 * capabilities(7) "The securebits flags"), empty the bounding set, the
 * ambient and the current sets. init needs none afterwards: it forks,
 * waits and signals only processes of its own uid (kill(2)). */
static void drop_capabilities(int report)
{
	if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
	          SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
	          SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) < 0)
		fail_step(report, "securebits");
	/* Capabilities are numbered densely from 0 to CAP_LAST_CAP
	 * (capabilities(7), /proc/sys/kernel/cap_last_cap): the first one the
	 * kernel does not know (EINVAL) ends the set. */
	for (int cap = 0; cap < 64; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
			continue;
		if (errno == EINVAL && cap > 0)
			break;
		fail_step(report, "drop capability bounding set");
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		fail_step(report, "clear ambient capabilities");
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct none[2] = {{0, 0, 0}, {0, 0, 0}};
	if (syscall(SYS_capset, &hdr, none) < 0)
		fail_step(report, "drop capabilities");
}

/* init was cloned from the stage, descriptor table and all (clone(2)
 * without CLONE_FILES copies it): it would keep the host workspace and the
 * stage's stdin and stdout open for as long as it waits for a command.
 * Keep only its four channels, as descriptors 3..6; stdin and stdout
 * become /dev/null, stderr stays (the sanitizers report there). */
static void keep_channels(int *go, int *out, int *err, int *report)
{
	int *keep[4] = {go, out, err, report}, high[4];
	for (int i = 0; i < 4; i++)
		if ((high[i] = fcntl(*keep[i], F_DUPFD_CLOEXEC, 7)) < 0)
			fail_step(*report, "keep descriptors");
	for (int i = 0; i < 4; i++) {
		if (dup3(high[i], 3 + i, O_CLOEXEC) < 0)
			fail_step(high[3], "keep descriptors");
		*keep[i] = 3 + i;
	}
	if (syscall(SYS_close_range, 7u, ~0u, 0u) < 0)
		fail_step(*report, "close stray descriptors");
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0)
		fail_step(*report, "keep descriptors");
	close(null);
}

/* A time namespace of the sandbox's own, in which CLOCK_MONOTONIC and
 * CLOCK_BOOTTIME start at 0: a command sees how long its sandbox has
 * existed, not how long the host has (time_namespaces(7)). clone(2)
 * cannot take CLONE_NEWTIME (its bit lies in the exit signal's, CSIGNAL),
 * and unshare(2) moves the caller's future children, not the caller, into
 * the new namespace; its offsets can be written only until a process is
 * in it (kernel/time/namespace.c proc_timens_set_offset, frozen_offsets).
 * So init writes them first and then joins it itself with setns(2), and
 * the command's process, its child, is born in it (a child that shared
 * init's memory, CLONE_VM, would instead move only at its execve on
 * recent kernels: kernel/nsproxy.c copy_namespaces, fs/exec.c
 * exec_task_namespaces). Runs while
 * init is still host root: /proc/self belongs to the owner of a dumpable
 * process, and the switch to the mapped ids makes init undumpable (a
 * change of effective uid; kernel/cred.c commit_creds), its /proc/self
 * then host root's (fs/proc/base.c task_dump_owner). */
static void enter_time_namespace(int report)
{
	if (unshare(CLONE_NEWTIME) < 0)
		fail_step(report, "time namespace");
	struct timespec mono, boot;
	if (clock_gettime(CLOCK_MONOTONIC, &mono) < 0 || clock_gettime(CLOCK_BOOTTIME, &boot) < 0)
		fail_step(report, "time namespace offsets");
	char text[96];
	int n = snprintf(text, sizeof text, "monotonic %lld 0\nboottime %lld 0\n",
	                 -(long long)mono.tv_sec, -(long long)boot.tv_sec);
	int fd = open("/proc/self/timens_offsets", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, text, (size_t)n) != n)
		fail_step(report, "time namespace offsets");
	close(fd);
	int ns = open("/proc/self/ns/time_for_children", O_RDONLY | O_CLOEXEC);
	if (ns < 0 || setns(ns, CLONE_NEWTIME) < 0)
		fail_step(report, "enter time namespace");
	close(ns);
}

/* PID 1 of the sandbox. It prepares everything that does not depend on
 * the command, reports ready, and only then waits for one. */
static _Noreturn void sandbox_init(int go, int out, int err, int report, const struct command_limits *lim)
{
	keep_channels(&go, &out, &err, &report);
	/* The stage's handlers and ignored signals were copied by clone: back
	 * to the defaults, for init and the command it forks (an ignored
	 * signal survives execve, signal(7)). Without a handler, PID 1 of a
	 * namespace gets no signal from the ancestor namespace but SIGKILL
	 * and SIGSTOP (pid_namespaces(7)), so a ^C to the stage's process
	 * group ends the stage alone, and the death signal below the rest. */
	sigset_t all;
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	/* Die with the stage. Set before waiting for the id maps... */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		fail_step(report, "death signal");
	/* The first go: id maps written, cgroup entered; it says which
	 * seccomp filter the command gets. */
	int refuse_shm = await_go(go) == 'S';
	enter_time_namespace(report);
	/* Become uid/gid 0 of the new namespace, i.e. the unprivileged host
	 * ids just mapped. Until now this process was host root outside any
	 * mapping. */
	if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		fail_step(report, "switch to the mapped ids");
	/* ...and again: a change of the effective ids clears the death signal
	 * (prctl(2)). If the stage died in between, its end of the go pipe is
	 * closed. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		fail_step(report, "death signal");
	struct pollfd pf = {.fd = go, .events = POLLIN};
	if (poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLERR)))
		_exit(127);

	/* Nothing mounted here may propagate back to the host: a new mount
	 * namespace copies the shared propagation of the old one
	 * (mount_namespaces(7), "Shared subtrees"). */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fail_step(report, "make / private");
	/* The new root: a small, size-capped tmpfs, writable and disposable
	 * like everything else here (bubblewrap mounts a tmpfs as its root
	 * too), so a program writing beside its working directory works and
	 * the write goes nowhere. */
	char opts[96];
	snprintf(opts, sizeof opts, "mode=0755,size=%llu,nr_inodes=%u",
	         (unsigned long long)LIMIT_ROOT_BYTES, LIMIT_ROOT_INODES);
	if (mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		fail_step(report, "mount tmpfs root");
	if (chdir(NEW_ROOT) < 0)
		fail_step(report, "chdir new root");
	/* The staging tmpfs, the command's /workspace. It is a ceiling too:
	 * all a command writes there counts against its size
	 * (limits.workspaceBytes). */
	snprintf(opts, sizeof opts, "mode=0755,size=%llu,nr_inodes=%u",
	         (unsigned long long)lim->workspace_bytes, LIMIT_WORKSPACE_INODES);
	if (mkdir("workspace", 0755) < 0 ||
	    mount("tmpfs", "workspace", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		fail_step(report, "mount staging tmpfs");

	build_root(report);
	/* pivot_root(".", "."): the old root is stacked under the new one and
	 * detached at once, so no path to the host tree remains (pivot_root(2),
	 * NOTES: new_root and put_old may be the same directory). */
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		fail_step(report, "pivot_root");
	if (umount2(".", MNT_DETACH) < 0)
		fail_step(report, "detach old root");
	if (chdir("/") < 0)
		fail_step(report, "chdir /");
	if (sethostname("sfma", 4) < 0)
		fail_step(report, "sethostname");
	/* The new network namespace holds only a loopback that stays down: no
	 * route anywhere, not even to the host's 127.0.0.1
	 * (network_namespaces(7)). */
	drop_capabilities(report);

	/* Ready: the stage gets the staging directory and fills it once a
	 * command comes; nothing of that command is known before. */
	int ws = open("/workspace", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (ws < 0 || send_fd(report, "staging", ws) < 0)
		fail_step(report, "pass the staging directory");
	close(ws);

	/* The command's process is forked now, after the ready report (the
	 * stage reads that first), and takes its own steps while the model
	 * thinks; the command itself comes to it, not to init, which from
	 * here on only waits. fork, not vfork: the child runs on its own and
	 * allocates, which a vfork child sharing init's memory must not. */
	pid_t cmd = fork();
	if (cmd < 0)
		fail_step(report, "fork command");
	if (cmd == 0)
		exec_command(go, out, err, report, refuse_shm, lim);
	close(out);
	close(err);
	int code = -1;
	for (;;) {
		int status;
		pid_t p = waitpid(-1, &status, 0);
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			break; /* ECHILD: nobody is left */
		if (p == cmd) {
			code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
			/* The command is done: so is everything it left behind. */
			kill(-1, SIGKILL);
		}
		/* Orphans reparented to init are reaped here. */
	}
	/* Tell the stage the outcome now that no process but this one is
	 * left: nothing changes the staging copy any more, so it can copy
	 * back and answer. (A command process that died before the command
	 * came left its failed step in the socket first.) */
	struct step_report outcome = {.step = "", .err = code};
	ssize_t w = write(report, &outcome, sizeof outcome);
	(void)w;
	/* The namespaces go when init exits, and taking them down is work for
	 * the kernel (a network namespace above all): the stage lets init go
	 * (closes the go pipe) once its reply is out. */
	char byte;
	while (read(go, &byte, 1) < 0 && errno == EINTR)
		;
	_exit(code < 0 ? 127 : code);
}

/* ---- in the stage ---- */

static int write_file(pid_t pid, const char *name, const char *text)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, strlen(text));
	int saved = errno;
	close(fd);
	errno = saved;
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* Map uid/gid 0 inside to the chosen host ids. setgroups is denied first:
 * required before an unprivileged writer may write gid_map (Linux 3.19,
 * CVE-2014-8989; user_namespaces(7)), and it keeps the contained process
 * from dropping a group that denies it access. */
static const char *write_id_maps(pid_t pid, unsigned uid, unsigned gid)
{
	char map[64];
	if (write_file(pid, "setgroups", "deny") < 0)
		return "setgroups deny";
	snprintf(map, sizeof map, "0 %u 1\n", uid);
	if (write_file(pid, "uid_map", map) < 0)
		return "uid_map";
	snprintf(map, sizeof map, "0 %u 1\n", gid);
	if (write_file(pid, "gid_map", map) < 0)
		return "gid_map";
	return NULL;
}

/* Keep the first cap bytes of a stream (limits.outputBytes), count and
 * discard the rest: a command writing gigabytes costs this stage a fixed
 * 64 KiB. */
static int pump(int fd, struct buf *keep, size_t cap, uint64_t *total)
{
	char chunk[65536];
	ssize_t n = read(fd, chunk, sizeof chunk);
	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 1 : 0;
	if (n == 0)
		return 0;
	if (keep->len < cap) {
		size_t room = cap - keep->len;
		buf_add(keep, chunk, (size_t)n < room ? (size_t)n : room);
	}
	*total += (uint64_t)n;
	return 1;
}

static void unavailable(struct run_outcome *o, const char *step, int err)
{
	struct buf b = {0};
	buf_printf(&b, "secure command sandbox unavailable: %s: %s", step, strerror(err));
	/* clone fails with ENOSPC when a user namespace over the limit would
	 * be made, counted per user and per ancestor namespace (Linux 4.9;
	 * user_namespaces(7), namespaces(7) /proc/sys/user). */
	if (strcmp(step, "clone namespaces") == 0 && err == ENOSPC)
		buf_adds(&b, " (the limit of user namespaces is reached: "
		             "see sysctl user.max_user_namespaces)");
	else if (strcmp(step, "lease host ids") == 0 && err == EAGAIN)
		buf_adds(&b, " (every id of the range is in use: see SFMA_EXEC_UIDS)");
	free(o->unavailable);
	o->unavailable = b.p;
}

/* The limits in force, as each command's record says them. */
static json_t *limits_json(long long timeout_ms, long cpu_s, const struct command_limits *lim)
{
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:n,s:s}",
	                 "timeoutMs", (json_int_t)timeout_ms,
	                 "cpuSeconds", (json_int_t)cpu_s,
	                 "addressSpaceBytes", (json_int_t)lim->memory_bytes,
	                 "fileSizeBytes", (json_int_t)lim->file_size_bytes,
	                 "openFiles", (json_int_t)LIMIT_NOFILE,
	                 "processes", (json_int_t)lim->processes,
	                 "messageQueueBytes", (json_int_t)msgqueue_limit(),
	                 "coreBytes", (json_int_t)0,
	                 "tmpBytes", (json_int_t)LIMIT_TMP_BYTES,
	                 "rootBytes", (json_int_t)LIMIT_ROOT_BYTES,
	                 "workspaceBytes", (json_int_t)lim->workspace_bytes,
	                 "outputBytes", (json_int_t)lim->output_bytes,
	                 "copyBackBytes", (json_int_t)COPY_BACK_MAX,
	                 "sharedMemory", "refused",
	                 "cgroup", "cgroupReason", "sandbox not started");
}

/* One sandbox, from its clone to its release. Each serves exactly one
 * command: prepared ahead (ready), then running it, then done (the
 * command and all it started are gone; init waits to be let go). */
struct sandbox {
	pid_t pid;              /* its init, or -1 */
	int pidfd;              /* -1: none (kernel < 5.3, valgrind) */
	int go;                 /* go bytes, then the request; its closing ends init */
	int out, err;           /* the command's stdout and stderr */
	int rep;                /* init's reports */
	int staging;            /* the staging directory, once init is ready */
	int listener;           /* the command's sysinfo calls, once it has one */
	struct id_lease ids;    /* its host ids */
	int64_t born_ns;        /* CLOCK_BOOTTIME when it was made */
	int answers_sysinfo;    /* the command handed the stage its listener */
	struct cgroup_box *cg;
	json_t *cgroup, *cgroup_reason; /* the ceilings in force, for limits */
	int refuse_shm;
	const char *step;       /* the step that failed, if one did */
	int step_err;
	char step_buf[48];      /* a step init reported */
};

#define SANDBOX_NONE {.pid = -1, .pidfd = -1, .go = -1, .out = -1, .err = -1, .rep = -1, \
                      .staging = -1, .listener = -1, .ids = {.fd = -1}}

/* The signal handler reads their pids. */
static struct sandbox ready = SANDBOX_NONE, running = SANDBOX_NONE, done = SANDBOX_NONE;

static void sandbox_clear(struct sandbox *s)
{
	*s = (struct sandbox)SANDBOX_NONE;
}

static void close_fds(struct sandbox *s)
{
	int *fds[] = {&s->pidfd, &s->go, &s->out, &s->err, &s->rep, &s->staging, &s->listener};
	for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

/* Sandbox inits let go and still exiting: reaped later, so that namespace
 * teardown overlaps with waiting for the next request. Their cgroups go
 * once they are reaped (a cgroup with a task in it cannot be removed), and
 * so do their host ids: init is reaped only once every other process of
 * its PID namespace is (kernel/pid_namespace.c zap_pid_ns_processes waits
 * for them before init becomes a zombie), so no process is left with the
 * ids when the next sandbox leases them. */
static struct exiting {
	pid_t pid;
	struct cgroup_box *cg;
	struct id_lease ids;
} exiting[32];
static size_t n_exiting;

static void reap_exiting(int block)
{
	size_t keep = 0;
	for (size_t i = 0; i < n_exiting; i++) {
		pid_t r;
		do
			r = waitpid(exiting[i].pid, NULL, block ? 0 : WNOHANG);
		while (r < 0 && errno == EINTR);
		if (r == 0) {
			exiting[keep++] = exiting[i];
		} else {
			cgroup_close(exiting[i].cg);
			id_lease_drop(&exiting[i].ids);
		}
	}
	n_exiting = keep;
}

/* End a sandbox at once: SIGKILL to init takes its PID namespace with it
 * (pid_namespaces(7)), then its cgroup goes. */
static void sandbox_discard(struct sandbox *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGKILL);
		while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	close_fds(s);
	cgroup_close(s->cg);
	id_lease_drop(&s->ids);
	json_decref(s->cgroup);
	json_decref(s->cgroup_reason);
	sandbox_clear(s);
}

/* Let the init of a finished command go: it exits on the end of the go
 * pipe, and is reaped later. */
static void sandbox_release(struct sandbox *s)
{
	if (s->pid <= 0) {
		sandbox_discard(s);
		return;
	}
	reap_exiting(n_exiting == sizeof exiting / sizeof exiting[0]);
	exiting[n_exiting] = (struct exiting){s->pid, s->cg, s->ids};
	n_exiting++;
	s->pid = -1;
	s->cg = NULL;
	s->ids.fd = -1;
	sandbox_discard(s);
}

static void sandbox_cgroup(struct sandbox *s, const struct cgroup_box *cg, const char *reason)
{
	json_decref(s->cgroup);
	json_decref(s->cgroup_reason);
	s->cgroup = cgroup_json(cg);
	s->cgroup_reason = reason ? json_string(reason) : json_null();
}

static int sandbox_failed(struct sandbox *s, const char *step)
{
	s->step = step;
	s->step_err = errno ? errno : EIO;
	return -1;
}

/* Start a sandbox: clone its init, write the id maps, place it in its
 * cgroup and let it build the new root. Does not wait for it. Returns 0,
 * or -1 with s->step and s->step_err set (s to be discarded). */
static int sandbox_start(const struct exec_ctx *c, struct sandbox *s)
{
	int go[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, rep[2] = {-1, -1};
	sandbox_clear(s);
	/* The report channel is a socket, so that it can carry a descriptor;
	 * SEQPACKET keeps each report one message, and its end (every writer
	 * gone: init, or the command at execve) reads as 0, like a pipe. */
	if (pipe2(go, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, rep) < 0) {
		int saved = errno;
		int all[] = {go[0], go[1], out[0], out[1], err[0], err[1], rep[0], rep[1]};
		for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
			if (all[i] >= 0)
				close(all[i]);
		errno = saved;
		return sandbox_failed(s, "pipe");
	}
	s->go = go[1];
	s->out = out[0];
	s->err = err[0];
	s->rep = rep[0];
	/* Host ids of its own (uids.c), leased before the clone so that the
	 * maps can name them; or the stage's own, the only ones an
	 * unprivileged user can map (user_namespaces(7)). */
	if (!c->lease_ids) {
		s->ids = (struct id_lease){.uid = c->own_uid, .gid = c->own_gid, .fd = -1};
	} else if (id_lease_take(c->ids_first, c->ids_last, &s->ids) < 0) {
		/* The inits still exiting hold theirs until they are reaped:
		 * wait for them before giving up. */
		if (errno != EAGAIN || n_exiting == 0)
			return sandbox_failed(s, "lease host ids");
		reap_exiting(1);
		if (id_lease_take(c->ids_first, c->ids_last, &s->ids) < 0)
			return sandbox_failed(s, "lease host ids");
	}
	/* Made before the clone, entered before init goes on (see below).
	 * Without one the command still runs, under the rlimits alone. */
	const char *cg_reason = NULL;
	s->cg = cgroup_open(c->limits.processes, c->limits.memory_bytes, &cg_reason);
	sandbox_cgroup(s, s->cg, cg_reason);
	fflush(NULL); /* the child must not flush a copy of our stdio buffers */
	s->born_ns = boottime_ns();
	/* clone as a fork (no CLONE_VM, no new stack): the child continues here
	 * on a copy of this stack, which also keeps AddressSanitizer happy. */
	long r = syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET |
	                 CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD, NULL, NULL, NULL, NULL);
	if (r == 0) {
		close(go[1]);
		close(out[0]);
		close(err[0]);
		close(rep[0]);
		sandbox_init(go[0], out[1], err[1], rep[1], &c->limits);
	}
	int saved = errno;
	close(go[0]);
	close(out[1]);
	close(err[1]);
	close(rep[1]);
	errno = saved;
	if (r < 0)
		return sandbox_failed(s, "clone namespaces");
	s->pid = (pid_t)r;
	/* A pidfd makes the end of init pollable beside the pipes. Without one
	 * (kernel < 5.3, valgrind) init is polled with waitpid every 20 ms. */
	s->pidfd = (int)syscall(SYS_pidfd_open, s->pid, 0);
	if (s->pidfd < 0 && errno != ENOSYS)
		return sandbox_failed(s, "pidfd_open");
	const char *map_step = write_id_maps(s->pid, s->ids.uid, s->ids.gid);
	if (map_step)
		return sandbox_failed(s, map_step);
	/* init waits on the go pipe, so it forks the command only once it is
	 * inside: nothing the command starts is ever outside the ceilings. */
	if (s->cg && cgroup_enter(s->cg, s->pid) < 0) {
		struct buf b = {0};
		buf_printf(&b, "moving the sandbox into its cgroup: %s", strerror(errno));
		cgroup_close(s->cg);
		s->cg = NULL;
		sandbox_cgroup(s, NULL, b.p);
		buf_free(&b);
	}
	/* Memory outside every address space escapes RLIMIT_AS, which counts
	 * mappings only. A memfd (memfd_create(2)) need never be mapped, and
	 * RLIMIT_FSIZE bounds each one, not their number. memfd_secret(2)
	 * checks RLIMIT_MEMLOCK when a window of it is mapped, and the pages
	 * stay in the file once it is unmapped again (mm/secretmem.c
	 * secretmem_mmap, secretmem_fault): 8 MiB windows mapped and unmapped
	 * in turn held 5 GiB in one process under a 4 GiB RLIMIT_AS. SysV
	 * shared memory, message queues and semaphores (shmget(2), msgget(2),
	 * semget(2)) live in the IPC namespace, charged to no rlimit, bounded
	 * only by its sysctls (shmall, msgmni x msgmnb, semmns: gigabytes by
	 * default; ipc/util.c, ipc/msg.c, ipc/sem.c). A cgroup memory limit
	 * counts all of their pages (charged to the memory cgroup of the task
	 * that allocates them, __GFP_ACCOUNT and mm/filemap.c
	 * filemap_add_folio; cgroup-v1 memory.txt 2.3, cgroup-v2 "Memory");
	 * without one the filter refuses them. POSIX shm_open needs /dev/shm,
	 * which the root lacks; POSIX message queues are bounded by
	 * RLIMIT_MSGQUEUE (exec_command). */
	s->refuse_shm = !cgroup_memory_limited(s->cg);
	if (write(s->go, s->refuse_shm ? "S" : "s", 1) != 1)
		return sandbox_failed(s, "start sandbox");
	return 0;
}

/* Read one report and the descriptor it carries, if any (*fd, else -1;
 * the caller owns it). Returns what recvmsg returns. */
static ssize_t recv_report(int rep, struct step_report *r, int *fd)
{
	struct iovec iov = {.iov_base = r, .iov_len = sizeof *r};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
	                     .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	ssize_t n;
	do
		n = recvmsg(rep, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	int saved = errno;
	*fd = -1;
	for (struct cmsghdr *cm = n > 0 ? CMSG_FIRSTHDR(&msg) : NULL; cm; cm = CMSG_NXTHDR(&msg, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
		    cm->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(fd, CMSG_DATA(cm), sizeof *fd);
	if (n == (ssize_t)sizeof *r)
		r->step[sizeof r->step - 1] = '\0';
	errno = saved;
	return n;
}

/* Wait for init's ready report: the staging directory, or the step that
 * failed before it. Returns 0, or -1 with s->step set. */
static int sandbox_await_ready(struct sandbox *s)
{
	if (s->staging >= 0)
		return 0;
	struct step_report r;
	int fd;
	ssize_t n = recv_report(s->rep, &r, &fd);
	int saved = errno;
	if (n == (ssize_t)sizeof r && strcmp(r.step, "staging") == 0 && fd >= 0) {
		s->staging = fd;
		return 0;
	}
	if (fd >= 0)
		close(fd);
	if (n == (ssize_t)sizeof r && r.step[0]) {
		memcpy(s->step_buf, r.step, sizeof s->step_buf);
		errno = r.err;
		return sandbox_failed(s, s->step_buf);
	}
	errno = n < 0 ? saved : EPIPE;
	return sandbox_failed(s, "sandbox init");
}

/* 1 if init has not exited (a ready report may still wait in the socket
 * of an init killed since). Reaps it otherwise. */
static int sandbox_alive(struct sandbox *s)
{
	pid_t r;
	while ((r = waitpid(s->pid, NULL, WNOHANG)) < 0 && errno == EINTR)
		;
	if (r == 0)
		return 1;
	s->pid = -1;
	return 0;
}

/* Send init the command: the CPU limit and the arguments. */
static int send_request(struct sandbox *s, char **argv, long cpu_s)
{
	struct buf b = {0};
	struct run_request rq = {.cpu_s = cpu_s};
	buf_add(&b, &rq, sizeof rq);
	for (char **a = argv; *a; a++) {
		buf_add(&b, *a, strlen(*a) + 1);
		rq.argc++;
	}
	rq.bytes = (uint32_t)(b.len - sizeof rq);
	memcpy(b.p, &rq, sizeof rq);
	int rc = write_all(s->go, b.p, b.len);
	buf_free(&b);
	return rc;
}

void sandbox_prepare(const struct exec_ctx *c, int ahead)
{
	reap_exiting(0);
	const char *why = NULL;
	/* What a command would refuse on is left for the command to report. */
	int wanted = ahead && c->apply && c->m->n_allowed > 0 && ready.pid <= 0;
	if (wanted && seccomp_prepare(&why) == 0 &&
	    (!c->lease_ids || getgroups(0, NULL) == 0) &&
	    sandbox_start(c, &ready) < 0)
		sandbox_discard(&ready);
	/* Then the last command's sandbox goes (it is never used again). The
	 * clone comes first: making a network namespace and taking one down
	 * contend in the kernel (both register or unregister a loopback device
	 * under rtnl_lock, and unregister_netdevice_many waits for an RCU grace
	 * period holding it, net/core/dev.c), which measured doubles the
	 * time of back-to-back commands the other way round. */
	sandbox_release(&done);
}

/* Follow the command to its end. Returns 0 when it ran (o->exit_code
 * set), -1 when a step failed (o->unavailable set). */
static int supervise(struct sandbox *s, long long timeout_ms, const struct command_limits *lim,
                     struct run_outcome *o)
{
	size_t keep = (size_t)lim->output_bytes;
	int64_t deadline = mono_ms() + timeout_ms;
	int exited = 0, reaped = 0, status = 0, out_open = 1, err_open = 1, rep_open = 1;
	int reported = -1; /* the command's exit code, as init reported it */
	int abandoned = 0;  /* the answer's reader went away */
	while ((!exited && reported < 0) || out_open || err_open) {
		struct pollfd pf[6] = {
			{.fd = out_open ? s->out : -1, .events = POLLIN},
			{.fd = err_open ? s->err : -1, .events = POLLIN},
			{.fd = rep_open ? s->rep : -1, .events = POLLIN},
			{.fd = exited ? -1 : s->pidfd, .events = POLLIN},
			{.fd = s->listener, .events = POLLIN},
			/* The reader of our answers: POLLERR is reported for the
			 * write end of a pipe or FIFO once no reader is left
			 * (fs/pipe.c pipe_poll), asked for or not. The planner
			 * that wanted this command has gone (a halt, ^C, a
			 * crash): nobody will read what it does, so it stops
			 * now, not at its timeout. A file or a terminal never
			 * reports it. */
			{.fd = exited || abandoned ? -1 : STDOUT_FILENO, .events = 0},
		};
		int64_t left = deadline - mono_ms();
		if (left <= 0 && !exited && !o->timed_out) {
			/* SIGKILL to init: the kernel then kills the whole PID namespace. */
			o->timed_out = 1;
			kill(s->pid, SIGKILL);
		}
		int wait_ms = o->timed_out || exited ? 1000 : (int)(left > 1000 ? 1000 : left);
		if (s->pidfd < 0 && !exited) {
			if (waitpid(s->pid, &status, WNOHANG) == s->pid)
				exited = reaped = 1;
			wait_ms = wait_ms > 20 ? 20 : wait_ms;
		}
		int n = poll(pf, 6, wait_ms);
		if (n < 0 && errno != EINTR) {
			kill(s->pid, SIGKILL);
			unavailable(o, "poll", errno);
			break;
		}
		if (n <= 0)
			continue;
		if (pf[0].revents)
			out_open = pump(s->out, &o->out, keep, &o->out_total);
		if (pf[1].revents)
			err_open = pump(s->err, &o->err, keep, &o->err_total);
		if (pf[2].revents) {
			struct step_report sr;
			int fd;
			ssize_t got = recv_report(s->rep, &sr, &fd);
			int listener = got == (ssize_t)sizeof sr && strcmp(sr.step, "sysinfo") == 0;
			if (listener && fd >= 0 && s->listener < 0) {
				/* From the command, between its filter and execve. */
				s->listener = fd;
				s->answers_sysinfo = 1;
				fd = -1;
			} else if (listener) {
			} else if (got == (ssize_t)sizeof sr && sr.step[0] == '\0') {
				reported = sr.err >= 0 && sr.err < 256 ? sr.err : 127;
			} else if (got == (ssize_t)sizeof sr) {
				unavailable(o, sr.step, sr.err);
				kill(s->pid, SIGKILL);
			}
			if (fd >= 0)
				close(fd);
			if (got <= 0 || got == (ssize_t)sizeof sr)
				rep_open = got > 0;
		}
		if (pf[3].revents)
			exited = 1;
		if (pf[5].revents & (POLLERR | POLLHUP)) {
			abandoned = 1;
			kill(s->pid, SIGKILL); /* init, and with it its PID namespace */
		}
		/* A call waits for its answer; the hang-up comes when no process
		 * under the filter is left (kernel/seccomp.c seccomp_notify_poll). */
		if ((pf[4].revents & POLLIN && notify_answer(s->listener, s->cg, lim->memory_bytes, s->born_ns) < 0) ||
		    (pf[4].revents & ~POLLIN)) {
			close(s->listener);
			s->listener = -1;
		}
	}
	if (reported < 0 || o->timed_out || reaped || o->unavailable) {
		/* Not to be let go later: it is gone, or must be. */
		if (!reaped) {
			kill(s->pid, SIGKILL);
			while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR)
				;
		}
		s->pid = -1;
	}
	if (o->unavailable)
		return -1;
	o->executed = 1;
	if (o->timed_out)
		o->exit_code = 124;
	else if (reported >= 0)
		o->exit_code = reported;
	else if (WIFEXITED(status))
		o->exit_code = WEXITSTATUS(status);
	else
		o->exit_code = 128 + WTERMSIG(status);
	return 0;
}

void sandbox_run(const struct exec_ctx *c, char **argv, long long timeout_ms,
                 struct run_outcome *o)
{
	memset(o, 0, sizeof *o);
	o->copied = json_array();
	o->refused = json_array();
	/* CPU time never outlasts the wall clock by more than a second:
	 * limits.cpuSeconds may only lower it. */
	long cpu_s = (long)((timeout_ms + 999) / 1000) + 1;
	if (c->limits.cpu_seconds > 0 && c->limits.cpu_seconds < cpu_s)
		cpu_s = c->limits.cpu_seconds;
	o->limits = limits_json(timeout_ms, cpu_s, &c->limits);

	const char *why = NULL;
	if (seccomp_prepare(&why) < 0) {
		unavailable(o, why, errno ? errno : EINVAL);
		return;
	}
	/* Root's supplementary groups would follow the program into the
	 * sandbox (setgroups is denied there): they must be gone. */
	if (c->lease_ids && getgroups(0, NULL) != 0) {
		unavailable(o, "drop supplementary groups", EPERM);
		return;
	}
	sandbox_release(&done);
	/* The prepared sandbox, or, when there is none or it failed (its init
	 * may have died meanwhile), one made now: its failure is the one
	 * reported. */
	struct sandbox *s = &running;
	*s = ready;
	sandbox_clear(&ready);
	if (s->pid <= 0 || sandbox_await_ready(s) < 0 || !sandbox_alive(s)) {
		sandbox_discard(s);
		if (sandbox_start(c, s) < 0 || sandbox_await_ready(s) < 0) {
			if (s->cgroup)
				json_object_set(o->limits, "cgroup", s->cgroup);
			if (s->cgroup_reason)
				json_object_set(o->limits, "cgroupReason", s->cgroup_reason);
			unavailable(o, s->step, s->step_err);
			sandbox_discard(s);
			return;
		}
	}
	json_object_set(o->limits, "cgroup", s->cgroup);
	json_object_set(o->limits, "cgroupReason", s->cgroup_reason);
	json_object_set_new(o->limits, "sharedMemory",
	                    json_string(s->refuse_shm ? "refused" : "memoryCgroup"));
	const char *step = NULL;
	if (staging_fill(c, s->staging, s->ids.uid, s->ids.gid, o->refused, &step) < 0) {
		unavailable(o, step, errno);
		sandbox_discard(s);
		return;
	}
	if (send_request(s, argv, cpu_s) < 0) {
		unavailable(o, "start sandbox", errno);
		sandbox_discard(s);
		return;
	}
	int ran = supervise(s, timeout_ms, &c->limits, o) == 0;
	if (s->listener >= 0)
		close(s->listener);
	s->listener = -1;
	o->sandbox = json_pack("{s:I,s:I,s:s,s:s}", "hostUid", (json_int_t)s->ids.uid,
	                       "hostGid", (json_int_t)s->ids.gid,
	                       "ids", s->ids.fd >= 0 ? "leased" : "own",
	                       "sysinfo", s->answers_sysinfo ? "answered" : "refused");
	/* An acceptance check changes nothing in the workspace. */
	if (ran && !c->acceptance)
		staging_copy_back(c, s->staging, o->copied, o->refused);
	/* The last reference of the stage: with init gone, the kernel frees
	 * the staging tmpfs. */
	close(s->staging);
	s->staging = -1;
	/* Done: let init go after the reply (sandbox_prepare), or now. */
	done = *s;
	sandbox_clear(s);
}

/* A forked process of the stage (its tools process) owns no sandbox:
 * the copies of the stage's state it inherited are not its to end. */
static int disowned;

void sandbox_disown(void)
{
	disowned = 1;
}

void sandbox_shutdown(void)
{
	if (disowned)
		return;
	sandbox_discard(&ready);
	sandbox_discard(&running);
	sandbox_release(&done);
	reap_exiting(1);
	cgroup_shutdown();
}

void sandbox_shutdown_signal(void)
{
	if (disowned)
		return;
	/* Every init, and with each its PID namespace, dies before the
	 * cgroups go: none is left for the kernel to kill after us. */
	pid_t pids[3 + sizeof exiting / sizeof exiting[0]];
	size_t n = 0;
	pids[n++] = ready.pid;
	pids[n++] = running.pid;
	pids[n++] = done.pid;
	for (size_t i = 0; i < n_exiting && i < sizeof exiting / sizeof exiting[0]; i++)
		pids[n++] = exiting[i].pid;
	for (size_t i = 0; i < n; i++)
		if (pids[i] > 0)
			kill(pids[i], SIGKILL);
	for (size_t i = 0; i < n; i++)
		if (pids[i] > 0)
			while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR)
				;
	cgroup_shutdown_signal();
}

void run_outcome_free(struct run_outcome *o)
{
	free(o->unavailable);
	buf_free(&o->out);
	buf_free(&o->err);
	json_decref(o->copied);
	json_decref(o->refused);
	json_decref(o->limits);
	json_decref(o->sandbox);
}
