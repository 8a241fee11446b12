/* fuzz_chain.c - chain verification (lib/chain.c chain_verify_fd), compiled
 * in here with blocks of 512 bytes and 64 lines, and chunks of 8 lines, so
 * that small inputs cross block boundaries, split lines between blocks,
 * cut blocks into chunks and use the worker threads.
 *
 * Input byte 0: bit 0 picks the mode, bit 1 two real worker threads
 * instead of checking on the calling thread, the other bits the line
 * maximum.
 *  - raw: the rest is a trace. chain_verify_fd must agree with a plain
 *    reference verifier written from the contract (parse every line, cut
 *    "hash", canonicalize, SHA-256, link): same verdict, same first failing
 *    line, and on success the same entries, legacy lines, head, largest seq
 *    and anchor, and the same RFC 6962 tree of the lines as written (its
 *    root, and at a few sizes given as points, across blocks and shares:
 *    lib/merkle.c's frontier against the tree hash by its recursive
 *    definition). Kinds and names are whole JSON strings: "clock-anchor"
 *    followed by anything, U+0000 included, is no anchor, and an entry
 *    whose kind or own member name holds U+0000 breaks the chain.
 *  - mutate: bytes 1-3 say where and how to change one byte, the rest is
 *    turned into a valid chain (each line that reads as an object becomes
 *    an entry, others are wrapped; optionally a legacy line first and a
 *    non-canonical rendering). The chain must verify with the expected head,
 *    with a trusted head at its own entry too, not with a wrong one or one
 *    past the end; with the one byte changed it must not, unless the changed line still
 *    says exactly the same thing (the hash covers the value, not the
 *    spelling, as in 1e5 -> 1E5) and is not a legacy line. */
#include "fuzz.h"

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

/* Starting a thread under ASan costs more than checking a small block, so
 * most inputs run with thread creation failing: chain.c then checks the
 * block on the calling thread (its fallback when pthread_create fails),
 * which is tested that way too. */
static int real_threads;

static int fuzz_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	return real_threads ? pthread_create(t, a, fn, arg) : EAGAIN;
}

#define pthread_create fuzz_pthread_create
#define BLOCK 512u
#define BLOCK_LINES 64
#define CHUNK_LINES 8
#include "lib/chain.c"
#undef pthread_create

/* ---- the reference verifier ------------------------------------------ */

struct ref {
	int ok;
	uint64_t fail_line;      /* first line that broke (1-based) */
	uint64_t entries, legacy;
	char head[65];
	double max_seq;
	char anchor[CHAIN_ID_MAX];
	int torn;
};

static int ref_fail(struct ref *r, uint64_t line)
{
	r->ok = 0;
	r->fail_line = line;
	return -1;
}

static int hex64(const json_t *v)
{
	return json_is_string(v) && is_sha256_hex(json_string_value(v), json_string_length(v));
}

/* 1 if U+0000 is in the entry's kind or in one of its own member names
 * (not in data: names there are the model's). */
static int names_hold_nul(json_t *v)
{
	json_t *kind = json_object_get(v, "kind");
	if (json_is_string(kind) && memchr(json_string_value(kind), '\0', json_string_length(kind)))
		return 1;
	for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it))
		if (memchr(json_object_iter_key(it), '\0', json_object_iter_key_len(it)))
			return 1;
	return 0;
}

/* One line: -1 if it breaks the chain. */
static int ref_line(struct ref *r, const char *text, size_t len, int *seen_chained, struct buf *legacy_bytes)
{
	uint64_t no = r->entries + 1;
	json_t *v = ndjson_parse(text, len, NULL);
	if (!v || !json_is_object(v) || names_hold_nul(v)) {
		json_decref(v);
		return ref_fail(r, no);
	}
	json_t *h = json_object_get(v, "hash"), *p = json_object_get(v, "prevHash");
	int rc = 0;
	if (!h && !p) {
		if (*seen_chained)
			rc = ref_fail(r, no);
		else {
			buf_add(legacy_bytes, text, len);
			buf_addc(legacy_bytes, '\n');
			r->legacy++;
		}
	} else if (!h || !p || !hex64(h) || !hex64(p)) {
		rc = ref_fail(r, no);
	} else {
		char want_prev[65], got[65], hash[65];
		if (*seen_chained)
			memcpy(want_prev, r->head, 65);
		else if (r->legacy)
			sha256_hex(legacy_bytes->p, legacy_bytes->len, want_prev);
		else
			strcpy(want_prev, CHAIN_ZERO_HASH);
		memcpy(hash, json_string_value(h), 65);
		json_object_del(v, "hash");
		struct buf c = {0};
		canon_dump(v, &c, NULL);
		sha256_hex(c.p, c.len, got);
		buf_free(&c);
		if (strcmp(got, hash) != 0 || strcmp(json_string_value(p), want_prev) != 0)
			rc = ref_fail(r, no);
		else {
			*seen_chained = 1;
			memcpy(r->head, hash, 65);
		}
	}
	if (rc == 0) {
		json_t *seq = json_object_get(v, "seq"), *kind = json_object_get(v, "kind"),
		       *id = json_object_get(v, "id");
		if (json_is_number(seq) && json_number_value(seq) > r->max_seq)
			r->max_seq = json_number_value(seq);
		if (json_is_string(kind) && json_string_length(kind) == 12 &&
		    memcmp(json_string_value(kind), "clock-anchor", 12) == 0 &&
		    json_is_string(id) && json_string_length(id) > 0)
			snprintf(r->anchor, sizeof r->anchor, "%s", json_string_value(id));
		r->entries = no;
	}
	json_decref(v);
	return rc;
}

static void ref_verify(const char *s, size_t n, size_t max_line, struct ref *r)
{
	memset(r, 0, sizeof *r);
	r->ok = 1;
	strcpy(r->anchor, "unanchored");
	strcpy(r->head, CHAIN_ZERO_HASH);
	struct buf legacy = {0};
	int seen_chained = 0;
	for (size_t pos = 0; pos < n;) {
		const char *nl = memchr(s + pos, '\n', n - pos);
		size_t len = nl ? (size_t)(nl - (s + pos)) : n - pos;
		if (len > max_line) {
			ref_fail(r, r->entries + 1);
			break;
		}
		if (!nl) {
			r->torn = 1;
			ref_fail(r, r->entries + 1);
			break;
		}
		if (ref_line(r, s + pos, len, &seen_chained, &legacy) < 0)
			break;
		pos += len + 1;
	}
	if (r->ok && !seen_chained && r->legacy)
		sha256_hex(legacy.p, legacy.len, r->head);
	buf_free(&legacy);
}

/* ---- running the real one --------------------------------------------- */

static int trace_fd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	trace_fd = memfd_create("fuzz-trace", MFD_CLOEXEC);
	if (trace_fd < 0)
		abort();
	return 0;
}

/* --trusted-head for the next verify() only. */
static uint64_t trusted_count;
static const char *trusted_hash;
/* Sizes the tree is asked for: inside blocks, at their edges, past the end. */
static struct chain_tree_point points[] = {{.size = 0}, {.size = 1}, {.size = 2}, {.size = 3}, {.size = 5},
                                           {.size = 63}, {.size = 64}, {.size = 65}, {.size = 129}};
#define NPOINTS (sizeof points / sizeof points[0])

/* RFC 6962 MTH of n leaves by its definition. */
static void ref_mth(unsigned char (*leaves)[32], size_t n, unsigned char out[32])
{
	if (n == 0) {
		struct sha256 h;
		sha256_init(&h);
		sha256_final(&h, out);
	} else if (n == 1) {
		memcpy(out, leaves[0], 32);
	} else {
		size_t k = 1;
		while (k * 2 < n)
			k *= 2;
		unsigned char l[32], r[32];
		ref_mth(leaves, k, l);
		ref_mth(leaves + k, n - k, r);
		merkle_node_hash(l, r, out);
	}
}

/* The verified trace's tree against the reference, at its end and at every point. */
static void compare_tree(const char *s, size_t n, const struct chain_summary *sum)
{
	size_t count = 0;
	unsigned char (*leaves)[32] = malloc((n + 1) * 32);
	if (!leaves)
		abort();
	for (size_t pos = 0; pos < n;) {
		const char *nl = memchr(s + pos, '\n', n - pos);
		merkle_leaf_hash(s + pos, (size_t)(nl - (s + pos)), leaves[count++]);
		pos = (size_t)(nl - s) + 1;
	}
	unsigned char got[32], want[32];
	FUZZ_CHECK(sum->tree.size == count, "tree of %llu leaves for %zu lines", (unsigned long long)sum->tree.size, count);
	merkle_frontier_root(&sum->tree, got);
	ref_mth(leaves, count, want);
	FUZZ_CHECK(memcmp(got, want, 32) == 0, "the tree's root of %zu lines is not the reference's", count);
	for (size_t i = 0; i < NPOINTS; i++) {
		FUZZ_CHECK(points[i].found == (points[i].size <= count), "point %llu found %d of %zu lines",
		           (unsigned long long)points[i].size, points[i].found, count);
		if (points[i].found) {
			ref_mth(leaves, (size_t)points[i].size, want);
			FUZZ_CHECK(memcmp(points[i].root, want, 32) == 0, "the root at %llu lines is not the reference's",
			           (unsigned long long)points[i].size);
		}
	}
	free(leaves);
}

static int verify(const char *s, size_t n, int threads, size_t max_line, struct chain_summary *sum,
                  struct sfma_err *e)
{
	if (ftruncate(trace_fd, 0) < 0 || lseek(trace_fd, 0, SEEK_SET) < 0 ||
	    (n && write_all(trace_fd, s, n) < 0) || lseek(trace_fd, 0, SEEK_SET) < 0)
		abort();
	struct chain_opts o = {.threads = threads, .max_line = max_line, .trusted_count = trusted_count,
	                       .trusted_hash = trusted_hash, .tree = 1, .points = points, .npoints = NPOINTS};
	trusted_count = 0;
	trusted_hash = NULL;
	memset(e, 0, sizeof *e);
	return chain_verify_fd(trace_fd, &o, sum, e);
}

/* Verify s both ways and compare; returns what chain_verify_fd returned. */
static int compare(const char *s, size_t n, int threads, size_t max_line, struct chain_summary *out)
{
	struct chain_summary sum;
	struct sfma_err e;
	struct ref r;
	int rc = verify(s, n, threads, max_line, &sum, &e);
	if (out)
		*out = sum;
	ref_verify(s, n, max_line, &r);
	FUZZ_CHECK((rc == 0) == r.ok, "chain_verify_fd says %s, the reference %s (line %llu): %s",
	           rc == 0 ? "valid" : "invalid", r.ok ? "valid" : "invalid", (unsigned long long)r.fail_line,
	           e.text);
	if (rc != 0) {
		unsigned long long line = 0;
		FUZZ_CHECK(sscanf(e.text, "line %llu:", &line) == 1 && line == r.fail_line,
		           "failure reported as \"%s\", the reference breaks at line %llu", e.text,
		           (unsigned long long)r.fail_line);
		FUZZ_CHECK(sum.torn == r.torn, "torn %d, the reference %d", sum.torn, r.torn);
		return rc;
	}
	FUZZ_CHECK(sum.entries == r.entries && sum.legacy == r.legacy, "entries %llu/%llu legacy %llu/%llu",
	           (unsigned long long)sum.entries, (unsigned long long)r.entries, (unsigned long long)sum.legacy,
	           (unsigned long long)r.legacy);
	FUZZ_CHECK(strcmp(sum.head, r.head) == 0, "head %s, the reference %s", sum.head, r.head);
	FUZZ_CHECK(sum.size == n && !sum.torn, "size %llu of %zu", (unsigned long long)sum.size, n);
	FUZZ_CHECK(sum.max_seq == r.max_seq, "max seq %.17g, the reference %.17g", sum.max_seq, r.max_seq);
	FUZZ_CHECK(strcmp(sum.anchor, r.anchor) == 0, "anchor \"%s\", the reference \"%s\"", sum.anchor,
	           r.anchor);
	compare_tree(s, n, &sum);
	return rc;
}

/* ---- building a valid chain ------------------------------------------- */

struct line_span {
	size_t off, len;
	int legacy;
	char hash[65];   /* of a chained entry */
};

/* Append entry (hash and prevHash set here) as one line. */
static void add_entry(struct buf *out, json_t *entry, char head[65], int plain)
{
	json_object_del(entry, "hash");
	json_object_set_new(entry, "prevHash", json_string(head));
	struct buf c = {0};
	canon_dump(entry, &c, NULL);
	sha256_hex(c.p, c.len, head);
	buf_free(&c);
	json_object_set_new(entry, "hash", json_string(head));
	struct buf line = {0};
	canon_dump(entry, &line, NULL);
	if (plain) {
		/* Jansson's own spelling (insertion order, spaces, \u escapes) when
		 * it says the same thing: the verifier must take the tree path. */
		char *alt = json_dumps(entry, JSON_ENSURE_ASCII);
		json_t *back = alt ? ndjson_parse(alt, strlen(alt), NULL) : NULL;
		if (back && fuzz_json_same(back, entry) && !strchr(alt, '\n')) {
			buf_reset(&line);
			buf_adds(&line, alt);
		}
		json_decref(back);
		free(alt);
	}
	buf_add(out, line.p, line.len);
	buf_addc(out, '\n');
	buf_free(&line);
}

static size_t build_chain(const char *s, size_t n, int with_legacy, int plain, struct buf *out,
                          struct line_span *spans, size_t max_spans, char head[65])
{
	size_t count = 0;
	struct buf legacy = {0};
	strcpy(head, CHAIN_ZERO_HASH);
	for (size_t pos = 0; pos <= n && count < max_spans;) {
		const char *nl = memchr(s + pos, '\n', n - pos);
		size_t len = nl ? (size_t)(nl - (s + pos)) : n - pos;
		json_t *v = ndjson_parse(s + pos, len, NULL);
		size_t off = out->len;
		/* An object that no valid entry can be (U+0000 in its kind or a
		 * name of its own) is wrapped like any other value, and so it is
		 * never the legacy line, which is written as it stands. */
		int nul_names = json_is_object(v) && names_hold_nul(v);
		if (nul_names) {
			json_t *d = v;
			v = json_pack("{s:f,s:s,s:o}", "seq", (double)count, "kind", "event", "data", d);
		}
		if (with_legacy && count == 0 && !nul_names && json_is_object(v) && !json_object_get(v, "hash") &&
		    !json_object_get(v, "prevHash")) {
			/* The first line as it is, unchained: prevHash of the next is its digest. */
			buf_add(out, s + pos, len);
			buf_addc(out, '\n');
			buf_add(&legacy, s + pos, len);
			buf_addc(&legacy, '\n');
			sha256_hex(legacy.p, legacy.len, head);
			spans[count++] = (struct line_span){off, len, 1, ""};
		} else {
			if (!json_is_object(v)) {
				json_t *wrapped = json_pack("{s:f,s:s}", "seq", (double)count, "kind", "event");
				json_t *d = v ? json_incref(v) : json_stringn(s + pos, len);
				json_object_set_new(wrapped, "data", d ? d : json_integer((json_int_t)len));
				json_decref(v);
				v = wrapped;
			}
			add_entry(out, v, head, plain);
			spans[count] = (struct line_span){off, out->len - off - 1, 0, ""};
			memcpy(spans[count++].hash, head, 65);
		}
		json_decref(v);
		if (!nl)
			break;
		pos += len + 1;
	}
	buf_free(&legacy);
	return count;
}

static void check_mutation(const uint8_t *data, size_t size, int threads)
{
	const char *s = (const char *)data + 4;
	size_t n = size - 4;
	int with_legacy = data[3] & 1, plain = data[3] & 2;
	struct buf chain = {0};
	struct line_span spans[64];
	char head[65];
	size_t count = build_chain(s, n, with_legacy, plain, &chain, spans, 64, head);
	if (count == 0 || chain.len == 0) {
		buf_free(&chain);
		return;
	}
	size_t max_line = chain.len; /* every line fits */
	struct chain_summary sum;
	FUZZ_CHECK(compare(chain.p, chain.len, threads, max_line, &sum) == 0, "a valid chain failed");
	FUZZ_CHECK(sum.entries == count && strcmp(sum.head, head) == 0, "a valid chain: %llu entries head %s",
	           (unsigned long long)sum.entries, sum.head);

	/* A trusted head (sfma-verify --trusted-head HEX:COUNT): entry k with
	 * its own hash passes, with another hash or past the end it fails. */
	size_t k = 1 + data[1] % count;
	struct sfma_err e;
	char wrong[65];
	switch (data[2] >> 6) {
	case 1:
		trusted_count = k;
		trusted_hash = spans[k - 1].legacy ? CHAIN_ZERO_HASH : spans[k - 1].hash;
		FUZZ_CHECK((verify(chain.p, chain.len, threads, max_line, &sum, &e) == 0) == !spans[k - 1].legacy,
		           "trusted head at entry %zu: %s", k, e.text);
		break;
	case 2:
		memcpy(wrong, spans[k - 1].legacy ? CHAIN_ZERO_HASH : spans[k - 1].hash, 65);
		wrong[data[1] % 64] = wrong[data[1] % 64] == 'a' ? 'b' : 'a';
		trusted_count = k;
		trusted_hash = wrong;
		FUZZ_CHECK(verify(chain.p, chain.len, threads, max_line, &sum, &e) != 0,
		           "a wrong trusted head at entry %zu verified", k);
		break;
	case 3:
		trusted_count = count + 1 + data[1];
		trusted_hash = head;
		FUZZ_CHECK(verify(chain.p, chain.len, threads, max_line, &sum, &e) != 0 && strstr(e.text, "truncated"),
		           "a trusted head past the end: %s", e.text);
		break;
	}

	size_t at = ((size_t)data[1] << 8 | data[2]) % chain.len;
	unsigned char flip = (unsigned char)(data[3] & 0xfc) ? (unsigned char)(data[3] & 0xfc) : 0x20;
	char was = chain.p[at];
	chain.p[at] = (char)(chain.p[at] ^ flip);
	if (compare(chain.p, chain.len, threads, max_line, NULL) == 0) {
		FUZZ_CHECK(was != '\n', "a chain verified with its newline at %zu changed", at);
		k = 0;
		while (k + 1 < count && spans[k + 1].off <= at)
			k++;
		FUZZ_CHECK(!spans[k].legacy, "a chain verified with legacy line %zu changed", k + 1);
		json_t *now = ndjson_parse(chain.p + spans[k].off, spans[k].len, NULL);
		chain.p[at] = was;
		json_t *before = ndjson_parse(chain.p + spans[k].off, spans[k].len, NULL);
		FUZZ_CHECK(now && before && fuzz_json_same(now, before),
		           "a chain verified with line %zu changed at byte %zu", k + 1, at - spans[k].off);
		json_decref(now);
		json_decref(before);
	}
	buf_free(&chain);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int threads = data[0] & 2 ? 2 : 1;
	real_threads = threads == 2;
	unsigned v = data[0] >> 2;
	if (data[0] & 1) {
		if (size >= 4)
			check_mutation(data, size, threads);
		return 0;
	}
	size_t max_line = v == 63 ? 20000 : 16 + (size_t)v * 64;
	compare((const char *)data + 1, size - 1, threads, max_line, NULL);
	return 0;
}
