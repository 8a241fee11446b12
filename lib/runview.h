/* runview.h - a trace read back as runs, and each entry as one row that a
 * person or a script reads (sfma-log, sfma-report).
 *
 * A reader only: nothing here writes. The trace is hostile input: a line
 * that is not a JSON object becomes an "invalid" row, never a failure, and
 * every string keeps its bytes (the renderers make them safe to show). */
#ifndef SFMA_RUNVIEW_H
#define SFMA_RUNVIEW_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "errors.h"

/* Lines longer than this are shown as invalid rows and skipped. */
#define RV_MAX_LINE (16u << 20)

struct rv_run {
	uint64_t first_line, last_line; /* 1-based, inclusive (last_line 0: still empty) */
	uint64_t offset;                /* byte offset of first_line */
	int marked;                     /* its lifecycle start has been seen */
};

/* Runs are found as they begin: a `lifecycle` entry {"from":null} marks a
 * run, which starts at the last `clock-anchor` before it (together with
 * the `result` entries a run writes ahead of its anchor for an interrupted
 * predecessor) or at the marker itself. Lines before the first run belong
 * to it; a trace without any marker is one run. */
struct rv_splitter {
	struct rv_run *runs;
	size_t n, cap;
	uint64_t lines;         /* lines fed */
	uint64_t cand_line;     /* where the next run would start; 0: none */
	uint64_t cand_offset;
	uint64_t pre_line;      /* first of the run-opening results just fed; 0: none */
	uint64_t pre_offset;
};

void rv_split_init(struct rv_splitter *s);
/* Feed line number s->lines + 1, starting at byte offset; entry is the
 * parsed line or NULL when it is not a JSON object. Returns 1 when this
 * line began a new run (s->runs[s->n - 1]), else 0. */
int rv_split_feed(struct rv_splitter *s, const json_t *entry, uint64_t offset);
void rv_split_free(struct rv_splitter *s);

/* Read the whole trace on fd (from its start) into s. Returns 0, or -1
 * with e filled on a read error. *torn is set when the file ends inside a
 * line (that line is not fed). */
int rv_split_fd(int fd, struct rv_splitter *s, int *torn, struct sfma_err *e);

/* Select a run: n >= 1 counts from the first, n <= -1 from the last.
 * Returns the 0-based index, or -1 when there is no such run. */
long rv_pick(const struct rv_splitter *s, long n);

/* The state of one run being read, row by row. */
struct evidence_store;

/* Loops a view keeps a clock and a turn for: the runner's own (0) and
 * loops 1..16 (maxLoops); an entry of any other loop counts as the
 * runner's. */
#define RV_LOOPS 17

struct rv_view {
	int sfma_dirfd;         /* <workspace>/.sfma, for evidence; -1: none */
	struct evidence_store *store; /* its evidence, read only (lib/evidence.h) */
	size_t clip;            /* bytes of evidence text kept per item */
	long run;               /* 1-based run number shown in rows */
	int have_start;
	double start_wall_ms;
	double t_ms;            /* derived time since the run began: when the
	                         * planner served the entry (trace order) */
	/* Each loop's own clock: when its next request went out. A loop's
	 * model calls and commands follow one another; different loops'
	 * overlap, and the stage that runs commands runs one at a time. */
	double loop_t[RV_LOOPS];
	int loop_seen[RV_LOOPS];
	long loop_turn[RV_LOOPS]; /* the turn of each loop's last reply */
	double exec_free;       /* when the last command ended */
	double loops_start;     /* when loops other than the first began: the adoption */
	int slot;               /* the loop of the entry being read (0..RV_LOOPS-1) */
	json_t *writes;         /* path -> {"sha256","bytes","line","applied"}: its last write */
	json_t *write_paths;    /* the "paths" of the last write's verdict (host facts) */
	json_t *summaries;      /* [{"loop","line","summary"}...]: each loop's last done's summary */
	json_t *acceptance;     /* [{"index","cmd","expected","runs","passes","last":{...}}...]: each check */
	long turn, calls, failed_calls, refused, protocol_refusals;
	int terminal;           /* a lifecycle reached a verdict */
	int closed;             /* ... and a clock-anchor followed it */
	uint64_t closed_line;
	uint64_t first_line, last_line;
	double end_wall_ms;
	int have_end;
	json_t *tasks;          /* task id -> the row of that task */
	json_t *usage;          /* summed over call entries (NULL: none recorded) */
	json_t *verdict;        /* the terminal lifecycle's "to" */
	json_t *summary;        /* the done summary, when the trace or evidence has it */
	json_t *halt_error;     /* the last result entry's text */
	char last_hash[65];     /* hash of the last chained entry read ("" if none) */
};

void rv_view_init(struct rv_view *v, int sfma_dirfd, long run, size_t clip);
void rv_view_free(struct rv_view *v);

/* Note what an entry of an earlier run wrote (a mutation's path and
 * digest), so that a write of this run is shown against it. Any other
 * line is ignored; nothing is shown. */
void rv_note_earlier(struct rv_view *v, const char *line, size_t len, uint64_t line_no);
/* Hand the writes a finished view knows on to the view of the next run. */
void rv_pass_writes(struct rv_view *from, struct rv_view *to);

/* The row of one trace line (its bytes, its 1-based number). Always returns
 * a new object: {"row":"entry",...} or {"row":"invalid","error":...}. */
json_t *rv_row(struct rv_view *v, const char *line, size_t len, uint64_t line_no);
/* An invalid row for a line that could not even be read (too long). */
json_t *rv_row_invalid(struct rv_view *v, uint64_t line_no, const char *why);

/* The header row of the run (call after its first row): run, runs,
 * firstLine, start wallMs and ISO time. */
json_t *rv_header(const struct rv_view *v, size_t runs);

/* The footer row: final verdict, counts, usage, duration, and whether
 * record (the workspace's result.json, or NULL) seals this run. */
json_t *rv_footer(const struct rv_view *v, const json_t *record);

/* Does record seal the run that ends at last_line with hash last_hash? */
int rv_record_seals(const json_t *record, uint64_t last_line, const char *last_hash);

/* A reader of a workspace opens what it reads without following a link
 * in place of a file, without waiting on a FIFO or a device found there,
 * and reads regular files only: whoever can write to a workspace can put
 * anything there.
 *
 * Open <ws>/.sfma (a directory, not a link to one). Returns its
 * descriptor, or -1 with errno and e "WS: REASON" or "WS/.sfma: REASON". */
int rv_open_sfma(const char *ws, struct sfma_err *e);

/* Open <sfma_dirfd>/trace.jsonl for reading: a descriptor, or -1 with
 * errno and e "trace.jsonl: REASON" - ENOENT when there is none, ELOOP
 * "is a symbolic link, not followed", EINVAL "not a regular file". */
int rv_open_trace(int sfma_dirfd, struct sfma_err *e);

/* Load <sfma_dirfd>/result.json into *record: 0 with *record set, or
 * NULL when there is none (or sfma_dirfd < 0) or it is no record (not a
 * JSON object, larger than RECORD_MAX_BYTES); -1 with errno and e
 * ("result.json: REASON", as rv_open_trace) when something other than a
 * regular file is there or it cannot be read. */
int rv_load_record(int sfma_dirfd, json_t **record, struct sfma_err *e);

/* s[0..n) as text safe to print on a terminal: valid UTF-8 is kept except
 * control characters (C0, DEL, C1), line and paragraph separators and
 * bidirectional overrides, which become visible escapes (\n, \t, \x1b,
 * \u{202e}); bytes that are not UTF-8 become \xNN. At most max_chars
 * characters are kept, then "..." (0: no limit). Appends to out. */
struct buf;
void rv_visible(struct buf *out, const char *s, size_t n, size_t max_chars);
/* The same for a line of a block of text (a file's content, a command's
 * output, a diff, shown as lines): tabs and backslashes are kept as they
 * are, everything else as rv_visible makes it. No limit. */
void rv_visible_block(struct buf *out, const char *s, size_t n);

/* Pointer and length of a JSON string (NUL bytes included), or NULL. */
const char *rv_str(const json_t *v, size_t *len);

/* A --run value: a run number, 1-based, or negative to count from the end
 * (-1 the last); 0 with *out set, -1 for anything else (0, junk, range). */
int rv_parse_run(const char *s, long *out);

#endif
