/* usage.h - token usage and cost summed over call entries (sfma-formats(5),
 * usage). */
#ifndef SFMA_USAGE_H
#define SFMA_USAGE_H

#include <jansson.h>

struct usage {
	long long input, output, cached, reasoning, cache_write;
	double cost_usd;
	int cost_unknown;          /* a call used tokens where no price is known */
};
/* Add a call entry's data: its usage object and costUsd. */
void usage_add(struct usage *u, const json_t *call);
/* {"inputTokens","outputTokens","cachedInputTokens","reasoningTokens",
 * "cacheWriteTokens","costUsd"} (new); costUsd null when unknown. */
json_t *usage_json(const struct usage *u);

#endif
