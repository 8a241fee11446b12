/* prompt.c - the genesis system prompt and lenient reply parsing
 * (sfma-plan(1)). */
#include "plan.h"
#include "buf.h"
#include "canon.h"
#include "err.h"

#include <stdlib.h>
#include <string.h>

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
	json_t *v = json_parse_strict(body, strlen(body), NULL);
	/* Text that is JSON but not an object (a model wrapping its call in
	 * [ ] or quoting it) is treated like prose around the object. */
	if (v && !json_is_object(v)) {
		json_decref(v);
		v = NULL;
	}
	if (!v) {
		char *first = strchr(body, '{'), *last = strrchr(body, '}');
		if (first && last && last > first)
			v = json_parse_strict(first, (size_t)(last - first + 1), NULL);
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

/* ---- the soft tier ------------------------------------------------------- */

const char soft_judge_prompt[] =
	SOFT_FIRST_LINE "\n"
	"You judge one task of an agent run, which another model did. You get the run's mission, its success "
	"criteria, the task, the summary its worker gave and the declared outputs as they are now (clipped). "
	"Decide whether the task was really done. Reply with exactly one JSON object and nothing else: "
	"{\"pass\":true|false,\"reason\":\"one sentence\"}.\n";

const char soft_criteria_prompt[] =
	SOFT_FIRST_LINE "\n"
	"You judge the success criteria of a finished agent run. You get the mission, the criteria, every task "
	"with its soft-tier verdict and the ids of its trace entries, and the declared outputs (clipped). Reply "
	"with exactly one JSON object and nothing else: {\"criteria\":[{\"criterion\":S,\"pass\":true|false,"
	"\"evidence\":[entry ids]}...]}, one element per criterion, in their order.\n";

int soft_judgment_parse(const char *text, int *pass, char **reason)
{
	json_t *v = text ? parse_reply(text) : NULL;
	json_t *p = json_object_get(v, "pass"), *why = json_object_get(v, "reason");
	int ok = json_is_boolean(p) && json_is_string(why);
	*pass = ok && json_is_true(p);
	*reason = xstrdup(ok ? json_string_value(why) : REASON_JUDGE_INVALID);
	json_decref(v);
	return ok;
}

/* The majority of n judgments of which passes passed: a tie fails. */
static int soft_majority(int passes, int n)
{
	return 2 * passes > n;
}

void soft_tally_add(struct soft_tally *t, int pass, char *why)
{
	t->n++;
	t->passes += pass != 0;
	char **keep = pass ? &t->reason_pass : &t->reason_fail;
	if (!*keep)
		*keep = why;
	else
		free(why);
}

int soft_tally_verdict(const struct soft_tally *t, const char **reason)
{
	int pass = soft_majority(t->passes, t->n);
	*reason = pass ? t->reason_pass : t->reason_fail ? t->reason_fail : REASON_JUDGE_INVALID;
	return pass;
}

void soft_tally_free(struct soft_tally *t)
{
	free(t->reason_pass);
	free(t->reason_fail);
	*t = (struct soft_tally){0};
}

/* ---- the blackboard -------------------------------------------------------- */

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

/* ---- native tool calls ---------------------------------------------------- */

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

/* ---- usage ------------------------------------------------------------------ */

/* A token count as a provider reports it: a non-negative integer. */
static long long token_count(const json_t *v)
{
	double d = json_number_value(v);
	return json_is_number(v) && d >= 0 && d <= 9007199254740991.0 && d == (double)(long long)d ? (long long)d : 0;
}

void usage_add(struct usage *u, const json_t *usage)
{
	if (!json_is_object(usage))
		return;
	u->input += token_count(json_object_get(usage, "inputTokens"));
	u->output += token_count(json_object_get(usage, "outputTokens"));
	u->cached += token_count(json_object_get(usage, "cachedInputTokens"));
}

json_t *usage_json(const struct usage *u)
{
	return json_pack("{s:I, s:I, s:I}", "inputTokens", (json_int_t)u->input, "outputTokens", (json_int_t)u->output,
	                 "cachedInputTokens", (json_int_t)u->cached);
}

/* ---- the context budget -------------------------------------------------------- */

/* What canon_dump would write, counted without writing it (0 for what it
 * refuses, as the empty buffer it would leave). */
static size_t canon_len(const json_t *v)
{
	size_t n = 0;
	return canon_size(v, &n, NULL) < 0 ? 0 : n;
}

/* What an elided message becomes: its evidence reference and the recall
 * call that brings it back. */
static char *stub_text(const json_t *ref)
{
	json_t *v = json_pack("{s:O, s:{s:s, s:s, s:O}}", "elided", ref, "recall", "tool", "recall", "mode",
	                      "referential", "id", json_object_get(ref, "sha256"));
	struct buf b = {0};
	canon_dump(v, &b, NULL);
	json_decref(v);
	return b.p;
}

static json_t *stub_message(const json_t *msg, const json_t *ref)
{
	char *stub = stub_text(ref);
	json_t *out;
	if (json_is_array(json_object_get(msg, "results"))) {
		/* a tool message keeps one result per call; the first held the output */
		out = json_deep_copy(msg);
		json_object_set_new(json_array_get(json_object_get(out, "results"), 0), "content", json_string(stub));
	} else {
		out = json_pack("{s:O, s:s}", "role", json_object_get(msg, "role"), "content", stub);
	}
	free(stub);
	return out;
}

size_t context_bytes(const char *system, const json_t *messages, const json_t *tools)
{
	json_t *v = json_pack("{s:s, s:O}", "system", system, "messages", messages);
	if (tools)
		json_object_set(v, "tools", (json_t *)tools);
	size_t n = canon_len(v);
	json_decref(v);
	return n;
}

/* A message may be elided unless it is the first (the start, the
 * operator's messages, a pinned run's candidate), the adopted candidate's
 * reply, or part of the latest exchange (the last two). */
static int protected_msg(size_t i, size_t n, long keep)
{
	return i == 0 || (long)i == keep || i + 2 >= n;
}

static void replace(json_t *messages, json_t *refs, size_t i, json_t *msg, size_t *len, size_t *total,
                    json_t *elided)
{
	size_t now = canon_len(msg);
	*total = *total - len[i] + now;
	len[i] = now;
	json_array_set_new(messages, i, msg);
	if (json_is_object(json_array_get(refs, i)))
		json_array_append(elided, json_object_get(json_array_get(refs, i), "sha256"));
	json_array_set_new(refs, i, json_null());
}

int context_fit(const char *system, json_t *messages, json_t *refs, const json_t *tools, size_t budget, long keep,
                struct context_fit *out)
{
	size_t n = json_array_size(messages);
	out->elided = json_array();
	out->before = out->after = context_bytes(system, messages, tools);
	if (out->before <= budget)
		return 0;
	size_t *len = xcalloc(n ? n : 1, sizeof *len), total = out->before;
	for (size_t i = 0; i < n; i++)
		len[i] = canon_len(json_array_get(messages, i));
	/* First the runner's messages (tool results, answers), oldest first. */
	for (size_t i = 0; i < n && total > budget; i++) {
		json_t *m = json_array_get(messages, i), *ref = json_array_get(refs, i);
		const char *role = json_string_value(json_object_get(m, "role"));
		if (protected_msg(i, n, keep) || !json_is_object(ref) || !role || strcmp(role, "assistant") == 0)
			continue;
		json_t *s = stub_message(m, ref);
		if (canon_len(s) < len[i])
			replace(messages, refs, i, s, len, &total, out->elided);
		else
			json_decref(s);
	}
	/* Then whole exchanges: the model's reply, and with native calls the
	 * tool message answering them, which without its calls becomes a
	 * plain message. */
	for (size_t i = 0; i < n && total > budget; i++) {
		json_t *m = json_array_get(messages, i), *ref = json_array_get(refs, i);
		const char *role = json_string_value(json_object_get(m, "role"));
		if (protected_msg(i, n, keep) || !json_is_object(ref) || !role || strcmp(role, "assistant") != 0)
			continue;
		char *stub = stub_text(ref);
		json_t *s = json_pack("{s:s, s:s}", "role", "assistant", "content", stub);
		free(stub);
		json_t *next = i + 1 < n ? json_array_get(messages, i + 1) : NULL, *answer = NULL;
		int paired = json_object_get(m, "toolCalls") && next && !protected_msg(i + 1, n, keep) &&
		             json_is_array(json_object_get(next, "results"));
		if (json_object_get(m, "toolCalls") && !paired) {
			json_decref(s);
			continue;
		}
		size_t old = len[i], now = canon_len(s);
		if (paired) {
			json_t *nref = json_array_get(refs, i + 1);
			if (json_is_object(nref)) {
				char *t = stub_text(nref);
				answer = json_pack("{s:s, s:s}", "role", "user", "content", t);
				free(t);
			} else {
				answer = json_pack("{s:s, s:O?}", "role", "user", "content",
				                   json_object_get(json_array_get(json_object_get(next, "results"), 0), "content"));
			}
			old += len[i + 1];
			now += canon_len(answer);
		}
		if (now >= old) {
			json_decref(s);
			json_decref(answer);
			continue;
		}
		replace(messages, refs, i, s, len, &total, out->elided);
		if (answer)
			replace(messages, refs, i + 1, answer, len, &total, out->elided);
	}
	free(len);
	out->after = total;
	return total <= budget ? 1 : -1;
}
