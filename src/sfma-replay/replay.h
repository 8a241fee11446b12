/* replay.h - the parts of sfma-replay. The decisions are the core's
 * (lib/core.h), the same code that decided the run; the replay feeds it
 * from the record instead of the stages:
 *
 *   main.c     the program: the record, sfma-verify beside it, each run
 *              fed to the core and its entries compared with the trace
 *   trace.c    the trace read as a stream with a bounded lookahead, the
 *              comparison of an entry with the one derived, the verdicts
 *   standin.c  the stages' answers as the record holds them: a model
 *              reply from its call entries, an exec answer with the hard
 *              tier's gate decided again, recall, keep and outputs
 *
 * Every entry is hostile input: any shape gets a one-line verdict. */
#ifndef SFMA_REPLAY_H
#define SFMA_REPLAY_H

#include <jansson.h>
#include <stddef.h>

#include "core.h"
#include "hardtier.h"

struct evidence_store;

/* ---- trace.c ---- */

/* Open the trace below the workspace's .sfma (a regular file, never a
 * link or a FIFO). Dies with one line when it cannot be read. */
void trace_open(int sfma_fd);
/* The entry i ahead of the next one (0: the next), read as needed, or
 * NULL at the end of the trace. The lookahead is bounded: past it the
 * replay is incomplete. */
json_t *peek_at(size_t i);
json_t *peek(void);
/* The core's wire source (core.h): the `wire` member of the trace's entry
 * of that seq, the host fact the run recorded (a new reference, or NULL). */
json_t *wire_of_entry(void *arg, double seq);
/* Consume the next entry (borrowed until the next call of next or peek*). */
json_t *next(void);
/* The entry consumed last, or NULL. */
json_t *last_consumed(void);
/* Entries consumed so far, and how many of them carry evidence. */
size_t trace_count(void);
size_t trace_evidence_count(void);
void trace_close(void);

long long seq_of(const json_t *e);
const char *kind_of(const json_t *e);
json_t *data_of(const json_t *e);
int loop_of(const json_t *e);
/* The entry is a `result` with the member (halt, error, interrupted). */
int is_result(const json_t *e, const char *member);

/* The verdict lines, each ending the program (exit 1). Descriptions are
 * clipped and shown with control bytes as '?'. */
_Noreturn void diverged(const json_t *e, const char *has, const char *derives);
/* A formatted description, in one of a few static buffers (reachable at
 * exit: a verdict line frees nothing it needs). */
const char *sx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void incomplete(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Entry e has no evidence[member] where the code derives one (main.c):
 * incomplete, saying why - the run could not store its evidence (its
 * result says so, and a later run may still be replayed with --run), or
 * a record made before evidence existed. */
_Noreturn void evidence_lost(const json_t *e, const char *member);
/* What the replay frees after any verdict line, and what it waits for
 * before one (set by main.c). */
extern void (*replay_cleanup)(void);
extern void (*replay_gate)(void);

/* Compare a derived event (as the core emits it, with its id) with the
 * next trace entry and consume it; diverges on any difference. */
void expect_event(const json_t *ev, const char *id);
/* canonical equality of two values (NULL: absent) */
int same_json(const json_t *a, const json_t *b);

/* ---- standin.c ---- */

struct standin {
	struct evidence_store *store;  /* .sfma/evidence, read only */
	struct gate_ctx gate;          /* the hard tier over an empty directory */
	int dry_run;
};
extern struct standin S;

/* The bytes of the blob evidence[member] of e (malloc'd), or NULL when e
 * names none; a blob that cannot be read makes the replay incomplete. */
char *blob_of(const json_t *e, const char *member, size_t *n);
/* The text of a tool result message blob ({"toolResult":T} or the tool
 * message answering native calls): T (malloc'd), or NULL. */
char *result_text(const char *blob, size_t n);

/* The reply to a model request as its call entries recorded it, starting
 * at the lookahead's head (n entries; a new reference). */
json_t *recorded_reply(long id, size_t *n);
/* A reply of no attempt (the array-form mock's judge, a budget spent). */
json_t *empty_reply(long id, int ok, const char *text, const char *endpoint, const char *error);

/* The answers to the core's synchronous requests, fed to it. */
void answer_exec(struct core *c, const json_t *req);
void answer_recall(struct core *c, const json_t *req);
void answer_keep(struct core *c);
void answer_outputs(struct core *c);
/* Take down what a rebuild of path facts made (also at exit). */
void unbuild(void);

#endif
