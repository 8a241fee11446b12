/* hardtier.c - the deterministic gate in front of every tool call
 * (sfma-exec(1)): where a path really leads, which outputs may be
 * written, which command lines may run. Pure decisions plus the few opens
 * needed to know where a path leads; nothing here writes a file.
 * sfma-exec decides every call with it, and sfma-replay decides them
 * again with it over an empty directory and the recorded path facts. */
#include "hardtier.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "beneath.h"
#include "buf.h"
#include "errors.h"

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

int hardtier_reserved(const char *norm)
{
	return strcmp(norm, ".sfma") == 0 || strncmp(norm, ".sfma/", 6) == 0;
}

static char *relative_real(const struct gate_ctx *c, int fd);

int path_open_read(const struct gate_ctx *c, const char *path, size_t n,
                   char **refusal, char **error)
{
	*refusal = *error = NULL;
	char *norm = lexical_gate("read", path, n, refusal);
	if (!norm)
		return -1;
	/* The run's own files (trace, evidence, memory) are not the model's
	 * to read: its memory comes through recall. Decided on the words
	 * alone, before anything of the host is looked at. */
	if (hardtier_reserved(norm)) {
		free(norm);
		*refusal = reason_of("read", path, n, HARDTIER_READ_RESERVED);
		return -1;
	}
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
	/* A link that stays inside may still lead into .sfma: where the file
	 * really is decides, as for a write. */
	char *rel = relative_real(c, fd);
	if (!rel || hardtier_reserved(rel)) {
		close(fd);
		*refusal = reason_of("read", path, n, rel ? HARDTIER_READ_RESERVED_LINK : "escapes workspace via link");
		free(rel);
		return -1;
	}
	free(rel);
	return fd;
}

/* Where fd really is, relative to the workspace: "" for the workspace
 * itself, NULL when outside (owned). */
static char *relative_real(const struct gate_ctx *c, int fd)
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

int path_gate_write(const struct gate_ctx *c, const char *path, size_t n, int create,
                    int *dirfd, char **name, char **refusal)
{
	*dirfd = -1;
	*name = NULL;
	*refusal = NULL;
	char *norm = lexical_gate("write", path, n, refusal);
	if (!norm)
		return -1;
	if (hardtier_reserved(norm)) {
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
			if (hardtier_reserved(target.p))
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

void hardtier_write_text(char *out, size_t cap, size_t bytes, const char *norm, int dry_run)
{
	if (dry_run)
		snprintf(out, cap, "dry run: write of %zu bytes to %s recorded, not applied", bytes, norm);
	else
		snprintf(out, cap, "wrote %zu bytes to %s", bytes, norm);
}

/* ---- one call --------------------------------------------------------- */

/* The string members each tool must have, in the order they are checked. */
static const struct { const char *tool, *arg; } string_args[] = {
	{"read", "path"}, {"write", "path"}, {"write", "content"}, {"run", "cmd"},
	{"notify", "text"}, {"ask", "question"},
};

static char *tool_refusal(const char *tool)
{
	if (strcmp(tool, "done") == 0)
		return xstrdup("done is handled by the planner");
	if (strcmp(tool, "recall") == 0)
		return xstrdup("recall is not available");
	char *q = quote_path(tool, strlen(tool));
	struct buf b = {0};
	buf_printf(&b, "%s: unknown tool", q);
	free(q);
	return b.p;
}

char *hardtier_gate(const struct gate_ctx *c, const json_t *call, int create, struct gate_pass *g)
{
	*g = (struct gate_pass){.fd = -1, .dirfd = -1};
	json_t *tv = json_object_get(call, "tool");
	const char *tool = json_string_value(tv);
	/* A tool name with a NUL byte names no tool at all. */
	if (!tool || strlen(tool) != json_string_length(tv))
		return xstrdup("unknown tool");
	int known = 0;
	for (size_t i = 0; i < sizeof string_args / sizeof *string_args; i++) {
		if (strcmp(tool, string_args[i].tool) != 0)
			continue;
		known = 1;
		if (!json_is_string(json_object_get(call, string_args[i].arg))) {
			struct buf b = {0};
			buf_printf(&b, "%s: %s must be a string", tool, string_args[i].arg);
			return b.p;
		}
	}
	if (!known)
		return tool_refusal(tool);
	json_t *arg = json_object_get(call, strcmp(tool, "run") == 0 ? "cmd" : "path");
	const char *s = json_string_value(arg);
	size_t n = json_string_length(arg);
	char *refusal = NULL;
	if (strcmp(tool, "read") == 0)
		g->fd = path_open_read(c, s, n, &refusal, &g->error);
	else if (strcmp(tool, "write") == 0)
		path_gate_write(c, s, n, create, &g->dirfd, &g->name, &refusal);
	else if (strcmp(tool, "run") == 0)
		g->argv = command_gate(c->m, s, n, &refusal);
	if (refusal)
		gate_pass_free(g);
	return refusal;
}

void gate_pass_free(struct gate_pass *g)
{
	if (g->fd >= 0)
		close(g->fd);
	if (g->dirfd >= 0)
		close(g->dirfd);
	free(g->error);
	free(g->name);
	argv_free(g->argv);
	*g = (struct gate_pass){.fd = -1, .dirfd = -1};
}
