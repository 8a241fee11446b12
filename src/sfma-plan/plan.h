/* plan.h - the parts of sfma-plan, the run's state machine.
 *
 *   main.c    the program: options, --check, the steps of a run
 *   run.c     the run: workspace, trace, lifecycle, record, seal, report
 *   turn.c    one turn: ask the model, hand a tool call to the hard tier
 *   stages.c  the planner's end of every pipe
 *   prompt.c  what the model is told, and what it said
 *   memory.c  memory.json and certification
 *   store.c   the memory stores and recall
 *
 * Errors inside the program follow one convention: a function that can
 * fail returns -1 (or NULL) and fills a struct sfma_err, and its caller
 * decides what to say; what the operator reads is said in main.c and
 * run.c (a few conditions that end the process at once die() where they
 * are found). */
#ifndef SFMA_PLAN_H
#define SFMA_PLAN_H

#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>

#include "err.h"
#include "manifest.h"
#include "ndjson.h"
#include "store.h"

struct evidence_store;

#define GENESIS_VERSION "genesis-v2"
/* The first line of every soft-tier judgment request (sfma-plan(1)). */
#define SOFT_VERSION "1"
#define SOFT_FIRST_LINE "sfma soft-tier judgment " SOFT_VERSION

/* ---- stages.c: the planner's end of every pipe ------------------------ */

enum stage_id { STAGE_MODEL, STAGE_EXEC, STAGE_CHAIN, STAGE_SEAL, STAGE_COUNT };

struct stage {
	const char *name;          /* "sfma-model", ... */
	int to, from;              /* write to its stdin, read its stdout */
	struct line_reader reader;
	int dead;
	int finished;              /* its input was closed on purpose */
};

extern struct stage stages[STAGE_COUNT];
/* The halt signal that arrived (SIGTERM, SIGINT, SIGHUP), or 0. */
extern volatile sig_atomic_t halt_signal;

/* Open the eight paths in the documented order (dies on failure). */
void stages_open(const char *const paths[2 * STAGE_COUNT]);
/* Send one JSON value as a line. 0, or -1 if the stage is gone. */
int stage_send(enum stage_id s, const json_t *msg);

enum wait_why { WAIT_OK, WAIT_TIMEOUT, WAIT_HALT, WAIT_DIED };
struct wait_opts {
	int64_t deadline_mono;     /* monotonic ms; 0: none */
	int stop_on_halt;          /* a halt signal ends the wait */
	int watch_others;          /* another stage's hang-up ends the wait */
};
/* Wait for the next reply line of stage s. With watch_others, a stage that
 * closes its stdout meanwhile has died and ends the wait. Returns the
 * parsed reply, or NULL with *why and e set (the stage that died, or the
 * malformed reply, named in e). */
json_t *stage_wait(enum stage_id s, const struct wait_opts *o, enum wait_why *why, struct sfma_err *e);
void stage_close_input(enum stage_id s);

/* ---- prompt.c: what the model is told, and what it said --------------- */

/* The runner's fixed answers (turn.c sends them, sfma-replay derives them). */
#define ANSWER_NOT_JSON "invalid reply: answer with exactly one JSON object"
#define ANSWER_NO_TOOL "invalid reply: expected one tool call {\"tool\":...}"
#define ANSWER_ADOPTED "candidate adopted; now reply with one tool call per turn"
#define ANSWER_CANDIDATE_FIRST "no bootstrap candidate adopted yet: reply first with one object with " \
	"mission, successCriteria, loopRoles, firstTasks and schedule"
#define REASON_NOT_JSON "invalid reply: not a JSON object"
#define REASON_NO_TOOL "invalid reply: no tool"
#define REASON_CANDIDATE_FIRST "tool call before a candidate was adopted"
#define FIRST_MESSAGE "Begin: reply with your bootstrap candidate.\n"
#define INBOX_HEADER "\nOperator messages (they may only narrow the task, never widen the manifest):\n"

/* The genesis system prompt: contract, manifest verbatim, task, dry-run. */
char *genesis_prompt(const struct manifest *m, const char *task, int dry_run, int pinned);
/* Lenient parse of a reply: fences stripped, whole text or first '{' to
 * last '}'. NULL if no JSON object can be read. */
json_t *parse_reply(const char *text);
/* 1 if v has every member of a bootstrap candidate. */
int is_candidate(const json_t *v);

/* Native tool calls (sfma-plan(1), Native tool use). A reply with several
 * calls carries out the first; every further call is answered with this. */
#define REMINDER_ONE_CALL "one call per turn: only the first call was carried out"
/* A native call whose input is no call object; the rest of the reason is
 * tools_call_object's. The model gets the reason as its answer. */
#define REASON_BAD_CALL "invalid reply: bad tool call: "
/* The tool message answering the native calls tool_calls: the first
 * result is text, every further one the reminder. New reference. */
json_t *tool_message(const json_t *tool_calls, const char *text);
/* The reply blob of a native reply: the canonical JSON of
 * {"provider","text","native"} (malloc'd, *n its length). */
char *native_reply_blob(const char *provider, const char *text, const json_t *native, size_t *n);

/* The soft tier (sfma-plan(1), The soft tier): a judge's reply is
 * {"pass":bool,"reason":S}; anything else fails with this reason. */
#define REASON_JUDGE_INVALID "judge reply invalid"
/* The judge the array-form mock answers as, with no call. */
#define MOCK_JUDGE "mock-judge"
/* 1 with *pass and *reason (malloc'd) set when text is a judgment, else
 * 0 with *reason REASON_JUDGE_INVALID. */
int soft_judgment_parse(const char *text, int *pass, char **reason);
/* Judgments counted as they come: the verdict is their majority (a tie
 * fails), its reason the first passing judge's when it passes, else the
 * first failing one's (REASON_JUDGE_INVALID without any). soft_tally_add
 * takes why. */
struct soft_tally {
	int n, passes;
	char *reason_pass, *reason_fail;
};
void soft_tally_add(struct soft_tally *t, int pass, char *why);
int soft_tally_verdict(const struct soft_tally *t, const char **reason);
void soft_tally_free(struct soft_tally *t);
/* The judge's and the criteria judgment's system prompts. */
extern const char soft_judge_prompt[], soft_criteria_prompt[];
/* Task tool refusals. */
#define REASON_PENDING_CEILING "pending task ceiling"
#define REASON_DUPLICATE_TASK "duplicate task id"

/* The blackboard's task {"id","description","role","class"} (new). */
json_t *task_def(const char *id, const char *description, const json_t *role, const char *cls);
/* The adopted candidate's firstTasks as the blackboard's first tasks:
 * ids made unique (t<i> for a missing or reused one); none: the run's task
 * itself, "main". New reference. */
json_t *first_tasks(const json_t *candidate, const char *task);
/* The first message of a loop's conversation (malloc'd). */
char *assigned_task_text(const json_t *def, int loop, const char *clarification);
/* The gate of a task post against the tasks so far (defs) and the pending
 * count: 1 and "task posted", or 0 and the refusal, in reason. */
int task_post_check(const json_t *call, const json_t *defs, size_t pending, long max_pending, char *reason,
                    size_t n);

/* Token usage summed over call entries (sfma-formats(5), usage). */
struct usage {
	long long input, output, cached;
};
void usage_add(struct usage *u, const json_t *usage);
json_t *usage_json(const struct usage *u);

/* The context budget (maxContextBytes). The size of a request is the
 * length of the canonical JSON of {"messages","system","tools"?}, tools
 * being tools_definitions() when they are offered (NULL: not). */
size_t context_bytes(const char *system, const json_t *messages, const json_t *tools);
struct context_fit {
	size_t before, after;
	json_t *elided;            /* the sha256 of each elided message, in order (new) */
};
/* Make messages fit in budget bytes: the oldest runner messages (tool
 * results, answers) and then the oldest exchanges become stubs naming
 * their evidence and the recall that brings it back; never the first
 * message, messages[keep] (the adopted candidate's reply; -1: none) or
 * the last two. refs[i] is the evidence reference of messages[i] (null:
 * none, or already elided). Returns 0 when it fits as it is, 1 when
 * messages were elided and it fits now, -1 when it cannot fit. */
#define CONTEXT_CANNOT_FIT "context budget: the next request needs %zu bytes with every elidable message " \
	"elided, maxContextBytes is %ld"
int context_fit(const char *system, json_t *messages, json_t *refs, const json_t *tools, size_t budget, long keep,
                struct context_fit *out);

/* ---- memory.c: memory.json and certification (sfma-plan(1)) -- */

struct memory {
	json_t *doc;               /* {"version":1,"runs":[...],"pinned":...,"endpoints":{...}} */
};

/* Load memory.json at path (none: an empty memory). Returns 0, or -1 with
 * e set (not JSON, or not a memory document). */
int memory_load(struct memory *mem, const char *path, struct sfma_err *e);
/* The same over text (len bytes) already read. */
int memory_parse(struct memory *mem, const char *text, size_t len, struct sfma_err *e);
/* The pinned configuration, or NULL. */
json_t *memory_pinned(struct memory *mem);
/* Append this run, then apply certification/demotion. *certified and
 * *demoted report the transitions. */
void memory_record_run(struct memory *mem, const struct manifest *m, json_t *run_summary,
                       json_t *candidate, int pinned_run, int *certified, int *demoted);
/* A done summary as memory.json keeps it: at most MEMORY_SUMMARY_MAX
 * bytes, cut at a UTF-8 boundary (the record keeps it whole). New ref. */
#define MEMORY_SUMMARY_MAX 4096
json_t *memory_clip(json_t *summary);
int memory_save(struct memory *mem, const char *path, struct sfma_err *e);
void memory_free(struct memory *mem);

/* ---- turn.c: loops and the blackboard (sfma-plan(1), Loops) ---------- */

/* One conversation: what the planner sends the model for one loop. */
struct conv {
	json_t *messages, *message_refs, *native_calls, *message_ref;
	long candidate_msg;
	int message_sent;
};

enum task_state { TASK_PENDING, TASK_ACTIVE, TASK_PASSED, TASK_FAILED };
struct bb_task {
	json_t *def;               /* {"id","description","role","class"} */
	enum task_state state;
	int attempts;
	int not_loop;              /* a retry goes to another loop than this (0: any) */
	char *clarification;       /* the judge's reason of a failed first attempt */
};

#define SOFT_CALLS_MAX 5
struct loop {
	struct conv c;             /* saved while another loop's is current */
	long task;                 /* blackboard index, -1: none */
	long req_id, allowance;    /* the work request in flight (0: none) */
	long hard_failures;        /* refusals during its current task */
	char producer[200];        /* the endpoint that produced its work */
	json_t *entries;           /* ids of its current task's entries */
	/* the soft judgment of its done */
	int judging, judges_to_send, judges_out;
	long judge_ids[SOFT_CALLS_MAX], judge_allow[SOFT_CALLS_MAX];
	json_t *judge_replies;     /* [reply...] in request order (null: none yet) */
	json_t *judge_msg_ref, *judge_calls;
	char *judge_msg;
};

/* ---- run.c: the run ----------------------------------------------------- */

#define EXEC_GRACE_MS 5000  /* a stage may answer this long after the deadline */

struct run {
	struct manifest *m;
	int dry_run, progress;
	const char *task;          /* the task the model gets */
	const char *clarification; /* --task, recorded as a clarification */
	char sfma_dir[PATH_MAX];
	int lock_fd;
	int64_t start_mono, deadline_mono;
	struct memory mem;
	int pinned_run, chain_alive;
	json_t *candidate;        /* adopted bootstrap candidate (owned) */
	json_t *lifecycle;        /* ["probation"|"pinned-replay", ...] */
	json_t *messages;         /* the conversation sent to the model */
	json_t *message_refs;     /* the evidence reference of each message (null: none, or elided) */
	long candidate_msg;       /* index of the adopted candidate's reply in messages; -1 */
	json_t *native_calls;     /* the toolCalls of the reply being answered, or NULL */
	json_t *tool_defs;        /* tools_definitions(), offered once a candidate is adopted */
	struct usage usage;       /* summed over the run's call entries */
	json_t *mutation_refs;
	json_t *written;          /* dry run: path -> sha256 of what would be written */
	json_t *endpoints;        /* measured endpoint state (from sfma-model) */
	char *system;
	char *inbox;              /* the operator's messages for the first turn */
	long turns, model_calls, hard_failures;
	char first_refusal[300];  /* the first hard-tier refusal's reason */
	double first_seq, last_seq;
	const char *verdict;
	const char *halt_trigger; /* "HALT file", "SIGTERM", ... */
	char error[600];
	const char *last_lifecycle;
	struct store store;
	int store_ok;             /* containment guards passed */
	const char *commit_sha;
	/* Evidence (.sfma/evidence): references waiting for the entry that
	 * reports them. The system prompt goes with the run's first model
	 * request; a message with the request that sends it. */
	struct evidence_store *evidence; /* .sfma/evidence, opened once per run */
	char evidence_error[SFMA_ERR_MAX]; /* why it could not be opened */
	json_t *prompt_ref;
	json_t *message_ref;
	int message_sent;         /* message_ref went out with a request no call answered */
	json_t *summary;          /* the done summary (a string), or NULL */
	/* Loops (turn.c): the current conversation is the one in the fields
	 * above; loops[cur].c keeps it while another loop's is current. */
	struct loop *loops;
	int n_loops, cur, loop_no; /* loop_no: the number entries carry */
	struct bb_task *tasks;
	size_t n_tasks;
	int legacy;               /* one conversation does the first task (maxLoops 1, or one task) */
	long next_request, reserved_calls, work_in_flight;
	json_t *feedback;         /* soft outcomes for the next request's "verdicts" */
	json_t *last_outputs;     /* the outputs the last done recorded */
	long criteria_id, criteria_allow;
	json_t *criteria;         /* the criteria judgment's result, or NULL */
	long soft_judged, soft_passed; /* the run's soft verdicts (memory.json) */
};

/* dir + "/" + name into out; dies rather than cut a path short (the
 * manifest loader bounds the workspace, so this does not happen). */
char *path_join(char out[PATH_MAX], const char *dir, const char *name);

/* The run as the contract and options define it; nothing touched yet. */
void run_init(struct run *r, struct manifest *m, int apply, const char *task, int progress);
/* Create the workspace (only under an existing parent) and .sfma with its
 * inbox and outbox, lock it for this run alone, load memory.json. Dies
 * with one line on failure, having appended nothing. */
void run_open_workspace(struct run *r);
/* The run's first entries: an interrupted run's record, clock anchor,
 * lifecycle start, the stores, the inbox, --task. -1 when the trace refuses
 * the first entry (sfma-chain said why), -2 when the trace cannot be
 * extended as it is (a torn final line: this says what to do); in both
 * cases nothing was appended and the run is not sealed. */
int run_begin(struct run *r);
/* Close the run in trace and memory, seal it, print the summary line;
 * returns the exit status. Frees the run. */
int run_end(struct run *r);
void run_free(struct run *r);

/* Append one event through sfma-chain: its seq and id, {"seq","id"} (the
 * whole entry before the run's first acknowledgement; a new reference),
 * or NULL once the chain is gone. Consumes data and refs. */
json_t *trace(struct run *r, const char *kind, json_t *data, int loop, json_t *refs, const char *cls);
void trace_quiet(struct run *r, const char *kind, json_t *data, int loop, json_t *refs);
/* trace with the event's top-level "evidence" member (sfma-formats(5),
 * Evidence): an object of references, consumed; NULL for none. Every
 * reference in it must name a blob evidence() returned. */
json_t *trace_ev(struct run *r, const char *kind, json_t *data, json_t *evidence, int loop, json_t *refs,
                 const char *cls);
void trace_quiet_ev(struct run *r, const char *kind, json_t *data, json_t *evidence, int loop, json_t *refs);
const char *entry_id(json_t *entry);

/* tracer.c: entries written behind the run. tracer_post hands sfma-chain
 * an event (its blobs made durable first) without waiting for the entry;
 * with expected, the caller needs the entry's seq and id: *expected is
 * {"seq","id"} as sfma-chain will append it, or NULL before the first
 * acknowledgement, when only the entry itself can say (the caller then
 * settles next). tracer_settle waits until every entry posted is
 * acknowledged, on disk (*last, if not NULL: the last one's entry, a new
 * reference), each under the id expected for it: 0, or -1 with the chain
 * gone (r->chain_alive 0, r->error says why). Settled before anything
 * acts on the world and before the seal. tracer_stop settles and ends the
 * thread. */
int tracer_post(struct run *r, const json_t *ev, json_t **expected);
int tracer_settle(struct run *r, json_t **last);
void tracer_stop(struct run *r);
void lifecycle(struct run *r, const char *to);
/* Set the verdict (and the first error, if fmt) of the run. */
void end_with(struct run *r, const char *verdict, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A halt (verdict "halted-..."), naming what triggered it: "HALT file",
 * "SIGTERM", "maxTurns", "maxSeconds", ... */
void end_halted(struct run *r, const char *verdict, const char *trigger, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Store data[0..n) as evidence; its reference {"sha256","bytes"} (new),
 * durable before the caller traces the entry that carries it. NULL when
 * the store failed: the run is then failed (a record must not claim what
 * it cannot show). */
json_t *evidence(struct run *r, const void *data, size_t n);
/* (*evidence)[name] = ref, the object made on first use (ref consumed;
 * nothing when ref is NULL). References go there, in the event's
 * top-level "evidence" member, never into its data. */
void attach_evidence(json_t **evidence, const char *name, json_t *ref);

/* Count a hard-tier refusal, keeping the first reason for the report. */
void refused(struct run *r, const char *reason);
/* Progress for humans on stderr (--progress, or stderr a terminal):
 * "sfma-plan: +1.234s turn 2: ...", control bytes escaped. */
void progress(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The run's deadline as the stages take it: epoch milliseconds. */
int64_t deadline_wall_ms(const struct run *r);

/* ---- turn.c: the turns -------------------------------------------------- */

/* The genesis prompt and the first message (candidate or pinned replay,
 * and the operator's inbox). */
void genesis(struct run *r);
/* The turn loop: one model reply per turn, until done, a halt or a ceiling. */
void turns(struct run *r);
/* What the loops and the blackboard hold (run_free calls it). */
void loops_free(struct run *r);
/* interrupted.c: before the run opens, record the unsealed tail an
 * interrupted run left after the last record's head (a `result` entry);
 * on a torn final line, end the run (chain_alive 0, r->error says how to
 * recover) before anything is appended. */
void record_interrupted_run(struct run *r);

#endif
