/* mock.c - the offline provider.
 *
 * With SFMA_MOCK set, replies come from that JSON array, one item per call
 * (strings verbatim, objects in canonical form), then a final "done".
 * Without it, a built-in script that needs no network and works with or
 * without a bootstrap step: a reasoning request gets a bootstrap candidate
 * made from the manifest; mechanical requests write each declared output,
 * run echo when allowed, and say done. */
#include "model.h"
#include "canon.h"
#include "ndjson.h"

#include <stdlib.h>
#include <string.h>

static json_t *queue;              /* SFMA_MOCK, or NULL for the built-in script */
static size_t next_item;
static size_t script_step;         /* position in the built-in mechanical script */
static const struct manifest *task;

#define EXHAUSTED "{\"summary\":\"mock queue exhausted\",\"tool\":\"done\"}"

int mock_init(const struct manifest *m, struct sfma_err *e)
{
	task = m;
	const char *env = getenv("SFMA_MOCK");
	if (!env)
		return 0;
	json_t *v = json_parse_strict(env, strlen(env), e);
	if (!v)
		return err_prefix(e, "SFMA_MOCK");
	if (!json_is_array(v)) {
		json_decref(v);
		return err_set(e, "SFMA_MOCK: must be a JSON array of replies");
	}
	size_t i;
	json_t *item;
	json_array_foreach(v, i, item) {
		if (!json_is_string(item) && !json_is_object(item)) {
			json_decref(v);
			return err_set(e, "SFMA_MOCK[%zu]: a reply must be a string or an object", i);
		}
		struct buf probe = {0};
		int bad = json_is_object(item) && canon_dump(item, &probe, e) < 0;
		buf_free(&probe);
		if (bad) {
			json_decref(v);
			return err_prefix(e, "SFMA_MOCK[%zu]", i);
		}
	}
	queue = v;
	return 0;
}

void mock_free(void)
{
	json_decref(queue);
	queue = NULL;
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

void mock_reply(int reasoning, struct buf *text)
{
	if (queue) {
		json_t *item = json_array_get(queue, next_item);
		if (!item) {
			buf_adds(text, EXHAUSTED);
		} else {
			next_item++;
			if (json_is_string(item))
				buf_add(text, json_string_value(item), json_string_length(item));
			else
				canon_dump(item, text, NULL); /* checked in mock_init */
		}
		return;
	}
	if (reasoning)
		bootstrap_candidate(text);
	else
		script_next(text);
}
