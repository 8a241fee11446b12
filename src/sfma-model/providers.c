/* providers.c - request shapes and reply shapes of each provider
 * (sfma-model(1)). One attempt = build the body, the URL and the
 * headers, POST, check the status, pull the text out of the reply. */
#include "model.h"
#include "canon.h"
#include "ndjson.h"

#include <stdlib.h>
#include <string.h>

static const char *const provider_names[] = {
	[PROV_ANTHROPIC] = "anthropic", [PROV_OPENAI] = "openai", [PROV_GEMINI] = "gemini",
	[PROV_CODEX] = "codex", [PROV_MOCK] = "mock",
};

static const char *const default_base[] = {
	[PROV_ANTHROPIC] = "https://api.anthropic.com",
	[PROV_OPENAI] = "https://api.openai.com",
	[PROV_GEMINI] = "https://generativelanguage.googleapis.com",
	[PROV_CODEX] = "https://chatgpt.com/backend-api/codex",
	[PROV_MOCK] = "",
};

int provider_parse(const char *name, enum provider *out)
{
	for (size_t i = 0; i < sizeof provider_names / sizeof *provider_names; i++)
		if (strcmp(provider_names[i], name) == 0) {
			*out = (enum provider)i;
			return 0;
		}
	return -1;
}

static json_t *str(const char *s, size_t n)
{
	json_t *v = json_stringn(s, n);
	if (!v)
		die("out of memory");
	return v;
}

static json_t *msg_content(json_t *m)
{
	json_t *c = json_object_get(m, "content");
	return str(json_string_value(c), json_string_length(c));
}

static int is_assistant(json_t *m)
{
	return strcmp(json_string_value(json_object_get(m, "role")), "assistant") == 0;
}

/* {role, content} as anthropic and openai both take them. */
static json_t *plain_messages(const struct model_request *rq, int with_system)
{
	json_t *out = json_array(), *m;
	size_t i;
	if (with_system && rq->system_len)
		json_array_append_new(out, json_pack("{s:s,s:o}", "role", "system", "content",
		                                     str(rq->system, rq->system_len)));
	json_array_foreach(rq->messages, i, m)
		json_array_append_new(out, json_pack("{s:s,s:o}", "role",
		                                     is_assistant(m) ? "assistant" : "user",
		                                     "content", msg_content(m)));
	return out;
}

static json_t *body_anthropic(const struct endpoint *ep, const struct model_request *rq)
{
	json_t *b = json_pack("{s:s,s:i,s:o}", "model", ep->cfg->model, "max_tokens",
	                      MODEL_ANTHROPIC_MAX_TOKENS, "messages", plain_messages(rq, 0));
	if (rq->system_len)
		json_object_set_new(b, "system", str(rq->system, rq->system_len));
	return b;
}

static json_t *body_openai(const struct endpoint *ep, const struct model_request *rq)
{
	return json_pack("{s:s,s:o}", "model", ep->cfg->model, "messages", plain_messages(rq, 1));
}

static json_t *body_gemini(const struct model_request *rq)
{
	json_t *contents = json_array(), *m;
	size_t i;
	json_array_foreach(rq->messages, i, m)
		json_array_append_new(contents,
		                      json_pack("{s:s,s:[{s:o}]}", "role", is_assistant(m) ? "model" : "user",
		                                "parts", "text", msg_content(m)));
	json_t *b = json_pack("{s:o}", "contents", contents);
	if (rq->system_len)
		json_object_set_new(b, "system_instruction",
		                    json_pack("{s:[{s:o}]}", "parts", "text", str(rq->system, rq->system_len)));
	return b;
}

static json_t *body_codex(const struct endpoint *ep, const struct model_request *rq)
{
	json_t *input = json_array(), *m;
	size_t i;
	json_array_foreach(rq->messages, i, m) {
		int a = is_assistant(m);
		json_array_append_new(input, json_pack("{s:s,s:s,s:[{s:s,s:o}]}", "type", "message", "role",
		                                       a ? "assistant" : "user", "content", "type",
		                                       a ? "output_text" : "input_text", "text",
		                                       msg_content(m)));
	}
	return json_pack("{s:s,s:o,s:o,s:b,s:b}", "model", ep->cfg->model, "instructions",
	                 str(rq->system, rq->system_len), "input", input, "store", 0, "stream", 1);
}

/* The string at a path of object keys and array indexes, or NULL. */
static json_t *dig(json_t *v, const char *const *path)
{
	for (; *path && v; path++) {
		if (json_is_array(v))
			v = json_array_get(v, (size_t)atoi(*path));
		else
			v = json_object_get(v, *path);
	}
	return json_is_string(v) ? v : NULL;
}

static const char *const anthropic_path[] = {"content", "0", "text", NULL};
static const char *const openai_path[] = {"choices", "0", "message", "content", NULL};
static const char *const gemini_path[] = {"candidates", "0", "content", "parts", "0", "text", NULL};

static int reply_text(enum provider p, const struct http_reply *r, struct buf *text,
                      struct sfma_err *e)
{
	static const char *const *paths[] = {
		[PROV_ANTHROPIC] = anthropic_path, [PROV_OPENAI] = openai_path, [PROV_GEMINI] = gemini_path,
	};
	static const char *const where[] = {
		[PROV_ANTHROPIC] = "content[0].text", [PROV_OPENAI] = "choices[0].message.content",
		[PROV_GEMINI] = "candidates[0].content.parts[0].text",
	};
	if (r->body.len == 0)
		return err_set(e, "empty reply body");
	struct sfma_err pe;
	json_t *doc = json_parse_strict(r->body.p, r->body.len, &pe);
	if (!doc)
		return err_set(e, "reply is not JSON");
	json_t *t = dig(doc, paths[p]);
	int rc = 0;
	if (!t)
		rc = err_set(e, "reply has no %s", where[p]);
	else if (json_string_length(t) == 0)
		rc = err_set(e, "empty reply text");
	else
		buf_add(text, json_string_value(t), json_string_length(t));
	json_decref(doc);
	return rc;
}

static char *url_of(const struct endpoint *ep, const char *path)
{
	const char *base = ep->cfg->base_url ? ep->cfg->base_url : default_base[ep->prov];
	size_t n = strlen(base);
	while (n > 0 && base[n - 1] == '/')
		n--;
	struct buf u = {0};
	buf_add(&u, base, n);
	buf_adds(&u, path);
	return u.p;
}

static char *gemini_url(const struct endpoint *ep, const char *key)
{
	char *model = curl_easy_escape(ep->curl, ep->cfg->model, 0);
	if (!model)
		die("out of memory");
	struct buf path = {0};
	buf_printf(&path, "/v1beta/models/%s:generateContent", model);
	curl_free(model);
	char *url = url_of(ep, path.p);
	buf_free(&path);
	if (!key)
		return url;
	char *k = curl_easy_escape(ep->curl, key, 0);
	if (!k)
		die("out of memory");
	struct buf u = {0};
	buf_printf(&u, "%s?key=%s", url, k);
	explicit_bzero(k, strlen(k));
	curl_free(k);
	free(url);
	return u.p;
}

static struct curl_slist *header(struct curl_slist *h, const char *fmt, const char *value)
{
	struct buf line = {0};
	buf_printf(&line, fmt, value);
	struct curl_slist *n = curl_slist_append(h, line.p);
	explicit_bzero(line.p, line.len);
	buf_free(&line);
	if (!n)
		die("out of memory");
	return n;
}

int provider_call(struct endpoint *ep, const struct model_request *rq, struct buf *text,
                  struct sfma_err *e)
{
	if (ep->prov == PROV_MOCK) {
		mock_reply(rq->reasoning, text);
		return 0;
	}
	const char *bearer = NULL;
	if (ep->oauth && !(bearer = oauth_token(ep, rq->deadline_ms, e)))
		return -1;

	json_t *body = NULL;
	char *url = NULL;
	struct curl_slist *h = header(NULL, "%s", "Content-Type: application/json");
	struct sse *sse = NULL;
	switch (ep->prov) {
	case PROV_ANTHROPIC:
		body = body_anthropic(ep, rq);
		url = url_of(ep, "/v1/messages");
		h = bearer ? header(h, "Authorization: Bearer %s", bearer) : header(h, "x-api-key: %s", ep->key);
		h = header(h, "anthropic-version: %s", "2023-06-01");
		break;
	case PROV_OPENAI:
		body = body_openai(ep, rq);
		url = url_of(ep, "/v1/chat/completions");
		h = header(h, "Authorization: Bearer %s", bearer ? bearer : ep->key);
		break;
	case PROV_GEMINI:
		body = body_gemini(rq);
		url = gemini_url(ep, bearer ? NULL : ep->key);
		if (bearer)
			h = header(h, "Authorization: Bearer %s", bearer);
		break;
	case PROV_CODEX:
		body = body_codex(ep, rq);
		url = url_of(ep, "/responses");
		h = header(h, "Authorization: Bearer %s", bearer ? bearer : ep->key);
		h = header(h, "chatgpt-account-id: %s", ep->account);
		h = header(h, "OpenAI-Beta: %s", "responses=experimental");
		h = header(h, "Accept: %s", "text/event-stream");
		sse = sse_new();
		break;
	case PROV_MOCK:
		break;
	}
	/* Content-Length is set; "Expect: 100-continue" would only add a round trip. */
	h = header(h, "%s", "Expect:");

	struct buf payload = {0};
	if (canon_dump(body, &payload, e) < 0)
		die("cannot serialize a request body"); /* it holds strings only */
	json_decref(body);

	struct http_reply r = {0};
	int rc = http_post(ep->curl, url, h, payload.p, payload.len, rq->deadline_ms, sse, &r, e);
	explicit_bzero(url, strlen(url));
	free(url);
	headers_wipe_free(h);
	buf_free(&payload);
	if (rc == 0 && (r.status < 200 || r.status > 299)) {
		/* A refused token may have been revoked early: fetch anew next time. */
		if ((r.status == 401 || r.status == 403) && ep->oauth)
			oauth_forget(ep);
		rc = http_status_error(&r, e);
	} else if (rc == 0) {
		rc = sse ? sse_result(sse, text, e) : reply_text(ep->prov, &r, text, e);
	}
	sse_free(sse);
	buf_free(&r.body);
	return rc;
}
