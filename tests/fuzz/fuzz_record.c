/* fuzz_record.c - the result record's integrity object as sfma-verify
 * takes it: its fixed shape (lib/record.c record_integrity_shape) and the
 * one spelling of the key it embeds (lib/sign.c
 * ed25519_public_from_exact_pem). Bytes nothing checks must not pass.
 *
 * Input byte 0, bit 0, picks the mode; the rest is the text.
 *  - shape: the text as JSON. record_integrity_shape must agree with a
 *    reference written from sfma-formats(5): an object whose member names
 *    are, compared as whole strings (U+0000 and all), among algorithm,
 *    headHash, entries, manifestSha256, resultSha256, treeSize, merkleRoot,
 *    observedHead, observedEntries, observerSignature and signature; the
 *    first five present, algorithm exactly "sha256-chain-v1", entries a
 *    whole number >= 0, the others strings; treeSize (a whole number >= 0)
 *    and merkleRoot (a string) both there or neither, and so observedHead
 *    (a string) and observedEntries (a whole number >= 0), and
 *    observerSignature only with them; signature and observerSignature,
 *    when there, each an
 *    object of exactly algorithm ("ed25519"), publicKey and value, strings.
 *    A refusal is one line that names integrity.
 *  - pem: the text as an embedded publicKey. It is accepted exactly when
 *    it is "-----BEGIN PUBLIC KEY-----\n", the base64 of a 44-byte Ed25519
 *    SubjectPublicKeyInfo (its fixed 12-byte prefix, then the key) as one
 *    line of 60, and "\n-----END PUBLIC KEY-----\n", nothing else; the
 *    key returned is the one spelled. And the first 32 bytes of the text,
 *    taken as a key and spelled so, are accepted as that key. */
#include "fuzz.h"

#include <openssl/evp.h>

#include "ndjson.h"
#include "record.h"
#include "sign.h"

/* ---- the shape, from the format's text ----------------------------------- */

static int named(const char *key, size_t n, const char *name)
{
	return strlen(name) == n && memcmp(key, name, n) == 0;
}

static int string_exactly(const json_t *v, const char *s)
{
	return json_is_string(v) && named(json_string_value(v), json_string_length(v), s);
}

static int only_members(json_t *obj, const char *const *names)
{
	for (void *it = json_object_iter(obj); it; it = json_object_iter_next(obj, it)) {
		int known = 0;
		for (const char *const *n = names; *n; n++)
			known |= named(json_object_iter_key(it), json_object_iter_key_len(it), *n);
		if (!known)
			return 0;
	}
	return 1;
}

static int ref_signature(json_t *s)
{
	static const char *const names[] = {"algorithm", "publicKey", "value", NULL};
	return json_is_object(s) && only_members(s, names) &&
	       string_exactly(json_object_get(s, "algorithm"), "ed25519") &&
	       json_is_string(json_object_get(s, "publicKey")) && json_is_string(json_object_get(s, "value"));
}

static int ref_shape(json_t *v)
{
	static const char *const names[] = {"algorithm", "headHash", "entries", "manifestSha256", "resultSha256",
	                                    "treeSize", "merkleRoot", "observedHead", "observedEntries",
	                                    "observerSignature", "signature", NULL};
	if (!json_is_object(v) || !only_members(v, names))
		return 0;
	json_t *oh = json_object_get(v, "observedHead"), *oe = json_object_get(v, "observedEntries");
	json_t *os = json_object_get(v, "observerSignature");
	double o = json_is_number(oe) ? json_number_value(oe) : -1;
	if (!oh != !oe || (oh && !json_is_string(oh)) || (oe && !(o >= 0 && o <= 4.6e18 && o == (double)(long long)o)) ||
	    (os && (!oh || !ref_signature(os))))
		return 0;
	json_t *entries = json_object_get(v, "entries"), *sig = json_object_get(v, "signature");
	json_t *size = json_object_get(v, "treeSize"), *root = json_object_get(v, "merkleRoot");
	double d = json_is_number(entries) ? json_number_value(entries) : -1;
	double t = json_is_number(size) ? json_number_value(size) : -1;
	if (!size != !root || (size && !(t >= 0 && t <= 4.6e18 && t == (double)(long long)t)) ||
	    (root && !json_is_string(root)))
		return 0;
	return string_exactly(json_object_get(v, "algorithm"), "sha256-chain-v1") &&
	       json_is_string(json_object_get(v, "headHash")) && d >= 0 && d <= 4.6e18 && d == (double)(long long)d &&
	       json_is_string(json_object_get(v, "manifestSha256")) &&
	       json_is_string(json_object_get(v, "resultSha256")) && (!sig || ref_signature(sig));
}

static void check_shape(const char *text, size_t n)
{
	json_t *v = ndjson_parse(text, n, NULL);
	if (!v)
		return;
	struct sfma_err e = {{0}};
	int ok = record_integrity_shape(v, &e) == 0;
	FUZZ_CHECK(ok == ref_shape(v), "record_integrity_shape says %s, the reference %s: %s", ok ? "sound" : "refused",
	           ok ? "refused" : "sound", e.text);
	if (!ok)
		FUZZ_CHECK(strncmp(e.text, "integrity", 9) == 0 || strncmp(e.text, "record has no integrity", 23) == 0,
		           "a refusal that names no member: %s", e.text);
	FUZZ_CHECK(!strchr(e.text, '\n'), "a refusal of more than one line: %s", e.text);
	json_decref(v);
}

/* ---- the key's one spelling ---------------------------------------------- */

static const unsigned char spki_prefix[12] = {0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};
static const char begin[] = "-----BEGIN PUBLIC KEY-----\n", end[] = "\n-----END PUBLIC KEY-----\n";

/* The text that spells key, in out (at least 114 bytes); its length. */
static size_t spell(const unsigned char key[32], char *out)
{
	unsigned char der[44];
	memcpy(der, spki_prefix, 12);
	memcpy(der + 12, key, 32);
	size_t n = sizeof begin - 1;
	memcpy(out, begin, n);
	n += (size_t)EVP_EncodeBlock((unsigned char *)out + n, der, sizeof der);
	memcpy(out + n, end, sizeof end);
	return n + sizeof end - 1;
}

/* 1 and key filled if text is the spelling of a key. */
static int ref_spelled(const char *text, size_t n, unsigned char key[32])
{
	const size_t b = sizeof begin - 1, t = sizeof end - 1;
	unsigned char der[48];
	char again[128];
	if (n != b + 60 + t || memcmp(text, begin, b) != 0 || memcmp(text + b + 60, end, t) != 0)
		return 0;
	/* EVP_DecodeBlock counts the padding as output bytes: 45 for 60. */
	if (memchr(text + b, '\0', 60) || EVP_DecodeBlock(der, (const unsigned char *)text + b, 60) != 45 ||
	    memcmp(der, spki_prefix, 12) != 0)
		return 0;
	memcpy(key, der + 12, 32);
	return spell(key, again) == n && memcmp(again, text, n) == 0;
}

static void check_key(const char *what, const char *text, size_t n, int want, const unsigned char want_key[32])
{
	struct sfma_err e = {{0}};
	EVP_PKEY *k = ed25519_public_from_exact_pem(text, n, &e);
	FUZZ_CHECK(!!k == want, "%s: %s where the reference %s (%s)", what, k ? "accepted" : "refused",
	           want ? "accepts" : "refuses", e.text);
	if (k) {
		unsigned char raw[32];
		size_t rl = sizeof raw;
		FUZZ_CHECK(EVP_PKEY_get_raw_public_key(k, raw, &rl) == 1 && rl == 32 && memcmp(raw, want_key, 32) == 0,
		           "%s: accepted as another key", what);
		EVP_PKEY_free(k);
	} else {
		FUZZ_CHECK(e.text[0] && !strchr(e.text, '\n'), "%s: a refusal that is not one line: %s", what, e.text);
	}
}

static void check_pem(const char *text, size_t n)
{
	unsigned char key[32] = {0};
	int spelled = ref_spelled(text, n, key);
	check_key("the text", text, n, spelled, key);
	if (n >= 32) {
		char framed[128];
		memcpy(key, text, 32);
		size_t fn = spell(key, framed);
		check_key("the first 32 bytes spelled", framed, fn, 1, key);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *text = (const char *)data + 1;
	if (data[0] & 1)
		check_pem(text, size - 1);
	else
		check_shape(text, size - 1);
	return 0;
}
