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

static json_t *ask_stage(struct run *r, enum stage_id s, json_t *req)
{
	const struct wait_opts o = {.deadline_mono = r->deadline_mono + EXEC_GRACE_MS, .stop_on_halt = 1,
	                            .watch_others = 1};
	enum wait_why why = WAIT_DIED;
	struct sfma_err e;
	json_t *reply = NULL;
	if (stage_send(s, req) == 0)
		reply = stage_wait(s, &o, &why, &e);
	else
		err_set(&e, "stage %s died", stages[s].name);
	json_decref(req);
	if (reply)
		return reply;
	if (why == WAIT_HALT)
		halt_operator_signal(r);
	else if (why == WAIT_TIMEOUT)
		halt_max_seconds(r);
	else
		end_with(r, "failed", "%s", e.text);
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
		                                       "afterBytes", (json_int_t)f.after, "elided", f.elided), 1, NULL);
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

/* Ask the model for the next reply. Returns the reply (owned: ok, with a
 * text) or NULL with the run's verdict set; *reply_ref is the reference of
 * the reply blob (owned, or NULL). Every attempt is traced and counted. */
static json_t *ask_model(struct run *r, const char *cls, json_t **reply_ref_out)
{
	*reply_ref_out = NULL;
	long left = r->m->max_model_calls - r->model_calls;
	if (left <= 0) {
		halt_max_model_calls(r);
		return NULL;
	}
	if (fit_context(r) < 0)
		return NULL;
	json_t *req = json_pack("{s:I, s:s, s:O, s:s, s:I, s:I, s:b}", "id", (json_int_t)r->turns + 1,
	                        "system", r->system, "messages", r->messages, "class", cls,
	                        "deadlineMs", (json_int_t)deadline_wall_ms(r), "callsLeft", (json_int_t)left,
	                        "tools", r->candidate != NULL);
	if (r->endpoints && r->turns == 0)
		json_object_set(req, "state", r->endpoints);
	r->message_sent = 1;
	json_t *reply = ask_stage(r, STAGE_MODEL, req);
	if (!reply)
		return NULL;
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
	size_t i;
	json_t *c;
	json_t *calls = json_object_get(reply, "calls");
	json_array_foreach(calls, i, c) {
		json_t *data = json_deep_copy(c);
		json_object_del(data, "class");
		/* The request's last attempt reports what the request sent (the
		 * system prompt with the run's first request, and the new
		 * message) and what came back. */
		json_t *evidence = NULL;
		if (i + 1 == json_array_size(calls)) {
			attach_evidence(&evidence, "prompt", r->prompt_ref);
			attach_evidence(&evidence, "message", r->message_ref);
			attach_evidence(&evidence, "reply", reply_ref ? json_incref(reply_ref) : NULL);
			r->prompt_ref = r->message_ref = NULL;
			r->message_sent = 0;
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
		json_decref(trace_ev(r, "call", data, evidence, 1, NULL, cc ? cc : cls));
		r->model_calls++;
	}
	json_t *eps = json_object_get(reply, "endpoints");
	if (json_is_object(eps)) {
		json_decref(r->endpoints);
		r->endpoints = json_incref(eps);
	}
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
	json_t *task = trace_ev(r, "task", task_data, task_evidence, 1, NULL, NULL);
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
	trace_quiet_ev(r, "verdict", verdict, verdict_evidence, 1, json_pack("[s]", task_id));
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
		json_t *e = trace(r, "mutation", json_deep_copy(mut), 1, json_pack("[s]", task_id), NULL);
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
		trace_quiet(r, "message", data, 1, json_pack("[s]", task_id));
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
	json_t *task = trace_ev(r, "task", task_data, task_evidence, 1, NULL, NULL);
	json_t *outputs = outputs_at_done(r);
	trace_quiet(r, "verdict", json_pack("{s:s, s:b, s:s, s:O}", "tier", "hard", "pass", 1, "reason", "done",
	                                    "outputs", outputs),
	            1, task ? json_pack("[s]", entry_id(task)) : NULL);
	json_decref(task);
	progress(r, "done");
	/* An evidence failure has already failed the run. */
	if (!r->verdict)
		judge_done(r, outputs);
	json_decref(outputs);
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
	char path[16 + SHA256_HEX_LEN];
	struct stat st;
	struct evidence_ref ref;
	struct sfma_err e;
	char *data = NULL;
	snprintf(path, sizeof path, "evidence/%s", hex);
	snprintf(ref.sha256, sizeof ref.sha256, "%s", hex);
	if (r->evidence && fstatat(r->lock_fd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
		ref.bytes = (uint64_t)st.st_size;
		data = evidence_get(r->evidence, &ref, (size_t)r->m->max_context_bytes, &e);
	}
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
	json_t *task = trace(r, "task", json_pack("{s:o}", "call", shown), 1, NULL, NULL);
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
	trace_quiet_ev(r, "verdict", verdict, verdict_evidence, 1, task_id ? json_pack("[s]", task_id) : NULL);
	if (!text) {
		refused(r, refusal.text);
		progress(r, "recall: refused: %s", refusal.text);
	} else {
		trace_quiet(r, "store", entry, 1, task_id ? json_pack("[s]", task_id) : NULL);
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
	trace_quiet(r, "verdict", json_pack("{s:s, s:b, s:s}", "tier", "protocol", "pass", 0, "reason", reason), 1,
	            NULL);
	answer(r, text);
}

static int halt_file_present(struct run *r)
{
	struct stat st;
	return fstatat(r->lock_fd, "HALT", &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* The turn loop: one model reply per turn, until done, a halt or a ceiling. */
void turns(struct run *r)
{
	while (!r->verdict) {
		/* Nothing more can be recorded (a full disk, a dead sfma-chain):
		 * asking the model again would spend calls no trace shows. */
		if (!r->chain_alive) {
			end_with(r, "failed", "%s", r->error[0] ? r->error : "trace writer died");
			break;
		}
		if (halt_signal) {
			halt_operator_signal(r);
			break;
		}
		if (halt_file_present(r)) {
			end_halted(r, "halted-operator", "HALT file", "halted by .sfma/HALT");
			break;
		}
		if (r->turns >= r->m->max_turns) {
			end_halted(r, "halted-maxTurns", "maxTurns", "maxTurns (%ld) reached", r->m->max_turns);
			break;
		}
		if (mono_ms() >= r->deadline_mono) {
			halt_max_seconds(r);
			break;
		}
		json_t *reply_ref;
		json_t *reply = ask_model(r, r->candidate ? "mechanical" : "reasoning", &reply_ref);
		if (!reply)
			break;
		r->turns++;
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
			continue;
		}
		if (r->native_calls && !v) {
			struct buf why = {0};
			buf_printf(&why, REASON_BAD_CALL "%s", bad.text);
			protocol_refusal(r, why.p, why.p);
			progress(r, "invalid tool call: %s", bad.text);
			buf_free(&why);
			continue;
		}
		if (!v) {
			protocol_refusal(r, REASON_NOT_JSON, ANSWER_NOT_JSON);
			progress(r, "invalid reply");
			continue;
		}
		if (!r->candidate) {
			if (is_candidate(v)) {
				r->candidate = json_incref(v);
				r->candidate_msg = (long)json_array_size(r->messages) - 1;
				json_t *ce = trace(r, "candidate", json_deep_copy(v), 1, NULL, NULL);
				keep_candidate(r, ce);
				json_decref(ce);
				answer(r, ANSWER_ADOPTED);
				progress(r, "bootstrap candidate adopted");
			} else {
				protocol_refusal(r, REASON_CANDIDATE_FIRST, ANSWER_CANDIDATE_FIRST);
				progress(r, "reminder: bootstrap candidate first");
			}
			json_decref(v);
			continue;
		}
		const char *tool = json_string_value(json_object_get(v, "tool"));
		if (tool && strcmp(tool, "done") == 0) {
			done(r, v);
		} else if (tool && strcmp(tool, "recall") == 0) {
			recall(r, v);
		} else if (!tool) {
			protocol_refusal(r, REASON_NO_TOOL, ANSWER_NO_TOOL);
			progress(r, "invalid reply");
		} else {
			carry_out(r, v);
		}
		json_decref(v);
	}
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
