/* usage.c - token usage and cost summed over call entries (sfma-formats(5),
 * usage). */
#include "usage.h"

/* A token count as a provider reports it: a non-negative integer. */
static long long token_count(const json_t *v)
{
	double d = json_number_value(v);
	return json_is_number(v) && d >= 0 && d <= 9007199254740991.0 && d == (double)(long long)d ? (long long)d : 0;
}

void usage_add(struct usage *u, const json_t *call)
{
	json_t *usage = json_object_get(call, "usage"), *cost = json_object_get(call, "costUsd");
	if (!json_is_object(usage))
		return;
	u->input += token_count(json_object_get(usage, "inputTokens"));
	u->output += token_count(json_object_get(usage, "outputTokens"));
	u->cached += token_count(json_object_get(usage, "cachedInputTokens"));
	u->reasoning += token_count(json_object_get(usage, "reasoningTokens"));
	u->cache_write += token_count(json_object_get(usage, "cacheWriteTokens"));
	/* A call that used tokens at an endpoint without pricing makes the
	 * run's cost unknown, not smaller. */
	double d = json_number_value(cost);
	if (json_is_number(cost) && d >= 0 && d < 1e12)
		u->cost_usd += d;
	else
		u->cost_unknown = 1;
}

json_t *usage_json(const struct usage *u)
{
	json_t *v = json_pack("{s:I, s:I, s:I, s:I, s:I}", "inputTokens", (json_int_t)u->input, "outputTokens",
	                      (json_int_t)u->output, "cachedInputTokens", (json_int_t)u->cached, "reasoningTokens",
	                      (json_int_t)u->reasoning, "cacheWriteTokens", (json_int_t)u->cache_write);
	json_object_set_new(v, "costUsd", u->cost_unknown ? json_null() : json_real(u->cost_usd));
	return v;
}
