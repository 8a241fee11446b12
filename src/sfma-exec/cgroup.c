/* cgroup.c - cgroup ceilings for a sandboxed command where the host
 * delegates them (sfma-exec(1): "cgroup limits where delegated").
 *
 * A ceiling on top of the rlimits, never instead of them: RLIMIT_NPROC
 * counts per user and RLIMIT_AS per process, while a cgroup counts the
 * whole sandbox at once (every process and thread, anonymous memory, tmpfs
 * pages). When this process may not create cgroups the command runs under
 * the rlimits alone and the trace says why.
 *
 * One cgroup per command, sfma-exec-<pid>-<n>, made a child of the cgroup
 * this process is in (the subtree a host delegates is the one it starts us
 * in). The stage moves the sandbox init into it before letting it go on, so
 * the command and all it forks start inside. Every live cgroup sits in a
 * small registry, so that exit paths and signal handlers remove it too. */
#include "exec.h"
#include "clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"

#define CG_PATH    512
#define CG_SLOTS   40          /* one running command + the exiting ones */

struct cgroup_box {
	int used;
	int version;            /* 1 or 2 */
	char dir[2][CG_PATH];   /* v2: dir[0]; v1: pids and memory ("" if none) */
	long long pids_max;     /* -1: not in force */
	long long memory_max;   /* -1: not in force */
	int swap_included;      /* swap cannot extend memory_max */
};

static struct cgroup_box slots[CG_SLOTS];

/* What this process found at the first command: where it may create
 * cgroups. A v2 directory with the controllers enabled for children, or
 * v1 directories per controller ("" when unusable). */
static int probed;
static int version;
static char base[2][CG_PATH];   /* v2: base[0] with both; v1: pids, memory */
static int has_pids, has_memory;
static char why_not[CG_PATH + 160];       /* why a ceiling is missing, or "" */
static unsigned long counter;

static int probe_found(void);
static void start_keeper(void);
static int rm_cgroup(const char *dir);

/* ---- discovery ---- */

/* 1 if token occurs in the comma- or space-separated list s. */
static int has_token(const char *s, const char *token)
{
	size_t n = strlen(token);
	for (const char *p = s; (p = strstr(p, token)); p += n) {
		int starts = p == s || p[-1] == ',' || p[-1] == ' ' || p[-1] == '+';
		int ends = p[n] == '\0' || p[n] == ',' || p[n] == ' ' || p[n] == '\n';
		if (starts && ends)
			return 1;
	}
	return 0;
}

static int read_text(const char *path, char *out, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t got = 0;
	while (got + 1 < cap) {
		ssize_t n = read(fd, out + got, cap - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	out[got] = '\0';
	close(fd);
	return 0;
}

/* Only system calls: also used from a signal handler. */
static int write_text(const char *dir, const char *file, const char *text)
{
	char path[CG_PATH + 64];
	size_t dl = strlen(dir), fl = strlen(file);
	if (dl + fl + 2 > sizeof path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(path, dir, dl);
	path[dl] = '/';
	memcpy(path + dl + 1, file, fl + 1);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = strlen(text);
	ssize_t n = write(fd, text, len);
	int saved = errno;
	close(fd);
	errno = saved;
	return n == (ssize_t)len ? 0 : -1;
}

void mountinfo_unescape(char *s)
{
	char *w = s;
	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

/* Where our own cgroup of a hierarchy is in the file system: the mount
 * of fstype (with controller among its options for v1) joined with our
 * path from /proc/self/cgroup, taken relative to the mount's root.
 * Returns 0 with out set, or -1. */
static int own_dir(const char *fstype, const char *controller, const char *own_path,
                   char *out, size_t cap)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -1;
	char *line = NULL;
	size_t n = 0;
	int rc = -1;
	while (rc < 0 && getline(&line, &n, f) > 0) {
		/* id parent dev ROOT MOUNTPOINT opts [tags] - FSTYPE source SUPEROPTS */
		char *sep = strstr(line, " - ");
		if (!sep)
			continue;
		*sep = '\0';
		char *save = NULL, *fs, *src, *sopts;
		if (!(fs = strtok_r(sep + 3, " \n", &save)) || strcmp(fs, fstype) != 0 ||
		    !(src = strtok_r(NULL, " \n", &save)) || !(sopts = strtok_r(NULL, " \n", &save)))
			continue;
		if (controller && !has_token(sopts, controller))
			continue;
		char *root = NULL, *mnt = NULL;
		save = NULL;
		strtok_r(line, " ", &save);
		strtok_r(NULL, " ", &save);
		strtok_r(NULL, " ", &save);
		if (!(root = strtok_r(NULL, " ", &save)) || !(mnt = strtok_r(NULL, " ", &save)))
			continue;
		mountinfo_unescape(root);
		mountinfo_unescape(mnt);
		size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
		if (strncmp(own_path, root, rl) != 0 || (own_path[rl] != '/' && own_path[rl] != '\0'))
			continue; /* this mount does not show our cgroup */
		const char *rel = own_path + rl;
		if (strcmp(rel, "/") == 0)
			rel = "";
		if ((size_t)snprintf(out, cap, "%s%s", mnt, rel) < cap)
			rc = 0;
	}
	free(line);
	fclose(f);
	return rc;
}

/* Our path in the hierarchy whose controller list (v1) holds controller,
 * or in the unified one (controller NULL). */
static int own_path(const char *controller, char *out, size_t cap)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return -1;
	char *line = NULL;
	size_t n = 0;
	int rc = -1;
	while (rc < 0 && getline(&line, &n, f) > 0) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		char *list = c1 + 1, *path = c2 + 1;
		path[strcspn(path, "\n")] = '\0';
		int match = controller ? has_token(list, controller) : (list[0] == '\0' && atoi(line) == 0);
		if (match && (size_t)snprintf(out, cap, "%s", path) < cap)
			rc = 0;
	}
	free(line);
	fclose(f);
	return rc;
}

static void note(const char *fmt, const char *a, int err)
{
	if (why_not[0])
		return; /* the first cause is the one worth telling */
	snprintf(why_not, sizeof why_not, fmt, a, err ? strerror(err) : "");
}

static int find_dir(const char *fstype, const char *controller, char *out)
{
	char path[CG_PATH];
	if (own_path(controller, path, sizeof path) < 0 ||
	    own_dir(fstype, controller, path, out, CG_PATH - 64) < 0)
		return -1;
	return 0;
}

/* cgroup v2: both controllers must be available to our cgroup and enabled
 * for its children. Enabling them fails with EBUSY unless ours is the root
 * cgroup or holds no process ("no internal processes"): then v2 is not
 * delegated to us in a usable way, and we say so. */
static int probe_v2(void)
{
	char dir[CG_PATH], file[CG_PATH + 32], text[512];
	if (find_dir("cgroup2", NULL, dir) < 0)
		return -1;
	snprintf(file, sizeof file, "%s/cgroup.controllers", dir);
	if (read_text(file, text, sizeof text) < 0)
		return -1;
	if (!has_token(text, "pids") && !has_token(text, "memory"))
		return -1; /* a hybrid host's empty unified tree: try v1 */
	if (access(dir, W_OK) < 0) {
		note("not delegated: %s not writable (%s)", dir, errno);
		return -1;
	}
	snprintf(file, sizeof file, "%s/cgroup.subtree_control", dir);
	if (read_text(file, text, sizeof text) < 0)
		return -1;
	const char *want[] = {"pids", "memory"};
	int ok[2] = {0, 0};
	for (int i = 0; i < 2; i++) {
		char plus[16];
		snprintf(plus, sizeof plus, "+%s", want[i]);
		ok[i] = has_token(text, want[i]) || write_text(dir, "cgroup.subtree_control", plus) == 0;
		if (!ok[i])
			note("cgroup v2: cannot enable controllers below %s (%s)", dir, errno);
	}
	if (!ok[0] && !ok[1])
		return -1;
	version = 2;
	strcpy(base[0], dir);
	has_pids = ok[0];
	has_memory = ok[1];
	return 0;
}

static int probe_v1(void)
{
	const char *ctl[] = {"pids", "memory"};
	int found = 0;
	for (int i = 0; i < 2; i++) {
		char dir[CG_PATH];
		if (find_dir("cgroup", ctl[i], dir) < 0) {
			note("no %s cgroup hierarchy mounted%s", ctl[i], 0);
			continue;
		}
		if (access(dir, W_OK) < 0) {
			note("not delegated: %s not writable (%s)", dir, errno);
			continue;
		}
		strcpy(base[i], dir);
		found = 1;
	}
	if (!found)
		return -1;
	version = 1;
	has_pids = base[0][0] != '\0';
	has_memory = base[1][0] != '\0';
	return 0;
}

/* A process stopped by SIGKILL cannot remove its cgroup: whoever comes
 * next does. A command's cgroup is empty only for an instant before its
 * sandbox enters and after the sandbox is gone, so an empty one a minute
 * old is left over; rmdir removes nothing else (it fails on a populated
 * cgroup, and its owner takes ENOENT for done). */
static void sweep(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	time_t now = time(NULL);
	struct dirent *ent;
	while ((ent = readdir(d))) {
		struct stat sb;
		if (strncmp(ent->d_name, "sfma-exec-", 10) == 0 &&
		    fstatat(fd, ent->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode) &&
		    now - sb.st_mtime > 60)
			unlinkat(fd, ent->d_name, AT_REMOVEDIR);
	}
	closedir(d);
}

static void probe(void)
{
	probed = 1;
	if (probe_found() == 0)
		start_keeper();
}

/* The keeper's job: remove sfma-exec-<owner>-* in every base directory. */
static void rm_owned(pid_t owner)
{
	char prefix[48];
	int n = snprintf(prefix, sizeof prefix, "sfma-exec-%d-", (int)owner);
	for (int i = 0; i < 2; i++) {
		DIR *d = base[i][0] ? opendir(base[i]) : NULL;
		if (!d)
			continue;
		struct dirent *ent;
		while ((ent = readdir(d))) {
			char dir[CG_PATH + 256];
			if (strncmp(ent->d_name, prefix, (size_t)n) == 0 &&
			    (size_t)snprintf(dir, sizeof dir, "%s/%s", base[i], ent->d_name) < sizeof dir)
				rm_cgroup(dir);
		}
		closedir(d);
	}
}

/* Find where cgroups can be made. 0 if anywhere, -1 if nowhere. */
static int probe_found(void)
{
	if (probe_v2() == 0) {
		sweep(base[0]);
		return 0;
	}
	char v2_reason[sizeof why_not];
	strcpy(v2_reason, why_not);
	why_not[0] = '\0';
	if (probe_v1() == 0) {
		for (int i = 0; i < 2; i++)
			if (base[i][0])
				sweep(base[i]);
		why_not[0] = '\0';
		if (!has_pids || !has_memory)
			snprintf(why_not, sizeof why_not, "cgroup v1: no %s hierarchy delegated",
			         has_pids ? "memory" : "pids");
		return 0;
	}
	if (!why_not[0])
		strcpy(why_not, v2_reason[0] ? v2_reason : "no cgroup hierarchy found");
	return -1;
}

/* ---- the keeper ---- */

/* A stage stopped by SIGKILL cannot remove its cgroups, and the planner's
 * supervisor does stop a stage that way when it lingers. So the first
 * cgroup also starts a keeper: a small child in a session of its own,
 * deaf to the usual stop signals, that waits for the end of a pipe only
 * this process (and its sandbox inits, which die with it) holds open, then
 * removes whatever cgroups of ours are left. After a normal exit there are
 * none and it leaves at once. */
static void start_keeper(void)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return; /* the sweep of the next stage is the fallback */
	pid_t owner = getpid();
	fflush(NULL);
	pid_t k = fork();
	if (k == 0) {
		setsid();
		signal(SIGTERM, SIG_IGN);
		signal(SIGINT, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		signal(SIGPIPE, SIG_IGN);
		/* Hold nothing of the stage's: its stdout must reach EOF when
		 * the stage exits, not when the keeper does. */
		if (p[0] > 0)
			syscall(SYS_close_range, 0u, (unsigned)p[0] - 1, 0u);
		syscall(SYS_close_range, (unsigned)p[0] + 1, ~0u, 0u);
		char byte;
		while (read(p[0], &byte, 1) < 0 && errno == EINTR)
			;
		rm_owned(owner);
		_exit(0);
	}
	close(p[0]);
	if (k < 0)
		close(p[1]);
}

/* ---- one cgroup per command ---- */

static int make_one(const char *parent, const char *name, char *out)
{
	if ((size_t)snprintf(out, CG_PATH, "%s/%s", parent, name) >= CG_PATH) {
		errno = ENAMETOOLONG;
		out[0] = '\0';
		return -1;
	}
	if (mkdir(out, 0755) < 0) {
		out[0] = '\0';
		return -1;
	}
	return 0;
}

struct cgroup_box *cgroup_open(long processes, long long memory_bytes, const char **reason)
{
	if (!probed)
		probe();
	*reason = why_not[0] ? why_not : NULL;
	if (!has_pids && !has_memory)
		return NULL;
	struct cgroup_box *b = NULL;
	for (size_t i = 0; i < CG_SLOTS && !b; i++)
		if (!slots[i].used)
			b = &slots[i];
	if (!b) {
		*reason = "no free cgroup slot";
		return NULL;
	}
	memset(b, 0, sizeof *b);
	b->version = version;
	b->pids_max = b->memory_max = -1;
	char name[64], num[32];
	snprintf(name, sizeof name, "sfma-exec-%d-%lu", (int)getpid(), ++counter);
	static char failed[CG_PATH + 160];
	failed[0] = '\0';
	/* Registered before mkdir: an exit in between still removes it. */
	b->used = 1;
	if (version == 2) {
		if (make_one(base[0], name, b->dir[0]) < 0) {
			snprintf(failed, sizeof failed, "mkdir in %s: %s", base[0], strerror(errno));
		} else {
			snprintf(num, sizeof num, "%ld", processes);
			if (has_pids && write_text(b->dir[0], "pids.max", num) == 0)
				b->pids_max = processes;
			snprintf(num, sizeof num, "%lld", memory_bytes);
			if (has_memory && write_text(b->dir[0], "memory.max", num) == 0) {
				b->memory_max = memory_bytes;
				b->swap_included = write_text(b->dir[0], "memory.swap.max", "0") == 0;
			}
		}
	} else {
		if (has_pids && make_one(base[0], name, b->dir[0]) == 0) {
			snprintf(num, sizeof num, "%ld", processes);
			if (write_text(b->dir[0], "pids.max", num) == 0)
				b->pids_max = processes;
		} else if (has_pids) {
			snprintf(failed, sizeof failed, "mkdir in %s: %s", base[0], strerror(errno));
		}
		if (has_memory && make_one(base[1], name, b->dir[1]) == 0) {
			snprintf(num, sizeof num, "%lld", memory_bytes);
			if (write_text(b->dir[1], "memory.limit_in_bytes", num) == 0) {
				b->memory_max = memory_bytes;
				/* memory+swap capped at the same figure: swap cannot
				 * extend the ceiling (file absent without swap accounting). */
				b->swap_included =
					write_text(b->dir[1], "memory.memsw.limit_in_bytes", num) == 0;
			}
		} else if (has_memory && !failed[0]) {
			snprintf(failed, sizeof failed, "mkdir in %s: %s", base[1], strerror(errno));
		}
	}
	if (b->pids_max < 0 && b->memory_max < 0) {
		if (!failed[0])
			snprintf(failed, sizeof failed, "setting the limits failed");
		*reason = failed;
		cgroup_close(b);
		return NULL;
	}
	if (failed[0])
		*reason = failed;
	else if ((b->pids_max < 0 || b->memory_max < 0) && !*reason)
		*reason = b->pids_max < 0 ? "pids limit not set" : "memory limit not set";
	return b;
}

int cgroup_enter(struct cgroup_box *b, pid_t pid)
{
	char num[32];
	snprintf(num, sizeof num, "%d", (int)pid);
	for (int i = 0; i < 2; i++) {
		if (!b->dir[i][0] || write_text(b->dir[i], "cgroup.procs", num) == 0)
			continue;
		/* Half in is not in: back into our own cgroups, so that removing
		 * these later finds them empty. */
		int saved = errno;
		for (int j = 0; j < i; j++)
			if (b->dir[j][0])
				write_text(base[b->version == 2 ? 0 : j], "cgroup.procs", num);
		errno = saved;
		return -1;
	}
	return 0;
}

int cgroup_memory_limited(const struct cgroup_box *b)
{
	return b && b->memory_max >= 0;
}

long long cgroup_memory_max(const struct cgroup_box *b)
{
	return b ? b->memory_max : -1;
}

/* A number file of dir ("" or unreadable: left as it is). */
static void read_count(const char *dir, const char *file, long long *out)
{
	char path[CG_PATH + 32], text[32];
	if (!dir[0] || (size_t)snprintf(path, sizeof path, "%s/%s", dir, file) >= sizeof path ||
	    read_text(path, text, sizeof text) < 0)
		return;
	char *end;
	long long v = strtoll(text, &end, 10);
	if (end != text && v >= 0)
		*out = v;
}

void cgroup_usage(const struct cgroup_box *b, long long *memory_bytes, long long *pids)
{
	if (!b)
		return;
	if (b->pids_max >= 0)
		read_count(b->dir[0], "pids.current", pids);
	if (b->memory_max >= 0)
		read_count(b->dir[b->version == 2 ? 0 : 1],
		           b->version == 2 ? "memory.current" : "memory.usage_in_bytes", memory_bytes);
}

json_t *cgroup_json(const struct cgroup_box *b)
{
	if (!b)
		return json_null();
	json_t *j = json_pack("{s:i}", "version", b->version);
	if (b->version == 2) {
		json_object_set_new(j, "path", json_string(b->dir[0]));
	} else {
		json_object_set_new(j, "pidsPath", b->dir[0][0] ? json_string(b->dir[0]) : json_null());
		json_object_set_new(j, "memoryPath", b->dir[1][0] ? json_string(b->dir[1]) : json_null());
	}
	json_object_set_new(j, "pidsMax", b->pids_max >= 0 ? json_integer(b->pids_max) : json_null());
	json_object_set_new(j, "memoryMaxBytes",
	                    b->memory_max >= 0 ? json_integer(b->memory_max) : json_null());
	json_object_set_new(j, "swapIncluded", json_boolean(b->swap_included));
	return j;
}

/* ---- removal (system calls only: also runs in a signal handler) ---- */

/* SIGKILL every process still listed in dir/cgroup.procs. */
static void kill_members(const char *dir)
{
	char path[CG_PATH + 32], text[4096];
	size_t dl = strlen(dir);
	if (dl + sizeof "/cgroup.procs" > sizeof path)
		return;
	memcpy(path, dir, dl);
	memcpy(path + dl, "/cgroup.procs", sizeof "/cgroup.procs");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n;
	long pid = 0;
	int digits = 0;
	while ((n = read(fd, text, sizeof text)) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (text[i] >= '0' && text[i] <= '9') {
				pid = pid * 10 + (text[i] - '0');
				digits = 1;
			} else {
				if (digits && pid > 1)
					kill((pid_t)pid, SIGKILL);
				pid = 0;
				digits = 0;
			}
		}
	}
	if (digits && pid > 1)
		kill((pid_t)pid, SIGKILL);
	close(fd);
}

/* rmdir fails with EBUSY while a task remains (an exiting one included):
 * kill what is left and retry for about two seconds. */
static int rm_cgroup(const char *dir)
{
	long wait_ms = 1;
	for (int attempt = 0; attempt < 24; attempt++) {
		if (rmdir(dir) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return -1;
		if (write_text(dir, "cgroup.kill", "1") < 0)
			kill_members(dir);
		sleep_ms(wait_ms);
		wait_ms = wait_ms < 200 ? wait_ms * 2 : 200;
	}
	return -1;
}

static int close_quiet(struct cgroup_box *b)
{
	int rc = 0;
	for (int i = 0; i < 2; i++) {
		if (b->dir[i][0] && rm_cgroup(b->dir[i]) < 0)
			rc = -1;
		else
			b->dir[i][0] = '\0';
	}
	if (rc == 0)
		b->used = 0;
	return rc;
}

void cgroup_close(struct cgroup_box *b)
{
	if (!b)
		return;
	for (int i = 0; i < 2; i++)
		if (b->dir[i][0] && rm_cgroup(b->dir[i]) < 0)
			warning("remove cgroup %s: %s", b->dir[i], strerror(errno));
	memset(b, 0, sizeof *b);
}

void cgroup_shutdown_signal(void)
{
	for (size_t i = 0; i < CG_SLOTS; i++)
		if (slots[i].used)
			close_quiet(&slots[i]);
}

void cgroup_shutdown(void)
{
	for (size_t i = 0; i < CG_SLOTS; i++)
		if (slots[i].used)
			cgroup_close(&slots[i]);
}
