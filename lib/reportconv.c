/* reportconv.c - the conversation on sfma-report's page (reporthtml.h):
 * what each loop's model saw and said, as a person debugging an agent
 * reads it. A loop's exchanges are its model calls in order; an exchange
 * holds the rows of that loop up to its next call: the tool calls the
 * reply made (its task entries) and what became of them (their verdicts,
 * a write's diff). */
#include "reporthtml.h"

#include "ndjson.h"
#include "runview.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOOPS_MAX 16
/* Levels of a value shown as tables and lists; deeper is JSON text. */
#define VALUE_DEPTH 4
/* A message longer than this is folded (details) in a judgment. */
#define FOLD_BYTES 600

static int is_kind(const json_t *row, const char *kind)
{
	return html_is(row, "row", "entry") && html_is(row, "kind", kind);
}

json_t *report_reply_calls(const json_t *row)
{
	json_t *calls = json_object_get(row, "replyCalls");
	if (json_is_array(calls))
		return json_incref(calls);
	size_t n;
	const char *s = rv_str(json_object_get(row, "reply"), &n);
	json_t *obj = s && n && s[0] == '{' ? json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
	json_t *tool = json_object_get(obj, "tool");
	if (!json_is_string(tool)) {
		json_decref(obj);
		return NULL;
	}
	json_t *input = json_copy(obj);
	json_object_del(input, "tool");
	json_t *out = json_pack("[{s:O, s:o}]", "name", tool, "input", input);
	json_decref(obj);
	return out;
}

/* One call: its tool, its id when the provider gave one, its input. */
static void call_card(struct buf *b, const json_t *c)
{
	buf_adds(b, "<div class=\"callcard\"><div class=\"tool\">");
	const json_t *name = json_object_get(c, "name");
	if (json_is_string(name))
		html_text(b, name, 60);
	else
		buf_adds(b, "(no name)");
	if (json_is_string(json_object_get(c, "id"))) {
		buf_adds(b, " <span class=\"id\">");
		html_text(b, json_object_get(c, "id"), 80);
		buf_adds(b, "</span>");
	}
	buf_adds(b, "</div>");
	const json_t *input = json_object_get(c, "input");
	if (input && !(json_is_object(input) && json_object_size(input) == 0))
		html_value(b, input, VALUE_DEPTH);
	buf_adds(b, "</div>");
}

void report_reply(struct buf *b, const json_t *row)
{
	json_t *calls = report_reply_calls(row);
	if (calls) {
		size_t n;
		const char *text = rv_str(json_object_get(row, "replyText"), &n);
		if (text && n) {
			buf_adds(b, "<pre>");
			html_lines(b, json_object_get(row, "replyText"));
			buf_adds(b, "</pre>");
		}
		size_t i;
		json_t *c;
		json_array_foreach(calls, i, c)
			call_card(b, c);
		json_decref(calls);
		return;
	}
	size_t n;
	const char *s = rv_str(json_object_get(row, "reply"), &n);
	if (!s)
		return;
	json_t *obj = n && s[0] == '{' ? json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
	if (json_is_object(obj)) {
		html_value(b, obj, VALUE_DEPTH);
	} else {
		buf_adds(b, "<pre>");
		html_lines(b, json_object_get(row, "reply"));
		buf_adds(b, "</pre>");
	}
	json_decref(obj);
}

/* The message a call sent: a tool message's results one by one, a text
 * that is one JSON object (a loop's assignment) as its members, any
 * other as text; a long one folded when fold. */
static void sent_block(struct buf *b, const json_t *row, int fold)
{
	const json_t *results = json_object_get(row, "sentResults");
	if (json_is_array(results)) {
		size_t i;
		json_t *r;
		json_array_foreach(results, i, r) {
			buf_adds(b, "<div class=\"resultfor\">result for <b>");
			html_text(b, json_object_get(r, "name"), 60);
			buf_adds(b, "</b>");
			if (json_is_string(json_object_get(r, "id"))) {
				buf_adds(b, " <span class=\"id\">");
				html_text(b, json_object_get(r, "id"), 80);
				buf_adds(b, "</span>");
			}
			buf_adds(b, "</div><pre>");
			html_lines(b, json_object_get(r, "content"));
			buf_adds(b, "</pre>");
		}
		return;
	}
	size_t n;
	const char *s = rv_str(json_object_get(row, "sent"), &n);
	if (!s)
		return;
	json_t *obj = n && s[0] == '{' ? json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
	if (json_is_object(obj)) {
		html_value(b, obj, VALUE_DEPTH);
	} else if (fold && n > FOLD_BYTES) {
		buf_printf(b, "<details><summary>%zu bytes</summary><pre>", n);
		html_lines(b, json_object_get(row, "sent"));
		buf_adds(b, "</pre></details>");
	} else {
		buf_adds(b, "<pre>");
		html_lines(b, json_object_get(row, "sent"));
		buf_adds(b, "</pre>");
	}
	json_decref(obj);
}

/* A verdict as a line: its word, its text, and its output below. */
static void verdict_line(struct buf *b, const json_t *v)
{
	const char *cls, *word = report_verdict_word(v, &cls);
	buf_printf(b, "<div class=\"verdict\"><a href=\"#line-%.0f\"><span class=\"badge %s\">%s</span></a> ",
	           html_num(v, "line"), cls, word);
	html_text(b, json_object_get(v, "display"), 600);
	buf_adds(b, "</div>");
	if (json_is_string(json_object_get(v, "output"))) {
		buf_adds(b, "<pre class=\"out\">");
		html_lines(b, json_object_get(v, "output"));
		buf_adds(b, "</pre>");
	}
}

/* A write against what was there: its diff, "new file" and its content,
 * or its content. */
static void mutation_block(struct buf *b, const json_t *m)
{
	buf_printf(b, "<div class=\"write\"><a href=\"#line-%.0f\">", html_num(m, "line"));
	html_text(b, json_object_get(m, "display"), 300);
	buf_adds(b, "</a>");
	if (json_is_string(json_object_get(m, "diff"))) {
		const json_t *st = json_object_get(m, "diffStat");
		buf_printf(b, " <span class=\"tag\">+%.0f &#8722;%.0f against line %.0f</span></div>",
		           html_num(st, "added"), html_num(st, "removed"), html_num(json_object_get(m, "previous"), "line"));
		html_diff(b, json_object_get(m, "diff"));
		return;
	}
	if (json_is_true(json_object_get(m, "newFile")))
		buf_adds(b, " <span class=\"tag new\">new file</span>");
	else if (json_is_true(json_object_get(m, "unchanged")))
		buf_adds(b, " <span class=\"tag\">unchanged</span>");
	else if (json_is_true(json_object_get(m, "previousUnknown")))
		buf_adds(b, " <span class=\"tag\">was there before the trace</span>");
	buf_adds(b, "</div>");
	if (json_is_string(json_object_get(m, "content"))) {
		buf_adds(b, "<pre>");
		html_lines(b, json_object_get(m, "content"));
		buf_adds(b, "</pre>");
	}
}

/* Whether row refers first to the entry id. */
static int rests_on(const json_t *row, const json_t *id)
{
	const json_t *task = json_object_get(row, "task");
	if (json_is_string(task) && json_equal((json_t *)task, (json_t *)id))
		return 1;
	return json_equal(json_array_get(json_object_get(row, "refs"), 0), (json_t *)id);
}

/* What became of a task entry: its verdicts, its write. */
static void result_of(struct buf *b, const json_t *rows, size_t from, size_t end, int loop, const json_t *task)
{
	const json_t *id = json_object_get(task, "id");
	for (size_t j = from; j < end && json_is_string(id); j++) {
		const json_t *r = json_array_get(rows, j);
		if (report_loop_of(r) != loop)
			continue;
		if (is_kind(r, "task"))
			break; /* what became of a task comes before the loop's next */
		if (!rests_on(r, id))
			continue;
		if (is_kind(r, "verdict"))
			verdict_line(b, r);
		else if (is_kind(r, "mutation"))
			mutation_block(b, r);
	}
}

static void exchange_head(struct buf *b, const json_t *call)
{
	buf_printf(b, "<div class=\"xhead\"><a href=\"#line-%.0f\">", html_num(call, "line"));
	if (html_num(call, "turn") >= 1)
		buf_printf(b, "T%.0f", html_num(call, "turn"));
	else
		buf_printf(b, "line %.0f", html_num(call, "line"));
	buf_adds(b, "</a> ");
	if (!json_is_true(json_object_get(call, "ok")))
		buf_adds(b, "<span class=\"badge failed\">FAILED</span> ");
	html_text(b, json_object_get(call, "display"), 400);
	buf_adds(b, "</div>");
}

/* One call of a loop and what followed it, up to end: what it sent,
 * then its reply - the text, and each call it made beside what became of
 * it; a reply that made none as it is, with the verdict on it. */
static void exchange(struct buf *b, const json_t *rows, size_t at, size_t end, int loop)
{
	const json_t *call = json_array_get(rows, at);
	int judging = json_is_string(json_object_get(call, "purpose"));
	buf_printf(b, "<div class=\"exchange%s\" id=\"conv-%.0f\">", judging ? " judging" : "", html_num(call, "line"));
	exchange_head(b, call);
	if (json_is_string(json_object_get(call, "sent")) || json_is_array(json_object_get(call, "sentResults"))) {
		buf_adds(b, "<div class=\"msg sent\"><div class=\"who\">sent</div>");
		sent_block(b, call, judging);
		buf_adds(b, "</div>");
	}
	json_t *calls = report_reply_calls(call);
	if (json_is_string(json_object_get(call, "reply"))) {
		buf_adds(b, "<div class=\"msg reply\"><div class=\"who\">reply</div>");
		size_t n;
		const char *text = rv_str(json_object_get(call, "replyText"), &n);
		if (!calls) {
			report_reply(b, call);
		} else if (text && n) {
			buf_adds(b, "<pre>");
			html_lines(b, json_object_get(call, "replyText"));
			buf_adds(b, "</pre>");
		}
	} else {
		buf_adds(b, "<div class=\"msg reply\">");
	}
	/* each call beside what became of it */
	size_t k = 0;
	for (size_t j = at + 1; j < end; j++) {
		const json_t *r = json_array_get(rows, j);
		if (report_loop_of(r) != loop)
			continue;
		if (is_kind(r, "task")) {
			buf_adds(b, "<div class=\"pair\"><div class=\"side\"><div class=\"who\">call</div>");
			const json_t *c = json_array_get(calls, k++);
			if (c) {
				call_card(b, c);
			} else {
				buf_adds(b, "<div class=\"callcard\"><div class=\"tool\">");
				html_text(b, json_object_get(r, "display"), 300);
				buf_adds(b, "</div></div>");
			}
			buf_adds(b, "</div><div class=\"side\"><div class=\"who\">result</div>");
			result_of(b, rows, j + 1, end, loop, r);
			buf_adds(b, "</div></div>");
		} else if (is_kind(r, "verdict") && !json_is_string(json_object_get(r, "task"))) {
			verdict_line(b, r); /* an invalid reply, a judgment */
		} else if (is_kind(r, "candidate")) {
			buf_adds(b, "<div class=\"verdict\"><span class=\"badge pass\">adopted</span> ");
			html_text(b, json_object_get(r, "mission"), 400);
			buf_adds(b, "</div>");
		}
	}
	/* calls of the reply that were not carried out (one a turn) */
	for (; k < json_array_size(calls); k++) {
		buf_adds(b, "<div class=\"pair\"><div class=\"side\"><div class=\"who\">call</div>");
		call_card(b, json_array_get(calls, k));
		buf_adds(b, "</div><div class=\"side\"><div class=\"who\">result</div><div class=\"verdict\">"
		            "<span class=\"badge halt\">not carried out</span> the next request says why</div></div></div>");
	}
	json_decref(calls);
	buf_adds(b, "</div></div>\n");
}

/* The system prompt of a loop's first call that carries one: in full the
 * first time it is seen, after that (and for a loop whose calls carry
 * none) a reference to it. */
static void system_prompt(struct buf *b, const json_t *rows, int loop, const json_t **shown, int *shown_loop)
{
	size_t i;
	json_t *row;
	json_array_foreach(rows, i, row) {
		if (report_loop_of(row) != loop || !is_kind(row, "call") || !json_is_string(json_object_get(row, "prompt")))
			continue;
		const json_t *p = json_object_get(row, "prompt");
		if (*shown && json_equal((json_t *)*shown, (json_t *)p)) {
			buf_printf(b, "<p class=\"muted\">System prompt: the same as <a href=\"#prompt-%d\">loop %d's</a>.</p>",
			           *shown_loop, *shown_loop);
			return;
		}
		buf_printf(b, "<details class=\"prompt\" id=\"prompt-%d\"><summary>System prompt (%zu bytes, sent with "
		              "<a href=\"#line-%.0f\">line %.0f</a>)</summary><pre>", loop, json_string_length(p),
		           html_num(row, "line"), html_num(row, "line"));
		html_lines(b, p);
		buf_adds(b, "</pre></details>\n");
		if (!*shown) {
			*shown = p;
			*shown_loop = loop;
		}
		return;
	}
	/* the trace keeps it once, on the run's first request: every
	 * request of the run sends it (sfma-formats(5), Evidence) */
	if (*shown && loop)
		buf_printf(b, "<p class=\"muted\">System prompt: the run's, shown with <a href=\"#prompt-%d\">loop %d</a> "
		              "(every request sends it).</p>", *shown_loop, *shown_loop);
}

void report_conversation(struct buf *b, const struct report_run *rep)
{
	const json_t *rows = rep->rows;
	size_t n = json_array_size(rows), i;
	json_t *row;
	int calls_of[LOOPS_MAX + 1] = {0};
	json_array_foreach(rows, i, row)
		if (is_kind(row, "call"))
			calls_of[report_loop_of(row)]++;
	const json_t *prompt = NULL;
	int prompt_loop = 0;
	int any = 0;
	/* the loops in order, then the runner's own calls (the criteria) */
	for (int k = 1; k <= LOOPS_MAX + 1; k++) {
		int loop = k <= LOOPS_MAX ? k : 0;
		if (!calls_of[loop])
			continue;
		any = 1;
		buf_printf(b, "<section class=\"loop\" id=\"loop-%d\" data-loop=\"%d\"><h3>", loop, loop);
		if (loop)
			buf_printf(b, "Loop %d", loop);
		else
			buf_adds(b, "The runner's own calls");
		buf_printf(b, " <span class=\"muted\">(%d call%s)</span></h3>\n", calls_of[loop], calls_of[loop] == 1 ? "" : "s");
		system_prompt(b, rows, loop, &prompt, &prompt_loop);
		for (i = 0; i < n; i++) {
			row = json_array_get(rows, i);
			if (report_loop_of(row) != loop || !is_kind(row, "call"))
				continue;
			size_t end = i + 1;
			while (end < n && !(report_loop_of(json_array_get(rows, end)) == loop &&
			                    is_kind(json_array_get(rows, end), "call")))
				end++;
			exchange(b, rows, i, end, loop);
		}
		buf_adds(b, "</section>\n");
	}
	if (!any)
		buf_adds(b, "<p class=\"muted\">No model call in this run.</p>\n");
}
