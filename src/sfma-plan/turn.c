/* turn.c - one turn of a run: ask the model, read its reply, hand a tool
 * call to the hard tier (or serve recall), and keep the budgets. */
#include "plan.h"
#include "buf.h"
#include "canon.h"
#include "clock.h"
#include "evidence.h"
#include "tools.h"
#include "sha.h"
#include "utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- one turn --------------------------------------------------------- */

/* A message of the conversation, with the evidence reference of its bytes
 * (borrowed; NULL: none), which a compaction names when it elides it. */
static void push_message(struct run *r, json_t *msg, json_t *ref)
{
	json_array_append_new(r->messages, msg);
	json_array_append(r->message_refs, ref ? ref : json_null());
}

/* A message for the model: kept in the conversation and stored as
 * evidence at once, so the call entry of the request that sends it can
 * carry its reference (durable before that entry exists). */
static void say_user(struct run *r, const char *content)
{
	json_decref(r->message_ref);
	r->message_ref = evidence(r, content, strlen(content));
	r->message_sent = 0;
	push_message(r, json_pack("{s:s, s:s}", "role", "user", "content", content), r->message_ref);
}

/* A tool's result as the model gets it: {"toolResult":...} after a text
 * reply; after native calls the tool message answering every one of them,
 * stored as the canonical JSON of that message. Returns the reference of
 * that message (new, or NULL) for the entry that reports it. */
static json_t *tool_result(struct run *r, const char *text)
{
	struct buf b = {0};
	if (r->native_calls) {
		json_t *msg = tool_message(r->native_calls, text);
		canon_dump(msg, &b, NULL);
		json_decref(r->message_ref);
		r->message_ref = evidence(r, b.p, b.len);
		r->message_sent = 0;
		push_message(r, msg, r->message_ref);
		json_decref(r->native_calls);
		r->native_calls = NULL; /* answered */
	} else {
		json_t *msg = json_pack("{s:s}", "toolResult", text);
		canon_dump(msg, &b, NULL);
		say_user(r, b.p);
		json_decref(msg);
	}
	buf_free(&b);
	return r->message_ref ? json_incref(r->message_ref) : NULL;
}

/* A fixed answer of the runner's protocol (the next call reports it). */
static void answer(struct run *r, const char *text)
{
	json_decref(tool_result(r, text));
}

/* One request to the model or exec stage, answered by the run's deadline
 * (plus a grace for the stage to report it). On no answer the run's verdict
 * says why: a halt, the time budget, or the stage that died. Consumes req. */
static const char *halt_signal_name(void)
{
	return halt_signal == SIGINT ? "SIGINT" : halt_signal == SIGHUP ? "SIGHUP" : "SIGTERM";
}

static void halt_operator_signal(struct run *r)
{
	end_halted(r, "halted-operator", halt_signal_name(), "halted by %s", halt_signal_name());
}

static void halt_max_seconds(struct run *r)
{
	end_halted(r, "halted-budget", "maxSeconds", "maxSeconds (%ld) reached", r->m->max_seconds);
}

/* A wait for a stage that ended without a reply ends the run: halted by
 * the operator's signal, by maxSeconds, or failed with why. */
static void end_waiting(struct run *r, enum wait_why why, const struct sfma_err *e)
{
	if (why == WAIT_HALT)
		halt_operator_signal(r);
	else if (why == WAIT_TIMEOUT)
		halt_max_seconds(r);
	else
		end_with(r, "failed", "%s", e->text);
}

static json_t *ask_stage(struct run *r, enum stage_id s, json_t *req)
{
	const struct wait_opts o = {.deadline_mono = r->deadline_mono + EXEC_GRACE_MS, .stop_on_halt = 1,
	                            .watch_others = 1};
	enum wait_why why = WAIT_DIED;
	struct sfma_err e;
	json_t *reply = NULL;
	/* Nothing acts on the world before every entry that led to it is on
	 * disk (tracer.c). A read acts on nothing: it goes at once, and its
	 * entries are appended behind it. */
	const char *tool = json_string_value(json_object_get(json_object_get(req, "call"), "tool"));
	int acts = !tool || strcmp(tool, "read") != 0;
	if (s == STAGE_EXEC && acts && tracer_settle(r, NULL) < 0) {
		json_decref(req);
		end_with(r, "failed", "%s", r->error);
		return NULL;
	}
	if (stage_send(s, req) == 0)
		reply = stage_wait(s, &o, &why, &e);
	else
		err_set(&e, "stage %s died", stages[s].name);
	json_decref(req);
	if (reply)
		return reply;
	end_waiting(r, why, &e);
	return NULL;
}

static void halt_max_model_calls(struct run *r)
{
	end_halted(r, "halted-budget", "maxModelCalls", "maxModelCalls (%ld) spent", r->m->max_model_calls);
}

/* The request must fit in maxContextBytes: compact the conversation if it
 * does not (a `compaction` entry), fail the run if it cannot. 0 or -1. */
static int fit_context(struct run *r)
{
	struct context_fit f;
	int rc = context_fit(r->system, r->messages, r->message_refs, r->candidate ? r->tool_defs : NULL,
	                     (size_t)r->m->max_context_bytes, r->candidate_msg, &f);
	if (rc != 0 && json_array_size(f.elided)) {
		trace_quiet(r, "compaction", json_pack("{s:I, s:I, s:O}", "beforeBytes", (json_int_t)f.before,
		                                       "afterBytes", (json_int_t)f.after, "elided", f.elided), r->loop_no, NULL);
		progress(r, "context compacted: %zu -> %zu bytes, %zu elided", f.before, f.after,
		         json_array_size(f.elided));
	}
	if (rc < 0)
		end_with(r, "failed", CONTEXT_CANNOT_FIT, f.after, r->m->max_context_bytes);
	json_decref(f.elided);
	return rc < 0 ? -1 : 0;
}

static void halt_max_tokens(struct run *r)
{
	end_halted(r, "halted-budget", "maxTokens", "maxTokens (%ld) exceeded: %lld tokens", r->m->max_tokens,
	           r->usage.input + r->usage.output);
}

/* The calls still allowed to new requests: the budget left minus what
 * requests in flight may still spend. */
static long calls_available(struct run *r)
{
	return r->m->max_model_calls - r->model_calls - r->reserved_calls;
}

/* One request to sfma-model, not waited for (PIPELINE.md: several may be
 * in flight, replies come by id in any order). Returns its id, or 0 with
 * the run's verdict set when the stage is gone. */
static long send_model(struct run *r, const char *purpose, const char *cls, const char *system,
                       const json_t *messages, int tools, const char *task_id, const char *avoid, long allowance)
{
	long id = ++r->next_request;
	json_t *req = json_pack("{s:I, s:s, s:O, s:s, s:I, s:I, s:b, s:s, s:s?}", "id", (json_int_t)id,
	                        "system", system, "messages", messages, "class", cls,
	                        "deadlineMs", (json_int_t)deadline_wall_ms(r), "callsLeft", (json_int_t)allowance,
	                        "tools", tools, "purpose", purpose, "task", task_id);
	if (!task_id)
		json_object_set_new(req, "task", json_null());
	if (avoid && *avoid)
		json_object_set_new(req, "avoid", json_string(avoid));
	if (r->endpoints && id == 1)
		json_object_set(req, "state", r->endpoints);
	if (json_array_size(r->feedback)) {
		json_object_set_new(req, "verdicts", r->feedback);
		r->feedback = json_array();
	}
	int rc = stage_send(STAGE_MODEL, req);
	json_decref(req);
	if (rc < 0) {
		end_with(r, "failed", "stage sfma-model died");
		return 0;
	}
	r->reserved_calls += allowance;
	return id;
}

/* The current loop's next work request. 0 or -1 (the verdict set). */
static int send_work(struct run *r, long allowance)
{
	struct loop *L = &r->loops[r->cur];
	if (fit_context(r) < 0)
		return -1;
	const char *task_id = L->task >= 0 ? json_string_value(json_object_get(r->tasks[L->task].def, "id")) : NULL;
	const char *cls = "reasoning";
	if (r->candidate) {
		const char *tc = L->task >= 0 ? json_string_value(json_object_get(r->tasks[L->task].def, "class")) : NULL;
		cls = tc && strcmp(tc, "reasoning") == 0 ? "reasoning" : "mechanical";
	}
	long id = send_model(r, r->candidate ? "work" : "bootstrap", cls, r->system, r->messages, r->candidate != NULL,
	                     task_id, NULL, allowance);
	if (!id)
		return -1;
	r->message_sent = 1;
	L->req_id = id;
	L->allowance = allowance;
	r->work_in_flight++;
	return 0;
}

/* The call entries of one reply, traced at the current loop and counted;
 * the last carries the evidence of what the request sent (msg_ref, and
 * the system prompt with the run's first request) and what came back.
 * extra: members added to every call entry (borrowed, or NULL). */
static void trace_calls(struct run *r, json_t *reply, const char *cls, json_t *msg_ref, json_t *reply_ref,
                        size_t n_native, const json_t *extra, json_t *ids)
{
	size_t i;
	json_t *c;
	json_t *calls = json_object_get(reply, "calls");
	int ok = json_is_true(json_object_get(reply, "ok"));
	json_array_foreach(calls, i, c) {
		json_t *data = json_deep_copy(c);
		json_object_del(data, "class");
		if (extra)
			json_object_update(data, (json_t *)extra);
		json_t *evidence = NULL;
		if (i + 1 == json_array_size(calls)) {
			attach_evidence(&evidence, "prompt", r->prompt_ref);
			attach_evidence(&evidence, "message", msg_ref ? json_incref(msg_ref) : NULL);
			attach_evidence(&evidence, "reply", reply_ref ? json_incref(reply_ref) : NULL);
			r->prompt_ref = NULL;
			/* How many native calls the reply blob holds: it is read as
			 * {"provider","text","native"}, not as text. */
			if (n_native)
				json_object_set_new(data, "toolCalls", json_integer((json_int_t)n_native));
			if (ok && !json_is_object(json_object_get(data, "usage")) &&
			    json_is_object(json_object_get(reply, "usage")))
				json_object_set(data, "usage", json_object_get(reply, "usage"));
		}
		usage_add(&r->usage, json_object_get(data, "usage"));
		const char *cc = json_string_value(json_object_get(c, "class"));
		json_t *e = trace_ev(r, "call", data, evidence, r->loop_no, NULL, cc ? cc : cls);
		if (e && ids)
			json_array_append_new(ids, json_string(entry_id(e)));
		json_decref(e);
		r->model_calls++;
	}
	json_t *eps = json_object_get(reply, "endpoints");
	if (json_is_object(eps)) {
		json_decref(r->endpoints);
		r->endpoints = json_incref(eps);
	}
}

/* A work reply of the current loop: stored, traced and counted. Returns
 * it (ok, with a text) or NULL with the run's verdict set; *reply_ref is
 * the reference of the reply blob (owned, or NULL). Consumes reply. */
static json_t *take_model_reply(struct run *r, json_t *reply, const char *cls, json_t **reply_ref_out)
{
	*reply_ref_out = NULL;
	/* The reply exactly as received, stored before any entry names it:
	 * its text, or with native calls the provider's own call objects. */
	json_t *text_v = json_object_get(reply, "text");
	int ok = json_is_true(json_object_get(reply, "ok")) && json_is_string(text_v);
	json_t *tool_calls = json_object_get(reply, "toolCalls");
	size_t n_native = ok && json_is_array(tool_calls) ? json_array_size(tool_calls) : 0;
	json_t *reply_ref = NULL;
	if (n_native) {
		json_t *native = json_object_get(reply, "native");
		const char *provider = json_string_value(json_object_get(reply, "provider"));
		json_t *none = json_array();
		size_t n;
		char *blob = native_reply_blob(provider ? provider : "", json_string_value(text_v),
		                               json_is_array(native) ? native : none, &n);
		json_decref(none);
		reply_ref = evidence(r, blob, n);
		free(blob);
	} else if (ok) {
		reply_ref = evidence(r, json_string_value(text_v), json_string_length(text_v));
	}
	if (json_array_size(json_object_get(reply, "calls"))) {
		json_t *msg = r->message_ref;
		r->message_ref = NULL;
		r->message_sent = 0;
		trace_calls(r, reply, cls, msg, reply_ref, n_native, NULL, NULL);
		json_decref(msg);
	}
	const char *ep = json_string_value(json_object_get(reply, "endpoint"));
	if (ok && ep)
		snprintf(r->loops[r->cur].producer, sizeof r->loops[r->cur].producer, "%s", ep);
	if (!ok) {
		const char *err = json_string_value(json_object_get(reply, "error"));
		if (r->model_calls >= r->m->max_model_calls)
			halt_max_model_calls(r);
		else if (mono_ms() >= r->deadline_mono)
			halt_max_seconds(r);
		else
			end_with(r, "failed", "model: %s", err ? err : "no reply");
		json_decref(reply_ref);
		json_decref(reply);
		return NULL;
	}
	/* The token budget is spent once a call has taken it past maxTokens:
	 * the reply is not acted on. */
	if (r->m->max_tokens > 0 && r->usage.input + r->usage.output > r->m->max_tokens) {
		halt_max_tokens(r);
		json_decref(reply_ref);
		json_decref(reply);
		return NULL;
	}
	*reply_ref_out = reply_ref;
	return reply;
}

/* The hard tier's answer to one tool call, traced. */
static void carry_out(struct run *r, json_t *call)
{
	const char *tool = json_string_value(json_object_get(call, "tool"));
	json_t *shown = json_pack("{s:s?}", "tool", tool);
	static const char *const recorded[] = {"path", "cmd", "mode"};
	for (size_t i = 0; i < 3; i++) {
		json_t *v = json_object_get(call, recorded[i]);
		if (json_is_string(v))
			json_object_set(shown, recorded[i], v);
	}
	/* What the call carries beyond its path or command: the bytes of a
	 * write, the text of a notify or ask. */
	json_t *task_data = json_pack("{s:o}", "call", shown), *task_evidence = NULL;
	static const struct { const char *tool, *member, *evidence; } carried[] = {
		{"write", "content", "content"},
		{"notify", "text", "text"},
		{"ask", "question", "text"},
	};
	for (size_t i = 0; tool && i < sizeof carried / sizeof carried[0]; i++) {
		json_t *v = json_object_get(call, carried[i].member);
		if (strcmp(tool, carried[i].tool) == 0 && json_is_string(v))
			attach_evidence(&task_evidence, carried[i].evidence,
			                evidence(r, json_string_value(v), json_string_length(v)));
	}
	json_t *task = trace_ev(r, "task", task_data, task_evidence, r->loop_no, NULL, NULL);
	if (!task)
		return;
	const char *task_id = entry_id(task);
	json_t *req = json_pack("{s:I, s:O, s:O, s:I}", "id", (json_int_t)r->turns, "call", call,
	                        "seq", json_object_get(task, "seq"), "deadlineMs", (json_int_t)deadline_wall_ms(r));
	json_t *reply = ask_stage(r, STAGE_EXEC, req);
	if (!reply) {
		json_decref(task);
		return;
	}
	int pass = json_is_true(json_object_get(reply, "pass"));
	const char *reason = json_string_value(json_object_get(reply, "reason"));
	if (!reason)
		reason = json_string_value(json_object_get(reply, "error"));
	json_t *verdict = json_pack("{s:s, s:b, s:s}", "tier", "hard", "pass", pass, "reason",
	                            reason ? reason : (pass ? "pass" : "refused"));
	if (json_is_object(json_object_get(reply, "run")))
		json_object_set(verdict, "run", json_object_get(reply, "run"));
	/* The host facts the gate of a read or write rested on, which a
	 * replay rebuilds (sfma-formats(5)). */
	if (json_is_array(json_object_get(reply, "paths")))
		json_object_set(verdict, "paths", json_object_get(reply, "paths"));
	const char *result = json_string_value(json_object_get(reply, "result"));
	char fallback[700];
	if (!result) {
		snprintf(fallback, sizeof fallback, "EPSILON_HARD_FAIL: %s", reason ? reason : "refused");
		result = fallback;
	}
	/* The tool's output as the model gets it (a command's exit and
	 * streams, a file's content, a refusal). */
	json_t *verdict_evidence = NULL;
	attach_evidence(&verdict_evidence, "output", tool_result(r, result));
	trace_quiet_ev(r, "verdict", verdict, verdict_evidence, r->loop_no, json_pack("[s]", task_id));
	if (!pass)
		refused(r, reason);
	/* What was done where: the path of a read or write, the command of a run. */
	const char *what = json_string_value(json_object_get(call, "path"));
	if (!what)
		what = json_string_value(json_object_get(call, "cmd"));
	progress(r, "%s%s%.200s: %s%s", tool ? tool : "?", what ? " " : "", what ? what : "",
	         pass ? "pass" : "refused: ", pass ? "" : (reason ? reason : "refused"));

	json_t *mut = json_object_get(reply, "mutation");
	if (pass && json_is_object(mut)) {
		json_t *e = trace(r, "mutation", json_deep_copy(mut), r->loop_no, json_pack("[s]", task_id), NULL);
		if (e)
			json_array_append_new(r->mutation_refs, json_string(entry_id(e)));
		json_decref(e);
		const char *path = json_string_value(json_object_get(mut, "path"));
		if (path && json_is_string(json_object_get(mut, "sha256")))
			json_object_set(r->written, path, json_object_get(mut, "sha256"));
	}
	json_t *msg = json_object_get(reply, "message");
	if (json_is_object(msg)) {
		json_t *data = json_pack("{s:s, s:O?, s:O?}", "dir", "out", "kind", json_object_get(msg, "kind"),
		                         "text", json_object_get(msg, "text"));
		trace_quiet(r, "message", data, r->loop_no, json_pack("[s]", task_id));
	}
	json_decref(reply);
	json_decref(task);
}

/* Which declared outputs exist at done (dry run: were written). A host
 * fact the verdict depends on, recorded with the done verdict so that a
 * replay takes it from the trace. */
static json_t *outputs_at_done(struct run *r)
{
	json_t *list = json_array();
	for (size_t i = 0; i < r->m->n_outputs; i++) {
		const char *p = r->m->outputs[i];
		int ok;
		if (r->dry_run) {
			ok = json_object_get(r->written, p) != NULL;
		} else {
			char full[PATH_MAX];
			struct stat st;
			ok = lstat(path_join(full, r->m->workspace_path, p), &st) == 0 && S_ISREG(st.st_mode);
		}
		json_array_append_new(list, json_pack("{s:s, s:b}", "path", p, "exists", ok));
	}
	return list;
}

/* Did the run deliver? Every declared output exists (dry run: was written)
 * and no call was refused. */
static void judge_done(struct run *r, const json_t *outputs)
{
	/* A refusal is the cause to name first: a refused write is also
	 * why its output is missing. */
	if (r->hard_failures) {
		end_with(r, "failed", "done, but %ld call%s refused by the hard tier (the first: %s)",
		         r->hard_failures, r->hard_failures == 1 ? " was" : "s were", r->first_refusal);
		return;
	}
	size_t i;
	json_t *o;
	json_array_foreach(outputs, i, o) {
		if (!json_is_true(json_object_get(o, "exists"))) {
			end_with(r, "failed", "done, but declared output %s %s",
			         json_string_value(json_object_get(o, "path")),
			         r->dry_run ? "was not written" : "does not exist");
			return;
		}
	}
	end_with(r, "completed", NULL);
}

static void task_done(struct run *r);

/* done: the summary is evidence and goes into the record; the verdict
 * records the outputs it was judged on. */
static void done(struct run *r, json_t *call)
{
	json_t *summary = json_object_get(call, "summary");
	json_t *task_data = json_pack("{s:{s:s}}", "call", "tool", "done"), *task_evidence = NULL;
	if (json_is_string(summary)) {
		json_decref(r->summary);
		r->summary = json_incref(summary);
		attach_evidence(&task_evidence, "summary",
		                evidence(r, json_string_value(summary), json_string_length(summary)));
	}
	json_t *task = trace_ev(r, "task", task_data, task_evidence, r->loop_no, NULL, NULL);
	json_t *outputs = outputs_at_done(r);
	trace_quiet(r, "verdict", json_pack("{s:s, s:b, s:s, s:O}", "tier", "hard", "pass", 1, "reason", "done",
	                                    "outputs", outputs),
	            r->loop_no, task ? json_pack("[s]", entry_id(task)) : NULL);
	json_decref(task);
	progress(r, "done");
	json_decref(r->last_outputs);
	r->last_outputs = outputs;
	/* An evidence failure has already failed the run. */
	if (!r->verdict)
		task_done(r);
}

static int is_evidence_id(const char *s)
{
	size_t n = 0;
	for (; s && s[n]; n++)
		if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
			return 0;
	return n == SHA256_HEX_LEN;
}

/* recall referential of an evidence id (a compaction stub names one):
 * the blob's bytes, as the model got them the first time. Evidence holds
 * only what already crossed the model boundary. */
static char *recall_evidence(struct run *r, const char *hex, json_t **entry)
{
	struct evidence_ref ref = {.bytes = 0};
	struct sfma_err e;
	char *data = NULL;
	/* Filed, or still in the store's journal (a blob of this very run). */
	if (r->evidence && evidence_find(r->evidence, hex, &ref) == 0)
		data = evidence_get(r->evidence, &ref, (size_t)r->m->max_context_bytes, &e);
	json_t *ans = json_pack("{s:s, s:b, s:s, s:b, s:s}", "mode", "referential", "available", 1, "id", hex,
	                        "found", data != NULL, "tier", "evidence");
	if (data)
		json_object_set_new(ans, "content", utf8_text_ok(data, (size_t)ref.bytes)
		                                        ? json_stringn(data, (size_t)ref.bytes)
		                                        : json_string("(not valid UTF-8)"));
	free(data);
	struct buf b = {0};
	canon_dump(ans, &b, NULL);
	*entry = json_pack("{s:s, s:s, s:O, s:i, s:s}", "op", "recall", "mode", "referential", "found",
	                   json_object_get(ans, "found"), "count", data ? 1 : 0, "tier", "evidence");
	json_decref(ans);
	return b.p;
}

/* recall is served here, with the runner's rights over .sfma/mem and the
 * trace only, after the same hard-tier gate as every tool (a mode that is
 * not one of the five is refused). */
static void recall(struct run *r, json_t *call)
{
	json_t *shown = json_pack("{s:s}", "tool", "recall");
	if (json_is_string(json_object_get(call, "mode")))
		json_object_set(shown, "mode", json_object_get(call, "mode"));
	json_t *task = trace(r, "task", json_pack("{s:o}", "call", shown), r->loop_no, NULL, NULL);
	const char *task_id = entry_id(task);
	struct sfma_err refusal;
	json_t *entry = NULL;
	const char *mode = json_string_value(json_object_get(call, "mode"));
	const char *id = json_string_value(json_object_get(call, "id"));
	char *text;
	if (mode && strcmp(mode, "referential") == 0 && is_evidence_id(id))
		text = recall_evidence(r, id, &entry);
	else
		text = store_recall(&r->store, call, &entry, &refusal);
	char shown_text[SFMA_ERR_MAX + 40];
	if (!text)
		snprintf(shown_text, sizeof shown_text, "EPSILON_HARD_FAIL: %s", refusal.text);
	json_t *verdict = json_pack("{s:s, s:b, s:s}", "tier", "hard", "pass", text != NULL, "reason",
	                            text ? "recall" : refusal.text);
	json_t *verdict_evidence = NULL;
	attach_evidence(&verdict_evidence, "output", tool_result(r, text ? text : shown_text));
	trace_quiet_ev(r, "verdict", verdict, verdict_evidence, r->loop_no, task_id ? json_pack("[s]", task_id) : NULL);
	if (!text) {
		refused(r, refusal.text);
		progress(r, "recall: refused: %s", refusal.text);
	} else {
		trace_quiet(r, "store", entry, r->loop_no, task_id ? json_pack("[s]", task_id) : NULL);
		progress(r, "recall: pass");
	}
	free(text);
	json_decref(task);
}

/* The adopted candidate is a record: written to a durable tier, the fast
 * tier keeping only a pointer. */
static void keep_candidate(struct run *r, json_t *candidate_entry)
{
	const char *id = entry_id(candidate_entry);
	if (!r->store_ok || !id)
		return;
	trace_quiet(r, "store", store_put(&r->store, id, r->candidate, r->m->tuning.fast_tier_max_bytes), 0,
	            json_pack("[s]", id));
}

/* A reply the protocol refuses: traced, answered, and the turn spent. */
static void protocol_refusal(struct run *r, const char *reason, const char *text)
{
	trace_quiet(r, "verdict", json_pack("{s:s, s:b, s:s}", "tier", "protocol", "pass", 0, "reason", reason), r->loop_no,
	            NULL);
	answer(r, text);
}

static int halt_file_present(struct run *r)
{
	struct stat st;
	return fstatat(r->lock_fd, "HALT", &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* ---- loops and the blackboard ------------------------------------------ */

/* Make loop k's conversation the current one (the fields of struct run
 * every turn function works on), keeping the other's in its loop. */
static void use_loop(struct run *r, int k)
{
	if (k != r->cur) {
		struct conv *c = &r->loops[r->cur].c;
		*c = (struct conv){r->messages, r->message_refs, r->native_calls, r->message_ref, r->candidate_msg,
		                   r->message_sent};
		c = &r->loops[k].c;
		r->messages = c->messages;
		r->message_refs = c->message_refs;
		r->native_calls = c->native_calls;
		r->message_ref = c->message_ref;
		r->candidate_msg = c->candidate_msg;
		r->message_sent = c->message_sent;
		*c = (struct conv){0};
		r->cur = k;
	}
	r->loop_no = k + 1;
}

static const char *task_id_of(const struct run *r, long t)
{
	return t >= 0 ? json_string_value(json_object_get(r->tasks[t].def, "id")) : NULL;
}

static size_t pending_tasks(const struct run *r)
{
	size_t n = 0;
	for (size_t i = 0; i < r->n_tasks; i++)
		n += r->tasks[i].state == TASK_PENDING;
	return n;
}

static long add_task(struct run *r, json_t *def)
{
	r->tasks = xrealloc(r->tasks, (r->n_tasks + 1) * sizeof *r->tasks);
	r->tasks[r->n_tasks] = (struct bb_task){.def = def};
	return (long)r->n_tasks++;
}

static json_t *task_defs(const struct run *r)
{
	json_t *defs = json_array();
	for (size_t i = 0; i < r->n_tasks; i++)
		json_array_append(defs, r->tasks[i].def);
	return defs;
}

/* The adopted candidate's firstTasks are the blackboard's first tasks. */
static void blackboard_start(struct run *r)
{
	json_t *defs = first_tasks(r->candidate, r->task);
	size_t i;
	json_t *d;
	json_array_foreach(defs, i, d)
		add_task(r, json_incref(d));
	json_decref(defs);
	/* One conversation (maxLoops 1, or one task): the conversation that
	 * adopted the candidate goes on with the first task, as a run always
	 * did. */
	r->legacy = r->n_loops == 1 || r->n_tasks == 1;
	if (r->legacy) {
		r->tasks[0].state = TASK_ACTIVE;
		r->tasks[0].attempts = 1;
		r->loops[0].task = 0;
	}
}

/* Loop k takes task t in a fresh conversation: the system prompt, then
 * {"assignedTask":{...},"loop":k} (with the judge's reason of a failed
 * first attempt as "clarification"). */
static void start_task(struct run *r, int k, long t)
{
	use_loop(r, k);
	json_decref(r->messages);
	json_decref(r->message_refs);
	json_decref(r->native_calls);
	json_decref(r->message_ref);
	r->messages = json_array();
	r->message_refs = json_array();
	r->native_calls = r->message_ref = NULL;
	r->message_sent = 0;
	r->candidate_msg = -1;
	struct loop *L = &r->loops[k];
	L->task = t;
	L->hard_failures = 0;
	json_array_clear(L->entries);
	r->tasks[t].state = TASK_ACTIVE;
	r->tasks[t].attempts++;
	char *text = assigned_task_text(r->tasks[t].def, k + 1, r->tasks[t].clarification);
	say_user(r, text);
	free(text);
	const char *tid = task_id_of(r, t);
	progress(r, "loop %d takes task %s", k + 1, tid ? tid : "?");
}

/* Free loops take the oldest pending tasks; a retried task goes to
 * another loop than the one that failed it, when there is another. */
static void assign_tasks(struct run *r)
{
	for (int k = 0; k < r->n_loops; k++) {
		struct loop *L = &r->loops[k];
		if (L->task >= 0 || L->judging || L->req_id)
			continue;
		for (size_t i = 0; i < r->n_tasks; i++) {
			struct bb_task *t = &r->tasks[i];
			if (t->state != TASK_PENDING || (r->n_loops > 1 && t->not_loop == k + 1))
				continue;
			start_task(r, k, (long)i);
			break;
		}
	}
}

/* {"tool":"task","id","description","role"?,"class"?}: post work on the
 * blackboard, after the same tracing as every tool. */
static void post_task(struct run *r, json_t *call)
{
	const char *id = json_string_value(json_object_get(call, "id"));
	const char *d = json_string_value(json_object_get(call, "description"));
	const char *cls = json_string_value(json_object_get(call, "class"));
	json_t *shown = json_pack("{s:s, s:s?}", "tool", "task", "id", id);
	json_t *task = trace(r, "task", json_pack("{s:o}", "call", shown), r->loop_no, NULL, NULL);
	char reason[300];
	json_t *defs = task_defs(r);
	int pass = task_post_check(call, defs, pending_tasks(r), r->m->max_pending_tasks, reason, sizeof reason);
	json_decref(defs);
	json_t *verdict = json_pack("{s:s, s:b, s:s}", "tier", "hard", "pass", pass, "reason", reason);
	if (pass) {
		long t = add_task(r, task_def(id, d, json_object_get(call, "role"), cls));
		json_object_set(verdict, "posted", r->tasks[t].def);
	}
	char text[500];
	snprintf(text, sizeof text, pass ? "posted task %s" : "EPSILON_HARD_FAIL: %s", pass ? id : reason);
	json_t *verdict_evidence = NULL;
	attach_evidence(&verdict_evidence, "output", tool_result(r, text));
	const char *task_id = entry_id(task);
	trace_quiet_ev(r, "verdict", verdict, verdict_evidence, r->loop_no, task_id ? json_pack("[s]", task_id) : NULL);
	if (!pass)
		refused(r, reason);
	progress(r, "task %s: %s", id ? id : "?", reason);
	json_decref(task);
}

/* ---- the soft tier ------------------------------------------------------- */

#define JUDGE_OUTPUT_MAX 4096

/* The declared outputs as a judge sees them: content clipped to
 * JUDGE_OUTPUT_MAX bytes at a UTF-8 boundary (dry run: what was recorded). */
static json_t *outputs_for_judge(struct run *r)
{
	json_t *list = json_array();
	for (size_t i = 0; i < r->m->n_outputs; i++) {
		const char *p = r->m->outputs[i];
		json_t *o = json_pack("{s:s}", "path", p);
		if (r->dry_run) {
			json_t *sha = json_object_get(r->written, p);
			json_object_set_new(o, "exists", json_boolean(sha != NULL));
			if (sha)
				json_object_set(o, "sha256", sha);
		} else {
			char full[PATH_MAX], data[JUDGE_OUTPUT_MAX];
			int fd = open(path_join(full, r->m->workspace_path, p), O_RDONLY | O_CLOEXEC | O_NOFOLLOW |
			              O_NONBLOCK);
			struct stat st;
			ssize_t n = -1;
			if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
				n = read(fd, data, sizeof data);
			if (fd >= 0)
				close(fd);
			json_object_set_new(o, "exists", json_boolean(n >= 0));
			if (n >= 0) {
				size_t keep = (size_t)n;
				while (keep > 0 && !utf8_text_ok(data, keep))
					keep--;
				json_object_set_new(o, "content", json_stringn(data, keep));
				json_object_set_new(o, "clipped", json_boolean(keep < (size_t)n || (size_t)n == sizeof data));
			}
		}
		json_array_append_new(list, o);
	}
	return list;
}

static json_t *mission_of(struct run *r)
{
	json_t *m = json_object_get(r->candidate, "mission");
	return json_is_string(m) ? m : json_string("");
}

/* done ended the current loop's task: a task with a hard-tier refusal
 * fails without a judgment (and the run with it); else its judgment is
 * prepared, softCalls requests to be sent. */
static void task_done(struct run *r)
{
	struct loop *L = &r->loops[r->cur];
	if (L->hard_failures || (r->legacy && r->hard_failures)) {
		end_with(r, "failed", "done, but %ld call%s refused by the hard tier (the first: %s)",
		         r->hard_failures, r->hard_failures == 1 ? " was" : "s were", r->first_refusal);
		if (L->task >= 0)
			r->tasks[L->task].state = TASK_FAILED;
		return;
	}
	json_t *m = mission_of(r);
	json_t *what = json_pack("{s:O, s:O, s:O, s:O, s:o}", "mission", m, "successCriteria",
	                         json_object_get(r->candidate, "successCriteria") ? json_object_get(r->candidate,
	                         "successCriteria") : json_null(), "task", r->tasks[L->task].def,
	                         "summary", r->summary ? r->summary : json_null(), "outputs", outputs_for_judge(r));
	if (!json_object_get(r->candidate, "mission"))
		json_decref(m);
	struct buf b = {0};
	canon_dump(what, &b, NULL);
	json_decref(what);
	free(L->judge_msg);
	L->judge_msg = b.p;
	json_decref(L->judge_msg_ref);
	L->judge_msg_ref = evidence(r, b.p, b.len);
	L->judging = 1;
	L->judges_to_send = r->m->tuning.soft_calls;
	L->judges_out = 0;
	json_decref(L->judge_replies);
	L->judge_replies = json_array();
	json_decref(L->judge_calls);
	L->judge_calls = json_array();
}

static void send_judge(struct run *r, int k, long allowance)
{
	struct loop *L = &r->loops[k];
	json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", L->judge_msg);
	int i = r->m->tuning.soft_calls - L->judges_to_send;
	long id = send_model(r, "judge", "reasoning", soft_judge_prompt, msgs, 0, task_id_of(r, L->task),
	                     L->producer, allowance);
	json_decref(msgs);
	if (!id)
		return;
	L->judge_ids[i] = id;
	L->judge_allow[i] = allowance;
	json_array_append_new(L->judge_replies, json_null());
	L->judges_to_send--;
	L->judges_out++;
}

/* Every judgment of loop k's task is in: the majority decides (a tie
 * fails), a soft verdict entry records it, and the task passes, goes back
 * on the blackboard once with the reason, or fails the run. */
static void conclude_soft(struct run *r, int k)
{
	use_loop(r, k);
	struct loop *L = &r->loops[k];
	struct bb_task *t = &r->tasks[L->task];
	int n = (int)json_array_size(L->judge_replies), independent = 1;
	json_t *judgments = json_array(), *evidence_obj = NULL;
	const char *judge = NULL;
	struct soft_tally tally = {0};
	attach_evidence(&evidence_obj, "request", L->judge_msg_ref ? json_incref(L->judge_msg_ref) : NULL);
	for (int i = 0; i < n; i++) {
		json_t *reply = json_array_get(L->judge_replies, i);
		const char *text = json_is_true(json_object_get(reply, "ok"))
		                       ? json_string_value(json_object_get(reply, "text")) : NULL;
		const char *ep = json_string_value(json_object_get(reply, "endpoint"));
		int pass;
		char *why;
		soft_judgment_parse(text, &pass, &why);
		if (json_is_false(json_object_get(reply, "independent")))
			independent = 0;
		if (!judge)
			judge = ep;
		json_array_append_new(judgments, json_pack("{s:s?, s:b, s:s}", "judge", ep, "pass", pass, "reason", why));
		char name[16];
		snprintf(name, sizeof name, i ? "reply%d" : "reply", i + 1);
		if (text)
			attach_evidence(&evidence_obj, name, evidence(r, text, strlen(text)));
		soft_tally_add(&tally, pass, why);
	}
	const char *reason;
	int pass = soft_tally_verdict(&tally, &reason);
	json_t *refs = json_deep_copy(L->entries);
	json_array_extend(refs, L->judge_calls);
	json_t *v = json_pack("{s:s, s:b, s:s, s:s, s:s, s:s, s:o}", "tier", "soft", "pass", pass, "reason", reason,
	                      "task", task_id_of(r, L->task), "judge", judge ? judge : "", "producer", L->producer,
	                      "judgments", judgments);
	if (!independent)
		json_object_set_new(v, "independent", json_false());
	trace_quiet_ev(r, "verdict", v, evidence_obj, r->loop_no, refs);
	/* The producer's pass rate per class learns from it (sfma-model). */
	json_array_append_new(r->feedback, json_pack("{s:s, s:O, s:b}", "endpoint", L->producer, "class",
	                                             json_object_get(t->def, "class"), "pass", pass));
	const char *tid = task_id_of(r, L->task);
	progress(r, "soft tier: task %s %s: %s", tid ? tid : "?", pass ? "pass" : "fail", reason);
	r->soft_judged++;
	r->soft_passed += pass;
	if (pass) {
		t->state = TASK_PASSED;
	} else if (t->attempts < 2) {
		t->state = TASK_PENDING;
		t->not_loop = k + 1;
		free(t->clarification);
		t->clarification = xstrdup(reason);
		trace_quiet(r, "clarification", json_pack("{s:s, s:s, s:s}", "source", "soft-tier", "task",
		                                          task_id_of(r, L->task), "text", reason), 0, NULL);
	} else {
		t->state = TASK_FAILED;
		end_with(r, "failed", "task %s failed the soft tier: %s", task_id_of(r, L->task), reason);
	}
	soft_tally_free(&tally);
	L->judging = 0;
	L->task = -1;
	json_array_clear(L->entries);
}

/* The end of the work: one judgment over the success criteria. */
static int criteria_count(struct run *r)
{
	return (int)json_array_size(json_object_get(r->candidate, "successCriteria"));
}

static json_t *criteria_request(struct run *r)
{
	json_t *tasks = json_array();
	for (size_t i = 0; i < r->n_tasks; i++)
		json_array_append_new(tasks, json_pack("{s:O, s:b}", "task", r->tasks[i].def, "pass",
		                                       r->tasks[i].state == TASK_PASSED));
	json_t *m = mission_of(r);
	json_t *what = json_pack("{s:O, s:O, s:o, s:o}", "mission", m, "successCriteria",
	                         json_object_get(r->candidate, "successCriteria"), "tasks", tasks, "outputs",
	                         outputs_for_judge(r));
	if (!json_object_get(r->candidate, "mission"))
		json_decref(m);
	return what;
}

static json_t *criteria_msg_ref;

static void send_criteria(struct run *r, long allowance)
{
	json_t *what = criteria_request(r);
	struct buf b = {0};
	canon_dump(what, &b, NULL);
	json_decref(what);
	json_decref(criteria_msg_ref);
	criteria_msg_ref = evidence(r, b.p, b.len);
	json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", b.p);
	buf_free(&b);
	r->criteria_id = send_model(r, "criteria", "reasoning", soft_criteria_prompt, msgs, 0, NULL, NULL, allowance);
	r->criteria_allow = allowance;
	json_decref(msgs);
}

/* criteria[] of the record from the judgment's reply: each criterion's
 * pass and evidence (entry ids); a reply that does not say fails it. */
static void take_criteria(struct run *r, json_t *reply)
{
	use_loop(r, 0);
	r->loop_no = 0;
	json_t *ids = json_array(), *evidence_obj = NULL;
	const char *text = json_is_true(json_object_get(reply, "ok")) ? json_string_value(json_object_get(reply, "text"))
	                                                             : NULL;
	json_t *reply_ref = text ? evidence(r, text, strlen(text)) : NULL;
	json_t *extra = json_pack("{s:s}", "purpose", "criteria");
	trace_calls(r, reply, "reasoning", criteria_msg_ref, reply_ref, 0, extra, ids);
	json_decref(extra);
	json_t *v = text ? parse_reply(text) : NULL, *said = json_object_get(v, "criteria");
	json_t *out = json_array();
	/* The array-form mock's own answer (no call) passes every criterion
	 * (PIPELINE.md, sfma-model), whatever list it carries. */
	const char *ep = json_string_value(json_object_get(reply, "endpoint"));
	int mock = !json_array_size(json_object_get(reply, "calls")) && ep && strcmp(ep, MOCK_JUDGE) == 0;
	size_t i;
	json_t *c;
	int all = 1;
	json_array_foreach(json_object_get(r->candidate, "successCriteria"), i, c) {
		json_t *s = json_array_get(said, i);
		json_t *p = json_object_get(s, "pass"), *ev = json_object_get(s, "evidence");
		json_t *evidence_ids = json_array();
		size_t j;
		json_t *x;
		json_array_foreach(ev, j, x)
			if (json_is_string(x))
				json_array_append(evidence_ids, x);
		int pass = mock || json_is_true(p);
		if (mock)
			json_array_clear(evidence_ids);
		all &= pass;
		json_array_append_new(out, json_pack("{s:O, s:b, s:o}", "criterion", c, "pass", pass, "evidence",
		                                     evidence_ids));
	}
	json_decref(v);
	attach_evidence(&evidence_obj, "request", criteria_msg_ref ? json_incref(criteria_msg_ref) : NULL);
	attach_evidence(&evidence_obj, "reply", reply_ref);
	const char *judge = json_string_value(json_object_get(reply, "endpoint"));
	trace_quiet_ev(r, "verdict", json_pack("{s:s, s:b, s:s, s:O}", "tier", "criteria", "pass", all, "judge",
	                                       judge ? judge : "", "criteria", out), evidence_obj, 0, ids);
	json_decref(r->criteria);
	r->criteria = out;
	json_decref(criteria_msg_ref);
	criteria_msg_ref = NULL;
}

/* ---- the turn body ---------------------------------------------------------- */

/* One work reply of the current loop, acted on (one turn). */
static void take_reply(struct run *r, json_t *reply, json_t *reply_ref)
{
	json_t *v = NULL;
	const char *text = json_string_value(json_object_get(reply, "text"));
	json_t *tool_calls = json_object_get(reply, "toolCalls");
	json_decref(r->native_calls);
	r->native_calls = NULL;
	struct sfma_err bad = {""};
	if (json_array_size(tool_calls)) {
		/* Native calls: the assistant message keeps them all, the
		 * first is the turn's call, every one gets a result. */
		push_message(r, json_pack("{s:s, s:s, s:O}", "role", "assistant", "content", text, "toolCalls",
		                          tool_calls), reply_ref);
		r->native_calls = json_incref(tool_calls);
		if (r->candidate)
			v = tools_call_object(json_array_get(tool_calls, 0), &bad);
	} else {
		push_message(r, json_pack("{s:s, s:s}", "role", "assistant", "content", text), reply_ref);
		v = parse_reply(text);
	}
	json_decref(reply_ref);
	json_decref(reply);
	if (r->native_calls && !r->candidate) {
		protocol_refusal(r, REASON_CANDIDATE_FIRST, ANSWER_CANDIDATE_FIRST);
		progress(r, "reminder: bootstrap candidate first");
		return;
	}
	if (r->native_calls && !v) {
		struct buf why = {0};
		buf_printf(&why, REASON_BAD_CALL "%s", bad.text);
		protocol_refusal(r, why.p, why.p);
		progress(r, "invalid tool call: %s", bad.text);
		buf_free(&why);
		return;
	}
	if (!v) {
		protocol_refusal(r, REASON_NOT_JSON, ANSWER_NOT_JSON);
		progress(r, "invalid reply");
		return;
	}
	if (!r->candidate) {
		if (is_candidate(v)) {
			r->candidate = json_incref(v);
			r->candidate_msg = (long)json_array_size(r->messages) - 1;
			json_t *ce = trace(r, "candidate", json_deep_copy(v), r->loop_no, NULL, NULL);
			keep_candidate(r, ce);
			json_decref(ce);
			answer(r, ANSWER_ADOPTED);
			progress(r, "bootstrap candidate adopted");
			blackboard_start(r);
		} else {
			protocol_refusal(r, REASON_CANDIDATE_FIRST, ANSWER_CANDIDATE_FIRST);
			progress(r, "reminder: bootstrap candidate first");
		}
		json_decref(v);
		return;
	}
	const char *tool = json_string_value(json_object_get(v, "tool"));
	if (tool && strcmp(tool, "done") == 0) {
		done(r, v);
	} else if (tool && strcmp(tool, "recall") == 0) {
		recall(r, v);
	} else if (tool && strcmp(tool, "task") == 0) {
		post_task(r, v);
	} else if (!tool) {
		protocol_refusal(r, REASON_NO_TOOL, ANSWER_NO_TOOL);
		progress(r, "invalid reply");
	} else {
		carry_out(r, v);
	}
	json_decref(v);
}

/* ---- the scheduler ------------------------------------------------------------ */

static int wants_work(const struct run *r, int k)
{
	const struct loop *L = &r->loops[k];
	if (L->req_id || L->judging)
		return 0;
	return r->candidate ? L->task >= 0 : k == 0;
}

static int in_flight(const struct run *r)
{
	if (r->criteria_id)
		return 1;
	for (int k = 0; k < r->n_loops; k++)
		if (r->loops[k].req_id || r->loops[k].judges_out)
			return 1;
	return 0;
}

static int work_finished(const struct run *r)
{
	if (!r->candidate)
		return 0;
	for (size_t i = 0; i < r->n_tasks; i++)
		if (r->tasks[i].state == TASK_PENDING || r->tasks[i].state == TASK_ACTIVE)
			return 0;
	for (int k = 0; k < r->n_loops; k++)
		if (r->loops[k].judging)
			return 0;
	return 1;
}

/* The run's stops that come before any request, in the order a run has
 * always checked them. 1 when the run stops. */
static int stops(struct run *r)
{
	if (!r->chain_alive)
		end_with(r, "failed", "%s", r->error[0] ? r->error : "trace writer died");
	else if (halt_signal)
		halt_operator_signal(r);
	else if (halt_file_present(r))
		end_halted(r, "halted-operator", "HALT file", "halted by .sfma/HALT");
	return r->verdict != NULL;
}

/* Send every request that can go now: judgments first, then each loop's
 * next work request, sharing the calls left among them. */
static void dispatch(struct run *r)
{
	assign_tasks(r);
	int wanting = 0, judges = 0;
	for (int k = 0; k < r->n_loops; k++) {
		wanting += wants_work(r, k);
		judges += r->loops[k].judges_to_send;
	}
	if (!wanting && !judges)
		return;
	if (stops(r))
		return;
	/* PIPELINE.md: at most maxLoops + softCalls requests in flight */
	long limit = r->n_loops + r->m->tuning.soft_calls, out = r->work_in_flight + (r->criteria_id != 0);
	for (int k = 0; k < r->n_loops; k++)
		out += r->loops[k].judges_out;
	for (int k = 0; k < r->n_loops && !r->verdict; k++) {
		while (r->loops[k].judges_to_send && !r->verdict && out < limit) {
			long avail = calls_available(r);
			if (avail <= 0)
				break;
			out++;
			long share = avail / (wanting + judges);
			send_judge(r, k, share > 0 ? share : 1);
			judges--;
		}
	}
	for (int k = 0; k < r->n_loops && !r->verdict; k++) {
		if (!wants_work(r, k))
			continue;
		if (r->turns + r->work_in_flight >= r->m->max_turns || out >= limit)
			break;
		if (mono_ms() >= r->deadline_mono) {
			halt_max_seconds(r);
			break;
		}
		long avail = calls_available(r);
		if (avail <= 0)
			break;
		long share = avail / (wanting + judges);
		use_loop(r, k);
		if (send_work(r, share > 0 ? share : 1) < 0)
			break;
		out++;
		wanting--;
	}
}

/* A reply that came after the run's verdict: its calls happened, so they
 * are traced and counted; it is not acted on. */
static void drain_reply(struct run *r, int k, json_t *reply, int work)
{
	use_loop(r, k);
	/* marked, so that a replay counts them and acts on none */
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(reply, "calls"), i, c)
		json_object_set_new(c, "drained", json_true());
	if (work) {
		json_t *ref;
		const char *saved = r->verdict, *trigger = r->halt_trigger;
		json_t *kept = take_model_reply(r, reply, "mechanical", &ref);
		r->verdict = saved;
		r->halt_trigger = trigger;
		json_decref(kept);
		json_decref(ref);
	} else {
		json_t *extra = json_pack("{s:s}", "purpose", "judge");
		trace_calls(r, reply, "reasoning", NULL, NULL, 0, extra, NULL);
		json_decref(extra);
		json_decref(reply);
	}
}

static void loops_init(struct run *r)
{
	r->n_loops = (int)r->m->max_loops;
	r->loops = xcalloc((size_t)r->n_loops, sizeof *r->loops);
	for (int k = 0; k < r->n_loops; k++) {
		r->loops[k].task = -1;
		r->loops[k].entries = json_array();
	}
	r->cur = 0;
	r->loop_no = 1;
	r->feedback = json_array();
}

/* The loops: until every task is judged, a halt or a ceiling. The planner
 * never waits on one loop while another could send: every request that
 * can go goes first, then replies are served in the order they come. */
void turns(struct run *r)
{
	loops_init(r);
	if (r->candidate)
		blackboard_start(r);
	int criteria_asked = 0;
	for (;;) {
		if (!r->verdict)
			dispatch(r);
		if (!r->verdict && !in_flight(r)) {
			if (work_finished(r)) {
				long avail = calls_available(r);
				if (!criteria_asked && criteria_count(r) && avail > 0) {
					criteria_asked = 1;
					send_criteria(r, avail);
					continue;
				}
				judge_done(r, r->last_outputs);
			} else if (r->turns >= r->m->max_turns) {
				end_halted(r, "halted-maxTurns", "maxTurns", "maxTurns (%ld) reached", r->m->max_turns);
			} else if (calls_available(r) <= 0) {
				halt_max_model_calls(r);
			} else if (!r->verdict) {
				end_with(r, "failed", "no task left to work on and the work unfinished");
			}
		}
		if (!in_flight(r))
			break;
		const struct wait_opts o = {.deadline_mono = r->deadline_mono + EXEC_GRACE_MS, .stop_on_halt = 1,
		                            .watch_others = 1};
		enum wait_why why = WAIT_DIED;
		struct sfma_err e;
		json_t *reply = stage_wait(STAGE_MODEL, &o, &why, &e);
		if (!reply) {
			/* The request a stop interrupted is the current one. */
			for (int k = 0; k < r->n_loops; k++)
				if (r->loops[k].req_id) {
					use_loop(r, k);
					break;
				}
			if (r->verdict)
				break;
			end_waiting(r, why, &e);
			break;
		}
		json_t *idv = json_object_get(reply, "id");
		long id = json_is_number(idv) ? (long)json_number_value(idv) : -1;
		int owner = -1, judge_i = -1;
		for (int k = 0; k < r->n_loops && owner < 0; k++) {
			if (r->loops[k].req_id == id)
				owner = k;
			for (int i = 0; i < SOFT_CALLS_MAX && owner < 0; i++)
				if (r->loops[k].judges_out && r->loops[k].judge_ids[i] == id &&
				    json_is_null(json_array_get(r->loops[k].judge_replies, i))) {
					owner = k;
					judge_i = i;
				}
		}
		if (id > 0 && id == r->criteria_id) {
			r->criteria_id = 0;
			r->reserved_calls -= r->criteria_allow;
			if (r->verdict)
				drain_reply(r, 0, reply, 0);
			else {
				take_criteria(r, reply);
				json_decref(reply);
			}
			continue;
		}
		if (owner < 0) {
			json_decref(reply);
			if (!r->verdict)
				end_with(r, "failed", "sfma-model answered request %ld, which is not in flight", id);
			break;
		}
		struct loop *L = &r->loops[owner];
		if (judge_i >= 0) {
			r->reserved_calls -= L->judge_allow[judge_i];
			L->judges_out--;
			if (r->verdict) {
				drain_reply(r, owner, reply, 0);
				continue;
			}
			use_loop(r, owner);
			const char *text = json_is_true(json_object_get(reply, "ok"))
			                       ? json_string_value(json_object_get(reply, "text")) : NULL;
			json_t *ref = text ? evidence(r, text, strlen(text)) : NULL;
			json_t *extra = json_pack("{s:s, s:s}", "purpose", "judge", "task", task_id_of(r, L->task));
			trace_calls(r, reply, "reasoning", L->judge_msg_ref, ref, 0, extra, L->judge_calls);
			json_decref(extra);
			json_decref(ref);
			json_array_set_new(L->judge_replies, (size_t)judge_i, reply);
			if (!L->judges_to_send && !L->judges_out)
				conclude_soft(r, owner);
			continue;
		}
		r->reserved_calls -= L->allowance;
		r->work_in_flight--;
		L->req_id = 0;
		if (r->verdict) {
			drain_reply(r, owner, reply, 1);
			continue;
		}
		use_loop(r, owner);
		json_t *reply_ref;
		const char *cls = "reasoning";
		if (r->candidate) {
			const char *tc = L->task >= 0 ? json_string_value(json_object_get(r->tasks[L->task].def, "class"))
			                              : NULL;
			cls = tc && strcmp(tc, "reasoning") == 0 ? "reasoning" : "mechanical";
		}
		reply = take_model_reply(r, reply, cls, &reply_ref);
		if (!reply)
			continue;
		r->turns++;
		take_reply(r, reply, reply_ref);
	}
	/* The current conversation is the first loop's again for the record
	 * (a stopped request's message). */
}

/* Everything the loops hold beyond the current conversation. */
void loops_free(struct run *r)
{
	for (int k = 0; r->loops && k < r->n_loops; k++) {
		struct loop *L = &r->loops[k];
		json_decref(L->c.messages);
		json_decref(L->c.message_refs);
		json_decref(L->c.native_calls);
		json_decref(L->c.message_ref);
		json_decref(L->entries);
		json_decref(L->judge_replies);
		json_decref(L->judge_msg_ref);
		json_decref(L->judge_calls);
		free(L->judge_msg);
	}
	free(r->loops);
	r->loops = NULL;
	for (size_t i = 0; i < r->n_tasks; i++) {
		json_decref(r->tasks[i].def);
		free(r->tasks[i].clarification);
	}
	free(r->tasks);
	r->tasks = NULL;
	r->n_tasks = 0;
	json_decref(r->feedback);
	r->feedback = NULL;
	json_decref(r->last_outputs);
	r->last_outputs = NULL;
	json_decref(r->criteria);
	r->criteria = NULL;
	json_decref(criteria_msg_ref);
	criteria_msg_ref = NULL;
}


void genesis(struct run *r)
{
	/* A pinned configuration is replayed: the bootstrap step is skipped,
	 * so the first model call is already work. */
	r->system = genesis_prompt(r->m, r->task, r->dry_run, r->pinned_run);
	struct buf first = {0};
	if (r->pinned_run) {
		struct buf cand = {0};
		canon_dump(r->candidate, &cand, NULL);
		buf_printf(&first, "Pinned configuration (certified, replayed): %s\nBegin: one tool call per turn.\n", cand.p);
		buf_free(&cand);
	} else {
		buf_adds(&first, FIRST_MESSAGE);
	}
	if (r->inbox && *r->inbox)
		buf_printf(&first, INBOX_HEADER "%s", r->inbox);
	r->prompt_ref = evidence(r, r->system, strlen(r->system));
	r->tool_defs = tools_definitions();
	say_user(r, first.p);
	buf_free(&first);
}
