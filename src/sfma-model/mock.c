/* mock.c - the offline provider.
 *
 * With SFMA_MOCK a JSON array, replies come from it, one item per work or
 * bootstrap call (strings verbatim, objects in canonical form), then a
 * final "done"; judgments are the stage's own (mock_judgment), no call. As
 * an object {"bootstrap","tasks":{id:[...]},"judge"} each kind of request
 * draws from its own queue, judgments included. Without SFMA_MOCK, a
 * built-in script that needs no network and works with or without a
 * bootstrap step: a reasoning request gets a bootstrap candidate made from
 * the manifest; mechanical requests write each declared output, run echo
 * when allowed, and say done. SFMA_MOCK_LATENCY_MS delays each attempt
 * (providers.c, in the request's own thread). */
#include "model.h"
#include "canon.h"
#include "ndjson.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The queues of SFMA_MOCK. The array form is one queue (`work`) for every
 * request but judgments, which the stage answers itself; the object form
 * {"bootstrap","tasks":{id:[...]},"judge"} has one per kind of request, and
 * judgments draw from `judge` like any attempt. mock_lock guards the
 * positions (requests are served at once) and the built-in script. */
static pthread_mutex_t mock_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *mock_doc;           /* SFMA_MOCK parsed, or NULL for the built-in script */
static int object_form;
static json_t *positions;          /* {"<queue name>": next index} */
static size_t script_step;         /* position in the built-in mechanical script */
static long long latency_ms;       /* SFMA_MOCK_LATENCY_MS */
static const struct manifest *task;

#define EXHAUSTED "{\"summary\":\"mock queue exhausted\",\"tool\":\"done\"}"

/* A queue: an array of replies, each a string or an object. */
static int check_queue(json_t *v, const char *where, struct sfma_err *e)
{
	if (!json_is_array(v))
		return err_set(e, "%s: must be a JSON array of replies", where);
	size_t i;
	json_t *item;
	json_array_foreach(v, i, item) {
		if (!json_is_string(item) && !json_is_object(item))
			return err_set(e, "%s[%zu]: a reply must be a string or an object", where, i);
		struct buf probe = {0};
		int bad = json_is_object(item) && canon_dump(item, &probe, e) < 0;
		buf_free(&probe);
		if (bad)
			return err_prefix(e, "%s[%zu]", where, i);
	}
	return 0;
}

static int check_object_form(json_t *v, struct sfma_err *e)
{
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x) {
		if (strcmp(k, "bootstrap") == 0 || strcmp(k, "judge") == 0) {
			char where[32];
			snprintf(where, sizeof where, "SFMA_MOCK.%s", k);
			if (check_queue(x, where, e) < 0)
				return -1;
		} else if (strcmp(k, "tasks") == 0) {
			if (!json_is_object(x))
				return err_set(e, "SFMA_MOCK.tasks: must be an object of task id: replies");
			const char *id;
			json_t *q;
			json_object_foreach(x, id, q) {
				char where[160];
				snprintf(where, sizeof where, "SFMA_MOCK.tasks.%.100s", id);
				if (check_queue(q, where, e) < 0)
					return -1;
			}
		} else {
			return err_set(e, "SFMA_MOCK: must be a JSON array of replies or an object "
			                  "{\"bootstrap\",\"tasks\",\"judge\"} (unknown member \"%.64s\")", k);
		}
	}
	return 0;
}

static int read_latency(struct sfma_err *e)
{
	const char *env = getenv("SFMA_MOCK_LATENCY_MS");
	latency_ms = 0;
	if (!env)
		return 0;
	char *end;
	errno = 0;
	long long v = strtoll(env, &end, 10);
	if (!*env || *end || errno || v < 0 || v > MODEL_MOCK_LATENCY_MAX_MS || *env == '+' || *env == '-' ||
	    *env == ' ')
		return err_set(e, "SFMA_MOCK_LATENCY_MS: must be an integer 0..%lld (milliseconds)",
		               MODEL_MOCK_LATENCY_MAX_MS);
	latency_ms = v;
	return 0;
}

int mock_init(const struct manifest *m, struct sfma_err *e)
{
	task = m;
	if (read_latency(e) < 0)
		return -1;
	const char *env = getenv("SFMA_MOCK");
	if (!env)
		return 0;
	json_t *v = ndjson_parse(env, strlen(env), e);
	if (!v)
		return err_prefix(e, "SFMA_MOCK");
	int rc = json_is_array(v) ? check_queue(v, "SFMA_MOCK", e)
	         : json_is_object(v) ? check_object_form(v, e)
	                             : err_set(e, "SFMA_MOCK: must be a JSON array of replies or an object "
	                                          "{\"bootstrap\",\"tasks\",\"judge\"}");
	if (rc < 0) {
		json_decref(v);
		return -1;
	}
	mock_doc = v;
	object_form = json_is_object(v);
	positions = json_object();
	return 0;
}

long long mock_latency_ms(void)
{
	return latency_ms;
}

int mock_judges_itself(void)
{
	return !object_form;
}

void mock_free(void)
{
	json_decref(mock_doc);
	json_decref(positions);
	mock_doc = positions = NULL;
	object_form = 0;
}

static void emit(struct buf *text, json_t *obj)
{
	if (canon_dump(obj, text, NULL) < 0)
		die("mock: cannot serialize a reply"); /* only numbers could fail, and we put none */
	json_decref(obj);
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int command_allowed(const char *cmd)
{
	for (size_t i = 0; i < task->n_allowed; i++)
		if (strcmp(task->allowed[i], cmd) == 0)
			return 1;
	return 0;
}

static void bootstrap_candidate(struct buf *text)
{
	json_t *criteria = json_array(), *first = json_array();
	for (size_t i = 0; i < task->n_outputs; i++) {
		char line[512];
		snprintf(line, sizeof line, "%s exists and names the task", task->outputs[i]);
		json_array_append_new(criteria, json_string_lossy(line, strlen(line)));
		snprintf(line, sizeof line, "write %s", task->outputs[i]);
		char id[32];
		snprintf(id, sizeof id, "t%zu", i);
		json_array_append_new(first, json_pack("{s:s, s:o, s:s, s:s}", "id", id, "description",
		                                       json_string_lossy(line, strlen(line)), "role", "worker",
		                                       "class", "mechanical"));
	}
	if (task->n_outputs == 0) {
		json_array_append_new(criteria, json_string("the task is reported done"));
		json_array_append_new(first, json_pack("{s:s, s:s, s:s, s:s}", "id", "t0", "description",
		                                       "report done", "role", "worker", "class", "mechanical"));
	}
	char mission[512];
	snprintf(mission, sizeof mission, "Complete the task %s and produce its declared outputs",
	         task->name);
	json_t *c = json_object();
	json_object_set_new(c, "mission", json_string_lossy(mission, strlen(mission)));
	json_object_set_new(c, "successCriteria", criteria);
	/* The shapes the genesis prompt asks of a model (sfma-plan(1)). */
	json_object_set_new(c, "loopRoles",
	                    json_pack("[{s:s, s:s}]", "name", "worker", "duty", "write the declared outputs"));
	json_object_set_new(c, "firstTasks", first);
	json_object_set_new(c, "schedule", json_array());
	emit(text, c);
}

static void script_write(struct buf *text, const char *path)
{
	struct buf content = {0};
	if (ends_with(path, ".json")) {
		json_t *o = json_object();
		json_object_set_new(o, "task", json_string(task->name));
		json_object_set_new(o, "file", json_string(path));
		canon_dump(o, &content, NULL);
		buf_addc(&content, '\n');
		json_decref(o);
	} else {
		buf_printf(&content, "Task %s: %s written by the mock model.\n", task->name, path);
	}
	json_t *w = json_object();
	json_object_set_new(w, "tool", json_string("write"));
	json_object_set_new(w, "path", json_string(path));
	json_object_set_new(w, "content", json_string_lossy(content.p, content.len));
	buf_free(&content);
	emit(text, w);
}

/* The built-in mechanical script: outputs, then echo (if allowed), then done. */
static void script_next(struct buf *text)
{
	size_t step = script_step++;
	if (step < task->n_outputs) {
		script_write(text, task->outputs[step]);
		return;
	}
	step -= task->n_outputs;
	if (step == 0 && command_allowed("echo")) {
		emit(text, json_pack("{s:s,s:s}", "tool", "run", "cmd", "echo hello from the sandbox"));
		return;
	}
	script_step--; /* stay on done */
	char summary[128];
	snprintf(summary, sizeof summary, "wrote %zu declared output%s", task->n_outputs,
	         task->n_outputs == 1 ? "" : "s");
	emit(text, json_pack("{s:s,s:s}", "tool", "done", "summary", summary));
}

/* The queue rq draws from, and its name in positions; NULL queue when
 * there is none (an exhausted queue). */
static json_t *queue_of(const struct model_request *rq, struct buf *name)
{
	if (!object_form) {
		buf_adds(name, "work");
		return mock_doc;
	}
	switch (rq->purpose) {
	case PURPOSE_BOOTSTRAP:
		buf_adds(name, "bootstrap");
		return json_object_get(mock_doc, "bootstrap");
	case PURPOSE_JUDGE:
	case PURPOSE_CRITERIA:
		buf_adds(name, "judge");
		return json_object_get(mock_doc, "judge");
	case PURPOSE_WORK:
		break;
	}
	if (!rq->task)
		return NULL;
	/* "task:" keeps a task named "judge" apart from the judge queue. */
	buf_printf(name, "task:%s", rq->task);
	return json_object_get(json_object_get(mock_doc, "tasks"), rq->task);
}

void mock_reply(const struct model_request *rq, struct buf *text)
{
	pthread_mutex_lock(&mock_lock);
	if (mock_doc) {
		struct buf name = {0};
		json_t *q = queue_of(rq, &name);
		json_int_t at = json_integer_value(json_object_get(positions, name.p ? name.p : ""));
		json_t *item = json_array_get(q, (size_t)at);
		if (!item) {
			buf_adds(text, EXHAUSTED);
		} else {
			json_object_set_new(positions, name.p ? name.p : "", json_integer(at + 1));
			if (json_is_string(item))
				buf_add(text, json_string_value(item), json_string_length(item));
			else
				canon_dump(item, text, NULL); /* checked in mock_init */
		}
		buf_free(&name);
	} else if (rq->purpose == PURPOSE_BOOTSTRAP || (rq->purpose == PURPOSE_WORK && rq->reasoning)) {
		bootstrap_candidate(text);
	} else {
		script_next(text);
	}
	pthread_mutex_unlock(&mock_lock);
}

/* The success criteria a criteria judgment lists: the first array of
 * strings named "successCriteria" or "criteria" in v (depth first), or
 * objects with a "criterion" string. */
static json_t *find_criteria(json_t *v, int depth)
{
	if (depth > 16)
		return NULL;
	const char *k;
	json_t *x;
	size_t i;
	if (json_is_object(v)) {
		json_object_foreach(v, k, x) {
			if ((strcmp(k, "successCriteria") == 0 || strcmp(k, "criteria") == 0) && json_is_array(x)) {
				json_t *out = json_array(), *c;
				json_array_foreach(x, i, c) {
					json_t *s = json_is_string(c) ? c : json_object_get(c, "criterion");
					if (json_is_string(s))
						json_array_append(out, s);
				}
				if (json_array_size(out) == json_array_size(x))
					return out;
				json_decref(out);
			}
		}
		json_object_foreach(v, k, x) {
			json_t *found = find_criteria(x, depth + 1);
			if (found)
				return found;
		}
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, x) {
			json_t *found = find_criteria(x, depth + 1);
			if (found)
				return found;
		}
	}
	return NULL;
}

/* The criteria named by the request: in a message (the latest first)
 * whose content is JSON, else in the system prompt after its first line. */
static json_t *request_criteria(const struct model_request *rq)
{
	size_t n = json_array_size(rq->messages);
	for (size_t i = n; i-- > 0;) {
		json_t *c = json_object_get(json_array_get(rq->messages, i), "content");
		if (!json_is_string(c))
			continue;
		json_t *doc = ndjson_parse(json_string_value(c), json_string_length(c), NULL);
		json_t *found = find_criteria(doc, 0);
		json_decref(doc);
		if (found)
			return found;
	}
	const char *nl = memchr(rq->system, '\n', rq->system_len);
	if (nl) {
		json_t *doc = ndjson_parse(nl + 1, rq->system_len - (size_t)(nl + 1 - rq->system), NULL);
		json_t *found = find_criteria(doc, 0);
		json_decref(doc);
		if (found)
			return found;
	}
	return json_array();
}

void mock_judgment(const struct model_request *rq, struct buf *text)
{
	if (rq->purpose != PURPOSE_CRITERIA) {
		emit(text, json_pack("{s:b,s:s}", "pass", 1, "reason", "mock judge"));
		return;
	}
	json_t *names = request_criteria(rq), *name, *out = json_array();
	size_t i;
	json_array_foreach(names, i, name)
		json_array_append_new(out, json_pack("{s:O,s:b,s:[]}", "criterion", name, "pass", 1, "evidence"));
	json_decref(names);
	emit(text, json_pack("{s:o}", "criteria", out));
}
