/* core.c - the decision core's state, its effects and the run's frame:
 * the events the trace gets, the first entries of a run, its close and
 * the body of its record (core.h). */
#include "core_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "canon.h"
#include "chain.h"
#include "confine.h"
#include "errors.h"
#include "evidence.h"
#include "observed.h"
#include "protocol.h"
#include "sha.h"
#include "tools.h"

struct core *core_new(const struct core_config *cfg)
{
	struct core *c = xcalloc(1, sizeof *c);
	c->m = cfg->m;
	c->dry_run = cfg->dry_run;
	c->wire = cfg->wire;
	c->wire_arg = cfg->wire_arg;
	c->task = cfg->task ? xstrdup(cfg->task) : NULL;
	c->clarification = cfg->clarification ? xstrdup(cfg->clarification) : NULL;
	c->lifecycle = json_array();
	c->mutation_refs = json_array();
	c->written = json_object();
	c->feedback = json_array();
	c->n_loops = (int)(c->m->max_loops > 0 ? c->m->max_loops : 1);
	c->loops = xcalloc((size_t)c->n_loops, sizeof *c->loops);
	for (int k = 0; k < c->n_loops; k++) {
		struct loop *L = &c->loops[k];
		L->task = -1;
		L->entries = json_array();
		L->c.messages = json_array();
		L->c.refs = json_array();
		L->c.candidate_msg = -1;
	}
	return c;
}

void core_free(struct core *c)
{
	if (!c)
		return;
	while (c->fx_head < c->fx_n)
		core_fx_free(c->fx[c->fx_head++]);
	free(c->fx);
	free(c->task);
	free(c->clarification);
	free(c->system);
	json_decref(c->system_json);
	free(c->inbox);
	json_decref(c->lifecycle);
	json_decref(c->prompt_ref);
	json_decref(c->tool_defs);
	json_decref(c->candidate);
	json_decref(c->endpoints);
	json_decref(c->feedback);
	json_decref(c->mutation_refs);
	json_decref(c->written);
	json_decref(c->summary);
	json_decref(c->last_outputs);
	json_decref(c->last_view);
	json_decref(c->criteria);
	json_decref(c->criteria_msg_ref);
	json_decref(c->pending.call);
	loops_free(c);
	free(c);
}

/* ---- effects ------------------------------------------------------------ */

void fx_push(struct core *c, enum core_fx_kind kind, json_t *v, char *data, size_t n)
{
	if (c->fx_n == c->fx_cap) {
		if (c->fx_head > 0) {
			memmove(c->fx, c->fx + c->fx_head, (c->fx_n - c->fx_head) * sizeof *c->fx);
			c->fx_n -= c->fx_head;
			c->fx_head = 0;
		}
		if (c->fx_n == c->fx_cap) {
			c->fx_cap = c->fx_cap ? 2 * c->fx_cap : 32;
			c->fx = xrealloc(c->fx, c->fx_cap * sizeof *c->fx);
		}
	}
	struct core_fx *fx = xcalloc(1, sizeof *fx);
	fx->kind = kind;
	fx->v = v;
	fx->data = data;
	fx->n = n;
	c->fx[c->fx_n++] = fx;
}

struct core_fx *core_next(struct core *c)
{
	if (c->fx_head == c->fx_n) {
		c->fx_head = c->fx_n = 0;
		return NULL;
	}
	return c->fx[c->fx_head++];
}

void core_fx_free(struct core_fx *fx)
{
	if (!fx)
		return;
	json_decref(fx->v);
	free(fx->data);
	free(fx);
}

struct conv *cur_conv(struct core *c)
{
	return &c->loops[c->cur].c;
}

/* The event sfma-chain makes an entry of (PIPELINE.md, sfma-chain). The
 * entry's seq is the one after the last: the core knows every id once the
 * run's clock anchor has its seq. */
const char *emit_at(struct core *c, int loop, const char *kind, json_t *data, json_t *evidence_obj, json_t *refs,
                    const char *cls)
{
	json_t *ev = json_pack("{s:s, s:o, s:i}", "kind", kind, "data", data, "loop", loop);
	if (evidence_obj)
		json_object_set_new(ev, EVIDENCE_MEMBER, evidence_obj);
	if (refs)
		json_object_set_new(ev, "refs", refs);
	if (cls)
		json_object_set_new(ev, "class", json_string(cls));
	fx_push(c, CORE_EVENT, ev, NULL, 0);
	struct core_fx *fx = c->fx[c->fx_n - 1];
	if (c->next_seq > 0) {
		fx->seq = c->next_seq++;
		chain_entry_id(fx->id, kind, fx->seq);
		if (c->first_seq == 0)
			c->first_seq = fx->seq;
		c->last_seq = fx->seq;
		json_t *wire = c->wire ? c->wire(c->wire_arg, fx->seq) : NULL;
		if (wire)
			json_object_set_new(ev, OBSERVED_WIRE, wire);
	}
	return fx->id;
}

/* At the current loop: its number, or 0 before a loop has a task (the
 * genesis conversation is loop 1's, as a run has always recorded it). */
const char *emit(struct core *c, const char *kind, json_t *data, json_t *evidence_obj, json_t *refs, const char *cls)
{
	return emit_at(c, c->cur + 1, kind, data, evidence_obj, refs, cls);
}

json_t *evidence(struct core *c, const void *data, size_t n)
{
	char hex[SHA256_HEX_LEN + 1];
	sha256_hex(data, n, hex);
	char *copy = xmalloc(n + 1);
	memcpy(copy, data, n);
	copy[n] = '\0';
	fx_push(c, CORE_BLOB, NULL, copy, n);
	return json_pack("{s:s, s:I}", "sha256", hex, "bytes", (json_int_t)n);
}

void attach_evidence(json_t **evidence_obj, const char *name, json_t *ref)
{
	if (!ref)
		return;
	if (!*evidence_obj)
		*evidence_obj = json_object();
	json_object_set_new(*evidence_obj, name, ref);
}

void progress(struct core *c, const char *fmt, ...)
{
	struct buf b = {0};
	va_list ap;
	va_start(ap, fmt);
	char text[600];
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	buf_adds(&b, text);
	fx_push(c, CORE_PROGRESS, NULL, b.p, b.len);
}

static void set_error(struct core *c, const char *fmt, va_list ap)
{
	if (fmt && !c->error[0])
		vsnprintf(c->error, sizeof c->error, fmt, ap);
}

void end_with(struct core *c, const char *verdict, const char *fmt, ...)
{
	va_list ap;
	c->verdict = verdict;
	va_start(ap, fmt);
	set_error(c, fmt, ap);
	va_end(ap);
}

void end_halted(struct core *c, const char *verdict, const char *trigger, const char *fmt, ...)
{
	va_list ap;
	c->verdict = verdict;
	c->halt_trigger = trigger;
	va_start(ap, fmt);
	set_error(c, fmt, ap);
	va_end(ap);
}

static void lifecycle_with(struct core *c, const char *to, json_t *extra)
{
	size_t n = json_array_size(c->lifecycle);
	json_t *from = n ? json_incref(json_array_get(c->lifecycle, n - 1)) : json_null();
	json_t *data = json_pack("{s:o, s:s}", "from", from, "to", to);
	if (extra)
		json_object_update(data, extra);
	json_decref(extra);
	emit_at(c, 0, "lifecycle", data, NULL, NULL, NULL);
	json_array_append_new(c->lifecycle, json_string(to));
}

void lifecycle(struct core *c, const char *to)
{
	lifecycle_with(c, to, NULL);
}

void refused(struct core *c, const char *reason)
{
	c->loops[c->cur].hard_failures++;
	if (c->hard_failures++ == 0)
		snprintf(c->first_refusal, sizeof c->first_refusal, "%s", reason ? reason : "refused");
}

int64_t budget_ms(const struct core *c)
{
	return (int64_t)c->m->max_seconds * 1000;
}

/* ---- the run's frame ---------------------------------------------------- */

static void clock_anchor(struct core *c, int64_t wall_ms)
{
	emit_at(c, 0, "clock-anchor", json_pack("{s:f, s:s}", "wallMs", (double)wall_ms, "source", "system-wall"),
	        NULL, NULL, NULL);
}

void core_open(struct core *c, int64_t wall_ms)
{
	clock_anchor(c, wall_ms);
}

/* The genesis prompt and the first message: the candidate request, or a
 * pinned run's certified candidate, and the operator's inbox. */
static void genesis(struct core *c)
{
	c->system = genesis_prompt(c->m, c->task, c->dry_run, c->pinned_run);
	c->system_json = json_string(c->system);
	struct buf first = {0};
	if (c->pinned_run) {
		struct buf cand = {0};
		canon_dump(c->candidate, &cand, NULL);
		buf_printf(&first, "Pinned configuration (certified, replayed): %s\nBegin: one tool call per turn.\n",
		           cand.p);
		buf_free(&cand);
	} else {
		buf_adds(&first, FIRST_MESSAGE);
	}
	if (c->inbox && *c->inbox)
		buf_printf(&first, INBOX_HEADER "%s", c->inbox);
	c->prompt_ref = evidence(c, c->system, strlen(c->system));
	/* One table for every run of the process (a replay has many): the
	 * core only reads it. Made once, kept to the end. */
	static json_t *defs;
	if (!defs)
		defs = tools_definitions();
	c->tool_defs = json_incref(defs);
	say_user(c, first.p);
	buf_free(&first);
}

void core_begin(struct core *c, const struct core_begin *b)
{
	if (b->anchor_seq > 0) {
		c->first_seq = c->last_seq = b->anchor_seq;
		c->next_seq = b->anchor_seq + 1;
	}
	if (json_is_object(b->endpoints) && json_object_size(b->endpoints))
		c->endpoints = json_deep_copy(b->endpoints);
	c->pinned_run = json_is_object(b->pinned);
	if (c->pinned_run)
		c->candidate = json_deep_copy(b->pinned);
	/* The caller's trace the run joins, on the run's first lifecycle
	 * (sfma export parents the run there). */
	lifecycle_with(c, c->pinned_run ? "pinned-replay" : "probation",
	               b->traceparent ? json_pack("{s:s}", "traceparent", b->traceparent) : NULL);
	/* What each process of the run has in force, as it reported it; a
	 * manifest that requires confinement refuses the run at the first
	 * that lacks any of it (sfma-manifest(5), requireConfinement). */
	size_t k;
	json_t *confined;
	json_array_foreach(b->confinement, k, confined) {
		const char *what;
		emit_at(c, 0, "confinement", json_deep_copy(confined), NULL, NULL, NULL);
		if (c->m->require_confinement && confine_lacks(confined, &what)) {
			const char *stage = json_string_value(json_object_get(confined, "stage"));
			end_with(c, "failed", "requireConfinement: %s: %s", stage ? stage : "a stage", what);
		}
	}
	/* An operator's `sfma endpoints --reset` since the last run: recorded
	 * once (sfma-model keeps no reset mark in the state it hands back). */
	json_t *resets = json_object();
	const char *name;
	json_t *st;
	json_object_foreach((json_t *)b->endpoints, name, st)
		if (json_is_object(json_object_get(st, "reset")))
			json_object_set(resets, name, json_object_get(st, "reset"));
	if (json_object_size(resets))
		emit_at(c, 0, "weight", json_pack("{s:O}", "reset", resets), NULL, NULL, NULL);
	json_decref(resets);
	c->stores_ok = b->stores != NULL;
	if (!b->stores) {
		end_with(c, "failed", "memory store: %s", b->store_error ? b->store_error : "unavailable");
	} else {
		size_t i;
		json_t *s;
		json_array_foreach(b->stores, i, s)
			emit_at(c, 0, "store", json_deep_copy(s), NULL, NULL, NULL);
	}
	struct buf inbox = {0};
	buf_adds(&inbox, "");
	size_t i;
	json_t *msg;
	json_array_foreach(b->inbox, i, msg) {
		const char *file = json_string_value(json_object_get(msg, "file"));
		json_t *text = json_object_get(msg, "text");
		if (!file || !json_is_string(text))
			continue;
		emit_at(c, 0, "message", json_pack("{s:s, s:s, s:O}", "dir", "in", "file", file, "text", text), NULL,
		        NULL, NULL);
		buf_printf(&inbox, "- (%s) %s\n", file, json_string_value(text));
	}
	c->inbox = inbox.p;
	if (c->clarification)
		emit_at(c, 0, "clarification", json_pack("{s:s, s:s}", "source", "--task", "text", c->clarification),
		        NULL, NULL, NULL);
	genesis(c);
	if (c->candidate)
		blackboard_start(c);
}

void core_set_endpoints(struct core *c, const json_t *endpoints)
{
	json_decref(c->endpoints);
	c->endpoints = json_is_object(endpoints) ? json_deep_copy(endpoints) : NULL;
}

void core_finish(struct core *c, const struct core_facts *f)
{
	if (!c->verdict)
		end_with(c, "failed", "run ended without a verdict");
	if (strcmp(c->verdict, "completed") != 0) {
		int halt = strncmp(c->verdict, "halted", 6) == 0;
		/* A halt names its cause, as the earlier runner's traces do (the
		 * verdict is the closing lifecycle's and the record's). */
		json_t *data = json_pack("{s:s}", halt ? "halt" : "error",
		                         halt ? (c->halt_trigger ? c->halt_trigger : c->verdict) : c->error);
		if (halt && c->halt_trigger)
			json_object_set_new(data, "trigger", json_string(c->halt_trigger));
		if (halt && c->error[0])
			json_object_set_new(data, "reason", json_string(c->error));
		/* The host fact a time-budget halt rests on, which a replay takes
		 * from here, never from a clock: how long the run had taken. */
		if (halt && c->halt_trigger && strcmp(c->halt_trigger, "maxSeconds") == 0)
			json_object_set_new(data, "elapsedMs", json_integer((json_int_t)f->elapsed_ms));
		/* A request the stop interrupted: its message went out, and no
		 * call entry reports it. */
		json_t *ev = NULL;
		struct conv *cv = cur_conv(c);
		if (cv->message_sent && cv->message_ref) {
			attach_evidence(&ev, "message", json_incref(cv->message_ref));
			if (c->prompt_ref)
				attach_evidence(&ev, "prompt", json_incref(c->prompt_ref));
		}
		emit_at(c, 0, "result", data, ev, NULL, NULL);
	}
	if (c->endpoints)
		emit_at(c, 0, "weight", json_deep_copy(c->endpoints), NULL, NULL, NULL);
}

void core_close(struct core *c, const struct core_close *cl)
{
	if (cl->commit)
		emit_at(c, 0, "store", json_deep_copy(cl->commit), NULL, NULL, NULL);
	if (cl->certified)
		lifecycle(c, "certified");
	if (cl->demoted)
		lifecycle(c, "demoted");
	lifecycle(c, c->verdict);
	clock_anchor(c, cl->wall_ms);
}

json_t *core_record(const struct core *c, const struct core_record_host *h)
{
	json_t *criteria = json_array();
	size_t i;
	json_t *cr;
	/* Filled by the criteria judgment at the end of the work; null
	 * where the run never came to it. */
	if (c->criteria)
		json_array_extend(criteria, c->criteria);
	else
		json_array_foreach(c->candidate ? json_object_get(c->candidate, "successCriteria") : NULL, i, cr)
			json_array_append_new(criteria, json_pack("{s:O, s:n, s:[]}", "criterion", cr, "pass", "evidence"));
	json_t *body = json_object();
	json_object_set(body, "manifest", c->m->json);
	json_object_set_new(body, "genesisVersion", json_string(GENESIS_VERSION));
	/* Which runner made the record; covered by resultSha256 like every member. */
	json_object_set_new(body, "runnerVersion", json_string(h->runner_version));
	json_object_set(body, "bootstrap", c->candidate ? c->candidate : json_null());
	json_object_set(body, "lifecycle", c->lifecycle);
	json_object_set(body, "memory", (json_t *)h->memory);
	json_object_set(body, "outputs", (json_t *)h->outputs);
	json_object_set_new(body, "criteria", criteria);
	json_object_set_new(body, "weights", c->endpoints ? json_incref(c->endpoints) : json_object());
	json_object_set_new(body, "mutations", json_pack("{s:I, s:O}", "count",
	                    (json_int_t)json_array_size(c->mutation_refs), "refs", c->mutation_refs));
	json_object_set_new(body, "clock", json_pack("{s:f, s:f, s:s}", "firstSeq", c->first_seq,
	                    "lastSeq", c->last_seq, "anchorSource", "system-wall"));
	json_object_set_new(body, "trace", json_string(".sfma/trace.jsonl"));
	json_object_set_new(body, "dryRun", json_boolean(c->dry_run));
	json_object_set_new(body, "turns", json_integer(c->turns));
	json_object_set_new(body, "modelCalls", json_integer(c->model_calls));
	/* Tokens as the providers reported them, summed over the call entries. */
	json_object_set_new(body, "usage", usage_json(&c->usage));
	json_t *budget = json_pack("{s:I, s:I, s:I, s:I}",
	                           "maxModelCalls", (json_int_t)c->m->max_model_calls,
	                           "maxSeconds", (json_int_t)c->m->max_seconds,
	                           "maxLoops", (json_int_t)c->m->max_loops,
	                           "maxPendingTasks", (json_int_t)c->m->max_pending_tasks);
	if (c->m->max_tokens > 0)
		json_object_set_new(budget, "maxTokens", json_integer(c->m->max_tokens));
	json_object_set_new(body, "budget", budget);
	json_object_set_new(body, "hardTierFailures", json_integer(c->hard_failures));
	/* The acceptance checks (§16): how many, how many dones ran them, and
	 * whether the last did pass; null with none, or in a dry run. */
	json_object_set_new(body, "acceptance", json_pack("{s:I, s:I, s:o}", "commands",
	                    (json_int_t)c->m->n_acceptance, "attempts", (json_int_t)c->acceptance_rounds, "passed",
	                    c->m->n_acceptance && !c->dry_run ? json_boolean(c->acceptance_passed) : json_null()));
	/* What the model said it did: the done summary, or null without one. */
	json_object_set(body, "summary", c->summary ? c->summary : json_null());
	json_object_set_new(body, "verdict", json_string(c->verdict ? c->verdict : "failed"));
	if (c->error[0] && (!c->verdict || strcmp(c->verdict, "completed") != 0))
		json_object_set_new(body, "error", json_string(c->error));
	return body;
}

/* ---- what the core holds ----------------------------------------------- */

enum core_waiting core_waiting(const struct core *c)
{
	return c->pending.what;
}

int core_in_flight(const struct core *c)
{
	if (c->criteria_id)
		return 1;
	for (int k = 0; k < c->n_loops; k++)
		if (c->loops[k].req_id || c->loops[k].judges_out)
			return 1;
	return 0;
}

int core_over(const struct core *c)
{
	return c->verdict && !core_in_flight(c) && c->pending.what == CORE_WAIT_NONE;
}

long core_request_in_flight(const struct core *c)
{
	long lowest = 0;
	for (int k = 0; k < c->n_loops; k++)
		if (c->loops[k].req_id && (!lowest || c->loops[k].req_id < lowest))
			lowest = c->loops[k].req_id;
	return lowest;
}

static int id_cmp(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return x < y ? -1 : x > y;
}

size_t core_requests(const struct core *c, long *ids, size_t max)
{
	size_t n = 0;
	const char *purpose;
	int judge_i;
	long all[1 + 16 * (1 + SOFT_CALLS_MAX)];
	if (c->criteria_id)
		all[n++] = c->criteria_id;
	for (int k = 0; k < c->n_loops; k++) {
		if (c->loops[k].req_id)
			all[n++] = c->loops[k].req_id;
		for (int i = 0; i < SOFT_CALLS_MAX; i++)
			if (c->loops[k].judges_out && core_request_owner(c, c->loops[k].judge_ids[i], &purpose, &judge_i) == k + 1)
				all[n++] = c->loops[k].judge_ids[i];
	}
	qsort(all, n, sizeof *all, id_cmp);
	for (size_t i = 0; i < n && i < max; i++)
		ids[i] = all[i];
	return n;
}

int core_request_owner(const struct core *c, long id, const char **purpose, int *judge_index)
{
	*judge_index = -1;
	if (id > 0 && id == c->criteria_id) {
		*purpose = "criteria";
		return 0;
	}
	for (int k = 0; k < c->n_loops; k++) {
		const struct loop *L = &c->loops[k];
		if (L->req_id == id && id > 0) {
			*purpose = c->candidate ? "work" : "bootstrap";
			return k + 1;
		}
		for (int i = 0; L->judges_out && i < SOFT_CALLS_MAX; i++)
			if (L->judge_ids[i] == id && id > 0 && !L->judge_held[i] &&
			    json_is_null(json_array_get(L->judge_replies, (size_t)i))) {
				*purpose = "judge";
				*judge_index = i;
				return k + 1;
			}
	}
	return -1;
}

const char *core_verdict(const struct core *c) { return c->verdict; }
const char *core_error(const struct core *c) { return c->error; }
const char *core_halt_trigger(const struct core *c) { return c->halt_trigger; }
long core_turns(const struct core *c) { return c->turns; }
long core_model_calls(const struct core *c) { return c->model_calls; }
long core_hard_failures(const struct core *c) { return c->hard_failures; }
const char *core_first_refusal(const struct core *c) { return c->first_refusal; }
const json_t *core_candidate(const struct core *c) { return c->candidate; }
int core_pinned_run(const struct core *c) { return c->pinned_run; }
const json_t *core_summary(const struct core *c) { return c->summary; }
const json_t *core_endpoints(const struct core *c) { return c->endpoints; }
const json_t *core_written(const struct core *c) { return c->written; }
long core_soft_judged(const struct core *c) { return c->soft_judged; }
long core_soft_passed(const struct core *c) { return c->soft_passed; }
long core_soft_unjudged(const struct core *c) { return c->soft_unjudged; }
int core_acceptance_passed(const struct core *c)
{
	return c->m->n_acceptance && !c->dry_run ? c->acceptance_passed : -1;
}
double core_first_seq(const struct core *c) { return c->first_seq; }
double core_last_seq(const struct core *c) { return c->last_seq; }
