/* drive.c - one run, from its first entry to its seal: the I/O around the
 * decision core (lib/core.h). The core says what to do - store a blob,
 * append an entry, send a request, look at the outputs - and this file
 * does it and feeds back what the stages and the host answer, with the
 * facts of the moment (the clock, a halt). It decides nothing the core
 * decides; sfma-replay feeds the same core from the record. */
#include "plan.h"
#include "cli.h"
#include "clock.h"
#include "core.h"
#include "evidence.h"
#include "observed.h"
#include "traceparent.h"
#include "utf8.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct drive {
	struct manifest *m;
	struct core *core;
	int dry_run, progress;
	int64_t start_mono, deadline_mono;
	struct workspace ws;
	struct memory mem;
	int store_ok;              /* sfma-mem opened the store */
	json_t *git_store;         /* its git store's `store` entry data, as opened */
	char commit_sha[65];       /* the run's memory commit, "" if none */
	struct evidence_store *evidence; /* .sfma/evidence, opened once per run */
	char evidence_error[SFMA_ERR_MAX]; /* why it could not be opened */
	int trace_alive;
	json_t *confinement;             /* what each process reported (confined.c) */
	/* a failure met while carrying out effects, fed to the core once the
	 * queue is empty: the evidence store, the trace, a stage */
	int failed, blob_failed;
	char failure[SFMA_ERR_MAX];
	/* The lines crossed on the observed pipes (stage_wire): the records
	 * the next entry made takes (the core asks, wire_of), and the model
	 * requests' own, by request id, until the reply to each comes. */
	json_t *wire;
	json_t *request_wire;
};

/* ---- what the operator sees ---------------------------------------------- */

/* Model text reaches the operator's terminal here: control bytes (C0, DEL,
 * C1), bidi overrides and invalid UTF-8 are shown as \xNN, never sent. */
static void put_safely(const char *s, FILE *out)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	for (size_t i = 0; i < n;) {
		size_t len = p[i] < 0x80 ? 1 : utf8_seq(p + i, n - i);
		unsigned cp = p[i];
		if (len == 2)
			cp = (unsigned)(p[i] & 0x1f) << 6 | (p[i + 1] & 0x3f);
		else if (len == 3)
			cp = (unsigned)(p[i] & 0x0f) << 12 | (unsigned)(p[i + 1] & 0x3f) << 6 | (p[i + 2] & 0x3f);
		int unsafe = len == 0 || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) ||
		             (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
		if (len == 0)
			len = 1;
		for (size_t k = 0; k < len; k++)
			if (unsafe)
				fprintf(out, "\\x%02x", p[i + k]);
			else
				fputc(p[i + k], out);
		i += len;
	}
}

/* Progress for humans on stderr (--progress, or stderr a terminal):
 * "sfma-plan: +1.234s turn 2: ...", control bytes escaped. */
static void progress(const struct drive *d, const char *text)
{
	if (!d->progress)
		return;
	long long ms = (long long)(mono_ms() - d->start_mono);
	fprintf(stderr, "%s: +%lld.%03llds turn %ld: ", progname(), ms / 1000, ms % 1000,
	        d->core ? core_turns(d->core) : 0L);
	put_safely(text, stderr);
	fputc('\n', stderr);
	fflush(stderr);
}

static struct core_facts facts(const struct drive *d)
{
	return (struct core_facts){.elapsed_ms = mono_ms() - d->start_mono, .halt_signal = halt_signal,
	                           .halt_file = workspace_halt_file(&d->ws)};
}

/* The run's deadline as the stages take it: epoch milliseconds. */
static int64_t deadline_wall_ms(const struct drive *d)
{
	return wall_ms() + (d->deadline_mono - mono_ms());
}

/* The first failure met while carrying out effects (the rest follow from it). */
static void note_failure(struct drive *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_failure(struct drive *d, const char *fmt, ...)
{
	if (d->failed)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d->failure, sizeof d->failure, fmt, ap);
	va_end(ap);
	d->failed = 1;
	progress(d, d->failure);
}

/* The evidence store's messages mostly name it already ("evidence ..."):
 * the prefix the others need, so that none says it twice. */
static const char *evidence_prefix(const char *text)
{
	return strncmp(text, "evidence", 8) == 0 ? "" : "evidence: ";
}

/* ---- the lines an entry stands for ---------------------------------------- */

/* What the next entry made stands for (sfma-formats(5), The observed
 * chain): every line crossed since the last entry that took some. The
 * drive adds to it just before it feeds the input those lines carried
 * (a reply and its request, an exec answer and its command), so that the
 * first entry the core makes of that input holds them. */
static json_t *wire_of(void *arg, double seq)
{
	struct drive *d = arg;
	(void)seq;
	json_t *w = d->wire;
	d->wire = NULL;
	return w;
}

/* Add the records in w (consumed; NULL: none) to what the next entry takes. */
static void wire_add(struct drive *d, json_t *w)
{
	if (!w)
		return;
	if (!d->wire)
		d->wire = json_array();
	json_array_extend(d->wire, w);
	json_decref(w);
}

static void request_key(const json_t *id, char out[32])
{
	snprintf(out, 32, "%.0f", json_is_number(id) ? json_number_value(id) : -1.0);
}

/* A model request just sent: its line's record waits for its reply. */
static void request_sent(struct drive *d, const json_t *request)
{
	json_t *w = stage_wire(STAGE_MODEL), *r;
	size_t i;
	char key[32];
	request_key(json_object_get(request, "id"), key);
	json_array_foreach(w, i, r)
		if (ndjson_string_is(json_object_get(r, "dir"), "out"))
			json_object_set(d->request_wire, key, r);
		else
			wire_add(d, json_pack("[O]", r));
	json_decref(w);
}

#ifdef SFMA_TEST_HOOKS
/* The id of the request the unrecorded-request hook sends (plan.h). */
#define HOOK_REQUEST_ID 1000000000

/* unrecorded-request: the first request goes twice, the second time as
 * a judgment under an id of its own, and neither it nor its answer is
 * recorded. */
static void hook_unrecorded_request(const json_t *request)
{
	static int done;
	if (done || strcmp(test_hook(), "unrecorded-request") != 0)
		return;
	done = 1;
	json_t *copy = json_deep_copy(request);
	json_object_set_new(copy, "id", json_integer(HOOK_REQUEST_ID));
	json_object_set_new(copy, "purpose", json_string("judge"));
	stage_send(STAGE_MODEL, copy);
	json_decref(copy);
	json_decref(stage_wire(STAGE_MODEL));
}

static int hook_unrecorded_reply(const json_t *reply)
{
	if (json_number_value(json_object_get(reply, "id")) != HOOK_REQUEST_ID)
		return 0;
	json_decref(stage_wire(STAGE_MODEL));
	return 1;
}

/* phantom-call: the first reply also records a request never sent. */
static void hook_phantom_call(struct drive *d)
{
	static int done;
	if (done || strcmp(test_hook(), "phantom-call") != 0)
		return;
	done = 1;
	struct obs_line l;
	obs_line_of("{}", 2, stages[STAGE_MODEL].sent + 1000, &l);
	wire_add(d, json_pack("[o]", obs_wire_record(stages[STAGE_MODEL].name, "out", &l)));
}
#endif

/* A model reply just read: it stands for its request's line and its own. */
static void reply_read(struct drive *d, const json_t *reply)
{
	char key[32];
	request_key(json_object_get(reply, "id"), key);
	json_t *out = json_object_get(d->request_wire, key);
	if (out) {
		wire_add(d, json_pack("[O]", out));
		json_object_del(d->request_wire, key);
	}
#ifdef SFMA_TEST_HOOKS
	hook_phantom_call(d);
#endif
	wire_add(d, stage_wire(STAGE_MODEL));
}

static int by_line_number(const void *a, const void *b)
{
	json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "n"));
	json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "n"));
	return (x > y) - (x < y);
}

/* Every line not yet on an entry - requests never answered (in the order
 * they were sent), answers that came with no reply - goes on the next
 * entry: the run's end. */
static void wire_rest(struct drive *d)
{
	size_t n = json_object_size(d->request_wire), i = 0;
	if (n) {
		json_t **v = xcalloc(n, sizeof *v), *r;
		const char *key;
		json_object_foreach(d->request_wire, key, r)
			v[i++] = r;
		qsort(v, n, sizeof *v, by_line_number);
		json_t *sent = json_array();
		for (i = 0; i < n; i++)
			json_array_append(sent, v[i]);
		free(v);
		json_object_clear(d->request_wire);
		wire_add(d, sent);
	}
	wire_add(d, stage_wire(STAGE_MODEL));
	wire_add(d, stage_wire(STAGE_EXEC));
	wire_add(d, stage_wire(STAGE_MEM));
}

/* ---- carrying out the core's effects ------------------------------------- */

static void store_blob(struct drive *d, const struct core_fx *fx)
{
#ifdef SFMA_BENCH_NO_EVIDENCE
	/* Only for tests/bench/evidence.sh, which measures what evidence costs
	 * against a build without it; never in a built program. */
	(void)d, (void)fx;
	return;
#endif
	struct sfma_err e;
	json_t *ref = NULL;
	if (!d->evidence)
		err_set(&e, "%s", d->evidence_error);
	else
		ref = evidence_put_nosync(d->evidence, fx->data, fx->n, &e); /* synced by the tracer */
	if (!ref) {
		note_failure(d, "%s%s", evidence_prefix(e.text), e.text);
		d->blob_failed = 1;
	}
	json_decref(ref);
}

static void append(struct drive *d, const struct core_fx *fx)
{
	if (!d->trace_alive)
		return;
	json_t *ev = fx->v;
	/* An entry must not name what may not be there: after a blob that
	 * could not be stored, entries go without their references. */
	if (d->blob_failed && json_object_get(ev, EVIDENCE_MEMBER))
		json_object_del(ev, EVIDENCE_MEMBER);
	struct sfma_err e;
	if (tracer_post(d->evidence, ev, fx->id, &e) < 0) {
		d->trace_alive = 0;
		note_failure(d, "%s", e.text);
	}
	const char *sync = tracer_sync_failure();
	if (sync)
		note_failure(d, "%s%s", evidence_prefix(sync), sync);
}

/* One request to the exec stage, answered by the run's deadline (plus a
 * grace for the stage to report it): its reply, or NULL with the core
 * told why there is none. Nothing acts on the world before every entry
 * that led to it is on disk; a read acts on nothing and goes at once. */
static json_t *ask_exec(struct drive *d, struct core_fx *fx)
{
	struct sfma_err e;
	if (fx->acts && d->trace_alive && tracer_settle(NULL, &e) < 0) {
		d->trace_alive = 0;
		note_failure(d, "%s", e.text);
	}
	if (d->failed)
		return NULL;
	json_object_set_new(fx->v, "deadlineMs", json_integer((json_int_t)deadline_wall_ms(d)));
	const struct wait_opts o = {.deadline_mono = d->deadline_mono + EXEC_GRACE_MS, .stop_on_halt = 1,
	                            .watch_others = 1};
	enum wait_why why = WAIT_DIED;
	json_t *reply = NULL;
	if (stage_send(STAGE_EXEC, fx->v) == 0)
		reply = stage_wait(STAGE_EXEC, &o, &why, &e);
	else
		stage_death(STAGE_EXEC, &e);
	/* The command's line and its answer's: on the verdict the answer
	 * makes (or the stop its absence does). */
	wire_add(d, stage_wire(STAGE_EXEC));
	if (!reply) {
		const struct core_facts f = facts(d);
		core_stop(d->core, why == WAIT_HALT ? CORE_STOP_SIGNAL : why == WAIT_TIMEOUT ? CORE_STOP_TIMEOUT
		                                                                              : CORE_STOP_FAILED, e.text, &f);
	}
	return reply;
}

/* recall referential of an evidence id (a compaction stub names one):
 * the blob's bytes, as the model got them the first time. Evidence holds
 * only what already crossed the model boundary. */
static char *recall_evidence(struct drive *d, const char *hex, json_t **entry)
{
	struct evidence_ref ref = {.bytes = 0};
	struct sfma_err e;
	char *data = NULL;
	/* Filed, or still in the store's journal (a blob of this very run). */
	if (d->evidence && evidence_find(d->evidence, hex, &ref) == 0)
		data = evidence_get(d->evidence, &ref, (size_t)d->m->max_context_bytes, &e);
	char *text = recall_evidence_answer(hex, data, data ? (size_t)ref.bytes : 0, entry);
	free(data);
	return text;
}

/* A memory request that got no answer (the stage died, or the run's
 * time ran out while it worked): the run stops, as for any stage. */
static void mem_failed(struct drive *d, enum wait_why why, const char *text)
{
	const struct core_facts f = facts(d);
	core_stop(d->core, why == WAIT_TIMEOUT ? CORE_STOP_TIMEOUT : CORE_STOP_FAILED, text, &f);
}

/* The memory stores' answer to a recall: sfma-mem's (sfma-mem(1)). Its
 * refusal is the call's verdict. */
static void recall_stores(struct drive *d, json_t *call)
{
	enum wait_why why;
	struct sfma_err e = {""};
	json_t *reply = mem_ask(json_pack("{s:s, s:O}", "op", "recall", "call", call), d->deadline_mono + EXEC_GRACE_MS,
	                        &why, &e);
	/* The request's line and its answer's: on the verdict it makes. */
	wire_add(d, stage_wire(STAGE_MEM));
	if (!reply && why != WAIT_OK) {
		mem_failed(d, why, e.text);
		return;
	}
	if (!reply) {
		core_recall_reply(d->core, NULL, e.text, NULL);
		return;
	}
	json_t *text = json_object_get(reply, "text"), *entry = json_object_get(reply, "entry");
	if (!json_is_string(text) || strlen(json_string_value(text)) != json_string_length(text)) {
		json_decref(reply);
		mem_failed(d, WAIT_DIED, "stage sfma-mem sent a malformed reply (recall)");
		return;
	}
	core_recall_reply(d->core, json_string_value(text), NULL, json_is_object(entry) ? json_incref(entry) : NULL);
	json_decref(reply);
}

static void serve_recall(struct drive *d, const struct core_fx *fx)
{
	json_t *call = json_object_get(fx->v, "call"), *entry = NULL;
	const char *from = json_string_value(json_object_get(fx->v, "from"));
	if (!from || strcmp(from, "evidence") != 0) {
		recall_stores(d, call);
		return;
	}
	char *text = recall_evidence(d, json_string_value(json_object_get(call, "id")), &entry);
	core_recall_reply(d->core, text, NULL, entry);
	free(text);
}

/* The adopted candidate, kept in the memory stores by sfma-mem; a store
 * that refuses it leaves the run without that record, not failed. */
static void keep(struct drive *d, const struct core_fx *fx)
{
	enum wait_why why;
	struct sfma_err e;
	json_t *req = json_pack("{s:s, s:O?, s:O?, s:O?}", "op", "keep", "key", json_object_get(fx->v, "id"),
	                        "payload", json_object_get(fx->v, "payload"), "fastMaxBytes",
	                        json_object_get(fx->v, "fastMaxBytes"));
	json_t *reply = mem_ask(req, d->deadline_mono + EXEC_GRACE_MS, &why, &e);
	wire_add(d, stage_wire(STAGE_MEM));
	if (!reply && why != WAIT_OK) {
		mem_failed(d, why, e.text);
		return;
	}
	json_t *entry = json_object_get(reply, "entry");
	core_keep_reply(d->core, json_is_object(entry) ? json_incref(entry) : NULL);
	json_decref(reply);
}

static void carry_out_one(struct drive *d, struct core_fx *fx)
{
	switch (fx->kind) {
	case CORE_BLOB:
		if (!d->blob_failed)
			store_blob(d, fx);
		break;
	case CORE_EVENT:
		append(d, fx);
		break;
	case CORE_MODEL:
		if (d->failed)
			break;
		json_object_set_new(fx->v, "deadlineMs", json_integer((json_int_t)deadline_wall_ms(d)));
		if (stage_send(STAGE_MODEL, fx->v) < 0) {
			struct sfma_err e;
			stage_death(STAGE_MODEL, &e);
			note_failure(d, "%s", e.text);
		}
		request_sent(d, fx->v);
#ifdef SFMA_TEST_HOOKS
		hook_unrecorded_request(fx->v);
#endif
		break;
	case CORE_EXEC: {
		json_t *reply = ask_exec(d, fx);
		if (reply)
			core_exec_reply(d->core, reply);
		break;
	}
	case CORE_RECALL:
		if (!d->failed)
			serve_recall(d, fx);
		break;
	case CORE_KEEP:
		if (!d->failed)
			keep(d, fx);
		break;
	case CORE_OUTPUTS: {
		if (d->failed)
			break;
		json_t *outputs = workspace_outputs(&d->ws);
		core_outputs_reply(d->core, outputs);
		json_decref(outputs);
		break;
	}
	case CORE_PROGRESS:
		progress(d, fx->data);
		break;
	}
}

/* Every effect the core has queued, in order, with the answers fed back;
 * a failure met on the way is the core's to know once the queue is done. */
static void carry_out(struct drive *d)
{
	struct core_fx *fx;
	while ((fx = core_next(d->core))) {
		carry_out_one(d, fx);
		core_fx_free(fx);
	}
	if (d->failed) {
		const struct core_facts f = facts(d);
		core_stop(d->core, CORE_STOP_FAILED, d->failure, &f);
		while ((fx = core_next(d->core))) {
			carry_out_one(d, fx);
			core_fx_free(fx);
		}
	}
}

/* ---- the start ------------------------------------------------------------ */

/* Long-term memory: sfma-mem runs the containment guards before any git
 * command and measures the stores; a store it refuses ends the run before
 * anything is committed anywhere (the core says so). The answer to the
 * open request open_id (-1: it could not be sent, e says why): the
 * stores' `store` entries (new), or NULL with e saying why. */
static json_t *open_stores(struct drive *d, long long open_id, struct sfma_err *e)
{
	enum wait_why why;
	json_t *reply = open_id < 0 ? NULL : mem_reply(open_id, d->deadline_mono + EXEC_GRACE_MS, &why, e);
	if (!reply)
		return NULL;
	json_t *stores = json_object_get(reply, "stores"), *s;
	size_t i;
	json_array_foreach(stores, i, s)
		if (json_is_object(s) && ndjson_string_is(json_object_get(s, "kind"), "git") && !d->git_store)
			d->git_store = json_incref(s);
	if (!d->git_store) {
		json_decref(reply);
		err_set(e, "stage sfma-mem sent a malformed reply (open)");
		return NULL;
	}
	d->store_ok = 1;
	json_incref(stores);
	json_decref(reply);
	return stores;
}

/* The run's first entries: an interrupted run's record, the clock anchor
 * (waited for: a chain that refuses it ends the run before anything else
 * happens, and its seq gives every later id), then the core's start. -1
 * when the trace refuses the first entry (sfma-chain said why), -2 when
 * the trace cannot be extended as it is (a torn final line: said here);
 * in both cases nothing was appended and the run is not sealed. */
static int begin(struct drive *d)
{
	struct sfma_err e, se = {""};
	/* The store opens while the chain takes the first entries: sfma-mem
	 * runs its guards and its first git meanwhile, and the answer is read
	 * when the run begins. A run that does not begin never reads it;
	 * sfma-mem then closes the store having committed nothing. */
	long long open_id = mem_post(json_pack("{s:s}", "op", "open"), &se);
	uint64_t n_interrupted;
	int torn;
	json_t *interrupted = interrupted_event(d->ws.sfma_dir, &n_interrupted, &torn, &e);
	if (torn) {
		warning("%s; nothing was appended", e.text);
		return -2;
	}
	if (interrupted && tracer_post(d->evidence, interrupted, "", &e) < 0) {
		json_decref(interrupted);
		return -1;
	}
	json_decref(interrupted);
	json_t *first = NULL;
	if (interrupted && tracer_settle(&first, &e) == 0)
		warning("the previous run was interrupted before it sealed: its %llu %s recorded (%s)",
		      (unsigned long long)n_interrupted, n_interrupted == 1 ? "entry is" : "entries are",
		      json_string_value(json_object_get(first, "id")));
	json_decref(first);
	core_open(d->core, wall_ms());
	carry_out(d);
	json_t *anchor = NULL;
	if (!d->trace_alive || tracer_settle(&anchor, &e) < 0)
		return -1;
	json_t *pinned = memory_pinned(&d->mem);
	const char *traceparent = getenv("TRACEPARENT"), *why;
	if (traceparent && !traceparent_valid(traceparent, &why)) {
		warning("TRACEPARENT ignored: %s", why);
		traceparent = NULL;
	}
	json_t *stores = open_stores(d, open_id, &se);
	/* The open request's line and its answer's: on the run's first
	 * entries, the store entries among them. */
	wire_add(d, stage_wire(STAGE_MEM));
	json_t *inbox = workspace_inbox(&d->ws);
	const struct core_begin b = {
		.anchor_seq = json_number_value(json_object_get(anchor, "seq")),
		.pinned = pinned ? json_object_get(pinned, "candidate") : NULL,
		.stores = stores, .store_error = se.text, .inbox = inbox,
		.endpoints = json_object_get(d->mem.doc, "endpoints"),
		.traceparent = traceparent, .confinement = d->confinement,
	};
	core_begin(d->core, &b);
	json_decref(anchor);
	json_decref(stores);
	json_decref(inbox);
	carry_out(d);
	/* The inbox files go once their messages are on disk. */
	if (d->trace_alive && tracer_settle(NULL, &e) == 0)
		workspace_inbox_done(&d->ws);
	return 0;
}

/* ---- the turns ------------------------------------------------------------ */

/* Until the work is over: every request that can go goes, then the next
 * reply is served, in whatever order they come. After a verdict the
 * replies still in flight are read and traced (not after a halt signal). */
static void turns(struct drive *d)
{
	for (;;) {
		const struct core_facts f = facts(d);
		core_dispatch(d->core, &f);
		carry_out(d);
		if (core_over(d->core) || !core_in_flight(d->core))
			break;
		if (core_verdict(d->core) && halt_signal)
			break;
		const struct wait_opts o = {.deadline_mono = d->deadline_mono + EXEC_GRACE_MS, .stop_on_halt = 1,
		                            .watch_others = 1};
		enum wait_why why = WAIT_DIED;
		struct sfma_err e;
		json_t *reply = stage_wait(STAGE_MODEL, &o, &why, &e);
#ifdef SFMA_TEST_HOOKS
		if (reply && hook_unrecorded_reply(reply)) {
			json_decref(reply);
			continue;
		}
#endif
		const struct core_facts now = facts(d);
		if (reply)
			reply_read(d, reply);
		else
			wire_add(d, stage_wire(STAGE_MODEL));
		if (!reply) {
			core_stop(d->core, why == WAIT_HALT ? CORE_STOP_SIGNAL : why == WAIT_TIMEOUT ? CORE_STOP_TIMEOUT
			                                                                              : CORE_STOP_FAILED,
			          e.text, &now);
			carry_out(d);
			break;
		}
		core_model_reply(d->core, reply, &now);
		carry_out(d);
	}
}

/* ---- the end --------------------------------------------------------------- */

/* The run's memory, kept by sfma-mem: .sfma/memory.json replaced, then
 * one commit in .sfma/mem of it and the run's records. Returns the
 * commit's `store` entry data (new), or NULL (no git, or a store the
 * guards refused: nothing to commit to; a stage that could not answer
 * or write is said). The run's end waits for it, whatever its budget,
 * like the seal. */
static json_t *commit_memory(struct drive *d)
{
	char subject[600];
	snprintf(subject, sizeof subject, "run %s %s turns=%ld calls=%ld", d->m->name, core_verdict(d->core),
	         core_turns(d->core), core_model_calls(d->core));
	enum wait_why why;
	struct sfma_err e;
	json_t *reply = mem_ask(json_pack("{s:s, s:s, s:O}", "op", "commit", "subject", subject, "memory", d->mem.doc), 0,
	                        &why, &e);
	wire_add(d, stage_wire(STAGE_MEM));
	if (!reply) {
		/* written whole or not at all: the file is as the run before left it */
		warning("memory store: the run was not kept (%s); memory.json is as the run before left it", e.text);
		return NULL;
	}
	json_t *entry = json_object_get(reply, "entry");
	const char *sha = json_string_value(json_object_get(entry, "sha"));
	size_t n = sha ? strlen(sha) : 0;
	if ((n == 40 || n == 64) && strspn(sha, "0123456789abcdef") == n)
		memcpy(d->commit_sha, sha, n + 1);
	entry = json_is_object(entry) ? json_incref(entry) : NULL;
	json_decref(reply);
	return entry;
}

/* The run in the memory document: its summary, certification and the
 * endpoints (sfma-mem writes it, commit_memory). */
static void remember(struct drive *d, int *certified, int *demoted)
{
	const struct core *c = d->core;
	char at[ISO8601_LEN];
	json_t *summary = json_pack("{s:s, s:s, s:I, s:I, s:I, s:b}", "at", iso8601_utc(wall_ms(), at),
	                            "verdict", core_verdict(c), "turns", (json_int_t)core_turns(c),
	                            "modelCalls", (json_int_t)core_model_calls(c),
	                            "hardTierFailures", (json_int_t)core_hard_failures(c), "dryRun", d->dry_run);
	json_object_set_new(summary, "summary", core_summary(c) ? memory_clip(core_summary(c)) : json_null());
	if (core_soft_judged(c))
		json_object_set_new(summary, "soft", json_pack("{s:I, s:I}", "judged", (json_int_t)core_soft_judged(c),
		                                              "passed", (json_int_t)core_soft_passed(c)));
	if (core_soft_unjudged(c))
		json_object_set_new(json_object_get(summary, "soft"), "unjudged",
		                    json_integer((json_int_t)core_soft_unjudged(c)));
	if (core_acceptance_passed(c) >= 0)
		json_object_set_new(summary, "acceptance", json_boolean(core_acceptance_passed(c)));
	memory_record_run(&d->mem, d->m, summary, core_candidate(c), core_pinned_run(c), certified, demoted);
	json_decref(summary);
	if (core_endpoints(c))
		json_object_set_new(d->mem.doc, "endpoints", json_deep_copy(core_endpoints(c)));
}

/* Close the run in the trace and in the memory stage. */
static void finish(struct drive *d)
{
	const struct core_facts f = facts(d);
	wire_rest(d);
	core_finish(d->core, &f);
	carry_out(d);
	int certified, demoted;
	remember(d, &certified, &demoted);
	json_t *commit = commit_memory(d);
	const struct core_close cl = {.certified = certified, .demoted = demoted, .commit = commit, .wall_ms = wall_ms()};
	wire_rest(d);
	core_close(d->core, &cl);
	json_decref(commit);
	carry_out(d);
}

/* Hand the body to sfma-seal and wait for its integrity line. 0, or -1
 * with e saying why there is no record. */
static int seal(json_t *body, struct sfma_err *e)
{
	static const struct wait_opts seal_wait = {0};
	enum wait_why why;
	json_t *integrity = NULL;
	if (stage_send(STAGE_SEAL, body) < 0) {
		stage_death(STAGE_SEAL, e);
		return -1;
	}
	stage_close_input(STAGE_SEAL);
	if (!(integrity = stage_wait(STAGE_SEAL, &seal_wait, &why, e)))
		return -1;
	json_decref(integrity);
	return 0;
}

static json_t *record_body(struct drive *d)
{
	json_t *memory = json_pack("{s:I, s:b}", "runs", (json_int_t)json_array_size(json_object_get(d->mem.doc, "runs")),
	                           "pinned", memory_pinned(&d->mem) != NULL);
	/* The git store as sfma-mem opened it, and the run's commit. */
	const json_t *g = d->git_store;
	if (d->store_ok)
		json_object_set_new(memory, "store", json_is_true(json_object_get(g, "available"))
		    ? json_pack("{s:s, s:O?, s:s?}", "name", "git-long", "latencyMs", json_object_get(g, "latencyMs"),
		                "commit", d->commit_sha[0] ? d->commit_sha : NULL)
		    : json_pack("{s:s, s:b, s:O?}", "name", "git-long", "available", 0, "reason",
		                json_object_get(g, "reason")));
	json_t *outputs = workspace_outputs_record(&d->ws, d->dry_run, core_written(d->core));
	const struct core_record_host h = {.outputs = outputs, .memory = memory, .runner_version = sfma_version()};
	json_t *body = core_record(d->core, &h);
	json_decref(outputs);
	json_decref(memory);
	return body;
}

/* The verdict's cause, on stderr: the run's error, and the hard tier's
 * refusals when there were any and the error does not already say so. */
static void report_failure(const struct core *c)
{
	long n = core_hard_failures(c);
	if (!n || strstr(core_error(c), "refused by the hard tier")) {
		warning("%s: %s", core_verdict(c), core_error(c));
		return;
	}
	warning("%s: %s; %ld call%s refused by the hard tier (the first: %s)", core_verdict(c), core_error(c), n,
	      n == 1 ? " was" : "s were", core_first_refusal(c));
}

struct finishing {
	struct evidence_store *store;
	int failed;
	struct sfma_err e;
};

static void *finish_evidence(void *arg)
{
	struct finishing *f = arg;
	f->failed = f->store && evidence_finish(f->store, &f->e) < 0;
	return NULL;
}

static void summary_line(const struct drive *d)
{
	if (d->dry_run)
		warning("dry run: nothing was applied (writes were recorded, commands not run%s); "
		        "run again with --apply to apply", d->m->n_acceptance ? ", acceptance checks not run" : "");
	char verdict_uc[64];
	size_t k = 0;
	const char *v = core_verdict(d->core);
	for (; v[k] && k < sizeof verdict_uc - 1; k++)
		verdict_uc[k] = (char)toupper((unsigned char)v[k]);
	verdict_uc[k] = '\0';
	printf("%s turns=%ld dryRun=%s record=%s/.sfma/result.json\n", verdict_uc, core_turns(d->core),
	       d->dry_run ? "true" : "false", d->m->workspace);
	fflush(stdout);
}

/* Seal the run and print its summary line; returns the exit status. */
static int end(struct drive *d)
{
	struct sfma_err e;
	if (d->trace_alive && tracer_settle(NULL, &e) < 0) {
		d->trace_alive = 0;
		const struct core_facts f = facts(d);
		/* A record must not claim what the trace does not hold. */
		core_stop(d->core, CORE_STOP_FAILED, "trace writer died", &f);
	}
	finish(d);
	/* Every entry acknowledged, on disk, before the record commits to
	 * the trace. */
	tracer_stop(d->trace_alive);
	/* Every entry is appended: the blobs go under their own names, and
	 * the journal that made them durable goes - while sfma-seal works:
	 * the journal keeps every blob durable and readable until then, so
	 * the record does not wait for the filing. */
	struct finishing fin = {.store = d->evidence};
	pthread_t finisher;
	int beside = d->evidence && pthread_create(&finisher, NULL, finish_evidence, &fin) == 0;
	if (!beside)
		finish_evidence(&fin);
	stage_close_input(STAGE_CHAIN);
	stage_close_input(STAGE_MODEL);
	stage_close_input(STAGE_EXEC);
	/* sfma-mem closes the store as the seal works (it folds the packs
	 * past 32). */
	stage_close_input(STAGE_MEM);
	json_t *body = record_body(d);
	int sealed = seal(body, &e);
	json_decref(body);
	if (beside)
		pthread_join(finisher, NULL);
	if (fin.failed)
		warning("%s%s (the blobs stay in .sfma/evidence/journal, durable; the next run files them)",
		        evidence_prefix(fin.e.text), fin.e.text);
	int completed = strcmp(core_verdict(d->core), "completed") == 0;
	if (!completed && core_error(d->core)[0])
		report_failure(d->core);
	if (sealed < 0)
		/* No summary line: it would name a record that does not exist. */
		warning("the run was not sealed (%s): no result record was written", e.text);
	else
		summary_line(d);
	return sealed == 0 && completed ? 0 : 1;
}

static void drive_free(struct drive *d)
{
	core_free(d->core);
	json_decref(d->confinement);
	json_decref(d->wire);
	json_decref(d->request_wire);
	memory_free(&d->mem);
	json_decref(d->git_store);
	evidence_close(d->evidence);
	workspace_close(&d->ws);
	stages_free();
	manifest_free(d->m);
}

int run_manifest(struct manifest *m, const struct run_options *o)
{
	struct drive d = {.m = m, .dry_run = o->dry_run, .progress = o->progress || isatty(2), .trace_alive = 1,
	                  .request_wire = json_object()};
	/* Budgets run on the monotonic clock: setting the date can neither
	 * stretch nor cut them. */
	d.start_mono = mono_ms();
	d.deadline_mono = d.start_mono + m->max_seconds * 1000;
	const struct core_config cfg = {.m = m, .dry_run = o->dry_run,
	                                .task = o->task ? o->task : m->task_statement, .clarification = o->task,
	                                .wire = wire_of, .wire_arg = &d};
	d.core = core_new(&cfg);
	workspace_open(&d.ws, m);
	/* The evidence store, once for the run. A store that cannot be opened
	 * fails the run at its first blob, in the record like any other
	 * evidence failure. */
	struct sfma_err e;
	d.evidence = evidence_open(d.ws.lock_fd, 1, &e);
	if (!d.evidence)
		snprintf(d.evidence_error, sizeof d.evidence_error, "%s", e.text);
	char mem_path[PATH_MAX];
	if (memory_load(&d.mem, path_join(mem_path, d.ws.sfma_dir, "memory.json"), &e) < 0)
		die("%s", e.text);
	/* Everything of the workspace is open or made: every process of the
	 * run confines itself now, the planner too. */
	d.confinement = confinement_take(o->confine_channels, o->orchestrator, &d.ws, d.deadline_mono);
	int begun = begin(&d);
	if (begun < 0) {
		/* Either sfma-chain has said why (-1), or begin has (-2); the run
		 * cannot be recorded, so there is nothing to seal. */
		if (begun == -1)
			warning("the run did not start: the trace refused its first entry; nothing was appended");
		tracer_stop(0);
		drive_free(&d);
		return 1;
	}
	turns(&d);
	int status = end(&d);
	drive_free(&d);
	return status;
}
