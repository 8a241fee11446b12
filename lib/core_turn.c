/* core_turn.c - one model reply and the turn it is: its call entries,
 * the protocol's answers, and each tool call - handed to the hard tier,
 * served from memory, or done - until the next request. */
#include "core_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blackboard.h"
#include "buf.h"
#include "canon.h"
#include "context.h"
#include "errors.h"
#include "evidence.h"
#include "protocol.h"
#include "sha.h"
#include "soft.h"
#include "tools.h"
#include "utf8.h"

int recall_mode_known(const char *mode)
{
	static const char *const modes[] = {"referential", "episodic", "lexical", "change", "semantic", NULL};
	for (int i = 0; mode && modes[i]; i++)
		if (strcmp(mode, modes[i]) == 0)
			return 1;
	return 0;
}

/* ---- messages ------------------------------------------------------------ */

/* A message of the conversation, with the evidence reference of its bytes
 * (borrowed; NULL: none), which a compaction names when it elides it. */
static void push_message(struct conv *cv, json_t *msg, json_t *ref)
{
	json_array_append_new(cv->messages, msg);
	json_array_append(cv->refs, ref ? ref : json_null());
}

/* A message for the model: kept in the conversation and stored as
 * evidence at once, so the call entry of the request that sends it can
 * carry its reference. */
void say_user(struct core *c, const char *content)
{
	struct conv *cv = cur_conv(c);
	json_decref(cv->message_ref);
	cv->message_ref = evidence(c, content, strlen(content));
	cv->message_sent = 0;
	push_message(cv, json_pack("{s:s, s:s}", "role", "user", "content", content), cv->message_ref);
}

json_t *tool_result(struct core *c, const char *text)
{
	struct conv *cv = cur_conv(c);
	struct buf b = {0};
	if (cv->native_calls) {
		/* After native calls: the tool message answering every one of
		 * them, stored as its canonical JSON. */
		json_t *msg = tool_message(cv->native_calls, text);
		canon_dump(msg, &b, NULL);
		json_decref(cv->message_ref);
		cv->message_ref = evidence(c, b.p, b.len);
		cv->message_sent = 0;
		push_message(cv, msg, cv->message_ref);
		json_decref(cv->native_calls);
		cv->native_calls = NULL; /* answered */
	} else {
		json_t *msg = json_pack("{s:s}", "toolResult", text);
		canon_dump(msg, &b, NULL);
		say_user(c, b.p);
		json_decref(msg);
	}
	buf_free(&b);
	return cv->message_ref ? json_incref(cv->message_ref) : NULL;
}

/* A fixed answer of the runner's protocol (the next call reports it). */
static void answer(struct core *c, const char *text)
{
	json_decref(tool_result(c, text));
}

/* A reply the protocol refuses: traced, answered, and the turn spent. */
static void protocol_refusal(struct core *c, const char *reason, const char *text)
{
	emit(c, "verdict", json_pack("{s:s, s:b, s:s}", "tier", "protocol", "pass", 0, "reason", reason), NULL, NULL,
	     NULL);
	answer(c, text);
}

/* ---- the call entries ------------------------------------------------------ */

void trace_calls(struct core *c, json_t *reply, const char *cls, json_t *msg_ref, json_t *reply_ref, size_t n_native,
                 const json_t *extra, json_t *ids)
{
	size_t i;
	json_t *call;
	json_t *calls = json_object_get(reply, "calls");
	int ok = json_is_true(json_object_get(reply, "ok"));
	json_t *request = json_object_get(reply, "id");
	int criteria = extra && json_is_string(json_object_get(extra, "purpose")) &&
	               strcmp(json_string_value(json_object_get(extra, "purpose")), "criteria") == 0;
	json_array_foreach(calls, i, call) {
		json_t *data = json_is_object(call) ? json_deep_copy(call) : json_object();
		json_object_del(data, "class");
		if (extra)
			json_object_update(data, (json_t *)extra);
		/* Which request the attempt served: replies come in any order. */
		if (json_is_number(request))
			json_object_set(data, "request", request);
		json_t *ev = NULL;
		if (i + 1 == json_array_size(calls)) {
			attach_evidence(&ev, "prompt", c->prompt_ref);
			attach_evidence(&ev, "message", msg_ref ? json_incref(msg_ref) : NULL);
			attach_evidence(&ev, "reply", reply_ref ? json_incref(reply_ref) : NULL);
			c->prompt_ref = NULL;
			/* How many native calls the reply blob holds: it is read as
			 * {"provider","text","native"}, not as text. */
			if (n_native)
				json_object_set_new(data, "toolCalls", json_integer((json_int_t)n_native));
			if (ok && !json_is_object(json_object_get(data, "usage")) &&
			    json_is_object(json_object_get(reply, "usage")))
				json_object_set(data, "usage", json_object_get(reply, "usage"));
			if (json_is_false(json_object_get(reply, "independent")))
				json_object_set_new(data, "independent", json_false());
			/* An answer that is not this attempt's own says whose: the
			 * array-form mock's judge answering after a real attempt
			 * failed, or a refusal no endpoint could fall over from (the
			 * refused attempt is this one or an earlier one, and the
			 * reply is its text). */
			const char *ep = json_string_value(json_object_get(reply, "endpoint"));
			const char *mine = json_string_value(json_object_get(call, "endpoint"));
			if (ok && ep && (!mine || strcmp(ep, mine) != 0 || !json_is_true(json_object_get(call, "ok"))))
				json_object_set_new(data, "answeredBy", json_string(ep));
		}
		usage_add(&c->usage, data);
		const char *cc = json_string_value(json_object_get(call, "class"));
		const char *id = emit_at(c, criteria ? 0 : c->cur + 1, "call", data, ev, NULL,
		                         cc && (strcmp(cc, "reasoning") == 0 || strcmp(cc, "mechanical") == 0) ? cc : cls);
		if (ids && *id)
			json_array_append_new(ids, json_string(id));
		c->model_calls++;
	}
	json_t *eps = json_object_get(reply, "endpoints");
	if (json_is_object(eps)) {
		json_decref(c->endpoints);
		c->endpoints = json_incref(eps);
	}
}

/* ---- a work reply ------------------------------------------------------------ */

static void halt_max_model_calls(struct core *c)
{
	end_halted(c, "halted-budget", "maxModelCalls", "maxModelCalls (%ld) spent", c->m->max_model_calls);
}

static void halt_max_seconds(struct core *c)
{
	end_halted(c, "halted-budget", "maxSeconds", "maxSeconds (%ld) reached", c->m->max_seconds);
}

/* The reply exactly as received, stored before any entry names it: its
 * text, or with native calls the provider's own call objects. */
static json_t *reply_blob(struct core *c, json_t *reply, size_t *n_native)
{
	json_t *text_v = json_object_get(reply, "text");
	int ok = json_is_true(json_object_get(reply, "ok")) && json_is_string(text_v);
	json_t *tool_calls = json_object_get(reply, "toolCalls");
	*n_native = ok && json_is_array(tool_calls) ? json_array_size(tool_calls) : 0;
	if (*n_native) {
		json_t *native = json_object_get(reply, "native");
		const char *provider = json_string_value(json_object_get(reply, "provider"));
		json_t *none = json_array();
		size_t n;
		char *blob = native_reply_blob(provider ? provider : "", json_string_value(text_v),
		                               json_is_array(native) ? native : none, &n);
		json_decref(none);
		json_t *ref = evidence(c, blob, n);
		free(blob);
		return ref;
	}
	return ok ? evidence(c, json_string_value(text_v), json_string_length(text_v)) : NULL;
}

/* A work reply of the current loop: stored, traced and counted. Returns
 * it (ok, with a text) or NULL with the run's verdict set; *reply_ref is
 * the reference of the reply blob (owned, or NULL). Consumes reply. */
static json_t *take_model_reply(struct core *c, json_t *reply, const char *cls, const struct core_facts *f,
                                json_t **reply_ref_out)
{
	*reply_ref_out = NULL;
	size_t n_native;
	json_t *reply_ref = reply_blob(c, reply, &n_native);
	struct conv *cv = cur_conv(c);
	if (json_array_size(json_object_get(reply, "calls"))) {
		json_t *msg = cv->message_ref;
		cv->message_ref = NULL;
		cv->message_sent = 0;
		trace_calls(c, reply, cls, msg, reply_ref, n_native, NULL, NULL);
		json_decref(msg);
	}
	int ok = json_is_true(json_object_get(reply, "ok")) && json_is_string(json_object_get(reply, "text"));
	const char *ep = json_string_value(json_object_get(reply, "endpoint"));
	if (ok && ep)
		snprintf(c->loops[c->cur].producer, sizeof c->loops[c->cur].producer, "%s", ep);
	if (!ok) {
		const char *err = json_string_value(json_object_get(reply, "error"));
		if (c->model_calls >= c->m->max_model_calls)
			halt_max_model_calls(c);
		else if (f->elapsed_ms >= budget_ms(c))
			halt_max_seconds(c);
		else
			end_with(c, "failed", "model: %s", err ? err : "no reply");
		json_decref(reply_ref);
		json_decref(reply);
		return NULL;
	}
	/* The token budget is spent once a call has taken it past maxTokens:
	 * the reply is not acted on. */
	if (c->m->max_tokens > 0 && c->usage.input + c->usage.output > c->m->max_tokens) {
		end_halted(c, "halted-budget", "maxTokens", "maxTokens (%ld) exceeded: %lld tokens", c->m->max_tokens,
		           c->usage.input + c->usage.output);
		json_decref(reply_ref);
		json_decref(reply);
		return NULL;
	}
	*reply_ref_out = reply_ref;
	return reply;
}

void drain_reply(struct core *c, int k, json_t *reply, int work)
{
	use_loop(c, k);
	/* marked, so that a replay counts them and acts on none */
	size_t i;
	json_t *call;
	json_array_foreach(json_object_get(reply, "calls"), i, call)
		if (json_is_object(call))
			json_object_set_new(call, "drained", json_true());
	if (work) {
		json_t *ref;
		const char *saved = c->verdict, *trigger = c->halt_trigger;
		char error[sizeof c->error];
		memcpy(error, c->error, sizeof error);
		const struct core_facts none = {0};
		json_t *kept = take_model_reply(c, reply, "mechanical", &none, &ref);
		c->verdict = saved;
		c->halt_trigger = trigger;
		memcpy(c->error, error, sizeof error);
		json_decref(kept);
		json_decref(ref);
	} else {
		json_t *extra = json_pack("{s:s}", "purpose", "judge");
		trace_calls(c, reply, "reasoning", NULL, NULL, 0, extra, NULL);
		json_decref(extra);
		json_decref(reply);
	}
}

/* ---- the tools ----------------------------------------------------------- */

/* Hand one tool call to the hard tier (sfma-exec): its task entry, then
 * the request; the verdict comes with the answer (core_exec_reply). */
static void carry_out(struct core *c, json_t *call)
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
	json_t *task_evidence = NULL;
	static const struct { const char *tool, *member, *evidence; } carried[] = {
		{"write", "content", "content"},
		{"notify", "text", "text"},
		{"ask", "question", "text"},
	};
	for (size_t i = 0; tool && i < sizeof carried / sizeof carried[0]; i++) {
		json_t *v = json_object_get(call, carried[i].member);
		if (strcmp(tool, carried[i].tool) == 0 && json_is_string(v))
			attach_evidence(&task_evidence, carried[i].evidence,
			                evidence(c, json_string_value(v), json_string_length(v)));
	}
	const char *id = emit(c, "task", json_pack("{s:o}", "call", shown), task_evidence, NULL, NULL);
	json_array_append_new(c->loops[c->cur].entries, json_string(id));
	c->pending = (struct pending){.what = CORE_WAIT_EXEC, .call = json_incref(call), .loop = c->cur};
	snprintf(c->pending.task_id, sizeof c->pending.task_id, "%s", id);
	json_t *req = json_pack("{s:I, s:O, s:f}", "id", (json_int_t)c->turns, "call", call, "seq",
	                        c->last_seq);
	fx_push(c, CORE_EXEC, req, NULL, 0);
	c->fx[c->fx_n - 1]->acts = !tool || strcmp(tool, "read") != 0;
}

static void acceptance_reply(struct core *c, json_t *reply);

void core_exec_reply(struct core *c, json_t *reply)
{
	if (c->pending.what == CORE_WAIT_ACCEPT) {
		use_loop(c, c->pending.loop);
		acceptance_reply(c, reply);
		return;
	}
	if (c->pending.what != CORE_WAIT_EXEC) {
		json_decref(reply);
		return;
	}
	use_loop(c, c->pending.loop);
	json_t *call = c->pending.call;
	char task_id[sizeof c->pending.task_id];
	memcpy(task_id, c->pending.task_id, sizeof task_id);
	c->pending = (struct pending){0};
	const char *tool = json_string_value(json_object_get(call, "tool"));
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
	attach_evidence(&verdict_evidence, "output", tool_result(c, result));
	emit(c, "verdict", verdict, verdict_evidence, json_pack("[s]", task_id), NULL);
	if (!pass)
		refused(c, reason);
	/* What was done where: the path of a read or write, the command of a run. */
	const char *what = json_string_value(json_object_get(call, "path"));
	if (!what)
		what = json_string_value(json_object_get(call, "cmd"));
	/* The hard tier's decision apart from what came of it: "allowed,
	 * exit=1" is a command that ran and failed, not a refusal. */
	progress(c, "%s%s%.200s: %s%.300s", tool ? tool : "?", what ? " " : "", what ? what : "",
	         pass ? "allowed, " : "refused: ", reason ? reason : pass ? "done" : "refused");
	json_t *mut = json_object_get(reply, "mutation");
	if (pass && json_is_object(mut)) {
		const char *id = emit(c, "mutation", json_deep_copy(mut), NULL, json_pack("[s]", task_id), NULL);
		json_array_append_new(c->mutation_refs, json_string(id));
		const char *path = json_string_value(json_object_get(mut, "path"));
		if (path && json_is_string(json_object_get(mut, "sha256")))
			json_object_set(c->written, path, json_object_get(mut, "sha256"));
	}
	json_t *msg = json_object_get(reply, "message");
	if (json_is_object(msg)) {
		json_t *data = json_pack("{s:s, s:O?, s:O?}", "dir", "out", "kind", json_object_get(msg, "kind"),
		                         "text", json_object_get(msg, "text"));
		emit(c, "message", data, NULL, json_pack("[s]", task_id), NULL);
	}
	json_decref(call);
	json_decref(reply);
}

/* done: the summary is evidence and goes into the record; the verdict
 * records the outputs it was judged on, which the host looks at (an
 * applied run) or the run's own writes say (a dry run). */
/* After done (and its acceptance): the outputs it is judged on, which
 * the host looks at (an applied run) or the run's own writes say. */
static void outputs_check(struct core *c, const char *task_id)
{
	c->pending = (struct pending){.what = CORE_WAIT_OUTPUTS, .loop = c->cur};
	snprintf(c->pending.task_id, sizeof c->pending.task_id, "%s", task_id);
	if (!c->dry_run) {
		fx_push(c, CORE_OUTPUTS, json_object(), NULL, 0);
		return;
	}
	json_t *outputs = json_array();
	for (size_t i = 0; i < c->m->n_outputs; i++) {
		json_t *sha = json_object_get(c->written, c->m->outputs[i]);
		json_t *o = json_pack("{s:s, s:b}", "path", c->m->outputs[i], "exists", sha != NULL);
		if (sha)
			json_object_set(o, "sha256", sha);
		json_array_append_new(outputs, o);
	}
	core_outputs_reply(c, outputs);
	json_decref(outputs);
}

/* The manifest's acceptance check i (§16), run in the sandbox over the
 * workspace as it stands: a command like the run tool's, for the done of
 * task entry task_id (seq task_seq). */
static void ask_acceptance(struct core *c, size_t i, const char *task_id, double task_seq)
{
	c->pending = (struct pending){.what = CORE_WAIT_ACCEPT, .loop = c->cur, .index = i, .task_seq = task_seq};
	snprintf(c->pending.task_id, sizeof c->pending.task_id, "%s", task_id);
	json_t *req = json_pack("{s:I, s:{s:s, s:s}, s:f, s:I}", "id", (json_int_t)c->turns, "call", "tool", "run", "cmd",
	                        c->m->acceptance[i].cmd, "seq", task_seq, "acceptance", (json_int_t)i);
	fx_push(c, CORE_EXEC, req, NULL, 0);
	c->fx[c->fx_n - 1]->acts = 1;
}

/* done: the summary is evidence and goes into the record; in an applied
 * run the acceptance checks come first, then the outputs are looked at. */
static void done(struct core *c, json_t *call)
{
	json_t *summary = json_object_get(call, "summary"), *task_evidence = NULL;
	if (json_is_string(summary)) {
		json_decref(c->summary);
		c->summary = json_incref(summary);
		attach_evidence(&task_evidence, "summary",
		                evidence(c, json_string_value(summary), json_string_length(summary)));
	}
	const char *id = emit(c, "task", json_pack("{s:{s:s}}", "call", "tool", "done"), task_evidence, NULL, NULL);
	json_array_append_new(c->loops[c->cur].entries, json_string(id));
	if (!c->dry_run && c->m->n_acceptance) {
		c->acceptance_rounds++;
		ask_acceptance(c, 0, id, c->last_seq);
		return;
	}
	outputs_check(c, id);
}

/* One acceptance check's answer: a verdict entry; the next check, the
 * outputs (all passed), or the done refused - not a hard-tier failure -
 * with the check's output handed to the model, and the run goes on. */
static void acceptance_reply(struct core *c, json_t *reply)
{
	size_t i = c->pending.index;
	double task_seq = c->pending.task_seq;
	char task_id[sizeof c->pending.task_id];
	memcpy(task_id, c->pending.task_id, sizeof task_id);
	c->pending = (struct pending){0};
	const struct acceptance_cmd *a = &c->m->acceptance[i];
	json_t *run = json_object_get(reply, "run"), *exit_v = json_object_get(run, "exit");
	int ran = json_is_true(json_object_get(reply, "pass"));
	double exit_d = json_number_value(exit_v);
	int pass = ran && json_is_number(exit_v) && exit_d == (double)a->exit;
	const char *reason = json_string_value(json_object_get(reply, "reason"));
	const char *result = json_string_value(json_object_get(reply, "result"));
	if (!result)
		result = reason ? reason : "no answer";
	json_t *ev = NULL;
	attach_evidence(&ev, "output", evidence(c, result, strlen(result)));
	char exit_text[32];
	snprintf(exit_text, sizeof exit_text, json_is_number(exit_v) ? "%.0f" : "none", exit_d);
	if (!pass) {
		/* What the model is told: which check, how it ended, its output. */
		struct buf text = {0};
		buf_printf(&text, "acceptance failed: %s: exit=%s (expected %d)\n%s", a->cmd, exit_text, a->exit, result);
		attach_evidence(&ev, "message", tool_result(c, text.p));
		buf_free(&text);
		c->acceptance_passed = 0;
	}
	json_t *acc = json_pack("{s:I, s:s, s:O, s:i, s:b, s:b}", "index", (json_int_t)i, "cmd", a->cmd, "exit",
	                        json_is_number(exit_v) ? exit_v : json_null(), "expected", a->exit, "pass", pass, "ran", ran);
	json_t *verdict = json_pack("{s:s, s:b, s:s, s:o}", "tier", "acceptance", "pass", pass, "reason",
	                            reason ? reason : "no answer", "acceptance", acc);
	if (json_is_object(run))
		json_object_set(verdict, "run", run);
	emit(c, "verdict", verdict, ev, json_pack("[s]", task_id), NULL);
	progress(c, "acceptance %s: %s, exit %s (expected %d)", a->cmd, pass ? "passed" : "failed", exit_text, a->exit);
	json_decref(reply);
	if (!pass)
		return;
	if (i + 1 < c->m->n_acceptance) {
		ask_acceptance(c, i + 1, task_id, task_seq);
		return;
	}
	c->acceptance_passed = 1;
	outputs_check(c, task_id);
}

/* The outputs as the judge sees them, from the host's answer: each
 * declared output in manifest order, its content clipped at a UTF-8
 * boundary by the host (JUDGE_OUTPUT_MAX); anything else of the answer is
 * dropped. */
static json_t *outputs_view(const struct core *c, const json_t *answer)
{
	json_t *list = json_array();
	for (size_t i = 0; i < c->m->n_outputs; i++) {
		json_t *a = json_array_get(answer, i);
		const char *p = json_string_value(json_object_get(a, "path"));
		int exists = p && strcmp(p, c->m->outputs[i]) == 0 && json_is_true(json_object_get(a, "exists"));
		json_t *o = json_pack("{s:s, s:b}", "path", c->m->outputs[i], "exists", exists);
		static const char *const kept[] = {"content", "clipped", "sha256"};
		for (size_t k = 0; exists && k < 3; k++) {
			json_t *v = json_object_get(a, kept[k]);
			if (k == 1 ? json_is_boolean(v) : json_is_string(v))
				json_object_set(o, kept[k], v);
		}
		json_array_append_new(list, o);
	}
	return list;
}

void core_outputs_reply(struct core *c, const json_t *answer)
{
	if (c->pending.what != CORE_WAIT_OUTPUTS)
		return;
	use_loop(c, c->pending.loop);
	char task_id[sizeof c->pending.task_id];
	memcpy(task_id, c->pending.task_id, sizeof task_id);
	c->pending = (struct pending){0};
	json_t *view = outputs_view(c, answer), *outputs = json_array(), *ev = NULL;
	size_t i;
	json_t *o;
	json_array_foreach(view, i, o)
		json_array_append_new(outputs, json_pack("{s:O, s:O}", "path", json_object_get(o, "path"), "exists",
		                                         json_object_get(o, "exists")));
	/* What the judge will see, as evidence: the host fact the done rests on. */
	struct buf b = {0};
	canon_dump(view, &b, NULL);
	attach_evidence(&ev, "outputs", evidence(c, b.p, b.len));
	buf_free(&b);
	emit(c, "verdict", json_pack("{s:s, s:b, s:s, s:O}", "tier", "hard", "pass", 1, "reason", "done", "outputs",
	                             outputs), ev, json_pack("[s]", task_id), NULL);
	progress(c, "done");
	json_decref(c->last_outputs);
	c->last_outputs = outputs;
	json_decref(c->last_view);
	c->last_view = view;
	if (!c->verdict)
		task_done(c, view);
}

static int is_evidence_id(const char *s)
{
	size_t n = 0;
	for (; s && s[n]; n++)
		if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
			return 0;
	return n == SHA256_HEX_LEN;
}

char *recall_evidence_answer(const char *hex, const char *data, size_t n, json_t **entry)
{
	json_t *ans = json_pack("{s:s, s:b, s:s, s:b, s:s}", "mode", "referential", "available", 1, "id", hex,
	                        "found", data != NULL, "tier", "evidence");
	if (data)
		json_object_set_new(ans, "content", utf8_text_ok(data, n) ? json_stringn(data, n)
		                                                          : json_string("(not valid UTF-8)"));
	struct buf b = {0};
	canon_dump(ans, &b, NULL);
	*entry = json_pack("{s:s, s:s, s:O, s:i, s:s}", "op", "recall", "mode", "referential", "found",
	                   json_object_get(ans, "found"), "count", data ? 1 : 0, "tier", "evidence");
	json_decref(ans);
	return b.p;
}

/* recall, after the same gate as every tool: a mode that is not one of
 * the five is refused here; the rest is served by the memory stores, or
 * by the evidence (a compaction stub names an evidence id). */
static void recall(struct core *c, json_t *call)
{
	json_t *shown = json_pack("{s:s}", "tool", "recall");
	const char *mode = json_string_value(json_object_get(call, "mode"));
	if (mode)
		json_object_set(shown, "mode", json_object_get(call, "mode"));
	const char *id = emit(c, "task", json_pack("{s:o}", "call", shown), NULL, NULL, NULL);
	json_array_append_new(c->loops[c->cur].entries, json_string(id));
	c->pending = (struct pending){.what = CORE_WAIT_RECALL, .loop = c->cur};
	snprintf(c->pending.task_id, sizeof c->pending.task_id, "%s", id);
	if (!recall_mode_known(mode) || strlen(mode) != json_string_length(json_object_get(call, "mode"))) {
		core_recall_reply(c, NULL, RECALL_UNKNOWN_MODE, NULL);
		return;
	}
	int from_evidence = strcmp(mode, "referential") == 0 &&
	                    is_evidence_id(json_string_value(json_object_get(call, "id")));
	fx_push(c, CORE_RECALL, json_pack("{s:O, s:s}", "call", call, "from", from_evidence ? "evidence" : "stores"),
	        NULL, 0);
}

void core_recall_reply(struct core *c, const char *text, const char *refusal, json_t *entry)
{
	if (c->pending.what != CORE_WAIT_RECALL) {
		json_decref(entry);
		return;
	}
	use_loop(c, c->pending.loop);
	char task_id[sizeof c->pending.task_id];
	memcpy(task_id, c->pending.task_id, sizeof task_id);
	c->pending = (struct pending){0};
	if (!text && !refusal)
		refusal = "recall: no answer";
	struct buf shown = {0};
	if (!text)
		buf_printf(&shown, "EPSILON_HARD_FAIL: %s", refusal);
	json_t *verdict = json_pack("{s:s, s:b, s:s}", "tier", "hard", "pass", text != NULL, "reason",
	                            text ? "recall" : refusal);
	json_t *verdict_evidence = NULL;
	attach_evidence(&verdict_evidence, "output", tool_result(c, text ? text : shown.p));
	emit(c, "verdict", verdict, verdict_evidence, json_pack("[s]", task_id), NULL);
	buf_free(&shown);
	if (!text) {
		refused(c, refusal);
		progress(c, "recall: refused: %s", refusal);
		json_decref(entry);
	} else {
		if (json_is_object(entry))
			emit(c, "store", json_incref(entry), NULL, json_pack("[s]", task_id), NULL);
		json_decref(entry);
		progress(c, "recall: allowed");
	}
}

/* The adopted candidate goes on with the protocol: answered, and the
 * blackboard's first tasks posted. */
static void adopted(struct core *c)
{
	answer(c, ANSWER_ADOPTED);
	progress(c, "bootstrap candidate adopted");
	blackboard_start(c);
}

void core_keep_reply(struct core *c, json_t *entry)
{
	if (c->pending.what != CORE_WAIT_KEEP) {
		json_decref(entry);
		return;
	}
	use_loop(c, c->pending.loop);
	char id[sizeof c->pending.task_id];
	memcpy(id, c->pending.task_id, sizeof id);
	c->pending = (struct pending){0};
	if (json_is_object(entry))
		emit_at(c, 0, "store", json_incref(entry), NULL, json_pack("[s]", id), NULL);
	json_decref(entry);
	adopted(c);
}

/* The candidate of a bootstrap reply: adopted, recorded, and kept in the
 * memory stores (a durable tier; the fast tier keeps only a pointer). */
static void adopt(struct core *c, json_t *v)
{
	c->candidate = json_incref(v);
	struct conv *cv = cur_conv(c);
	cv->candidate_msg = (long)json_array_size(cv->messages) - 1;
	const char *id = emit(c, "candidate", json_deep_copy(v), NULL, NULL, NULL);
	if (!c->stores_ok || !*id) {
		adopted(c);
		return;
	}
	c->pending = (struct pending){.what = CORE_WAIT_KEEP, .loop = c->cur};
	snprintf(c->pending.task_id, sizeof c->pending.task_id, "%s", id);
	fx_push(c, CORE_KEEP, json_pack("{s:s, s:O, s:I}", "id", id, "payload", v, "fastMaxBytes",
	                                (json_int_t)c->m->tuning.fast_tier_max_bytes), NULL, 0);
}

/* ---- the turn -------------------------------------------------------------- */

/* The output token limit of the endpoint that answered. */
static long output_limit(const struct core *c, const json_t *reply)
{
	double n = json_number_value(json_object_get(reply, "maxOutputTokens"));
	if (json_is_number(json_object_get(reply, "maxOutputTokens")) && n >= 1 && n <= 1e9)
		return (long)n;
	const char *ep = json_string_value(json_object_get(reply, "endpoint"));
	for (size_t i = 0; ep && i < c->m->n_endpoints; i++)
		if (strcmp(c->m->endpoints[i].name, ep) == 0)
			return c->m->endpoints[i].max_output_tokens;
	return 0;
}

/* A reply the provider ended short of an answer (sfma-model's "stop"):
 * cut off at the output token limit - nothing of it is carried out, even
 * a call that looks whole, and the model is told - or a refusal no
 * endpoint was left to fall over to. 1 when it was one (the turn spent). */
static int stopped_short(struct core *c, const json_t *reply)
{
	const char *stop = json_string_value(json_object_get(reply, "stop"));
	char reason[600], text[600];
	if (stop && strcmp(stop, "length") == 0) {
		long n = output_limit(c, reply);
		snprintf(reason, sizeof reason, REASON_CUT_OFF, n);
		snprintf(text, sizeof text, ANSWER_CUT_OFF, n);
		protocol_refusal(c, reason, text);
		progress(c, "%s", reason);
		return 1;
	}
	if (stop && (strcmp(stop, "refusal") == 0 || strcmp(stop, "filter") == 0)) {
		const char *said = json_string_value(json_object_get(reply, "text"));
		snprintf(reason, sizeof reason, REASON_REFUSED, said && *said ? said : stop);
		protocol_refusal(c, reason, reason);
		progress(c, "%s", reason);
		return 1;
	}
	return 0;
}

/* One work reply of the current loop, acted on (one turn). */
static void take_turn(struct core *c, json_t *reply, json_t *reply_ref)
{
	struct conv *cv = cur_conv(c);
	json_t *v = NULL;
	const char *text = json_string_value(json_object_get(reply, "text"));
	json_t *tool_calls = json_object_get(reply, "toolCalls");
	json_decref(cv->native_calls);
	cv->native_calls = NULL;
	struct sfma_err bad = {""};
	if (json_is_array(tool_calls) && json_array_size(tool_calls)) {
		/* Native calls: the assistant message keeps them all, the
		 * first is the turn's call, every one gets a result. */
		push_message(cv, json_pack("{s:s, s:s, s:O}", "role", "assistant", "content", text, "toolCalls",
		                           tool_calls), reply_ref);
		cv->native_calls = json_incref(tool_calls);
		if (c->candidate)
			v = tools_call_object(json_array_get(tool_calls, 0), &bad);
	} else {
		push_message(cv, json_pack("{s:s, s:s}", "role", "assistant", "content", text), reply_ref);
		v = parse_reply(text);
	}
	json_decref(reply_ref);
	if (stopped_short(c, reply)) {
		json_decref(v);
		json_decref(reply);
		return;
	}
	json_decref(reply);
	if (cv->native_calls && !c->candidate) {
		protocol_refusal(c, REASON_CANDIDATE_FIRST, ANSWER_CANDIDATE_FIRST);
		progress(c, "reminder: bootstrap candidate first");
		return;
	}
	if (cv->native_calls && !v) {
		struct buf why = {0};
		buf_printf(&why, REASON_BAD_CALL "%s", bad.text);
		protocol_refusal(c, why.p, why.p);
		progress(c, "invalid tool call: %s", bad.text);
		buf_free(&why);
		return;
	}
	if (!v) {
		protocol_refusal(c, REASON_NOT_JSON, ANSWER_NOT_JSON);
		progress(c, "invalid reply");
		return;
	}
	if (!c->candidate) {
		if (is_candidate(v)) {
			adopt(c, v);
		} else {
			protocol_refusal(c, REASON_CANDIDATE_FIRST, ANSWER_CANDIDATE_FIRST);
			progress(c, "reminder: bootstrap candidate first");
		}
		json_decref(v);
		return;
	}
	const char *tool = json_string_value(json_object_get(v, "tool"));
	if (tool && strcmp(tool, "done") == 0)
		done(c, v);
	else if (tool && strcmp(tool, "recall") == 0)
		recall(c, v);
	else if (tool && strcmp(tool, "task") == 0)
		post_task(c, v);
	else if (!tool)
		protocol_refusal(c, REASON_NO_TOOL, ANSWER_NO_TOOL);
	else
		carry_out(c, v);
	if (!tool)
		progress(c, "invalid reply");
	json_decref(v);
}

void take_work_reply(struct core *c, json_t *reply, const struct core_facts *f)
{
	struct loop *L = &c->loops[c->cur];
	const char *cls = "reasoning";
	if (c->candidate) {
		const char *tc = L->task >= 0 ? json_string_value(json_object_get(c->tasks[L->task].def, "class")) : NULL;
		cls = tc && strcmp(tc, "reasoning") == 0 ? "reasoning" : "mechanical";
	}
	json_t *reply_ref;
	reply = take_model_reply(c, reply, cls, f, &reply_ref);
	if (!reply)
		return;
	c->turns++;
	take_turn(c, reply, reply_ref);
}
