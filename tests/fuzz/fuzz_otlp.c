/* fuzz_otlp.c - a hostile trace through the OTLP mapping of sfma-export
 * (lib/otlp.c), and a hostile OTEL_EXPORTER_OTLP_HEADERS through its
 * reader (lib/otelheaders.c).
 *
 * The input is the trace; its last line, when it is a JSON object with an
 * "integrity" member, is also the record (else a record whose manifest
 * names endpoints of every provider). It is split into runs as every
 * reader splits it (rv_split_feed) and mapped without and with content,
 * over a store whose blobs are native replies, tool messages, tool
 * results and hostile bytes, some longer than the clip. The first line
 * is also read as a headers variable. Properties:
 *  - the request is canonical JSON that reads back as the same bytes,
 *    and mapping the same input again gives the same bytes;
 *  - every span has a 32-hex trace id and a 16-hex span id, neither all
 *    zeros, unique in its trace; a kind; 0 < start <= end as decimal
 *    strings of at most 2^63 - 1; each parent is a span of the same trace, whose
 *    times hold the child's (or the caller's span, for a run span); every
 *    event inside its span; one root per run;
 *  - attributes are sorted by key, each once, each value one AnyValue;
 *  - a headers list parsed is of [key, value] pairs whose keys are tokens
 *    and whose values hold no control character. */
#include "fuzz.h"
#include "lib/buf.h"
#include "lib/canon.h"
#include "lib/ndjson.h"
#include "lib/otelheaders.h"
#include "lib/otlp.h"
#include "lib/runview.h"

#define MAX_LINES 4096

static const char native_anthropic[] =
	"{\"native\":[{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read\",\"input\":{\"path\":\"x\"}},"
	"{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"run\",\"input\":{\"cmd\":\"echo\"}}],"
	"\"provider\":\"anthropic\",\"text\":\"hi\"}";
static const char native_openai[] =
	"{\"native\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"write\",\"arguments\":\"{\\\"path\\\":1}\"}}],"
	"\"provider\":\"openai\",\"text\":\"\"}";
static const char *const blobs_by_digit[] = {
	native_anthropic,
	native_openai,
	"{\"role\":\"tool\",\"results\":[{\"content\":\"r\",\"id\":\"toolu_1\",\"name\":\"read\"},{\"content\":1}]}",
	"{\"toolResult\":\"exit=0\\nstdout:\\u0000\\u202e\"}",
	"\x1b[2J\xff\xfe\xc3 nul\r\n\tend",
	"", /* the clipped blob: built at start-up */
};
static char long_blob[OTLP_CONTENT_MAX + 64];

static char *read_blob(void *arg, const struct evidence_ref *ref, size_t max, size_t *len)
{
	(void)arg;
	unsigned d = (unsigned)(ref->sha256[0] % 6);
	const char *b = d == 5 ? long_blob : blobs_by_digit[d];
	size_t n = strlen(b);
	if (n > max)
		n = max;
	char *p = malloc(n + 1);
	if (!p)
		abort();
	memcpy(p, b, n);
	p[n] = '\0';
	*len = n;
	return p;
}

static const struct otlp_blobs blobs = {read_blob, NULL};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	/* two-byte characters across the clip */
	for (size_t i = 0; i + 2 <= sizeof long_blob - 1; i += 2)
		memcpy(long_blob + i, "\xc3\xa9", 2);
	long_blob[sizeof long_blob - 1] = '\0';
	if ((sizeof long_blob - 1) % 2)
		long_blob[sizeof long_blob - 2] = 'x';
	return 0;
}

static const char default_record[] =
	"{\"manifest\":{\"name\":\"fuzz\",\"modelEndpoints\":["
	"{\"name\":\"a\",\"provider\":\"anthropic\",\"model\":\"m\"},{\"name\":\"o\",\"provider\":\"openai\",\"model\":\"g\"},"
	"{\"name\":\"g\",\"provider\":\"gemini\",\"model\":\"x\"},{\"name\":\"mock\",\"provider\":\"mock\",\"model\":\"b\"}]},"
	"\"integrity\":{\"entries\":3,\"headHash\":\"00\"},\"runnerVersion\":\"0.3.0\"}";

struct line {
	const char *p;
	size_t n;
	uint64_t offset;
};

static int is_hex(const char *s, size_t n)
{
	int any = 0;
	for (size_t i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
		any |= s[i] != '0';
	}
	return any;
}

static unsigned long long ns_of(const json_t *v, const char *what)
{
	const char *s = json_string_value(v);
	FUZZ_CHECK(s && *s && strlen(s) <= 19, "%s is not a decimal string", what);
	for (const char *c = s; *c; c++)
		FUZZ_CHECK(*c >= '0' && *c <= '9', "%s is not a decimal string", what);
	FUZZ_CHECK(strlen(s) == 1 || s[0] != '0', "%s has a leading zero", what);
	unsigned long long x = strtoull(s, NULL, 10);
	FUZZ_CHECK(x <= 9223372036854775807ull, "%s past 2^63 - 1", what);
	return x;
}

static void check_attrs(const json_t *attrs, const char *where)
{
	FUZZ_CHECK(json_is_array(attrs), "%s: attributes not an array", where);
	const char *prev = NULL;
	size_t i;
	json_t *kv;
	json_array_foreach(attrs, i, kv) {
		const char *k = json_string_value(json_object_get(kv, "key"));
		FUZZ_CHECK(k && *k, "%s: an attribute without a key", where);
		FUZZ_CHECK(!prev || strcmp(prev, k) < 0, "%s: attributes not sorted, or %s twice", where, k);
		prev = k;
		json_t *v = json_object_get(kv, "value");
		FUZZ_CHECK(json_is_object(v) && json_object_size(v) == 1, "%s: %s holds not one value", where, k);
	}
}

static void check_request(const json_t *req, size_t runs)
{
	json_t *rs = json_array_get(json_object_get(req, "resourceSpans"), 0);
	FUZZ_CHECK(rs, "no resourceSpans");
	check_attrs(json_object_get(json_object_get(rs, "resource"), "attributes"), "resource");
	json_t *spans = json_object_get(json_array_get(json_object_get(rs, "scopeSpans"), 0), "spans");
	FUZZ_CHECK(json_is_array(spans), "no spans");
	size_t n = json_array_size(spans), roots = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_array_get(spans, i);
		const char *tid = json_string_value(json_object_get(s, "traceId"));
		const char *sid = json_string_value(json_object_get(s, "spanId"));
		FUZZ_CHECK(tid && strlen(tid) == 32 && is_hex(tid, 32), "span %zu: bad trace id", i);
		FUZZ_CHECK(sid && strlen(sid) == 16 && is_hex(sid, 16), "span %zu: bad span id", i);
		long long kind;
		FUZZ_CHECK(ndjson_integer(json_object_get(s, "kind"), &kind) && (kind == 1 || kind == 3), "span %zu: kind", i);
		FUZZ_CHECK(json_string_length(json_object_get(s, "name")) > 0, "span %zu: no name", i);
		unsigned long long st = ns_of(json_object_get(s, "startTimeUnixNano"), "start");
		unsigned long long en = ns_of(json_object_get(s, "endTimeUnixNano"), "end");
		FUZZ_CHECK(st <= en, "span %zu ends before it starts", i);
		FUZZ_CHECK(st > 0, "span %zu starts at 0, OTLP's unknown time", i);
		check_attrs(json_object_get(s, "attributes"), "span");
		size_t k;
		json_t *ev;
		json_array_foreach(json_object_get(s, "events"), k, ev) {
			unsigned long long t = ns_of(json_object_get(ev, "timeUnixNano"), "event time");
			FUZZ_CHECK(t >= st && t <= en, "span %zu: an event outside it", i);
			check_attrs(json_object_get(ev, "attributes"), "event");
		}
		json_t *status = json_object_get(s, "status");
		long long code = 0;
		FUZZ_CHECK(!status || (ndjson_integer(json_object_get(status, "code"), &code) && code >= 1 && code <= 2),
		           "span %zu: status", i);
		const char *pid = json_string_value(json_object_get(s, "parentSpanId"));
		int found = 0, is_run = 0;
		json_array_foreach(json_object_get(s, "attributes"), k, ev)
			is_run |= strcmp(json_string_value(json_object_get(ev, "key")), "sfma.run") == 0;
		for (size_t j = 0; j < n; j++) {
			json_t *o = json_array_get(spans, j);
			if (strcmp(json_string_value(json_object_get(o, "traceId")), tid) != 0)
				continue;
			const char *oid = json_string_value(json_object_get(o, "spanId"));
			FUZZ_CHECK(j == i || strcmp(oid, sid) != 0, "span id %s twice in trace %s", sid, tid);
			if (pid && strcmp(oid, pid) == 0) {
				found = 1;
				FUZZ_CHECK(ns_of(json_object_get(o, "startTimeUnixNano"), "start") <= st &&
				           ns_of(json_object_get(o, "endTimeUnixNano"), "end") >= en,
				           "span %zu is not inside its parent", i);
			}
		}
		if (!found) {
			FUZZ_CHECK(is_run, "span %zu: its parent is not in its trace and it is no run span", i);
			FUZZ_CHECK(!pid || (strlen(pid) == 16 && is_hex(pid, 16)), "span %zu: bad parent id", i);
			roots++;
		}
	}
	FUZZ_CHECK(roots == runs, "%zu roots for %zu runs", roots, runs);
}

/* The whole request, mapped with content or without, as canonical bytes. */
static char *map(const struct line *lines, size_t nl, const struct rv_splitter *split, const json_t *record,
                 int content, size_t *len, size_t *runs)
{
	struct otlp_opts o = {.content = content, .blobs = &blobs, .workspace = "ws", .version = "fuzz"};
	struct otlp_ws *w = otlp_ws_new(record, &o);
	for (size_t r = 0; r < split->n; r++) {
		otlp_run_begin(w, (long)r + 1);
		for (uint64_t l = split->runs[r].first_line; l <= split->runs[r].last_line && l <= nl; l++)
			otlp_run_line(w, lines[l - 1].p, lines[l - 1].n, l);
		otlp_run_end(w);
	}
	size_t spans, traces;
	json_t *rs = otlp_ws_finish(w, &spans, &traces);
	json_t *req = otlp_request(json_pack("[o]", rs));
	struct buf b = {0};
	struct sfma_err e;
	FUZZ_CHECK(canon_dump(req, &b, &e) == 0, "no canonical form: %s", e.text);
	/* read back (every number a double, as JSON.parse reads it), the
	 * same canonical bytes */
	json_t *back = ndjson_parse(b.p, b.len, &e);
	FUZZ_CHECK(back, "the request does not parse: %s", e.text);
	struct buf again = {0};
	FUZZ_CHECK(canon_dump(back, &again, &e) == 0 && again.len == b.len && memcmp(again.p, b.p, b.len) == 0,
	           "the request does not read back as itself");
	buf_free(&again);
	json_decref(back);
	*runs = traces;
	check_request(req, traces);
	json_decref(req);
	*len = b.len;
	return b.p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct line lines[MAX_LINES];
	size_t nl = 0, start = 0;
	for (size_t i = 0; i < size && nl < MAX_LINES; i++)
		if (data[i] == '\n') {
			lines[nl++] = (struct line){(const char *)data + start, i - start, start};
			start = i + 1;
		}
	/* the first line as a headers variable */
	if (nl) {
		char *h = fuzz_strndup(data, lines[0].n);
		json_t *pairs;
		struct sfma_err e;
		if (strlen(h) == lines[0].n && otel_headers_parse(h, &pairs, &e) == 0) {
			size_t i;
			json_t *p;
			json_array_foreach(pairs, i, p) {
				const json_t *k = json_array_get(p, 0), *v = json_array_get(p, 1);
				FUZZ_CHECK(json_string_length(k) > 0 && strcspn(json_string_value(k), " \t:=,;\"") ==
				           json_string_length(k), "a header key that is no token");
				for (size_t c = 0; c < json_string_length(v); c++) {
					unsigned char ch = (unsigned char)json_string_value(v)[c];
					FUZZ_CHECK(ch >= 0x20 && ch != 0x7f, "a control character in a header value");
				}
			}
			json_decref(pairs);
		}
		free(h);
	}

	struct rv_splitter split;
	rv_split_init(&split);
	json_t *record = NULL;
	for (size_t i = 0; i < nl; i++) {
		struct sfma_err e;
		json_t *entry = ndjson_parse(lines[i].p, lines[i].n, &e);
		rv_split_feed(&split, json_is_object(entry) ? entry : NULL, lines[i].offset);
		if (i == nl - 1 && json_is_object(json_object_get(entry, "integrity")))
			record = json_incref(entry);
		json_decref(entry);
	}
	if (!record)
		record = ndjson_parse(default_record, sizeof default_record - 1, &(struct sfma_err){{0}});
	for (int content = 0; content < 2; content++) {
		size_t n1, n2, runs1, runs2;
		char *a = map(lines, nl, &split, record, content, &n1, &runs1);
		char *b = map(lines, nl, &split, record, content, &n2, &runs2);
		FUZZ_CHECK(n1 == n2 && memcmp(a, b, n1) == 0, "the same input mapped to other bytes");
		FUZZ_CHECK(runs1 == runs2 && runs1 <= split.n, "%zu traces of %zu runs", runs1, split.n);
		free(a);
		free(b);
	}
	json_decref(record);
	rv_split_free(&split);
	return 0;
}
