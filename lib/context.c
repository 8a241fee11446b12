/* context.c - the context budget (sfma-plan(1), maxContextBytes): how
 * large a request is, and the deterministic compaction that makes the
 * conversation fit. */
#include "context.h"

#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "canon.h"
#include "errors.h"

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

int context_is_stub(const json_t *msg)
{
	static const char head[] = "{\"elided\":{";
	const json_t *results = json_object_get(msg, "results");
	const char *text = json_string_value(json_object_get(json_is_array(results) ? json_array_get(results, 0) : msg,
	                                                     "content"));
	return text && strncmp(text, head, sizeof head - 1) == 0;
}

size_t context_bytes(const char *system, const json_t *messages, const json_t *tools)
{
	/* The canonical form of {"messages":M,"system":S[,"tools":T]}, its
	 * members in that (canonical) order, counted member by member rather
	 * than of an object built with a copy of the system prompt at every
	 * request. A member canon_dump refuses leaves nothing, as the whole. */
	static const char messages_key[] = "{\"messages\":", system_key[] = ",\"system\":", tools_key[] = ",\"tools\":";
	size_t m = 0, t = 0;
	if (canon_size(messages, &m, NULL) < 0 || (tools && canon_size(tools, &t, NULL) < 0))
		return 0;
	return sizeof messages_key - 1 + m + sizeof system_key - 1 + canon_string_size(system, strlen(system)) +
	       (tools ? sizeof tools_key - 1 + t : 0) + 1;
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
	/* Down to half the budget, not just under it: a conversation that
	 * only just fits would compact again at the next request, and every
	 * compaction changes the request's prefix (a provider's prompt cache
	 * misses once per compaction, §17). */
	size_t target = budget / 2;
	for (size_t i = 0; i < n; i++)
		len[i] = canon_len(json_array_get(messages, i));
	/* First the runner's messages (tool results, answers), oldest first. */
	for (size_t i = 0; i < n && total > target; i++) {
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
	for (size_t i = 0; i < n && total > target; i++) {
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
