/* sign.h - Ed25519 keys and signatures (libcrypto), PEM and base64 forms
 * as the OpenSSL CLI makes and reads them. */
#ifndef SFMA_SIGN_H
#define SFMA_SIGN_H

#include <stddef.h>
#include <openssl/evp.h>

#include "errors.h"

/* Parse a PKCS#8 PEM private key / an SPKI PEM public key; NULL (e filled)
 * unless it is an Ed25519 key. The caller frees with EVP_PKEY_free. */
EVP_PKEY *ed25519_private_from_pem(const char *pem, size_t n, struct sfma_err *e);
EVP_PKEY *ed25519_public_from_pem(const char *pem, size_t n, struct sfma_err *e);

/* The private key held by environment variable var, taken: its bytes
 * are wiped in place and the variable unset whatever they hold, so that
 * no later child or core dump has them. NULL with e->text empty when var
 * is unset or empty; NULL with e filled when it is no Ed25519 key. */
EVP_PKEY *ed25519_private_take_env(const char *var, struct sfma_err *e);

/* The same for a key embedded in a record, which must be exactly one
 * block in the form ed25519_public_pem writes (and the earlier runner
 * did): the BEGIN line, the base64 of the SPKI in lines of 64, the END
 * line, a newline, and nothing before or after. Those bytes are outside
 * what the signature covers, so any other text would be a second
 * spelling of a signed record (or smuggle a second key past a reader
 * that takes the first). NULL (e filled, naming what is wrong) else. */
EVP_PKEY *ed25519_public_from_exact_pem(const char *pem, size_t n, struct sfma_err *e);

/* The SPKI PEM of a key's public half (new string, caller frees). */
char *ed25519_public_pem(EVP_PKEY *key);

/* Sign msg; the 64-byte signature goes to sig. 0 or -1. */
int ed25519_sign(EVP_PKEY *key, const void *msg, size_t n, unsigned char sig[64]);
/* 1 if sig is a valid signature of msg under key, else 0. */
int ed25519_verify(EVP_PKEY *key, const void *msg, size_t n, const unsigned char *sig, size_t siglen);
/* 1 if both hold the same public key. */
int ed25519_same_public(EVP_PKEY *a, EVP_PKEY *b);

/* The key's fingerprint as people compare it: the first 16 lowercase hex
 * digits of the SHA-256 of its SubjectPublicKeyInfo DER (what
 * `openssl pkey -pubin -outform DER | sha256sum` prints). 0, or -1 when
 * the key cannot be encoded (out is then "unknown"). */
#define ED25519_FINGERPRINT_LEN 16
int ed25519_fingerprint(EVP_PKEY *key, char out[ED25519_FINGERPRINT_LEN + 1]);

/* Standard base64 with padding (new string). */
char *base64_encode(const unsigned char *in, size_t n);
/* Decode strict base64 into out (capacity cap); returns the length or -1. */
long base64_decode(const char *in, size_t n, unsigned char *out, size_t cap);

#endif
