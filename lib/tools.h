/* tools.h - the tools a model may call, as one table, and the mapping
 * between each provider's native tool calls and the hard tier's call
 * objects (sfma-formats(5), sfma-model(1)).
 *
 * sfma-model offers the table to providers with native tool use and turns
 * their replies into calls; sfma replay derives the same calls from the
 * same recorded objects with the same function, so the two can never
 * disagree. */
#ifndef SFMA_TOOLS_H
#define SFMA_TOOLS_H

#include <stddef.h>
#include <jansson.h>

#include "errors.h"

/* The tools the model may call, one table (name, description, JSON
 * Schema of the input), task included (the blackboard, sfma-plan(1)). */
struct tool_def { const char *name, *description, *schema_json; };
extern const struct tool_def tool_defs[];   /* terminated by {NULL} */
extern const size_t n_tool_defs;

/* The provider-neutral definitions as one JSON array
 * [{"name","description","parameters":{schema}}...] (new reference). Its
 * canonical serialization is what the context budget counts as "tools". */
json_t *tools_definitions(void);

/* A provider's native tool-call objects (the array sfma-model returns in
 * "native") -> [{"id","name","input"}...] (new reference), or NULL with e
 * filled (unknown provider, a call without a name, arguments that are not
 * a JSON object, ...). Used by sfma-model AND by sfma replay, so both
 * derive the same calls from the same evidence. */
json_t *tools_from_native(const char *provider, json_t *native, struct sfma_err *e);

/* {"id","name","input"} -> the hard tier's call object {"tool":name,...input}
 * (new reference), or NULL with e filled ("input" not an object, holds a
 * "tool" member, unknown tool name). */
json_t *tools_call_object(json_t *tool_call, struct sfma_err *e);

/* The id tools_from_native gives a gemini call that came without one
 * begins with this: such an id is never sent back to the provider. */
#define TOOLS_GEMINI_ID_PREFIX "gemini-call-"

#endif
