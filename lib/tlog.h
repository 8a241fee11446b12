/* tlog.h - the trace as a transparency log, in the text forms other tools
 * read (sfma-formats(5)): the C2SP tlog-checkpoint in C2SP signed-note
 * form, its Ed25519 verifier key, the C2SP tlog-proof of one line, and
 * the consistency proof of C2SP tlog-witness (old size, proof, checkpoint).
 * Byte for byte what golang.org/x/mod/sumdb/note and sumdb/tlog read.
 *
 * Parsing takes hostile bytes: every size is capped, every number has
 * one spelling, and a refusal is one line. Nothing here reads a file. */
#ifndef SFMA_TLOG_H
#define SFMA_TLOG_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/evp.h>

#include "buf.h"
#include "errors.h"
#include "merkle.h"

/* The name of the audit key in signature lines and its verifier key: one
 * key signs the checkpoints of every workspace, so its name names the
 * key, not a log (the origin line, which the signature covers, names the
 * log). */
#define TLOG_KEY_NAME "sfma-audit"
/* origin = "sfma/" + lowercase hex SHA-256 of the trace's first line
 * without its newline: fixed by the first entry, so one per trace. */
#define TLOG_ORIGIN_PREFIX "sfma/"
#define TLOG_ORIGIN_LEN (sizeof TLOG_ORIGIN_PREFIX - 1 + 64)
#define TLOG_PROOF_HEADER "c2sp.org/tlog-proof@v1"
/* A checkpoint or proof is a few hundred bytes; signed-note verifiers
 * must take at least 16 signatures (Go's take 100). */
#define TLOG_TEXT_MAX (64u << 10)
#define TLOG_MAX_SIGNATURES 100
/* The ed25519 signature type of signed-note. */
#define TLOG_ALG_ED25519 0x01

struct tlog_checkpoint {
	char origin[TLOG_ORIGIN_LEN + 1];
	uint64_t size;
	unsigned char root[MERKLE_HASH_LEN];
};

/* The origin of a trace whose first line (without its newline) is line[0..n). */
void tlog_origin(const void *line, size_t n, char out[TLOG_ORIGIN_LEN + 1]);
/* The checkpoint's note text: origin, size and base64 root, each line
 * ending in a newline. What is signed, and all of an unsigned checkpoint. */
void tlog_checkpoint_text(const struct tlog_checkpoint *c, struct buf *out);

/* An audit key as signed-note names it: TLOG_KEY_NAME, the key ID
 * SHA-256(name || 0x0A || 0x01 || public key)[:4] (big-endian), and the
 * raw 32-byte Ed25519 public key. */
struct tlog_key {
	uint32_t id;
	unsigned char pub[32];
};
/* The key of an Ed25519 EVP key's public half. 0, or -1 (e filled). */
int tlog_key_from_pkey(EVP_PKEY *key, struct tlog_key *k, struct sfma_err *e);
/* "<name>+<8 hex>+<base64(0x01 || public key)>", no newline: the verifier
 * key note.NewVerifier reads. */
void tlog_vkey(const struct tlog_key *k, struct buf *out);

/* text (ending in a newline) signed by priv (whose public half is k): the
 * text, a blank line and "— <name> <base64(key ID || signature)>\n". 0,
 * or -1 (e filled). */
int tlog_note_sign(EVP_PKEY *priv, const struct tlog_key *k, const char *text, size_t n, struct buf *out,
                   struct sfma_err *e);

enum tlog_signed {
	TLOG_UNSIGNED,   /* the note text alone: no signature lines */
	TLOG_UNVERIFIED, /* signature lines, none by the key given (or no key given) */
	TLOG_VERIFIED,   /* a signature by the key given verifies */
};

/* Read a checkpoint: the note text alone, or a signed note. With key,
 * its signature lines by that key (name and ID) must verify; lines of
 * other keys are skipped, as signed-note says. Fills c and *how. 0, or
 * -1 with e saying what is wrong ("checkpoint: ..."), also for a
 * signature by key that does not verify. The body must be exactly the
 * three lines sfma writes (an sfma origin, a size, a root): no extension
 * lines. */
int tlog_checkpoint_open(const char *note, size_t n, const struct tlog_key *key, struct tlog_checkpoint *c,
                         enum tlog_signed *how, struct sfma_err *e);

enum tlog_proof_kind {
	TLOG_INCLUSION,   /* c2sp.org/tlog-proof@v1: index, audit path, checkpoint */
	TLOG_CONSISTENCY, /* old SIZE, consistency proof, checkpoint (C2SP tlog-witness) */
};

struct tlog_proof {
	enum tlog_proof_kind kind;
	uint64_t index;  /* TLOG_INCLUSION: the leaf; TLOG_CONSISTENCY: the old size */
	size_t n;
	unsigned char hash[MERKLE_PROOF_MAX][MERKLE_HASH_LEN];
	const char *note; /* the checkpoint, inside the text parsed */
	size_t note_len;
};

/* The proof's text: for an inclusion proof the header line, "index N",
 * one base64 hash per line, an empty line, then the checkpoint note
 * verbatim; for a consistency proof "old N" first instead of the two. */
void tlog_proof_text(const struct tlog_proof *p, struct buf *out);
/* Parse a proof of either kind; p->note points into text. The checkpoint
 * itself is left to tlog_checkpoint_open. 0, or -1 (e filled). */
int tlog_proof_parse(const char *text, size_t n, struct tlog_proof *p, struct sfma_err *e);

#endif
