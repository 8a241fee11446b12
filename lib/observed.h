/* observed.h - what the observer saw on the planner's pipes, and the
 * check that the trace records it one to one (sfma-formats(5), The
 * observed chain).
 *
 * sfma-tap sits on the pipes between the planner and sfma-model,
 * sfma-exec (and sfma-mem); for every line that crosses one it appends a
 * record {stage, dir, n, sha256, bytes} to .sfma/observed.jsonl, a
 * sha256-chain-v1 chain of its own. The planner, for its part, puts the
 * same record of every line it wrote or read on those pipes in the
 * `wire` member of the entry that stands for it. sfma-verify holds the
 * two against each other. Everything here is pure: the tap, the seal and
 * the verifier do the I/O. */
#ifndef SFMA_OBSERVED_H
#define SFMA_OBSERVED_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"
#include "sha.h"

#define OBSERVED_FILE "observed.jsonl"     /* in the workspace's .sfma/ */
#define OBSERVED_NOTE "observed-head.json" /* its verified head (chain.h's note), the tap's */
#define OBSERVED_WIRE "wire"               /* the trace entry's member */
#define OBS_STAGE_NAME_MAX 32              /* bytes of a stage name, its NUL included */
#define OBS_STAGES_MAX 8                   /* stages one part may name */
#define OBS_WIRE_MAX 4096                  /* records one entry's wire may hold */

/* 1 if s[0..n) is a stage name: 1 to 31 of [a-z0-9-]. */
int obs_stage_name_ok(const char *s, size_t n);

/* ---- a line's record ------------------------------------------------------ */

struct obs_line {
	uint64_t n;                        /* its number on its pipe and direction, from 1 */
	uint64_t bytes;                    /* its length without the newline */
	char sha256[SHA256_HEX_LEN + 1];   /* SHA-256 of those bytes */
};

/* One direction of one pipe, hashed as its bytes stream past: no line is
 * ever held whole, so a line of any length costs no memory. */
struct obs_stream {
	struct sha256 h;
	uint64_t bytes;                    /* of the line so far */
	uint64_t lines;                    /* complete lines so far */
};

void obs_stream_init(struct obs_stream *s);
/* Feed p[0..n) up to and including its first newline, if any: returns the
 * bytes taken (n when there is no newline in p) and, when they complete a
 * line, fills *done (its record) and returns with *complete set. Called
 * again on the rest, one line at a time. */
size_t obs_stream_feed(struct obs_stream *s, const char *p, size_t n, struct obs_line *done, int *complete);
/* The record of what the stream holds of a line cut off by the end of its
 * input (s->bytes > 0), numbered as the next line. */
void obs_stream_tail(struct obs_stream *s, struct obs_line *out);
/* The record of one whole line (without its newline), numbered n. */
void obs_line_of(const char *line, size_t len, uint64_t n, struct obs_line *out);

/* The record as the trace's `wire` member holds it:
 * {"bytes","dir","n","sha256","stage"} (new reference). dir is "out"
 * (the planner to the stage) or "in" (the stage to the planner). */
json_t *obs_wire_record(const char *stage, const char *dir, const struct obs_line *l);
/* 0 if wire is a `wire` member as sfma-formats(5) gives it: a non-empty
 * array of at most OBS_WIRE_MAX such records, each with exactly those
 * members. Else -1 with e naming what is wrong. */
int obs_wire_valid(const json_t *wire, struct sfma_err *e);

/* ---- the observer's chain --------------------------------------------------
 *
 * Its entries (each with seq, prevHash and hash as sha256-chain-v1 has
 * them): {"kind":"open","stages":[names],"trace":BYTES} where a run's
 * observation begins (BYTES: the trace's size then, where the run's
 * entries begin), {"kind":"line","stage","dir","n","sha256","bytes"}
 * (plus "torn":true for bytes cut off by the end of their input), and
 * {"kind":"close","lines":{STAGE:{"out":N,"in":M}}} once every pipe
 * ended. */

/* The entries, as the tap appends them (new references; seq and the
 * chain members are the writer's to add). */
json_t *obs_open_entry(const char *const *stages, int nstages, uint64_t trace_bytes, uint64_t torn_bytes);
json_t *obs_line_entry(const char *stage, const char *dir, const struct obs_line *l, int torn);
json_t *obs_close_entry(const char *const *stages, int nstages, const uint64_t (*lines)[2]);

/* The message the observer's key signs, as a NUL-terminated canonical
 * JSON text: {"observedEntries":N,"observedHead":"<hex>"}. */
#define OBS_SIGNED_MAX 128
void obs_signed_text(uint64_t entries, const char *head, char out[OBS_SIGNED_MAX]);

/* The head sfma-tap hands over and sfma-seal puts in the record: 0 if
 * head is {"observedEntries":N,"observedHead":HEX[,"signature":S]} (the
 * tap's line) with S, when present, {"algorithm":"ed25519","publicKey",
 * "value"} whose value verifies under publicKey over obs_signed_text.
 * Else -1 with e. *entries and *hex (64 digits and a NUL) are filled. */
int obs_head_valid(const json_t *head, uint64_t *entries, char hex[SHA256_HEX_LEN + 1], struct sfma_err *e);
/* 0 if sig (integrity.observerSignature) verifies over the signed text of
 * entries and hex under the key it embeds; with trusted (a PEM public key,
 * SFMA_OBSERVER_PUBLIC_KEY) that key must be the embedded one. Else -1
 * with e ("observer signature does not verify", "...not the trusted key"). */
int obs_signature_check(const json_t *sig, uint64_t entries, const char *hex, const char *trusted, struct sfma_err *e);

/* ---- the check --------------------------------------------------------------
 *
 * Fed the observed chain's entries up to the head the record commits to,
 * then the trace's entries up to the head the record seals, each with the
 * byte offset its line begins at (increasing); then asked for the
 * verdict. Each refusal is one line:
 *   observed: line L: ...                                    (the chain's own shape)
 *   observed: STAGE DIR message N has no trace entry ...     (seen, not recorded)
 *   observed: seq S: STAGE DIR message N was never observed  (recorded, not seen)
 * sfma-formats(5) gives the rules. */

struct obs_check;

struct obs_counts {
	uint64_t parts;                    /* runs the observer saw */
	uint64_t matched;                  /* lines seen and recorded alike */
	uint64_t unread;                   /* seen and left unread by a run that stopped or was cut short */
	uint64_t unobserved;               /* recorded after the observer of a run died */
};

/* trace_bytes: the size of the trace the record seals. */
struct obs_check *obs_check_new(uint64_t trace_bytes);
void obs_check_free(struct obs_check *c);
/* The observed chain's entry on line line_no (from 1). 0, or -1 with e. */
int obs_check_observed(struct obs_check *c, const json_t *entry, uint64_t line_no, struct sfma_err *e);
/* A trace entry whose line begins at byte offset; NULL for one that
 * obs_trace_line_relevant passed over (it still counts). 0, or -1 with e. */
int obs_check_trace(struct obs_check *c, const json_t *entry, uint64_t offset, struct sfma_err *e);
/* The verdict once both are fed: 0 with *out filled, or -1 with e. */
int obs_check_end(struct obs_check *c, struct obs_counts *out, struct sfma_err *e);

/* 1 if a trace line of these bytes may carry something the check reads
 * (a wire member, a run's start, stop or end): the others need not be
 * parsed. Errs on the side of yes: any escape may spell a name. */
int obs_trace_line_relevant(const char *line, size_t len);

#endif
