/* context.h - the context budget (sfma-plan(1), maxContextBytes). */
#ifndef SFMA_CONTEXT_H
#define SFMA_CONTEXT_H

#include <jansson.h>
#include <stddef.h>

/* The size of a request is the length of the canonical JSON of
 * {"messages","system","tools"?}, tools being tools_definitions() when
 * they are offered (NULL: not). */
size_t context_bytes(const char *system, const json_t *messages, const json_t *tools);

struct context_fit {
	size_t before, after;
	json_t *elided;            /* the sha256 of each elided message, in order (new) */
};
/* Make messages fit in budget bytes: when they do not, the oldest runner
 * messages (tool results, answers) and then the oldest exchanges become
 * stubs naming their evidence and the recall that brings it back, until
 * the request is at most half the budget (or nothing more can go); never the first
 * message, messages[keep] (the adopted candidate's reply; -1: none) or
 * the last two. refs[i] is the evidence reference of messages[i] (null:
 * none, or already elided). Returns 0 when it fits as it is, 1 when
 * messages were elided and it fits now, -1 when it cannot fit. */
/* 1 if msg is (or, a tool message, begins with) a stub context_fit made:
 * its content, or its first result's, the stub's text. A prompt cache
 * marks the last one, where the next compaction's request still agrees
 * with this one (sfma-model(1), Prompt caching). */
int context_is_stub(const json_t *msg);

#define CONTEXT_CANNOT_FIT "context budget: the next request needs %zu bytes with every elidable message " \
	"elided, maxContextBytes is %ld"
int context_fit(const char *system, json_t *messages, json_t *refs, const json_t *tools, size_t budget, long keep,
                struct context_fit *out);

#endif
