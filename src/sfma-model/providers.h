/* providers.h - the reading of an answer in providers.c, below
 * provider_call: what a 2xx body or a finished codex stream says. Only
 * providers.c and the fuzz harness (tests/fuzz/fuzz_providers.c) use them;
 * the rest of sfma-model goes through model.h. */
#ifndef SFMA_MODEL_PROVIDERS_H
#define SFMA_MODEL_PROVIDERS_H

#include "model.h"

/* The text at the provider's path (anthropic, openai, gemini: sfma-model(1))
 * of a reply that did not offer the tools, appended to text. 0, or -1 with
 * e filled when there is none or it is empty. */
int provider_reply_text(enum provider p, json_t *doc, struct buf *text, struct sfma_err *e);
/* A 2xx body (anthropic, openai, gemini) of a request that offered the
 * tools: its text appended to text (possibly none when it made calls) and
 * its call objects as received into *native (new reference, NULL when it
 * made none). 0, or -1 with e filled when it has neither or is malformed. */
int provider_reply_native(enum provider p, json_t *doc, struct buf *text, json_t **native,
                          struct sfma_err *e);
/* Every known secret out of a->text and a->native, then a->native mapped
 * into a->tool_calls (tools_from_native). 0, or -1 with a->e filled when a
 * call does not map. */
int provider_take_calls(struct endpoint *ep, struct attempt *a);
/* The 2xx body r of a JSON provider read into a (zeroed by the caller):
 * usage, stop, text and, with native, the calls (a gemini answer's call
 * signatures are kept for the next request). 0 for a usable answer (end,
 * tool or length), else -1 with a->cls and a->e set. */
int provider_parse_body(struct endpoint *ep, int native, const struct http_reply *r, struct attempt *a);
/* The same for a codex stream that came to its end (fed whole to sse). */
int provider_parse_stream(struct endpoint *ep, int native, struct sse *sse, struct attempt *a);

#endif
