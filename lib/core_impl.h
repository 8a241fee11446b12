/* core_impl.h - the state of the decision core, shared by its files:
 *
 *   core.c        the state, the effect queue, the trace's events, the
 *                 run's frame (open, begin, finish, close, record)
 *   core_turn.c   one model reply: its call entries, the turn it is
 *   core_loops.c  loops, the blackboard, the soft tier, the dispatch
 *
 * Nothing outside lib/core*.c includes it. */
#ifndef SFMA_CORE_IMPL_H
#define SFMA_CORE_IMPL_H

#include "core.h"
#include "usage.h"

#define SOFT_CALLS_MAX 5
/* A judgment reply that is not a valid judgment is asked again on another
 * usable endpoint, then once on the same (sfma-plan(1), The soft tier). */
#define JUDGE_ATTEMPTS 3

/* One conversation: what the core sends the model for one loop. */
struct conv {
	json_t *messages;          /* as the next request sends them */
	json_t *refs;              /* the evidence reference of each (null: none, or elided) */
	json_t *native_calls;      /* the toolCalls of the reply being answered, or NULL */
	json_t *message_ref;       /* the reference of the last message added (NULL: none) */
	long candidate_msg;        /* the adopted candidate's reply in messages, or -1 */
	int message_sent;          /* message_ref went out with a request no call answered */
};

enum task_state { TASK_PENDING, TASK_ACTIVE, TASK_PASSED, TASK_FAILED };

struct bb_task {
	json_t *def;               /* {"id","description","role","class"} */
	enum task_state state;
	int attempts;
	int not_loop;              /* a retry goes to another loop than this (0: any) */
	char *clarification;       /* the judge's reason of a failed first attempt */
};

struct loop {
	struct conv c;
	long task;                 /* blackboard index, -1: none */
	long req_id, allowance;    /* the work request in flight (0: none) */
	long hard_failures;        /* refusals during its current task */
	char producer[200];        /* the endpoint that produced its work */
	json_t *entries;           /* ids of its current task's task entries */
	/* the soft judgment of its done: softCalls slots, each judged by up to
	 * JUDGE_ATTEMPTS requests until one gives a valid judgment */
	int judging, judges_to_send, judges_out;
	long judge_ids[SOFT_CALLS_MAX];      /* the slot's request in flight (0: none) */
	long judge_allow[SOFT_CALLS_MAX];
	int judge_attempts[SOFT_CALLS_MAX];
	char judge_avoid[SOFT_CALLS_MAX][200]; /* the endpoint the slot's next request avoids */
	json_t *judge_replies;     /* [final reply|null...] by slot */
	/* Replies that made no call (they leave no entry) held by slot until
	 * the loop's last judge request is answered: taken on arrival, their
	 * calls and slots would free up at moments the trace does not hold,
	 * and what is sent next would depend on them (core_model_reply). */
	json_t *judge_held[SOFT_CALLS_MAX];
	int judges_held;
	json_t *judge_msg_ref, *judge_calls;
	char *judge_msg;
};

/* What a synchronous request left to do once its answer comes. */
struct pending {
	enum core_waiting what;
	json_t *call;              /* the tool call */
	char task_id[128];         /* its task entry */
	double task_seq;           /* ... and that entry's seq */
	size_t index;              /* acceptance: the check asked */
	int loop;                  /* the loop index it came from */
};

struct core {
	const struct manifest *m;
	int dry_run;
	char *task, *clarification;
	json_t *(*wire)(void *arg, double seq);
	void *wire_arg;
	/* the effects, a queue */
	struct core_fx **fx;
	size_t fx_head, fx_n, fx_cap;
	/* the trace */
	double next_seq, first_seq, last_seq;
	json_t *lifecycle;
	/* the model */
	char *system;
	json_t *system_json;       /* system as a JSON string, made once (NULL if it is not UTF-8) */
	json_t *prompt_ref;        /* the system prompt's reference, until a call reports it */
	json_t *tool_defs;
	json_t *candidate;
	int pinned_run;
	json_t *endpoints, *feedback;
	long next_request, reserved_calls, work_in_flight;
	long turns, model_calls, hard_failures;
	char first_refusal[300];
	struct usage usage;
	json_t *mutation_refs, *written;
	json_t *summary, *last_outputs;
	json_t *last_view;         /* the outputs as the judge saw them at the last done */
	int stores_ok;             /* the memory stores opened */
	const char *verdict, *halt_trigger;
	char error[600];
	char *inbox;
	/* loops; loops[cur] is the one whose conversation an input concerns */
	struct loop *loops;
	int n_loops, cur;
	struct bb_task *tasks;
	size_t n_tasks;
	int legacy;                /* one conversation does the first task */
	long criteria_id, criteria_allow;
	int criteria_asked;
	json_t *criteria, *criteria_msg_ref;
	long soft_judged, soft_passed, soft_unjudged;
	long acceptance_rounds;    /* dones whose acceptance checks ran */
	int acceptance_passed;     /* the last round passed every check */
	struct pending pending;
};

/* ---- core.c ---- */
struct conv *cur_conv(struct core *c);
/* Append an event (kind, data consumed, evidence consumed or NULL, refs
 * consumed or NULL, class or NULL) at the current loop; its id (static in
 * the queued effect: copy it). */
const char *emit(struct core *c, const char *kind, json_t *data, json_t *evidence, json_t *refs, const char *cls);
const char *emit_at(struct core *c, int loop, const char *kind, json_t *data, json_t *evidence, json_t *refs,
                    const char *cls);
void fx_push(struct core *c, enum core_fx_kind kind, json_t *v, char *data, size_t n);
/* data[0..n) as evidence: a blob effect, and its reference (new). */
json_t *evidence(struct core *c, const void *data, size_t n);
/* (*evidence)[name] = ref, the object made on first use (ref consumed;
 * nothing when NULL). */
void attach_evidence(json_t **evidence, const char *name, json_t *ref);
void progress(struct core *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void end_with(struct core *c, const char *verdict, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void end_halted(struct core *c, const char *verdict, const char *trigger, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void lifecycle(struct core *c, const char *to);
void refused(struct core *c, const char *reason);
int64_t budget_ms(const struct core *c);

/* ---- core_turn.c ---- */
/* A message for the model in the current conversation, stored as evidence. */
void say_user(struct core *c, const char *content);
/* A tool's result as the model gets it; its reference (new, or NULL). */
json_t *tool_result(struct core *c, const char *text);
/* The call entries of one reply, at the current loop (sfma-plan(1)). */
void trace_calls(struct core *c, json_t *reply, const char *cls, json_t *msg_ref, json_t *reply_ref,
                 size_t n_native, const json_t *extra, json_t *ids);
void take_work_reply(struct core *c, json_t *reply, const struct core_facts *f);
void drain_reply(struct core *c, int k, json_t *reply, int work);

/* ---- core_loops.c ---- */
void use_loop(struct core *c, int k);
void blackboard_start(struct core *c);
void post_task(struct core *c, json_t *call);
/* The current loop's task ended with done: judged, or failed. */
void task_done(struct core *c, const json_t *outputs);
void take_judge_reply(struct core *c, int k, int i, json_t *reply);
void take_criteria(struct core *c, json_t *reply);
void judge_done(struct core *c, const json_t *outputs);
const char *task_id_of(const struct core *c, long t);
void loops_free(struct core *c);

#endif
