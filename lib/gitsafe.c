/* gitsafe.c - git on a repository a workspace hands us: the checks made
 * before git runs, the environment and arguments it runs with, and the one
 * place it is started (gitsafe.h says why each exists). */
#include "gitsafe.h"

#include "buf.h"
#include "errors.h"
#include "ndjson.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the configuration, read as git's parser reads it --------------- */

/* git's config parser (config.c: git_parse_source, get_base_var,
 * get_extended_base_var, get_value, parse_value) is followed step by step
 * where it decides which section a key belongs to: a header may share its
 * line with a key or another header, a subsection is quoted with
 * backslash escapes, names are case-insensitive (subsections are not), a
 * comment runs to the end of its line. Where git would accept more
 * (values: quoting, escapes, continuation lines, inner spaces), this
 * refuses: no key a store needs has such a value. Every byte is either
 * parsed here as git parses it or refused, so a configuration accepted
 * here holds, for git, exactly the keys seen here. */

enum value_kind { VALUE_BOOL, VALUE_LOGALL, VALUE_FORMAT, VALUE_HASH };

static const struct {
	const char *key;
	enum value_kind kind;
} safe_keys[] = {
	{"core.repositoryformatversion", VALUE_FORMAT},
	{"core.filemode", VALUE_BOOL},
	{"core.bare", VALUE_BOOL},
	{"core.logallrefupdates", VALUE_LOGALL},
	{"core.symlinks", VALUE_BOOL},
	{"core.ignorecase", VALUE_BOOL},
	{"core.precomposeunicode", VALUE_BOOL},
	/* Not extensions.* in general: partialClone names a remote to fetch
	 * missing objects from, worktreeConfig reads config.worktree, and git
	 * honours both even in a version 0 repository. */
	{"extensions.objectformat", VALUE_HASH},
};

/* git's sane_ctype, not the locale's. */
static int ascii_alpha(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int ascii_alnum(int c)
{
	return ascii_alpha(c) || (c >= '0' && c <= '9');
}

static int ascii_lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

/* A name as long as a message may show it: printable ASCII, else '?'. */
struct shown_name {
	char s[96];
	size_t n;
};

static void shown_add(struct shown_name *sn, int c)
{
	if (sn->n + 1 < sizeof sn->s)
		sn->s[sn->n++] = (char)(c >= 0x20 && c < 0x7f ? c : '?');
	sn->s[sn->n] = '\0';
}

struct cfg {
	const char *p, *end;
	int line;
	struct sfma_err *e;
	/* The current section as git names it: base name (lowercased), and
	 * a subsection when one was given. */
	int have_section;
	char base[32];
	size_t base_len; /* may exceed sizeof base: then it is none of ours */
	int has_sub;
	struct shown_name name; /* base[.sub], for messages */
};

static int cfg_refuse_line(struct cfg *c, const char *what)
{
	return err_set(c->e, "unsafe git configuration: line %d %s", c->line, what);
}

/* After '[': the section header up to and with its ']'. */
static int cfg_header(struct cfg *c)
{
	c->have_section = 0;
	c->base_len = 0;
	c->has_sub = 0;
	c->name.n = 0;
	c->name.s[0] = '\0';
	for (;;) {
		if (c->p == c->end)
			return cfg_refuse_line(c, "not understood (a section header without ']')");
		int ch = (unsigned char)*c->p++;
		if (ch == ']')
			break;
		if (ch == ' ' || ch == '\t' || ch == '\n') {
			/* [base "sub"]: whitespace (no newline), a quoted subsection,
			 * backslash taking the next byte as it is, then ']' at once. */
			if (ch == '\n')
				return cfg_refuse_line(c, "not understood (a section header without ']')");
			while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
				c->p++;
			if (c->p == c->end || *c->p != '"')
				return cfg_refuse_line(c, "not understood (a section header)");
			c->p++;
			c->has_sub = 1;
			shown_add(&c->name, '.');
			for (;;) {
				if (c->p == c->end || *c->p == '\n')
					return cfg_refuse_line(c, "not understood (a subsection without its closing quote)");
				ch = (unsigned char)*c->p++;
				if (ch == '"')
					break;
				if (ch == '\\') {
					if (c->p == c->end || *c->p == '\n')
						return cfg_refuse_line(c, "not understood (a subsection without its closing quote)");
					ch = (unsigned char)*c->p++;
				}
				shown_add(&c->name, ch);
			}
			if (c->p == c->end || *c->p != ']')
				return cfg_refuse_line(c, "not understood (a section header)");
			c->p++;
			break;
		}
		if (!ascii_alnum(ch) && ch != '-' && ch != '.')
			return cfg_refuse_line(c, "not understood (a section header)");
		if (c->base_len < sizeof c->base - 1)
			c->base[c->base_len] = (char)ascii_lower(ch);
		c->base_len++;
		/* A dotted [base.sub] is git's older subsection form: shown as
		 * git names it, and never one of ours (no safe key has a dot). */
		shown_add(&c->name, ascii_lower(ch));
	}
	if (c->base_len == 0 && !c->has_sub)
		return cfg_refuse_line(c, "not understood (an empty section name)");
	c->base[c->base_len < sizeof c->base ? c->base_len : sizeof c->base - 1] = '\0';
	c->have_section = 1;
	return 0;
}

static int word_is(const char *w, size_t n, const char *lower)
{
	if (strlen(lower) != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (ascii_lower((unsigned char)w[i]) != lower[i])
			return 0;
	return 1;
}

static int value_ok(enum value_kind kind, const char *w, size_t n)
{
	static const char *const bools[] = {"true", "false", "yes", "no", "on", "off", "1", "0", NULL};
	switch (kind) {
	case VALUE_LOGALL:
		if (word_is(w, n, "always"))
			return 1;
		/* fall through */
	case VALUE_BOOL:
		for (int i = 0; bools[i]; i++)
			if (word_is(w, n, bools[i]))
				return 1;
		return 0;
	case VALUE_FORMAT:
		return n == 1 && (w[0] == '0' || w[0] == '1');
	case VALUE_HASH:
		/* git compares the algorithm's name case-sensitively */
		return (n == 4 && memcmp(w, "sha1", 4) == 0) || (n == 6 && memcmp(w, "sha256", 6) == 0);
	}
	return 0;
}

/* At a key's first letter: the key, then nothing, or '=' and its value. */
static int cfg_key(struct cfg *c)
{
	char key[40];
	size_t key_len = 0;
	struct shown_name full = c->name;
	shown_add(&full, '.');
	while (c->p < c->end && (ascii_alnum((unsigned char)*c->p) || *c->p == '-')) {
		int ch = ascii_lower((unsigned char)*c->p++);
		if (key_len < sizeof key - 1)
			key[key_len] = (char)ch;
		key_len++;
		shown_add(&full, ch);
	}
	if (!c->have_section)
		return err_set(c->e, "unsafe git configuration: line %d: %s outside any section", c->line, full.s + 1);
	int safe = -1;
	if (!c->has_sub && c->base_len < sizeof c->base && key_len < sizeof key) {
		char dotted[80];
		snprintf(dotted, sizeof dotted, "%s.%.*s", c->base, (int)key_len, key);
		for (size_t i = 0; i < sizeof safe_keys / sizeof *safe_keys; i++)
			if (strcmp(dotted, safe_keys[i].key) == 0)
				safe = (int)i;
	}
	if (safe < 0)
		return err_set(c->e, "unsafe git configuration: %s (line %d)", full.s, c->line);
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
		c->p++;
	if (c->p == c->end || *c->p == '\n') {
		/* A key alone is boolean true; the other kinds need a value. */
		if (safe_keys[safe].kind == VALUE_BOOL || safe_keys[safe].kind == VALUE_LOGALL)
			return 0;
		return err_set(c->e, "unsafe git configuration: %s without a value (line %d)", full.s, c->line);
	}
	if (*c->p != '=')
		return cfg_refuse_line(c, "not understood (a key followed by neither '=' nor the line's end)");
	c->p++;
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
		c->p++;
	const char *word = c->p;
	while (c->p < c->end && ascii_alnum((unsigned char)*c->p))
		c->p++;
	size_t word_len = (size_t)(c->p - word);
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
		c->p++;
	if (c->p < c->end && (*c->p == '#' || *c->p == ';'))
		while (c->p < c->end && *c->p != '\n')
			c->p++;
	if ((c->p < c->end && *c->p != '\n') || !value_ok(safe_keys[safe].kind, word, word_len))
		return err_set(c->e, "unsafe git configuration: %s has a value it does not take (line %d)", full.s,
		               c->line);
	return 0;
}

int gitsafe_config_check(const char *text, size_t len, struct sfma_err *e)
{
	if (len > GITSAFE_CONFIG_MAX)
		return err_set(e, "unsafe git configuration: larger than %u bytes", GITSAFE_CONFIG_MAX);
	/* Control characters: git reads "\r\n" as a newline and lets NUL
	 * through; neither belongs in a configuration git init wrote. */
	int line = 1;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)text[i];
		line += ch == '\n';
		if ((ch < 0x20 && ch != '\t' && ch != '\n') || ch == 0x7f)
			return err_set(e, "unsafe git configuration: line %d holds control character 0x%02x", line, ch);
	}
	struct cfg c = {.p = text, .end = text + len, .line = 1, .e = e};
	while (c.p < c.end) {
		int ch = (unsigned char)*c.p++;
		if (ch == '\n') {
			c.line++;
		} else if (ch == ' ' || ch == '\t') {
			continue;
		} else if (ch == '#' || ch == ';') {
			while (c.p < c.end && *c.p != '\n')
				c.p++;
		} else if (ch == '[') {
			if (cfg_header(&c) < 0)
				return -1;
		} else if (ascii_alpha(ch)) {
			c.p--;
			if (cfg_key(&c) < 0)
				return -1;
		} else {
			return cfg_refuse_line(&c, "not understood");
		}
	}
	return 0;
}

/* ---- refs ------------------------------------------------------------ */

#define REFNAME_MAX 255

int gitsafe_refname_ok(const char *name, size_t len, int strict)
{
	if (len < 6 || len > REFNAME_MAX || memcmp(name, "refs/", 5) != 0)
		return 0;
	if (name[len - 1] == '/' || name[len - 1] == '.')
		return 0;
	size_t comp = 0; /* where the current component starts */
	for (size_t i = 0; i <= len; i++) {
		if (i == len || name[i] == '/') {
			size_t n = i - comp;
			if (n == 0 || (n >= 5 && memcmp(name + i - 5, ".lock", 5) == 0))
				return 0;
			comp = i + 1;
			continue;
		}
		unsigned char ch = (unsigned char)name[i];
		if (ch < 0x20 || ch == 0x7f || strchr(" ~^:?*[\\", ch))
			return 0;
		if (strict && !ascii_alnum(ch) && !strchr("._-", ch))
			return 0;
		if (i == comp && ch == '.')
			return 0;
		if (i + 1 < len && ((ch == '.' && name[i + 1] == '.') || (ch == '@' && name[i + 1] == '{')))
			return 0;
	}
	return 1;
}

static int is_oid(const char *s, size_t n)
{
	if (n != 40 && n != 64)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

enum gitsafe_ref gitsafe_ref_parse(const char *text, size_t len, char *target, size_t n)
{
	if (len && text[len - 1] == '\n')
		len--;
	const char *what = NULL;
	size_t what_len = 0;
	enum gitsafe_ref kind = GITSAFE_REF_BAD;
	if (is_oid(text, len)) {
		what = text, what_len = len, kind = GITSAFE_REF_OID;
	} else if (len > 5 && memcmp(text, "ref: ", 5) == 0 && gitsafe_refname_ok(text + 5, len - 5, 1)) {
		what = text + 5, what_len = len - 5, kind = GITSAFE_REF_SYMBOLIC;
	}
	if (kind != GITSAFE_REF_BAD && target) {
		if (what_len >= n)
			return GITSAFE_REF_BAD;
		memcpy(target, what, what_len);
		target[what_len] = '\0';
	}
	return kind;
}

int gitsafe_packed_refs_check(const char *text, size_t len, struct sfma_err *e)
{
	static const char header[] = "# pack-refs with:";
	int line = 0, after_ref = 0;
	for (size_t at = 0; at < len;) {
		const char *s = text + at;
		const char *nl = memchr(s, '\n', len - at);
		line++;
		if (!nl)
			return err_set(e, "line %d has no end", line);
		size_t n = (size_t)(nl - s);
		at += n + 1;
		if (line == 1 && n >= sizeof header - 1 && memcmp(s, header, sizeof header - 1) == 0) {
			/* the traits are words; git ignores those it does not know */
			for (size_t i = 0; i < n; i++)
				if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
					return err_set(e, "line %d is not a ref", line);
			continue;
		}
		if (n > 0 && s[0] == '^') {
			if (!after_ref || !is_oid(s + 1, n - 1))
				return err_set(e, "line %d is not a ref", line);
			after_ref = 0;
			continue;
		}
		size_t hex = n > 41 && s[40] == ' ' ? 40 : n > 65 && s[64] == ' ' ? 64 : 0;
		if (!hex || !is_oid(s, hex) || !gitsafe_refname_ok(s + hex + 1, n - hex - 1, 0))
			return err_set(e, "line %d is not a ref", line);
		after_ref = 1;
	}
	return 0;
}

/* ---- the repository on disk ------------------------------------------ */

struct walk {
	const char *shown;
	struct sfma_err *e;
	long entries;
	char rel[PATH_MAX]; /* the entry being looked at, relative to the repository */
};

static int repo_refuse(struct walk *w, const char *rel, const char *why)
{
	return err_set(w->e, "%s/%s: unsafe git repository: %s", w->shown, rel, why);
}

/* A small file of the repository, read whole (a regular file, never a
 * link followed, never a FIFO waited on). Returns the text (owned) or NULL
 * with errno: ENOENT when there is none, EFBIG when it is larger than max. */
static char *read_small(int dfd, const char *rel, size_t max, size_t *len)
{
	int fd = openat(dfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return NULL;
	struct stat sb;
	int stated = fstat(fd, &sb) == 0;
	if (!stated || !S_ISREG(sb.st_mode) || sb.st_size > (off_t)max) {
		close(fd);
		errno = stated && S_ISREG(sb.st_mode) ? EFBIG : EINVAL;
		return NULL;
	}
	struct sfma_err ignored;
	errno = 0;
	char *text = read_all_fd(fd, max, len, &ignored);
	int err = errno; /* 0: it grew past max while being read */
	close(fd);
	if (!text)
		errno = err ? err : EFBIG;
	return text;
}

/* Every entry below dfd (w->rel names it, rel_len bytes): no symlink, no
 * device, socket or FIFO; under refs/, every file a ref. Takes dfd. */
static int walk_dir(struct walk *w, int dfd, size_t rel_len, int depth, int in_refs)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return repo_refuse(w, w->rel, "cannot be read");
	}
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (errno = 0, de = readdir(d))) {
		const char *name = de->d_name;
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		size_t name_len = strlen(name);
		if (rel_len + 1 + name_len >= sizeof w->rel) {
			rc = repo_refuse(w, w->rel, "a path too long");
			break;
		}
		size_t at = rel_len;
		if (rel_len)
			w->rel[at++] = '/';
		memcpy(w->rel + at, name, name_len + 1);
		if (++w->entries > GITSAFE_MAX_ENTRIES) {
			rc = err_set(w->e, "%s: unsafe git repository: more than %d entries", w->shown, GITSAFE_MAX_ENTRIES);
			break;
		}
		struct stat sb;
		if (fstatat(dirfd(d), name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = repo_refuse(w, w->rel, "cannot be read");
		} else if (S_ISLNK(sb.st_mode)) {
			/* git follows it: a reflog appended to, an object or pack
			 * written, a ref or config read wherever it points */
			rc = repo_refuse(w, w->rel, "a symlink");
		} else if (S_ISDIR(sb.st_mode)) {
			int sub = depth < 32 ? openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
			if (sub < 0)
				rc = repo_refuse(w, w->rel, depth < 32 ? "cannot be read" : "nested too deep");
			else
				rc = walk_dir(w, sub, at + name_len, depth + 1, in_refs || (depth == 0 && strcmp(name, "refs") == 0));
		} else if (!S_ISREG(sb.st_mode)) {
			rc = repo_refuse(w, w->rel, "not a regular file or a directory");
		} else if (in_refs && !(name_len > 5 && strcmp(name + name_len - 5, ".lock") == 0)) {
			/* a *.lock is a ref being written (or a crashed git's): git
			 * reads no ref from it */
			size_t len;
			char *text = read_small(dirfd(d), name, 4096, &len);
			if (!text || gitsafe_ref_parse(text, len, NULL, 0) == GITSAFE_REF_BAD)
				rc = repo_refuse(w, w->rel, "not a ref (a commit id, or ref: and a ref name)");
			free(text);
		}
		w->rel[rel_len] = '\0';
	}
	if (rc == 0 && errno != 0)
		rc = repo_refuse(w, w->rel[0] ? w->rel : ".", "cannot be read");
	closedir(d);
	return rc;
}

/* The files of the repository (dfd) git reads for more than objects and
 * refs, read here first. */
static int check_files(struct walk *w, int dfd)
{
	struct stat sb;
	size_t len;
	char *text = read_small(dfd, "config", GITSAFE_CONFIG_MAX, &len);
	if (!text && errno == EFBIG)
		return err_set(w->e, "%s/config: unsafe git configuration: larger than %u bytes", w->shown,
		               GITSAFE_CONFIG_MAX);
	if (!text && errno != ENOENT)
		return repo_refuse(w, "config", "not a regular file");
	int rc = text ? gitsafe_config_check(text, len, w->e) : 0;
	free(text);
	if (rc < 0)
		return err_prefix(w->e, "%s/config", w->shown);
	/* Files git reads that name more than a store needs, whatever they
	 * hold (an empty one too: git init makes none of them). */
	static const struct {
		const char *rel, *why;
	} refused[] = {
		{"config.worktree", "a second configuration file"},
		{"info/attributes", "attributes git would apply to every path"},
		{"objects/info/alternates", "objects read from another repository"},
		{"objects/info/http-alternates", "objects read from another repository"},
	};
	for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
		if (fstatat(dfd, refused[i].rel, &sb, AT_SYMLINK_NOFOLLOW) == 0)
			return repo_refuse(w, refused[i].rel, refused[i].why);
	text = read_small(dfd, "HEAD", 4096, &len);
	int no_head = !text && errno == ENOENT;
	char target[REFNAME_MAX + 1] = "";
	enum gitsafe_ref head = text ? gitsafe_ref_parse(text, len, target, sizeof target) : GITSAFE_REF_BAD;
	free(text);
	if (!no_head &&
	    (head == GITSAFE_REF_BAD || (head == GITSAFE_REF_SYMBOLIC && strncmp(target, "refs/heads/", 11) != 0)))
		return repo_refuse(w, "HEAD", "names neither a branch nor a commit");
	text = read_small(dfd, "packed-refs", 64u << 20, &len);
	if (!text && errno != ENOENT)
		return repo_refuse(w, "packed-refs", "not a regular file of at most 64 MiB");
	struct sfma_err why;
	rc = text ? gitsafe_packed_refs_check(text, len, &why) : 0;
	free(text);
	if (rc < 0)
		return err_set(w->e, "%s/packed-refs: unsafe git repository: %s", w->shown, why.text);
	return 0;
}

int gitsafe_check_repo(const char *git_dir, const char *shown, struct sfma_err *e)
{
	struct stat sb;
	if (lstat(git_dir, &sb) < 0 || !S_ISDIR(sb.st_mode))
		return err_set(e, "%s must be a real repository directory", shown);
	int dfd = open(git_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return err_set(e, "%s must be a real repository directory", shown);
	struct walk w = {.shown = shown, .e = e};
	int rc;
	/* A linked worktree's directory: its commondir sends objects and refs
	 * to another repository (gitrepository-layout(5)), while rev-parse
	 * --absolute-git-dir still names this one. */
	if (fstatat(dfd, "commondir", &sb, AT_SYMLINK_NOFOLLOW) == 0) {
		rc = err_set(e, "%s must be a real repository directory, not a linked worktree's", shown);
	} else {
		int walk_fd = dup(dfd); /* walk_dir takes it */
		if (walk_fd < 0)
			rc = err_set(e, "%s: %s", shown, strerror(errno));
		else
			rc = walk_dir(&w, walk_fd, 0, 0, 0);
		if (rc == 0)
			rc = check_files(&w, dfd);
	}
	close(dfd);
	return rc;
}

/* ---- the environment and the command line ---------------------------- */

char **gitsafe_env(const char *path, const char *ceiling)
{
	/* git(1) ENVIRONMENT, git-config(1) FILES, gitattributes(5) FILES:
	 * every file git would read besides the repository's own is turned
	 * off or pointed at /dev/null, which holds no file (HOME and
	 * XDG_CONFIG_HOME too: ~/.gitconfig, ~/.config/git/config and
	 * .../attributes are never found). */
	static const char *const fixed[] = {
		"LC_ALL=C",
		"HOME=/dev/null",
		"XDG_CONFIG_HOME=/dev/null",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_SYSTEM=/dev/null",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ATTR_NOSYSTEM=1",
		/* nothing interactive: no prompt, pager or editor */
		"GIT_TERMINAL_PROMPT=0",
		"GIT_PAGER=cat",
		"PAGER=cat",
		"GIT_EDITOR=:",
		"GIT_SEQUENCE_EDITOR=:",
		"EDITOR=:",
		"VISUAL=:",
		/* no index refresh written behind a read, no replace refs, no
		 * fetch of a missing object from a promisor remote */
		"GIT_OPTIONAL_LOCKS=0",
		"GIT_NO_REPLACE_OBJECTS=1",
		"GIT_NO_LAZY_FETCH=1",
		"GIT_PROTOCOL_FROM_USER=0",
		NULL,
	};
	size_t n = sizeof fixed / sizeof *fixed;
	char **env = xcalloc(n + 2, sizeof *env);
	struct buf b = {0};
	buf_printf(&b, "PATH=%s", path ? path : "/usr/bin:/bin");
	env[0] = b.p;
	b = (struct buf){0};
	buf_printf(&b, "GIT_CEILING_DIRECTORIES=%s", ceiling);
	env[1] = b.p;
	for (size_t i = 0; fixed[i]; i++)
		env[2 + i] = xstrdup(fixed[i]);
	return env;
}

void gitsafe_env_free(char **env)
{
	for (size_t i = 0; env && env[i]; i++)
		free(env[i]);
	free(env);
}

/* On the command line, over every configuration file (git-config(1):
 * command-line configuration comes last and wins), and passed on to every
 * git that git starts (GIT_CONFIG_PARAMETERS). */
const char *const gitsafe_overrides[] = {
	/* no hook runs: /dev/null/<hook> never exists */
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "core.attributesFile=/dev/null",
	"-c", "core.pager=cat",
	"-c", "core.editor=:",
	/* no transport of any kind: no ssh, no ext::, no lazy fetch */
	"-c", "protocol.allow=never",
	"-c", "submodule.recurse=false",
	/* discovery takes no bare repository (only --git-dir names one) */
	"-c", "safe.bareRepository=explicit",
	/* no gpg */
	"-c", "log.showSignature=false",
	"-c", "commit.gpgSign=false",
	/* no `git maintenance run --auto` or gc started behind a command */
	"-c", "gc.auto=0",
	"-c", "maintenance.auto=false",
	NULL,
};

void gitsafe_args_add(struct gitsafe_args *a, const char *arg)
{
	if (a->n >= GITSAFE_ARGS_MAX) {
		a->overflow = 1;
		return;
	}
	a->v[a->n++] = arg;
	a->v[a->n] = NULL;
}

void gitsafe_args_addf(struct gitsafe_args *a, const char *fmt, ...)
{
	if (a->ntext >= (int)(sizeof a->text / sizeof *a->text)) {
		a->overflow = 1;
		return;
	}
	char *t = a->text[a->ntext++];
	va_list ap;
	va_start(ap, fmt);
	int len = vsnprintf(t, sizeof a->text[0], fmt, ap);
	va_end(ap);
	if (len < 0 || (size_t)len >= sizeof a->text[0]) {
		a->overflow = 1;
		return;
	}
	gitsafe_args_add(a, t);
}

void gitsafe_argv(struct gitsafe_args *a, const struct gitsafe_repo *repo, int explicit_repo)
{
	a->n = a->ntext = a->overflow = 0;
	a->v[0] = NULL;
	gitsafe_args_add(a, "git");
	gitsafe_args_add(a, "--no-pager");
	if (explicit_repo) {
		/* git never goes looking for a repository of its own choosing */
		gitsafe_args_addf(a, "--git-dir=%s", repo->git_dir);
		gitsafe_args_addf(a, "--work-tree=%s", repo->work_tree);
	}
	for (int i = 0; gitsafe_overrides[i]; i++)
		gitsafe_args_add(a, gitsafe_overrides[i]);
}

void gitsafe_args_hash_object(struct gitsafe_args *a, const char *path)
{
	static const char *const fixed[] = {"hash-object", "-t", "blob", "--no-filters", "-w", "--", NULL};
	for (int i = 0; fixed[i]; i++)
		gitsafe_args_add(a, fixed[i]);
	gitsafe_args_add(a, path);
}

void gitsafe_args_grep(struct gitsafe_args *a, const char *pattern)
{
	static const char *const fixed[] = {"grep", "--no-textconv", "--no-color", "-I", "-F", "-n", "-e", NULL};
	for (int i = 0; fixed[i]; i++)
		gitsafe_args_add(a, fixed[i]);
	gitsafe_args_add(a, pattern); /* after -e: a pattern, never an option */
}

void gitsafe_args_pickaxe(struct gitsafe_args *a, const char *query, long max)
{
	static const char *const fixed[] = {"log", "--no-textconv", "--no-ext-diff", "--no-color", "--all",
	                                    "--format=%H%x09%s", NULL};
	for (int i = 0; fixed[i]; i++)
		gitsafe_args_add(a, fixed[i]);
	gitsafe_args_addf(a, "--max-count=%ld", max);
	gitsafe_args_addf(a, "-S%s", query); /* glued: the query cannot be an option */
	gitsafe_args_add(a, "--");
}

void gitsafe_args_cat_blob(struct gitsafe_args *a, const char *rev, const char *path)
{
	gitsafe_args_add(a, "cat-file");
	gitsafe_args_add(a, "blob");
	gitsafe_args_addf(a, "%s:%s", rev, path);
}

void gitsafe_args_fast_import(struct gitsafe_args *a)
{
	/* A handful of objects a run: fast-import keeps what it wrote as one
	 * pack (fastimport.unpackLimit=1), fsynced like every pack git
	 * writes, instead of starting unpack-objects to explode it into loose
	 * objects - a second git process on every run. */
	static const char *const fixed[] = {"-c", "fastimport.unpackLimit=1", "fast-import", "--quiet", NULL};
	for (int i = 0; fixed[i]; i++)
		gitsafe_args_add(a, fixed[i]);
}

/* ---- starting git ---------------------------------------------------- */

int gitsafe_start(const struct gitsafe_repo *repo, const struct gitsafe_args *a, int with_stdin,
                  struct gitsafe_child *c)
{
	c->pid = -1;
	c->in = c->out = -1;
	if (a->overflow)
		return GITSAFE_NOT_STARTED;
	/* Everything the child needs is made before fork: a caller may have
	 * threads, and the child may only call async-signal-safe functions. */
	char **envp = gitsafe_env(getenv("PATH"), repo->ceiling);
	int pfd[2] = {-1, -1}, ifd[2] = {-1, -1}, report[2] = {-1, -1};
	if (pipe2(pfd, O_CLOEXEC) < 0 || pipe2(report, O_CLOEXEC) < 0 || (with_stdin && pipe2(ifd, O_CLOEXEC) < 0)) {
		int fds[] = {pfd[0], pfd[1], report[0], report[1]};
		for (int i = 0; i < 4; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		gitsafe_env_free(envp);
		return GITSAFE_NOT_STARTED;
	}
	pid_t pid = fork();
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDWR);
		if (devnull < 0 || chdir(repo->work_tree) < 0)
			_exit(127);
		dup2(with_stdin ? ifd[0] : devnull, 0);
		dup2(pfd[1], 1);
		dup2(devnull, 2);
		execvpe("git", (char *const *)a->v, envp);
		int err = errno;
		ssize_t ignored = write(report[1], &err, sizeof err);
		(void)ignored;
		_exit(127);
	}
	close(pfd[1]);
	close(report[1]);
	if (with_stdin)
		close(ifd[0]);
	gitsafe_env_free(envp);
	int exec_errno = 0;
	ssize_t r = -1;
	if (pid > 0)
		while ((r = read(report[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR)
			;
	close(report[0]);
	if (pid < 0 || r == (ssize_t)sizeof exec_errno) {
		close(pfd[0]);
		if (with_stdin)
			close(ifd[1]);
		if (pid > 0)
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
		return GITSAFE_NOT_STARTED;
	}
	c->pid = pid;
	c->in = with_stdin ? ifd[1] : -1;
	c->out = pfd[0];
	return 0;
}

int gitsafe_finish(struct gitsafe_child *c, const char *in, size_t n_in, struct buf *out, size_t max)
{
	if (c->in >= 0) {
		if (in)
			write_all(c->in, in, n_in);
		close(c->in);
		c->in = -1;
	}
	char chunk[8192];
	ssize_t got;
	while ((got = read(c->out, chunk, sizeof chunk)) != 0) {
		if (got < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (out && out->len + (size_t)got <= max)
			buf_add(out, chunk, (size_t)got);
	}
	close(c->out);
	c->out = -1;
	int status = 0;
	pid_t reaped;
	while ((reaped = waitpid(c->pid, &status, 0)) < 0 && errno == EINTR)
		;
	c->pid = -1;
	return reaped > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
