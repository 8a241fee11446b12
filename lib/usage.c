/* usage.c - token usage summed over call entries (sfma-formats(5), usage). */
#include "usage.h"

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

