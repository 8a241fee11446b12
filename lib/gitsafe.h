/* gitsafe.h - git on a repository a workspace hands us (sfma-mem(1),
 * THE STORE IS HOSTILE INPUT).
 *
 * A workspace is hostile input, and so is the git repository in it: its
 * configuration can name commands (filter drivers, diff drivers and
 * textconv, diff.external, core.fsmonitor, hooks, pagers, editors,
 * core.sshCommand), pull in other files (include, includeIf,
 * core.attributesFile, config.worktree) and send reads and writes
 * elsewhere (alternates, commondir, symlinks). Three rules close that:
 *
 *  1. the repository is read here, by this code, before any git runs, and
 *     refused unless its configuration holds only a small set of keys that
 *     name nothing (gitsafe_config_check), and nothing in it is a symlink,
 *     a second configuration, an attributes file or a pointer to another
 *     repository (gitsafe_check_repo);
 *  2. every git child gets a rebuilt environment (gitsafe_env) and the
 *     same command-line overrides (gitsafe_argv), so that no system,
 *     global or caller configuration is read and no hook, pager, editor,
 *     fsmonitor or transport can start;
 *  3. only plumbing that runs no filter is used, with the options that
 *     keep it so (the gitsafe_args_* builders).
 *
 * This file is the one place sfma starts git, and sfma-mem the one
 * program that calls it. It never prints and never exits; it knows
 * nothing of the stage. */
#ifndef SFMA_GITSAFE_H
#define SFMA_GITSAFE_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "buf.h"
#include "errors.h"

/* ---- reading the repository ourselves (pure) ------------------------- */

/* The configuration keys a store may hold: what `git init` writes, and
 * nothing that names a command, a file or another repository. */
#define GITSAFE_CONFIG_KEYS "core.repositoryformatversion, core.filemode, core.bare, " \
	"core.logallrefupdates, core.symlinks, core.ignorecase, core.precomposeunicode, " \
	"extensions.objectformat"

/* A configuration file larger than this is refused unread. */
#define GITSAFE_CONFIG_MAX (64u << 10)

/* Check the text of a repository's config file (len bytes, NUL bytes
 * refused) as git's parser reads it, more strictly: every key must be one
 * of GITSAFE_CONFIG_KEYS with a plain value it accepts (a boolean; 0 or 1
 * for the format version; sha1 or sha256), with no subsection, no
 * quoting, no continuation line. Returns 0, or -1 with e set to one line
 * containing "unsafe git configuration" and the key or the line. */
int gitsafe_config_check(const char *text, size_t len, struct sfma_err *e);

/* Whether name (len bytes) is a ref name git accepts under refs/ (git
 * check-ref-format's rules: no "..", no component starting with "." or
 * ending with ".lock", no control character, space, ~ ^ : ? * [ \ or
 * "@{", no empty component, no trailing "/" or "."). strict also limits
 * it to letters, digits and . _ - / (what a fast-import command line
 * takes as it is). Returns 1 or 0. */
int gitsafe_refname_ok(const char *name, size_t len, int strict);

/* What a loose ref's file (or HEAD) holds. */
enum gitsafe_ref {
	GITSAFE_REF_BAD,      /* anything else */
	GITSAFE_REF_OID,      /* 40 or 64 lowercase hex digits */
	GITSAFE_REF_SYMBOLIC, /* "ref: " and a strict ref name under refs/ */
};

/* Classify a ref file's text (len bytes; one trailing newline allowed).
 * For GITSAFE_REF_SYMBOLIC the target ref name is copied to target (n
 * bytes, NUL-terminated; a longer one is GITSAFE_REF_BAD); for
 * GITSAFE_REF_OID the digits are. target may be NULL. */
enum gitsafe_ref gitsafe_ref_parse(const char *text, size_t len, char *target, size_t n);

/* Check a packed-refs file: an optional "# pack-refs with:" first line,
 * then "<oid> <ref name>" lines, each optionally followed by "^<oid>" (the
 * peeled tag). Returns 0, or -1 with e set to the line that is not. */
int gitsafe_packed_refs_check(const char *text, size_t len, struct sfma_err *e);

/* ---- the repository on disk ------------------------------------------ */

/* A repository directory holding more entries than this is refused. */
#define GITSAFE_MAX_ENTRIES 100000

/* Check the repository directory git_dir before any git runs on it; shown
 * is how messages name it (".sfma/mem/.git"). Refused, each with one line
 * naming the path: a git_dir that is not a real directory ("must be a real
 * repository directory"), one with a commondir (a linked worktree's), a
 * configuration gitsafe_config_check refuses or one that is not a regular
 * file, config.worktree, info/attributes, objects/info/alternates or
 * http-alternates, a HEAD that is neither a branch (strict name) nor a
 * commit id, a loose ref or packed-refs that does not parse, and any
 * symlink, device, socket or FIFO anywhere in it ("unsafe git
 * repository"). A missing HEAD or config is left to git (which then does
 * not take the directory as a repository). Hooks are not refused: every
 * git child runs with core.hooksPath=/dev/null, and `git init` leaves
 * sample hooks behind. Returns 0 or -1 (e set). */
int gitsafe_check_repo(const char *git_dir, const char *shown, struct sfma_err *e);

/* ---- running git ----------------------------------------------------- */

/* The repository a git child works on. */
struct gitsafe_repo {
	const char *git_dir;   /* the repository directory, checked by gitsafe_check_repo */
	const char *work_tree; /* its work tree, the child's working directory */
	const char *ceiling;   /* GIT_CEILING_DIRECTORIES: discovery never climbs into it */
};

/* The environment of every git child (NULL-terminated, owned: free with
 * gitsafe_env_free): PATH (path, or /usr/bin:/bin when NULL), the ceiling,
 * LC_ALL=C, HOME and XDG_CONFIG_HOME that hold nothing, no system or
 * global configuration or attributes, no pager, editor or terminal prompt,
 * no lazy fetch, no replace refs - and nothing of the caller's own
 * environment (no GIT_DIR, GIT_CONFIG_PARAMETERS, GIT_EXTERNAL_DIFF...). */
char **gitsafe_env(const char *path, const char *ceiling);
void gitsafe_env_free(char **env);

/* The command-line overrides every git child gets (NULL-terminated; pairs
 * of "-c" and KEY=VALUE): they take precedence over every file. */
extern const char *const gitsafe_overrides[];

/* A git command line being built: at most GITSAFE_ARGS_MAX arguments. */
#define GITSAFE_ARGS_MAX 112
struct gitsafe_args {
	const char *v[GITSAFE_ARGS_MAX + 1]; /* NULL-terminated */
	int n;
	int overflow;      /* an argument did not fit: the command must not run */
	char text[4][PATH_MAX + 32]; /* formatted arguments v points into */
	int ntext;
};

/* Start a command line: "git --no-pager", then, when explicit_repo,
 * --git-dir and --work-tree naming repo, then gitsafe_overrides. */
void gitsafe_argv(struct gitsafe_args *a, const struct gitsafe_repo *repo, int explicit_repo);
/* Append one argument as it is / formatted (into a's own storage). */
void gitsafe_args_add(struct gitsafe_args *a, const char *arg);
void gitsafe_args_addf(struct gitsafe_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The plumbing a store runs, appended to a (after gitsafe_argv). Each
 * leaves out whatever could run a program the repository names. */
/* The blob of path (work-tree relative) written to the object store, as
 * its bytes are: --no-filters, so no clean filter or conversion. */
void gitsafe_args_hash_object(struct gitsafe_args *a, const char *path);
/* A fixed-string grep of pattern (after -e: never an option) over the
 * revisions added next, then gitsafe_args_add(a, "--"): no textconv. */
void gitsafe_args_grep(struct gitsafe_args *a, const char *pattern);
/* The commits of every ref whose change adds or removes query (-S glued
 * to it: never an option), at most max, one "<id>\t<subject>" line each:
 * no textconv, no external diff. */
void gitsafe_args_pickaxe(struct gitsafe_args *a, const char *query, long max);
/* A blob's bytes by "<rev>:<path>": cat-file without --filters/--textconv. */
void gitsafe_args_cat_blob(struct gitsafe_args *a, const char *rev, const char *path);
/* fast-import reading a stream on stdin; what it writes stays one pack. */
void gitsafe_args_fast_import(struct gitsafe_args *a);

/* A git process talked to over pipes. */
struct gitsafe_child {
	pid_t pid; /* -1: none */
	int in, out;
};

/* gitsafe_start when no git could be executed at all (not on PATH). */
#define GITSAFE_NOT_STARTED (-1)

/* Start git with a's arguments in repo's work tree, in gitsafe_env; its
 * stdin a pipe kept in c->in when with_stdin, else /dev/null; its stdout a
 * pipe in c->out; its stderr /dev/null. Returns 0, or GITSAFE_NOT_STARTED
 * (also for an overflowed a): told apart from any status git itself exits
 * with by a close-on-exec pipe, which reads end of file exactly when
 * execve succeeded. */
int gitsafe_start(const struct gitsafe_repo *repo, const struct gitsafe_args *a, int with_stdin,
                  struct gitsafe_child *c);

/* Feed a started git its whole input (in, n_in; none: NULL), collect at
 * most max bytes of its stdout into out when given (the rest is read and
 * dropped), and reap it. The input goes first: what git prints while it
 * reads fits in the pipe's buffer. A git that exits early makes the write
 * fail with EPIPE (the caller ignores SIGPIPE). Returns git's exit status
 * (128 when it was killed by a signal). */
int gitsafe_finish(struct gitsafe_child *c, const char *in, size_t n_in, struct buf *out, size_t max);

#endif
