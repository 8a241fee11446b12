/* tools.c - the tool table and the native tool-call mapping (tools.h).
 *
 * The schemas use only what every provider's schema dialect accepts
 * (type, description, properties, required, enum): gemini's function
 * declarations take an OpenAPI subset that refuses, for one,
 * additionalProperties. A member the schema does not name still reaches
 * the hard tier, which judges the call object as it does a text reply. */
#include "tools.h"
#include "ndjson.h"

#include <stdio.h>
#include <string.h>

const struct tool_def tool_defs[] = {
	{"read", "Read a workspace file.",
	 "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\","
	 "\"description\":\"path relative to the workspace\"}},\"required\":[\"path\"]}"},
	{"write", "Write a declared output (only the paths listed in the manifest's outputs).",
	 "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\","
	 "\"description\":\"a declared output, relative to the workspace\"},"
	 "\"content\":{\"type\":\"string\",\"description\":\"the whole new content of the file\"}},"
	 "\"required\":[\"path\",\"content\"]}"},
	{"run", "Run an allowed command in the sandbox. No shell: the command is split on whitespace; "
	        "the sandbox sees only the declared inputs and has no network.",
	 "{\"type\":\"object\",\"properties\":{\"cmd\":{\"type\":\"string\","
	 "\"description\":\"the command line, its first word in allowedCommands\"}},\"required\":[\"cmd\"]}"},
	{"notify", "Tell the operator something (never blocks).",
	 "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},\"required\":[\"text\"]}"},
	{"ask", "Ask the operator a question (the answer arrives in a later run; never blocks).",
	 "{\"type\":\"object\",\"properties\":{\"question\":{\"type\":\"string\"}},\"required\":[\"question\"]}"},
	{"recall", "Query long-term memory. referential: id (an entry id or evidence reference); "
	           "episodic: since, until (trace seq), limit; lexical and change: query, limit; "
	           "semantic: query, limit (only a labelled term-overlap ranking: no store here does similarity).",
	 "{\"type\":\"object\",\"properties\":{"
	 "\"mode\":{\"type\":\"string\",\"enum\":[\"referential\",\"episodic\",\"lexical\",\"change\",\"semantic\"]},"
	 "\"id\":{\"type\":\"string\"},\"since\":{\"type\":\"integer\"},\"until\":{\"type\":\"integer\"},"
	 "\"query\":{\"type\":\"string\"},\"limit\":{\"type\":\"integer\"}},\"required\":[\"mode\"]}"},
	{"task", "Post work for another loop on the blackboard: a new task with an id not used before.",
	 "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},"
	 "\"description\":{\"type\":\"string\"},\"role\":{\"type\":\"string\"},"
	 "\"class\":{\"type\":\"string\",\"enum\":[\"reasoning\",\"mechanical\"]}},"
	 "\"required\":[\"id\",\"description\"]}"},
	{"done", "Finish the task: every declared output must exist.",
	 "{\"type\":\"object\",\"properties\":{\"summary\":{\"type\":\"string\","
	 "\"description\":\"what was done\"}},\"required\":[\"summary\"]}"},
	{NULL, NULL, NULL},
};

const size_t n_tool_defs = sizeof tool_defs / sizeof tool_defs[0] - 1;

json_t *tools_definitions(void)
{
	json_t *out = json_array();
	for (size_t i = 0; i < n_tool_defs; i++) {
		/* The schemas are constants of this file: they always parse. */
		json_t *schema = ndjson_parse(tool_defs[i].schema_json, strlen(tool_defs[i].schema_json), NULL);
		json_array_append_new(out, json_pack("{s:s, s:s, s:o}", "name", tool_defs[i].name, "description",
		                                     tool_defs[i].description, "parameters",
		                                     schema ? schema : json_object()));
	}
	return out;
}

/* A name as a call carries it: a non-empty string without NUL. */
static const char *name_of(json_t *v)
{
	const char *s = json_string_value(v);
	return s && *s && strlen(s) == json_string_length(v) ? s : NULL;
}

/* Arguments sent as a JSON text (openai, codex): an object, or nothing at
 * all (a call without parameters). */
static json_t *arguments_object(json_t *args, size_t i, struct sfma_err *e)
{
	if (!json_is_string(args)) {
		err_set(e, "call %zu: arguments must be a string of JSON", i);
		return NULL;
	}
	if (json_string_length(args) == 0)
		return json_object();
	struct sfma_err pe;
	json_t *v = ndjson_parse(json_string_value(args), json_string_length(args), &pe);
	if (!json_is_object(v)) {
		json_decref(v);
		err_set(e, "call %zu: arguments are not a JSON object", i);
		return NULL;
	}
	return v;
}

static json_t *call(const char *id, const char *name, json_t *input)
{
	return json_pack("{s:s, s:s, s:o}", "id", id, "name", name, "input", input);
}

/* One call of each provider's shape, or NULL with e filled. */
static json_t *from_anthropic(json_t *c, size_t i, struct sfma_err *e)
{
	const char *type = json_string_value(json_object_get(c, "type"));
	const char *id = name_of(json_object_get(c, "id")), *name = name_of(json_object_get(c, "name"));
	json_t *input = json_object_get(c, "input");
	if (!type || strcmp(type, "tool_use") != 0)
		return err_set(e, "call %zu: not a tool_use block", i), NULL;
	if (!id || !name)
		return err_set(e, "call %zu: a tool_use block needs an id and a name", i), NULL;
	if (!json_is_object(input))
		return err_set(e, "call %zu: input is not a JSON object", i), NULL;
	return call(id, name, json_deep_copy(input));
}

static json_t *from_openai(json_t *c, size_t i, struct sfma_err *e)
{
	json_t *fn = json_object_get(c, "function");
	const char *id = name_of(json_object_get(c, "id")), *name = name_of(json_object_get(fn, "name"));
	const char *type = json_string_value(json_object_get(c, "type"));
	if (type && strcmp(type, "function") != 0)
		return err_set(e, "call %zu: not a function call", i), NULL;
	if (!id || !name)
		return err_set(e, "call %zu: a tool call needs an id and a function name", i), NULL;
	json_t *input = arguments_object(json_object_get(fn, "arguments"), i, e);
	return input ? call(id, name, input) : NULL;
}

static json_t *from_gemini(json_t *part, size_t i, struct sfma_err *e)
{
	json_t *fc = json_object_get(part, "functionCall");
	const char *name = name_of(json_object_get(fc, "name"));
	json_t *args = json_object_get(fc, "args");
	if (!json_is_object(fc))
		return err_set(e, "call %zu: not a functionCall part", i), NULL;
	if (!name)
		return err_set(e, "call %zu: a functionCall needs a name", i), NULL;
	if (args && !json_is_object(args))
		return err_set(e, "call %zu: args is not a JSON object", i), NULL;
	const char *given = name_of(json_object_get(fc, "id"));
	char id[64];
	/* generateContent may leave a call without an id: number it within
	 * the reply, which is all a result needs to find its call. */
	if (!given)
		snprintf(id, sizeof id, TOOLS_GEMINI_ID_PREFIX "%zu", i);
	return call(given ? given : id, name, args ? json_deep_copy(args) : json_object());
}

static json_t *from_codex(json_t *item, size_t i, struct sfma_err *e)
{
	const char *type = json_string_value(json_object_get(item, "type"));
	const char *id = name_of(json_object_get(item, "call_id")), *name = name_of(json_object_get(item, "name"));
	if (!type || strcmp(type, "function_call") != 0)
		return err_set(e, "call %zu: not a function_call item", i), NULL;
	if (!id || !name)
		return err_set(e, "call %zu: a function_call needs a call_id and a name", i), NULL;
	json_t *input = arguments_object(json_object_get(item, "arguments"), i, e);
	return input ? call(id, name, input) : NULL;
}

json_t *tools_from_native(const char *provider, json_t *native, struct sfma_err *e)
{
	static const struct {
		const char *name;
		json_t *(*one)(json_t *, size_t, struct sfma_err *);
	} shapes[] = {
		{"anthropic", from_anthropic}, {"openai", from_openai},
		{"gemini", from_gemini}, {"codex", from_codex},
	};
	json_t *(*one)(json_t *, size_t, struct sfma_err *) = NULL;
	for (size_t k = 0; provider && k < sizeof shapes / sizeof shapes[0]; k++)
		if (strcmp(shapes[k].name, provider) == 0)
			one = shapes[k].one;
	if (!one) {
		err_set(e, "no native tool calls for provider %.64s", provider ? provider : "(none)");
		return NULL;
	}
	if (!json_is_array(native) || json_array_size(native) == 0) {
		err_set(e, "native tool calls must be a non-empty array");
		return NULL;
	}
	json_t *out = json_array(), *c;
	size_t i;
	json_array_foreach(native, i, c) {
		json_t *got = json_is_object(c) ? one(c, i, e) : (err_set(e, "call %zu: not an object", i), NULL);
		if (!got) {
			json_decref(out);
			return NULL;
		}
		json_array_append_new(out, got);
	}
	return out;
}

json_t *tools_call_object(json_t *tool_call, struct sfma_err *e)
{
	const char *name = json_string_value(json_object_get(tool_call, "name"));
	json_t *input = json_object_get(tool_call, "input");
	if (!json_is_object(input))
		return err_set(e, "tool call input is not an object"), NULL;
	if (json_object_get(input, "tool"))
		return err_set(e, "tool call input holds a \"tool\" member"), NULL;
	int known = 0;
	for (size_t i = 0; name && i < n_tool_defs; i++)
		known |= strcmp(tool_defs[i].name, name) == 0;
	if (!known)
		return err_set(e, "unknown tool %.64s", name ? name : "(no name)"), NULL;
	json_t *obj = json_pack("{s:s}", "tool", name);
	json_object_update(obj, input);
	return obj;
}
