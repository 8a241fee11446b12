/* memstage.c - the planner's requests to the memory stage (sfma-mem(1)).
 *
 * The long-term memory store is not the planner's: sfma-mem owns
 * .sfma/mem and is the only program of a run that starts git. The
 * planner asks it, one request and its one reply at a time, like every
 * other stage, so that each memory access is a message on a pipe - and
 * the planner itself starts no process. */
#include "plan.h"
#include "errors.h"

#include <stdio.h>
#include <string.h>

static long long last_id; /* the last request's id: replies come in order */

long long mem_post(json_t *req, struct sfma_err *e)
{
	long long id = ++last_id;
	json_object_set_new(req, "id", json_integer((json_int_t)id));
	int sent = stage_send(STAGE_MEM, req);
	json_decref(req);
	if (sent < 0) {
		stage_death(STAGE_MEM, e);
		return -1;
	}
	return id;
}

json_t *mem_reply(long long id, int64_t deadline_mono, enum wait_why *why, struct sfma_err *e)
{
	/* A memory request is short: a halt is honoured once it is answered,
	 * and another stage's death at the next wait for that stage (so that
	 * it is never taken for the store's answer). */
	const struct wait_opts o = {.deadline_mono = deadline_mono};
	json_t *reply;
	long long got;
	for (;;) {
		if (!(reply = stage_wait(STAGE_MEM, &o, why, e)))
			return NULL;
		/* The late answer to a request given up on (its wait timed
		 * out): read and dropped, replies come in order. */
		if (ndjson_integer(json_object_get(reply, "id"), &got) && got > 0 && got < id) {
			json_decref(reply);
			continue;
		}
		break;
	}
	json_t *ok = json_object_get(reply, "ok");
	if (!ndjson_integer(json_object_get(reply, "id"), &got) || got != id || !json_is_boolean(ok)) {
		/* Every later answer would be out of step: the stage is no use. */
		json_decref(reply);
		stages[STAGE_MEM].dead = 1;
		*why = WAIT_DIED;
		err_set(e, "stage sfma-mem sent a malformed reply (request %lld)", id);
		return NULL;
	}
	if (json_is_false(ok)) {
		const char *text = json_string_value(json_object_get(reply, "error"));
		err_set(e, "%s", text && *text ? text : "refused");
		json_decref(reply);
		*why = WAIT_OK;
		return NULL;
	}
	return reply;
}

json_t *mem_ask(json_t *req, int64_t deadline_mono, enum wait_why *why, struct sfma_err *e)
{
	long long id = mem_post(req, e);
	if (id < 0) {
		*why = WAIT_DIED;
		return NULL;
	}
	return mem_reply(id, deadline_mono, why, e);
}
