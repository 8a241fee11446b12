/* fuzz_reply.c - the lenient reply parser (lib/protocol.c parse_reply:
 * code fences stripped, then the whole text or its first '{' to last '}').
 *
 * Input byte 0 picks how the rest is presented:
 *  0: as it is;
 *  1: inside a Markdown fence, "```<tag>\n" X "\n```", the tag being the
 *     part of the input before its first newline;
 *  2: between two pieces of prose that hold no brace, no backtick and no
 *     NUL (the input split at its first two 0xff bytes).
 * Properties: the result is NULL or an object; with 1 and 2, whenever the
 * embedded text X is a JSON object the result is that same object. */
#include "fuzz.h"

#include "buf.h"
#include "ndjson.h"
#include "protocol.h"

/* Prose that cannot change what parse_reply finds: no brace, no fence, no NUL. */
static int is_prose(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] == '{' || p[i] == '}' || p[i] == '`' || p[i] == 0)
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int mode = data[0] % 3;
	const uint8_t *s = data + 1;
	size_t n = size - 1;
	struct buf text = {0};
	const uint8_t *x = s;   /* the embedded text */
	size_t xn = n;
	if (mode == 1) {
		const uint8_t *nl = memchr(s, '\n', n);
		size_t tag = nl ? (size_t)(nl - s) : 0;
		if (memchr(s, '`', tag) || memchr(s, 0, tag))
			tag = 0;
		x = nl ? nl + 1 : s;
		xn = n - (size_t)(x - s);
		buf_adds(&text, "```");
		buf_add(&text, s, tag);
		buf_addc(&text, '\n');
		buf_add(&text, x, xn);
		buf_adds(&text, "\n```");
	} else if (mode == 2) {
		const uint8_t *a = memchr(s, 0xff, n);
		const uint8_t *b = a ? memchr(a + 1, 0xff, n - (size_t)(a + 1 - s)) : NULL;
		if (!b)
			return 0;
		size_t pre = (size_t)(a - s), post = n - (size_t)(b + 1 - s);
		if (!is_prose(s, pre) || !is_prose(b + 1, post))
			return 0;
		x = a + 1;
		xn = (size_t)(b - x);
		buf_add(&text, s, pre);
		buf_add(&text, x, xn);
		buf_add(&text, b + 1, post);
	} else {
		buf_add(&text, s, n);
	}
	if (!text.p)
		buf_add(&text, "", 0);

	json_t *got = parse_reply(text.p);
	FUZZ_CHECK(!got || json_is_object(got), "parse_reply returned a non-object");
	if (mode != 0 && !memchr(x, 0, xn)) {
		json_t *want = ndjson_parse((const char *)x, xn, NULL);
		if (json_is_object(want))
			FUZZ_CHECK(got && fuzz_json_same(got, want),
			           "an object %s was not read back as itself", mode == 1 ? "in a fence" : "in prose");
		json_decref(want);
	}
	json_decref(got);
	buf_free(&text);
	return 0;
}
