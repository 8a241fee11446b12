/* runview.c - runs and rows out of a trace, for the programs that show one. */
#include "runview.h"
#include "buf.h"
#include "clock.h"
#include "evidence.h"
#include "ndjson.h"
#include "record.h"
#include "linediff.h"
#include "sha.h"
#include "tools.h"
#include "utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Wall times outside year 0..9999 are not shown as times (gmtime would
 * fail on them and an int64 cast of a huge double is undefined). */
#define WALL_MS_MAX 253402300799999.0
/* A duration above a day in one entry is not a duration we can draw. */
#define DURATION_MS_MAX 86400000.0
/* Evidence items are hashed in full up to this size, then called altered:
 * a reader must stay bounded even over a hostile blob. */
#define EVIDENCE_MAX_BYTES (1ull << 30)
#define MAX_REFS_PER_ROW 16
/* A row's one line of text is cut here (its fields keep the whole value). */
#define DISPLAY_MAX 4096

/* ---- strings ----------------------------------------------------------- */

const char *rv_str(const json_t *v, size_t *len)
{
	if (!json_is_string(v))
		return NULL;
	if (len)
		*len = json_string_length(v);
	return json_string_value(v);
}

static int str_is(const json_t *v, const char *s)
{
	const char *p = json_string_value(v);
	return p && strcmp(p, s) == 0;
}

static void add_str(struct buf *b, const json_t *v)
{
	size_t n;
	const char *s = rv_str(v, &n);
	if (s)
		buf_add(b, s, n);
}

/* A number as JSON: an integer when it is one (so 12 prints as 12, not 12.0). */
static json_t *num_json(double d)
{
	if (isfinite(d) && d == floor(d) && fabs(d) <= 9007199254740991.0)
		return json_integer((json_int_t)d);
	return json_real(d);
}

static uint32_t decode(const unsigned char *s, size_t n)
{
	if (n == 1)
		return s[0];
	if (n == 2)
		return ((uint32_t)(s[0] & 0x1f) << 6) | (s[1] & 0x3f);
	if (n == 3)
		return ((uint32_t)(s[0] & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
	return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) |
	       ((uint32_t)(s[2] & 0x3f) << 6) | (s[3] & 0x3f);
}

/* Code points a terminal or a reader could be fooled by: C1 controls
 * (0x9b is CSI on many terminals), zero-width and direction marks, line
 * and paragraph separators, bidirectional embeddings and isolates
 * (CVE-2021-42574, "Trojan Source"), the byte-order mark. */
static int invisible(uint32_t cp)
{
	return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x200b && cp <= 0x200f) || cp == 0x2028 ||
	       cp == 0x2029 || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2069) ||
	       cp == 0xfeff;
}

static void visible(struct buf *out, const char *str, size_t n, size_t max_chars, int block);

void rv_visible(struct buf *out, const char *str, size_t n, size_t max_chars)
{
	visible(out, str, n, max_chars, 0);
}

void rv_visible_block(struct buf *out, const char *str, size_t n)
{
	visible(out, str, n, 0, 1);
}

/* In a block the text keeps its lines (the caller splits them) and its
 * tabs, and a backslash is itself: what is read there is the text, as a
 * reviewer would read the file; the rest is made visible as on a row. */
static void visible(struct buf *out, const char *str, size_t n, size_t max_chars, int block)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t chars = 0;
	for (size_t i = 0; i < n;) {
		if (max_chars && chars >= max_chars) {
			buf_adds(out, "...");
			return;
		}
		chars++;
		unsigned char c = s[i];
		if (block && (c == '\t' || c == '\\')) {
			buf_addc(out, (char)c);
			i++;
			continue;
		}
		if (c < 0x20 || c == 0x7f) {
			if (c == '\n')
				buf_adds(out, "\\n");
			else if (c == '\t')
				buf_adds(out, "\\t");
			else if (c == '\r')
				buf_adds(out, "\\r");
			else
				buf_printf(out, "\\x%02x", c);
			i++;
			continue;
		}
		if (c == '\\') {
			buf_adds(out, "\\\\");
			i++;
			continue;
		}
		if (c < 0x80) {
			buf_addc(out, (char)c);
			i++;
			continue;
		}
		size_t k = utf8_seq(s + i, n - i);
		if (!k) {
			buf_printf(out, "\\x%02x", c);
			i++;
			continue;
		}
		uint32_t cp = decode(s + i, k);
		if (invisible(cp))
			buf_printf(out, "\\u{%04x}", (unsigned)cp);
		else
			buf_add(out, s + i, k);
		i += k;
	}
}

/* s[0..n) as valid UTF-8: bytes that are not become U+FFFD, and a sequence
 * cut by the end is dropped. */
static json_t *lossy_string(const unsigned char *s, size_t n, int cut)
{
	struct buf b = {0};
	for (size_t i = 0; i < n;) {
		size_t k = utf8_seq(s + i, n - i);
		if (k) {
			buf_add(&b, s + i, k);
			i += k;
		} else if (cut && n - i < 4 && s[i] >= 0xc2) {
			break; /* a sequence the clip cut short */
		} else {
			buf_adds(&b, "\xef\xbf\xbd");
			i++;
		}
	}
	json_t *v = json_stringn(b.p ? b.p : "", b.len);
	buf_free(&b);
	return v;
}

/* ---- runs --------------------------------------------------------------- */

void rv_split_init(struct rv_splitter *s)
{
	memset(s, 0, sizeof *s);
}

void rv_split_free(struct rv_splitter *s)
{
	free(s->runs);
	memset(s, 0, sizeof *s);
}

static void push_run(struct rv_splitter *s, uint64_t line, uint64_t offset)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 8;
		s->runs = xrealloc(s->runs, s->cap * sizeof *s->runs);
	}
	s->runs[s->n++] = (struct rv_run){.first_line = line, .last_line = line, .offset = offset};
}

/* The entries a run may write before its opening clock-anchor: a record of
 * its predecessor's interruption, or of a torn write recovered. */
static int opens_run(const char *kind, const json_t *data)
{
	if (!kind || strcmp(kind, "result") != 0)
		return 0;
	return json_is_object(json_object_get(data, "interrupted")) ||
	       str_is(json_object_get(data, "error"), "torn-write-recovered");
}

int rv_split_feed(struct rv_splitter *s, const json_t *entry, uint64_t offset)
{
	uint64_t line = ++s->lines;
	const char *kind = json_string_value(json_object_get(entry, "kind"));
	json_t *data = json_object_get(entry, "data");
	int began = 0;
	if (s->n == 0) {
		push_run(s, line, offset);
		began = 1;
	}
	struct rv_run *cur = &s->runs[s->n - 1];
	cur->last_line = line;
	json_t *from = json_object_get(data, "from");
	if (kind && strcmp(kind, "lifecycle") == 0 && from && json_is_null(from)) {
		if (cur->marked) {
			uint64_t start = s->cand_line ? s->cand_line : line;
			uint64_t start_off = s->cand_line ? s->cand_offset : offset;
			cur->last_line = start - 1;
			push_run(s, start, start_off);
			s->runs[s->n - 1].last_line = line;
			began = 1;
		}
		s->runs[s->n - 1].marked = 1;
		s->cand_line = s->pre_line = 0;
		return began;
	}
	if (kind && strcmp(kind, "clock-anchor") == 0) {
		s->cand_line = s->pre_line ? s->pre_line : line;
		s->cand_offset = s->pre_line ? s->pre_offset : offset;
		s->pre_line = 0;
	} else if (opens_run(kind, data)) {
		if (!s->pre_line) {
			s->pre_line = line;
			s->pre_offset = offset;
		}
	} else {
		s->pre_line = 0;
	}
	return began;
}

int rv_split_fd(int fd, struct rv_splitter *s, int *torn, struct sfma_err *e)
{
	struct line_reader r;
	*torn = 0;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return err_set(e, "seek: %s", strerror(errno));
	lr_init(&r, fd, RV_MAX_LINE);
	for (;;) {
		char *line;
		size_t len;
		struct sfma_err le;
		int rc = lr_next(&r, &line, &len, &le);
		if (rc == 0)
			break;
		if (rc == 1) {
			json_t *entry = ndjson_parse(line, len, &le);
			rv_split_feed(s, json_is_object(entry) ? entry : NULL, r.offset);
			json_decref(entry);
			continue;
		}
		if (r.torn) {
			*torn = 1;
			break;
		}
		if (!strstr(le.text, "longer than")) {
			lr_free(&r);
			return err_set(e, "%s", le.text);
		}
		rv_split_feed(s, NULL, r.consumed + r.start);
		if (!lr_skip_line(&r))
			break;
	}
	lr_free(&r);
	return 0;
}

long rv_pick(const struct rv_splitter *s, long n)
{
	if (n >= 1 && (size_t)n <= s->n)
		return n - 1;
	if (n <= -1 && (size_t)(-n) <= s->n)
		return (long)s->n + n;
	return -1;
}

/* ---- evidence ----------------------------------------------------------- */

/* The evidence item sha (64 hex, checked by the caller) of bytes bytes:
 * {"field","sha256","bytes","state":"present"|"missing"|"altered",
 *  "text"?,"clipped"?}. Text only for an item whose size and digest match. */
static json_t *evidence_item(const struct rv_view *v, const char *field, const char *sha, double bytes)
{
	json_t *item = json_pack("{s:s, s:s, s:o}", "field", field, "sha256", sha, "bytes", num_json(bytes));
	/* The store's own reader: a blob filed, or one of a live run still in
	 * the store's journal, checked against its size and digest. */
	struct evidence_ref ref;
	memcpy(ref.sha256, sha, SHA256_HEX_LEN + 1);
	ref.bytes = bytes >= 0 && bytes <= 9007199254740991.0 ? (uint64_t)bytes : UINT64_MAX;
	size_t have = 0;
	char *head = xmalloc(v->clip + 2);
	struct sfma_err e;
	enum evidence_state st = v->store && ref.bytes <= EVIDENCE_MAX_BYTES
	    ? evidence_head(v->store, &ref, head, v->clip, &have, &e) : EVIDENCE_MISSING;
	if (v->store && ref.bytes > EVIDENCE_MAX_BYTES)
		st = EVIDENCE_ALTERED;
	if (st == EVIDENCE_OK) {
		json_object_set_new(item, "state", json_string("present"));
		json_object_set_new(item, "text", lossy_string((unsigned char *)head, have, ref.bytes > have));
		json_object_set_new(item, "clipped", json_boolean(ref.bytes > have));
	} else {
		/* a store that cannot be read says so as "missing": nothing is shown */
		json_object_set_new(item, "state", json_string(st == EVIDENCE_ALTERED ? "altered" : "missing"));
	}
	free(head);
	return item;
}

/* An object with a digest and a size, {"sha256":HEX,"bytes":N,...}: a
 * mutation's record of what it wrote. */
static int is_digest(const json_t *o, const char **sha)
{
	size_t n;
	const char *s = rv_str(json_object_get(o, "sha256"), &n);
	double bytes;
	if (!json_is_object(o) || !s || !is_sha256_hex(s, n) ||
	    !ndjson_number_in(json_object_get(o, "bytes"), 0, 9007199254740991.0, &bytes) || bytes != floor(bytes))
		return 0;
	*sha = s;
	return 1;
}

struct collect {
	const struct rv_view *v;
	json_t *out;
};

static int collect_one(void *arg, const char *name, const struct evidence_ref *ref)
{
	struct collect *c = arg;
	if (json_array_size(c->out) >= MAX_REFS_PER_ROW)
		return 1;
	json_array_append_new(c->out, evidence_item(c->v, name, ref->sha256, (double)ref->bytes));
	return 0;
}

/* The entry's references: its top-level "evidence" member and nothing
 * else (sfma-formats(5), Evidence) - an object of the same shape inside
 * data is data, and a model that writes one (a candidate is the model's
 * own object) makes this reader open no blob. A malformed member (the
 * trace then does not verify) yields the references before the fault. */
static void collect_refs(const struct rv_view *v, const json_t *entry, json_t *out)
{
	struct collect c = {v, out};
	uint64_t count;
	struct sfma_err e;
	(void)evidence_entry_refs(entry, collect_one, &c, &count, &e);
}

/* The text of the first item whose field name contains one of the words
 * (NULL: any), when its blob is present; a word that begins with '=' is
 * the whole name. */
static json_t *evidence_text(const json_t *items, const char *const *words)
{
	size_t i;
	json_t *it;
	json_array_foreach(items, i, it) {
		if (!json_object_get(it, "text"))
			continue;
		const char *f = json_string_value(json_object_get(it, "field"));
		if (!words)
			return json_object_get(it, "text");
		for (const char *const *w = words; *w; w++)
			if (f && (**w == '=' ? strcmp(f, *w + 1) == 0 : strstr(f, *w) != NULL))
				return json_object_get(it, "text");
	}
	return NULL;
}

/* The runner's message as it was sent (sfma-formats(5), Evidence):
 * {"toolResult":TEXT}, or after native calls the tool message
 * {"results":[{"content","id","name"},...],"role":"tool"}. Returns the
 * parsed message when the text is whole and is exactly one of them (new
 * reference), else NULL. */
static json_t *runner_message(const json_t *shown)
{
	size_t n;
	const char *s = rv_str(shown, &n);
	json_t *msg = s ? json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
	if (json_is_string(json_object_get(msg, "toolResult")) && json_object_size(msg) == 1)
		return msg;
	json_t *results = json_object_get(msg, "results");
	int tool = json_is_array(results) && json_array_size(results) > 0 && json_object_size(msg) == 2 &&
	           str_is(json_object_get(msg, "role"), "tool");
	size_t i;
	json_t *r;
	json_array_foreach(tool ? results : NULL, i, r)
		tool &= json_is_object(r) && json_is_string(json_object_get(r, "content"));
	if (tool)
		return msg;
	json_decref(msg);
	return NULL;
}

/* A tool's output is kept as the message the model got: shown as its
 * text - the toolResult, or the first result of a tool message (the one
 * call carried out) - when the item is whole and is exactly that; as it
 * is otherwise. New reference. */
static json_t *tool_result_text(json_t *shown)
{
	json_t *msg = runner_message(shown);
	json_t *text = json_object_get(msg, "toolResult");
	if (!text)
		text = json_object_get(json_array_get(json_object_get(msg, "results"), 0), "content");
	json_t *out = json_incref(text ? text : shown);
	json_decref(msg);
	return out;
}

/* The message a call sent, in the runner's words: sent (its text) and,
 * for a tool message, sentResults [{"id","name","content"}]. */
static void decode_sent(json_t *row, json_t *shown)
{
	json_t *msg = runner_message(shown);
	json_t *results = json_object_get(msg, "results");
	if (results) {
		json_t *list = json_array();
		size_t i;
		json_t *r;
		json_array_foreach(results, i, r) {
			json_t *one = json_object();
			static const char *const keys[] = {"id", "name", "content"};
			for (size_t k = 0; k < 3; k++)
				if (json_is_string(json_object_get(r, keys[k])))
					json_object_set(one, keys[k], json_object_get(r, keys[k]));
			json_array_append_new(list, one);
		}
		json_object_set_new(row, "sentResults", list);
	}
	json_object_set_new(row, "sent", tool_result_text(shown));
	json_decref(msg);
}

/* One provider call object, read leniently when tools_from_native cannot
 * read them all: its name, and its input as an object when it is one (or
 * JSON text of one), else as it came. New reference, or NULL. */
static json_t *native_call_shown(const json_t *c)
{
	json_t *fn = json_object_get(c, "function"), *fc = json_object_get(c, "functionCall");
	json_t *name = json_object_get(c, "name");
	json_t *input = json_object_get(c, "input");
	if (json_is_object(fn)) {
		name = json_object_get(fn, "name");
		input = json_object_get(fn, "arguments");
	} else if (json_is_object(fc)) {
		name = json_object_get(fc, "name");
		input = json_object_get(fc, "args");
	} else if (!input) {
		input = json_object_get(c, "arguments");
	}
	if (!json_is_string(name))
		return NULL;
	json_t *out = json_pack("{s:O}", "name", name);
	size_t n;
	const char *text = rv_str(input, &n);
	json_t *parsed = text ? json_loadb(text, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
	if (json_is_object(parsed))
		json_object_set_new(out, "input", parsed);
	else {
		json_decref(parsed);
		if (input)
			json_object_set(out, "input", input);
	}
	const char *id = json_string_value(json_object_get(c, "id"));
	if (!id)
		id = json_string_value(json_object_get(c, "call_id"));
	if (id)
		json_object_set_new(out, "id", json_string(id));
	return out;
}

/* A native reply is kept as {"native":[...],"provider":P,"text":T}, the
 * provider's objects as received: shown as its text (replyText) and its
 * calls by name and input (replyCalls), read as sfma-model reads them
 * (lib/tools.h), else each as leniently as it can be. */
static void decode_reply(json_t *row, const json_t *shown)
{
	size_t n;
	const char *s = rv_str(shown, &n);
	json_t *blob = s && n && s[0] == '{' ? json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
	json_t *native = json_object_get(blob, "native"), *text = json_object_get(blob, "text");
	const char *provider = json_string_value(json_object_get(blob, "provider"));
	if (!json_is_array(native) || !json_is_string(text) || !provider || json_object_size(blob) != 3) {
		json_decref(blob);
		return;
	}
	json_object_set(row, "replyText", text);
	json_object_set_new(row, "replyProvider", json_string(provider));
	struct sfma_err e;
	json_t *calls = tools_from_native(provider, native, &e);
	if (!calls) {
		calls = json_array();
		size_t i;
		json_t *c;
		json_array_foreach(native, i, c) {
			json_t *one = json_is_object(c) ? native_call_shown(c) : NULL;
			if (one)
				json_array_append_new(calls, one);
		}
	}
	json_object_set_new(row, "replyCalls", calls);
	json_decref(blob);
}

/* ---- rows --------------------------------------------------------------- */

void rv_view_init(struct rv_view *v, int sfma_dirfd, long run, size_t clip)
{
	memset(v, 0, sizeof *v);
	v->sfma_dirfd = sfma_dirfd;
	struct sfma_err e;
	v->store = evidence_open(sfma_dirfd, 0, &e);
	v->run = run;
	v->clip = clip ? clip : 4096;
	v->tasks = json_object();
	v->writes = json_object();
	v->summaries = json_array();
	v->acceptance = json_array();
}

void rv_view_free(struct rv_view *v)
{
	evidence_close(v->store);
	json_decref(v->tasks);
	json_decref(v->usage);
	json_decref(v->verdict);
	json_decref(v->summary);
	json_decref(v->halt_error);
	json_decref(v->writes);
	json_decref(v->write_paths);
	json_decref(v->summaries);
	json_decref(v->acceptance);
	memset(v, 0, sizeof *v);
}

/* The last write of each path: what a later write of it is shown against. */
static void note_write(struct rv_view *v, const json_t *data, uint64_t line_no)
{
	const char *path = json_string_value(json_object_get(data, "path"));
	const char *sha;
	if (!path || !is_digest(data, &sha))
		return;
	json_object_set_new(v->writes, path,
	                    json_pack("{s:s, s:o, s:I, s:b}", "sha256", sha, "bytes",
	                              num_json(json_number_value(json_object_get(data, "bytes"))), "line",
	                              (json_int_t)line_no, "applied", !json_is_false(json_object_get(data, "applied"))));
}

void rv_note_earlier(struct rv_view *v, const char *line, size_t len, uint64_t line_no)
{
	/* Only a line that names a mutation is worth parsing. */
	if (!memmem(line, len, "\"mutation\"", 10))
		return;
	struct sfma_err e;
	json_t *entry = ndjson_parse(line, len, &e);
	json_t *data = json_object_get(entry, "data");
	if (str_is(json_object_get(entry, "kind"), "mutation") && json_is_object(data))
		note_write(v, data, line_no);
	json_decref(entry);
}

void rv_pass_writes(struct rv_view *from, struct rv_view *to)
{
	json_decref(to->writes);
	to->writes = json_incref(from->writes);
}

static int terminal_state(const char *to)
{
	return to && (strcmp(to, "completed") == 0 || strcmp(to, "failed") == 0 || strncmp(to, "halted", 6) == 0);
}

/* The kinds a row is made for; everything else is K_OTHER, and an entry
 * whose kind is not a string K_NONE. Compared as C strings, as the chain
 * and the record readers compare them (lib/chain.c, lib/record.c). */
enum kind {
	K_NONE, K_OTHER, K_CLOCK_ANCHOR, K_LIFECYCLE, K_MESSAGE, K_CLARIFICATION, K_CALL, K_CANDIDATE,
	K_TASK, K_VERDICT, K_MUTATION, K_RESULT, K_WEIGHT, K_STORE, K_COMPACTION, K_CONFINEMENT,
};

static enum kind kind_of(const json_t *kind)
{
	static const char *const names[] = {
		[K_CLOCK_ANCHOR] = "clock-anchor", [K_LIFECYCLE] = "lifecycle", [K_MESSAGE] = "message",
		[K_CLARIFICATION] = "clarification", [K_CALL] = "call", [K_CANDIDATE] = "candidate",
		[K_TASK] = "task", [K_VERDICT] = "verdict", [K_MUTATION] = "mutation", [K_RESULT] = "result",
		[K_WEIGHT] = "weight", [K_STORE] = "store", [K_COMPACTION] = "compaction",
		[K_CONFINEMENT] = "confinement",
	};
	const char *s = json_string_value(kind);
	if (!s)
		return K_NONE;
	for (size_t k = K_CLOCK_ANCHOR; k < sizeof names / sizeof *names; k++)
		if (strcmp(s, names[k]) == 0)
			return (enum kind)k;
	return K_OTHER;
}

/* A copy of v with every integral number as an integer: the strict parser
 * reads all numbers as doubles, and 7 should print as 7, not 7.0. */
static json_t *tidy(const json_t *v, int depth)
{
	if (json_is_real(v))
		return num_json(json_real_value(v));
	if (depth > 32)
		return json_incref((json_t *)v);
	if (json_is_object(v)) {
		json_t *o = json_object();
		const char *k;
		json_t *x;
		json_object_foreach((json_t *)v, k, x)
			json_object_set_new(o, k, tidy(x, depth + 1));
		return o;
	}
	if (json_is_array(v)) {
		json_t *a = json_array();
		size_t i;
		json_t *x;
		json_array_foreach(v, i, x)
			json_array_append_new(a, tidy(x, depth + 1));
		return a;
	}
	return json_incref((json_t *)v);
}

static void copy_if(json_t *row, const char *key, const json_t *from, const char *from_key)
{
	json_t *x = json_object_get(from, from_key);
	if (x)
		json_object_set_new(row, key, tidy(x, 0));
}

static void add_usage(struct rv_view *v, const json_t *u, const json_t *cost)
{
	static const char *const keys[] = {"inputTokens", "outputTokens", "cachedInputTokens"};
	if (!json_is_object(u))
		return;
	if (!v->usage)
		v->usage = json_pack("{s:i, s:i, s:i}", keys[0], 0, keys[1], 0, keys[2], 0);
	for (size_t i = 0; i < 3; i++) {
		double d;
		if (ndjson_number_in(json_object_get(u, keys[i]), 0, 1e15, &d))
			json_object_set_new(v->usage, keys[i],
			    num_json(json_number_value(json_object_get(v->usage, keys[i])) + d));
	}
	double c;
	if (ndjson_number_in(cost, 0, 1e9, &c))
		json_object_set_new(v->usage, "costUsd",
		                    json_real(json_number_value(json_object_get(v->usage, "costUsd")) + c));
}

static void short_hex(struct buf *b, const json_t *s)
{
	size_t n;
	const char *p = rv_str(s, &n);
	if (p)
		buf_add(b, p, n < 12 ? n : 12);
}

static void describe_call_of(struct buf *d, const json_t *call)
{
	add_str(d, json_object_get(call, "tool"));
	static const char *const parts[] = {"path", "cmd", "mode"};
	for (size_t i = 0; i < 3; i++)
		if (json_is_string(json_object_get(call, parts[i]))) {
			buf_addc(d, ' ');
			add_str(d, json_object_get(call, parts[i]));
		}
}

static void row_call(struct rv_view *v, json_t *row, const json_t *data, struct buf *d)
{
	int ok = json_is_true(json_object_get(data, "ok"));
	v->calls++;
	/* a judgment of the soft tier is a model call, not a turn */
	json_t *purpose = json_object_get(data, "purpose");
	if (json_is_string(purpose)) {
		copy_if(row, "purpose", data, "purpose");
		copy_if(row, "task", data, "task");
		json_object_set_new(row, "turn", json_integer(v->slot && v->loop_turn[v->slot] ? v->loop_turn[v->slot]
		                                                                              : v->turn));
		if (!ok)
			v->failed_calls++;
	} else if (ok) {
		v->turn++;
		v->loop_turn[v->slot] = v->turn;
		json_object_set_new(row, "turn", json_integer(v->turn));
	} else {
		v->failed_calls++;
		json_object_set_new(row, "turn", json_integer(v->turn + 1));
	}
	copy_if(row, "endpoint", data, "endpoint");
	json_object_set_new(row, "ok", json_boolean(ok));
	copy_if(row, "latencyMs", data, "latencyMs");
	copy_if(row, "status", data, "status");
	copy_if(row, "error", data, "error");
	copy_if(row, "waitMs", data, "waitMs");
	copy_if(row, "errorClass", data, "errorClass");
	copy_if(row, "requestBytes", data, "requestBytes");
	copy_if(row, "toolCalls", data, "toolCalls");
	copy_if(row, "costUsd", data, "costUsd");
	copy_if(row, "stop", data, "stop");
	copy_if(row, "stopReason", data, "stopReason");
	copy_if(row, "drained", data, "drained");
	if (json_is_object(json_object_get(data, "usage"))) {
		json_object_set_new(row, "usage", tidy(json_object_get(data, "usage"), 0));
		add_usage(v, json_object_get(data, "usage"), json_object_get(data, "costUsd"));
	}
	if (json_is_string(purpose)) {
		add_str(d, purpose);
		if (json_is_string(json_object_get(data, "task"))) {
			buf_adds(d, " of task ");
			add_str(d, json_object_get(data, "task"));
		}
		buf_adds(d, ": ");
	}
	add_str(d, json_object_get(data, "endpoint"));
	double lat;
	if (ndjson_number_in(json_object_get(data, "latencyMs"), 0, DURATION_MS_MAX, &lat))
		buf_printf(d, " %.0f ms", lat);
	if (ok) {
		buf_adds(d, " ok");
	} else {
		buf_adds(d, " failed");
		double st;
		if (ndjson_number_in(json_object_get(data, "status"), 0, 999, &st))
			buf_printf(d, " (HTTP %.0f)", st);
		if (json_is_string(json_object_get(data, "errorClass"))) {
			buf_adds(d, " [");
			add_str(d, json_object_get(data, "errorClass"));
			buf_addc(d, ']');
		}
		if (json_is_string(json_object_get(data, "error"))) {
			buf_adds(d, ": ");
			add_str(d, json_object_get(data, "error"));
		}
	}
	json_t *u = json_object_get(data, "usage");
	double in, out;
	if (ndjson_number_in(json_object_get(u, "inputTokens"), 0, 1e15, &in) &&
	    ndjson_number_in(json_object_get(u, "outputTokens"), 0, 1e15, &out))
		buf_printf(d, ", tokens in %.0f out %.0f", in, out);
	double cost;
	if (ndjson_number_in(json_object_get(data, "costUsd"), 0, 1e9, &cost))
		buf_printf(d, ", $%.4f", cost);
	double waited, native;
	if (ndjson_number_in(json_object_get(data, "waitMs"), 1, DURATION_MS_MAX, &waited))
		buf_printf(d, ", after waiting %.0f ms", waited);
	if (ndjson_number_in(json_object_get(data, "toolCalls"), 1, 1e6, &native))
		buf_printf(d, ", %.0f native call%s", native, native == 1 ? "" : "s");
}

/* A soft verdict: the task, its judge and producer, the reason; the
 * criteria judgment: how many criteria passed. */
static void soft_row(json_t *row, const json_t *data, struct buf *d)
{
	if (str_is(json_object_get(data, "tier"), "criteria")) {
		json_t *c = json_object_get(data, "criteria"), *x;
		size_t i, passed = 0;
		json_array_foreach(c, i, x)
			passed += json_is_true(json_object_get(x, "pass"));
		json_object_set_new(row, "criteria", json_deep_copy(c));
		buf_printf(d, "criteria: %zu of %zu pass (judge ", passed, json_array_size(c));
		add_str(d, json_object_get(data, "judge"));
		buf_adds(d, ")");
		return;
	}
	copy_if(row, "task", data, "task");
	if (json_is_false(json_object_get(data, "independent")))
		json_object_set_new(row, "independent", json_false());
	buf_adds(d, "soft tier: task ");
	add_str(d, json_object_get(data, "task"));
	buf_adds(d, " judged by ");
	add_str(d, json_object_get(data, "judge"));
	if (json_is_false(json_object_get(data, "independent")))
		buf_adds(d, " (not independent)");
	buf_adds(d, ", produced by ");
	add_str(d, json_object_get(data, "producer"));
	buf_adds(d, ": ");
	add_str(d, json_object_get(data, "reason"));
}

/* An acceptance check's verdict (sfma-formats(5)): the check, its exit
 * against the one expected; counted per check, never as a refusal of the
 * hard tier. */
static void acceptance_row(struct rv_view *v, json_t *row, const json_t *data, struct buf *d)
{
	const json_t *a = json_object_get(data, "acceptance");
	const json_t *run = json_object_get(data, "run");
	double index = 0, expected = 0, code;
	int have_index = ndjson_number_in(json_object_get(a, "index"), 0, 1e6, &index) && index == floor(index);
	ndjson_number_in(json_object_get(a, "expected"), -1e9, 1e9, &expected);
	copy_if(row, "cmd", a, "cmd");
	copy_if(row, "exit", a, "exit");
	copy_if(row, "expected", a, "expected");
	if (json_is_object(run)) {
		copy_if(row, "timedOut", run, "timedOut");
		copy_if(row, "durationMs", run, "durationMs");
	}
	buf_adds(d, "acceptance ");
	if (have_index)
		buf_printf(d, "check %.0f: ", index + 1);
	add_str(d, json_object_get(a, "cmd"));
	if (json_is_false(json_object_get(a, "ran"))) {
		buf_adds(d, ": did not run: ");
		add_str(d, json_object_get(data, "reason"));
	} else if (ndjson_number_in(json_object_get(a, "exit"), -1e9, 1e9, &code)) {
		buf_printf(d, ": exit %.0f (expected %.0f)", code, expected);
		if (json_is_true(json_object_get(run, "timedOut")))
			buf_adds(d, ", timed out");
	} else {
		buf_adds(d, ": ");
		add_str(d, json_object_get(data, "reason"));
	}
	if (!have_index || index >= 64)
		return;
	/* the check's standing: how often it ran, how it ended the last time */
	while (json_array_size(v->acceptance) <= (size_t)index)
		json_array_append_new(v->acceptance, json_pack("{s:I, s:i, s:i}", "index",
		                                               (json_int_t)json_array_size(v->acceptance), "runs", 0,
		                                               "passes", 0));
	json_t *c = json_array_get(v->acceptance, (size_t)index);
	int pass = json_is_true(json_object_get(data, "pass"));
	copy_if(c, "cmd", a, "cmd");
	copy_if(c, "expected", a, "expected");
	json_object_set_new(c, "runs", json_integer(json_integer_value(json_object_get(c, "runs")) + 1));
	json_object_set_new(c, "passes", json_integer(json_integer_value(json_object_get(c, "passes")) + pass));
	json_object_set_new(c, "last", json_pack("{s:b, s:O?, s:O?}", "pass", pass, "exit", json_object_get(a, "exit"),
	                                         "reason", json_object_get(data, "reason")));
}

static void row_verdict(struct rv_view *v, json_t *row, const json_t *entry, const json_t *data, struct buf *d)
{
	int pass = json_is_true(json_object_get(data, "pass"));
	copy_if(row, "tier", data, "tier");
	json_object_set_new(row, "pass", json_boolean(pass));
	/* a soft verdict no judge could give: neither pass nor fail */
	if (str_is(json_object_get(data, "tier"), "soft") && json_is_null(json_object_get(data, "pass")))
		json_object_set_new(row, "unjudged", json_true());
	copy_if(row, "reason", data, "reason");
	copy_if(row, "judge", data, "judge");       /* the soft tier's */
	copy_if(row, "acceptance", data, "acceptance");
	copy_if(row, "producer", data, "producer");
	if (str_is(json_object_get(data, "tier"), "soft") || str_is(json_object_get(data, "tier"), "criteria")) {
		soft_row(row, data, d);
		return;
	}
	json_t *task_id = json_array_get(json_object_get(entry, "refs"), 0);
	json_t *task = json_is_string(task_id) ? json_object_get(v->tasks, json_string_value(task_id)) : NULL;
	if (task) {
		json_object_set(row, "task", task_id);
		copy_if(row, "tool", task, "tool");
		copy_if(row, "path", task, "path");
		copy_if(row, "cmd", task, "cmd");
	}
	if (str_is(json_object_get(data, "tier"), "acceptance")) {
		acceptance_row(v, row, data, d);
		return;
	}
	json_t *run = json_object_get(data, "run");
	if (json_is_object(run)) {
		copy_if(row, "exit", run, "exit");
		copy_if(row, "timedOut", run, "timedOut");
		copy_if(row, "durationMs", run, "durationMs");
		if (json_is_string(json_object_get(run, "output")))
			copy_if(row, "output", run, "output");
	}
	if (!pass && str_is(json_object_get(data, "tier"), "protocol"))
		v->protocol_refusals++;
	else if (!pass)
		v->refused++;
	/* the call, unless the reason already begins with it */
	const char *tool = json_string_value(json_object_get(task, "tool"));
	const char *reason = json_string_value(json_object_get(data, "reason"));
	size_t tn = tool ? strlen(tool) : 0;
	if (task && !(reason && tool && strncmp(reason, tool, tn) == 0 && (reason[tn] == ' ' || !reason[tn]))) {
		describe_call_of(d, task);
		buf_adds(d, ": ");
	}
	add_str(d, json_object_get(data, "reason"));
	/* sfma-exec's reason names a timeout itself; an older one did not */
	if (json_is_true(json_object_get(run, "timedOut")) && !(reason && strstr(reason, "timed out")))
		buf_adds(d, " (timed out)");
}

static void row_store(json_t *row, const json_t *data, struct buf *d)
{
	json_object_set_new(row, "store", tidy(data, 0));
	const json_t *op = json_object_get(data, "op");
	if (str_is(op, "placement")) {
		json_t *p = json_object_get(data, "placement");
		buf_adds(d, "placement fast=");
		add_str(d, json_object_get(p, "fast"));
		buf_adds(d, " medium=");
		add_str(d, json_object_get(p, "medium"));
		buf_adds(d, " long=");
		add_str(d, json_object_get(p, "long"));
	} else if (str_is(op, "put")) {
		buf_adds(d, "put ");
		add_str(d, json_object_get(data, "id"));
		buf_adds(d, " in the ");
		add_str(d, json_object_get(data, "tier"));
		buf_adds(d, " tier");
	} else if (str_is(op, "recall")) {
		buf_adds(d, "recall ");
		add_str(d, json_object_get(data, "mode"));
	} else if (json_is_string(json_object_get(data, "stage"))) {
		add_str(d, json_object_get(data, "stage"));
		buf_addc(d, ' ');
		short_hex(d, json_object_get(data, "sha"));
		buf_addc(d, ' ');
		add_str(d, json_object_get(data, "message"));
	} else {
		add_str(d, json_object_get(data, "name"));
		if (json_is_boolean(json_object_get(data, "available")))
			buf_adds(d, json_is_true(json_object_get(data, "available")) ? " available" : " unavailable");
		if (json_is_string(json_object_get(data, "reason"))) {
			buf_adds(d, ": ");
			add_str(d, json_object_get(data, "reason"));
		}
	}
}

static void row_weight(json_t *row, const json_t *data, struct buf *d)
{
	const char *name;
	json_t *ep;
	json_object_set_new(row, "endpoints", tidy(data, 0));
	int first = 1;
	json_object_foreach((json_t *)data, name, ep) {
		if (strcmp(name, "reset") == 0 && json_is_object(ep) && !json_object_get(ep, "calls")) {
			/* an operator's `sfma endpoints --reset` since the run before */
			const char *reset;
			json_t *by;
			json_object_foreach(ep, reset, by) {
				buf_printf(d, "%sendpoint %s reset", first ? "" : "; ", reset);
				if (json_is_string(json_object_get(by, "by"))) {
					buf_adds(d, " by ");
					add_str(d, json_object_get(by, "by"));
				}
				if (json_is_string(json_object_get(by, "at"))) {
					buf_adds(d, " at ");
					add_str(d, json_object_get(by, "at"));
				}
				first = 0;
			}
			continue;
		}
		double calls = 0, fails = 0, lat = 0;
		ndjson_number_in(json_object_get(ep, "calls"), 0, 1e15, &calls);
		ndjson_number_in(json_object_get(ep, "failures"), 0, 1e15, &fails);
		ndjson_number_in(json_object_get(ep, "latencyMsEwma"), 0, 1e12, &lat);
		/* the endpoint's standing over every run of the workspace
		 * (memory.json), not this run's calls */
		buf_printf(d, "%sendpoint %s: %.0f calls so far (all runs), %.0f failures, latency %.1f ms",
		           first ? "" : "; ", name, calls, fails, lat);
		first = 0;
	}
}

/* Wall time, derived offset and the role of a clock-anchor. */
static void row_anchor(struct rv_view *v, json_t *row, const json_t *data, uint64_t line_no, struct buf *d)
{
	double wall;
	int have = ndjson_number_in(json_object_get(data, "wallMs"), 0, WALL_MS_MAX, &wall);
	copy_if(row, "wallMs", data, "wallMs");
	copy_if(row, "source", data, "source");
	const char *role;
	if (!v->have_start && have) {
		v->have_start = 1;
		v->start_wall_ms = wall;
		v->t_ms = 0;
		role = "start";
	} else if (v->terminal && !v->closed) {
		role = "end";
		v->closed = 1;
		v->closed_line = line_no;
	} else {
		role = "re-anchor";
	}
	if (have && v->have_start && wall - v->start_wall_ms > v->t_ms)
		v->t_ms = wall - v->start_wall_ms;
	if (have && strcmp(role, "end") == 0) {
		v->have_end = 1;
		v->end_wall_ms = wall;
	}
	json_object_set_new(row, "anchor", json_string(role));
	buf_adds(d, strcmp(role, "start") == 0 ? "run start" : strcmp(role, "end") == 0 ? "run end" : "clock re-anchored");
	if (json_is_string(json_object_get(data, "source"))) {
		buf_adds(d, " (");
		add_str(d, json_object_get(data, "source"));
		buf_addc(d, ')');
	}
}

static void row_result(struct rv_view *v, json_t *row, const json_t *data, struct buf *d)
{
	copy_if(row, "halt", data, "halt");
	copy_if(row, "error", data, "error");
	copy_if(row, "reason", data, "reason");
	copy_if(row, "interrupted", data, "interrupted");
	json_t *what = json_object_get(data, "reason");
	if (json_is_string(json_object_get(data, "halt"))) {
		buf_adds(d, "halt ");
		add_str(d, json_object_get(data, "halt"));
		if (json_is_string(what)) {
			buf_adds(d, ": ");
			add_str(d, what);
		}
	} else if (json_is_object(json_object_get(data, "interrupted"))) {
		buf_adds(d, "the previous run was interrupted");
		what = NULL;
	} else {
		buf_adds(d, "error: ");
		what = json_object_get(data, "error");
		add_str(d, what);
	}
	if (!what)
		what = json_object_get(data, "halt");
	if (json_is_string(what)) {
		json_decref(v->halt_error);
		v->halt_error = json_incref(what);
	}
}

static void set_time(const struct rv_view *v, json_t *row)
{
	json_object_set_new(row, "t", num_json(round(v->t_ms * 1000) / 1000));
	if (v->have_start && v->start_wall_ms + v->t_ms <= WALL_MS_MAX) {
		char iso[ISO8601_LEN];
		json_object_set_new(row, "at", json_string(iso8601_utc((int64_t)(v->start_wall_ms + v->t_ms), iso)));
	} else {
		json_object_set_new(row, "at", json_null());
	}
}

json_t *rv_row_invalid(struct rv_view *v, uint64_t line_no, const char *why)
{
	if (!v->first_line)
		v->first_line = line_no;
	v->last_line = line_no;
	json_t *row = json_pack("{s:s, s:I, s:I}", "row", "invalid", "run", (json_int_t)v->run, "line", (json_int_t)line_no);
	set_time(v, row);
	/* why may quote the line (a parser's "near '...'"): kept valid UTF-8 */
	json_object_set_new(row, "error", lossy_string((const unsigned char *)why, strlen(why), 0));
	struct buf d = {0};
	buf_adds(&d, "not a trace entry: ");
	buf_adds(&d, why);
	json_object_set_new(row, "display", lossy_string((const unsigned char *)d.p, d.len, 0));
	buf_free(&d);
	return row;
}

/* What one process had in force (sfma-formats(5), confinement):
 * "sfma-model: Landlock 7, seccomp", "... Landlock unavailable (why)",
 * "sfma-chain: not reported". */
static void row_confinement(json_t *row, json_t *data, struct buf *d)
{
	static const char *const keys[] = {"stage", "landlock", "seccomp", "noNewPrivs", "reported", "why", NULL};
	for (const char *const *k = keys; *k; k++)
		copy_if(row, *k, data, *k);
	add_str(d, json_object_get(data, "stage"));
	json_t *ll = json_object_get(data, "landlock");
	double abi;
	if (json_is_false(json_object_get(data, "reported")) || !ll)
		buf_adds(d, ": not reported");
	else if (ndjson_number_in(ll, 1, 255, &abi))
		buf_printf(d, ": Landlock %.0f", abi);
	else
		buf_adds(d, ": Landlock unavailable");
	if (ll) {
		buf_adds(d, json_is_true(json_object_get(data, "seccomp")) ? ", seccomp" : ", no seccomp");
		if (!json_is_true(json_object_get(data, "noNewPrivs")))
			buf_adds(d, ", no no_new_privs");
	}
	if (json_is_string(json_object_get(data, "why"))) {
		buf_adds(d, " (");
		add_str(d, json_object_get(data, "why"));
		buf_addc(d, ')');
	}
}

/* When the entry's loop was ready for its next step: its own clock, or,
 * for a loop not seen yet, when loops began (the adoption); the runner's
 * own steps follow everything before them. */
static double loop_ready(const struct rv_view *v)
{
	if (!v->slot)
		return v->t_ms;
	return v->loop_seen[v->slot] ? v->loop_t[v->slot] : v->loops_start;
}

/* A step of dur ms that began at start: the row's tStart; the entry is
 * served at its end, or after the entry before it, whichever is later. */
static double took(struct rv_view *v, json_t *row, double start, double dur)
{
	json_object_set_new(row, "tStart", num_json(round(start * 1000) / 1000));
	if (start + dur > v->t_ms)
		v->t_ms = start + dur;
	v->loop_t[v->slot] = v->t_ms;
	v->loop_seen[v->slot] = 1;
	return start + dur;
}

/* What each kind of entry shows: its row's own members and its text d. */
static void row_kind(struct rv_view *v, json_t *row, json_t *entry, enum kind kind, json_t *data, uint64_t line_no,
                     struct buf *d)
{
	if (kind == K_NONE) {
		buf_adds(d, "entry without a kind");
	} else if (kind == K_CLOCK_ANCHOR) {
		row_anchor(v, row, data, line_no, d);
	} else if (kind == K_LIFECYCLE) {
		json_t *from = json_object_get(data, "from"), *to = json_object_get(data, "to");
		json_object_set(row, "from", from ? from : json_null());
		json_object_set(row, "to", to ? to : json_null());
		if (json_is_string(from))
			add_str(d, from);
		else
			buf_adds(d, "start");
		buf_adds(d, " -> ");
		add_str(d, to);
		if (terminal_state(json_string_value(to))) {
			v->terminal = 1;
			json_decref(v->verdict);
			v->verdict = json_incref(to);
		}
	} else if (kind == K_MESSAGE) {
		copy_if(row, "dir", data, "dir");
		copy_if(row, "messageKind", data, "kind");
		copy_if(row, "file", data, "file");
		copy_if(row, "text", data, "text");
		add_str(d, json_object_get(data, "dir"));
		if (json_is_string(json_object_get(data, "kind"))) {
			buf_addc(d, ' ');
			add_str(d, json_object_get(data, "kind"));
		}
		if (json_is_string(json_object_get(data, "file"))) {
			buf_addc(d, ' ');
			add_str(d, json_object_get(data, "file"));
		}
		buf_adds(d, ": ");
		add_str(d, json_object_get(data, "text"));
	} else if (kind == K_CLARIFICATION) {
		copy_if(row, "source", data, "source");
		copy_if(row, "text", data, "text");
		add_str(d, json_object_get(data, "source"));
		buf_adds(d, ": ");
		add_str(d, json_object_get(data, "text"));
	} else if (kind == K_CALL) {
		row_call(v, row, data, d);
		double lat = 0, wait = 0;
		ndjson_number_in(json_object_get(data, "latencyMs"), 0, DURATION_MS_MAX, &lat);
		ndjson_number_in(json_object_get(data, "waitMs"), 0, DURATION_MS_MAX, &wait);
		/* sent when its loop was ready, after the wait; served no
		 * earlier than the entry before it */
		took(v, row, loop_ready(v) + wait, lat);
	} else if (kind == K_CANDIDATE) {
		v->loops_start = v->t_ms;
		copy_if(row, "mission", data, "mission");
		buf_adds(d, "adopted: ");
		add_str(d, json_object_get(data, "mission"));
	} else if (kind == K_TASK) {
		json_t *call = json_object_get(data, "call");
		json_t *shown = json_object();
		static const char *const parts[] = {"tool", "path", "cmd", "mode", "summary"};
		for (size_t i = 0; i < 5; i++)
			if (json_is_string(json_object_get(call, parts[i]))) {
				json_object_set(row, parts[i], json_object_get(call, parts[i]));
				json_object_set(shown, parts[i], json_object_get(call, parts[i]));
			}
		if (json_is_string(json_object_get(entry, "id")))
			json_object_set(v->tasks, json_string_value(json_object_get(entry, "id")), shown);
		json_decref(shown);
		if (json_is_object(call))
			describe_call_of(d, call);
		else
			add_str(d, json_object_get(data, "id"));
		if (str_is(json_object_get(call, "tool"), "done") && json_is_string(json_object_get(call, "summary"))) {
			json_decref(v->summary);
			v->summary = json_incref(json_object_get(call, "summary"));
		}
	} else if (kind == K_VERDICT) {
		row_verdict(v, row, entry, data, d);
		double dur;
		json_t *run = json_object_get(data, "run");
		/* one command at a time: after its loop was ready and the
		 * command before it had ended */
		if (ndjson_number_in(json_object_get(run, "durationMs"), 0, DURATION_MS_MAX, &dur)) {
			double ready = loop_ready(v);
			v->exec_free = took(v, row, ready > v->exec_free ? ready : v->exec_free, dur);
		}
		if (json_is_array(json_object_get(data, "paths"))) {
			json_decref(v->write_paths);
			v->write_paths = json_incref(json_object_get(data, "paths"));
		}
	} else if (kind == K_MUTATION) {
		copy_if(row, "path", data, "path");
		copy_if(row, "bytes", data, "bytes");
		copy_if(row, "sha256", data, "sha256");
		copy_if(row, "applied", data, "applied");
		buf_adds(d, json_is_false(json_object_get(data, "applied")) ? "recorded (dry run) " : "wrote ");
		add_str(d, json_object_get(data, "path"));
		double bytes;
		if (ndjson_number_in(json_object_get(data, "bytes"), 0, 9007199254740991.0, &bytes))
			buf_printf(d, ", %.0f bytes", bytes);
		if (json_is_string(json_object_get(data, "sha256"))) {
			buf_adds(d, ", sha256 ");
			short_hex(d, json_object_get(data, "sha256"));
		}
	} else if (kind == K_RESULT) {
		row_result(v, row, data, d);
	} else if (kind == K_WEIGHT) {
		row_weight(row, data ? data : json_object_get(entry, "data"), d);
	} else if (kind == K_STORE) {
		row_store(row, data, d);
	} else if (kind == K_COMPACTION) {
		copy_if(row, "beforeBytes", data, "beforeBytes");
		copy_if(row, "afterBytes", data, "afterBytes");
		copy_if(row, "elided", data, "elided");
		double b = 0, a = 0;
		ndjson_number_in(json_object_get(data, "beforeBytes"), 0, 1e15, &b);
		ndjson_number_in(json_object_get(data, "afterBytes"), 0, 1e15, &a);
		buf_printf(d, "context %.0f -> %.0f bytes, %zu elided", b, a,
		           json_array_size(json_object_get(data, "elided")));
	} else if (kind == K_CONFINEMENT) {
		row_confinement(row, data, d);
	} else {
		char *text = data ? json_dumps(data, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
		if (text)
			buf_adds(d, text);
		free(text);
	}
}

/* The row's evidence items, and the texts read from them a reader wants
 * beside the row (the reply, the tool's output, the summary, the content). */
static void row_evidence(struct rv_view *v, json_t *row, json_t *entry, enum kind kind, json_t *data)
{
	json_t *items = json_array();
	if (data && kind == K_MUTATION) {
		const char *sha;
		/* the digest of what was written: evidence when the blob is kept
		 * (records made before evidence existed keep none, and that is
		 * not worth a word) */
		json_t *it = is_digest(data, &sha) ? evidence_item(v, "content", sha,
		                                     json_number_value(json_object_get(data, "bytes"))) : NULL;
		if (it && !str_is(json_object_get(it, "state"), "missing"))
			json_array_append_new(items, it);
		else
			json_decref(it);
	} else {
		collect_refs(v, entry, items);
	}
	if (json_array_size(items)) {
		json_object_set(row, "evidence", items);
		static const char *const reply_w[] = {"reply", "response", "text", NULL};
		static const char *const out_w[] = {"=output", "stdout", "result", NULL};
		static const char *const seen_w[] = {"=outputs", NULL};
		static const char *const sum_w[] = {"summary", NULL};
		static const char *const content_w[] = {"content", NULL};
		json_t *t = NULL;
		/* By key only: a call's other items are what was sent (the
		 * prompt, the message), never its reply. */
		static const char *const prompt_w[] = {"=prompt", NULL};
		static const char *const sent_w[] = {"=message", NULL};
		static const char *const said_w[] = {"=text", NULL};
		if (kind == K_CALL && (t = evidence_text(items, reply_w))) {
			json_object_set(row, "reply", t);
			decode_reply(row, t);
		}
		if (kind == K_CALL && (t = evidence_text(items, prompt_w)))
			json_object_set(row, "prompt", t);
		if (kind == K_CALL && (t = evidence_text(items, sent_w)))
			decode_sent(row, t);
		if (kind == K_TASK && (t = evidence_text(items, said_w)))
			json_object_set(row, "text", t);
		if (kind == K_VERDICT && (t = evidence_text(items, out_w)))
			json_object_set_new(row, "output", tool_result_text(t));
		/* what a judge of done saw of the outputs, when kept whole */
		size_t sn;
		const char *st = kind == K_VERDICT ? rv_str(evidence_text(items, seen_w), &sn) : NULL;
		json_t *seen = st ? json_loadb(st, sn, JSON_REJECT_DUPLICATES, NULL) : NULL;
		if (json_is_array(seen))
			json_object_set_new(row, "outputsSeen", seen);
		else
			json_decref(seen);
		if ((t = evidence_text(items, sum_w))) {
			json_object_set(row, "summary", t);
			json_decref(v->summary);
			v->summary = json_incref(t);
		}
		if ((kind == K_MUTATION || kind == K_TASK) && (t = evidence_text(items, content_w)))
			json_object_set(row, "content", t);
	}
	json_decref(items);
}

/* A write against what the path held before: the earlier write of it in
 * the trace, or a new file when its verdict found no file there. The diff
 * only of contents kept whole (each at most the view's clip, so the diff
 * is bounded by them: no limit of its own). */
#define DIFF_CONTEXT 3

static const json_t *item_of(const json_t *row, const char *field)
{
	size_t i;
	json_t *it;
	json_array_foreach(json_object_get(row, "evidence"), i, it)
		if (str_is(json_object_get(it, "field"), field))
			return it;
	return NULL;
}

static void diff_into(json_t *row, const char *was, size_t wn, const char *now, size_t nn)
{
	struct buf b = {0};
	struct linediff_stats st;
	line_diff(&b, was, wn, now, nn, DIFF_CONTEXT, 0, &st);
	if (st.truncated) {
		/* longer than a diff is made for: the content is shown instead */
		buf_free(&b);
		return;
	}
	json_object_set_new(row, "diff", lossy_string((const unsigned char *)(b.p ? b.p : ""), b.len, 0));
	json_object_set_new(row, "diffStat", json_pack("{s:I, s:I}", "added", (json_int_t)st.added, "removed",
	                                               (json_int_t)st.removed));
	buf_free(&b);
}

static void row_diff(struct rv_view *v, json_t *row, const json_t *data, uint64_t line_no)
{
	const char *path = json_string_value(json_object_get(data, "path"));
	const char *sha;
	if (!path || !is_digest(data, &sha))
		return;
	const json_t *now_item = item_of(row, "content");
	size_t nn = 0;
	const char *now = json_is_false(json_object_get(now_item, "clipped")) ? rv_str(json_object_get(now_item, "text"), &nn)
	                                                                     : NULL;
	json_t *prev = json_object_get(v->writes, path);
	if (prev) {
		json_object_set(row, "previous", prev);
		const char *psha = json_string_value(json_object_get(prev, "sha256"));
		if (psha && strcmp(psha, sha) == 0) {
			json_object_set_new(row, "unchanged", json_true());
		} else if (now && psha) {
			json_t *was = evidence_item(v, "previous", psha, json_number_value(json_object_get(prev, "bytes")));
			size_t wn = 0;
			const char *w = str_is(json_object_get(was, "state"), "present") &&
			                json_is_false(json_object_get(was, "clipped")) ? rv_str(json_object_get(was, "text"), &wn)
			                                                               : NULL;
			if (w)
				diff_into(row, w, wn, now, nn);
			json_decref(was);
		}
	} else {
		/* the host facts the write's gate rested on: its path's kind */
		const char *kind = NULL;
		size_t i;
		json_t *pth;
		json_array_foreach(v->write_paths, i, pth)
			if (str_is(json_object_get(pth, "path"), path))
				kind = json_string_value(json_object_get(pth, "kind"));
		if (kind && strcmp(kind, "missing") == 0) {
			json_object_set_new(row, "newFile", json_true()); /* its content is all of it */
		} else if (kind) {
			json_object_set_new(row, "previousUnknown", json_true());
		}
	}
	json_decref(v->write_paths);
	v->write_paths = NULL;
	note_write(v, data, line_no);
}

/* Each loop's last done: a done the acceptance checks refused is
 * followed by the one that counts. */
static void note_summary(struct rv_view *v, const json_t *row, uint64_t line_no)
{
	json_t *one = json_pack("{s:i, s:I, s:O}", "loop", v->slot, "line", (json_int_t)line_no, "summary",
	                        json_object_get(row, "summary"));
	size_t i;
	json_t *s;
	json_array_foreach(v->summaries, i, s) {
		json_int_t loop = json_integer_value(json_object_get(s, "loop"));
		if (loop == v->slot) {
			json_array_set_new(v->summaries, i, one);
			return;
		}
		if (loop > v->slot) { /* in the order of the loops */
			json_array_insert_new(v->summaries, i, one);
			return;
		}
	}
	json_array_append_new(v->summaries, one);
}

/* The output of a check's last run, and the line it is on. */
static void note_acceptance_output(struct rv_view *v, const json_t *row, uint64_t line_no)
{
	double index;
	const json_t *a = json_object_get(row, "acceptance");
	if (!ndjson_number_in(json_object_get(a, "index"), 0, 63, &index) || index != floor(index))
		return;
	json_t *last = json_object_get(json_array_get(v->acceptance, (size_t)index), "last");
	if (!last)
		return;
	json_object_set_new(last, "line", json_integer((json_int_t)line_no));
	if (json_is_string(json_object_get(row, "output")))
		json_object_set(last, "output", json_object_get(row, "output"));
}

json_t *rv_row(struct rv_view *v, const char *line, size_t len, uint64_t line_no)
{
	struct sfma_err e;
	json_t *entry = ndjson_parse(line, len, &e);
	if (!json_is_object(entry)) {
		json_decref(entry);
		return rv_row_invalid(v, line_no, entry ? "not a JSON object" : e.text);
	}
	if (!v->first_line)
		v->first_line = line_no;
	v->last_line = line_no;
	size_t hn;
	const char *hash = rv_str(json_object_get(entry, "hash"), &hn);
	if (hash && is_sha256_hex(hash, hn))
		memcpy(v->last_hash, hash, 65);

	json_t *kind_value = json_object_get(entry, "kind");
	enum kind kind = kind_of(kind_value);
	json_t *data = json_object_get(entry, "data");
	if (!json_is_object(data))
		data = NULL;
	json_t *row = json_pack("{s:s, s:I, s:I}", "row", "entry", "run", (json_int_t)v->run, "line", (json_int_t)line_no);
	json_object_set_new(row, "t", json_null());
	json_object_set_new(row, "at", json_null());
	copy_if(row, "seq", entry, "seq");
	copy_if(row, "loop", entry, "loop");
	json_object_set_new(row, "turn", json_integer(v->turn));
	json_object_set(row, "kind", kind == K_NONE ? json_null() : kind_value);
	copy_if(row, "id", entry, "id");
	copy_if(row, "class", entry, "class");
	copy_if(row, "refs", entry, "refs");

	double loop;
	v->slot = ndjson_number_in(json_object_get(entry, "loop"), 0, RV_LOOPS - 1, &loop) && loop == floor(loop) ? (int)loop : 0;
	struct buf d = {0};
	row_kind(v, row, entry, kind, data, line_no, &d);
	if (v->slot && kind != K_CALL) {
		/* the loop's own turn, its own clock: loops interleave */
		if (v->loop_turn[v->slot])
			json_object_set_new(row, "turn", json_integer(v->loop_turn[v->slot]));
		if (v->loop_t[v->slot] < v->t_ms)
			v->loop_t[v->slot] = v->t_ms;
		v->loop_seen[v->slot] = 1;
	}
	set_time(v, row);
	row_evidence(v, row, entry, kind, data);
	if (kind == K_MUTATION && data)
		row_diff(v, row, data, line_no);
	if (kind == K_TASK && str_is(json_object_get(row, "tool"), "done") &&
	    json_is_string(json_object_get(row, "summary")))
		note_summary(v, row, line_no);
	if (kind == K_VERDICT && str_is(json_object_get(row, "tier"), "acceptance"))
		note_acceptance_output(v, row, line_no);
	/* one line of text: an inbox message or an unknown entry can be large */
	if (d.len > DISPLAY_MAX) {
		size_t cut = DISPLAY_MAX;
		while (cut > 0 && ((unsigned char)d.p[cut] & 0xc0) == 0x80)
			cut--;
		d.len = cut;
		buf_adds(&d, "...");
	}
	json_object_set_new(row, "display", json_stringn(d.p ? d.p : "", d.len));
	buf_free(&d);
	json_decref(entry);
	return row;
}

json_t *rv_header(const struct rv_view *v, size_t runs)
{
	json_t *row = json_pack("{s:s, s:I, s:I, s:I}", "row", "header", "run", (json_int_t)v->run, "runs", (json_int_t)runs,
	                        "firstLine", (json_int_t)v->first_line);
	if (v->have_start) {
		char iso[ISO8601_LEN];
		json_object_set_new(row, "startWallMs", num_json(v->start_wall_ms));
		json_object_set_new(row, "start", json_string(iso8601_utc((int64_t)v->start_wall_ms, iso)));
	} else {
		json_object_set_new(row, "startWallMs", json_null());
		json_object_set_new(row, "start", json_null());
	}
	return row;
}

int rv_record_seals(const json_t *record, uint64_t last_line, const char *last_hash)
{
	json_t *in = json_object_get(record, "integrity");
	double entries;
	if (!ndjson_number_in(json_object_get(in, "entries"), 1, 9007199254740991.0, &entries) || entries != (double)last_line)
		return 0;
	return !last_hash || !*last_hash || str_is(json_object_get(in, "headHash"), last_hash);
}

/* Open name under dirfd for reading as a reader of a workspace must: no
 * link followed in its last component, no wait on a FIFO or a device, a
 * regular file only. Returns a descriptor (reads block as usual) or -1
 * with errno and e "NAME: REASON": ELOOP "is a symbolic link, not
 * followed", EINVAL "not a regular file", else open(2)'s errno (ENOENT:
 * nothing there). */
static int open_regular(int dirfd, const char *name, struct sfma_err *e)
{
	/* O_NONBLOCK: open(2) of a FIFO for reading returns at once instead
	 * of waiting for a writer (fifo(7)); O_NOCTTY: a terminal never
	 * becomes the controlling one; O_NOFOLLOW: a link as the last
	 * component fails ELOOP instead of being followed. */
	int fd = openat(dirfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		struct stat st;
		/* ELOOP is also too many links on the way: "link" only when
		 * the last component is one. */
		if (err == ELOOP && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
			err_set(e, "%s: is a symbolic link, not followed", name);
		} else if (err == ENXIO) { /* a socket, a device without its driver (open(2)) */
			err_set(e, "%s: not a regular file", name);
			err = EINVAL;
		} else {
			err_set(e, "%s: %s", name, strerror(err));
		}
		errno = err;
		return -1;
	}
	struct stat st;
	int err = 0;
	const char *why = NULL;
	if (fstat(fd, &st) < 0)
		err = errno;
	else if (!S_ISREG(st.st_mode))
		err = EINVAL, why = "not a regular file";
	/* Back to blocking reads: F_SETFL sets only the status flags, and
	 * the file was opened with no other (fcntl(2)). */
	else if (fcntl(fd, F_SETFL, 0) < 0)
		err = errno;
	if (err) {
		close(fd);
		err_set(e, "%s: %s", name, why ? why : strerror(err));
		errno = err;
		return -1;
	}
	return fd;
}

int rv_open_sfma(const char *ws, struct sfma_err *e)
{
	int wfd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (wfd < 0) {
		int err = errno;
		err_set(e, "%s: %s", ws, strerror(err));
		errno = err;
		return -1;
	}
	/* The workspace is named by the user; its .sfma is the workspace's
	 * own, and a link there is not followed (ENOTDIR, ELOOP). */
	int dfd = openat(wfd, ".sfma", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int err = errno;
	close(wfd);
	if (dfd < 0) {
		err_set(e, "%s/.sfma: %s", ws,
		        err == ENOTDIR || err == ELOOP ? "not a directory (a link or a file is in its place)"
		                                        : strerror(err));
		errno = err;
	}
	return dfd;
}

int rv_open_trace(int sfma_dirfd, struct sfma_err *e)
{
	return open_regular(sfma_dirfd, "trace.jsonl", e);
}

int rv_load_record(int sfma_dirfd, json_t **record, struct sfma_err *e)
{
	*record = NULL;
	if (sfma_dirfd < 0)
		return 0;
	int fd = open_regular(sfma_dirfd, "result.json", e);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	size_t len;
	struct sfma_err re;
	char *text = read_all_fd(fd, RECORD_MAX_BYTES, &len, &re);
	int err = errno;
	close(fd);
	if (!text) {
		/* larger than any record: one that seals nothing */
		if (strstr(re.text, "larger than"))
			return 0;
		err_set(e, "result.json: %s", re.text);
		errno = err;
		return -1;
	}
	json_t *rec = ndjson_parse(text, len, &re);
	free(text);
	if (json_is_object(rec))
		*record = rec;
	else
		json_decref(rec);
	return 0;
}

json_t *rv_footer(const struct rv_view *v, const json_t *record)
{
	int seals = record && rv_record_seals(record, v->last_line, v->last_hash);
	json_t *row = json_pack("{s:s, s:I, s:I, s:I}", "row", "footer", "run", (json_int_t)v->run, "firstLine",
	                        (json_int_t)v->first_line, "lastLine", (json_int_t)v->last_line);
	json_t *verdict = seals ? json_object_get(record, "verdict") : v->verdict;
	json_object_set(row, "verdict", verdict ? verdict : json_null());
	json_object_set_new(row, "sealed", json_boolean(seals));
	json_object_set_new(row, "closed", json_boolean(v->closed));
	json_object_set_new(row, "turns", json_integer(v->turn));
	json_object_set_new(row, "modelCalls", json_integer(v->calls));
	json_object_set_new(row, "failedCalls", json_integer(v->failed_calls));
	json_object_set_new(row, "hardTierFailures", json_integer(v->refused));
	json_object_set_new(row, "protocolRefusals", json_integer(v->protocol_refusals));
	if (v->have_start && v->have_end)
		json_object_set_new(row, "durationMs", num_json(v->end_wall_ms - v->start_wall_ms));
	else
		json_object_set_new(row, "durationMs", json_null());
	json_t *usage = seals && json_is_object(json_object_get(record, "usage")) ? json_object_get(record, "usage")
	                                                                          : v->usage;
	json_object_set_new(row, "usage", usage ? tidy(usage, 0) : json_null());
	json_object_set(row, "summary", v->summary ? v->summary : json_null());
	json_object_set(row, "summaries", v->summaries);
	/* the checks as the trace shows them; whether they passed, as the
	 * record says when it seals the run */
	json_t *acc = json_object_get(record, "acceptance");
	double commands = 0;
	if (!seals || !ndjson_number_in(json_object_get(acc, "commands"), 0, 1e6, &commands))
		commands = 0;
	if (json_array_size(v->acceptance) || commands > 0) {
		json_t *a = json_pack("{s:O}", "checks", v->acceptance);
		if (seals && json_is_object(acc)) {
			copy_if(a, "commands", acc, "commands");
			copy_if(a, "attempts", acc, "attempts");
			json_object_set(a, "passed", json_object_get(acc, "passed") ? json_object_get(acc, "passed")
			                                                            : json_null());
		} else {
			json_t *first = json_array_get(v->acceptance, 0);
			json_object_set(a, "attempts", json_object_get(first, "runs"));
		}
		json_object_set_new(row, "acceptance", a);
	} else {
		json_object_set_new(row, "acceptance", json_null());
	}
	json_object_set(row, "error", v->halt_error ? v->halt_error : json_null());
	if (seals) {
		json_t *r = json_object();
		static const char *const keys[] = {"verdict", "turns", "modelCalls", "hardTierFailures", "dryRun",
		                                   "usage", "error"};
		for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
			copy_if(r, keys[i], record, keys[i]);
		json_t *m = json_object_get(record, "manifest");
		copy_if(r, "name", m, "name");
		json_object_set_new(row, "record", r);
	} else {
		json_object_set_new(row, "record", json_null());
	}
	return row;
}

int rv_parse_run(const char *s, long *out)
{
	char *end;
	errno = 0;
	long n = strtol(s, &end, 10);
	if (errno || end == s || *end || n == 0 || n < -1000000000L || n > 1000000000L)
		return -1;
	*out = n;
	return 0;
}
