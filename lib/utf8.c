/* utf8.c - the one UTF-8 validator. */
#include "utf8.h"

#include "buf.h"

size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len;
	unsigned cp, min;
	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0)
		len = 2, cp = s[0] & 0x1f, min = 0x80;
	else if ((s[0] & 0xf0) == 0xe0)
		len = 3, cp = s[0] & 0x0f, min = 0x800;
	else if ((s[0] & 0xf8) == 0xf0)
		len = 4, cp = s[0] & 0x07, min = 0x10000;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* Overlong forms, UTF-16 surrogates and code points past U+10FFFF are
	 * not UTF-8 (RFC 3629 section 3); JSON encoders reject them too. */
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

int utf8_text_ok(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		if (p[i] == 0)
			return 0;
		size_t k = utf8_seq(p + i, n - i);
		if (k == 0)
			return 0;
		i += k;
	}
	return 1;
}

json_t *utf8_json(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	struct buf b = {0};
	buf_add(&b, "", 0);
	for (size_t i = 0; i < n;) {
		size_t len = utf8_seq(u + i, n - i);
		if (len == 0) {
			buf_add(&b, "\xEF\xBF\xBD", 3);
			i++;
		} else {
			buf_add(&b, s + i, len);
			i += len;
		}
	}
	json_t *j = json_stringn(b.p, b.len);
	buf_free(&b);
	return j;
}
