/* sha.c - SHA-256 helpers over libcrypto's EVP interface. */
#include "sha.h"

#include <errno.h>
#include <openssl/evp.h>
#include <unistd.h>

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
	unsigned char md[32];
	unsigned int len = 0;
	EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
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
	unsigned int len = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(ctx);
		errno = ENOMEM;
		return -1;
	}
	for (;;) {
		ssize_t got = read(fd, buf, sizeof buf);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			int saved = errno;
			EVP_MD_CTX_free(ctx);
			errno = saved;
			return -1;
		}
		if (got == 0)
			break;
		EVP_DigestUpdate(ctx, buf, (size_t)got);
	}
	EVP_DigestFinal_ex(ctx, md, &len);
	EVP_MD_CTX_free(ctx);
	hex_encode(md, 32, out);
	return 0;
}
