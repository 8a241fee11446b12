/* reportpage.h - a run of a trace (the rows of lib/runview.h) as
 * sfma-report's page: one self-contained HTML document - inline CSS, an
 * inline SVG timeline, no script, a Content-Security-Policy that forbids
 * every fetch. Every string from the trace is hostile: made visible
 * (rv_visible), then escaped for HTML. Built in memory; nothing is read. */
#ifndef SFMA_REPORTPAGE_H
#define SFMA_REPORTPAGE_H

#include <stddef.h>
#include <jansson.h>

#include "buf.h"

/* The run shown: its rows (entry and invalid rows, in order), its header
 * and footer rows, its number (1-based) and the runs in the trace. */
struct report_run {
	const json_t *rows;
	const json_t *header, *footer;
	long run;
	size_t runs;
};

/* What sfma-verify said of the workspace: its exit status (-1: it could
 * not be run) and its verdict line, made visible. */
struct report_verify {
	int status;
	char line[1024];
};

/* Append the page of rep, a run of workspace ws, to b. */
void report_page(struct buf *b, const char *ws, const struct report_run *rep, const struct report_verify *vr);

#endif
