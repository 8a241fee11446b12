/* fuzz.h - what the libFuzzer harnesses share: a failed property aborts
 * with a message naming it (libFuzzer then saves the input as crash-*),
 * and JSON values are compared by what they hold, U+0000 included. */
#ifndef SFMA_FUZZ_H
#define SFMA_FUZZ_H

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Where a broken property is reported. -close_fd_mask=3 closes stderr
 * after start-up (libFuzzer keeps its own copy), so it is duplicated here
 * first: constructors run before libFuzzer's driver. */
static int fuzz_report_fd = 2;

__attribute__((constructor, unused)) static void fuzz_keep_stderr(void)
{
	int fd = dup(2);
	if (fd >= 0)
		fuzz_report_fd = fd;
}

/* A broken property: say which, then abort so that libFuzzer keeps the input. */
__attribute__((format(printf, 1, 2), noreturn, unused)) static void fuzz_fail(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	dprintf(fuzz_report_fd, "fuzz property failed: %s\n", msg);
	abort();
}

#define FUZZ_CHECK(cond, ...) \
	do { \
		if (!(cond)) \
			fuzz_fail(__VA_ARGS__); \
	} while (0)

/* Deep equality by content. json_equal() looks object members up by C
 * string, so it cannot tell keys apart past a U+0000; this compares keys by
 * length and bytes. Numbers are equal when they are the same double (-0
 * and 0 too: the canonical form of -0 is "0", as in ECMAScript). */
__attribute__((unused)) static int fuzz_json_same(const json_t *a, const json_t *b)
{
	if (json_typeof(a) != json_typeof(b))
		return 0;
	switch (json_typeof(a)) {
	case JSON_STRING:
		return json_string_length(a) == json_string_length(b) &&
		       memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
	case JSON_REAL:
		return json_real_value(a) == json_real_value(b);
	case JSON_INTEGER:
		return json_integer_value(a) == json_integer_value(b);
	case JSON_ARRAY:
		if (json_array_size(a) != json_array_size(b))
			return 0;
		for (size_t i = 0; i < json_array_size(a); i++)
			if (!fuzz_json_same(json_array_get(a, i), json_array_get(b, i)))
				return 0;
		return 1;
	case JSON_OBJECT:
		if (json_object_size(a) != json_object_size(b))
			return 0;
		for (void *it = json_object_iter((json_t *)a); it; it = json_object_iter_next((json_t *)a, it)) {
			json_t *other = json_object_getn(b, json_object_iter_key(it), json_object_iter_key_len(it));
			if (!other || !fuzz_json_same(json_object_iter_value(it), other))
				return 0;
		}
		return 1;
	default:
		return 1;
	}
}

/* A NUL-terminated copy of the input (the caller frees it). */
__attribute__((unused)) static char *fuzz_strndup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

#endif
