/* chain.h - verification of a sha256-chain-v1 trace (sfma-formats(5)).
 *
 * A trace is streamed once, in blocks; the lines of a block are checked in
 * parallel (each entry's hash depends only on its own bytes), then linked in
 * order (each prevHash must be the previous entry's hash). Memory stays
 * bounded by the block size and the longest allowed line. */
#ifndef SFMA_CHAIN_H
#define SFMA_CHAIN_H

#include <jansson.h>
#include <stdint.h>

#include "errors.h"
#include "merkle.h"

struct evidence_store;

#define CHAIN_ZERO_HASH "0000000000000000000000000000000000000000000000000000000000000000"
#define CHAIN_MAX_SEQ 9007199254740991.0 /* 2^53 - 1 */
#define CHAIN_ID_MAX 128

/* An entry's id, <kind>-<seq> (sfma-formats(5)): what sfma-chain gives
 * the entry it appends and what the core predicts for it. */
void chain_entry_id(char out[CHAIN_ID_MAX], const char *kind, double seq);

/* A tree size whose root a verification reports (sfma-formats(5)). */
struct chain_tree_point {
	uint64_t size;                       /* entries, legacy lines included */
	int found;                           /* set: the trace has that many entries */
	unsigned char root[MERKLE_HASH_LEN]; /* set when found: the tree's root at that size */
};

struct chain_opts {
	int threads;              /* 0: one per online CPU, at most 8 */
	uint64_t max_line;        /* 0: NDJSON_DEFAULT_MAX */
	/* Optional trusted head: entry number trusted_count (1-based, legacy
	 * lines included) must have hash trusted_hash. */
	uint64_t trusted_count;
	const char *trusted_hash;
	/* Optional mark (mark_set): also report the trace as it stood after
	 * entry number mark_count (1-based, legacy lines included; 0 is the
	 * empty prefix) - the prefix a result record sealed. */
	int mark_set;
	uint64_t mark_count;
	/* Optional: check every evidence reference (sfma-formats(5)) against
	 * this store as its line is checked; with allow_pruned a missing blob
	 * is counted in pruned instead of failing (an altered one still fails). */
	struct evidence_store *evidence;
	int allow_pruned;
	/* Optional: the trace's first resume->size bytes are already known to
	 * verify with this summary (chain_verify_cached); fd is positioned
	 * there and only the rest is checked, linked to resume->head. Only
	 * for a prefix with a chained entry, not with trusted head or
	 * evidence, and with a mark only at or after the prefix's end. */
	const struct chain_summary *resume;
	/* Optional (tree): compute the RFC 6962 tree of the lines (merkle.h)
	 * in the same pass - out->tree, out->mark_root - and the roots at the
	 * sizes of points (sorted ascending), filled in place. The leaves are
	 * hashed by the worker threads with the lines, and so are the
	 * complete subtrees within each thread's share. */
	int tree;
	struct chain_tree_point *points;
	size_t npoints;
};

struct chain_summary {
	uint64_t entries;          /* all lines, legacy included */
	uint64_t legacy;           /* unchained lines at the start */
	char head[65];             /* hash of the last chained entry; with none: the
	                              legacy digest, or 64 zeros for an empty trace */
	double max_seq;            /* largest seq seen (0 if none) */
	double last_seq;           /* seq of the last entry (0 if none) */
	char anchor[CHAIN_ID_MAX]; /* id of the latest clock-anchor entry, or "unanchored" */
	uint64_t torn_offset;      /* when verification failed on a torn final line */
	int torn;                  /* 1 if so: the file ends inside a line */
	uint64_t size;             /* bytes of complete lines */
	uint64_t last_offset;      /* where the last complete line begins */
	/* With opts->mark_set, once entry mark_count was linked (mark_found): */
	int mark_found;
	char mark_head[65];        /* what `head` was after it */
	double mark_seq;           /* its seq (0 for the empty prefix) */
	uint64_t mark_offset;      /* bytes up to and including it: where the rest begins */
	uint64_t evidence;         /* references checked (with opts->evidence) */
	uint64_t pruned;           /* of which missing, accepted by allow_pruned */
	int evidence_failed;       /* 1 if verification failed on evidence: e is then
	                              "seq <n>: evidence <hex> missing|altered" or another
	                              "seq <n>: evidence..." reason, without a line prefix */
	/* With opts->tree: the tree of the `entries` lines, and its root at the mark. */
	struct merkle_frontier tree;
	unsigned char mark_root[MERKLE_HASH_LEN];
};

/* Verify the trace readable on fd from its current offset to EOF. Returns 0
 * with *out filled, or -1 with e naming the first thing that broke
 * ("line 7: hash mismatch ...") or, with out->evidence_failed, the first
 * evidence failure in trace order; out->torn tells a torn final line apart. */
int chain_verify_fd(int fd, const struct chain_opts *opts, struct chain_summary *out,
                    struct sfma_err *e);

/* ---- the verified-head cache ------------------------------------------------
 *
 * A writer that verified and extended a trace may leave a note of what it
 * verified: the summary of the first `size` bytes and a digest binding that
 * summary to those exact bytes (SHA-256 of the raw bytes, then of that
 * digest with the summary). The next verification hashes the prefix bytes
 * again - plain SHA-256, several times cheaper than checking every entry -
 * and when the note matches it checks only the lines after it. Any change
 * to a byte below the noted size, a shorter file, or a note altered, torn
 * or of another trace, fails the match, and the whole trace is verified
 * from its first line as without a note. A note cannot make a changed
 * prefix pass: only a forged note that matches the changed bytes can,
 * and whoever can write one can rewrite the chain itself with valid
 * hashes, which no verification without a trusted head or a signature
 * detects. sfma-verify never reads the note.
 *
 * The note also holds the Merkle frontier of those lines (merkle.h) and,
 * when its writer says so, the tree's root at the size the writer found
 * the trace at: the tree of the next writer and of the seal is then
 * extended from it, and the previous checkpoint's root (the size the
 * writer opened, as a rule) read from it, both without hashing a line of
 * the prefix again. */
#define CHAIN_HEAD_CACHE "chain-head.json" /* in the workspace's .sfma/ */

struct chain_digest; /* a running SHA-256 over the trace's bytes */

/* chain_verify_fd of the whole trace on fd (read from offset 0), using the
 * note at cache_path when it matches (cache_path NULL or unreadable: no
 * note). opts may be NULL or ask for a mark only (a mark before the
 * note's end means a verification from the start) and the tree (a point
 * before the note's end but at its writer's opening size is read from
 * the note; any other means a verification from the start). *used tells whether
 * the note was used. With dg, *dg receives the running digest of every
 * byte of the verified trace (the caller extends it with what it appends
 * and frees it); on failure *dg is NULL. */
int chain_verify_cached(int fd, const char *cache_path, const struct chain_opts *opts,
                        struct chain_summary *out, int *used, struct chain_digest **dg,
                        struct sfma_err *e);
void chain_digest_add(struct chain_digest *dg, const void *data, size_t n);
void chain_digest_free(struct chain_digest *dg);
/* Write the note for the trace sum describes (with its tree), whose bytes
 * dg has hashed, and optionally the tree at the size its writer opened:
 * replaced atomically (never torn), not fsynced (a note lost in a crash
 * costs one full verification). 0, or -1 with e filled. */
int chain_head_cache_write(const char *cache_path, const struct chain_summary *sum,
                           const struct chain_tree_point *opened, const struct chain_digest *dg,
                           struct sfma_err *e);

/* The bytes of the line that begins at offset of fd, without its newline
 * (new NUL-terminated string, *len its length; the file offset is not
 * moved), or NULL with e filled. Reads at most max_line bytes (0:
 * NDJSON_DEFAULT_MAX). */
char *chain_line_at(int fd, uint64_t offset, uint64_t max_line, size_t *len, struct sfma_err *e);

/* The entry on the line that begins at offset of fd (a JSON object, new
 * reference; the file offset is not moved), or NULL with e filled. Reads at
 * most max_line bytes (0: NDJSON_DEFAULT_MAX). */
json_t *chain_entry_at(int fd, uint64_t offset, uint64_t max_line, struct sfma_err *e);

#endif
