/* standin.c - the stages as the record holds them. What came from the
 * host at run time - a reply, a command's output, a file's content, a
 * link met on a path, a store's answer - is read back from the entries
 * and the evidence; every rule of the code is decided again: the hard
 * tier's gate over an empty directory and the path facts it rested on,
 * the texts sfma-exec makes itself, what a write or a message must have
 * recorded. The core then derives each entry from these answers. */
#include "replay.h"

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
#include "canon.h"
#include "errors.h"
#include "evidence.h"
#include "ndjson.h"
#include "protocol.h"
#include "sha.h"
#include "tools.h"
#include "utf8.h"

struct standin S;

/* The largest blob read back: a reply, a file or a command's output. */
#define EVIDENCE_MAX_BYTES ((size_t)1 << 30)

char *blob_of(const json_t *e, const char *member, size_t *n)
{
	json_t *ref = json_object_get(json_object_get(e, EVIDENCE_MEMBER), member);
	if (!ref)
		return NULL;
	struct evidence_ref r;
	struct sfma_err err;
	if (evidence_ref_parse(ref, &r, &err) < 0)
		diverged(e, sx("evidence.%s that is not a reference", member), "a reference");
	char *data = evidence_get(S.store, &r, EVIDENCE_MAX_BYTES, &err);
	if (!data)
		incomplete("seq %lld (%s): %s", seq_of(e), kind_of(e), err.text);
	*n = (size_t)r.bytes;
	return data;
}

/* The blob the entry must have: its absence makes the replay incomplete. */
static char *needed_blob(const json_t *e, const char *member, size_t *n)
{
	char *data = blob_of(e, member, n);
	if (!data)
		evidence_lost(e, member);
	return data;
}

char *result_text(const char *blob, size_t n)
{
	json_t *v = ndjson_parse(blob, n, NULL);
	const char *t = ndjson_str(v, "toolResult");
	json_t *tv = json_object_get(v, "toolResult");
	if (!t) {
		tv = json_object_get(json_array_get(json_object_get(v, "results"), 0), "content");
		t = json_string_value(tv);
	}
	char *out = t && strlen(t) == json_string_length(tv) ? xstrdup(t) : NULL;
	json_decref(v);
	return out;
}

/* ---- model replies --------------------------------------------------------- */

/* The members the core adds to a call entry beyond the stage's own. */
static const char *const added[] = {"purpose", "task", "toolCalls", "request", "independent", "drained",
                                    "answeredBy", NULL};

static long request_of(const json_t *e)
{
	json_t *r = json_object_get(data_of(e), "request");
	double v = json_number_value(r);
	return json_is_number(r) && v >= 1 && v <= 9007199254740991.0 && v == (double)(long)v ? (long)v : -1;
}

/* The error a failed work reply ended the run with: the run's result
 * entry says "model: <error>". */
static const char *reply_error(void)
{
	for (size_t i = 0;; i++) {
		json_t *e = peek_at(i);
		if (!e || strcmp(kind_of(e), "clock-anchor") == 0)
			return NULL;
		const char *err = ndjson_str(data_of(e), "error");
		if (is_result(e, "error") && err && strncmp(err, "model: ", 7) == 0)
			return err + 7;
		if (strcmp(kind_of(e), "result") == 0)
			return NULL;
	}
}

/* The reply text of the last call: text, or a native reply's blob. */
static void reply_content(json_t *reply, const json_t *last)
{
	size_t n;
	char *text = needed_blob(last, "reply", &n);
	json_t *count = json_object_get(data_of(last), "toolCalls");
	if (!count) {
		if (!utf8_text_ok(text, n)) {
			free(text);
			json_decref(reply);
			diverged(last, "a reply that is not UTF-8", "the reply as received");
		}
		json_object_set_new(reply, "text", json_stringn(text, n));
		free(text);
		return;
	}
	/* A native reply: {"provider","text","native"}, the calls derived
	 * from the provider's own objects by the code sfma-model uses. */
	json_t *b = ndjson_parse(text, n, NULL);
	const char *provider = ndjson_str(b, "provider"), *t = ndjson_str(b, "text");
	json_t *native = json_object_get(b, "native");
	size_t cn = 0;
	char *canon = provider && t && json_is_array(native) && json_object_size(b) == 3
	                  ? native_reply_blob(provider, t, native, &cn) : NULL;
	int same = canon && cn == n && memcmp(canon, text, n) == 0;
	free(canon);
	free(text);
	struct sfma_err e = {""};
	json_t *calls = same ? tools_from_native(provider, native, &e) : NULL;
	if (!calls || (double)json_array_size(calls) != json_number_value(count)) {
		char why[SFMA_ERR_MAX + 80];
		if (!same)
			snprintf(why, sizeof why, "a reply blob that is not a native reply");
		else if (!calls)
			snprintf(why, sizeof why, "native calls that do not derive (%s)", e.text);
		else
			snprintf(why, sizeof why, "toolCalls %g", json_number_value(count));
		const char *derived = calls ? sx("toolCalls %zu", json_array_size(calls)) : "the reply's calls";
		json_decref(calls);
		json_decref(b);
		json_decref(reply);
		diverged(last, why, derived);
	}
	json_object_set_new(reply, "provider", json_string(provider));
	json_object_set_new(reply, "text", json_string(t));
	json_object_set(reply, "native", native);
	json_object_set_new(reply, "toolCalls", calls);
	json_decref(b);
}

json_t *recorded_reply(long id, size_t *n)
{
	json_t *calls = json_array(), *last = NULL;
	for (*n = 0;; (*n)++) {
		json_t *e = peek_at(*n);
		if (!e || strcmp(kind_of(e), "call") != 0 || request_of(e) != id)
			break;
		json_t *d = json_is_object(data_of(e)) ? json_deep_copy(data_of(e)) : json_object();
		for (size_t k = 0; added[k]; k++)
			json_object_del(d, added[k]);
		if (ndjson_str(e, "class"))
			json_object_set(d, "class", json_object_get(e, "class"));
		json_array_append_new(calls, d);
		last = e;
	}
	json_t *reply = json_pack("{s:I, s:o}", "id", (json_int_t)id, "calls", calls);
	/* The reply was an answer when its last attempt was one, or when
	 * another answered after it (answeredBy). */
	const char *by = ndjson_str(data_of(last), "answeredBy");
	int ok = last && (json_is_true(json_object_get(data_of(last), "ok")) || by);
	json_object_set_new(reply, "ok", json_boolean(ok));
	/* A judgment drained after the verdict is traced without its reply:
	 * the core acts on none of it. */
	int bare = last && json_is_true(json_object_get(data_of(last), "drained")) &&
	           !json_object_get(json_object_get(last, EVIDENCE_MEMBER), "reply");
	if (ok && bare) {
		json_object_set_new(reply, "text", json_string(""));
		json_object_set(reply, "endpoint", json_object_get(data_of(last), "endpoint"));
	} else if (ok) {
		reply_content(reply, last);
		if (by)
			json_object_set_new(reply, "endpoint", json_string(by));
		else
			json_object_set(reply, "endpoint", json_object_get(data_of(last), "endpoint"));
	} else {
		const char *err = reply_error();
		json_object_set_new(reply, "error", json_string(err ? err : "no reply"));
	}
	/* How the provider ended it: sfma-model's "stop" of the attempt that
	 * answered - the last, or the last at the endpoint answeredBy names
	 * (a refusal no endpoint could fall over from) - and the ceiling a
	 * reply cut off at its length reached. */
	const json_t *answered = last ? data_of(last) : NULL;
	for (size_t k = *n; by && k-- > 0;) {
		const json_t *d = data_of(peek_at(k));
		if (ndjson_string_is(json_object_get(d, "endpoint"), by)) {
			answered = d;
			break;
		}
	}
	if (ok && json_is_string(json_object_get(answered, "stop")))
		json_object_set(reply, "stop", json_object_get(answered, "stop"));
	if (ok && json_object_get(answered, "maxOutputTokens"))
		json_object_set(reply, "maxOutputTokens", json_object_get(answered, "maxOutputTokens"));
	if (last && json_is_false(json_object_get(data_of(last), "independent")))
		json_object_set_new(reply, "independent", json_false());
	return reply;
}

json_t *empty_reply(long id, int ok, const char *text, const char *endpoint, const char *error)
{
	json_t *reply = json_pack("{s:I, s:b, s:[]}", "id", (json_int_t)id, "ok", ok, "calls");
	if (text)
		json_object_set_new(reply, "text", json_string(text));
	if (endpoint)
		json_object_set_new(reply, "endpoint", json_string(endpoint));
	if (error)
		json_object_set_new(reply, "error", json_string(error));
	return reply;
}

/* ---- the path facts -------------------------------------------------------- */

/* What the replay built in its empty workspace for one call's path facts,
 * in the order made, so that it is taken down again (also at exit). */
static struct {
	char path[PATH_FACTS_MAX][PATH_MAX];
	int is_dir[PATH_FACTS_MAX];
	size_t n;
} built;

void unbuild(void)
{
	while (built.n > 0) {
		built.n--;
		unlinkat(S.gate.ws_fd, built.path[built.n], built.is_dir[built.n] ? AT_REMOVEDIR : 0);
	}
}

/* A fact's path is plain: relative, normalized, no NUL. */
static int plain_fact(const json_t *f)
{
	const char *path = ndjson_str(f, "path"), *kind = ndjson_str(f, "kind"), *target = ndjson_str(f, "target");
	json_t *pv = json_object_get(f, "path"), *tv = json_object_get(f, "target");
	char *norm = path ? path_normalize(path) : NULL;
	int plain = norm && strcmp(norm, path) == 0 && strlen(path) == json_string_length(pv) &&
	            strlen(path) < PATH_MAX && kind &&
	            (!tv || (target && strlen(target) == json_string_length(tv) && strlen(target) < PATH_MAX));
	free(norm);
	return plain;
}

/* Make one fact below a directory the replay itself made: 0, or -1. */
static int build_fact(const char *path, const char *kind, const char *target, int *is_dir)
{
	const char *slash = strrchr(path, '/');
	char parent[PATH_MAX];
	snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
	int dfd = open_dir_walk(S.gate.ws_fd, parent, 0, 0);
	const char *leaf = slash ? slash + 1 : path;
	int rc = -1;
	*is_dir = 0;
	if (dfd < 0)
		return -1;
	if (strcmp(kind, "dir") == 0) {
		rc = mkdirat(dfd, leaf, 0700);
		*is_dir = 1;
	} else if (strcmp(kind, "file") == 0) {
		int fd = openat(dfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		rc = fd < 0 ? -1 : close(fd);
	} else if (strcmp(kind, "link") == 0 && target) {
		rc = symlinkat(target, dfd, leaf);
	} else if (strcmp(kind, "fifo") == 0) {
		rc = mkfifoat(dfd, leaf, 0600);
	}
	close(dfd);
	return rc;
}

/* Rebuild the host facts a read or write rested on (a verdict's "paths",
 * sfma-formats(5)) in the empty workspace. 1 when built, 0 when a fact
 * cannot be rebuilt here (a socket or device: the verdict is then taken
 * as the recorded fact it is); a set of facts that no walk can have
 * produced diverges. The facts are the record's, so hostile: each must be
 * a plain relative path whose parent the replay itself made a directory,
 * and nothing is made but through a directory opened without following
 * links. */
static int build_facts(const json_t *e, const json_t *facts)
{
	if (!json_is_array(facts) || json_array_size(facts) > PATH_FACTS_MAX)
		diverged(e, sx("paths that are not a list of at most %d facts", PATH_FACTS_MAX),
		         "the path facts of one walk");
	size_t i;
	json_t *f;
	json_array_foreach(facts, i, f) {
		if (!plain_fact(f))
			diverged(e, sx("path fact %zu that is not a plain relative path and kind", i),
			         "{\"path\",\"kind\"[,\"target\"]}");
		const char *path = ndjson_str(f, "path"), *kind = ndjson_str(f, "kind");
		if (strcmp(kind, "missing") == 0)
			continue;
		if (strcmp(kind, "other") == 0)
			return 0;
		int is_dir;
		if (build_fact(path, kind, ndjson_str(f, "target"), &is_dir) < 0) {
			unbuild();
			diverged(e, sx("path fact %.200s (%s) that no walk can have met", path, kind),
			         "facts each below a directory met before");
		}
		snprintf(built.path[built.n], PATH_MAX, "%s", path);
		built.is_dir[built.n++] = is_dir;
	}
	return 1;
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
		HARDTIER_READ_RESERVED,
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
		HARDTIER_READ_RESERVED_LINK,
	};
	for (size_t i = 0; i < sizeof derived / sizeof *derived; i++)
		if (strstr(reason, derived[i]))
			return 1;
	return 0;
}

/* ---- exec ---------------------------------------------------------------- */

/* A synchronous request the run never got an answer to: the next entry
 * is the stop that ended the wait (fed to the core), or the run ends
 * there (cut short: the core keeps waiting). 1 when so. */
static int no_answer(struct core *c)
{
	json_t *e = peek();
	if (!e || is_result(e, "interrupted") || strcmp(kind_of(e), "clock-anchor") == 0)
		return 1;
	if (strcmp(kind_of(e), "result") != 0)
		return 0;
	const char *trigger = ndjson_str(data_of(e), "trigger"), *err = ndjson_str(data_of(e), "error");
	struct core_facts f = {0};
	enum core_stop_why why = CORE_STOP_FAILED;
	if (trigger && strncmp(trigger, "SIG", 3) == 0) {
		why = CORE_STOP_SIGNAL;
		f.halt_signal = strcmp(trigger, "SIGINT") == 0 ? 2 : strcmp(trigger, "SIGHUP") == 0 ? 1 : 15;
	} else if (trigger && strcmp(trigger, "maxSeconds") == 0) {
		why = CORE_STOP_TIMEOUT;
	}
	core_stop(c, why, err ? err : ndjson_str(data_of(e), "reason"), &f);
	return 1;
}

static json_t *verdict_entry(const char *what)
{
	json_t *e = peek();
	if (!e || strcmp(kind_of(e), "verdict") != 0)
		diverged(e, e ? sx("a %s entry", kind_of(e)) : "no further entry", what);
	return e;
}

static void refuse(json_t *reply, const char *reason)
{
	json_object_set_new(reply, "pass", json_false());
	json_object_set_new(reply, "reason", json_string(reason));
	json_object_set_new(reply, "result", json_string(sx("EPSILON_HARD_FAIL: %s", reason)));
}

/* What sfma-exec itself says of a call that passed, beyond the host's
 * outcome: the dry run's texts, a write's mutation, a message's record. */
static void derived_members(json_t *reply, const json_t *call, const char *reason)
{
	const char *tool = ndjson_str(call, "tool");
	if (strcmp(tool, "run") == 0 && S.dry_run) {
		json_object_set_new(reply, "reason", json_string(HARDTIER_DRY_RUN_REASON));
		json_object_set_new(reply, "result", json_string(HARDTIER_DRY_RUN_RESULT));
		json_object_set_new(reply, "run", json_pack("{s:b}", "executed", 0));
	} else if (strcmp(tool, "write") == 0) {
		json_t *content = json_object_get(call, "content");
		char *norm = path_normalize(ndjson_str(call, "path"));
		char hex[SHA256_HEX_LEN + 1], ok[PATH_MAX + 100];
		sha256_hex(json_string_value(content), json_string_length(content), hex);
		hardtier_write_text(ok, sizeof ok, json_string_length(content), norm, S.dry_run);
		/* Another pass reason is an operational failure (the disk): no mutation. */
		if (strcmp(reason, ok) == 0)
			json_object_set_new(reply, "mutation", json_pack("{s:s, s:I, s:s, s:b}", "path", norm, "bytes",
			                    (json_int_t)json_string_length(content), "sha256", hex, "applied", !S.dry_run));
		free(norm);
	} else if (strcmp(tool, "notify") == 0 || strcmp(tool, "ask") == 0) {
		int ask = strcmp(tool, "ask") == 0;
		if (strcmp(reason, ask ? HARDTIER_ASKED : HARDTIER_NOTIFIED) == 0)
			json_object_set_new(reply, "message", json_pack("{s:s, s:s, s:O}", "dir", "out", "kind", tool, "text",
			                    json_object_get(call, ask ? "question" : "text")));
	}
}

/* An acceptance check's answer (§16): the command's outcome as recorded
 * on its verdict - whether it ran, its run facts, its output as sfma-exec
 * returned it - with the gate decided again. */
static void answer_acceptance(struct core *c, const json_t *req)
{
	json_t *e = verdict_entry("the acceptance check's verdict"), *d = data_of(e);
	json_t *acc = json_object_get(d, "acceptance");
	const char *reason = ndjson_str(d, "reason") ? ndjson_str(d, "reason") : "";
	struct gate_pass g;
	char *refusal = hardtier_gate(&S.gate, json_object_get(req, "call"), 0, &g);
	gate_pass_free(&g);
	json_t *reply = json_object();
	if (json_is_object(json_object_get(d, "run")))
		json_object_set(reply, "run", json_object_get(d, "run"));
	if (refusal) {
		refuse(reply, refusal);
		free(refusal);
	} else if (!json_is_true(json_object_get(acc, "ran"))) {
		if (!host_refusal(reason)) {
			json_decref(reply);
			diverged(e, sx("refused: %s", reason), "pass (no host fact recorded refuses it)");
		}
		refuse(reply, reason);
	} else {
		size_t n;
		char *out = needed_blob(e, "output", &n);
		json_object_set_new(reply, "pass", json_true());
		json_object_set_new(reply, "reason", json_string(reason));
		json_object_set_new(reply, "result", utf8_json(out, n));
		free(out);
	}
	core_exec_reply(c, reply);
}

void answer_exec(struct core *c, const json_t *req)
{
	if (no_answer(c))
		return;
	if (json_is_number(json_object_get(req, "acceptance"))) {
		answer_acceptance(c, req);
		return;
	}
	json_t *e = verdict_entry("the call's verdict"), *d = data_of(e), *call = json_object_get(req, "call");
	const char *tool = ndjson_str(call, "tool");
	int pass = json_is_true(json_object_get(d, "pass"));
	const char *reason = ndjson_str(d, "reason") ? ndjson_str(d, "reason") : "";
	/* A read or write records the host facts its gate rested on: rebuilt,
	 * they make the verdict derivable, link and file-kind refusals too. */
	json_t *facts = json_object_get(d, "paths");
	int rebuilt = facts && tool && (strcmp(tool, "read") == 0 || strcmp(tool, "write") == 0) && build_facts(e, facts);
	struct gate_pass g;
	char *refusal = hardtier_gate(&S.gate, call, 0, &g);
	gate_pass_free(&g);
	unbuild();
	json_t *reply = json_object();
	if (json_is_array(facts))
		json_object_set(reply, "paths", facts);
	if (json_is_object(json_object_get(d, "run")))
		json_object_set(reply, "run", json_object_get(d, "run"));
	if (refusal) {
		refuse(reply, refusal);
		free(refusal);
	} else if (!pass) {
		if (!host_refusal(reason) || (rebuilt && path_fact_refusal(reason))) {
			json_decref(reply);
			diverged(e, sx("refused: %s", reason), host_refusal(reason)
			         ? "pass (the recorded path facts refuse nothing)" : "pass (no host fact recorded refuses it)");
		}
		refuse(reply, reason);
	} else {
		/* A passing call's result is what the host produced (a file's
		 * content, a command's output): recorded, a tool result message. */
		size_t n;
		char *blob = needed_blob(e, "output", &n), *text = result_text(blob, n);
		free(blob);
		if (!text) {
			json_decref(reply);
			diverged(e, "evidence.output that is not a tool result", "a tool result message");
		}
		json_object_set_new(reply, "pass", json_true());
		json_object_set_new(reply, "reason", json_string(reason));
		json_object_set_new(reply, "result", json_string(text));
		free(text);
		derived_members(reply, call, reason);
	}
	core_exec_reply(c, reply);
}

/* ---- memory ---------------------------------------------------------------- */

void answer_recall(struct core *c, const json_t *req)
{
	if (no_answer(c))
		return;
	json_t *e = verdict_entry("the recall's verdict"), *d = data_of(e), *call = json_object_get(req, "call");
	const char *from = ndjson_str(req, "from");
	if (!json_is_true(json_object_get(d, "pass"))) {
		core_recall_reply(c, NULL, ndjson_str(d, "reason") ? ndjson_str(d, "reason") : "", NULL);
		return;
	}
	json_t *entry = NULL;
	char *text;
	if (from && strcmp(from, "evidence") == 0) {
		/* Evidence is here too: the answer is derived, not taken. */
		const char *hex = ndjson_str(call, "id");
		struct evidence_ref ref = {.bytes = 0};
		struct sfma_err err;
		char *data = NULL;
		if (evidence_find(S.store, hex, &ref) == 0)
			data = evidence_get(S.store, &ref, (size_t)S.gate.m->max_context_bytes, &err);
		text = recall_evidence_answer(hex, data, data ? (size_t)ref.bytes : 0, &entry);
		free(data);
	} else {
		size_t n;
		char *blob = needed_blob(e, "output", &n);
		text = result_text(blob, n);
		free(blob);
		if (!text)
			diverged(e, "evidence.output that is not a tool result", "a tool result message");
		json_t *s = peek_at(1);
		if (s && strcmp(kind_of(s), "store") == 0 && json_is_object(data_of(s)))
			entry = json_deep_copy(data_of(s));
	}
	core_recall_reply(c, text, NULL, entry);
	free(text);
}

void answer_keep(struct core *c)
{
	if (no_answer(c))
		return;
	json_t *e = peek();
	json_t *d = data_of(e);
	core_keep_reply(c, strcmp(kind_of(e), "store") == 0 && json_is_object(d) ? json_deep_copy(d) : NULL);
}

void answer_outputs(struct core *c)
{
	if (no_answer(c))
		return;
	json_t *e = verdict_entry("the done's verdict");
	size_t n;
	char *blob = needed_blob(e, "outputs", &n);
	json_t *outputs = ndjson_parse(blob, n, NULL);
	free(blob);
	if (!json_is_array(outputs)) {
		json_decref(outputs);
		diverged(e, "evidence.outputs that is not a list", "the outputs as the judge saw them");
	}
	core_outputs_reply(c, outputs);
	json_decref(outputs);
}
