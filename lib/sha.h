/* sha.h - SHA-256 (libcrypto) as lowercase hex, and as a stream.
 *
 * Through libcrypto's SHA256_Init/Update/Final, not EVP: OpenSSL 3 loads
 * its default provider and builds its algorithm name map at the first EVP
 * fetch, 1.5 to 2 ms of CPU in every process that hashes - more than all
 * the hashing a stage does in a small run - while these functions run the
 * same assembly with no set-up at all. They are deprecated in OpenSSL 3.0
 * (for EVP's sake, not for a flaw) and still shipped; only sha.c calls
 * them. Ed25519 (lib/sign.c) goes through EVP, which it needs. */
#ifndef SFMA_SHA_H
#define SFMA_SHA_H

#include "hex.h"

#include <stddef.h>
#include <openssl/sha.h>

/* A SHA-256 in progress; copied by assignment (a digest so far). */
struct sha256 {
	SHA256_CTX c;
};
void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t n);
void sha256_final(struct sha256 *s, unsigned char md[32]);

/* out receives 64 hex digits and a NUL. */
void sha256_hex(const void *data, size_t n, char out[SHA256_HEX_LEN + 1]);

/* One message for sha256_many: the bytes of part[0], part[1] and part[2]
 * in that order (a part of length 0 may be NULL), its digest into md. */
#define SHA256_JOB_PARTS 3
struct sha256_job {
	const void *part[SHA256_JOB_PARTS];
	size_t len[SHA256_JOB_PARTS];
	unsigned char *md; /* 32 bytes */
};

/* The SHA-256 of each of the n jobs' messages, as sha256_init, _update
 * and _final give it; several at once where the processor can
 * (sha_many.c). Thread-safe; nothing is allocated. */
void sha256_many(struct sha256_job *jobs, size_t n);
/* How many messages sha256_many hashes at once here (1: one by one). */
int sha256_many_lanes(void);

/* SHA-256 of a whole file as hex; 0, or -1 with errno. */
int sha256_file_hex(int fd, char out[SHA256_HEX_LEN + 1]);

#endif
