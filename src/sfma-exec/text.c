/* text.c - bytes made presentable as JSON text. */
#include "exec.h"

#include "buf.h"
#include "utf8.h"

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
