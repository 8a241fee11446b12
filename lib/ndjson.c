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
 * runner contain. Such texts are parsed with every escaped U+0000 stood in for
 * by a noncharacter that does not occur in the text, then the stand-in is
 * turned back into U+0000 in keys and values (Jansson stores keys with their
 * length, so the tree then holds exactly what the text said). */
static const char *const nul_standins[][3] = {
	/* UTF-8 bytes, lower- and upper-case escapes of U+FDD0..U+FDD3 */
	{"\xef\xb7\x90", "\\ufdd0", "\\uFDD0"}, {"\xef\xb7\x91", "\\ufdd1", "\\uFDD1"},
	{"\xef\xb7\x92", "\\ufdd2", "\\uFDD2"}, {"\xef\xb7\x93", "\\ufdd3", "\\uFDD3"},
};

static int contains(const char *text, size_t len, const char *needle)
{
	return memmem(text, len, needle, strlen(needle)) != NULL;
}

/* Replace the stand-in by U+0000 throughout the tree. */
static void restore_nul(json_t *v, const char *standin)
{
	size_t sl = strlen(standin);
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		size_t n = json_string_length(v);
		if (!memmem(s, n, standin, sl))
			return;
		struct buf b = {0};
		for (size_t i = 0; i < n;) {
			if (i + sl <= n && memcmp(s + i, standin, sl) == 0) {
				buf_addc(&b, '\0');
				i += sl;
			} else {
				buf_addc(&b, s[i++]);
			}
		}
		json_string_setn_nocheck(v, b.p, b.len);
		buf_free(&b);
	} else if (json_is_array(v)) {
		for (size_t i = 0; i < json_array_size(v); i++)
			restore_nul(json_array_get(v, i), standin);
	} else if (json_is_object(v)) {
		/* Rebuild the object to rename keys while keeping member order. */
		json_t *copy = json_object();
		for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it)) {
			json_t *value = json_object_iter_value(it);
			restore_nul(value, standin);
			json_t *key = json_stringn_nocheck(json_object_iter_key(it), json_object_iter_key_len(it));
			restore_nul(key, standin);
			json_object_setn_new_nocheck(copy, json_string_value(key), json_string_length(key),
			                         json_incref(value));
			json_decref(key);
		}
		/* json_object_update() would cut keys at U+0000: copy by length. */
		json_object_clear(v);
		for (void *it = json_object_iter(copy); it; it = json_object_iter_next(copy, it))
			json_object_setn_new_nocheck(v, json_object_iter_key(it), json_object_iter_key_len(it),
			                         json_incref(json_object_iter_value(it)));
		json_decref(copy);
	}
}

json_t *json_parse_strict(const char *text, size_t len, struct sfma_err *e)
{
	const size_t flags = JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL;
	json_error_t je;
	json_t *v = json_loadb(text, len, flags, &je);
	if (!v && strstr(je.text, "NUL byte in object key")) {
		for (size_t k = 0; k < sizeof nul_standins / sizeof *nul_standins; k++) {
			const char *const *si = nul_standins[k];
			if (contains(text, len, si[0]) || contains(text, len, si[1]) || contains(text, len, si[2]))
				continue;
			/* Rewrite every escape \u0000 (not a literal backslash followed
			 * by "u0000") into the stand-in's escape. */
			struct buf b = {0};
			for (size_t i = 0; i < len; i++) {
				if (text[i] == '\\' && i + 1 < len) {
					if (i + 5 < len && memcmp(text + i + 1, "u0000", 5) == 0) {
						buf_add(&b, si[1], 6);
						i += 5;
					} else {
						buf_add(&b, text + i, 2);
						i++;
					}
					continue;
				}
				buf_addc(&b, text[i]);
			}
			v = json_loadb(b.p ? b.p : "", b.len, flags, &je);
			buf_free(&b);
			if (v)
				restore_nul(v, si[0]);
			break;
		}
	}
	if (!v)
		err_set(e, "invalid JSON: %s at line %d column %d", je.text, je.line, je.column);
	return v;
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

json_t *json_load_strict_at(int dirfd, const char *path, int nofollow, size_t max, struct sfma_err *e)
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
	json_t *v = json_parse_strict(text, len, e);
	free(text);
	if (!v)
		err_prefix(e, "%s", path);
	return v;
}

json_t *json_load_strict(const char *path, size_t max, struct sfma_err *e)
{
	return json_load_strict_at(AT_FDCWD, path, 0, max, e);
}

int json_print_line(FILE *out, const json_t *v)
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

int json_integer_of(const json_t *v, long long *out)
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
