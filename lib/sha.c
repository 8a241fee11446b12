/* sha.c - SHA-256 helpers over libcrypto's SHA256_* functions (sha.h says
 * why not EVP). */
#include "sha.h"

#include <errno.h>
#include <unistd.h>

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

int is_sha256_hex(const char *s, size_t n)
{
	if (n != SHA256_HEX_LEN)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
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
