/* sfma-log - a run of a workspace, as a person reads it.
 *
 *   sfma-log WORKSPACE [--json] [--run N | --all] [--follow]
 *
 * Reads WORKSPACE/.sfma/trace.jsonl (and result.json, and the evidence
 * items the entries reference) and prints one row per entry of the chosen
 * run: its time, loop, turn, what happened and the verdict. The trace is
 * hostile input: every string is printed with its control characters made
 * visible, and a line that is not an entry is shown as such. A reader
 * only: nothing in the workspace is written. Exit 0, 1 when the trace is
 * unreadable or holds lines that are not entries, 2 on usage errors. */
#include "buf.h"
#include "clock.h"
#include "cli.h"
#include "confine.h"
#include "errors.h"
#include "logtext.h"
#include "ndjson.h"
#include "runview.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: sfma-log WORKSPACE [--json] [--run N | --all] [--follow]\n"
	"       sfma-log --version | --help\n"
	"  --json     one NDJSON object per row\n"
	"  --run N    the Nth run (1 is the first, -1 the last; default -1)\n"
	"  --all      every run in the trace\n"
	"  --follow   follow the run until it is sealed\n";

/* Evidence text kept per item (a row shows 200 characters of it). */
#define CLIP_BYTES 4096
/* --follow polls the trace this often at most, and at least this often. */
#define POLL_MIN_MS 50
#define POLL_MAX_MS 250

struct opts {
	int json, all, follow, colour;
	long run;
};

struct out {
	const struct opts *o;
	uint64_t invalid;        /* rows that were not entries */
	uint64_t first_bad_line;
	char first_bad[SFMA_ERR_MAX];
};

/* Print one row (its text or its JSON line, lib/logtext.h) and flush:
 * --follow shows rows as they arrive. */
static void emit(struct out *o, const json_t *row, int kind /* 0 row, 1 header, 2 footer */)
{
	struct buf b = {0};
	if (o->o->json) {
		if (log_json_row(&b, row) < 0)
			die("out of memory");
	} else if (kind == 1) {
		log_text_header(&b, row, o->o->colour, o->o->follow);
	} else if (kind == 2) {
		log_text_footer(&b, row, o->o->colour);
	} else {
		log_text_row(&b, row, o->o->colour);
	}
	const char *what = json_string_value(json_object_get(row, "row"));
	if (what && strcmp(what, "invalid") == 0 && !o->invalid++) {
		const char *why = json_string_value(json_object_get(row, "error"));
		o->first_bad_line = (uint64_t)json_number_value(json_object_get(row, "line"));
		snprintf(o->first_bad, sizeof o->first_bad, "%s", why ? why : "");
	}
	if (fwrite(b.p, 1, b.len, stdout) != b.len || fflush(stdout) != 0)
		die("standard output: %s", strerror(errno));
	buf_free(&b);
}

/* ---- reading ------------------------------------------------------------- */

struct reader {
	int fd;
	uint64_t pos;      /* offset of the next unread line */
	uint64_t line_no;  /* lines read before pos */
	int torn;          /* the file ends inside a line at pos */
};

/* Read the complete lines from r->pos on; call each(line, len, line_no, arg)
 * for each (line NULL for one longer than the maximum) until it returns
 * nonzero or the input ends. r->pos stays at the start of a torn line. */
static void read_lines(struct reader *r, int (*each)(const char *, size_t, uint64_t, uint64_t, void *), void *arg)
{
	struct line_reader lr;
	if (lseek(r->fd, (off_t)r->pos, SEEK_SET) < 0)
		die(".sfma/trace.jsonl: seek: %s", strerror(errno));
	lr_init(&lr, r->fd, RV_MAX_LINE);
	uint64_t base = r->pos;
	r->torn = 0;
	for (;;) {
		char *line;
		size_t len;
		struct sfma_err e;
		int rc = lr_next(&lr, &line, &len, &e);
		if (rc == 0)
			break;
		if (rc == 1) {
			uint64_t at = r->pos;
			r->pos = at + len + 1;
			r->line_no++;
			if (each(line, len, r->line_no, at, arg))
				break;
			continue;
		}
		if (lr.torn) {
			r->torn = 1;
			break;
		}
		if (!strstr(e.text, "longer than"))
			die(".sfma/trace.jsonl: %s", e.text);
		uint64_t at = r->pos;
		int more = lr_skip_line(&lr);
		r->pos = base + lr.consumed + lr.start; /* just past the skipped line */
		r->line_no++;
		if (each(NULL, 0, r->line_no, at, arg) || !more)
			break;
	}
	lr_free(&lr);
}

struct show {
	struct out *o;
	struct rv_view *v;
	struct rv_splitter *split; /* fed while following, else NULL */
	uint64_t last_line;        /* stop after this line (0: none) */
	size_t runs;
	size_t run_index;          /* following: the run's index in split */
	int header_done;
	int new_run;               /* following: a later run began */
};

static void show_row(struct show *s, json_t *row)
{
	if (!s->header_done) {
		json_t *h = rv_header(s->v, s->runs);
		emit(s->o, h, 1);
		json_decref(h);
		s->header_done = 1;
	}
	emit(s->o, row, 0);
	json_decref(row);
}

static int show_line(const char *line, size_t len, uint64_t line_no, uint64_t offset, void *arg)
{
	struct show *s = arg;
	if (s->split) {
		json_t *entry = line ? ndjson_parse(line, len, &(struct sfma_err){{0}}) : NULL;
		rv_split_feed(s->split, json_is_object(entry) ? entry : NULL, offset);
		json_decref(entry);
		if (s->split->n > s->run_index + 1) {
			s->new_run = 1;
			return 1;
		}
		if (s->v->closed) /* past the run's closing anchor: not ours */
			return 0;
	}
	char why[80];
	snprintf(why, sizeof why, "longer than %u bytes", RV_MAX_LINE);
	show_row(s, line ? rv_row(s->v, line, len, line_no) : rv_row_invalid(s->v, line_no, why));
	return s->last_line && line_no >= s->last_line;
}

/* The workspace's result.json, NULL when it has none; one that is not a
 * regular file (a FIFO, a link) or cannot be read ends the reader. */
static json_t *load_record(const char *ws, int sfma_dirfd)
{
	json_t *record;
	struct sfma_err e;
	if (rv_load_record(sfma_dirfd, &record, &e) < 0)
		die("%s/.sfma/%s", ws, e.text);
	return record;
}

static void finish_run(struct show *s, const char *ws, int sfma_dirfd)
{
	if (!s->header_done) {
		json_t *h = rv_header(s->v, s->runs);
		emit(s->o, h, 1);
		json_decref(h);
	}
	json_t *record = load_record(ws, sfma_dirfd);
	json_t *f = rv_footer(s->v, record);
	emit(s->o, f, 2);
	json_decref(f);
	json_decref(record);
}

/* Open <workspace>/.sfma and its trace read-only (rv_open_sfma,
 * rv_open_trace: a FIFO or a link there is refused, never waited on);
 * with wait, until both exist. Returns the trace fd and sets *sfma_dirfd. */
static int open_trace(const char *ws, int wait, int *sfma_dirfd)
{
	long delay = POLL_MIN_MS;
	for (;;) {
		struct sfma_err e;
		int dfd = rv_open_sfma(ws, &e);
		if (dfd < 0 && !(wait && errno == ENOENT))
			die("%s", e.text);
		int fd = dfd >= 0 ? rv_open_trace(dfd, &e) : -1;
		if (fd >= 0) {
			*sfma_dirfd = dfd;
			return fd;
		}
		if (dfd >= 0) {
			int err = errno;
			close(dfd);
			if (!(wait && err == ENOENT))
				die("%s/.sfma/%s", ws, e.text);
		}
		sleep_ms(delay);
		delay = delay * 2 > POLL_MAX_MS ? POLL_MAX_MS : delay * 2;
	}
}

/* Follow the last run: rows as they arrive, until the run's closing anchor
 * is sealed by result.json, or a later run begins. */
static void follow_run(struct reader *r, struct show *s, const char *ws, int sfma_dirfd)
{
	long delay = POLL_MIN_MS;
	for (;;) {
		if (s->v->closed) {
			json_t *record = load_record(ws, sfma_dirfd);
			int sealed = record && rv_record_seals(record, s->v->last_line, s->v->last_hash);
			json_decref(record);
			if (sealed)
				return;
		}
		if (s->new_run)
			return;
		struct stat st;
		if (fstat(r->fd, &st) < 0)
			die(".sfma/trace.jsonl: %s", strerror(errno));
		if ((uint64_t)st.st_size < r->pos)
			die(".sfma/trace.jsonl: the trace shrank while being followed");
		if ((uint64_t)st.st_size > r->pos && !(r->torn && (uint64_t)st.st_size == r->pos)) {
			uint64_t before = r->pos;
			read_lines(r, show_line, s);
			if (r->pos != before) {
				delay = POLL_MIN_MS;
				continue;
			}
		}
		sleep_ms(delay);
		delay = delay * 2 > POLL_MAX_MS ? POLL_MAX_MS : delay * 2;
	}
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	struct opts opts = {.run = -1};
	int run_given = 0;
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},   {"run", required_argument, NULL, 'r'},
		{"all", no_argument, NULL, 'a'},    {"follow", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},   {"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': opts.json = 1; break;
		case 'a': opts.all = 1; break;
		case 'f': opts.follow = 1; break;
		case 'r':
			if (rv_parse_run(optarg, &opts.run) < 0)
				cli_usage_error(usage_text, "--run: a run number, 1 for the first or -1 for the last (not %s)",
				                optarg);
			run_given = 1;
			break;
		case 'h': cli_help(usage_text);
		case 'V': cli_version();
		default: cli_bad_option(usage_text, c, argv);
		}
	}
	if (optind >= argc)
		cli_usage_error(usage_text, "a WORKSPACE is required");
	if (optind + 1 < argc)
		cli_usage_error(usage_text, "one WORKSPACE only (unexpected %s)", argv[optind + 1]);
	if (opts.all && run_given)
		cli_usage_error(usage_text, "--run and --all exclude each other");
	const char *no_color = getenv("NO_COLOR");
	opts.colour = !opts.json && isatty(STDOUT_FILENO) && !(no_color && *no_color);
	const char *ws = argv[optind];

	struct out o = {.o = &opts};
	int sfma_dirfd = -1;
	int fd = open_trace(ws, opts.follow, &sfma_dirfd);
	/* Read-only on the workspace, once it exists (--follow may wait for
	 * it): sfma(1), CONFINEMENT. */
	const char *const reads[] = { ws, NULL };
	confine_self("sfma-log", reads, NULL);
	/* a result.json that is not a regular file is refused before any row */
	json_decref(load_record(ws, sfma_dirfd));
	struct rv_splitter split;
	rv_split_init(&split);
	int torn;
	struct sfma_err e;
	if (rv_split_fd(fd, &split, &torn, &e) < 0)
		die("%s/.sfma/trace.jsonl: %s", ws, e.text);
	if (split.n == 0 && !opts.follow)
		die("%s/.sfma/trace.jsonl: no entries", ws);
	long first = 0, last = (long)split.n - 1;
	if (!opts.all && split.n) {
		first = last = rv_pick(&split, opts.run);
		if (first < 0)
			die("%s: no run %ld (the trace holds %zu)", ws, opts.run, split.n);
	}
	int follow_last = opts.follow && (split.n == 0 || last == (long)split.n - 1);
	for (long i = first; split.n && i <= last; i++) {
		const struct rv_run *run = &split.runs[i];
		struct rv_view v;
		rv_view_init(&v, sfma_dirfd, i + 1, CLIP_BYTES);
		int following = follow_last && i == (long)split.n - 1;
		struct show s = {.o = &o, .v = &v, .last_line = following ? 0 : run->last_line, .runs = split.n};
		struct reader r = {.fd = fd, .pos = run->offset, .line_no = run->first_line - 1};
		if (following) {
			/* the lines already split are read again; only later ones are fed */
			s.last_line = split.lines;
			read_lines(&r, show_line, &s);
			s.last_line = 0;
			s.split = &split;
			s.run_index = (size_t)i;
			follow_run(&r, &s, ws, sfma_dirfd);
		} else {
			read_lines(&r, show_line, &s);
		}
		if (torn && !opts.follow && i == (long)split.n - 1) {
			json_t *row = rv_row_invalid(&v, split.lines + 1, "torn final line (no newline)");
			emit(&o, row, 0);
			json_decref(row);
		}
		finish_run(&s, ws, sfma_dirfd);
		rv_view_free(&v);
	}
	if (opts.follow && split.n == 0) {
		/* an empty trace: the run has not begun yet */
		struct rv_view v;
		rv_view_init(&v, sfma_dirfd, 1, CLIP_BYTES);
		struct show s = {.o = &o, .v = &v, .runs = 1, .split = &split};
		struct reader r = {.fd = fd};
		follow_run(&r, &s, ws, sfma_dirfd);
		finish_run(&s, ws, sfma_dirfd);
		rv_view_free(&v);
	}
	rv_split_free(&split);
	close(fd);
	if (sfma_dirfd >= 0)
		close(sfma_dirfd);
	if (o.invalid)
		die("%s/.sfma/trace.jsonl: line %llu: %s%s", ws, (unsigned long long)o.first_bad_line, o.first_bad,
		    o.invalid > 1 ? " (and more lines that are not entries)" : "");
	return 0;
}
