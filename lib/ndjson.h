/* ndjson.h - bounded NDJSON line reading and line writing.
 *
 * A line longer than the reader's maximum is an error, never an unbounded
 * allocation: the buffer never grows past max_line + 1 bytes. */
#ifndef SFMA_NDJSON_H
#define SFMA_NDJSON_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "errors.h"

#define NDJSON_DEFAULT_MAX (16u << 20) /* 16 MiB per message */

struct line_reader {
	int fd;
	char *buf;
	size_t cap, start, end;
	size_t max_line;
	uint64_t line_no;   /* number of the line last returned (1-based) */
	uint64_t offset;    /* file offset of the line last returned */
	uint64_t consumed;  /* bytes consumed before buf[start] */
	int eof;
	int torn;           /* set when the input ended inside a line */
};

/* Start reading fd (not owned) with lines of at most max_line bytes. */
void lr_init(struct line_reader *r, int fd, size_t max_line);

/* Next line without its '\n' (also without a trailing '\r' left as is).
 * Returns 1 and sets *line and *len (valid until the next call, NUL-terminated),
 * 0 at a clean end of input, -1 on error: read failure, a line over the
 * maximum, or input that ends without a final newline (then r->torn is set
 * and r->offset is where the torn line starts). */
int lr_next(struct line_reader *r, char **line, size_t *len, struct sfma_err *e);

/* After lr_next failed on an over-long line: drop the rest of that line,
 * up to and including its '\n', so the stream stays in step and memory
 * stays bounded. Returns 1 when more input may follow, 0 at the end of
 * input or on a read error (the reader is then at its end). */
int lr_skip_line(struct line_reader *r);

/* 1 when a whole line is already buffered: lr_next returns it without
 * reading. */
int lr_has_line(const struct line_reader *r);

void lr_free(struct line_reader *r);

/* Write all of data to fd, retrying on EINTR and short writes. 0 or -1/errno. */
int write_all(int fd, const void *data, size_t n);

/* Parse one JSON text strictly: duplicate keys rejected, every number read
 * as a double (as JSON.parse does), U+0000 allowed in strings. Returns a new
 * reference or NULL with e filled ("invalid JSON: <why> at column N"). */
json_t *ndjson_parse(const char *text, size_t len, struct sfma_err *e);
/* The same for a JSON text that may be any value, a scalar included. */
json_t *ndjson_parse_any(const char *text, size_t len, struct sfma_err *e);

/* Read a whole regular file of at most max bytes and parse it with
 * ndjson_parse. The _at form opens relative to dirfd (AT_FDCWD: the
 * current directory) and, with nofollow, refuses a symbolic link. */
json_t *ndjson_load(const char *path, size_t max, struct sfma_err *e);
json_t *ndjson_load_at(int dirfd, const char *path, int nofollow, size_t max, struct sfma_err *e);

/* Read at most max bytes from fd until EOF into a new NUL-terminated buffer.
 * Returns NULL with e filled if the input is larger or a read fails. */
char *read_all_fd(int fd, size_t max, size_t *len, struct sfma_err *e);

/* Print v as one compact line on out (canonical form) and flush. 0 or -1. */
int ndjson_print(FILE *out, const json_t *v);

/* Integer view of a JSON number read as a double: 1 and *out set when v is a
 * number with an integral value in [INT64_MIN/2, INT64_MAX/2], else 0. */
int ndjson_integer(const json_t *v, long long *out);

/* A finite number in [lo, hi]: 1 and *out set, else 0 (*out untouched). */
int ndjson_number_in(const json_t *v, double lo, double hi, double *out);

/* 1 if v is a string whose characters are exactly s, compared as the whole
 * JSON string: "task\u0000x" is not "task", as strcmp on
 * json_string_value() would have it. */
int ndjson_string_is(const json_t *v, const char *s);

/* o[key] when it is a string: ndjson_str gives NULL otherwise, ndjson_text
 * "" (for text that is shown either way). o may be anything, NULL too. */
const char *ndjson_str(const json_t *o, const char *key);
const char *ndjson_text(const json_t *o, const char *key);

#endif
