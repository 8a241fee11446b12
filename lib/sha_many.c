/* sha_many.c - many SHA-256 digests at once (sha.h, sha256_many).
 *
 * A trace's verification hashes each line twice (its entry hash, its
 * Merkle leaf) and every inner node of the tree: about thirteen
 * compressions per line where reading the file once takes five. One
 * stream of SHA-256 on the SHA extensions (what libcrypto runs) is bound
 * by the round instruction's throughput, not its latency: two streams
 * interleaved run no faster. Sixteen independent messages in the sixteen
 * 32-bit lanes of AVX-512 registers run about 1.6 times as fast on the same
 * core, so where the processor has AVX-512 (F and BW) the jobs are fed
 * through those lanes, each lane taking the next job as its message ends;
 * elsewhere, and for batches too small to fill the lanes, each job goes
 * through libcrypto as before. The digests are the same either way:
 * tests/fuzz/fuzz_sha.c checks them against libcrypto's. */
#include "sha.h"

#include <stdint.h>
#include <string.h>

/* Fewer jobs than lanes: libcrypto, one by one, is faster. */
#define MANY_MIN 12

static void many_scalar(struct sha256_job *jobs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct sha256 s;
		sha256_init(&s);
		for (int k = 0; k < SHA256_JOB_PARTS; k++)
			if (jobs[i].len[k])
				sha256_update(&s, jobs[i].part[k], jobs[i].len[k]);
		sha256_final(&s, jobs[i].md);
	}
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define LANES 16
#define AVX512 __attribute__((target("avx512f,avx512bw")))

static const uint32_t round_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static const uint32_t initial_h[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

/* One job's message as it is fed, a block at a time, padding included
 * (FIPS 180-4 5.1.1: a 1 bit, zeros, the length in bits as 64 bits). */
/* Messages of up to LANE_COPY bytes are copied whole into their lane,
 * padded there once: each block is then read in place. */
#define LANE_COPY (512 - 9)

struct lane {
	const struct sha256_job *job;
	int part;           /* the part the next message byte is in */
	size_t off;         /* its offset there */
	uint64_t total;     /* the message's bytes */
	int padded;         /* the 0x80 after the message was fed */
	size_t block, blocks; /* with the whole message copied: the next block, and how many */
	unsigned char buf[512];
};

static void lane_start(struct lane *l, const struct sha256_job *job)
{
	l->job = job;
	l->part = 0;
	l->off = 0;
	l->padded = 0;
	l->total = 0;
	l->blocks = 0;
	for (int k = 0; k < SHA256_JOB_PARTS; k++)
		l->total += job->len[k];
	if (l->total > LANE_COPY)
		return;
	size_t at = 0;
	for (int k = 0; k < SHA256_JOB_PARTS; k++)
		if (job->len[k]) {
			memcpy(l->buf + at, job->part[k], job->len[k]);
			at += job->len[k];
		}
	l->blocks = (at + 9 + 63) / 64;
	l->block = 0;
	size_t end = l->blocks * 64;
	l->buf[at] = 0x80;
	memset(l->buf + at + 1, 0, end - 8 - at - 1);
	uint64_t bits = l->total * 8;
	for (int b = 0; b < 8; b++)
		l->buf[end - 1 - b] = (unsigned char)(bits >> (8 * b));
}

/* The lane's next 64-byte block: in place when a part holds it whole,
 * else gathered into l->buf. *last is set for the message's final block. */
static const unsigned char *lane_block(struct lane *l, int *last)
{
	const struct sha256_job *j = l->job;
	if (l->blocks) {
		*last = l->block + 1 == l->blocks;
		return l->buf + 64 * l->block++;
	}
	*last = 0;
	while (l->part < SHA256_JOB_PARTS && l->off == j->len[l->part]) {
		l->part++;
		l->off = 0;
	}
	if (l->part < SHA256_JOB_PARTS && j->len[l->part] - l->off >= 64) {
		const unsigned char *p = (const unsigned char *)j->part[l->part] + l->off;
		l->off += 64;
		return p;
	}
	size_t k = 0;
	while (k < 64 && l->part < SHA256_JOB_PARTS) {
		size_t left = j->len[l->part] - l->off, take = left < 64 - k ? left : 64 - k;
		if (take) {
			memcpy(l->buf + k, (const unsigned char *)j->part[l->part] + l->off, take);
			k += take;
			l->off += take;
		}
		if (l->off == j->len[l->part]) {
			l->part++;
			l->off = 0;
		}
	}
	if (k == 64)
		return l->buf;
	if (!l->padded) {
		l->buf[k++] = 0x80;
		l->padded = 1;
	}
	memset(l->buf + k, 0, 64 - k);
	if (64 - k >= 8) {
		uint64_t bits = l->total * 8;
		for (int b = 0; b < 8; b++)
			l->buf[63 - b] = (unsigned char)(bits >> (8 * b));
		*last = 1;
	}
	return l->buf;
}

typedef __m512i vec;

/* A macro: the rotation count must be a constant where it is used. */
#define ror(x, n) _mm512_ror_epi32(x, n)

/* One compression in each lane: st[i] holds word i of the sixteen states,
 * blk[l] lane l's block. */
AVX512 static void compress16(vec st[8], const unsigned char *const blk[LANES])
{
	/* Transpose: w[j] gets word j of every lane's block, made big-endian.
	 * Dwords of pairs of rows interleaved, then quadwords, then 128-bit
	 * chunks twice: 64 shuffles for the 16 x 16 words. */
	vec r[16], u[16], w[16];
	for (int l = 0; l < LANES; l++)
		r[l] = _mm512_loadu_si512((const void *)blk[l]);
	for (int p = 0; p < 16; p += 2) {
		u[p] = _mm512_unpacklo_epi32(r[p], r[p + 1]);
		u[p + 1] = _mm512_unpackhi_epi32(r[p], r[p + 1]);
	}
	/* r[4q + k]: in its chunk c, word 4c + k of rows 4q .. 4q + 3 */
	for (int q = 0; q < 16; q += 4) {
		r[q] = _mm512_unpacklo_epi64(u[q], u[q + 2]);
		r[q + 1] = _mm512_unpackhi_epi64(u[q], u[q + 2]);
		r[q + 2] = _mm512_unpacklo_epi64(u[q + 1], u[q + 3]);
		r[q + 3] = _mm512_unpackhi_epi64(u[q + 1], u[q + 3]);
	}
	/* chunk c of r[k], r[4 + k], r[8 + k], r[12 + k] makes w[4c + k] */
	for (int k = 0; k < 4; k++) {
		vec c0 = _mm512_shuffle_i32x4(r[k], r[4 + k], 0x44), c1 = _mm512_shuffle_i32x4(r[k], r[4 + k], 0xEE);
		vec c2 = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0x44), c3 = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0xEE);
		w[k] = _mm512_shuffle_i32x4(c0, c2, 0x88);
		w[4 + k] = _mm512_shuffle_i32x4(c0, c2, 0xDD);
		w[8 + k] = _mm512_shuffle_i32x4(c1, c3, 0x88);
		w[12 + k] = _mm512_shuffle_i32x4(c1, c3, 0xDD);
	}
	const vec bswap = _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b, 0x04050607, 0x00010203);
	for (int j = 0; j < 16; j++)
		w[j] = _mm512_shuffle_epi8(w[j], bswap);
	vec a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6], h = st[7];
	/* Written out so that every w[] index is a constant and the sixteen
	 * words and eight working variables stay in registers: the letters
	 * rotate through the macro's arguments instead of being moved. In the
	 * ternary logic, 0x96 is x ^ y ^ z, 0xCA is Ch (e ? f : g), 0xE8 Maj. */
#define ROUND(a, b, c, d, e, f, g, h, wi, k)                                                           \
	do {                                                                                           \
		vec t1_ = _mm512_add_epi32(_mm512_add_epi32(h, _mm512_ternarylogic_epi32(ror(e, 6), ror(e, 11), \
		                                                                         ror(e, 25), 0x96)),  \
		                           _mm512_add_epi32(_mm512_ternarylogic_epi32(e, f, g, 0xCA),       \
		                                            _mm512_add_epi32(wi, _mm512_set1_epi32((int)(k))))); \
		vec t2_ = _mm512_add_epi32(_mm512_ternarylogic_epi32(ror(a, 2), ror(a, 13), ror(a, 22), 0x96), \
		                           _mm512_ternarylogic_epi32(a, b, c, 0xE8));                      \
		d = _mm512_add_epi32(d, t1_);                                                            \
		h = _mm512_add_epi32(t1_, t2_);                                                          \
	} while (0)
	/* w[i] becomes word t + i (t a multiple of 16) from words t+i-16, -15, -7 and -2. */
#define SCHEDULE(i)                                                                                    \
	do {                                                                                           \
		vec w15_ = w[((i) + 1) & 15], w2_ = w[((i) + 14) & 15];                                  \
		vec s0_ = _mm512_ternarylogic_epi32(ror(w15_, 7), ror(w15_, 18), _mm512_srli_epi32(w15_, 3), 0x96); \
		vec s1_ = _mm512_ternarylogic_epi32(ror(w2_, 17), ror(w2_, 19), _mm512_srli_epi32(w2_, 10), 0x96); \
		w[i] = _mm512_add_epi32(_mm512_add_epi32(w[i], s0_), _mm512_add_epi32(w[((i) + 9) & 15], s1_)); \
	} while (0)
#define EIGHT(t, i)                                                                                    \
	do {                                                                                           \
		ROUND(a, b, c, d, e, f, g, h, w[(i) + 0], round_k[(t) + (i) + 0]);                      \
		ROUND(h, a, b, c, d, e, f, g, w[(i) + 1], round_k[(t) + (i) + 1]);                      \
		ROUND(g, h, a, b, c, d, e, f, w[(i) + 2], round_k[(t) + (i) + 2]);                      \
		ROUND(f, g, h, a, b, c, d, e, w[(i) + 3], round_k[(t) + (i) + 3]);                      \
		ROUND(e, f, g, h, a, b, c, d, w[(i) + 4], round_k[(t) + (i) + 4]);                      \
		ROUND(d, e, f, g, h, a, b, c, w[(i) + 5], round_k[(t) + (i) + 5]);                      \
		ROUND(c, d, e, f, g, h, a, b, w[(i) + 6], round_k[(t) + (i) + 6]);                      \
		ROUND(b, c, d, e, f, g, h, a, w[(i) + 7], round_k[(t) + (i) + 7]);                      \
	} while (0)
	EIGHT(0, 0);
	EIGHT(0, 8);
	for (int t = 16; t < 64; t += 16) {
		SCHEDULE(0); SCHEDULE(1); SCHEDULE(2); SCHEDULE(3); SCHEDULE(4); SCHEDULE(5); SCHEDULE(6); SCHEDULE(7);
		SCHEDULE(8); SCHEDULE(9); SCHEDULE(10); SCHEDULE(11); SCHEDULE(12); SCHEDULE(13); SCHEDULE(14); SCHEDULE(15);
		EIGHT(t, 0);
		EIGHT(t, 8);
	}
#undef EIGHT
#undef SCHEDULE
#undef ROUND
	st[0] = _mm512_add_epi32(st[0], a);
	st[1] = _mm512_add_epi32(st[1], b);
	st[2] = _mm512_add_epi32(st[2], c);
	st[3] = _mm512_add_epi32(st[3], d);
	st[4] = _mm512_add_epi32(st[4], e);
	st[5] = _mm512_add_epi32(st[5], f);
	st[6] = _mm512_add_epi32(st[6], g);
	st[7] = _mm512_add_epi32(st[7], h);
}

AVX512 static void many_avx512(struct sha256_job *jobs, size_t n)
{
	static const unsigned char idle[64]; /* what a lane without a job compresses */
	struct lane lanes[LANES];
	vec st[8];
	size_t next = 0;
	unsigned active = 0;
	for (int i = 0; i < 8; i++)
		st[i] = _mm512_set1_epi32((int)initial_h[i]);
	for (int l = 0; l < LANES && next < n; l++) {
		lane_start(&lanes[l], &jobs[next++]);
		active |= 1u << l;
	}
	while (active) {
		const unsigned char *blk[LANES];
		unsigned ending = 0;
		for (int l = 0; l < LANES; l++) {
			int last = 0;
			blk[l] = active >> l & 1 ? lane_block(&lanes[l], &last) : idle;
			ending |= (unsigned)last << l;
		}
		compress16(st, blk);
		if (!ending)
			continue;
		_Alignas(64) uint32_t words[8][LANES];
		for (int i = 0; i < 8; i++)
			_mm512_store_si512((void *)words[i], st[i]);
		unsigned restart = 0;
		for (int l = 0; l < LANES; l++) {
			if (!(ending >> l & 1))
				continue;
			unsigned char *md = lanes[l].job->md;
			for (int i = 0; i < 8; i++) {
				md[4 * i] = (unsigned char)(words[i][l] >> 24);
				md[4 * i + 1] = (unsigned char)(words[i][l] >> 16);
				md[4 * i + 2] = (unsigned char)(words[i][l] >> 8);
				md[4 * i + 3] = (unsigned char)words[i][l];
			}
			if (next < n) {
				lane_start(&lanes[l], &jobs[next++]);
				restart |= 1u << l;
			} else {
				active &= ~(1u << l);
			}
		}
		for (int i = 0; i < 8; i++)
			st[i] = _mm512_mask_mov_epi32(st[i], (__mmask16)restart, _mm512_set1_epi32((int)initial_h[i]));
	}
}

/* __builtin_cpu_supports reads CPUID and, for AVX-512, whether the
 * kernel saves the registers (XCR0); valgrind's CPU has no AVX-512. */
static int have_avx512(void)
{
	static int known = -1;
	int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
	if (k < 0) {
		__builtin_cpu_init();
		k = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
		__atomic_store_n(&known, k, __ATOMIC_RELAXED);
	}
	return k;
}

void sha256_many(struct sha256_job *jobs, size_t n)
{
	if (n >= MANY_MIN && have_avx512())
		many_avx512(jobs, n);
	else
		many_scalar(jobs, n);
}

int sha256_many_lanes(void)
{
	return have_avx512() ? LANES : 1;
}

#else

void sha256_many(struct sha256_job *jobs, size_t n)
{
	many_scalar(jobs, n);
}

int sha256_many_lanes(void)
{
	return 1;
}

#endif
