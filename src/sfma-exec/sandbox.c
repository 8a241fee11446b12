/* sandbox.c - run one allowed command in fresh namespaces (CONTRACT.md
 * section 5), written directly against the kernel.
 *
 * Three processes: this stage; the sandbox init (PID 1 of a new PID
 * namespace, also the owner of new user, mount, network, IPC and UTS
 * namespaces), which builds the new root and then waits; and the command,
 * forked by init, which drops everything and execs. When init exits the
 * kernel kills every process left in its PID namespace, so "kill init" is
 * how a timeout ends daemonized grandchildren too (setsid escapes a
 * process group, never a PID namespace).
 *
 * Order (as bubblewrap): no-new-privs -> clone -> setgroups deny and id
 * maps, cgroup placement (by the parent) -> make / private -> tmpfs root, binds,
 * remount read-only -> pivot_root, detach the old root -> [vfork] ->
 * drop capabilities -> death signal (again after each fork and credential
 * change) -> close stray fds -> rlimits -> seccomp -> execve. */
#include "exec.h"
#include "stage.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "err.h"

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

/* What a failed isolation step tells the parent through the report pipe. */
struct step_report {
	char step[48];
	int err;
};

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

/* ---- inside the sandbox (no allocation beyond this point is needed) ---- */

static _Noreturn void fail_step(int report_fd, const char *step)
{
	struct step_report r = {.err = errno};
	snprintf(r.step, sizeof r.step, "%s", step);
	ssize_t w = write(report_fd, &r, sizeof r);
	(void)w;
	_exit(127);
}

/* Bind src onto dst read-only. A bind mount ignores MS_RDONLY until it is
 * remounted, and inside a user namespace the remount must keep the flags
 * the kernel locked on the source (nosuid, nodev, noexec, atime), or it
 * fails with EPERM: read them back with statvfs and keep them. */
static int bind_ro(const char *src, const char *dst)
{
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		return -1;
	struct statvfs sv;
	if (statvfs(dst, &sv) < 0)
		return -1;
	unsigned long keep = 0;
	if (sv.f_flag & ST_NOEXEC)
		keep |= MS_NOEXEC;
	if (sv.f_flag & ST_NOATIME)
		keep |= MS_NOATIME;
	if (sv.f_flag & ST_NODIRATIME)
		keep |= MS_NODIRATIME;
	if (sv.f_flag & ST_RELATIME)
		keep |= MS_RELATIME;
	return mount(NULL, dst, NULL,
	             MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | keep, NULL);
}

/* Populate the new root: the tmpfs on <base>/root, our working directory. */
static void build_root(int report)
{
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
			if (mkdir(runtime_dirs[i], 0755) < 0 || bind_ro(host, runtime_dirs[i]) < 0)
				fail_step(report, "bind runtime read-only");
		}
	}
	/* A minimal /dev: bind the few harmless host nodes onto empty files
	 * (mknod is not allowed in a user namespace, and a tmpfs mounted there
	 * is nodev anyway). No tty: TIOCSTI needs one. */
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
	 * ceiling too. */
	char opts[64];
	snprintf(opts, sizeof opts, "mode=1777,size=%llu", (unsigned long long)LIMIT_TMP_BYTES);
	if (mkdir("tmp", 01777) < 0 ||
	    mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		fail_step(report, "mount private /tmp");
}

/* The command's last steps. Runs in the child init forked; never returns. */
static _Noreturn void exec_command(char **argv, int out, int err, int report, long cpu_s)
{
	/* PR_SET_PDEATHSIG is cleared by fork: set it again. init is the
	 * parent here, and init's own death ends the namespace anyway. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		fail_step(report, "death signal");
	/* A new session: no controlling terminal, so no TIOCSTI target. */
	if (setsid() < 0)
		fail_step(report, "setsid");
	sigset_t all;
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL); /* ignored signals survive execve otherwise */
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		fail_step(report, "standard descriptors");
	/* Every other descriptor closes at execve; the report pipe stays
	 * usable until then and its closing tells the parent exec happened. */
	if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) < 0)
		fail_step(report, "close stray descriptors");
	if (chdir("/workspace") < 0)
		fail_step(report, "chdir /workspace");

	/* The command is uid 0 of its user namespace: lock root's special
	 * treatment away (SECBIT_NOROOT: execve grants no capabilities to
	 * uid 0), empty the bounding set, the ambient and the current sets. */
	if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
	          SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
	          SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) < 0)
		fail_step(report, "securebits");
	for (int cap = 0; cap < 64; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			fail_step(report, "drop capability bounding set");
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		fail_step(report, "clear ambient capabilities");
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct none[2] = {{0, 0, 0}, {0, 0, 0}};
	if (syscall(SYS_capset, &hdr, none) < 0)
		fail_step(report, "drop capabilities");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail_step(report, "no-new-privileges");

	/* Ceilings. RLIMIT_NPROC counts processes of the real user: that is
	 * why the command is never host uid 0 (exempt from it). RLIMIT_AS is
	 * last: nothing after it allocates (the seccomp filter is prebuilt). */
	struct { int res; rlim_t soft, hard; const char *what; } lim[] = {
		{RLIMIT_CORE, 0, 0, "RLIMIT_CORE"},
		{RLIMIT_CPU, (rlim_t)cpu_s, (rlim_t)cpu_s + 1, "RLIMIT_CPU"},
		{RLIMIT_FSIZE, LIMIT_FSIZE_BYTES, LIMIT_FSIZE_BYTES, "RLIMIT_FSIZE"},
		{RLIMIT_NOFILE, LIMIT_NOFILE, LIMIT_NOFILE, "RLIMIT_NOFILE"},
		{RLIMIT_NPROC, LIMIT_NPROC, LIMIT_NPROC, "RLIMIT_NPROC"},
		{RLIMIT_AS, LIMIT_AS_BYTES, LIMIT_AS_BYTES, "RLIMIT_AS"},
	};
	for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
		struct rlimit rl = {lim[i].soft, lim[i].hard};
		if (setrlimit(lim[i].res, &rl) < 0)
			fail_step(report, lim[i].what);
	}
	if (seccomp_install() < 0)
		fail_step(report, "seccomp");

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
	int n = snprintf(msg, sizeof msg, "sfma-exec: %.200s: %s\n", argv[0],
	                 saved == ENOENT ? "command not found" : strerror(saved));
	ssize_t w = write(2, msg, (size_t)n);
	(void)w;
	_exit(saved == ENOENT ? 127 : 126);
}

/* PID 1 of the sandbox. */
static _Noreturn void sandbox_init(char **argv, int go, int out,
                                   int err, int report, long cpu_s)
{
	/* Die with the stage. Set before waiting for the id maps... */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		fail_step(report, "death signal");
	char byte;
	if (read(go, &byte, 1) != 1)
		_exit(127); /* the parent gave up before the maps were written */
	/* Become uid/gid 0 of the new namespace, i.e. the unprivileged host
	 * ids just mapped. Until now this process was host root outside any
	 * mapping. */
	if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		fail_step(report, "switch to the mapped ids");
	/* ...and again: a credential change clears the death signal. If the
	 * parent died in between, its end of the go pipe is closed. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		fail_step(report, "death signal");
	struct pollfd pf = {.fd = go, .events = POLLIN};
	if (poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLERR)))
		_exit(127);
	close(go);

	/* Nothing mounted here may propagate back to the host. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fail_step(report, "make / private");
	/* The working directory is the staging directory (see supervise): the
	 * paths below are relative to it, so no directory above it needs to be
	 * searchable by the unprivileged ids. */
	if (mount("tmpfs", "../root", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0)
		fail_step(report, "mount tmpfs root");
	if (mkdir("../root/workspace", 0755) < 0 ||
	    mount("ws", "../root/workspace", NULL, MS_BIND, NULL) < 0 ||
	    mount(NULL, "../root/workspace", NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0)
		fail_step(report, "bind /workspace");
	if (chdir("../root") < 0)
		fail_step(report, "chdir new root");
	build_root(report);
	/* pivot_root(".", "."): the old root is stacked under the new one and
	 * detached at once, so no path to the host tree remains. */
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		fail_step(report, "pivot_root");
	if (umount2(".", MNT_DETACH) < 0)
		fail_step(report, "detach old root");
	if (chdir("/") < 0)
		fail_step(report, "chdir /");
	/* The root itself read-only: only /workspace and /tmp are writable. */
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
		fail_step(report, "remount root read-only");
	if (sethostname("sfma", 4) < 0)
		fail_step(report, "sethostname");
	/* The new network namespace holds only a loopback that stays down: no
	 * route anywhere, not even to the host's 127.0.0.1. */

	/* vfork: the command shares init's memory until its execve, so no
	 * page table is copied and it runs at once, on this CPU, while init
	 * sleeps. Sound here: the child only enters exec_command, which never
	 * returns, and what it changes is its own (signal dispositions,
	 * rlimits, credentials, securebits and seccomp are per process or per
	 * task); of the shared memory it writes only its stack below init's
	 * frame and errno, which init does not read afterwards. */
	pid_t cmd = vfork();
	if (cmd < 0)
		fail_step(report, "fork command");
	if (cmd == 0)
		exec_command(argv, out, err, report, cpu_s);
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
	/* Tell the parent the outcome now that no process but this one is
	 * left: it can copy back and answer while the kernel takes the
	 * namespaces down after this exit. */
	struct step_report done = {.step = "", .err = code};
	ssize_t w = write(report, &done, sizeof done);
	(void)w;
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
 * required for an unprivileged writer, and it keeps the contained process
 * from changing its groups. */
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

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Keep the first OUTPUT_CLIP bytes of a stream, count and discard the rest:
 * a command writing gigabytes costs this stage a fixed 64 KiB. */
static int pump(int fd, struct buf *keep, uint64_t *total)
{
	char chunk[65536];
	ssize_t n = read(fd, chunk, sizeof chunk);
	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 1 : 0;
	if (n == 0)
		return 0;
	if (keep->len < OUTPUT_CLIP) {
		size_t room = OUTPUT_CLIP - keep->len;
		buf_add(keep, chunk, (size_t)n < room ? (size_t)n : room);
	}
	*total += (uint64_t)n;
	return 1;
}

static void unavailable(struct run_outcome *o, const char *step, int err)
{
	struct buf b = {0};
	buf_printf(&b, "secure command sandbox unavailable: %s: %s", step, strerror(err));
	free(o->unavailable);
	o->unavailable = b.p;
}

static json_t *limits_json(long long timeout_ms, long cpu_s)
{
	json_t *ws = stage_private_tmpfs() ? json_integer((json_int_t)LIMIT_WORKSPACE_BYTES)
	                                   : json_null();
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:n,s:s}",
	                 "timeoutMs", (json_int_t)timeout_ms,
	                 "cpuSeconds", (json_int_t)cpu_s,
	                 "addressSpaceBytes", (json_int_t)LIMIT_AS_BYTES,
	                 "fileSizeBytes", (json_int_t)LIMIT_FSIZE_BYTES,
	                 "openFiles", (json_int_t)LIMIT_NOFILE,
	                 "processes", (json_int_t)LIMIT_NPROC,
	                 "coreBytes", (json_int_t)0,
	                 "tmpBytes", (json_int_t)LIMIT_TMP_BYTES,
	                 "outputBytes", (json_int_t)OUTPUT_CLIP,
	                 "copyBackBytes", (json_int_t)COPY_BACK_MAX,
	                 "workspaceBytes", ws,
	                 "cgroup", "cgroupReason", "sandbox not started");
}

/* Sandbox inits that reported their outcome and are still exiting: reaped
 * later, so that namespace teardown overlaps with the reply. Their cgroups
 * go once they are reaped (a cgroup with a task in it cannot be removed). */
static struct exiting {
	pid_t pid;
	struct cgroup_box *cg;
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
		if (r == 0)
			exiting[keep++] = exiting[i];
		else
			cgroup_close(exiting[i].cg);
	}
	n_exiting = keep;
}

/* Record in limits which cgroup ceilings hold for this command. */
static void limits_cgroup(json_t *limits, const struct cgroup_box *cg, const char *reason)
{
	json_object_set_new(limits, "cgroup", cgroup_json(cg));
	json_object_set_new(limits, "cgroupReason", reason ? json_string(reason) : json_null());
}

/* Start the sandbox and follow it to the end. Returns 0 when the command
 * ran (o->exit_code set), -1 when a step failed (o->unavailable set). */
static int supervise(const struct exec_ctx *c, const struct stage *st, char **argv,
                     long long timeout_ms, long cpu_s, struct run_outcome *o)
{
	int go[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, rep[2] = {-1, -1};
	int pidfd = -1, rc = -1;
	pid_t pid = -1;
	struct cgroup_box *cg = NULL;
	reap_exiting(n_exiting == sizeof exiting / sizeof exiting[0]);
	if (pipe2(go, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
	    pipe2(rep, O_CLOEXEC) < 0) {
		unavailable(o, "pipe", errno);
		goto out;
	}
	/* Made before the clone, entered before init goes on (see below).
	 * Without one the command still runs, under the rlimits alone. */
	const char *cg_reason = NULL;
	cg = cgroup_open(&cg_reason);
	limits_cgroup(o->limits, cg, cg_reason);
	fflush(NULL); /* the child must not flush a copy of our stdio buffers */
	/* The child starts in the staging directory: clone(CLONE_NEWNS) carries
	 * the working directory into the new mount namespace (an inherited fd
	 * would still point into ours, where mounting on it fails). */
	int here = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (here < 0 || fchdir(st->dir_fd) < 0) {
		unavailable(o, "enter staging directory", errno);
		if (here >= 0)
			close(here);
		goto out;
	}
	/* clone as a fork (no CLONE_VM, no new stack): the child continues here
	 * on a copy of this stack, which also keeps AddressSanitizer happy. */
	long r = syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET |
	                 CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD, NULL, NULL, NULL, NULL);
	if (r != 0) {
		int saved = errno;
		if (fchdir(here) < 0)
			die("return to the working directory: %s", strerror(errno));
		close(here);
		errno = saved;
	}
	if (r < 0) {
		unavailable(o, "clone namespaces", errno);
		goto out;
	}
	if (r == 0) {
		close(go[1]);
		close(out[0]);
		close(err[0]);
		close(rep[0]);
		sandbox_init(argv, go[0], out[1], err[1], rep[1], cpu_s);
	}
	pid = (pid_t)r;
	close(go[0]);
	close(out[1]);
	close(err[1]);
	close(rep[1]);
	go[0] = out[1] = err[1] = rep[1] = -1;
	/* A pidfd makes the end of init pollable beside the pipes. Without one
	 * (kernel < 5.3, valgrind) init is polled with waitpid every 20 ms. */
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0 && errno != ENOSYS) {
		unavailable(o, "pidfd_open", errno);
		goto out;
	}
	const char *map_step = write_id_maps(pid, c->host_uid, c->host_gid);
	if (map_step) {
		unavailable(o, map_step, errno);
		goto out;
	}
	/* init waits on the go pipe, so it forks the command only once it is
	 * inside: nothing the command starts is ever outside the ceilings. */
	if (cg && cgroup_enter(cg, pid) < 0) {
		struct buf b = {0};
		buf_printf(&b, "moving the sandbox into its cgroup: %s", strerror(errno));
		json_object_set_new(o->limits, "cgroup", json_null());
		json_object_set_new(o->limits, "cgroupReason", json_string(b.p));
		buf_free(&b);
	}
	if (write(go[1], "g", 1) != 1) {
		unavailable(o, "start sandbox", errno);
		goto out;
	}

	long long deadline = now_ms() + timeout_ms;
	int exited = 0, reaped = 0, status = 0, out_open = 1, err_open = 1, rep_open = 1;
	int reported = -1; /* the command's exit code, as init reported it */
	while ((!exited && reported < 0) || out_open || err_open) {
		struct pollfd pf[4] = {
			{.fd = out_open ? out[0] : -1, .events = POLLIN},
			{.fd = err_open ? err[0] : -1, .events = POLLIN},
			{.fd = rep_open ? rep[0] : -1, .events = POLLIN},
			{.fd = exited ? -1 : pidfd, .events = POLLIN},
		};
		long long left = deadline - now_ms();
		if (left <= 0 && !exited && !o->timed_out) {
			/* SIGKILL to init: the kernel then kills the whole PID namespace. */
			o->timed_out = 1;
			kill(pid, SIGKILL);
		}
		int wait_ms = o->timed_out || exited ? 1000 : (int)(left > 1000 ? 1000 : left);
		if (pidfd < 0 && !exited) {
			if (waitpid(pid, &status, WNOHANG) == pid)
				exited = reaped = 1;
			wait_ms = wait_ms > 20 ? 20 : wait_ms;
		}
		int n = poll(pf, 4, wait_ms);
		if (n < 0 && errno != EINTR) {
			kill(pid, SIGKILL);
			unavailable(o, "poll", errno);
			break;
		}
		if (n <= 0)
			continue;
		if (pf[0].revents)
			out_open = pump(out[0], &o->out, &o->out_total);
		if (pf[1].revents)
			err_open = pump(err[0], &o->err, &o->err_total);
		if (pf[2].revents) {
			struct step_report sr;
			ssize_t got = read(rep[0], &sr, sizeof sr);
			if (got == (ssize_t)sizeof sr && sr.step[0] == '\0') {
				reported = sr.err >= 0 && sr.err < 256 ? sr.err : 127;
			} else if (got == (ssize_t)sizeof sr) {
				sr.step[sizeof sr.step - 1] = '\0';
				unavailable(o, sr.step, sr.err);
				kill(pid, SIGKILL);
			}
			if (got <= 0 || got == (ssize_t)sizeof sr)
				rep_open = got > 0;
		}
		if (pf[3].revents)
			exited = 1;
	}
	if (reported >= 0 && !o->timed_out && !reaped && !o->unavailable) {
		exiting[n_exiting++] = (struct exiting){pid, cg};
		cg = NULL;
	} else {
		while (!reaped && waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	pid = -1;
	if (!o->unavailable) {
		o->executed = 1;
		if (o->timed_out)
			o->exit_code = 124;
		else if (reported >= 0)
			o->exit_code = reported;
		else if (WIFEXITED(status))
			o->exit_code = WEXITSTATUS(status);
		else
			o->exit_code = 128 + WTERMSIG(status);
		rc = 0;
	}
out:
	if (pid > 0) {
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	cgroup_close(cg);
	int fds[] = {go[0], go[1], out[0], out[1], err[0], err[1], rep[0], rep[1], pidfd};
	for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return rc;
}

void sandbox_run(const struct exec_ctx *c, char **argv, long long timeout_ms,
                 struct run_outcome *o)
{
	memset(o, 0, sizeof *o);
	o->copied = json_array();
	o->refused = json_array();
	long cpu_s = (long)((timeout_ms + 999) / 1000) + 1;
	o->limits = limits_json(timeout_ms, cpu_s);

	const char *why = NULL;
	if (seccomp_prepare(&why) < 0) {
		unavailable(o, why, errno ? errno : EINVAL);
		return;
	}
	/* Root's supplementary groups would follow the program into the
	 * sandbox (setgroups is denied there): they must be gone. */
	if (c->host_uid != (unsigned)geteuid() && getgroups(0, NULL) != 0) {
		unavailable(o, "drop supplementary groups", EPERM);
		return;
	}
	struct stage st;
	const char *step = NULL;
	if (stage_create(c, &st, o->refused, &step) < 0) {
		unavailable(o, step, errno ? errno : EIO);
	} else if (supervise(c, &st, argv, timeout_ms, cpu_s, o) == 0) {
		stage_copy_back(c, &st, o->copied, o->refused);
	}
	stage_discard(&st);
}

void sandbox_shutdown(void)
{
	reap_exiting(1);
	cgroup_shutdown();
	stage_shutdown();
}

void sandbox_shutdown_signal(void)
{
	cgroup_shutdown_signal();
	stage_shutdown_signal();
}

void run_outcome_free(struct run_outcome *o)
{
	free(o->unavailable);
	buf_free(&o->out);
	buf_free(&o->err);
	json_decref(o->copied);
	json_decref(o->refused);
	json_decref(o->limits);
}
