/* turn.c - one turn of a run: ask the model, read its reply, hand a tool
 * call to the hard tier (or serve recall), and keep the budgets. */
#include "plan.h"
#include "buf.h"
#include "canon.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- one turn --------------------------------------------------------- */

static void say(struct run *r, const char *role, const char *content)
{
	json_array_append_new(r->messages, json_pack("{s:s, s:s}", "role", role, "content", content));
}

/* A message for the model: kept in the conversation and stored as
 * evidence at once, so the call entry of the request that sends it can
 * carry its reference (durable before that entry exists). */
static void say_user(struct run *r, const char *content)
{
	say(r, "user", content);
	json_decref(r->message_ref);
	r->message_ref = evidence(r, content, strlen(content));
	r->message_sent = 0;
}

/* A tool's result as the model gets it, {"toolResult":...}. Returns the
 * reference of that message (new, or NULL) for the entry that reports it. */
static json_t *tool_result(struct run *r, const char *text)
{
	json_t *msg = json_pack("{s:s}", "toolResult", text);
	struct buf b = {0};
	canon_dump(msg, &b, NULL);
	say_user(r, b.p);
	buf_free(&b);
	json_decref(msg);
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

/* Ask the model for the next reply. Returns the text (owned) or NULL with
 * the run's verdict set. Every attempt is traced and counted. */
static char *ask_model(struct run *r, const char *cls)
{
	long left = r->m->max_model_calls - r->model_calls;
	if (left <= 0) {
		halt_max_model_calls(r);
		return NULL;
	}
	json_t *req = json_pack("{s:I, s:s, s:O, s:s, s:I, s:I}", "id", (json_int_t)r->turns + 1,
	                        "system", r->system, "messages", r->messages, "class", cls,
	                        "deadlineMs", (json_int_t)deadline_wall_ms(r), "callsLeft", (json_int_t)left);
	if (r->endpoints && r->turns == 0)
		json_object_set(req, "state", r->endpoints);
	r->message_sent = 1;
	json_t *reply = ask_stage(r, STAGE_MODEL, req);
	if (!reply)
		return NULL;
	/* The reply exactly as received, stored before any entry names it. */
	json_t *text_v = json_object_get(reply, "text");
	json_t *reply_ref = NULL;
	if (json_is_true(json_object_get(reply, "ok")) && json_is_string(text_v))
		reply_ref = evidence(r, json_string_value(text_v), json_string_length(text_v));
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
			attach_evidence(&evidence, "reply", reply_ref);
			r->prompt_ref = r->message_ref = reply_ref = NULL;
			r->message_sent = 0;
		}
		const char *cc = json_string_value(json_object_get(c, "class"));
		json_decref(trace_ev(r, "call", data, evidence, 1, NULL, cc ? cc : cls));
		r->model_calls++;
	}
	json_decref(reply_ref);
	json_t *eps = json_object_get(reply, "endpoints");
	if (json_is_object(eps)) {
		json_decref(r->endpoints);
		r->endpoints = json_incref(eps);
	}
	char *text = NULL;
	if (json_is_true(json_object_get(reply, "ok")) && json_is_string(json_object_get(reply, "text"))) {
		text = xstrdup(json_string_value(json_object_get(reply, "text")));
	} else {
		const char *err = json_string_value(json_object_get(reply, "error"));
		if (r->model_calls >= r->m->max_model_calls)
			halt_max_model_calls(r);
		else if (mono_ms() >= r->deadline_mono)
			halt_max_seconds(r);
		else
			end_with(r, "failed", "model: %s", err ? err : "no reply");
	}
	json_decref(reply);
	return text;
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
	char *text = store_recall(&r->store, call, &entry, &refusal);
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
		char *text = ask_model(r, r->candidate ? "mechanical" : "reasoning");
		if (!text)
			break;
		r->turns++;
		say(r, "assistant", text);
		json_t *v = parse_reply(text);
		free(text);
		if (!v) {
			trace_quiet(r, "verdict", json_pack("{s:s, s:b, s:s}", "tier", "protocol", "pass", 0,
			                                    "reason", REASON_NOT_JSON), 1, NULL);
			answer(r, ANSWER_NOT_JSON);
			progress(r, "invalid reply");
			continue;
		}
		if (!r->candidate) {
			if (is_candidate(v)) {
				r->candidate = json_incref(v);
				json_t *ce = trace(r, "candidate", json_deep_copy(v), 1, NULL, NULL);
				keep_candidate(r, ce);
				json_decref(ce);
				answer(r, ANSWER_ADOPTED);
				progress(r, "bootstrap candidate adopted");
			} else {
				trace_quiet(r, "verdict", json_pack("{s:s, s:b, s:s}", "tier", "protocol", "pass", 0,
				                                    "reason", REASON_CANDIDATE_FIRST),
				            1, NULL);
				answer(r, ANSWER_CANDIDATE_FIRST);
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
			trace_quiet(r, "verdict", json_pack("{s:s, s:b, s:s}", "tier", "protocol", "pass", 0,
			                                    "reason", REASON_NO_TOOL), 1, NULL);
			answer(r, ANSWER_NO_TOOL);
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
	say_user(r, first.p);
	buf_free(&first);
}
