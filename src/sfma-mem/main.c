/* sfma-mem - the memory stage: the long-term memory store of a workspace,
 * and the one program of a run that starts git (sfma-mem(1)).
 *
 *   sfma-mem WORKSPACE
 *
 * It owns WORKSPACE/.sfma/mem and replaces WORKSPACE/.sfma/memory.json
 * (the planner writes nothing in .sfma but its evidence): the planner asks, one request per line on
 * stdin, and each is answered with one line on stdout, in order:
 *
 *   {"id":1,"op":"open"}                          the guards, the profile
 *   {"id":2,"op":"keep","key":K,"payload":V,"fastMaxBytes":N}
 *   {"id":3,"op":"recall","call":{"tool":"recall","mode":M,...}}
 *   {"id":4,"op":"commit","subject":S,"memory":{...}}
 *
 *   {"id":ID,"ok":true,...}  or  {"id":ID|null,"ok":false,"error":TEXT}
 *
 * Nothing is opened before the first request: in a run the planner
 * creates the workspace after every stage has started. At the end of
 * input the store is closed (the commit's git, if it was not used, exits
 * having written nothing; the packs are folded past 32) and the stage
 * exits 0. Exit 1: a write to stdout or a read of stdin failed; 2: usage.
 * The workspace lock is the planner's (.sfma, flocked for its run): this
 * stage works only on its requests. */
#include "store.h"
#include "atomic.h"
#include "buf.h"
#include "canon.h"
#include "cli.h"
#include "confine.h"
#include "errors.h"
#include "ndjson.h"
#include "utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: sfma-mem WORKSPACE\n"
	"       sfma-mem --version | --help\n";

/* A request is at most this long: a commit carries memory.json, which the
 * planner keeps to 16 MiB, and its subject. */
#define REQUEST_MAX ((16u << 20) + (64u << 10))
/* A commit's subject, at most: the planner's names the run and its counts. */
#define SUBJECT_MAX 1024

struct mem {
	char sfma_dir[PATH_MAX];   /* WORKSPACE/.sfma */
	struct store store;
	enum { STORE_CLOSED, STORE_OPEN, STORE_REFUSED } state;
};

/* ---- replies --------------------------------------------------------- */

/* One reply line, flushed; r is consumed. A reader that has gone (the
 * planner ended) leaves nobody to answer: the store is closed and the
 * stage exits quietly. */
static void reply(struct mem *s, json_t *r)
{
	int rc = ndjson_print(stdout, r);
	json_decref(r);
	if (rc < 0) {
		if (errno == EPIPE) {
			if (s->state == STORE_OPEN)
				store_close(&s->store);
			exit(0);
		}
		die("write reply: %s", strerror(errno));
	}
}

static json_t *reply_new(const json_t *id, int ok)
{
	return json_pack("{s:O, s:b}", "id", id ? (json_t *)id : json_null(), "ok", ok);
}

static void reply_error(struct mem *s, const json_t *id, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void reply_error(struct mem *s, const json_t *id, const char *fmt, ...)
{
	struct sfma_err e;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e.text, sizeof e.text, fmt, ap);
	va_end(ap);
	json_t *r = reply_new(id, 0);
	json_object_set_new(r, "error", utf8_json(e.text, strlen(e.text)));
	reply(s, r);
}

/* ---- requests ---------------------------------------------------------- */

/* Every member of req is one of the names given (NULL-terminated);
 * otherwise the first that is not, for the refusal. */
static const char *unknown_member(const json_t *req, const char *const *names)
{
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)req, key, v) {
		int known = 0;
		for (int i = 0; names[i] && !known; i++)
			known = strcmp(key, names[i]) == 0;
		if (!known)
			return key;
	}
	return NULL;
}

/* A string member: present, a string, no U+0000 (which a C string would
 * cut short). NULL otherwise. */
static const char *string_member(const json_t *req, const char *name)
{
	json_t *v = json_object_get(req, name);
	const char *s = json_string_value(v);
	return s && strlen(s) == json_string_length(v) ? s : NULL;
}

/* open: the containment guards, then the stores' profile: the two
 * `store` entries a run begins with. A store the guards refuse is an
 * answer, not a failure of this stage: the run ends, having said why. */
static void op_open(struct mem *s, const json_t *id)
{
	if (s->state != STORE_CLOSED) {
		reply_error(s, id, "open: the store was opened already");
		return;
	}
	struct sfma_err e;
	if (store_open(&s->store, s->sfma_dir, &e) < 0) {
		store_close(&s->store);
		s->state = STORE_REFUSED;
		reply_error(s, id, "%s", e.text);
		return;
	}
	s->state = STORE_OPEN;
	json_t *git_entry, *placement;
	store_profile(&s->store, &git_entry, &placement);
	json_t *r = reply_new(id, 1);
	json_object_set_new(r, "stores", json_pack("[o, o]", git_entry, placement));
	reply(s, r);
}

/* keep: a record written durably (over fastMaxBytes: a git blob too). */
static void op_keep(struct mem *s, const json_t *id, const json_t *req)
{
	const char *key = string_member(req, "key");
	json_t *payload = json_object_get(req, "payload");
	long long max;
	if (!key || !store_safe_id(key)) {
		reply_error(s, id, "keep: key must be an entry id (letters, digits, . _ -)");
		return;
	}
	if (!payload) {
		reply_error(s, id, "keep: no payload");
		return;
	}
	if (!ndjson_integer(json_object_get(req, "fastMaxBytes"), &max) || max < 0 || max > LONG_MAX) {
		reply_error(s, id, "keep: fastMaxBytes must be a whole number of bytes");
		return;
	}
	json_t *r = reply_new(id, 1);
	json_object_set_new(r, "entry", store_put(&s->store, key, payload, (long)max));
	reply(s, r);
}

/* recall: the text the model is shown and the `store` entry, or the
 * refusal that becomes the call's verdict. */
static void op_recall(struct mem *s, const json_t *id, const json_t *req)
{
	json_t *call = json_object_get(req, "call");
	if (!json_is_object(call)) {
		reply_error(s, id, "recall: call must be an object");
		return;
	}
	struct sfma_err refusal = {""};
	json_t *entry = NULL;
	char *text = store_recall(&s->store, call, &entry, &refusal);
	if (!text) {
		reply_error(s, id, "%s", refusal.text);
		return;
	}
	json_t *r = reply_new(id, 1);
	json_object_set_new(r, "text", utf8_json(text, strlen(text)));
	json_object_set_new(r, "entry", entry ? entry : json_null());
	free(text);
	reply(s, r);
}

/* .sfma/memory.json, replaced atomically: the temporary file is made in
 * the store's directory, which this stage owns, and renamed into .sfma,
 * where it may make and remove files but write none (sfma(1),
 * CONFINEMENT): the planner never writes in .sfma, and the observer's
 * chain there is written by no stage but the observer. */
static int save_memory(const struct mem *s, const char *text, size_t len, struct sfma_err *e)
{
	int sfma = open(s->sfma_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), mem = -1;
	if (sfma < 0)
		return err_set(e, "memory.json: %s: %s", s->sfma_dir, strerror(errno));
	if ((mem = openat(sfma, "mem", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		int err = errno;
		close(sfma);
		return err_set(e, "memory.json: .sfma/mem: %s", strerror(err));
	}
	int rc = atomic_write_via(mem, sfma, "memory.json", text, len, 0600, e);
	close(mem);
	close(sfma);
	return rc;
}

/* commit: memory.json written, then it and the run's records in one
 * commit. The file is written whatever the store: one the guards
 * refused, or none without git, has no commit (the entry is null). */
static void op_commit(struct mem *s, const json_t *id, const json_t *req)
{
	const char *subject = string_member(req, "subject");
	json_t *memory = json_object_get(req, "memory");
	if (!subject || !*subject || strlen(subject) > SUBJECT_MAX) {
		reply_error(s, id, "commit: subject must be a string of 1 to %d bytes", SUBJECT_MAX);
		return;
	}
	if (!json_is_object(memory) || !json_is_array(json_object_get(memory, "runs"))) {
		reply_error(s, id, "commit: memory must be a memory document (an object with runs)");
		return;
	}
	/* memory.json as .sfma/memory.json holds it (sfma-plan(1)). */
	struct buf text = {0};
	canon_dump_pretty(memory, &text, NULL);
	buf_addc(&text, '\n');
	struct sfma_err e;
	if (save_memory(s, text.p, text.len, &e) < 0) {
		buf_free(&text);
		reply_error(s, id, "%s", e.text);
		return;
	}
	const char *sha;
	json_t *entry = s->state == STORE_OPEN ? store_commit(&s->store, text.p, subject, &sha) : NULL;
	buf_free(&text);
	json_t *r = reply_new(id, 1);
	json_object_set_new(r, "entry", entry ? entry : json_null());
	reply(s, r);
}

static void handle(struct mem *s, const char *line, size_t len)
{
	struct sfma_err e;
	json_t *req = ndjson_parse(line, len, &e);
	if (!req) {
		reply_error(s, NULL, "request: %s", e.text);
		return;
	}
	const json_t *id = json_object_get(req, "id");
	json_t *op_v = json_object_get(req, "op");
	const char *op = string_member(req, "op");
	static const char *const open_members[] = {"id", "op", NULL};
	static const char *const keep_members[] = {"id", "op", "key", "payload", "fastMaxBytes", NULL};
	static const char *const recall_members[] = {"id", "op", "call", NULL};
	static const char *const commit_members[] = {"id", "op", "subject", "memory", NULL};
	const char *const *members = NULL;
	if (!json_is_object(req))
		reply_error(s, NULL, "request: not a JSON object");
	else if (!op)
		reply_error(s, id, "request: no op (open, keep, recall or commit)");
	else if (!(members = ndjson_string_is(op_v, "open")     ? open_members
	                     : ndjson_string_is(op_v, "keep")   ? keep_members
	                     : ndjson_string_is(op_v, "recall") ? recall_members
	                     : ndjson_string_is(op_v, "commit") ? commit_members
	                                                        : NULL))
		reply_error(s, id, "%.64s: unknown request", op);
	else if (unknown_member(req, members))
		reply_error(s, id, "%s: unknown member %.64s", op, unknown_member(req, members));
	else if (members == open_members)
		op_open(s, id);
	else if (members == commit_members)
		op_commit(s, id, req);
	else if (s->state != STORE_OPEN)
		reply_error(s, id, "%s: the store is not open", op);
	else if (members == keep_members)
		op_keep(s, id, req);
	else
		op_recall(s, id, req);
	json_decref(req);
}

/* ---- the program ------------------------------------------------------- */

/* Confined (sfma(1), CONFINEMENT) to the store, the trace it reads for an
 * episodic recall, and git: at the planner's go when sfma passed a
 * channel (the workspace exists then), else at the first request. The
 * store's directory is made first when there is none, as store_open
 * would (a rule can only name what exists); a link there is no
 * directory, grants nothing, and store_open's guard refuses it. */
static void confine(int *channel, const char *workspace, const char *sfma_dir)
{
	char mem_dir[PATH_MAX + 8];
	snprintf(mem_dir, sizeof mem_dir, "%s/mem", sfma_dir);
	if (*channel >= 0)
		confine_channel_await(*channel);
	mkdir(mem_dir, 0755);
	const struct confine_places places = {.workspace = workspace};
	struct confine_report r;
	confine_apply(confine_policy("sfma-mem"), &places, &r);
	if (*channel >= 0) {
		confine_channel_send(*channel, &r);
		close(*channel);
		*channel = -1;
	}
}

static const char *parse_options(int argc, char **argv)
{
	enum { OPT_VERSION = 0x100 };
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, OPT_VERSION}, {NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == 'h')
			cli_help(usage_text);
		else if (c == OPT_VERSION)
			cli_version();
		else
			cli_bad_option(usage_text, c, argv);
	}
	if (optind != argc - 1)
		cli_usage_error(usage_text, optind == argc ? "no WORKSPACE given" : "exactly one WORKSPACE");
	const char *ws = argv[optind];
	if (!*ws)
		cli_usage_error(usage_text, "WORKSPACE must not be empty");
	if (strlen(ws) > STORE_WORKSPACE_MAX)
		cli_usage_error(usage_text, "WORKSPACE longer than %d bytes", STORE_WORKSPACE_MAX);
	return ws;
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	const char *ws = parse_options(argc, argv);
	/* A fatal error is also the last line the planner reads (sfma sets
	 * SFMA_ERROR_LINE for this stage). */
	set_error_echo_if_asked(1);
	/* A git child that exits before it has read its input, or a planner
	 * that has gone, is a write error here, never a signal that kills the
	 * stage halfway through a commit. */
	signal(SIGPIPE, SIG_IGN);
	static struct mem s;
	/* Absolute: every git child works in the store's own directory, and
	 * is told where the repository is from there. */
	char cwd[PATH_MAX] = "";
	if (ws[0] != '/' && !getcwd(cwd, sizeof cwd))
		die("the current directory: %s", strerror(errno));
	if (snprintf(s.sfma_dir, sizeof s.sfma_dir, "%s%s%s/.sfma", cwd, *cwd ? "/" : "", ws) >= STORE_WORKSPACE_MAX)
		die("%s: path too long", ws);

	char workspace[PATH_MAX];
	snprintf(workspace, sizeof workspace, "%.*s", (int)(strlen(s.sfma_dir) - 6), s.sfma_dir);
	int channel = confine_channel_take(), confined = 0;
	if (channel >= 0) {
		confine(&channel, workspace, s.sfma_dir);
		confined = 1;
	}

	struct line_reader lr;
	lr_init(&lr, 0, REQUEST_MAX);
	for (;;) {
		char *line;
		size_t len;
		struct sfma_err e;
		int got = lr_next(&lr, &line, &len, &e);
		if (got == 0)
			break;
		if (!confined) {
			confine(&channel, workspace, s.sfma_dir);
			confined = 1;
		}
		if (got < 0) {
			reply_error(&s, NULL, "request: %s", e.text);
			if (!lr_skip_line(&lr))
				break;
			continue;
		}
		handle(&s, line, len);
	}
	lr_free(&lr);
	/* The end of the run's requests: the commit's git, unused, exits
	 * having written nothing; after a commit the packs are folded. */
	if (s.state == STORE_OPEN)
		store_close(&s.store);
	return 0;
}
