/* stages.c - the planner's end of the pipes to every other stage.
 *
 * The planner is the hub of a star: it alone talks to the model, exec,
 * chain and seal stages, one request and one reply at a time. While it
 * waits for one stage it watches all of them, so a stage that dies (its
 * stdout closes) is noticed at once, not at the next time it is used. */
#include "plan.h"
#include "err.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "canon.h"

struct stage stages[STAGE_COUNT] = {
	{.name = "sfma-model", .to = -1, .from = -1},
	{.name = "sfma-exec", .to = -1, .from = -1},
	{.name = "sfma-chain", .to = -1, .from = -1},
	{.name = "sfma-seal", .to = -1, .from = -1},
};

volatile sig_atomic_t halt_requested;

int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

char *iso_time(int64_t ms)
{
	static char out[40];
	time_t secs = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&secs, &tm);
	size_t n = strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, sizeof out - n, ".%03dZ", (int)(ms % 1000));
	return out;
}

/* Open order matches a shell's `<to >from` redirections of each stage, so
 * named pipes opened by hand never deadlock. */
/* Open one end. "/dev/fd/N" is taken as descriptor N itself, not reopened:
 * a second descriptor for the same pipe end would keep it open after the
 * planner closes "its" one, and the stage would never see end of input. */
static int open_end(const char *path, int flags)
{
	char *end;
	if (strncmp(path, "/dev/fd/", 8) == 0) {
		long n = strtol(path + 8, &end, 10);
		if (*end == '\0' && end != path + 8 && n > 2 && n < 65536) {
			int accmode = fcntl((int)n, F_GETFL);
			if (accmode < 0 || (accmode & O_ACCMODE) != (flags & O_ACCMODE)) {
				errno = EBADF;
				return -1;
			}
			fcntl((int)n, F_SETFD, FD_CLOEXEC);
			return (int)n;
		}
	}
	return open(path, flags | O_CLOEXEC);
}

void stages_open(const char *const paths[2 * STAGE_COUNT])
{
	for (int s = 0; s < STAGE_COUNT; s++) {
		const char *to = paths[2 * s], *from = paths[2 * s + 1];
		stages[s].to = open_end(to, O_WRONLY);
		if (stages[s].to < 0)
			die("%s: %s", to, strerror(errno));
		stages[s].from = open_end(from, O_RDONLY);
		if (stages[s].from < 0)
			die("%s: %s", from, strerror(errno));
		lr_init(&stages[s].reader, stages[s].from, NDJSON_DEFAULT_MAX);
	}
}

int stage_send(enum stage_id s, const json_t *msg)
{
	struct buf b = {0};
	if (stages[s].dead || stages[s].to < 0 || canon_dump(msg, &b, NULL) < 0) {
		buf_free(&b);
		return -1;
	}
	buf_addc(&b, '\n');
	int rc = write_all(stages[s].to, b.p, b.len);
	buf_free(&b);
	if (rc < 0)
		stages[s].dead = 1; /* EPIPE: SIGPIPE is ignored in the planner */
	return rc;
}

void stage_close_input(enum stage_id s)
{
	if (stages[s].to >= 0)
		close(stages[s].to);
	stages[s].to = -1;
	stages[s].finished = 1; /* it may now exit: no longer a death to report */
}

/* A complete line already buffered by the reader needs no poll. */
static int has_buffered_line(const struct line_reader *r)
{
	return r->buf && r->end > r->start && memchr(r->buf + r->start, '\n', r->end - r->start);
}

json_t *stage_wait(enum stage_id s, int64_t deadline_ms, int stop_on_halt, const char **why,
                   enum stage_id *dead)
{
	struct sfma_err e;
	static char reason[600];
	*why = NULL;
	for (;;) {
		if (stop_on_halt && halt_requested) {
			*why = "halt";
			return NULL;
		}
		if (!has_buffered_line(&stages[s].reader)) {
			struct pollfd pfd[STAGE_COUNT];
			int n = 0, map[STAGE_COUNT];
			for (int k = 0; k < STAGE_COUNT; k++) {
				if (stages[k].from < 0 || stages[k].dead || (stages[k].finished && k != (int)s))
					continue;
				/* Other stages are watched for hang-up only. */
				pfd[n].fd = stages[k].from;
				pfd[n].events = k == (int)s ? POLLIN : 0;
				map[n++] = k;
			}
			int timeout = -1;
			if (deadline_ms > 0) {
				int64_t left = deadline_ms - now_ms();
				if (left <= 0) {
					*why = "timeout";
					return NULL;
				}
				timeout = left > 1000 ? 1000 : (int)left;
			} else {
				timeout = 1000;
			}
			int rc = poll(pfd, (nfds_t)n, timeout);
			if (rc < 0 && errno != EINTR)
				die("poll: %s", strerror(errno));
			if (rc <= 0)
				continue;
			int readable = 0;
			for (int i = 0; i < n; i++) {
				int k = map[i];
				if (k == (int)s && (pfd[i].revents & POLLIN)) {
					readable = 1;
					continue;
				}
				if (pfd[i].revents & (POLLHUP | POLLERR)) {
					stages[k].dead = 1;
					*dead = (enum stage_id)k;
					snprintf(reason, sizeof reason, "stage %s died", stages[k].name);
					*why = reason;
					return NULL;
				}
			}
			if (!readable)
				continue;
		}
		char *line;
		size_t len;
		int rc = lr_next(&stages[s].reader, &line, &len, &e);
		if (rc <= 0) {
			stages[s].dead = 1;
			*dead = s;
			if (rc == 0 || stages[s].reader.torn)
				snprintf(reason, sizeof reason, "stage %s died", stages[s].name);
			else
				snprintf(reason, sizeof reason, "stage %s: %s", stages[s].name, e.text);
			*why = reason;
			return NULL;
		}
		json_t *v = json_parse_strict(line, len, &e);
		if (!v || !json_is_object(v)) {
			json_decref(v);
			snprintf(reason, sizeof reason, "stage %s sent a malformed reply", stages[s].name);
			*dead = s;
			*why = reason;
			return NULL;
		}
		return v;
	}
}
