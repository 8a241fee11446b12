/* errors.c - die/warning and the library's error out-parameter. */
#include "errors.h"

#include <jansson.h>
#include <unistd.h>

#include "utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *prog = "sfma";
static int echo_fd = -1; /* set_error_echo */

void set_progname(const char *argv0)
{
	const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
	if (argv0 && *argv0)
		prog = slash ? slash + 1 : argv0;
	/* jansson allocates through xmalloc too: a JSON value that cannot be
	 * made is the same fatal "out of memory" as any other allocation, so
	 * a NULL from jansson means the input was refused, never memory. */
	json_set_alloc_funcs(xmalloc, free);
}

const char *progname(void)
{
	return prog;
}

/* Keep a message on one line whatever the caller formatted into it. */
static void one_line(char *s)
{
	for (; *s; s++)
		if (*s == '\n' || *s == '\r')
			*s = ' ';
}

void set_error_echo(int fd)
{
	echo_fd = fd;
}

void set_error_echo_if_asked(int fd)
{
	const char *v = getenv("SFMA_ERROR_LINE");
	if (v && strcmp(v, "1") == 0)
		set_error_echo(fd);
}

/* The fatal error, also as the stage's last line for the planner. Best
 * effort: the program is exiting, and stderr has it whatever happens. */
static void echo(const char *text)
{
	json_t *o = json_object();
	json_object_set_new(o, "error", utf8_json(text, strlen(text)));
	char *body = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!body)
		return;
	char line[16384];
	int n = snprintf(line, sizeof line, "%s\n", body);
	free(body);
	if (n < 0 || (size_t)n >= sizeof line)
		return;
	for (size_t off = 0; off < (size_t)n;) {
		ssize_t w = write(echo_fd, line + off, (size_t)n - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
}

static void vreport(int fatal, const char *fmt, va_list ap)
{
	char buf[2048];
	vsnprintf(buf, sizeof buf, fmt, ap);
	one_line(buf);
	fprintf(stderr, "%s: %s\n", prog, buf);
	fflush(stderr);
	if (fatal && echo_fd >= 0)
		echo(buf);
}

void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport(1, fmt, ap);
	va_end(ap);
	exit(1);
}

void die_status(int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport(1, fmt, ap);
	va_end(ap);
	exit(status);
}

void warning(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport(0, fmt, ap);
	va_end(ap);
}

int err_set(struct sfma_err *e, const char *fmt, ...)
{
	va_list ap;
	if (!e)
		return -1;
	va_start(ap, fmt);
	vsnprintf(e->text, sizeof e->text, fmt, ap);
	va_end(ap);
	one_line(e->text);
	return -1;
}

int err_prefix(struct sfma_err *e, const char *fmt, ...)
{
	char head[SFMA_ERR_MAX], both[2 * SFMA_ERR_MAX + 2];
	va_list ap;
	if (!e)
		return -1;
	va_start(ap, fmt);
	vsnprintf(head, sizeof head, fmt, ap);
	va_end(ap);
	snprintf(both, sizeof both, "%s: %s", head, e->text);
	both[sizeof e->text - 1] = '\0';
	memcpy(e->text, both, sizeof e->text);
	one_line(e->text);
	return -1;
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		die("out of memory");
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		die("out of memory");
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		die("out of memory");
	return p;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		die("out of memory");
	return p;
}
