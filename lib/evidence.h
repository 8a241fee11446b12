/* evidence.h - the content-addressed evidence store, <workspace>/.sfma/evidence/.
 *
 * Every byte that crosses the boundary between the model and the runner is
 * kept as a blob named by its SHA-256 (64 lowercase hex digits), so a trace
 * entry can carry a small reference {"sha256":HEX,"bytes":N} and a
 * verifier, a replay or a reader can get the bytes back. Blobs are mode
 * 0600, the directory 0700: they may hold whatever the model saw.
 *
 * A writer makes a blob durable in one cheap step: it appends the blob to
 * the store's journal, evidence/journal, and one fdatasync of the journal
 * (evidence_sync) makes every blob taken since durable before the entry
 * that references them is appended - an fsync per blob file and one of
 * the directory cost a run twice what it costs without evidence. A thread
 * files each record under its name (a temporary file renamed into place)
 * as the run goes on; evidence_finish files the rest, syncs the file
 * system once and removes the journal. A run that stops before that
 * leaves a durable journal: readers find its blobs there, and the next
 * writer files them when it opens the store. A crash leaves at most an
 * unreferenced blob.
 *
 * Where references sit in a trace entry is fixed by sfma-formats(5): the
 * entry's top-level member "evidence", an object whose member values are
 * references or arrays of references. evidence_entry_refs walks it.
 *
 * A store may be shared by threads: evidence_check and evidence_get only
 * read, and the small cache of blobs already found intact is locked. */
#ifndef SFMA_EVIDENCE_H
#define SFMA_EVIDENCE_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "errors.h"
#include "sha.h"

#define EVIDENCE_DIR "evidence"
/* The entry member that holds an entry's references. */
#define EVIDENCE_MEMBER "evidence"
/* bytes is a JSON number read as a double: an exact integer up to 2^53 - 1. */
#define EVIDENCE_MAX_REF_BYTES 9007199254740991ull

struct evidence_store;

struct evidence_ref {
	char sha256[SHA256_HEX_LEN + 1];
	uint64_t bytes;
};

enum evidence_state {
	EVIDENCE_OK,
	EVIDENCE_MISSING, /* no such blob, or no evidence directory at all */
	EVIDENCE_ALTERED, /* present but not the bytes named: other size or hash, not a
	                     regular file, a symbolic link (blob or directory) */
	EVIDENCE_ERROR,   /* could not tell (a read failed); e says why */
};

/* Open the store under sfma_dirfd (an open <workspace>/.sfma).
 * With create: the directory is made (0700) when missing, a journal left
 * by a stopped run is filed, and the store is writable; any failure
 * returns NULL with e filled.
 * Without create (verifiers): never fails but for memory - a missing
 * directory (or sfma_dirfd < 0) makes every blob EVIDENCE_MISSING, a
 * symbolic link or non-directory in its place every blob EVIDENCE_ALTERED
 * (it is never followed), and another open error every check
 * EVIDENCE_ERROR. */
struct evidence_store *evidence_open(int sfma_dirfd, int create, struct sfma_err *e);
void evidence_close(struct evidence_store *s);

/* Store data[0..n) as blob <sha256>, durable when this returns. A blob
 * already there with the same bytes is kept (the store is deduplicated);
 * anything else under that name - another size or content, a link - is
 * replaced when the blob is filed, so the reference returned always names
 * an intact, durable blob. Returns a new reference object
 * {"sha256","bytes"} or NULL with e filled. The store must have been
 * opened with create. */
json_t *evidence_put(struct evidence_store *s, const void *data, size_t n, struct sfma_err *e);

/* evidence_put for a writer that stores several blobs before the entry
 * that references them: the blob is in the journal but not yet synced,
 * so the reference returned may NOT be appended anywhere before
 * evidence_sync has returned 0. */
json_t *evidence_put_nosync(struct evidence_store *s, const void *data, size_t n, struct sfma_err *e);
/* Make every blob put so far durable: one fdatasync of the journal when
 * it took anything since the last (and, once, an fsync of the directory
 * that holds its new name). 0, or -1 with e filled. It may run on another
 * thread than the puts (one at a time): it then covers every put that
 * returned before it was called. */
int evidence_sync(struct evidence_store *s, struct sfma_err *e);
/* Whether evidence_sync has anything to do: a blob put since the last. */
int evidence_sync_pending(struct evidence_store *s);
/* At the end of a run: every blob filed under its name, the file system
 * synced once (syncfs(2)), the journal removed. 0, or -1 with e filled -
 * then the journal stays, durable, and the next writer files it. */
int evidence_finish(struct evidence_store *s, struct sfma_err *e);

/* Parse a reference: exactly the members "sha256" (64 lowercase hex
 * digits) and "bytes" (an integer from 0 to 2^53 - 1). 0 with *out set,
 * or -1 with e saying what is wrong. */
int evidence_ref_parse(const json_t *ref, struct evidence_ref *out, struct sfma_err *e);

/* Call fn for each reference of a trace entry (the parsed line), in the
 * order of the "evidence" member's keys (as the canonical form sorts them),
 * array items in order; name is the key. Returns 0, the first non-zero
 * value fn returns, or -1 with e filled when "evidence" is present but not
 * an object of references (e names the key). *count receives the number of
 * references passed to fn. An entry without "evidence" has none. */
int evidence_entry_refs(const json_t *entry,
                        int (*fn)(void *arg, const char *name, const struct evidence_ref *ref),
                        void *arg, uint64_t *count, struct sfma_err *e);

/* Check the blob a reference names: a regular file (not a link) of the
 * stated size whose SHA-256 is the stated one, or, while it is not filed
 * (a live run, a stopped one), a record of the journal holding those
 * bytes (evidence_journal_next) - what the next writer would file under
 * the name. Streams the blob. */
enum evidence_state evidence_check(struct evidence_store *s, const struct evidence_ref *ref,
                                   struct sfma_err *e);

/* Check a blob as evidence_check does and keep its first bytes: at most
 * max of them go to head (max + 1 bytes of room), their count to *have. */
enum evidence_state evidence_head(struct evidence_store *s, const struct evidence_ref *ref, char *head,
                                  size_t max, size_t *have, struct sfma_err *e);

/* The reference of the blob named hex, filed or still in the journal:
 * 0 with *out filled (its size as stored; evidence_get then checks the
 * bytes), or -1 when the store has no such blob. */
int evidence_find(struct evidence_store *s, const char *hex, struct evidence_ref *out);

/* The journal (sfma-formats(5), Evidence): records appended in order, each
 * a header "<64 lowercase hex> <its length as 16 lowercase hex digits>\n"
 * then that many bytes, which must hash to the header's digest. */
#define EVIDENCE_JOURNAL "journal"
#define EVIDENCE_JOURNAL_HEADER_LEN (SHA256_HEX_LEN + 1 + 16 + 1)

struct evidence_journal_rec {
	char sha256[SHA256_HEX_LEN + 1]; /* "" when the header did not parse */
	uint64_t bytes;                  /* the length the header states */
	uint64_t off;                    /* where the bytes begin, past the header */
};

enum evidence_journal_step {
	EVIDENCE_JOURNAL_RECORD, /* a whole record whose bytes are its header's */
	EVIDENCE_JOURNAL_END,    /* off is the end: nothing more */
	EVIDENCE_JOURNAL_TORN,   /* a header or its bytes run past the end (a write
	                            in progress, or cut short by a crash) */
	EVIDENCE_JOURNAL_BAD,    /* not a header, or bytes that are not its header's */
	EVIDENCE_JOURNAL_ERROR,  /* a read failed; e says why */
};

/* Read the record at off of the journal fd, of size end (its fstat): *r
 * is set for RECORD, and for BAD when its header parsed (else r->sha256
 * is ""); the next record is at r->off + r->bytes. This is the one
 * reading of the journal: its readers (evidence_check, evidence_head,
 * evidence_get, evidence_find) and the recovery of evidence_open with
 * create go through it from offset 0 and stop at the first step that is
 * not RECORD - nothing from there on is evidence, so a reader finds
 * exactly the blobs the next writer files. Hashes the record's bytes. */
enum evidence_journal_step evidence_journal_next(int fd, uint64_t off, uint64_t end,
                                                 struct evidence_journal_rec *r, struct sfma_err *e);

/* Read a blob of at most max bytes, checked as evidence_check does.
 * Returns a malloc'd buffer of ref->bytes bytes plus a NUL, or NULL with e
 * filled ("evidence <hex> missing", "... altered", or larger than max). */
char *evidence_get(struct evidence_store *s, const struct evidence_ref *ref, size_t max,
                   struct sfma_err *e);

#endif
