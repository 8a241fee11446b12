/* logtext.c - a run's rows as sfma-log prints them (logtext.h). */
#include "logtext.h"

#include "ndjson.h"
#include "errors.h"
#include "runview.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Characters of a string shown on one text row. */
#define SHOW_CHARS 200

enum { C_RESET, C_BOLD, C_DIM, C_RED, C_GREEN, C_YELLOW, C_CYAN };
static const char *const sgr[] = {"\033[0m", "\033[1m", "\033[2m", "\033[1;31m", "\033[32m", "\033[33m", "\033[36m"};

static void paint(struct buf *b, int colour, int c, const char *text)
{
	if (colour)
		buf_adds(b, sgr[c]);
	buf_adds(b, text);
	if (colour)
		buf_adds(b, sgr[C_RESET]);
}

static void visible(struct buf *b, const json_t *s, size_t max)
{
	size_t n;
	const char *p = rv_str(s, &n);
	if (p)
		rv_visible(b, p, n, max);
}

static int is_true(const json_t *row, const char *k)
{
	return json_is_true(json_object_get(row, k));
}

/* The status word of a row and its colour, or NULL. */
static const char *status_of(const json_t *row, int *colour)
{
	const char *kind = ndjson_text(row, "kind");
	if (strcmp(ndjson_text(row, "row"), "invalid") == 0)
		return *colour = C_RED, "INVALID";
	if (strcmp(kind, "verdict") == 0) {
		const char *tier = ndjson_text(row, "tier");
		int pass = is_true(row, "pass");
		/* the soft tier passes or fails work; an acceptance check passes
		 * or fails the done */
		if (strcmp(tier, "soft") == 0 || strcmp(tier, "criteria") == 0) {
			if (is_true(row, "unjudged"))
				return *colour = C_YELLOW, "UNJUDGED";
			return pass ? (*colour = C_GREEN, "PASS") : (*colour = C_RED, "FAIL");
		}
		if (strcmp(tier, "acceptance") == 0)
			return pass ? (*colour = C_GREEN, "passed") : (*colour = C_RED, "FAILED");
		/* the hard tier allows or refuses a call; what the call then did
		 * (a command's exit, a timeout) is its outcome, after the word:
		 * one that did not succeed stands out */
		if (!pass)
			return *colour = C_RED, "REFUSED";
		double code = json_number_value(json_object_get(row, "exit"));
		*colour = is_true(row, "timedOut") || (json_is_number(json_object_get(row, "exit")) && code != 0)
		              ? C_YELLOW : C_GREEN;
		return "allowed";
	}
	if (strcmp(kind, "call") == 0 && !is_true(row, "ok"))
		return *colour = C_RED, "FAILED";
	if (strcmp(kind, "result") == 0) {
		if (json_is_string(json_object_get(row, "halt")))
			return *colour = C_YELLOW, "HALT";
		return *colour = C_RED, "ERROR";
	}
	return NULL;
}

#define INDENT "                           "

static void extra_line(struct buf *b, int colour, const char *label, const json_t *text)
{
	if (!json_is_string(text))
		return;
	buf_adds(b, INDENT);
	paint(b, colour, C_DIM, label);
	buf_adds(b, " ");
	visible(b, text, SHOW_CHARS);
	buf_addc(b, '\n');
}

/* A value on one line: a string as its text, anything else as compact
 * JSON. */
static void one_line_value(struct buf *b, const json_t *v)
{
	if (json_is_string(v)) {
		size_t n;
		const char *p = rv_str(v, &n);
		buf_add(b, p, n);
		return;
	}
	char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
	if (t)
		buf_adds(b, t);
	free(t);
}

/* A call by name and input: "NAME key=value key=value". */
static void call_words(struct buf *b, const char *name, const json_t *input)
{
	buf_adds(b, name);
	const char *k;
	json_t *x;
	json_object_foreach((json_t *)input, k, x) {
		buf_printf(b, " %s=", k);
		one_line_value(b, x);
	}
}

/* A reply in the provider's words: a native reply's text and calls, a
 * text reply that is one JSON object as its members; anything else as
 * it came. New string in *out (caller frees), 0 when there is nothing. */
static int reply_words(const json_t *row, struct buf *out)
{
	json_t *calls = json_object_get(row, "replyCalls");
	if (json_is_array(calls)) {
		size_t n;
		const char *text = rv_str(json_object_get(row, "replyText"), &n);
		if (text && n)
			buf_add(out, text, n);
		size_t i;
		json_t *c;
		json_array_foreach(calls, i, c) {
			if (out->len)
				buf_adds(out, i ? "; " : " | ");
			const char *name = json_string_value(json_object_get(c, "name"));
			json_t *input = json_object_get(c, "input");
			if (json_is_object(input)) {
				call_words(out, name ? name : "?", input);
			} else {
				buf_adds(out, name ? name : "?");
				if (input) {
					buf_addc(out, ' ');
					one_line_value(out, input);
				}
			}
		}
		return 1;
	}
	size_t n;
	const char *raw = rv_str(json_object_get(row, "reply"), &n);
	if (!raw)
		return 0;
	json_t *obj = n && raw[0] == '{' ? json_loadb(raw, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
	if (json_is_object(obj)) {
		json_t *tool = json_object_get(obj, "tool");
		if (json_is_string(tool)) {
			json_t *rest = json_copy(obj);
			json_object_del(rest, "tool");
			call_words(out, json_string_value(tool), rest);
			json_decref(rest);
		} else {
			call_words(out, "{", obj);
			buf_adds(out, " }");
		}
	} else {
		buf_add(out, raw, n);
	}
	json_decref(obj);
	return 1;
}

static void reply_line(struct buf *b, int colour, const json_t *row)
{
	struct buf words = {0};
	if (reply_words(row, &words)) {
		json_t *s = json_stringn(words.p ? words.p : "", words.len);
		extra_line(b, colour, "reply:", s);
		json_decref(s);
	}
	buf_free(&words);
}

/* "diff (+A -R):" of a write's row. */
static const char *diff_label(const json_t *row, char *out, size_t n)
{
	const json_t *st = json_object_get(row, "diffStat");
	snprintf(out, n, "diff (+%.0f -%.0f):", json_number_value(json_object_get(st, "added")),
	         json_number_value(json_object_get(st, "removed")));
	return out;
}

void log_text_row(struct buf *b, const json_t *row, int colour)
{
	const char *kind = ndjson_text(row, "kind");
	char col[64], label_text[64];
	double t = json_number_value(json_object_get(row, "t"));
	snprintf(col, sizeof col, "%+9.3fs", isfinite(t) ? t / 1000 : 0);
	paint(b, colour, C_DIM, col);
	double loop = json_number_value(json_object_get(row, "loop"));
	double turn = json_number_value(json_object_get(row, "turn"));
	if (strcmp(ndjson_text(row, "row"), "invalid") == 0) {
		snprintf(col, sizeof col, "  line %-9.0f ", json_number_value(json_object_get(row, "line")));
	} else {
		char tn[16] = "";
		if (turn >= 1 && turn < 1e9 && loop != 0)
			snprintf(tn, sizeof tn, "T%.0f", turn);
		snprintf(col, sizeof col, "  L%-2.0f %-5s ", fabs(loop) < 1e6 ? loop : -1, tn);
	}
	buf_adds(b, col);
	/* the kind is the trace's too: made visible, cut to its column */
	struct buf label = {0};
	if (kind[0])
		visible(&label, json_object_get(row, "kind"), 13);
	else
		buf_adds(&label, "-");
	while (label.len < 13)
		buf_addc(&label, ' ');
	if (strcmp(kind, "message") == 0 || strcmp(kind, "lifecycle") == 0 || strcmp(kind, "clock-anchor") == 0 ||
	    strcmp(kind, "task") == 0)
		paint(b, colour, C_CYAN, label.p);
	else
		buf_adds(b, label.p);
	buf_free(&label);
	buf_addc(b, ' ');
	int status_colour = C_RESET;
	const char *status = status_of(row, &status_colour);
	if (status) {
		paint(b, colour, status_colour, status);
		buf_addc(b, ' ');
	}
	int quiet = strcmp(kind, "store") == 0 || strcmp(kind, "weight") == 0;
	if (quiet && colour)
		buf_adds(b, sgr[C_DIM]);
	visible(b, json_object_get(row, "display"), SHOW_CHARS);
	if (quiet && colour)
		buf_adds(b, sgr[C_RESET]);
	buf_addc(b, '\n');
	reply_line(b, colour, row);
	extra_line(b, colour, "output:", json_object_get(row, "output"));
	extra_line(b, colour, "summary:", json_object_get(row, "summary"));
	/* a write: what changed, when the earlier content is known */
	if (json_is_string(json_object_get(row, "diff")))
		extra_line(b, colour, diff_label(row, label_text, sizeof label_text), json_object_get(row, "diff"));
	else if (json_is_true(json_object_get(row, "newFile")))
		extra_line(b, colour, "new file:", json_object_get(row, "content"));
	else if (json_is_true(json_object_get(row, "unchanged")))
		extra_line(b, colour, "unchanged:", json_object_get(row, "content"));
	else
		extra_line(b, colour, "content:", json_object_get(row, "content"));
	size_t i;
	json_t *it;
	json_array_foreach(json_object_get(row, "evidence"), i, it) {
		const char *state = ndjson_text(it, "state");
		if (strcmp(state, "present") == 0)
			continue;
		buf_adds(b, "                           ");
		buf_adds(b, "evidence ");
		visible(b, json_object_get(it, "field"), 64);
		buf_adds(b, " ");
		paint(b, colour, strcmp(state, "altered") == 0 ? C_RED : C_YELLOW, state);
		buf_addc(b, '\n');
	}
}

/* ---- one turn in full (--turn) ------------------------------------------ */

#define BLOCK_INDENT 29
#define KV_DEPTH_MAX 8

static void pad(struct buf *b, int n)
{
	while (n-- > 0)
		buf_addc(b, ' ');
}

/* Text as lines at indent, each made visible, nothing clipped. */
static void text_lines(struct buf *b, const char *s, size_t n, int indent)
{
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && s[i] != '\n')
			continue;
		if (i == n && start == n && n > 0)
			break; /* a final newline ends the last line */
		if (i > start)
			pad(b, indent);
		rv_visible_block(b, s + start, i - start);
		buf_addc(b, '\n');
		start = i + 1;
	}
}

/* A value as a person reads it: an object's members as "key: value", an
 * array's items as "- item", a string of one line after its key, of
 * several lines below it; numbers and the like as JSON. */
static void kv_value(struct buf *b, const json_t *v, int indent, int depth);

static int one_liner(const json_t *v)
{
	if (json_is_string(v)) {
		size_t n;
		const char *p = rv_str(v, &n);
		return !memchr(p, '\n', n) && n <= 120;
	}
	return !json_is_object(v) && !json_is_array(v) ? 1 : json_is_object(v) ? json_object_size(v) == 0
	                                                                        : json_array_size(v) == 0;
}

static void scalar(struct buf *b, const json_t *v)
{
	if (json_is_string(v)) {
		size_t n;
		const char *p = rv_str(v, &n);
		rv_visible_block(b, p, n);
		return;
	}
	char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if (t)
		rv_visible(b, t, strlen(t), 0);
	free(t);
}

static void kv_value(struct buf *b, const json_t *v, int indent, int depth)
{
	if (depth > KV_DEPTH_MAX || one_liner(v)) {
		pad(b, indent);
		scalar(b, v);
		buf_addc(b, '\n');
		return;
	}
	if (json_is_string(v)) {
		size_t n;
		const char *p = rv_str(v, &n);
		text_lines(b, p, n, indent);
		return;
	}
	if (json_is_array(v)) {
		size_t i;
		json_t *x;
		json_array_foreach(v, i, x) {
			pad(b, indent);
			buf_adds(b, "-");
			if (one_liner(x)) {
				buf_addc(b, ' ');
				scalar(b, x);
				buf_addc(b, '\n');
			} else {
				buf_addc(b, '\n');
				kv_value(b, x, indent + 2, depth + 1);
			}
		}
		return;
	}
	const char *k;
	json_t *x;
	json_object_foreach((json_t *)v, k, x) {
		pad(b, indent);
		rv_visible(b, k, strlen(k), 0);
		buf_addc(b, ':');
		if (one_liner(x)) {
			buf_addc(b, ' ');
			scalar(b, x);
			buf_addc(b, '\n');
		} else {
			buf_addc(b, '\n');
			kv_value(b, x, indent + 2, depth + 1);
		}
	}
}

static void block_label(struct buf *b, int colour, const char *label)
{
	buf_adds(b, INDENT);
	paint(b, colour, C_DIM, label);
	buf_addc(b, '\n');
}

static void text_block(struct buf *b, int colour, const char *label, const json_t *text)
{
	size_t n;
	const char *p = rv_str(text, &n);
	if (!p)
		return;
	block_label(b, colour, label);
	text_lines(b, p, n, BLOCK_INDENT);
}

/* A text that is one JSON object shown as its members; else as text. */
static void maybe_json_block(struct buf *b, int colour, const char *label, const json_t *text)
{
	size_t n;
	const char *p = rv_str(text, &n);
	if (!p)
		return;
	json_t *obj = n && p[0] == '{' ? json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
	if (json_is_object(obj)) {
		block_label(b, colour, label);
		kv_value(b, obj, BLOCK_INDENT, 0);
	} else {
		text_block(b, colour, label, text);
	}
	json_decref(obj);
}

void log_text_row_full(struct buf *b, const json_t *row, int colour)
{
	/* the row's own line, then everything it carries, unclipped */
	struct buf line = {0};
	json_t *shown = json_deep_copy(row);
	/* the extra lines of the one-line form are replaced by blocks */
	static const char *const blocks[] = {"reply", "replyCalls", "replyText", "output", "summary", "content",
	                                     "text", "prompt", "sent", "sentResults", "diff", "outputsSeen"};
	for (size_t i = 0; i < sizeof blocks / sizeof *blocks; i++)
		json_object_del(shown, blocks[i]);
	log_text_row(&line, shown, colour);
	json_decref(shown);
	/* the row line itself, without clipping its display text */
	const char *nl = line.p ? memchr(line.p, '\n', line.len) : NULL;
	size_t head = nl ? (size_t)(nl - line.p) : line.len;
	json_t *d = json_object_get(row, "display");
	size_t dn;
	const char *dp = rv_str(d, &dn);
	struct buf clip = {0};
	if (dp)
		rv_visible(&clip, dp, dn, SHOW_CHARS);
	if (dp && clip.len && head >= clip.len && memcmp(line.p + head - clip.len, clip.p, clip.len) == 0) {
		buf_add(b, line.p, head - clip.len);
		rv_visible(b, dp, dn, 0);
	} else {
		buf_add(b, line.p, head);
	}
	buf_addc(b, '\n');
	buf_free(&clip);
	if (json_is_string(json_object_get(row, "prompt")))
		text_block(b, colour, "system prompt:", json_object_get(row, "prompt"));
	json_t *results = json_object_get(row, "sentResults");
	if (json_is_array(results)) {
		block_label(b, colour, "sent (the tool message answering the calls):");
		size_t i;
		json_t *r;
		json_array_foreach(results, i, r) {
			pad(b, BLOCK_INDENT);
			buf_adds(b, "result for ");
			scalar(b, json_object_get(r, "name"));
			if (json_is_string(json_object_get(r, "id"))) {
				buf_adds(b, " (");
				scalar(b, json_object_get(r, "id"));
				buf_addc(b, ')');
			}
			buf_adds(b, ":\n");
			size_t n;
			const char *p = rv_str(json_object_get(r, "content"), &n);
			if (p)
				text_lines(b, p, n, BLOCK_INDENT + 2);
		}
	} else {
		maybe_json_block(b, colour, "sent:", json_object_get(row, "sent"));
	}
	json_t *calls = json_object_get(row, "replyCalls");
	if (json_is_array(calls)) {
		size_t n;
		const char *t = rv_str(json_object_get(row, "replyText"), &n);
		if (t && n)
			text_block(b, colour, "reply text:", json_object_get(row, "replyText"));
		size_t i;
		json_t *c;
		json_array_foreach(calls, i, c) {
			char label[96];
			snprintf(label, sizeof label, "reply, native call %zu of %zu:", i + 1, json_array_size(calls));
			block_label(b, colour, label);
			pad(b, BLOCK_INDENT);
			buf_adds(b, "tool: ");
			scalar(b, json_object_get(c, "name"));
			buf_addc(b, '\n');
			json_t *input = json_object_get(c, "input");
			if (json_is_object(input))
				kv_value(b, input, BLOCK_INDENT, 0);
			else if (input)
				kv_value(b, input, BLOCK_INDENT, 0);
		}
	} else {
		maybe_json_block(b, colour, "reply:", json_object_get(row, "reply"));
	}
	text_block(b, colour, "output:", json_object_get(row, "output"));
	if (json_is_array(json_object_get(row, "outputsSeen"))) {
		block_label(b, colour, "outputs, as the judge saw them:");
		kv_value(b, json_object_get(row, "outputsSeen"), BLOCK_INDENT, 0);
	}
	text_block(b, colour, "text:", json_object_get(row, "text"));
	text_block(b, colour, "summary:", json_object_get(row, "summary"));
	if (json_is_true(json_object_get(row, "newFile")))
		block_label(b, colour, "new file");
	else if (json_is_true(json_object_get(row, "unchanged")))
		block_label(b, colour, "unchanged (the same content as its last write)");
	else if (json_is_true(json_object_get(row, "previousUnknown")))
		block_label(b, colour, "the file was there before; its earlier content is not in this trace");
	text_block(b, colour, "diff:", json_object_get(row, "diff"));
	if (!json_is_string(json_object_get(row, "diff")))
		text_block(b, colour, "content:", json_object_get(row, "content"));
	/* the one-line form's remaining lines: its evidence flags */
	if (nl)
		buf_add(b, nl + 1, line.len - head - 1);
	buf_free(&line);
}

void log_text_header(struct buf *b, const json_t *h, int colour, const char *note)
{
	char line[256];
	snprintf(line, sizeof line, "run %.0f of %.0f", json_number_value(json_object_get(h, "run")),
	         json_number_value(json_object_get(h, "runs")));
	paint(b, colour, C_BOLD, line);
	if (json_is_string(json_object_get(h, "start")))
		buf_printf(b, "  started %s", ndjson_text(h, "start"));
	buf_printf(b, "  trace line %.0f%s%s\n", json_number_value(json_object_get(h, "firstLine")),
	           note ? ", " : "", note ? note : "");
}

/* The acceptance checks: whether they passed, then each, how often it
 * ran and how it ended the last time, with that run's output. */
static void acceptance_lines(struct buf *b, const json_t *f, int colour)
{
	const json_t *a = json_object_get(f, "acceptance");
	if (!json_is_object(a))
		return;
	const json_t *passed = json_object_get(a, "passed");
	buf_adds(b, "acceptance ");
	if (json_is_true(passed))
		paint(b, colour, C_GREEN, "passed");
	else if (json_is_false(passed))
		paint(b, colour, C_RED, "FAILED");
	else if (json_array_size(json_object_get(a, "checks")))
		buf_adds(b, "ran"); /* no record seals the run: the trace alone */
	else
		buf_adds(b, "not run");
	double n = json_number_value(json_object_get(a, "commands"));
	if (json_is_number(json_object_get(a, "commands")))
		buf_printf(b, "  %.0f check%s", n, n == 1 ? "" : "s");
	double att = json_number_value(json_object_get(a, "attempts"));
	buf_printf(b, "  %.0f attempt%s\n", att, att == 1 ? "" : "s");
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(a, "checks"), i, c) {
		const json_t *last = json_object_get(c, "last");
		buf_printf(b, "  check %zu ", i + 1);
		visible(b, json_object_get(c, "cmd"), SHOW_CHARS);
		double runs = json_number_value(json_object_get(c, "runs"));
		buf_printf(b, ": ran %.0f time%s, passed %.0f; last ", runs, runs == 1 ? "" : "s",
		           json_number_value(json_object_get(c, "passes")));
		if (json_is_number(json_object_get(last, "exit")))
			buf_printf(b, "exit %.0f", json_number_value(json_object_get(last, "exit")));
		else
			visible(b, json_object_get(last, "reason"), SHOW_CHARS);
		if (json_is_number(json_object_get(c, "expected")))
			buf_printf(b, " (expected %.0f)", json_number_value(json_object_get(c, "expected")));
		if (json_is_number(json_object_get(last, "line")))
			buf_printf(b, " at line %.0f", json_number_value(json_object_get(last, "line")));
		buf_addc(b, '\n');
		extra_line(b, colour, "output:", json_object_get(last, "output"));
	}
}

void log_text_footer(struct buf *b, const json_t *f, int colour)
{
	const char *verdict = json_string_value(json_object_get(f, "verdict"));
	struct buf shown = {0};
	if (verdict)
		visible(&shown, json_object_get(f, "verdict"), 40);
	else
		buf_adds(&shown, "(unfinished)");
	paint(b, colour, C_BOLD, "verdict ");
	paint(b, colour, !verdict ? C_YELLOW : strcmp(verdict, "completed") == 0 ? C_GREEN : C_RED, shown.p);
	buf_free(&shown);
	buf_printf(b, "  turns %.0f  model calls %.0f", json_number_value(json_object_get(f, "turns")),
	           json_number_value(json_object_get(f, "modelCalls")));
	if (json_number_value(json_object_get(f, "failedCalls")) > 0)
		buf_printf(b, " (%.0f failed)", json_number_value(json_object_get(f, "failedCalls")));
	buf_printf(b, "  refused %.0f", json_number_value(json_object_get(f, "hardTierFailures")));
	if (json_number_value(json_object_get(f, "protocolRefusals")) > 0)
		buf_printf(b, "  invalid replies %.0f", json_number_value(json_object_get(f, "protocolRefusals")));
	if (json_is_number(json_object_get(f, "durationMs")))
		buf_printf(b, "  %.3f s", json_number_value(json_object_get(f, "durationMs")) / 1000);
	json_t *u = json_object_get(f, "usage");
	if (json_is_object(u))
		buf_printf(b, "  tokens in %.0f out %.0f cached %.0f", json_number_value(json_object_get(u, "inputTokens")),
		           json_number_value(json_object_get(u, "outputTokens")),
		           json_number_value(json_object_get(u, "cachedInputTokens")));
	double cost = json_number_value(json_object_get(u, "costUsd"));
	if (isfinite(cost) && cost > 0 && cost < 1e9)
		buf_printf(b, "  cost $%.4f", cost);
	buf_adds(b, is_true(f, "sealed") ? "  sealed by result.json\n" : "  not sealed by result.json\n");
	acceptance_lines(b, f, colour);
	/* every loop's last done, when more than one loop said it */
	json_t *all = json_object_get(f, "summaries");
	if (json_array_size(all) > 1) {
		size_t i;
		json_t *one;
		json_array_foreach(all, i, one) {
			buf_printf(b, "summary (loop %.0f) ", json_number_value(json_object_get(one, "loop")));
			visible(b, json_object_get(one, "summary"), SHOW_CHARS);
			buf_addc(b, '\n');
		}
	} else if (json_is_string(json_object_get(f, "summary"))) {
		buf_adds(b, "summary ");
		visible(b, json_object_get(f, "summary"), SHOW_CHARS);
		buf_addc(b, '\n');
	}
	if (json_is_string(json_object_get(f, "error")) && !(verdict && strcmp(verdict, "completed") == 0)) {
		paint(b, colour, C_BOLD, "why ");
		visible(b, json_object_get(f, "error"), SHOW_CHARS);
		buf_addc(b, '\n');
	}
}

int log_json_row(struct buf *b, const json_t *row)
{
	char *s = json_dumps(row, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
	if (!s)
		return -1;
	/* JSON_ENSURE_ASCII leaves DEL as it is; it can only be inside a
	 * string, where \u007f says the same and prints nothing odd. */
	for (const char *p = s; *p; p++) {
		if (*p == 0x7f)
			buf_adds(b, "\\u007f");
		else
			buf_addc(b, *p);
	}
	buf_addc(b, '\n');
	free(s);
	return 0;
}

/* ---- wrapping --------------------------------------------------------------- */

/* Where a row's text begins: after the time, loop, turn and kind columns. */
#define TEXT_COLUMN 36
/* A break looks back this far for a space before it cuts a word. */
#define BREAK_LOOKBACK 24

/* Bytes of the SGR sequence at p (ESC [ digits and ; m), or 0. */
static size_t sgr_at(const char *p, const char *end)
{
	if (end - p < 3 || p[0] != '\033' || p[1] != '[')
		return 0;
	const char *q = p + 2;
	while (q < end && ((*q >= '0' && *q <= '9') || *q == ';'))
		q++;
	return q < end && *q == 'm' ? (size_t)(q - p + 1) : 0;
}

static void wrap_line(struct buf *b, const char *s, size_t n, int width, int newline)
{
	const char *end = s + n;
	/* the line's leading spaces (its colour sequences take no column) */
	const char *t = s;
	size_t lead = 0, k = 0;
	while (t < end && (*t == ' ' || (k = sgr_at(t, end)))) {
		if (*t == ' ') {
			lead++;
			t++;
		} else {
			t += k;
		}
	}
	/* a row's line: "   +1.234s  L1  T2    kind ..." */
	int row = t < end && *t == '+' && lead <= 4;
	int indent = row ? TEXT_COLUMN : (int)lead + 2;
	if (indent > width / 2)
		indent = width / 2;
	const char *p = s;
	int col = 0;
	while (p < end) {
		/* one piece that fits: up to width columns from p */
		const char *q = p, *space = NULL;
		int c = col;
		while (q < end && c < width) {
			size_t skip = sgr_at(q, end);
			if (skip) {
				q += skip;
				continue;
			}
			if (*q == ' ' && q > p)
				space = q;
			q++;
			while (q < end && ((unsigned char)*q & 0xc0) == 0x80)
				q++; /* the rest of a UTF-8 character */
			c++;
		}
		/* take in the colour sequences that close what fits */
		while (q < end && (k = sgr_at(q, end)))
			q += k;
		if (q < end && space && q - space <= BREAK_LOOKBACK)
			q = space; /* break at the space; it is dropped */
		buf_add(b, p, (size_t)(q - p));
		if (q >= end)
			break;
		buf_addc(b, '\n');
		while (q < end && *q == ' ')
			q++;
		for (int i = 0; i < indent; i++)
			buf_addc(b, ' ');
		col = indent;
		p = q;
	}
	if (newline)
		buf_addc(b, '\n');
}

void log_text_wrap(struct buf *b, const char *text, size_t n, int width)
{
	if (width < 20) {
		buf_add(b, text, n);
		return;
	}
	size_t start = 0;
	for (size_t i = 0; i < n; i++) {
		if (text[i] != '\n')
			continue;
		wrap_line(b, text + start, i - start, width, 1);
		start = i + 1;
	}
	if (start < n) /* a last line without its newline stays so */
		wrap_line(b, text + start, n - start, width, 0);
}
