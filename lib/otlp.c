/* otlp.c - runs of a trace as OTLP/JSON spans (sfma-export(1)). */
#include "otlp.h"
#include "buf.h"
#include "canon.h"
#include "errors.h"
#include "ndjson.h"
#include "sha.h"
#include "tools.h"
#include "traceparent.h"
#include "utf8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Span kinds and status codes of opentelemetry/proto/trace/v1/trace.proto:
 * OTLP/JSON writes enums as their integers. */
enum { KIND_INTERNAL = 1, KIND_CLIENT = 3 };
enum { STATUS_UNSET = 0, STATUS_OK = 1, STATUS_ERROR = 2 };
/* Span.flags: bits 0-7 the W3C trace flags, bit 8 "whether the parent is
 * remote is known", bit 9 "it is remote" (SpanFlags in trace.proto). */
#define FLAG_SAMPLED 0x01u
#define FLAG_HAS_IS_REMOTE 0x100u
#define FLAG_IS_REMOTE 0x200u

/* Wall times are nanoseconds since the epoch in a signed 64-bit integer
 * for every backend that reads them so: up to the year 2262. An anchor
 * outside that is no anchor. */
#define WALL_MS_MAX 9223372036853.0
/* One entry's duration above a day is not a duration (runview.c's rule). */
#define DURATION_MS_MAX 86400000.0
#define NS_MAX 9223372036854775807ull
#define COUNT_MAX 1e15
/* A run has at most maxLoops (16) loops; past this many distinct numbers
 * in one run (a hostile trace) an entry's loop is the run's, so that the
 * lookup stays cheap. */
#define LOOPS_MAX 64

/* ---- values ---------------------------------------------------------------- */

static int str_is(const json_t *v, const char *s)
{
	return ndjson_string_is(v, s);
}

/* A whole number in [lo, hi], or 0. */
static int int_in(const json_t *v, double lo, double hi, long long *out)
{
	double d;
	if (!ndjson_number_in(v, lo, hi, &d) || d != floor(d))
		return 0;
	*out = (long long)d;
	return 1;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > NS_MAX - b ? NS_MAX : a + b;
}

/* Milliseconds (a duration) as nanoseconds; 0 for anything not one. */
static uint64_t duration_ns(const json_t *v)
{
	double ms;
	if (!ndjson_number_in(v, 0, DURATION_MS_MAX, &ms))
		return 0;
	return (uint64_t)llround(ms * 1e6);
}

/* ---- attributes: key -> AnyValue, sorted when written ------------------------ */

static void set_av(json_t *attrs, const char *key, json_t *av)
{
	json_object_set_new(attrs, key, av);
}

static void set_strn(json_t *attrs, const char *key, const char *s, size_t n)
{
	set_av(attrs, key, json_pack("{s:o}", "stringValue", json_stringn(s, n)));
}

static void set_cstr(json_t *attrs, const char *key, const char *s)
{
	set_strn(attrs, key, s, strlen(s));
}

/* The JSON string v, with every byte it holds (U+0000 too), when it is one. */
static void set_str(json_t *attrs, const char *key, const json_t *v)
{
	if (json_is_string(v))
		set_strn(attrs, key, json_string_value(v), json_string_length(v));
}

static void set_int(json_t *attrs, const char *key, long long v)
{
	char n[32];
	snprintf(n, sizeof n, "%lld", v); /* int64 is a decimal string in OTLP/JSON */
	set_av(attrs, key, json_pack("{s:s}", "intValue", n));
}

static void set_int_of(json_t *attrs, const char *key, const json_t *v, double lo, double hi)
{
	long long n;
	if (int_in(v, lo, hi, &n))
		set_int(attrs, key, n);
}

static void set_double(json_t *attrs, const char *key, double d)
{
	set_av(attrs, key, json_pack("{s:f}", "doubleValue", d));
}

static void set_double_of(json_t *attrs, const char *key, const json_t *v, double lo, double hi)
{
	double d;
	if (ndjson_number_in(v, lo, hi, &d))
		set_double(attrs, key, d);
}

static void set_bool(json_t *attrs, const char *key, int b)
{
	set_av(attrs, key, json_pack("{s:b}", "boolValue", b));
}

static void set_bool_of(json_t *attrs, const char *key, const json_t *v)
{
	if (json_is_boolean(v))
		set_bool(attrs, key, json_is_true(v));
}

/* A string array of one string. */
static void set_str_array1(json_t *attrs, const char *key, const json_t *v)
{
	if (!json_is_string(v))
		return;
	json_t *item = json_pack("{s:O}", "stringValue", v);
	set_av(attrs, key, json_pack("{s:{s:[o]}}", "arrayValue", "values", item));
}

/* The canonical JSON of v as a string attribute: the conventions' "any"
 * attributes are recorded on spans as JSON strings. */
static void set_json(json_t *attrs, const char *key, const json_t *v)
{
	struct buf b = {0};
	if (canon_dump(v, &b, NULL) == 0)
		set_strn(attrs, key, b.p ? b.p : "", b.len);
	buf_free(&b);
}

static int key_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The attributes as OTLP's KeyValue array, sorted by key. Takes attrs. */
static json_t *kv_array(json_t *attrs)
{
	size_t n = json_object_size(attrs), i = 0;
	const char **keys = xcalloc(n ? n : 1, sizeof *keys);
	const char *k;
	json_t *v;
	json_object_foreach(attrs, k, v)
		keys[i++] = k;
	qsort(keys, n, sizeof *keys, key_cmp);
	json_t *out = json_array();
	for (i = 0; i < n; i++)
		json_array_append_new(out, json_pack("{s:s, s:O}", "key", keys[i], "value",
		                                     json_object_get(attrs, keys[i])));
	free(keys);
	json_decref(attrs);
	return out;
}

/* ---- the record's manifest -------------------------------------------------- */

/* The conventions' gen_ai.provider.name of an sfma provider. codex is
 * OpenAI's Responses API; the mock is sfma's own. */
static const char *provider_name(const json_t *p)
{
	static const char *const map[][2] = {
		{"anthropic", "anthropic"}, {"openai", "openai"}, {"gemini", "gcp.gemini"},
		{"codex", "openai"},        {"mock", "sfma.mock"},
	};
	for (size_t i = 0; i < sizeof map / sizeof *map; i++)
		if (str_is(p, map[i][0]))
			return map[i][1];
	return "unknown";
}

/* The manifest's endpoint named name (a JSON string), or NULL. */
static const json_t *endpoint_of(const json_t *manifest, const json_t *name)
{
	size_t i;
	json_t *ep;
	if (!json_is_string(name))
		return NULL;
	json_array_foreach(json_object_get(manifest, "modelEndpoints"), i, ep) {
		json_t *n = json_object_get(ep, "name");
		if (json_is_string(n) && json_string_length(n) == json_string_length(name) &&
		    memcmp(json_string_value(n), json_string_value(name), json_string_length(n)) == 0)
			return ep;
	}
	return NULL;
}

/* ---- positions and times ------------------------------------------------------
 *
 * Only clock anchors carry a wall time; calls and commands carry their
 * durations. A run's entries are laid out in trace order on a cursor that
 * each duration advances (a call by waitMs, then its latencyMs; a command
 * by its durationMs), and the anchors pin it to the wall: between two
 * anchors the cursor is laid from the earlier one's time, compressed into
 * the gap when the durations add up to more (loops run at once); after the
 * last it runs on unscaled; before the first it stands at the first. An
 * anchor earlier than the one before it counts as that one. A run with no
 * anchor is left out. */

struct pos {
	uint32_t seg;   /* anchors before it (0: before the first) */
	uint64_t raw;   /* the cursor, ns */
};

struct anchor {
	uint64_t raw, wall;
};

/* ---- spans ---------------------------------------------------------------------- */

struct event {
	struct pos at;
	char *name;
	json_t *attrs;
};

struct span {
	unsigned char id[8];
	long parent;            /* index in the run's spans; -1: the run's own parent */
	int kind;
	struct buf name;
	json_t *attrs;
	struct event *ev;
	size_t nev, evcap;
	struct pos start, end;
	int status;
	json_t *status_msg;     /* a string, or NULL */
	long loop;              /* a loop span's number; 0 otherwise */
	uint64_t ns_start, ns_end;
	json_t *usage;          /* a run or loop span's summed usage, or NULL */
};

struct loop_state {
	long loop;
	long span;
	json_t *native_ids;     /* ids of the last reply's native calls, or NULL */
};

struct run {
	long no;
	struct span *sp;
	size_t nsp, spcap;
	struct anchor *an;
	size_t nan, ancap;
	uint64_t cursor;
	unsigned char digest[32]; /* of the run's first line: the trace and run ids */
	char first_hash[65];      /* that line's hash, when it has one */
	int have_digest;
	uint64_t first_line, last_line;
	char last_hash[65];
	struct loop_state *loops;
	size_t nloops, loopcap;
	json_t *tasks;          /* task entry id -> span index */
	json_t *verdict;        /* the terminal lifecycle's "to" */
	json_t *error;          /* the last result entry's text */
	json_t *traceparent;    /* as recorded, when valid */
	long calls, refusals;
	int closed;             /* a clock-anchor after the verdict */
	const json_t *entry;    /* the entry being mapped, its line and its digest */
	uint64_t line_no;
	unsigned char cur[32];
};

struct otlp_ws {
	struct otlp_opts o;
	const json_t *record;
	const json_t *manifest;
	json_t *spans;          /* every run's spans as OTLP/JSON */
	json_t *ids;            /* "<trace id><span id>" of every span so far */
	size_t nspans, ntraces;
	struct run *r;
};

static struct pos here(const struct run *r)
{
	return (struct pos){(uint32_t)r->nan, r->cursor};
}

static uint64_t time_of(const struct run *r, struct pos p)
{
	if (p.seg == 0) /* r->nan >= 1: a run without an anchor is left out */
		return r->an[0].wall;
	size_t k = p.seg - 1;
	uint64_t off = p.raw - r->an[k].raw;
	if (k + 1 < r->nan) {
		uint64_t gap = r->an[k + 1].wall - r->an[k].wall, total = r->an[k + 1].raw - r->an[k].raw;
		if (total > gap) /* off <= total, so the product fits in 128 bits */
			off = (uint64_t)((unsigned __int128)off * gap / total);
	}
	return sat_add(r->an[k].wall, off);
}

static long new_span(struct run *r, long parent, int kind, const unsigned char id[8], struct pos at)
{
	if (r->nsp == r->spcap) {
		r->spcap = r->spcap ? r->spcap * 2 : 16;
		r->sp = xrealloc(r->sp, r->spcap * sizeof *r->sp);
	}
	struct span *s = &r->sp[r->nsp];
	memset(s, 0, sizeof *s);
	memcpy(s->id, id, 8);
	s->parent = parent;
	s->kind = kind;
	s->attrs = json_object();
	s->start = s->end = at;
	return (long)r->nsp++;
}

static void add_event(struct span *s, struct pos at, const char *name, json_t *attrs)
{
	if (s->nev == s->evcap) {
		s->evcap = s->evcap ? s->evcap * 2 : 4;
		s->ev = xrealloc(s->ev, s->evcap * sizeof *s->ev);
	}
	s->ev[s->nev++] = (struct event){at, xstrdup(name), attrs};
}

/* The digest an entry is known by: its hash, or for a line without one
 * (a legacy prefix, a line that is no entry) the SHA-256 of its bytes,
 * or of its number when it could not be read. */
static void entry_digest(const json_t *entry, const char *line, size_t len, uint64_t line_no,
                         unsigned char out[32])
{
	const json_t *h = json_object_get(entry, "hash");
	const char *hex = json_string_value(h);
	if (hex && is_sha256_hex(hex, json_string_length(h))) {
		for (int i = 0; i < 32; i++) {
			unsigned hi = (unsigned)(hex[2 * i] <= '9' ? hex[2 * i] - '0' : hex[2 * i] - 'a' + 10);
			unsigned lo = (unsigned)(hex[2 * i + 1] <= '9' ? hex[2 * i + 1] - '0' : hex[2 * i + 1] - 'a' + 10);
			out[i] = (unsigned char)(hi << 4 | lo);
		}
		return;
	}
	struct sha256 s;
	sha256_init(&s);
	if (line) {
		sha256_update(&s, line, len);
	} else {
		char n[64];
		int k = snprintf(n, sizeof n, "sfma-export unreadable line %llu", (unsigned long long)line_no);
		sha256_update(&s, n, (size_t)k);
	}
	sha256_final(&s, out);
}

/* ---- evidence ------------------------------------------------------------------- */

struct find_ref {
	const char *name;
	struct evidence_ref ref;
	int found;
};

static int find_one(void *arg, const char *name, const struct evidence_ref *ref)
{
	struct find_ref *f = arg;
	if (strcmp(name, f->name) != 0)
		return 0;
	f->ref = *ref;
	f->found = 1;
	return 1;
}

/* The entry's first reference named name (sfma-formats(5), Evidence). */
static int ref_named(const json_t *entry, const char *name, struct evidence_ref *out)
{
	struct find_ref f = {.name = name};
	uint64_t count;
	struct sfma_err e;
	(void)evidence_entry_refs(entry, find_one, &f, &count, &e);
	if (f.found)
		*out = f.ref;
	return f.found;
}

/* The blob of the entry's item name, at most max bytes: malloc'd, or NULL. */
static char *blob(const struct otlp_ws *w, const json_t *entry, const char *name, size_t max, size_t *len,
                  int *clipped)
{
	struct evidence_ref ref;
	if (!w->o.blobs || !ref_named(entry, name, &ref))
		return NULL;
	char *p = w->o.blobs->read(w->o.blobs->arg, &ref, max, len);
	if (p && *len > max) { /* a reader that gave more than asked */
		free(p);
		return NULL;
	}
	if (clipped)
		*clipped = p && *len < ref.bytes;
	return p;
}

/* Evidence as text for a content attribute: invalid UTF-8 as U+FFFD, a
 * sequence cut by the clip dropped, and the clip said. New reference. */
static json_t *text_of(const char *p, size_t n, int clipped, uint64_t bytes)
{
	if (clipped) {
		/* a sequence the clip cut short: back to its lead byte */
		size_t k = n, back = 0;
		while (k > 0 && back < 3 && ((unsigned char)p[k - 1] & 0xc0) == 0x80)
			k--, back++;
		unsigned char lead = k > 0 ? (unsigned char)p[k - 1] : 0;
		size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
		if (lead >= 0xc0 && n - (k - 1) < need)
			n = k - 1;
	}
	json_t *s = utf8_json(p, n);
	if (!clipped)
		return s;
	struct buf b = {0};
	buf_add(&b, json_string_value(s), json_string_length(s));
	buf_printf(&b, "[clipped: %llu bytes not shown]", (unsigned long long)(bytes - n));
	json_decref(s);
	s = json_stringn(b.p, b.len);
	buf_free(&b);
	return s;
}

/* The item name of entry as content text (NULL: none). */
static json_t *content_text(const struct otlp_ws *w, const json_t *entry, const char *name)
{
	size_t len;
	int clipped;
	struct evidence_ref ref;
	if (!ref_named(entry, name, &ref))
		return NULL;
	char *p = blob(w, entry, name, OTLP_CONTENT_MAX, &len, &clipped);
	if (!p)
		return NULL;
	json_t *t = text_of(p, len, clipped, ref.bytes);
	free(p);
	return t;
}

/* A whole blob that is a JSON object, or NULL. */
static json_t *blob_json(const struct otlp_ws *w, const json_t *entry, const char *name, size_t max)
{
	size_t len;
	int clipped;
	char *p = blob(w, entry, name, max, &len, &clipped);
	if (!p)
		return NULL;
	json_t *v = clipped ? NULL : ndjson_parse(p, len, &(struct sfma_err){{0}});
	free(p);
	if (!json_is_object(v)) {
		json_decref(v);
		return NULL;
	}
	return v;
}

/* ---- the run ---------------------------------------------------------------------- */

static void hex_of(const unsigned char *b, size_t n, char *out)
{
	hex_encode(b, n, out);
	out[2 * n] = '\0';
}

static void entry_attrs(json_t *attrs, const json_t *entry, uint64_t line_no);

static struct loop_state *loop_state(struct otlp_ws *w, long loop, struct pos at)
{
	struct run *r = w->r;
	for (size_t i = 0; i < r->nloops; i++)
		if (r->loops[i].loop == loop)
			return &r->loops[i];
	if (r->nloops == r->loopcap) {
		r->loopcap = r->loopcap ? r->loopcap * 2 : 4;
		r->loops = xrealloc(r->loops, r->loopcap * sizeof *r->loops);
	}
	/* A loop is a span of its own: its id is derived from the run's
	 * digest and its number, since no entry stands for the loop. */
	char seed[160], hex[65];
	hex_of(r->digest, 32, hex);
	int n = snprintf(seed, sizeof seed, "sfma-export loop %ld of %s", loop, hex);
	unsigned char md[32];
	struct sha256 s;
	sha256_init(&s);
	sha256_update(&s, seed, (size_t)n);
	sha256_final(&s, md);
	long idx = new_span(r, 0, KIND_INTERNAL, md, at);
	r->sp[idx].loop = loop;
	/* the loop's first entry stands for it */
	entry_attrs(r->sp[idx].attrs, r->entry, r->line_no);
	struct loop_state *ls = &r->loops[r->nloops++];
	*ls = (struct loop_state){.loop = loop, .span = idx};
	return ls;
}

/* The span an entry of loop belongs under: its loop's, or the run's. */
static long parent_of(struct otlp_ws *w, long loop, struct pos at)
{
	if (loop <= 0)
		return 0;
	return loop_state(w, loop, at)->span;
}

/* The loop an entry counts under: its own (1 or more), or 0, the run's -
 * also for a new number past LOOPS_MAX of them. */
static long entry_loop(const struct run *r, const json_t *entry)
{
	long long l;
	if (!int_in(json_object_get(entry, "loop"), 1, 2147483647.0, &l))
		return 0;
	for (size_t i = 0; i < r->nloops; i++)
		if (r->loops[i].loop == l)
			return (long)l;
	return r->nloops < LOOPS_MAX ? (long)l : 0;
}

/* What every span and event made of an entry carries. */
static void entry_attrs(json_t *attrs, const json_t *entry, uint64_t line_no)
{
	set_int(attrs, "sfma.trace.line", (long long)line_no);
	const json_t *h = json_object_get(entry, "hash");
	if (json_is_string(h) && is_sha256_hex(json_string_value(h), json_string_length(h)))
		set_str(attrs, "sfma.entry.hash", h);
	set_str(attrs, "sfma.entry.id", json_object_get(entry, "id"));
}

static void event_at(struct otlp_ws *w, long span, struct pos at, const char *name, json_t *attrs,
                     const json_t *entry, uint64_t line_no)
{
	entry_attrs(attrs, entry, line_no);
	add_event(&w->r->sp[span], at, name, attrs);
}

/* ---- usage ------------------------------------------------------------------------ */

static const char *const usage_keys[] = {"inputTokens", "outputTokens", "cachedInputTokens", "cacheWriteTokens",
                                         "reasoningTokens"};
enum { U_IN, U_OUT, U_CACHED, U_WRITE, U_REASONING, U_N };

/* usage's counts (present[k] for those it has). */
static int read_usage(const json_t *u, double v[U_N], int present[U_N])
{
	int any = 0;
	for (int k = 0; k < U_N; k++) {
		present[k] = ndjson_number_in(json_object_get(u, usage_keys[k]), 0, COUNT_MAX, &v[k]) && v[k] == floor(v[k]);
		if (!present[k])
			v[k] = 0;
		any |= present[k];
	}
	return any;
}

/* The conventions' usage attributes. gen_ai.usage.input_tokens includes
 * cached tokens; Anthropic reports input_tokens without them, so for it
 * the cache reads and writes are added (the pinned anthropic span's
 * rule); the others' input counts already include them. */
static void usage_attrs(json_t *attrs, const double v[U_N], const int present[U_N], int anthropic)
{
	double in = v[U_IN] + (anthropic ? v[U_CACHED] + v[U_WRITE] : 0);
	if (present[U_IN])
		set_int(attrs, "gen_ai.usage.input_tokens", (long long)in);
	if (present[U_OUT])
		set_int(attrs, "gen_ai.usage.output_tokens", (long long)v[U_OUT]);
	if (present[U_CACHED])
		set_int(attrs, "gen_ai.usage.cache_read.input_tokens", (long long)v[U_CACHED]);
	if (present[U_WRITE])
		set_int(attrs, "gen_ai.usage.cache_creation.input_tokens", (long long)v[U_WRITE]);
	if (present[U_REASONING])
		set_int(attrs, "gen_ai.usage.reasoning.output_tokens", (long long)v[U_REASONING]);
}

/* Sum a call's usage (as the conventions count it) into a run or loop
 * span: the counts the pinned invoke_agent span lists (reasoning tokens
 * are not among them). */
static void add_usage(struct span *s, const double v[U_N], const int present[U_N], int anthropic)
{
	static const char *const keys[] = {"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
	                                   "gen_ai.usage.cache_read.input_tokens",
	                                   "gen_ai.usage.cache_creation.input_tokens",
	                                   "gen_ai.usage.reasoning.output_tokens"};
	double add[U_N] = {v[U_IN] + (anthropic ? v[U_CACHED] + v[U_WRITE] : 0), v[U_OUT], v[U_CACHED], v[U_WRITE],
	                   v[U_REASONING]};
	if (!s->usage)
		s->usage = json_object();
	for (int k = 0; k < U_N; k++) {
		if (!present[k] || k == U_REASONING)
			continue;
		double had = json_number_value(json_object_get(s->usage, keys[k]));
		double sum = had + add[k] > 9007199254740991.0 ? 9007199254740991.0 : had + add[k];
		json_object_set_new(s->usage, keys[k], json_real(sum));
	}
}

static void usage_onto(json_t *attrs, const json_t *usage)
{
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)usage, k, v)
		set_int(attrs, k, (long long)json_real_value(v));
}

/* ---- content: the conventions' message shapes (gen-ai-*-messages.json) ---------- */

static json_t *text_part(json_t *text)
{
	return json_pack("{s:s, s:o}", "type", "text", "content", text);
}

/* The message a request added, as gen_ai.input.messages: a native tool
 * message as tool_call_response parts, anything else as the user's text. */
static json_t *input_messages(const struct otlp_ws *w, const json_t *entry)
{
	json_t *msg = blob_json(w, entry, "message", OTLP_CONTENT_MAX);
	json_t *results = json_object_get(msg, "results");
	if (str_is(json_object_get(msg, "role"), "tool") && json_is_array(results)) {
		json_t *parts = json_array(), *r;
		size_t i;
		json_array_foreach(results, i, r) {
			json_t *part = json_pack("{s:s, s:O?}", "type", "tool_call_response", "response",
			                         json_object_get(r, "content"));
			if (json_is_string(json_object_get(r, "id")))
				json_object_set(part, "id", json_object_get(r, "id"));
			json_array_append_new(parts, part);
		}
		json_decref(msg);
		return json_pack("[{s:s, s:o}]", "role", "tool", "parts", parts);
	}
	json_decref(msg);
	json_t *text = content_text(w, entry, "message");
	if (!text)
		return NULL;
	return json_pack("[{s:s, s:[o]}]", "role", "user", "parts", text_part(text));
}

/* The output message's finish_reason (an enum of the pinned schema) from
 * the call's stop class. */
static const char *finish_reason(const json_t *data, int tool_calls)
{
	const json_t *stop = json_object_get(data, "stop");
	if (str_is(stop, "length"))
		return "length";
	if (str_is(stop, "refusal") || str_is(stop, "filter"))
		return "content_filter";
	if (str_is(stop, "tool") || tool_calls)
		return "tool_call";
	return "stop";
}

/* ---- entries ------------------------------------------------------------------------ */

static void on_call(struct otlp_ws *w, const json_t *entry, const json_t *data, long loop, uint64_t line_no)
{
	struct run *r = w->r;
	r->calls++;
	r->cursor = sat_add(r->cursor, duration_ns(json_object_get(data, "waitMs")));
	struct pos start = here(r);
	r->cursor = sat_add(r->cursor, duration_ns(json_object_get(data, "latencyMs")));
	long parent = parent_of(w, loop, start);
	long idx = new_span(r, parent, KIND_CLIENT, r->cur, start);
	struct span *s = &r->sp[idx];
	s->end = here(r);
	json_t *a = s->attrs;
	const json_t *ep = endpoint_of(w->manifest, json_object_get(data, "endpoint"));
	const json_t *provider = json_object_get(ep, "provider"), *model = json_object_get(ep, "model");
	int anthropic = str_is(provider, "anthropic");
	buf_adds(&s->name, "chat");
	if (json_is_string(model)) {
		buf_addc(&s->name, ' ');
		buf_add(&s->name, json_string_value(model), json_string_length(model));
		set_str(a, "gen_ai.request.model", model);
	}
	set_cstr(a, "gen_ai.operation.name", "chat");
	set_cstr(a, "gen_ai.provider.name", provider_name(provider));
	entry_attrs(a, entry, line_no);
	if (loop > 0)
		set_int(a, "sfma.loop", loop);
	set_str(a, "sfma.endpoint", json_object_get(data, "endpoint"));
	set_str(a, "sfma.call.class", json_object_get(entry, "class"));
	set_str(a, "sfma.call.purpose", json_object_get(data, "purpose"));
	set_str(a, "sfma.call.task", json_object_get(data, "task"));
	set_double_of(a, "sfma.latency_ms", json_object_get(data, "latencyMs"), 0, DURATION_MS_MAX);
	set_double_of(a, "sfma.wait_ms", json_object_get(data, "waitMs"), 0, DURATION_MS_MAX);
	set_int_of(a, "sfma.request_bytes", json_object_get(data, "requestBytes"), 0, 9007199254740991.0);
	set_int_of(a, "sfma.http.status", json_object_get(data, "status"), 0, 999);
	set_str(a, "sfma.stop", json_object_get(data, "stop"));
	set_double_of(a, "sfma.cost_usd", json_object_get(data, "costUsd"), 0, COUNT_MAX);
	set_bool_of(a, "sfma.drained", json_object_get(data, "drained"));
	long long tool_calls = 0;
	int_in(json_object_get(data, "toolCalls"), 0, 1e6, &tool_calls);
	if (tool_calls)
		set_int(a, "sfma.tool_calls", tool_calls);
	set_str_array1(a, "gen_ai.response.finish_reasons", json_object_get(data, "stopReason"));

	double u[U_N];
	int present[U_N];
	if (read_usage(json_object_get(data, "usage"), u, present)) {
		usage_attrs(a, u, present, anthropic);
		add_usage(&r->sp[0], u, present, anthropic);
		if (parent != 0)
			add_usage(&r->sp[parent], u, present, anthropic);
		a = r->sp[idx].attrs;
	}
	s = &r->sp[idx];
	int ok = json_is_true(json_object_get(data, "ok"));
	if (!ok) {
		const json_t *cls = json_object_get(data, "errorClass");
		if (json_is_string(cls))
			set_str(a, "error.type", cls);
		else
			set_cstr(a, "error.type", "_OTHER");
		s->status = STATUS_ERROR;
		const json_t *err = json_object_get(data, "error");
		s->status_msg = json_is_string(err) ? json_incref((json_t *)err) : json_string("model call failed");
	}

	/* The reply's native calls: the first one's id names the tool span
	 * the turn makes (the others were not carried out). */
	json_t *reply = NULL, *calls = NULL;
	if (tool_calls && (reply = blob_json(w, entry, "reply", OTLP_REPLY_MAX))) {
		const char *prov = json_string_value(json_object_get(reply, "provider"));
		struct sfma_err e;
		if (prov && json_is_array(json_object_get(reply, "native")))
			calls = tools_from_native(prov, json_object_get(reply, "native"), &e);
	}
	if (ok && loop > 0) {
		struct loop_state *ls = loop_state(w, loop, start);
		json_decref(ls->native_ids);
		ls->native_ids = NULL;
		if (json_array_size(calls)) {
			ls->native_ids = json_array();
			size_t i;
			json_t *c;
			json_array_foreach(calls, i, c)
				json_array_append(ls->native_ids, json_is_string(json_object_get(c, "id"))
				                                       ? json_object_get(c, "id") : json_null());
		}
	}
	if (w->o.content) {
		a = r->sp[idx].attrs;
		json_t *prompt = content_text(w, entry, "prompt");
		if (prompt) {
			json_t *si = json_pack("[{s:s, s:o}]", "type", "text", "content", prompt);
			set_json(a, "gen_ai.system_instructions", si);
			json_decref(si);
		}
		json_t *in = input_messages(w, entry);
		if (in) {
			set_json(a, "gen_ai.input.messages", in);
			json_decref(in);
		}
		json_t *parts = json_array();
		if (calls) {
			const json_t *t = json_object_get(reply, "text");
			if (json_is_string(t) && json_string_length(t))
				json_array_append_new(parts, text_part(json_incref((json_t *)t)));
			size_t i;
			json_t *c;
			json_array_foreach(calls, i, c)
				json_array_append_new(parts, json_pack("{s:s, s:O*, s:O*, s:O*}", "type", "tool_call", "id",
				                                       json_object_get(c, "id"), "name", json_object_get(c, "name"),
				                                       "arguments", json_object_get(c, "input")));
		} else if (ok) {
			json_t *text = content_text(w, entry, "reply");
			if (text)
				json_array_append_new(parts, text_part(text));
		}
		if (json_array_size(parts)) {
			json_t *out = json_pack("[{s:s, s:O, s:s}]", "role", "assistant", "parts", parts, "finish_reason",
			                        finish_reason(data, calls != NULL));
			set_json(a, "gen_ai.output.messages", out);
			json_decref(out);
		}
		json_decref(parts);
	}
	json_decref(calls);
	json_decref(reply);
}

/* A task entry: the model's tool call, an execute_tool span that its
 * verdict (and mutation) complete. */
static void on_task(struct otlp_ws *w, const json_t *entry, const json_t *data, long loop, uint64_t line_no)
{
	struct run *r = w->r;
	struct pos at = here(r);
	long parent = parent_of(w, loop, at);
	long idx = new_span(r, parent, KIND_INTERNAL, r->cur, at);
	struct span *s = &r->sp[idx];
	json_t *a = s->attrs;
	const json_t *call = json_object_get(data, "call");
	const json_t *tool = json_object_get(call, "tool");
	buf_adds(&s->name, "execute_tool");
	if (json_is_string(tool)) {
		buf_addc(&s->name, ' ');
		buf_add(&s->name, json_string_value(tool), json_string_length(tool));
		set_str(a, "gen_ai.tool.name", tool);
	} else {
		set_cstr(a, "gen_ai.tool.name", "unknown");
	}
	set_cstr(a, "gen_ai.operation.name", "execute_tool");
	set_cstr(a, "gen_ai.tool.type", "function");
	entry_attrs(a, entry, line_no);
	if (loop > 0)
		set_int(a, "sfma.loop", loop);
	set_str(a, "sfma.tool.path", json_object_get(call, "path"));
	set_str(a, "sfma.tool.cmd", json_object_get(call, "cmd"));
	set_str(a, "sfma.tool.mode", json_object_get(call, "mode"));
	if (str_is(tool, "task"))
		set_str(a, "sfma.tool.task", json_object_get(call, "id"));
	/* The call id: the provider's, when the reply was a native call, else
	 * the entry's own. */
	const json_t *call_id = NULL;
	struct loop_state *ls = NULL;
	if (loop > 0) {
		ls = loop_state(w, loop, at);
		a = r->sp[idx].attrs;
		call_id = json_array_get(ls->native_ids, 0);
	}
	if (json_is_string(call_id))
		set_str(a, "gen_ai.tool.call.id", call_id);
	else
		set_str(a, "gen_ai.tool.call.id", json_object_get(entry, "id"));
	if (ls) {
		json_decref(ls->native_ids);
		ls->native_ids = NULL;
	}
	const json_t *id = json_object_get(entry, "id");
	if (json_is_string(id))
		json_object_setn_new(r->tasks, json_string_value(id), json_string_length(id), json_integer(idx));
	if (w->o.content) {
		json_t *args = json_object();
		const char *k;
		json_t *v;
		json_object_foreach((json_t *)call, k, v)
			if (strcmp(k, "tool") != 0)
				json_object_set(args, k, v);
		static const char *const items[] = {"content", "text", "summary"};
		for (size_t i = 0; i < sizeof items / sizeof *items; i++) {
			json_t *t = content_text(w, entry, items[i]);
			if (t)
				json_object_set_new(args, items[i], t);
		}
		set_json(r->sp[idx].attrs, "gen_ai.tool.call.arguments", args);
		json_decref(args);
	}
}

/* The span of the task entry entry answers (its first ref), or -1. */
static long task_span(struct otlp_ws *w, const json_t *entry)
{
	const json_t *ref = json_array_get(json_object_get(entry, "refs"), 0);
	if (!json_is_string(ref))
		return -1;
	const json_t *i = json_object_getn(w->r->tasks, json_string_value(ref), json_string_length(ref));
	return json_is_integer(i) ? (long)json_integer_value(i) : -1;
}

/* A tool's result as the model got it: {"toolResult":TEXT}, or the tool
 * message answering native calls (its first result), or the bytes. An
 * "any" attribute, so recorded as JSON (a JSON string of the text). */
static void tool_result(const struct otlp_ws *w, const json_t *entry, json_t *attrs)
{
	json_t *msg = blob_json(w, entry, "output", OTLP_CONTENT_MAX);
	const json_t *t = json_object_get(msg, "toolResult");
	if (!json_is_string(t))
		t = json_object_get(json_array_get(json_object_get(msg, "results"), 0), "content");
	json_t *text = json_is_string(t) ? json_incref((json_t *)t) : content_text(w, entry, "output");
	if (text)
		set_json(attrs, "gen_ai.tool.call.result", text);
	json_decref(text);
	json_decref(msg);
}

static void set_status(struct span *s, int status, const json_t *msg, const char *fallback)
{
	s->status = status;
	json_decref(s->status_msg);
	s->status_msg = json_is_string(msg) ? json_incref((json_t *)msg) : json_string(fallback);
}

/* An acceptance command (sfma-manifest(5), acceptance): an execute_tool
 * span of its own, named acceptance. */
static void on_acceptance(struct otlp_ws *w, const json_t *entry, const json_t *data, long loop,
                          uint64_t line_no)
{
	struct run *r = w->r;
	const json_t *acc = json_object_get(data, "acceptance");
	const json_t *run = json_object_get(data, "run");
	struct pos start = here(r);
	uint64_t dur = duration_ns(json_object_get(run, "durationMs"));
	if (!dur)
		dur = duration_ns(json_object_get(acc, "durationMs"));
	r->cursor = sat_add(r->cursor, dur);
	long parent = parent_of(w, loop, start);
	long idx = new_span(r, parent, KIND_INTERNAL, r->cur, start);
	struct span *s = &r->sp[idx];
	s->end = here(r);
	buf_adds(&s->name, "execute_tool acceptance");
	json_t *a = s->attrs;
	set_cstr(a, "gen_ai.operation.name", "execute_tool");
	set_cstr(a, "gen_ai.tool.name", "acceptance");
	set_cstr(a, "gen_ai.tool.type", "function");
	set_str(a, "gen_ai.tool.call.id", json_object_get(entry, "id"));
	entry_attrs(a, entry, line_no);
	if (loop > 0)
		set_int(a, "sfma.loop", loop);
	set_int_of(a, "sfma.acceptance.index", json_object_get(acc, "index"), 0, 1e6);
	set_str(a, "sfma.acceptance.cmd", json_object_get(acc, "cmd"));
	set_int_of(a, "sfma.acceptance.expected", json_object_get(acc, "expected"), -1e9, 1e9);
	set_int_of(a, "sfma.exit_code", json_object_get(acc, "exit"), -1e9, 1e9);
	set_bool_of(a, "sfma.acceptance.pass", json_object_get(acc, "pass"));
	set_double_of(a, "sfma.duration_ms", json_object_get(run, "durationMs"), 0, DURATION_MS_MAX);
	set_bool_of(a, "sfma.timed_out", json_object_get(run, "timedOut"));
	if (json_is_false(json_object_get(acc, "pass"))) {
		set_cstr(a, "error.type", "acceptance_failed");
		struct buf m = {0};
		long long ex, exp;
		buf_adds(&m, "acceptance failed: ");
		const json_t *cmd = json_object_get(acc, "cmd");
		if (json_is_string(cmd))
			buf_add(&m, json_string_value(cmd), json_string_length(cmd));
		if (int_in(json_object_get(acc, "exit"), -1e9, 1e9, &ex))
			buf_printf(&m, ": exit=%lld", ex);
		if (int_in(json_object_get(acc, "expected"), -1e9, 1e9, &exp))
			buf_printf(&m, " (expected %lld)", exp);
		json_t *msg = json_stringn(m.p, m.len);
		set_status(s, STATUS_ERROR, msg, "acceptance failed");
		json_decref(msg);
		buf_free(&m);
	}
	if (w->o.content)
		tool_result(w, entry, r->sp[idx].attrs);
}

/* A soft-tier or criteria verdict: the conventions' evaluation result, an
 * event on the span of what was judged (the loop, or the run). */
static void on_evaluation(struct otlp_ws *w, const json_t *entry, const json_t *data, long loop,
                          uint64_t line_no)
{
	struct pos at = here(w->r);
	long span = parent_of(w, loop, at);
	json_t *a = json_object();
	int criteria = str_is(json_object_get(data, "tier"), "criteria");
	set_cstr(a, "gen_ai.evaluation.name", criteria ? "sfma.criteria" : "sfma.soft_tier");
	const json_t *pass = json_object_get(data, "pass");
	if (json_is_boolean(pass)) {
		set_cstr(a, "gen_ai.evaluation.score.label", json_is_true(pass) ? "pass" : "fail");
		set_double(a, "gen_ai.evaluation.score.value", json_is_true(pass) ? 1.0 : 0.0);
	} else {
		set_cstr(a, "gen_ai.evaluation.score.label", "unjudged");
	}
	set_str(a, "gen_ai.evaluation.explanation", json_object_get(data, "reason"));
	set_str(a, "sfma.task", json_object_get(data, "task"));
	set_str(a, "sfma.judge", json_object_get(data, "judge"));
	set_str(a, "sfma.producer", json_object_get(data, "producer"));
	set_bool_of(a, "sfma.independent", json_object_get(data, "independent"));
	if (criteria) {
		size_t i, passed = 0;
		json_t *c;
		json_array_foreach(json_object_get(data, "criteria"), i, c)
			passed += json_is_true(json_object_get(c, "pass"));
		set_int(a, "sfma.criteria.total", (long long)json_array_size(json_object_get(data, "criteria")));
		set_int(a, "sfma.criteria.passed", (long long)passed);
	}
	event_at(w, span, at, "gen_ai.evaluation.result", a, entry, line_no);
}

static void on_verdict(struct otlp_ws *w, const json_t *entry, const json_t *data, long loop, uint64_t line_no)
{
	struct run *r = w->r;
	if (json_is_object(json_object_get(data, "acceptance"))) {
		on_acceptance(w, entry, data, loop, line_no);
		return;
	}
	const json_t *tier = json_object_get(data, "tier");
	if (str_is(tier, "soft") || str_is(tier, "criteria")) {
		on_evaluation(w, entry, data, loop, line_no);
		return;
	}
	const json_t *run = json_object_get(data, "run");
	const json_t *pass = json_object_get(data, "pass");
	if (json_is_false(pass) && !str_is(tier, "protocol"))
		r->refusals++;
	r->cursor = sat_add(r->cursor, duration_ns(json_object_get(run, "durationMs")));
	long idx = task_span(w, entry);
	if (idx < 0) { /* a verdict of no task of this run: an event */
		struct pos at = here(r);
		json_t *a = json_object();
		set_str(a, "sfma.hard_tier.tier", tier);
		set_bool_of(a, "sfma.hard_tier.pass", pass);
		set_str(a, "sfma.hard_tier.reason", json_object_get(data, "reason"));
		event_at(w, parent_of(w, loop, at), at, "sfma.verdict", a, entry, line_no);
		return;
	}
	struct span *s = &r->sp[idx];
	s->end = here(r);
	json_t *a = s->attrs;
	set_str(a, "sfma.hard_tier.tier", tier);
	set_bool_of(a, "sfma.hard_tier.pass", pass);
	set_str(a, "sfma.hard_tier.reason", json_object_get(data, "reason"));
	set_int(a, "sfma.verdict.line", (long long)line_no);
	set_int_of(a, "sfma.exit_code", json_object_get(run, "exit"), -1e9, 1e9);
	set_bool_of(a, "sfma.timed_out", json_object_get(run, "timedOut"));
	set_double_of(a, "sfma.duration_ms", json_object_get(run, "durationMs"), 0, DURATION_MS_MAX);
	set_str(a, "sfma.posted.task", json_object_get(json_object_get(data, "posted"), "id"));
	const json_t *reason = json_object_get(data, "reason");
	if (json_is_false(pass)) {
		set_cstr(a, "error.type", str_is(tier, "protocol") ? "protocol" : "refused");
		set_status(s, STATUS_ERROR, reason, "refused");
	} else if (json_is_true(json_object_get(run, "timedOut"))) {
		set_cstr(a, "error.type", "timeout");
		set_status(s, STATUS_ERROR, reason, "timed out");
	} else if (json_is_string(json_object_get(data, "error"))) {
		set_cstr(a, "error.type", "tool_error");
		set_status(s, STATUS_ERROR, json_object_get(data, "error"), "failed");
	}
	if (w->o.content)
		tool_result(w, entry, a);
}

static void on_mutation(struct otlp_ws *w, const json_t *entry, const json_t *data, long loop,
                        uint64_t line_no)
{
	long idx = task_span(w, entry);
	json_t *a = idx >= 0 ? w->r->sp[idx].attrs : json_object();
	set_str(a, "sfma.mutation.path", json_object_get(data, "path"));
	set_int_of(a, "sfma.mutation.bytes", json_object_get(data, "bytes"), 0, 9007199254740991.0);
	set_str(a, "sfma.mutation.sha256", json_object_get(data, "sha256"));
	set_bool_of(a, "sfma.mutation.applied", json_object_get(data, "applied"));
	if (idx < 0) {
		struct pos at = here(w->r);
		event_at(w, parent_of(w, loop, at), at, "sfma.mutation", a, entry, line_no);
	}
}

/* A halt, an error, an interrupted predecessor: events of the run. */
static void on_result(struct otlp_ws *w, const json_t *entry, const json_t *data, long loop, uint64_t line_no)
{
	struct run *r = w->r;
	struct pos at = here(r);
	long span = parent_of(w, loop, at);
	json_t *a = json_object();
	const json_t *halt = json_object_get(data, "halt"), *err = json_object_get(data, "error");
	const json_t *interrupted = json_object_get(data, "interrupted");
	const char *name;
	const json_t *text = NULL;
	if (json_is_string(halt)) {
		name = "sfma.halt";
		set_str(a, "sfma.halt.verdict", halt);
		set_str(a, "sfma.halt.trigger", json_object_get(data, "trigger"));
		set_str(a, "sfma.halt.reason", json_object_get(data, "reason"));
		set_int_of(a, "sfma.halt.elapsed_ms", json_object_get(data, "elapsedMs"), 0, 9007199254740991.0);
		text = json_is_string(json_object_get(data, "reason")) ? json_object_get(data, "reason") : halt;
	} else if (json_is_object(interrupted)) {
		name = "sfma.interrupted";
		set_int_of(a, "sfma.interrupted.entries", json_object_get(interrupted, "entries"), 0, 9007199254740991.0);
		set_int_of(a, "sfma.interrupted.first_seq", json_object_get(interrupted, "firstSeq"), 0,
		           9007199254740991.0);
		set_int_of(a, "sfma.interrupted.last_seq", json_object_get(interrupted, "lastSeq"), 0,
		           9007199254740991.0);
	} else {
		name = "sfma.error";
		set_str(a, "sfma.error.message", err);
		text = err;
	}
	if (json_is_string(text)) {
		json_decref(r->error);
		r->error = json_incref((json_t *)text);
	}
	event_at(w, span, at, name, a, entry, line_no);
}

static int terminal(const json_t *to)
{
	const char *s = json_string_value(to);
	return s && strlen(s) == json_string_length(to) &&
	       (strcmp(s, "completed") == 0 || strcmp(s, "failed") == 0 || strncmp(s, "halted", 6) == 0);
}

static void on_lifecycle(struct otlp_ws *w, const json_t *entry, const json_t *data, uint64_t line_no)
{
	struct run *r = w->r;
	const json_t *from = json_object_get(data, "from"), *to = json_object_get(data, "to");
	const json_t *tp = json_object_get(data, "traceparent");
	const char *why;
	/* The caller's trace the run joined (sfma run, TRACEPARENT): on the
	 * run's first lifecycle, and only a valid one. */
	if (json_is_null(from) && !r->traceparent && json_is_string(tp) &&
	    strlen(json_string_value(tp)) == json_string_length(tp) && traceparent_valid(json_string_value(tp), &why))
		r->traceparent = json_incref((json_t *)tp);
	if (terminal(to)) {
		json_decref(r->verdict);
		r->verdict = json_incref((json_t *)to);
	}
	json_t *a = json_object();
	set_str(a, "sfma.lifecycle.from", from);
	set_str(a, "sfma.lifecycle.to", to);
	event_at(w, 0, here(r), "sfma.lifecycle", a, entry, line_no);
}

static void on_anchor(struct run *r, const json_t *data)
{
	double ms;
	/* 0 is OTLP's "unknown time": an anchor at the epoch tells none */
	if (!ndjson_number_in(json_object_get(data, "wallMs"), 0, WALL_MS_MAX, &ms) || ms <= 0 || r->nan >= UINT32_MAX)
		return;
	/* in integers: ms * 1e6 as a double would lose the low digits */
	double whole = floor(ms);
	uint64_t wall = (uint64_t)whole * 1000000u + (uint64_t)llround((ms - whole) * 1e6);
	if (r->nan && wall < r->an[r->nan - 1].wall)
		wall = r->an[r->nan - 1].wall;
	if (r->nan == r->ancap) {
		r->ancap = r->ancap ? r->ancap * 2 : 4;
		r->an = xrealloc(r->an, r->ancap * sizeof *r->an);
	}
	r->an[r->nan++] = (struct anchor){r->cursor, wall};
	if (r->verdict)
		r->closed = 1;
}

static void on_other(struct otlp_ws *w, const json_t *entry, const json_t *data, const char *kind, long loop,
                     uint64_t line_no)
{
	struct pos at = here(w->r);
	json_t *a = json_object();
	const char *name;
	if (strcmp(kind, "compaction") == 0) {
		name = "sfma.compaction";
		set_int_of(a, "sfma.compaction.before_bytes", json_object_get(data, "beforeBytes"), 0, 9007199254740991.0);
		set_int_of(a, "sfma.compaction.after_bytes", json_object_get(data, "afterBytes"), 0, 9007199254740991.0);
		set_int(a, "sfma.compaction.elided", (long long)json_array_size(json_object_get(data, "elided")));
	} else if (strcmp(kind, "message") == 0) {
		name = "sfma.message";
		set_str(a, "sfma.message.dir", json_object_get(data, "dir"));
		set_str(a, "sfma.message.kind", json_object_get(data, "kind"));
		set_str(a, "sfma.message.file", json_object_get(data, "file"));
		if (w->o.content)
			set_str(a, "sfma.message.text", json_object_get(data, "text"));
	} else if (strcmp(kind, "clarification") == 0) {
		name = "sfma.clarification";
		set_str(a, "sfma.clarification.source", json_object_get(data, "source"));
		set_str(a, "sfma.task", json_object_get(data, "task"));
		if (w->o.content)
			set_str(a, "sfma.clarification.text", json_object_get(data, "text"));
	} else { /* candidate */
		name = "sfma.candidate";
	}
	event_at(w, parent_of(w, loop, at), at, name, a, entry, line_no);
}

/* ---- the mapping's frame ------------------------------------------------------------ */

struct otlp_ws *otlp_ws_new(const json_t *record, const struct otlp_opts *opts)
{
	struct otlp_ws *w = xcalloc(1, sizeof *w);
	w->o = *opts;
	w->record = json_is_object(record) ? record : NULL;
	w->manifest = json_object_get(w->record, "manifest");
	if (!json_is_object(w->manifest))
		w->manifest = NULL;
	w->spans = json_array();
	w->ids = json_object();
	return w;
}

void otlp_run_begin(struct otlp_ws *w, long run_no)
{
	struct run *r = xcalloc(1, sizeof *r);
	r->no = run_no;
	r->tasks = json_object();
	w->r = r;
	/* the run's own span, index 0; its id and times are set at the end */
	unsigned char none[8] = {0};
	new_span(r, -1, KIND_INTERNAL, none, (struct pos){0, 0});
}

void otlp_run_line(struct otlp_ws *w, const char *line, size_t len, uint64_t line_no)
{
	struct run *r = w->r;
	if (!r)
		return;
	struct sfma_err e;
	json_t *entry = line ? ndjson_parse(line, len, &e) : NULL;
	if (entry && !json_is_object(entry)) {
		json_decref(entry);
		entry = NULL;
	}
	entry_digest(entry, line, len, line_no, r->cur);
	if (!r->first_line) {
		r->first_line = line_no;
		memcpy(r->digest, r->cur, 32);
		r->have_digest = 1;
		const json_t *fh = json_object_get(entry, "hash");
		if (json_is_string(fh) && is_sha256_hex(json_string_value(fh), json_string_length(fh)))
			memcpy(r->first_hash, json_string_value(fh), 65);
	}
	r->last_line = line_no;
	if (!entry)
		return;
	const json_t *h = json_object_get(entry, "hash");
	if (json_is_string(h) && is_sha256_hex(json_string_value(h), json_string_length(h)))
		memcpy(r->last_hash, json_string_value(h), 65);
	const json_t *kind = json_object_get(entry, "kind");
	const json_t *data = json_object_get(entry, "data");
	if (!json_is_object(data))
		data = NULL;
	json_t *empty = data ? NULL : json_object();
	if (!data)
		data = empty;
	long loop = entry_loop(r, entry);
	r->entry = entry;
	r->line_no = line_no;
	if (str_is(kind, "clock-anchor"))
		on_anchor(r, data);
	else if (str_is(kind, "lifecycle"))
		on_lifecycle(w, entry, data, line_no);
	else if (str_is(kind, "call"))
		on_call(w, entry, data, loop, line_no);
	else if (str_is(kind, "task"))
		on_task(w, entry, data, loop, line_no);
	else if (str_is(kind, "verdict"))
		on_verdict(w, entry, data, loop, line_no);
	else if (str_is(kind, "mutation"))
		on_mutation(w, entry, data, loop, line_no);
	else if (str_is(kind, "result"))
		on_result(w, entry, data, loop, line_no);
	else if (str_is(kind, "compaction"))
		on_other(w, entry, data, "compaction", loop, line_no);
	else if (str_is(kind, "message"))
		on_other(w, entry, data, "message", loop, line_no);
	else if (str_is(kind, "clarification"))
		on_other(w, entry, data, "clarification", loop, line_no);
	else if (str_is(kind, "candidate"))
		on_other(w, entry, data, "candidate", loop, line_no);
	r->entry = NULL;
	json_decref(empty);
	json_decref(entry);
}

/* ---- writing a run ------------------------------------------------------------------- */

static int all_zero(const unsigned char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* Make span ids unique within their trace (runs that joined one caller's
 * trace share it) and never all zeros (OTLP's invalid id): a taken one
 * is replaced by the first 8 bytes of its own SHA-256, again until it is
 * free - the same for the same trace. */
static void unique_ids(struct otlp_ws *w, struct run *r, const char *trace_hex)
{
	for (size_t i = 0; i < r->nsp; i++) {
		unsigned char *id = r->sp[i].id;
		char key[32 + 17];
		memcpy(key, trace_hex, 32);
		for (;;) {
			hex_of(id, 8, key + 32);
			if (!all_zero(id, 8) && !json_object_get(w->ids, key))
				break;
			unsigned char md[32];
			struct sha256 s;
			sha256_init(&s);
			sha256_update(&s, id, 8);
			sha256_final(&s, md);
			memcpy(id, md, 8);
		}
		json_object_set_new(w->ids, key, json_true());
	}
}

static json_t *ns_json(uint64_t ns)
{
	char n[32];
	snprintf(n, sizeof n, "%llu", (unsigned long long)ns); /* fixed64: a decimal string */
	return json_string(n);
}

/* The run span's attributes and status, now that the run has been read. */
static void finish_run_span(struct otlp_ws *w, struct span *s)
{
	struct run *r = w->r;
	json_t *a = s->attrs;
	const json_t *name = json_object_get(w->manifest, "name");
	const json_t *eps = json_object_get(w->manifest, "modelEndpoints");
	const json_t *first = json_array_get(eps, 0);
	buf_adds(&s->name, "invoke_agent");
	if (json_is_string(name)) {
		buf_addc(&s->name, ' ');
		buf_add(&s->name, json_string_value(name), json_string_length(name));
		set_str(a, "gen_ai.agent.name", name);
	}
	set_cstr(a, "gen_ai.operation.name", "invoke_agent");
	set_cstr(a, "gen_ai.provider.name", provider_name(json_object_get(first, "provider")));
	if (json_array_size(eps) == 1)
		set_str(a, "gen_ai.request.model", json_object_get(first, "model"));
	set_int(a, "sfma.run", r->no);
	set_int(a, "sfma.trace.line", (long long)r->first_line);
	if (r->first_hash[0])
		set_cstr(a, "sfma.entry.hash", r->first_hash);
	set_int(a, "sfma.trace.first_line", (long long)r->first_line);
	set_int(a, "sfma.trace.last_line", (long long)r->last_line);
	set_int(a, "sfma.model_calls", r->calls);
	set_int(a, "sfma.hard_tier_failures", r->refusals);
	set_bool(a, "sfma.run.closed", r->closed);
	if (r->traceparent)
		set_str(a, "sfma.traceparent", r->traceparent);
	/* Does the workspace's record seal this run: it commits to this many
	 * lines, ending in this entry? */
	const json_t *in = json_object_get(w->record, "integrity");
	double entries;
	int sealed = ndjson_number_in(json_object_get(in, "entries"), 1, 9007199254740991.0, &entries) &&
	             entries == (double)r->last_line && r->last_hash[0] &&
	             str_is(json_object_get(in, "headHash"), r->last_hash);
	set_bool(a, "sfma.record.sealed", sealed);
	if (sealed) {
		set_bool_of(a, "sfma.dry_run", json_object_get(w->record, "dryRun"));
		set_int_of(a, "sfma.turns", json_object_get(w->record, "turns"), 0, 9007199254740991.0);
	}
	if (s->usage)
		usage_onto(a, s->usage);
	if (r->verdict) {
		set_str(a, "sfma.verdict", r->verdict);
		if (str_is(r->verdict, "completed")) {
			s->status = STATUS_OK;
		} else {
			set_str(a, "error.type", r->verdict);
			set_status(s, STATUS_ERROR, r->error ? r->error : r->verdict, "failed");
		}
	}
}

static void finish_loop_span(struct otlp_ws *w, struct span *s)
{
	json_t *a = s->attrs;
	const json_t *name = json_object_get(w->manifest, "name");
	const json_t *first = json_array_get(json_object_get(w->manifest, "modelEndpoints"), 0);
	buf_adds(&s->name, "invoke_agent");
	if (json_is_string(name)) {
		buf_addc(&s->name, ' ');
		buf_add(&s->name, json_string_value(name), json_string_length(name));
		set_str(a, "gen_ai.agent.name", name);
	}
	set_cstr(a, "gen_ai.operation.name", "invoke_agent");
	set_cstr(a, "gen_ai.provider.name", provider_name(json_object_get(first, "provider")));
	set_int(a, "sfma.loop", s->loop);
	if (s->usage)
		usage_onto(a, s->usage);
}

static json_t *span_json(const struct run *r, struct span *s, const char *trace_hex, uint32_t flags)
{
	char id[17], parent[17];
	hex_of(s->id, 8, id);
	json_t *o = json_pack("{s:s, s:s, s:s%, s:i, s:o, s:o, s:I}", "traceId", trace_hex, "spanId", id, "name",
	                      s->name.p ? s->name.p : "", s->name.len, "kind", s->kind, "startTimeUnixNano",
	                      ns_json(s->ns_start), "endTimeUnixNano", ns_json(s->ns_end), "flags", (json_int_t)flags);
	if (s->parent >= 0) {
		hex_of(r->sp[s->parent].id, 8, parent);
		json_object_set_new(o, "parentSpanId", json_string(parent));
	} else if (r->traceparent) {
		/* the caller's span the run joined (traceparent's parent-id) */
		json_object_set_new(o, "parentSpanId", json_stringn(json_string_value(r->traceparent) + 36, 16));
	}
	json_object_set_new(o, "attributes", kv_array(s->attrs));
	s->attrs = NULL;
	if (s->nev) {
		json_t *evs = json_array();
		for (size_t i = 0; i < s->nev; i++) {
			json_array_append_new(evs, json_pack("{s:o, s:s, s:o}", "timeUnixNano", ns_json(time_of(r, s->ev[i].at)),
			                                     "name", s->ev[i].name, "attributes", kv_array(s->ev[i].attrs)));
			s->ev[i].attrs = NULL;
		}
		json_object_set_new(o, "events", evs);
	}
	if (s->status != STATUS_UNSET) {
		json_t *st = json_pack("{s:i}", "code", s->status);
		if (s->status == STATUS_ERROR && s->status_msg)
			json_object_set(st, "message", s->status_msg);
		json_object_set_new(o, "status", st);
	}
	return o;
}

static void free_run(struct run *r)
{
	for (size_t i = 0; i < r->nsp; i++) {
		struct span *s = &r->sp[i];
		buf_free(&s->name);
		json_decref(s->attrs);
		json_decref(s->status_msg);
		json_decref(s->usage);
		for (size_t k = 0; k < s->nev; k++) {
			free(s->ev[k].name);
			json_decref(s->ev[k].attrs);
		}
		free(s->ev);
	}
	for (size_t i = 0; i < r->nloops; i++)
		json_decref(r->loops[i].native_ids);
	free(r->sp);
	free(r->an);
	free(r->loops);
	json_decref(r->tasks);
	json_decref(r->verdict);
	json_decref(r->error);
	json_decref(r->traceparent);
	free(r);
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

int otlp_run_end(struct otlp_ws *w)
{
	struct run *r = w->r;
	if (!r)
		return 0;
	if (!r->have_digest || r->nan == 0) { /* no line, or no time */
		w->r = NULL;
		free_run(r);
		return 0;
	}
	/* Ids: the trace is the run's (the first 16 bytes of its first
	 * entry's digest) or the caller's it joined; the run span is bytes
	 * 16 to 23 of that digest. */
	char trace_hex[33];
	if (r->traceparent)
		memcpy(trace_hex, json_string_value(r->traceparent) + 3, 32), trace_hex[32] = '\0';
	else
		hex_of(r->digest, 16, trace_hex);
	if (all_zero(r->digest, 16) && !r->traceparent)
		memcpy(trace_hex, "00000000000000000000000000000001", 33); /* all zeros is no trace id */
	memcpy(r->sp[0].id, r->digest + 16, 8);
	unique_ids(w, r, trace_hex);
	uint32_t tflags = FLAG_SAMPLED;
	if (r->traceparent) {
		unsigned f = 0;
		sscanf(json_string_value(r->traceparent) + 53, "%2x", &f);
		tflags = f & 0xffu;
	}

	/* Times: each span's own and its events', then every parent stretched
	 * over its children (a loop from its first entry to its last, the run
	 * from its opening anchor to its closing one). A parent comes before
	 * its children in the list, so one pass backwards suffices. */
	for (size_t i = 0; i < r->nsp; i++) {
		struct span *s = &r->sp[i];
		s->ns_start = time_of(r, s->start);
		s->ns_end = max_u64(time_of(r, s->end), s->ns_start);
		for (size_t k = 0; k < s->nev; k++)
			s->ns_end = max_u64(s->ns_end, time_of(r, s->ev[k].at));
	}
	struct span *run = &r->sp[0];
	run->ns_start = r->an[0].wall;
	run->ns_end = max_u64(run->ns_end, r->an[r->nan - 1].wall);
	for (size_t i = r->nsp; i-- > 1;) {
		struct span *s = &r->sp[i], *p = &r->sp[s->parent];
		p->ns_start = min_u64(p->ns_start, s->ns_start);
		p->ns_end = max_u64(p->ns_end, s->ns_end);
	}

	for (size_t i = 0; i < r->nsp; i++) {
		if (i == 0)
			finish_run_span(w, &r->sp[0]);
		else if (r->sp[i].loop)
			finish_loop_span(w, &r->sp[i]);
		/* whether the parent is remote is known for every span that has
		 * one: only the run's, when it joined the caller's trace */
		uint32_t flags = tflags;
		if (i > 0 || r->traceparent)
			flags |= FLAG_HAS_IS_REMOTE | (i == 0 ? FLAG_IS_REMOTE : 0);
		json_array_append_new(w->spans, span_json(r, &r->sp[i], trace_hex, flags));
	}
	w->nspans += r->nsp;
	w->ntraces++;
	w->r = NULL;
	free_run(r);
	return 1;
}

json_t *otlp_ws_finish(struct otlp_ws *w, size_t *spans, size_t *traces)
{
	if (w->r)
		otlp_run_end(w);
	json_t *res = json_object();
	set_cstr(res, "service.name", "sfma");
	set_str(res, "service.version", json_object_get(w->record, "runnerVersion"));
	set_cstr(res, "sfma.semconv.version", OTLP_SEMCONV_VERSION);
	if (w->o.workspace) /* a path is bytes; JSON text is UTF-8 */
		set_av(res, "sfma.workspace", json_pack("{s:o}", "stringValue",
		                                         utf8_json(w->o.workspace, strlen(w->o.workspace))));
	set_str(res, "sfma.manifest.name", json_object_get(w->manifest, "name"));
	const json_t *in = json_object_get(w->record, "integrity");
	set_str(res, "sfma.manifest.sha256", json_object_get(in, "manifestSha256"));
	set_str(res, "sfma.record.head_hash", json_object_get(in, "headHash"));
	set_str(res, "sfma.record.verdict", json_object_get(w->record, "verdict"));
	json_t *scope = json_pack("{s:s}", "name", OTLP_SCOPE_NAME);
	if (w->o.version)
		json_object_set_new(scope, "version", json_string(w->o.version));
	json_t *out = json_pack("{s:{s:o}, s:[{s:o, s:o, s:s}], s:s}", "resource", "attributes", kv_array(res),
	                        "scopeSpans", "scope", scope, "spans", w->spans, "schemaUrl", OTLP_SCHEMA_URL,
	                        "schemaUrl", OTLP_SCHEMA_URL);
	if (spans)
		*spans = w->nspans;
	if (traces)
		*traces = w->ntraces;
	json_decref(w->ids);
	free(w);
	return out;
}

json_t *otlp_request(json_t *resource_spans)
{
	return json_pack("{s:o}", "resourceSpans", resource_spans);
}
