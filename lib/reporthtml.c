/* reporthtml.c - escaping and values for sfma-report's page (reporthtml.h). */
#include "reporthtml.h"

#include "ndjson.h"
#include "runview.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Strings longer than this are shown as lines in a <pre>, not inline. */
#define INLINE_MAX 120

void html_raw(struct buf *b, const char *s, size_t n)
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

void html_esc(struct buf *b, const char *s)
{
	html_raw(b, s, strlen(s));
}

void html_text(struct buf *b, const json_t *v, size_t max)
{
	size_t n;
	const char *s = rv_str(v, &n);
	if (!s)
		return;
	struct buf t = {0};
	rv_visible(&t, s, n, max);
	html_raw(b, t.p ? t.p : "", t.len);
	buf_free(&t);
}

void html_lines_raw(struct buf *b, const char *s, size_t n)
{
	struct buf t = {0};
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i == n || s[i] == '\n') {
			rv_visible_block(&t, s + start, i - start);
			if (i < n)
				buf_addc(&t, '\n');
			start = i + 1;
		}
	}
	html_raw(b, t.p ? t.p : "", t.len);
	buf_free(&t);
}

void html_lines(struct buf *b, const json_t *v)
{
	size_t n;
	const char *s = rv_str(v, &n);
	if (s)
		html_lines_raw(b, s, n);
}

void html_diff(struct buf *b, const json_t *diff)
{
	size_t n;
	const char *s = rv_str(diff, &n);
	if (!s)
		return;
	buf_adds(b, "<pre class=\"diff\">");
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && s[i] != '\n')
			continue;
		if (i == n && start == n)
			break;
		char c = i > start ? s[start] : ' ';
		const char *cls = c == '+' ? "add" : c == '-' ? "del" : c == '@' ? "hunk" : c == '\\' ? "note" : "ctx";
		buf_printf(b, "<span class=\"%s\">", cls);
		html_lines_raw(b, s + start, i - start);
		buf_adds(b, "\n</span>");
		start = i + 1;
	}
	buf_adds(b, "</pre>");
}

static int short_string(const json_t *v)
{
	size_t n;
	const char *s = rv_str(v, &n);
	return s && n <= INLINE_MAX && !memchr(s, '\n', n);
}

void html_value(struct buf *b, const json_t *v, int depth)
{
	if (json_is_string(v)) {
		if (short_string(v)) {
			buf_adds(b, "<span class=\"mono\">");
			html_text(b, v, 0);
			buf_adds(b, "</span>");
		} else {
			buf_adds(b, "<pre>");
			html_lines(b, v);
			buf_adds(b, "</pre>");
		}
		return;
	}
	if (depth > 0 && json_is_object(v) && json_object_size(v)) {
		buf_adds(b, "<table class=\"kv\">");
		const char *k;
		json_t *x;
		json_object_foreach((json_t *)v, k, x) {
			buf_adds(b, "<tr><th>");
			json_t *key = json_string(k);
			html_text(b, key, 80);
			json_decref(key);
			buf_adds(b, "</th><td>");
			html_value(b, x, depth - 1);
			buf_adds(b, "</td></tr>");
		}
		buf_adds(b, "</table>");
		return;
	}
	if (depth > 0 && json_is_array(v) && json_array_size(v)) {
		buf_adds(b, "<ol class=\"items\">");
		size_t i;
		json_t *x;
		json_array_foreach(v, i, x) {
			buf_adds(b, "<li>");
			html_value(b, x, depth - 1);
			buf_adds(b, "</li>");
		}
		buf_adds(b, "</ol>");
		return;
	}
	char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	json_t *s = json_string(t ? t : "");
	buf_adds(b, "<span class=\"mono\">");
	html_text(b, s, 2000);
	buf_adds(b, "</span>");
	json_decref(s);
	free(t);
}

double html_num(const json_t *o, const char *k)
{
	double d = json_number_value(json_object_get(o, k));
	return isfinite(d) ? d : 0;
}

int html_is(const json_t *o, const char *k, const char *val)
{
	return strcmp(ndjson_text(o, k), val) == 0;
}

int report_loop_of(const json_t *row)
{
	double loop = html_num(row, "loop");
	return loop >= 1 && loop <= 16 && loop == (int)loop ? (int)loop : 0;
}

const char *report_verdict_word(const json_t *row, const char **cls)
{
	int pass = json_is_true(json_object_get(row, "pass"));
	if (html_is(row, "tier", "soft") || html_is(row, "tier", "criteria")) {
		if (json_is_true(json_object_get(row, "unjudged")))
			return *cls = "halt", "UNJUDGED";
		return pass ? (*cls = "pass", "PASS") : (*cls = "refused", "FAIL");
	}
	if (html_is(row, "tier", "acceptance"))
		return pass ? (*cls = "pass", "passed") : (*cls = "refused", "FAILED");
	if (!pass)
		return *cls = "refused", "REFUSED";
	int bad = json_is_true(json_object_get(row, "timedOut")) ||
	          (json_is_number(json_object_get(row, "exit")) && html_num(row, "exit") != 0);
	*cls = bad ? "warn" : "pass";
	return "allowed";
}
