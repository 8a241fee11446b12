/* providers.c - request shapes and reply shapes of each provider
 * (sfma-model(1)). One attempt = build the body, the URL and the
 * headers, POST, classify the status, pull the text (and, with native
 * tool use, the calls), how the reply ended and the token usage out of
 * the reply (stop.c reads the last two). */
#include "providers.h"
#include "utf8.h"
#include "canon.h"
#include "context.h"
#include "ndjson.h"
#include "tools.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

const char *provider_name(enum provider p)
{
	return provider_names[p];
}

const char *err_class_name(enum err_class c)
{
	static const char *const names[] = {
		[EC_NONE] = NULL, [EC_RATE] = "rate-limited", [EC_TRANSIENT] = "transient",
		[EC_TRANSPORT] = "transport", [EC_CLIENT] = "client", [EC_REPLY] = "reply", [EC_AUTH] = "auth",
		[EC_REFUSAL] = "refusal",
	};
	return names[c];
}

void attempt_free(struct attempt *a)
{
	buf_free(&a->text);
	json_decref(a->native);
	json_decref(a->tool_calls);
	json_decref(a->usage);
	a->native = a->tool_calls = a->usage = NULL;
}

int provider_native(const struct endpoint *ep, const struct model_request *rq)
{
	return rq->tools && ep->prov != PROV_MOCK && !ep->cfg->tool_protocol_text;
}

static json_t *msg_content(json_t *m)
{
	json_t *c = json_object_get(m, "content");
	return utf8_json(json_string_value(c), json_string_length(c));
}

static const char *role_of(json_t *m)
{
	return json_string_value(json_object_get(m, "role"));
}

static int is_assistant(json_t *m)
{
	return strcmp(role_of(m), "assistant") == 0;
}

static int is_tool(json_t *m)
{
	return strcmp(role_of(m), "tool") == 0;
}

/* An assistant message's calls, or NULL when it made none. */
static json_t *calls_of(json_t *m)
{
	json_t *c = json_object_get(m, "toolCalls");
	return json_array_size(c) ? c : NULL;
}

static json_t *canon_string_of(json_t *v)
{
	struct buf b = {0};
	/* Numbers in the messages came through the strict reader: finite. */
	if (canon_dump(v, &b, NULL) < 0)
		die("cannot serialize a tool call");
	json_t *s = utf8_json(b.p ? b.p : "", b.len);
	buf_free(&b);
	return s;
}

/* The text a message is for an endpoint without native tool use: an
 * assistant message with calls is its content, else the canonical call
 * object of its first call; a tool message is its first result. */
static json_t *text_of(json_t *m)
{
	json_t *calls = calls_of(m);
	if (is_tool(m)) {
		json_t *first = json_array_get(json_object_get(m, "results"), 0);
		return msg_content(first);
	}
	if (!calls || json_string_length(json_object_get(m, "content")) > 0)
		return msg_content(m);
	json_t *c = json_array_get(calls, 0);
	json_t *obj = json_deep_copy(json_object_get(c, "input"));
	json_object_set(obj, "tool", json_object_get(c, "name"));
	json_t *s = canon_string_of(obj);
	json_decref(obj);
	return s;
}

/* {role, content} as anthropic and openai both take them, all text. */
static json_t *plain_messages(const struct model_request *rq, int with_system)
{
	json_t *out = json_array(), *m;
	size_t i;
	if (with_system && rq->system_len)
		json_array_append_new(out, json_pack("{s:s,s:o}", "role", "system", "content",
		                                     utf8_json(rq->system, rq->system_len)));
	json_array_foreach(rq->messages, i, m)
		json_array_append_new(out, json_pack("{s:s,s:o}", "role",
		                                     is_assistant(m) ? "assistant" : "user",
		                                     "content", text_of(m)));
	return out;
}

/* ---- anthropic ---------------------------------------------------------- */

/* Prompt caching (Anthropic's prompt caching guide): the cache holds the
 * prefix of a request in the order tools, system, messages, up to each
 * block marked cache_control, at most 4 marks a request. Up to four are
 * made: the last tool definition, the system prompt, the last block of
 * the newest compaction stub (lib/context.h) and the newest message's
 * last block. The next request finds the prefix the last one wrote; the
 * next compaction's, which replaces results after the stubs already
 * there and agrees with this one up to them, finds the prefix that ends
 * at the newest stub, where nothing else would be written. Every
 * message's content is an array of blocks whether or not it is the newest,
 * so that a message reads the same in every later request but for its
 * mark: the cache matches the prefix exactly. */
static json_t *ephemeral(void)
{
	return json_pack("{s:s}", "type", "ephemeral");
}

static json_t *text_blocks(json_t *text)
{
	/* Anthropic refuses an empty text block: an empty content stays "". */
	if (json_string_length(text) == 0)
		return text;
	json_t *blocks = json_pack("[{s:s,s:O}]", "type", "text", "text", text);
	json_decref(text);
	return blocks;
}

static void mark_last_block(json_t *message)
{
	json_t *content = json_object_get(message, "content");
	json_t *block = json_array_get(content, json_array_size(content) - 1);
	if (json_is_object(block))
		json_object_set_new(block, "cache_control", ephemeral());
}

static json_t *anthropic_messages(const struct model_request *rq, int native)
{
	json_t *out = json_array(), *m;
	size_t i, newest_stub = (size_t)-1;
	json_array_foreach(rq->messages, i, m) {
		json_t *calls = native ? calls_of(m) : NULL, *c;
		if (context_is_stub(m))
			newest_stub = i;
		size_t j;
		if (native && is_tool(m)) {
			json_t *blocks = json_array();
			json_array_foreach(json_object_get(m, "results"), j, c)
				json_array_append_new(blocks, json_pack("{s:s,s:O,s:o}", "type", "tool_result",
				                                        "tool_use_id", json_object_get(c, "id"),
				                                        "content", msg_content(c)));
			json_array_append_new(out, json_pack("{s:s,s:o}", "role", "user", "content", blocks));
		} else if (calls) {
			json_t *blocks = json_array();
			if (json_string_length(json_object_get(m, "content")) > 0)
				json_array_append_new(blocks, json_pack("{s:s,s:o}", "type", "text", "text", msg_content(m)));
			json_array_foreach(calls, j, c)
				json_array_append_new(blocks, json_pack("{s:s,s:O,s:O,s:O}", "type", "tool_use", "id",
				                                        json_object_get(c, "id"), "name",
				                                        json_object_get(c, "name"), "input",
				                                        json_object_get(c, "input")));
			json_array_append_new(out, json_pack("{s:s,s:o}", "role", "assistant", "content", blocks));
		} else {
			json_t *text = native ? msg_content(m) : text_of(m);
			json_array_append_new(out, json_pack("{s:s,s:o}", "role", is_assistant(m) ? "assistant" : "user",
			                                     "content", text_blocks(text)));
		}
	}
	size_t n = json_array_size(out);
	/* The model's message after the newest stub too, when there is one
	 * before the newest: the next compaction replaces the result that
	 * answers it, not it. */
	size_t stable = newest_stub;
	if (newest_stub != (size_t)-1 && newest_stub + 2 < n && is_assistant(json_array_get(rq->messages, newest_stub + 1)))
		stable = newest_stub + 1;
	if (stable != (size_t)-1 && stable + 1 < n)
		mark_last_block(json_array_get(out, stable));
	mark_last_block(json_array_get(out, n - 1));
	return out;
}

static json_t *body_anthropic(const struct endpoint *ep, const struct model_request *rq, int native)
{
	json_t *b = json_pack("{s:s,s:I,s:o}", "model", ep->cfg->model, "max_tokens",
	                      (json_int_t)ep->cfg->max_output_tokens, "messages", anthropic_messages(rq, native));
	if (rq->system_len)
		json_object_set_new(b, "system", json_pack("[{s:s,s:o,s:o}]", "type", "text", "text",
		                                           utf8_json(rq->system, rq->system_len), "cache_control",
		                                           ephemeral()));
	if (native) {
		json_t *defs = tools_definitions(), *d, *tools = json_array();
		size_t i;
		json_array_foreach(defs, i, d)
			json_array_append_new(tools, json_pack("{s:O,s:O,s:O}", "name", json_object_get(d, "name"),
			                                       "description", json_object_get(d, "description"),
			                                       "input_schema", json_object_get(d, "parameters")));
		json_decref(defs);
		json_t *last = json_array_get(tools, json_array_size(tools) - 1);
		if (last)
			json_object_set_new(last, "cache_control", ephemeral());
		json_object_set_new(b, "tools", tools);
	}
	return b;
}

/* ---- openai ------------------------------------------------------------- */

static json_t *openai_native_messages(const struct model_request *rq)
{
	json_t *out = json_array(), *m;
	size_t i;
	if (rq->system_len)
		json_array_append_new(out, json_pack("{s:s,s:o}", "role", "system", "content",
		                                     utf8_json(rq->system, rq->system_len)));
	json_array_foreach(rq->messages, i, m) {
		json_t *calls = calls_of(m), *c;
		size_t j;
		if (is_tool(m)) {
			json_array_foreach(json_object_get(m, "results"), j, c)
				json_array_append_new(out, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id",
				                                     json_object_get(c, "id"), "content", msg_content(c)));
		} else if (calls) {
			json_t *tc = json_array();
			json_array_foreach(calls, j, c)
				json_array_append_new(tc, json_pack("{s:O,s:s,s:{s:O,s:o}}", "id", json_object_get(c, "id"),
				                                    "type", "function", "function", "name",
				                                    json_object_get(c, "name"), "arguments",
				                                    canon_string_of(json_object_get(c, "input"))));
			json_t *content = json_string_length(json_object_get(m, "content")) ? msg_content(m) : json_null();
			json_array_append_new(out, json_pack("{s:s,s:o,s:o}", "role", "assistant", "content", content,
			                                     "tool_calls", tc));
		} else {
			json_array_append_new(out, json_pack("{s:s,s:o}", "role", is_assistant(m) ? "assistant" : "user",
			                                     "content", msg_content(m)));
		}
	}
	return out;
}

static json_t *body_openai(const struct endpoint *ep, const struct model_request *rq, int native)
{
	/* prompt_cache_key: OpenAI routes requests that share it to the same
	 * prompt cache (a run's requests share their prefix, its later runs
	 * the system prompt and tools). */
	json_t *b = json_pack("{s:s,s:o,s:I,s:s}", "model", ep->cfg->model, "messages",
	                      native ? openai_native_messages(rq) : plain_messages(rq, 1),
	                      "max_completion_tokens", (json_int_t)ep->cfg->max_output_tokens, "prompt_cache_key",
	                      ep->cache_key);
	if (native) {
		json_t *defs = tools_definitions(), *d, *tools = json_array();
		size_t i;
		json_array_foreach(defs, i, d)
			json_array_append_new(tools, json_pack("{s:s,s:O}", "type", "function", "function", d));
		json_decref(defs);
		json_object_set_new(b, "tools", tools);
	}
	return b;
}

/* ---- gemini ------------------------------------------------------------- */

static json_t *gemini_text_part(json_t *m)
{
	return json_pack("{s:o}", "text", text_of(m));
}

/* A call id worth sending back: one gemini gave, not one numbered here. */
static int gemini_given_id(json_t *id)
{
	const char *s = json_string_value(id);
	return s && strncmp(s, TOOLS_GEMINI_ID_PREFIX, strlen(TOOLS_GEMINI_ID_PREFIX)) != 0;
}

/* Gemini's thought signatures. A functionCall part may come with a
 * "thoughtSignature" that gemini insists on getting back with that part
 * in the history (its thinking models refuse the request without it),
 * but the planner hands calls back as {id,name,input} only. So the stage
 * keeps, for the length of its process (one run), the signature of each
 * call it was given, keyed by the canonical {name,args}, and puts it back
 * on the part it renders. Bounded: the oldest are forgotten first. */
#define GEMINI_SIGNATURES_MAX 256
/* Requests are served at once: the signatures are shared under this. */
static pthread_mutex_t gemini_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *gemini_signatures; /* {"<canonical {args,name}>": signature} */
static json_t *gemini_signature_order; /* keys, oldest first */

static char *gemini_call_key(json_t *name, json_t *args)
{
	json_t *o = json_pack("{s:O,s:O}", "name", name, "args", args ? args : json_object());
	struct buf b = {0};
	canon_dump(o, &b, NULL);
	json_decref(o);
	return b.p ? b.p : xstrdup("");
}

static void gemini_remember(json_t *native)
{
	json_t *part;
	size_t i;
	pthread_mutex_lock(&gemini_lock);
	json_array_foreach(native, i, part) {
		json_t *sig = json_object_get(part, "thoughtSignature"), *fc = json_object_get(part, "functionCall");
		if (!json_is_string(sig))
			continue;
		if (!gemini_signatures) {
			gemini_signatures = json_object();
			gemini_signature_order = json_array();
		}
		char *key = gemini_call_key(json_object_get(fc, "name"), json_object_get(fc, "args"));
		if (!json_object_get(gemini_signatures, key))
			json_array_append_new(gemini_signature_order, json_string(key));
		/* A copy: the reply keeps its own, owned by another thread. */
		json_object_set_new(gemini_signatures, key, json_deep_copy(sig));
		free(key);
		while (json_array_size(gemini_signature_order) > GEMINI_SIGNATURES_MAX) {
			json_object_del(gemini_signatures, json_string_value(json_array_get(gemini_signature_order, 0)));
			json_array_remove(gemini_signature_order, 0);
		}
	}
	pthread_mutex_unlock(&gemini_lock);
}

void provider_free_all(void)
{
	json_decref(gemini_signatures);
	json_decref(gemini_signature_order);
	gemini_signatures = gemini_signature_order = NULL;
}

static json_t *gemini_native_content(json_t *m)
{
	json_t *calls = calls_of(m), *c, *parts = json_array();
	size_t j;
	if (is_tool(m)) {
		json_array_foreach(json_object_get(m, "results"), j, c) {
			json_t *fr = json_pack("{s:O,s:{s:o}}", "name", json_object_get(c, "name"), "response", "result",
			                       msg_content(c));
			if (gemini_given_id(json_object_get(c, "id")))
				json_object_set(fr, "id", json_object_get(c, "id"));
			json_array_append_new(parts, json_pack("{s:o}", "functionResponse", fr));
		}
		return json_pack("{s:s,s:o}", "role", "user", "parts", parts);
	}
	if (!calls) {
		json_array_append_new(parts, json_pack("{s:o}", "text", msg_content(m)));
		return json_pack("{s:s,s:o}", "role", is_assistant(m) ? "model" : "user", "parts", parts);
	}
	if (json_string_length(json_object_get(m, "content")) > 0)
		json_array_append_new(parts, json_pack("{s:o}", "text", msg_content(m)));
	json_array_foreach(calls, j, c) {
		json_t *fc = json_pack("{s:O,s:O}", "name", json_object_get(c, "name"), "args",
		                       json_object_get(c, "input"));
		if (gemini_given_id(json_object_get(c, "id")))
			json_object_set(fc, "id", json_object_get(c, "id"));
		json_t *part = json_pack("{s:o}", "functionCall", fc);
		pthread_mutex_lock(&gemini_lock);
		if (gemini_signatures) {
			char *key = gemini_call_key(json_object_get(c, "name"), json_object_get(c, "input"));
			json_t *sig = json_object_get(gemini_signatures, key);
			if (sig)
				json_object_set_new(part, "thoughtSignature", json_deep_copy(sig));
			free(key);
		}
		pthread_mutex_unlock(&gemini_lock);
		json_array_append_new(parts, part);
	}
	return json_pack("{s:s,s:o}", "role", "model", "parts", parts);
}

static json_t *body_gemini(const struct endpoint *ep, const struct model_request *rq, int native)
{
	json_t *contents = json_array(), *m;
	size_t i;
	json_array_foreach(rq->messages, i, m)
		json_array_append_new(contents, native ? gemini_native_content(m)
		                                       : json_pack("{s:s,s:[o]}", "role",
		                                                   is_assistant(m) ? "model" : "user", "parts",
		                                                   gemini_text_part(m)));
	json_t *b = json_pack("{s:o,s:{s:I}}", "contents", contents, "generationConfig", "maxOutputTokens",
	                      (json_int_t)ep->cfg->max_output_tokens);
	if (rq->system_len)
		json_object_set_new(b, "system_instruction",
		                    json_pack("{s:[{s:o}]}", "parts", "text", utf8_json(rq->system, rq->system_len)));
	if (native)
		json_object_set_new(b, "tools", json_pack("[{s:o}]", "functionDeclarations", tools_definitions()));
	return b;
}

/* ---- codex -------------------------------------------------------------- */

static json_t *codex_message(int assistant, json_t *text)
{
	return json_pack("{s:s,s:s,s:[{s:s,s:o}]}", "type", "message", "role", assistant ? "assistant" : "user",
	                 "content", "type", assistant ? "output_text" : "input_text", "text", text);
}

static json_t *body_codex(const struct endpoint *ep, const struct model_request *rq, int native)
{
	json_t *input = json_array(), *m;
	size_t i;
	json_array_foreach(rq->messages, i, m) {
		json_t *calls = calls_of(m), *c;
		size_t j;
		if (!native || (!calls && !is_tool(m))) {
			json_array_append_new(input, codex_message(is_assistant(m), native ? msg_content(m) : text_of(m)));
		} else if (is_tool(m)) {
			json_array_foreach(json_object_get(m, "results"), j, c)
				json_array_append_new(input, json_pack("{s:s,s:O,s:o}", "type", "function_call_output",
				                                       "call_id", json_object_get(c, "id"), "output",
				                                       msg_content(c)));
		} else {
			if (json_string_length(json_object_get(m, "content")) > 0)
				json_array_append_new(input, codex_message(1, msg_content(m)));
			json_array_foreach(calls, j, c)
				json_array_append_new(input, json_pack("{s:s,s:O,s:O,s:o}", "type", "function_call", "call_id",
				                                       json_object_get(c, "id"), "name",
				                                       json_object_get(c, "name"), "arguments",
				                                       canon_string_of(json_object_get(c, "input"))));
		}
	}
	/* No max_output_tokens: the ChatGPT codex backend refuses the
	 * parameter ("Unsupported parameter: max_output_tokens", HTTP 400).
	 * A Responses function tool is strict unless it says not: strict
	 * would demand a schema with every property required and
	 * additionalProperties false, which recall's optional members are not. */
	json_t *b = json_pack("{s:s,s:o,s:o,s:b,s:b,s:s}", "model", ep->cfg->model, "instructions",
	                      utf8_json(rq->system, rq->system_len), "input", input, "store", 0, "stream", 1,
	                      "prompt_cache_key", ep->cache_key);
	if (native) {
		json_t *defs = tools_definitions(), *d, *tools = json_array();
		json_array_foreach(defs, i, d)
			json_array_append_new(tools, json_pack("{s:s,s:O,s:O,s:O,s:b}", "type", "function", "name",
			                                       json_object_get(d, "name"), "description",
			                                       json_object_get(d, "description"), "parameters",
			                                       json_object_get(d, "parameters"), "strict", 0));
		json_decref(defs);
		json_object_set_new(b, "tools", tools);
	}
	return b;
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

/* The text at the provider's path of a reply that did not offer the tools. */
int provider_reply_text(enum provider p, json_t *doc, struct buf *text, struct sfma_err *e)
{
	static const char *const *paths[] = {
		[PROV_ANTHROPIC] = anthropic_path, [PROV_OPENAI] = openai_path, [PROV_GEMINI] = gemini_path,
	};
	static const char *const where[] = {
		[PROV_ANTHROPIC] = "content[0].text", [PROV_OPENAI] = "choices[0].message.content",
		[PROV_GEMINI] = "candidates[0].content.parts[0].text",
	};
	json_t *t = dig(doc, paths[p]);
	if (!t)
		return err_set(e, "reply has no %s", where[p]);
	if (json_string_length(t) == 0)
		return err_set(e, "empty reply text");
	buf_add(text, json_string_value(t), json_string_length(t));
	return 0;
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

static char *gemini_url(const struct endpoint *ep, CURL *c, const char *key)
{
	char *model = libcurl.easy_escape(c, ep->cfg->model, 0);
	if (!model)
		die("out of memory");
	struct buf path = {0};
	buf_printf(&path, "/v1beta/models/%s:generateContent", model);
	libcurl.free(model);
	char *url = url_of(ep, path.p);
	buf_free(&path);
	if (!key)
		return url;
	char *k = libcurl.easy_escape(c, key, 0);
	if (!k)
		die("out of memory");
	struct buf u = {0};
	buf_printf(&u, "%s?key=%s", url, k);
	explicit_bzero(k, strlen(k));
	libcurl.free(k);
	free(url);
	return u.p;
}

static struct curl_slist *header(struct curl_slist *h, const char *fmt, const char *value)
{
	struct buf line = {0};
	buf_printf(&line, fmt, value);
	struct curl_slist *n = libcurl.slist_append(h, line.p);
	explicit_bzero(line.p, line.len);
	buf_free(&line);
	if (!n)
		die("out of memory");
	return n;
}

/* ---- replies with native tool use --------------------------------------- */

/* Append the text members of the parts (gemini parts, anthropic blocks)
 * that carry text, skipping a model's thoughts. */
static void join_text(json_t *parts, const char *type_must, struct buf *text)
{
	json_t *p;
	size_t i;
	json_array_foreach(parts, i, p) {
		const char *type = json_string_value(json_object_get(p, "type"));
		json_t *t = json_object_get(p, "text");
		if (type_must && (!type || strcmp(type, type_must) != 0))
			continue;
		if (json_is_true(json_object_get(p, "thought")) || !json_is_string(t))
			continue;
		buf_add(text, json_string_value(t), json_string_length(t));
	}
}

/* The calls among the parts: a block of the type, or a part holding the
 * member; each kept whole, exactly as received. */
static json_t *pick_calls(json_t *parts, const char *type, const char *member)
{
	json_t *out = NULL, *p;
	size_t i;
	json_array_foreach(parts, i, p) {
		const char *t = json_string_value(json_object_get(p, "type"));
		int hit = type ? t && strcmp(t, type) == 0 : json_object_get(p, member) != NULL;
		if (!hit)
			continue;
		if (!out)
			out = json_array();
		json_array_append(out, p);
	}
	return out;
}

/* A 2xx body of a request that offered the tools: its text (possibly
 * empty when it made calls) and its calls, as received. */
int provider_reply_native(enum provider p, json_t *doc, struct buf *text, json_t **native, struct sfma_err *e)
{
	*native = NULL;
	switch (p) {
	case PROV_ANTHROPIC: {
		json_t *content = json_object_get(doc, "content");
		if (!json_is_array(content))
			return err_set(e, "reply has no content[]");
		join_text(content, "text", text);
		*native = pick_calls(content, "tool_use", NULL);
		break;
	}
	case PROV_OPENAI: {
		json_t *msg = json_object_get(json_array_get(json_object_get(doc, "choices"), 0), "message");
		json_t *content = json_object_get(msg, "content"), *calls = json_object_get(msg, "tool_calls");
		if (!json_is_object(msg))
			return err_set(e, "reply has no choices[0].message");
		if (json_is_string(content))
			buf_add(text, json_string_value(content), json_string_length(content));
		if (calls && !json_is_null(calls) && !json_is_array(calls))
			return err_set(e, "bad tool call: tool_calls is not an array");
		if (json_array_size(calls))
			*native = json_incref(calls);
		break;
	}
	case PROV_GEMINI: {
		json_t *parts = json_object_get(json_object_get(json_array_get(json_object_get(doc, "candidates"), 0),
		                                                "content"), "parts");
		if (!json_is_array(parts))
			return err_set(e, "reply has no candidates[0].content.parts");
		join_text(parts, NULL, text);
		*native = pick_calls(parts, NULL, "functionCall");
		break;
	}
	case PROV_CODEX: /* streamed: sse_calls */
	case PROV_MOCK:
		break;
	}
	if (!*native && text->len == 0)
		return err_set(e, "reply has neither text nor a tool call");
	return 0;
}

/* ---- one attempt -------------------------------------------------------- */

static enum err_class status_class(long status)
{
	switch (status) {
	case 429: case 503: case 529: return EC_RATE;
	case 408: case 500: case 502: case 504: return EC_TRANSIENT;
	case 401: case 403: return EC_AUTH;
	default: return EC_CLIENT;
	}
}

/* The calls of a native reply checked and mapped (tools_from_native).
 * A server that echoes a key back in its answer must not put it in the
 * trace: the text and the calls lose every known secret value first. */
int provider_take_calls(struct endpoint *ep, struct attempt *a)
{
	secret_redact_text(&a->text);
	if (!a->native)
		return 0;
	secret_redact_json(a->native);
	a->tool_calls = tools_from_native(provider_names[ep->prov], a->native, &a->e);
	if (!a->tool_calls) {
		err_prefix(&a->e, "bad tool call");
		return -1;
	}
	return 0;
}

static size_t tool_table_bytes;

static void count_tool_table(void)
{
	json_t *defs = tools_definitions();
	if (canon_size(defs, &tool_table_bytes, NULL) < 0)
		die("cannot serialize the tool definitions"); /* constants of lib/tools.c */
	json_decref(defs);
}

/* What a mock request weighs: the length of the canonical {"messages":..,
 * "system":.., "tools":..} (tools when offered), counted rather than
 * written out - every request carries the whole conversation so far; the
 * tool table's share, the same every time, is counted once. */
static size_t mock_request_bytes(const struct model_request *rq)
{
	size_t messages;
	if (canon_size(rq->messages, &messages, NULL) < 0)
		die("cannot serialize a request"); /* the strict reader admits finite numbers only */
	size_t n = strlen("{\"messages\":") + messages + strlen(",\"system\":") +
	           canon_string_size(rq->system, rq->system_len) + strlen("}");
	if (rq->tools) {
		static pthread_once_t counted = PTHREAD_ONCE_INIT;
		pthread_once(&counted, count_tool_table);
		n += strlen(",\"tools\":") + tool_table_bytes;
	}
	return n;
}

/* What an answer that came whole is, now that its end is known (st, the
 * word in a->stop_reason; why, the provider's text of a refusal):
 *  - refused or filtered: a failed attempt of class refusal, the provider's
 *    text (else its word) kept as a->text, for the reply that may end up
 *    carrying it;
 *  - an invalid end (gemini MALFORMED_FUNCTION_CALL): a bad reply;
 *  - cut off (length): a success with whatever text and calls came, the
 *    calls dropped when they do not even derive (arguments cut mid-JSON);
 *  - else a success that needs a text or a call (rc, e: what extracting
 *    them said), end or tool by whether it made calls. */
static int settle(struct endpoint *ep, struct attempt *a, enum stop_class st, struct buf *why, int rc)
{
	switch (st) {
	case STOP_REFUSAL:
	case STOP_FILTER:
		json_decref(a->native);
		a->native = NULL;
		if (why->len == 0)
			buf_add(why, a->text.p ? a->text.p : "", a->text.len);
		if (why->len == 0)
			buf_printf(why, "%s", a->stop_reason[0] ? a->stop_reason : "no reason given");
		buf_reset(&a->text);
		buf_add(&a->text, why->p, why->len);
		secret_redact_text(&a->text);
		a->stop = st;
		a->cls = EC_REFUSAL;
		return err_set(&a->e, "%s (%s): %.*s", st == STOP_REFUSAL ? "refused" : "filtered",
		               a->stop_reason[0] ? a->stop_reason : "no stop reason",
		               (int)(a->text.len < 300 ? a->text.len : 300), a->text.p);
	case STOP_INVALID:
		a->cls = EC_REPLY;
		return err_set(&a->e, "invalid reply (%s)%s%.*s", a->stop_reason, why->len ? ": " : "",
		               (int)(why->len < 300 ? why->len : 300), why->p ? why->p : "");
	case STOP_LENGTH:
		a->stop = STOP_LENGTH;
		if (provider_take_calls(ep, a) < 0) {
			json_decref(a->native);
			json_decref(a->tool_calls);
			a->native = a->tool_calls = NULL;
		}
		return 0;
	case STOP_NONE:
	case STOP_END:
	case STOP_TOOL:
		break;
	}
	if (rc < 0 || provider_take_calls(ep, a) < 0) {
		a->cls = EC_REPLY;
		return -1;
	}
	a->stop = a->native ? STOP_TOOL : STOP_END;
	return 0;
}

/* The 2xx body of a JSON provider: its usage, how it ended, its text (and
 * calls). A reply that was cut off or refused may lack the text or the
 * calls a whole one must have: what is there is taken. */
int provider_parse_body(struct endpoint *ep, int native, const struct http_reply *r, struct attempt *a)
{
	if (r->body.len == 0) {
		a->cls = EC_REPLY;
		return err_set(&a->e, "empty reply body");
	}
	json_t *doc = ndjson_parse(r->body.p, r->body.len, NULL);
	if (!doc) {
		a->cls = EC_REPLY;
		return err_set(&a->e, "reply is not JSON");
	}
	a->usage = usage_of(ep->prov, doc);
	struct buf why = {0};
	enum stop_class st = stop_of_body(ep->prov, doc, a->stop_reason, &why);
	int rc = native ? provider_reply_native(ep->prov, doc, &a->text, &a->native, &a->e)
	                : provider_reply_text(ep->prov, doc, &a->text, &a->e);
	json_decref(doc);
	rc = settle(ep, a, st, &why, rc);
	buf_free(&why);
	if (rc == 0 && ep->prov == PROV_GEMINI)
		gemini_remember(a->native);
	return rc;
}

/* A stream that failed (a response.failed or error event), classed as the
 * HTTP answer it stands for, as the Codex CLI does: a rate limit waits
 * the "try again in" its message names; a server error backs off (and
 * counts toward down); a context, quota or plan limit falls over at once;
 * anything else is a bad reply. */
static void stream_failure(struct sse *sse, struct attempt *a)
{
	static const char *const at_once[] = {
		"context_length_exceeded", "insufficient_quota", "usage_not_included", "invalid_prompt", NULL,
	};
	const char *code = sse_error_code(sse);
	a->cls = EC_REPLY;
	if (strcmp(code, "rate_limit_exceeded") == 0) {
		a->cls = EC_RATE;
		a->retry_after_ms = wait_in_message(sse_error_message(sse));
	} else if (strcmp(code, "server_error") == 0 || strcmp(code, "server_is_overloaded") == 0) {
		a->cls = EC_TRANSIENT;
		a->fault = 1;
	}
	for (size_t i = 0; at_once[i]; i++)
		if (strcmp(code, at_once[i]) == 0)
			a->cls = EC_CLIENT;
}

/* A codex stream that came to its end: its usage, then as provider_parse_body. */
int provider_parse_stream(struct endpoint *ep, int native, struct sse *sse, struct attempt *a)
{
	json_t *u = sse_usage(sse);
	a->usage = usage_of(PROV_CODEX, u);
	json_decref(u);
	int rc = sse_result(sse, &a->text, &a->e);
	if (rc < 0 && sse_error_message(sse)[0]) {
		stream_failure(sse, a);
		return -1;
	}
	if (rc < 0) {
		a->cls = EC_REPLY;
		return -1;
	}
	struct buf why = {0};
	enum stop_class st = sse_stop(sse, a->stop_reason, &why);
	if (native)
		a->native = sse_calls(sse);
	if (!a->native && a->text.len == 0)
		rc = err_set(&a->e, "empty reply text");
	rc = settle(ep, a, st, &why, rc);
	buf_free(&why);
	return rc;
}

/* SFMA_MOCK_LATENCY_MS, slept by this request's own thread (never past
 * its deadline): the others go on meanwhile. */
static void mock_delay(const struct model_request *rq)
{
	long long ms = mock_latency_ms(), left = rq->deadline_ms - wall_ms();
	if (left < ms)
		ms = left;
	sleep_ms(ms);
}

static int http_call(struct endpoint *ep, CURL *c, const struct model_request *rq, struct attempt *a);

int provider_call(struct endpoint *ep, const struct model_request *rq, const struct buf *drawn,
                  struct attempt *a)
{
	a->retry_after_ms = -1;
	if (ep->prov == PROV_MOCK) {
		a->request_bytes = mock_request_bytes(rq);
		if (drawn)
			buf_add(&a->text, drawn->p ? drawn->p : "", drawn->len);
		else
			mock_reply(rq, &a->text);
		mock_delay(rq);
		return 0;
	}
	/* The first attempt that needs HTTP loads libcurl; without it the
	 * endpoint cannot be reached, as when its host cannot be. */
	if (curl_load(&a->e) < 0) {
		a->cls = EC_TRANSPORT;
		a->fault = 1;
		return -1;
	}
	CURL *c = endpoint_handle(ep);
	int rc = http_call(ep, c, rq, a);
	endpoint_handle_back(ep, c);
	return rc;
}

static int http_call(struct endpoint *ep, CURL *c, const struct model_request *rq, struct attempt *a)
{
	char *bearer = NULL;
	if (ep->oauth && !(bearer = oauth_token(ep, c, rq->deadline_ms, &a->e))) {
		a->cls = EC_AUTH;
		return -1;
	}
	int native = provider_native(ep, rq);

	json_t *body = NULL;
	char *url = NULL;
	struct curl_slist *h = header(NULL, "%s", "Content-Type: application/json");
	struct sse *sse = NULL;
	switch (ep->prov) {
	case PROV_ANTHROPIC:
		body = body_anthropic(ep, rq, native);
		url = url_of(ep, "/v1/messages");
		h = bearer ? header(h, "Authorization: Bearer %s", bearer) : header(h, "x-api-key: %s", ep->key);
		h = header(h, "anthropic-version: %s", "2023-06-01");
		break;
	case PROV_OPENAI:
		body = body_openai(ep, rq, native);
		url = url_of(ep, "/v1/chat/completions");
		h = header(h, "Authorization: Bearer %s", bearer ? bearer : ep->key);
		break;
	case PROV_GEMINI:
		body = body_gemini(ep, rq, native);
		url = gemini_url(ep, c, bearer ? NULL : ep->key);
		if (bearer)
			h = header(h, "Authorization: Bearer %s", bearer);
		break;
	case PROV_CODEX:
		body = body_codex(ep, rq, native);
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
	if (canon_dump(body, &payload, &a->e) < 0)
		die("cannot serialize a request body"); /* strings, and numbers the strict reader took */
	json_decref(body);
	a->request_bytes = payload.len;

	struct http_reply r = {0};
	int rc = http_post(c, url, h, payload.p, payload.len, rq->deadline_ms, sse, &r, &a->e);
	explicit_bzero(url, strlen(url));
	free(url);
	if (bearer) {
		explicit_bzero(bearer, strlen(bearer));
		free(bearer);
	}
	headers_wipe_free(h);
	buf_free(&payload);
	a->status = rc == 0 ? r.status : 0;
	a->retry_after_ms = r.retry_after_ms;
	a->no_retry = rc == 0 && r.should_retry == 0;
	if (rc < 0) {
		a->cls = rc == -2 ? EC_REPLY : EC_TRANSPORT;
		a->fault = a->cls == EC_TRANSPORT;
		rc = -1;
	} else if (r.status < 200 || r.status > 299) {
		a->cls = status_class(r.status);
		a->fault = r.status == 500 || r.status == 502 || r.status == 503 || r.status == 504 || r.status == 529;
		/* A refused token may have been revoked early: fetch anew next time. */
		if (a->cls == EC_AUTH && ep->oauth)
			oauth_forget(ep);
		rc = http_status_error(&r, &a->e);
	} else if (sse) {
		rc = provider_parse_stream(ep, native, sse, a);
	} else {
		rc = provider_parse_body(ep, native, &r, a);
	}
	sse_free(sse);
	buf_free(&r.body);
	return rc;
}
