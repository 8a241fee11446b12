/* fuzz.h - what the libFuzzer harnesses share: a failed property aborts
 * with a message naming it (libFuzzer then saves the input as crash-*),
 * and JSON values are compared by what they hold, U+0000 included. */
#ifndef SFMA_FUZZ_H
#define SFMA_FUZZ_H

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

/* Harnesses that take git as the reference (gitconfig, gitref): it must
 * be there, or the property would go unchecked. */
__attribute__((unused)) static void fuzz_need_git(const char *harness)
{
	if (system("git --version >/dev/null 2>&1") != 0) {
		dprintf(fuzz_report_fd, "%s: git is required (the reference implementation)\n", harness);
		abort();
	}
}

/* Run git with args (args[0] "git") in an environment that reads no
 * configuration of this host: its exit status (128: killed), its stdout
 * in *out (owned; the caller frees it), stderr dropped. */
__attribute__((unused)) static int fuzz_git(char *const args[], char **out, size_t *out_len)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		fuzz_fail("pipe: %s", strerror(errno));
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	char *const env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
	                     "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C", NULL};
	pid_t pid;
	int rc = posix_spawnp(&pid, "git", &fa, NULL, args, env);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (rc != 0)
		fuzz_fail("cannot start git: %s", strerror(rc));
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	if (!buf)
		abort();
	ssize_t got;
	while ((got = read(pfd[0], buf + len, cap - len)) != 0) {
		if (got < 0) {
			if (errno == EINTR)
				continue;
			fuzz_fail("read: %s", strerror(errno));
		}
		len += (size_t)got;
		if (len == cap && !(buf = realloc(buf, cap *= 2)))
			abort();
	}
	close(pfd[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			fuzz_fail("waitpid: %s", strerror(errno));
	*out = buf;
	*out_len = len;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

#endif
