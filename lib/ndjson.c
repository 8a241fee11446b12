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
	if (r->start > 0 && (r->end == r->cap || r->start > r->cap / 2)) {
		memmove(r->buf, r->buf + r->start, r->end - r->start);
		r->consumed += r->start;
		r->end -= r->start;
		r->start = 0;
	}
	if (r->end < r->cap)
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
		char *nl = memchr(r->buf + scanned, '\n', r->end - scanned);
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

json_t *json_parse_strict(const char *text, size_t len, struct sfma_err *e)
{
	json_error_t je;
	json_t *v = json_loadb(text, len,
	                       JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL,
	                       &je);
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

json_t *json_load_strict(const char *path, size_t max, struct sfma_err *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		err_set(e, "%s: %s", path, strerror(errno));
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
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
