/* blackboard.c - the tasks loops share (sfma-plan(1), Loops and the
 * blackboard): a task's definition, the first tasks of a candidate, the
 * message that assigns one, and the gate of a posted task. */
#include "blackboard.h"

#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "canon.h"

json_t *task_def(const char *id, const char *description, const json_t *role, const char *cls)
{
	return json_pack("{s:s, s:s, s:O, s:s}", "id", id, "description", description, "role",
	                 json_is_string(role) ? role : json_null(), "class",
	                 cls && strcmp(cls, "reasoning") == 0 ? "reasoning" : "mechanical");
}

static int has_task(const json_t *defs, const char *id)
{
	size_t i;
	json_t *d;
	json_array_foreach(defs, i, d)
		if (strcmp(json_string_value(json_object_get(d, "id")), id) == 0)
			return 1;
	return 0;
}

json_t *first_tasks(const json_t *candidate, const char *task)
{
	json_t *defs = json_array();
	size_t i;
	json_t *t;
	json_array_foreach(json_object_get(candidate, "firstTasks"), i, t) {
		char fallback[32];
		const char *id = json_string_value(json_object_get(t, "id"));
		snprintf(fallback, sizeof fallback, "t%zu", i);
		if (!id || !*id || has_task(defs, id))
			id = fallback;
		if (has_task(defs, id))
			continue;
		const char *d = json_string_value(json_object_get(t, "description"));
		json_array_append_new(defs, task_def(id, d ? d : (json_is_string(t) ? json_string_value(t) : id),
		                                     json_object_get(t, "role"),
		                                     json_string_value(json_object_get(t, "class"))));
	}
	if (!json_array_size(defs))
		json_array_append_new(defs, task_def("main", task && *task ? task : "produce the declared outputs", NULL,
		                                     "mechanical"));
	return defs;
}

char *assigned_task_text(const json_t *def, int loop, const char *clarification)
{
	json_t *msg = json_pack("{s:O, s:i}", "assignedTask", def, "loop", loop);
	if (clarification)
		json_object_set_new(msg, "clarification", json_string(clarification));
	struct buf b = {0};
	canon_dump(msg, &b, NULL);
	json_decref(msg);
	return b.p;
}

int task_post_check(const json_t *call, const json_t *defs, size_t pending, long max_pending, char *reason,
                    size_t n)
{
	const char *id = json_string_value(json_object_get(call, "id"));
	const char *d = json_string_value(json_object_get(call, "description"));
	const char *cls = json_string_value(json_object_get(call, "class"));
	if (!id || !*id || strlen(id) > 200 || !d || !*d)
		snprintf(reason, n, "a task needs an id (1..200 bytes) and a description");
	else if (cls && strcmp(cls, "reasoning") != 0 && strcmp(cls, "mechanical") != 0)
		snprintf(reason, n, "a task's class is reasoning or mechanical");
	else if (has_task(defs, id))
		snprintf(reason, n, REASON_DUPLICATE_TASK " %s", id);
	else if (pending >= (size_t)max_pending)
		snprintf(reason, n, REASON_PENDING_CEILING " (%ld) reached", max_pending);
	else {
		snprintf(reason, n, "task posted");
		return 1;
	}
	return 0;
}

