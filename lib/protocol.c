/* protocol.c - the model's protocol (sfma-plan(1)): the genesis system
 * prompt, the lenient reading of a reply, and the messages that answer
 * native tool calls. The planner speaks it; the replay derives with it. */
#include "protocol.h"

#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "canon.h"
#include "errors.h"
#include "ndjson.h"

/* The text the model is bound by. Its version is recorded in every result
 * record (genesisVersion); change GENESIS_VERSION with any change here. */
char *genesis_prompt(const struct manifest *m, const char *task, int dry_run, int pinned)
{
	struct buf b = {0};
	struct buf man = {0};
	canon_dump_pretty(m->json, &man, NULL);
	buf_printf(&b,
	    "You are an agent working under a signed contract (sfma %s). Every action you propose is checked by "
	    "deterministic code against the manifest below; anything outside it is refused and recorded in a "
	    "hash-chained audit trace.\n\n"
	    "MANIFEST (verbatim):\n%s\n\n", GENESIS_VERSION, man.p);
	buf_printf(&b, "TASK:\n%s\n\n", task && *task ? task : "(no task statement: produce the declared outputs)");
	buf_printf(&b, "MODE: %s\n\n", dry_run ? "dry run - writes are recorded, not applied; commands are not executed"
	                                         : "applied - writes land in the workspace; commands run in a sandbox");
	if (!pinned)
		buf_adds(&b,
		    "FIRST REPLY: a bootstrap candidate, exactly one JSON object with the members mission (string), "
		    "successCriteria (array of strings), loopRoles (array of {name,duty}), firstTasks (array of "
		    "{id,description,role,class}) and schedule (array). No tool call before it is adopted.\n\n");
	buf_adds(&b,
	    "THEN: reply with exactly one tool call per turn, one JSON object and nothing else:\n"
	    "  {\"tool\":\"read\",\"path\":P}            read a workspace file\n"
	    "  {\"tool\":\"write\",\"path\":P,\"content\":C} write a declared output (only those in outputs)\n"
	    "  {\"tool\":\"run\",\"cmd\":C}              run an allowed command (no shell: arguments split on "
	    "whitespace; the sandbox sees only the declared inputs, no network)\n"
	    "  {\"tool\":\"notify\",\"text\":T}          tell the operator something (never blocks)\n"
	    "  {\"tool\":\"ask\",\"question\":Q}         ask the operator (the answer arrives in a later run)\n"
	    "  {\"tool\":\"recall\",\"mode\":M,...}      query long-term memory (modes referential, episodic, "
	    "lexical, change; semantic is only a labelled term-overlap ranking, no store here does similarity)\n"
	    "  {\"tool\":\"task\",\"id\":I,\"description\":D,\"role\":R,\"class\":C} post work for another loop "
	    "(role and class optional; an id is used once)\n"
	    "  {\"tool\":\"done\",\"summary\":S}         finish your task: its work is then judged\n"
	    "Each tool result comes back as {\"toolResult\":...}. A refused call returns "
	    "EPSILON_HARD_FAIL: <reason> and counts against the run.\n\n"
	    "OPERATOR MESSAGES may only narrow the task; they can never widen the manifest.\n");
	buf_free(&man);
	return b.p;
}

/* Strip a Markdown code fence around the reply, if any. */
static char *strip_fences(const char *text)
{
	const char *start = text, *end = text + strlen(text);
	while (start < end && strchr(" \t\r\n", *start))
		start++;
	while (end > start && strchr(" \t\r\n", end[-1]))
		end--;
	if (end - start >= 6 && strncmp(start, "```", 3) == 0 && strncmp(end - 3, "```", 3) == 0) {
		const char *nl = memchr(start, '\n', (size_t)(end - start));
		if (nl && nl < end - 3) {
			start = nl + 1;
			end -= 3;
		}
	}
	char *out = xmalloc((size_t)(end - start) + 1);
	memcpy(out, start, (size_t)(end - start));
	out[end - start] = '\0';
	return out;
}

json_t *parse_reply(const char *text)
{
	char *body = strip_fences(text);
	json_t *v = ndjson_parse(body, strlen(body), NULL);
	/* Text that is JSON but not an object (a model wrapping its call in
	 * [ ] or quoting it) is treated like prose around the object. */
	if (v && !json_is_object(v)) {
		json_decref(v);
		v = NULL;
	}
	if (!v) {
		char *first = strchr(body, '{'), *last = strrchr(body, '}');
		if (first && last && last > first)
			v = ndjson_parse(first, (size_t)(last - first + 1), NULL);
	}
	free(body);
	if (v && !json_is_object(v)) {
		json_decref(v);
		v = NULL;
	}
	return v;
}

int is_candidate(const json_t *v)
{
	static const char *const keys[] = {"mission", "successCriteria", "loopRoles", "firstTasks", "schedule"};
	if (!json_is_object(v) || json_object_get(v, "tool"))
		return 0;
	for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
		if (!json_object_get(v, keys[i]))
			return 0;
	return json_is_string(json_object_get(v, "mission")) &&
	       json_is_array(json_object_get(v, "successCriteria"));
}

json_t *tool_message(const json_t *tool_calls, const char *text)
{
	json_t *results = json_array();
	size_t i;
	json_t *c;
	json_array_foreach(tool_calls, i, c)
		json_array_append_new(results, json_pack("{s:O?, s:O?, s:s}", "id", json_object_get(c, "id"), "name",
		                                         json_object_get(c, "name"), "content",
		                                         i == 0 ? text : REMINDER_ONE_CALL));
	return json_pack("{s:s, s:o}", "role", "tool", "results", results);
}

char *native_reply_blob(const char *provider, const char *text, const json_t *native, size_t *n)
{
	json_t *v = json_pack("{s:s, s:s, s:O}", "provider", provider, "text", text, "native", native);
	struct buf b = {0};
	canon_dump(v, &b, NULL);
	json_decref(v);
	*n = b.len;
	return b.p;
}

