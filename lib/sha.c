/* sha.c - SHA-256 helpers over libcrypto's SHA256_* functions (sha.h says
 * why not EVP). */
#include "sha.h"

#include <errno.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* The one place the deprecated functions are called. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
void sha256_init(struct sha256 *s)
{
	SHA256_Init(&s->c);
}

void sha256_update(struct sha256 *s, const void *data, size_t n)
{
	SHA256_Update(&s->c, data, n);
}

void sha256_final(struct sha256 *s, unsigned char md[32])
{
	SHA256_Final(md, &s->c);
}
#pragma GCC diagnostic pop

void hex_encode(const unsigned char *in, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[in[i] >> 4];
		out[2 * i + 1] = hex[in[i] & 15];
	}
	out[2 * n] = '\0';
}

void sha256_hex(const void *data, size_t n, char out[SHA256_HEX_LEN + 1])
{
	struct sha256 s;
	unsigned char md[32];
	sha256_init(&s);
	sha256_update(&s, data, n);
	sha256_final(&s, md);
	hex_encode(md, 32, out);
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

int sha256_file_hex(int fd, char out[SHA256_HEX_LEN + 1])
{
	unsigned char buf[65536], md[32];
	struct sha256 s;
	sha256_init(&s);
	for (;;) {
		ssize_t got = read(fd, buf, sizeof buf);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -1;
		if (got == 0)
			break;
		sha256_update(&s, buf, (size_t)got);
	}
	sha256_final(&s, md);
	hex_encode(md, 32, out);
	return 0;
}
