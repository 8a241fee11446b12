/* logtext.h - the rows of a run (lib/runview.h) as sfma-log prints them:
 * one line of text per row (and a line for each evidence text or flag it
 * carries), SGR colour only when asked for, every string of the trace
 * made visible (rv_visible); or one line of ASCII JSON per row. Built in
 * memory; nothing is read or written. */
#ifndef SFMA_LOGTEXT_H
#define SFMA_LOGTEXT_H

#include <jansson.h>

#include "buf.h"

/* Append the text of a header row ("run N of M ...", then ", NOTE" when
 * note is not NULL: "following", "turn 3"). */
void log_text_header(struct buf *b, const json_t *header, int colour, const char *note);
/* Append the text of an entry or invalid row. */
void log_text_row(struct buf *b, const json_t *row, int colour);
/* The same row whole (--turn): its line with the display text unclipped,
 * then each text it carries as a block of lines - the system prompt, the
 * message sent (a tool message's results one by one), the reply (a native
 * reply's calls, and a reply that is one JSON object, as key: value), the
 * output, the write's diff or content, the summary - every line made
 * visible, nothing clipped. */
void log_text_row_full(struct buf *b, const json_t *row, int colour);
/* Append the text of a footer row: the verdict, the counts, whether it is sealed. */
void log_text_footer(struct buf *b, const json_t *footer, int colour);

/* Append text[0..n) (lines of the above) to b with every line longer than
 * width columns wrapped, at a space when there is one near the edge: a
 * row's line goes on under its text column, any other line two columns
 * in from where it began. The SGR sequences of the colour (ESC [ ... m)
 * take no column; a character is one column. width < 20: copied as it is. */
void log_text_wrap(struct buf *b, const char *text, size_t n, int width);

/* Append a row as one line of compact JSON in printable ASCII (--json):
 * every other character is escaped. 0, or -1 when it cannot be encoded. */
int log_json_row(struct buf *b, const json_t *row);

#endif
