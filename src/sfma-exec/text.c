/* text.c - bytes made presentable as JSON text. */
#include "exec.h"

#include "buf.h"

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid:
 * no overlong forms, no surrogates, nothing beyond U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	if (s[0] < 0x80)
		return 1;
	size_t len;
	unsigned cp;
	if (s[0] >= 0xC2 && s[0] <= 0xDF) {
		len = 2;
		cp = s[0] & 0x1F;
	} else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
		len = 3;
		cp = s[0] & 0x0F;
	} else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
		len = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
		return 0;
	return len;
}

json_t *json_text(const char *s, size_t n)
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
