/* usage.h - token usage summed over call entries (sfma-formats(5), usage). */
#ifndef SFMA_USAGE_H
#define SFMA_USAGE_H

#include <jansson.h>

struct usage {
	long long input, output, cached;
};
/* Add a call entry's usage object (anything else adds nothing). */
void usage_add(struct usage *u, const json_t *usage);
/* {"inputTokens","outputTokens","cachedInputTokens"} (new). */
json_t *usage_json(const struct usage *u);

#endif
