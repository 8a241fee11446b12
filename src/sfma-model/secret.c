/* secret.c - keeping keys and tokens out of every message.
 *
 * Errors quote what servers and libcurl say, and a server may echo a key
 * back ("invalid key sk-..."). So every error passes secret_scrub before it
 * leaves the process, which applies three rules in order:
 *   1. each copy of a known secret value becomes [redacted];
 *   2. so does the value of any key= query parameter (gemini carries its
 *      key in the URL, and a server may quote a URL);
 *   3. so does any piece of a known secret that is left: a message clipped
 *      somewhere (an excerpt, err_set's buffer, libcurl's error buffer) can
 *      cut a key in two, and neither half is the key. Any run of
 *      SECRET_FRAGMENT_MIN or more bytes found inside a secret is replaced,
 *      and so is a shorter run (SECRET_MIN_LEN or more) that ends the text
 *      and begins a secret, the piece a clip at the end leaves. */
#include "model.h"
#include "utf8.h"

#include <stdlib.h>
#include <string.h>

/* Requests are served by several threads, and a token fetched by one
 * becomes a secret while others scrub: every public entry holds this
 * (recursive: secret_redact_json nests). */
static pthread_mutex_t secrets_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static char **secrets;
static size_t n_secrets;
static size_t longest;           /* length of the longest secret */

/* Shorter values would match ordinary words; no real credential is this short. */
#define SECRET_MIN_LEN 4
/* A run this long found inside a random credential is a piece of it, not a
 * word of the message (a credential's fixed prefix such as "sk-ant-a" is
 * redacted too: it only says which key was shown). */
#define SECRET_FRAGMENT_MIN 8
#define REDACTED SECRET_REDACTED

void secret_add(const char *value)
{
	if (!value || strlen(value) < SECRET_MIN_LEN)
		return;
	pthread_mutex_lock(&secrets_lock);
	size_t i = 0;
	while (i < n_secrets && strcmp(secrets[i], value) != 0)
		i++;
	if (i == n_secrets) {
		secrets = xrealloc(secrets, (n_secrets + 1) * sizeof *secrets);
		secrets[n_secrets++] = xstrdup(value);
		if (strlen(value) > longest)
			longest = strlen(value);
	}
	pthread_mutex_unlock(&secrets_lock);
}

void secret_free_all(void)
{
	pthread_mutex_lock(&secrets_lock);
	for (size_t i = 0; i < n_secrets; i++) {
		explicit_bzero(secrets[i], strlen(secrets[i]));
		free(secrets[i]);
	}
	free(secrets);
	secrets = NULL;
	n_secrets = longest = 0;
	pthread_mutex_unlock(&secrets_lock);
}

/* Rule 1: replace every occurrence of needle in b by REDACTED. */
static void replace_all(struct buf *b, const char *needle)
{
	size_t nl = strlen(needle);
	char *hit;
	size_t from = 0;
	while (b->len >= nl && (hit = memmem(b->p + from, b->len - from, needle, nl))) {
		struct buf out = {0};
		size_t at = (size_t)(hit - b->p);
		buf_add(&out, b->p, at);
		buf_adds(&out, REDACTED);
		buf_add(&out, hit + nl, b->len - at - nl);
		explicit_bzero(b->p, b->len);
		buf_free(b);
		*b = out;
		from = at + strlen(REDACTED);
	}
}

/* Rule 2: key=VALUE (query syntax) loses VALUE, whatever it is. */
static void redact_key_params(struct buf *b)
{
	for (size_t i = 0; i + 4 <= b->len; i++) {
		if (memcmp(b->p + i, "key=", 4) != 0)
			continue;
		if (i > 0 && b->p[i - 1] != '?' && b->p[i - 1] != '&')
			continue;
		size_t v = i + 4, end = v;
		while (end < b->len && b->p[end] != '&' && b->p[end] != ' ' && b->p[end] != '"' &&
		       b->p[end] != '\'')
			end++;
		if (end == v || (end - v == strlen(REDACTED) && memcmp(b->p + v, REDACTED, end - v) == 0))
			continue;
		struct buf out = {0};
		buf_add(&out, b->p, v);
		buf_adds(&out, REDACTED);
		buf_add(&out, b->p + end, b->len - end);
		explicit_bzero(b->p, b->len);
		buf_free(b);
		*b = out;
	}
}

void secret_redact_text(struct buf *b)
{
	pthread_mutex_lock(&secrets_lock);
	for (size_t i = 0; i < n_secrets && b->len; i++)
		replace_all(b, secrets[i]);
	pthread_mutex_unlock(&secrets_lock);
}

void secret_redact_json(json_t *v)
{
	size_t i;
	const char *k;
	json_t *x;
	pthread_mutex_lock(&secrets_lock);
	if (json_is_string(v) && n_secrets) {
		struct buf b = {0};
		buf_add(&b, json_string_value(v), json_string_length(v));
		size_t before = b.len;
		secret_redact_text(&b);
		if (b.len != before)
			json_string_setn(v, b.p, b.len);
		buf_free(&b);
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, x)
			secret_redact_json(x);
	} else if (json_is_object(v)) {
		json_object_foreach(v, k, x)
			secret_redact_json(x);
	}
	pthread_mutex_unlock(&secrets_lock);
}

size_t secret_at(const char *s, size_t n)
{
	size_t best = 0;
	pthread_mutex_lock(&secrets_lock);
	for (size_t i = 0; i < n_secrets; i++) {
		size_t len = strlen(secrets[i]);
		if (len > best && len <= n && secrets[i][0] == s[0] && memcmp(s, secrets[i], len) == 0)
			best = len;
	}
	pthread_mutex_unlock(&secrets_lock);
	return best;
}

/* Length of the longest run s[0..k), k <= n, found anywhere inside a known
 * secret. */
static size_t inside_secret(const char *s, size_t n)
{
	size_t best = 0;
	for (size_t i = 0; i < n_secrets; i++) {
		const char *sec = secrets[i];
		size_t len = strlen(sec);
		for (size_t off = 0; off + best < len; off++) {
			if (sec[off] != s[0])
				continue;
			size_t k = 1;
			while (k < n && off + k < len && sec[off + k] == s[k])
				k++;
			if (k > best)
				best = k;
		}
	}
	return best;
}

/* 1 if s[0..n) is the beginning of a known secret. */
static int begins_secret(const char *s, size_t n)
{
	for (size_t i = 0; i < n_secrets; i++)
		if (strlen(secrets[i]) >= n && memcmp(secrets[i], s, n) == 0)
			return 1;
	return 0;
}

/* Rule 3 over b: pieces of secrets become REDACTED. */
static void redact_fragments(struct buf *b)
{
	size_t rlen = strlen(REDACTED);
	/* The longest tail of the text that begins a secret. */
	size_t tail = b->len;
	for (size_t i = b->len > longest ? b->len - longest : 0; i + SECRET_MIN_LEN <= b->len; i++)
		if (begins_secret(b->p + i, b->len - i)) {
			tail = i;
			break;
		}
	struct buf out = {0};
	size_t i = 0;
	while (i < b->len) {
		if (i >= tail) {
			buf_adds(&out, REDACTED);
			break;
		}
		if (b->len - i >= rlen && memcmp(b->p + i, REDACTED, rlen) == 0) {
			buf_add(&out, b->p + i, rlen);
			i += rlen;
			continue;
		}
		size_t k = inside_secret(b->p + i, b->len - i);
		if (k >= SECRET_FRAGMENT_MIN) {
			buf_adds(&out, REDACTED);
			i += k;
		} else {
			buf_addc(&out, b->p[i++]);
		}
	}
	explicit_bzero(b->p, b->len);
	buf_free(b);
	*b = out;
}

void secret_scrub(char *s, size_t cap)
{
	struct buf b = {0};
	buf_adds(&b, s);
	pthread_mutex_lock(&secrets_lock);
	for (size_t i = 0; i < n_secrets; i++)
		replace_all(&b, secrets[i]);
	redact_key_params(&b);
	if (b.len)
		redact_fragments(&b);
	pthread_mutex_unlock(&secrets_lock);
	/* Clipping only shortens text every rule has passed: what it leaves
	 * is a prefix of a message already free of secrets. */
	size_t n = b.len < cap - 1 ? b.len : cap - 1;
	memcpy(s, b.p ? b.p : "", n);
	s[n] = '\0';
	if (b.p)
		explicit_bzero(b.p, b.len);
	buf_free(&b);
}

json_t *json_string_lossy(const char *s, size_t n)
{
	struct buf b = {0};
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		size_t k = utf8_seq(u + i, n - i);
		if (k == 0) {
			buf_addc(&b, '?');
			i++;
		} else {
			buf_add(&b, s + i, k);
			i += k;
		}
	}
	json_t *v = utf8_json(b.p ? b.p : "", b.len);
	buf_free(&b);
	return v;
}
