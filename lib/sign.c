/* sign.c - Ed25519 over libcrypto's EVP interface. */
#include "sign.h"
#include "sha.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <stdlib.h>
#include <string.h>

/* Keys come from the environment of a pipeline stage: an encrypted key is
 * refused at once, where OpenSSL's default callback would prompt on the
 * terminal and stall the run. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf, (void)size, (void)rwflag, (void)u;
	return -1;
}

static EVP_PKEY *load_pem(const char *pem, size_t n, int private_key, struct sfma_err *e)
{
	if (n > (1u << 16)) {
		err_set(e, "key is larger than any Ed25519 PEM");
		return NULL;
	}
	BIO *bio = BIO_new_mem_buf(pem, (int)n);
	if (!bio) {
		err_set(e, "out of memory");
		return NULL;
	}
	EVP_PKEY *key = private_key ? PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL)
	                            : PEM_read_bio_PUBKEY(bio, NULL, no_passphrase, NULL);
	BIO_free(bio);
	if (!key) {
		err_set(e, "not a PEM %s key", private_key ? "PKCS#8 private" : "public");
		return NULL;
	}
	if (EVP_PKEY_get_id(key) != EVP_PKEY_ED25519) {
		EVP_PKEY_free(key);
		err_set(e, "not an Ed25519 key");
		return NULL;
	}
	return key;
}

EVP_PKEY *ed25519_private_from_pem(const char *pem, size_t n, struct sfma_err *e)
{
	return load_pem(pem, n, 1, e);
}

EVP_PKEY *ed25519_public_from_pem(const char *pem, size_t n, struct sfma_err *e)
{
	return load_pem(pem, n, 0, e);
}

EVP_PKEY *ed25519_private_take_env(const char *var, struct sfma_err *e)
{
	e->text[0] = '\0';
	char *pem = getenv(var);
	if (!pem || !*pem)
		return NULL;
	size_t n = strlen(pem);
	EVP_PKEY *key = load_pem(pem, n, 1, e);
	explicit_bzero(pem, n);
	unsetenv(var);
	return key;
}

EVP_PKEY *ed25519_public_from_exact_pem(const char *pem, size_t n, struct sfma_err *e)
{
	EVP_PKEY *key = load_pem(pem, n, 0, e);
	if (!key)
		return NULL;
	/* The key's one spelling: an Ed25519 SPKI has a single DER
	 * encoding, and the writer's framing is fixed. */
	char *want = ed25519_public_pem(key);
	size_t wn = want ? strlen(want) : 0;
	const char *why = NULL;
	if (!want)
		why = "cannot be encoded again";
	else if (n == wn && memcmp(pem, want, n) == 0)
		why = NULL;
	else if (n + 1 == wn && memcmp(pem, want, n) == 0)
		why = "no newline after the END line";
	else if (n > wn && memcmp(pem, want, wn) == 0)
		why = memmem(pem + wn, n - wn, "-----BEGIN", 10) ? "a second PEM block after the key"
		                                                 : "text after the END line";
	else if (memmem(pem, n, want, wn))
		why = "text before the BEGIN line";
	else
		why = "not one PEM block as sfma-seal writes it (BEGIN line, base64 in lines of 64, END line, newline)";
	free(want);
	if (why) {
		EVP_PKEY_free(key);
		err_set(e, "%s", why);
		return NULL;
	}
	return key;
}

char *ed25519_public_pem(EVP_PKEY *key)
{
	BIO *bio = BIO_new(BIO_s_mem());
	char *data, *out = NULL;
	if (!bio)
		return NULL;
	if (PEM_write_bio_PUBKEY(bio, key)) {
		long len = BIO_get_mem_data(bio, &data);
		out = xmalloc((size_t)len + 1);
		memcpy(out, data, (size_t)len);
		out[len] = '\0';
	}
	BIO_free(bio);
	return out;
}

int ed25519_sign(EVP_PKEY *key, const void *msg, size_t n, unsigned char sig[64])
{
	size_t siglen = 64;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok = ctx && EVP_DigestSignInit(ctx, NULL, NULL, NULL, key) == 1 &&
	         EVP_DigestSign(ctx, sig, &siglen, msg, n) == 1 && siglen == 64;
	EVP_MD_CTX_free(ctx);
	return ok ? 0 : -1;
}

int ed25519_verify(EVP_PKEY *key, const void *msg, size_t n, const unsigned char *sig, size_t siglen)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok = ctx && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, key) == 1 &&
	         EVP_DigestVerify(ctx, sig, siglen, msg, n) == 1;
	EVP_MD_CTX_free(ctx);
	return ok;
}

int ed25519_same_public(EVP_PKEY *a, EVP_PKEY *b)
{
	unsigned char ra[32], rb[32];
	size_t la = sizeof ra, lb = sizeof rb;
	return EVP_PKEY_get_raw_public_key(a, ra, &la) == 1 &&
	       EVP_PKEY_get_raw_public_key(b, rb, &lb) == 1 && la == lb && memcmp(ra, rb, la) == 0;
}

char *base64_encode(const unsigned char *in, size_t n)
{
	char *out = xmalloc(4 * ((n + 2) / 3) + 1);
	EVP_EncodeBlock((unsigned char *)out, in, (int)n);
	return out;
}

long base64_decode(const char *in, size_t n, unsigned char *out, size_t cap)
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t pad = 0, len = 0;
	unsigned acc = 0;
	int bits = 0;
	if (n % 4 != 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (in[i] == '=') {
			if (i < n - 2 || ++pad > 2)
				return -1;
			continue;
		}
		if (pad)
			return -1;
		const char *p = in[i] ? strchr(alphabet, in[i]) : NULL;
		if (!p)
			return -1;
		acc = (acc << 6) | (unsigned)(p - alphabet);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (len >= cap)
				return -1;
			out[len++] = (unsigned char)(acc >> bits);
			acc &= (1u << bits) - 1;
		}
	}
	/* The padding bits must be zero, so that one signature has one text. */
	if (acc != 0)
		return -1;
	return (long)len;
}

int ed25519_fingerprint(EVP_PKEY *key, char out[ED25519_FINGERPRINT_LEN + 1])
{
	unsigned char *der = NULL;
	int n = i2d_PUBKEY(key, &der);
	if (n <= 0) {
		strcpy(out, "unknown");
		return -1;
	}
	char hex[SHA256_HEX_LEN + 1];
	sha256_hex(der, (size_t)n, hex);
	OPENSSL_free(der);
	memcpy(out, hex, ED25519_FINGERPRINT_LEN);
	out[ED25519_FINGERPRINT_LEN] = '\0';
	return 0;
}
