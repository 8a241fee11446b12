/* sha.h - SHA-256 (libcrypto) as lowercase hex. */
#ifndef SFMA_SHA_H
#define SFMA_SHA_H

#include <stddef.h>

#define SHA256_HEX_LEN 64

/* out receives 64 hex digits and a NUL. */
void sha256_hex(const void *data, size_t n, char out[SHA256_HEX_LEN + 1]);
void hex_encode(const unsigned char *in, size_t n, char *out);
/* 1 if s[0..n) is exactly 64 lowercase hex digits. */
int is_sha256_hex(const char *s, size_t n);

/* SHA-256 of a whole file as hex; 0, or -1 with errno. */
int sha256_file_hex(int fd, char out[SHA256_HEX_LEN + 1]);

#endif
