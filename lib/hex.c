/* hex.c - digests as lowercase hex, and the check that text is one
 * (hex.h). Apart from sha.c so that a program that only reads digests
 * (sfma itself, through the canonical scanner) does not load libcrypto,
 * 0.7 ms of every such process's start. */
#include "hex.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

void hex_encode(const unsigned char *in, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[in[i] >> 4];
		out[2 * i + 1] = hex[in[i] & 15];
	}
	out[2 * n] = '\0';
}

/* Sixteen digits at a time where SSE2 is (every x86-64: bytes of 0x80
 * and above are negative and fail both ranges), else without a branch
 * per digit: a trace's verification checks two per line. */
int is_sha256_hex(const char *s, size_t n)
{
	if (n != SHA256_HEX_LEN)
		return 0;
#ifdef __SSE2__
	const __m128i below_0 = _mm_set1_epi8('0' - 1), above_9 = _mm_set1_epi8('9' + 1);
	const __m128i below_a = _mm_set1_epi8('a' - 1), above_f = _mm_set1_epi8('f' + 1);
	unsigned ok = 0xFFFF;
	for (int i = 0; i < SHA256_HEX_LEN; i += 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
		__m128i digit = _mm_and_si128(_mm_cmpgt_epi8(v, below_0), _mm_cmplt_epi8(v, above_9));
		__m128i letter = _mm_and_si128(_mm_cmpgt_epi8(v, below_a), _mm_cmplt_epi8(v, above_f));
		ok &= (unsigned)_mm_movemask_epi8(_mm_or_si128(digit, letter));
	}
	return ok == 0xFFFF;
#else
	unsigned bad = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		bad |= (unsigned)((c < '0' || c > '9') && (c < 'a' || c > 'f'));
	}
	return bad == 0;
#endif
}
