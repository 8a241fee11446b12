/* plan.h - the parts of sfma-plan, the run's state machine. */
#ifndef SFMA_PLAN_H
#define SFMA_PLAN_H

#include <jansson.h>
#include <signal.h>
#include <stdint.h>

#include "manifest.h"
#include "ndjson.h"

#define GENESIS_VERSION "genesis-v1"

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
extern volatile sig_atomic_t halt_requested;

/* Open the eight paths in the documented order (dies on failure). */
void stages_open(const char *const paths[2 * STAGE_COUNT]);
/* Send one JSON value as a line. 0, or -1 if the stage is gone. */
int stage_send(enum stage_id s, const json_t *msg);
/* Wait for the next reply line of stage s until deadline_ms (epoch ms; 0:
 * none). Watches every other stage too: one that closes its stdout has
 * died. Returns the parsed reply, or NULL with *why set: "timeout",
 * "halt" (a halt signal arrived and stop_on_halt), or a stage died. */
json_t *stage_wait(enum stage_id s, int64_t deadline_ms, int stop_on_halt, const char **why,
                   enum stage_id *dead);
void stage_close_input(enum stage_id s);

/* ---- prompt.c: what the model is told, and what it said --------------- */

/* The genesis system prompt: contract, manifest verbatim, task, dry-run. */
char *genesis_prompt(const struct manifest *m, const char *task, int dry_run, int pinned);
/* Lenient parse of a reply: fences stripped, whole text or first '{' to
 * last '}'. NULL if no JSON object can be read. */
json_t *parse_reply(const char *text);
/* 1 if v has every member of a bootstrap candidate. */
int is_candidate(const json_t *v);

/* ---- memory.c: memory.json and certification (CONTRACT.md section 8) -- */

struct memory {
	json_t *doc;               /* {"version":1,"runs":[...],"pinned":...,"endpoints":{...}} */
};

int memory_load(struct memory *mem, const char *path, char *err, size_t errlen);
/* The pinned configuration, or NULL. */
json_t *memory_pinned(struct memory *mem);
/* Append this run, then apply certification/demotion. *certified and
 * *demoted report the transitions. */
void memory_record_run(struct memory *mem, const struct manifest *m, json_t *run_summary,
                       json_t *candidate, int pinned_run, int *certified, int *demoted);
int memory_save(struct memory *mem, const char *path, char *err, size_t errlen);
void memory_free(struct memory *mem);

int64_t now_ms(void);
char *iso_time(int64_t ms); /* "2026-11-29T21:15:50.123Z" (static buffer) */


/* ---- the run (main.c, turn.c) ------------------------------------------ */

#include "store.h"

#define EXEC_GRACE_MS 5000  /* a stage may answer this long after the deadline */

struct run {
	struct manifest *m;
	int dry_run, progress;
	const char *task;
	char sfma_dir[4096];
	int64_t start_ms, deadline_ms;
	struct memory mem;
	int pinned_run, chain_alive;
	json_t *candidate;        /* adopted bootstrap candidate (owned) */
	json_t *lifecycle;        /* ["probation"|"pinned-replay", ...] */
	json_t *messages;         /* the conversation sent to the model */
	json_t *mutation_refs;
	json_t *written;          /* dry run: path -> sha256 of what would be written */
	json_t *endpoints;        /* measured endpoint state (from sfma-model) */
	char *system;
	long turns, model_calls, hard_failures;
	double first_seq, last_seq;
	const char *verdict;
	char error[600];
	const char *last_lifecycle;
	struct store store;
	int store_ok;             /* containment guards passed */
	const char *commit_sha;
};

/* Append one event through sfma-chain; the entry (new reference), or NULL
 * once the chain is gone. Consumes data and refs. */
json_t *trace(struct run *r, const char *kind, json_t *data, int loop, json_t *refs, const char *cls);
void trace_quiet(struct run *r, const char *kind, json_t *data, int loop, json_t *refs);
const char *entry_id(json_t *entry);
void lifecycle(struct run *r, const char *to);
/* Set the verdict (and the first error, if fmt) of the run. */
void end_with(struct run *r, const char *verdict, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Progress for humans on stderr when it is a terminal. */
void progress(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void say(struct run *r, const char *role, const char *content);
void tool_result(struct run *r, const char *text);
/* The turn loop: one model reply per turn, until done, a halt or a ceiling. */
void turns(struct run *r);
/* interrupted.c: before the run opens, record the unsealed tail an
 * interrupted run left after the last record's head (a `result` entry);
 * on a torn final line, end the run (chain_alive 0, r->error says how to
 * recover) before anything is appended. */
void record_interrupted_run(struct run *r);

#endif
