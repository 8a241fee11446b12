/* hardtier.c - the deterministic gate in front of every tool call
 * (sfma-exec(1)): where a path really leads, which outputs may be
 * written, which command lines may run. Pure decisions plus the few opens
 * needed to know where a path leads; nothing here writes a file. */
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "err.h"

char *quote_path(const char *s, size_t n)
{
	size_t keep = n > REASON_PATH_MAX ? REASON_PATH_MAX : n;
	/* Never cut a UTF-8 sequence in half: back off continuation bytes. */
	while (keep < n && keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80)
		keep--;
	char *q = xmalloc(keep + 4);
	for (size_t i = 0; i < keep; i++) {
		unsigned char ch = (unsigned char)s[i];
		q[i] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
	}
	if (keep < n) {
		memcpy(q + keep, "...", 4);
	} else {
		q[keep] = '\0';
	}
	return q;
}

static char *reason_of(const char *tool, const char *path, size_t n, const char *what)
{
	char *q = quote_path(path, n);
	struct buf b = {0};
	buf_printf(&b, "%s %s: %s", tool, q, what);
	free(q);
	return b.p;
}

/* 1 if some component of the raw path is "..". */
static int has_dotdot(const char *p)
{
	for (const char *s = p; *s;) {
		const char *end = strchr(s, '/');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		if (len == 2 && s[0] == '.' && s[1] == '.')
			return 1;
		s += len;
		if (*s == '/')
			s++;
	}
	return 0;
}

/* The lexical rules shared by read and write. Returns the normalized path
 * (owned) or NULL with *refusal set. */
static char *lexical_gate(const char *tool, const char *path, size_t n, char **refusal)
{
	if (strlen(path) != n) {
		*refusal = reason_of(tool, path, n, "path contains a NUL byte");
		return NULL;
	}
	if (path[0] == '/' || has_dotdot(path)) {
		*refusal = reason_of(tool, path, n, "outside workspace");
		return NULL;
	}
	char *norm = path_normalize(path);
	if (!norm)
		*refusal = reason_of(tool, path, n, "empty path");
	return norm;
}

static int is_reserved(const char *norm)
{
	return strcmp(norm, ".sfma") == 0 || strncmp(norm, ".sfma/", 6) == 0;
}

#define MAX_LINKS 40

/* The same resolution as openat2 RESOLVE_BENEATH, done by hand for kernels
 * before 5.6 (and valgrind, which does not know openat2): components are
 * taken one at a time, a symlink's target is spliced in front of the rest
 * and resolved the same way, and ".." above the start is EXDEV. Only
 * directories already checked to be real are on the prefix that is opened.
 * It refuses as openat2(2) does: an absolute path is EXDEV (RESOLVE_BENEATH
 * rejects absolute pathnames), an empty one ENOENT (path_resolution(7):
 * an empty pathname does not resolve), and a trailing slash requires a
 * directory (ENOTDIR). */
/* What a walk met, for path_facts: each path looked at once, in order. */
static void fact_add(json_t *facts, const char *path, const struct stat *st, int err, int dirfd)
{
	if (!facts || json_array_size(facts) >= PATH_FACTS_MAX)
		return;
	size_t i;
	json_t *f;
	json_array_foreach(facts, i, f)
		if (strcmp(json_string_value(json_object_get(f, "path")), path) == 0)
			return;
	const char *kind = err ? "missing" : S_ISDIR(st->st_mode) ? "dir" : S_ISREG(st->st_mode) ? "file"
	                 : S_ISLNK(st->st_mode) ? "link" : S_ISFIFO(st->st_mode) ? "fifo" : "other";
	if (err && err != ENOENT)
		return; /* not a fact of the tree: the walk's error speaks for itself */
	f = json_pack("{s:o, s:s}", "path", json_text(path, strlen(path)), "kind", kind);
	if (!err && S_ISLNK(st->st_mode)) {
		char target[PATH_MAX];
		ssize_t tl = readlinkat(dirfd, path, target, sizeof target - 1);
		if (tl < 0) {
			json_decref(f);
			return;
		}
		json_object_set_new(f, "target", json_text(target, (size_t)tl));
	}
	json_array_append_new(facts, f);
}

static int walk_beneath(int dirfd, const char *rel, int flags, int no_symlinks, json_t *facts);

int open_beneath_walk(int dirfd, const char *rel, int flags, int no_symlinks)
{
	return walk_beneath(dirfd, rel, flags, no_symlinks, NULL);
}

json_t *path_facts(int dirfd, const char *norm)
{
	json_t *facts = json_array();
	int fd = walk_beneath(dirfd, norm, O_PATH, 0, facts);
	if (fd >= 0)
		close(fd);
	return facts;
}

static int walk_beneath(int dirfd, const char *rel, int flags, int no_symlinks, json_t *facts)
{
	if (rel[0] == '\0' || rel[0] == '/') {
		errno = rel[0] ? EXDEV : ENOENT;
		return -1;
	}
	struct buf pending = {0}, done = {0};
	buf_adds(&pending, rel);
	int links = 0, fd = -1, err = 0;
	int want_dir = rel[strlen(rel) - 1] == '/'; /* of the path left to resolve */
	int at_dir = 1; /* what done names is a directory */
	while (pending.len > 0) {
		size_t len = strcspn(pending.p, "/");
		char *comp = xstrdup(pending.p);
		comp[len] = '\0';
		size_t skip = len + (pending.p[len] == '/');
		memmove(pending.p, pending.p + skip, pending.len - skip + 1);
		pending.len -= skip;
		int dots = len == 0 || strcmp(comp, ".") == 0 ? 1 : strcmp(comp, "..") == 0 ? 2 : 0;
		if (dots && !at_dir) { /* "file/." and "file/..": the kernel's ENOTDIR */
			free(comp);
			err = ENOTDIR;
			break;
		}
		if (dots == 1) {
			free(comp);
			continue;
		}
		if (dots == 2) {
			free(comp);
			char *up = strrchr(done.p ? done.p : "", '/');
			if (done.len == 0) {
				err = EXDEV;
				break;
			}
			done.len = up ? (size_t)(up - done.p) : 0;
			done.p[done.len] = '\0';
			continue;
		}
		size_t before = done.len;
		if (done.len)
			buf_addc(&done, '/');
		buf_adds(&done, comp);
		free(comp);
		struct stat st;
		if (fstatat(dirfd, done.p, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			err = errno;
			fact_add(facts, done.p, &st, err, dirfd);
			break;
		}
		fact_add(facts, done.p, &st, 0, dirfd);
		at_dir = S_ISDIR(st.st_mode);
		if (!S_ISLNK(st.st_mode))
			continue;
		char target[PATH_MAX];
		ssize_t tl = readlinkat(dirfd, done.p, target, sizeof target - 1);
		if (no_symlinks || ++links > MAX_LINKS || tl < 0) {
			err = tl < 0 ? errno : ELOOP;
			break;
		}
		target[tl] = '\0';
		if (target[0] == '/') {
			err = EXDEV;
			break;
		}
		if (pending.len == 0) /* the target takes the place of the last component */
			want_dir |= tl > 0 && target[tl - 1] == '/';
		done.len = before; /* a checked directory again */
		if (done.p)
			done.p[before] = '\0';
		at_dir = 1;
		struct buf next = {0};
		buf_printf(&next, "%s%s%s", target, pending.len ? "/" : "", pending.p ? pending.p : "");
		buf_free(&pending);
		pending = next;
	}
	if (!err) {
		/* The kernel checks the trailing slash: "file/" is ENOTDIR (the
		 * start itself, "." here, is a directory). */
		if (want_dir && done.len)
			buf_addc(&done, '/');
		fd = openat(dirfd, done.len ? done.p : ".", flags | O_NOFOLLOW | O_CLOEXEC);
		err = errno;
	}
	buf_free(&pending);
	buf_free(&done);
	errno = err;
	return fd;
}

/* openat2 confined to the workspace: symlinks that stay inside are
 * followed, one that leads out (absolute or through "..") fails with
 * EXDEV; magic links (/proc/self/fd/N) are refused outright. */
int open_beneath(int dirfd, const char *rel, int flags, int no_symlinks)
{
	static int have_openat2 = 1;
	struct open_how how = {
		.flags = (unsigned long long)(flags | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
		           (no_symlinks ? RESOLVE_NO_SYMLINKS : 0),
	};
	long fd = -1;
	if (have_openat2) {
		do
			fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
		while (fd < 0 && errno == EINTR);
		if (fd >= 0 || errno != ENOSYS)
			return (int)fd;
		have_openat2 = 0;
	}
	return open_beneath_walk(dirfd, rel, flags, no_symlinks);
}

int path_open_read(const struct exec_ctx *c, const char *path, size_t n,
                   char **refusal, char **error)
{
	*refusal = *error = NULL;
	char *norm = lexical_gate("read", path, n, refusal);
	if (!norm)
		return -1;
	/* O_NONBLOCK: opening a FIFO must not hang the stage. */
	int fd = open_beneath(c->ws_fd, norm, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
	free(norm);
	if (fd < 0) {
		if (errno == EXDEV || errno == ELOOP)
			*refusal = reason_of("read", path, n, "escapes workspace via link");
		else
			*error = reason_of("read", path, n, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		*refusal = reason_of("read", path, n, "not a regular file");
		return -1;
	}
	return fd;
}

/* Where fd really is, relative to the workspace: "" for the workspace
 * itself, NULL when outside (owned). */
static char *relative_real(const struct exec_ctx *c, int fd)
{
	char link[64], real[PATH_MAX];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t len = readlink(link, real, sizeof real - 1);
	if (len < 0)
		return NULL;
	real[len] = '\0';
	size_t wl = strlen(c->ws_real);
	if (strcmp(c->ws_real, "/") == 0)
		return xstrdup(real + 1);
	if (strncmp(real, c->ws_real, wl) != 0 || (real[wl] != '\0' && real[wl] != '/'))
		return NULL;
	return xstrdup(real[wl] == '/' ? real + wl + 1 : "");
}

int path_gate_write(const struct exec_ctx *c, const char *path, size_t n, int create,
                    int *dirfd, char **name, char **refusal)
{
	*dirfd = -1;
	*name = NULL;
	*refusal = NULL;
	char *norm = lexical_gate("write", path, n, refusal);
	if (!norm)
		return -1;
	if (is_reserved(norm)) {
		*refusal = reason_of("write", path, n, "reserved");
		free(norm);
		return -1;
	}
	if (!manifest_is_output(c->m, norm)) {
		*refusal = reason_of("write", path, n, "not a declared output");
		free(norm);
		return -1;
	}

	/* Walk the parent directories from the workspace root. Each prefix is
	 * opened beneath the workspace, so a link leading out is EXDEV; missing
	 * directories of a declared output are made in an applied run. */
	char *slash = strrchr(norm, '/');
	const char *leaf = slash ? slash + 1 : norm;
	int fd = open_beneath(c->ws_fd, ".", O_RDONLY | O_DIRECTORY, 0);
	const char *why = NULL;
	if (fd < 0)
		why = strerror(errno);
	for (char *p = norm; !why && slash && p < slash;) {
		char *end = strchr(p, '/');
		*end = '\0'; /* norm[0..end) is now the prefix */
		int next = open_beneath(c->ws_fd, norm, O_RDONLY | O_DIRECTORY, 0);
		if (next < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, p, 0755) < 0 && errno != EEXIST)
				why = strerror(errno);
			else
				next = open_beneath(c->ws_fd, norm, O_RDONLY | O_DIRECTORY, 0);
		}
		*end = '/';
		if (why)
			break;
		if (next < 0) {
			if (errno == EXDEV || errno == ELOOP) {
				why = "escapes workspace via link";
			} else if (errno == ENOENT && !create) {
				/* Dry run: the rest does not exist yet, so no link can lead astray. */
				close(fd);
				fd = -1;
				break;
			} else {
				why = strerror(errno);
			}
			break;
		}
		close(fd);
		fd = next;
		p = end + 1;
	}
	if (!why && fd >= 0) {
		/* A link that stays inside may still land the write somewhere else:
		 * the real location must itself be a declared output, never .sfma. */
		char *rel = relative_real(c, fd);
		if (!rel) {
			why = "escapes workspace via link";
		} else {
			struct buf target = {0};
			buf_printf(&target, "%s%s%s", rel, *rel ? "/" : "", leaf);
			if (is_reserved(target.p))
				why = "reserved";
			else if (!manifest_is_output(c->m, target.p))
				why = "not a declared output";
			buf_free(&target);
			free(rel);
		}
	}
	if (why) {
		*refusal = reason_of("write", path, n, why);
		if (fd >= 0)
			close(fd);
		free(norm);
		return -1;
	}
	if (create) {
		*dirfd = fd;
		*name = xstrdup(leaf);
	} else if (fd >= 0) {
		close(fd);
	}
	free(norm);
	return 0;
}

int open_dir_walk(int dirfd, const char *rel, int create, mode_t mode)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char *copy = xstrdup(rel), *save = NULL;
	for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		int next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, c, mode) < 0 && errno != EEXIST)
				goto fail;
			next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (next < 0)
			goto fail;
		close(fd);
		fd = next;
	}
	free(copy);
	return fd;
fail: {
	int saved = errno;
	close(fd);
	free(copy);
	errno = saved;
	return -1;
}
}

/* ---- commands ---- */

static const char *const git_subcommands[] = {
	"init", "add", "commit", "cat-file", "rev-parse", "rev-list",
	"log", "grep", "show", "notes", "gc", NULL,
};

/* Options that make git run another program or leave the repository. */
static const char *const git_denied[] = {
	"--upload-pack", "--receive-pack", "--open-files-in-pager",
	"--exec-path", "--git-dir", "--work-tree", NULL,
};

/* git accepts any unambiguous prefix of a long option ("--upload-p"), so
 * a prefix of a denied option is refused as well. */
static int git_arg_denied(const char *sub, const char *a)
{
	if (strncmp(a, "-O", 2) == 0)
		return 1;
	if (strncmp(a, "--", 2) == 0 && a[2]) {
		size_t len = strcspn(a, "=");
		for (size_t i = 0; git_denied[i]; i++)
			if (len <= strlen(git_denied[i]) && strncmp(a, git_denied[i], len) == 0)
				return 1;
		return 0;
	}
	/* In git grep, -O (open in pager) may hide in a cluster of short flags
	 * ("-nO"): scan the letters up to the first one that takes a value. */
	if (strcmp(sub, "grep") == 0 && a[0] == '-' && a[1] != '-') {
		for (const char *p = a + 1; *p; p++) {
			if (*p == 'O')
				return 1;
			if (strchr("efABCm", *p))
				break;
		}
	}
	return 0;
}

static char *git_gate(char **argv, size_t argc)
{
	struct buf b = {0};
	if (argc < 2) {
		buf_adds(&b, "run: git: git requires a subcommand");
		return b.p;
	}
	char *q = quote_path(argv[1], strlen(argv[1]));
	if (argv[1][0] == '-') {
		buf_printf(&b, "run: git %s: global flags are not permitted", q);
		free(q);
		return b.p;
	}
	int known = 0;
	for (size_t i = 0; git_subcommands[i]; i++)
		known |= strcmp(argv[1], git_subcommands[i]) == 0;
	if (!known) {
		buf_printf(&b, "run: git %s: subcommand not permitted", q);
		free(q);
		return b.p;
	}
	free(q);
	for (size_t i = 2; i < argc; i++) {
		if (git_arg_denied(argv[1], argv[i])) {
			q = quote_path(argv[i], strlen(argv[i]));
			buf_printf(&b, "run: git %s %s: argument not permitted", argv[1], q);
			free(q);
			return b.p;
		}
	}
	return NULL;
}

void argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **a = argv; *a; a++)
		free(*a);
	free(argv);
}

static char *dup_reason(const char *s)
{
	return xstrdup(s);
}

char **command_gate(const struct manifest *m, const char *cmd, size_t n, char **refusal)
{
	static const char blanks[] = " \t\r\v\f";
	*refusal = NULL;
	if (strlen(cmd) != n) {
		*refusal = dup_reason("run: command contains a NUL byte");
		return NULL;
	}
	if (cmd[strspn(cmd, blanks)] == '\0') {
		*refusal = dup_reason("run: empty command");
		return NULL;
	}
	if (strpbrk(cmd, ";&|<>`$(){}\\\n")) {
		*refusal = dup_reason("run: shell metacharacters are not allowed");
		return NULL;
	}
	/* Whitespace splitting only: no quoting, no globbing, no shell. */
	size_t cap = 8, argc = 0;
	char **argv = xcalloc(cap, sizeof *argv);
	for (const char *p = cmd + strspn(cmd, blanks); *p; p += strspn(p, blanks)) {
		size_t len = strcspn(p, blanks);
		if (argc + 2 > cap) {
			cap *= 2;
			argv = xrealloc(argv, cap * sizeof *argv);
		}
		argv[argc] = xmalloc(len + 1);
		memcpy(argv[argc], p, len);
		argv[argc++][len] = '\0';
		argv[argc] = NULL;
		p += len;
	}
	/* A model-given directory is discarded: only the basename is looked up,
	 * and only inside the sandbox. */
	char *slash = strrchr(argv[0], '/');
	if (slash) {
		char *base = xstrdup(slash + 1);
		free(argv[0]);
		argv[0] = base;
	}
	int allowed = 0;
	for (size_t i = 0; argv[0][0] && i < m->n_allowed; i++)
		allowed |= strcmp(argv[0], m->allowed[i]) == 0;
	if (!allowed) {
		char *q = quote_path(argv[0], strlen(argv[0]));
		struct buf b = {0};
		buf_printf(&b, "run: %s: not in allowedCommands", q);
		free(q);
		*refusal = b.p;
		argv_free(argv);
		return NULL;
	}
	if (strcmp(argv[0], "git") == 0 && (*refusal = git_gate(argv, argc))) {
		argv_free(argv);
		return NULL;
	}
	return argv;
}
