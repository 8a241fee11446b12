/* sfma-model - the stage that talks to models.
 *
 *   sfma-model MANIFEST  < requests  > replies
 *
 * The only stage that holds provider credentials or opens network
 * connections. Reads one request per line on stdin, answers each with one
 * line on stdout (flushed), whatever the request looked like. See
 * sfma-model(1) and PIPELINE.md for the messages. */
#include "model.h"
#include "ndjson.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

long long now_epoch_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long now_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double now_mono_ms_frac(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000 + (double)ts.tv_nsec / 1e6;
}

/* ---- reading request lines ---------------------------------------------- */

/* A line reader that survives an over-long line: the excess is read and
 * dropped up to the next newline, so memory stays bounded and the stream
 * stays in step. */
struct reader {
	char chunk[64 << 10];
	size_t pos, end;
	int eof;
};

enum { LINE_EOF, LINE_OK, LINE_TOO_LONG };

static int next_line(struct reader *r, struct buf *line)
{
	int too_long = 0, any = 0;
	buf_reset(line);
	for (;;) {
		if (r->pos == r->end) {
			if (r->eof)
				return !any ? LINE_EOF : too_long ? LINE_TOO_LONG : LINE_OK;
			ssize_t got = read(0, r->chunk, sizeof r->chunk);
			if (got < 0 && errno == EINTR)
				continue;
			if (got < 0)
				die("read stdin: %s", strerror(errno));
			r->pos = 0;
			r->end = (size_t)got;
			r->eof = got == 0;
			continue;
		}
		any = 1;
		char *nl = memchr(r->chunk + r->pos, '\n', r->end - r->pos);
		size_t take = nl ? (size_t)(nl - (r->chunk + r->pos)) : r->end - r->pos;
		if (!too_long && line->len + take <= MODEL_REQUEST_MAX)
			buf_add(line, r->chunk + r->pos, take);
		else if (!too_long) {
			too_long = 1;
			buf_free(line); /* give the memory back now, not at the next line */
		}
		r->pos += take + (nl ? 1 : 0);
		if (nl)
			return too_long ? LINE_TOO_LONG : LINE_OK;
	}
}

/* ---- the request ------------------------------------------------------- */

static int parse_messages(json_t *msgs, struct sfma_err *e)
{
	if (!json_is_array(msgs) || json_array_size(msgs) == 0)
		return err_set(e, "messages must be a non-empty array");
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) {
		const char *role = json_string_value(json_object_get(m, "role"));
		if (!json_is_object(m) || !role ||
		    (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0))
			return err_set(e, "messages[%zu].role must be \"user\" or \"assistant\"", i);
		if (!json_is_string(json_object_get(m, "content")))
			return err_set(e, "messages[%zu].content must be a string", i);
	}
	return 0;
}

static int parse_request(json_t *doc, struct model_request *rq, struct sfma_err *e)
{
	memset(rq, 0, sizeof *rq);
	if (!json_is_object(doc))
		return err_set(e, "a request must be a JSON object");
	rq->id = json_object_get(doc, "id");
	json_t *sys = json_object_get(doc, "system");
	if (sys && !json_is_string(sys))
		return err_set(e, "system must be a string");
	rq->system = sys ? json_string_value(sys) : "";
	rq->system_len = sys ? json_string_length(sys) : 0;
	rq->messages = json_object_get(doc, "messages");
	if (parse_messages(rq->messages, e) < 0)
		return -1;
	const char *cls = json_string_value(json_object_get(doc, "class"));
	if (!cls || (strcmp(cls, "reasoning") != 0 && strcmp(cls, "mechanical") != 0))
		return err_set(e, "class must be \"reasoning\" or \"mechanical\"");
	rq->reasoning = strcmp(cls, "reasoning") == 0;
	if (!json_integer_of(json_object_get(doc, "deadlineMs"), &rq->deadline_ms) ||
	    rq->deadline_ms <= 0)
		return err_set(e, "deadlineMs must be a positive integer (epoch milliseconds)");
	if (!json_integer_of(json_object_get(doc, "callsLeft"), &rq->calls_left) ||
	    rq->calls_left < 0)
		return err_set(e, "callsLeft must be an integer >= 0");
	return 0;
}

static json_t *error_reply(json_t *id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *error_reply(json_t *id, const char *fmt, ...)
{
	char text[SFMA_ERR_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	return json_pack("{s:O,s:b,s:o}", "id", id ? id : json_null(), "ok", 0, "error",
	                 json_string_lossy(text, strlen(text)));
}

static json_t *serve_line(struct grid *g, const char *line, size_t len)
{
	struct sfma_err e;
	json_t *doc = json_parse_strict(line, len, &e);
	if (!doc)
		return error_reply(NULL, "bad request: %s", e.text);
	struct model_request rq;
	json_t *reply;
	json_t *state = json_is_object(doc) ? json_object_get(doc, "state") : NULL;
	if (parse_request(doc, &rq, &e) < 0)
		reply = error_reply(rq.id, "bad request: %s", e.text);
	else if (state && grid_seed(g, state, &e) < 0)
		reply = error_reply(rq.id, "bad request: %s", e.text);
	else {
		reply = grid_serve(g, &rq);
		json_object_set(reply, "id", rq.id ? rq.id : json_null());
	}
	json_decref(doc);
	return reply;
}

/* ---- main ------------------------------------------------------------- */

static _Noreturn void task_invalid(struct reasons *why)
{
	fputs("TASK_INVALID\n", stderr);
	for (size_t i = 0; i < why->n; i++)
		fprintf(stderr, "- %s\n", why->items[i]);
	reasons_free(why);
	exit(2);
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	if (argc != 2 || argv[1][0] == '-')
		die_status(2, "usage: sfma-model MANIFEST");
	/* A reader that went away is reported as a write error, not a silent death. */
	signal(SIGPIPE, SIG_IGN);

	struct reasons why = {0};
	struct manifest *m = manifest_load(argv[1], &why);
	if (!m)
		task_invalid(&why);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
		die("cannot initialise libcurl");
	struct grid g;
	grid_init(&g, m);
	int has_mock = 0;
	for (size_t i = 0; i < g.n; i++)
		has_mock |= g.eps[i].prov == PROV_MOCK;
	struct sfma_err e;
	if (has_mock && mock_init(m, &e) < 0)
		die_status(2, "%s", e.text);

	struct reader *r = xcalloc(1, sizeof *r);
	struct buf line = {0};
	int kind;
	while ((kind = next_line(r, &line)) != LINE_EOF) {
		json_t *reply = kind == LINE_TOO_LONG
		                        ? error_reply(NULL, "bad request: line longer than %u bytes",
		                                      MODEL_REQUEST_MAX)
		                        : serve_line(&g, line.p ? line.p : "", line.len);
		int rc = json_print_line(stdout, reply);
		json_decref(reply);
		if (rc < 0)
			die("write stdout: %s", strerror(errno));
	}

	buf_free(&line);
	free(r);
	mock_free();
	grid_free(&g);
	secret_free_all();
	curl_global_cleanup();
	manifest_free(m);
	return 0;
}
