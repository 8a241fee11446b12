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
		if (is_true(row, "pass"))
			return *colour = C_GREEN, "PASS";
		/* the soft tier fails work; only the hard tier refuses a call */
		if (strcmp(ndjson_text(row, "tier"), "soft") == 0 || strcmp(ndjson_text(row, "tier"), "criteria") == 0)
			return *colour = C_RED, "FAIL";
		return *colour = C_RED, "REFUSED";
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

static void extra_line(struct buf *b, int colour, const char *label, const json_t *text)
{
	if (!json_is_string(text))
		return;
	buf_adds(b, "                           ");
	paint(b, colour, C_DIM, label);
	buf_adds(b, " ");
	visible(b, text, SHOW_CHARS);
	buf_addc(b, '\n');
}

void log_text_row(struct buf *b, const json_t *row, int colour)
{
	const char *kind = ndjson_text(row, "kind");
	char col[64];
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
	extra_line(b, colour, "reply:", json_object_get(row, "reply"));
	extra_line(b, colour, "output:", json_object_get(row, "output"));
	extra_line(b, colour, "summary:", json_object_get(row, "summary"));
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

void log_text_header(struct buf *b, const json_t *h, int colour, int follow)
{
	char line[256];
	snprintf(line, sizeof line, "run %.0f of %.0f", json_number_value(json_object_get(h, "run")),
	         json_number_value(json_object_get(h, "runs")));
	paint(b, colour, C_BOLD, line);
	if (json_is_string(json_object_get(h, "start")))
		buf_printf(b, "  started %s", ndjson_text(h, "start"));
	buf_printf(b, "  trace line %.0f%s\n", json_number_value(json_object_get(h, "firstLine")),
	           follow ? ", following" : "");
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
	buf_adds(b, is_true(f, "sealed") ? "  sealed by result.json\n" : "  not sealed by result.json\n");
	if (json_is_string(json_object_get(f, "summary"))) {
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
