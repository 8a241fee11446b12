/* tlog.c - checkpoints, signed notes, verifier keys and proofs as text (tlog.h). */
#include "tlog.h"
#include "sha.h"
#include "sign.h"
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* U+2014 EM DASH and a space: how every signature line begins. */
#define SIG_PREFIX "\xe2\x80\x94 "
#define SIG_PREFIX_LEN 4
/* A SHA-256 in standard base64 with its padding. */
#define HASH_B64_LEN 44

void tlog_origin(const void *line, size_t n, char out[TLOG_ORIGIN_LEN + 1])
{
	memcpy(out, TLOG_ORIGIN_PREFIX, sizeof TLOG_ORIGIN_PREFIX - 1);
	sha256_hex(line, n, out + sizeof TLOG_ORIGIN_PREFIX - 1);
}

void tlog_checkpoint_text(const struct tlog_checkpoint *c, struct buf *out)
{
	char *root = base64_encode(c->root, MERKLE_HASH_LEN);
	buf_printf(out, "%s\n%llu\n%s\n", c->origin, (unsigned long long)c->size, root);
	free(root);
}

/* ---- keys and signatures ------------------------------------------------------ */

/* signed-note's key ID: SHA-256(name || 0x0A || 0x01 || public key)[:4], big-endian. */
static uint32_t key_id(const char *name, const unsigned char pub[32])
{
	static const unsigned char sep[2] = {'\n', TLOG_ALG_ED25519};
	struct sha256 s;
	unsigned char md[32];
	sha256_init(&s);
	sha256_update(&s, name, strlen(name));
	sha256_update(&s, sep, sizeof sep);
	sha256_update(&s, pub, 32);
	sha256_final(&s, md);
	return (uint32_t)md[0] << 24 | (uint32_t)md[1] << 16 | (uint32_t)md[2] << 8 | md[3];
}

int tlog_key_from_pkey(EVP_PKEY *key, struct tlog_key *k, struct sfma_err *e)
{
	size_t len = sizeof k->pub;
	if (!key || EVP_PKEY_get_id(key) != EVP_PKEY_ED25519 || EVP_PKEY_get_raw_public_key(key, k->pub, &len) != 1 ||
	    len != sizeof k->pub)
		return err_set(e, "not an Ed25519 key");
	k->id = key_id(TLOG_KEY_NAME, k->pub);
	return 0;
}

void tlog_vkey(const struct tlog_key *k, struct buf *out)
{
	unsigned char typed[33];
	typed[0] = TLOG_ALG_ED25519;
	memcpy(typed + 1, k->pub, 32);
	char *b64 = base64_encode(typed, sizeof typed);
	buf_printf(out, "%s+%08x+%s", TLOG_KEY_NAME, (unsigned)k->id, b64);
	free(b64);
}

int tlog_note_sign(EVP_PKEY *priv, const struct tlog_key *k, const char *text, size_t n, struct buf *out,
                   struct sfma_err *e)
{
	unsigned char sig[4 + 64];
	if (n == 0 || text[n - 1] != '\n')
		return err_set(e, "a note's text ends in a newline");
	sig[0] = (unsigned char)(k->id >> 24);
	sig[1] = (unsigned char)(k->id >> 16);
	sig[2] = (unsigned char)(k->id >> 8);
	sig[3] = (unsigned char)k->id;
	if (ed25519_sign(priv, text, n, sig + 4) < 0)
		return err_set(e, "signing failed");
	char *b64 = base64_encode(sig, sizeof sig);
	buf_add(out, text, n);
	buf_printf(out, "\n" SIG_PREFIX "%s %s\n", TLOG_KEY_NAME, b64);
	free(b64);
	return 0;
}

/* ---- reading ------------------------------------------------------------------ */

/* The next line of [*p, end) without its newline; 0 when no newline is left. */
static int next_line(const char **p, const char *end, const char **line, size_t *len)
{
	const char *nl = memchr(*p, '\n', (size_t)(end - *p));
	if (!nl)
		return 0;
	*line = *p;
	*len = (size_t)(nl - *p);
	*p = nl + 1;
	return 1;
}

/* A size as tlog spells it: decimal, no sign, no leading zero (but "0"),
 * at most 2^63 - 1. */
static int parse_size(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	if (n == 0 || n > 19 || (s[0] == '0' && n > 1))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		uint64_t d = (uint64_t)(s[i] - '0');
		if (v > ((uint64_t)MERKLE_MAX_SIZE - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static int parse_hash(const char *s, size_t n, unsigned char out[MERKLE_HASH_LEN])
{
	unsigned char tmp[MERKLE_HASH_LEN + 3];
	return n == HASH_B64_LEN && base64_decode(s, n, tmp, sizeof tmp) == MERKLE_HASH_LEN
	       ? (memcpy(out, tmp, MERKLE_HASH_LEN), 0) : -1;
}

/* The code point of the valid UTF-8 sequence of len bytes at s. */
static uint32_t code_point(const unsigned char *s, size_t len)
{
	static const unsigned char lead_mask[5] = {0, 0x7f, 0x1f, 0x0f, 0x07};
	uint32_t r = s[0] & lead_mask[len];
	for (size_t i = 1; i < len; i++)
		r = r << 6 | (s[i] & 0x3f);
	return r;
}

/* Go's unicode.IsSpace, which note.Open refuses in a key name. */
static int is_space(uint32_t r)
{
	return r == ' ' || (r >= 0x09 && r <= 0x0d) || r == 0x85 || r == 0xa0 || r == 0x1680 ||
	       (r >= 0x2000 && r <= 0x200a) || r == 0x2028 || r == 0x2029 || r == 0x202f || r == 0x205f || r == 0x3000;
}

/* A key name as signed-note allows it: not empty, no space, no plus. */
static int valid_name(const char *s, size_t n)
{
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n;) {
		size_t len = utf8_seq((const unsigned char *)s + i, n - i);
		if (len == 0 || s[i] == '+' || is_space(code_point((const unsigned char *)s + i, len)))
			return 0;
		i += len;
	}
	return 1;
}

/* signed-note: valid UTF-8 and no control character but the newline. */
static int note_chars_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 && c != '\n')
			return 0;
		size_t len = utf8_seq((const unsigned char *)s + i, n - i);
		if (len == 0)
			return 0;
		i += len;
	}
	return 1;
}

/* The three lines of an sfma checkpoint's text (which ends in a newline). */
static int parse_body(const char *text, size_t n, struct tlog_checkpoint *c, struct sfma_err *e)
{
	const char *p = text, *end = text + n, *line;
	size_t len;
	if (!next_line(&p, end, &line, &len) || len == 0)
		return err_set(e, "checkpoint: no origin line");
	if (len != TLOG_ORIGIN_LEN || memcmp(line, TLOG_ORIGIN_PREFIX, sizeof TLOG_ORIGIN_PREFIX - 1) != 0 ||
	    !is_sha256_hex(line + sizeof TLOG_ORIGIN_PREFIX - 1, 64))
		return err_set(e, "checkpoint: the origin is not sfma/ and 64 lowercase hex digits");
	memcpy(c->origin, line, len);
	c->origin[len] = '\0';
	if (!next_line(&p, end, &line, &len) || parse_size(line, len, &c->size) < 0)
		return err_set(e, "checkpoint: the second line is not a tree size (decimal, no leading zero)");
	if (!next_line(&p, end, &line, &len) || parse_hash(line, len, c->root) < 0)
		return err_set(e, "checkpoint: the third line is not a base64 SHA-256 root");
	if (p != end)
		return err_set(e, "checkpoint: lines after the root (sfma writes no extension lines)");
	return 0;
}

/* The last "\n\n" of s[0..n), or NULL. */
static const char *last_blank(const char *s, size_t n)
{
	for (size_t i = n; i >= 2; i--)
		if (s[i - 1] == '\n' && s[i - 2] == '\n')
			return s + i - 2;
	return NULL;
}

/* One signature line (without its newline); with key, one by key must verify. */
static int check_signature_line(const char *line, size_t len, const char *text, size_t text_len,
                                const struct tlog_key *key, int *verified, struct sfma_err *e)
{
	if (len < SIG_PREFIX_LEN || memcmp(line, SIG_PREFIX, SIG_PREFIX_LEN) != 0)
		return err_set(e, "checkpoint: a signature line does not begin with an em dash and a space");
	line += SIG_PREFIX_LEN;
	len -= SIG_PREFIX_LEN;
	const char *space = memchr(line, ' ', len);
	if (!space || !valid_name(line, (size_t)(space - line)))
		return err_set(e, "checkpoint: a signature line without a valid key name");
	size_t name_len = (size_t)(space - line);
	const char *b64 = space + 1;
	size_t b64_len = len - name_len - 1;
	unsigned char *sig = xmalloc(b64_len / 4 * 3 + 3);
	long sig_len = b64_len ? base64_decode(b64, b64_len, sig, b64_len / 4 * 3 + 3) : -1;
	int rc = 0;
	if (sig_len < 5) {
		rc = err_set(e, "checkpoint: a signature that is not base64 of a key ID and a signature");
	} else if (key && name_len == strlen(TLOG_KEY_NAME) && memcmp(line, TLOG_KEY_NAME, name_len) == 0 &&
	           ((uint32_t)sig[0] << 24 | (uint32_t)sig[1] << 16 | (uint32_t)sig[2] << 8 | sig[3]) == key->id &&
	           !*verified) {
		/* The key's name and ID: this one is checked (signed-note: a
		 * known key's signature that fails rejects the note). */
		EVP_PKEY *pk = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, key->pub, sizeof key->pub);
		if (!pk || !ed25519_verify(pk, text, text_len, sig + 4, (size_t)sig_len - 4))
			rc = err_set(e, "checkpoint: invalid signature by %s+%08x", TLOG_KEY_NAME, (unsigned)key->id);
		else
			*verified = 1;
		EVP_PKEY_free(pk);
	}
	free(sig);
	return rc;
}

int tlog_checkpoint_open(const char *note, size_t n, const struct tlog_key *key, struct tlog_checkpoint *c,
                         enum tlog_signed *how, struct sfma_err *e)
{
	if (n > TLOG_TEXT_MAX)
		return err_set(e, "checkpoint: larger than %u bytes", TLOG_TEXT_MAX);
	if (n == 0 || note[n - 1] != '\n')
		return err_set(e, "checkpoint: does not end in a newline");
	if (!note_chars_ok(note, n))
		return err_set(e, "checkpoint: not UTF-8 text without control characters");
	/* The text is separated from the signatures by the last empty line;
	 * an sfma checkpoint's text has none, so without one it is the note
	 * text alone. */
	const char *blank = last_blank(note, n);
	size_t text_len = blank ? (size_t)(blank - note) + 1 : n;
	if (parse_body(note, text_len, c, e) < 0)
		return -1;
	*how = TLOG_UNSIGNED;
	if (!blank)
		return 0;
	const char *p = blank + 2, *end = note + n, *line;
	size_t len;
	int count = 0, verified = 0;
	if (p == end)
		return err_set(e, "checkpoint: an empty line and no signature after it");
	while (next_line(&p, end, &line, &len)) {
		if (++count > TLOG_MAX_SIGNATURES)
			return err_set(e, "checkpoint: more than %d signatures", TLOG_MAX_SIGNATURES);
		if (check_signature_line(line, len, note, text_len, key, &verified, e) < 0)
			return -1;
	}
	*how = verified ? TLOG_VERIFIED : TLOG_UNVERIFIED;
	return 0;
}

/* ---- proofs ------------------------------------------------------------------- */

void tlog_proof_text(const struct tlog_proof *p, struct buf *out)
{
	if (p->kind == TLOG_INCLUSION)
		buf_printf(out, "%s\nindex %llu\n", TLOG_PROOF_HEADER, (unsigned long long)p->index);
	else
		buf_printf(out, "old %llu\n", (unsigned long long)p->index);
	for (size_t i = 0; i < p->n; i++) {
		char *h = base64_encode(p->hash[i], MERKLE_HASH_LEN);
		buf_printf(out, "%s\n", h);
		free(h);
	}
	buf_addc(out, '\n');
	buf_add(out, p->note, p->note_len);
}

static int starts(const char *line, size_t len, const char *word)
{
	size_t n = strlen(word);
	return len >= n && memcmp(line, word, n) == 0;
}

int tlog_proof_parse(const char *text, size_t n, struct tlog_proof *p, struct sfma_err *e)
{
	const char *at = text, *end = text + n, *line;
	size_t len;
	memset(p, 0, sizeof *p);
	if (n > TLOG_TEXT_MAX)
		return err_set(e, "proof: larger than %u bytes", TLOG_TEXT_MAX);
	if (!next_line(&at, end, &line, &len))
		return err_set(e, "proof: no complete first line");
	if (len == sizeof TLOG_PROOF_HEADER - 1 && memcmp(line, TLOG_PROOF_HEADER, len) == 0) {
		p->kind = TLOG_INCLUSION;
		if (!next_line(&at, end, &line, &len))
			return err_set(e, "proof: no index line");
		if (starts(line, len, "extra ")) {
			/* Opaque and unauthenticated (C2SP tlog-proof): checked for
			 * its form, then left alone. */
			unsigned char *junk = xmalloc(len);
			long got = base64_decode(line + 6, len - 6, junk, len);
			free(junk);
			if (got < 0)
				return err_set(e, "proof: the extra line is not base64");
			if (!next_line(&at, end, &line, &len))
				return err_set(e, "proof: no index line");
		}
		if (!starts(line, len, "index ") || parse_size(line + 6, len - 6, &p->index) < 0)
			return err_set(e, "proof: no \"index N\" line (decimal, no leading zero)");
	} else if (starts(line, len, "old ")) {
		p->kind = TLOG_CONSISTENCY;
		if (parse_size(line + 4, len - 4, &p->index) < 0)
			return err_set(e, "proof: the old size is not decimal without a leading zero");
	} else {
		return err_set(e, "proof: neither %s nor a consistency proof (\"old N\")", TLOG_PROOF_HEADER);
	}
	for (;;) {
		if (!next_line(&at, end, &line, &len))
			return err_set(e, "proof: no empty line before the checkpoint");
		if (len == 0)
			break;
		if (p->n == MERKLE_PROOF_MAX)
			return err_set(e, "proof: more than %d hashes", MERKLE_PROOF_MAX);
		if (parse_hash(line, len, p->hash[p->n]) < 0)
			return err_set(e, "proof: hash %zu is not a base64 SHA-256", p->n + 1);
		p->n++;
	}
	if (at == end)
		return err_set(e, "proof: no checkpoint after the empty line");
	p->note = at;
	p->note_len = (size_t)(end - at);
	return 0;
}
