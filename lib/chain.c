/* chain.c - streaming, parallel verification of a sha256-chain-v1 trace.
 *
 * The trace is read in blocks of at most BLOCK bytes and BLOCK_LINES lines,
 * with two blocks in flight: while threads check the lines of one, chunk
 * by chunk (each entry's hash depends only on its own bytes), the calling
 * thread reads and splits the next and hands it on too; then the checked
 * block is linked in order (each prevHash must be the previous entry's
 * hash) while the threads go on with the next. Memory is bounded by two
 * blocks, their line tables and the longest allowed line, whatever the
 * length of the trace or of its lines.
 *
 * Where the time goes, for a trace of a million canonical lines: hashing
 * (each line's entry hash and Merkle leaf, and the tree's inner nodes:
 * about thirteen SHA-256 compressions per line, where reading the file
 * once is five), then canon_scan's one pass over the bytes, the kernel's
 * copy of them, and splitting and linking. The hashes of a chunk are
 * therefore made all at once by sha256_many, which hashes sixteen at a
 * time where the processor can. */
#include "chain.h"
#include "atomic.h"
#include "buf.h"
#include "canon.h"
#include "evidence.h"
#include "ndjson.h"
#include "sha.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Both can be set at build time: the fuzz harness (tests/fuzz) uses tiny
 * blocks so that small inputs already have lines spanning blocks. */
#ifndef BLOCK
#define BLOCK (2u << 20)   /* bytes read per block: many chunks of lines, and two of them in memory */
#endif
#ifndef BLOCK_LINES
#define BLOCK_LINES 32768  /* lines per block: bounds the line table when lines are tiny */
#endif
#define MAX_THREADS 8

/* What one line proves on its own. Pointers go into the block's text, or
 * into `owned` when the line had to be parsed into a tree. */
struct line_info {
	const char *text;
	size_t len;
	double seq;
	const char *hash, *prev; /* 64 hex digits each, not NUL-terminated (chained lines) */
	const char *id;          /* clock-anchor entries only */
	size_t id_len;
	char *owned;             /* heap copies of hash, prev and id made by the tree path */
	char *error;             /* heap message when the line failed */
	char *ev_error;          /* heap message when its evidence failed ("evidence ...") */
	char ev_seq[32];         /* the entry's seq as printed, "" when it has no number */
	uint32_t ev_refs;        /* evidence references checked */
	uint32_t ev_pruned;      /* of which missing, with allow_pruned */
	unsigned char chained;   /* carries hash and prevHash */
	unsigned char is_anchor; /* kind == "clock-anchor" */
	/* With the tree: the line's leaf hash; in the last line of a complete
	 * subtree its share was cut into (piece = its height + 1), that
	 * subtree's root, which the linking adds to the frontier. */
	unsigned char piece;
	unsigned char node[MERKLE_HASH_LEN];
};

void chain_entry_id(char out[CHAIN_ID_MAX], const char *kind, double seq)
{
	snprintf(out, CHAIN_ID_MAX, "%.80s-%.0f", kind, seq);
}

static void fail(struct line_info *li, const char *msg)
{
	if (!li->error)
		li->error = xstrdup(msg);
}

/* 64 lowercase hex digits (sha.c checks them sixteen at a time). */
static int is_hex64(const char *s)
{
	return is_sha256_hex(s, 64);
}

/* 1 if the 64 hex digits at hex spell the 32 bytes of md. */
static int hex_matches(const char *hex, const unsigned char md[32])
{
#ifdef __SSE2__
	/* Each nibble n becomes '0' + n, plus the gap up to 'a' when n > 9. */
	const __m128i low = _mm_set1_epi8(0x0F), nine = _mm_set1_epi8(9), zero = _mm_set1_epi8('0');
	const __m128i gap = _mm_set1_epi8('a' - '0' - 10);
	unsigned same = 0xFFFF;
	for (int i = 0; i < 32; i += 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(md + i));
		__m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), low), lo = _mm_and_si128(v, low);
		__m128i nibbles[2] = {_mm_unpacklo_epi8(hi, lo), _mm_unpackhi_epi8(hi, lo)};
		for (int k = 0; k < 2; k++) {
			__m128i digits = _mm_add_epi8(_mm_add_epi8(nibbles[k], zero),
			                              _mm_and_si128(_mm_cmpgt_epi8(nibbles[k], nine), gap));
			__m128i text = _mm_loadu_si128((const __m128i *)(const void *)(hex + 2 * i + 16 * k));
			same &= (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(digits, text));
		}
	}
	return same == 0xFFFF;
#else
	char got[65];
	hex_encode(md, 32, got);
	return memcmp(got, hex, 64) == 0;
#endif
}

/* seq as JSON.parse reads it: plain digits are the common case. */
static double number_at(const char *s, size_t n)
{
	if (n > 0 && n <= 15) {
		double d = 0;
		size_t i = 0;
		for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			d = d * 10 + (s[i] - '0');
		if (i == n)
			return d;
	}
	char tmp[64];
	size_t l = n < 63 ? n : 63;
	memcpy(tmp, s, l);
	tmp[l] = '\0';
	return strtod(tmp, NULL);
}

struct ref_check {
	struct line_info *li;
	const struct chain_opts *opts;
};

/* One reference: 0 to go on, 1 once the line has failed. */
static int check_one_ref(void *arg, const char *name, const struct evidence_ref *ref)
{
	(void)name;
	struct ref_check *rc = arg;
	struct sfma_err e;
	char msg[SFMA_ERR_MAX + 128];
	rc->li->ev_refs++;
	switch (evidence_check(rc->opts->evidence, ref, &e)) {
	case EVIDENCE_OK:
		return 0;
	case EVIDENCE_MISSING:
		if (rc->opts->allow_pruned) {
			rc->li->ev_pruned++;
			return 0;
		}
		snprintf(msg, sizeof msg, "evidence %s missing", ref->sha256);
		break;
	case EVIDENCE_ALTERED:
		snprintf(msg, sizeof msg, "evidence %s altered", ref->sha256);
		break;
	case EVIDENCE_ERROR:
	default:
		snprintf(msg, sizeof msg, "%s", e.text);
		break;
	}
	rc->li->ev_error = xstrdup(msg);
	return 1;
}

/* Check every reference of a parsed entry against the store: the blobs
 * are read here, on the worker threads, so they are hashed in parallel
 * like the lines and nothing about them is kept once the line is linked. */
static void check_evidence(struct line_info *li, const json_t *entry, const struct chain_opts *o)
{
	json_t *seq = json_object_get(entry, "seq");
	if (json_is_number(seq) && canon_number(json_number_value(seq), li->ev_seq) < 0)
		li->ev_seq[0] = '\0';
	struct ref_check rc = {li, o};
	struct sfma_err e;
	uint64_t count;
	if (evidence_entry_refs(entry, check_one_ref, &rc, &count, &e) < 0 && !li->ev_error)
		li->ev_error = xstrdup(e.text);
}

/* What the fast path left to do for a line. */
enum scanned {
	SCAN_TREE, /* not canonical: the tree path checks it */
	SCAN_DONE, /* checked (or failed) */
	SCAN_HASH, /* its entry hash is to be compared: the hash of its text
	              without the top-level "hash" member, [0, cut_from) and
	              [cut_to, len) - the canonical form of the entry without
	              `hash`, with no tree built */
};

/* Fast path: the line is already canonical (*sc: what canon_scan found). */
static enum scanned check_canonical(struct line_info *li, struct canon_scan *scan, size_t *cut_from,
                                    size_t *cut_to)
{
	struct canon_scan sc;
	if (!canon_scan(li->text, li->len, &sc))
		return SCAN_TREE;
	*scan = sc;
	/* An id or kind with escapes would need decoding: leave it to the tree,
	 * which also refuses a kind holding U+0000 (spelled \u0000 here). Keys
	 * with escapes never reach this path (canon_scan). */
	if (sc.id.present && memchr(li->text + sc.id.value_off, '\\', sc.id.value_len))
		return SCAN_TREE;
	if (sc.kind.present && memchr(li->text + sc.kind.value_off, '\\', sc.kind.value_len))
		return SCAN_TREE;
	if (sc.seq.present && li->text[sc.seq.value_off] != '"')
		li->seq = number_at(li->text + sc.seq.value_off, sc.seq.value_len);
	/* A canonical number is already spelled as an error message prints it. */
	if (sc.seq.present && sc.seq.value_len < sizeof li->ev_seq &&
	    (li->text[sc.seq.value_off] == '-' ||
	     (li->text[sc.seq.value_off] >= '0' && li->text[sc.seq.value_off] <= '9'))) {
		memcpy(li->ev_seq, li->text + sc.seq.value_off, sc.seq.value_len);
		li->ev_seq[sc.seq.value_len] = '\0';
	}
	li->is_anchor = sc.kind.present && sc.kind.value_len == 14 &&
	                memcmp(li->text + sc.kind.value_off, "\"clock-anchor\"", 14) == 0;
	if (li->is_anchor && sc.id.present && li->text[sc.id.value_off] == '"') {
		li->id = li->text + sc.id.value_off + 1;
		li->id_len = sc.id.value_len - 2;
	}
	if (!sc.hash.present && !sc.prev_hash.present)
		return SCAN_DONE;
	if (!sc.hash.present || !sc.prev_hash.present)
		return fail(li, sc.hash.present ? "hash without prevHash" : "prevHash without hash"), SCAN_DONE;
	const char *hash = li->text + sc.hash.value_off + 1, *prev = li->text + sc.prev_hash.value_off + 1;
	/* (canon_scan has checked the digits of most) */
	if (sc.hash.value_len != 66 || hash[-1] != '"' || !(sc.hash.hex64 || is_hex64(hash)))
		return fail(li, "hash is not 64 lowercase hex digits"), SCAN_DONE;
	if (sc.prev_hash.value_len != 66 || prev[-1] != '"' || !(sc.prev_hash.hex64 || is_hex64(prev)))
		return fail(li, "prevHash is not 64 lowercase hex digits"), SCAN_DONE;
	li->chained = 1;
	li->hash = hash;
	li->prev = prev;
	*cut_from = sc.hash.member_off;
	*cut_to = sc.hash.member_off + sc.hash.member_len;
	if (li->text[*cut_from - 1] == ',')
		(*cut_from)--;  /* ",\"hash\":..." */
	else if (li->text[*cut_to] == ',')
		(*cut_to)++;    /* first member: "\"hash\":...," */
	return SCAN_HASH;
}

/* Why the entry is refused if its kind or one of its own member names
 * holds U+0000, else NULL. No writer makes one (the earlier runner's
 * names and kinds are fixed words; sfma-chain refuses them), and a name
 * or kind read as a C string would stop there and pass for another
 * ("clock-anchor\u0000x" for "clock-anchor"). Names inside data may hold
 * U+0000: data is the model's (the interop fixtures have such keys). */
static const char *entry_names_nul(json_t *entry)
{
	json_t *kind = json_object_get(entry, "kind");
	if (json_is_string(kind) && memchr(json_string_value(kind), '\0', json_string_length(kind)))
		return "kind contains U+0000";
	for (void *it = json_object_iter(entry); it; it = json_object_iter_next(entry, it))
		if (memchr(json_object_iter_key(it), '\0', json_object_iter_key_len(it)))
			return "a member name contains U+0000";
	return NULL;
}

/* Slow path for lines in any other form: parse, drop hash, canonicalize. */
static void check_tree(struct line_info *li, const struct chain_opts *o)
{
	struct sfma_err e;
	json_t *v = ndjson_parse(li->text, li->len, &e);
	if (!v) {
		fail(li, e.text);
		return;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		fail(li, "not a JSON object");
		return;
	}
	json_t *h = json_object_get(v, "hash"), *p = json_object_get(v, "prevHash");
	json_t *seq = json_object_get(v, "seq"), *kind = json_object_get(v, "kind");
	json_t *id = json_object_get(v, "id");
	if (json_is_number(seq))
		li->seq = json_number_value(seq);
	const char *bad_name = entry_names_nul(v);
	if (bad_name) {
		json_decref(v);
		fail(li, bad_name);
		return;
	}
	li->is_anchor = ndjson_string_is(kind, "clock-anchor");
	size_t id_len = li->is_anchor && json_is_string(id) ? json_string_length(id) : 0;
	if (id_len >= CHAIN_ID_MAX)
		id_len = CHAIN_ID_MAX - 1;
	/* One allocation holds what outlives the tree: hash, prevHash, id. */
	li->owned = xmalloc(128 + id_len + 1);
	if (id_len) {
		memcpy(li->owned + 128, json_string_value(id), id_len);
		li->id = li->owned + 128;
		li->id_len = id_len;
	}
	if (!h && !p) {
		if (o->evidence)
			check_evidence(li, v, o);
		json_decref(v);
		return;
	}
	if (!h || !p) {
		fail(li, h ? "hash without prevHash" : "prevHash without hash");
	} else if (!json_is_string(h) || !is_sha256_hex(json_string_value(h), json_string_length(h))) {
		fail(li, "hash is not 64 lowercase hex digits");
	} else if (!json_is_string(p) || !is_sha256_hex(json_string_value(p), json_string_length(p))) {
		fail(li, "prevHash is not 64 lowercase hex digits");
	} else {
		li->chained = 1;
		memcpy(li->owned, json_string_value(h), 64);
		memcpy(li->owned + 64, json_string_value(p), 64);
		li->hash = li->owned;
		li->prev = li->owned + 64;
		json_object_del(v, "hash");
		struct buf b = {0};
		char got[65];
		if (canon_dump(v, &b, &e) < 0)
			fail(li, e.text);
		else {
			sha256_hex(b.p, b.len, got);
			if (memcmp(got, li->hash, 64) != 0)
				fail(li, "hash mismatch (the entry's content was altered)");
		}
		buf_free(&b);
	}
	if (o->evidence && !li->error)
		check_evidence(li, v, o);
	json_decref(v);
}

/* A scanner for the evidence member of a canonical line, which saves
 * parsing the line into a tree (that cost four times the hashing). It
 * knows only the exact canonical form of valid references,
 * {"bytes":<digits>,"sha256":"<64 hex>"}; anything else is left to the
 * tree, which gives the same answer and names what is wrong. The text is
 * valid JSON without whitespace: canon_scan accepted it. */

static const char *skip_string(const char *p, const char *end)
{
	for (p++; p < end; p++) {
		if (*p == '\\')
			p++;
		else if (*p == '"')
			return p + 1;
	}
	return NULL;
}

/* One reference in canonical form at *pp: 1 with ref filled and *pp past it. */
static int scan_ref(const char **pp, const char *end, struct evidence_ref *ref)
{
	static const char open[] = "{\"bytes\":", mid[] = ",\"sha256\":\"";
	const char *p = *pp;
	if ((size_t)(end - p) < sizeof open - 1 || memcmp(p, open, sizeof open - 1) != 0)
		return 0;
	p += sizeof open - 1;
	uint64_t n = 0;
	const char *digits = p;
	while (p < end && *p >= '0' && *p <= '9' && p - digits < 16)
		n = n * 10 + (uint64_t)(*p++ - '0');
	if (p == digits || (*digits == '0' && p - digits > 1) || n > EVIDENCE_MAX_REF_BYTES)
		return 0;
	if ((size_t)(end - p) < sizeof mid - 1 + 64 + 2 || memcmp(p, mid, sizeof mid - 1) != 0)
		return 0;
	p += sizeof mid - 1;
	if (!is_hex64(p) || p[64] != '"' || p[65] != '}')
		return 0;
	memcpy(ref->sha256, p, 64);
	ref->sha256[64] = '\0';
	ref->bytes = n;
	*pp = p + 66;
	return 1;
}

/* Walk the references of the evidence value at p; with rc, check each.
 * 1 if every one had the exact canonical form, 0 to leave it to the tree. */
static int scan_refs(const char *p, const char *end, struct ref_check *rc)
{
	if (p >= end || *p++ != '{')
		return 0;
	if (p < end && *p == '}')
		return 1;
	for (;;) {
		if (p >= end || *p != '"' || !(p = skip_string(p, end)) || p >= end || *p++ != ':')
			return 0;
		int array = p < end && *p == '[';
		if (array && ++p < end && *p == ']') {
			p++;
		} else {
			for (;;) {
				struct evidence_ref ref;
				if (!scan_ref(&p, end, &ref))
					return 0;
				if (rc && check_one_ref(rc, NULL, &ref))
					return 1; /* the line failed: the rest need no check */
				if (!array || p >= end || *p != ',')
					break;
				p++;
			}
			if (array && (p >= end || *p++ != ']'))
				return 0;
		}
		if (p < end && *p == ',') {
			p++;
			continue;
		}
		return p < end && *p == '}';
	}
}

/* The evidence of a line that took the fast path: ev is its top-level
 * evidence member as canon_scan found it. References in their exact
 * canonical form are checked here; any other value is left to the tree,
 * which gives the same answer and names what is wrong. */
static void check_canonical_evidence(struct line_info *li, const struct canon_member *ev,
                                     const struct chain_opts *o)
{
	if (li->error || !ev->present)
		return;
	const char *p = li->text + ev->value_off, *end = li->text + li->len;
	if (scan_refs(p, end, NULL)) {
		struct ref_check rc = {li, o};
		scan_refs(p, end, &rc);
		return;
	}
	struct sfma_err e;
	json_t *v = ndjson_parse(li->text, li->len, &e);
	if (!v) { /* canon_scan accepted it: cannot happen, but never skip a check */
		fail(li, e.text);
		return;
	}
	check_evidence(li, v, o);
	json_decref(v);
}

/* Lines a thread takes at a time: their entry hashes and leaves, some two
 * thousand messages, fill the lanes of sha256_many many times over, and
 * so do all but the top few levels of their pieces' inner nodes. (A
 * chunk's tables, some 270 KB, are on the checking thread's stack.) */
#ifndef CHUNK_LINES
#define CHUNK_LINES 1024
#endif

/* The first size after leaf count g at which the tree must be seen whole
 * (the mark, a point), or UINT64_MAX. */
static uint64_t next_cut(const struct chain_opts *o, uint64_t g)
{
	uint64_t cut = UINT64_MAX;
	if (o->mark_set && o->mark_count > g)
		cut = o->mark_count;
	size_t lo = 0, hi = o->npoints; /* the first point past g */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (o->points[mid].size > g)
			hi = mid;
		else
			lo = mid + 1;
	}
	if (lo < o->npoints && o->points[lo].size < cut)
		cut = o->points[lo].size;
	return cut;
}

/* Cut the leaves of lines [from, to) (the first has base + from lines
 * before it) into complete subtrees aligned on their size, never across a
 * size the tree must be seen at, and hash each here, in parallel with the
 * other chunks: the linking, which must go in order, is then left with
 * O(log n) node hashes per chunk. The inner nodes of all the pieces are
 * hashed a level at a time, each level one batch of sha256_many. */
static void hash_pieces(struct line_info *lines, size_t from, size_t to, uint64_t base,
                        const struct chain_opts *o)
{
	struct piece {
		size_t first;  /* its first line */
		uint64_t leaf; /* the index of that line's leaf in the tree */
		unsigned height;
	} pieces[CHUNK_LINES];
	size_t np = 0;
	unsigned tallest = 0;
	uint64_t g = base + from, end = base + to;
	for (size_t i = from; g < end;) {
		uint64_t cut = next_cut(o, g);
		unsigned h = merkle_piece_height(g, cut < end ? cut : end);
		size_t count = (size_t)1 << h;
		for (size_t j = i; j < i + count; j++)
			lines[j].piece = 0;
		lines[i + count - 1].piece = (unsigned char)(h + 1);
		pieces[np++] = (struct piece){i, g, h};
		if (h > tallest)
			tallest = h;
		i += count;
		g += count;
	}
	/* Level L of a piece: its nodes over 2^L leaves, at (leaf >> L) -
	 * ((base + from) >> L) in level[L % 2]; each piece's top goes into
	 * the node of its last line, where linking finds it. */
	static_assert(CHUNK_LINES >= 2, "a chunk holds a pair of leaves");
	unsigned char level[2][CHUNK_LINES / 2 + 1][MERKLE_HASH_LEN];
	struct sha256_job jobs[CHUNK_LINES / 2 + 1];
	for (unsigned L = 1; L <= tallest; L++) {
		size_t nj = 0;
		uint64_t first = (base + from) >> L, below = (base + from) >> (L - 1);
		for (size_t p = 0; p < np; p++) {
			const struct piece *pc = &pieces[p];
			if (pc->height < L)
				continue;
			size_t at = (size_t)((pc->leaf >> L) - first), src = (size_t)((pc->leaf >> (L - 1)) - below);
			for (size_t j = 0; j < (size_t)1 << (pc->height - L); j++) {
				const unsigned char *left, *right;
				if (L == 1) {
					left = lines[pc->first + 2 * j].node;
					right = lines[pc->first + 2 * j + 1].node;
				} else {
					left = level[(L - 1) % 2][src + 2 * j];
					right = level[(L - 1) % 2][src + 2 * j + 1];
				}
				nj += merkle_node_job(&jobs[nj], left, right, level[L % 2][at + j]);
			}
		}
		sha256_many(jobs, nj);
		for (size_t p = 0; p < np; p++)
			if (pieces[p].height == L)
				memcpy(lines[pieces[p].first + ((size_t)1 << L) - 1].node,
				       level[L % 2][(size_t)((pieces[p].leaf >> L) - first)], MERKLE_HASH_LEN);
	}
}

/* Check lines [from, to) of a block whose first line has base lines
 * before it: each line on its own, then the entry hashes and leaves of
 * all of them at once (sha256_many), then the tree's pieces. 1 if a line
 * holds memory of its own (release_lines frees it), else 0. */
static int check_chunk(struct line_info *lines, size_t from, size_t to, uint64_t base,
                        const struct chain_opts *o)
{
	struct sha256_job jobs[2 * CHUNK_LINES];
	unsigned char entry_md[CHUNK_LINES][32];
	struct canon_member evidence[CHUNK_LINES];
	unsigned char scanned[CHUNK_LINES];
	size_t nj = 0;
	for (size_t i = from; i < to; i++) {
		struct line_info *li = &lines[i];
		size_t k = i - from, cut_from = 0, cut_to = 0;
		struct canon_scan sc;
		scanned[k] = (unsigned char)check_canonical(li, &sc, &cut_from, &cut_to);
		if (scanned[k] == SCAN_TREE)
			check_tree(li, o);
		else
			evidence[k] = sc.evidence;
		if (scanned[k] == SCAN_HASH)
			jobs[nj++] = (struct sha256_job){{li->text, li->text + cut_to, NULL},
			                                 {cut_from, li->len - cut_to, 0}, entry_md[k]};
		if (o->tree)
			nj += merkle_leaf_job(&jobs[nj], li->text, li->len, li->node);
	}
	sha256_many(jobs, nj);
	int owns = 0;
	for (size_t i = from; i < to; i++) {
		struct line_info *li = &lines[i];
		size_t k = i - from;
		if (scanned[k] == SCAN_HASH && !hex_matches(li->hash, entry_md[k]))
			fail(li, "hash mismatch (the entry's content was altered)");
		if (scanned[k] != SCAN_TREE && o->evidence)
			check_canonical_evidence(li, &evidence[k], o);
		owns |= li->owned || li->error || li->ev_error;
	}
	if (o->tree)
		hash_pieces(lines, from, to, base, o);
	return owns;
}

/* Why a block stopped short of its buffer's end. */
enum pending { PEND_NONE, PEND_LONG, PEND_TORN, PEND_READ };

struct block {
	char *buf;               /* cap + 1 bytes */
	size_t have;             /* bytes in buf */
	size_t used;             /* bytes of the complete lines split off */
	struct line_info *lines; /* BLOCK_LINES entries */
	size_t n;
	uint64_t base;           /* lines of the trace before this block's first */
	enum pending pending;
	int read_errno;
	/* Its chunks of CHUNK_LINES lines, under the pool's lock: */
	size_t chunks, claimed, finished;
	int owns;                /* a line holds memory of its own */
};

struct reader {
	int fd, eof;
	size_t cap, max_line;
};

static void release_lines(struct block *b)
{
	for (size_t i = 0; b->owns && i < b->n; i++) {
		free(b->lines[i].owned);
		free(b->lines[i].error);
		free(b->lines[i].ev_error);
	}
	b->n = 0;
	b->owns = 0;
}

/* Read into b, after the bytes it already holds, until it has a block's
 * worth (or the longest line needs more), then split off complete lines. */
static void load_block(struct reader *rd, struct block *b)
{
	size_t target = BLOCK;
	b->used = 0;
	b->pending = PEND_NONE;
	for (;;) {
		while (!rd->eof && b->have < target) {
			ssize_t got = read(rd->fd, b->buf + b->have, target - b->have);
			if (got < 0) {
				if (errno == EINTR)
					continue;
				b->pending = PEND_READ;
				b->read_errno = errno;
				return;
			}
			if (got == 0)
				rd->eof = 1;
			b->have += (size_t)got;
		}
		if (rd->eof || b->have > rd->max_line || memrchr(b->buf, '\n', b->have))
			break;
		target = b->have + BLOCK < rd->cap ? b->have + BLOCK : rd->cap; /* a long line */
	}
	size_t start = 0;
	while (b->n < BLOCK_LINES) {
		char *nl = memchr(b->buf + start, '\n', b->have - start);
		if (!nl)
			break;
		size_t len = (size_t)(nl - (b->buf + start));
		if (len > rd->max_line) {
			b->pending = PEND_LONG;
			break;
		}
		struct line_info *li = &b->lines[b->n++];
		memset(li, 0, sizeof *li);
		li->text = b->buf + start;
		li->len = len;
		start += len + 1;
	}
	b->used = start;
	if (b->pending == PEND_NONE && b->n < BLOCK_LINES) {
		size_t rest = b->have - start;
		if (rest > rd->max_line)
			b->pending = PEND_LONG;
		else if (rd->eof && rest > 0)
			b->pending = PEND_TORN;
	}
}

/* ---- the worker threads ------------------------------------------------------
 *
 * Blocks are published in trace order, at most two at a time: while the
 * threads check the chunks of one, the calling thread reads and splits
 * the next and publishes it too, so that the threads go on with it while
 * the first is linked. Each thread takes the oldest chunk nobody has
 * taken; the calling thread, while it waits for a block, takes chunks
 * too. With n threads asked for, n - 1 are started: the calling thread
 * is the n-th. A thread that cannot be started is not needed: the calling
 * thread checks whatever nobody took. */

/* Lines a block must have for threads to be started for it: a small
 * run's trace (tens to a few hundred lines, well under a millisecond of
 * hashing) would otherwise wait for a thread to be created and scheduled,
 * which on a busy machine costs more than the checking. */
#define LINES_PER_THREAD 256

struct pool {
	pthread_mutex_t lock;
	pthread_cond_t wake;    /* a block was published, or stop */
	pthread_cond_t done;    /* a block's last chunk was checked */
	struct block *queue[2]; /* published and not yet awaited, oldest first */
	int queued, stop;
	const struct chain_opts *opts;
	int wanted, started, published;
	pthread_t tid[MAX_THREADS];
};

/* Under the lock: a chunk of b nobody took, as its index, or -1. */
static long claim_in(struct block *b)
{
	return b->claimed < b->chunks ? (long)b->claimed++ : -1;
}

/* Under the lock: check chunk c of b with the lock released. */
static void run_chunk(struct pool *p, struct block *b, size_t c)
{
	pthread_mutex_unlock(&p->lock);
	size_t from = c * CHUNK_LINES, to = from + CHUNK_LINES < b->n ? from + CHUNK_LINES : b->n;
	int owns = check_chunk(b->lines, from, to, b->base, p->opts);
	pthread_mutex_lock(&p->lock);
	b->owns |= owns;
	if (++b->finished == b->chunks)
		pthread_cond_broadcast(&p->done);
}

static void *pool_thread(void *arg)
{
	struct pool *p = arg;
	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		long c = -1;
		int q = 0;
		for (; q < p->queued && c < 0; q++)
			c = claim_in(p->queue[q]);
		if (c < 0)
			pthread_cond_wait(&p->wake, &p->lock);
		else
			run_chunk(p, p->queue[q - 1], (size_t)c);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static void pool_init(struct pool *p, int threads, const struct chain_opts *opts)
{
	memset(p, 0, sizeof *p);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done, NULL);
	p->opts = opts;
	p->wanted = threads - 1;
}

/* Hand b's lines to the threads (started with the first block worth it). */
static void pool_publish(struct pool *p, struct block *b)
{
	pthread_mutex_lock(&p->lock);
	b->chunks = (b->n + CHUNK_LINES - 1) / CHUNK_LINES;
	b->claimed = b->finished = 0;
	p->queue[p->queued++] = b;
	p->published++;
	if (p->started == 0 && (b->n >= LINES_PER_THREAD || p->published > 1))
		while (p->started < p->wanted && pthread_create(&p->tid[p->started], NULL, pool_thread, p) == 0)
			p->started++;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
}

/* Wait until every chunk of b, the oldest block published, is checked,
 * checking chunks meanwhile; then b leaves the queue. */
static void pool_await(struct pool *p, struct block *b)
{
	pthread_mutex_lock(&p->lock);
	assert(p->queued > 0 && p->queue[0] == b);
	while (b->finished < b->chunks) {
		long c = -1;
		int q = 0;
		for (; q < p->queued && c < 0; q++)
			c = claim_in(p->queue[q]);
		if (c >= 0)
			run_chunk(p, p->queue[q - 1], (size_t)c);
		else
			pthread_cond_wait(&p->done, &p->lock);
	}
	p->queue[0] = p->queue[1];
	p->queued--;
	pthread_mutex_unlock(&p->lock);
}

/* Stop the threads: a chunk being checked is finished, no other is taken. */
static void pool_stop(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	for (int k = 0; k < p->started; k++)
		pthread_join(p->tid[k], NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->wake);
	pthread_cond_destroy(&p->done);
}

struct verifier {
	const struct chain_opts *opts;
	struct chain_summary *sum;
	struct sha256 legacy;
	int seen_chained;
	size_t next_point; /* opts->points before it are behind */
};

/* The points at the tree's size now: their roots. */
static void see_points(struct verifier *v)
{
	const struct chain_opts *o = v->opts;
	while (v->next_point < o->npoints && o->points[v->next_point].size <= v->sum->tree.size) {
		struct chain_tree_point *p = &o->points[v->next_point++];
		if (p->size == v->sum->tree.size) {
			p->found = 1;
			merkle_frontier_root(&v->sum->tree, p->root);
		}
	}
}

/* The prefix ending at the line just linked: its head is that entry's
 * hash, or for a prefix of legacy lines only, their digest so far. */
static void mark_here(struct verifier *v, const struct line_info *li)
{
	struct chain_summary *s = v->sum;
	if (li->chained) {
		memcpy(s->mark_head, li->hash, 64);
		s->mark_head[64] = '\0';
	} else {
		struct sha256 copy = v->legacy;
		unsigned char md[32];
		sha256_final(&copy, md);
		hex_encode(md, 32, s->mark_head);
	}
	s->mark_seq = li->seq;
	s->mark_offset = s->size;
	s->mark_found = 1;
	if (v->opts->tree)
		merkle_frontier_root(&s->tree, s->mark_root);
}

/* Link the checked lines of one block in order. */
static int link_lines(struct verifier *v, struct line_info *li, size_t n, struct sfma_err *e)
{
	struct chain_summary *s = v->sum;
	for (size_t i = 0; i < n; i++, li++) {
		uint64_t no = s->entries + 1;
		if (li->error)
			return err_set(e, "line %llu: %s", (unsigned long long)no, li->error);
		if (!li->chained) {
			if (v->seen_chained)
				return err_set(e, "line %llu: unchained line after chained entries", (unsigned long long)no);
			sha256_update(&v->legacy, li->text, li->len);
			sha256_update(&v->legacy, "\n", 1);
			s->legacy++;
		} else {
			const char *want = s->head;
			char legacy_hex[65];
			if (!v->seen_chained) {
				if (s->legacy > 0) {
					unsigned char md[32];
					sha256_final(&v->legacy, md);
					hex_encode(md, 32, legacy_hex);
					want = legacy_hex;
				} else {
					want = CHAIN_ZERO_HASH;
				}
			}
			if (memcmp(li->prev, want, 64) != 0)
				return err_set(e, "line %llu: prevHash does not match the previous entry "
				                  "(a line was deleted, inserted or reordered)",
				               (unsigned long long)no);
			v->seen_chained = 1;
			memcpy(s->head, li->hash, 64);
			s->head[64] = '\0';
		}
		s->evidence += li->ev_refs;
		s->pruned += li->ev_pruned;
		if (li->ev_error) {
			s->evidence_failed = 1;
			if (li->ev_seq[0])
				return err_set(e, "seq %s: %s", li->ev_seq, li->ev_error);
			return err_set(e, "line %llu: %s", (unsigned long long)no, li->ev_error);
		}
		if (li->seq > s->max_seq)
			s->max_seq = li->seq;
		s->last_seq = li->seq;
		if (li->is_anchor && li->id_len)
			snprintf(s->anchor, sizeof s->anchor, "%.*s", (int)li->id_len, li->id);
		s->entries = no;
		s->last_offset = s->size;
		s->size += li->len + 1;
		if (v->opts->tree && li->piece) {
			/* A piece ends here: the tree is exactly `no` leaves again. */
			if (merkle_frontier_add_subtree(&s->tree, li->piece - 1u, li->node) < 0)
				return err_set(e, "line %llu: the trace has more lines than a tree can hold",
				               (unsigned long long)no);
			see_points(v);
		}
		if (v->opts->mark_set && no == v->opts->mark_count)
			mark_here(v, li);
		if (v->opts->trusted_count && no == v->opts->trusted_count) {
			if (!li->chained || memcmp(li->hash, v->opts->trusted_hash, 64) != 0)
				return err_set(e, "line %llu: trusted head not found (the trace was rewritten, not "
				                  "only appended to)", (unsigned long long)no);
		}
	}
	return 0;
}

/* The error that stopped block b after its complete lines were linked. */
static int report_pending(const struct block *b, const struct reader *rd, struct chain_summary *out,
                          struct sfma_err *e)
{
	unsigned long long next = (unsigned long long)out->entries + 1;
	switch (b->pending) {
	case PEND_LONG:
		return err_set(e, "line %llu: longer than %zu bytes", next, rd->max_line);
	case PEND_TORN:
		out->torn = 1;
		out->torn_offset = out->size;
		return err_set(e, "line %llu: torn final line (%zu bytes without a newline)", next,
		               b->have - b->used);
	case PEND_READ:
		return err_set(e, "read: %s", strerror(b->read_errno));
	case PEND_NONE:
		break;
	}
	return 0;
}

int chain_verify_fd(int fd, const struct chain_opts *opts, struct chain_summary *out,
                    struct sfma_err *e)
{
	struct chain_opts defaults = {0};
	if (!opts)
		opts = &defaults;
	memset(out, 0, sizeof *out);
	strcpy(out->head, CHAIN_ZERO_HASH);
	strcpy(out->anchor, "unanchored");
	merkle_frontier_init(&out->tree);
	for (size_t i = 0; i < opts->npoints; i++)
		opts->points[i].found = 0;
	if (opts->resume) {
		const struct chain_summary *r = opts->resume;
		if (r->entries <= r->legacy || opts->trusted_count || opts->evidence ||
		    (opts->mark_set && opts->mark_count < r->entries))
			return err_set(e, "resume: only a chained prefix, without trusted head or evidence, "
			                  "and no mark inside it");
		out->entries = r->entries;
		out->legacy = r->legacy;
		memcpy(out->head, r->head, sizeof out->head);
		out->max_seq = r->max_seq;
		out->last_seq = r->last_seq;
		if (opts->mark_set && opts->mark_count == r->entries) {
			memcpy(out->mark_head, r->head, sizeof out->mark_head);
			out->mark_seq = r->last_seq;
			out->mark_offset = r->size;
			out->mark_found = 1;
		}
		memcpy(out->anchor, r->anchor, sizeof out->anchor);
		out->size = r->size;
		out->last_offset = r->last_offset;
		if (opts->tree) {
			if (r->tree.size != r->entries)
				return err_set(e, "resume: the tree does not cover the prefix");
			out->tree = r->tree;
			if (out->mark_found)
				merkle_frontier_root(&out->tree, out->mark_root);
		}
	}
	if (opts->mark_set && opts->mark_count == 0 && !opts->resume) {
		strcpy(out->mark_head, CHAIN_ZERO_HASH);
		out->mark_found = 1;
		if (opts->tree)
			merkle_frontier_root(&out->tree, out->mark_root);
	}

	int threads = opts->threads;
	if (threads <= 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		threads = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus;
	}
	if (threads > MAX_THREADS)
		threads = MAX_THREADS;
	struct verifier v = {.opts = opts, .sum = out, .seen_chained = opts->resume != NULL};
	sha256_init(&v.legacy);
	if (opts->tree) {
		/* Points before a resumed prefix's end are not seen here. */
		while (v.next_point < opts->npoints && opts->points[v.next_point].size < out->tree.size)
			v.next_point++;
		see_points(&v);
	}

	struct reader rd = {fd, 0, 0, opts->max_line ? opts->max_line : NDJSON_DEFAULT_MAX};
	rd.cap = BLOCK > rd.max_line + 1 ? BLOCK : rd.max_line + 1;
	/* Two blocks: pages of a buffer are only touched as far as it is filled,
	 * so a cap sized for the longest line costs no memory until used. */
	struct block blk[2];
	for (int i = 0; i < 2; i++) {
		memset(&blk[i], 0, sizeof blk[i]);
		blk[i].buf = xmalloc(rd.cap + 1);
		blk[i].lines = xmalloc(BLOCK_LINES * sizeof *blk[i].lines);
	}
	struct block *cur = &blk[0], *nxt = &blk[1];
	struct pool pool;
	pool_init(&pool, threads, opts);
	int rc = 0;
	cur->base = out->entries;
	load_block(&rd, cur);
	pool_publish(&pool, cur);
	for (;;) {
		/* Read ahead while the threads check, and hand that on too. */
		int more = cur->pending == PEND_NONE && !(rd.eof && cur->used == cur->have);
		if (more) {
			release_lines(nxt);
			nxt->have = cur->have - cur->used;
			memcpy(nxt->buf, cur->buf + cur->used, nxt->have);
			nxt->base = cur->base + cur->n;
			load_block(&rd, nxt);
			pool_publish(&pool, nxt);
		}
		pool_await(&pool, cur);
		if (link_lines(&v, cur->lines, cur->n, e) < 0) {
			rc = -1;
			break;
		}
		if (cur->pending != PEND_NONE) {
			rc = report_pending(cur, &rd, out, e);
			break;
		}
		if (!more)
			break;
		struct block *t = cur;
		cur = nxt;
		nxt = t;
	}
	pool_stop(&pool);
	if (rc == 0 && !v.seen_chained && out->legacy > 0) {
		unsigned char digest[32];
		sha256_final(&v.legacy, digest);
		hex_encode(digest, 32, out->head);
	}
	if (rc == 0 && opts->trusted_count && out->entries < opts->trusted_count)
		rc = err_set(e, "trusted head not found: the trace has %llu entries, fewer than %llu "
		                "(it was truncated)",
		             (unsigned long long)out->entries, (unsigned long long)opts->trusted_count);
	for (int i = 0; i < 2; i++) {
		release_lines(&blk[i]);
		free(blk[i].lines);
		free(blk[i].buf);
	}
	return rc;
}

char *chain_line_at(int fd, uint64_t offset, uint64_t max_line, size_t *len, struct sfma_err *e)
{
	size_t max = max_line ? (size_t)max_line : NDJSON_DEFAULT_MAX;
	size_t cap = 4096, have = 0;
	char *buf = xmalloc(cap);
	char *nl = NULL;
	while (!nl) {
		if (have == cap) {
			if (cap > max) {
				free(buf);
				return err_set(e, "line at byte %llu: longer than %zu bytes", (unsigned long long)offset, max),
				       NULL;
			}
			cap *= 2;
			buf = xrealloc(buf, cap);
		}
		ssize_t got = pread(fd, buf + have, cap - have, (off_t)(offset + have));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			free(buf);
			return err_set(e, "line at byte %llu: %s", (unsigned long long)offset,
			               got < 0 ? strerror(errno) : "no complete line"), NULL;
		}
		nl = memchr(buf + have, '\n', (size_t)got);
		have += (size_t)got;
	}
	*nl = '\0';
	*len = (size_t)(nl - buf);
	return buf;
}

json_t *chain_entry_at(int fd, uint64_t offset, uint64_t max_line, struct sfma_err *e)
{
	size_t len;
	char *buf = chain_line_at(fd, offset, max_line, &len, e);
	if (!buf)
		return NULL;
	json_t *v = ndjson_parse(buf, len, e);
	free(buf);
	if (v && !json_is_object(v)) {
		json_decref(v);
		return err_set(e, "line at byte %llu: not a JSON object", (unsigned long long)offset), NULL;
	}
	return v;
}

/* ---- the verified-head cache ------------------------------------------------ */

struct chain_digest {
	struct sha256 ctx;
};

#define CACHE_MAX 8192 /* the summary and a frontier of up to 63 nodes */

void chain_digest_add(struct chain_digest *dg, const void *data, size_t n)
{
	if (dg)
		sha256_update(&dg->ctx, data, n);
}

void chain_digest_free(struct chain_digest *dg)
{
	free(dg);
}

static struct chain_digest *digest_new(void)
{
	struct chain_digest *dg = xcalloc(1, sizeof *dg);
	sha256_init(&dg->ctx);
	return dg;
}

/* Hash bytes [from, to) of fd into dg. 0, or -1 (short file, read error). */
static int digest_range(struct chain_digest *dg, int fd, uint64_t from, uint64_t to)
{
	char buf[1 << 16];
	while (from < to) {
		size_t want = to - from < sizeof buf ? (size_t)(to - from) : sizeof buf;
		ssize_t got = pread(fd, buf, want, (off_t)from);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return -1;
		sha256_update(&dg->ctx, buf, (size_t)got);
		from += (uint64_t)got;
	}
	return 0;
}

/* The note's check: SHA-256 of the prefix digest and the summary, as
 * text - the tree's frontier and the opening point included. Whatever
 * the note says is bound to the bytes. */
static void cache_check(const char prefix_hex[65], const struct chain_summary *s,
                        const struct chain_tree_point *opened, char out[65])
{
	struct buf b = {0};
	buf_printf(&b, "sfma-chain-head-v2\n%s\n%llu %llu %llu %llu\n%s\n%.17g %.17g\n%s\n", prefix_hex,
	           (unsigned long long)s->size, (unsigned long long)s->entries, (unsigned long long)s->legacy,
	           (unsigned long long)s->last_offset, s->head, s->max_seq, s->last_seq, s->anchor);
	unsigned char nodes[MERKLE_MAX_HEIGHT][MERKLE_HASH_LEN];
	size_t n;
	char hex[65];
	merkle_frontier_nodes(&s->tree, nodes, &n);
	for (size_t i = 0; i < n; i++) {
		hex_encode(nodes[i], MERKLE_HASH_LEN, hex);
		buf_printf(&b, "%s%s", i ? " " : "", hex);
	}
	buf_addc(&b, '\n');
	if (opened) {
		hex_encode(opened->root, MERKLE_HASH_LEN, hex);
		buf_printf(&b, "%llu %s\n", (unsigned long long)opened->size, hex);
	}
	sha256_hex(b.p, b.len, out);
	buf_free(&b);
}

/* The digest so far, as hex, leaving dg running. */
static int digest_hex(const struct chain_digest *dg, char out[65])
{
	struct sha256 copy = dg->ctx;
	unsigned char md[32];
	sha256_final(&copy, md);
	hex_encode(md, 32, out);
	return 0;
}

static int get_u64(json_t *doc, const char *key, uint64_t *v)
{
	long long n;
	if (!ndjson_integer(json_object_get(doc, key), &n) || n < 0)
		return 0;
	*v = (uint64_t)n;
	return 1;
}

static int hex32(json_t *v, unsigned char out[MERKLE_HASH_LEN])
{
	const char *s = json_string_value(v);
	if (!json_is_string(v) || !is_sha256_hex(s, json_string_length(v)))
		return 0;
	for (int i = 0; i < MERKLE_HASH_LEN; i++) {
		int hi = s[2 * i] <= '9' ? s[2 * i] - '0' : s[2 * i] - 'a' + 10;
		int lo = s[2 * i + 1] <= '9' ? s[2 * i + 1] - '0' : s[2 * i + 1] - 'a' + 10;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return 1;
}

static int get_hex64(json_t *doc, const char *key, char out[65])
{
	json_t *v = json_object_get(doc, key);
	if (!json_is_string(v) || !is_sha256_hex(json_string_value(v), json_string_length(v)))
		return 0;
	memcpy(out, json_string_value(v), 65);
	return 1;
}

/* The note's frontier: one hex node per bit of its entry count. */
static int get_tree(json_t *doc, struct chain_summary *s)
{
	json_t *tree = json_object_get(doc, "tree");
	unsigned char nodes[MERKLE_MAX_HEIGHT][MERKLE_HASH_LEN];
	size_t n = json_array_size(tree);
	if (!json_is_array(tree) || n > MERKLE_MAX_HEIGHT)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!hex32(json_array_get(tree, i), nodes[i]))
			return 0;
	return merkle_frontier_from_nodes(&s->tree, s->entries, (const unsigned char (*)[MERKLE_HASH_LEN])nodes, n) == 0;
}

/* The note at path, when it is well formed: its summary, opening point
 * (opened->found: the note has one) and check. */
static int cache_read(const char *path, struct chain_summary *s, struct chain_tree_point *opened, char check[65])
{
	struct sfma_err e;
	json_t *doc = path ? ndjson_load_at(AT_FDCWD, path, 1, CACHE_MAX, &e) : NULL;
	json_t *seq = json_object_get(doc, "maxSeq"), *last = json_object_get(doc, "lastSeq");
	json_t *anchor = json_object_get(doc, "anchor"), *open = json_object_get(doc, "opened");
	long long version;
	memset(s, 0, sizeof *s);
	memset(opened, 0, sizeof *opened);
	int ok = json_is_object(doc) && ndjson_integer(json_object_get(doc, "version"), &version) && version == 2 &&
	         get_u64(doc, "size", &s->size) && get_u64(doc, "entries", &s->entries) &&
	         get_u64(doc, "legacy", &s->legacy) && get_u64(doc, "lastOffset", &s->last_offset) &&
	         get_hex64(doc, "head", s->head) && get_hex64(doc, "check", check) && json_is_number(seq) &&
	         json_is_number(last) &&
	         json_is_string(anchor) && json_string_length(anchor) < CHAIN_ID_MAX &&
	         strlen(json_string_value(anchor)) == json_string_length(anchor) && s->entries > s->legacy &&
	         s->last_offset < s->size && get_tree(doc, s) &&
	         (!open || (json_is_object(open) && get_u64(open, "entries", &opened->size) &&
	                    opened->size <= s->entries && hex32(json_object_get(open, "root"), opened->root)));
	if (ok) {
		s->max_seq = json_number_value(seq);
		s->last_seq = json_number_value(last);
		snprintf(s->anchor, sizeof s->anchor, "%s", json_string_value(anchor));
		opened->found = open != NULL;
	}
	json_decref(doc);
	return ok;
}

/* 1 if the note's summary and opening point give every point of opts
 * that lies before its end: the rest are found after it. */
static int points_resumable(const struct chain_opts *o, const struct chain_summary *noted,
                            const struct chain_tree_point *opened)
{
	for (size_t i = 0; i < o->npoints; i++)
		if (o->points[i].size < noted->entries && !(opened->found && o->points[i].size == opened->size))
			return 0;
	return 1;
}

int chain_verify_cached(int fd, const char *cache_path, const struct chain_opts *opts,
                        struct chain_summary *out, int *used, struct chain_digest **dgp,
                        struct sfma_err *e)
{
	struct chain_opts none = {0};
	if (!opts)
		opts = &none;
	struct chain_summary noted;
	struct chain_tree_point opened;
	char check[65], prefix_hex[65], want[65];
	struct stat st;
	struct chain_digest *dg = digest_new();
	*used = 0;
	if (dgp)
		*dgp = NULL;
	if (!dg)
		return err_set(e, "SHA-256 is not available");
	int rc;
	if (cache_read(cache_path, &noted, &opened, check) && (!opts->mark_set || opts->mark_count >= noted.entries) &&
	    points_resumable(opts, &noted, &opened) && fstat(fd, &st) == 0 && (uint64_t)st.st_size >= noted.size &&
	    digest_range(dg, fd, 0, noted.size) == 0 && digest_hex(dg, prefix_hex) == 0 &&
	    (cache_check(prefix_hex, &noted, opened.found ? &opened : NULL, want), strcmp(want, check) == 0) &&
	    lseek(fd, (off_t)noted.size, SEEK_SET) == (off_t)noted.size) {
		/* The prefix is the one the note's writer verified: the rest only. */
		struct chain_opts resumed = {.resume = &noted, .mark_set = opts->mark_set, .mark_count = opts->mark_count,
		                             .tree = opts->tree, .points = opts->points, .npoints = opts->npoints};
		*used = 1;
		rc = chain_verify_fd(fd, &resumed, out, e);
		if (rc == 0 && digest_range(dg, fd, noted.size, out->size) < 0)
			rc = err_set(e, "read: %s", strerror(errno ? errno : EIO));
		for (size_t i = 0; rc == 0 && opts->tree && i < opts->npoints; i++)
			if (opts->points[i].size == opened.size && opened.found && opened.size < noted.entries) {
				opts->points[i].found = 1;
				memcpy(opts->points[i].root, opened.root, MERKLE_HASH_LEN);
			}
	} else {
		/* No note, or not this trace's: from the first line. */
		chain_digest_free(dg);
		dg = digest_new();
		if (!dg)
			return err_set(e, "SHA-256 is not available");
		if (lseek(fd, 0, SEEK_SET) < 0)
			rc = err_set(e, "seek: %s", strerror(errno));
		else
			rc = chain_verify_fd(fd, opts, out, e);
		if (rc == 0 && dgp && digest_range(dg, fd, 0, out->size) < 0)
			rc = err_set(e, "read: %s", strerror(errno ? errno : EIO));
	}
	if (rc < 0 || !dgp)
		chain_digest_free(dg);
	else
		*dgp = dg;
	return rc;
}

int chain_head_cache_write(const char *cache_path, const struct chain_summary *sum,
                           const struct chain_tree_point *opened, const struct chain_digest *dg,
                           struct sfma_err *e)
{
	char prefix_hex[65], check[65], hex[65];
	if (sum->entries <= sum->legacy)
		return 0; /* nothing chained yet: a note could not be resumed from */
	if (sum->tree.size != sum->entries)
		return err_set(e, "the tree does not cover the trace");
	if (!dg || digest_hex(dg, prefix_hex) < 0)
		return err_set(e, "SHA-256 is not available");
	cache_check(prefix_hex, sum, opened, check);
	json_t *doc = json_pack("{s:i, s:I, s:I, s:I, s:I, s:s, s:f, s:f, s:s, s:s}", "version", 2, "size",
	                        (json_int_t)sum->size, "entries", (json_int_t)sum->entries, "legacy",
	                        (json_int_t)sum->legacy, "lastOffset", (json_int_t)sum->last_offset, "head",
	                        sum->head, "maxSeq", sum->max_seq, "lastSeq", sum->last_seq, "anchor", sum->anchor,
	                        "check", check);
	unsigned char nodes[MERKLE_MAX_HEIGHT][MERKLE_HASH_LEN];
	size_t n;
	merkle_frontier_nodes(&sum->tree, nodes, &n);
	json_t *tree = json_array();
	for (size_t i = 0; i < n; i++) {
		hex_encode(nodes[i], MERKLE_HASH_LEN, hex);
		json_array_append_new(tree, json_string(hex));
	}
	json_object_set_new(doc, "tree", tree);
	if (opened) {
		hex_encode(opened->root, MERKLE_HASH_LEN, hex);
		json_object_set_new(doc, "opened", json_pack("{s:I, s:s}", "entries", (json_int_t)opened->size, "root", hex));
	}
	struct buf b = {0};
	int rc = doc && canon_dump(doc, &b, e) == 0 ? 0 : -1;
	json_decref(doc);
	if (rc == 0) {
		buf_addc(&b, '\n');
		rc = atomic_write_volatile(cache_path, b.p, b.len, 0644, e);
	}
	buf_free(&b);
	return rc;
}
