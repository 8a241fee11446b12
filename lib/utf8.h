/* utf8.h - the one UTF-8 validator (RFC 3629: no overlong forms, no
 * UTF-16 surrogates, nothing past U+10FFFF). */
#ifndef SFMA_UTF8_H
#define SFMA_UTF8_H

#include <jansson.h>
#include <stddef.h>

/* Length (1..4) of the valid UTF-8 sequence at s[0..n), 0 if the bytes
 * there are not one. n must be at least 1. */
size_t utf8_seq(const unsigned char *s, size_t n);

/* 1 if s[0..n) is valid UTF-8 text with no NUL byte, else 0. */
int utf8_text_ok(const char *s, size_t n);

/* A JSON string of s[0..n) with every invalid UTF-8 byte replaced by U+FFFD
 * (file contents and names are bytes; JSON text must be UTF-8). */
json_t *utf8_json(const char *s, size_t n);

#endif
