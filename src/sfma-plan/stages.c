/* stages.c - the planner's end of the pipes to every other stage.
 *
 * The planner is the hub of a star: it alone talks to the model, exec,
 * chain, seal and memory stages, one request and one reply at a time. While it
 * waits for one stage it watches all of them, so a stage that dies (its
 * stdout closes) is noticed at once, not at the next time it is used. */
#include "plan.h"
#include "errors.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "canon.h"
#include "clock.h"
#include "observed.h"

struct stage stages[STAGE_COUNT] = {
	{.name = "sfma-model", .to = -1, .from = -1, .observed = 1},
	{.name = "sfma-exec", .to = -1, .from = -1, .observed = 1},
	{.name = "sfma-chain", .to = -1, .from = -1},
	{.name = "sfma-seal", .to = -1, .from = -1},
	{.name = "sfma-mem", .to = -1, .from = -1, .observed = 1},
};

volatile sig_atomic_t halt_signal;

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

/* The record of one line that crossed the pipe of stage s in direction
 * dir ("out": sent to it, "in": read from it), kept for stage_wire. */
static void note_line(enum stage_id s, const char *dir, const char *line, size_t len)
{
	if (!stages[s].observed)
		return;
	struct obs_line l;
	obs_line_of(line, len, strcmp(dir, "out") == 0 ? ++stages[s].sent : ++stages[s].got, &l);
	if (!stages[s].wire)
		stages[s].wire = json_array();
	json_array_append_new(stages[s].wire, obs_wire_record(stages[s].name, dir, &l));
}

json_t *stage_wire(enum stage_id s)
{
	json_t *w = stages[s].wire;
	stages[s].wire = NULL;
	return w;
}

#ifdef SFMA_TEST_HOOKS
const char *test_hook(void)
{
	const char *h = getenv("SFMA_TEST_HOOK");
	return h ? h : "";
}

/* altered-reply, altered-exec, altered-memory: the first reply of
 * sfma-model (one of its calls' latency), of sfma-exec (its result) or of
 * sfma-mem (the git store's latency in its open answer) changed as it is
 * read, before it is recorded: 1 with the line's new bytes in out. */
static int hook_alter(enum stage_id s, const char *line, size_t len, struct buf *out)
{
	static int done[STAGE_COUNT];
	int model = s == STAGE_MODEL && strcmp(test_hook(), "altered-reply") == 0;
	int exec = s == STAGE_EXEC && strcmp(test_hook(), "altered-exec") == 0;
	int mem = s == STAGE_MEM && strcmp(test_hook(), "altered-memory") == 0;
	if (done[s] || !(model || exec || mem))
		return 0;
	json_t *v = ndjson_parse(line, len, NULL);
	json_t *call = json_array_get(json_object_get(v, "calls"), 0), *result = json_object_get(v, "result");
	json_t *store = json_array_get(json_object_get(v, "stores"), 0);
	if (model && json_is_number(json_object_get(call, "latencyMs")))
		json_object_set_new(call, "latencyMs", json_real(json_number_value(json_object_get(call, "latencyMs")) + 1000));
	else if (exec && json_is_string(result))
		json_object_set_new(v, "result", json_sprintf("%s (altered)", json_string_value(result)));
	else if (mem && json_is_number(json_object_get(store, "latencyMs")))
		json_object_set_new(store, "latencyMs", json_real(json_number_value(json_object_get(store, "latencyMs")) + 1000));
	else {
		json_decref(v);
		return 0;
	}
	done[s] = 1;
	buf_reset(out);
	canon_dump(v, out, NULL);
	json_decref(v);
	return 1;
}
#endif

int stage_send(enum stage_id s, const json_t *msg)
{
	struct buf b = {0};
	if (stages[s].dead || stages[s].to < 0 || canon_dump(msg, &b, NULL) < 0) {
		buf_free(&b);
		return -1;
	}
	buf_addc(&b, '\n');
	int rc = write_all(stages[s].to, b.p, b.len);
	if (rc < 0)
		stages[s].dead = 1; /* EPIPE: SIGPIPE is ignored in the planner */
	else
		note_line(s, "out", b.p, b.len - 1);
	buf_free(&b);
	return rc;
}

void stage_close_input(enum stage_id s)
{
	if (stages[s].to >= 0)
		close(stages[s].to);
	stages[s].to = -1;
	stages[s].finished = 1; /* it may now exit: no longer a death to report */
}

/* A stage's error line, {"error":TEXT} and nothing else (set_error_echo):
 * the text, else NULL. */
static const char *error_line(const json_t *v)
{
	return json_object_size(v) == 1 ? json_string_value(json_object_get(v, "error")) : NULL;
}

/* A stage that hung up (its input was not closed on purpose): it failed
 * and said why in its last line, or it died. What it wrote is read to the
 * end - which never blocks once it has closed its end - and its error
 * kept for whoever asks again. */
static json_t *died(enum stage_id k, enum wait_why *why, struct sfma_err *e)
{
	char *line;
	size_t len;
	struct sfma_err re;
	while (!stages[k].drained && stages[k].from >= 0 && lr_next(&stages[k].reader, &line, &len, &re) == 1) {
		note_line(k, "in", line, len);
		json_t *v = ndjson_parse(line, len, NULL);
		const char *t = error_line(v);
		snprintf(stages[k].said, sizeof stages[k].said, "%s", t ? t : "");
		json_decref(v);
	}
	stages[k].drained = 1;
	stages[k].dead = 1;
	*why = WAIT_DIED;
	/* The observer between the planner and the stage (sfma-tap(1)) says
	 * why it stopped on the stage's pipe, in its own name: its error,
	 * not the stage's. */
	if (strncmp(stages[k].said, "sfma-tap: ", 10) == 0)
		err_set(e, "%s (on the pipes of %s)", stages[k].said, stages[k].name);
	else if (stages[k].said[0])
		err_set(e, "%s: %s", stages[k].name, stages[k].said);
	else
		err_set(e, "stage %s died", stages[k].name);
	return NULL;
}

void stage_death(enum stage_id s, struct sfma_err *e)
{
	enum wait_why why;
	died(s, &why, e);
}

json_t *stage_wait(enum stage_id s, const struct wait_opts *o, enum wait_why *why, struct sfma_err *e)
{
	*why = WAIT_OK;
	for (;;) {
		if (o->stop_on_halt && halt_signal) {
			*why = WAIT_HALT;
			err_set(e, "halted by signal");
			return NULL;
		}
		/* A complete line already buffered needs no poll. */
		if (!lr_has_line(&stages[s].reader)) {
			struct pollfd pfd[STAGE_COUNT];
			int n = 0, map[STAGE_COUNT];
			for (int k = 0; k < STAGE_COUNT; k++) {
				if (k != (int)s && (!o->watch_others || stages[k].from < 0 || stages[k].dead ||
				                    stages[k].finished))
					continue;
				/* Other stages are watched for hang-up only. */
				pfd[n].fd = stages[k].from;
				pfd[n].events = k == (int)s ? POLLIN : 0;
				map[n++] = k;
			}
			/* Wake at least every second: a halt signal may have
			 * arrived between the check above and poll. */
			int timeout = 1000;
			if (o->deadline_mono > 0) {
				int64_t left = o->deadline_mono - mono_ms();
				if (left <= 0) {
					*why = WAIT_TIMEOUT;
					err_set(e, "timeout");
					return NULL;
				}
				if (left < timeout)
					timeout = (int)left;
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
				if (pfd[i].revents & (POLLHUP | POLLERR))
					return died((enum stage_id)k, why, e);
			}
			if (!readable)
				continue;
		}
		char *line;
		size_t len;
		struct sfma_err re;
		int rc = lr_next(&stages[s].reader, &line, &len, &re);
		if (rc <= 0) {
			if (rc == 0 || stages[s].reader.torn)
				return died(s, why, e);
			stages[s].dead = 1;
			*why = WAIT_DIED;
			err_set(e, "stage %s: %s", stages[s].name, re.text);
			return NULL;
		}
#ifdef SFMA_TEST_HOOKS
		static struct buf altered;
		if (hook_alter(s, line, len, &altered)) {
			line = altered.p;
			len = altered.len;
		}
#endif
		note_line(s, "in", line, len);
		json_t *v = ndjson_parse(line, len, &re);
		if (!v || !json_is_object(v)) {
			json_decref(v);
			*why = WAIT_DIED;
			err_set(e, "stage %s sent a malformed reply", stages[s].name);
			return NULL;
		}
		if (error_line(v)) {
			snprintf(stages[s].said, sizeof stages[s].said, "%s", error_line(v));
			json_decref(v);
			return died(s, why, e);
		}
		return v;
	}
}

void stages_free(void)
{
	for (int s = 0; s < STAGE_COUNT; s++) {
		lr_free(&stages[s].reader);
		json_decref(stage_wire((enum stage_id)s));
	}
}
