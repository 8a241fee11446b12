/* sfma-report - one run of a workspace as a self-contained HTML page.
 *
 *   sfma-report WORKSPACE [-o FILE] [--run N]
 *
 * The page holds everything it shows: inline CSS, an inline SVG timeline,
 * no script, and a Content-Security-Policy that forbids every fetch, so it
 * can be mailed or archived and opened offline. Every string from the
 * trace is hostile input and is escaped for HTML. The verify status comes
 * from running the sfma-verify found beside this program: the page never
 * vouches for a trace on its own. Exit 0, 1 on an unreadable trace or a
 * failed write, 2 on usage errors. */
#include "atomic.h"
#include "buf.h"
#include "cli.h"
#include "err.h"
#include "ndjson.h"
#include "runview.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: sfma-report WORKSPACE [-o FILE] [--run N]\n"
	"       sfma-report --version | --help\n"
	"  -o FILE    write the page to FILE (atomically, mode 0600) instead of standard output\n"
	"  --run N    the Nth run (1 is the first, -1 the last; default -1)\n";

#define CLIP_BYTES 8192
#define VERIFY_OUTPUT_MAX (64u << 10)

/* ---- escaping ------------------------------------------------------------ */

/* Append s[0..n) escaped for HTML text and attribute values. */
static void esc_raw(struct buf *b, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		switch (s[i]) {
		case '&': buf_adds(b, "&amp;"); break;
		case '<': buf_adds(b, "&lt;"); break;
		case '>': buf_adds(b, "&gt;"); break;
		case '"': buf_adds(b, "&quot;"); break;
		case '\'': buf_adds(b, "&#39;"); break;
		default: buf_addc(b, s[i]);
		}
	}
}

static void esc(struct buf *b, const char *s)
{
	esc_raw(b, s, strlen(s));
}

/* A string from the trace: control characters made visible (as sfma-log
 * shows them), clipped to max characters (0: all), then HTML-escaped.
 * With lines, newlines stay newlines (for <pre>). */
static void esc_text(struct buf *b, const json_t *v, size_t max, int lines)
{
	size_t n;
	const char *s = rv_str(v, &n);
	if (!s)
		return;
	struct buf t = {0};
	if (!lines) {
		rv_visible(&t, s, n, max);
	} else {
		size_t start = 0;
		for (size_t i = 0; i <= n; i++) {
			if (i == n || s[i] == '\n') {
				rv_visible(&t, s + start, i - start, 0);
				if (i < n)
					buf_addc(&t, '\n');
				start = i + 1;
			}
		}
	}
	esc_raw(b, t.p ? t.p : "", t.len);
	buf_free(&t);
}

static const char *str(const json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

static double num(const json_t *o, const char *k)
{
	double d = json_number_value(json_object_get(o, k));
	return isfinite(d) ? d : 0;
}

static int is(const json_t *o, const char *k, const char *val)
{
	return strcmp(str(o, k), val) == 0;
}

/* ---- verification -------------------------------------------------------- */

struct verify {
	int status;       /* exit status; -1: could not run */
	char line[1024];  /* its verdict line */
};

/* Run the sfma-verify that sits beside this program on the workspace and
 * keep its one-line verdict (stdout and stderr together, bounded). */
static void run_verify(const char *ws, struct verify *out)
{
	char self[PATH_MAX], prog[PATH_MAX + 16];
	out->status = -1;
	snprintf(out->line, sizeof out->line, "sfma-verify could not be run");
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return;
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (!slash)
		return;
	*slash = '\0';
	snprintf(prog, sizeof prog, "%s/sfma-verify", self);
	if (access(prog, X_OK) != 0) {
		snprintf(out->line, sizeof out->line, "sfma-verify not found beside sfma-report (%.900s)", prog);
		return;
	}
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return;
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return;
	}
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		dup2(p[1], STDERR_FILENO);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (null >= 0)
			dup2(null, STDIN_FILENO);
		execl(prog, "sfma-verify", "--", ws, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	struct buf b = {0};
	char chunk[4096];
	for (;;) {
		ssize_t got = read(p[0], chunk, sizeof chunk);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		if (b.len < VERIFY_OUTPUT_MAX)
			buf_add(&b, chunk, (size_t)got);
	}
	close(p[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	out->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	/* the verdict line: the one that starts AUDIT_, else the first */
	const char *text = b.p ? b.p : "";
	const char *pick = strstr(text, "AUDIT_");
	while (pick && pick != text && pick[-1] != '\n')
		pick = strstr(pick + 1, "AUDIT_");
	if (!pick)
		pick = text;
	size_t len = strcspn(pick, "\n");
	struct buf vis = {0};
	rv_visible(&vis, pick, len, 400);
	snprintf(out->line, sizeof out->line, "%s", vis.p ? vis.p : "(no output)");
	if (!vis.len)
		snprintf(out->line, sizeof out->line, "sfma-verify printed nothing (exit %d)", out->status);
	buf_free(&vis);
	buf_free(&b);
}

/* ---- the run -------------------------------------------------------------- */

struct report {
	json_t *rows;     /* entry and invalid rows, in order */
	json_t *header, *footer, *record;
	size_t runs;
	long run;
	int torn;
};

/* <workspace>/.sfma and its trace, opened as every reader of a workspace
 * opens them (rv_open_sfma, rv_open_trace: a FIFO or a link is refused). */
static int open_sfma(const char *ws, int *trace_fd)
{
	struct sfma_err e;
	int dfd = rv_open_sfma(ws, &e);
	if (dfd < 0)
		die("%s", e.text);
	int fd = rv_open_trace(dfd, &e);
	if (fd < 0)
		die("%s/.sfma/%s", ws, e.text);
	*trace_fd = fd;
	return dfd;
}

static void load_run(const char *ws, long pick, struct report *rep, int sfma_dirfd, int fd)
{
	struct rv_splitter split;
	struct sfma_err e;
	rv_split_init(&split);
	if (rv_split_fd(fd, &split, &rep->torn, &e) < 0)
		die("%s/.sfma/trace.jsonl: %s", ws, e.text);
	if (split.n == 0)
		die("%s/.sfma/trace.jsonl: no entries", ws);
	long i = rv_pick(&split, pick);
	if (i < 0)
		die("%s: no run %ld (the trace holds %zu)", ws, pick, split.n);
	const struct rv_run *run = &split.runs[i];
	rep->runs = split.n;
	rep->run = i + 1;
	if (i != (long)split.n - 1)
		rep->torn = 0;
	struct rv_view v;
	rv_view_init(&v, sfma_dirfd, i + 1, CLIP_BYTES);
	rep->rows = json_array();
	if (lseek(fd, (off_t)run->offset, SEEK_SET) < 0)
		die("%s/.sfma/trace.jsonl: seek: %s", ws, strerror(errno));
	struct line_reader lr;
	lr_init(&lr, fd, RV_MAX_LINE);
	uint64_t line_no = run->first_line - 1;
	while (line_no < run->last_line) {
		char *line;
		size_t len;
		int rc = lr_next(&lr, &line, &len, &e);
		if (rc == 0)
			break;
		line_no++;
		if (rc == 1) {
			json_array_append_new(rep->rows, rv_row(&v, line, len, line_no));
			continue;
		}
		if (lr.torn)
			break;
		if (!strstr(e.text, "longer than"))
			die("%s/.sfma/trace.jsonl: %s", ws, e.text);
		json_array_append_new(rep->rows, rv_row_invalid(&v, line_no, "longer than the line maximum"));
		if (!lr_skip_line(&lr))
			break;
	}
	lr_free(&lr);
	if (rep->torn)
		json_array_append_new(rep->rows, rv_row_invalid(&v, split.lines + 1, "torn final line (no newline)"));
	if (rv_load_record(sfma_dirfd, &rep->record, &e) < 0)
		die("%s/.sfma/%s", ws, e.text);
	rep->header = rv_header(&v, split.n);
	rep->footer = rv_footer(&v, rep->record);
	rv_view_free(&v);
	rv_split_free(&split);
}

/* ---- the page ------------------------------------------------------------- */

static const char css[] =
	":root{--fg:#1d2430;--muted:#5b6577;--line:#d9dee7;--bg:#f6f7f9;--card:#fff;"
	"--pass:#1a7f37;--pass-bg:#e6f4ea;--bad:#c62828;--bad-bg:#fdecea;--warn:#9a6700;--warn-bg:#fff4d6;"
	"--model:#3b6fd8;--cmd:#8e44ad}"
	"*{box-sizing:border-box}"
	"body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,'Segoe UI',"
	"Roboto,'DejaVu Sans',sans-serif}"
	"main{max-width:1180px;margin:0 auto;padding:24px 28px 40px}"
	"h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 10px}"
	".sub{color:var(--muted);margin:0 0 16px}"
	"code,pre,.mono{font-family:ui-monospace,'DejaVu Sans Mono','Liberation Mono',monospace;font-size:12.5px}"
	".audit{border-radius:8px;padding:12px 16px;margin:12px 0 18px;border:1px solid;word-break:break-all}"
	".audit b{font-size:15px;margin-right:8px}"
	".audit.ok{background:var(--pass-bg);border-color:#a7d8b4;color:#0f5323}"
	".audit.invalid{background:var(--bad);border-color:var(--bad);color:#fff;font-size:15px}"
	".audit.invalid b{font-size:20px;display:block;margin-bottom:4px}"
	".audit.unknown{background:var(--warn-bg);border-color:#e9cf86;color:#5c3d00}"
	".cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(132px,1fr));gap:10px}"
	".card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px}"
	".card .k{color:var(--muted);font-size:11px;text-transform:uppercase;letter-spacing:.04em}"
	".card .v{font-size:16px;font-weight:600;margin-top:2px;overflow-wrap:anywhere}"
	".v.completed{color:var(--pass)}.v.failed,.v.bad{color:var(--bad)}.v.halted,.v.unfinished{color:var(--warn)}"
	".note{background:var(--card);border:1px solid var(--line);border-left:4px solid var(--model);"
	"border-radius:6px;padding:10px 14px;margin-top:12px;white-space:pre-wrap;overflow-wrap:anywhere}"
	".note.why{border-left-color:var(--bad)}"
	".note ul{margin:4px 0 0;padding-left:20px;white-space:normal}.note li{margin:2px 0}"
	"a{color:#2f5fb3}"
	".panel{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px}"
	"svg{display:block;width:100%;height:auto}"
	".legend{color:var(--muted);font-size:12px;margin-top:6px}"
	".legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin:0 4px 0 12px;"
	"vertical-align:-1px}"
	"table{width:100%;border-collapse:collapse;background:var(--card);border:1px solid var(--line);"
	"border-radius:8px;overflow:hidden}"
	"th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}"
	"th{background:#eef1f5;font-weight:600;font-size:12px;color:var(--muted)}"
	"td.what{overflow-wrap:anywhere;width:62%}"
	"tr.refused td{background:var(--bad-bg)}tr.invalid td{background:var(--warn-bg)}"
	"tr.quiet td{color:var(--muted)}tr.call td{color:#2b3b5c}"
	".badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:11.5px;font-weight:700}"
	".badge.pass{background:var(--pass-bg);color:var(--pass)}.badge.refused,.badge.error,.badge.failed,"
	".badge.invalid{background:var(--bad);color:#fff}.badge.halt{background:var(--warn-bg);color:var(--warn)}"
	"details{margin-top:4px}summary{cursor:pointer;color:var(--muted);overflow-wrap:anywhere}"
	"summary .mono{color:#36425a}"
	"pre{background:#f3f5f8;border:1px solid var(--line);border-radius:6px;padding:8px;margin:4px 0 0;"
	"white-space:pre-wrap;overflow-wrap:anywhere;max-height:320px;overflow:auto}"
	"footer{color:var(--muted);font-size:12px;margin-top:26px}";

static void card(struct buf *b, const char *k, const char *cls, const char *v)
{
	buf_adds(b, "<div class=\"card\"><div class=\"k\">");
	esc(b, k);
	buf_adds(b, "</div><div class=\"v ");
	esc(b, cls);
	buf_adds(b, "\">");
	esc(b, v);
	buf_adds(b, "</div></div>\n");
}

static int audit_ok(const struct verify *vr)
{
	return vr->status == 0 && strncmp(vr->line, "AUDIT_OK", 8) == 0;
}

static void audit_banner(struct buf *b, const struct verify *vr)
{
	if (audit_ok(vr)) {
		buf_adds(b, "<div class=\"audit ok\" id=\"audit\"><b>AUDIT_OK</b><span class=\"mono\">");
		esc(b, vr->line + 8);
		buf_adds(b, "</span><div>The trace and its result record verify (sfma-verify).</div></div>\n");
	} else if (vr->status == 1 || strncmp(vr->line, "AUDIT_INVALID", 13) == 0) {
		buf_adds(b, "<div class=\"audit invalid\" id=\"audit\" role=\"alert\"><b>AUDIT_INVALID</b>"
		            "<span class=\"mono\">");
		const char *why = vr->line;
		if (strncmp(why, "AUDIT_INVALID", 13) == 0)
			why += 13 + strspn(why + 13, ": ");
		esc(b, why);
		buf_adds(b, "</span><div>This trace does not verify: nothing on this page can be trusted.</div></div>\n");
	} else {
		buf_adds(b, "<div class=\"audit unknown\" id=\"audit\" role=\"alert\"><b>NOT VERIFIED</b><span class=\"mono\">");
		esc(b, vr->line);
		buf_printf(b, "</span><div>sfma-verify did not confirm this trace (exit %d): treat it as "
		              "unverified.</div></div>\n", vr->status);
	}
}

static void summary_cards(struct buf *b, const struct report *rep, const struct verify *vr)
{
	const json_t *f = rep->footer;
	const char *verdict = json_string_value(json_object_get(f, "verdict"));
	char v[128];
	buf_adds(b, "<div class=\"cards\">\n");
	/* the verdict is the trace's string: shown escaped, coloured by what it is */
	const char *cls = !verdict ? "unfinished" : strcmp(verdict, "completed") == 0 ? "completed"
	                : strncmp(verdict, "halted", 6) == 0 ? "halted" : "failed";
	struct buf vtext = {0};
	if (verdict)
		rv_visible(&vtext, verdict, strlen(verdict), 60);
	card(b, "verdict", cls, verdict ? vtext.p : "unfinished");
	buf_free(&vtext);
	snprintf(v, sizeof v, "%.0f", num(f, "turns"));
	card(b, "turns", "", v);
	snprintf(v, sizeof v, "%.0f", num(f, "modelCalls"));
	if (num(f, "failedCalls") > 0)
		snprintf(v + strlen(v), sizeof v - strlen(v), " (%.0f failed)", num(f, "failedCalls"));
	card(b, "model calls", "", v);
	snprintf(v, sizeof v, "%.0f", num(f, "hardTierFailures"));
	card(b, "refused", num(f, "hardTierFailures") > 0 ? "bad" : "", v);
	snprintf(v, sizeof v, "%.0f", num(f, "protocolRefusals"));
	card(b, "invalid replies", num(f, "protocolRefusals") > 0 ? "bad" : "", v);
	if (json_is_number(json_object_get(f, "durationMs")))
		snprintf(v, sizeof v, "%.3f s", num(f, "durationMs") / 1000);
	else
		snprintf(v, sizeof v, "unknown");
	card(b, "duration", "", v);
	json_t *u = json_object_get(f, "usage");
	if (json_is_object(u))
		snprintf(v, sizeof v, "%.0f / %.0f", num(u, "inputTokens"), num(u, "outputTokens"));
	else
		snprintf(v, sizeof v, "not recorded");
	card(b, "tokens in / out", "", v);
	if (json_is_object(u)) {
		snprintf(v, sizeof v, "%.0f", num(u, "cachedInputTokens"));
		card(b, "cached input tokens", "", v);
	}
	json_t *rec = json_object_get(f, "record");
	if (json_is_object(rec))
		card(b, "dry run", "", json_is_true(json_object_get(rec, "dryRun")) ? "yes" : "no");
	/* the record's claim to seal the run means something only once verified */
	int sealed = json_is_true(json_object_get(f, "sealed"));
	card(b, "sealed", sealed && audit_ok(vr) ? "" : sealed ? "bad" : "halted",
	     !sealed ? "no" : audit_ok(vr) ? "yes" : "unverified");
	buf_adds(b, "</div>\n");
	if (json_is_string(json_object_get(f, "summary"))) {
		buf_adds(b, "<div class=\"note\" id=\"summary\"><b>Summary</b> (the model's done)\n");
		esc_text(b, json_object_get(f, "summary"), 0, 1);
		buf_adds(b, "</div>\n");
	}
	if (json_is_string(json_object_get(f, "error")) && !(verdict && strcmp(verdict, "completed") == 0)) {
		buf_adds(b, "<div class=\"note why\" id=\"why\"><b>Why</b> ");
		esc_text(b, json_object_get(f, "error"), 0, 1);
		buf_adds(b, "</div>\n");
	}
	/* every refusal, each linked to its row: what a reviewer looks for first */
	size_t i, shown = 0;
	json_t *row;
	json_array_foreach(rep->rows, i, row) {
		if (!is(row, "kind", "verdict") || json_is_true(json_object_get(row, "pass")))
			continue;
		if (!shown++)
			buf_adds(b, "<div class=\"note why\" id=\"refusals\"><b>Refused</b><ul>");
		buf_printf(b, "<li><a href=\"#line-%.0f\">", num(row, "line"));
		if (num(row, "turn") >= 1)
			buf_printf(b, "T%.0f", num(row, "turn"));
		else
			buf_printf(b, "line %.0f", num(row, "line"));
		buf_adds(b, "</a> ");
		esc_text(b, json_object_get(row, "display"), 300, 0);
		buf_adds(b, "</li>");
		if (shown >= 50) {
			buf_adds(b, "<li>(more in the table)</li>");
			break;
		}
	}
	if (shown)
		buf_adds(b, "</ul></div>\n");
}

/* ---- the timeline --------------------------------------------------------- */

#define SVG_W 1120
#define LABEL_W 110
#define PLOT_W (SVG_W - LABEL_W - 16)

struct turn_cell {
	double turn;
	uint64_t line;
	int state; /* 0 none, 1 pass, 2 protocol refusal, 3 refused */
	const json_t *what;
	const json_t *tool;
	const char *label; /* when there is no tool */
};

static const char *state_fill(int s)
{
	static const char *const fill[] = {"#9aa5b8", "#2da44e", "#d4a72c", "#cf222e"};
	return fill[s < 0 || s > 3 ? 0 : s];
}

static void svg_title(struct buf *b, const json_t *row)
{
	buf_adds(b, "<title>");
	buf_printf(b, "line %.0f, %s: ", num(row, "line"), str(row, "kind"));
	esc_text(b, json_object_get(row, "display"), 300, 0);
	buf_adds(b, "</title>");
}

static void nice_ticks(double total, double *step)
{
	static const double steps[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000,
	                               30000, 60000, 120000, 300000, 600000, 1800000, 3600000, 7200000};
	*step = steps[sizeof steps / sizeof *steps - 1];
	for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
		if (total / steps[i] <= 8) {
			*step = steps[i];
			break;
		}
}

static void fmt_ms(char *out, size_t n, double ms)
{
	if (ms >= 1000)
		snprintf(out, n, "%.3g s", ms / 1000);
	else
		snprintf(out, n, "%.0f ms", ms);
}

static void timeline(struct buf *b, const struct report *rep)
{
	size_t nrows = json_array_size(rep->rows), i;
	json_t *row;
	/* turns: one cell each, coloured by the worst verdict in it */
	struct turn_cell *cells = xcalloc(nrows + 1, sizeof *cells);
	size_t ncells = 0;
	double total = num(rep->footer, "durationMs");
	int loops_max = 1;
	json_array_foreach(rep->rows, i, row) {
		double t = num(row, "t");
		if (t > total)
			total = t;
		double loop = num(row, "loop");
		if (loop > loops_max && loop <= 16)
			loops_max = (int)loop;
		if (!is(row, "row", "entry") || num(row, "loop") < 1)
			continue;
		double turn = num(row, "turn");
		if (turn < 1)
			continue;
		if (!ncells || cells[ncells - 1].turn != turn) {
			cells[ncells] = (struct turn_cell){.turn = turn, .line = (uint64_t)num(row, "line")};
			ncells++;
		}
		struct turn_cell *c = &cells[ncells - 1];
		if (is(row, "kind", "task")) {
			c->what = json_object_get(row, "display");
			c->tool = json_object_get(row, "tool");
		}
		if (is(row, "kind", "candidate") && !c->tool) {
			c->what = json_object_get(row, "display");
			c->label = "bootstrap";
		}
		if (is(row, "kind", "verdict") && is(row, "tier", "protocol") && !c->tool)
			c->label = "invalid";
		if (is(row, "kind", "verdict")) {
			int s = json_is_true(json_object_get(row, "pass")) ? 1 : is(row, "tier", "protocol") ? 2 : 3;
			if (s > c->state)
				c->state = s;
			if (!c->what)
				c->what = json_object_get(row, "display");
		}
	}
	if (total <= 0)
		total = 1;
	int lanes = 2 + loops_max; /* turns, model per loop, commands */
	int lane_h = 34, top = 26;
	int height = top + lanes * lane_h + 30;
	buf_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" role=\"img\" "
	              "aria-label=\"timeline of the run\" font-family=\"system-ui,'DejaVu Sans',sans-serif\" "
	              "font-size=\"12\">\n", SVG_W, height);
	/* lane labels and guides */
	for (int l = 0; l < lanes; l++) {
		int y = top + l * lane_h;
		char label[32];
		if (l == 0)
			snprintf(label, sizeof label, "turns");
		else if (l <= loops_max)
			snprintf(label, sizeof label, loops_max > 1 ? "model, loop %d" : "model calls", l);
		else
			snprintf(label, sizeof label, "commands");
		buf_printf(b, "<text x=\"0\" y=\"%d\" fill=\"#5b6577\">%s</text>\n", y + 21, label);
		buf_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#e3e7ee\"/>\n", LABEL_W,
		           y + lane_h, SVG_W, y + lane_h);
	}
	/* the turns lane: equal cells, in order */
	double cw = ncells ? (double)PLOT_W / (double)ncells : PLOT_W;
	for (size_t k = 0; k < ncells; k++) {
		double x = LABEL_W + k * cw;
		buf_printf(b, "<a href=\"#line-%llu\"><rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"24\" rx=\"4\" "
		              "fill=\"%s\">", (unsigned long long)cells[k].line, x + 1, top + 5, cw - 2 > 1 ? cw - 2 : 1,
		           state_fill(cells[k].state));
		buf_printf(b, "<title>turn %.0f: ", cells[k].turn);
		esc_text(b, cells[k].what, 300, 0);
		buf_adds(b, "</title></rect>");
		if (cw >= 34) {
			buf_printf(b, "<text x=\"%.1f\" y=\"%d\" fill=\"#fff\" font-weight=\"600\" text-anchor=\"middle\">",
			           x + cw / 2, top + 21);
			buf_printf(b, "T%.0f", cells[k].turn);
			if (cw >= 90 && json_is_string(cells[k].tool)) {
				buf_adds(b, " ");
				esc_text(b, cells[k].tool, 10, 0);
			} else if (cw >= 90 && cells[k].label) {
				buf_adds(b, " ");
				esc(b, cells[k].label);
			}
			buf_adds(b, "</text>");
		}
		buf_adds(b, "</a>\n");
	}
	/* the time lanes, to scale */
	int drawn = 0;
	json_array_foreach(rep->rows, i, row) {
		if (!is(row, "row", "entry"))
			continue;
		double t = num(row, "t"), dur = 0;
		int lane;
		const char *fill;
		if (is(row, "kind", "call")) {
			dur = num(row, "latencyMs") + num(row, "waitMs");
			double loop = num(row, "loop");
			lane = 1 + (loop >= 1 && loop <= loops_max ? (int)loop - 1 : 0);
			fill = json_is_true(json_object_get(row, "ok")) ? "#3b6fd8" : "#cf222e";
		} else if (is(row, "kind", "verdict") && json_is_number(json_object_get(row, "durationMs"))) {
			dur = num(row, "durationMs");
			lane = 1 + loops_max;
			fill = json_is_true(json_object_get(row, "pass")) ? "#8e44ad" : "#cf222e";
		} else {
			continue;
		}
		/* a duration beyond a day in one entry is not drawable (nor real) */
		if (!(dur > 0 && dur <= 86400000.0 && t >= 0 && t <= total))
			continue;
		double x0 = LABEL_W + (t - dur) / total * PLOT_W, w = dur / total * PLOT_W;
		if (x0 < LABEL_W)
			x0 = LABEL_W;
		if (w < 1.5)
			w = 1.5;
		int y = top + lane * lane_h;
		buf_printf(b, "<a href=\"#line-%.0f\"><rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"18\" rx=\"2\" "
		              "fill=\"%s\" stroke=\"#fff\" stroke-width=\"1\">", num(row, "line"), x0, y + 8, w, fill);
		svg_title(b, row);
		buf_adds(b, "</rect></a>\n");
		drawn++;
	}
	if (!drawn)
		buf_printf(b, "<text x=\"%d\" y=\"%d\" fill=\"#5b6577\">no model latency or command duration above "
		              "0 ms is recorded in this run</text>\n", LABEL_W + 8, top + lane_h + 21);
	/* axis */
	double step;
	nice_ticks(total, &step);
	int ay = top + lanes * lane_h;
	for (double t = 0; t <= total + 1e-9 && t / step < 64; t += step) {
		double x = LABEL_W + t / total * PLOT_W;
		char label[32];
		fmt_ms(label, sizeof label, t);
		buf_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#c9d0db\"/>"
		              "<text x=\"%.1f\" y=\"%d\" fill=\"#5b6577\" text-anchor=\"%s\">%s</text>\n",
		           x, top + lane_h, x, ay + 4, x, ay + 18, t == 0 ? "start" : "middle", label);
	}
	buf_adds(b, "</svg>\n");
	buf_adds(b, "<div class=\"legend\">turns in order:<i style=\"background:#2da44e\"></i>passed"
	            "<i style=\"background:#cf222e\"></i>refused<i style=\"background:#d4a72c\"></i>invalid reply"
	            "<i style=\"background:#9aa5b8\"></i>no verdict &#183; to scale:"
	            "<i style=\"background:#3b6fd8\"></i>model call latency"
	            "<i style=\"background:#8e44ad\"></i>command duration</div>\n");
	free(cells);
}

/* ---- the entries ------------------------------------------------------------ */

static void evidence_block(struct buf *b, const char *label, const json_t *text, const json_t *row)
{
	if (!json_is_string(text))
		return;
	buf_adds(b, "<details class=\"ev\"><summary>");
	esc(b, label);
	size_t i;
	json_t *it;
	json_array_foreach(json_object_get(row, "evidence"), i, it)
		if (json_equal(json_object_get(it, "text"), (json_t *)text)) {
			buf_printf(b, " (%.0f bytes%s)", num(it, "bytes"),
			           json_is_true(json_object_get(it, "clipped")) ? ", clipped" : "");
			break;
		}
	buf_adds(b, ": <span class=\"mono\">");
	esc_text(b, text, 90, 0);
	buf_adds(b, "</span></summary><pre>");
	esc_text(b, text, 0, 1);
	buf_adds(b, "</pre></details>");
}

static void entry_row(struct buf *b, const json_t *row)
{
	const char *kind = str(row, "kind");
	const char *cls = "";
	const char *badge = NULL, *badge_cls = "";
	if (is(row, "row", "invalid")) {
		cls = "invalid";
		badge = "INVALID", badge_cls = "invalid";
	} else if (strcmp(kind, "verdict") == 0) {
		int pass = json_is_true(json_object_get(row, "pass"));
		/* the soft tier fails work; only the hard tier refuses a call */
		int soft = is(row, "tier", "soft") || is(row, "tier", "criteria");
		cls = pass ? "" : "refused";
		badge = pass ? "PASS" : soft ? "FAIL" : "REFUSED", badge_cls = pass ? "pass" : "refused";
	} else if (strcmp(kind, "call") == 0) {
		cls = "call";
		if (!json_is_true(json_object_get(row, "ok")))
			badge = "FAILED", badge_cls = "failed";
	} else if (strcmp(kind, "result") == 0) {
		int halt = json_is_string(json_object_get(row, "halt"));
		badge = halt ? "HALT" : "ERROR", badge_cls = halt ? "halt" : "error";
	} else if (strcmp(kind, "store") == 0 || strcmp(kind, "weight") == 0) {
		cls = "quiet";
	}
	buf_printf(b, "<tr id=\"line-%.0f\" class=\"%s\" data-kind=\"", num(row, "line"), cls);
	esc(b, kind);
	buf_printf(b, "\"><td class=\"mono\">+%.3fs</td><td>%.0f</td><td>", num(row, "t") / 1000,
	           num(row, "line"));
	if (is(row, "row", "entry"))
		buf_printf(b, "L%.0f", num(row, "loop"));
	buf_adds(b, "</td><td>");
	if (num(row, "turn") >= 1 && num(row, "loop") >= 1)
		buf_printf(b, "T%.0f", num(row, "turn"));
	buf_adds(b, "</td><td>");
	esc_text(b, json_object_get(row, "kind"), 20, 0);
	buf_adds(b, "</td><td class=\"what\">");
	if (badge)
		buf_printf(b, "<span class=\"badge %s\">%s</span> ", badge_cls, badge);
	esc_text(b, json_object_get(row, "display"), 600, 0);
	evidence_block(b, "reply", json_object_get(row, "reply"), row);
	evidence_block(b, "output", json_object_get(row, "output"), row);
	evidence_block(b, "summary", json_object_get(row, "summary"), row);
	evidence_block(b, "content", json_object_get(row, "content"), row);
	size_t i;
	json_t *it;
	json_array_foreach(json_object_get(row, "evidence"), i, it) {
		if (is(it, "state", "present"))
			continue;
		buf_adds(b, "<div><span class=\"badge ");
		buf_adds(b, is(it, "state", "altered") ? "error" : "halt");
		buf_adds(b, "\">evidence ");
		esc_text(b, json_object_get(it, "state"), 20, 0);
		buf_adds(b, "</span> ");
		esc_text(b, json_object_get(it, "field"), 60, 0);
		buf_adds(b, "</div>");
	}
	buf_adds(b, "</td></tr>\n");
}

static void page(struct buf *b, const char *ws, const struct report *rep, const struct verify *vr)
{
	const json_t *rec = json_object_get(rep->footer, "record");
	const char *name = json_string_value(json_object_get(rec, "name"));
	const char *verdict = json_string_value(json_object_get(rep->footer, "verdict"));
	buf_adds(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
	            /* nothing may be fetched, nothing may run: the page is data */
	            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
	            "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'\">\n"
	            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>sfma report: ");
	if (name)
		esc_text(b, json_object_get(rec, "name"), 80, 0);
	else
		buf_printf(b, "run %ld", rep->run);
	buf_adds(b, " &#8212; ");
	if (verdict)
		esc_text(b, json_object_get(rep->footer, "verdict"), 60, 0);
	else
		buf_adds(b, "unfinished");
	buf_adds(b, "</title>\n<style>");
	buf_adds(b, css);
	buf_adds(b, "</style>\n</head>\n<body>\n<main>\n<h1>sfma run report");
	if (name) {
		buf_adds(b, ": <span id=\"name\">");
		esc_text(b, json_object_get(rec, "name"), 120, 0);
		buf_adds(b, "</span>");
	}
	buf_adds(b, "</h1>\n<p class=\"sub\">");
	buf_printf(b, "run %ld of %zu", rep->run, rep->runs);
	if (json_is_string(json_object_get(rep->header, "start"))) {
		buf_adds(b, ", started ");
		esc(b, str(rep->header, "start"));
	}
	buf_adds(b, ", workspace <code>");
	{
		json_t *w = json_string(ws);
		if (!w) /* not UTF-8: shown byte by byte */
			w = json_stringn("(workspace name not UTF-8)", 26);
		esc_text(b, w, 200, 0);
		json_decref(w);
	}
	buf_printf(b, "</code>, trace lines %.0f&#8211;%.0f</p>\n", num(rep->footer, "firstLine"),
	           num(rep->footer, "lastLine"));
	audit_banner(b, vr);
	summary_cards(b, rep, vr);
	buf_adds(b, "<h2>Timeline</h2>\n<div class=\"panel\">\n");
	timeline(b, rep);
	buf_adds(b, "</div>\n<h2>Entries</h2>\n<table>\n<thead><tr><th>time</th><th>line</th><th>loop</th>"
	            "<th>turn</th><th>kind</th><th>what happened</th></tr></thead>\n<tbody>\n");
	size_t i;
	json_t *row;
	json_array_foreach(rep->rows, i, row)
		entry_row(b, row);
	buf_adds(b, "</tbody>\n</table>\n<footer>Made by sfma-report ");
	esc(b, sfma_version());
	buf_adds(b, " from <code>.sfma/trace.jsonl</code>. Times are the run's clock anchors plus the recorded "
	            "model latencies and command durations. This page loads nothing and runs no script.</footer>\n"
	            "</main>\n</body>\n</html>\n");
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	const char *out_path = NULL;
	long pick = -1;
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'}, {"run", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},         {"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":ho:", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': out_path = optarg; break;
		case 'r':
			if (rv_parse_run(optarg, &pick) < 0)
				cli_usage_error(usage_text, "--run: a run number, 1 for the first or -1 for the last (not %s)",
				                optarg);
			break;
		case 'h': cli_help(usage_text);
		case 'V': cli_version();
		default: cli_bad_option(usage_text, c, argv);
		}
	}
	if (optind >= argc)
		cli_usage_error(usage_text, "a WORKSPACE is required");
	if (optind + 1 < argc)
		cli_usage_error(usage_text, "one WORKSPACE only (unexpected %s)", argv[optind + 1]);
	if (out_path && !*out_path)
		cli_usage_error(usage_text, "-o: a file name is required");
	const char *ws = argv[optind];

	int fd;
	int sfma_dirfd = open_sfma(ws, &fd);
	struct report rep = {0};
	load_run(ws, pick, &rep, sfma_dirfd, fd);
	close(fd);
	close(sfma_dirfd);
	struct verify vr;
	run_verify(ws, &vr);

	struct buf html = {0};
	page(&html, ws, &rep, &vr);
	struct sfma_err e;
	if (out_path) {
		/* 0600: the page shows evidence, which the store keeps 0600
		 * (lib/evidence.h); the umask can only make it stricter. */
		if (atomic_write(out_path, html.p, html.len, 0600, &e) < 0)
			die("%s: %s", out_path, e.text);
	} else if (write_all(STDOUT_FILENO, html.p, html.len) < 0) {
		die("standard output: %s", strerror(errno));
	}
	buf_free(&html);
	json_decref(rep.rows);
	json_decref(rep.header);
	json_decref(rep.footer);
	json_decref(rep.record);
	return 0;
}
