/* ndjson.c - bounded line reader, strict JSON parsing, line output. */
#include "ndjson.h"
#include "buf.h"
#include "canon.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_CHUNK (64u << 10)

void lr_init(struct line_reader *r, int fd, size_t max_line)
{
	memset(r, 0, sizeof *r);
	r->fd = fd;
	r->max_line = max_line ? max_line : NDJSON_DEFAULT_MAX;
}

int lr_has_line(const struct line_reader *r)
{
	return r->buf && r->end > r->start && memchr(r->buf + r->start, '\n', r->end - r->start) != NULL;
}

void lr_free(struct line_reader *r)
{
	free(r->buf);
	r->buf = NULL;
}

/* Make room for at least one more read: drop consumed bytes, grow up to the
 * line maximum. Returns -1 if the pending line already exceeds it. */
static int make_room(struct line_reader *r)
{
	/* A read needs one free byte beyond the data: the last byte of the
	 * buffer stays spare for the NUL that terminates a returned line. */
	if (r->start > 0 && (r->end + 1 >= r->cap || r->start > r->cap / 2)) {
		memmove(r->buf, r->buf + r->start, r->end - r->start);
		r->consumed += r->start;
		r->end -= r->start;
		r->start = 0;
	}
	if (r->end + 1 < r->cap)
		return 0;
	size_t limit = r->max_line + 2; /* the line, its '\n', the NUL */
	if (r->cap >= limit)
		return -1;
	size_t cap = r->cap ? r->cap * 2 : READ_CHUNK;
	if (cap > limit)
		cap = limit;
	r->buf = xrealloc(r->buf, cap);
	r->cap = cap;
	return 0;
}

int lr_next(struct line_reader *r, char **line, size_t *len, struct sfma_err *e)
{
	size_t scanned = r->start;
	for (;;) {
		char *nl = r->end > scanned ? memchr(r->buf + scanned, '\n', r->end - scanned) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - (r->buf + r->start));
			if (n > r->max_line)
				return err_set(e, "line %llu: longer than %zu bytes",
				               (unsigned long long)r->line_no + 1, r->max_line);
			*nl = '\0';
			*line = r->buf + r->start;
			*len = n;
			r->offset = r->consumed + r->start;
			r->start += n + 1;
			r->line_no++;
			return 1;
		}
		if (r->end - r->start > r->max_line)
			return err_set(e, "line %llu: longer than %zu bytes",
			               (unsigned long long)r->line_no + 1, r->max_line);
		if (r->eof) {
			if (r->end == r->start)
				return 0;
			r->torn = 1;
			r->offset = r->consumed + r->start;
			return err_set(e, "line %llu: torn final line (%zu bytes without a newline)",
			               (unsigned long long)r->line_no + 1, r->end - r->start);
		}
		size_t pending = r->end - r->start;
		if (make_room(r) < 0)
			return err_set(e, "line %llu: longer than %zu bytes",
			               (unsigned long long)r->line_no + 1, r->max_line);
		scanned = r->start + pending;
		ssize_t got;
		do
			got = read(r->fd, r->buf + r->end, r->cap - 1 - r->end);
		while (got < 0 && errno == EINTR);
		if (got < 0)
			return err_set(e, "read: %s", strerror(errno));
		if (got == 0)
			r->eof = 1;
		r->end += (size_t)got;
	}
}

int lr_skip_line(struct line_reader *r)
{
	if (r->torn)
		return 0;
	for (;;) {
		char *nl = r->end > r->start ? memchr(r->buf + r->start, '\n', r->end - r->start) : NULL;
		if (nl) {
			r->start = (size_t)(nl - r->buf) + 1;
			r->line_no++;
			return 1;
		}
		r->consumed += r->end;
		r->start = r->end = 0;
		if (r->eof)
			return 0;
		if (!r->buf) {
			r->cap = READ_CHUNK;
			r->buf = xmalloc(r->cap);
		}
		ssize_t got;
		do
			got = read(r->fd, r->buf, r->cap - 1);
		while (got < 0 && errno == EINTR);
		if (got <= 0) {
			r->eof = 1;
			return 0;
		}
		r->end = (size_t)got;
	}
}

int write_all(int fd, const void *data, size_t n)
{
	const char *p = data;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Jansson reads U+0000 inside string values (JSON_ALLOW_NUL) but refuses it
 * inside object keys, which JSON.parse accepts and traces made by the earlier
 * runner contain. Such a text is parsed once more after a rewrite that takes
 * U+0000 out of every string by an escape scheme that escapes itself:
 *
 *   U+0000 -> STANDIN U+FDD1        STANDIN (U+FDD0) -> STANDIN STANDIN
 *
 * whether the text spells the character raw or as a \u escape in any case.
 * Every other character is left as it is. The mapping is one-to-one on
 * decoded strings, so two keys are duplicates after the rewrite exactly when
 * they were before, and undoing it in every key and value gives back what
 * the text said (Jansson stores keys with their length). No choice of a
 * stand-in "absent from the text" is involved: there is none for a text
 * that holds every character. */
#define STANDIN_UTF8 "\xef\xb7\x90"   /* U+FDD0, a noncharacter */
#define STANDIN_ESC "\\ufdd0"
#define NUL_TAIL_UTF8 "\xef\xb7\x91"  /* U+FDD1: STANDIN then this is U+0000 */
#define NUL_TAIL_ESC "\\ufdd1"

static int hex_digit(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The value of the escape \uXXXX at text[i] (text[i] is the backslash), or
 * -1 if there is no such escape there. */
static long u_escape_at(const char *text, size_t len, size_t i)
{
	if (i + 6 > len || text[i + 1] != 'u')
		return -1;
	long v = 0;
	for (size_t k = 2; k < 6; k++) {
		int h = hex_digit((unsigned char)text[i + k]);
		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

/* Rewrite text[0..len) by the scheme above. The walk goes escape by escape
 * (a backslash always begins one inside a string, and a text with one
 * outside a string is invalid before and after), so "\\u0000" - an escaped
 * backslash, then "u0000" - stays as it is. If map_to is not SIZE_MAX, stop
 * where the rewritten text reaches offset map_to and return the matching
 * offset in text instead (to place an error in the text the caller gave). */
static size_t rewrite_nul(const char *text, size_t len, struct buf *out, size_t map_to)
{
	size_t written = 0, i = 0;
	while (i < len) {
		const char *rep = NULL;
		size_t span = 1;
		unsigned char c = (unsigned char)text[i];
		if (c == '\\') {
			long u = u_escape_at(text, len, i);
			span = i + 1 < len ? 2 : 1;
			if (u == 0) {
				rep = STANDIN_ESC NUL_TAIL_ESC;
				span = 6;
			} else if (u == 0xFDD0) {
				rep = STANDIN_ESC STANDIN_ESC;
				span = 6;
			} else if (u > 0) {
				span = 6;
			}
		} else if (c == 0xEF && i + 3 <= len && memcmp(text + i, STANDIN_UTF8, 3) == 0) {
			/* 0xEF is never a continuation byte: these three bytes are
			 * U+FDD0 itself, or the text is not valid UTF-8 anyway. */
			rep = STANDIN_ESC STANDIN_ESC;
			span = 3;
		}
		size_t n = rep ? strlen(rep) : span;
		if (written + n > map_to)
			return i;
		if (out)
			buf_add(out, rep ? rep : text + i, n);
		written += n;
		i += span;
	}
	return map_to == SIZE_MAX ? written : len;
}

/* Undo the rewrite in one decoded string: STANDIN STANDIN -> STANDIN,
 * STANDIN NUL_TAIL -> U+0000. Returns 1 and fills out if s held a stand-in. */
static int unescape_nul(const char *s, size_t n, struct buf *out)
{
	const char *hit = memmem(s, n, STANDIN_UTF8, 3);
	if (!hit)
		return 0;
	size_t i = 0;
	while (hit) {
		size_t at = (size_t)(hit - s);
		buf_add(out, s + i, at - i);
		/* The rewrite puts a second character after every stand-in. */
		if (at + 6 <= n && memcmp(s + at + 3, NUL_TAIL_UTF8, 3) == 0)
			buf_addc(out, '\0');
		else
			buf_add(out, STANDIN_UTF8, 3);
		i = at + 6 <= n && (memcmp(s + at + 3, NUL_TAIL_UTF8, 3) == 0 ||
		                    memcmp(s + at + 3, STANDIN_UTF8, 3) == 0) ? at + 6 : at + 3;
		hit = i < n ? memmem(s + i, n - i, STANDIN_UTF8, 3) : NULL;
	}
	buf_add(out, s + i, n - i);
	return 1;
}

/* Undo the rewrite throughout the tree. */
static void restore_nul(json_t *v)
{
	struct buf b = {0};
	if (json_is_string(v)) {
		if (unescape_nul(json_string_value(v), json_string_length(v), &b))
			json_string_setn_nocheck(v, b.p ? b.p : "", b.len);
	} else if (json_is_array(v)) {
		for (size_t i = 0; i < json_array_size(v); i++)
			restore_nul(json_array_get(v, i));
	} else if (json_is_object(v)) {
		/* Rebuild the object to rename keys while keeping member order. */
		json_t *copy = json_object();
		for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it)) {
			json_t *value = json_object_iter_value(it);
			restore_nul(value);
			const char *key = json_object_iter_key(it);
			size_t key_len = json_object_iter_key_len(it);
			b.len = 0;
			if (unescape_nul(key, key_len, &b)) {
				key = b.p ? b.p : "";
				key_len = b.len;
			}
			json_object_setn_new_nocheck(copy, key, key_len, json_incref(value));
		}
		/* json_object_update() would cut keys at U+0000: copy by length. */
		json_object_clear(v);
		for (void *it = json_object_iter(copy); it; it = json_object_iter_next(copy, it))
			json_object_setn_new_nocheck(v, json_object_iter_key(it), json_object_iter_key_len(it),
			                         json_incref(json_object_iter_value(it)));
		json_decref(copy);
	}
	buf_free(&b);
}

/* Undo the rewrite in the tokens an error message quotes, left to right
 * as it was made (in place: the message only gets shorter). */
static void unrewrite_message(char *msg)
{
	const size_t esc = strlen(STANDIN_ESC);
	char *o = msg;
	for (const char *s = msg; *s;) {
		if (strncmp(s, STANDIN_ESC, esc) == 0) {
			if (strncmp(s + esc, NUL_TAIL_ESC, esc) == 0) {
				memcpy(o, "\\u0000", esc);
				o += esc;
				s += 2 * esc;
				continue;
			}
			if (strncmp(s + esc, STANDIN_ESC, esc) == 0) {
				memcpy(o, STANDIN_ESC, esc);
				o += esc;
				s += 2 * esc;
				continue;
			}
		}
		*o++ = *s++;
	}
	*o = '\0';
}

/* Jansson's line and column of byte offset pos in text: lines counted by
 * '\n', columns by UTF-8 characters, 1-based, at the character before pos. */
static void text_position(const char *text, size_t pos, int *line, int *column)
{
	*line = 1;
	*column = 0;
	for (size_t i = 0; i < pos; i++) {
		unsigned char c = (unsigned char)text[i];
		if (c == '\n') {
			(*line)++;
			*column = 0;
		} else if ((c & 0xC0) != 0x80) {
			(*column)++;
		}
	}
}

static json_t *parse_strict(const char *text, size_t len, size_t extra_flags, struct sfma_err *e)
{
	const size_t flags = JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL | extra_flags;
	json_error_t je;
	json_t *v = json_loadb(text, len, flags, &je);
	if (!v && strstr(je.text, "NUL byte in object key")) {
		struct buf b = {0};
		rewrite_nul(text, len, &b, SIZE_MAX);
		v = json_loadb(b.p ? b.p : "", b.len, flags, &je);
		buf_free(&b);
		if (v) {
			restore_nul(v);
		} else {
			/* Place the error in the caller's text, not in the rewrite,
			 * and quote its tokens as they read before it. */
			size_t at = rewrite_nul(text, len, NULL, (size_t)je.position);
			text_position(text, at, &je.line, &je.column);
			unrewrite_message(je.text);
		}
	}
	if (!v)
		err_set(e, "invalid JSON: %s at line %d column %d", je.text, je.line, je.column);
	return v;
}

json_t *ndjson_parse(const char *text, size_t len, struct sfma_err *e)
{
	return parse_strict(text, len, 0, e);
}

json_t *ndjson_parse_any(const char *text, size_t len, struct sfma_err *e)
{
	return parse_strict(text, len, JSON_DECODE_ANY, e);
}

int ndjson_string_is(const json_t *v, const char *s)
{
	size_t n = strlen(s);
	return json_is_string(v) && json_string_length(v) == n && memcmp(json_string_value(v), s, n) == 0;
}

char *read_all_fd(int fd, size_t max, size_t *len, struct sfma_err *e)
{
	struct buf b = {0};
	char chunk[READ_CHUNK];
	for (;;) {
		ssize_t got = read(fd, chunk, sizeof chunk);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			buf_free(&b);
			err_set(e, "read: %s", strerror(errno));
			return NULL;
		}
		if (got == 0)
			break;
		if (b.len + (size_t)got > max) {
			buf_free(&b);
			err_set(e, "input larger than %zu bytes", max);
			return NULL;
		}
		buf_add(&b, chunk, (size_t)got);
	}
	if (!b.p)
		buf_add(&b, "", 0);
	*len = b.len;
	return b.p;
}

json_t *ndjson_load_at(int dirfd, const char *path, int nofollow, size_t max, struct sfma_err *e)
{
	/* O_NONBLOCK: a FIFO where a file should be must not hang the reader. */
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (nofollow ? O_NOFOLLOW : 0));
	if (fd < 0) {
		err_set(e, "%s: %s", path, nofollow && errno == ELOOP ? "is a link, not read" : strerror(errno));
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		err_set(e, "%s: not a regular file", path);
		return NULL;
	}
	size_t len;
	char *text = read_all_fd(fd, max, &len, e);
	close(fd);
	if (!text) {
		err_prefix(e, "%s", path);
		return NULL;
	}
	json_t *v = ndjson_parse(text, len, e);
	free(text);
	if (!v)
		err_prefix(e, "%s", path);
	return v;
}

json_t *ndjson_load(const char *path, size_t max, struct sfma_err *e)
{
	return ndjson_load_at(AT_FDCWD, path, 0, max, e);
}

int ndjson_print(FILE *out, const json_t *v)
{
	struct buf b = {0};
	if (canon_dump(v, &b, NULL) < 0) {
		buf_free(&b);
		return -1;
	}
	buf_addc(&b, '\n');
	size_t n = b.len;
	size_t w = fwrite(b.p, 1, n, out);
	buf_free(&b);
	if (w != n || fflush(out) != 0)
		return -1;
	return 0;
}

int ndjson_number_in(const json_t *v, double lo, double hi, double *out)
{
	if (!json_is_number(v))
		return 0;
	double d = json_number_value(v);
	if (!isfinite(d) || d < lo || d > hi)
		return 0;
	*out = d;
	return 1;
}

int ndjson_integer(const json_t *v, long long *out)
{
	double d;
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 1;
	}
	if (!json_is_real(v))
		return 0;
	d = json_real_value(v);
	if (!(d >= -4.6e18 && d <= 4.6e18) || d != floor(d))
		return 0;
	*out = (long long)d;
	return 1;
}

const char *ndjson_str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

const char *ndjson_text(const json_t *o, const char *key)
{
	const char *s = ndjson_str(o, key);
	return s ? s : "";
}
