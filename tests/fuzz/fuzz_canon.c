/* fuzz_canon.c - canonical JSON (lib/canon.c) over ndjson_parse
 * (lib/ndjson.c).
 *
 * Properties, for any input text (read with ndjson_parse_any, so a
 * scalar at the top level is a value too, as sfma-verify --canonicalize
 * reads it; ndjson_parse must read the same value exactly when it is
 * an object or an array, and refuse a scalar):
 *  - the tree holds what the text says: every string literal, decoded here
 *    independently, and every number, read with strtod, appear in the tree
 *    in text order (this catches a parser that changes a string, as a
 *    U+0000 stand-in leaking into the result would);
 *  - parse -> canon -> parse gives the same value (U+0000 in keys included)
 *    and canon -> parse -> canon the same bytes; the canonical form has its
 *    members in UTF-16 order (checked here without utf16_cmp); the pretty
 *    form reads back as the same value too; canon_size counts exactly the
 *    bytes canon_dump writes;
 *  - canon_scan (the one-pass "already canonical" check) says 1 only for a
 *    text equal to the canonical dump of its parse, and says 1 for every
 *    such text it is meant to handle (objects without escaped keys, nested
 *    at most 64 deep); the member positions it reports are right;
 *  - canon_number, on the double spelled by the first 8 input bytes, reads
 *    back as that double, with no more digits than the shortest decimal
 *    that does (ECMA-262 Number::toString). */
#include "fuzz.h"

#include <math.h>

#include "buf.h"
#include "canon.h"
#include "ndjson.h"
#include "sha.h"

/* ---- an independent reading of the text's tokens --------------------- */

struct tokens {
	struct buf *strings;   /* decoded string literals, in text order */
	size_t n_strings, cap_strings;
	double *numbers;
	size_t n_numbers, cap_numbers;
};

static void put_utf8(struct buf *b, uint32_t cp)
{
	char u[4];
	if (cp < 0x80) {
		u[0] = (char)cp;
		buf_add(b, u, 1);
	} else if (cp < 0x800) {
		u[0] = (char)(0xC0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 0x3F));
		buf_add(b, u, 2);
	} else if (cp < 0x10000) {
		u[0] = (char)(0xE0 | cp >> 12);
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[2] = (char)(0x80 | (cp & 0x3F));
		buf_add(b, u, 3);
	} else {
		u[0] = (char)(0xF0 | cp >> 18);
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[3] = (char)(0x80 | (cp & 0x3F));
		buf_add(b, u, 4);
	}
}

static uint32_t hex4(const char *s)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		v = v * 16 + (uint32_t)(c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10);
	}
	return v;
}

/* Only called on text Jansson accepted: every literal is well formed. */
static void read_tokens(const char *s, size_t n, struct tokens *t)
{
	for (size_t i = 0; i < n;) {
		char c = s[i];
		if (c == '"') {
			struct buf b = {0};
			buf_add(&b, "", 0);
			for (i++; i < n && s[i] != '"';) {
				if (s[i] != '\\') {
					buf_add(&b, s + i, 1);
					i++;
					continue;
				}
				char e = s[i + 1];
				i += 2;
				switch (e) {
				case 'b': buf_addc(&b, '\b'); break;
				case 'f': buf_addc(&b, '\f'); break;
				case 'n': buf_addc(&b, '\n'); break;
				case 'r': buf_addc(&b, '\r'); break;
				case 't': buf_addc(&b, '\t'); break;
				case 'u': {
					uint32_t cp = hex4(s + i);
					i += 4;
					if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= n && s[i] == '\\' && s[i + 1] == 'u') {
						uint32_t lo = hex4(s + i + 2);
						if (lo >= 0xDC00 && lo <= 0xDFFF) {
							cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
							i += 6;
						}
					}
					put_utf8(&b, cp);
					break;
				}
				default: buf_addc(&b, e); break; /* " \ / */
				}
			}
			i++;
			if (t->n_strings == t->cap_strings) {
				t->cap_strings = t->cap_strings ? 2 * t->cap_strings : 16;
				t->strings = realloc(t->strings, t->cap_strings * sizeof *t->strings);
			}
			t->strings[t->n_strings++] = b;
		} else if (c == '-' || (c >= '0' && c <= '9')) {
			size_t j = i;
			while (j < n && strchr("0123456789+-.eE", s[j]) && s[j])
				j++;
			char tmp[512];
			size_t l = j - i < sizeof tmp - 1 ? j - i : sizeof tmp - 1;
			memcpy(tmp, s + i, l);
			tmp[l] = '\0';
			if (t->n_numbers == t->cap_numbers) {
				t->cap_numbers = t->cap_numbers ? 2 * t->cap_numbers : 16;
				t->numbers = realloc(t->numbers, t->cap_numbers * sizeof *t->numbers);
			}
			/* Longer number tokens are rare; they are read in full below. */
			if (j - i >= sizeof tmp - 1) {
				char *big = fuzz_strndup((const uint8_t *)s + i, j - i);
				t->numbers[t->n_numbers++] = strtod(big, NULL);
				free(big);
			} else {
				t->numbers[t->n_numbers++] = strtod(tmp, NULL);
			}
			i = j;
		} else {
			i++;
		}
	}
}

static void tokens_free(struct tokens *t)
{
	for (size_t i = 0; i < t->n_strings; i++)
		buf_free(&t->strings[i]);
	free(t->strings);
	free(t->numbers);
}

static void check_number(double d);

struct walk {
	const struct tokens *t;
	size_t si, ni;
	int max_level;      /* deepest value, members of the top level at 1 */
	int escaped_key;    /* some key holds '"', '\\' or a control character */
};

static void check_string(struct walk *w, const char *s, size_t n, const char *what)
{
	FUZZ_CHECK(w->si < w->t->n_strings, "tree has more strings than the text");
	const struct buf *want = &w->t->strings[w->si++];
	FUZZ_CHECK(want->len == n && memcmp(want->p, s, n) == 0,
	           "%s %zu differs from the text's literal (%zu bytes in the tree, %zu in the text)",
	           what, w->si, n, want->len);
}

static void walk_tree(struct walk *w, const json_t *v, int level)
{
	if (level > w->max_level)
		w->max_level = level;
	switch (json_typeof(v)) {
	case JSON_STRING:
		check_string(w, json_string_value(v), json_string_length(v), "string");
		break;
	case JSON_REAL:
		FUZZ_CHECK(w->ni < w->t->n_numbers, "tree has more numbers than the text");
		FUZZ_CHECK(w->t->numbers[w->ni] == json_real_value(v), "number %zu differs from the text", w->ni);
		w->ni++;
		check_number(json_real_value(v));
		break;
	case JSON_INTEGER:
		fuzz_fail("an integer in a tree read with JSON_DECODE_INT_AS_REAL");
	case JSON_ARRAY:
		for (size_t i = 0; i < json_array_size(v); i++)
			walk_tree(w, json_array_get(v, i), level + 1);
		break;
	case JSON_OBJECT:
		for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
			const char *k = json_object_iter_key(it);
			size_t kl = json_object_iter_key_len(it);
			check_string(w, k, kl, "key");
			for (size_t i = 0; i < kl; i++)
				if ((unsigned char)k[i] < 0x20 || k[i] == '"' || k[i] == '\\')
					w->escaped_key = 1;
			walk_tree(w, json_object_iter_value(it), level + 1);
		}
		break;
	default:
		break;
	}
}

/* ---- key order, checked without utf16_cmp ----------------------------- */

/* s (valid UTF-8) as UTF-16 code units; returns the count. */
static size_t to_utf16(const char *s, size_t n, uint16_t *out)
{
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		uint32_t cp;
		int more = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
		cp = more ? c & (0x3Fu >> more) : c;
		for (int j = 1; j <= more; j++)
			cp = cp << 6 | ((unsigned char)s[i + (size_t)j] & 0x3Fu);
		i += (size_t)more + 1;
		if (cp >= 0x10000) {
			out[k++] = (uint16_t)(0xD800 + ((cp - 0x10000) >> 10));
			out[k++] = (uint16_t)(0xDC00 + ((cp - 0x10000) & 0x3FF));
		} else {
			out[k++] = (uint16_t)cp;
		}
	}
	return k;
}

static int utf16_less(const char *a, size_t an, const char *b, size_t bn)
{
	uint16_t *ua = malloc((an + 1) * sizeof *ua), *ub = malloc((bn + 1) * sizeof *ub);
	size_t na = to_utf16(a, an, ua), nb = to_utf16(b, bn, ub), i = 0;
	while (i < na && i < nb && ua[i] == ub[i])
		i++;
	int less = i < na && i < nb ? ua[i] < ub[i] : na < nb;
	free(ua);
	free(ub);
	return less;
}

/* Members of every object of a tree read from canonical text come in
 * strictly increasing UTF-16 order (RFC 8785 section 3.2.3). */
static void check_order(const json_t *v)
{
	if (json_is_array(v))
		for (size_t i = 0; i < json_array_size(v); i++)
			check_order(json_array_get(v, i));
	if (!json_is_object(v))
		return;
	const char *prev = NULL;
	size_t prev_len = 0;
	for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
		const char *k = json_object_iter_key(it);
		size_t kl = json_object_iter_key_len(it);
		FUZZ_CHECK(!prev || utf16_less(prev, prev_len, k, kl), "canonical keys out of UTF-16 order");
		prev = k;
		prev_len = kl;
		check_order(json_object_iter_value(it));
	}
}

/* ---- numbers ------------------------------------------------------------ */

/* Significant digits of a canon_number output ("-1.25e-7" -> 3). */
static int significant_digits(const char *s)
{
	char d[40];
	int k = 0;
	for (; *s && *s != 'e'; s++)
		if (*s >= '0' && *s <= '9' && (k > 0 || *s != '0'))
			d[k++] = *s;
	while (k > 1 && d[k - 1] == '0')
		k--;
	return k;
}

/* The fewest significant digits of a decimal that reads back as d: for each
 * length p, the nearest p-digit decimal and its two neighbours. */
static int shortest_digits(double d)
{
	for (int p = 1; p <= 17; p++) {
		char tmp[64];
		snprintf(tmp, sizeof tmp, "%.*e", p - 1, fabs(d));
		unsigned long long m = 0;
		const char *s = tmp;
		for (; *s != 'e'; s++)
			if (*s >= '0' && *s <= '9')
				m = m * 10 + (unsigned long long)(*s - '0');
		int e10 = atoi(s + 1) - (p - 1);
		int best = 0;
		for (int delta = -1; delta <= 1; delta++) {
			unsigned long long c = m + (unsigned long long)(long long)delta;
			if (c == 0)
				continue;
			char cand[64];
			snprintf(cand, sizeof cand, "%llue%d", c, e10);
			if (strtod(cand, NULL) != fabs(d))
				continue;
			while (c % 10 == 0)
				c /= 10;
			int digits = snprintf(cand, sizeof cand, "%llu", c);
			if (!best || digits < best)
				best = digits;
		}
		if (best)
			return best;
	}
	return 17;
}

static void check_number(double d)
{
	char out[40];
	int n = canon_number(d, out);
	if (!isfinite(d)) {
		FUZZ_CHECK(n < 0, "canon_number printed a non-finite double");
		return;
	}
	FUZZ_CHECK(n > 0 && (size_t)n == strlen(out), "canon_number returned a wrong length");
	FUZZ_CHECK(strtod(out, NULL) == d, "canon_number(%.17g) = %s does not read back", d, out);
	if (d == 0) {
		FUZZ_CHECK(strcmp(out, "0") == 0, "canon_number of zero is %s", out);
		return;
	}
	int k = significant_digits(out), want = shortest_digits(d);
	FUZZ_CHECK(k <= want, "canon_number(%.17g) = %s has %d digits, the shortest has %d", d, out, k, want);
	/* ECMAScript uses an exponent exactly outside [1e-6, 1e21). */
	int expo = strchr(out, 'e') != NULL;
	FUZZ_CHECK(expo == (fabs(d) < 1e-6 || fabs(d) >= 1e21),
	           "canon_number(%.17g) = %s: exponent form wrong", d, out);
}

/* ---- the members canon_scan reports ----------------------------------- */

static void check_member(const char *text, const json_t *v, const char *key, const struct canon_member *m)
{
	json_t *want = json_object_get(v, key);
	FUZZ_CHECK(m->present == (want != NULL), "canon_scan: %s present=%d", key, m->present);
	if (!want)
		return;
	struct buf kb = {0}, vb = {0};
	canon_string(key, strlen(key), &kb);
	buf_addc(&kb, ':');
	FUZZ_CHECK(m->member_len > kb.len && memcmp(text + m->member_off, kb.p, kb.len) == 0,
	           "canon_scan: %s member does not start with its key", key);
	FUZZ_CHECK(m->value_off == m->member_off + kb.len && m->member_len == kb.len + m->value_len,
	           "canon_scan: %s value offsets", key);
	canon_dump(want, &vb, NULL);
	FUZZ_CHECK(vb.len == m->value_len && memcmp(text + m->value_off, vb.p, vb.len) == 0,
	           "canon_scan: %s value bytes", key);
	FUZZ_CHECK(m->hex64 == (json_is_string(want) && is_sha256_hex(json_string_value(want), json_string_length(want))),
	           "canon_scan: %s hex64=%d", key, m->hex64);
	buf_free(&kb);
	buf_free(&vb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	if (size >= 8) {
		double d;
		memcpy(&d, data, sizeof d);
		check_number(d);
	}

	struct canon_scan sc;
	int scan_ok = canon_scan(text, size, &sc);
	json_t *v = ndjson_parse_any(text, size, NULL);
	json_t *strict = ndjson_parse(text, size, NULL);
	FUZZ_CHECK(strict ? v && fuzz_json_same(strict, v) : !v || !(json_is_object(v) || json_is_array(v)),
	           "ndjson_parse and ndjson_parse_any disagree on an object or array");
	json_decref(strict);
	if (!v) {
		FUZZ_CHECK(!scan_ok, "canon_scan accepted a text that does not parse");
		return 0;
	}

	struct tokens t = {0};
	read_tokens(text, size, &t);
	struct walk w = {&t, 0, 0, 0, 0};
	walk_tree(&w, v, 0);
	FUZZ_CHECK(w.si == t.n_strings, "the text has strings the tree lacks");
	FUZZ_CHECK(w.ni == t.n_numbers, "the text has numbers the tree lacks");
	tokens_free(&t);

	struct buf c1 = {0}, c2 = {0}, pretty = {0};
	FUZZ_CHECK(canon_dump(v, &c1, NULL) == 0, "canon_dump failed on a parsed value");
	size_t counted;
	FUZZ_CHECK(canon_size(v, &counted, NULL) == 0 && counted == c1.len,
	           "canon_size counts %zu bytes, canon_dump wrote %zu", counted, c1.len);
	json_t *v2 = ndjson_parse_any(c1.p, c1.len, NULL);
	FUZZ_CHECK(v2, "the canonical form does not parse");
	FUZZ_CHECK(fuzz_json_same(v, v2), "the canonical form reads back as another value");
	check_order(v2);
	FUZZ_CHECK(canon_dump(v2, &c2, NULL) == 0, "canon_dump failed on the reparsed value");
	FUZZ_CHECK(c1.len == c2.len && memcmp(c1.p, c2.p, c1.len) == 0, "canon is not idempotent");

	FUZZ_CHECK(canon_dump_pretty(v, &pretty, NULL) == 0, "canon_dump_pretty failed");
	json_t *v3 = ndjson_parse_any(pretty.p, pretty.len, NULL);
	FUZZ_CHECK(v3 && fuzz_json_same(v, v3), "the pretty form reads back as another value");

	int is_canonical = c1.len == size && memcmp(c1.p, text, size) == 0;
	int in_scope = json_is_object(v) && !w.escaped_key && w.max_level <= 64;
	if (scan_ok)
		FUZZ_CHECK(is_canonical, "canon_scan accepted a text that is not canonical");
	if (is_canonical && in_scope)
		FUZZ_CHECK(scan_ok, "canon_scan refused a canonical text");
	if (in_scope) {
		struct canon_scan sc1;
		FUZZ_CHECK(canon_scan(c1.p, c1.len, &sc1), "canon_scan refused the canonical dump");
	}
	if (scan_ok) {
		check_member(text, v, "hash", &sc.hash);
		check_member(text, v, "prevHash", &sc.prev_hash);
		check_member(text, v, "seq", &sc.seq);
		check_member(text, v, "kind", &sc.kind);
		check_member(text, v, "id", &sc.id);
		check_member(text, v, "evidence", &sc.evidence);
	}

	buf_free(&c1);
	buf_free(&c2);
	buf_free(&pretty);
	json_decref(v);
	json_decref(v2);
	json_decref(v3);
	return 0;
}
