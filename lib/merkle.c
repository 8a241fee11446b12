/* merkle.c - the RFC 6962 tree as a frontier, and its proofs (merkle.h). */
#include "merkle.h"
#include "sha.h"

#include <string.h>

/* SFMA_BENCH_NO_TREE: tests/bench/merkle.sh builds the programs with it,
 * apart, to measure what the tree costs a run: leaves and nodes are then
 * not hashed, only counted. No program is built so otherwise. */
void merkle_leaf_hash(const void *data, size_t n, unsigned char out[MERKLE_HASH_LEN])
{
#ifdef SFMA_BENCH_NO_TREE
	(void)data, (void)n;
	memset(out, 0, MERKLE_HASH_LEN);
	return;
#endif
	static const unsigned char leaf_prefix = 0x00;
	struct sha256 s;
	sha256_init(&s);
	sha256_update(&s, &leaf_prefix, 1);
	sha256_update(&s, data, n);
	sha256_final(&s, out);
}

void merkle_node_hash(const unsigned char left[MERKLE_HASH_LEN], const unsigned char right[MERKLE_HASH_LEN],
                      unsigned char out[MERKLE_HASH_LEN])
{
	/* One buffer, one update: 65 bytes are two compressions either way. */
	unsigned char in[1 + 2 * MERKLE_HASH_LEN];
	in[0] = 0x01;
	memcpy(in + 1, left, MERKLE_HASH_LEN);
	memcpy(in + 1 + MERKLE_HASH_LEN, right, MERKLE_HASH_LEN);
	struct sha256 s;
	sha256_init(&s);
	sha256_update(&s, in, sizeof in);
	sha256_final(&s, out);
}

static const unsigned char leaf_prefix = 0x00, node_prefix = 0x01;

size_t merkle_leaf_job(struct sha256_job *job, const void *data, size_t n, unsigned char out[MERKLE_HASH_LEN])
{
#ifdef SFMA_BENCH_NO_TREE
	(void)job;
	merkle_leaf_hash(data, n, out);
	return 0;
#endif
	*job = (struct sha256_job){{&leaf_prefix, data, NULL}, {1, n, 0}, out};
	return 1;
}

size_t merkle_node_job(struct sha256_job *job, const unsigned char left[MERKLE_HASH_LEN],
                       const unsigned char right[MERKLE_HASH_LEN], unsigned char out[MERKLE_HASH_LEN])
{
#ifdef SFMA_BENCH_NO_TREE
	(void)job;
	merkle_node_hash(left, right, out);
	return 0;
#endif
	*job = (struct sha256_job){{&node_prefix, left, right}, {1, MERKLE_HASH_LEN, MERKLE_HASH_LEN}, out};
	return 1;
}

void merkle_frontier_init(struct merkle_frontier *f)
{
	f->size = 0;
#ifdef SFMA_BENCH_NO_TREE
	memset(f->node, 0, sizeof f->node);
#endif
}

int merkle_frontier_add_subtree(struct merkle_frontier *f, unsigned height, const unsigned char root[MERKLE_HASH_LEN])
{
	if (height >= MERKLE_MAX_HEIGHT)
		return -1;
	uint64_t leaves = (uint64_t)1 << height;
	if (f->size & (leaves - 1) || f->size > (uint64_t)MERKLE_MAX_SIZE - leaves)
		return -1;
#ifdef SFMA_BENCH_NO_TREE
	(void)root;
	f->size += leaves;
	return 0;
#endif
	unsigned char node[MERKLE_HASH_LEN];
	memcpy(node, root, MERKLE_HASH_LEN);
	/* Like a binary counter's carry: each complete pair becomes its parent. */
	unsigned k = height;
	while ((f->size >> k) & 1) {
		merkle_node_hash(f->node[k], node, node);
		k++;
	}
	memcpy(f->node[k], node, MERKLE_HASH_LEN);
	f->size += leaves;
	return 0;
}

int merkle_frontier_add(struct merkle_frontier *f, const unsigned char leaf[MERKLE_HASH_LEN])
{
	return merkle_frontier_add_subtree(f, 0, leaf);
}

void merkle_frontier_root(const struct merkle_frontier *f, unsigned char out[MERKLE_HASH_LEN])
{
	if (f->size == 0) {
		struct sha256 s;
		sha256_init(&s);
		sha256_final(&s, out);
		return;
	}
	/* The rightmost subtree is the smallest; each larger one to its left
	 * is the left child of the node that joins them (RFC 6962's split at
	 * the largest power of two below n, read bottom up). */
	unsigned k = (unsigned)__builtin_ctzll(f->size);
	unsigned char root[MERKLE_HASH_LEN];
	memcpy(root, f->node[k], MERKLE_HASH_LEN);
	for (k++; k < MERKLE_MAX_HEIGHT; k++)
		if ((f->size >> k) & 1)
			merkle_node_hash(f->node[k], root, root);
	memcpy(out, root, MERKLE_HASH_LEN);
}

void merkle_frontier_nodes(const struct merkle_frontier *f, unsigned char out[MERKLE_MAX_HEIGHT][MERKLE_HASH_LEN],
                           size_t *n)
{
	*n = 0;
	for (int k = MERKLE_MAX_HEIGHT - 1; k >= 0; k--)
		if ((f->size >> k) & 1)
			memcpy(out[(*n)++], f->node[k], MERKLE_HASH_LEN);
}

int merkle_frontier_from_nodes(struct merkle_frontier *f, uint64_t size,
                               const unsigned char nodes[][MERKLE_HASH_LEN], size_t n)
{
	if (size > (uint64_t)MERKLE_MAX_SIZE || (size_t)__builtin_popcountll(size) != n)
		return -1;
	f->size = size;
	size_t i = 0;
	for (int k = MERKLE_MAX_HEIGHT - 1; k >= 0; k--)
		if ((size >> k) & 1)
			memcpy(f->node[k], nodes[i++], MERKLE_HASH_LEN);
	return 0;
}

unsigned merkle_piece_height(uint64_t lo, uint64_t hi)
{
	unsigned h = lo ? (unsigned)__builtin_ctzll(lo) : MERKLE_MAX_HEIGHT - 1;
	if (h > MERKLE_MAX_HEIGHT - 1)
		h = MERKLE_MAX_HEIGHT - 1;
	while (h > 0 && ((uint64_t)1 << h) > hi - lo)
		h--;
	return h;
}

/* ---- proofs ------------------------------------------------------------------ */

/* The largest power of two below n (n >= 2): where RFC 6962 splits. */
static uint64_t split(uint64_t n)
{
	return (uint64_t)1 << (63 - __builtin_clzll(n - 1));
}

static void push(struct merkle_range out[MERKLE_PROOF_MAX], size_t *n, uint64_t lo, uint64_t hi)
{
	out[(*n)++] = (struct merkle_range){lo, hi};
}

/* PATH(m, D[lo:hi]) of RFC 6962 2.1.1, the deepest hash first. */
static void path(uint64_t m, uint64_t lo, uint64_t hi, struct merkle_range out[MERKLE_PROOF_MAX], size_t *n)
{
	if (hi - lo == 1)
		return;
	uint64_t k = split(hi - lo);
	if (m < lo + k) {
		path(m, lo, lo + k, out, n);
		push(out, n, lo + k, hi);
	} else {
		path(m, lo + k, hi, out, n);
		push(out, n, lo, lo + k);
	}
}

int merkle_inclusion_ranges(uint64_t index, uint64_t size, struct merkle_range out[MERKLE_PROOF_MAX], size_t *n)
{
	*n = 0;
	if (index >= size || size > (uint64_t)MERKLE_MAX_SIZE)
		return -1;
	path(index, 0, size, out, n);
	return 0;
}

/* SUBPROOF(m, D[lo:hi], lo == 0) of RFC 6962 2.1.2 (lo < m <= hi). */
static void subproof(uint64_t m, uint64_t lo, uint64_t hi, struct merkle_range out[MERKLE_PROOF_MAX], size_t *n)
{
	if (m == hi) {
		if (lo != 0) /* the old tree's own hash is the verifier's to know */
			push(out, n, lo, hi);
		return;
	}
	uint64_t k = split(hi - lo);
	if (m <= lo + k) {
		subproof(m, lo, lo + k, out, n);
		push(out, n, lo + k, hi);
	} else {
		subproof(m, lo + k, hi, out, n);
		push(out, n, lo, lo + k);
	}
}

int merkle_consistency_ranges(uint64_t old, uint64_t size, struct merkle_range out[MERKLE_PROOF_MAX], size_t *n)
{
	*n = 0;
	if (old < 1 || old > size || size > (uint64_t)MERKLE_MAX_SIZE)
		return -1;
	subproof(old, 0, size, out, n);
	return 0;
}

void merkle_ranges_begin(struct merkle_ranges *r, const struct merkle_range *range, size_t n,
                         unsigned char (*out)[MERKLE_HASH_LEN])
{
	r->range = range;
	r->n = n < MERKLE_PROOF_MAX ? n : MERKLE_PROOF_MAX;
	r->out = out;
	r->next = 0;
	r->leaf = 0;
	merkle_frontier_init(&r->f);
	for (size_t i = 0; i < r->n; i++) { /* insertion sort by lo: at most 64 */
		size_t j = i;
		while (j > 0 && range[r->order[j - 1]].lo > range[i].lo) {
			r->order[j] = r->order[j - 1];
			j--;
		}
		r->order[j] = (unsigned char)i;
	}
}

void merkle_ranges_add(struct merkle_ranges *r, const unsigned char leaf[MERKLE_HASH_LEN])
{
	uint64_t i = r->leaf++;
	if (r->next >= r->n)
		return;
	const struct merkle_range *cur = &r->range[r->order[r->next]];
	if (i < cur->lo || i >= cur->hi)
		return;
	merkle_frontier_add(&r->f, leaf);
	if (i + 1 == cur->hi) {
		merkle_frontier_root(&r->f, r->out[r->order[r->next]]);
		merkle_frontier_init(&r->f);
		r->next++;
	}
}

int merkle_ranges_done(const struct merkle_ranges *r)
{
	return r->next >= r->n;
}

/* runRecordProof of tlog: the root the proof implies for [lo, hi). */
static int run_inclusion(const unsigned char proof[][MERKLE_HASH_LEN], size_t n, uint64_t lo, uint64_t hi,
                         uint64_t index, const unsigned char leaf[MERKLE_HASH_LEN], unsigned char out[MERKLE_HASH_LEN])
{
	if (lo + 1 == hi) {
		if (n != 0) /* no hash may be left over */
			return -1;
		memcpy(out, leaf, MERKLE_HASH_LEN);
		return 0;
	}
	if (n == 0)
		return -1;
	uint64_t k = split(hi - lo);
	unsigned char sub[MERKLE_HASH_LEN];
	if (index < lo + k) {
		if (run_inclusion(proof, n - 1, lo, lo + k, index, leaf, sub) < 0)
			return -1;
		merkle_node_hash(sub, proof[n - 1], out);
	} else {
		if (run_inclusion(proof, n - 1, lo + k, hi, index, leaf, sub) < 0)
			return -1;
		merkle_node_hash(proof[n - 1], sub, out);
	}
	return 0;
}

int merkle_check_inclusion(const unsigned char proof[][MERKLE_HASH_LEN], size_t n, uint64_t index, uint64_t size,
                           const unsigned char leaf[MERKLE_HASH_LEN], const unsigned char root[MERKLE_HASH_LEN])
{
	unsigned char got[MERKLE_HASH_LEN];
	if (index >= size || size > (uint64_t)MERKLE_MAX_SIZE || n > MERKLE_PROOF_MAX)
		return -1;
	if (run_inclusion(proof, n, 0, size, index, leaf, got) < 0)
		return -1;
	return memcmp(got, root, MERKLE_HASH_LEN) == 0 ? 0 : -1;
}

/* runTreeProof of tlog: the old and new roots the proof implies for [lo, hi). */
static int run_consistency(const unsigned char proof[][MERKLE_HASH_LEN], size_t n, uint64_t lo, uint64_t hi,
                           uint64_t old, const unsigned char old_root[MERKLE_HASH_LEN],
                           unsigned char old_out[MERKLE_HASH_LEN], unsigned char new_out[MERKLE_HASH_LEN])
{
	if (old == hi) {
		const unsigned char *h;
		if (lo == 0) {
			if (n != 0)
				return -1;
			h = old_root;
		} else {
			if (n != 1)
				return -1;
			h = proof[0];
		}
		memcpy(old_out, h, MERKLE_HASH_LEN);
		memcpy(new_out, h, MERKLE_HASH_LEN);
		return 0;
	}
	if (n == 0)
		return -1;
	uint64_t k = split(hi - lo);
	unsigned char o[MERKLE_HASH_LEN], t[MERKLE_HASH_LEN];
	if (old <= lo + k) {
		if (run_consistency(proof, n - 1, lo, lo + k, old, old_root, o, t) < 0)
			return -1;
		memcpy(old_out, o, MERKLE_HASH_LEN);
		merkle_node_hash(t, proof[n - 1], new_out);
	} else {
		if (run_consistency(proof, n - 1, lo + k, hi, old, old_root, o, t) < 0)
			return -1;
		merkle_node_hash(proof[n - 1], o, old_out);
		merkle_node_hash(proof[n - 1], t, new_out);
	}
	return 0;
}

int merkle_check_consistency(const unsigned char proof[][MERKLE_HASH_LEN], size_t n, uint64_t old,
                             const unsigned char old_root[MERKLE_HASH_LEN], uint64_t size,
                             const unsigned char root[MERKLE_HASH_LEN])
{
	unsigned char o[MERKLE_HASH_LEN], t[MERKLE_HASH_LEN];
	if (old < 1 || old > size || size > (uint64_t)MERKLE_MAX_SIZE || n > MERKLE_PROOF_MAX)
		return -1;
	if (run_consistency(proof, n, 0, size, old, old_root, o, t) < 0)
		return -1;
	return memcmp(o, old_root, MERKLE_HASH_LEN) == 0 && memcmp(t, root, MERKLE_HASH_LEN) == 0 ? 0 : -1;
}
