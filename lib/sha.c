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

void sha256_hex(const void *data, size_t n, char out[SHA256_HEX_LEN + 1])
{
	struct sha256 s;
	unsigned char md[32];
	sha256_init(&s);
	sha256_update(&s, data, n);
	sha256_final(&s, md);
	hex_encode(md, 32, out);
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
