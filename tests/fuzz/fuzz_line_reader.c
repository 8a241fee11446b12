/* fuzz_line_reader.c - lr_next and lr_skip_line (lib/ndjson.c) against a
 * plain reference splitter, under short reads and EINTR.
 *
 * Input: byte 0 picks the source (bit 0) and the line maximum (the other
 * bits), bytes 1-2 seed the chunk sizes, the rest is the stream. The
 * source is either a fake descriptor whose reads return chunks of those
 * sizes and fail with EINTR now and then (so this is deterministic), or a
 * socketpair written in chunks by a thread that also interrupts the reader
 * with a signal. lib/ndjson.o is linked as it is; the harness alone is
 * linked with -Wl,--wrap=read (the Makefile's FUZZ_LIBS_line_reader): ld(1)
 * then sends every call of read() in the program to __wrap_read below,
 * and __real_read is the libc one. Linked without that flag, __real_read
 * is undefined and the link fails.
 *
 * Properties: every line comes back whole, in order, with its number and
 * offset; a line over the maximum is reported as such and skipped, and the
 * lines after it still come back; a final line without a newline is torn
 * (offset given) unless it is over the maximum; the buffer never grows past
 * the maximum plus its newline and NUL. */
#include "fuzz.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ndjson.h"

#define FAKE_FD 1000000

ssize_t __real_read(int fd, void *buf, size_t n);
ssize_t __wrap_read(int fd, void *buf, size_t n);

static uint32_t rng_state;

static uint32_t rng(void)
{
	/* xorshift32: any fixed generator will do, the seed comes from the input. */
	uint32_t x = rng_state ? rng_state : 0x9e3779b9u;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return rng_state = x;
}

static struct {
	const uint8_t *p;
	size_t n, pos;
	size_t max_chunk;
} feed;

/* Every read() of the program: the fake descriptor's chunks, any other
 * descriptor read for real. */
ssize_t __wrap_read(int fd, void *buf, size_t n)
{
	if (fd != FAKE_FD)
		return __real_read(fd, buf, n);
	if (rng() % 4 == 0) {
		errno = EINTR;
		return -1;
	}
	size_t left = feed.n - feed.pos;
	size_t take = 1 + rng() % feed.max_chunk;
	if (take > n)
		take = n;
	if (take > left)
		take = left;
	memcpy(buf, feed.p + feed.pos, take);
	feed.pos += take;
	return (ssize_t)take;
}

/* ---- the socketpair source --------------------------------------------- */

struct writer {
	int fd;
	const uint8_t *p;
	size_t n, max_chunk;
	uint32_t seed;
	pthread_t reader;
};

static void on_signal(int sig)
{
	(void)sig;
}

static void *write_chunks(void *arg)
{
	struct writer *w = arg;
	uint32_t x = w->seed | 1;
	for (size_t pos = 0; pos < w->n;) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		size_t take = 1 + x % w->max_chunk;
		if (take > w->n - pos)
			take = w->n - pos;
		if (write_all(w->fd, w->p + pos, take) < 0)
			break;
		pos += take;
		if (x % 3 == 0)
			pthread_kill(w->reader, SIGUSR1); /* EINTR if it is blocked in read */
	}
	close(w->fd);
	return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* No SA_RESTART: a blocked read returns EINTR (signal(7)). */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	return 0;
}

/* ---- the reference --------------------------------------------------- */

static void expect_error(const struct sfma_err *e, const char *want)
{
	FUZZ_CHECK(strcmp(e->text, want) == 0, "error \"%s\", expected \"%s\"", e->text, want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	int use_socket = data[0] & 1;
	unsigned v = data[0] >> 1;
	size_t max_line = v < 100 ? v + 1 : (size_t)(v - 99) * 300;
	rng_state = (uint32_t)data[1] << 8 | data[2];
	const uint8_t *s = data + 3;
	size_t n = size - 3;

	struct line_reader r;
	int fds[2] = {-1, -1};
	pthread_t tid;
	struct writer w;
	if (use_socket) {
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
			return 0;
		w = (struct writer){fds[1], s, n, 1 + (size_t)(data[1] % 64), rng_state, pthread_self()};
		if (pthread_create(&tid, NULL, write_chunks, &w) != 0) {
			close(fds[0]);
			close(fds[1]);
			return 0;
		}
		lr_init(&r, fds[0], max_line);
	} else {
		feed.p = s;
		feed.n = n;
		feed.pos = 0;
		feed.max_chunk = 1 + (size_t)(data[1] % 64);
		lr_init(&r, FAKE_FD, max_line);
	}

	size_t pos = 0;     /* where the reference is in the stream */
	uint64_t no = 0;    /* lines the reference has passed */
	char want[160];
	for (;;) {
		char *line;
		size_t len;
		struct sfma_err e = {{0}};
		int rc = lr_next(&r, &line, &len, &e);
		FUZZ_CHECK(r.cap <= max_line + 2, "buffer of %zu bytes for lines of %zu", r.cap, max_line);
		const uint8_t *nl = memchr(s + pos, '\n', n - pos);
		size_t seg = nl ? (size_t)(nl - (s + pos)) : n - pos;
		if (pos == n) {
			FUZZ_CHECK(rc == 0, "lr_next returned %d at the end of input", rc);
			break;
		}
		if (seg > max_line) {
			FUZZ_CHECK(rc == -1, "line %llu of %zu bytes over %zu returned %d",
			           (unsigned long long)no + 1, seg, max_line, rc);
			snprintf(want, sizeof want, "line %llu: longer than %zu bytes", (unsigned long long)no + 1,
			         max_line);
			expect_error(&e, want);
			FUZZ_CHECK(!r.torn, "an over-long line reported torn");
			int more = lr_skip_line(&r);
			FUZZ_CHECK(more == (nl != NULL), "lr_skip_line returned %d", more);
			if (!nl)
				break;
			pos += seg + 1;
			no++;
			continue;
		}
		if (!nl) {
			FUZZ_CHECK(rc == -1 && r.torn, "torn final line: rc %d torn %d", rc, r.torn);
			snprintf(want, sizeof want, "line %llu: torn final line (%zu bytes without a newline)",
			         (unsigned long long)no + 1, seg);
			expect_error(&e, want);
			FUZZ_CHECK(r.offset == pos, "torn line at offset %llu, expected %zu",
			           (unsigned long long)r.offset, pos);
			FUZZ_CHECK(lr_skip_line(&r) == 0, "lr_skip_line after a torn line");
			break;
		}
		FUZZ_CHECK(rc == 1, "line %llu: lr_next returned %d (%s)", (unsigned long long)no + 1, rc, e.text);
		FUZZ_CHECK(len == seg && memcmp(line, s + pos, seg) == 0 && line[len] == '\0',
		           "line %llu: wrong bytes", (unsigned long long)no + 1);
		FUZZ_CHECK(r.line_no == no + 1, "line %llu numbered %llu", (unsigned long long)no + 1,
		           (unsigned long long)r.line_no);
		FUZZ_CHECK(r.offset == pos, "line %llu at offset %llu, expected %zu", (unsigned long long)no + 1,
		           (unsigned long long)r.offset, pos);
		pos += seg + 1;
		no++;
	}
	lr_free(&r);
	if (use_socket) {
		/* Drain so that the writer can finish, then join it. */
		char sink[4096];
		for (;;) {
			ssize_t got = read(fds[0], sink, sizeof sink);
			if (got == 0 || (got < 0 && errno != EINTR))
				break;
		}
		pthread_join(tid, NULL);
		close(fds[0]);
	}
	return 0;
}
