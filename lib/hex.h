/* hex.h - digests as lowercase hex (hex.c); no libcrypto. */
#ifndef SFMA_HEX_H
#define SFMA_HEX_H

#include <stddef.h>

#define SHA256_HEX_LEN 64

/* out receives 2n hex digits and a NUL. */
void hex_encode(const unsigned char *in, size_t n, char *out);
/* 1 if s[0..n) is exactly 64 lowercase hex digits. */
int is_sha256_hex(const char *s, size_t n);

#endif
