/* confine-shim.c - an LD_PRELOAD library for tests/confine.bats: right
 * after a program has confined itself, it makes the calls the program
 * must not be able to make, from inside it, and prints what the kernel
 * answered on stderr, one line each:
 *
 *   confine-shim: sfma-chain: read /tmp/x/secret: EACCES
 *
 * confine_apply() installs its seccomp filter last (lib/confine.c), with
 * libseccomp's seccomp_load(), which this library interposes: the calls
 * go once the real one has returned, so Landlock and seccomp are both in
 * force. Once per process: a process forked from a confined one (sfma-exec's
 * tools process) confines itself again and is named NAME/child.
 *
 * What to try, from the environment (each optional):
 *   SFMA_SHIM_READ=PATH      open(PATH, O_RDONLY)
 *   SFMA_SHIM_WRITE=PATH     open(PATH, O_WRONLY | O_APPEND) (a file that exists)
 *   SFMA_SHIM_CREATE=PATH    open(PATH, O_WRONLY | O_CREAT | O_EXCL)
 *   SFMA_SHIM_REMOVE=PATH    unlink(PATH) (for a program that must not:
 *                            the test fails when it can)
 *   SFMA_SHIM_CONNECT=PORT   socket(AF_INET), connect to 127.0.0.1:PORT
 *   SFMA_SHIM_EXEC=PATH      execve(PATH) in a forked child
 *   SFMA_SHIM_SIGNAL=parent  kill(getppid(), 0)
 * Each answer is the errno's name (EACCES, EPERM, ...) or "ok". Nothing
 * is left changed: a file opened is closed, one made is removed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t loaded_pid, done_pid;

__attribute__((constructor)) static void at_load(void)
{
	loaded_pid = getpid();
}

static void say(const char *what, const char *arg, int err)
{
	const char *name = err ? strerrorname_np(err) : "ok";
	dprintf(2, "confine-shim: %s%s: %s %s: %s\n", program_invocation_short_name,
	        getpid() == loaded_pid ? "" : "/child", what, arg, name ? name : "?");
}

static void try_open(const char *what, const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC, 0600);
	say(what, path, fd < 0 ? errno : 0);
	if (fd >= 0) {
		close(fd);
		if (flags & O_EXCL)
			unlink(path);
	}
}

static void try_connect(const char *port)
{
	char where[64];
	snprintf(where, sizeof where, "127.0.0.1:%s", port);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		say("connect", where, errno);
		return;
	}
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)),
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int rc = connect(s, (struct sockaddr *)&a, sizeof a);
	say("connect", where, rc < 0 ? errno : 0);
	close(s);
}

static void try_exec(const char *path)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		char *const argv[] = { (char *)path, NULL };
		execve(path, argv, environ);
		int err = errno;
		ssize_t n = write(p[1], &err, sizeof err);
		(void)n;
		_exit(127);
	}
	close(p[1]);
	int err = 0;
	ssize_t n = pid > 0 ? read(p[0], &err, sizeof err) : -1;
	close(p[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	say("exec", path, n == (ssize_t)sizeof err ? err : pid < 0 ? errno : 0);
}

int seccomp_load(void *ctx)
{
	int (*real)(void *) = (int (*)(void *))dlsym(RTLD_NEXT, "seccomp_load");
	int rc = real ? real(ctx) : -ENOSYS;
	if (done_pid == getpid())
		return rc;
	done_pid = getpid();
	int saved = errno;
	const char *v;
	say("confined", "seccomp_load", rc < 0 ? -rc : 0);
	if ((v = getenv("SFMA_SHIM_READ")))
		try_open("read", v, O_RDONLY);
	if ((v = getenv("SFMA_SHIM_WRITE")))
		try_open("write", v, O_WRONLY | O_APPEND);
	if ((v = getenv("SFMA_SHIM_CREATE")))
		try_open("create", v, O_WRONLY | O_CREAT | O_EXCL);
	if ((v = getenv("SFMA_SHIM_REMOVE")))
		say("remove", v, unlink(v) < 0 ? errno : 0);
	if ((v = getenv("SFMA_SHIM_CONNECT")))
		try_connect(v);
	if ((v = getenv("SFMA_SHIM_EXEC")))
		try_exec(v);
	if ((v = getenv("SFMA_SHIM_SIGNAL")) && strcmp(v, "parent") == 0) {
		char parent[32];
		snprintf(parent, sizeof parent, "%d", (int)getppid());
		say("signal", parent, kill(getppid(), 0) < 0 ? errno : 0);
	}
	errno = saved;
	return rc;
}
