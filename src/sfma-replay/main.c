/* sfma-replay - re-derive a recorded run offline.
 *
 *   sfma-replay WORKSPACE | RESULT.json
 *
 * No model, no network, no command executed. The record is first checked
 * by sfma-verify (found beside this program); then every run in the trace
 * is walked with its recorded replies and tool results (the evidence) fed
 * through the code that decided it - the planner's reply parser and
 * prompt, sfma-exec's hard tier - and each entry the run must have written
 * is compared with the one it did write. Facts that came from the host at
 * run time (a link met on a path, a file that existed at done, the time a
 * budget halt saw, a HALT file, a signal) are taken from the entries that
 * recorded them, never from today's disk.
 *
 * stdout, one line: REPLAY_OK runs=<r> entries=<n> (exit 0),
 * REPLAY_DIVERGED: seq <n> (<kind>): trace has <X>, replay derives <Y>,
 * or REPLAY_INCOMPLETE: <why> (exit 1). Usage: exit 2. */
#include "beneath.h"
#include "hardtier.h"
#include "../sfma-plan/plan.h"
#include "canon.h"
#include "cli.h"
#include "evidence.h"
#include "ndjson.h"
#include "sha.h"
#include "tools.h"
#include "utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char usage_text[] = "usage: sfma-replay WORKSPACE | RESULT.json\n"
                                 "       sfma-replay --version | --help\n";

struct replay {
	const struct manifest *m;    /* the run's */
	struct manifest *record_m, *run_m;
	json_t *record;
	struct gate_ctx gate;        /* the hard tier over an empty workspace */
	char empty_dir[64];
	char *empty_real;
	int sfma_fd;
	struct evidence_store *store; /* .sfma/evidence, read only */
	json_t **entries;
	size_t n, pos;
	long runs;
	/* the run being replayed */
	long turns, calls, failures;
	char first_refusal[300];
	int adopted, pinned, dry_run, prompt_seen, last_run;
	const char *task;
	json_t *written;             /* dry run: paths written */
	char expect_msg[SHA256_HEX_LEN + 1]; /* the next request's message; "" when not known */
	/* The conversation as the planner held it, to derive its compactions:
	 * the messages, the evidence reference of each (null: elided), the
	 * candidate's reply, the message the next request adds (NULL: not
	 * known yet) with its reference, and the system prompt. */
	json_t *msgs, *refs, *pending, *pending_ref;
	long keep;
	char *system;
	json_t *native_calls;        /* the native calls being answered, or NULL */
	char *reply_text;            /* the reply blob last read */
	json_t *reply_doc;           /* ... parsed, when native */
	json_t *tools;               /* tools_definitions() */
	struct usage usage;
	const char *verdict;
	char error[700];
	json_t *summary;
	/* Loops (sfma-plan(1)): the conversation in the members above is
	 * loop cur's; loops[k].c keeps loop k's while another is current. */
	struct {
		struct {
			json_t *msgs, *refs, *pending, *pending_ref, *native_calls;
			long keep;
			char expect_msg[SHA256_HEX_LEN + 1];
		} c;
		long task, failures;
		int judging, prepared;
	} loops[17];
	int cur, n_loops, legacy;
	json_t *candidate, *last_candidate; /* this run's; the latest adopted in the trace */
	json_t *bb;                  /* the blackboard's task definitions */
	struct rtask { int state, attempts, not_loop; char *clarification; } *tasks;
	const char *last_missing;    /* the first output missing at the last done */
};

static struct replay R;

enum { RT_PENDING, RT_ACTIVE, RT_PASSED, RT_FAILED };

/* Make loop k's conversation the current one. */
static void use_rloop(int k)
{
	if (k == R.cur)
		return;
	R.loops[R.cur].c.msgs = R.msgs;
	R.loops[R.cur].c.refs = R.refs;
	R.loops[R.cur].c.pending = R.pending;
	R.loops[R.cur].c.pending_ref = R.pending_ref;
	R.loops[R.cur].c.native_calls = R.native_calls;
	R.loops[R.cur].c.keep = R.keep;
	memcpy(R.loops[R.cur].c.expect_msg, R.expect_msg, sizeof R.expect_msg);
	R.msgs = R.loops[k].c.msgs;
	R.refs = R.loops[k].c.refs;
	R.pending = R.loops[k].c.pending;
	R.pending_ref = R.loops[k].c.pending_ref;
	R.native_calls = R.loops[k].c.native_calls;
	R.keep = R.loops[k].c.keep;
	memcpy(R.expect_msg, R.loops[k].c.expect_msg, sizeof R.expect_msg);
	memset(&R.loops[k].c, 0, sizeof R.loops[k].c);
	R.cur = k;
}

static void loops_reset(void)
{
	for (int k = 0; k < 17; k++) {
		json_decref(R.loops[k].c.msgs);
		json_decref(R.loops[k].c.refs);
		json_decref(R.loops[k].c.pending);
		json_decref(R.loops[k].c.pending_ref);
		json_decref(R.loops[k].c.native_calls);
		memset(&R.loops[k], 0, sizeof R.loops[k]);
		R.loops[k].task = -1;
	}
	R.cur = 1;
	for (size_t i = 0; i < json_array_size(R.bb); i++)
		free(R.tasks[i].clarification);
	free(R.tasks);
	R.tasks = NULL;
	json_decref(R.bb);
	R.bb = NULL;
	json_decref(R.candidate);
	R.candidate = NULL;
	R.last_missing = NULL;
	R.legacy = 0;
}

/* The largest blob read back: a reply, a file or a command's output. */
#define EVIDENCE_MAX_BYTES ((size_t)1 << 30)

static void unbuild(void);

static void cleanup(void)
{
	free(R.reply_text);
	R.reply_text = NULL;
	json_decref(R.reply_doc);
	R.reply_doc = NULL;
	json_decref(R.tools);
	R.tools = NULL;
	evidence_close(R.store);
	R.store = NULL;
	if (R.empty_dir[0]) {
		unbuild();
		rmdir(R.empty_dir);
	}
}

static _Noreturn void incomplete(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void incomplete(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("REPLAY_INCOMPLETE: ", stdout);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	cleanup();
	exit(1);
}

static long long seq_of(const json_t *e)
{
	return (long long)json_number_value(json_object_get(e, "seq"));
}

static const char *kind_of(const json_t *e)
{
	const char *k = e ? json_string_value(json_object_get(e, "kind")) : NULL;
	return k ? k : "?";
}

static json_t *data_of(const json_t *e)
{
	return json_object_get(e, "data");
}

static const char *str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* A description quoted into the one-line verdict: control bytes shown as '?'. */
static char *shown(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *shown(const char *fmt, ...)
{
	char text[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	for (char *p = text; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return xstrdup(text);
}

static _Noreturn void diverged(const json_t *e, char *has, char *derives)
{
	if (e)
		printf("REPLAY_DIVERGED: seq %lld (%s): trace has %s, replay derives %s\n", seq_of(e), kind_of(e), has,
		       derives);
	else
		printf("REPLAY_DIVERGED: seq end (none): trace has %s, replay derives %s\n", has, derives);
	fflush(stdout);
	free(has);
	free(derives);
	cleanup();
	exit(1);
}

/* ---- the trace, entry by entry ------------------------------------------ */

/* Entries no decision of the run depends on: the memory stores' reports
 * and the endpoint grid. They are counted, not derived. */
static int passive(const json_t *e)
{
	const char *k = kind_of(e);
	return strcmp(k, "store") == 0 || strcmp(k, "weight") == 0;
}

static json_t *peek(void)
{
	while (R.pos < R.n && passive(R.entries[R.pos]))
		R.pos++;
	return R.pos < R.n ? R.entries[R.pos] : NULL;
}

static json_t *next(void)
{
	json_t *e = peek();
	if (e)
		R.pos++;
	return e;
}

/* The next entry, which must be of kind k. */
static json_t *expect_kind(const char *k, const char *what)
{
	json_t *e = next();
	if (!e)
		diverged(NULL, shown("no further entry"), shown("%s", what));
	if (strcmp(kind_of(e), k) != 0)
		diverged(e, shown("a %s entry", kind_of(e)), shown("%s", what));
	return e;
}

static int refs_task(const json_t *e, const json_t *task)
{
	const char *id = str(task, "id");
	json_t *refs = json_object_get(e, "refs");
	return id && json_array_size(refs) == 1 && json_is_string(json_array_get(refs, 0)) &&
	       strcmp(json_string_value(json_array_get(refs, 0)), id) == 0;
}

/* ---- evidence ------------------------------------------------------------- */

/* The entry's references (sfma-formats(5), Evidence): its top-level
 * "evidence" member only; a reference-shaped object in data is data. */
static json_t *evidence_of(const json_t *e)
{
	return json_object_get(e, EVIDENCE_MEMBER);
}

/* The reference evidence[member], parsed into *out; 0 when there is none. */
static int ref_of(const json_t *e, const char *member, struct evidence_ref *out)
{
	json_t *ref = json_object_get(evidence_of(e), member);
	struct sfma_err err;
	if (!ref)
		return 0;
	if (evidence_ref_parse(ref, out, &err) < 0)
		diverged(e, shown("evidence.%s that is not a reference", member), shown("a reference"));
	return 1;
}

/* The hex of the reference evidence[member], or NULL when there is none. */
static const char *ref_hex(const json_t *e, const char *member)
{
	struct evidence_ref ref;
	if (!ref_of(e, member, &ref))
		return NULL;
	return json_string_value(json_object_get(json_object_get(evidence_of(e), member), "sha256"));
}

/* The bytes of the blob evidence[member] names (malloc'd, NUL-terminated). */
static char *blob(const json_t *e, const char *member, size_t *n)
{
	struct evidence_ref ref;
	struct sfma_err err;
	if (!ref_of(e, member, &ref))
		incomplete("seq %lld (%s): no evidence.%s (a record made before evidence existed)", seq_of(e),
		           kind_of(e), member);
	char *data = evidence_get(R.store, &ref, EVIDENCE_MAX_BYTES, &err);
	if (!data)
		incomplete("seq %lld (%s): %s", seq_of(e), kind_of(e), err.text);
	*n = (size_t)ref.bytes;
	return data;
}

static void hex_of(const char *data, size_t n, char hex[SHA256_HEX_LEN + 1])
{
	sha256_hex(data, n, hex);
}

/* The reference data[member] must name exactly the bytes data[0..n). */
static void expect_evidence(const json_t *e, const char *member, const char *data, size_t n)
{
	char want[SHA256_HEX_LEN + 1];
	hex_of(data, n, want);
	const char *has = ref_hex(e, member);
	if (!has)
		incomplete("seq %lld (%s): no evidence.%s (a record made before evidence existed)", seq_of(e),
		           kind_of(e), member);
	if (strcmp(has, want) != 0)
		diverged(e, shown("evidence.%s %.12s", member, has), shown("evidence.%s %.12s", member, want));
}

/* The next request's new message (msg consumed), its bytes data[0..n). */
static void set_pending(json_t *msg, const char *data, size_t n)
{
	json_decref(R.pending);
	json_decref(R.pending_ref);
	hex_of(data, n, R.expect_msg);
	R.pending = msg;
	R.pending_ref = json_pack("{s:s, s:I}", "sha256", R.expect_msg, "bytes", (json_int_t)n);
	/* the native calls are answered by it */
	json_decref(R.native_calls);
	R.native_calls = NULL;
}

/* The runner's answer text as the model gets it: {"toolResult":text}, or
 * after native calls the tool message answering them. */
static void expect_answer(const char *text)
{
	struct buf b = {0};
	json_t *msg;
	if (R.native_calls) {
		msg = tool_message(R.native_calls, text);
		canon_dump(msg, &b, NULL);
	} else {
		json_t *tr = json_pack("{s:s}", "toolResult", text);
		canon_dump(tr, &b, NULL);
		json_decref(tr);
		msg = json_pack("{s:s, s:s}", "role", "user", "content", b.p);
	}
	set_pending(msg, b.p, b.len);
	buf_free(&b);
}

/* A recorded answer (a tool's result, the host's): the blob data[0..n)
 * must be the message the runner makes of a result, {"toolResult":TEXT}
 * or the tool message answering the native calls. 0, or -1. */
static int recorded_answer(const char *data, size_t n)
{
	json_t *v = json_parse_strict(data, n, NULL);
	json_t *msg = NULL;
	if (R.native_calls) {
		json_t *first = json_array_get(json_object_get(v, "results"), 0);
		const char *text = str(first, "content");
		json_t *want = text ? tool_message(R.native_calls, text) : NULL;
		struct buf b = {0};
		if (want && canon_dump(want, &b, NULL) == 0 && b.len == n && memcmp(b.p, data, n) == 0)
			msg = json_incref(want);
		json_decref(want);
		buf_free(&b);
	} else if (json_is_string(json_object_get(v, "toolResult")) && json_object_size(v) == 1 &&
	           utf8_text_ok(data, n) && !memchr(data, 0, n)) {
		msg = json_pack("{s:s, s:s%}", "role", "user", "content", data, n);
	}
	json_decref(v);
	if (!msg)
		return -1;
	set_pending(msg, data, n);
	return 0;
}

/* ---- the decisions ----------------------------------------------------------- */

static int same_json(const json_t *a, const json_t *b)
{
	struct buf x = {0}, y = {0};
	int same = canon_dump(a, &x, NULL) == 0 && canon_dump(b, &y, NULL) == 0 && strcmp(x.p, y.p) == 0;
	buf_free(&x);
	buf_free(&y);
	return same;
}

/* The task entry's call must be the derived one. */
static void expect_call(const json_t *task, const json_t *want)
{
	json_t *has = json_object_get(data_of(task), "call");
	if (same_json(has, want))
		return;
	struct buf a = {0}, b = {0};
	if (!has || canon_dump(has, &a, NULL) < 0)
		buf_adds(&a, "null");
	canon_dump(want, &b, NULL);
	diverged(task, shown("call %s", a.p), shown("call %s", b.p));
}

/* The task entry that shows a call: its tool and those of members (a NULL
 * terminated list) that the call gives as strings, nothing else. */
static json_t *expect_task(const json_t *v, const char *tool, const char *const members[], const char *what)
{
	json_t *shown_call = json_pack("{s:s}", "tool", tool);
	for (size_t i = 0; members[i]; i++)
		if (json_is_string(json_object_get(v, members[i])))
			json_object_set(shown_call, members[i], json_object_get(v, members[i]));
	json_t *task = expect_kind("task", what);
	expect_call(task, shown_call);
	json_decref(shown_call);
	return task;
}

static void expect_protocol_verdict(const char *reason, const char *answer)
{
	json_t *e = expect_kind("verdict", "a protocol verdict");
	json_t *d = data_of(e);
	const char *r = str(d, "reason");
	if (!json_is_false(json_object_get(d, "pass")) || !r || strcmp(r, reason) != 0 ||
	    strcmp(str(d, "tier") ? str(d, "tier") : "", "protocol") != 0)
		diverged(e, shown("pass=%s reason \"%s\"", json_is_true(json_object_get(d, "pass")) ? "true" : "false",
		                  r ? r : ""),
		         shown("pass=false reason \"%s\"", reason));
	expect_answer(answer);
}

/* What the replay built in its empty workspace for one call's path facts,
 * in the order made, so that it is taken down again (also by cleanup). */
static struct {
	char path[PATH_FACTS_MAX][PATH_MAX];
	int is_dir[PATH_FACTS_MAX];
	size_t n;
} built;

static void unbuild(void)
{
	while (built.n > 0) {
		built.n--;
		unlinkat(R.gate.ws_fd, built.path[built.n], built.is_dir[built.n] ? AT_REMOVEDIR : 0);
	}
}

/* Rebuild the host facts a read or write rested on (a verdict's "paths",
 * sfma-formats(5)) in the empty workspace: directories, empty files,
 * links with their targets, FIFOs. 1 when built, 0 when a fact cannot be
 * rebuilt here (a socket or device: the verdict is then taken as the
 * recorded fact it is); a set of facts that no walk can have produced
 * diverges. The facts are the record's, so hostile: each must be a plain
 * relative path whose parent the replay itself made a directory, and
 * nothing is made but through a directory opened without following links. */
static int build_facts(const json_t *e, json_t *facts)
{
	if (!json_is_array(facts) || json_array_size(facts) > PATH_FACTS_MAX)
		diverged(e, shown("paths that are not a list of at most %d facts", PATH_FACTS_MAX),
		         shown("the path facts of one walk"));
	size_t i;
	json_t *f;
	json_array_foreach(facts, i, f) {
		const char *path = str(f, "path"), *kind = str(f, "kind"), *target = str(f, "target");
		json_t *pv = json_object_get(f, "path"), *tv = json_object_get(f, "target");
		char *norm = path ? path_normalize(path) : NULL;
		int plain = norm && strcmp(norm, path) == 0 && strlen(path) == json_string_length(pv) &&
		            strlen(path) < PATH_MAX && kind &&
		            (!tv || (target && strlen(target) == json_string_length(tv) && strlen(target) < PATH_MAX));
		free(norm);
		if (!plain)
			diverged(e, shown("path fact %zu that is not a plain relative path and kind", i),
			         shown("{\"path\",\"kind\"[,\"target\"]}"));
		if (strcmp(kind, "missing") == 0)
			continue;
		if (strcmp(kind, "other") == 0)
			return 0;
		const char *slash = strrchr(path, '/');
		char parent[PATH_MAX];
		snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
		int dfd = open_dir_walk(R.gate.ws_fd, parent, 0, 0);
		const char *leaf = slash ? slash + 1 : path;
		int rc = -1, is_dir = 0;
		if (dfd >= 0) {
			if (strcmp(kind, "dir") == 0) {
				rc = mkdirat(dfd, leaf, 0700);
				is_dir = 1;
			} else if (strcmp(kind, "file") == 0) {
				int fd = openat(dfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
				rc = fd < 0 ? -1 : close(fd);
			} else if (strcmp(kind, "link") == 0 && target) {
				rc = symlinkat(target, dfd, leaf);
			} else if (strcmp(kind, "fifo") == 0) {
				rc = mkfifoat(dfd, leaf, 0600);
			}
			close(dfd);
		}
		if (rc < 0)
			diverged(e, shown("path fact %.200s (%s) that no walk can have met", path, kind),
			         shown("facts each below a directory met before"));
		snprintf(built.path[built.n], PATH_MAX, "%s", path);
		built.is_dir[built.n++] = is_dir;
	}
	return 1;
}

/* sfma-exec's gate for one call, as its dispatch applies it: a refusal
 * (owned), or NULL when the call passes every rule that does not depend on
 * the host. The hard tier runs over an empty directory: whatever it
 * refuses there it refuses on any disk. */
static char *gate(json_t *call)
{
	struct gate_pass g;
	char *refusal = hardtier_gate(&R.gate, call, 0, &g);
	gate_pass_free(&g);
	return refusal;
}

/* Once the code's own rules pass a call, only the host can refuse it: a
 * link met on the way (which may land a write on a reserved or undeclared
 * path), something that is not a regular file or not a directory, the
 * sandbox, the clock. Such a refusal is a recorded fact. One that names a
 * rule of the code itself cannot be: the code just passed that rule. */
static int host_refusal(const char *reason)
{
	static const char *const code_rules[] = {
		"outside workspace", "shell metacharacters are not allowed", "not in allowedCommands",
		"empty command", "unknown tool", "subcommand not permitted", "global flags are not permitted",
		"argument not permitted", "git requires a subcommand", "must be a string", "contains a NUL byte",
		"empty path", "is handled by the planner", "recall is not available",
	};
	for (size_t i = 0; i < sizeof code_rules / sizeof *code_rules; i++)
		if (strstr(reason, code_rules[i]))
			return 0;
	return 1;
}

/* The refusals the path facts decide, once they are rebuilt: no other
 * host fact can be their cause. */
static int path_fact_refusal(const char *reason)
{
	static const char *const derived[] = {
		"escapes workspace via link", "not a regular file", "reserved", "not a declared output",
	};
	for (size_t i = 0; i < sizeof derived / sizeof *derived; i++)
		if (strstr(reason, derived[i]))
			return 1;
	return 0;
}

static void count_refusal(const char *reason)
{
	R.loops[R.cur].failures++;
	if (R.failures++ == 0)
		snprintf(R.first_refusal, sizeof R.first_refusal, "%s", reason);
}

/* The verdict entry of a tool call handed to sfma-exec; NULL when a halt
 * or an error ended the run while the call was out (the result entry is
 * then the next entry). */
static void carry_out(json_t *v, const char *tool)
{
	static const char *const recorded[] = {"path", "cmd", "mode", NULL};
	json_t *task = expect_task(v, tool, recorded, "a task entry");
	static const struct { const char *tool, *member, *evidence; } carried[] = {
		{"write", "content", "content"},
		{"notify", "text", "text"},
		{"ask", "question", "text"},
	};
	for (size_t i = 0; i < sizeof carried / sizeof *carried; i++) {
		json_t *c = json_object_get(v, carried[i].member);
		if (strcmp(tool, carried[i].tool) == 0 && json_is_string(c))
			expect_evidence(task, carried[i].evidence, json_string_value(c), json_string_length(c));
	}
	json_t *e = peek();
	if (e && strcmp(kind_of(e), "result") == 0)
		return; /* stopped while the call was out */
	e = expect_kind("verdict", "the call's verdict");
	json_t *d = data_of(e);
	if (!refs_task(e, task))
		diverged(e, shown("refs that do not name %s", str(task, "id")), shown("refs [%s]", str(task, "id")));
	int pass = json_is_true(json_object_get(d, "pass"));
	const char *reason = str(d, "reason");
	if (!reason)
		reason = "";
	/* A read or write records the host facts its gate rested on: rebuilt,
	 * they make the verdict derivable, link and file-kind refusals too. */
	json_t *facts = json_object_get(d, "paths");
	int rebuilt = facts && (strcmp(tool, "read") == 0 || strcmp(tool, "write") == 0) && build_facts(e, facts);
	char *refusal = gate(v);
	unbuild();
	if (refusal) {
		if (pass || strcmp(reason, refusal) != 0)
			diverged(e, pass ? shown("pass=true reason \"%s\"", reason) : shown("refused: %s", reason),
			         shown("refused: %s", refusal));
	} else if (!pass && (!host_refusal(reason) || (rebuilt && path_fact_refusal(reason)))) {
		diverged(e, shown("refused: %s", reason),
		         shown("%s", host_refusal(reason) ? "pass (the recorded path facts refuse nothing)"
		                                          : "pass (no host fact recorded refuses it)"));
	}
	free(refusal);
	if (!pass) {
		count_refusal(reason);
		char text[800];
		snprintf(text, sizeof text, "EPSILON_HARD_FAIL: %s", reason);
		const char *has = ref_hex(e, "output");
		if (!has)
			incomplete("seq %lld (verdict): no evidence.output (a record made before evidence existed)",
			           seq_of(e));
		expect_answer(text);
		if (strcmp(has, R.expect_msg) != 0)
			diverged(e, shown("evidence.output %.12s", has), shown("evidence.output %.12s", R.expect_msg));
		return;
	}
	/* A passing call's result is what the host produced (a file's
	 * content, a command's output): recorded, and it must be a tool
	 * result message. The next request must send exactly it. */
	size_t n;
	char *out = blob(e, "output", &n);
	int answered = recorded_answer(out, n);
	free(out);
	if (answered < 0)
		diverged(e, shown("evidence.output that is not a tool result"),
		         shown(R.native_calls ? "the tool message answering the calls" : "{\"toolResult\":...}"));
	if (strcmp(tool, "run") == 0 && R.dry_run && !json_is_false(json_object_get(json_object_get(d, "run"), "executed")))
		diverged(e, shown("a command executed in a dry run"), shown("run {\"executed\":false}"));
	if (strcmp(tool, "write") == 0) {
		json_t *content = json_object_get(v, "content");
		char *norm = path_normalize(str(v, "path"));
		char hex[SHA256_HEX_LEN + 1];
		hex_of(json_string_value(content), json_string_length(content), hex);
		struct buf ok = {0};
		if (R.dry_run)
			buf_printf(&ok, "dry run: write of %zu bytes to %s recorded, not applied", json_string_length(content), norm);
		else
			buf_printf(&ok, "wrote %zu bytes to %s", json_string_length(content), norm);
		/* Another pass reason is an operational failure (the disk): no mutation. */
		if (strcmp(reason, ok.p) == 0) {
			json_t *want = json_pack("{s:s, s:I, s:s, s:b}", "path", norm, "bytes",
			                         (json_int_t)json_string_length(content), "sha256", hex, "applied", !R.dry_run);
			json_t *mut = expect_kind("mutation", "the write's mutation");
			if (!refs_task(mut, task) || !same_json(data_of(mut), want)) {
				struct buf a = {0}, b = {0};
				canon_dump(data_of(mut), &a, NULL);
				canon_dump(want, &b, NULL);
				diverged(mut, shown("%s", a.p), shown("%s", b.p));
			}
			json_decref(want);
			if (R.dry_run)
				json_object_set_new(R.written, norm, json_true());
		}
		buf_free(&ok);
		free(norm);
	}
	if (strcmp(tool, "notify") == 0 || strcmp(tool, "ask") == 0) {
		json_t *m = peek();
		const char *text = str(v, strcmp(tool, "ask") == 0 ? "question" : "text");
		if (m && strcmp(kind_of(m), "message") == 0 && refs_task(m, task)) {
			next();
			const char *k = str(data_of(m), "kind"), *t = str(data_of(m), "text");
			if (!k || strcmp(k, tool) != 0 || !t || strcmp(t, text) != 0)
				diverged(m, shown("message %s", k ? k : "?"), shown("message %s with the call's text", tool));
		}
	}
}

/* recall is served from the runner's own stores: its answer is a recorded
 * fact, checked for its shape; a refusal counts like any other. */
static void recall(json_t *v)
{
	static const char *const recorded[] = {"mode", NULL};
	expect_task(v, "recall", recorded, "a recall task");
	json_t *e = expect_kind("verdict", "the recall's verdict");
	const char *reason = str(data_of(e), "reason");
	const char *has = ref_hex(e, "output");
	if (!has)
		incomplete("seq %lld (verdict): no evidence.output (a record made before evidence existed)", seq_of(e));
	int pass = json_is_true(json_object_get(data_of(e), "pass"));
	/* The mode is the code's rule; what the stores answer is the host's. */
	if (!recall_mode_known(str(v, "mode")) && (pass || !reason || strcmp(reason, RECALL_UNKNOWN_MODE) != 0))
		diverged(e, pass ? shown("pass=true") : shown("refused: %s", reason ? reason : ""),
		         shown("refused: %s", RECALL_UNKNOWN_MODE));
	if (!pass) {
		count_refusal(reason ? reason : "");
		char text[800];
		snprintf(text, sizeof text, "EPSILON_HARD_FAIL: %s", reason ? reason : "");
		expect_answer(text);
		if (strcmp(has, R.expect_msg) != 0)
			diverged(e, shown("evidence.output %.12s", has), shown("evidence.output %.12s", R.expect_msg));
	} else {
		size_t n;
		char *out = blob(e, "output", &n);
		int answered = recorded_answer(out, n);
		free(out);
		if (answered < 0)
			diverged(e, shown("evidence.output that is not a tool result"), shown("a tool result"));
	}
}

static void judge(const char *error_fmt, ...) __attribute__((format(printf, 1, 2)));
static void judge(const char *error_fmt, ...)
{
	va_list ap;
	va_start(ap, error_fmt);
	vsnprintf(R.error, sizeof R.error, error_fmt, ap);
	va_end(ap);
	R.verdict = "failed";
}

/* The model calls of a judgment (purpose judge or criteria), counted. */
static void judgment_calls(const char *purpose)
{
	json_t *e;
	while ((e = peek()) && strcmp(kind_of(e), "call") == 0) {
		const char *p = str(data_of(e), "purpose");
		if (!p || strcmp(p, purpose) != 0)
			diverged(e, shown("a call of purpose %s", p ? p : "work"), shown("a %s call", purpose));
		next();
		usage_add(&R.usage, json_object_get(data_of(e), "usage"));
		if (++R.calls > R.m->max_model_calls)
			diverged(e, shown("model call %ld", R.calls), shown("at most %ld", R.m->max_model_calls));
	}
}

/* A judge's reply as recorded in the verdict's evidence (NULL: none came). */
static char *judge_reply(const json_t *e, int i)
{
	char name[16];
	size_t n;
	snprintf(name, sizeof name, i ? "reply%d" : "reply", i + 1);
	if (!ref_hex(e, name))
		return NULL;
	char *t = blob(e, name, &n);
	if (memchr(t, 0, n)) {
		free(t);
		return NULL;
	}
	return t;
}

/* The soft verdict after a done: softCalls judgments, majority, a tie
 * fails; returns its pass. */
static int soft_verdict(json_t *e, const char **reason_out)
{
	json_t *d = data_of(e);
	const char *tier = str(d, "tier");
	if (!tier || strcmp(tier, "soft") != 0)
		diverged(e, shown("tier %s", tier ? tier : "?"), shown("tier soft"));
	json_t *judgments = json_object_get(d, "judgments");
	int n = R.m->tuning.soft_calls;
	if ((int)json_array_size(judgments) != n)
		diverged(e, shown("%zu judgments", json_array_size(judgments)), shown("%d (tuning.softCalls)", n));
	struct soft_tally tally = {0};
	for (int i = 0; i < n; i++) {
		char *text = judge_reply(e, i), *why;
		int pass;
		soft_judgment_parse(text, &pass, &why);
		free(text);
		json_t *j = json_array_get(judgments, (size_t)i);
		if (json_is_true(json_object_get(j, "pass")) != pass || !str(j, "reason") || strcmp(str(j, "reason"), why)) {
			soft_tally_free(&tally);
			char *has = shown("judgment %d pass=%s", i + 1, json_is_true(json_object_get(j, "pass")) ? "true" : "false");
			char *derives = shown("pass=%s \"%.200s\"", pass ? "true" : "false", why);
			free(why);
			diverged(e, has, derives);
		}
		soft_tally_add(&tally, pass, why);
	}
	const char *reason;
	int pass = soft_tally_verdict(&tally, &reason);
	int same = json_is_true(json_object_get(d, "pass")) == pass && str(d, "reason") && strcmp(str(d, "reason"), reason) == 0;
	char *derives = same ? NULL : shown("soft pass=%s \"%.200s\"", pass ? "true" : "false", reason);
	soft_tally_free(&tally);
	if (!same)
		diverged(e, shown("soft pass=%s", json_is_true(json_object_get(d, "pass")) ? "true" : "false"), derives);
	*reason_out = str(d, "reason");
	return pass;
}

/* The criteria judgment at the end of the work, when there are criteria. */
static void criteria_verdict(void)
{
	json_t *crit = json_object_get(R.candidate, "successCriteria");
	/* asked when there are criteria and calls left */
	if (!json_array_size(crit) || R.calls >= R.m->max_model_calls)
		return;
	long before = R.calls;
	judgment_calls("criteria");
	json_t *e = expect_kind("verdict", "the criteria verdict");
	const char *judge_name = str(data_of(e), "judge");
	int mock = R.calls == before && judge_name && strcmp(judge_name, MOCK_JUDGE) == 0;
	json_t *said = json_object_get(data_of(e), "criteria");
	if (!str(data_of(e), "tier") || strcmp(str(data_of(e), "tier"), "criteria") != 0 ||
	    json_array_size(said) != json_array_size(crit))
		diverged(e, shown("another verdict"), shown("the criteria judgment (%zu criteria)", json_array_size(crit)));
	char *text = judge_reply(e, 0);
	json_t *v = text ? parse_reply(text) : NULL, *got = json_object_get(v, "criteria");
	free(text);
	size_t i;
	json_t *c;
	json_array_foreach(said, i, c) {
		int pass = mock || json_is_true(json_object_get(json_array_get(got, i), "pass"));
		if (json_is_true(json_object_get(c, "pass")) != pass) {
			json_decref(v);
			diverged(e, shown("criterion %zu pass=%s", i + 1, pass ? "false" : "true"),
			         shown("pass=%s", pass ? "true" : "false"));
		}
	}
	json_decref(v);
}

static void done(json_t *v)
{
	json_t *task = expect_kind("task", "the done task");
	json_t *want = json_pack("{s:s}", "tool", "done");
	expect_call(task, want);
	json_decref(want);
	json_t *summary = json_object_get(v, "summary");
	if (json_is_string(summary)) {
		expect_evidence(task, "summary", json_string_value(summary), json_string_length(summary));
		json_decref(R.summary);
		R.summary = json_incref(summary);
	} else if (ref_hex(task, "summary")) {
		diverged(task, shown("a summary"), shown("none (the reply has no summary)"));
	}
	json_t *e = expect_kind("verdict", "the done verdict");
	json_t *d = data_of(e);
	if (!json_is_true(json_object_get(d, "pass")) || !str(d, "reason") || strcmp(str(d, "reason"), "done") != 0)
		diverged(e, shown("another verdict"), shown("pass=true reason \"done\""));
	json_t *outputs = json_object_get(d, "outputs");
	if (!json_is_array(outputs))
		incomplete("seq %lld (verdict): no outputs recorded at done (a record made before evidence existed)",
		           seq_of(e));
	if (json_array_size(outputs) != R.m->n_outputs)
		diverged(e, shown("%zu outputs", json_array_size(outputs)), shown("%zu declared outputs", R.m->n_outputs));
	const char *missing = NULL;
	for (size_t i = 0; i < R.m->n_outputs; i++) {
		json_t *o = json_array_get(outputs, i);
		const char *p = str(o, "path");
		int exists = json_is_true(json_object_get(o, "exists"));
		if (!p || strcmp(p, R.m->outputs[i]) != 0)
			diverged(e, shown("output %s", p ? p : "?"), shown("output %s", R.m->outputs[i]));
		/* In a dry run existence is what the run wrote: derived, not a host fact. */
		if (R.dry_run && exists != (json_object_get(R.written, p) != NULL))
			diverged(e, shown("%s exists=%s", p, exists ? "true" : "false"),
			         shown("%s exists=%s", p, exists ? "false" : "true"));
		if (!exists && !missing)
			missing = R.m->outputs[i];
	}
	R.last_missing = missing;
	/* A task with a hard-tier refusal fails without a judgment, and the
	 * run with it; else the soft tier judges it (its verdict comes when
	 * its judgments are in). */
	if (R.loops[R.cur].failures || (R.legacy && R.failures)) {
		judge("done, but %ld call%s refused by the hard tier (the first: %s)", R.failures,
		      R.failures == 1 ? " was" : "s were", R.first_refusal);
		return;
	}
	R.loops[R.cur].judging = 1;
}

/* A result entry that stopped the run: a halt must be one the recorded
 * facts allow, and one the run's own counts do not contradict. */
static void stopped(json_t *e, int model_failed)
{
	json_t *d = data_of(e);
	const char *halt = str(d, "halt"), *trigger = str(d, "trigger");
	if (!halt) {
		if (model_failed && R.calls >= R.m->max_model_calls)
			diverged(e, shown("error"), shown("halted-budget (maxModelCalls)"));
		R.verdict = "failed";
		snprintf(R.error, sizeof R.error, "%s", str(d, "error") ? str(d, "error") : "");
		return;
	}
	const char *want = NULL;
	int ok = 0;
	if (!trigger) {
		incomplete("seq %lld (result): a halt without its trigger", seq_of(e));
	} else if (strcmp(trigger, "maxTurns") == 0) {
		want = "halted-maxTurns";
		ok = R.turns >= R.m->max_turns;
	} else if (strcmp(trigger, "maxModelCalls") == 0) {
		want = "halted-budget";
		ok = R.calls >= R.m->max_model_calls;
	} else if (strcmp(trigger, "maxTokens") == 0) {
		/* the tokens are the providers' figures in the call entries */
		want = "halted-budget";
		ok = R.m->max_tokens > 0 && R.usage.input + R.usage.output > R.m->max_tokens;
	} else if (strcmp(trigger, "maxSeconds") == 0) {
		want = "halted-budget";
		json_t *ms = json_object_get(d, "elapsedMs");
		if (!json_is_number(ms))
			incomplete("seq %lld (result): a maxSeconds halt without elapsedMs", seq_of(e));
		ok = json_number_value(ms) >= (double)R.m->max_seconds * 1000;
	} else if (strcmp(trigger, "HALT file") == 0 || strcmp(trigger, "SIGTERM") == 0 ||
	           strcmp(trigger, "SIGINT") == 0 || strcmp(trigger, "SIGHUP") == 0) {
		want = "halted-operator";
		ok = 1;
	}
	if (!want || !ok || strcmp(halt, want) != 0)
		diverged(e, shown("%s (%s)", halt, trigger), shown("no halt by %s here", trigger));
	R.verdict = halt;
}

/* The first message of a run: the start, and the operator's inbox. */
static void first_message(struct buf *inbox)
{
	struct buf first = {0};
	buf_adds(&first, FIRST_MESSAGE);
	if (inbox->len)
		buf_printf(&first, INBOX_HEADER "%s", inbox->p);
	set_pending(json_pack("{s:s, s:s}", "role", "user", "content", first.p), first.p, first.len);
	buf_free(&first);
}

/* A prompt split around its manifest: the text before and after, and the
 * manifest as JSON. The manifest is "verbatim" (the operator's member
 * order), the record keeps it canonical: they are compared as JSON. */
static int split_prompt(const char *p, size_t n, size_t *head, size_t *tail, json_t **manifest)
{
	static const char open_mark[] = "MANIFEST (verbatim):\n", close_mark[] = "\n\nTASK:\n";
	const char *a = memmem(p, n, open_mark, sizeof open_mark - 1);
	if (!a)
		return -1;
	a += sizeof open_mark - 1;
	const char *b = memmem(a, (size_t)(p + n - a), close_mark, sizeof close_mark - 1);
	if (!b)
		return -1;
	*head = (size_t)(a - p);
	*tail = (size_t)(b - p);
	*manifest = json_parse_strict(a, (size_t)(b - a), NULL);
	return *manifest ? 0 : -1;
}

static int same_prompt(const char *g, const char *p, size_t n)
{
	size_t gh, gt, ph, pt;
	json_t *gm = NULL, *pm = NULL;
	int same = split_prompt(g, strlen(g), &gh, &gt, &gm) == 0 && split_prompt(p, n, &ph, &pt, &pm) == 0 &&
	           gh == ph && memcmp(g, p, gh) == 0 && strlen(g) - gt == n - pt &&
	           memcmp(g + gt, p + pt, n - pt) == 0 && same_json(gm, pm);
	json_decref(gm);
	json_decref(pm);
	return same;
}

/* The run's first request: the system prompt is the genesis prompt of
 * this manifest and task, in the run's mode. */
static void check_prompt(json_t *call, int last)
{
	size_t n;
	char *prompt = blob(call, "prompt", &n);
	int want_dry = json_is_true(json_object_get(R.record, "dryRun"));
	int found = -1;
	for (int dry = 0; dry <= 1 && found < 0; dry++) {
		char *g = genesis_prompt(R.m, R.task, dry, R.pinned);
		if (same_prompt(g, prompt, n))
			found = dry;
		free(g);
	}
	free(prompt);
	if (found < 0 || (last && found != want_dry))
		diverged(call, shown("another system prompt"),
		         shown("the genesis prompt of the record's manifest (dryRun %s)", want_dry ? "true" : "false"));
	R.dry_run = found;
}

/* The manifest a run was bound by: the one its system prompt states (the
 * record keeps only the last run's). For the record's own run it must be
 * the record's manifest. A run without a model call keeps the record's. */
static void run_manifest(void)
{
	if (R.run_m) {
		manifest_free(R.run_m);
		R.run_m = NULL;
	}
	R.m = R.record_m;
	for (size_t i = R.pos + 1; i < R.n; i++) {
		json_t *e = R.entries[i];
		if (strcmp(kind_of(e), "clock-anchor") == 0)
			return;
		if (strcmp(kind_of(e), "call") != 0 || !json_object_get(evidence_of(e), "prompt"))
			continue;
		size_t n, head, tail;
		char *prompt = blob(e, "prompt", &n);
		json_t *doc = NULL;
		int ok = split_prompt(prompt, n, &head, &tail, &doc) == 0;
		free(prompt);
		if (!ok)
			diverged(e, shown("a system prompt without a manifest"), shown("the genesis prompt"));
		if (!same_json(doc, json_object_get(R.record, "manifest"))) {
			if (R.last_run)
				diverged(e, shown("a system prompt with another manifest"), shown("the record's manifest"));
			struct reasons why = {0};
			R.run_m = manifest_from_json(doc, &why);
			if (!R.run_m)
				diverged(e, shown("a system prompt with an invalid manifest"), shown("a valid manifest"));
			reasons_free(&why);
			R.m = R.run_m;
		}
		json_decref(doc);
		return;
	}
}

/* The last call entry of the request whose entries start at R.pos
 * (after a compaction entry, if any), or NULL when none follows. */
static json_t *request_call(void)
{
	json_t *last = NULL;
	for (size_t i = R.pos; i < R.n; i++) {
		json_t *e = R.entries[i];
		if (passive(e) || (i == R.pos && strcmp(kind_of(e), "compaction") == 0))
			continue;
		if (strcmp(kind_of(e), "call") != 0)
			break;
		last = e;
	}
	return last;
}

static json_t *ref_copy(const json_t *e, const char *member)
{
	json_t *ref = json_object_get(evidence_of(e), member);
	return ref ? json_deep_copy(ref) : json_null();
}

/* Before each request the planner makes it fit in maxContextBytes: the
 * same conversation must compact the same way (the compaction entry), or
 * fail the run for the same reason. */
static void before_request(void)
{
	json_t *call = request_call();
	if (!R.system && call && ref_hex(call, "prompt")) {
		size_t n;
		char *p = blob(call, "prompt", &n);
		R.system = p;
	}
	if (!R.pending) {
		/* A pinned run's first message, taken as sent. */
		if (!call)
			return;
		size_t n;
		char *m = blob(call, "message", &n);
		if (!utf8_text_ok(m, n) || memchr(m, 0, n)) {
			free(m);
			diverged(call, shown("a first message that is not text"), shown("a text message"));
		}
		set_pending(json_pack("{s:s, s:s%}", "role", "user", "content", m, n), m, n);
		free(m);
	}
	json_array_append_new(R.msgs, R.pending);
	json_array_append_new(R.refs, R.pending_ref);
	R.pending = R.pending_ref = NULL;
	if (!R.system)
		return; /* no request was sent: nothing to compare */
	struct context_fit f;
	int rc = context_fit(R.system, R.msgs, R.refs, R.adopted ? R.tools : NULL, (size_t)R.m->max_context_bytes,
	                     R.keep, &f);
	json_t *e = peek();
	int is_compaction = e && strcmp(kind_of(e), "compaction") == 0;
	/* A run the host stopped first (an evidence store that failed) never
	 * came to its request. */
	int stopped_first = e && strcmp(kind_of(e), "result") == 0 && rc >= 0;
	if (rc != 0 && json_array_size(f.elided) && !stopped_first) {
		json_t *want = json_pack("{s:I, s:I, s:O}", "beforeBytes", (json_int_t)f.before, "afterBytes",
		                         (json_int_t)f.after, "elided", f.elided);
		struct buf a = {0}, b = {0};
		int same = is_compaction && same_json(data_of(e), want);
		canon_dump(want, &b, NULL);
		json_decref(want);
		if (!is_compaction) {
			char *has = shown("a %s entry", kind_of(e));
			char *derives = shown("a compaction (%zu -> %zu bytes, %zu elided)", f.before, f.after,
			                      json_array_size(f.elided));
			json_decref(f.elided);
			buf_free(&b);
			diverged(e, has, derives);
		}
		next();
		if (!same) {
			canon_dump(data_of(e), &a, NULL);
			char *has = shown("%s", a.p), *derives = shown("%s", b.p);
			buf_free(&a);
			buf_free(&b);
			json_decref(f.elided);
			diverged(e, has, derives);
		}
		buf_free(&b);
	} else if (is_compaction) {
		json_decref(f.elided);
		diverged(e, shown("a compaction"), shown("none (the request fits: %zu bytes)", f.before));
	}
	if (rc < 0)
		judge(CONTEXT_CANNOT_FIT, f.after, R.m->max_context_bytes);
	json_decref(f.elided);
}

/* The model's reply on call: kept in the conversation; its call object
 * (NULL when there is none: not JSON, or native calls to be read by the
 * caller), with R.native_calls set for a native reply. What it reads is
 * held in R, so that a divergence exits with nothing unreachable. */
static json_t *reply_of(json_t *call)
{
	size_t n;
	free(R.reply_text);
	R.reply_text = NULL;
	R.reply_text = blob(call, "reply", &n);
	const char *text = R.reply_text;
	json_decref(R.native_calls);
	R.native_calls = NULL;
	json_t *count = json_object_get(data_of(call), "toolCalls");
	if (!count) {
		if (!utf8_text_ok(text, n))
			diverged(call, shown("a reply that is not UTF-8"), shown("the reply as received"));
		json_array_append_new(R.msgs, json_pack("{s:s, s:s}", "role", "assistant", "content", text));
		json_array_append_new(R.refs, ref_copy(call, "reply"));
		return parse_reply(text);
	}
	/* A native reply: {"provider","text","native"}, the calls derived
	 * from the provider's own objects by the code sfma-model uses. */
	json_decref(R.reply_doc);
	R.reply_doc = json_parse_strict(text, n, NULL);
	json_t *b = R.reply_doc;
	const char *provider = str(b, "provider"), *t = str(b, "text");
	json_t *native = json_object_get(b, "native");
	size_t cn = 0;
	char *canon = provider && t && json_is_array(native) && json_object_size(b) == 3
	                  ? native_reply_blob(provider, t, native, &cn) : NULL;
	int same = canon && cn == n && memcmp(canon, text, n) == 0;
	free(canon);
	if (!same)
		diverged(call, shown("a reply blob that is not a native reply"),
		         shown("{\"native\",\"provider\",\"text\"}"));
	struct sfma_err e = {""};
	R.native_calls = tools_from_native(provider, native, &e);
	if (!R.native_calls)
		diverged(call, shown("native calls that do not derive (%s)", e.text), shown("the reply's calls"));
	size_t derived = json_array_size(R.native_calls);
	if (!json_is_number(count) || (double)derived != json_number_value(count))
		diverged(call, shown("toolCalls %g", json_number_value(count)), shown("toolCalls %zu", derived));
	json_array_append_new(R.msgs, json_pack("{s:s, s:s, s:O}", "role", "assistant", "content", t, "toolCalls",
	                                        R.native_calls));
	json_array_append_new(R.refs, ref_copy(call, "reply"));
	return NULL;
}

/* ---- the blackboard, as the planner keeps it ------------------------------- */

static const char *rtask_id(long t)
{
	return str(json_array_get(R.bb, (size_t)t), "id");
}

static size_t rpending(void)
{
	size_t n = 0;
	for (size_t i = 0; i < json_array_size(R.bb); i++)
		n += R.tasks[i].state == RT_PENDING;
	return n;
}

static void rtask_add(json_t *def)
{
	size_t n = json_array_size(R.bb);
	R.tasks = xrealloc(R.tasks, (n + 1) * sizeof *R.tasks);
	R.tasks[n] = (struct rtask){0};
	json_array_append_new(R.bb, def);
}

/* The adopted (or pinned) candidate's first tasks. */
static void bb_start(void)
{
	R.n_loops = (int)R.m->max_loops;
	json_t *defs = first_tasks(R.candidate, R.task);
	size_t i;
	json_t *d;
	R.bb = json_array();
	json_array_foreach(defs, i, d)
		rtask_add(json_incref(d));
	json_decref(defs);
	R.legacy = R.n_loops == 1 || json_array_size(R.bb) == 1;
	if (R.legacy) {
		R.tasks[0].state = RT_ACTIVE;
		R.tasks[0].attempts = 1;
		R.loops[1].task = 0;
	}
}

/* Free loops take the oldest pending tasks, in loop order, as the
 * planner does after every reply it serves. */
static void assign(void)
{
	if (!R.bb || R.verdict)
		return;
	for (int k = 1; k <= R.n_loops; k++) {
		if (R.loops[k].task >= 0 || R.loops[k].judging)
			continue;
		for (size_t i = 0; i < json_array_size(R.bb); i++) {
			struct rtask *t = &R.tasks[i];
			if (t->state != RT_PENDING || (R.n_loops > 1 && t->not_loop == k))
				continue;
			use_rloop(k);
			json_decref(R.msgs);
			json_decref(R.refs);
			R.msgs = json_array();
			R.refs = json_array();
			R.keep = -1;
			R.loops[k].task = (long)i;
			R.loops[k].failures = 0;
			R.loops[k].prepared = 0;
			t->state = RT_ACTIVE;
			t->attempts++;
			char *text = assigned_task_text(json_array_get(R.bb, i), k, t->clarification);
			set_pending(json_pack("{s:s, s:s}", "role", "user", "content", text), text, strlen(text));
			free(text);
			break;
		}
	}
}

/* {"tool":"task",...}: the same gate as the planner's. */
static void post_task(json_t *v)
{
	static const char *const recorded[] = {"id", NULL};
	expect_task(v, "task", recorded, "a task post");
	char reason[300];
	int pass = task_post_check(v, R.bb, rpending(), R.m->max_pending_tasks, reason, sizeof reason);
	json_t *e = expect_kind("verdict", "the task post's verdict");
	json_t *d = data_of(e);
	if (json_is_true(json_object_get(d, "pass")) != pass || !str(d, "reason") || strcmp(str(d, "reason"), reason) != 0)
		diverged(e, shown("pass=%s reason \"%s\"", json_is_true(json_object_get(d, "pass")) ? "true" : "false",
		                  str(d, "reason") ? str(d, "reason") : ""),
		         shown("pass=%s reason \"%s\"", pass ? "true" : "false", reason));
	char text[500];
	if (pass) {
		json_t *def = task_def(str(v, "id"), str(v, "description"), json_object_get(v, "role"), str(v, "class"));
		if (!same_json(json_object_get(d, "posted"), def)) {
			json_decref(def);
			diverged(e, shown("another posted task"), shown("the task of the call"));
		}
		rtask_add(def);
		snprintf(text, sizeof text, "posted task %s", str(v, "id"));
	} else {
		count_refusal(reason);
		snprintf(text, sizeof text, "EPSILON_HARD_FAIL: %s", reason);
	}
	expect_answer(text);
	const char *has = ref_hex(e, "output");
	if (!has || strcmp(has, R.expect_msg) != 0)
		diverged(e, shown("evidence.output %.12s", has ? has : "(none)"), shown("evidence.output %.12s", R.expect_msg));
}

static int work_finished(void)
{
	for (size_t i = 0; i < json_array_size(R.bb); i++)
		if (R.tasks[i].state == RT_PENDING || R.tasks[i].state == RT_ACTIVE)
			return 0;
	for (int k = 1; k <= R.n_loops; k++)
		if (R.loops[k].judging)
			return 0;
	return R.bb != NULL;
}

/* A soft verdict at loop k: derived, then the task passes, goes back on
 * the blackboard once (a clarification entry), or fails the run; when the
 * work is over, the criteria judgment and the run's verdict. */
static void conclude(json_t *e, int k)
{
	if (k < 1 || k > R.n_loops || !R.loops[k].judging)
		diverged(e, shown("a soft verdict"), shown("no task judged at loop %d", k));
	long t = R.loops[k].task;
	const char *reason;
	int pass = soft_verdict(e, &reason);
	const char *tid = str(data_of(e), "task");
	if (!tid || strcmp(tid, rtask_id(t)) != 0)
		diverged(e, shown("task %s", tid ? tid : "?"), shown("task %s", rtask_id(t)));
	R.loops[k].judging = 0;
	R.loops[k].task = -1;
	struct rtask *rt = &R.tasks[t];
	if (pass) {
		rt->state = RT_PASSED;
	} else if (rt->attempts < 2) {
		rt->state = RT_PENDING;
		rt->not_loop = k;
		free(rt->clarification);
		rt->clarification = xstrdup(reason);
		json_t *c = expect_kind("clarification", "the failed task's clarification");
		json_t *want = json_pack("{s:s, s:s, s:s}", "source", "soft-tier", "task", rtask_id(t), "text", reason);
		int same = same_json(data_of(c), want);
		json_decref(want);
		if (!same)
			diverged(c, shown("another clarification"), shown("the judge's reason for task %s", rtask_id(t)));
	} else {
		rt->state = RT_FAILED;
		judge("task %s failed the soft tier: %s", rtask_id(t), reason);
		return;
	}
	assign();
	if (!work_finished())
		return;
	criteria_verdict();
	if (R.failures)
		judge("done, but %ld call%s refused by the hard tier (the first: %s)", R.failures,
		      R.failures == 1 ? " was" : "s were", R.first_refusal);
	else if (R.last_missing)
		judge("done, but declared output %s %s", R.last_missing, R.dry_run ? "was not written" : "does not exist");
	else
		R.verdict = "completed";
}

/* A pinned run's candidate: the latest adopted in the trace (memory.json
 * pins the candidate of the run that certified it), else the record's. */
static void pinned_candidate(void)
{
	json_t *c = R.last_candidate ? R.last_candidate : json_object_get(R.record, "bootstrap");
	if (!json_is_object(c))
		incomplete("a pinned run whose candidate the trace does not hold");
	R.candidate = json_incref(c);
	bb_start();
	assign();
}

static void replay_run(void)
{
	/* The record's own run is the last: no run starts after it. */
	R.last_run = 1;
	for (size_t i = R.pos + 1; i + 1 < R.n; i++)
		if (strcmp(kind_of(R.entries[i]), "clock-anchor") == 0 &&
		    strcmp(kind_of(R.entries[i + 1]), "clock-anchor") == 0)
			R.last_run = 0;
	run_manifest();
	R.gate.m = R.m;
	R.turns = R.calls = R.failures = 0;
	R.first_refusal[0] = R.error[0] = '\0';
	R.adopted = R.prompt_seen = 0;
	R.verdict = NULL;
	json_decref(R.summary);
	R.summary = NULL;
	R.task = R.m->task_statement;
	loops_reset();
	json_decref(R.msgs);
	json_decref(R.refs);
	json_decref(R.pending);
	json_decref(R.pending_ref);
	json_decref(R.native_calls);
	R.msgs = json_array();
	R.refs = json_array();
	R.pending = R.pending_ref = R.native_calls = NULL;
	R.keep = -1;
	free(R.system);
	R.system = NULL;
	R.usage = (struct usage){0};
	json_decref(R.written);
	R.written = json_object();

	expect_kind("clock-anchor", "the run's clock anchor");
	json_t *e = expect_kind("lifecycle", "the run's first lifecycle");
	const char *to = str(data_of(e), "to");
	if (!json_is_null(json_object_get(data_of(e), "from")) || !to ||
	    (strcmp(to, "probation") != 0 && strcmp(to, "pinned-replay") != 0))
		diverged(e, shown("lifecycle to %s", to ? to : "?"), shown("probation or pinned-replay"));
	R.pinned = strcmp(to, "pinned-replay") == 0;
	R.adopted = R.pinned;
	struct buf inbox = {0};
	buf_adds(&inbox, "");
	for (;;) {
		e = peek();
		if (e && strcmp(kind_of(e), "message") == 0 && !strcmp(str(data_of(e), "dir") ? str(data_of(e), "dir") : "", "in")) {
			buf_printf(&inbox, "- (%s) %s\n", str(data_of(e), "file") ? str(data_of(e), "file") : "",
			           str(data_of(e), "text") ? str(data_of(e), "text") : "");
		} else if (e && strcmp(kind_of(e), "clarification") == 0) {
			R.task = str(data_of(e), "text") ? str(data_of(e), "text") : "";
		} else {
			break;
		}
		next();
	}
	/* A pinned run's first message carries the certified candidate from
	 * memory.json: a recorded fact, taken as sent. */
	if (R.pinned) {
		R.expect_msg[0] = '\0';
		/* the tools are offered from the first request on */
	} else
		first_message(&inbox);
	buf_free(&inbox);
	R.n_loops = (int)R.m->max_loops;
	if (R.pinned)
		pinned_candidate();

	while (!R.verdict) {
		assign();
		e = peek();
		if (!e)
			diverged(NULL, shown("the end of the trace"), shown("the run's next turn"));
		int halt_next = strcmp(kind_of(e), "result") == 0 && str(data_of(e), "halt");
		if (strcmp(kind_of(e), "result") == 0 && (halt_next || !R.system)) {
			next();
			stopped(e, 0);
			break;
		}
		/* Replies that came after a stop the host caused (a HALT file,
		 * the time budget): counted, not acted on; the stop follows. */
		if (strcmp(kind_of(e), "call") == 0 && json_is_true(json_object_get(data_of(e), "drained"))) {
			while ((e = peek()) && strcmp(kind_of(e), "call") == 0 &&
			       json_is_true(json_object_get(data_of(e), "drained"))) {
				next();
				usage_add(&R.usage, json_object_get(data_of(e), "usage"));
				if (++R.calls > R.m->max_model_calls)
					diverged(e, shown("model call %ld", R.calls), shown("at most %ld", R.m->max_model_calls));
			}
			stopped(expect_kind("result", "the stop the drained replies came after"), 0);
			break;
		}
		/* The loops' entries interleave in the order the planner served
		 * the replies: each is derived in its own loop's conversation. */
		int k = (int)json_number_value(json_object_get(e, "loop"));
		const char *purpose = strcmp(kind_of(e), "call") == 0 ? str(data_of(e), "purpose") : NULL;
		if (purpose && strcmp(purpose, "judge") == 0) {
			judgment_calls("judge");
			continue;
		}
		if (strcmp(kind_of(e), "verdict") == 0 && str(data_of(e), "tier") &&
		    strcmp(str(data_of(e), "tier"), "soft") == 0) {
			next();
			conclude(e, k);
			continue;
		}
		if (k >= 1 && k <= R.n_loops)
			use_rloop(k);
		else if (k != 0)
			diverged(e, shown("loop %d", k), shown("a loop of 1 to %d", R.n_loops));
		if (strcmp(kind_of(e), "compaction") == 0) {
			if (R.loops[R.cur].prepared)
				diverged(e, shown("a second compaction"), shown("the request's call"));
			before_request();
			R.loops[R.cur].prepared = 1;
			continue;
		}
		if (R.turns >= R.m->max_turns)
			diverged(e, shown("a model request"), shown("halted-maxTurns"));
		if (R.calls >= R.m->max_model_calls)
			diverged(e, shown("a model request"), shown("halted-budget (maxModelCalls)"));
		if (!R.loops[R.cur].prepared)
			before_request();
		R.loops[R.cur].prepared = 0;
		if (R.verdict)
			break;
		e = peek();
		if (e && strcmp(kind_of(e), "result") == 0) {
			/* an error the host caused (the evidence store, the trace) */
			next();
			stopped(e, 0);
			break;
		}
		if (!e || strcmp(kind_of(e), "call") != 0)
			diverged(e, shown("a %s entry", kind_of(e)), shown("a model call"));
		json_t *call = NULL;
		while ((e = peek()) && strcmp(kind_of(e), "call") == 0) {
			call = next();
			usage_add(&R.usage, json_object_get(data_of(call), "usage"));
			if (++R.calls > R.m->max_model_calls)
				diverged(call, shown("model call %ld", R.calls), shown("at most %ld", R.m->max_model_calls));
		}
		if (!R.prompt_seen) {
			R.prompt_seen = 1;
			check_prompt(call, R.last_run);
		} else if (ref_hex(call, "prompt")) {
			diverged(call, shown("a second system prompt"), shown("one per run"));
		}
		const char *msg = ref_hex(call, "message");
		if (!msg)
			incomplete("seq %lld (call): no evidence.message (a record made before evidence existed)", seq_of(call));
		if (R.expect_msg[0] && strcmp(msg, R.expect_msg) != 0)
			diverged(call, shown("message %.12s", msg), shown("message %.12s", R.expect_msg));
		if (!json_is_true(json_object_get(data_of(call), "ok"))) {
			stopped(expect_kind("result", "the stop after a failed model request"), 1);
			break;
		}
		if (R.m->max_tokens > 0 && R.usage.input + R.usage.output > R.m->max_tokens) {
			stopped(expect_kind("result", "the maxTokens halt"), 0);
			if (!str(data_of(R.entries[R.pos - 1]), "trigger") ||
			    strcmp(str(data_of(R.entries[R.pos - 1]), "trigger"), "maxTokens") != 0)
				diverged(R.entries[R.pos - 1], shown("another stop"), shown("halted-budget (maxTokens)"));
			break;
		}
		json_t *v = reply_of(call);
		R.turns++;
		if (R.native_calls && !R.adopted) {
			json_decref(v);
			expect_protocol_verdict(REASON_CANDIDATE_FIRST, ANSWER_CANDIDATE_FIRST);
			continue;
		}
		if (R.native_calls && !v) {
			struct sfma_err bad = {""};
			v = tools_call_object(json_array_get(R.native_calls, 0), &bad);
			if (!v) {
				struct buf why = {0};
				buf_printf(&why, REASON_BAD_CALL "%s", bad.text);
				expect_protocol_verdict(why.p, why.p);
				buf_free(&why);
				continue;
			}
		}
		if (!v) {
			expect_protocol_verdict(REASON_NOT_JSON, ANSWER_NOT_JSON);
			continue;
		}
		if (!R.adopted) {
			if (is_candidate(v)) {
				json_t *c = expect_kind("candidate", "the adopted candidate");
				if (!same_json(data_of(c), v))
					diverged(c, shown("another candidate"), shown("the candidate of the reply"));
				R.adopted = 1;
				R.keep = (long)json_array_size(R.msgs) - 1;
				expect_answer(ANSWER_ADOPTED);
				R.candidate = json_incref(v);
				json_decref(R.last_candidate);
				R.last_candidate = json_incref(v);
				bb_start();
			} else {
				expect_protocol_verdict(REASON_CANDIDATE_FIRST, ANSWER_CANDIDATE_FIRST);
			}
			json_decref(v);
			continue;
		}
		const char *tool = str(v, "tool");
		if (tool && strcmp(tool, "done") == 0)
			done(v);
		else if (tool && strcmp(tool, "recall") == 0)
			recall(v);
		else if (tool && strcmp(tool, "task") == 0)
			post_task(v);
		else if (!tool)
			expect_protocol_verdict(REASON_NO_TOOL, ANSWER_NO_TOOL);
		else
			carry_out(v, tool);
		json_decref(v);
		e = peek();
		if (!R.verdict && e && strcmp(kind_of(e), "result") == 0) {
			next();
			stopped(e, 0);
		}
	}
	/* Replies still in flight when the run stopped: their calls were
	 * made, traced and counted, and not acted on. */
	while ((e = peek()) && strcmp(kind_of(e), "call") == 0 && json_is_true(json_object_get(data_of(e), "drained"))) {
		next();
		usage_add(&R.usage, json_object_get(data_of(e), "usage"));
		if (++R.calls > R.m->max_model_calls)
			diverged(e, shown("model call %ld", R.calls), shown("at most %ld", R.m->max_model_calls));
	}
	/* A run that did not complete says why in a result entry. */
	if (strcmp(R.verdict, "completed") != 0 && R.error[0] && strcmp(R.verdict, "failed") == 0) {
		e = peek();
		if (e && strcmp(kind_of(e), "result") == 0) {
			next();
			const char *err = str(data_of(e), "error");
			if (!err || strcmp(err, R.error) != 0)
				diverged(e, shown("error \"%s\"", err ? err : ""), shown("error \"%s\"", R.error));
		}
	} else if (strcmp(R.verdict, "completed") == 0 && (e = peek()) && strcmp(kind_of(e), "result") == 0) {
		diverged(e, shown("a result entry"), shown("completed"));
	}
	/* Certification and demotion come from memory.json (host state);
	 * the run's own verdict closes it. */
	for (;;) {
		e = expect_kind("lifecycle", "the run's closing lifecycle");
		to = str(data_of(e), "to");
		if (to && (strcmp(to, "certified") == 0 || strcmp(to, "demoted") == 0))
			continue;
		if (!to || strcmp(to, R.verdict) != 0)
			diverged(e, shown("lifecycle to %s", to ? to : "?"), shown("lifecycle to %s", R.verdict));
		break;
	}
	expect_kind("clock-anchor", "the run's closing clock anchor");
	R.runs++;
	if (peek() == NULL) {
		/* The record's own run: its counts must be the derived ones. */
		json_t *rec = R.record;
		struct { const char *member; long long want; } counts[] = {
			{"turns", R.turns}, {"modelCalls", R.calls}, {"hardTierFailures", R.failures},
		};
		json_t *last = R.entries[R.n - 1];
		for (size_t i = 0; i < 3; i++)
			if (json_number_value(json_object_get(rec, counts[i].member)) != (double)counts[i].want)
				diverged(last, shown("record %s %g", counts[i].member,
				                     json_number_value(json_object_get(rec, counts[i].member))),
				         shown("%s %lld", counts[i].member, counts[i].want));
		const char *rv = str(rec, "verdict");
		if (!rv || strcmp(rv, R.verdict) != 0)
			diverged(last, shown("record verdict %s", rv ? rv : "?"), shown("verdict %s", R.verdict));
		/* Tokens: the sum of the call entries' usage (records made
		 * before usage existed have none). */
		json_t *ru = json_object_get(rec, "usage"), *du = usage_json(&R.usage);
		if (ru && !same_json(ru, du)) {
			struct buf a = {0}, b = {0};
			canon_dump(ru, &a, NULL);
			canon_dump(du, &b, NULL);
			json_decref(du);
			char *has = shown("record usage %s", a.p), *derives = shown("usage %s", b.p);
			buf_free(&a);
			buf_free(&b);
			diverged(last, has, derives);
		}
		json_decref(du);
		json_t *mt = json_object_get(json_object_get(rec, "budget"), "maxTokens");
		if (R.m->max_tokens > 0 ? !json_is_number(mt) || json_number_value(mt) != (double)R.m->max_tokens : mt != NULL)
			diverged(last, shown("record budget.maxTokens %s", mt ? "other" : "absent"),
			         shown("budget.maxTokens %ld", R.m->max_tokens));
		json_t *rs = json_object_get(rec, "summary");
		if (rs && !same_json(rs, R.summary ? R.summary : json_null()))
			diverged(last, shown("record summary that is not the done summary"), shown("the done summary"));
	}
	json_decref(R.summary);
	R.summary = NULL;
}

/* ---- the record --------------------------------------------------------------- */

/* sfma-verify, beside this program, must accept the record first. */
static void verify_first(const char *target)
{
	char self[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
	if (len < 0)
		die("/proc/self/exe: %s", strerror(errno));
	self[len] = '\0';
	char verify[PATH_MAX + 16];
	snprintf(verify, sizeof verify, "%s/sfma-verify", dirname(self));
	int pfd[2];
	if (pipe(pfd) < 0)
		die("pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		close(pfd[0]);
		close(pfd[1]);
		execl(verify, verify, target, (char *)NULL);
		fprintf(stderr, "%s: %s\n", verify, strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	size_t n;
	struct sfma_err e;
	char *out = read_all_fd(pfd[0], 1u << 20, &n, &e);
	close(pfd[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!out)
		out = xstrdup("");
	char *nl = strchr(out, '\n');
	if (nl)
		*nl = '\0';
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		incomplete("the record does not verify: %s", *out ? out : "sfma-verify failed");
	free(out);
}

static void load(const char *target, char ws[PATH_MAX])
{
	struct stat st;
	if (stat(target, &st) < 0)
		die("%s: %s", target, strerror(errno));
	char record_path[PATH_MAX];
	if (S_ISDIR(st.st_mode)) {
		snprintf(ws, PATH_MAX, "%s", target);
		snprintf(record_path, sizeof record_path, "%s/.sfma/result.json", target);
	} else {
		/* WORKSPACE/.sfma/result.json */
		char copy[PATH_MAX];
		snprintf(record_path, sizeof record_path, "%s", target);
		snprintf(copy, sizeof copy, "%s", target);
		char *sfma = dirname(copy);
		snprintf(ws, PATH_MAX, "%s/..", sfma);
	}
	struct sfma_err e;
	R.record = json_load_strict(record_path, 64u << 20, &e);
	if (!R.record)
		incomplete("%s", e.text);
	struct reasons why = {0};
	struct manifest *m = manifest_from_json(json_object_get(R.record, "manifest"), &why);
	if (!m)
		incomplete("the record's manifest does not load: %s", why.n ? why.items[0] : "invalid");
	R.m = R.record_m = m;
	char sfma_dir[PATH_MAX + 8];
	snprintf(sfma_dir, sizeof sfma_dir, "%s/.sfma", ws);
	R.sfma_fd = open(sfma_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (R.sfma_fd < 0)
		die("%s: %s", sfma_dir, strerror(errno));
	R.store = evidence_open(R.sfma_fd, 0, &e);
	if (!R.store)
		die("%s", e.text);
	int tfd = openat(R.sfma_fd, "trace.jsonl", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	size_t n;
	char *text = tfd >= 0 ? read_all_fd(tfd, (size_t)1 << 34, &n, &e) : NULL;
	if (tfd >= 0)
		close(tfd);
	if (!text)
		die("%s/trace.jsonl: %s", sfma_dir, tfd < 0 ? strerror(errno) : e.text);
	for (char *p = text; p < text + n;) {
		char *end = memchr(p, '\n', (size_t)(text + n - p));
		size_t len = end ? (size_t)(end - p) : (size_t)(text + n - p);
		json_t *entry = json_parse_strict(p, len, &e);
		if (!entry)
			incomplete("trace line %zu: %s", R.n + 1, e.text);
		if (!json_object_get(entry, "hash"))
			incomplete("trace line %zu is a legacy line of the earlier runner: it has no evidence", R.n + 1);
		R.entries = xrealloc(R.entries, (R.n + 1) * sizeof *R.entries);
		R.entries[R.n++] = entry;
		p += len + 1;
	}
	free(text);
}

/* The hard tier's view of a workspace with nothing in it: every decision
 * it makes there is one no host fact can change. */
static void open_empty_workspace(void)
{
	snprintf(R.empty_dir, sizeof R.empty_dir, "/tmp/sfma-replay-XXXXXX");
	if (!mkdtemp(R.empty_dir)) {
		R.empty_dir[0] = '\0';
		die("mkdtemp: %s", strerror(errno));
	}
	R.gate.m = R.m;
	R.gate.ws_fd = open(R.empty_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	R.gate.ws_real = R.empty_real = realpath(R.empty_dir, NULL);
	if (R.gate.ws_fd < 0 || !R.gate.ws_real)
		die("%s: %s", R.empty_dir, strerror(errno));
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == 'h')
			cli_help(usage_text);
		else if (c == 'V')
			cli_version();
		else
			cli_bad_option(usage_text, c, argv);
	}
	if (argc - optind != 1)
		cli_usage_error(usage_text, "expected one WORKSPACE or RESULT.json");
	argv += optind - 1;
	verify_first(argv[1]);
	char ws[PATH_MAX];
	load(argv[1], ws);
	open_empty_workspace();
	R.tools = tools_definitions();
	if (R.n == 0)
		incomplete("the trace is empty");
	while (peek())
		replay_run();
	printf("REPLAY_OK runs=%ld entries=%zu\n", R.runs, R.n);
	cleanup();
	return 0;
}
