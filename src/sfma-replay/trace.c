/* trace.c - the trace as the replay reads it: a stream of entries with a
 * bounded lookahead (the replay's memory is the run's state, not the
 * trace's length), each derived entry compared with the one recorded,
 * and the one-line verdicts. */
#include "replay.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "canon.h"
#include "errors.h"
#include "evidence.h"
#include "ndjson.h"
#include "observed.h"

/* The longest trace line read (a candidate or a compaction can be long;
 * blobs are evidence, not lines), and the lookahead's bounds. */
#define LINE_MAX_BYTES ((size_t)64 << 20)
#define AHEAD_MAX_ENTRIES 200000
#define AHEAD_MAX_BYTES ((size_t)256 << 20)

void (*replay_cleanup)(void);
static struct buf cmp_want; /* the derived side of a comparison, kept between them */
void (*replay_gate)(void);

/* One line as the reader leaves it: the entry, its length and the
 * canonical bytes of what of it the core derives (derived_part), or why
 * the replay cannot go on (the text of a REPLAY_INCOMPLETE); neither at
 * the end of the trace. */
struct parsed {
	json_t *entry;
	size_t len;
	char *part;
	size_t part_len;
	char *error;
};

/* Lines read and parsed ahead by the reader thread, at most READ_AHEAD
 * of them: the parsing, a third of the replay's time, goes on beside
 * the core, on another processor. The replay takes them in order as it
 * needs them (the lookahead below), so every line is read, and every
 * broken one reported, exactly as when it read them itself. */
#define READ_AHEAD 256
#define GONE_MAX 1024

static struct {
	pthread_mutex_t lock;
	pthread_cond_t filled, space;
	struct parsed ring[READ_AHEAD];
	size_t at, count;          /* ring[at .. at + count) (mod READ_AHEAD) */
	int started, stop, done;   /* done: the end or an error is in the ring */
	pthread_t tid;
	/* What the replay took from the ring at once, taken one by one. */
	struct parsed taken[READ_AHEAD];
	size_t taken_at, taken_n;
	/* Entries the replay is done with, freed by the reader, which made
	 * them: glibc's free of a block another thread's arena holds takes
	 * that arena's lock, which the reader's parsing holds all the time.
	 * The replay's own list (gone), and the one handed over (spent). */
	struct parsed gone[GONE_MAX], spent[GONE_MAX];
	size_t gone_n, spent_n;
} P;

static struct {
	int fd;
	struct line_reader lr;
	int eof;
	json_t **q;                /* the lookahead: q[head..n) */
	size_t *len;               /* each one's line length */
	char **part;               /* each one's derived part, canonical */
	size_t *part_len;
	size_t head, n, cap, bytes;
	json_t *last;              /* the entry last consumed */
	size_t consumed;
	size_t with_evidence;      /* of those, the ones with evidence */
} T = {.fd = -1};

static void derived_part(const json_t *e, struct buf *out);

/* The next line of the trace, read and parsed (on the reader thread, or
 * on the replay's own when the thread could not be started). */
static struct parsed parse_next(void)
{
	struct parsed p = {0};
	char *line;
	size_t len;
	struct sfma_err e;
	int rc = lr_next(&T.lr, &line, &len, &e);
	if (rc == 0)
		return p;
	size_t no = (size_t)T.lr.line_no;
	char text[SFMA_ERR_MAX + 200];
	if (rc < 0) {
		snprintf(text, sizeof text, "trace line %zu: %s", no, e.text);
		p.error = xstrdup(text);
		return p;
	}
	json_t *entry = ndjson_parse(line, len, &e);
	if (!entry || !json_is_object(entry)) {
		json_decref(entry);
		snprintf(text, sizeof text, "trace line %zu: %s", no, entry ? "not an object" : e.text);
		p.error = xstrdup(text);
		return p;
	}
	if (!json_object_get(entry, "hash")) {
		json_decref(entry);
		snprintf(text, sizeof text, "trace line %zu is a legacy line of the earlier runner: it has no evidence", no);
		p.error = xstrdup(text);
		return p;
	}
	struct buf part = {0};
	derived_part(entry, &part);
	p.entry = entry;
	p.len = len;
	p.part = part.p;
	p.part_len = part.len;
	return p;
}

static void parsed_free(struct parsed *p)
{
	json_decref(p->entry);
	free(p->part);
	free(p->error);
	*p = (struct parsed){0};
}

/* Under the lock: free what the replay handed over, with the lock released. */
static void free_spent(void)
{
	static struct parsed batch[GONE_MAX];
	size_t n = P.spent_n;
	memcpy(batch, P.spent, n * sizeof *batch);
	P.spent_n = 0;
	pthread_mutex_unlock(&P.lock);
	for (size_t i = 0; i < n; i++)
		parsed_free(&batch[i]);
	pthread_mutex_lock(&P.lock);
}

static void *reader(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&P.lock);
	while (!P.stop) {
		if (P.spent_n) {
			free_spent();
			continue;
		}
		if (P.count == READ_AHEAD || P.done) {
			pthread_cond_wait(&P.space, &P.lock);
			continue;
		}
		pthread_mutex_unlock(&P.lock);
		struct parsed p = parse_next();
		pthread_mutex_lock(&P.lock);
		P.ring[(P.at + P.count) % READ_AHEAD] = p;
		P.count++;
		P.done = !p.entry;
		pthread_cond_signal(&P.filled);
	}
	pthread_mutex_unlock(&P.lock);
	return NULL;
}

/* The next parsed line, in order. */
static struct parsed take_parsed(void)
{
	if (!P.started)
		return parse_next();
	if (P.taken_at == P.taken_n) {
		pthread_mutex_lock(&P.lock);
		while (P.count == 0)
			pthread_cond_wait(&P.filled, &P.lock);
		/* All the reader has, under one lock. */
		for (P.taken_at = P.taken_n = 0; P.count > 0; P.count--, P.at = (P.at + 1) % READ_AHEAD)
			P.taken[P.taken_n++] = P.ring[P.at];
		if (P.spent_n == 0) {
			memcpy(P.spent, P.gone, P.gone_n * sizeof *P.gone);
			P.spent_n = P.gone_n;
			P.gone_n = 0;
		}
		pthread_cond_signal(&P.space);
		pthread_mutex_unlock(&P.lock);
	}
	struct parsed p = P.taken[P.taken_at];
	P.taken[P.taken_at++] = (struct parsed){0};
	return p;
}

/* An entry the replay is done with (and its derived part): freed by the
 * reader where it runs, else here. */
static void entry_done(json_t *e, char *part)
{
	struct parsed p = {.entry = e, .part = part};
	if (P.started && P.gone_n < GONE_MAX)
		P.gone[P.gone_n++] = p;
	else
		parsed_free(&p);
}

static void reader_stop(void)
{
	if (P.started) {
		pthread_mutex_lock(&P.lock);
		P.stop = 1;
		pthread_cond_signal(&P.space);
		pthread_mutex_unlock(&P.lock);
		pthread_join(P.tid, NULL);
		for (; P.count > 0; P.count--, P.at = (P.at + 1) % READ_AHEAD)
			parsed_free(&P.ring[P.at]);
		for (; P.taken_at < P.taken_n; P.taken_at++)
			parsed_free(&P.taken[P.taken_at]);
		for (size_t i = 0; i < P.gone_n; i++)
			parsed_free(&P.gone[i]);
		for (size_t i = 0; i < P.spent_n; i++)
			parsed_free(&P.spent[i]);
		pthread_mutex_destroy(&P.lock);
		pthread_cond_destroy(&P.filled);
		pthread_cond_destroy(&P.space);
	}
	memset(&P, 0, sizeof P);
}

void trace_open(int sfma_fd)
{
	T.fd = openat(sfma_fd, "trace.jsonl", O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	struct stat st;
	if (T.fd < 0)
		die(".sfma/trace.jsonl: %s", strerror(errno));
	if (fstat(T.fd, &st) < 0 || !S_ISREG(st.st_mode))
		die(".sfma/trace.jsonl: not a regular file");
	/* A regular file: reads never block, the flag is no longer needed. */
	fcntl(T.fd, F_SETFL, fcntl(T.fd, F_GETFL) & ~O_NONBLOCK);
	lr_init(&T.lr, T.fd, LINE_MAX_BYTES);
	memset(&P, 0, sizeof P);
	pthread_mutex_init(&P.lock, NULL);
	pthread_cond_init(&P.filled, NULL);
	pthread_cond_init(&P.space, NULL);
	P.started = pthread_create(&P.tid, NULL, reader, NULL) == 0;
	if (!P.started) {
		pthread_mutex_destroy(&P.lock);
		pthread_cond_destroy(&P.filled);
		pthread_cond_destroy(&P.space);
	}
}

void trace_close(void)
{
	reader_stop();
	for (size_t i = T.head; i < T.n; i++) {
		json_decref(T.q[i]);
		free(T.part[i]);
	}
	free(T.q);
	free(T.len);
	free(T.part);
	free(T.part_len);
	json_decref(T.last);
	buf_free(&cmp_want);
	lr_free(&T.lr);
	if (T.fd >= 0)
		close(T.fd);
	T.q = NULL;
	T.len = NULL;
	T.part = NULL;
	T.part_len = NULL;
	T.last = NULL;
	T.head = T.n = T.cap = T.bytes = T.consumed = T.with_evidence = 0;
	T.eof = 0;
	T.fd = -1;
}

/* One more entry into the lookahead; 0 at the end of the trace. */
static int read_one(void)
{
	if (T.eof)
		return 0;
	struct parsed p = take_parsed();
	if (p.error) {
		char text[SFMA_ERR_MAX + 200];
		snprintf(text, sizeof text, "%s", p.error);
		parsed_free(&p);
		incomplete("%s", text);
	}
	if (!p.entry) {
		T.eof = 1;
		return 0;
	}
	if (T.n == T.cap) {
		if (T.head > 0) {
			memmove(T.q, T.q + T.head, (T.n - T.head) * sizeof *T.q);
			memmove(T.len, T.len + T.head, (T.n - T.head) * sizeof *T.len);
			memmove(T.part, T.part + T.head, (T.n - T.head) * sizeof *T.part);
			memmove(T.part_len, T.part_len + T.head, (T.n - T.head) * sizeof *T.part_len);
			T.n -= T.head;
			T.head = 0;
		}
		if (T.n == T.cap) {
			T.cap = T.cap ? 2 * T.cap : 256;
			T.q = xrealloc(T.q, T.cap * sizeof *T.q);
			T.len = xrealloc(T.len, T.cap * sizeof *T.len);
			T.part = xrealloc(T.part, T.cap * sizeof *T.part);
			T.part_len = xrealloc(T.part_len, T.cap * sizeof *T.part_len);
		}
	}
	T.q[T.n] = p.entry;
	T.len[T.n] = p.len;
	T.part[T.n] = p.part;
	T.part_len[T.n++] = p.part_len;
	T.bytes += p.len;
	return 1;
}

json_t *peek_at(size_t i)
{
	while (T.head + i >= T.n) {
		if (T.n - T.head >= AHEAD_MAX_ENTRIES || T.bytes >= AHEAD_MAX_BYTES)
			incomplete("seq %lld: the replay would have to look more than %d entries (%zu MiB) ahead",
			           seq_of(T.q[T.head]), AHEAD_MAX_ENTRIES, AHEAD_MAX_BYTES >> 20);
		if (!read_one())
			return NULL;
	}
	return T.q[T.head + i];
}

json_t *peek(void)
{
	return peek_at(0);
}

json_t *wire_of_entry(void *arg, double seq)
{
	(void)arg;
	json_t *next = peek();
	if (!next)
		return NULL;
	/* The entry the core makes now comes after those it made and the
	 * replay has not compared yet: seqs go up by one within a run. */
	double ahead = seq - (double)seq_of(next);
	json_t *e = ahead >= 0 && ahead < AHEAD_MAX_ENTRIES ? peek_at((size_t)ahead) : NULL;
	if (!e || (double)seq_of(e) != seq)
		return NULL;
	json_t *w = json_object_get(e, OBSERVED_WIRE);
	return w ? json_deep_copy(w) : NULL;
}

json_t *next(void)
{
	json_t *e = peek();
	if (!e)
		return NULL;
	entry_done(T.last, NULL);
	T.last = e;
	T.bytes -= T.len[T.head];
	entry_done(NULL, T.part[T.head]);
	T.part[T.head] = NULL;
	T.head++;
	T.consumed++;
	T.with_evidence += json_object_get(e, EVIDENCE_MEMBER) != NULL;
	return e;
}

json_t *last_consumed(void)
{
	return T.last;
}

size_t trace_count(void)
{
	return T.consumed;
}

size_t trace_evidence_count(void)
{
	return T.with_evidence;
}

/* ---- entries -------------------------------------------------------------- */

long long seq_of(const json_t *e)
{
	return (long long)json_number_value(json_object_get(e, "seq"));
}

const char *kind_of(const json_t *e)
{
	const char *k = e ? json_string_value(json_object_get(e, "kind")) : NULL;
	return k ? k : "?";
}

json_t *data_of(const json_t *e)
{
	return json_object_get(e, "data");
}

int loop_of(const json_t *e)
{
	json_t *l = json_object_get(e, "loop");
	double v = json_number_value(l);
	return json_is_number(l) && v >= 0 && v <= 64 && v == (int)v ? (int)v : -1;
}

int is_result(const json_t *e, const char *member)
{
	return e && strcmp(kind_of(e), "result") == 0 && json_object_get(data_of(e), member) != NULL;
}

/* ---- verdicts -------------------------------------------------------------- */

/* A description quoted into the one-line verdict: clipped, control bytes '?'. */
static void shown(char *out, size_t cap, const char *text)
{
	snprintf(out, cap, "%s", text);
	for (char *p = out; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
}

/* No verdict before the record is known to verify (the gate may give
 * its own verdict instead); once. */
static void gate_verdict(void)
{
	void (*gate)(void) = replay_gate;
	replay_gate = NULL;
	if (gate)
		gate();
}

_Noreturn void diverged(const json_t *e, const char *has, const char *derives)
{
	char a[400], b[400];
	shown(a, sizeof a, has);
	shown(b, sizeof b, derives);
	gate_verdict();
	if (e)
		printf("REPLAY_DIVERGED: seq %lld (%s): trace has %s, replay derives %s\n", seq_of(e), kind_of(e), a, b);
	else
		printf("REPLAY_DIVERGED: seq end (none): trace has %s, replay derives %s\n", a, b);
	fflush(stdout);
	if (replay_cleanup)
		replay_cleanup();
	exit(1);
}

const char *sx(const char *fmt, ...)
{
	static char slots[4][400];
	static int at;
	char *out = slots[at++ % 4];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, sizeof slots[0], fmt, ap);
	va_end(ap);
	return out;
}

_Noreturn void incomplete(const char *fmt, ...)
{
	char text[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	gate_verdict();
	printf("REPLAY_INCOMPLETE: %s\n", text);
	fflush(stdout);
	if (replay_cleanup)
		replay_cleanup();
	exit(1);
}

/* ---- the comparison ---------------------------------------------------------- */

int same_json(const json_t *a, const json_t *b)
{
	if (!a || !b)
		return a == b;
	struct buf x = {0}, y = {0};
	int same = canon_dump(a, &x, NULL) == 0 && canon_dump(b, &y, NULL) == 0 && x.len == y.len &&
	           memcmp(x.p, y.p, x.len) == 0;
	buf_free(&x);
	buf_free(&y);
	return same;
}

static void canon_text(const json_t *v, char *out, size_t cap)
{
	struct buf b = {0};
	if (!v || canon_dump(v, &b, NULL) < 0)
		snprintf(out, cap, "null");
	else
		snprintf(out, cap, "%.*s", b.len > cap - 1 ? (int)(cap - 1) : (int)b.len, b.p);
	buf_free(&b);
}

/* An entry's data as a person reads it in a verdict line. */
static void describe(const char *kind, const json_t *d, char *out, size_t cap)
{
	const char *tier = ndjson_str(d, "tier"), *reason = ndjson_str(d, "reason");
	char c[300];
	if (strcmp(kind, "verdict") == 0 && tier && strcmp(tier, "soft") == 0) {
		snprintf(out, cap, "soft pass=%s \"%.200s\"", json_is_true(json_object_get(d, "pass")) ? "true" : "false",
		         reason ? reason : "");
	} else if (strcmp(kind, "verdict") == 0 && tier && strcmp(tier, "criteria") != 0) {
		if (json_is_true(json_object_get(d, "pass")))
			snprintf(out, cap, "pass=true reason \"%.250s\"", reason ? reason : "");
		else
			snprintf(out, cap, "refused: %.250s", reason ? reason : "");
	} else if (strcmp(kind, "task") == 0) {
		canon_text(json_object_get(d, "call"), c, sizeof c);
		snprintf(out, cap, "call %s", c);
	} else {
		canon_text(d, c, sizeof c);
		snprintf(out, cap, "%s", c);
	}
}

/* Two soft verdicts: the first judgment that differs, as a reader looks
 * for it (diverges there; returns when the judgments agree). */
static void soft_differs(const json_t *has, const json_t *want)
{
	const char *t = ndjson_str(want, "tier");
	if (!t || strcmp(t, "soft") != 0 || !json_is_array(json_object_get(has, "judgments")))
		return;
	json_t *hj = json_object_get(has, "judgments"), *wj = json_object_get(want, "judgments");
	for (size_t i = 0; i < json_array_size(wj); i++) {
		json_t *x = json_array_get(hj, i), *y = json_array_get(wj, i);
		if (same_json(x, y))
			continue;
		const char *why = ndjson_str(y, "reason");
		diverged(peek(), sx("judgment %zu pass=%s", i + 1, json_is_true(json_object_get(x, "pass")) ? "true" : "false"),
		         sx("pass=%s \"%.200s\"", json_is_true(json_object_get(y, "pass")) ? "true" : "false", why ? why : ""));
	}
}

/* The first evidence member in which a and b differ, described. */
static int evidence_differs(const json_t *has, const json_t *want, char *a, char *b, size_t cap)
{
	const char *key;
	json_t *v;
	for (int pass = 0; pass < 2; pass++) {
		const json_t *one = pass ? want : has, *other = pass ? has : want;
		json_object_foreach((json_t *)one, key, v) {
			json_t *w = json_object_get(other, key);
			if (same_json(v, w))
				continue;
			const char *x = ndjson_str(pass ? w : v, "sha256"), *y = ndjson_str(pass ? v : w, "sha256");
			snprintf(a, cap, "evidence.%s %.12s", key, x ? x : "(none)");
			snprintf(b, cap, "evidence.%s %.12s", key, y ? y : "(none)");
			return 1;
		}
	}
	return 0;
}

/* What of an entry the core derives (all but seq, anchor and the chain),
 * canonical: equal bytes, equal entries. Written member by member, in
 * the canonical order of these keys, as canon_dump writes the object of
 * them (no object is built). */
static void derived_part(const json_t *e, struct buf *out)
{
	static const char *const keys[] = {"class", "data", EVIDENCE_MEMBER, "kind", "loop", "refs",
	                                   OBSERVED_WIRE, NULL}; /* sorted: the canonical order */
	out->len = 0;
	buf_addc(out, '{');
	int first = 1;
	for (size_t i = 0; keys[i]; i++) {
		json_t *v = json_object_get(e, keys[i]);
		if (!v || (strcmp(keys[i], "refs") == 0 && json_is_array(v) && json_array_size(v) == 0))
			continue;
		if (!first)
			buf_addc(out, ',');
		first = 0;
		canon_string(keys[i], strlen(keys[i]), out);
		buf_addc(out, ':');
		if (canon_dump(v, out, NULL) < 0) {
			out->len = 0;
			buf_adds(out, "?");
			return;
		}
	}
	buf_addc(out, '}');
}

void expect_event(const json_t *ev, const char *id)
{
	json_t *e = peek();
	const char *kind = ndjson_str(ev, "kind");
	json_t *d = json_object_get(ev, "data");
	char a[400], b[400];
	/* The common case first: the entry is the derived one. */
	const char *hid = ndjson_str(e, "id");
	if (e && (!*id || (hid && strcmp(hid, id) == 0))) {
		/* The entry's side was made by the reader (parse_next). */
		const char *has = T.part[T.head];
		size_t has_len = T.part_len[T.head];
		derived_part(ev, &cmp_want);
		if (has_len == cmp_want.len && memcmp(has, cmp_want.p, has_len) == 0) {
			next();
			return;
		}
	}
	if (!e) {
		describe(kind, d, b, sizeof b);
		diverged(NULL, "no further entry", sx("a %s entry (%.300s)", kind, b));
	}
	if (strcmp(kind_of(e), kind) != 0) {
		describe(kind, d, b, sizeof b);
		diverged(e, sx("a %s entry", kind_of(e)), sx("a %s entry (%.300s)", kind, b));
	}
	if (!same_json(data_of(e), d)) {
		soft_differs(data_of(e), d);
		describe(kind, data_of(e), a, sizeof a);
		describe(kind, d, b, sizeof b);
		if (strcmp(a, b) == 0) {
			canon_text(data_of(e), a, sizeof a);
			canon_text(d, b, sizeof b);
		}
		diverged(e, a, b);
	}
	json_t *has_ev = json_object_get(e, EVIDENCE_MEMBER), *want_ev = json_object_get(ev, EVIDENCE_MEMBER);
	const char *key;
	json_t *v;
	json_object_foreach(want_ev, key, v)
		if (!json_object_get(has_ev, key))
			evidence_lost(e, key);
	json_t *empty = json_object();
	int differs = evidence_differs(has_ev ? has_ev : empty, want_ev ? want_ev : empty, a, b, sizeof a);
	json_decref(empty);
	if (differs)
		diverged(e, a, b);
	json_t *none = json_array();
	json_t *hr = json_object_get(e, "refs"), *wr = json_object_get(ev, "refs");
	int refs_same = same_json(hr ? hr : none, wr ? wr : none);
	json_decref(none);
	if (!refs_same) {
		canon_text(hr, a, sizeof a);
		canon_text(wr, b, sizeof b);
		diverged(e, sx("refs %s", a), sx("refs %s", b));
	}
	json_t *hw = json_object_get(e, OBSERVED_WIRE), *ww = json_object_get(ev, OBSERVED_WIRE);
	if (!same_json(hw, ww)) {
		canon_text(hw, a, sizeof a);
		canon_text(ww, b, sizeof b);
		diverged(e, sx("wire %s", hw ? a : "(none)"), sx("wire %s", ww ? b : "(none)"));
	}
	if (loop_of(e) != (int)json_integer_value(json_object_get(ev, "loop")))
		diverged(e, sx("loop %d", loop_of(e)), sx("loop %d", (int)json_integer_value(json_object_get(ev, "loop"))));
	const char *hc = ndjson_str(e, "class"), *wc = ndjson_str(ev, "class");
	if ((hc || wc) && (!hc || !wc || strcmp(hc, wc) != 0))
		diverged(e, sx("class %s", hc ? hc : "(none)"), sx("class %s", wc ? wc : "(none)"));
	if (*id && (!hid || strcmp(hid, id) != 0))
		diverged(e, sx("id %s", hid ? hid : "(none)"), sx("id %s", id));
	next();
}
