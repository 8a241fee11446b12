/* errors.h - the one error family of sfma (not libc's <err.h>: no name
 * here is one of its).
 *
 * Programs report with die()/warning(): one line on stderr, "<prog>: <text>".
 * The library never prints and never exits: it fills a struct sfma_err and
 * returns -1; the program decides what to say. */
#ifndef SFMA_ERRORS_H
#define SFMA_ERRORS_H

#include <stddef.h>

#define SFMA_ERR_MAX 512

struct sfma_err {
	char text[SFMA_ERR_MAX];
};

/* Set the program name used as the prefix of every message, and route
 * jansson's allocations through xmalloc. Call first in main. */
void set_progname(const char *argv0);
const char *progname(void);

/* Print "<prog>: <fmt>\n" on stderr and exit(1). */
_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Like die() with a chosen exit status. */
_Noreturn void die_status(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* From now on die() also writes {"error":TEXT} as one line on fd: a
 * stage whose output the planner reads says why it stopped there too
 * (a stage that dies without that line was killed, or crashed). */
void set_error_echo(int fd);
/* set_error_echo(fd) when SFMA_ERROR_LINE is "1": sfma sets it for the
 * stages it starts, so that a stage wired by hand prints exactly what it
 * always did. */
void set_error_echo_if_asked(int fd);
/* Print "<prog>: <fmt>\n" on stderr and return. */
void warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Fill e (if non-NULL) with a formatted one-line message; always returns -1
 * so that library code can write `return err_set(e, ...)`. Newlines in the
 * text are replaced by spaces: every message stays one line. */
int err_set(struct sfma_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefix an existing message: "<prefix>: <old text>". Returns -1. */
int err_prefix(struct sfma_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Allocation that cannot fail: dies with "out of memory" (programs only;
 * the library uses them too since an allocation failure is fatal for every
 * stage - a comment at each call site is not needed). */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

#endif
