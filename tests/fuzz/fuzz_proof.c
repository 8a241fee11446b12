/* fuzz_proof.c - the transparency-log texts sfma-verify --proof reads from
 * anyone (lib/tlog.c) and the tree math under them (lib/merkle.c).
 *
 * Input byte 0, bits 0-1, picks the mode; the rest is the input.
 *  - proof: the text as a proof (tlog_proof_parse). Accepted, it has one
 *    spelling: written again by tlog_proof_text it is the same bytes
 *    (without the extra line, which is opaque and dropped). Its
 *    checkpoint is then opened as in mode checkpoint.
 *  - checkpoint: the text as a checkpoint under a fixed key
 *    (tlog_checkpoint_open). Accepted, its note text is exactly the three
 *    lines tlog_checkpoint_text writes of what was read (all of the input
 *    when unsigned), and it is VERIFIED only if the input holds the fixed
 *    key's signature line of that text, as tlog_note_sign writes it.
 *  - signed: a checkpoint made of the input's bytes, signed by the fixed
 *    key, opens VERIFIED as itself; with one byte changed (where and how:
 *    bytes 1-2) it never opens VERIFIED as anything else.
 *  - tree: leaves from the input (each distinct). The frontier's root is
 *    the RFC 6962 tree hash computed by recursion at every size, whether
 *    the leaves are added one by one or as aligned pieces; every
 *    inclusion and consistency proof made from the ranges verifies, and
 *    with one bit of a hash, the root or the index changed, or a hash
 *    short, it does not. A refusal is always one line. */
#include "fuzz.h"

#include <openssl/evp.h>

#include "buf.h"
#include "merkle.h"
#include "sha.h"
#include "tlog.h"

static EVP_PKEY *key;
static struct tlog_key tkey;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	static const unsigned char seed[32] = "sfma fuzz_proof fixed test key!";
	struct sfma_err e;
	key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, sizeof seed);
	if (!key || tlog_key_from_pkey(key, &tkey, &e) < 0)
		abort();
	return 0;
}

static void one_line(const struct sfma_err *e)
{
	FUZZ_CHECK(e->text[0] && !strchr(e->text, '\n'), "a refusal that is not one line: %s", e->text);
}

/* ---- checkpoints ----------------------------------------------------------- */

static void check_checkpoint(const char *s, size_t n)
{
	struct tlog_checkpoint c;
	enum tlog_signed how;
	struct sfma_err e = {{0}};
	if (tlog_checkpoint_open(s, n, &tkey, &c, &how, &e) < 0) {
		one_line(&e);
		return;
	}
	struct buf text = {0}, signed_note = {0};
	tlog_checkpoint_text(&c, &text);
	FUZZ_CHECK(n >= text.len && memcmp(s, text.p, text.len) == 0, "the note text is not the checkpoint's three lines");
	if (how == TLOG_UNSIGNED)
		FUZZ_CHECK(n == text.len, "an unsigned checkpoint with bytes after its three lines");
	else
		FUZZ_CHECK(n > text.len + 1 && s[text.len] == '\n', "signature lines not after one empty line");
	FUZZ_CHECK(tlog_note_sign(key, &tkey, text.p, text.len, &signed_note, &e) == 0, "signing: %s", e.text);
	/* The key's signature line, as sfma writes it. */
	const char *line = signed_note.p + text.len + 1;
	size_t line_len = signed_note.len - text.len - 1;
	int holds = memmem(s + text.len, n - text.len, line, line_len) != NULL;
	FUZZ_CHECK((how == TLOG_VERIFIED) == holds, "VERIFIED is %d, the key's signature line is %s", how == TLOG_VERIFIED,
	           holds ? "there" : "not there");
	buf_free(&text);
	buf_free(&signed_note);
}

static int same(const struct tlog_checkpoint *a, const struct tlog_checkpoint *b)
{
	return strcmp(a->origin, b->origin) == 0 && a->size == b->size && memcmp(a->root, b->root, 32) == 0;
}

static void check_signed(const uint8_t *d, size_t n)
{
	if (n < 3 + 8 + 32)
		return;
	struct tlog_checkpoint c;
	uint64_t size = 0;
	for (int i = 0; i < 8; i++)
		size = size << 8 | d[3 + i];
	c.size = size & (uint64_t)MERKLE_MAX_SIZE;
	memcpy(c.root, d + 11, 32);
	tlog_origin(d + 43, n - 43, c.origin);
	struct buf text = {0}, note = {0};
	struct sfma_err e = {{0}};
	tlog_checkpoint_text(&c, &text);
	FUZZ_CHECK(tlog_note_sign(key, &tkey, text.p, text.len, &note, &e) == 0, "signing: %s", e.text);
	struct tlog_checkpoint got;
	enum tlog_signed how;
	FUZZ_CHECK(tlog_checkpoint_open(note.p, note.len, &tkey, &got, &how, &e) == 0 && how == TLOG_VERIFIED &&
	           same(&got, &c), "a checkpoint signed by the key does not open as itself: %s", e.text);
	size_t at = ((size_t)d[1] << 8 | d[2]) % note.len;
	unsigned char flip = d[0] >> 2 ? (unsigned char)(d[0] >> 2) : 1;
	note.p[at] ^= (char)flip;
	memset(&got, 0, sizeof got);
	if (tlog_checkpoint_open(note.p, note.len, &tkey, &got, &how, &e) == 0)
		FUZZ_CHECK(how != TLOG_VERIFIED, "byte %zu changed (^%02x), the checkpoint still opens VERIFIED", at, flip);
	else
		one_line(&e);
	buf_free(&text);
	buf_free(&note);
}

/* ---- proofs ---------------------------------------------------------------- */

static void check_proof(const char *s, size_t n)
{
	struct tlog_proof *p = malloc(sizeof *p);
	struct sfma_err e = {{0}};
	if (!p)
		abort();
	if (tlog_proof_parse(s, n, p, &e) < 0) {
		one_line(&e);
		free(p);
		return;
	}
	FUZZ_CHECK(p->n <= MERKLE_PROOF_MAX && p->note >= s && p->note + p->note_len == s + n && p->note_len > 0,
	           "the proof's checkpoint is not the rest of the text");
	struct buf again = {0};
	tlog_proof_text(p, &again);
	int extra = n >= sizeof TLOG_PROOF_HEADER + 6 && memcmp(s + sizeof TLOG_PROOF_HEADER, "extra ", 6) == 0;
	if (!extra)
		FUZZ_CHECK(again.len == n && memcmp(again.p, s, n) == 0, "a proof read and written again is other bytes");
	buf_free(&again);
	check_checkpoint(p->note, p->note_len);
	free(p);
}

/* ---- the tree -------------------------------------------------------------- */

#define LEAVES_MAX 130 /* past 128: a tree of more than one complete subtree above 64 */

/* RFC 6962 MTH by its definition. */
static void mth(unsigned char leaves[][32], size_t n, unsigned char out[32])
{
	if (n == 0) {
		struct sha256 s;
		sha256_init(&s);
		sha256_final(&s, out);
		return;
	}
	if (n == 1) {
		memcpy(out, leaves[0], 32);
		return;
	}
	size_t k = 1;
	while (k * 2 < n)
		k *= 2;
	unsigned char l[32], r[32];
	mth(leaves, k, l);
	mth(leaves + k, n - k, r);
	merkle_node_hash(l, r, out);
}

static void proof_hashes(unsigned char leaves[][32], size_t n, const struct merkle_range *ranges, size_t count,
                         unsigned char (*out)[32])
{
	struct merkle_ranges mr;
	merkle_ranges_begin(&mr, ranges, count, out);
	for (size_t i = 0; i < n; i++)
		merkle_ranges_add(&mr, leaves[i]);
	FUZZ_CHECK(merkle_ranges_done(&mr), "ranges not all hashed after every leaf");
	for (size_t i = 0; i < count; i++) {
		unsigned char want[32];
		mth(leaves + ranges[i].lo, (size_t)(ranges[i].hi - ranges[i].lo), want);
		FUZZ_CHECK(memcmp(want, out[i], 32) == 0, "range %zu [%llu, %llu) hashed wrong", i,
		           (unsigned long long)ranges[i].lo, (unsigned long long)ranges[i].hi);
	}
}

static void check_tree(const uint8_t *d, size_t n)
{
	static unsigned char leaves[LEAVES_MAX][32];
	size_t count = n ? 1 + (d[0] | (size_t)(n > 1 ? d[1] : 0) << 8) % LEAVES_MAX : 1;
	for (size_t i = 0; i < count; i++) {
		unsigned char data[16] = {0};
		memcpy(data, &i, sizeof i); /* every leaf distinct */
		if (n > 2)
			data[8] = d[2 + i % (n - 2)];
		merkle_leaf_hash(data, sizeof data, leaves[i]);
	}
	unsigned char root[32], want[32];
	struct merkle_frontier f, g;
	merkle_frontier_init(&f);
	for (size_t i = 0; i <= count; i++) {
		merkle_frontier_root(&f, root);
		mth(leaves, i, want);
		FUZZ_CHECK(memcmp(root, want, 32) == 0, "the frontier's root at %zu leaves is not the tree's", i);
		if (i < count)
			merkle_frontier_add(&f, leaves[i]);
	}
	/* The same leaves as aligned pieces, cut where the input says. */
	size_t cut = n > 3 ? d[3] % (count + 1) : count / 2;
	merkle_frontier_init(&g);
	for (size_t lo = 0; lo < count;) {
		size_t hi = lo < cut ? cut : count;
		unsigned h = merkle_piece_height(lo, hi);
		unsigned char piece[32];
		FUZZ_CHECK(lo % ((size_t)1 << h) == 0 && lo + ((size_t)1 << h) <= hi, "piece %u at %zu is not aligned", h, lo);
		mth(leaves + lo, (size_t)1 << h, piece);
		FUZZ_CHECK(merkle_frontier_add_subtree(&g, h, piece) == 0, "piece refused");
		lo += (size_t)1 << h;
	}
	merkle_frontier_root(&g, want);
	FUZZ_CHECK(g.size == count && memcmp(root, want, 32) == 0, "pieces make another tree");
	unsigned char nodes[MERKLE_MAX_HEIGHT][32];
	size_t nn;
	merkle_frontier_nodes(&f, nodes, &nn);
	FUZZ_CHECK(merkle_frontier_from_nodes(&g, f.size, (const unsigned char (*)[32])nodes, nn) == 0 &&
	           (merkle_frontier_root(&g, want), memcmp(root, want, 32) == 0), "the frontier's nodes read back another");

	struct merkle_range ranges[MERKLE_PROOF_MAX];
	unsigned char hashes[MERKLE_PROOF_MAX][32];
	size_t np;
	uint64_t index = n > 4 ? d[4] % count : 0;
	FUZZ_CHECK(merkle_inclusion_ranges(index, count, ranges, &np) == 0, "no inclusion ranges");
	proof_hashes(leaves, count, ranges, np, hashes);
	const unsigned char (*ph)[32] = (const unsigned char (*)[32])hashes;
	FUZZ_CHECK(merkle_check_inclusion(ph, np, index, count, leaves[index], root) == 0, "an inclusion proof fails");
	if (count > 1)
		FUZZ_CHECK(merkle_check_inclusion(ph, np, (index + 1) % count, count, leaves[index], root) < 0,
		           "an inclusion proof of another index passes");
	size_t bit = n > 5 ? d[5] : 0;
	if (np) {
		hashes[bit / 8 % np][bit % 32] ^= (unsigned char)(1u << (bit % 8));
		FUZZ_CHECK(merkle_check_inclusion(ph, np, index, count, leaves[index], root) < 0,
		           "an inclusion proof with a hash changed passes");
		FUZZ_CHECK(merkle_check_inclusion(ph, np - 1, index, count, leaves[index], root) < 0,
		           "an inclusion proof one hash short passes");
	}
	root[bit % 32] ^= 1;
	FUZZ_CHECK(merkle_check_inclusion(ph, np, index, count, leaves[index], root) < 0, "a changed root passes");
	root[bit % 32] ^= 1;

	for (uint64_t old = 1; old <= count; old++) {
		unsigned char old_root[32];
		mth(leaves, (size_t)old, old_root);
		FUZZ_CHECK(merkle_consistency_ranges(old, count, ranges, &np) == 0, "no consistency ranges");
		proof_hashes(leaves, count, ranges, np, hashes);
		FUZZ_CHECK(merkle_check_consistency(ph, np, old, old_root, count, root) == 0,
		           "the consistency proof from %llu to %zu fails", (unsigned long long)old, count);
		old_root[bit % 32] ^= 1;
		FUZZ_CHECK(merkle_check_consistency(ph, np, old, old_root, count, root) < 0, "a changed old root passes");
		old_root[bit % 32] ^= 1;
		if (np) {
			hashes[bit / 8 % np][bit % 32] ^= 1;
			FUZZ_CHECK(merkle_check_consistency(ph, np, old, old_root, count, root) < 0,
			           "a consistency proof with a hash changed passes");
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *s = (const char *)data + 1;
	switch (data[0] & 3) {
	case 0: check_proof(s, size - 1); break;
	case 1: check_checkpoint(s, size - 1); break;
	case 2: check_signed(data, size); break;
	default: check_tree(data + 1, size - 1); break;
	}
	return 0;
}
