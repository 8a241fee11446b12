/* tools-standin.c - a stand-in for lib/tools.c with exactly its declared
 * interface (lib/tools.h), so that the planner and the replay build
 * before the library's own table lands; it goes when lib/tools.c does. */
#include "tools.h"
#include "canon.h"

#include <stdio.h>
#include <string.h>

const struct tool_def tool_defs[] = {
	{"read", "Read a workspace file.",
	 "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"]}"},
	{"write", "Write a declared output (only those in outputs).",
	 "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"content\":{\"type\":\"string\"}},"
	 "\"required\":[\"path\",\"content\"]}"},
	{"run", "Run an allowed command (no shell; arguments split on whitespace).",
	 "{\"type\":\"object\",\"properties\":{\"cmd\":{\"type\":\"string\"}},\"required\":[\"cmd\"]}"},
	{"notify", "Tell the operator something (never blocks).",
	 "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},\"required\":[\"text\"]}"},
	{"ask", "Ask the operator (the answer arrives in a later run).",
	 "{\"type\":\"object\",\"properties\":{\"question\":{\"type\":\"string\"}},\"required\":[\"question\"]}"},
	{"recall", "Query long-term memory.",
	 "{\"type\":\"object\",\"properties\":{\"mode\":{\"type\":\"string\",\"enum\":[\"referential\",\"episodic\","
	 "\"lexical\",\"change\",\"semantic\"]},\"id\":{\"type\":\"string\"},\"query\":{\"type\":\"string\"},"
	 "\"since\":{\"type\":\"integer\"},\"until\":{\"type\":\"integer\"},\"limit\":{\"type\":\"integer\"}},"
	 "\"required\":[\"mode\"]}"},
	{"done", "Finish: every declared output must exist.",
	 "{\"type\":\"object\",\"properties\":{\"summary\":{\"type\":\"string\"}},\"required\":[\"summary\"]}"},
	{NULL, NULL, NULL},
};
const size_t n_tool_defs = sizeof tool_defs / sizeof tool_defs[0] - 1;

json_t *tools_definitions(void)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n_tool_defs; i++)
		json_array_append_new(a, json_pack("{s:s, s:s, s:o}", "name", tool_defs[i].name, "description",
		                                   tool_defs[i].description, "parameters",
		                                   json_loads(tool_defs[i].schema_json, 0, NULL)));
	return a;
}

static json_t *arguments_object(json_t *args, struct sfma_err *e)
{
	if (json_is_object(args))
		return json_incref(args);
	if (!json_is_string(args)) {
		err_set(e, "tool call arguments are not a JSON object");
		return NULL;
	}
	json_t *v = json_loadb(json_string_value(args), json_string_length(args), JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(v)) {
		json_decref(v);
		err_set(e, "tool call arguments are not a JSON object");
		return NULL;
	}
	return v;
}

json_t *tools_from_native(const char *provider, json_t *native, struct sfma_err *e)
{
	if (!provider || !json_is_array(native)) {
		err_set(e, "native tool calls: not an array");
		return NULL;
	}
	int anthropic = strcmp(provider, "anthropic") == 0, openai = strcmp(provider, "openai") == 0,
	    gemini = strcmp(provider, "gemini") == 0, codex = strcmp(provider, "codex") == 0;
	if (!anthropic && !openai && !gemini && !codex) {
		err_set(e, "native tool calls: unknown provider %s", provider);
		return NULL;
	}
	json_t *out = json_array();
	size_t i;
	json_t *c;
	json_array_foreach(native, i, c) {
		json_t *id = NULL, *name = NULL, *input = NULL;
		if (anthropic) {
			id = json_object_get(c, "id");
			name = json_object_get(c, "name");
			input = json_object_get(c, "input");
			input = json_is_object(input) ? json_incref(input) : NULL;
			if (!input)
				err_set(e, "tool call input is not a JSON object");
		} else if (openai) {
			json_t *f = json_object_get(c, "function");
			id = json_object_get(c, "id");
			name = json_object_get(f, "name");
			input = arguments_object(json_object_get(f, "arguments"), e);
		} else if (gemini) {
			json_t *f = json_object_get(c, "functionCall");
			name = json_object_get(f, "name");
			input = arguments_object(json_object_get(f, "args"), e);
		} else {
			id = json_object_get(c, "call_id");
			name = json_object_get(c, "name");
			input = arguments_object(json_object_get(c, "arguments"), e);
		}
		if (!json_is_string(name) || !json_string_length(name)) {
			json_decref(input);
			json_decref(out);
			err_set(e, "tool call %zu has no name", i + 1);
			return NULL;
		}
		if (!input) {
			json_decref(out);
			return NULL;
		}
		char made[32];
		snprintf(made, sizeof made, "call-%zu", i + 1);
		json_array_append_new(out, json_pack("{s:o, s:O, s:o}", "id",
		                                     json_is_string(id) ? json_incref(id) : json_string(made),
		                                     "name", name, "input", input));
	}
	return out;
}

json_t *tools_call_object(json_t *tool_call, struct sfma_err *e)
{
	const char *name = json_string_value(json_object_get(tool_call, "name"));
	json_t *input = json_object_get(tool_call, "input");
	if (!json_is_object(input)) {
		err_set(e, "tool call input is not a JSON object");
		return NULL;
	}
	if (json_object_get(input, "tool")) {
		err_set(e, "tool call input holds a \"tool\" member");
		return NULL;
	}
	int known = 0;
	for (size_t i = 0; name && i < n_tool_defs; i++)
		known |= strcmp(name, tool_defs[i].name) == 0;
	if (!known) {
		err_set(e, "unknown tool name %s", name ? name : "(none)");
		return NULL;
	}
	json_t *call = json_deep_copy(input);
	json_object_set_new(call, "tool", json_string(name));
	return call;
}
