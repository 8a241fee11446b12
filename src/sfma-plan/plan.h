/* plan.h - the parts of sfma-plan: the run's decisions are the core's
 * (lib/core.h); sfma-plan is the I/O around it. Each file stands above
 * what it uses, none calls back into one above it:
 *
 *   main.c         the program: options, --check, --tools, the handshake
 *   drive.c        one run: feeds the core, carries out its effects
 *   workspace.c    the workspace, its lock, the inbox, the outputs
 *   tracer.c       the trace, written behind the run
 *   interrupted.c  the record of a run that died before it sealed
 *   stages.c       the planner's end of every pipe
 *   memstage.c     the requests to the memory stage, sfma-mem
 *   confined.c     the confinement every process of the run reports
 *   memory.c       memory.json and certification
 *
 * Errors inside the program follow one convention: a function that can
 * fail returns -1 (or NULL) and fills a struct sfma_err, and its caller
 * decides what to say; what the operator reads is said in main.c and
 * drive.c (a few conditions that end the process at once die() where they
 * are found). */
#ifndef SFMA_PLAN_H
#define SFMA_PLAN_H

#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>

#include "errors.h"
#include "manifest.h"
#include "ndjson.h"

struct evidence_store;

/* ---- stages.c: the planner's end of every pipe ------------------------ */

enum stage_id { STAGE_MODEL, STAGE_EXEC, STAGE_CHAIN, STAGE_SEAL, STAGE_MEM, STAGE_COUNT };

struct stage {
	const char *name;          /* "sfma-model", ... */
	int to, from;              /* write to its stdin, read its stdout */
	struct line_reader reader;
	int dead;
	int finished;              /* its input was closed on purpose */
	char said[SFMA_ERR_MAX];   /* the error it stopped on, "" when none came */
	int drained;               /* what it wrote after its last reply was read */
	/* The lines it crossed, for the trace's `wire` members (sfma-formats(5),
	 * The observed chain): a stage the observer may watch has them counted. */
	int observed;
	uint64_t sent, got;        /* lines written to it, lines read from it */
	json_t *wire;              /* their records not yet taken (stage_wire), or NULL */
};

extern struct stage stages[STAGE_COUNT];
/* The halt signal that arrived (SIGTERM, SIGINT, SIGHUP), or 0. */
extern volatile sig_atomic_t halt_signal;

/* Open the ten paths in the documented order (dies on failure). */
void stages_open(const char *const paths[2 * STAGE_COUNT]);
/* Send one JSON value as a line. 0, or -1 if the stage is gone. */
int stage_send(enum stage_id s, const json_t *msg);

enum wait_why { WAIT_OK, WAIT_TIMEOUT, WAIT_HALT, WAIT_DIED };
struct wait_opts {
	int64_t deadline_mono;     /* monotonic ms; 0: none */
	int stop_on_halt;          /* a halt signal ends the wait */
	int watch_others;          /* another stage's hang-up ends the wait */
};
/* Why stage s is gone, after a send to it failed: the error it stopped
 * on ("sfma-seal: ..."), or "stage sfma-seal died". */
void stage_death(enum stage_id s, struct sfma_err *e);
/* Wait for the next reply line of stage s. With watch_others, a stage that
 * closes its stdout meanwhile has died and ends the wait. Returns the
 * parsed reply, or NULL with *why and e set (the stage that died, or the
 * malformed reply, named in e). */
json_t *stage_wait(enum stage_id s, const struct wait_opts *o, enum wait_why *why, struct sfma_err *e);
void stage_close_input(enum stage_id s);
/* The records of the lines sent to and read from stage s since the last
 * call, in the order they crossed: a new array, or NULL when none did (or
 * the stage is not one the observer watches). The planner puts them on
 * the entry that stands for them (drive.c). */
json_t *stage_wire(enum stage_id s);

#ifdef SFMA_TEST_HOOKS
/* Only in the build tests/observe.bats makes (CFLAGS=-DSFMA_TEST_HOOKS),
 * never in a built program: the hook SFMA_TEST_HOOK names ("" when none),
 * which makes the planner lie about what crossed its pipes, so that the
 * test shows sfma-verify catching it. stages.c: altered-reply, altered-exec, altered-memory;
 * drive.c: unrecorded-request, phantom-call. */
const char *test_hook(void);
#endif
void stages_free(void);

/* ---- memstage.c: the memory stage (sfma-mem(1)) ------------------------- */

/* Ask sfma-mem: req (consumed) gets the next request id and goes; its
 * reply is waited for until deadline_mono (0: no deadline). Returns the
 * reply, a new reference, whose "ok" is true; or NULL with e set: the
 * stage's refusal (*why WAIT_OK: "ok":false, e its error), or no reply
 * (*why says why: the stage died, the wait timed out). */
json_t *mem_ask(json_t *req, int64_t deadline_mono, enum wait_why *why, struct sfma_err *e);
/* mem_ask in two halves, for a request that may work while the planner
 * does something else: mem_post sends it and returns its id (-1 with e
 * set: the stage is gone); mem_reply(id, ...) is the rest of mem_ask.
 * No other request may go in between. */
long long mem_post(json_t *req, struct sfma_err *e);
json_t *mem_reply(long long id, int64_t deadline_mono, enum wait_why *why, struct sfma_err *e);

/* ---- tracer.c: the trace, written behind the run ------------------------ */

/* Hand sfma-chain an event (its blobs in store made durable first)
 * without waiting for the entry. id: the id the entry must get ("" while
 * no id is known yet: before the run's first acknowledgement); the
 * acknowledgement is checked against it when it is read. 0, or -1 with e
 * set once the trace is gone (nothing more reaches it). */
int tracer_post(struct evidence_store *store, const json_t *ev, const char *id, struct sfma_err *e);
/* Wait until every entry posted is acknowledged, on disk (*last, if not
 * NULL: the last one's entry, a new reference), each under the id
 * expected for it. 0, or -1 with e set (the trace is gone). Settled
 * before anything acts on the world and before the seal. */
int tracer_settle(json_t **last, struct sfma_err *e);
/* The first failure to make the evidence journal durable, once: the
 * entries that named its blobs went without their references. NULL: none. */
const char *tracer_sync_failure(void);
/* Settle (when the trace is alive) and end the thread. */
void tracer_stop(int alive);

/* ---- interrupted.c ------------------------------------------------------- */

/* The unsealed tail an interrupted run left after the last record's head,
 * as the `result` event to append before this run opens (NULL: none),
 * *entries its length. A torn final line: NULL with *torn set and e
 * saying how to recover it. */
json_t *interrupted_event(const char *sfma_dir, uint64_t *entries, int *torn, struct sfma_err *e);

/* ---- memory.c: memory.json and certification (sfma-plan(1)) ------------ */

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
                       const json_t *candidate, int pinned_run, int *certified, int *demoted);
/* A done summary as memory.json keeps it: at most MEMORY_SUMMARY_MAX
 * bytes, cut at a UTF-8 boundary (the record keeps it whole). New ref. */
#define MEMORY_SUMMARY_MAX 4096
json_t *memory_clip(const json_t *summary);
void memory_free(struct memory *mem);

/* ---- workspace.c --------------------------------------------------------- */

struct workspace {
	const struct manifest *m;
	char sfma_dir[PATH_MAX];
	int lock_fd;               /* .sfma, flocked for this run */
	char **inbox;              /* the inbox files read, to delete once recorded */
	size_t n_inbox;
};

/* dir + "/" + name into out; dies rather than cut a path short (the
 * manifest loader bounds the workspace, so this does not happen). */
char *path_join(char out[PATH_MAX], const char *dir, const char *name);
/* Create the workspace (only under an existing parent) and .sfma with its
 * inbox and outbox, and lock it for this run alone. Dies with one line on
 * failure, having appended nothing. */
void workspace_open(struct workspace *w, const struct manifest *m);
/* Every inbox file, sorted by name: [{"file","text"}] (new). */
json_t *workspace_inbox(struct workspace *w);
/* Delete the inbox files workspace_inbox read (once they are recorded). */
void workspace_inbox_done(struct workspace *w);
int workspace_halt_file(const struct workspace *w);
/* The declared outputs as a judge sees them: [{"path","exists",
 * "content","clipped"}] (content clipped at a UTF-8 boundary). */
#define JUDGE_OUTPUT_MAX 4096
json_t *workspace_outputs(const struct workspace *w);
/* The record's outputs: [{"path","ok","sha256"?}] as they are now (dry
 * run: written maps each path written to its sha256). */
json_t *workspace_outputs_record(const struct workspace *w, int dry_run, const json_t *written);
void workspace_close(struct workspace *w);

/* ---- confined.c: what each process of the run has in force ------------- */

/* The processes that report their confinement to the planner: its
 * peers, in enum stage_id order, then the observer (sfma-tap), which is
 * no peer of the planner's: the channel is all it has of it. */
#define CONFINE_REPORTERS (STAGE_COUNT + 1)
#define REPORTER_TAP STAGE_COUNT

/* Send the go on every report channel (channel[s]: the planner's end, -1
 * when none), confine the planner, and read every channel to its end,
 * until deadline_mono (10 s at most) or a halt signal. Returns the
 * `confinement` entries' data in order: orchestrator's (sfma's report,
 * borrowed; NULL: none), the planner's, then each stage's reports
 * ({"stage", "reported":false} for one that sent none), then the
 * observer's when the run has one (a channel was given). Closes every
 * channel. */
json_t *confinement_take(int channel[CONFINE_REPORTERS], json_t *orchestrator, const struct workspace *ws,
                         int64_t deadline_mono);

/* ---- drive.c: one run ------------------------------------------------------ */

#define EXEC_GRACE_MS 5000  /* a stage may answer this long after the deadline */

struct run_options {
	int dry_run, progress;
	const char *task;          /* --task, or NULL */
	int *confine_channels;     /* [CONFINE_REPORTERS]: the report channels (-1: none) */
	json_t *orchestrator;      /* sfma's confinement report, or NULL */
};

/* Drive one run of the valid manifest m (owned) through the stages whose
 * pipes are open, from its first entry to its seal. Returns the exit
 * status: 0 completed, 1 anything else. */
int run_manifest(struct manifest *m, const struct run_options *o);

#endif
