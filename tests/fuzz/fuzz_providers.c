/* fuzz_providers.c - what sfma-model makes of provider responses:
 * reply_text (src/sfma-model/providers.c: anthropic, openai, gemini
 * bodies), the Server-Sent Events parser the codex provider streams
 * through, and the error excerpt of a failing response (http.c). The
 * program's files are linked as they are (main renamed); what lies below
 * provider_call and http_post is declared in src/sfma-model/providers.h
 * and http.h.
 *
 * Input byte 0 picks what the rest is:
 *  0-2: an anthropic / openai / gemini body: provider_reply_text returns
 *       the string at the provider's path (found again here, by the paths
 *       sfma-model(1) names) or a one-line error;
 *  3:   a codex event stream, fed whole and fed in chunks (sizes seeded by
 *       byte 1) through the transfer callback: same outcome both ways, and
 *       the kept head of the body is its first bytes;
 *  4:   text pieces (split at 0xff) sent as output_text.delta events, with
 *       CRLF or LF line ends, comments and event: lines (bits of byte 1):
 *       the reply text is the pieces joined;
 *  5:   a failing response's body: the error is one printable line, short,
 *       and never holds a known secret;
 *  6:   a 2xx body of a request that offered the tools (provider by byte
 *       1): provider_reply_native and tools_from_native either fail with
 *       one line or give exactly one {id,name,input:{}} per call object
 *       received, and the usage, when found, holds counts;
 *  7:   a header line: the retry hint is -1 or a wait >= 0, x-should-retry
 *       -1, 0 or 1;
 *  8:   a 2xx body of a JSON provider (by byte 1; bit 2: tools offered),
 *       through provider_parse_body, the whole reading of an answer: a
 *       success is end, tool (exactly when it made calls) or length, and
 *       has a text or a call unless cut off; a failure is a bad reply or
 *       a refusal, and a refusal has a non-empty text free of the secret;
 *       a cut-off word (anthropic max_tokens, openai length, gemini
 *       MAX_TOKENS) is never a failure and a refusal field never anything
 *       but a refusal; the cost of what it counted is finite and >= 0;
 *  9:   a codex event stream through provider_parse_stream: the same
 *       properties, a rate limit's wait is -1 or >= 0, and an incomplete
 *       response never passes for a whole one. */
#include "fuzz.h"

#include <math.h>

#include "ndjson.h"
#include "tools.h"
#include "src/sfma-model/http.h"
#include "src/sfma-model/providers.h"

#define FUZZ_SECRET "sk-fuzz-0123456789abcdef"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	secret_add(FUZZ_SECRET);
	/* The header mode reaches curl_getdate, through the table sfma-model
	 * fills when it first needs HTTP. */
	struct sfma_err e;
	if (curl_load(&e) < 0)
		fuzz_fail("%s", e.text);
	return 0;
}

static void check_one_line(const char *s, size_t max, const char *what)
{
	size_t n = strlen(s);
	FUZZ_CHECK(n > 0 && n <= max, "%s: %zu bytes", what, n);
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK((unsigned char)s[i] >= 0x20 || s[i] == '\t', "%s holds 0x%02x", what, (unsigned char)s[i]);
}

/* Where sfma-model(1) says each provider's reply text is. */
static const char *const anthropic_path[] = {"content", "0", "text", NULL};
static const char *const openai_path[] = {"choices", "0", "message", "content", NULL};
static const char *const gemini_path[] = {"candidates", "0", "content", "parts", "0", "text", NULL};

static void body_mode(enum provider p, const uint8_t *s, size_t n)
{
	json_t *doc = ndjson_parse((const char *)s, n, NULL), *at = doc;
	if (!doc)
		return;
	struct buf text = {0};
	struct sfma_err e = {{0}};
	int rc = provider_reply_text(p, doc, &text, &e);
	/* The same string found again, by hand. */
	const char *const *path = p == PROV_ANTHROPIC ? anthropic_path : p == PROV_OPENAI ? openai_path : gemini_path;
	for (; *path && at; path++)
		at = json_is_array(at) ? json_array_get(at, (size_t)atoi(*path)) : json_object_get(at, *path);
	if (json_is_string(at) && json_string_length(at) > 0) {
		FUZZ_CHECK(rc == 0 && text.len == json_string_length(at) &&
		           memcmp(text.p, json_string_value(at), text.len) == 0, "reply text not the one at the path");
	} else {
		FUZZ_CHECK(rc == -1 && text.len == 0, "a reply text without one at the path");
		check_one_line(e.text, SFMA_ERR_MAX, "reply error");
	}
	json_decref(doc);
	buf_free(&text);
}

struct outcome {
	int rc;
	struct buf text;
	struct sfma_err e;
};

static void stream_mode(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data + 2;
	size_t n = size - 2;
	struct outcome whole = {0}, chunked = {0};

	struct sse *a = sse_new();
	sse_feed(a, s, n);
	whole.rc = sse_result(a, &whole.text, &whole.e);
	sse_free(a);

	struct sse *b = sse_new();
	struct buf head = {0};
	struct sink k = {.body = &head, .sse = b};
	uint32_t x = data[1] | 0x100u;
	for (size_t pos = 0; pos < n;) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		size_t take = 1 + x % 97;
		if (take > n - pos)
			take = n - pos;
		FUZZ_CHECK(http_on_data((char *)s + pos, 1, take, &k) == take, "http_on_data refused a chunk");
		pos += take;
	}
	chunked.rc = sse_result(b, &chunked.text, &chunked.e);
	sse_free(b);

	FUZZ_CHECK(whole.rc == chunked.rc, "the outcome depends on chunking (%d vs %d)", whole.rc, chunked.rc);
	FUZZ_CHECK(whole.text.len == chunked.text.len &&
	           (!whole.text.len || memcmp(whole.text.p, chunked.text.p, whole.text.len) == 0),
	           "the reply text depends on chunking");
	FUZZ_CHECK(strcmp(whole.e.text, chunked.e.text) == 0, "the error depends on chunking");
	if (whole.rc < 0)
		check_one_line(whole.e.text, SFMA_ERR_MAX, "stream error");
	size_t keep = n < STREAM_HEAD_KEEP ? n : STREAM_HEAD_KEEP;
	FUZZ_CHECK(head.len == keep && (!keep || memcmp(head.p, s, keep) == 0), "kept head of %zu bytes", head.len);
	buf_free(&head);
	buf_free(&whole.text);
	buf_free(&chunked.text);
}

static void delta_mode(const uint8_t *data, size_t size)
{
	int crlf = data[1] & 1, comments = data[1] & 2, events = data[1] & 4, done = data[1] & 8;
	const char *eol = crlf ? "\r\n" : "\n";
	const uint8_t *s = data + 2;
	size_t n = size - 2;
	struct buf stream = {0}, want = {0};
	for (size_t pos = 0; pos <= n;) {
		const uint8_t *cut = memchr(s + pos, 0xff, n - pos);
		size_t len = cut ? (size_t)(cut - (s + pos)) : n - pos;
		json_t *piece = json_stringn((const char *)s + pos, len);
		if (piece) { /* valid UTF-8 only: what a provider sends */
			json_t *ev = json_pack("{s:s,s:o}", "type", "response.output_text.delta", "delta", piece);
			char *line = json_dumps(ev, JSON_COMPACT);
			if (comments)
				buf_printf(&stream, ": keep-alive%s", eol);
			if (events)
				buf_printf(&stream, "event: response.output_text.delta%s", eol);
			buf_printf(&stream, "data: %s%s%s", line, eol, eol);
			buf_add(&want, s + pos, len);
			free(line);
			json_decref(ev);
		}
		if (!cut)
			break;
		pos += len + 1;
	}
	if (done)
		buf_printf(&stream, "data: [DONE]%s%s", eol, eol);
	struct sse *a = sse_new();
	sse_feed(a, stream.p ? stream.p : "", stream.len);
	struct buf text = {0};
	struct sfma_err e = {{0}};
	int rc = sse_result(a, &text, &e);
	sse_free(a);
	if (want.len) {
		FUZZ_CHECK(rc == 0, "a delta stream failed: %s", e.text);
		FUZZ_CHECK(text.len == want.len && memcmp(text.p, want.p, want.len) == 0,
		           "the deltas joined are not the reply text");
	} else {
		FUZZ_CHECK(rc == -1, "a stream without text gave a reply");
	}
	buf_free(&text);
	buf_free(&want);
	buf_free(&stream);
}

static void status_mode(const uint8_t *s, size_t n)
{
	struct http_reply r = {.status = 500, .retry_after_ms = -1};
	buf_add(&r.body, s, n);
	struct sfma_err e = {{0}};
	FUZZ_CHECK(http_status_error(&r, &e) == -1, "http_status_error did not fail");
	check_one_line(e.text, strlen("HTTP 500: ") + MODEL_EXCERPT_MAX, "status error");
	for (const char *c = e.text; *c; c++)
		FUZZ_CHECK((unsigned char)*c < 0x7f, "status error holds a non-ASCII byte");
	FUZZ_CHECK(!strstr(e.text, FUZZ_SECRET), "a secret in an error: %s", e.text);
	buf_free(&r.body);
}

static void native_mode(const uint8_t *data, size_t size)
{
	static const enum provider provs[] = {PROV_ANTHROPIC, PROV_OPENAI, PROV_GEMINI};
	enum provider p = provs[data[1] % 3];
	json_t *doc = ndjson_parse((const char *)data + 2, size - 2, NULL);
	if (!doc)
		return;
	struct endpoint ep = {.prov = p};
	struct attempt a = {.retry_after_ms = -1};
	int rc = provider_reply_native(p, doc, &a.text, &a.native, &a.e);
	if (rc == 0)
		rc = provider_take_calls(&ep, &a);
	if (rc < 0) {
		check_one_line(a.e.text, SFMA_ERR_MAX, "native reply error");
	} else if (a.native) {
		FUZZ_CHECK(json_array_size(a.tool_calls) == json_array_size(a.native), "calls lost or made up");
		size_t i;
		json_t *c;
		json_array_foreach(a.tool_calls, i, c) {
			FUZZ_CHECK(json_string_length(json_object_get(c, "id")) > 0 &&
			           json_string_length(json_object_get(c, "name")) > 0 &&
			           json_is_object(json_object_get(c, "input")), "a call without id, name or input");
			struct sfma_err e;
			json_t *obj = tools_call_object(c, &e);
			if (obj)
				FUZZ_CHECK(json_equal(json_object_get(obj, "tool"), json_object_get(c, "name")),
				           "call object names another tool");
			else
				check_one_line(e.text, SFMA_ERR_MAX, "call object error");
			json_decref(obj);
		}
	} else {
		FUZZ_CHECK(a.text.len > 0, "a native reply with neither text nor calls");
	}
	json_t *u = usage_of(p, doc);
	if (u)
		FUZZ_CHECK(json_is_integer(json_object_get(u, "inputTokens")) &&
		           json_is_integer(json_object_get(u, "outputTokens")), "usage without counts");
	json_decref(u);
	attempt_free(&a);
	json_decref(doc);
}

static void header_mode(const uint8_t *s, size_t n)
{
	struct http_reply r = {.retry_after_ms = -1, .should_retry = -1};
	http_retry_hint(&r, (const char *)s, n);
	FUZZ_CHECK(r.retry_after_ms >= -1, "a negative wait %lld", r.retry_after_ms);
	FUZZ_CHECK(r.should_retry >= -1 && r.should_retry <= 1, "x-should-retry read as %d", r.should_retry);
}

/* What every judged answer must be (modes 8 and 9). */
static void check_answer(const struct endpoint *ep, const struct attempt *a, int rc)
{
	FUZZ_CHECK(strlen(a->stop_reason) < STOP_WORD_MAX, "stop word overran");
	if (rc == 0) {
		FUZZ_CHECK(a->stop == STOP_END || a->stop == STOP_TOOL || a->stop == STOP_LENGTH,
		           "a success that ended as %d", a->stop);
		FUZZ_CHECK(json_array_size(a->tool_calls) == json_array_size(a->native), "calls lost or made up");
		if (a->stop != STOP_LENGTH) {
			FUZZ_CHECK((a->stop == STOP_TOOL) == (a->native != NULL), "stop tool without calls, or calls without it");
			FUZZ_CHECK(a->native || a->text.len > 0, "a whole reply with neither text nor calls");
		}
	} else {
		FUZZ_CHECK(a->cls == EC_REPLY || a->cls == EC_REFUSAL || a->cls == EC_RATE || a->cls == EC_TRANSIENT ||
		           a->cls == EC_CLIENT, "a failed answer of class %d", a->cls);
		check_one_line(a->e.text, SFMA_ERR_MAX, "answer error");
		if (a->cls == EC_REFUSAL) {
			FUZZ_CHECK(a->stop == STOP_REFUSAL || a->stop == STOP_FILTER, "a refusal that is no refusal");
			FUZZ_CHECK(a->text.len > 0, "a refusal without its text");
			FUZZ_CHECK(!memmem(a->text.p, a->text.len, FUZZ_SECRET, strlen(FUZZ_SECRET)), "a secret in a refusal");
		}
	}
	static const struct endpoint_pricing price = {.set = 1, .input_per_mtok = 3, .output_per_mtok = 15,
	                                             .cached_input_per_mtok = 0.3, .cache_write_per_mtok = 3.75};
	double cost = cost_of(&price, ep->prov, a->usage);
	FUZZ_CHECK(isfinite(cost) && cost >= 0, "a cost of %g", cost);
	if (a->usage)
		FUZZ_CHECK(json_is_integer(json_object_get(a->usage, "inputTokens")) &&
		           json_is_integer(json_object_get(a->usage, "outputTokens")), "usage without counts");
}

static void answer_mode(const uint8_t *data, size_t size)
{
	static const enum provider provs[] = {PROV_ANTHROPIC, PROV_OPENAI, PROV_GEMINI};
	struct endpoint ep = {.prov = provs[data[1] % 3]};
	int native = (data[1] & 4) != 0;
	struct http_reply r = {.status = 200, .retry_after_ms = -1};
	buf_add(&r.body, data + 2, size - 2);
	struct attempt a = {.retry_after_ms = -1};
	int rc = provider_parse_body(&ep, native, &r, &a);
	check_answer(&ep, &a, rc);
	/* Oracles by hand, on the provider's own members. */
	json_t *doc = ndjson_parse((const char *)data + 2, size - 2, NULL);
	if (ep.prov == PROV_ANTHROPIC && ndjson_string_is(json_object_get(doc, "stop_reason"), "max_tokens"))
		FUZZ_CHECK(rc == 0 && a.stop == STOP_LENGTH, "a max_tokens reply that is not cut off");
	json_t *choice = json_array_get(json_object_get(doc, "choices"), 0);
	json_t *refusal = json_object_get(json_object_get(choice, "message"), "refusal");
	if (ep.prov == PROV_OPENAI && json_is_string(refusal) && json_string_length(refusal) > 0)
		FUZZ_CHECK(rc < 0 && a.cls == EC_REFUSAL, "a refusal field that is no refusal");
	else if (ep.prov == PROV_OPENAI && ndjson_string_is(json_object_get(choice, "finish_reason"), "length"))
		FUZZ_CHECK(rc == 0 && a.stop == STOP_LENGTH, "a length reply that is not cut off");
	json_t *cand = json_array_get(json_object_get(doc, "candidates"), 0);
	if (ep.prov == PROV_GEMINI && ndjson_string_is(json_object_get(cand, "finishReason"), "MAX_TOKENS"))
		FUZZ_CHECK(rc == 0 && a.stop == STOP_LENGTH, "a MAX_TOKENS reply that is not cut off");
	json_decref(doc);
	attempt_free(&a);
	buf_free(&r.body);
}

static void stream_answer_mode(const uint8_t *data, size_t size)
{
	struct endpoint ep = {.prov = PROV_CODEX};
	struct sse *sse = sse_new();
	sse_feed(sse, (const char *)data + 2, size - 2);
	struct attempt a = {.retry_after_ms = -1};
	int rc = provider_parse_stream(&ep, data[1] & 1, sse, &a);
	check_answer(&ep, &a, rc);
	FUZZ_CHECK(a.retry_after_ms >= -1, "a negative wait %lld", a.retry_after_ms);
	if (a.cls == EC_RATE)
		FUZZ_CHECK(strcmp(sse_error_code(sse), "rate_limit_exceeded") == 0, "a rate limit without its code");
	/* response.incomplete is never a whole reply, unless a failure came first */
	if (rc == 0 && sse->saw_incomplete)
		FUZZ_CHECK(a.stop == STOP_LENGTH, "an incomplete response passed for a whole one");
	sse_free(sse);
	attempt_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	switch (data[0] % 10) {
	case 0: body_mode(PROV_ANTHROPIC, data + 1, size - 1); break;
	case 1: body_mode(PROV_OPENAI, data + 1, size - 1); break;
	case 2: body_mode(PROV_GEMINI, data + 1, size - 1); break;
	case 3: stream_mode(data, size); break;
	case 4: delta_mode(data, size); break;
	case 5: status_mode(data + 1, size - 1); break;
	case 6: native_mode(data, size); break;
	case 7: header_mode(data + 1, size - 1); break;
	case 8: answer_mode(data, size); break;
	default: stream_answer_mode(data, size); break;
	}
	return 0;
}
