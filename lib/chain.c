/* chain.c - streaming, parallel verification of a sha256-chain-v1 trace. */
#include "chain.h"
#include "buf.h"
#include "canon.h"
#include "ndjson.h"
#include "sha.h"

#include <errno.h>
#include <stddef.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK (4u << 20) /* bytes read per round: large enough to amortize threads */

/* What one line proves on its own. */
struct line_info {
	const char *text;
	size_t len;
	int chained;        /* carries hash and prevHash */
	int is_anchor;      /* kind == "clock-anchor" */
	int failed;
	double seq;
	char hash[65], prev[65];
	char id[CHAIN_ID_MAX];
	char error[200];
};

static int fail(struct line_info *li, const char *msg)
{
	size_t n = strlen(msg);
	if (n >= sizeof li->error)
		n = sizeof li->error - 1;
	li->failed = 1;
	memcpy(li->error, msg, n);
	li->error[n] = '\0';
	return -1;
}

static void copy_id(struct line_info *li, const char *s, size_t n)
{
	if (n >= sizeof li->id)
		n = sizeof li->id - 1;
	memcpy(li->id, s, n);
	li->id[n] = '\0';
}

/* Hash of a canonical line with its top-level "hash" member cut out: the
 * canonical form of the entry without `hash`, without building a tree. */
static void hash_without_member(const char *line, size_t n, const struct canon_member *m,
                                char out[65])
{
	size_t cut_from = m->member_off, cut_to = m->member_off + m->member_len;
	if (line[cut_from - 1] == ',')
		cut_from--;             /* ",\"hash\":..." */
	else if (line[cut_to] == ',')
		cut_to++;               /* first member: "\"hash\":...," */
	unsigned char md[32];
	unsigned int mdlen;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	EVP_DigestUpdate(ctx, line, cut_from);
	EVP_DigestUpdate(ctx, line + cut_to, n - cut_to);
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	EVP_MD_CTX_free(ctx);
	hex_encode(md, 32, out);
}

/* Fast path: the line is already canonical. Returns 1 if handled. */
static int check_canonical(struct line_info *li)
{
	struct canon_scan sc;
	if (!canon_scan(li->text, li->len, &sc))
		return 0;
	/* An id or kind with escapes would need decoding: leave it to the tree. */
	if (sc.id.present && memchr(li->text + sc.id.value_off, '\\', sc.id.value_len))
		return 0;
	if (sc.seq.present && li->text[sc.seq.value_off] != '"') {
		char tmp[64];
		size_t l = sc.seq.value_len < 63 ? sc.seq.value_len : 63;
		memcpy(tmp, li->text + sc.seq.value_off, l);
		tmp[l] = '\0';
		li->seq = strtod(tmp, NULL);
	}
	li->is_anchor = sc.kind.present && sc.kind.value_len == 14 &&
	                memcmp(li->text + sc.kind.value_off, "\"clock-anchor\"", 14) == 0;
	if (sc.id.present && li->text[sc.id.value_off] == '"')
		copy_id(li, li->text + sc.id.value_off + 1, sc.id.value_len - 2);
	if (!sc.hash.present && !sc.prev_hash.present)
		return 1;
	if (!sc.hash.present || !sc.prev_hash.present)
		return fail(li, sc.hash.present ? "hash without prevHash" : "prevHash without hash"), 1;
	if (sc.hash.value_len != 66 || !is_sha256_hex(li->text + sc.hash.value_off + 1, 64))
		return fail(li, "hash is not 64 lowercase hex digits"), 1;
	if (sc.prev_hash.value_len != 66 || !is_sha256_hex(li->text + sc.prev_hash.value_off + 1, 64))
		return fail(li, "prevHash is not 64 lowercase hex digits"), 1;
	li->chained = 1;
	memcpy(li->hash, li->text + sc.hash.value_off + 1, 64);
	memcpy(li->prev, li->text + sc.prev_hash.value_off + 1, 64);
	li->hash[64] = li->prev[64] = '\0';
	char got[65];
	hash_without_member(li->text, li->len, &sc.hash, got);
	if (memcmp(got, li->hash, 64) != 0)
		fail(li, "hash mismatch (the entry's content was altered)");
	return 1;
}

/* Slow path for lines in any other form: parse, drop hash, canonicalize. */
static void check_tree(struct line_info *li)
{
	struct sfma_err e;
	json_t *v = json_parse_strict(li->text, li->len, &e);
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
	li->is_anchor = json_is_string(kind) && strcmp(json_string_value(kind), "clock-anchor") == 0;
	if (json_is_string(id))
		copy_id(li, json_string_value(id), json_string_length(id));
	if (!h && !p) {
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
		memcpy(li->hash, json_string_value(h), 65);
		memcpy(li->prev, json_string_value(p), 65);
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
	json_decref(v);
}

static void check_line(struct line_info *li)
{
	if (!check_canonical(li))
		check_tree(li);
}

struct work {
	struct line_info *lines;
	size_t from, to;
};

static void *worker(void *arg)
{
	struct work *w = arg;
	for (size_t i = w->from; i < w->to; i++)
		check_line(&w->lines[i]);
	return NULL;
}

struct verifier {
	const struct chain_opts *opts;
	struct chain_summary *sum;
	EVP_MD_CTX *legacy;
	int seen_chained;
	int threads;
};

/* Link the checked lines of one block in order. */
static int link_lines(struct verifier *v, struct line_info *li, size_t n, struct sfma_err *e)
{
	struct chain_summary *s = v->sum;
	for (size_t i = 0; i < n; i++, li++) {
		uint64_t no = s->entries + 1;
		if (li->failed)
			return err_set(e, "line %llu: %s", (unsigned long long)no, li->error);
		if (!li->chained) {
			if (v->seen_chained)
				return err_set(e, "line %llu: unchained line after chained entries", (unsigned long long)no);
			EVP_DigestUpdate(v->legacy, li->text, li->len);
			EVP_DigestUpdate(v->legacy, "\n", 1);
			s->legacy++;
		} else {
			const char *want = s->head;
			char legacy_hex[65];
			if (!v->seen_chained) {
				if (s->legacy > 0) {
					unsigned char md[32];
					unsigned int mdlen;
					EVP_DigestFinal_ex(v->legacy, md, &mdlen);
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
			memcpy(s->head, li->hash, 65);
		}
		if (li->seq > s->max_seq)
			s->max_seq = li->seq;
		if (li->is_anchor && li->id[0])
			snprintf(s->anchor, sizeof s->anchor, "%s", li->id);
		s->entries = no;
		s->size += li->len + 1;
		if (v->opts->trusted_count && no == v->opts->trusted_count) {
			if (!li->chained || strcmp(li->hash, v->opts->trusted_hash) != 0)
				return err_set(e, "line %llu: trusted head not found (the trace was rewritten, not "
				                  "only appended to)", (unsigned long long)no);
		}
	}
	return 0;
}

/* Check lines [0, n) with the configured threads, then link them. */
static int verify_lines(struct verifier *v, struct line_info *li, size_t n, struct sfma_err *e)
{
	int t = v->threads;
	if ((size_t)t > n / 64 + 1)
		t = (int)(n / 64 + 1); /* tiny blocks are not worth a thread */
	pthread_t tid[8];
	struct work w[8];
	int started = 0;
	for (int k = 0; k < t; k++) {
		w[k].lines = li;
		w[k].from = n * (size_t)k / (size_t)t;
		w[k].to = n * (size_t)(k + 1) / (size_t)t;
	}
	for (int k = 1; k < t; k++) {
		if (pthread_create(&tid[k], NULL, worker, &w[k]) != 0)
			break;
		started = k;
	}
	for (int k = started + 1; k < t; k++) /* threads that could not start */
		worker(&w[k]);
	worker(&w[0]);
	for (int k = 1; k <= started; k++)
		pthread_join(tid[k], NULL);
	return link_lines(v, li, n, e);
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

	struct verifier v = {opts, out, EVP_MD_CTX_new(), 0, opts->threads};
	if (v.threads <= 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		v.threads = cpus < 1 ? 1 : cpus > 8 ? 8 : (int)cpus;
	}
	if (v.threads > 8)
		v.threads = 8;
	EVP_DigestInit_ex(v.legacy, EVP_sha256(), NULL);

	size_t max_line = opts->max_line ? opts->max_line : NDJSON_DEFAULT_MAX;
	size_t cap = BLOCK > max_line + 1 ? BLOCK : max_line + 1;
	char *buf = xmalloc(cap + 1);
	size_t have = 0, lines_cap = 0;
	struct line_info *lines = NULL;
	int eof = 0, rc = 0;

	while (!eof || have > 0) {
		if (!eof) {
			ssize_t got = read(fd, buf + have, cap - have);
			if (got < 0) {
				if (errno == EINTR)
					continue;
				rc = err_set(e, "read: %s", strerror(errno));
				break;
			}
			if (got == 0)
				eof = 1;
			have += (size_t)got;
			if (!eof && have < cap)
				continue; /* fill the block before working on it */
		}
		/* Split the complete lines of the block. */
		size_t n = 0, start = 0;
		for (;;) {
			char *nl = memchr(buf + start, '\n', have - start);
			if (!nl)
				break;
			size_t len = (size_t)(nl - (buf + start));
			if (n == lines_cap) {
				lines_cap = lines_cap ? lines_cap * 2 : 4096;
				lines = xrealloc(lines, lines_cap * sizeof *lines);
			}
			memset(&lines[n], 0, offsetof(struct line_info, hash));
			lines[n].hash[0] = lines[n].prev[0] = lines[n].id[0] = '\0';
			lines[n].text = buf + start;
			lines[n].len = len;
			if (len > max_line) {
				rc = err_set(e, "line %llu: longer than %zu bytes",
				             (unsigned long long)(out->entries + n + 1), max_line);
				break;
			}
			n++;
			start += len + 1;
		}
		if (rc < 0)
			break;
		if (n > 0 && verify_lines(&v, lines, n, e) < 0) {
			rc = -1;
			break;
		}
		memmove(buf, buf + start, have - start);
		have -= start;
		if (eof && have > 0) {
			out->torn = 1;
			out->torn_offset = out->size;
			rc = err_set(e, "line %llu: torn final line (%zu bytes without a newline)",
			             (unsigned long long)out->entries + 1, have);
			break;
		}
		if (!eof && have > max_line) {
			rc = err_set(e, "line %llu: longer than %zu bytes",
			             (unsigned long long)out->entries + 1, max_line);
			break;
		}
	}
	if (rc == 0 && !v.seen_chained && out->legacy > 0) {
		unsigned char md[32];
		unsigned int mdlen;
		EVP_DigestFinal_ex(v.legacy, md, &mdlen);
		hex_encode(md, 32, out->head);
	}
	if (rc == 0 && opts->trusted_count && out->entries < opts->trusted_count)
		rc = err_set(e, "trusted head not found: the trace has %llu entries, fewer than %llu "
		                "(it was truncated)",
		             (unsigned long long)out->entries, (unsigned long long)opts->trusted_count);
	EVP_MD_CTX_free(v.legacy);
	free(lines);
	free(buf);
	return rc;
}
