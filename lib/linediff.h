/* linediff.h - a line-based unified diff of two texts, as a reviewer reads
 * a write: what the file held before, what it holds now. Pure: no I/O,
 * every size bounded. */
#ifndef SFMA_LINEDIFF_H
#define SFMA_LINEDIFF_H

#include <stddef.h>

#include "buf.h"

/* Lines of either text looked at; a longer text is diffed up to here. */
#define LINEDIFF_MAX_LINES 20000
/* Edits the search goes to; past it, what remains between the common
 * head and tail is shown as all removed, then all added. */
#define LINEDIFF_MAX_EDITS 2000

struct linediff_stats {
	size_t added, removed; /* lines */
	size_t shown;          /* lines of hunks written */
	size_t left_out;       /* lines of hunks not written (past max_lines) */
	int truncated;         /* a text was longer than LINEDIFF_MAX_LINES */
};

/* Append to out the unified diff of old (o, on bytes) against new (n, nn):
 * hunks "@@ -l,c +l,c @@" with context lines around each change and lines
 * prefixed ' ', '-' or '+'; a text whose last line has no newline gets
 * "\ No newline at end of file" after it, as diff(1) writes. At most
 * max_lines lines of hunks (0: no limit), then one line saying how many
 * were left out. Nothing is written when the texts are equal. The bytes
 * are copied as they are: the caller makes them safe to show. */
void line_diff(struct buf *out, const char *o, size_t on, const char *n, size_t nn, int context, size_t max_lines,
               struct linediff_stats *st);

#endif
