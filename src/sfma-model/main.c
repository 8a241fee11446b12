/* sfma-model - the stage that talks to models.
 *
 *   sfma-model MANIFEST  < requests  > replies
 *
 * The only stage that holds provider credentials or opens network
 * connections. Reads one request per line on stdin, answers each with one
 * line on stdout (flushed), whatever the request looked like. Requests are
 * served at once, each by its own thread (at most MODEL_INFLIGHT_MAX), and
 * answered as they finish, in any order, each reply carrying its request's
 * id. What depends on arrival order (the state a request seeds, the
 * verdicts it folds in, the ranking, the mock's queues) is done by the
 * reading thread before the request's thread starts. See sfma-model(1)
 * and PIPELINE.md for the messages. */
#include "model.h"
#include "cli.h"
#include "confine.h"
#include "url.h"
#include "ndjson.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the request ------------------------------------------------------- */

static int nonempty_string(json_t *v)
{
	return json_is_string(v) && json_string_length(v) > 0;
}

/* toolCalls: [{"id","name","input":{}}...], non-empty. */
static int check_tool_calls(json_t *calls, size_t i, struct sfma_err *e)
{
	if (!json_is_array(calls) || json_array_size(calls) == 0)
		return err_set(e, "messages[%zu].toolCalls must be a non-empty array", i);
	size_t j;
	json_t *c;
	json_array_foreach(calls, j, c)
		if (!json_is_object(c) || !nonempty_string(json_object_get(c, "id")) ||
		    !nonempty_string(json_object_get(c, "name")) || !json_is_object(json_object_get(c, "input")))
			return err_set(e, "messages[%zu].toolCalls[%zu] must be {\"id\",\"name\",\"input\":{...}}", i, j);
	return 0;
}

/* results: one {"id","name","content"} per call of the assistant message
 * just before, in its order: every provider insists that each call gets
 * its result. */
static int check_results(json_t *msgs, size_t i, struct sfma_err *e)
{
	json_t *results = json_object_get(json_array_get(msgs, i), "results");
	json_t *prev = i ? json_array_get(msgs, i - 1) : NULL;
	json_t *calls = json_object_get(prev, "toolCalls");
	if (!json_is_array(results) || json_array_size(results) == 0)
		return err_set(e, "messages[%zu].results must be a non-empty array", i);
	if (!calls)
		return err_set(e, "messages[%zu]: a tool message must follow an assistant message with toolCalls", i);
	if (json_array_size(results) != json_array_size(calls))
		return err_set(e, "messages[%zu]: %zu results for %zu tool calls", i, json_array_size(results),
		               json_array_size(calls));
	size_t j;
	json_t *r;
	json_array_foreach(results, j, r) {
		if (!json_is_object(r) || !nonempty_string(json_object_get(r, "id")) ||
		    !nonempty_string(json_object_get(r, "name")) || !json_is_string(json_object_get(r, "content")))
			return err_set(e, "messages[%zu].results[%zu] must be {\"id\",\"name\",\"content\"}", i, j);
		if (!json_equal(json_object_get(r, "id"), json_object_get(json_array_get(calls, j), "id")))
			return err_set(e, "messages[%zu].results[%zu].id is not the id of tool call %zu", i, j, j);
	}
	return 0;
}

static int parse_messages(json_t *msgs, struct sfma_err *e)
{
	if (!json_is_array(msgs) || json_array_size(msgs) == 0)
		return err_set(e, "messages must be a non-empty array");
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) {
		const char *role = json_string_value(json_object_get(m, "role"));
		if (!json_is_object(m) || !role ||
		    (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0 && strcmp(role, "tool") != 0))
			return err_set(e, "messages[%zu].role must be \"user\", \"assistant\" or \"tool\"", i);
		if (strcmp(role, "tool") == 0) {
			if (check_results(msgs, i, e) < 0)
				return -1;
			continue;
		}
		if (!json_is_string(json_object_get(m, "content")))
			return err_set(e, "messages[%zu].content must be a string", i);
		json_t *calls = json_object_get(m, "toolCalls");
		if (calls && strcmp(role, "assistant") != 0)
			return err_set(e, "messages[%zu]: only an assistant message has toolCalls", i);
		if (calls && check_tool_calls(calls, i, e) < 0)
			return -1;
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
	if (!ndjson_integer(json_object_get(doc, "deadlineMs"), &rq->deadline_ms) ||
	    rq->deadline_ms <= 0)
		return err_set(e, "deadlineMs must be a positive integer (epoch milliseconds)");
	if (!ndjson_integer(json_object_get(doc, "callsLeft"), &rq->calls_left) ||
	    rq->calls_left < 0)
		return err_set(e, "callsLeft must be an integer >= 0");
	json_t *tools = json_object_get(doc, "tools");
	if (tools && !json_is_boolean(tools))
		return err_set(e, "tools must be true or false");
	rq->tools = json_is_true(tools);
	static const char *const purposes[] = {
		[PURPOSE_WORK] = "work", [PURPOSE_BOOTSTRAP] = "bootstrap",
		[PURPOSE_JUDGE] = "judge", [PURPOSE_CRITERIA] = "criteria",
	};
	json_t *purpose = json_object_get(doc, "purpose");
	size_t k = 0;
	while (purpose && k < sizeof purposes / sizeof *purposes &&
	       (!json_is_string(purpose) || strcmp(json_string_value(purpose), purposes[k]) != 0))
		k++;
	if (k == sizeof purposes / sizeof *purposes)
		return err_set(e, "purpose must be \"work\", \"bootstrap\", \"judge\" or \"criteria\"");
	rq->purpose = (enum purpose)k;
	json_t *task = json_object_get(doc, "task");
	if (task && !json_is_null(task) && !json_is_string(task))
		return err_set(e, "task must be a task id or null");
	rq->task = json_string_value(task);
	json_t *avoid = json_object_get(doc, "avoid");
	if (avoid && !json_is_null(avoid) && !nonempty_string(avoid))
		return err_set(e, "avoid must be an endpoint name");
	rq->avoid = json_string_value(avoid);
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

/* ---- serving at once ----------------------------------------------- */

/* One request in flight: its line parsed, its plan made, its thread. */
struct job {
	struct server *srv;
	json_t *doc;
	struct model_request rq;
	struct plan plan;
	pthread_t thread;
	int busy, done;
};

struct server {
	struct grid *g;
	pthread_mutex_t lock;              /* the slots */
	pthread_cond_t freed;              /* a job is done */
	pthread_mutex_t out_lock;          /* one whole line on stdout at a time */
	struct job slots[MODEL_INFLIGHT_MAX];
};

/* One reply line, whole: replies of requests that finish together never
 * interleave. A reader gone is the end: the message, then _exit, since
 * other requests are still in libcurl (exit's handlers would race them). */
static void put_reply(struct server *srv, json_t *reply)
{
	pthread_mutex_lock(&srv->out_lock);
	int rc = ndjson_print(stdout, reply);
	int err = errno;
	json_decref(reply);
	if (rc < 0) {
		warning("write stdout: %s", strerror(err));
		_exit(1);
	}
	pthread_mutex_unlock(&srv->out_lock);
}

static void *job_run(void *arg)
{
	struct job *j = arg;
	struct server *srv = j->srv;
	json_t *reply = grid_serve(srv->g, &j->rq, &j->plan);
	json_object_set(reply, "id", j->rq.id ? j->rq.id : json_null());
	put_reply(srv, reply);
	plan_free(&j->plan);
	json_decref(j->doc);
	j->doc = NULL;
	pthread_mutex_lock(&srv->lock);
	j->done = 1;
	pthread_cond_signal(&srv->freed);
	pthread_mutex_unlock(&srv->lock);
	return NULL;
}

/* A free slot, after joining the threads that are done; waits for one
 * when every slot is in flight. */
static struct job *free_slot(struct server *srv)
{
	pthread_mutex_lock(&srv->lock);
	for (;;) {
		struct job *free_one = NULL;
		for (size_t i = 0; i < MODEL_INFLIGHT_MAX; i++) {
			struct job *j = &srv->slots[i];
			if (j->busy && j->done) {
				pthread_join(j->thread, NULL);
				j->busy = j->done = 0;
			}
			if (!j->busy && !free_one)
				free_one = j;
		}
		if (free_one) {
			pthread_mutex_unlock(&srv->lock);
			return free_one;
		}
		pthread_cond_wait(&srv->freed, &srv->lock);
	}
}

static void join_all(struct server *srv)
{
	for (size_t i = 0; i < MODEL_INFLIGHT_MAX; i++)
		if (srv->slots[i].busy) {
			pthread_join(srv->slots[i].thread, NULL);
			srv->slots[i].busy = srv->slots[i].done = 0;
		}
}

/* Parse, seed, fold the verdicts, plan - in arrival order - then serve in
 * a thread of its own. */
static void serve_line(struct server *srv, const char *line, size_t len)
{
	struct sfma_err e;
	json_t *doc = ndjson_parse(line, len, &e);
	if (!doc) {
		put_reply(srv, error_reply(NULL, "bad request: %s", e.text));
		return;
	}
	struct job *j = free_slot(srv);
	memset(j, 0, sizeof *j);
	j->srv = srv;
	j->doc = doc;
	json_t *state = json_is_object(doc) ? json_object_get(doc, "state") : NULL;
	json_t *verdicts = json_is_object(doc) ? json_object_get(doc, "verdicts") : NULL;
	/* A bad request changes nothing: the verdicts are checked before the
	 * state is replaced (which fails only when it is no object) and before
	 * any verdict is folded in. */
	if (parse_request(doc, &j->rq, &e) < 0 || (verdicts && grid_verdicts(srv->g, verdicts, 0, &e) < 0) ||
	    (state && grid_seed(srv->g, state, &e) < 0) ||
	    (verdicts && grid_verdicts(srv->g, verdicts, 1, &e) < 0)) {
		put_reply(srv, error_reply(j->rq.id, "bad request: %s", e.text));
		json_decref(doc);
		return;
	}
	grid_plan(srv->g, &j->rq, &j->plan);
	j->busy = 1;
	if (pthread_create(&j->thread, NULL, job_run, j) != 0) {
		j->busy = 0;
		job_run(j); /* no thread to be had: served here, in turn */
	}
}

/* ---- main ------------------------------------------------------------- */

static const char usage_text[] =
	"usage: sfma-model MANIFEST < requests > replies\n"
	"       sfma-model --version | --help\n";

static const char *parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h': cli_help(usage_text);
		case 'V': cli_version();
		default: cli_bad_option(usage_text, c, argv);
		}
	}
	if (optind == argc)
		cli_usage_error(usage_text, "a MANIFEST is required");
	if (optind != argc - 1)
		cli_usage_error(usage_text, "one MANIFEST only (unexpected %s)", argv[optind + 1]);
	return argv[optind];
}

/* Answer every request line on stdin. A line over MODEL_REQUEST_MAX is
 * answered with an error and skipped up to its newline: the reader's buffer
 * never grows past the maximum and the stream stays in step. At the end of
 * the input every request in flight is answered before the stage exits. */
static void serve_stdin(struct grid *g)
{
	struct line_reader r;
	struct sfma_err e;
	struct server *srv = xcalloc(1, sizeof *srv);
	srv->g = g;
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->freed, NULL);
	pthread_mutex_init(&srv->out_lock, NULL);
	lr_init(&r, 0, MODEL_REQUEST_MAX);
	for (;;) {
		char *line;
		size_t len;
		int got = lr_next(&r, &line, &len, &e);
		if (got == 0)
			break;
		/* lr_next's words for a failed read(2): that is no request. */
		if (got < 0 && strncmp(e.text, "read: ", 6) == 0) {
			warning("stdin: %s", e.text);
			_exit(1); /* requests in flight are in libcurl: see put_reply */
		}
		if (got == 1)
			serve_line(srv, line, len);
		else
			put_reply(srv, error_reply(NULL, "bad request: %s", e.text));
		if (got < 0 && !lr_skip_line(&r))
			break;
	}
	lr_free(&r);
	join_all(srv);
	pthread_mutex_destroy(&srv->lock);
	pthread_cond_destroy(&srv->freed);
	pthread_mutex_destroy(&srv->out_lock);
	free(srv);
}

/* The ports this stage may connect to: each endpoint's, and the name
 * service's and proxies' (url_proxy_ports). */
static size_t connect_ports(const struct manifest *m, uint16_t *ports, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < m->n_endpoints && n < cap; i++) {
		const char *url = m->endpoints[i].base_url;
		int port = url_port(url ? url : "https://");
		if (strcmp(m->endpoints[i].provider, "mock") != 0 && port > 0)
			ports[n++] = (uint16_t)port;
	}
	url_proxy_ports(ports, &n, cap);
	return n;
}

/* Confined once set up (sfma(1), CONFINEMENT): at the planner's go when
 * it passed a channel, else at once (nothing of the workspace is
 * needed). Every provider's default base URL is https. */
static void confine(const struct manifest *m)
{
	uint16_t ports[64];
	const struct confine_places places = {.ports = ports, .n_ports = connect_ports(m, ports, 64)};
	struct confine_report r;
	int channel = confine_channel_take();
	confine_stage(&channel, "sfma-model", &places, &r);
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	const char *manifest_path = parse_args(argc, argv);
	/* A reader that went away is reported as a write error, not a silent death. */
	signal(SIGPIPE, SIG_IGN);
	set_error_echo_if_asked(1);

	struct reasons why = {0};
	struct manifest *m = manifest_load(manifest_path, &why);
	if (!m)
		cli_task_invalid(&why);
	struct grid g;
	grid_init(&g, m);
	int has_mock = 0;
	for (size_t i = 0; i < g.n; i++)
		has_mock |= g.eps[i].prov == PROV_MOCK;
	struct sfma_err e;
	if (has_mock && mock_init(m, &e) < 0)
		die_status(2, "%s", e.text);
	confine(m);

	serve_stdin(&g);

	mock_free();
	provider_free_all();
	grid_free(&g);
	secret_free_all();
	curl_unload(); /* after grid_free: the pooled handles go first */
	manifest_free(m);
	return 0;
}
