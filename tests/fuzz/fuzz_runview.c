/* fuzz_runview.c - a hostile trace through the run view (lib/runview.c)
 * and what sfma-log and sfma-report make of it (lib/logtext.c,
 * lib/reportpage.c), over an evidence store that holds blobs of hostile
 * bytes, a blob altered, a FIFO and a link under blobs' names, and a
 * journal with a sound record and a bad one (the dictionary names them).
 *
 * The input is the trace. It is split into runs (rv_split_fd, from a
 * memfd), and each run is read as sfma-log reads it (clip 4096) and as
 * sfma-report does (clip 8192): a row per line, a row for a torn end, the
 * header, the footer with no record and with the trace's last line as the
 * record. Properties:
 *  - the runs cover the trace's lines in order, without gap or overlap,
 *    each starting at the offset of its first line;
 *  - every row is an object with its row type, run, line and display text;
 *  - --json lines are printable ASCII that parse back to an object;
 *  - the text has no control character but its newlines (and, in colour,
 *    only the program's own SGR sequences) and no code point a terminal
 *    or a reader could be fooled by; it is valid UTF-8;
 *  - the page is valid UTF-8 with no control character but newlines, its
 *    only tags are the page's own (nothing from the trace opens one), and
 *    it has one table row per row;
 *  - rv_visible of any bytes is valid UTF-8 without such characters, and
 *    keeps at most its maximum of characters. */
#include "fuzz.h"
#include "lib/buf.h"
#include "lib/logtext.h"
#include "lib/ndjson.h"
#include "lib/reportpage.h"
#include "lib/runview.h"
#include "lib/sha.h"
#include "lib/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* Runs of one input shown, at most: each is read twice. */
#define MAX_RUNS 4
/* The checks walk every byte of every output: coverage of them tells
 * the fuzzer nothing and costs most of the time of an input. */
#if defined(__clang__)
#define CHECKER __attribute__((no_sanitize("coverage")))
#else
#define CHECKER /* the regression build (gcc) has no coverage to leave out */
#endif

static char base[4096];
static int sfma_fd = -1;

static void must(int ok, const char *what)
{
	if (!ok) {
		dprintf(fuzz_report_fd, "fuzz_runview: %s: %s\n", what, strerror(errno));
		abort();
	}
}

/* ---- the store ------------------------------------------------------------ */

static const char *const hostile[] = {
	"hello",
	"\x1b[2J\x1b]0;title\x07<script>alert(1)</script>\xe2\x80\xae\xc2\x9b\xff\xfe nul\r\n\tend",
	"{\"toolResult\":\"exit=0\\nstdout:<b>x</b>\\u0000\\u202e\"}",
	"{\"toolResult\":\"a\",\"extra\":1}",
	"</td></tr></table></svg><!-- -->&amp;\"'",
};

static void put_file(const char *dir, const char *name, const void *p, size_t n)
{
	char path[8192];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	must(fd >= 0, path);
	must(write(fd, p, n) == (ssize_t)n, path);
	close(fd);
}

static void put_blob(const char *ev, const void *p, size_t n)
{
	char hex[SHA256_HEX_LEN + 1];
	sha256_hex(p, n, hex);
	put_file(ev, hex, p, n);
}

static void cleanup(void)
{
	char cmd[8300];
	if (!base[0])
		return;
	/* the harness's own scratch tree, made in LLVMFuzzerInitialize */
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
	if (system(cmd) != 0)
		dprintf(fuzz_report_fd, "fuzz_runview: could not remove %s\n", base);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *tmp = getenv("TMPDIR");
	snprintf(base, sizeof base, "%s/sfma-fuzz-runview.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	must(mkdtemp(base) != NULL, "mkdtemp");
	atexit(cleanup);
	char sfma[4200], ev[4300], name[SHA256_HEX_LEN + 1], path[8192];
	snprintf(sfma, sizeof sfma, "%s/.sfma", base);
	snprintf(ev, sizeof ev, "%s/evidence", sfma);
	must(mkdir(sfma, 0700) == 0 && mkdir(ev, 0700) == 0, "mkdir");
	for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++)
		put_blob(ev, hostile[i], strlen(hostile[i]));
	/* One a clip of 4096 and one of 8192 bytes cut inside a character. */
	struct buf big = {0};
	for (int i = 0; i < 4095; i++)
		buf_addc(&big, 'a');
	buf_adds(&big, "\xc3\xa9");
	for (int i = 0; i < 4094; i++)
		buf_addc(&big, 'b');
	buf_adds(&big, "\xe2\x82\xac");
	for (int i = 0; i < 100; i++)
		buf_addc(&big, 'c');
	put_blob(ev, big.p, big.len);
	buf_free(&big);
	/* Altered: the name of "original!", other bytes of its size. */
	sha256_hex("original!", 9, name);
	put_file(ev, name, "tampered!", 9);
	/* A FIFO, and a link to a sound blob, under blobs' names. */
	sha256_hex("fifo", 4, name);
	snprintf(path, sizeof path, "%s/%s", ev, name);
	must(mkfifo(path, 0600) == 0, "mkfifo");
	sha256_hex("link", 4, name);
	snprintf(path, sizeof path, "%s/%s", ev, name);
	char target[SHA256_HEX_LEN + 1];
	sha256_hex("hello", 5, target);
	must(symlink(target, path) == 0, "symlink");
	/* The journal of a run that stopped: "journal-only", sound, then a
	 * record of "journal-bad" over other bytes. */
	struct buf j = {0};
	sha256_hex("journal-only", 12, name);
	buf_printf(&j, "%s %016x\njournal-only", name, 12);
	sha256_hex("journal-bad", 11, name);
	buf_printf(&j, "%s %016x\njournal-BAD", name, 11);
	put_file(ev, "journal", j.p, j.len);
	buf_free(&j);
	sfma_fd = open(sfma, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	must(sfma_fd >= 0, "open .sfma");
	return 0;
}

/* ---- the properties ------------------------------------------------------- */

CHECKER static uint32_t code_point(const unsigned char *s, size_t k)
{
	if (k == 1)
		return s[0];
	if (k == 2)
		return ((uint32_t)(s[0] & 0x1f) << 6) | (s[1] & 0x3f);
	if (k == 3)
		return ((uint32_t)(s[0] & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
	return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) | ((uint32_t)(s[2] & 0x3f) << 6) |
	       (s[3] & 0x3f);
}

/* Valid UTF-8 with no control character (but '\n' when newlines is set)
 * and none of the code points rv_visible spells out. Returns the number
 * of characters. */
CHECKER static size_t check_shown(const char *what, const char *p, size_t n, int newlines)
{
	const unsigned char *s = (const unsigned char *)p;
	size_t chars = 0;
	for (size_t i = 0; i < n; chars++) {
		size_t k = utf8_seq(s + i, n - i);
		FUZZ_CHECK(k, "%s: byte %zu (0x%02x) is not UTF-8", what, i, s[i]);
		uint32_t cp = code_point(s + i, k);
		/* text kept as lines (a block, a <pre>) keeps its tabs too */
		FUZZ_CHECK(!(cp < 0x20 && !(newlines && (cp == '\n' || cp == '\t'))) && cp != 0x7f &&
		               !(cp >= 0x80 && cp <= 0x9f),
		           "%s: control character U+%04X at byte %zu, after \"%.*s\"", what, (unsigned)cp, i,
		           (int)(i < 60 ? i : 60), p + i - (i < 60 ? i : 60));
		FUZZ_CHECK(!((cp >= 0x200b && cp <= 0x200f) || cp == 0x2028 || cp == 0x2029 ||
		             (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2069) || cp == 0xfeff),
		           "%s: invisible U+%04X at byte %zu", what, (unsigned)cp, i);
		i += k;
	}
	return chars;
}

/* Text in colour, less the program's own SGR sequences (lib/logtext.c). */
CHECKER static void check_coloured(const char *p, size_t n)
{
	static const char *const sgr[] = {"\033[0m", "\033[1m", "\033[2m", "\033[1;31m", "\033[32m", "\033[33m",
	                                  "\033[36m"};
	struct buf plain = {0};
	for (size_t i = 0; i < n;) {
		int matched = 0;
		for (size_t k = 0; k < sizeof sgr / sizeof *sgr && !matched; k++) {
			size_t l = strlen(sgr[k]);
			if (n - i >= l && memcmp(p + i, sgr[k], l) == 0) {
				i += l;
				matched = 1;
			}
		}
		if (!matched)
			buf_addc(&plain, p[i++]);
	}
	check_shown("text in colour", plain.p ? plain.p : "", plain.len, 1);
	buf_free(&plain);
}

CHECKER static void check_json_line(const struct buf *b)
{
	FUZZ_CHECK(b->len && b->p[b->len - 1] == '\n', "--json: not one line");
	for (size_t i = 0; i + 1 < b->len; i++)
		FUZZ_CHECK(b->p[i] >= 0x20 && b->p[i] < 0x7f, "--json: byte 0x%02x at %zu",
		           (unsigned char)b->p[i], i);
	struct sfma_err e;
	json_t *back = ndjson_parse(b->p, b->len - 1, &e);
	FUZZ_CHECK(json_is_object(back), "--json: does not parse back: %s", back ? "not an object" : e.text);
	json_decref(back);
}

static void check_row(const json_t *row, long run, uint64_t line)
{
	const char *kind = json_string_value(json_object_get(row, "row"));
	FUZZ_CHECK(kind && (strcmp(kind, "entry") == 0 || strcmp(kind, "invalid") == 0), "row type %s",
	           kind ? kind : "(none)");
	FUZZ_CHECK(json_integer_value(json_object_get(row, "run")) == run, "row of run %lld, not %ld",
	           (long long)json_integer_value(json_object_get(row, "run")), run);
	FUZZ_CHECK((uint64_t)json_integer_value(json_object_get(row, "line")) == line, "row of line %lld, not %llu",
	           (long long)json_integer_value(json_object_get(row, "line")), (unsigned long long)line);
	FUZZ_CHECK(json_is_string(json_object_get(row, "display")), "line %llu: no display text",
	           (unsigned long long)line);
	json_t *k = json_object_get(row, "kind");
	FUZZ_CHECK(strcmp(kind, "invalid") == 0 || !k || json_is_null(k) || json_is_string(k),
	           "line %llu: a kind that is not a string", (unsigned long long)line);
}

/* The page's own tags: anything else after a '<' came from the trace. */
CHECKER static void check_page(const struct buf *b, size_t rows)
{
	static const char *const tags[] = {"!DOCTYPE", "html", "head", "meta", "title", "style", "body", "main",
	                                   "h1", "h2", "p", "code", "div", "b", "span", "svg", "text", "line",
	                                   "a", "rect", "table", "thead", "tbody", "tr", "th", "td", "details",
	                                   "summary", "pre", "ul", "li", "footer", "i", "g", "h3", "ol", "section"};
	check_shown("page", b->p, b->len, 1);
	size_t table_rows = 0;
	for (size_t i = 0; i < b->len; i++) {
		if (b->p[i] != '<')
			continue;
		const char *t = b->p + i + 1 + (b->p[i + 1] == '/');
		int known = 0;
		for (size_t k = 0; k < sizeof tags / sizeof *tags && !known; k++) {
			size_t l = strlen(tags[k]);
			known = strncmp(t, tags[k], l) == 0 && (t[l] == ' ' || t[l] == '>');
		}
		FUZZ_CHECK(known, "page: a tag that is not the page's at byte %zu: %.20s", i, b->p + i);
		table_rows += strncmp(b->p + i, "<tr id=\"line-", 13) == 0;
	}
	FUZZ_CHECK(table_rows == rows, "page: %zu table rows for %zu rows", table_rows, rows);
}

/* The runs cover lines 1..lines in order, each from its first line's offset. */
CHECKER static void check_split(const struct rv_splitter *s, const uint8_t *data, size_t size, int torn)
{
	uint64_t lines = 0;
	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	FUZZ_CHECK(s->lines == lines, "%llu lines split, the trace has %llu", (unsigned long long)s->lines,
	           (unsigned long long)lines);
	FUZZ_CHECK(torn == (size && data[size - 1] != '\n'), "torn: %d", torn);
	FUZZ_CHECK((s->n == 0) == (lines == 0), "%zu runs in %llu lines", s->n, (unsigned long long)lines);
	uint64_t *start = calloc(lines + 2, sizeof *start); /* start[l]: offset of line l */
	must(start != NULL, "calloc");
	for (size_t i = 0, l = 1; i < size && l <= lines; i++)
		if (data[i] == '\n')
			start[++l] = i + 1;
	uint64_t next = 1;
	for (size_t r = 0; r < s->n; r++) {
		const struct rv_run *run = &s->runs[r];
		FUZZ_CHECK(run->first_line == next, "run %zu starts at line %llu, not %llu", r + 1,
		           (unsigned long long)run->first_line, (unsigned long long)next);
		FUZZ_CHECK(run->last_line >= run->first_line && run->last_line <= lines, "run %zu: lines %llu to %llu",
		           r + 1, (unsigned long long)run->first_line, (unsigned long long)run->last_line);
		FUZZ_CHECK(run->offset == start[run->first_line], "run %zu at offset %llu, its first line at %llu",
		           r + 1, (unsigned long long)run->offset, (unsigned long long)start[run->first_line]);
		next = run->last_line + 1;
	}
	FUZZ_CHECK(s->n == 0 || next == lines + 1, "the runs end at line %llu of %llu",
	           (unsigned long long)next - 1, (unsigned long long)lines);
	free(start);
}

/* Run r of the trace, read as sfma-report does (and as sfma-log does,
 * with its clip): its rows, header and footer. */
static json_t *read_run(const struct rv_splitter *s, long r, const uint8_t *data, size_t size, int torn,
                        size_t clip, const json_t *record, json_t **header, json_t **footer)
{
	struct rv_view v;
	rv_view_init(&v, sfma_fd, r + 1, clip);
	json_t *rows = json_array();
	const struct rv_run *run = &s->runs[r];
	size_t at = (size_t)run->offset;
	for (uint64_t line = run->first_line; line <= run->last_line; line++) {
		const uint8_t *nl = memchr(data + at, '\n', size - at);
		FUZZ_CHECK(nl, "line %llu of run %ld is past the end", (unsigned long long)line, r + 1);
		size_t len = (size_t)(nl - (data + at));
		json_t *row = rv_row(&v, (const char *)data + at, len, line);
		check_row(row, r + 1, line);
		json_array_append_new(rows, row);
		at += len + 1;
	}
	if (torn && (size_t)r == s->n - 1) {
		json_t *row = rv_row_invalid(&v, s->lines + 1, "torn final line (no newline)");
		check_row(row, r + 1, s->lines + 1);
		json_array_append_new(rows, row);
	}
	*header = rv_header(&v, s->n);
	*footer = rv_footer(&v, record);
	FUZZ_CHECK(*header && *footer, "no header or footer");
	rv_view_free(&v);
	return rows;
}

static void render_log(const json_t *rows, const json_t *header, const json_t *footer)
{
	for (int colour = 0; colour < 2; colour++) {
		struct buf text = {0};
		log_text_header(&text, header, colour, colour ? "following" : NULL);
		size_t i;
		json_t *row;
		json_array_foreach(rows, i, row) {
			log_text_row(&text, row, colour);
			log_text_row_full(&text, row, colour); /* --turn */
		}
		log_text_footer(&text, footer, colour);
		if (colour)
			check_coloured(text.p, text.len);
		else
			check_shown("text", text.p, text.len, 1);
		/* wrapped to a terminal's width: no line is wider */
		struct buf wrapped = {0};
		log_text_wrap(&wrapped, text.p ? text.p : "", text.len, 40);
		if (!colour) {
			size_t cols = 0;
			for (size_t k = 0; k < wrapped.len; k++) {
				if (wrapped.p[k] == '\n') {
					cols = 0;
					continue;
				}
				cols += ((unsigned char)wrapped.p[k] & 0xc0) != 0x80;
				FUZZ_CHECK(cols <= 40, "wrapped text: a line wider than 40 columns at byte %zu", k);
			}
			check_shown("wrapped text", wrapped.p ? wrapped.p : "", wrapped.len, 1);
		} else {
			check_coloured(wrapped.p ? wrapped.p : "", wrapped.len);
		}
		buf_free(&wrapped);
		buf_free(&text);
	}
	struct buf line = {0};
	const json_t *all[] = {header, footer};
	for (size_t k = 0; k < 2; k++) {
		buf_reset(&line);
		FUZZ_CHECK(log_json_row(&line, all[k]) == 0, "--json: cannot encode");
		check_json_line(&line);
	}
	size_t i;
	json_t *row;
	json_array_foreach(rows, i, row) {
		buf_reset(&line);
		FUZZ_CHECK(log_json_row(&line, row) == 0, "--json: cannot encode row %zu", i);
		check_json_line(&line);
	}
	buf_free(&line);
}

static void render_page(const json_t *rows, const json_t *header, const json_t *footer, long run, size_t runs,
                        const uint8_t *data, size_t size)
{
	/* The verifier's line is made visible by sfma-report before it is
	 * shown; here it is the trace's first bytes. */
	struct report_verify vr = {.status = size ? data[0] % 4 - 1 : 0};
	struct buf seen = {0};
	size_t n = size < 200 ? size : 200;
	rv_visible(&seen, (const char *)data, n, 0);
	snprintf(vr.line, sizeof vr.line, "%s%s", size && data[0] & 1 ? "AUDIT_OK " : "", seen.p ? seen.p : "");
	buf_free(&seen);
	char ws[65];
	size_t wn = size < 64 ? size : 64;
	memcpy(ws, data, wn);
	ws[wn] = '\0';
	const struct report_run rep = {rows, header, footer, run, runs};
	struct buf page = {0};
	report_page(&page, ws, &rep, &vr);
	check_page(&page, json_array_size(rows));
	buf_free(&page);
}

static void check_visible(const uint8_t *data, size_t size)
{
	for (size_t max = 0; max <= 16; max += 5) {
		struct buf b = {0};
		rv_visible(&b, (const char *)data, size, max);
		size_t chars = check_shown("rv_visible", b.p ? b.p : "", b.len, 0);
		FUZZ_CHECK(!max || chars <= 8 * max + 3, "rv_visible kept %zu characters of at most %zu", chars, max);
		buf_free(&b);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("trace", MFD_CLOEXEC);
	must(fd >= 0, "memfd_create");
	must(write(fd, data, size) == (ssize_t)size, "write");
	struct rv_splitter s;
	rv_split_init(&s);
	int torn;
	struct sfma_err e;
	FUZZ_CHECK(rv_split_fd(fd, &s, &torn, &e) == 0, "rv_split_fd: %s", e.text);
	close(fd);
	check_split(&s, data, size, torn);
	check_visible(data, size < 512 ? size : 512);

	/* The record: the trace's last line, when it is an object. */
	json_t *record = NULL;
	if (size) {
		size_t end = size - (data[size - 1] == '\n'), start = end;
		while (start > 0 && data[start - 1] != '\n')
			start--;
		record = ndjson_parse((const char *)data + start, end - start, &e);
		if (!json_is_object(record)) {
			json_decref(record);
			record = NULL;
		}
	}
	for (size_t r = 0; r < s.n && r < MAX_RUNS; r++) {
		long run = (long)(s.n <= MAX_RUNS ? r : s.n - MAX_RUNS + r);
		json_t *header, *footer;
		json_t *rows = read_run(&s, run, data, size, torn, 4096, r % 2 ? record : NULL, &header, &footer);
		render_log(rows, header, footer);
		json_decref(rows);
		json_decref(header);
		json_decref(footer);
		rows = read_run(&s, run, data, size, torn, 8192, r % 2 ? NULL : record, &header, &footer);
		render_page(rows, header, footer, run + 1, s.n, data, size);
		json_decref(rows);
		json_decref(header);
		json_decref(footer);
	}
	json_decref(record);
	rv_split_free(&s);
	return 0;
}
