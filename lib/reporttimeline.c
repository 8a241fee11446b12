/* reporttimeline.c - the timeline of sfma-report's page (reporthtml.h):
 * an inline SVG, one lane of turns in order, then a swimlane per loop with
 * its model calls and commands drawn to scale from when each began (the
 * loop's own clock, lib/runview.c), so loops that overlapped are seen to,
 * then the runner's own calls. */
#include "reporthtml.h"

#include "errors.h"
#include "ndjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SVG_W 1120
#define LABEL_W 110
#define PLOT_W (SVG_W - LABEL_W - 16)
#define LANE_H 34
#define TOP 26
#define LOOPS_MAX 16
/* a duration beyond a day in one entry is not drawable (nor real) */
#define DRAWABLE_MS 86400000.0

struct turn_cell {
	double turn;
	double line;
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
	buf_printf(b, "line %.0f, %s: ", html_num(row, "line"), ndjson_text(row, "kind"));
	html_text(b, json_object_get(row, "display"), 300);
	buf_adds(b, "</title>");
}

static double nice_step(double total)
{
	static const double steps[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000,
	                               30000, 60000, 120000, 300000, 600000, 1800000, 3600000, 7200000};
	for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
		if (total / steps[i] <= 8)
			return steps[i];
	return steps[sizeof steps / sizeof *steps - 1];
}

static void fmt_ms(char *out, size_t n, double ms)
{
	if (ms >= 1000)
		snprintf(out, n, "%.3g s", ms / 1000);
	else
		snprintf(out, n, "%.0f ms", ms);
}

/* The loop of a row, 0..LOOPS_MAX (the runner's own: 0). */
static int loop_of(const json_t *row)
{
	double loop = html_num(row, "loop");
	return loop >= 1 && loop <= LOOPS_MAX && loop == (int)loop ? (int)loop : 0;
}

/* The turns lane: one cell a turn, in order, coloured by the worst
 * verdict in it. */
static void turns_lane(struct buf *b, const struct report_run *rep)
{
	size_t nrows = json_array_size(rep->rows), i, ncells = 0;
	struct turn_cell *cells = xcalloc(nrows + 1, sizeof *cells);
	json_t *row;
	json_array_foreach(rep->rows, i, row) {
		if (!html_is(row, "row", "entry") || html_num(row, "loop") < 1)
			continue;
		double turn = html_num(row, "turn");
		if (turn < 1)
			continue;
		/* the loops' turns interleave a little in the trace: the cell
		 * of a turn is among the last few, or it is a new turn */
		size_t k = ncells, seen = 0;
		while (k > 0 && seen++ < 32 && cells[k - 1].turn != turn)
			k--;
		k = k > 0 && cells[k - 1].turn == turn ? k - 1 : ncells;
		if (k == ncells)
			cells[ncells++] = (struct turn_cell){.turn = turn, .line = html_num(row, "line")};
		struct turn_cell *c = &cells[k];
		if (html_is(row, "kind", "task")) {
			c->what = json_object_get(row, "display");
			c->tool = json_object_get(row, "tool");
		}
		if (html_is(row, "kind", "candidate") && !c->tool) {
			c->what = json_object_get(row, "display");
			c->label = "bootstrap";
		}
		if (html_is(row, "kind", "verdict") && html_is(row, "tier", "protocol") && !c->tool)
			c->label = "invalid";
		/* the hard tier's and the protocol's decisions colour the turn,
		 * and a check that refused its done; the judges' have their own
		 * places */
		if (html_is(row, "kind", "verdict") &&
		    (html_is(row, "tier", "hard") || html_is(row, "tier", "protocol") || !json_object_get(row, "tier") ||
		     (html_is(row, "tier", "acceptance") && !json_is_true(json_object_get(row, "pass"))))) {
			int s = json_is_true(json_object_get(row, "pass")) ? 1 : html_is(row, "tier", "protocol") ? 2 : 3;
			if (s > c->state)
				c->state = s;
			if (!c->what)
				c->what = json_object_get(row, "display");
		}
	}
	double cw = ncells ? (double)PLOT_W / (double)ncells : PLOT_W;
	buf_adds(b, "<g class=\"lane turns\">");
	for (size_t k = 0; k < ncells; k++) {
		double x = LABEL_W + k * cw;
		buf_printf(b, "<a href=\"#line-%.0f\"><rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"24\" rx=\"4\" "
		              "fill=\"%s\">", cells[k].line, x + 1, TOP + 5, cw - 2 > 1 ? cw - 2 : 1,
		           state_fill(cells[k].state));
		buf_printf(b, "<title>turn %.0f: ", cells[k].turn);
		html_text(b, cells[k].what, 300);
		buf_adds(b, "</title></rect>");
		if (cw >= 34) {
			buf_printf(b, "<text x=\"%.1f\" y=\"%d\" fill=\"#fff\" font-weight=\"600\" text-anchor=\"middle\">",
			           x + cw / 2, TOP + 21);
			buf_printf(b, "T%.0f", cells[k].turn);
			if (cw >= 90 && json_is_string(cells[k].tool)) {
				buf_adds(b, " ");
				html_text(b, cells[k].tool, 10);
			} else if (cw >= 90 && cells[k].label) {
				buf_adds(b, " ");
				html_esc(b, cells[k].label);
			}
			buf_adds(b, "</text>");
		}
		buf_adds(b, "</a>\n");
	}
	buf_adds(b, "</g>\n");
	free(cells);
}

/* A row's span on the clock: [start, start + dur] in ms, and how to draw
 * it; 0 when it is nothing drawn. */
static int span_of(const json_t *row, double total, double *start, double *dur, const char **cls, const char **fill)
{
	if (!html_is(row, "row", "entry"))
		return 0;
	if (html_is(row, "kind", "call")) {
		*dur = html_num(row, "latencyMs");
		int ok = json_is_true(json_object_get(row, "ok"));
		int judging = json_is_string(json_object_get(row, "purpose"));
		*cls = judging ? "bar judge" : "bar call";
		*fill = !ok ? "#cf222e" : judging ? "#7aa7e8" : "#3b6fd8";
	} else if (html_is(row, "kind", "verdict") && json_is_number(json_object_get(row, "durationMs"))) {
		*dur = html_num(row, "durationMs");
		int pass = json_is_true(json_object_get(row, "pass"));
		double code = html_num(row, "exit");
		if (html_is(row, "tier", "acceptance")) {
			*cls = "bar check";
			*fill = pass ? "#1a7f37" : "#cf222e";
		} else {
			*cls = "bar cmd";
			*fill = !pass ? "#cf222e" : code != 0 || json_is_true(json_object_get(row, "timedOut")) ? "#d4a72c"
			                                                                                      : "#8e44ad";
		}
	} else {
		return 0;
	}
	double t = html_num(row, "t");
	*start = json_is_number(json_object_get(row, "tStart")) ? html_num(row, "tStart") : t - *dur;
	return *dur > 0 && *dur <= DRAWABLE_MS && *start >= 0 && *start <= total;
}

void report_timeline(struct buf *b, const struct report_run *rep)
{
	size_t i;
	json_t *row;
	double total = html_num(rep->footer, "durationMs");
	int loops_max = 1, runner = 0;
	json_array_foreach(rep->rows, i, row) {
		if (html_num(row, "t") > total)
			total = html_num(row, "t");
		int loop = loop_of(row);
		if (loop > loops_max)
			loops_max = loop;
	}
	if (total <= 0)
		total = 1;
	json_array_foreach(rep->rows, i, row) {
		double s, d;
		const char *cls, *fill;
		if (loop_of(row) == 0 && span_of(row, total, &s, &d, &cls, &fill))
			runner = 1;
	}
	/* turns, a lane per loop, the runner's own */
	int lanes = 1 + loops_max + runner;
	int height = TOP + lanes * LANE_H + 30;
	buf_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" role=\"img\" "
	              "aria-label=\"timeline of the run\" font-family=\"system-ui,'DejaVu Sans',sans-serif\" "
	              "font-size=\"12\" data-loops=\"%d\">\n", SVG_W, height, loops_max);
	for (int l = 0; l < lanes; l++) {
		int y = TOP + l * LANE_H;
		char label[32];
		if (l == 0)
			snprintf(label, sizeof label, "turns");
		else if (l <= loops_max)
			snprintf(label, sizeof label, "loop %d", l);
		else
			snprintf(label, sizeof label, "runner");
		buf_printf(b, "<text x=\"0\" y=\"%d\" fill=\"#5b6577\">%s</text>\n", y + 21, label);
		buf_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#e3e7ee\"/>\n", LABEL_W, y + LANE_H,
		           SVG_W, y + LANE_H);
	}
	turns_lane(b, rep);
	/* the swimlanes, to scale */
	int drawn = 0;
	for (int l = 1; l <= loops_max + runner; l++) {
		int loop = l <= loops_max ? l : 0;
		int y = TOP + l * LANE_H;
		buf_printf(b, "<g class=\"lane\" data-loop=\"%d\">", loop);
		json_array_foreach(rep->rows, i, row) {
			double start, dur;
			const char *cls, *fill;
			if (loop_of(row) != loop || !span_of(row, total, &start, &dur, &cls, &fill))
				continue;
			double x0 = LABEL_W + start / total * PLOT_W, w = dur / total * PLOT_W;
			if (w < 1.5)
				w = 1.5;
			if (x0 + w > LABEL_W + PLOT_W)
				w = LABEL_W + PLOT_W - x0 > 1.5 ? LABEL_W + PLOT_W - x0 : 1.5;
			buf_printf(b, "<a href=\"#line-%.0f\"><rect class=\"%s\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" "
			              "height=\"18\" rx=\"2\" fill=\"%s\" stroke=\"#fff\" stroke-width=\"1\">",
			           html_num(row, "line"), cls, x0, y + 8, w, fill);
			svg_title(b, row);
			buf_adds(b, "</rect></a>\n");
			drawn++;
		}
		buf_adds(b, "</g>\n");
	}
	if (!drawn)
		buf_printf(b, "<text x=\"%d\" y=\"%d\" fill=\"#5b6577\">no model latency or command duration above "
		              "0 ms is recorded in this run</text>\n", LABEL_W + 8, TOP + LANE_H + 21);
	double step = nice_step(total);
	int ay = TOP + lanes * LANE_H;
	for (double t = 0; t <= total + 1e-9 && t / step < 64; t += step) {
		double x = LABEL_W + t / total * PLOT_W;
		char label[32];
		fmt_ms(label, sizeof label, t);
		buf_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#c9d0db\"/>"
		              "<text x=\"%.1f\" y=\"%d\" fill=\"#5b6577\" text-anchor=\"%s\">%s</text>\n",
		           x, TOP + LANE_H, x, ay + 4, x, ay + 18, t == 0 ? "start" : "middle", label);
	}
	buf_adds(b, "</svg>\n");
	buf_adds(b, "<div class=\"legend\">turns in order:<i style=\"background:#2da44e\"></i>allowed"
	            "<i style=\"background:#cf222e\"></i>refused<i style=\"background:#d4a72c\"></i>invalid reply"
	            "<i style=\"background:#9aa5b8\"></i>no verdict &#183; each loop to scale:"
	            "<i style=\"background:#3b6fd8\"></i>model call"
	            "<i style=\"background:#7aa7e8\"></i>judgment"
	            "<i style=\"background:#8e44ad\"></i>command"
	            "<i style=\"background:#d4a72c\"></i>command not exiting 0"
	            "<i style=\"background:#1a7f37\"></i>acceptance check</div>\n");
}
