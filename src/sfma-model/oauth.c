/* oauth.c - OAuth2 client credentials (RFC 6749 section 4.4).
 *
 * The client id and secret are sent in the form body (client_secret_post),
 * the token is cached per endpoint on the monotonic clock - a wall clock
 * step must neither keep a dead token nor throw away a good one - and is
 * fetched again 60 s before the server said it expires. Requests served at
 * once share the cache: one fetches while the others wait for its token. */
#include "model.h"
#include "ndjson.h"

#include <stdlib.h>
#include <string.h>

/* Refresh this long before expiry, so that a token never dies in flight. */
#define TOKEN_MARGIN_MS 60000LL
/* A token response without expires_in is taken to last an hour. */
#define TOKEN_DEFAULT_TTL_S 3600.0

static void form_field(struct buf *b, CURL *c, const char *key, const char *value)
{
	char *esc = libcurl.easy_escape(c, value, 0);
	if (!esc)
		die("out of memory");
	if (b->len)
		buf_addc(b, '&');
	buf_printf(b, "%s=%s", key, esc);
	explicit_bzero(esc, strlen(esc));
	libcurl.free(esc);
}

static int token_from_reply(struct oauth *o, const struct http_reply *r, struct sfma_err *e)
{
	json_t *doc = ndjson_parse(r->body.p ? r->body.p : "", r->body.len, NULL);
	json_t *tok = json_object_get(doc, "access_token");
	json_t *ttl = json_object_get(doc, "expires_in");
	int rc = -1;
	if (!json_is_object(doc))
		err_set(e, "token endpoint: reply is not a JSON object");
	else if (!json_is_string(tok) || json_string_length(tok) == 0 ||
	         strlen(json_string_value(tok)) != json_string_length(tok))
		err_set(e, "token endpoint: reply has no access_token");
	else if (ttl && (!json_is_number(ttl) || json_number_value(ttl) < 0))
		err_set(e, "token endpoint: expires_in is not a non-negative number");
	else {
		double secs = ttl ? json_number_value(ttl) : TOKEN_DEFAULT_TTL_S;
		if (secs > 366 * 86400.0)
			secs = 366 * 86400.0;
		o->token = xstrdup(json_string_value(tok));
		o->expires_mono_ms = mono_ms() + (long long)(secs * 1000) - TOKEN_MARGIN_MS;
		secret_add(o->token);
		rc = 0;
	}
	json_decref(doc); /* the parsed copy of the token is freed unwiped: jansson owns it */
	return rc;
}

/* The cached token, or a new one (o->lock held). */
static int token_locked(struct oauth *o, CURL *c, long long deadline_ms, struct sfma_err *e)
{
	if (o->token && mono_ms() < o->expires_mono_ms)
		return 0;
	if (o->token) {
		explicit_bzero(o->token, strlen(o->token));
		free(o->token);
		o->token = NULL;
	}
	struct buf form = {0};
	form_field(&form, c, "grant_type", "client_credentials");
	form_field(&form, c, "client_id", o->client_id);
	form_field(&form, c, "client_secret", o->client_secret);
	if (o->scope)
		form_field(&form, c, "scope", o->scope);
	struct curl_slist *h = NULL;
	h = libcurl.slist_append(h, "Content-Type: application/x-www-form-urlencoded");
	h = libcurl.slist_append(h, "Accept: application/json");
	if (!h)
		die("out of memory");

	struct http_reply r = {0};
	int rc = http_post(c, o->token_url, h, form.p, form.len, deadline_ms, NULL, &r, e);
	explicit_bzero(form.p, form.len);
	buf_free(&form);
	libcurl.slist_free_all(h);
	if (rc < 0)
		err_prefix(e, "token endpoint");
	else if (r.status < 200 || r.status > 299) {
		http_status_error(&r, e);
		rc = err_prefix(e, "token endpoint");
	} else
		rc = token_from_reply(o, &r, e);
	if (r.body.p)
		explicit_bzero(r.body.p, r.body.len);
	buf_free(&r.body);
	return rc < 0 ? -1 : 0;
}

char *oauth_token(struct endpoint *ep, CURL *c, long long deadline_ms, struct sfma_err *e)
{
	struct oauth *o = ep->oauth;
	pthread_mutex_lock(&o->lock);
	char *copy = token_locked(o, c, deadline_ms, e) == 0 ? xstrdup(o->token) : NULL;
	pthread_mutex_unlock(&o->lock);
	return copy;
}

void oauth_forget(struct endpoint *ep)
{
	struct oauth *o = ep->oauth;
	if (!o)
		return;
	pthread_mutex_lock(&o->lock);
	if (o->token) {
		explicit_bzero(o->token, strlen(o->token));
		free(o->token);
		o->token = NULL;
	}
	pthread_mutex_unlock(&o->lock);
}

void oauth_free(struct oauth *o)
{
	if (!o)
		return;
	if (o->token) {
		explicit_bzero(o->token, strlen(o->token));
		free(o->token);
	}
	pthread_mutex_destroy(&o->lock);
	free(o);
}
