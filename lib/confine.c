/* confine.c - the programs' confinement: the table and its enforcement.
 *
 * Three kernel facilities, applied in this order (confine_apply):
 *
 * 1. no_new_privs (prctl(2) PR_SET_NO_NEW_PRIVS): execve can no longer
 *    grant privileges (set-user-ID bits, file capabilities). Landlock's
 *    landlock_restrict_self(2) and seccomp(2) both require it of a
 *    process without CAP_SYS_ADMIN; it is inherited and cannot be unset.
 *
 * 2. Landlock (landlock(7)): an unprivileged process restricts itself to
 *    the file hierarchies and TCP ports it names. What each ABI adds:
 *      ABI 1 (Linux 5.13)  file access: execute, read, write, read a
 *                          directory, make and remove entries of each type;
 *                          a file can never be moved to another directory
 *                          (reparenting is always refused)
 *      ABI 2 (5.19)        LANDLOCK_ACCESS_FS_REFER: reparenting allowed
 *                          where granted on both sides
 *      ABI 3 (6.2)         LANDLOCK_ACCESS_FS_TRUNCATE
 *      ABI 4 (6.7)         TCP: LANDLOCK_ACCESS_NET_BIND_TCP / _CONNECT_TCP
 *                          per port
 *      ABI 5 (6.10)        LANDLOCK_ACCESS_FS_IOCTL_DEV (ioctl on devices)
 *      ABI 6 (6.12)        scoping: LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (no
 *                          connect to an abstract socket made outside the
 *                          domain) and LANDLOCK_SCOPE_SIGNAL (no signal to a
 *                          process outside it)
 *      ABI 7 (6.15)        audit logging of denials (flags of
 *                          landlock_restrict_self; the defaults are kept)
 *    Best effort, as landlock(7) recommends: the ruleset handles every right
 *    the running kernel knows and nothing it does not (a right it does not
 *    know is EINVAL), and the report names the ABI in force. The domain is
 *    inherited by every child and across execve, and layers only ever
 *    narrow it. A thread with filesystem rules can neither mount(2) nor
 *    pivot_root(2) (landlock(7), "Filesystem topology modification"); one
 *    whose ruleset handles no file access can (security/landlock/fs.c
 *    hook_sb_mount asks for the domain's file layers only, Linux >= 6.7).
 *    Landlock also limits ptrace(2) to processes of the same or a nested
 *    domain, from ABI 1 on. stat(2) and access(2) are not restricted.
 *
 * 3. seccomp (seccomp(2)), last: a filter refusing with EPERM execve and
 *    execveat where the program starts nothing, socket(2) for every family
 *    it has no use for, and io_uring (whose IORING_OP_SOCKET would open a
 *    socket no socket(2) rule sees). Installed with libseccomp, which
 *    checks the architecture first: a system call made through another ABI
 *    (int 0x80 on x86_64) kills the process instead of slipping past the
 *    numbers. ptrace is left to Landlock: LeakSanitizer stops the world
 *    with it at exit.
 *
 * Refusals thus read EACCES from Landlock (a path, a port) and EPERM from
 * seccomp (exec, a socket family). */
#include "confine.h"
#include "beside.h"
#include "ndjson.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <linux/landlock.h>
#include <linux/openat2.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* What this machine's kernel headers may predate (linux/landlock.h of
 * Linux 6.1 stops at ABI 2). */
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif
#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#endif
#define LL_FS_EXECUTE     (1ULL << 0)
#define LL_FS_WRITE_FILE  (1ULL << 1)
#define LL_FS_READ_FILE   (1ULL << 2)
#define LL_FS_READ_DIR    (1ULL << 3)
#define LL_FS_REMOVE_DIR  (1ULL << 4)
#define LL_FS_REMOVE_FILE (1ULL << 5)
#define LL_FS_MAKE_DIR    (1ULL << 7)
#define LL_FS_MAKE_REG    (1ULL << 8)
#define LL_FS_MAKE_FIFO   (1ULL << 10)
#define LL_FS_MAKE_SYM    (1ULL << 12)
#define LL_FS_REFER       (1ULL << 13)
#define LL_FS_TRUNCATE    (1ULL << 14)
#define LL_FS_IOCTL_DEV   (1ULL << 15)
#define LL_FS_ABI1        ((1ULL << 13) - 1) /* bits 0..12 */
#define LL_NET_BIND_TCP    (1ULL << 0)
#define LL_NET_CONNECT_TCP (1ULL << 1)
#define LL_SCOPE_ABSTRACT_UNIX (1ULL << 0)
#define LL_SCOPE_SIGNAL        (1ULL << 1)
#define LL_RULE_PATH_BENEATH 1
#define LL_RULE_NET_PORT     2
/* Rights that a rule on a file (not a directory) may carry. */
#define LL_FS_FILE_RIGHTS (LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)

/* The kernel's structures, spelled out for the same reason. A larger
 * ruleset_attr than the kernel knows is accepted while the extra fields
 * are zero (copy_struct_from_user), so one layout serves every ABI. */
struct ll_ruleset_attr {
	uint64_t handled_access_fs, handled_access_net, scoped;
};
struct ll_path_beneath {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));
struct ll_net_port {
	uint64_t allowed_access, port;
};

/* ---- the table ---------------------------------------------------------- */

/* Grants, as sets of rights. */
#define R    (LL_FS_READ_FILE | LL_FS_READ_DIR)
#define X    (R | LL_FS_EXECUTE)
/* A tree the program writes: files made, written, truncated, replaced by
 * rename (temporary file, then rename: atomic.c) and removed, directories
 * made. */
#define W    (R | LL_FS_WRITE_FILE | LL_FS_TRUNCATE | LL_FS_MAKE_REG | LL_FS_REMOVE_FILE | LL_FS_MAKE_DIR | LL_FS_REFER)
/* A tree another program owns entirely (git's store). */
#define WALL (W | LL_FS_REMOVE_DIR)
#define RW_DEV (LL_FS_READ_FILE | LL_FS_WRITE_FILE)

/* HTTPS through libcurl: its libraries (loaded after confinement by
 * dlopen, and libcurl's own through the name service), certificates and
 * OpenSSL's configuration, the name service; the CA settings a caller
 * may point elsewhere. */
#define HTTPS_GRANTS {"@runtime", R}, {"@tls", R}, {"@env:SSL_CERT_FILE", R}, {"@env:SSL_CERT_DIR", R}, \
                     {"@env:CURL_CA_BUNDLE", R}

const struct confine_policy confine_table[] = {
	/* The orchestrator, once every stage of its run has started: it only
	 * waits, forwards signals and reaps. No signal scope: the stages it
	 * signals were started before it confined, outside its domain. */
	{ .program = "sfma", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX },
	/* sfma relay's own process, which forks one orchestrator per run:
	 * what each run's processes inherit, so nothing any of them needs -
	 * exec allowed (the stages), every socket family. No Landlock layer
	 * at all: every layer denies a rename into another directory that
	 * no rule of its own allows (REFER, landlock(7): "denied by default
	 * by any ruleset, even if the right is not specified as handled"),
	 * so one without file rules would deny sfma-mem its memory.json,
	 * and one that grants REFER handles file access, under which
	 * sfma-exec could not mount. What is left: no_new_privs and seccomp
	 * (no io_uring); each stage scopes itself. */
	{ .program = "sfma/relay", .no_landlock = 1, .may_exec = 1, .sockets = CONFINE_SOCKETS_ANY },
	/* The planner reads the workspace (declared outputs, .sfma/inbox,
	 * HALT, memory.json, an interrupted run's record), writes the
	 * evidence store and removes the inbox files it has read: nothing
	 * directly in .sfma, so the observer's chain there is out of its
	 * reach (memory.json is sfma-mem's to replace). It starts no
	 * process: the memory store's git is sfma-mem's too. */
	{ .program = "sfma-plan", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@ws", R}, {"@ws/.sfma/evidence", W}, {"@ws/.sfma/inbox", R | LL_FS_REMOVE_FILE} } },
	/* The model stage: HTTPS through libcurl, loaded on first need; its
	 * keys come from the environment. TCP connect to the endpoints' and
	 * proxies' ports only (and 53, DNS over TCP). */
	{ .program = "sfma-model", .filesystem = 1, .sockets = CONFINE_SOCKETS_ANY, .may_connect = 1,
	  .scope_signal = 1, .grants = { HTTPS_GRANTS } },
	/* sfma-exec's own process makes the command sandboxes: their init
	 * mounts and pivots, and a thread with Landlock file rules can do
	 * neither, nor could a rule named in advance reach a staging tmpfs
	 * of another mount namespace. So its ruleset handles no file access:
	 * TCP and scoping only, seccomp with exec (its commands) and without
	 * internet sockets. The tool calls that touch the workspace (read,
	 * write, notify, ask) run in a process of their own, forked once
	 * the workspace exists: the next row. */
	{ .program = "sfma-exec", .filesystem = 0, .may_exec = 1, .sockets = CONFINE_SOCKETS_NO_INET,
	  .scope_signal = 1 },
	/* Landlock grants by hierarchy: the workspace's, .sfma included,
	 * which only the hard tier keeps it out of (by name and where a link
	 * leads: sfma-exec(1)). */
	{ .program = "sfma-exec/tools", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@ws", W} } },
	/* The trace and its head note, each replaced atomically in .sfma: a
	 * file made there needs write beneath the whole directory. */
	{ .program = "sfma-chain", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@argdir", W} } },
	/* The record, the checkpoint and the checkpoints kept; the key comes
	 * from the environment. */
	{ .program = "sfma-seal", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@ws/.sfma", W} } },
	/* The memory stage: the only one that runs git, in .sfma/mem (made
	 * before it confines), which it owns whole; it reads the trace for
	 * an episodic recall. memory.json it writes in .sfma/mem and renames
	 * into .sfma, where it may make and remove a file but write none. */
	{ .program = "sfma-mem", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .may_exec = 1, .needs_refer = 1,
	  .grants = { {"@ws/.sfma/mem", WALL}, {"@ws/.sfma", LL_FS_READ_DIR | LL_FS_MAKE_REG | LL_FS_REMOVE_FILE | LL_FS_REFER},
	              {"@ws/.sfma/trace.jsonl", LL_FS_READ_FILE}, {"@git", X},
	              {"@interp", X}, {"@runtime", R}, {"/dev/null", RW_DEV} } },
	/* The observer: it opens (or creates) .sfma/observed.jsonl before it
	 * confines, and keeps .sfma, where its note of the verified head is
	 * replaced atomically beside the chain. */
	{ .program = "sfma-tap", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@ws/.sfma", W} } },
	/* The mailbox bridges: the outbox they read, the inbox they fill and
	 * the state they keep in .sfma (replaced atomically there); the
	 * workspace's directories listed (the mailbox is opened through it),
	 * none of its files read. */
	{ .program = "sfma-telegram", .filesystem = 1, .sockets = CONFINE_SOCKETS_ANY, .may_connect = 1,
	  .scope_signal = 1, .grants = { {"@ws", LL_FS_READ_DIR}, {"@ws/.sfma", W}, HTTPS_GRANTS } },
	{ .program = "sfma-chat", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@ws", LL_FS_READ_DIR}, {"@ws/.sfma", W} } },
	/* The readers: what their operands name, nothing else. */
	{ .program = "sfma-verify", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@arg", R} } },
	/* sfma-replay, sfma-report and sfma-attest start their sfma-verify
	 * before they confine themselves (outside their domain). The replay
	 * rebuilds a call's path facts (directories, files, links, FIFOs) in
	 * an empty workspace of its own, made in TMPDIR, which it removes at
	 * the end: that one right in TMPDIR, to remove an empty directory. */
	{ .program = "sfma-replay", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@arg", R}, {"@scratch", W | LL_FS_MAKE_SYM | LL_FS_MAKE_FIFO | LL_FS_REMOVE_DIR},
	              {"@scratch/..", LL_FS_REMOVE_DIR} } },
	{ .program = "sfma-log", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@arg", R} } },
	/* -o FILE is replaced atomically: write beneath its directory. */
	{ .program = "sfma-report", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@arg", R}, {"@out", W} } },
	/* sfma-summary starts one sfma-verify per workspace as it goes: it
	 * may execute that one program (and the loader it names), which
	 * inherits this domain and narrows it again. */
	{ .program = "sfma-summary", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .may_exec = 1, .scope_signal = 1,
	  .grants = { {"@arg", R}, {"@beside:sfma-verify", X}, {"@interp", X}, {"@runtime", R},
	              {"/dev/null", LL_FS_READ_FILE} } },
	{ .program = "sfma-check", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@arg", R} } },
	{ .program = "sfma-export", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@arg", R} } },
	/* sfma-export --endpoint URL: the collector's port, and HTTPS. */
	{ .program = "sfma-export/endpoint", .filesystem = 1, .sockets = CONFINE_SOCKETS_ANY, .may_connect = 1,
	  .scope_signal = 1, .grants = { {"@arg", R}, HTTPS_GRANTS } },
	{ .program = "sfma-prove", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@arg", R} } },
	{ .program = "sfma-attest", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@arg", R} } },
	{ .program = "sfma-endpoints", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@arg", R} } },
	/* --reset: memory.json, replaced atomically in .sfma. */
	{ .program = "sfma-endpoints/reset", .filesystem = 1, .sockets = CONFINE_SOCKETS_UNIX, .scope_signal = 1,
	  .grants = { {"@ws/.sfma", W} } },
	{ .program = NULL },
};

/* The fixed sets. */
static const char *const everyone_paths[] = {
	"/dev/urandom", "/sys/devices/system/cpu/online", "/etc/localtime", "/usr/share/zoneinfo", NULL,
};
static const char *const runtime_paths[] = {
	/* the dynamic loader's: libraries loaded after confinement (dlopen) */
	"/lib", "/lib64", "/usr/lib", "/usr/lib64", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/usr/share/locale", "/etc/localtime", "/usr/share/zoneinfo", "/etc/nsswitch.conf", "/etc/passwd",
	"/etc/group", "/dev/urandom", NULL,
};
static const char *const tls_paths[] = {
	/* certificates and OpenSSL's configuration */
	"/etc/ssl", "/usr/lib/ssl", "/usr/share/ca-certificates", "/etc/ca-certificates", "/etc/pki",
	/* the name service: getaddrinfo(3) */
	"/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf", "/etc/services", "/etc/protocols",
	"/etc/nsswitch.conf", NULL,
};
static const char *const git_paths[] = {
	"/usr/bin/git", "/usr/lib/git-core", "/usr/share/git-core", "/bin/git", NULL,
};

const struct confine_policy *confine_policy(const char *program)
{
	for (const struct confine_policy *p = confine_table; p->program; p++)
		if (strcmp(p->program, program) == 0)
			return p;
	return NULL;
}

/* ---- Landlock ----------------------------------------------------------- */

int confine_landlock_abi(const char **why)
{
	long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	if (abi > 0) {
		*why = "";
		return (int)abi;
	}
	if (errno == ENOSYS)
		*why = "the kernel has no Landlock (ENOSYS)";
	else if (errno == EOPNOTSUPP)
		*why = "Landlock is disabled at boot (EOPNOTSUPP)";
	else
		*why = "Landlock cannot be asked for its ABI";
	return 0;
}

/* The file rights an ABI knows. */
static uint64_t fs_rights(int abi)
{
	uint64_t r = LL_FS_ABI1;
	if (abi >= 2)
		r |= LL_FS_REFER;
	if (abi >= 3)
		r |= LL_FS_TRUNCATE;
	if (abi >= 5)
		r |= LL_FS_IOCTL_DEV;
	return r;
}

/* Add the rule of the file or directory fd is (consumed). Returns 0, or
 * -1 with errno. */
static int add_fd(int ruleset, int fd, uint64_t access, uint64_t handled)
{
	struct stat st;
	int rc = -1;
	if (fstat(fd, &st) == 0) {
		struct ll_path_beneath rule = {.allowed_access = access & handled, .parent_fd = fd};
		if (!S_ISDIR(st.st_mode))
			rule.allowed_access &= LL_FS_FILE_RIGHTS;
		rc = rule.allowed_access == 0 ? 0
		     : (int)syscall(__NR_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &rule, 0);
	}
	int saved = errno;
	close(fd);
	errno = saved;
	return rc;
}

/* Whether an open that found nothing to grant is no rule: a path that
 * does not exist has nothing to reach (and what is made there later
 * stays out of reach). */
static int nothing_there(int err)
{
	return err == ENOENT || err == ENOTDIR || err == EACCES || err == ELOOP || err == EXDEV;
}

/* Add one path's rule (a system path: its links are followed). Returns
 * 0, or -1 with errno. */
static int add_path(int ruleset, const char *path, uint64_t access, uint64_t handled)
{
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return nothing_there(errno) ? 0 : -1;
	return add_fd(ruleset, fd, access, handled);
}

/* A path beneath the workspace (rel, e.g. ".sfma/mem"): reached without
 * following a link on the way or at its end (openat2 RESOLVE_NO_SYMLINKS,
 * Linux 5.6, older than any Landlock), so that a link planted in the
 * workspace cannot turn a grant into one on whatever it points at; the
 * program's own checks then meet the link. The workspace itself is
 * followed. */
static int add_beneath(int ruleset, const char *workspace, const char *rel, uint64_t access, uint64_t handled)
{
	int ws = open(workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (ws < 0)
		return nothing_there(errno) ? 0 : -1;
	if (!*rel)
		return add_fd(ruleset, ws, access, handled);
	struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
	int fd = (int)syscall(SYS_openat2, ws, rel, &how, sizeof how);
	int saved = errno;
	close(ws);
	if (fd < 0)
		return nothing_there(saved) ? 0 : (errno = saved, -1);
	return add_fd(ruleset, fd, access, handled);
}

static int add_set(int ruleset, const char *const *set, uint64_t access, uint64_t handled)
{
	for (; *set; set++)
		if (add_path(ruleset, *set, access, handled) < 0)
			return -1;
	return 0;
}

/* The directory part of path ("." when none), in buf. */
static const char *dir_of(const char *path, char *buf, size_t cap)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return ".";
	size_t len = slash == path ? 1 : (size_t)(slash - path);
	if (len >= cap)
		return NULL;
	memcpy(buf, path, len);
	buf[len] = '\0';
	return buf;
}

/* The ELF interpreter the running program names (PT_INTERP of the first
 * object dl_iterate_phdr(3) reports: the program itself), into buf. */
struct interp_find {
	char *buf;
	size_t cap;
	int found;
};

static int find_interp(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct interp_find *f = arg;
	for (size_t i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_INTERP) {
			const char *path = (const char *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
			f->found = snprintf(f->buf, f->cap, "%s", path) < (int)f->cap;
		}
	return 1; /* the first object only */
}

static const char *interp_path(char *buf, size_t cap)
{
	struct interp_find f = {.buf = buf, .cap = cap};
	dl_iterate_phdr(find_interp, &f);
	return f.found ? buf : NULL;
}

/* The program name in this program's directory, into buf. */
static const char *beside(const char *name, char *buf, size_t cap)
{
	return beside_self(name, buf, cap) == 0 ? buf : NULL;
}

/* The program name as execvp(3) finds it on PATH, and when it is a
 * script its interpreter (#!), which execve(2) opens for execution too:
 * the one the operator's PATH would run, wherever it is installed. */
static int add_on_path(int ruleset, const char *name, uint64_t rights, uint64_t handled)
{
	const char *path = getenv("PATH");
	char cand[PATH_MAX];
	for (const char *p = path ? path : ""; *p;) {
		size_t len = strcspn(p, ":");
		struct stat st;
		if (len > 0 && snprintf(cand, sizeof cand, "%.*s/%s", (int)len, p, name) < (int)sizeof cand &&
		    stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
			break;
		cand[0] = '\0';
		p += len + (p[len] == ':');
	}
	if (!cand[0] || add_path(ruleset, cand, rights, handled) < 0)
		return cand[0] ? -1 : 0;
	char head[256];
	int fd = open(cand, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, head, sizeof head - 1);
	if (fd >= 0)
		close(fd);
	if (n < 2 || head[0] != '#' || head[1] != '!')
		return 0;
	head[n] = '\0';
	char *interp = head + 2 + strspn(head + 2, " \t");
	interp[strcspn(interp, " \t\n")] = '\0';
	return interp[0] == '/' ? add_path(ruleset, interp, rights, handled) : 0;
}

static int add_each(int ruleset, const char *const *paths, int dirs, uint64_t access, uint64_t handled)
{
	char buf[PATH_MAX];
	for (const char *const *a = paths; a && *a; a++) {
		const char *path = dirs ? dir_of(*a, buf, sizeof buf) : *a;
		if (!path) {
			errno = ENAMETOOLONG;
			return -1;
		}
		if (add_path(ruleset, path, access, handled) < 0)
			return -1;
	}
	return 0;
}

/* One grant of the table, its placeholder expanded. */
static int add_grant(int ruleset, const struct confine_grant *g, const struct confine_places *pl, uint64_t handled)
{
	char buf[PATH_MAX];
	const char *p = g->path;
	if (strncmp(p, "@ws", 3) == 0 && (p[3] == '\0' || p[3] == '/'))
		return pl->workspace ? add_beneath(ruleset, pl->workspace, p[3] ? p + 4 : "", g->access, handled) : 0;
	if (strcmp(p, "@arg") == 0)
		return add_each(ruleset, pl->args, 0, g->access, handled);
	if (strcmp(p, "@argdir") == 0)
		return add_each(ruleset, pl->args, 1, g->access, handled);
	if (strcmp(p, "@out") == 0)
		return add_each(ruleset, pl->outs, 1, g->access, handled);
	if (strcmp(p, "@scratch") == 0 || strcmp(p, "@scratch/..") == 0) {
		const char *const scratch[] = { pl->scratch, NULL };
		return add_each(ruleset, pl->scratch ? scratch : NULL, p[8] != '\0', g->access, handled);
	}
	if (strncmp(p, "@env:", 5) == 0) {
		const char *v = getenv(p + 5);
		return v && *v ? add_path(ruleset, v, g->access, handled) : 0;
	}
	if (strncmp(p, "@beside:", 8) == 0) {
		const char *path = beside(p + 8, buf, sizeof buf);
		return path ? add_path(ruleset, path, g->access, handled) : 0;
	}
	if (strcmp(p, "@interp") == 0) {
		const char *path = interp_path(buf, sizeof buf);
		return path ? add_path(ruleset, path, g->access, handled) : 0; /* static: none */
	}
	if (strcmp(p, "@runtime") == 0)
		return add_set(ruleset, runtime_paths, g->access, handled);
	if (strcmp(p, "@tls") == 0)
		return add_set(ruleset, tls_paths, g->access, handled);
	if (strcmp(p, "@git") == 0)
		return add_set(ruleset, git_paths, g->access, handled) < 0 ? -1 : add_on_path(ruleset, "git", g->access, handled);
	return add_path(ruleset, p, g->access, handled);
}

/* Build and enforce the Landlock part. Returns the ABI in force, or 0 with
 * r->why set. */
static int apply_landlock(const struct confine_policy *p, const struct confine_places *pl, struct confine_report *r)
{
	if (p->no_landlock) {
		snprintf(r->why, sizeof r->why, "no Landlock layer: every process it starts would inherit it");
		return 0;
	}
	const char *why;
	int abi = confine_landlock_abi(&why);
	if (abi == 0) {
		snprintf(r->why, sizeof r->why, "%s", why);
		return 0;
	}
	/* ABI 1 refuses every move to another directory: a program that
	 * needs one cannot work under it (landlock(7), "Previous
	 * limitations"). */
	if (abi < 2 && p->needs_refer) {
		snprintf(r->why, sizeof r->why, "ABI %d cannot allow renames across directories", abi);
		return 0;
	}
	struct ll_ruleset_attr attr = {0};
	uint64_t handled = p->filesystem ? fs_rights(abi) : 0;
	attr.handled_access_fs = handled;
	if (abi >= 4)
		attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
	if (abi >= 6)
		attr.scoped = LL_SCOPE_ABSTRACT_UNIX | (p->scope_signal ? LL_SCOPE_SIGNAL : 0);
	/* Without file rules only TCP (ABI 4) and scoping (ABI 6) are left
	 * to handle; a ruleset that handles nothing is refused (ENOMSG). */
	if (!attr.handled_access_fs && !attr.handled_access_net && !attr.scoped) {
		snprintf(r->why, sizeof r->why, "ABI %d has no rule this process can take", abi);
		return 0;
	}
	int ruleset = (int)syscall(__NR_landlock_create_ruleset, &attr, sizeof attr, 0);
	if (ruleset < 0) {
		snprintf(r->why, sizeof r->why, "landlock_create_ruleset: %s", strerror(errno));
		return 0;
	}
	int failed = 0;
	const char *step = "";
	/* In a sanitized build the sanitizer reads /proc/self/maps at start
	 * and exit (LeakSanitizer) and on a report: /proc is granted there
	 * only - /proc, not /proc/self, which a rule would pin to this
	 * process's directory, and a program this one starts is sanitized
	 * too. Another process's maps stay out of reach all the same: the
	 * kernel asks for ptrace access, which Landlock refuses outside the
	 * domain. */
#if defined(__SANITIZE_ADDRESS__)
	if (p->filesystem && add_path(ruleset, "/proc", R, handled) < 0)
		failed = 1, step = "/proc";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
	if (p->filesystem && add_path(ruleset, "/proc", R, handled) < 0)
		failed = 1, step = "/proc";
#endif
#endif
	/* What every program may read: /dev/urandom, from which jansson seeds
	 * its hash tables (else it falls back to the time and the pid, a seed
	 * hostile JSON could aim its keys at) when the first object is made
	 * after confinement, the online CPUs glibc's sysconf counts, and the
	 * time zone. */
	if (!failed && p->filesystem && add_set(ruleset, everyone_paths, LL_FS_READ_FILE, handled) < 0)
		failed = 1, step = "/dev/urandom";
	for (size_t i = 0; !failed && p->filesystem && i < CONFINE_MAX_GRANTS && p->grants[i].path; i++)
		if (add_grant(ruleset, &p->grants[i], pl, handled) < 0)
			failed = 1, step = p->grants[i].path;
	for (size_t i = 0; !failed && abi >= 4 && p->may_connect && i < pl->n_ports; i++) {
		struct ll_net_port rule = {.allowed_access = LL_NET_CONNECT_TCP, .port = pl->ports[i]};
		if (syscall(__NR_landlock_add_rule, ruleset, LL_RULE_NET_PORT, &rule, 0) < 0)
			failed = 1, step = "a TCP port";
	}
	if (failed) {
		snprintf(r->why, sizeof r->why, "landlock_add_rule %s: %s", step, strerror(errno));
		close(ruleset);
		return 0;
	}
	if (syscall(__NR_landlock_restrict_self, ruleset, 0) < 0) {
		snprintf(r->why, sizeof r->why, "landlock_restrict_self: %s", strerror(errno));
		close(ruleset);
		return 0;
	}
	close(ruleset);
	/* What the ABI in force leaves out of this row. */
	if (!p->filesystem)
		snprintf(r->why, sizeof r->why, "no file rules: it makes the command sandboxes");
	else if (abi < 4 && p->may_connect)
		snprintf(r->why, sizeof r->why, "ABI %d has no TCP rules", abi);
	return abi;
}

/* ---- seccomp ------------------------------------------------------------ */

static struct scmp_arg_cmp arg0(enum scmp_compare op, scmp_datum_t a, scmp_datum_t b)
{
	struct scmp_arg_cmp c = {.arg = 0, .op = op, .datum_a = a, .datum_b = b};
	return c;
}

static int apply_seccomp(const struct confine_policy *p)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return -1;
	const uint32_t refuse = SCMP_ACT_ERRNO(EPERM);
	int rc = 0;
	if (!p->may_exec) {
		rc |= seccomp_rule_add(ctx, refuse, SCMP_SYS(execve), 0);
		rc |= seccomp_rule_add(ctx, refuse, SCMP_SYS(execveat), 0);
	}
	if (p->sockets == CONFINE_SOCKETS_UNIX) {
		/* The whole 64-bit argument is compared: upper bits that the
		 * kernel ignores (domain is an int) can only make it refuse. */
		rc |= seccomp_rule_add(ctx, refuse, SCMP_SYS(socket), 1, arg0(SCMP_CMP_NE, AF_UNIX, 0));
	} else if (p->sockets == CONFINE_SOCKETS_NO_INET) {
		/* Masked to the int the kernel reads, so that upper bits cannot
		 * make AF_INET look like another family. */
		static const int families[] = { AF_INET, AF_INET6, AF_PACKET };
		for (size_t i = 0; i < sizeof families / sizeof *families; i++)
			rc |= seccomp_rule_add(ctx, refuse, SCMP_SYS(socket), 1,
			                       arg0(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)families[i]));
	}
	rc |= seccomp_rule_add(ctx, refuse, SCMP_SYS(io_uring_setup), 0);
	rc |= seccomp_rule_add(ctx, refuse, SCMP_SYS(io_uring_enter), 0);
	rc |= seccomp_rule_add(ctx, refuse, SCMP_SYS(io_uring_register), 0);
	/* no_new_privs is ours to set (confine_apply), not libseccomp's. */
	rc |= seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc == 0 ? 0 : -1;
}

int confine_apply(const struct confine_policy *p, const struct confine_places *pl, struct confine_report *r)
{
	static const struct confine_places none = {0};
	if (!pl)
		pl = &none;
	memset(r, 0, sizeof *r);
	snprintf(r->stage, sizeof r->stage, "%s", p->program);
#ifdef SFMA_BENCH_NO_CONFINE
	/* Only for tests/bench/confine.sh, which measures what confinement
	 * costs against a build without it; never in a built program. */
	(void)pl;
	snprintf(r->why, sizeof r->why, "a benchmark's build without confinement");
	return -1;
#endif
	r->no_new_privs = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ||
	                  prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1;
	r->abi = apply_landlock(p, pl, r);
	r->seccomp = apply_seccomp(p) == 0;
	return r->abi > 0 && r->seccomp && r->no_new_privs ? 0 : -1;
}

/* ---- reports ------------------------------------------------------------ */

json_t *confine_report_json(const struct confine_report *r)
{
	json_t *j = json_object();
	json_object_set_new(j, "stage", json_string(r->stage));
	json_object_set_new(j, "landlock", r->abi > 0 ? json_integer(r->abi) : json_string("unavailable"));
	json_object_set_new(j, "seccomp", json_boolean(r->seccomp));
	json_object_set_new(j, "noNewPrivs", json_boolean(r->no_new_privs));
	if (r->why[0])
		json_object_set_new(j, "why", json_string(r->why));
	return j;
}

json_t *confine_unreported_json(const char *stage)
{
	return json_pack("{s:s, s:b}", "stage", stage, "reported", 0);
}

int confine_lacks(const json_t *data, const char **what)
{
	json_t *ll = json_object_get(data, "landlock");
	if (json_is_false(json_object_get(data, "reported")) || !ll) {
		*what = "did not report its confinement";
		return 1;
	}
	long long abi;
	if (!ndjson_integer(ll, &abi) || abi < 1) {
		const char *why = json_string_value(json_object_get(data, "why"));
		*what = why ? why : "has no Landlock";
		return 1;
	}
	if (!json_is_true(json_object_get(data, "seccomp"))) {
		*what = "has no seccomp filter";
		return 1;
	}
	if (!json_is_true(json_object_get(data, "noNewPrivs"))) {
		*what = "has no no_new_privs";
		return 1;
	}
	return 0;
}

/* A stage name as a report may give it: lower-case letters, digits, '-'
 * and '/', at most 47 bytes. */
static int plain_stage(const char *s, size_t n)
{
	if (n == 0 || n >= sizeof ((struct confine_report *)0)->stage)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '/'))
			return 0;
	return 1;
}

json_t *confine_report_read(const char *msg, size_t n, const char *stage)
{
	struct sfma_err e;
	json_t *in = msg ? ndjson_parse(msg, n, &e) : NULL;
	json_t *name = json_object_get(in, "stage"), *ll = json_object_get(in, "landlock"),
	       *sc = json_object_get(in, "seccomp"), *nnp = json_object_get(in, "noNewPrivs"),
	       *why = json_object_get(in, "why");
	size_t len = strlen(stage);
	const char *claimed = json_string_value(name);
	size_t claimed_len = json_string_length(name);
	/* Its own name, or a process of its own ("sfma-exec/tools"). */
	int named = claimed && plain_stage(claimed, claimed_len) && strncmp(claimed, stage, len) == 0 &&
	            (claimed[len] == '\0' || (claimed[len] == '/' && claimed[len + 1]));
	long long abi = 0;
	int abi_ok = (ndjson_integer(ll, &abi) && abi >= 1 && abi <= 255) || ndjson_string_is(ll, "unavailable");
	int why_ok = !why || (json_is_string(why) && json_string_length(why) < sizeof ((struct confine_report *)0)->why &&
	                      strlen(json_string_value(why)) == json_string_length(why));
	json_t *out;
	if (!json_is_object(in) || !named || !abi_ok || !json_is_boolean(sc) || !json_is_boolean(nnp) || !why_ok) {
		out = confine_unreported_json(stage);
		json_object_set_new(out, "why", json_string(msg ? "its report is not one" : "no report came"));
	} else {
		out = json_pack("{s:O, s:o, s:O, s:O}", "stage", name, "landlock",
		                abi ? json_integer((json_int_t)abi) : json_string("unavailable"), "seccomp", sc,
		                "noNewPrivs", nnp);
		if (why && json_string_length(why))
			json_object_set(out, "why", why);
	}
	json_decref(in);
	return out;
}

/* ---- the channel -------------------------------------------------------- */

int confine_channel_take(void)
{
	const char *v = getenv(CONFINE_FD_ENV);
	if (!v)
		return -1;
	char *end;
	errno = 0;
	long fd = strtol(v, &end, 10);
	int ok = !errno && end != v && !*end && fd > 2 && fd < INT_MAX;
	unsetenv(CONFINE_FD_ENV);
	struct stat st;
	if (!ok || fstat((int)fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return -1;
	fcntl((int)fd, F_SETFD, FD_CLOEXEC);
	return (int)fd;
}

int confine_channel_await(int fd)
{
	char go;
	ssize_t n;
	do
		n = recv(fd, &go, 1, 0);
	while (n < 0 && errno == EINTR);
	return n == 1 ? 0 : -1;
}

int confine_channel_send(int fd, const struct confine_report *r)
{
	json_t *j = confine_report_json(r);
	char *text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!text) {
		errno = ENOMEM;
		return -1;
	}
	ssize_t n;
	do
		n = send(fd, text, strlen(text), MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	int saved = errno;
	free(text);
	errno = saved;
	return n < 0 ? -1 : 0;
}

int confine_stage(int *channel, const char *program, const struct confine_places *pl,
                  struct confine_report *r)
{
	const struct confine_policy *p = confine_policy(program);
	int rc = -1;
	if (*channel >= 0)
		confine_channel_await(*channel); /* a planner gone first: confined all the same */
	if (p) {
		rc = confine_apply(p, pl, r);
	} else {
		memset(r, 0, sizeof *r);
		snprintf(r->stage, sizeof r->stage, "%s", program);
		snprintf(r->why, sizeof r->why, "no row in the confinement table");
	}
	if (*channel >= 0) {
		confine_channel_send(*channel, r);
		close(*channel);
		*channel = -1;
	}
	return rc;
}

int confine_self(const char *program, const char *const *reads, const struct confine_places *pl)
{
	const char *args[16];
	size_t n = 0;
	for (; reads && *reads && n < 15; reads++)
		if (strcmp(*reads, "-") != 0)
			args[n++] = *reads;
	args[n] = NULL;
	struct confine_places places = pl ? *pl : (struct confine_places){0};
	places.args = args;
	int channel = -1;
	struct confine_report r;
	return confine_stage(&channel, program, &places, &r);
}
