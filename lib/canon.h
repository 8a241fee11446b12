/* canon.h - the canonical JSON form (RFC 8785, sfma-formats(5)).
 *
 * Object members sorted by key compared as UTF-16 code units; strings
 * escaped only for '"', '\\' and U+0000..U+001F; numbers as ECMAScript
 * prints a double. This is what is hashed and signed. */
#ifndef SFMA_CANON_H
#define SFMA_CANON_H

#include <stddef.h>
#include <jansson.h>

#include "buf.h"
#include "errors.h"

/* Append the canonical form of v to out. Returns 0, or -1 (e filled) for a
 * value with no canonical form (NaN, infinity). */
int canon_dump(const json_t *v, struct buf *out, struct sfma_err *e);

/* Append v for humans: members in insertion order, two-space indent, but
 * strings and numbers exactly as in the canonical form. Ends without '\n'. */
int canon_dump_pretty(const json_t *v, struct buf *out, struct sfma_err *e);

/* *size = the number of bytes canon_dump would append for v, counted
 * without writing them. Returns 0, or -1 (e filled) where canon_dump fails. */
int canon_size(const json_t *v, size_t *size, struct sfma_err *e);

/* Write the ECMAScript form of d into out (at least 32 bytes). Returns the
 * length, or -1 if d is not finite. */
int canon_number(double d, char *out);

/* Append s (n bytes of UTF-8) as a canonical JSON string literal, quotes included. */
void canon_string(const char *s, size_t n, struct buf *out);

/* The length of canon_string's literal of s. */
size_t canon_string_size(const char *s, size_t n);

/* Compare two UTF-8 strings by their UTF-16 code units (the JCS key order). */
int utf16_cmp(const char *a, size_t an, const char *b, size_t bn);

/* Where a top-level member sits in a scanned line: value bytes [off, off+len). */
struct canon_member {
	size_t member_off, member_len; /* the whole `"key":value` text */
	size_t value_off, value_len;
	int present;
	int hex64;                     /* the value is 64 lowercase hex digits in quotes */
};

/* What canon_scan learns of a line in one pass. */
struct canon_scan {
	struct canon_member hash, prev_hash, seq, kind, id, evidence;
};

/* One-pass check that line[0..n) is a JSON object already in canonical form
 * (so hashing its bytes equals hashing its canonical re-serialization), and
 * where its top-level hash/prevHash/seq/kind/id/evidence members are. Returns 1 if
 * canonical, 0 if not (the caller falls back to parsing into a tree). */
int canon_scan(const char *line, size_t n, struct canon_scan *out);

#endif
