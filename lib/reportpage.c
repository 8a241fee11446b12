/* reportpage.c - a run as sfma-report's HTML page (reportpage.h). */
#include "reportpage.h"

#include "reporthtml.h"

#include "ndjson.h"
#include "cli.h"
#include "errors.h"
#include "runview.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	"footer{color:var(--muted);font-size:12px;margin-top:26px}"
	".badge.warn{background:var(--warn-bg);color:var(--warn)}"
	".scroll{overflow-x:auto}.muted{color:var(--muted)}"
	"h3{font-size:14px;margin:18px 0 8px}"
	"section.loop{margin-bottom:18px}"
	".exchange{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px;"
	"margin:8px 0}.exchange.judging{border-style:dashed}"
	".xhead{color:var(--muted);font-size:12.5px;margin-bottom:6px;overflow-wrap:anywhere}"
	".xhead a{font-weight:700;margin-right:4px}"
	".msg{border-left:3px solid var(--line);padding:2px 0 2px 10px;margin:6px 0}"
	".msg.sent{border-left-color:#9aa5b8}.msg.reply{border-left-color:var(--model)}"
	".who{font-size:11px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}"
	".pair{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:10px;margin:8px 0;"
	"border-top:1px dashed var(--line);padding-top:8px}"
	".side{min-width:0}"
	".callcard{margin:4px 0}.callcard .tool{font-weight:700;font-family:ui-monospace,'DejaVu Sans Mono',monospace}"
	".id{color:var(--muted);font-weight:400;font-size:11.5px}"
	".resultfor{margin-top:4px;font-size:12.5px}"
	".verdict{margin:4px 0;overflow-wrap:anywhere}"
	".write{margin:6px 0 0;overflow-wrap:anywhere}.write a{color:inherit}"
	".tag{display:inline-block;border-radius:4px;padding:0 6px;font-size:11.5px;background:#eef1f5;color:var(--muted)}"
	".tag.new{background:var(--pass-bg);color:var(--pass)}"
	"table.kv{border:0;background:none;width:auto;max-width:100%}"
	"table.kv th{background:none;padding:2px 8px 2px 0;font-family:ui-monospace,'DejaVu Sans Mono',monospace;"
	"color:#36425a;white-space:nowrap;border:0}"
	"table.kv td{padding:2px 0;border:0;overflow-wrap:anywhere}"
	"ol.items{margin:2px 0;padding-left:20px}"
	"pre.diff span{display:block}pre.diff .add{background:#e6f4ea;color:#0f5323}"
	"pre.diff .del{background:#fdecea;color:#8a1c1c}pre.diff .hunk{color:#5b6577}"
	"pre.diff .note{color:var(--muted);font-style:italic}"
	"table.loops td{white-space:nowrap}table.loops td:last-child,table.checks td{white-space:normal;"
	"overflow-wrap:anywhere}"
	"#timeline{overflow-x:auto}#timeline svg{min-width:760px}"
	".refs{font-size:11.5px;color:var(--muted)}"
	"@media (max-width:700px){main{padding:14px 10px 28px}.pair{grid-template-columns:minmax(0,1fr)}"
	"h1{font-size:19px}td.what{width:auto}th,td{padding:4px 5px}}";

static void card(struct buf *b, const char *k, const char *cls, const char *v)
{
	buf_adds(b, "<div class=\"card\"><div class=\"k\">");
	html_esc(b, k);
	buf_adds(b, "</div><div class=\"v ");
	html_esc(b, cls);
	buf_adds(b, "\">");
	html_esc(b, v);
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
		html_esc(b, vr->line + 8);
		buf_adds(b, "</span><div>The trace and its result record verify (sfma-verify).</div></div>\n");
	} else if (vr->status == 1 || strncmp(vr->line, "AUDIT_INVALID", 13) == 0) {
		buf_adds(b, "<div class=\"audit invalid\" id=\"audit\" role=\"alert\"><b>AUDIT_INVALID</b>"
		            "<span class=\"mono\">");
		const char *why = vr->line;
		if (strncmp(why, "AUDIT_INVALID", 13) == 0)
			why += 13 + strspn(why + 13, ": ");
		html_esc(b, why);
		buf_adds(b, "</span><div>This trace does not verify: nothing on this page can be trusted.</div></div>\n");
	} else {
		buf_adds(b, "<div class=\"audit unknown\" id=\"audit\" role=\"alert\"><b>NOT VERIFIED</b><span class=\"mono\">");
		html_esc(b, vr->line);
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
	snprintf(v, sizeof v, "%.0f", html_num(f, "turns"));
	card(b, "turns", "", v);
	snprintf(v, sizeof v, "%.0f", html_num(f, "modelCalls"));
	if (html_num(f, "failedCalls") > 0)
		snprintf(v + strlen(v), sizeof v - strlen(v), " (%.0f failed)", html_num(f, "failedCalls"));
	card(b, "model calls", "", v);
	snprintf(v, sizeof v, "%.0f", html_num(f, "hardTierFailures"));
	card(b, "refused", html_num(f, "hardTierFailures") > 0 ? "bad" : "", v);
	snprintf(v, sizeof v, "%.0f", html_num(f, "protocolRefusals"));
	card(b, "invalid replies", html_num(f, "protocolRefusals") > 0 ? "bad" : "", v);
	if (json_is_number(json_object_get(f, "durationMs")))
		snprintf(v, sizeof v, "%.3f s", html_num(f, "durationMs") / 1000);
	else
		snprintf(v, sizeof v, "unknown");
	card(b, "duration", "", v);
	json_t *u = json_object_get(f, "usage");
	if (json_is_object(u))
		snprintf(v, sizeof v, "%.0f / %.0f", html_num(u, "inputTokens"), html_num(u, "outputTokens"));
	else
		snprintf(v, sizeof v, "not recorded");
	card(b, "tokens in / out", "", v);
	if (json_is_object(u)) {
		snprintf(v, sizeof v, "%.0f", html_num(u, "cachedInputTokens"));
		card(b, "cached input tokens", "", v);
		if (json_is_number(json_object_get(u, "costUsd"))) {
			snprintf(v, sizeof v, "$%.4f", html_num(u, "costUsd"));
			card(b, "cost", "", v);
		}
	}
	const json_t *acc = json_object_get(f, "acceptance");
	if (json_is_object(acc)) {
		const json_t *passed = json_object_get(acc, "passed");
		card(b, "acceptance", json_is_true(passed) ? "completed" : json_is_false(passed) ? "bad" : "",
		     json_is_true(passed) ? "passed" : json_is_false(passed) ? "FAILED" : "not settled");
	}
	json_t *rec = json_object_get(f, "record");
	if (json_is_object(rec))
		card(b, "dry run", "", json_is_true(json_object_get(rec, "dryRun")) ? "yes" : "no");
	/* the record's claim to seal the run means something only once verified */
	int sealed = json_is_true(json_object_get(f, "sealed"));
	card(b, "sealed", sealed && audit_ok(vr) ? "" : sealed ? "bad" : "halted",
	     !sealed ? "no" : audit_ok(vr) ? "yes" : "unverified");
	buf_adds(b, "</div>\n");
	const json_t *all = json_object_get(f, "summaries");
	if (json_array_size(all) > 1) {
		/* every loop's last done */
		buf_adds(b, "<div class=\"note\" id=\"summary\"><b>Summary</b> (each loop's done)<ul>");
		size_t k;
		json_t *one;
		json_array_foreach(all, k, one) {
			buf_printf(b, "<li><a href=\"#line-%.0f\">loop %.0f</a> ", html_num(one, "line"), html_num(one, "loop"));
			html_lines(b, json_object_get(one, "summary"));
			buf_adds(b, "</li>");
		}
		buf_adds(b, "</ul></div>\n");
	} else if (json_is_string(json_object_get(f, "summary"))) {
		buf_adds(b, "<div class=\"note\" id=\"summary\"><b>Summary</b> (the model's done)\n");
		html_lines(b, json_object_get(f, "summary"));
		buf_adds(b, "</div>\n");
	}
	if (json_is_string(json_object_get(f, "error")) && !(verdict && strcmp(verdict, "completed") == 0)) {
		buf_adds(b, "<div class=\"note why\" id=\"why\"><b>Why</b> ");
		html_lines(b, json_object_get(f, "error"));
		buf_adds(b, "</div>\n");
	}
	/* every refusal, each linked to its row: what a reviewer looks for first */
	size_t i, shown = 0;
	json_t *row;
	json_array_foreach(rep->rows, i, row) {
		/* the judges fail work and the checks a done; only the hard tier
		 * and the protocol refuse a call */
		if (!html_is(row, "kind", "verdict") || json_is_true(json_object_get(row, "pass")) ||
		    html_is(row, "tier", "soft") || html_is(row, "tier", "criteria") || html_is(row, "tier", "acceptance"))
			continue;
		if (!shown++)
			buf_adds(b, "<div class=\"note why\" id=\"refusals\"><b>Refused</b><ul>");
		buf_printf(b, "<li><a href=\"#line-%.0f\">", html_num(row, "line"));
		if (html_num(row, "turn") >= 1)
			buf_printf(b, "T%.0f", html_num(row, "turn"));
		else
			buf_printf(b, "line %.0f", html_num(row, "line"));
		buf_adds(b, "</a> ");
		html_text(b, json_object_get(row, "display"), 300);
		buf_adds(b, "</li>");
		if (shown >= 50) {
			buf_adds(b, "<li>(more in the table)</li>");
			break;
		}
	}
	if (shown)
		buf_adds(b, "</ul></div>\n");
}

/* ---- acceptance and loops ------------------------------------------------- */

/* The acceptance checks: whether they passed, then each, how often it
 * ran and passed, how it ended the last time and that run's output. */
static void acceptance_section(struct buf *b, const struct report_run *rep)
{
	const json_t *a = json_object_get(rep->footer, "acceptance");
	if (!json_is_object(a))
		return;
	const json_t *passed = json_object_get(a, "passed");
	buf_adds(b, "<h2>Acceptance</h2>\n<div class=\"scroll\" id=\"acceptance\"><p>");
	if (json_is_true(passed))
		buf_adds(b, "<span class=\"badge pass\">passed</span>");
	else if (json_is_false(passed))
		buf_adds(b, "<span class=\"badge refused\">FAILED</span>");
	else
		buf_adds(b, "<span class=\"badge halt\">not settled</span>");
	if (json_is_number(json_object_get(a, "commands")))
		buf_printf(b, " %.0f check%s,", html_num(a, "commands"), html_num(a, "commands") == 1 ? "" : "s");
	buf_printf(b, " %.0f attempt%s (the dones that ran them)</p>\n", html_num(a, "attempts"),
	           html_num(a, "attempts") == 1 ? "" : "s");
	buf_adds(b, "<table class=\"checks\"><thead><tr><th>#</th><th>command</th><th>ran</th><th>passed</th>"
	            "<th>last</th></tr></thead><tbody>\n");
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(a, "checks"), i, c) {
		const json_t *last = json_object_get(c, "last");
		int ok = json_is_true(json_object_get(last, "pass"));
		buf_printf(b, "<tr class=\"%s\"><td>%zu</td><td class=\"mono\">", ok ? "" : "refused", i + 1);
		html_text(b, json_object_get(c, "cmd"), 300);
		buf_printf(b, "</td><td>%.0f</td><td>%.0f</td><td><a href=\"#line-%.0f\"><span class=\"badge %s\">%s</span></a> ",
		           html_num(c, "runs"), html_num(c, "passes"), html_num(last, "line"), ok ? "pass" : "refused",
		           ok ? "passed" : "FAILED");
		if (json_is_number(json_object_get(last, "exit")))
			buf_printf(b, "exit %.0f", html_num(last, "exit"));
		else
			html_text(b, json_object_get(last, "reason"), 300);
		if (json_is_number(json_object_get(c, "expected")))
			buf_printf(b, " (expected %.0f)", html_num(c, "expected"));
		if (json_is_string(json_object_get(last, "output"))) {
			buf_adds(b, "<details><summary>output</summary><pre>");
			html_lines(b, json_object_get(last, "output"));
			buf_adds(b, "</pre></details>");
		}
		buf_adds(b, "</td></tr>\n");
	}
	buf_adds(b, "</tbody></table></div>\n");
}

#define LOOPS_MAX 16

struct loop_sums {
	int calls, failed, commands;
	double turns_seen, last_turn, in, out, cost, busy_ms;
	int priced;
};

/* Each loop's calls, tokens, cost and commands (and the runner's own). */
static void loops_section(struct buf *b, const struct report_run *rep)
{
	struct loop_sums sum[LOOPS_MAX + 1];
	memset(sum, 0, sizeof sum);
	size_t i;
	json_t *row;
	int rows = 0;
	json_array_foreach(rep->rows, i, row) {
		if (!html_is(row, "row", "entry"))
			continue;
		struct loop_sums *l = &sum[report_loop_of(row)];
		if (html_is(row, "kind", "call")) {
			l->calls++;
			l->failed += !json_is_true(json_object_get(row, "ok"));
			const json_t *u = json_object_get(row, "usage");
			l->in += html_num(u, "inputTokens");
			l->out += html_num(u, "outputTokens");
			if (json_is_number(json_object_get(row, "costUsd"))) {
				l->cost += html_num(row, "costUsd");
				l->priced = 1;
			}
			l->busy_ms += html_num(row, "latencyMs");
			double t = html_num(row, "turn");
			if (!json_is_string(json_object_get(row, "purpose")) && t >= 1 && t != l->last_turn) {
				l->turns_seen++;
				l->last_turn = t;
			}
			rows++;
		} else if (html_is(row, "kind", "verdict") && json_is_number(json_object_get(row, "durationMs"))) {
			l->commands++;
			l->busy_ms += html_num(row, "durationMs");
		}
	}
	if (!rows)
		return;
	buf_adds(b, "<h2>Loops</h2>\n<div class=\"scroll\"><table class=\"loops\" id=\"loops\"><thead><tr><th>loop</th>"
	            "<th>turns</th><th>model calls</th><th>tokens in / out</th><th>cost</th><th>commands</th>"
	            "<th>busy</th><th>summary</th></tr></thead><tbody>\n");
	const json_t *summaries = json_object_get(rep->footer, "summaries");
	for (int k = 1; k <= LOOPS_MAX + 1; k++) {
		int loop = k <= LOOPS_MAX ? k : 0;
		struct loop_sums *l = &sum[loop];
		if (!l->calls && !l->commands)
			continue;
		if (loop)
			buf_printf(b, "<tr data-loop=\"%d\"><td><a href=\"#loop-%d\">loop %d</a></td>", loop, loop, loop);
		else
			buf_adds(b, "<tr data-loop=\"0\"><td><a href=\"#loop-0\">runner</a></td>");
		buf_printf(b, "<td>%.0f</td><td>%d%s</td><td>%.0f / %.0f</td><td>", l->turns_seen, l->calls,
		           l->failed ? " (some failed)" : "", l->in, l->out);
		if (l->priced)
			buf_printf(b, "$%.4f", l->cost);
		else
			buf_adds(b, "<span class=\"muted\">no pricing</span>");
		buf_printf(b, "</td><td>%d</td><td>%.3f s</td><td>", l->commands, l->busy_ms / 1000);
		size_t j;
		json_t *one;
		json_array_foreach(summaries, j, one)
			if (html_num(one, "loop") == loop)
				html_text(b, json_object_get(one, "summary"), 200);
		buf_adds(b, "</td></tr>\n");
	}
	buf_adds(b, "</tbody></table></div>\n");
}

/* ---- the entries ------------------------------------------------------------ */

/* The first line of a text, at most 90 characters, "..." when there is
 * more: what a folded block says of itself. */
static void first_line(struct buf *b, const json_t *text)
{
	size_t n;
	const char *s = rv_str(text, &n);
	const char *nl = s ? memchr(s, '\n', n) : NULL;
	json_t *head = s ? json_stringn_nocheck(s, nl ? (size_t)(nl - s) : n) : NULL;
	html_text(b, head, 90);
	if (nl && (size_t)(nl - s) + 1 < n && json_string_length(head) <= 90)
		buf_adds(b, " ...");
	json_decref(head);
}

static void evidence_block(struct buf *b, const char *label, const json_t *text, const json_t *row)
{
	if (!json_is_string(text))
		return;
	buf_adds(b, "<details class=\"ev\"><summary>");
	html_esc(b, label);
	size_t i;
	json_t *it;
	json_array_foreach(json_object_get(row, "evidence"), i, it)
		if (json_equal(json_object_get(it, "text"), (json_t *)text)) {
			buf_printf(b, " (%.0f bytes%s)", html_num(it, "bytes"),
			           json_is_true(json_object_get(it, "clipped")) ? ", clipped" : "");
			break;
		}
	buf_adds(b, ": <span class=\"mono\">");
	first_line(b, text);
	buf_adds(b, "</span></summary><pre>");
	html_lines(b, text);
	buf_adds(b, "</pre></details>");
}

/* A reply in the table: one line saying what it is, the reply in the
 * provider's words below it (report_reply). */
static void reply_block(struct buf *b, const json_t *row)
{
	const json_t *text = json_object_get(row, "reply");
	if (!json_is_string(text))
		return;
	json_t *calls = report_reply_calls(row);
	buf_adds(b, "<details class=\"ev\"><summary>reply");
	size_t i;
	json_t *it;
	json_array_foreach(json_object_get(row, "evidence"), i, it)
		if (json_equal(json_object_get(it, "text"), (json_t *)text)) {
			buf_printf(b, " (%.0f bytes%s)", html_num(it, "bytes"),
			           json_is_true(json_object_get(it, "clipped")) ? ", clipped" : "");
			break;
		}
	buf_adds(b, ": <span class=\"mono\">");
	if (calls) {
		json_t *c;
		json_array_foreach(calls, i, c) {
			if (i)
				buf_adds(b, ", ");
			html_text(b, json_object_get(c, "name"), 40);
		}
	} else {
		first_line(b, text);
	}
	buf_adds(b, "</span></summary>");
	report_reply(b, row);
	buf_adds(b, "</details>");
	json_decref(calls);
}

/* A write: its diff against the last write of the path, or its content
 * (marked new when there was no file). */
static void write_block(struct buf *b, const json_t *row)
{
	const json_t *content = json_object_get(row, "content");
	if (json_is_string(json_object_get(row, "diff"))) {
		const json_t *st = json_object_get(row, "diffStat");
		buf_printf(b, "<details class=\"ev\" open><summary>diff against <a href=\"#line-%.0f\">line %.0f</a>: "
		              "+%.0f &#8722;%.0f lines</summary>", html_num(json_object_get(row, "previous"), "line"),
		           html_num(json_object_get(row, "previous"), "line"), html_num(st, "added"), html_num(st, "removed"));
		html_diff(b, json_object_get(row, "diff"));
		buf_adds(b, "</details>");
		return;
	}
	if (html_is(row, "kind", "mutation") && json_is_true(json_object_get(row, "newFile")))
		evidence_block(b, "new file", content, row);
	else if (html_is(row, "kind", "mutation") && json_is_true(json_object_get(row, "unchanged")))
		evidence_block(b, "unchanged", content, row);
	else
		evidence_block(b, "content", content, row);
}

/* The entries a row rests on (its refs), each a link to its line. */
static void refs_links(struct buf *b, const json_t *row, const json_t *ids)
{
	size_t i, shown = 0;
	json_t *ref;
	json_array_foreach(json_object_get(row, "refs"), i, ref) {
		const json_t *line = json_is_string(ref) ? json_object_get(ids, json_string_value(ref)) : NULL;
		if (!json_is_integer(line))
			continue;
		buf_printf(b, "%s<a href=\"#line-%lld\">line %lld</a>", shown++ ? ", " : "<div class=\"refs\">rests on ",
		           (long long)json_integer_value(line), (long long)json_integer_value(line));
		if (shown >= 16)
			break;
	}
	if (shown)
		buf_adds(b, "</div>");
}

static void entry_row(struct buf *b, const json_t *row, const json_t *ids)
{
	const char *kind = ndjson_text(row, "kind");
	const char *cls = "";
	const char *badge = NULL, *badge_cls = "";
	if (html_is(row, "row", "invalid")) {
		cls = "invalid";
		badge = "INVALID", badge_cls = "invalid";
	} else if (strcmp(kind, "verdict") == 0) {
		badge = report_verdict_word(row, &badge_cls);
		cls = strcmp(badge_cls, "refused") == 0 ? "refused" : "";
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
	buf_printf(b, "<tr id=\"line-%.0f\" class=\"%s\" data-kind=\"", html_num(row, "line"), cls);
	html_text(b, json_object_get(row, "kind"), 64); /* the trace's, even in an attribute */
	buf_printf(b, "\"><td class=\"mono\">+%.3fs</td><td>%.0f</td><td>", html_num(row, "t") / 1000,
	           html_num(row, "line"));
	if (html_is(row, "row", "entry"))
		buf_printf(b, "L%.0f", html_num(row, "loop"));
	buf_adds(b, "</td><td>");
	if (html_num(row, "turn") >= 1 && html_num(row, "loop") >= 1)
		buf_printf(b, "T%.0f", html_num(row, "turn"));
	buf_adds(b, "</td><td>");
	html_text(b, json_object_get(row, "kind"), 20);
	buf_adds(b, "</td><td class=\"what\">");
	if (badge)
		buf_printf(b, "<span class=\"badge %s\">%s</span> ", badge_cls, badge);
	html_text(b, json_object_get(row, "display"), 600);
	refs_links(b, row, ids);
	reply_block(b, row);
	evidence_block(b, "output", json_object_get(row, "output"), row);
	evidence_block(b, "summary", json_object_get(row, "summary"), row);
	write_block(b, row);
	size_t i;
	json_t *it;
	json_array_foreach(json_object_get(row, "evidence"), i, it) {
		if (html_is(it, "state", "present"))
			continue;
		buf_adds(b, "<div><span class=\"badge ");
		buf_adds(b, html_is(it, "state", "altered") ? "error" : "halt");
		buf_adds(b, "\">evidence ");
		html_text(b, json_object_get(it, "state"), 20);
		buf_adds(b, "</span> ");
		html_text(b, json_object_get(it, "field"), 60);
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
		html_text(b, json_object_get(rec, "name"), 80);
	else
		buf_printf(b, "run %ld", rep->run);
	buf_adds(b, " &#8212; ");
	if (verdict)
		html_text(b, json_object_get(rep->footer, "verdict"), 60);
	else
		buf_adds(b, "unfinished");
	buf_adds(b, "</title>\n<style>");
	buf_adds(b, css);
	buf_adds(b, "</style>\n</head>\n<body>\n<main>\n<h1>sfma run report");
	if (name) {
		buf_adds(b, ": <span id=\"name\">");
		html_text(b, json_object_get(rec, "name"), 120);
		buf_adds(b, "</span>");
	}
	buf_adds(b, "</h1>\n<p class=\"sub\">");
	buf_printf(b, "run %ld of %zu", rep->run, rep->runs);
	if (json_is_string(json_object_get(rep->header, "start"))) {
		buf_adds(b, ", started ");
		html_esc(b, ndjson_text(rep->header, "start"));
	}
	buf_adds(b, ", workspace <code>");
	{
		json_t *w = json_string(ws);
		if (!w) /* not UTF-8: shown byte by byte */
			w = json_stringn("(workspace name not UTF-8)", 26);
		html_text(b, w, 200);
		json_decref(w);
	}
	buf_printf(b, "</code>, trace lines %.0f&#8211;%.0f</p>\n", html_num(rep->footer, "firstLine"),
	           html_num(rep->footer, "lastLine"));
	audit_banner(b, vr);
	summary_cards(b, rep, vr);
	acceptance_section(b, rep);
	buf_adds(b, "<h2>Timeline</h2>\n<div class=\"panel\" id=\"timeline\">\n");
	report_timeline(b, rep);
	buf_adds(b, "</div>\n");
	loops_section(b, rep);
	buf_adds(b, "<h2>Conversation</h2>\n<div id=\"conversation\">\n");
	report_conversation(b, rep);
	buf_adds(b, "</div>\n<h2>Entries</h2>\n<div class=\"scroll\"><table id=\"entries\">\n<thead><tr><th>time</th>"
	            "<th>line</th><th>loop</th><th>turn</th><th>kind</th><th>what happened</th></tr></thead>\n<tbody>\n");
	/* each entry's line by its id, for the links to what a row rests on */
	json_t *ids = json_object();
	size_t i;
	json_t *row;
	json_array_foreach(rep->rows, i, row)
		if (json_is_string(json_object_get(row, "id")) && html_is(row, "row", "entry"))
			json_object_set_new(ids, json_string_value(json_object_get(row, "id")),
			                    json_integer((json_int_t)html_num(row, "line")));
	json_array_foreach(rep->rows, i, row)
		entry_row(b, row, ids);
	json_decref(ids);
	buf_adds(b, "</tbody>\n</table></div>\n<footer>Made by sfma-report ");
	html_esc(b, sfma_version());
	buf_adds(b, " from <code>.sfma/trace.jsonl</code>. Times are the run's clock anchors plus the recorded "
	            "model latencies and command durations, each loop on its own clock. This page loads nothing "
	            "and runs no script.</footer>\n"
	            "</main>\n</body>\n</html>\n");
}
