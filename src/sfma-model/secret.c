/* secret.c - keeping keys and tokens out of every message.
 *
 * Errors quote what servers and libcurl say, and a server may echo a key
 * back ("invalid key sk-..."). So every error passes secret_scrub before it
 * leaves the process: each known secret value, and the value of any key=
 * query parameter (gemini carries its key in the URL), is replaced. */
#include "model.h"

#include <stdlib.h>
#include <string.h>

static char **secrets;
static size_t n_secrets;

/* Shorter values would match ordinary words; no real credential is this short. */
#define SECRET_MIN_LEN 4
#define REDACTED "[redacted]"

void secret_add(const char *value)
{
	if (!value || strlen(value) < SECRET_MIN_LEN)
		return;
	for (size_t i = 0; i < n_secrets; i++)
		if (strcmp(secrets[i], value) == 0)
			return;
	secrets = xrealloc(secrets, (n_secrets + 1) * sizeof *secrets);
	secrets[n_secrets++] = xstrdup(value);
}

void secret_free_all(void)
{
	for (size_t i = 0; i < n_secrets; i++) {
		explicit_bzero(secrets[i], strlen(secrets[i]));
		free(secrets[i]);
	}
	free(secrets);
	secrets = NULL;
	n_secrets = 0;
}

/* Replace every occurrence of needle in b by REDACTED. */
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

/* key=VALUE (query syntax) loses VALUE, whatever it is. */
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

void secret_scrub(char *s, size_t cap)
{
	struct buf b = {0};
	buf_adds(&b, s);
	for (size_t i = 0; i < n_secrets; i++)
		replace_all(&b, secrets[i]);
	redact_key_params(&b);
	/* Clipping can only shorten: a secret removed above stays removed. */
	size_t n = b.len < cap - 1 ? b.len : cap - 1;
	memcpy(s, b.p, n);
	s[n] = '\0';
	explicit_bzero(b.p, b.len);
	buf_free(&b);
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len;
	unsigned min;
	unsigned cp;
	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0) {
		len = 2, cp = s[0] & 0x1f, min = 0x80;
	} else if ((s[0] & 0xf0) == 0xe0) {
		len = 3, cp = s[0] & 0x0f, min = 0x800;
	} else if ((s[0] & 0xf8) == 0xf0) {
		len = 4, cp = s[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
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
	json_t *v = json_stringn(b.p ? b.p : "", b.len);
	buf_free(&b);
	if (!v)
		die("out of memory");
	return v;
}
