/* core.h - the run's decisions: one state machine that sfma-plan drives
 * with what the stages answer and sfma-replay drives with what the trace
 * recorded, so that a replay decides with the code that decided the run.
 *
 * The core does no I/O: no pipes, no files, no clock. Each input - a
 * model reply, an exec answer, a memory answer, the host facts of the
 * moment - is a function call; what the run must do next comes out as a
 * queue of effects, in order: blobs to store as evidence, events to
 * append to the trace (each under the id it will get), requests to the
 * stages, progress lines. The caller carries them out in order and feeds
 * back the answers. After an effect that waits for an answer (exec,
 * recall, keep, outputs) the core emits nothing more until the answer
 * comes; model requests are answered in any order, by id.
 *
 * The drive, as sfma-plan does it (sfma-plan(1), sfma-replay(1)):
 *
 *   core_open            -> the run's clock anchor
 *   core_begin           -> lifecycle, confinement, stores, inbox, genesis
 *   loop: core_dispatch (fresh facts) -> requests or the end of the work;
 *         a model reply  -> core_model_reply;
 *         a wait that ended without one -> core_stop
 *   core_finish          -> the result and weight entries
 *   core_close           -> the commit, the closing lifecycle and anchor
 *   core_record          -> the result record's body
 *
 * Every input is hostile-safe: a reply or an answer of any shape is read
 * with type checks and never crashes the core. */
#ifndef SFMA_CORE_H
#define SFMA_CORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "manifest.h"

struct core;

struct core_config {
	const struct manifest *m;  /* borrowed for the core's life */
	int dry_run;
	const char *task;          /* the task the model gets (--task, else taskStatement; NULL: none) */
	const char *clarification; /* --task, recorded as a clarification (NULL: none) */
	/* The records of the lines on the stages' pipes an entry stands for
	 * (its `wire` member, sfma-formats(5)): a host fact, asked for each
	 * entry as it is made, by its seq. sfma-plan answers with the lines
	 * it sent and read since the last entry that took some; sfma-replay
	 * with what the trace's entry of that seq holds. A new reference, or
	 * NULL for none; wire NULL: no entry has any. */
	json_t *(*wire)(void *arg, double seq);
	void *wire_arg;
};

enum core_fx_kind {
	CORE_BLOB,     /* store data[0..n) as evidence: durable before the event that names it */
	CORE_EVENT,    /* append v to the trace (the event sfma-chain takes), entry id `id` */
	CORE_MODEL,    /* send request v to sfma-model (add "deadlineMs"); replies by v.id */
	CORE_EXEC,     /* send request v to sfma-exec (add "deadlineMs"); then core_exec_reply
	                  (v.acceptance: the manifest's acceptance check of that index) */
	CORE_RECALL,   /* serve recall v {"call","from":"evidence"|"stores"}; then core_recall_reply */
	CORE_KEEP,     /* keep v {"id","payload"} in the memory stores; then core_keep_reply */
	CORE_OUTPUTS,  /* look at the declared outputs ({"contents":bool}); then core_outputs_reply */
	CORE_PROGRESS, /* a line for the operator (data) */
};

struct core_fx {
	enum core_fx_kind kind;
	json_t *v;
	char *data;
	size_t n;
	double seq;                /* CORE_EVENT: the entry's seq */
	char id[128];              /* CORE_EVENT: its id, <kind>-<seq> (CHAIN_ID_MAX) */
	int acts;                  /* CORE_EXEC: it acts on the world (not a read) */
};

/* The host facts of the moment an input is fed. */
struct core_facts {
	int64_t elapsed_ms;        /* since the run's budget clock started */
	int halt_signal;           /* SIGINT, SIGTERM or SIGHUP that arrived, or 0 */
	int halt_file;             /* .sfma/HALT exists */
};

/* What the run finds when it begins (host facts, recorded by the entries
 * core_begin emits). */
struct core_begin {
	double anchor_seq;         /* the seq sfma-chain gave the run's clock anchor */
	const json_t *pinned;      /* the pinned configuration's candidate, or NULL */
	const json_t *stores;      /* the stores' profile: an array of `store` entry data; NULL: failed */
	const char *store_error;   /* why they failed */
	const json_t *inbox;       /* [{"file","text"}...], sorted by name; NULL: none */
	const json_t *endpoints;   /* the endpoint state memory.json keeps, or NULL */
	const char *traceparent;   /* the caller's W3C trace context (checked), or NULL */
	const json_t *confinement; /* what each process reported of its confinement: an array of
	                              `confinement` entry data (confine_report_read), in order; NULL: none */
};

/* How a wait for a reply ended without one. */
enum core_stop_why {
	CORE_STOP_SIGNAL,          /* the operator's halt signal (facts.halt_signal) */
	CORE_STOP_TIMEOUT,         /* the run's time budget */
	CORE_STOP_FAILED,          /* a stage died, the trace or the evidence store failed: text says */
};

/* What the run's close takes from the host. */
struct core_close {
	int certified, demoted;    /* memory.json's certification of this run */
	const json_t *commit;      /* the memory commit's `store` entry data, or NULL */
	int64_t wall_ms;           /* the closing clock anchor's time */
};

/* The record's members that are host facts, not decisions. */
struct core_record_host {
	const json_t *outputs;     /* [{path, ok, sha256?}] as found at the end */
	const json_t *memory;      /* {runs, pinned, store?} */
	const char *runner_version;
};

struct core *core_new(const struct core_config *cfg);
void core_free(struct core *c);

/* The next effect, or NULL when the queue is empty; the caller owns it. */
struct core_fx *core_next(struct core *c);
void core_fx_free(struct core_fx *fx);

void core_open(struct core *c, int64_t wall_ms);
void core_begin(struct core *c, const struct core_begin *b);
/* Send every request that can go now, or end the work when none is left.
 * Call after every input, once its effects are carried out. */
void core_dispatch(struct core *c, const struct core_facts *f);
void core_model_reply(struct core *c, json_t *reply, const struct core_facts *f);
void core_exec_reply(struct core *c, json_t *reply);
/* recall: text is what the model is shown (NULL: refused, refusal says
 * why), entry the `store` entry's data (consumed; NULL: none). */
void core_recall_reply(struct core *c, const char *text, const char *refusal, json_t *entry);
/* keep: the `store` entry's data (consumed; NULL: the stores could not keep it). */
void core_keep_reply(struct core *c, json_t *entry);
/* outputs: [{"path","exists","content"?,"clipped"?,"sha256"?}] in manifest order. */
void core_outputs_reply(struct core *c, const json_t *outputs);
/* A verdict already set stands, except that a failure of the trace or the
 * evidence fails a run that had completed: its record must not claim
 * what the trace does not hold. */
void core_stop(struct core *c, enum core_stop_why why, const char *text, const struct core_facts *f);
/* The endpoint state to record when no reply brought one (the replay's
 * weight entry). Borrowed, copied. */
void core_set_endpoints(struct core *c, const json_t *endpoints);

/* The hard tier's rule for recall, before any store is read: the mode is
 * one of referential, episodic, lexical, change, semantic. */
#define RECALL_UNKNOWN_MODE "recall: unknown recall mode"
int recall_mode_known(const char *mode);

/* The answer to a recall of the evidence blob hex (a compaction stub
 * names one): the text the model is shown (malloc'd) and in *entry the
 * `store` entry's data; data NULL when the blob is not there. */
char *recall_evidence_answer(const char *hex, const char *data, size_t n, json_t **entry);

void core_finish(struct core *c, const struct core_facts *f);
void core_close(struct core *c, const struct core_close *cl);
json_t *core_record(const struct core *c, const struct core_record_host *h);

/* ---- what the core holds, for the caller ------------------------------- */

enum core_waiting { CORE_WAIT_NONE, CORE_WAIT_EXEC, CORE_WAIT_ACCEPT, CORE_WAIT_RECALL, CORE_WAIT_KEEP,
	CORE_WAIT_OUTPUTS };
enum core_waiting core_waiting(const struct core *c);
/* Model requests out: their replies must still be read (drained after the
 * verdict, except after a halt signal). */
int core_in_flight(const struct core *c);
/* 1 once the work is over: a verdict, and nothing to wait for. */
int core_over(const struct core *c);
/* A work request in flight (the lowest id), or 0. */
long core_request_in_flight(const struct core *c);
/* The ids of every model request in flight, ascending, at most max in
 * ids; returns how many there are. */
size_t core_requests(const struct core *c, long *ids, size_t max);
/* Its loop number (1..) and purpose ("work", "bootstrap", "judge",
 * "criteria") and judge index, for a request id in flight; -1 if none. */
int core_request_owner(const struct core *c, long id, const char **purpose, int *judge_index);

const char *core_verdict(const struct core *c);      /* NULL until there is one */
const char *core_error(const struct core *c);        /* "" when none */
const char *core_halt_trigger(const struct core *c); /* NULL unless halted */
long core_turns(const struct core *c);
long core_model_calls(const struct core *c);
long core_hard_failures(const struct core *c);
const char *core_first_refusal(const struct core *c);
const json_t *core_candidate(const struct core *c);  /* adopted or pinned, or NULL */
int core_pinned_run(const struct core *c);
const json_t *core_summary(const struct core *c);    /* the done summary (string), or NULL */
const json_t *core_endpoints(const struct core *c);  /* measured endpoint state, or NULL */
const json_t *core_written(const struct core *c);    /* dry run: path -> sha256 of what was written */
long core_soft_judged(const struct core *c);
long core_soft_passed(const struct core *c);
long core_soft_unjudged(const struct core *c);
/* The acceptance checks of the run: -1 when it has none (or was dry),
 * else 1 when the last done's checks passed, 0 otherwise. */
int core_acceptance_passed(const struct core *c);
/* The seqs of the run's first and last entries (0 until known). */
double core_first_seq(const struct core *c);
double core_last_seq(const struct core *c);

#endif
