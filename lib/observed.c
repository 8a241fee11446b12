/* observed.c - the observer's records and the one-to-one check
 * (observed.h; the rules are sfma-formats(5), The observed chain). */
#include "observed.h"
#include "canon.h"
#include "ndjson.h"
#include "sign.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lines the check holds at most, 48 bytes each: a bound on memory
 * whatever the chain's length (a run of 10 000 turns crosses a few tens
 * of thousands). */
#define OBS_MAX_LINES (1u << 22)

int obs_stage_name_ok(const char *s, size_t n)
{
	if (!s || n == 0 || n >= OBS_STAGE_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
			return 0;
	return 1;
}

/* ---- a line's record ------------------------------------------------------ */

void obs_stream_init(struct obs_stream *s)
{
	sha256_init(&s->h);
	s->bytes = 0;
	s->lines = 0;
}

static void stream_close_line(struct obs_stream *s, struct obs_line *out)
{
	unsigned char md[32];
	sha256_final(&s->h, md);
	hex_encode(md, sizeof md, out->sha256);
	out->n = ++s->lines;
	out->bytes = s->bytes;
	sha256_init(&s->h);
	s->bytes = 0;
}

size_t obs_stream_feed(struct obs_stream *s, const char *p, size_t n, struct obs_line *done, int *complete)
{
	const char *nl = memchr(p, '\n', n);
	size_t part = nl ? (size_t)(nl - p) : n;
	sha256_update(&s->h, p, part);
	s->bytes += part;
	*complete = nl != NULL;
	if (!nl)
		return n;
	stream_close_line(s, done);
	return part + 1;
}

void obs_stream_tail(struct obs_stream *s, struct obs_line *out)
{
	stream_close_line(s, out);
}

void obs_line_of(const char *line, size_t len, uint64_t n, struct obs_line *out)
{
	out->n = n;
	out->bytes = len;
	sha256_hex(line, len, out->sha256);
}

json_t *obs_wire_record(const char *stage, const char *dir, const struct obs_line *l)
{
	return json_pack("{s:I, s:s, s:I, s:s, s:s}", "bytes", (json_int_t)l->bytes, "dir", dir, "n",
	                 (json_int_t)l->n, "sha256", l->sha256, "stage", stage);
}

/* The parts of one record (a wire member's, or a line entry's own
 * members), checked. 0, or -1 with e. */
struct record {
	const char *stage;
	int dir;                 /* 0 out, 1 in */
	long long n, bytes;
	const char *sha256;
};

static int record_fields(const json_t *r, struct record *out, struct sfma_err *e)
{
	json_t *st = json_object_get(r, "stage"), *d = json_object_get(r, "dir"), *h = json_object_get(r, "sha256");
	if (!json_is_string(st) || !obs_stage_name_ok(json_string_value(st), json_string_length(st)))
		return err_set(e, "stage must be a stage name (letters a-z, digits, -)");
	if (!ndjson_string_is(d, "out") && !ndjson_string_is(d, "in"))
		return err_set(e, "dir must be \"out\" or \"in\"");
	if (!ndjson_integer(json_object_get(r, "n"), &out->n) || out->n < 1)
		return err_set(e, "n must be a line number from 1");
	if (!json_is_string(h) || !is_sha256_hex(json_string_value(h), json_string_length(h)))
		return err_set(e, "sha256 must be 64 lowercase hex digits");
	if (!ndjson_integer(json_object_get(r, "bytes"), &out->bytes) || out->bytes < 0)
		return err_set(e, "bytes must be a count");
	out->stage = json_string_value(st);
	out->dir = ndjson_string_is(d, "in");
	out->sha256 = json_string_value(h);
	return 0;
}

int obs_wire_valid(const json_t *wire, struct sfma_err *e)
{
	size_t i;
	json_t *r;
	if (!json_is_array(wire) || json_array_size(wire) == 0 || json_array_size(wire) > OBS_WIRE_MAX)
		return err_set(e, "wire must be an array of 1 to %d line records", OBS_WIRE_MAX);
	json_array_foreach(wire, i, r) {
		struct record rec;
		struct sfma_err why;
		if (!json_is_object(r) || json_object_size(r) != 5)
			return err_set(e, "wire[%zu]: a record is {bytes, dir, n, sha256, stage} and nothing else", i);
		if (record_fields(r, &rec, &why) < 0)
			return err_set(e, "wire[%zu]: %s", i, why.text);
	}
	return 0;
}

/* ---- the observer's chain ------------------------------------------------------ */

json_t *obs_open_entry(const char *const *stages, int nstages, uint64_t trace_bytes, uint64_t torn_bytes)
{
	json_t *names = json_array();
	for (int k = 0; k < nstages; k++)
		json_array_append_new(names, json_string(stages[k]));
	json_t *v = json_pack("{s:s, s:o, s:I}", "kind", "open", "stages", names, "trace", (json_int_t)trace_bytes);
	if (torn_bytes)
		json_object_set_new(v, "tornBytes", json_integer((json_int_t)torn_bytes));
	return v;
}

json_t *obs_line_entry(const char *stage, const char *dir, const struct obs_line *l, int torn)
{
	json_t *v = obs_wire_record(stage, dir, l);
	json_object_set_new(v, "kind", json_string("line"));
	if (torn)
		json_object_set_new(v, "torn", json_true());
	return v;
}

json_t *obs_close_entry(const char *const *stages, int nstages, const uint64_t (*lines)[2])
{
	json_t *counts = json_object();
	for (int k = 0; k < nstages; k++)
		json_object_set_new(counts, stages[k], json_pack("{s:I, s:I}", "out", (json_int_t)lines[k][0], "in",
		                                                 (json_int_t)lines[k][1]));
	return json_pack("{s:s, s:o}", "kind", "close", "lines", counts);
}

void obs_signed_text(uint64_t entries, const char *head, char out[OBS_SIGNED_MAX])
{
	snprintf(out, OBS_SIGNED_MAX, "{\"observedEntries\":%llu,\"observedHead\":\"%.64s\"}",
	         (unsigned long long)entries, head);
}

int obs_signature_check(const json_t *sig, uint64_t entries, const char *hex, const char *trusted, struct sfma_err *e)
{
	json_t *alg = json_object_get(sig, "algorithm"), *pub = json_object_get(sig, "publicKey");
	json_t *value = json_object_get(sig, "value");
	if (!json_is_object(sig) || json_object_size(sig) != 3 || !ndjson_string_is(alg, "ed25519") ||
	    !json_is_string(pub) || !json_is_string(value))
		return err_set(e, "observer signature: expected {algorithm: \"ed25519\", publicKey, value}");
	struct sfma_err why;
	EVP_PKEY *key = ed25519_public_from_exact_pem(json_string_value(pub), json_string_length(pub), &why);
	if (!key)
		return err_set(e, "observer signature: publicKey: %s", why.text);
	unsigned char raw[64];
	long n = base64_decode(json_string_value(value), json_string_length(value), raw, sizeof raw);
	char text[OBS_SIGNED_MAX];
	obs_signed_text(entries, hex, text);
	int ok = n == 64 && ed25519_verify(key, text, strlen(text), raw, 64);
	int rc = ok ? 0 : err_set(e, "observer signature does not verify");
	if (ok && trusted) {
		EVP_PKEY *want = ed25519_public_from_pem(trusted, strlen(trusted), &why);
		if (!want)
			rc = err_set(e, "SFMA_OBSERVER_PUBLIC_KEY: %s", why.text);
		else if (!ed25519_same_public(key, want))
			rc = err_set(e, "observer signature is not by the trusted key (SFMA_OBSERVER_PUBLIC_KEY)");
		EVP_PKEY_free(want);
	}
	EVP_PKEY_free(key);
	return rc;
}

int obs_head_valid(const json_t *head, uint64_t *entries, char hex[SHA256_HEX_LEN + 1], struct sfma_err *e)
{
	long long n;
	json_t *h = json_object_get(head, "observedHead"), *sig = json_object_get(head, "signature");
	if (!json_is_object(head) || json_object_size(head) != 2u + (sig != NULL))
		return err_set(e, "expected {observedEntries, observedHead[, signature]}");
	if (!ndjson_integer(json_object_get(head, "observedEntries"), &n) || n < 0)
		return err_set(e, "observedEntries must be a count");
	if (!json_is_string(h) || !is_sha256_hex(json_string_value(h), json_string_length(h)))
		return err_set(e, "observedHead must be 64 lowercase hex digits");
	*entries = (uint64_t)n;
	memcpy(hex, json_string_value(h), SHA256_HEX_LEN + 1);
	return sig ? obs_signature_check(sig, *entries, hex, NULL, e) : 0;
}

/* ---- the check ---------------------------------------------------------------- */

struct seen {
	uint64_t bytes;
	unsigned char sha256[32];
	unsigned char torn;
	unsigned char recorded;
};

/* One direction of one stage within a part: what the observer saw, and
 * what the trace recorded of it. */
struct stream {
	struct seen *v;
	size_t n, cap;
	uint64_t in_order;         /* in: lines recorded, which go in order */
};

/* Where a part's run stands as its trace entries go by. */
enum span { SPAN_LEAD, SPAN_RUN, SPAN_AFTER };

struct part {
	uint64_t line_no;          /* its open entry */
	uint64_t trace_bytes;      /* where its run's entries begin */
	int closed;                /* its close entry was seen */
	int nstages;
	char stages[OBS_STAGES_MAX][OBS_STAGE_NAME_MAX];
	struct stream s[OBS_STAGES_MAX][2]; /* [stage][0: out, 1: in] */
	/* the trace side */
	enum span span;
	uint64_t entries;          /* of its run */
	int after_lifecycle;       /* the entry before was a lifecycle */
	int run_closed;            /* its run ended with its closing clock anchor */
	int stopped;               /* its run halted or failed (a result entry) */
	uint64_t unobserved;
};

struct obs_check {
	struct part *parts;
	size_t n, cap;
	int open;                  /* the last part has not closed */
	uint64_t lines;            /* line entries held */
	uint64_t trace_bytes;      /* the sealed trace's size */
	size_t cur;                /* parts whose run began at or before the trace's last entry */
	int failed;                /* a refusal was returned: nothing more is judged */
};

struct obs_check *obs_check_new(uint64_t trace_bytes)
{
	struct obs_check *c = xcalloc(1, sizeof *c);
	c->trace_bytes = trace_bytes;
	return c;
}

void obs_check_free(struct obs_check *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		for (int k = 0; k < OBS_STAGES_MAX; k++)
			for (int d = 0; d < 2; d++)
				free(c->parts[i].s[k][d].v);
	free(c->parts);
	free(c);
}

static const char *dir_name(int dir)
{
	return dir ? "in" : "out";
}

static int stage_index(const struct part *p, const char *name)
{
	for (int k = 0; k < p->nstages; k++)
		if (strcmp(p->stages[k], name) == 0)
			return k;
	return -1;
}

static int fail(struct obs_check *c, struct sfma_err *e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct obs_check *c, struct sfma_err *e, const char *fmt, ...)
{
	char text[SFMA_ERR_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	c->failed = 1;
	return err_set(e, "observed: %s", text);
}

static void hex_decode32(const char *hex, unsigned char out[32])
{
	for (int i = 0; i < 32; i++) {
		int hi = hex[2 * i], lo = hex[2 * i + 1];
		hi = hi <= '9' ? hi - '0' : hi - 'a' + 10;
		lo = lo <= '9' ? lo - '0' : lo - 'a' + 10;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
}

static int open_part(struct obs_check *c, const json_t *entry, uint64_t line_no, struct sfma_err *e)
{
	unsigned long long ln = (unsigned long long)line_no;
	long long at;
	json_t *stages = json_object_get(entry, "stages");
	if (!ndjson_integer(json_object_get(entry, "trace"), &at) || at < 0)
		return fail(c, e, "line %llu: an open entry's trace must be a byte count", ln);
	if (!json_is_array(stages) || json_array_size(stages) > OBS_STAGES_MAX)
		return fail(c, e, "line %llu: an open entry's stages must be an array of at most %d names", ln,
		            OBS_STAGES_MAX);
	if (c->n && (uint64_t)at < c->parts[c->n - 1].trace_bytes)
		return fail(c, e, "line %llu: its run begins at trace byte %lld, before the run of the part before it (%llu)",
		            ln, at, (unsigned long long)c->parts[c->n - 1].trace_bytes);
	if ((uint64_t)at > c->trace_bytes)
		return fail(c, e, "line %llu: its run begins at trace byte %lld, past the %llu bytes the record seals", ln,
		            at, (unsigned long long)c->trace_bytes);
	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 8;
		c->parts = xrealloc(c->parts, c->cap * sizeof *c->parts);
	}
	struct part *p = &c->parts[c->n];
	*p = (struct part){.line_no = line_no, .trace_bytes = (uint64_t)at};
	c->n++; /* freed with the others from here on */
	size_t i;
	json_t *s;
	json_array_foreach(stages, i, s) {
		const char *name = json_string_value(s);
		if (!json_is_string(s) || !obs_stage_name_ok(name, json_string_length(s)) || stage_index(p, name) >= 0)
			return fail(c, e, "line %llu: an open entry's stages must be distinct stage names", ln);
		memcpy(p->stages[p->nstages++], name, json_string_length(s) + 1);
	}
	c->open = 1;
	return 0;
}

static int add_line(struct obs_check *c, const json_t *entry, uint64_t line_no, struct sfma_err *e)
{
	unsigned long long ln = (unsigned long long)line_no;
	struct record r;
	struct sfma_err why;
	json_t *torn = json_object_get(entry, "torn");
	if (!c->open)
		return fail(c, e, "line %llu: a line entry outside a part (no open entry before it)", ln);
	if (record_fields(entry, &r, &why) < 0)
		return fail(c, e, "line %llu: %s", ln, why.text);
	if (torn && !json_is_true(torn))
		return fail(c, e, "line %llu: torn must be true when present", ln);
	struct part *p = &c->parts[c->n - 1];
	int k = stage_index(p, r.stage);
	if (k < 0)
		return fail(c, e, "line %llu: stage %s is not one its part's open entry names", ln, r.stage);
	struct stream *st = &p->s[k][r.dir];
	if ((uint64_t)r.n != st->n + 1)
		return fail(c, e, "line %llu: %s %s message %lld where message %zu was next", ln, r.stage, dir_name(r.dir),
		            r.n, st->n + 1);
	if (st->n && st->v[st->n - 1].torn)
		return fail(c, e, "line %llu: %s %s message %lld after a torn one (a torn line ends its pipe)", ln, r.stage,
		            dir_name(r.dir), r.n);
	if (c->lines == OBS_MAX_LINES)
		return fail(c, e, "line %llu: more than %u lines", ln, OBS_MAX_LINES);
	if (st->n == st->cap) {
		st->cap = st->cap ? 2 * st->cap : 16;
		st->v = xrealloc(st->v, st->cap * sizeof *st->v);
	}
	struct seen *s = &st->v[st->n++];
	s->bytes = (uint64_t)r.bytes;
	hex_decode32(r.sha256, s->sha256);
	s->torn = torn != NULL;
	s->recorded = 0;
	c->lines++;
	return 0;
}

static int close_part(struct obs_check *c, const json_t *entry, uint64_t line_no, struct sfma_err *e)
{
	unsigned long long ln = (unsigned long long)line_no;
	if (!c->open)
		return fail(c, e, "line %llu: a close entry outside a part", ln);
	struct part *p = &c->parts[c->n - 1];
	json_t *lines = json_object_get(entry, "lines");
	if (!json_is_object(lines) || json_object_size(lines) != (size_t)p->nstages)
		return fail(c, e, "line %llu: a close entry's lines must count each stage of its part", ln);
	for (int k = 0; k < p->nstages; k++) {
		json_t *counts = json_object_get(lines, p->stages[k]);
		for (int d = 0; d < 2; d++) {
			long long n;
			if (!json_is_object(counts) || json_object_size(counts) != 2 ||
			    !ndjson_integer(json_object_get(counts, dir_name(d)), &n) || n < 0 || (uint64_t)n != p->s[k][d].n)
				return fail(c, e, "line %llu: the close entry does not count the %zu %s %s lines of its part", ln,
				            p->s[k][d].n, p->stages[k], dir_name(d));
		}
	}
	p->closed = 1;
	c->open = 0;
	return 0;
}

int obs_check_observed(struct obs_check *c, const json_t *entry, uint64_t line_no, struct sfma_err *e)
{
	if (c->failed)
		return -1;
	if (!json_is_object(entry))
		return fail(c, e, "line %llu: not a JSON object", (unsigned long long)line_no);
	json_t *kind = json_object_get(entry, "kind");
	if (ndjson_string_is(kind, "line"))
		return add_line(c, entry, line_no, e);
	if (ndjson_string_is(kind, "open")) {
		/* An open while a part is open: the observer of that part died
		 * before its close, and a new run began. */
		c->open = 0;
		return open_part(c, entry, line_no, e);
	}
	if (ndjson_string_is(kind, "close"))
		return close_part(c, entry, line_no, e);
	return fail(c, e, "line %llu: kind must be open, line or close", (unsigned long long)line_no);
}

/* The entry's seq as a message shows it. */
static const char *seq_text(const json_t *entry, char out[32])
{
	json_t *s = json_object_get(entry, "seq");
	if (!json_is_number(s) || canon_number(json_number_value(s), out) < 0)
		snprintf(out, 32, "?");
	return out;
}

/* A result entry a run writes ahead of its own clock anchor: an
 * interrupted predecessor recorded, or a torn write recovered
 * (sfma-chain(1)). */
static int run_prefix(const json_t *entry)
{
	json_t *data = json_object_get(entry, "data");
	return ndjson_string_is(json_object_get(entry, "kind"), "result") && json_is_object(data) &&
	       (json_is_object(json_object_get(data, "interrupted")) ||
	        ndjson_string_is(json_object_get(data, "error"), "torn-write-recovered"));
}

/* Where the part's run stands: it begins after the entries written ahead
 * of it and ends with a clock anchor that follows a lifecycle entry (its
 * verdict); what comes after is another run, which this part did not
 * see. */
static void follow_run(struct part *p, const json_t *entry)
{
	json_t *kind = entry ? json_object_get(entry, "kind") : NULL;
	if (p->span == SPAN_LEAD && entry && run_prefix(entry))
		return;
	if (p->span == SPAN_LEAD)
		p->span = SPAN_RUN;
	else if (p->span == SPAN_RUN && p->run_closed)
		p->span = SPAN_AFTER;
	if (p->span != SPAN_RUN)
		return;
	p->entries++;
	if (ndjson_string_is(kind, "clock-anchor") && p->after_lifecycle)
		p->run_closed = 1;
	if (ndjson_string_is(kind, "result") && json_is_object(json_object_get(entry, "data")))
		p->stopped = 1;
	p->after_lifecycle = ndjson_string_is(kind, "lifecycle");
}

static int recorded(struct obs_check *c, struct part *p, const json_t *entry, const json_t *wr, struct sfma_err *e)
{
	char seq[32];
	struct record r;
	struct sfma_err why;
	record_fields(wr, &r, &why); /* valid: obs_wire_valid came first */
	int k = stage_index(p, r.stage);
	if (k < 0)
		return 0; /* a stage the observer did not watch: nothing to hold it against */
	struct stream *st = &p->s[k][r.dir];
	const char *dir = dir_name(r.dir);
	if ((uint64_t)r.n > st->n) {
		if (p->closed)
			return fail(c, e, "seq %s: %s %s message %lld was never observed", seq_text(entry, seq), r.stage, dir, r.n);
		p->unobserved++; /* its observer died first: the rest of its lines went unseen */
		return 0;
	}
	struct seen *s = &st->v[r.n - 1];
	unsigned char sha[32];
	hex_decode32(r.sha256, sha);
	if (s->torn || s->bytes != (uint64_t)r.bytes || memcmp(s->sha256, sha, 32) != 0) {
		char saw[SHA256_HEX_LEN + 1];
		hex_encode(s->sha256, 32, saw);
		return fail(c, e, "%s %s message %lld has no trace entry (seq %s records another line in its place: %lld "
		            "bytes, sha256 %.16s...; the observer saw %llu bytes, sha256 %.16s...)", r.stage, dir, r.n,
		            seq_text(entry, seq), r.bytes, r.sha256, (unsigned long long)s->bytes, saw);
	}
	if (s->recorded)
		return fail(c, e, "seq %s: %s %s message %lld is recorded twice", seq_text(entry, seq), r.stage, dir, r.n);
	/* What the planner reads comes in the order it was sent: a line
	 * recorded before the one ahead of it skipped that one. */
	if (r.dir == 1 && (uint64_t)r.n != st->in_order + 1)
		return fail(c, e, "%s in message %llu has no trace entry (seq %s records message %lld after message %llu)",
		            r.stage, (unsigned long long)st->in_order + 1, seq_text(entry, seq), r.n,
		            (unsigned long long)st->in_order);
	s->recorded = 1;
	if (r.dir == 1)
		st->in_order++;
	return 0;
}

int obs_check_trace(struct obs_check *c, const json_t *entry, uint64_t offset, struct sfma_err *e)
{
	if (c->failed)
		return -1;
	while (c->cur < c->n && c->parts[c->cur].trace_bytes <= offset)
		c->cur++;
	if (!c->cur)
		return 0; /* before the first run observed */
	struct part *p = &c->parts[c->cur - 1];
	follow_run(p, entry);
	json_t *wire = entry ? json_object_get(entry, OBSERVED_WIRE) : NULL;
	if (!wire || p->span != SPAN_RUN)
		return 0;
	char seq[32];
	struct sfma_err why;
	if (obs_wire_valid(wire, &why) < 0)
		return fail(c, e, "seq %s: %s", seq_text(entry, seq), why.text);
	size_t i;
	json_t *r;
	json_array_foreach(wire, i, r)
		if (recorded(c, p, entry, r, e) < 0)
			return -1;
	return 0;
}

int obs_check_end(struct obs_check *c, struct obs_counts *out, struct sfma_err *e)
{
	if (c->failed)
		return -1;
	*out = (struct obs_counts){.parts = c->n};
	for (size_t i = 0; i < c->n; i++) {
		struct part *p = &c->parts[i];
		/* A run cut short (its planner died) recorded only part of
		 * what crossed; a run that stopped (a halt, a failure) leaves
		 * the answers still on their way unread. */
		int cut_short = !p->run_closed;
		for (int k = 0; k < p->nstages; k++)
			for (int d = 0; d < 2; d++) {
				struct stream *st = &p->s[k][d];
				for (size_t n = 0; n < st->n; n++) {
					const struct seen *s = &st->v[n];
					if (s->recorded) {
						out->matched++;
						continue;
					}
					/* A torn line is no message: bytes an end cut off. */
					if (s->torn || cut_short || (d == 1 && p->stopped)) {
						out->unread++;
						continue;
					}
					return fail(c, e, "%s %s message %zu has no trace entry", p->stages[k], dir_name(d), n + 1);
				}
			}
		out->unobserved += p->unobserved;
	}
	return 0;
}

int obs_trace_line_relevant(const char *line, size_t len)
{
	static const char *const words[] = {"\"" OBSERVED_WIRE "\"", "lifecycle", "clock-anchor", "result", NULL};
	if (memchr(line, '\\', len))
		return 1;
	for (const char *const *w = words; *w; w++)
		if (memmem(line, len, *w, strlen(*w)))
			return 1;
	return 0;
}
