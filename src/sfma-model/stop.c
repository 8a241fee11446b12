/* stop.c - how a provider ended a reply, what it counted, what it cost.
 *
 * Pure functions over the provider's own JSON (sfma-model(1), STOP
 * REASONS, USAGE, COST). The words and members are the providers'
 * published ones: Anthropic's Messages API (stop_reason, usage), the
 * OpenAI OpenAPI document (choices[].finish_reason, message.refusal,
 * CompletionUsage), Google's generateContent reference (finishReason,
 * promptFeedback.blockReason, usageMetadata) and the Responses API as the
 * Codex CLI reads it (response.incomplete's incomplete_details.reason,
 * usage.output_tokens_details). */
#include "model.h"
#include "ndjson.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *stop_class_name(enum stop_class s)
{
	switch (s) {
	case STOP_END: return "end";
	case STOP_TOOL: return "tool";
	case STOP_LENGTH: return "length";
	case STOP_REFUSAL: return "refusal";
	case STOP_FILTER: return "filter";
	case STOP_NONE:
	case STOP_INVALID: break;
	}
	return NULL;
}

static int word_in(const char *w, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(w, *list) == 0)
			return 1;
	return 0;
}

/* The word as sent, clipped to STOP_WORD_MAX - 1 bytes (a hostile server
 * may send anything there); "" when v is no string. */
static const char *take_word(json_t *v, char word[STOP_WORD_MAX])
{
	snprintf(word, STOP_WORD_MAX, "%s", json_is_string(v) ? json_string_value(v) : "");
	return word;
}

/* Append the "text" members of the blocks or parts (thoughts left out). */
static void texts_of(json_t *parts, const char *type_must, struct buf *out)
{
	json_t *p;
	size_t i;
	json_array_foreach(parts, i, p) {
		const char *type = json_string_value(json_object_get(p, "type"));
		json_t *t = json_object_get(p, "text");
		if ((type_must && (!type || strcmp(type, type_must) != 0)) || !json_is_string(t) ||
		    json_is_true(json_object_get(p, "thought")))
			continue;
		buf_add(out, json_string_value(t), json_string_length(t));
	}
}

static void add_string(json_t *v, struct buf *out)
{
	if (json_is_string(v))
		buf_add(out, json_string_value(v), json_string_length(v));
}

/* Anthropic stop_reason: end_turn, stop_sequence, pause_turn, tool_use
 * (whole replies), max_tokens, model_context_window_exceeded (cut off),
 * refusal (the text blocks say why). */
static enum stop_class anthropic_stop(json_t *doc, char *word, struct buf *why)
{
	static const char *const length[] = {"max_tokens", "model_context_window_exceeded", NULL};
	const char *w = take_word(json_object_get(doc, "stop_reason"), word);
	if (word_in(w, length))
		return STOP_LENGTH;
	if (strcmp(w, "refusal") == 0) {
		texts_of(json_object_get(doc, "content"), "text", why);
		return STOP_REFUSAL;
	}
	return STOP_NONE;
}

/* OpenAI choices[0]: a message.refusal string is a refusal whatever the
 * finish_reason; finish_reason length is cut off, content_filter filtered. */
static enum stop_class openai_stop(json_t *doc, char *word, struct buf *why)
{
	json_t *choice = json_array_get(json_object_get(doc, "choices"), 0);
	json_t *msg = json_object_get(choice, "message");
	const char *w = take_word(json_object_get(choice, "finish_reason"), word);
	json_t *refusal = json_object_get(msg, "refusal");
	if (json_is_string(refusal) && json_string_length(refusal) > 0) {
		add_string(refusal, why);
		return STOP_REFUSAL;
	}
	if (strcmp(w, "length") == 0)
		return STOP_LENGTH;
	if (strcmp(w, "content_filter") == 0) {
		add_string(json_object_get(msg, "content"), why);
		return STOP_FILTER;
	}
	return STOP_NONE;
}

/* Gemini: no candidate and a promptFeedback.blockReason is a blocked
 * prompt (a refusal); candidates[0].finishReason MAX_TOKENS is cut off,
 * the safety and content reasons are filtered, and a call the model could
 * not form is an invalid reply. */
static enum stop_class gemini_stop(json_t *doc, char *word, struct buf *why)
{
	static const char *const filtered[] = {
		"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
		"IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", NULL,
	};
	static const char *const invalid[] = {"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS", NULL};
	json_t *cand = json_array_get(json_object_get(doc, "candidates"), 0);
	json_t *feedback = json_object_get(doc, "promptFeedback");
	json_t *block = json_object_get(feedback, "blockReason");
	if (!cand && json_is_string(block)) {
		snprintf(word, STOP_WORD_MAX, "blockReason:%s", json_string_value(block));
		add_string(json_object_get(feedback, "blockReasonMessage"), why);
		return STOP_REFUSAL;
	}
	const char *w = take_word(json_object_get(cand, "finishReason"), word);
	if (strcmp(w, "MAX_TOKENS") == 0)
		return STOP_LENGTH;
	if (word_in(w, filtered)) {
		add_string(json_object_get(cand, "finishMessage"), why);
		if (why->len == 0)
			texts_of(json_object_get(json_object_get(cand, "content"), "parts"), NULL, why);
		return STOP_FILTER;
	}
	if (word_in(w, invalid)) {
		add_string(json_object_get(cand, "finishMessage"), why);
		return STOP_INVALID;
	}
	return STOP_NONE;
}

enum stop_class stop_of_body(enum provider p, json_t *doc, char word[STOP_WORD_MAX], struct buf *why)
{
	word[0] = '\0';
	switch (p) {
	case PROV_ANTHROPIC: return anthropic_stop(doc, word, why);
	case PROV_OPENAI: return openai_stop(doc, word, why);
	case PROV_GEMINI: return gemini_stop(doc, word, why);
	case PROV_CODEX: /* streamed: sse_stop */
	case PROV_MOCK: break;
	}
	return STOP_NONE;
}

enum stop_class stop_of_incomplete(const char *reason)
{
	if (strcmp(reason, "max_output_tokens") == 0)
		return STOP_LENGTH;
	if (strcmp(reason, "content_filter") == 0)
		return STOP_FILTER;
	return STOP_INVALID;
}

/* ---- usage -------------------------------------------------------------- */

/* A count at o.key: a whole number >= 0 into *out, which is left as it
 * was otherwise (a negative count is no count: a default stays). */
static int count_at(json_t *o, const char *key, long long *out)
{
	long long n;
	if (!ndjson_integer(json_object_get(o, key), &n) || n < 0)
		return 0;
	*out = n;
	return 1;
}

static void put_count(json_t *usage, const char *name, json_t *o, const char *key)
{
	long long n;
	if (count_at(o, key, &n))
		json_object_set_new(usage, name, json_integer((json_int_t)n));
}

/* Where each provider reports what (its member names). Gemini's
 * candidatesTokenCount leaves the thoughts out (thoughtsTokenCount) and is
 * absent when the thoughts took every token: the output is their sum. */
json_t *usage_of(enum provider p, json_t *doc)
{
	json_t *u = NULL, *usage;
	long long in, out = 0, thoughts = 0;
	switch (p) {
	case PROV_ANTHROPIC:
		u = json_object_get(doc, "usage");
		if (!count_at(u, "input_tokens", &in))
			return NULL;
		count_at(u, "output_tokens", &out);
		usage = json_pack("{s:I,s:I}", "inputTokens", (json_int_t)in, "outputTokens", (json_int_t)out);
		put_count(usage, "cachedInputTokens", u, "cache_read_input_tokens");
		put_count(usage, "cacheWriteTokens", u, "cache_creation_input_tokens");
		put_count(usage, "reasoningTokens", json_object_get(u, "output_tokens_details"), "thinking_tokens");
		return usage;
	case PROV_OPENAI:
		u = json_object_get(doc, "usage");
		if (!count_at(u, "prompt_tokens", &in))
			return NULL;
		count_at(u, "completion_tokens", &out);
		usage = json_pack("{s:I,s:I}", "inputTokens", (json_int_t)in, "outputTokens", (json_int_t)out);
		put_count(usage, "cachedInputTokens", json_object_get(u, "prompt_tokens_details"), "cached_tokens");
		put_count(usage, "reasoningTokens", json_object_get(u, "completion_tokens_details"), "reasoning_tokens");
		return usage;
	case PROV_GEMINI:
		u = json_object_get(doc, "usageMetadata");
		if (!count_at(u, "promptTokenCount", &in))
			return NULL;
		count_at(u, "candidatesTokenCount", &out);
		count_at(u, "thoughtsTokenCount", &thoughts);
		if (out > LLONG_MAX - thoughts)
			return NULL;
		usage = json_pack("{s:I,s:I}", "inputTokens", (json_int_t)in, "outputTokens", (json_int_t)(out + thoughts));
		put_count(usage, "cachedInputTokens", u, "cachedContentTokenCount");
		put_count(usage, "reasoningTokens", u, "thoughtsTokenCount");
		return usage;
	case PROV_CODEX: /* doc is response.usage */
		if (!count_at(doc, "input_tokens", &in))
			return NULL;
		count_at(doc, "output_tokens", &out);
		usage = json_pack("{s:I,s:I}", "inputTokens", (json_int_t)in, "outputTokens", (json_int_t)out);
		put_count(usage, "cachedInputTokens", json_object_get(doc, "input_tokens_details"), "cached_tokens");
		put_count(usage, "reasoningTokens", json_object_get(doc, "output_tokens_details"), "reasoning_tokens");
		return usage;
	case PROV_MOCK:
		break;
	}
	return NULL;
}

/* ---- cost --------------------------------------------------------------- */

double usd_rounded(double v)
{
	char s[64];
	snprintf(s, sizeof s, "%.10f", v);
	return strtod(s, NULL);
}

static double count_of(const json_t *usage, const char *key)
{
	json_t *v = json_object_get(usage, key);
	return json_is_integer(v) && json_integer_value(v) > 0 ? (double)json_integer_value(v) : 0;
}

/* Anthropic's input_tokens already leaves out the tokens read from and
 * written to the cache; OpenAI's prompt_tokens, Gemini's promptTokenCount
 * and the Responses API's input_tokens include the cached ones, billed at
 * the cached price and so taken out of the full-price count. */
double cost_of(const struct endpoint_pricing *p, enum provider prov, const json_t *usage)
{
	if (!p->set || !json_is_object(usage))
		return 0;
	double in = count_of(usage, "inputTokens"), cached = count_of(usage, "cachedInputTokens");
	double written = count_of(usage, "cacheWriteTokens"), out = count_of(usage, "outputTokens");
	double uncached = prov == PROV_ANTHROPIC ? in : in > cached ? in - cached : 0;
	return usd_rounded((uncached * p->input_per_mtok + cached * p->cached_input_per_mtok +
	                    written * p->cache_write_per_mtok + out * p->output_per_mtok) / 1e6);
}

/* ---- waits named in a message ------------------------------------------- */

long long wait_in_message(const char *msg)
{
	static const char phrase[] = "try again in";
	for (const char *at = msg; at && *at; at++) {
		if (strncasecmp(at, phrase, sizeof phrase - 1) != 0)
			continue;
		const char *p = at + sizeof phrase - 1;
		while (*p == ' ')
			p++;
		if (!isdigit((unsigned char)*p))
			continue;
		char *end;
		double n = strtod(p, &end);
		while (*end == ' ')
			end++;
		if (!isfinite(n) || n < 0 || n > 1e9)
			return -1;
		if (strncasecmp(end, "ms", 2) == 0)
			return llround(n);
		if (tolower((unsigned char)*end) == 's')
			return llround(n * 1000);
		return -1;
	}
	return -1;
}
