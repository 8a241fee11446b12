/* core_loops.c - loops and the blackboard (sfma-plan(1), Loops): which
 * request goes next, whose reply is whose, the soft tier's judgments of
 * each done and the criteria judgment at the end of the work. */
#include "core_impl.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blackboard.h"
#include "buf.h"
#include "canon.h"
#include "context.h"
#include "errors.h"
#include "protocol.h"
#include "soft.h"

void use_loop(struct core *c, int k)
{
	if (k >= 0 && k < c->n_loops)
		c->cur = k;
}

const char *task_id_of(const struct core *c, long t)
{
	return t >= 0 ? json_string_value(json_object_get(c->tasks[t].def, "id")) : NULL;
}

static size_t pending_tasks(const struct core *c)
{
	size_t n = 0;
	for (size_t i = 0; i < c->n_tasks; i++)
		n += c->tasks[i].state == TASK_PENDING;
	return n;
}

static long add_task(struct core *c, json_t *def)
{
	c->tasks = xrealloc(c->tasks, (c->n_tasks + 1) * sizeof *c->tasks);
	c->tasks[c->n_tasks] = (struct bb_task){.def = def};
	return (long)c->n_tasks++;
}

/* The adopted (or pinned) candidate's firstTasks are the blackboard's first tasks. */
void blackboard_start(struct core *c)
{
	json_t *defs = first_tasks(c->candidate, c->task);
	size_t i;
	json_t *d;
	json_array_foreach(defs, i, d)
		add_task(c, json_incref(d));
	json_decref(defs);
	/* One conversation (maxLoops 1, or one task): the conversation that
	 * adopted the candidate goes on with the first task, as a run always
	 * did. */
	c->legacy = c->n_loops == 1 || c->n_tasks == 1;
	if (c->legacy) {
		c->tasks[0].state = TASK_ACTIVE;
		c->tasks[0].attempts = 1;
		c->loops[0].task = 0;
	}
}

static void conv_reset(struct conv *cv)
{
	json_decref(cv->messages);
	json_decref(cv->refs);
	json_decref(cv->native_calls);
	json_decref(cv->message_ref);
	*cv = (struct conv){.messages = json_array(), .refs = json_array(), .candidate_msg = -1};
}

/* Loop k takes task t in a fresh conversation: the system prompt, then
 * {"assignedTask":{...},"loop":k} (with the judge's reason of a failed
 * first attempt as "clarification"). */
static void start_task(struct core *c, int k, long t)
{
	use_loop(c, k);
	struct loop *L = &c->loops[k];
	conv_reset(&L->c);
	L->task = t;
	L->hard_failures = 0;
	json_array_clear(L->entries);
	c->tasks[t].state = TASK_ACTIVE;
	c->tasks[t].attempts++;
	char *text = assigned_task_text(c->tasks[t].def, k + 1, c->tasks[t].clarification);
	say_user(c, text);
	free(text);
	const char *tid = task_id_of(c, t);
	progress(c, "loop %d takes task %s", k + 1, tid ? tid : "?");
}

/* Free loops take the oldest pending tasks; a retried task goes to
 * another loop than the one that failed it, when there is another. */
static void assign_tasks(struct core *c)
{
	for (int k = 0; k < c->n_loops; k++) {
		struct loop *L = &c->loops[k];
		if (L->task >= 0 || L->judging || L->req_id)
			continue;
		for (size_t i = 0; i < c->n_tasks; i++) {
			struct bb_task *t = &c->tasks[i];
			if (t->state != TASK_PENDING || (c->n_loops > 1 && t->not_loop == k + 1))
				continue;
			start_task(c, k, (long)i);
			break;
		}
	}
}

/* {"tool":"task","id","description","role"?,"class"?}: post work on the
 * blackboard, after the same tracing as every tool. */
void post_task(struct core *c, json_t *call)
{
	json_t *idv = json_object_get(call, "id");
	const char *id = json_string_value(idv);
	const char *d = json_string_value(json_object_get(call, "description"));
	const char *cls = json_string_value(json_object_get(call, "class"));
	json_t *shown = json_pack("{s:s}", "tool", "task");
	if (json_is_string(idv))
		json_object_set(shown, "id", idv);
	const char *task_id = emit(c, "task", json_pack("{s:o}", "call", shown), NULL, NULL, NULL);
	char tid[64];
	snprintf(tid, sizeof tid, "%s", task_id);
	json_array_append_new(c->loops[c->cur].entries, json_string(tid));
	char reason[300];
	json_t *defs = json_array();
	for (size_t i = 0; i < c->n_tasks; i++)
		json_array_append(defs, c->tasks[i].def);
	int pass = task_post_check(call, defs, pending_tasks(c), c->m->max_pending_tasks, reason, sizeof reason);
	json_decref(defs);
	json_t *verdict = json_pack("{s:s, s:b, s:s}", "tier", "hard", "pass", pass, "reason", reason);
	if (pass) {
		long t = add_task(c, task_def(id, d, json_object_get(call, "role"), cls));
		json_object_set(verdict, "posted", c->tasks[t].def);
	}
	char text[500];
	snprintf(text, sizeof text, pass ? "posted task %s" : "EPSILON_HARD_FAIL: %s", pass ? id : reason);
	json_t *verdict_evidence = NULL;
	attach_evidence(&verdict_evidence, "output", tool_result(c, text));
	emit(c, "verdict", verdict, verdict_evidence, json_pack("[s]", tid), NULL);
	if (!pass)
		refused(c, reason);
	progress(c, "task %s: %s", id ? id : "?", reason);
}

/* ---- the soft tier -------------------------------------------------------- */

static json_t *mission_of(const struct core *c)
{
	json_t *m = json_object_get(c->candidate, "mission");
	return json_is_string(m) ? json_incref(m) : json_string("");
}

static void fail_for_refusals(struct core *c)
{
	end_with(c, "failed", "done, but %ld call%s refused by the hard tier (the first: %s)", c->hard_failures,
	         c->hard_failures == 1 ? " was" : "s were", c->first_refusal);
}

/* done ended the current loop's task: a task with a hard-tier refusal
 * fails without a judgment (and the run with it); else its judgment is
 * prepared, softCalls requests to be sent. outputs: as the judge sees them. */
void task_done(struct core *c, const json_t *outputs)
{
	struct loop *L = &c->loops[c->cur];
	if (L->hard_failures || (c->legacy && c->hard_failures)) {
		fail_for_refusals(c);
		if (L->task >= 0)
			c->tasks[L->task].state = TASK_FAILED;
		return;
	}
	if (L->task < 0)
		return;
	json_t *criteria = json_object_get(c->candidate, "successCriteria");
	json_t *what = json_pack("{s:o, s:O, s:O, s:O, s:O}", "mission", mission_of(c), "successCriteria",
	                         criteria ? criteria : json_null(), "task", c->tasks[L->task].def,
	                         "summary", c->summary ? c->summary : json_null(), "outputs", outputs);
	struct buf b = {0};
	canon_dump(what, &b, NULL);
	json_decref(what);
	free(L->judge_msg);
	L->judge_msg = b.p;
	json_decref(L->judge_msg_ref);
	L->judge_msg_ref = evidence(c, b.p, b.len);
	L->judging = 1;
	L->judges_to_send = c->m->tuning.soft_calls;
	L->judges_out = 0;
	json_decref(L->judge_replies);
	L->judge_replies = json_array();
	for (int i = 0; i < L->judges_to_send; i++) {
		json_array_append_new(L->judge_replies, json_null());
		L->judge_ids[i] = 0;
		L->judge_attempts[i] = 0;
		/* judge independence: not the endpoint that produced the work */
		snprintf(L->judge_avoid[i], sizeof L->judge_avoid[i], "%s", L->producer);
	}
	json_decref(L->judge_calls);
	L->judge_calls = json_array();
}

/* Did the run deliver? Every declared output exists (dry run: was written)
 * and no call was refused. */
void judge_done(struct core *c, const json_t *outputs)
{
	/* A refusal is the cause to name first: a refused write is also
	 * why its output is missing. */
	if (c->hard_failures) {
		fail_for_refusals(c);
		return;
	}
	/* completed means the acceptance checks passed, where there are any */
	if (c->m->n_acceptance && !c->dry_run && !c->acceptance_passed) {
		end_with(c, "failed", "done, but the acceptance checks did not pass");
		return;
	}
	size_t i;
	json_t *o;
	json_array_foreach(outputs, i, o) {
		if (!json_is_true(json_object_get(o, "exists"))) {
			end_with(c, "failed", "done, but declared output %s %s", json_string_value(json_object_get(o, "path")),
			         c->dry_run ? "was not written" : "does not exist");
			return;
		}
	}
	end_with(c, "completed", NULL);
}

/* The calls still allowed to new requests: the budget left minus what
 * requests in flight may still spend. */
static long calls_available(const struct core *c)
{
	return c->m->max_model_calls - c->model_calls - c->reserved_calls;
}

/* One request to sfma-model, not waited for (PIPELINE.md: several may be
 * in flight, replies come by id in any order). Returns its id. */
static long send_model(struct core *c, const char *purpose, const char *cls, const char *system,
                       const json_t *messages, int tools, const char *task_id, const char *avoid, long allowance)
{
	long id = ++c->next_request;
	/* The work requests' system prompt, a few kilobytes, is one string
	 * shared by all of them rather than copied (and checked) into each. */
	json_t *sys = system == c->system && c->system_json ? json_incref(c->system_json) : json_string(system);
	json_t *req = json_pack("{s:I, s:o, s:O, s:s, s:I, s:b, s:s}", "id", (json_int_t)id, "system", sys,
	                        "messages", messages, "class", cls, "callsLeft", (json_int_t)allowance, "tools", tools,
	                        "purpose", purpose);
	json_object_set_new(req, "task", task_id ? json_string(task_id) : json_null());
	if (avoid && *avoid)
		json_object_set_new(req, "avoid", json_string(avoid));
	if (c->endpoints && id == 1)
		json_object_set(req, "state", c->endpoints);
	if (json_array_size(c->feedback)) {
		json_object_set_new(req, "verdicts", c->feedback);
		c->feedback = json_array();
	}
	fx_push(c, CORE_MODEL, req, NULL, 0);
	c->reserved_calls += allowance;
	return id;
}

/* The next slot of loop k's judgment to ask: without a final reply and
 * without a request in flight. */
static void send_judge(struct core *c, int k, long allowance)
{
	struct loop *L = &c->loops[k];
	int i = 0, n = (int)json_array_size(L->judge_replies);
	while (i < n && (L->judge_ids[i] || !json_is_null(json_array_get(L->judge_replies, (size_t)i))))
		i++;
	if (i == n)
		return;
	json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", L->judge_msg);
	long id = send_model(c, "judge", "reasoning", soft_judge_prompt, msgs, 0, task_id_of(c, L->task),
	                     L->judge_avoid[i], allowance);
	json_decref(msgs);
	L->judge_ids[i] = id;
	L->judge_allow[i] = allowance;
	L->judge_attempts[i]++;
	L->judges_to_send--;
	L->judges_out++;
}

/* What the task's judgment comes to, from the final reply of each slot:
 * the majority of the valid judgments (a tie fails); none valid: unjudged. */
struct soft_outcome {
	json_t *judgments, *evidence;
	const char *judge;
	int independent, valid, pass;
	const char *reason;
	struct soft_tally tally;
};

static void soft_outcome(struct core *c, struct loop *L, struct soft_outcome *o)
{
	int n = (int)json_array_size(L->judge_replies);
	*o = (struct soft_outcome){.judgments = json_array(), .independent = 1};
	attach_evidence(&o->evidence, "request", L->judge_msg_ref ? json_incref(L->judge_msg_ref) : NULL);
	for (int i = 0; i < n; i++) {
		json_t *reply = json_array_get(L->judge_replies, (size_t)i);
		const char *text = json_is_true(json_object_get(reply, "ok"))
		                       ? json_string_value(json_object_get(reply, "text")) : NULL;
		const char *ep = json_string_value(json_object_get(reply, "endpoint"));
		int pass;
		char *why;
		int valid = soft_judgment_parse(text, &pass, &why);
		if (json_is_false(json_object_get(reply, "independent")))
			o->independent = 0;
		if (!o->judge)
			o->judge = ep;
		json_t *j = json_pack("{s:s?, s:b, s:s}", "judge", ep, "pass", pass, "reason", why);
		if (L->judge_attempts[i] > 1)
			json_object_set_new(j, "attempts", json_integer(L->judge_attempts[i]));
		json_array_append_new(o->judgments, j);
		char name[16];
		snprintf(name, sizeof name, i ? "reply%d" : "reply", i + 1);
		if (text)
			attach_evidence(&o->evidence, name, evidence(c, text, strlen(text)));
		if (valid) {
			o->valid++;
			soft_tally_add(&o->tally, pass, why);
		} else {
			free(why);
		}
	}
	if (o->valid)
		o->pass = soft_tally_verdict(&o->tally, &o->reason);
	else
		o->reason = REASON_UNJUDGED;
}

/* Every slot of loop k's judgment has its final reply: a soft verdict
 * entry records what they come to, and the task passes, goes back on the
 * blackboard once with the reason, fails the run - or, unjudged, stands
 * as it is: a judge that cannot answer is not evidence against the work,
 * nor a pass for certification. */
static void conclude_soft(struct core *c, int k)
{
	use_loop(c, k);
	struct loop *L = &c->loops[k];
	struct bb_task *t = &c->tasks[L->task];
	struct soft_outcome o;
	soft_outcome(c, L, &o);
	json_t *refs = json_deep_copy(L->entries);
	json_array_extend(refs, L->judge_calls);
	const char *tid = task_id_of(c, L->task);
	json_t *v = json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "tier", "soft", "reason", o.reason, "task", tid,
	                      "judge", o.judge ? o.judge : "", "producer", L->producer, "judgments", o.judgments);
	json_object_set_new(v, "pass", o.valid ? json_boolean(o.pass) : json_null());
	if (!o.valid)
		json_object_set_new(v, "unjudged", json_true());
	if (!o.independent)
		json_object_set_new(v, "independent", json_false());
	emit(c, "verdict", v, o.evidence, refs, NULL);
	c->soft_judged++;
	if (!o.valid) {
		c->soft_unjudged++;
		progress(c, "soft tier: task %s unjudged: %s", tid ? tid : "?", o.reason);
	} else {
		/* The producer's pass rate per class learns from it (sfma-model). */
		json_array_append_new(c->feedback, json_pack("{s:s, s:O, s:b}", "endpoint", L->producer, "class",
		                                             json_object_get(t->def, "class"), "pass", o.pass));
		progress(c, "soft tier: task %s %s: %s", tid ? tid : "?", o.pass ? "pass" : "fail", o.reason);
		c->soft_passed += o.pass;
	}
	if (!o.valid || o.pass) {
		t->state = TASK_PASSED;
	} else if (t->attempts < 2) {
		t->state = TASK_PENDING;
		t->not_loop = k + 1;
		free(t->clarification);
		t->clarification = xstrdup(o.reason);
		emit_at(c, 0, "clarification", json_pack("{s:s, s:s, s:s}", "source", "soft-tier", "task", tid, "text",
		                                         o.reason), NULL, NULL, NULL);
	} else {
		t->state = TASK_FAILED;
		end_with(c, "failed", "task %s failed the soft tier: %s", tid, o.reason);
	}
	soft_tally_free(&o.tally);
	L->judging = 0;
	L->task = -1;
	json_array_clear(L->entries);
}

void take_judge_reply(struct core *c, int k, int i, json_t *reply)
{
	struct loop *L = &c->loops[k];
	use_loop(c, k);
	L->judge_ids[i] = 0;
	const char *text = json_is_true(json_object_get(reply, "ok")) ? json_string_value(json_object_get(reply, "text"))
	                                                             : NULL;
	json_t *ref = text ? evidence(c, text, strlen(text)) : NULL;
	json_t *extra = json_pack("{s:s, s:s?}", "purpose", "judge", "task", task_id_of(c, L->task));
	trace_calls(c, reply, "reasoning", L->judge_msg_ref, ref, 0, extra, L->judge_calls);
	json_decref(extra);
	json_decref(ref);
	int pass;
	char *why;
	int valid = soft_judgment_parse(text, &pass, &why);
	free(why);
	if (!valid && L->judge_attempts[i] < JUDGE_ATTEMPTS) {
		/* Asked again: first of another usable endpoint than the one that
		 * answered so, then once more as at first. */
		const char *ep = json_string_value(json_object_get(reply, "endpoint"));
		snprintf(L->judge_avoid[i], sizeof L->judge_avoid[i], "%s",
		         L->judge_attempts[i] == 1 && ep ? ep : L->producer);
		L->judges_to_send++;
		json_decref(reply);
	} else {
		json_array_set_new(L->judge_replies, (size_t)i, reply);
	}
	if (!L->judges_to_send && !L->judges_out)
		conclude_soft(c, k);
}

/* ---- the criteria judgment --------------------------------------------- */

static int criteria_count(const struct core *c)
{
	return (int)json_array_size(json_object_get(c->candidate, "successCriteria"));
}

static void send_criteria(struct core *c, long allowance)
{
	json_t *tasks = json_array();
	for (size_t i = 0; i < c->n_tasks; i++)
		json_array_append_new(tasks, json_pack("{s:O, s:b}", "task", c->tasks[i].def, "pass",
		                                       c->tasks[i].state == TASK_PASSED));
	json_t *what = json_pack("{s:o, s:O, s:o, s:O}", "mission", mission_of(c), "successCriteria",
	                         json_object_get(c->candidate, "successCriteria"), "tasks", tasks, "outputs",
	                         c->last_view ? c->last_view : json_null());
	struct buf b = {0};
	canon_dump(what, &b, NULL);
	json_decref(what);
	json_decref(c->criteria_msg_ref);
	c->criteria_msg_ref = evidence(c, b.p, b.len);
	json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", b.p);
	buf_free(&b);
	c->criteria_id = send_model(c, "criteria", "reasoning", soft_criteria_prompt, msgs, 0, NULL, NULL, allowance);
	c->criteria_allow = allowance;
	json_decref(msgs);
}

/* criteria[] of the record from the judgment's reply: each criterion's
 * pass and evidence (entry ids); a reply that does not say fails it. */
void take_criteria(struct core *c, json_t *reply)
{
	use_loop(c, 0);
	json_t *ids = json_array(), *evidence_obj = NULL;
	const char *text = json_is_true(json_object_get(reply, "ok")) ? json_string_value(json_object_get(reply, "text"))
	                                                             : NULL;
	json_t *reply_ref = text ? evidence(c, text, strlen(text)) : NULL;
	json_t *extra = json_pack("{s:s}", "purpose", "criteria");
	trace_calls(c, reply, "reasoning", c->criteria_msg_ref, reply_ref, 0, extra, ids);
	json_decref(extra);
	json_t *v = text ? parse_reply(text) : NULL, *said = json_object_get(v, "criteria");
	json_t *out = json_array();
	/* The array-form mock's own answer (no call) passes every criterion
	 * (PIPELINE.md, sfma-model), whatever list it carries. */
	const char *ep = json_string_value(json_object_get(reply, "endpoint"));
	int mock = !json_array_size(json_object_get(reply, "calls")) && ep && strcmp(ep, MOCK_JUDGE) == 0;
	size_t i;
	json_t *cr;
	int all = 1;
	json_array_foreach(json_object_get(c->candidate, "successCriteria"), i, cr) {
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
		json_array_append_new(out, json_pack("{s:O, s:b, s:o}", "criterion", cr, "pass", pass, "evidence",
		                                     evidence_ids));
	}
	json_decref(v);
	attach_evidence(&evidence_obj, "request", c->criteria_msg_ref ? json_incref(c->criteria_msg_ref) : NULL);
	attach_evidence(&evidence_obj, "reply", reply_ref);
	emit_at(c, 0, "verdict", json_pack("{s:s, s:b, s:s, s:O}", "tier", "criteria", "pass", all, "judge",
	                                   ep ? ep : "", "criteria", out), evidence_obj, ids, NULL);
	json_decref(c->criteria);
	c->criteria = out;
	json_decref(c->criteria_msg_ref);
	c->criteria_msg_ref = NULL;
	json_decref(reply);
}

/* ---- the dispatch ------------------------------------------------------------ */

static int wants_work(const struct core *c, int k)
{
	const struct loop *L = &c->loops[k];
	if (L->req_id || L->judging)
		return 0;
	return c->candidate ? L->task >= 0 : k == 0;
}

static int work_finished(const struct core *c)
{
	if (!c->candidate)
		return 0;
	for (size_t i = 0; i < c->n_tasks; i++)
		if (c->tasks[i].state == TASK_PENDING || c->tasks[i].state == TASK_ACTIVE)
			return 0;
	for (int k = 0; k < c->n_loops; k++)
		if (c->loops[k].judging)
			return 0;
	return 1;
}

static const char *signal_name(int sig)
{
	return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM";
}

static void halt_operator_signal(struct core *c, int sig)
{
	end_halted(c, "halted-operator", signal_name(sig), "halted by %s", signal_name(sig));
}

static void halt_max_seconds(struct core *c)
{
	end_halted(c, "halted-budget", "maxSeconds", "maxSeconds (%ld) reached", c->m->max_seconds);
}

/* The run's stops that come before any request, in the order a run has
 * always checked them. 1 when the run stops. */
static int stops(struct core *c, const struct core_facts *f)
{
	if (f->halt_signal)
		halt_operator_signal(c, f->halt_signal);
	else if (f->halt_file)
		end_halted(c, "halted-operator", "HALT file", "halted by .sfma/HALT");
	return c->verdict != NULL;
}

/* The request must fit in maxContextBytes: compact the conversation if it
 * does not (a `compaction` entry), fail the run if it cannot. 0 or -1. */
static int fit_context(struct core *c)
{
	struct conv *cv = cur_conv(c);
	struct context_fit fit;
	int rc = context_fit(c->system, cv->messages, cv->refs, c->candidate ? c->tool_defs : NULL,
	                     (size_t)c->m->max_context_bytes, cv->candidate_msg, &fit);
	if (rc != 0 && json_array_size(fit.elided)) {
		emit(c, "compaction", json_pack("{s:I, s:I, s:O}", "beforeBytes", (json_int_t)fit.before, "afterBytes",
		                                (json_int_t)fit.after, "elided", fit.elided), NULL, NULL, NULL);
		progress(c, "context compacted: %zu -> %zu bytes, %zu elided", fit.before, fit.after,
		         json_array_size(fit.elided));
	}
	if (rc < 0)
		end_with(c, "failed", CONTEXT_CANNOT_FIT, fit.after, c->m->max_context_bytes);
	json_decref(fit.elided);
	return rc < 0 ? -1 : 0;
}

/* The current loop's next work request. 0 or -1 (the verdict set). */
static int send_work(struct core *c, long allowance)
{
	struct loop *L = &c->loops[c->cur];
	if (fit_context(c) < 0)
		return -1;
	const char *task_id = task_id_of(c, L->task);
	const char *cls = "reasoning";
	if (c->candidate) {
		const char *tc = L->task >= 0 ? json_string_value(json_object_get(c->tasks[L->task].def, "class")) : NULL;
		cls = tc && strcmp(tc, "reasoning") == 0 ? "reasoning" : "mechanical";
	}
	long id = send_model(c, c->candidate ? "work" : "bootstrap", cls, c->system, L->c.messages, c->candidate != NULL,
	                     task_id, NULL, allowance);
	L->c.message_sent = 1;
	L->req_id = id;
	L->allowance = allowance;
	c->work_in_flight++;
	return 0;
}

/* Send every request that can go now: judgments first, then each loop's
 * next work request, sharing the calls left among them. */
static void send_requests(struct core *c, const struct core_facts *f)
{
	assign_tasks(c);
	int wanting = 0, judges = 0;
	for (int k = 0; k < c->n_loops; k++) {
		wanting += wants_work(c, k);
		judges += c->loops[k].judges_to_send;
	}
	if ((!wanting && !judges) || stops(c, f))
		return;
	/* The cost ceiling (§17): no request starts once the calls so far
	 * have cost it (a price unknown is refused by the manifest). */
	if (c->m->max_cost_usd > 0 && c->usage.cost_usd >= c->m->max_cost_usd) {
		end_halted(c, "halted-budget", "maxCostUsd", "maxCostUsd (%g) reached: %.6f USD spent", c->m->max_cost_usd,
		           c->usage.cost_usd);
		return;
	}
	/* PIPELINE.md: at most maxLoops + softCalls requests in flight */
	long limit = c->n_loops + c->m->tuning.soft_calls, out = c->work_in_flight + (c->criteria_id != 0);
	for (int k = 0; k < c->n_loops; k++)
		out += c->loops[k].judges_out;
	for (int k = 0; k < c->n_loops && !c->verdict; k++) {
		while (c->loops[k].judges_to_send && out < limit) {
			long avail = calls_available(c);
			if (avail <= 0)
				break;
			out++;
			long share = avail / (wanting + judges);
			send_judge(c, k, share > 0 ? share : 1);
			judges--;
		}
	}
	for (int k = 0; k < c->n_loops && !c->verdict; k++) {
		if (!wants_work(c, k))
			continue;
		if (c->turns + c->work_in_flight >= c->m->max_turns || out >= limit)
			break;
		if (f->elapsed_ms >= budget_ms(c)) {
			halt_max_seconds(c);
			break;
		}
		long avail = calls_available(c);
		if (avail <= 0)
			break;
		long share = avail / (wanting + judges);
		use_loop(c, k);
		if (send_work(c, share > 0 ? share : 1) < 0)
			break;
		out++;
		wanting--;
	}
}

void core_dispatch(struct core *c, const struct core_facts *f)
{
	if (c->verdict || c->pending.what != CORE_WAIT_NONE)
		return;
	send_requests(c, f);
	if (c->verdict || core_in_flight(c))
		return;
	/* Nothing out and nothing that could go: the end of the work. */
	if (work_finished(c)) {
		long avail = calls_available(c);
		if (!c->criteria_asked && criteria_count(c) && avail > 0) {
			c->criteria_asked = 1;
			send_criteria(c, avail);
			return;
		}
		judge_done(c, c->last_outputs);
	} else if (c->turns >= c->m->max_turns) {
		end_halted(c, "halted-maxTurns", "maxTurns", "maxTurns (%ld) reached", c->m->max_turns);
	} else if (calls_available(c) <= 0) {
		end_halted(c, "halted-budget", "maxModelCalls", "maxModelCalls (%ld) spent", c->m->max_model_calls);
	} else {
		end_with(c, "failed", "no task left to work on and the work unfinished");
	}
}

/* A judge request's reply taken: its calls and slot freed, the reply
 * judged (drained once the run has a verdict). */
static void take_one_judge(struct core *c, int k, int i, json_t *reply)
{
	struct loop *L = &c->loops[k];
	c->reserved_calls -= L->judge_allow[i];
	L->judges_out--;
	if (c->verdict)
		drain_reply(c, k, reply, 0);
	else
		take_judge_reply(c, k, i, reply);
}

/* Loop k's held zero-call judge replies, taken in slot order. */
static void take_held_judges(struct core *c, int k)
{
	struct loop *L = &c->loops[k];
	for (int i = 0; i < SOFT_CALLS_MAX && L->judges_held; i++) {
		json_t *reply = L->judge_held[i];
		if (!reply)
			continue;
		L->judge_held[i] = NULL;
		L->judges_held--;
		take_one_judge(c, k, i, reply);
	}
}

/* The loop, and judge index, a reply belongs to; -1 when none. */
static int owner_of(const struct core *c, long id, int *judge_i)
{
	*judge_i = -1;
	for (int k = 0; k < c->n_loops; k++) {
		if (c->loops[k].req_id == id)
			return k;
		for (int i = 0; i < SOFT_CALLS_MAX; i++)
			if (c->loops[k].judges_out && c->loops[k].judge_ids[i] == id && !c->loops[k].judge_held[i] &&
			    json_is_null(json_array_get(c->loops[k].judge_replies, (size_t)i))) {
				*judge_i = i;
				return k;
			}
	}
	return -1;
}

void core_model_reply(struct core *c, json_t *reply, const struct core_facts *f)
{
	json_t *idv = json_object_get(reply, "id");
	double idd = json_is_number(idv) ? json_number_value(idv) : -1;
	long id = idd >= 1 && idd <= 9007199254740991.0 && idd == (double)(long)idd ? (long)idd : -1;
	if (id > 0 && id == c->criteria_id) {
		c->criteria_id = 0;
		c->reserved_calls -= c->criteria_allow;
		if (c->verdict)
			drain_reply(c, 0, reply, 0);
		else
			take_criteria(c, reply);
		return;
	}
	int judge_i, owner = id > 0 ? owner_of(c, id, &judge_i) : -1;
	if (owner < 0) {
		json_decref(reply);
		if (!c->verdict)
			end_with(c, "failed", "sfma-model answered request %ld, which is not in flight", id);
		return;
	}
	struct loop *L = &c->loops[owner];
	if (judge_i >= 0) {
		json_t *calls = json_object_get(reply, "calls");
		if (!c->verdict && !json_array_size(calls)) {
			/* No call, no entry: held until the loop's last judge
			 * request is answered, so that the replay, which meets
			 * such replies only at the soft verdict they lead to,
			 * takes them at the same point. */
			L->judge_held[judge_i] = reply;
			L->judges_held++;
			if (L->judges_out == L->judges_held)
				take_held_judges(c, owner);
			return;
		}
		if (c->verdict)
			take_held_judges(c, owner);
		take_one_judge(c, owner, judge_i, reply);
		if (!c->verdict && L->judges_held && L->judges_out == L->judges_held)
			take_held_judges(c, owner);
		return;
	}
	c->reserved_calls -= L->allowance;
	c->work_in_flight--;
	L->req_id = 0;
	if (c->verdict) {
		drain_reply(c, owner, reply, 1);
		return;
	}
	use_loop(c, owner);
	take_work_reply(c, reply, f);
}

void core_stop(struct core *c, enum core_stop_why why, const char *text, const struct core_facts *f)
{
	/* The request a stop interrupted is the current one: the answer a
	 * tool call waited for, else the first loop's work request. */
	if (c->pending.what != CORE_WAIT_NONE) {
		use_loop(c, c->pending.loop);
		json_decref(c->pending.call);
		c->pending = (struct pending){0};
	} else {
		for (int k = 0; k < c->n_loops; k++)
			if (c->loops[k].req_id) {
				use_loop(c, k);
				break;
			}
	}
	int completed = c->verdict && strcmp(c->verdict, "completed") == 0;
	if (c->verdict && !(completed && why == CORE_STOP_FAILED))
		return;
	if (completed)
		c->error[0] = '\0';
	if (why == CORE_STOP_SIGNAL)
		halt_operator_signal(c, f->halt_signal ? f->halt_signal : SIGTERM);
	else if (why == CORE_STOP_TIMEOUT)
		halt_max_seconds(c);
	else
		end_with(c, "failed", "%s", text && *text ? text : "run stopped");
}

void loops_free(struct core *c)
{
	for (int k = 0; c->loops && k < c->n_loops; k++) {
		struct loop *L = &c->loops[k];
		json_decref(L->c.messages);
		json_decref(L->c.refs);
		json_decref(L->c.native_calls);
		json_decref(L->c.message_ref);
		json_decref(L->entries);
		json_decref(L->judge_replies);
		for (int i = 0; i < SOFT_CALLS_MAX; i++)
			json_decref(L->judge_held[i]);
		json_decref(L->judge_msg_ref);
		json_decref(L->judge_calls);
		free(L->judge_msg);
	}
	free(c->loops);
	c->loops = NULL;
	for (size_t i = 0; i < c->n_tasks; i++) {
		json_decref(c->tasks[i].def);
		free(c->tasks[i].clarification);
	}
	free(c->tasks);
	c->tasks = NULL;
	c->n_tasks = 0;
}
