/* reporthtml.h - the parts of sfma-report's page (lib/reportpage.c puts
 * them together): escaping for HTML, the timeline, the conversation. Every
 * string from the trace is hostile: made visible (rv_visible), then
 * escaped. Pure: built in memory from the rows, nothing is read. */
#ifndef SFMA_REPORTHTML_H
#define SFMA_REPORTHTML_H

#include <stddef.h>
#include <jansson.h>

#include "buf.h"
#include "reportpage.h"

/* s[0..n) escaped for HTML text and attribute values. */
void html_raw(struct buf *b, const char *s, size_t n);
/* A C string of ours, escaped. */
void html_esc(struct buf *b, const char *s);
/* A string from the trace on one line: control characters made visible
 * (as sfma-log shows them), at most max characters (0: all), escaped.
 * Nothing when v is not a string. */
void html_text(struct buf *b, const json_t *v, size_t max);
/* A string from the trace as lines, for <pre>: newlines, tabs and
 * backslashes kept, the rest made visible (rv_visible_block), escaped. */
void html_lines(struct buf *b, const json_t *v);
/* The same of s[0..n). */
void html_lines_raw(struct buf *b, const char *s, size_t n);
/* A unified diff (runview's "diff") as <pre class="diff"> with each line
 * marked as added, removed, a hunk or context. */
void html_diff(struct buf *b, const json_t *diff);
/* A value as a person reads it: a string of one line as text, of several
 * as <pre>; an object as a table of key and value, an array as a list;
 * anything else as JSON. depth bounds the nesting shown. */
void html_value(struct buf *b, const json_t *v, int depth);

/* o[k] as a finite number, else 0; whether o[k] is the string val. */
double html_num(const json_t *o, const char *k);
int html_is(const json_t *o, const char *k, const char *val);

/* The loop of a row: 1..16, or 0 for the runner's own (and any other). */
int report_loop_of(const json_t *row);
/* The word a verdict row is shown with, and its badge's class: the hard
 * tier's "allowed" (class "pass", or "warn" when the command did not exit
 * 0) or "REFUSED"; "passed"/"FAILED" of an acceptance check; the judges'
 * "PASS", "FAIL" or "UNJUDGED". */
const char *report_verdict_word(const json_t *row, const char **cls);
/* The calls a reply made, [{"name","input"[,"id"]}]: a native reply's,
 * decoded, or the one call of a text reply that is a JSON object with a
 * "tool". NULL when the reply makes no call. New reference. */
json_t *report_reply_calls(const json_t *row);
/* A reply in the provider's words: its text, then each call by its name
 * with its input as key and value; a reply that is another JSON object as
 * its members; anything else as text. */
void report_reply(struct buf *b, const json_t *row);

/* The timeline: a lane of turns, then one lane per loop with its model
 * calls and commands to scale (overlapping loops overlap), then the
 * runner's own calls. */
void report_timeline(struct buf *b, const struct report_run *rep);
/* The conversation of each loop: the system prompt once, then each
 * request's new message, the reply in the provider's words, each tool
 * call beside its result (and a write's diff); judgments beside it. */
void report_conversation(struct buf *b, const struct report_run *rep);

#endif
