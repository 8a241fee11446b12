/* reportpage.c - a run as sfma-report's HTML page (reportpage.h). */
#include "reportpage.h"

#include "ndjson.h"
#include "cli.h"
#include "errors.h"
#include "runview.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static double num(const json_t *o, const char *k)
{
	double d = json_number_value(json_object_get(o, k));
	return isfinite(d) ? d : 0;
}

static int is(const json_t *o, const char *k, const char *val)
{
	return strcmp(ndjson_text(o, k), val) == 0;
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

static int audit_ok(const struct report_verify *vr)
{
	return vr->status == 0 && strncmp(vr->line, "AUDIT_OK", 8) == 0;
}

static void audit_banner(struct buf *b, const struct report_verify *vr)
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

static void summary_cards(struct buf *b, const struct report_run *rep, const struct report_verify *vr)
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
	buf_printf(b, "line %.0f, %s: ", num(row, "line"), ndjson_text(row, "kind"));
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

static void timeline(struct buf *b, const struct report_run *rep)
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
	const char *kind = ndjson_text(row, "kind");
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
	esc_text(b, json_object_get(row, "kind"), 64, 0); /* the trace's, even in an attribute */
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

void report_page(struct buf *b, const char *ws, const struct report_run *rep, const struct report_verify *vr)
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
		esc(b, ndjson_text(rep->header, "start"));
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
