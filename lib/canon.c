/* canon.c - RFC 8785 canonical JSON: serializer and one-pass checker. */
#include "canon.h"
#include "hex.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* ---- numbers ---------------------------------------------------------- */

/* ECMAScript Number::toString (ECMA-262 Number::toString, step 5 as its
 * Note 2 recommends and V8 - so JSON.stringify in node - implements): the
 * fewest digits s (k of them) with s x 10^(n-k) reading back as the double,
 * and when several k-digit strings read back, the one closest to the
 * double's exact value, the even one on a tie. Then placed by the exponent
 * rules. glibc's printf and strtod convert exactly (correctly rounded,
 * ties to even), which the slow path relies on. */

#define TWO_POW_53 9007199254740992.0

static const double pow10_exact[23] = {
	1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* The decimal digits of v > 0 into out; returns how many. */
static int u64_digits(uint64_t v, char *out)
{
	char rev[20];
	int k = 0;
	do {
		rev[k++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (int i = 0; i < k; i++)
		out[i] = rev[k - 1 - i];
	return k;
}

/* Fast path, for a > 0 in [1e-8, 1e37): scale a to t = a x 10^j in
 * [10^14, 10^15) with 10^j exact (|j| <= 22), round to the integer N, and
 * check that N x 10^-j reads back as a - one correctly rounded division or
 * multiplication of exact operands, so the check is exact. Any decimal of at
 * most 15 significant digits that reads back as a is within 0.19 of t (t is
 * below 2^50: its own rounding is at most 1/16, half the double's spacing at
 * that scale at most 1/8), so it is N; and no two decimals of at most 15
 * digits (DBL_DIG) read back as the same normal double, so that N, trimmed,
 * is the one shortest string. Returns its digit count k and sets *n (value
 * = 0.digits x 10^n), 0 if there is no such N (so a needs 16 or 17 digits),
 * -1 if a is outside the range (nothing learned). */
static int shortest_up_to_15(double a, char *digits, int *n)
{
	if (!(a >= 1e-8 && a < 1e37))
		return -1;
	int e2;
	frexp(a, &e2);
	/* 10^(n0-1) <= a < 10^n0, give or take one: log10(2) ~ 0.30103. */
	int n0 = (int)floor((e2 - 1) * 0.30102999566398120) + 1;
	int j = 15 - n0;
	double t = 0;
	for (int tries = 0; tries < 3; tries++) {
		if (j < -22 || j > 22)
			return -1;
		t = j >= 0 ? a * pow10_exact[j] : a / pow10_exact[-j];
		if (t >= 1e15)
			j--;
		else if (t < 1e14)
			j++;
		else
			break;
	}
	if (!(t >= 1e14 && t < 1e15))
		return -1;
	double N = nearbyint(t);
	double back = j >= 0 ? N / pow10_exact[j] : N * pow10_exact[-j];
	if (back != a)
		return 0;
	int k = u64_digits((uint64_t)N, digits);
	*n = k - j;
	while (k > 1 && digits[k - 1] == '0')
		k--;
	return k;
}

/* The p-digit decimal nearest to a > 0 (glibc rounds exactly, ties to
 * even): p digits into digits, *e10 its exponent (value d.dd.. x 10^e10). */
static void nearest_digits(double a, int p, char *digits, int *e10)
{
	char tmp[40];
	snprintf(tmp, sizeof tmp, "%.*e", p - 1, a);
	const char *s = tmp;
	int k = 0;
	for (; *s != 'e'; s++)
		if (*s != '.')
			digits[k++] = *s;
	*e10 = atoi(s + 1);
}

static double digits_value(const char *digits, int p, int e10)
{
	char tmp[40];
	snprintf(tmp, sizeof tmp, "%.*se%d", p, digits, e10 - p + 1);
	return strtod(tmp, NULL);
}

/* Move a p-digit decimal one unit in its last place up or down, staying
 * p digits long (9.99 up is 1.00 x 10 more; 1.00 down is 9.99 x 10 less). */
static void step_digits(char *digits, int p, int *e10, int up)
{
	int i = p - 1;
	if (up) {
		while (i >= 0 && digits[i] == '9')
			digits[i--] = '0';
		if (i < 0) {
			digits[0] = '1';
			(*e10)++;
		} else {
			digits[i]++;
		}
		return;
	}
	while (digits[i] == '0')
		digits[i--] = '9';
	digits[i]--;
	if (digits[0] == '0') {
		memmove(digits, digits + 1, (size_t)(p - 1));
		digits[p - 1] = '9';
		(*e10)--;
	}
}

/* The p-digit decimal closest to a that reads back as a, if any: the nearest
 * p-digit rounding, else its neighbour on a's other side. The decimals that
 * read back as a form an interval around a, so if any p-digit one does, one
 * of the two that enclose a does; and if both do, the nearest is closest. */
static int round_trip_digits(double a, int p, char *digits, int *e10)
{
	nearest_digits(a, p, digits, e10);
	double v = digits_value(digits, p, *e10);
	if (v == a)
		return 1;
	step_digits(digits, p, e10, v < a);
	return digits_value(digits, p, *e10) == a;
}

/* Exact for every finite a > 0: the fewest digits p for which a p-digit
 * decimal reads back (a p-digit one reads back, so does a p+1-digit one:
 * search by halves), and the closest such decimal. */
static int shortest_digits(double a, char *digits, int *n)
{
	int k = shortest_up_to_15(a, digits, n);
	if (k > 0)
		return k;
	int lo = k == 0 ? 16 : 1, hi = 17, e10 = 0, found = 0;
	char probe[20];
	while (lo < hi) {
		int mid = (lo + hi) / 2, pe;
		if (round_trip_digits(a, mid, probe, &pe)) {
			memcpy(digits, probe, (size_t)mid);
			e10 = pe;
			found = hi = mid;
		} else {
			lo = mid + 1;
		}
	}
	if (!found) /* 17 digits always read back: the nearest does */
		nearest_digits(a, found = 17, digits, &e10);
	k = found;
	while (k > 1 && digits[k - 1] == '0')
		k--;
	*n = e10 + 1;
	return k;
}

int canon_number(double d, char *out)
{
	if (!isfinite(d))
		return -1;
	char *o = out;
	if (d == 0) { /* also -0, which ECMAScript prints as "0" */
		*o++ = '0';
		*o = '\0';
		return 1;
	}
	if (d < 0)
		*o++ = '-';
	double a = fabs(d);
	/* Exact integers below 2^53 print as plain digits: the common case. */
	if (a < TWO_POW_53 && a == floor(a)) {
		o += u64_digits((uint64_t)a, o);
		*o = '\0';
		return (int)(o - out);
	}

	char digits[20];
	int n; /* value = 0.digits x 10^n */
	int k = shortest_digits(a, digits, &n);
	if (k <= n && n <= 21) {
		memcpy(o, digits, (size_t)k);
		o += k;
		for (int i = 0; i < n - k; i++)
			*o++ = '0';
	} else if (0 < n && n <= 21) {
		memcpy(o, digits, (size_t)n);
		o += n;
		*o++ = '.';
		memcpy(o, digits + n, (size_t)(k - n));
		o += k - n;
	} else if (-6 < n && n <= 0) {
		*o++ = '0';
		*o++ = '.';
		for (int i = 0; i < -n; i++)
			*o++ = '0';
		memcpy(o, digits, (size_t)k);
		o += k;
	} else {
		*o++ = digits[0];
		if (k > 1) {
			*o++ = '.';
			memcpy(o, digits + 1, (size_t)(k - 1));
			o += k - 1;
		}
		o += sprintf(o, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
	}
	*o = '\0';
	return (int)(o - out);
}

/* ---- strings ---------------------------------------------------------- */

/* The first byte at or after i that the canonical form escapes ('"',
 * '\\', U+0000..U+001F), or n. Sixteen bytes at a time where SSE2 is: a
 * control is below ' ' and not negative (bytes of 0x80 and above, which
 * stand for themselves, are negative as signed). */
static size_t escape_at(const char *s, size_t i, size_t n)
{
#ifdef __SSE2__
	const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(' ');
	const __m128i zero = _mm_setzero_si128();
	while (n - i >= 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
		__m128i control = _mm_andnot_si128(_mm_cmplt_epi8(v, zero), _mm_cmplt_epi8(v, space));
		__m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)), control);
		unsigned mask = (unsigned)_mm_movemask_epi8(stop);
		if (mask)
			return i + (size_t)__builtin_ctz(mask);
		i += 16;
	}
#endif
	for (; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c == '"' || c == '\\')
			break;
	}
	return i;
}

void canon_string(const char *s, size_t n, struct buf *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t run = 0;
	buf_addc(out, '"');
	for (size_t i = 0; (i = escape_at(s, i, n)) < n; i++) {
		unsigned char c = (unsigned char)s[i];
		buf_add(out, s + run, i - run);
		run = i + 1;
		switch (c) {
		case '"': buf_add(out, "\\\"", 2); break;
		case '\\': buf_add(out, "\\\\", 2); break;
		case '\b': buf_add(out, "\\b", 2); break;
		case '\f': buf_add(out, "\\f", 2); break;
		case '\n': buf_add(out, "\\n", 2); break;
		case '\r': buf_add(out, "\\r", 2); break;
		case '\t': buf_add(out, "\\t", 2); break;
		default: {
			char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			buf_add(out, u, 6);
		}
		}
	}
	buf_add(out, s + run, n - run);
	buf_addc(out, '"');
}

/* Decode the code point at s[*i] (valid UTF-8 assumed; a stray byte is
 * taken as itself) and advance *i. */
static uint32_t next_cp(const unsigned char *s, size_t n, size_t *i)
{
	uint32_t c = s[*i];
	int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
	if (more)
		c &= 0x3Fu >> more;
	(*i)++;
	while (more-- > 0 && *i < n)
		c = (c << 6) | (s[(*i)++] & 0x3Fu);
	return c;
}

int utf16_cmp(const char *a, size_t an, const char *b, size_t bn)
{
	size_t m = an < bn ? an : bn, i = 0;
	while (i < m && a[i] == b[i])
		i++;
	if (i == m)
		return an < bn ? -1 : an > bn;
	/* ASCII bytes are whole code points and single UTF-16 units. */
	if ((unsigned char)a[i] < 0x80 && (unsigned char)b[i] < 0x80)
		return (unsigned char)a[i] < (unsigned char)b[i] ? -1 : 1;
	/* Back up to the start of the code point holding the first difference. */
	while (i > 0 && ((unsigned char)a[i] & 0xC0) == 0x80)
		i--;
	size_t ia = i, ib = i;
	uint32_t ca = next_cp((const unsigned char *)a, an, &ia);
	uint32_t cb = next_cp((const unsigned char *)b, bn, &ib);
	/* Map to the first UTF-16 unit: astral characters become high
	 * surrogates (0xD800..0xDBFF), which sort below U+E000..U+FFFF. */
	uint32_t ua = ca >= 0x10000 ? 0xD800 + ((ca - 0x10000) >> 10) : ca;
	uint32_t ub = cb >= 0x10000 ? 0xD800 + ((cb - 0x10000) >> 10) : cb;
	if (ua != ub)
		return ua < ub ? -1 : 1;
	/* Same high surrogate: the low surrogates order like the code points. */
	return ca < cb ? -1 : ca > cb;
}

/* ---- serializer ------------------------------------------------------- */

struct member {
	const char *key;
	size_t len;
	json_t *value;
};

static int member_cmp(const void *x, const void *y)
{
	const struct member *a = x, *b = y;
	return utf16_cmp(a->key, a->len, b->key, b->len);
}

static int dump(const json_t *v, struct buf *out, struct sfma_err *e, int pretty, int depth)
{
	char num[40];
	switch (json_typeof(v)) {
	case JSON_NULL: buf_add(out, "null", 4); return 0;
	case JSON_TRUE: buf_add(out, "true", 4); return 0;
	case JSON_FALSE: buf_add(out, "false", 5); return 0;
	case JSON_STRING:
		canon_string(json_string_value(v), json_string_length(v), out);
		return 0;
	case JSON_INTEGER:
		buf_printf(out, "%lld", (long long)json_integer_value(v));
		return 0;
	case JSON_REAL: {
		int n = canon_number(json_real_value(v), num);
		if (n < 0)
			return err_set(e, "number has no JSON form (NaN or infinity)");
		buf_add(out, num, (size_t)n);
		return 0;
	}
	case JSON_ARRAY: {
		size_t n = json_array_size(v);
		if (n == 0) {
			buf_add(out, "[]", 2);
			return 0;
		}
		buf_addc(out, '[');
		for (size_t i = 0; i < n; i++) {
			if (i)
				buf_addc(out, ',');
			if (pretty)
				buf_printf(out, "\n%*s", 2 * (depth + 1), "");
			if (dump(json_array_get(v, i), out, e, pretty, depth + 1) < 0)
				return -1;
		}
		if (pretty)
			buf_printf(out, "\n%*s", 2 * depth, "");
		buf_addc(out, ']');
		return 0;
	}
	case JSON_OBJECT: {
		size_t n = json_object_size(v), k = 0;
		if (n == 0) {
			buf_add(out, "{}", 2);
			return 0;
		}
		struct member *m = xmalloc(n * sizeof *m);
		for (void *it = json_object_iter((json_t *)v); it;
		     it = json_object_iter_next((json_t *)v, it)) {
			m[k].key = json_object_iter_key(it);
			m[k].len = json_object_iter_key_len(it);
			m[k].value = json_object_iter_value(it);
			k++;
		}
		if (!pretty)
			qsort(m, k, sizeof *m, member_cmp);
		buf_addc(out, '{');
		int rc = 0;
		for (size_t i = 0; i < k && rc == 0; i++) {
			if (i)
				buf_addc(out, ',');
			if (pretty)
				buf_printf(out, "\n%*s", 2 * (depth + 1), "");
			canon_string(m[i].key, m[i].len, out);
			buf_add(out, pretty ? ": " : ":", pretty ? 2 : 1);
			rc = dump(m[i].value, out, e, pretty, depth + 1);
		}
		free(m);
		if (rc < 0)
			return -1;
		if (pretty)
			buf_printf(out, "\n%*s", 2 * depth, "");
		buf_addc(out, '}');
		return 0;
	}
	}
	return err_set(e, "unknown JSON type");
}

int canon_dump(const json_t *v, struct buf *out, struct sfma_err *e)
{
	return dump(v, out, e, 0, 0);
}

int canon_dump_pretty(const json_t *v, struct buf *out, struct sfma_err *e)
{
	return dump(v, out, e, 1, 0);
}

/* ---- sizes ------------------------------------------------------------ */

size_t canon_string_size(const char *s, size_t n)
{
	size_t size = n + 2; /* the bytes themselves, and the quotes */
	for (size_t i = 0; (i = escape_at(s, i, n)) < n; i++) {
		unsigned char c = (unsigned char)s[i];
		switch (c) {
		case '"': case '\\': case '\b': case '\f': case '\n': case '\r': case '\t':
			size += 1; /* a two-byte escape */
			break;
		default:
			size += 5; /* \u00XX */
		}
	}
	return size;
}

/* The length of "%lld" of v. */
static size_t integer_size(long long v)
{
	unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
	size_t n = v < 0;
	do {
		n++;
		u /= 10;
	} while (u);
	return n;
}

/* dump's walk, counting instead of writing (member order does not change
 * a length: no sorting either). */
static int size_of(const json_t *v, size_t *size, struct sfma_err *e)
{
	char num[40];
	switch (json_typeof(v)) {
	case JSON_NULL: *size += 4; return 0;
	case JSON_TRUE: *size += 4; return 0;
	case JSON_FALSE: *size += 5; return 0;
	case JSON_STRING:
		*size += canon_string_size(json_string_value(v), json_string_length(v));
		return 0;
	case JSON_INTEGER:
		*size += integer_size((long long)json_integer_value(v));
		return 0;
	case JSON_REAL: {
		int n = canon_number(json_real_value(v), num);
		if (n < 0)
			return err_set(e, "number has no JSON form (NaN or infinity)");
		*size += (size_t)n;
		return 0;
	}
	case JSON_ARRAY: {
		size_t n = json_array_size(v);
		*size += n ? 2 + (n - 1) : 2; /* brackets and commas */
		for (size_t i = 0; i < n; i++)
			if (size_of(json_array_get(v, i), size, e) < 0)
				return -1;
		return 0;
	}
	case JSON_OBJECT: {
		size_t n = json_object_size(v);
		*size += n ? 2 + (n - 1) + n : 2; /* braces, commas and colons */
		for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
			*size += canon_string_size(json_object_iter_key(it), json_object_iter_key_len(it));
			if (size_of(json_object_iter_value(it), size, e) < 0)
				return -1;
		}
		return 0;
	}
	}
	return err_set(e, "unknown JSON type");
}

int canon_size(const json_t *v, size_t *size, struct sfma_err *e)
{
	*size = 0;
	return size_of(v, size, e);
}

/* ---- one-pass checker ------------------------------------------------- */

#define SCAN_MAX_DEPTH 64

struct scanner {
	const unsigned char *s;
	size_t n, i;
	struct canon_scan *top;
};

/* Bytes that stand for themselves inside a canonical string: printable
 * ASCII but '"' and '\\'. Skipping runs of them is most of a trace's text. */
static unsigned char plain_byte[256];

static void init_plain_bytes(void)
{
	for (int c = 0x20; c < 0x80; c++)
		plain_byte[c] = c != '"' && c != '\\';
}

/* The first byte at or after i that does not stand for itself (n if none).
 * Sixteen bytes at a time where SSE2 is (every x86-64): a signed compare
 * below ' ' catches the controls and every byte of 0x80 and above at once. */
static inline size_t skip_plain(const unsigned char *s, size_t i, size_t n)
{
#ifdef __SSE2__
	const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(' ');
	while (n - i >= 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
		__m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
		                            _mm_cmplt_epi8(v, space));
		unsigned mask = (unsigned)_mm_movemask_epi8(stop);
		if (mask)
			return i + (size_t)__builtin_ctz(mask);
		i += 16;
	}
#endif
	while (i < n && plain_byte[s[i]])
		i++;
	return i;
}

/* A canonical string: raw UTF-8 (strictly valid), escapes only where the
 * canonical form puts them. Sets *escaped if any escape was seen. */
static int scan_string_rest(struct scanner *sc, int *escaped)
{
	const unsigned char *s = sc->s;
	size_t i = sc->i + 1, n = sc->n;
	*escaped = 0;
	while (i < n) {
		i = skip_plain(s, i, n);
		if (i >= n)
			break;
		unsigned char c = s[i];
		if (c == '"') {
			sc->i = i + 1;
			return 1;
		}
		if (c < 0x20)
			return 0;
		if (c == '\\') {
			*escaped = 1;
			if (i + 1 >= n)
				return 0;
			switch (s[i + 1]) {
			case '"': case '\\': case 'b': case 'f': case 'n': case 'r': case 't':
				i += 2;
				continue;
			case 'u':
				if (i + 5 >= n || s[i + 2] != '0' || s[i + 3] != '0' ||
				    (s[i + 4] != '0' && s[i + 4] != '1'))
					return 0;
				unsigned char h = s[i + 5];
				int lo = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1;
				if (lo < 0)
					return 0;
				int val = (s[i + 4] - '0') * 16 + lo;
				if (val == '\b' || val == '\f' || val == '\n' || val == '\r' || val == '\t')
					return 0;
				i += 6;
				continue;
			default:
				return 0;
			}
		}
		if (c < 0x80) {
			i++;
			continue;
		}
		/* Strict UTF-8: no overlongs, no surrogates, nothing past U+10FFFF. */
		int more;
		uint32_t cp, min;
		if (c >= 0xC2 && c <= 0xDF) { more = 1; cp = c & 0x1F; min = 0x80; }
		else if (c >= 0xE0 && c <= 0xEF) { more = 2; cp = c & 0x0F; min = 0x800; }
		else if (c >= 0xF0 && c <= 0xF4) { more = 3; cp = c & 0x07; min = 0x10000; }
		else return 0;
		if (i + (size_t)more >= n)
			return 0;
		for (int k = 1; k <= more; k++) {
			if ((s[i + k] & 0xC0) != 0x80)
				return 0;
			cp = (cp << 6) | (s[i + k] & 0x3F);
		}
		if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		i += (size_t)more + 1;
	}
	return 0;
}

/* scan_string_rest, with the common case first and in line: plain bytes
 * up to the closing quote. */
static inline int scan_string(struct scanner *sc, int *escaped)
{
	size_t i = skip_plain(sc->s, sc->i + 1, sc->n);
	if (i < sc->n && sc->s[i] == '"') {
		*escaped = 0;
		sc->i = i + 1;
		return 1;
	}
	return scan_string_rest(sc, escaped);
}

/* The JCS key order (utf16_cmp < 0), with ASCII keys decided in line. */
static inline int key_before(const unsigned char *a, size_t an, const unsigned char *b, size_t bn)
{
	size_t m = an < bn ? an : bn, i = 0;
	while (i < m && a[i] == b[i])
		i++;
	if (i == m)
		return an < bn;
	if (a[i] < 0x80 && b[i] < 0x80)
		return a[i] < b[i];
	return utf16_cmp((const char *)a, an, (const char *)b, bn) < 0;
}

static int is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static int scan_number(struct scanner *sc)
{
	const unsigned char *s = sc->s;
	size_t i = sc->i, n = sc->n, start = i, int_start, int_end = 0, frac_end = 0;
	int simple = 1;
	if (i < n && s[i] == '-')
		i++;
	if (i >= n || !is_digit(s[i]))
		return 0;
	int_start = i;
	if (s[i] == '0') {
		i++;
		if (i < n && is_digit(s[i]))
			return 0;
	} else {
		while (i < n && is_digit(s[i]))
			i++;
	}
	if (i < n && s[i] == '.') {
		simple = 0;
		int_end = i;
		i++;
		if (i >= n || !is_digit(s[i]))
			return 0;
		while (i < n && is_digit(s[i]))
			i++;
		frac_end = i;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		simple = 0;
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= n || !is_digit(s[i]))
			return 0;
		while (i < n && is_digit(s[i]))
			i++;
	}
	size_t len = i - start;
	sc->i = i;
	/* Plain integers of at most 15 digits are exact doubles printed as
	 * themselves - except "-0", which prints as "0". */
	if (simple && len <= 15 && !(len == 2 && s[start] == '-' && s[start + 1] == '0'))
		return 1;
	if (!simple && int_end && frac_end == i) {
		/* A plain decimal of at most 15 significant digits (DBL_DIG) is the
		 * only such decimal naming its double, so it is the shortest form;
		 * ECMAScript prints it as is unless it ends in 0 or has 6 or more
		 * zeros after "0." (then it takes an exponent). */
		size_t int_len = int_end - int_start, frac_len = frac_end - int_end - 1;
		if (s[frac_end - 1] == '0')
			return 0;
		if (int_len == 1 && s[int_start] == '0') {
			size_t zeros = 0;
			while (s[int_end + 1 + zeros] == '0')
				zeros++;
			if (zeros > 5)
				return 0;
			if (frac_len - zeros <= 15)
				return 1;
		} else if (int_len + frac_len <= 15) {
			return 1;
		}
	}
	if (len > 400)
		return 0;
	char tmp[408], canon[40];
	memcpy(tmp, s + start, len);
	tmp[len] = '\0';
	int cl = canon_number(strtod(tmp, NULL), canon);
	return cl == (int)len && memcmp(canon, tmp, len) == 0;
}

static int scan_value(struct scanner *sc, int depth);

static void note_member(struct scanner *sc, const unsigned char *key, size_t klen,
                        size_t member_off, size_t value_off, int hex64)
{
	struct canon_member *m = NULL;
	struct canon_scan *t = sc->top;
	if (klen == 4 && memcmp(key, "hash", 4) == 0) m = &t->hash;
	else if (klen == 8 && memcmp(key, "prevHash", 8) == 0) m = &t->prev_hash;
	else if (klen == 3 && memcmp(key, "seq", 3) == 0) m = &t->seq;
	else if (klen == 4 && memcmp(key, "kind", 4) == 0) m = &t->kind;
	else if (klen == 2 && memcmp(key, "id", 2) == 0) m = &t->id;
	else if (klen == 8 && memcmp(key, "evidence", 8) == 0) m = &t->evidence;
	if (!m)
		return;
	m->present = 1;
	m->member_off = member_off;
	m->member_len = sc->i - member_off;
	m->value_off = value_off;
	m->value_len = sc->i - value_off;
	m->hex64 = hex64;
}

static int scan_object(struct scanner *sc, int depth)
{
	const unsigned char *prev = NULL;
	size_t prev_len = 0;
	sc->i++; /* '{' */
	if (sc->i < sc->n && sc->s[sc->i] == '}') {
		sc->i++;
		return 1;
	}
	for (;;) {
		size_t member_off = sc->i;
		int escaped;
		if (sc->i >= sc->n || sc->s[sc->i] != '"' || !scan_string(sc, &escaped))
			return 0;
		/* Keys with escapes would have to be decoded to be ordered: rare
		 * enough in traces to leave to the tree path. */
		if (escaped)
			return 0;
		const unsigned char *key = sc->s + member_off + 1;
		size_t klen = sc->i - member_off - 2;
		if (prev && !key_before(prev, prev_len, key, klen))
			return 0;
		prev = key;
		prev_len = klen;
		if (sc->i >= sc->n || sc->s[sc->i] != ':')
			return 0;
		sc->i++;
		size_t value_off = sc->i;
		/* An entry's hash and prevHash: 64 hex digits in quotes, a plain
		 * string of its own length, checked at once. */
		int hex64 = depth == 0 && sc->n - sc->i >= 66 && sc->s[sc->i] == '"' && sc->s[sc->i + 65] == '"' &&
		            is_sha256_hex((const char *)sc->s + sc->i + 1, 64);
		if (hex64)
			sc->i += 66;
		else if (!scan_value(sc, depth + 1))
			return 0;
		if (depth == 0)
			note_member(sc, key, klen, member_off, value_off, hex64);
		if (sc->i >= sc->n)
			return 0;
		if (sc->s[sc->i] == '}') {
			sc->i++;
			return 1;
		}
		if (sc->s[sc->i] != ',')
			return 0;
		sc->i++;
	}
}

static int scan_value(struct scanner *sc, int depth)
{
	if (sc->i >= sc->n || depth > SCAN_MAX_DEPTH)
		return 0;
	switch (sc->s[sc->i]) {
	case '{':
		return scan_object(sc, depth);
	case '[':
		sc->i++;
		if (sc->i < sc->n && sc->s[sc->i] == ']') {
			sc->i++;
			return 1;
		}
		for (;;) {
			if (!scan_value(sc, depth + 1) || sc->i >= sc->n)
				return 0;
			if (sc->s[sc->i] == ']') {
				sc->i++;
				return 1;
			}
			if (sc->s[sc->i] != ',')
				return 0;
			sc->i++;
		}
	case '"': {
		int escaped;
		return scan_string(sc, &escaped);
	}
	case 't':
		if (sc->n - sc->i >= 4 && memcmp(sc->s + sc->i, "true", 4) == 0) {
			sc->i += 4;
			return 1;
		}
		return 0;
	case 'f':
		if (sc->n - sc->i >= 5 && memcmp(sc->s + sc->i, "false", 5) == 0) {
			sc->i += 5;
			return 1;
		}
		return 0;
	case 'n':
		if (sc->n - sc->i >= 4 && memcmp(sc->s + sc->i, "null", 4) == 0) {
			sc->i += 4;
			return 1;
		}
		return 0;
	default:
		return scan_number(sc);
	}
}

int canon_scan(const char *line, size_t n, struct canon_scan *out)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, init_plain_bytes);
	struct scanner sc = {(const unsigned char *)line, n, 0, out};
	memset(out, 0, sizeof *out);
	if (n == 0 || line[0] != '{')
		return 0;
	return scan_object(&sc, 0) && sc.i == n;
}
