/* http.c - one bounded HTTP POST over libcurl, the idle handles kept per
 * endpoint for it, and the incremental Server-Sent Events parser the
 * codex provider streams through.
 *
 * Bounds: the whole transfer (connect included) ends by the request's
 * deadline; the body is cut off at MODEL_BODY_MAX bytes as it arrives, so
 * memory stays bounded whatever a server sends; TLS peer and host
 * verification are set explicitly on (libcurl's default, made
 * unconditional); redirects are not followed, since a redirect would carry
 * the key headers to wherever the server points. */
#include "http.h"
#include "ndjson.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- idle handles ------------------------------------------------------- */

void pool_init(struct endpoint *ep)
{
	pthread_mutex_init(&ep->pool_lock, NULL);
	ep->n_pool = 0;
}

void pool_free(struct endpoint *ep)
{
	while (ep->n_pool)
		libcurl.easy_cleanup(ep->pool[--ep->n_pool]);
	pthread_mutex_destroy(&ep->pool_lock);
}

/* The most recently used handle first: a lone request keeps reusing one
 * connection, and a second one at the same time gets its own. */
CURL *endpoint_handle(struct endpoint *ep)
{
	CURL *c = NULL;
#ifndef SFMA_BENCH_FRESH_HANDLE /* benchmark baseline (tests/bench/model.sh): a new connection every call */
	pthread_mutex_lock(&ep->pool_lock);
	if (ep->n_pool)
		c = ep->pool[--ep->n_pool];
	pthread_mutex_unlock(&ep->pool_lock);
#else
	(void)ep;
#endif
	if (!c && !(c = libcurl.easy_init()))
		die("cannot start libcurl");
	return c;
}

void endpoint_handle_back(struct endpoint *ep, CURL *c)
{
	pthread_mutex_lock(&ep->pool_lock);
#ifndef SFMA_BENCH_FRESH_HANDLE
	if (ep->n_pool < MODEL_POOL_MAX) {
		ep->pool[ep->n_pool++] = c;
		c = NULL;
	}
#endif
	pthread_mutex_unlock(&ep->pool_lock);
	if (c)
		libcurl.easy_cleanup(c);
}

/* ---- Server-Sent Events -------------------------------------------------- */

static void sse_line(struct sse *s, char *line, size_t n);

void sse_feed(struct sse *s, const char *p, size_t n)
{
	while (n > 0) {
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;
		buf_add(&s->line, p, take);
		if (!nl)
			return;
		size_t len = s->line.len;
		if (len > 0 && s->line.p[len - 1] == '\r')
			len--;
		sse_line(s, s->line.p ? s->line.p : "", len);
		buf_reset(&s->line);
		p += take + 1;
		n -= take + 1;
	}
}

size_t http_on_data(char *p, size_t size, size_t nmemb, void *userdata)
{
	struct sink *k = userdata;
	size_t n = size * nmemb;
	if (n > MODEL_BODY_MAX - k->total) {
		k->too_big = 1;
		return 0; /* any other count aborts the transfer */
	}
	k->total += n;
	if (k->sse) {
		if (k->body->len < STREAM_HEAD_KEEP)
			buf_add(k->body, p, n < STREAM_HEAD_KEEP - k->body->len ? n : STREAM_HEAD_KEEP - k->body->len);
		sse_feed(k->sse, p, n);
	} else {
		buf_add(k->body, p, n);
	}
	return n;
}

/* A wait hint of the response: retry-after-ms (milliseconds, the form
 * OpenAI's and Anthropic's SDKs honour first) or Retry-After (RFC 9110
 * section 10.2.3: delay-seconds or an HTTP-date); and x-should-retry, by
 * which those SDKs let a server say whether an answer is worth retrying. A
 * header block of a new response (after a 1xx) starts over. */
void http_retry_hint(struct http_reply *out, const char *p, size_t n)
{
	if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
		out->retry_after_ms = -1;
		out->retry_ms_seen = 0;
		out->should_retry = -1;
		return;
	}
	const char *colon = memchr(p, ':', n);
	if (!colon)
		return;
	size_t name_len = (size_t)(colon - p);
	int ms = name_len == 14 && strncasecmp(p, "retry-after-ms", 14) == 0;
	int should = name_len == 14 && strncasecmp(p, "x-should-retry", 14) == 0;
	if (!ms && !should && !(name_len == 11 && strncasecmp(p, "retry-after", 11) == 0))
		return;
	char value[128];
	const char *v = colon + 1, *end = p + n;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && isspace((unsigned char)end[-1]))
		end--;
	if (end == v || (size_t)(end - v) >= sizeof value)
		return;
	memcpy(value, v, (size_t)(end - v));
	value[end - v] = '\0';
	if (should) {
		if (strcasecmp(value, "true") == 0 || strcasecmp(value, "false") == 0)
			out->should_retry = strcasecmp(value, "true") == 0;
		return;
	}
	char *stop;
	double d = strtod(value, &stop);
	long long hint = -1;
	if (*stop == '\0' && isfinite(d) && d >= 0 && d < 1e12)
		hint = (long long)(ms ? d : d * 1000);
	else if (!ms) {
		time_t at = libcurl.getdate(value, NULL); /* every HTTP-date form */
		if (at != -1) {
			long long left = (long long)at * 1000 - wall_ms();
			hint = left > 0 ? left : 0;
		}
	}
	/* retry-after-ms is the finer of the two: it wins whichever came first. */
	if (hint >= 0 && (ms || !out->retry_ms_seen))
		out->retry_after_ms = hint;
	if (hint >= 0 && ms)
		out->retry_ms_seen = 1;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *userdata)
{
	size_t n = size * nmemb;
	http_retry_hint(userdata, p, n);
	return n;
}

#define SET(opt, val) \
	do { \
		if (libcurl.easy_setopt(c, opt, val) != CURLE_OK) \
			return err_set(e, "cannot set %s", #opt); \
	} while (0)

int http_post(CURL *c, const char *url, struct curl_slist *headers, const char *body,
              size_t body_len, long long deadline_ms, struct sse *sse,
              struct http_reply *out, struct sfma_err *e)
{
	long long left = deadline_ms - wall_ms();
	if (left <= 0)
		return err_set(e, "deadline passed");
	char errbuf[CURL_ERROR_SIZE] = "";
	struct sink k = {.body = &out->body, .sse = sse};
	out->status = 0;
	out->retry_after_ms = -1;
	out->retry_ms_seen = 0;
	out->should_retry = -1;
	buf_reset(&out->body);

	/* reset keeps the connection cache: consecutive calls reuse a connection. */
	libcurl.easy_reset(c);
	SET(CURLOPT_URL, url);
	SET(CURLOPT_PROTOCOLS_STR, "http,https");
	SET(CURLOPT_FOLLOWLOCATION, 0L);
	SET(CURLOPT_SSL_VERIFYPEER, 1L);
	SET(CURLOPT_SSL_VERIFYHOST, 2L);
	/* No signals: libcurl must not arm SIGALRM for DNS timeouts in a
	 * program that serves requests in a loop. */
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_TIMEOUT_MS, (long)left);
	SET(CURLOPT_CONNECTTIMEOUT_MS, (long)(left < MODEL_CONNECT_MAX_MS ? left : MODEL_CONNECT_MAX_MS));
	/* A declared length over the ceiling fails before any byte is read;
	 * the write callback enforces the same ceiling on undeclared ones. */
	SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)MODEL_BODY_MAX);
	SET(CURLOPT_ACCEPT_ENCODING, ""); /* decoded bytes count toward the ceiling */
	SET(CURLOPT_USERAGENT, "sfma-model");
	SET(CURLOPT_HTTPHEADER, headers);
	SET(CURLOPT_POST, 1L);
	SET(CURLOPT_POSTFIELDS, body);
	SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
	SET(CURLOPT_WRITEFUNCTION, http_on_data);
	SET(CURLOPT_WRITEDATA, &k);
	SET(CURLOPT_HEADERFUNCTION, on_header);
	SET(CURLOPT_HEADERDATA, out);
	/* HTTP/2 where TLS offers it (ALPN), HTTP/1.1 otherwise: one
	 * connection per endpoint, kept alive between calls either way. A
	 * libcurl built without HTTP/2 refuses the option: HTTP/1.1 then. */
	libcurl.easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
	SET(CURLOPT_TCP_KEEPALIVE, 1L);
	SET(CURLOPT_ERRORBUFFER, errbuf);

	CURLcode rc = libcurl.easy_perform(c);
	libcurl.easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
	if (k.too_big || rc == CURLE_FILESIZE_EXCEEDED) {
		err_set(e, "response larger than %u bytes", MODEL_BODY_MAX);
		return -2;
	}
	if (rc == CURLE_OPERATION_TIMEDOUT)
		return err_set(e, "deadline reached (gave up after %lld ms)", left);
	if (rc != CURLE_OK)
		return err_set(e, "%s", errbuf[0] ? errbuf : libcurl.easy_strerror(rc));
	libcurl.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
	return 0;
}

/* How much of a failing body is gathered before scrubbing: more than is
 * shown, so that a key= value or a piece of a secret near the clip point is
 * judged with what follows it. */
#define EXCERPT_WINDOW (MODEL_EXCERPT_MAX + 512)

int http_status_error(const struct http_reply *r, struct sfma_err *e)
{
	/* Printable ASCII only (the excerpt must be valid UTF-8 and one line).
	 * Every copy of a known secret is matched in the raw body, whole,
	 * wherever it starts and however far it reaches, before anything is
	 * cut; the gathered text then passes secret_scrub (key= values and
	 * pieces of secrets) and only then is clipped, so the clip shortens
	 * text that is already clean. */
	struct buf x = {0};
	size_t i = 0;
	while (i < r->body.len && x.len < EXCERPT_WINDOW) {
		size_t k = secret_at(r->body.p + i, r->body.len - i);
		if (k) {
			buf_adds(&x, SECRET_REDACTED);
			i += k;
			continue;
		}
		unsigned char ch = (unsigned char)r->body.p[i++];
		char o = ch >= 0x20 && ch < 0x7f ? (char)ch : ' ';
		if (o != ' ' || x.len == 0 || x.p[x.len - 1] != ' ')
			buf_addc(&x, o);
	}
	int more = i < r->body.len;
	char excerpt[EXCERPT_WINDOW + 64];
	snprintf(excerpt, sizeof excerpt, "%s", x.p ? x.p : "");
	if (x.p)
		explicit_bzero(x.p, x.len);
	buf_free(&x);
	secret_scrub(excerpt, sizeof excerpt);
	size_t n = strlen(excerpt);
	if (n > MODEL_EXCERPT_MAX || (more && n > 0))
		strcpy(excerpt + (n < MODEL_EXCERPT_MAX - 3 ? n : MODEL_EXCERPT_MAX - 3), "...");
	int rc = n == 0 ? err_set(e, "HTTP %ld", r->status) : err_set(e, "HTTP %ld: %s", r->status, excerpt);
	explicit_bzero(excerpt, sizeof excerpt);
	return rc;
}

void headers_wipe_free(struct curl_slist *h)
{
	for (struct curl_slist *p = h; p; p = p->next)
		explicit_bzero(p->data, strlen(p->data));
	libcurl.slist_free_all(h);
}

/* ---- Server-Sent Events (codex) ---------------------------------------- */

struct sse *sse_new(void)
{
	return xcalloc(1, sizeof(struct sse));
}

void sse_free(struct sse *s)
{
	if (!s)
		return;
	buf_free(&s->line);
	buf_free(&s->data);
	buf_free(&s->deltas);
	buf_free(&s->completed);
	buf_free(&s->refusal);
	buf_free(&s->refused);
	json_decref(s->calls_done);
	json_decref(s->calls_completed);
	json_decref(s->usage);
	free(s);
}

/* Append item to *list when it is a function_call item. */
static void keep_call(json_t **list, json_t *item)
{
	const char *type = json_string_value(json_object_get(item, "type"));
	if (!type || strcmp(type, "function_call") != 0)
		return;
	if (!*list)
		*list = json_array();
	json_array_append(*list, item);
}

json_t *sse_calls(struct sse *s)
{
	json_t *c = s->calls_done ? s->calls_done : s->calls_completed;
	return c ? json_incref(c) : NULL;
}

json_t *sse_usage(struct sse *s)
{
	return s->usage ? json_incref(s->usage) : NULL;
}

/* The output_text parts of a final response object (of response.completed
 * or response.incomplete) concatenated, its refusal parts, its calls and
 * its usage. */
static void final_response(struct sse *s, json_t *response)
{
	json_t *output = json_object_get(response, "output"), *item;
	size_t i;
	json_t *usage = json_object_get(response, "usage");
	if (json_is_object(usage) && !s->usage)
		s->usage = json_incref(usage);
	json_array_foreach(output, i, item) {
		keep_call(&s->calls_completed, item);
		json_t *content = json_object_get(item, "content"), *part;
		size_t j;
		json_array_foreach(content, j, part) {
			const char *type = json_string_value(json_object_get(part, "type"));
			json_t *text = json_object_get(part, "text"), *refusal = json_object_get(part, "refusal");
			if (type && strcmp(type, "output_text") == 0 && json_is_string(text))
				buf_add(&s->completed, json_string_value(text), json_string_length(text));
			if (type && strcmp(type, "refusal") == 0 && json_is_string(refusal))
				buf_add(&s->refused, json_string_value(refusal), json_string_length(refusal));
		}
	}
}

/* A response.failed carries response.error {code, message}; an error
 * event {code, message} of its own (some servers nest them in "error"). */
static void failure_text(struct sse *s, json_t *ev)
{
	json_t *err = json_object_get(json_object_get(ev, "response"), "error");
	if (!json_is_object(err))
		err = json_is_object(json_object_get(ev, "error")) ? json_object_get(ev, "error") : ev;
	json_t *msg = json_object_get(err, "message"), *code = json_object_get(err, "code");
	s->failed = 1;
	snprintf(s->failure, sizeof s->failure, "%s",
	         json_is_string(msg) ? json_string_value(msg) : "stream reported a failure");
	snprintf(s->code, sizeof s->code, "%s", json_is_string(code) ? json_string_value(code) : "");
}

/* One whole event: its data is a JSON object whose "type" says what it is. */
static void sse_dispatch(struct sse *s)
{
	if (s->data.len == 0 || strcmp(s->data.p, "[DONE]") == 0) {
		buf_reset(&s->data);
		return;
	}
	json_t *ev = ndjson_parse(s->data.p, s->data.len, NULL);
	buf_reset(&s->data);
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (!type) {
		s->bad_events++;
	} else if (strcmp(type, "response.output_text.delta") == 0) {
		json_t *d = json_object_get(ev, "delta");
		if (json_is_string(d))
			buf_add(&s->deltas, json_string_value(d), json_string_length(d));
		else
			s->bad_events++;
	} else if (strcmp(type, "response.output_item.done") == 0) {
		keep_call(&s->calls_done, json_object_get(ev, "item"));
	} else if (strcmp(type, "response.refusal.delta") == 0) {
		json_t *d = json_object_get(ev, "delta");
		if (json_is_string(d))
			buf_add(&s->refusal, json_string_value(d), json_string_length(d));
	} else if (strcmp(type, "response.completed") == 0) {
		json_t *response = json_object_get(ev, "response");
		json_t *status = json_object_get(response, "status");
		final_response(s, response);
		snprintf(s->status, sizeof s->status, "%s", json_is_string(status) ? json_string_value(status) : "completed");
		s->saw_completed = 1;
	} else if (strcmp(type, "response.incomplete") == 0) {
		json_t *response = json_object_get(ev, "response");
		json_t *reason = json_object_get(json_object_get(response, "incomplete_details"), "reason");
		final_response(s, response);
		snprintf(s->incomplete, sizeof s->incomplete, "%s", json_is_string(reason) ? json_string_value(reason) : "");
		s->saw_incomplete = 1;
	} else if (strcmp(type, "response.failed") == 0 || strcmp(type, "error") == 0) {
		failure_text(s, ev);
	}
	json_decref(ev);
}

static void sse_line(struct sse *s, char *line, size_t n)
{
	if (n == 0) {
		sse_dispatch(s);
		return;
	}
	if (n >= 5 && memcmp(line, "data:", 5) == 0) {
		size_t skip = n > 5 && line[5] == ' ' ? 6 : 5;
		if (s->data.len)
			buf_addc(&s->data, '\n');
		buf_add(&s->data, line + skip, n - skip);
	}
	/* event:, id:, retry: and comments carry nothing we use: the JSON
	 * payload names its own type. */
}

int sse_result(struct sse *s, struct buf *text, struct sfma_err *e)
{
	if (s->line.len) { /* a last line without its newline */
		sse_line(s, s->line.p, s->line.len);
		buf_reset(&s->line);
	}
	sse_dispatch(s);
	if (s->failed)
		return err_set(e, "stream failed: %s%s%s", s->code[0] ? s->code : "", s->code[0] ? ": " : "",
		               s->failure);
	if (s->deltas.len) {
		buf_add(text, s->deltas.p, s->deltas.len);
		return 0;
	}
	if (s->completed.len) {
		buf_add(text, s->completed.p, s->completed.len);
		return 0;
	}
	/* a reply that is only function calls, or one whose end the caller
	 * judges (cut off, refused) with whatever text it has */
	if (s->calls_done || s->calls_completed || s->saw_incomplete || s->refusal.len || s->refused.len)
		return 0;
	if (s->saw_completed)
		return err_set(e, "empty reply text");
	if (s->bad_events)
		return err_set(e, "malformed event stream (%d unreadable events)", s->bad_events);
	return err_set(e, "no output text in event stream");
}

const char *sse_error_code(const struct sse *s)
{
	return s->code;
}

const char *sse_error_message(const struct sse *s)
{
	return s->failure;
}

enum stop_class sse_stop(const struct sse *s, char word[STOP_WORD_MAX], struct buf *why)
{
	word[0] = '\0';
	if (s->refusal.len || s->refused.len) {
		snprintf(word, STOP_WORD_MAX, "%s", s->saw_incomplete ? "incomplete" : s->saw_completed ? s->status : "");
		buf_add(why, s->refusal.len ? s->refusal.p : s->refused.p, s->refusal.len ? s->refusal.len : s->refused.len);
		return STOP_REFUSAL;
	}
	if (s->saw_incomplete) {
		snprintf(word, STOP_WORD_MAX, "incomplete:%.*s", STOP_WORD_MAX - 12, s->incomplete);
		return stop_of_incomplete(s->incomplete);
	}
	if (s->saw_completed)
		snprintf(word, STOP_WORD_MAX, "%s", s->status);
	return STOP_NONE;
}
