/* store.c - the memory stores: in-process, files, git (sfma-mem(1)).
 *
 * Git is run only through lib/gitsafe.c, as a plain program with fixed
 * arguments: model text never becomes an option (queries follow -e or are
 * glued to -S); the store's repository is checked before any git runs
 * (its configuration may hold only keys that name nothing); the
 * environment is rebuilt and overridden on the command line (no system,
 * global or caller configuration, no hooks, pager, editor, fsmonitor or
 * transport); only plumbing that runs no filter, textconv or external
 * diff is used; and every command after the guards names the store
 * explicitly with --git-dir/--work-tree, so git never goes looking for a
 * repository of its own choosing. */
#include "store.h"
#include "core.h" /* RECALL_UNKNOWN_MODE: the core's words for the same refusal */
#include "atomic.h"
#include "buf.h"
#include "canon.h"
#include "clock.h"
#include "errors.h"
#include "ndjson.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RECALL_MAX_TEXT 8192
#define GIT_MAX_OUTPUT (256u << 10)

/* store_close folds the packs (one per run's commit, see
 * gitsafe_args_fast_import) into one (git repack) once there are more
 * than PACKS_MAX, so that reading the history never searches more packs
 * than that. */
#define PACKS_MAX 32

/* dir + "/" + name into out. The workspace is at most
 * STORE_WORKSPACE_MAX bytes (main.c) and every name joined here is
 * bounded, so this never cuts a path short; it dies rather than do so. */
static char *path_join(char out[PATH_MAX], const char *dir, const char *name)
{
	if (snprintf(out, PATH_MAX, "%s/%s", dir, name) >= PATH_MAX)
		die("%s/%s: path too long", dir, name);
	return out;
}

/* Milliseconds since t0 (mono_ms_frac), rounded to the microsecond. */
static double elapsed_ms(double t0)
{
	return round((mono_ms_frac() - t0) * 1000) / 1000;
}

/* A git command line for the store (lib/gitsafe.c): explicit_repo names
 * the store with --git-dir/--work-tree. The arguments follow. */
static struct gitsafe_args *git_args(struct store *st, struct gitsafe_args *a, int explicit_repo)
{
	struct gitsafe_repo repo = {.git_dir = st->git_dir, .work_tree = st->mem_dir, .ceiling = st->ceiling};
	gitsafe_argv(a, &repo, explicit_repo);
	return a;
}

static int git_start(struct store *st, const struct gitsafe_args *a, int with_stdin, struct gitsafe_child *c)
{
	struct gitsafe_repo repo = {.git_dir = st->git_dir, .work_tree = st->mem_dir, .ceiling = st->ceiling};
	return gitsafe_start(&repo, a, with_stdin, c);
}

/* Run git to its end, its stdout (bounded) into out when given. Returns
 * its exit status, or GITSAFE_NOT_STARTED. */
static int git(struct store *st, const struct gitsafe_args *a, struct buf *out)
{
	struct gitsafe_child c;
	int rc = git_start(st, a, 0, &c);
	return rc == GITSAFE_NOT_STARTED ? rc : gitsafe_finish(&c, NULL, 0, out, GIT_MAX_OUTPUT);
}

static void chomp(struct buf *b)
{
	while (b->len && (b->p[b->len - 1] == '\n' || b->p[b->len - 1] == '\r'))
		b->p[--b->len] = '\0';
}

/* What `git init --template=` makes (gitrepository-layout(5)), made here:
 * a git process, the slowest step of a first run, for two files and seven
 * directories. The branch is main; the object format is git's default
 * (repositoryformatversion 0: SHA-1). The guard that follows asks git
 * whether it takes this directory as the store's repository. */
static const char *const repo_dirs[] = {"", "/objects", "/objects/info", "/objects/pack", "/refs", "/refs/heads",
                                        "/refs/tags", NULL};
static const char *const repo_files[][2] = {
	{"/HEAD", "ref: refs/heads/main\n"},
	{"/config", "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
	            "\tlogallrefupdates = true\n"},
};

/* Undo init_repository: git turned out to be absent, and a store without
 * git has no .git (sfma-mem(1)). Only what it made, nothing else. */
static void remove_repository(struct store *st)
{
	char path[PATH_MAX + 32];
	for (size_t i = 0; i < sizeof repo_files / sizeof *repo_files; i++) {
		snprintf(path, sizeof path, "%s%s", st->git_dir, repo_files[i][0]);
		unlink(path);
	}
	int n = 0;
	while (repo_dirs[n])
		n++;
	while (n-- > 0) {
		snprintf(path, sizeof path, "%s%s", st->git_dir, repo_dirs[n]);
		rmdir(path);
	}
}

static int init_repository(struct store *st)
{
	char path[PATH_MAX + 32];
	for (int i = 0; repo_dirs[i]; i++) {
		snprintf(path, sizeof path, "%s%s", st->git_dir, repo_dirs[i]);
		if (mkdir(path, 0755) < 0) {
			int err = errno;
			remove_repository(st);
			errno = err;
			return -1;
		}
	}
	for (size_t i = 0; i < sizeof repo_files / sizeof *repo_files; i++) {
		snprintf(path, sizeof path, "%s%s", st->git_dir, repo_files[i][0]);
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (fd < 0 || write_all(fd, repo_files[i][1], strlen(repo_files[i][1])) < 0) {
			int err = errno;
			if (fd >= 0)
				close(fd);
			remove_repository(st);
			errno = err;
			return -1;
		}
		close(fd);
	}
	return 0;
}

int store_open(struct store *st, const char *sfma_dir, struct sfma_err *e)
{
	struct stat sb;
	memset(st, 0, sizeof *st);
	st->importer = (struct gitsafe_child){.pid = -1, .in = -1, .out = -1};
	st->inproc = json_object();
	path_join(st->mem_dir, sfma_dir, "mem");
	path_join(st->records_dir, st->mem_dir, "records");
	path_join(st->trace_path, sfma_dir, "trace.jsonl");
	snprintf(st->ceiling, sizeof st->ceiling, "%s", sfma_dir);

	/* Guard 1: the store itself is a real directory, never a link that
	 * could point the runner's writes anywhere on the host. */
	if (lstat(st->mem_dir, &sb) == 0) {
		if (S_ISLNK(sb.st_mode)) {
			return err_set(e, ".sfma/mem must not be a symlink");
		}
		if (!S_ISDIR(sb.st_mode)) {
			return err_set(e, ".sfma/mem must be a directory");
		}
	} else if (mkdir(st->mem_dir, 0755) < 0) {
		return err_set(e, "%s: %s", st->mem_dir, strerror(errno));
	}

	/* Guard 2: .git must be the store's own repository directory, not a
	 * `gitdir:` file or a link that sends objects somewhere else, nor a
	 * linked worktree's; and what is in it is read here, before git is
	 * even asked whether it exists: a configuration that names a command
	 * or another file, a symlink, alternates, an attributes file refuse
	 * the store (lib/gitsafe.c) - before anything in it is written. */
	path_join(st->git_dir, st->mem_dir, ".git");
	int have_git_dir = lstat(st->git_dir, &sb) == 0;
	if (have_git_dir && gitsafe_check_repo(st->git_dir, ".sfma/mem/.git", e) < 0)
		return -1;
	if (mkdir(st->records_dir, 0755) < 0 && errno != EEXIST) {
		return err_set(e, "%s: %s", st->records_dir, strerror(errno));
	}
	if (lstat(st->records_dir, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
		return err_set(e, ".sfma/mem/records must be a real directory");
	}

	int created = 0;
	if (!have_git_dir) {
		if (init_repository(st) < 0) {
			snprintf(st->git_unavailable_why, sizeof st->git_unavailable_why, "git init failed: %s",
			         strerror(errno));
			return 0;
		}
		created = 1;
	}
	/* Guard 3: the repository git itself resolves from inside the store
	 * must be the store's own. The same call says whether the branch has
	 * a commit yet (the parent of this run's), and it is the git store's
	 * measured round trip: one start of git that reads the repository. */
	struct buf out = {0};
	struct gitsafe_args a;
	static const char *const where[] = {"rev-parse", "--absolute-git-dir", "--verify", "-q", "HEAD", NULL};
	git_args(st, &a, 0);
	for (int i = 0; where[i]; i++)
		gitsafe_args_add(&a, where[i]);
	char *real = realpath(st->git_dir, NULL);
	double t0 = mono_ms_frac();
	int rc = git(st, &a, &out);
	st->latency_git = elapsed_ms(t0);
	if (rc == GITSAFE_NOT_STARTED) {
		free(real);
		buf_free(&out);
		if (created)
			remove_repository(st);
		snprintf(st->git_unavailable_why, sizeof st->git_unavailable_why, "git not found on PATH");
		return 0;
	}
	/* rev-parse prints the directory, then HEAD's commit; an unborn HEAD
	 * makes --verify -q fail quietly (status 1) after the directory. */
	char *nl = out.p ? strchr(out.p, '\n') : NULL;
	if (nl)
		*nl = '\0';
	char *head = nl ? nl + 1 : NULL;
	if (head)
		head[strcspn(head, "\n")] = '\0';
	if ((rc != 0 && rc != 1) || !real || !out.p || strcmp(out.p, real) != 0) {
		err_set(e, "git resolves %s, not .sfma/mem/.git: refusing an enclosing repository",
		        out.p && *out.p ? out.p : "no repository");
		free(real);
		buf_free(&out);
		return -1;
	}
	if (strlen(real) >= sizeof st->git_dir) {
		free(real);
		buf_free(&out);
		return err_set(e, ".sfma/mem/.git: path too long");
	}
	strcpy(st->git_dir, real);
	free(real);
	size_t hl = head ? strlen(head) : 0;
	if (rc == 0 && (hl == 40 || hl == 64) && strspn(head, "0123456789abcdef") == hl)
		memcpy(st->parent, head, hl + 1);
	buf_free(&out);
	st->git_available = 1;
	/* The commit's fast-import is started now, past every guard, and
	 * waits on its input for the run's end: its start is paid while the
	 * run works, not after. An input closed before anything was sent (a
	 * run that ends without committing, or a planner that dies) makes it
	 * exit having written nothing; one cut short after `feature done` is
	 * refused whole. */
	gitsafe_args_fast_import(git_args(st, &a, 1));
	if (git_start(st, &a, 1, &st->importer) != 0)
		st->importer.pid = -1;
	return 0;
}

static const char *tier_of(struct store *st, const char *name)
{
	if (st->fast && strcmp(st->fast, name) == 0)
		return "fast";
	if (st->medium && strcmp(st->medium, name) == 0)
		return "medium";
	if (st->longer && strcmp(st->longer, name) == 0)
		return "long";
	return "none";
}

/* An in-memory put that cannot be read back: nothing sensible can follow. */
static _Noreturn void file_probe_failed_in_memory(void)
{
	die("memory store: in-process probe failed");
}

void store_profile(struct store *st, json_t **git_entry, json_t **placement)
{
	double t0;
	/* In-process: a put and a get of a small pointer. */
	t0 = mono_ms_frac();
	json_object_set_new(st->inproc, ".probe", json_string("probe"));
	if (!json_object_get(st->inproc, ".probe"))
		file_probe_failed_in_memory();
	json_object_del(st->inproc, ".probe");
	st->latency_inproc = elapsed_ms(t0);
	/* Files: a durable write and a read back. */
	char probe[PATH_MAX];
	path_join(probe, st->records_dir, ".probe");
	t0 = mono_ms_frac();
	int file_ok = atomic_write(probe, "probe", 5, 0644, NULL) == 0;
	if (file_ok) {
		char back[8];
		int fd = open(probe, O_RDONLY | O_CLOEXEC);
		file_ok = fd >= 0 && read(fd, back, sizeof back) == 5;
		if (fd >= 0)
			close(fd);
		unlink(probe);
	}
	st->latency_file = elapsed_ms(t0);
	/* Git: measured by store_open, on the guard's rev-parse (a start of
	 * git that finds and reads the repository): a second process only to
	 * be timed would cost every run as much again. */
	/* Place by measured latency. */
	struct { const char *name; double ms; int ok; } s[3] = {
		{"inproc", st->latency_inproc, 1}, {"file", st->latency_file, file_ok},
		{"git", st->latency_git, st->git_available},
	};
	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++)
			if (s[j].ok && (!s[i].ok || s[j].ms < s[i].ms)) {
				__typeof__(s[0]) t = s[i];
				s[i] = s[j];
				s[j] = t;
			}
	const char **tiers[3] = {&st->fast, &st->medium, &st->longer};
	json_t *measured = json_array(), *place = json_object();
	int usable = 0;
	for (int i = 0; i < 3; i++) {
		*tiers[i] = s[i].ok ? s[i].name : NULL;
		usable += s[i].ok;
		if (s[i].ok)
			json_array_append_new(measured, json_pack("{s:s, s:f}", "name", s[i].name, "latencyMs", s[i].ms));
	}
	json_object_set_new(place, "fast", st->fast ? json_string(st->fast) : json_null());
	json_object_set_new(place, "medium", st->medium ? json_string(st->medium) : json_null());
	json_object_set_new(place, "long", st->longer ? json_string(st->longer) : json_null());
	*placement = json_pack("{s:s, s:o, s:o, s:b}", "op", "placement", "placement", place, "measured", measured,
	                       "singleStore", usable == 1);
	if (usable == 1)
		json_object_set_new(*placement, "notice", json_string("only one usable store on this host"));

	*git_entry = json_pack("{s:s, s:s, s:s, s:b, s:{s:b, s:b, s:b, s:b, s:b}}", "name", "git-long", "kind", "git",
	                       "dir", ".sfma/mem", "available", st->git_available, "capabilities",
	                       "referential", 1, "episodic", 1, "lexical", 1, "changePoint", 1, "semantic", 0);
	if (st->git_available)
		json_object_set_new(*git_entry, "latencyMs", json_real(st->latency_git));
	else
		json_object_set_new(*git_entry, "reason", json_string(st->git_unavailable_why));
}

/* An id that is safe as a file name under records/: recall must never read
 * outside the store. */
int store_safe_id(const char *id)
{
	size_t n = id ? strlen(id) : 0;
	if (n == 0 || n > 128 || id[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)id[i]) && !strchr("._-", id[i]))
			return 0;
	return strstr(id, "..") == NULL;
}

json_t *store_put(struct store *st, const char *id, json_t *payload, long fast_max_bytes)
{
	struct buf b = {0};
	char path[PATH_MAX], name[200];
	canon_dump(payload, &b, NULL);
	size_t bytes = b.len;
	snprintf(name, sizeof name, "%s.json", store_safe_id(id) ? id : "");
	path_join(path, st->records_dir, name);
	json_t *entry = json_pack("{s:s, s:s, s:I}", "op", "put", "id", id, "bytes", (json_int_t)bytes);
	struct sfma_err e;
	if (!store_safe_id(id) || atomic_write(path, b.p, b.len, 0644, &e) < 0) {
		json_object_set_new(entry, "ok", json_false());
		buf_free(&b);
		return entry;
	}
	buf_free(&b);
	char ref[200];
	snprintf(ref, sizeof ref, "file:%s", id);
	const char *tier = tier_of(st, "file");
	if ((long)bytes > fast_max_bytes) {
		/* Over the fast tier's ceiling: a git blob, committed with this
		 * run's records at the end of the run, so never dangling. The
		 * reason names the ceiling in words scripts look for. */
		char rel[300], reason[200];
		struct buf out = {0};
		snprintf(rel, sizeof rel, "records/%s.json", id);
		struct gitsafe_args a;
		gitsafe_args_hash_object(git_args(st, &a, 1), rel);
		int hashed = st->git_available && git(st, &a, &out) == 0;
		chomp(&out);
		if (hashed && out.len == 40) {
			snprintf(ref, sizeof ref, "git:%s", out.p);
			tier = tier_of(st, "git");
		}
		snprintf(reason, sizeof reason, "payload of %zu bytes exceeds fastTierMaxBytes (%ld)%s", bytes,
		         fast_max_bytes, strncmp(ref, "git:", 4) == 0 ? "" : "; git unavailable, kept in files");
		json_object_set_new(entry, "reason", json_string(reason));
		buf_free(&out);
	}
	json_object_set_new(st->inproc, id, json_string(ref));
	json_object_set_new(entry, "tier", json_string(tier));
	json_object_set_new(entry, "ref", json_string(ref));
	json_object_set_new(entry, "fastHolds", json_string("pointer"));
	return entry;
}

/* ---- recall ----------------------------------------------------------- */

static long limit_of(json_t *call, long def, long max)
{
	long long v;
	if (!ndjson_integer(json_object_get(call, "limit"), &v) || v < 1)
		return def;
	return v > max ? max : (long)v;
}

/* A string read from a record or git, made safe as a JSON string. */
static json_t *text_value(const char *s, size_t n)
{
	json_t *v = json_stringn(s, n);
	return v ? v : json_string("(not valid UTF-8)");
}

static json_t *read_record(const char *path)
{
	return ndjson_load_at(AT_FDCWD, path, 1, 1u << 20, NULL);
}

static int referential(struct store *st, json_t *call, json_t *ans, struct sfma_err *refusal)
{
	json_t *id_v = json_object_get(call, "id");
	const char *id = json_string_value(id_v);
	if (!store_safe_id(id) || strlen(id) != json_string_length(id_v))
		return err_set(refusal, "recall referential: id must be an entry id (letters, digits, . _ -)");
	char path[PATH_MAX], name[200];
	snprintf(name, sizeof name, "%s.json", id); /* a safe id is at most 128 bytes */
	path_join(path, st->records_dir, name);
	json_t *pointer = json_object_get(st->inproc, id);
	json_t *record = NULL;
	const char *tier = NULL;
	if (pointer) {
		tier = "fast"; /* the fast tier answers with its pointer; the record behind it follows */
		record = read_record(path);
	} else if ((record = read_record(path))) {
		tier = tier_of(st, "file");
	} else if (st->git_available) {
		char spec[300];
		struct buf out = {0};
		struct gitsafe_args a;
		snprintf(spec, sizeof spec, "records/%s.json", id);
		gitsafe_args_cat_blob(git_args(st, &a, 1), "HEAD", spec);
		if (git(st, &a, &out) == 0 && out.p)
			record = ndjson_parse(out.p, out.len, NULL);
		buf_free(&out);
		if (record)
			tier = tier_of(st, "git");
	}
	json_object_set_new(ans, "id", json_string(id));
	json_object_set_new(ans, "found", json_boolean(record != NULL));
	if (tier)
		json_object_set_new(ans, "tier", json_string(tier));
	if (pointer)
		json_object_set(ans, "pointer", pointer);
	if (record)
		json_object_set_new(ans, "record", record);
	return 0;
}

/* A list answer: found, the tier of the store that answered (NULL: the
 * trace), and the results (stolen). */
static void put_results(struct store *st, json_t *ans, const char *store_name, json_t *results)
{
	json_object_set_new(ans, "found", json_boolean(json_array_size(results) > 0));
	json_object_set_new(ans, "tier", json_string(store_name ? tier_of(st, store_name) : "trace"));
	json_object_set_new(ans, "results", results);
}

static void episodic(struct store *st, json_t *call, json_t *ans)
{
	long long since = 0, until = 9007199254740991LL;
	ndjson_integer(json_object_get(call, "since"), &since);
	ndjson_integer(json_object_get(call, "until"), &until);
	long limit = limit_of(call, 20, 200);
	json_t *entries = json_array();
	int fd = open(st->trace_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0) {
		struct line_reader r;
		struct sfma_err e;
		char *line;
		size_t len;
		lr_init(&r, fd, NDJSON_DEFAULT_MAX);
		while ((long)json_array_size(entries) < limit && lr_next(&r, &line, &len, &e) == 1) {
			json_t *v = ndjson_parse(line, len, &e);
			double seq = json_number_value(json_object_get(v, "seq"));
			if (v && seq >= (double)since && seq <= (double)until)
				json_array_append_new(entries, json_pack("{s:O?, s:O?, s:O?, s:O?}", "seq",
				                      json_object_get(v, "seq"), "kind", json_object_get(v, "kind"), "id",
				                      json_object_get(v, "id"), "data", json_object_get(v, "data")));
			json_decref(v);
		}
		lr_free(&r);
		close(fd);
	}
	put_results(st, ans, NULL, entries);
}

/* The call's query: a non-empty one-line string of at most 200 bytes. */
static int query_of(json_t *call, const char **q, const char *mode, struct sfma_err *refusal)
{
	*q = json_string_value(json_object_get(call, "query"));
	if (!*q || !**q || strlen(*q) > 200 || strchr(*q, '\n') ||
	    strlen(*q) != json_string_length(json_object_get(call, "query")))
		return err_set(refusal, "recall %s: query must be a non-empty one-line string", mode);
	return 0;
}

/* Literal search over committed history: git grep over the recent commits. */
static int lexical(struct store *st, json_t *call, json_t *ans, struct sfma_err *refusal)
{
	const char *q;
	if (query_of(call, &q, "lexical", refusal) < 0)
		return -1;
	long limit = limit_of(call, 20, 100);
	json_t *results = json_array();
	struct buf revs = {0};
	struct gitsafe_args a;
	static const char *const list[] = {"rev-list", "--max-count=64", "--all", NULL};
	git_args(st, &a, 1);
	for (int i = 0; list[i]; i++)
		gitsafe_args_add(&a, list[i]);
	if (git(st, &a, &revs) == 0 && revs.len) {
		gitsafe_args_grep(git_args(st, &a, 1), q);
		char *save = NULL;
		int nrevs = 0;
		for (char *rev = strtok_r(revs.p, "\n", &save); rev && nrevs < 20; rev = strtok_r(NULL, "\n", &save), nrevs++)
			gitsafe_args_add(&a, rev);
		gitsafe_args_add(&a, "--");
		struct buf out = {0};
		git(st, &a, &out);
		save = NULL;
		json_t *seen = json_object();
		for (char *line = out.p ? strtok_r(out.p, "\n", &save) : NULL;
		     line && (long)json_array_size(results) < limit; line = strtok_r(NULL, "\n", &save)) {
			/* <commit>:<path>:<line>:<text>; the same hit in older commits once. */
			char *path = strchr(line, ':');
			if (!path || json_object_get(seen, path + 1))
				continue;
			json_object_set_new(seen, path + 1, json_true());
			*path = '\0';
			char *num = strchr(path + 1, ':');
			char *text = num ? strchr(num + 1, ':') : NULL;
			if (!text)
				continue;
			*num = *text = '\0';
			json_array_append_new(results, json_pack("{s:s, s:s, s:i, s:o}", "commit", line, "path", path + 1,
			                      "line", atoi(num + 1), "text", text_value(text + 1, strlen(text + 1))));
		}
		json_decref(seen);
		buf_free(&out);
	}
	buf_free(&revs);
	put_results(st, ans, "git", results);
	return 0;
}

/* Which commits (and so which runs) made the string enter or leave memory:
 * git's pickaxe. */
static int change(struct store *st, json_t *call, json_t *ans, struct sfma_err *refusal)
{
	const char *q;
	if (query_of(call, &q, "change", refusal) < 0)
		return -1;
	long limit = limit_of(call, 20, 100);
	struct gitsafe_args a;
	gitsafe_args_pickaxe(git_args(st, &a, 1), q, limit);
	struct buf out = {0};
	json_t *results = json_array();
	git(st, &a, &out);
	char *save = NULL;
	for (char *line = out.p ? strtok_r(out.p, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
		char *tab = strchr(line, '\t');
		if (!tab)
			continue;
		*tab = '\0';
		json_array_append_new(results, json_pack("{s:s, s:o}", "commit", line, "run", text_value(tab + 1, strlen(tab + 1))));
	}
	buf_free(&out);
	put_results(st, ans, "git", results);
	return 0;
}

/* No store here does similarity search: rank records by shared terms and
 * say so, plainly. */
static int semantic(struct store *st, json_t *call, json_t *ans, struct sfma_err *refusal)
{
	const char *q;
	if (query_of(call, &q, "semantic", refusal) < 0)
		return -1;
	long limit = limit_of(call, 10, 50);
	char terms[16][64];
	int nterms = 0;
	char word[64];
	size_t wl = 0;
	for (const char *p = q;; p++) {
		if (*p && (isalnum((unsigned char)*p) || (unsigned char)*p >= 0x80)) {
			if (wl < sizeof word - 1)
				word[wl++] = (char)tolower((unsigned char)*p);
			continue;
		}
		if (wl > 1 && nterms < 16) {
			word[wl] = '\0';
			snprintf(terms[nterms++], sizeof terms[0], "%s", word);
		}
		wl = 0;
		if (!*p)
			break;
	}
	json_t *results = json_array();
	DIR *d = opendir(st->records_dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		size_t n = strlen(de->d_name);
		if (de->d_name[0] == '.' || n < 6 || strcmp(de->d_name + n - 5, ".json") != 0)
			continue;
		char path[PATH_MAX];
		path_join(path, st->records_dir, de->d_name);
		json_t *rec = read_record(path);
		struct buf b = {0};
		if (rec)
			canon_dump(rec, &b, NULL);
		json_decref(rec);
		int score = 0;
		for (size_t i = 0; b.p && i < b.len; i++)
			b.p[i] = (char)tolower((unsigned char)b.p[i]);
		for (int t = 0; b.p && t < nterms; t++)
			score += strstr(b.p, terms[t]) != NULL;
		buf_free(&b);
		if (score > 0)
			json_array_append_new(results, json_pack("{s:s%, s:i}", "id", de->d_name, n - 5, "overlap", score));
	}
	if (d)
		closedir(d);
	/* Highest overlap first (insertion sort: a handful of records). */
	size_t n = json_array_size(results);
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0; j--) {
			json_t *a = json_array_get(results, j - 1), *b = json_array_get(results, j);
			if (json_number_value(json_object_get(a, "overlap")) >= json_number_value(json_object_get(b, "overlap")))
				break;
			json_incref(a);
			json_array_set(results, j - 1, b);
			json_array_set_new(results, j, a);
		}
	while ((long)json_array_size(results) > limit)
		json_array_remove(results, json_array_size(results) - 1);
	put_results(st, ans, "file", results);
	json_object_set_new(ans, "degraded", json_true());
	json_object_set_new(ans, "notice", json_string("no store here does similarity search: this is a "
	                                               "term-overlap ranking, not semantic similarity"));
	return 0;
}

/* The five modes (the core's gate, recall_mode_known, has the same). */
static int mode_known(const char *mode)
{
	static const char *const modes[] = {"referential", "episodic", "lexical", "change", "semantic", NULL};
	for (int i = 0; mode && modes[i]; i++)
		if (strcmp(mode, modes[i]) == 0)
			return 1;
	return 0;
}

char *store_recall(struct store *st, json_t *call, json_t **entry, struct sfma_err *refusal)
{
	json_t *mode_v = json_object_get(call, "mode");
	const char *mode = json_string_value(mode_v);
	int rc = 0;
	*entry = NULL;
	if (!mode_known(mode) || strlen(mode) != json_string_length(mode_v)) {
		err_set(refusal, "%s", RECALL_UNKNOWN_MODE);
		return NULL;
	}
	json_t *ans = json_pack("{s:s}", "mode", mode);
	int needs_git = strcmp(mode, "lexical") == 0 || strcmp(mode, "change") == 0;
	if (needs_git && !st->git_available) {
		json_object_set_new(ans, "available", json_false());
		json_object_set_new(ans, "found", json_false());
		json_object_set_new(ans, "notice", json_string(st->git_unavailable_why));
	} else {
		json_object_set_new(ans, "available", json_true());
		if (strcmp(mode, "referential") == 0)
			rc = referential(st, call, ans, refusal);
		else if (strcmp(mode, "episodic") == 0)
			episodic(st, call, ans);
		else if (strcmp(mode, "lexical") == 0)
			rc = lexical(st, call, ans, refusal);
		else if (strcmp(mode, "change") == 0)
			rc = change(st, call, ans, refusal);
		else
			rc = semantic(st, call, ans, refusal);
	}
	if (rc < 0) {
		json_decref(ans);
		return NULL;
	}
	/* Bounded answer: drop results from the end, or clip a large record. */
	struct buf b = {0};
	json_t *results = json_object_get(ans, "results");
	for (;;) {
		buf_reset(&b);
		canon_dump(ans, &b, NULL);
		if (b.len <= RECALL_MAX_TEXT)
			break;
		json_object_set_new(ans, "clipped", json_true());
		if (json_array_size(results) > 0) {
			json_array_remove(results, json_array_size(results) - 1);
		} else if (json_object_get(ans, "record")) {
			struct buf r = {0};
			canon_dump(json_object_get(ans, "record"), &r, NULL);
			size_t keep = RECALL_MAX_TEXT / 2;
			while (keep > 0 && ((unsigned char)r.p[keep] & 0xC0) == 0x80)
				keep--; /* never cut a character in half */
			json_object_set_new(ans, "record", json_stringn(r.p, keep));
			buf_free(&r);
		} else {
			break;
		}
	}
	*entry = json_pack("{s:s, s:s, s:O?, s:I}", "op", "recall", "mode", mode, "found", json_object_get(ans, "found"),
	                   "count", (json_int_t)json_array_size(results));
	if (!results)
		json_object_set_new(*entry, "count", json_integer(json_is_true(json_object_get(ans, "found")) ? 1 : 0));
	static const char *const copy[] = {"tier", "degraded", "available"};
	for (int i = 0; i < 3; i++)
		if (json_object_get(ans, copy[i]))
			json_object_set(*entry, copy[i], json_object_get(ans, copy[i]));
	json_decref(ans);
	return b.p;
}

/* An importer that was not given a commit: its input closed empty, it
 * exits having written nothing. */
static void stop_importer(struct store *st)
{
	if (st->importer.pid > 0)
		gitsafe_finish(&st->importer, NULL, 0, NULL, 0);
}

/* Where this run's commit goes: the branch HEAD names
 * ("refs/heads/<name>", a name fast-import takes as it is), or HEAD itself
 * when it is detached (a commit id): fast-import then moves HEAD, as
 * `git commit` would. Read from the store's own repository directory,
 * which gitsafe_check_repo checked; NULL when HEAD holds anything else. */
static const char *head_ref(struct store *st, char ref[256])
{
	char path[PATH_MAX];
	path_join(path, st->git_dir, "HEAD");
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return NULL;
	char text[300];
	ssize_t n = read(fd, text, sizeof text);
	close(fd);
	if (n <= 0 || n == (ssize_t)sizeof text)
		return NULL;
	switch (gitsafe_ref_parse(text, (size_t)n, ref, 256)) {
	case GITSAFE_REF_SYMBOLIC:
		return strncmp(ref, "refs/heads/", 11) == 0 ? ref : NULL;
	case GITSAFE_REF_OID:
		return strcpy(ref, "HEAD");
	default:
		return NULL;
	}
}

/* One file of the commit, its content inline. */
static void stream_file(struct buf *s, const char *path, const char *data, size_t n)
{
	buf_printf(s, "M 100644 inline %s\ndata %zu\n", path, n);
	buf_add(s, data, n);
	buf_addc(s, '\n');
}

/* The records in the stream: this run's, and those written since the
 * branch last moved (a record file is written once, before the commit
 * that takes it, so its change time is not older than the branch's),
 * which includes one a crashed run left uncommitted; every record when
 * the branch has no commit yet or its time cannot be read. Committed
 * records are not sent again: the commit builds on its parent's tree. */
static int stream_records(struct store *st, struct buf *s, const char *ref)
{
	char ref_path[PATH_MAX];
	struct stat ref_st;
	int all = !st->parent[0] || snprintf(ref_path, sizeof ref_path, "%s/%s", st->git_dir, ref) >= (int)sizeof ref_path ||
	          lstat(ref_path, &ref_st) < 0;
	DIR *d = opendir(st->records_dir);
	if (!d)
		return -1;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0 || !store_safe_id(de->d_name))
			continue;
		char path[PATH_MAX], rel[300], id[200];
		path_join(path, st->records_dir, de->d_name);
		/* This run's own records go in whatever the clock did since. */
		snprintf(id, sizeof id, "%.*s", (int)(n - 5), de->d_name);
		int mine = json_object_get(st->inproc, id) != NULL;
		int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		struct stat sb;
		if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size > (off_t)(16u << 20) ||
		    (!all && !mine && (sb.st_ctim.tv_sec < ref_st.st_mtim.tv_sec ||
		                       (sb.st_ctim.tv_sec == ref_st.st_mtim.tv_sec &&
		                        sb.st_ctim.tv_nsec < ref_st.st_mtim.tv_nsec)))) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		struct sfma_err e;
		size_t len = 0;
		char *text = read_all_fd(fd, 16u << 20, &len, &e);
		close(fd);
		if (!text)
			continue;
		snprintf(rel, sizeof rel, "records/%s", de->d_name);
		stream_file(s, rel, text, len);
		free(text);
	}
	closedir(d);
	return 0;
}

json_t *store_commit(struct store *st, const char *memory_json, const char *subject, const char **sha)
{
	static char commit[65];
	*sha = NULL;
	if (!st->git_available)
		return NULL;
	/* The work tree's copy, for a person reading the store; the commit
	 * takes the content from here, and .sfma/memory.json is the durable
	 * one. */
	char path[PATH_MAX];
	path_join(path, st->mem_dir, "memory.json");
	size_t mem_len = strlen(memory_json);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd >= 0) {
		write_all(fd, memory_json, mem_len);
		close(fd);
	}
	struct buf out = {0};
	char ref[256];
	/* One process: the commit (HEAD's commit as its parent, its tree with
	 * memory.json and the new records), the branch (or a detached HEAD)
	 * moved only if it still points at that parent, and the new commit's
	 * id printed back (get-mark). No index is written and no work-tree
	 * file is read by git, so no filter could run: the history is the
	 * store, read with git log / show / grep. */
	int ok = head_ref(st, ref) != NULL;
	if (ok) {
		struct buf s = {0};
		buf_printf(&s, "feature done\ncommit %s\nmark :1\ncommitter sfma <sfma@localhost> %lld +0000\n", ref,
		           (long long)(wall_ms() / 1000));
		size_t msg_len = strlen(subject) + 1;
		buf_printf(&s, "data %zu\n%s\n\n", msg_len, subject);
		if (st->parent[0])
			buf_printf(&s, "from %s\n", st->parent);
		stream_file(&s, "memory.json", memory_json, mem_len);
		ok = stream_records(st, &s, ref) == 0;
		buf_printf(&s, "\nget-mark :1\ndone\n");
		struct gitsafe_args a;
		gitsafe_args_fast_import(git_args(st, &a, 1));
		if (st->importer.pid < 0 && git_start(st, &a, 1, &st->importer) != 0)
			st->importer.pid = -1;
		ok = ok && st->importer.pid > 0 && gitsafe_finish(&st->importer, s.p, s.len, &out, GIT_MAX_OUTPUT) == 0;
		buf_free(&s);
	}
	chomp(&out);
	json_t *entry = json_pack("{s:s, s:b, s:s, s:s}", "name", "git-long", "ok", ok, "stage", "commit",
	                          "message", subject);
	if (ok && (out.len == 40 || out.len == 64) && strspn(out.p, "0123456789abcdef") == out.len) {
		memcpy(commit, out.p, out.len + 1);
		memcpy(st->parent, commit, out.len + 1);
		json_object_set_new(entry, "sha", json_string(commit));
		*sha = commit;
		st->committed = 1;
	}
	buf_free(&out);
	return entry;
}

/* How many packs the store's repository holds (objects/pack, *.pack). */
static int count_packs(struct store *st)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/objects/pack", st->git_dir);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		n += len > 5 && strcmp(de->d_name + len - 5, ".pack") == 0;
	}
	closedir(d);
	return n;
}

void store_close(struct store *st)
{
	stop_importer(st);
	/* After the seal: a fold that fails leaves the packs as they were,
	 * every object still in them. */
	static const char *const fold[] = {"repack", "-a", "-d", "-q", NULL};
	if (st->git_available && st->committed && count_packs(st) > PACKS_MAX) {
		struct gitsafe_args a;
		git_args(st, &a, 1);
		for (int i = 0; fold[i]; i++)
			gitsafe_args_add(&a, fold[i]);
		git(st, &a, NULL);
	}
	json_decref(st->inproc);
	st->inproc = NULL;
}
