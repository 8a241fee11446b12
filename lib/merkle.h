/* merkle.h - the RFC 6962 Merkle tree over a trace's lines (sfma-formats(5)).
 *
 * A leaf is SHA-256(0x00 || line), the line's bytes as written without
 * its newline; an interior node is SHA-256(0x01 || left || right); the
 * tree of n leaves splits at the largest power of two below n (RFC 6962
 * section 2.1), and the empty tree's hash is SHA-256 of nothing.
 *
 * The tree is kept as a frontier: the roots of the complete subtrees the
 * leaves so far fall into, one per bit set in their count - at most 63
 * hashes, whatever the length of the trace. A leaf is added with about
 * one node hash on average and the root is read off in O(log n). Proofs
 * are made by one pass over the leaves (the hashes they need are the
 * trees of a few ranges, each a frontier of its own) and checked by pure
 * functions of the proof, as Go's golang.org/x/mod/sumdb/tlog checks them.
 * Nothing here reads a file or allocates. */
#ifndef SFMA_MERKLE_H
#define SFMA_MERKLE_H

#include <stddef.h>
#include <stdint.h>

#include "sha.h"

#define MERKLE_HASH_LEN 32
/* Sizes are int64 in tlog and in the checkpoint's text: at most 2^63 - 1
 * leaves, so a frontier has at most 63 nodes and a proof at most 63
 * hashes (64 for a consistency proof's common ground). */
#define MERKLE_MAX_SIZE INT64_MAX
#define MERKLE_MAX_HEIGHT 63
#define MERKLE_PROOF_MAX 64

struct merkle_frontier {
	uint64_t size;                                    /* leaves so far */
	unsigned char node[MERKLE_MAX_HEIGHT][MERKLE_HASH_LEN]; /* node[k]: the subtree of 2^k leaves,
	                                                     for each bit k set in size */
};

/* SHA-256(0x00 || data), SHA-256(0x01 || left || right). */
void merkle_leaf_hash(const void *data, size_t n, unsigned char out[MERKLE_HASH_LEN]);
void merkle_node_hash(const unsigned char left[MERKLE_HASH_LEN], const unsigned char right[MERKLE_HASH_LEN],
                      unsigned char out[MERKLE_HASH_LEN]);

/* The same hashes as jobs for sha256_many (sha.h), which hashes many at
 * once: the job for the leaf of data, or for the node of left and right,
 * with its digest into out. Returns the number of jobs made in *job: 1,
 * or 0 when out was filled already (builds without the tree, see
 * merkle.c). The inputs must stay in place until the job is hashed. */
size_t merkle_leaf_job(struct sha256_job *job, const void *data, size_t n, unsigned char out[MERKLE_HASH_LEN]);
size_t merkle_node_job(struct sha256_job *job, const unsigned char left[MERKLE_HASH_LEN],
                       const unsigned char right[MERKLE_HASH_LEN], unsigned char out[MERKLE_HASH_LEN]);

void merkle_frontier_init(struct merkle_frontier *f);
/* Add the next leaf (its hash). 0, or -1 when the tree is full. */
int merkle_frontier_add(struct merkle_frontier *f, const unsigned char leaf[MERKLE_HASH_LEN]);
/* Add the root of a complete subtree of 2^height leaves, the next ones;
 * f->size must be a multiple of 2^height. 0, or -1 if it is not or the
 * tree would be full. */
int merkle_frontier_add_subtree(struct merkle_frontier *f, unsigned height,
                                const unsigned char root[MERKLE_HASH_LEN]);
/* The root of the tree of f->size leaves (the empty tree: SHA-256 of nothing). */
void merkle_frontier_root(const struct merkle_frontier *f, unsigned char out[MERKLE_HASH_LEN]);

/* The nodes of f from the leftmost (the largest subtree) to the
 * rightmost, as its text form lists them: *n = popcount(f->size). */
void merkle_frontier_nodes(const struct merkle_frontier *f, unsigned char out[MERKLE_MAX_HEIGHT][MERKLE_HASH_LEN],
                           size_t *n);
/* A frontier of size leaves from its nodes in that order. 0, or -1 when
 * n is not the number of bits set in size or size is too large. */
int merkle_frontier_from_nodes(struct merkle_frontier *f, uint64_t size,
                               const unsigned char nodes[][MERKLE_HASH_LEN], size_t n);

/* The height of the largest complete subtree that starts at leaf lo,
 * aligned on its own size, and ends at or before hi (lo < hi): the
 * pieces [lo, lo + 2^h) a run of leaves decomposes into, each added with
 * merkle_frontier_add_subtree. */
unsigned merkle_piece_height(uint64_t lo, uint64_t hi);

/* ---- proofs ----------------------------------------------------------------
 *
 * A proof is a list of tree hashes, each the tree of a range of leaves
 * [lo, hi): the audit path of RFC 6962 section 2.1.1 (the leaf's sibling
 * first, the root's child last) or the consistency proof of section
 * 2.1.2, in the order golang.org/x/mod/sumdb/tlog's ProveRecord and
 * ProveTree give them. */
struct merkle_range {
	uint64_t lo, hi;
};

/* The ranges of the audit path of leaf index in the tree of size leaves
 * (index < size <= MERKLE_MAX_SIZE). 0 with *n set, or -1. */
int merkle_inclusion_ranges(uint64_t index, uint64_t size, struct merkle_range out[MERKLE_PROOF_MAX], size_t *n);
/* The ranges of the proof that the tree of size leaves extends the one
 * of old leaves (1 <= old <= size <= MERKLE_MAX_SIZE). 0 with *n set, or -1. */
int merkle_consistency_ranges(uint64_t old, uint64_t size, struct merkle_range out[MERKLE_PROOF_MAX], size_t *n);

/* The trees of disjoint ranges, computed while the leaves go by once:
 * begin with the ranges, add every leaf from leaf 0 on (those outside
 * every range cost nothing), and once the last range is complete
 * (merkle_ranges_done) out[i] holds the tree hash of ranges[i]. */
struct merkle_ranges {
	const struct merkle_range *range;
	size_t n;
	unsigned char (*out)[MERKLE_HASH_LEN];
	unsigned char order[MERKLE_PROOF_MAX]; /* indexes of range, by lo */
	size_t next;                           /* in order: the range being hashed */
	uint64_t leaf;                         /* leaves seen */
	struct merkle_frontier f;
};
void merkle_ranges_begin(struct merkle_ranges *r, const struct merkle_range *range, size_t n,
                         unsigned char (*out)[MERKLE_HASH_LEN]);
void merkle_ranges_add(struct merkle_ranges *r, const unsigned char leaf[MERKLE_HASH_LEN]);
int merkle_ranges_done(const struct merkle_ranges *r);

/* 0 if proof (n hashes) is the audit path of the leaf with hash leaf at
 * index in the tree of size leaves whose root is root; -1 else (a wrong
 * hash, one too many or too few, index >= size). As tlog.CheckRecord. */
int merkle_check_inclusion(const unsigned char proof[][MERKLE_HASH_LEN], size_t n, uint64_t index, uint64_t size,
                           const unsigned char leaf[MERKLE_HASH_LEN], const unsigned char root[MERKLE_HASH_LEN]);
/* 0 if proof proves that the tree of size leaves with root root extends
 * the tree of old leaves with root old_root (1 <= old <= size); -1
 * else. As tlog.CheckTree. */
int merkle_check_consistency(const unsigned char proof[][MERKLE_HASH_LEN], size_t n, uint64_t old,
                             const unsigned char old_root[MERKLE_HASH_LEN], uint64_t size,
                             const unsigned char root[MERKLE_HASH_LEN]);

#endif
