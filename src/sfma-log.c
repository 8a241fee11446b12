/* sfma-log - a run of a workspace, as a person reads it.
 *
 *   sfma-log WORKSPACE [--json] [--run N | --all] [--follow] [--turn N] [--no-pager]
 *
 * Reads WORKSPACE/.sfma/trace.jsonl (and result.json, and the evidence
 * items the entries reference) and prints one row per entry of the chosen
 * run: its time, loop, turn, what happened and the verdict. The trace is
 * hostile input: every string is printed with its control characters made
 * visible, and a line that is not an entry is shown as such. A reader
 * only: nothing in the workspace is written. On a terminal the text goes
 * through a pager, as git's does. Exit 0, 1 when the trace is unreadable
 * or holds lines that are not entries, 2 on usage errors. */
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: sfma-log WORKSPACE [--json] [--run N | --all] [--follow] [--turn N] [--no-pager]\n"
	"       sfma-log --version | --help\n"
	"  --json       one NDJSON object per row\n"
	"  --run N      the Nth run (1 is the first, -1 the last; default -1)\n"
	"  --all        every run in the trace\n"
	"  --follow     follow the run until it is sealed; after a sealed run, wait for the next\n"
	"  --turn N     turn N of the run, every entry of it whole: messages, replies, outputs, diffs\n"
	"  --no-pager   never page (on a terminal the text goes through $SFMA_PAGER, $PAGER or less)\n";

/* Evidence text kept per item (a row shows 200 characters of it); with
 * --turn every item whole, up to the largest a reader reads. */
#define CLIP_BYTES 4096
#define TURN_CLIP_BYTES (64u << 20)
/* --follow polls the trace this often at most, and at least this often. */
#define POLL_MIN_MS 50
#define POLL_MAX_MS 250

struct opts {
	int json, all, follow, colour, no_pager;
	int width;                /* the terminal's columns: text is wrapped to them; 0 none */
	long run;
	long turn;                /* --turn: 0 none */
};

struct out {
	const struct opts *o;
	long turn_rows;          /* --turn: rows of the turn shown */
	long turns_seen;         /* --turn: the run's last turn */
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
		char note[48] = "";
		if (o->o->turn)
			snprintf(note, sizeof note, "turn %ld", o->o->turn);
		log_text_header(&b, row, o->o->colour, o->o->follow ? "following" : note[0] ? note : NULL);
	} else if (kind == 2) {
		log_text_footer(&b, row, o->o->colour);
	} else if (o->o->turn) {
		log_text_row_full(&b, row, o->o->colour);
	} else {
		log_text_row(&b, row, o->o->colour);
	}
	const char *what = json_string_value(json_object_get(row, "row"));
	if (what && strcmp(what, "invalid") == 0 && !o->invalid++) {
		const char *why = json_string_value(json_object_get(row, "error"));
		o->first_bad_line = (uint64_t)json_number_value(json_object_get(row, "line"));
		snprintf(o->first_bad, sizeof o->first_bad, "%s", why ? why : "");
	}
	if (o->o->width && !o->o->json) {
		struct buf w = {0};
		log_text_wrap(&w, b.p ? b.p : "", b.len, o->o->width);
		buf_free(&b);
		b = w;
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
	uint64_t size_seen; /* the file's size when it was last read */
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

/* --turn N: the rows of the loops' turn N; the runner's own entries
 * (loop 0) are no turn's. */
static int in_turn(const struct out *o, const json_t *row)
{
	double loop = json_number_value(json_object_get(row, "loop"));
	return loop >= 1 && json_number_value(json_object_get(row, "turn")) == (double)o->o->turn;
}

static void show_row(struct show *s, json_t *row)
{
	if (s->o->o->turn) {
		double t = json_number_value(json_object_get(row, "turn"));
		if (t > s->o->turns_seen)
			s->o->turns_seen = (long)t;
		/* a line that is not an entry is shown wherever it is */
		if (!in_turn(s->o, row) && strcmp(ndjson_text(row, "row"), "invalid") != 0) {
			json_decref(row);
			return;
		}
		s->o->turn_rows++;
	}
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
	if (s->o->o->turn)
		return; /* one turn: the run's verdict is no part of it */
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

/* ---- the pager ------------------------------------------------------------ */

static pid_t pager_pid = -1;

/* An executable NAME in a directory of PATH. */
static int on_path(const char *name)
{
	const char *path = getenv("PATH");
	char file[4096];
	while (path && *path) {
		size_t n = strcspn(path, ":");
		if (n && n + strlen(name) + 2 <= sizeof file) {
			snprintf(file, sizeof file, "%.*s/%s", (int)n, path, name);
			if (access(file, X_OK) == 0)
				return 1;
		}
		path += n + (path[n] == ':');
	}
	return 0;
}

/* The pager, as git chooses one: SFMA_PAGER, then PAGER, then
 * "less -FRX" (quit when it fits one screen, colours as they are, the
 * screen left as it was) when less is installed. Empty or "cat": none. */
static const char *pager_command(void)
{
	const char *p = getenv("SFMA_PAGER");
	if (!p)
		p = getenv("PAGER");
	if (!p)
		p = on_path("less") ? "less -FRX" : "";
	return *p && strcmp(p, "cat") != 0 ? p : NULL;
}

/* Standard output, flushed and closed, then the pager waited for: it
 * shows what it has until the reader is done with it. */
static void pager_end(void)
{
	if (pager_pid < 0)
		return;
	fflush(stdout);
	close(STDOUT_FILENO);
	while (waitpid(pager_pid, NULL, 0) < 0 && errno == EINTR)
		;
	pager_pid = -1;
}

/* Send standard output through the pager (sh -c COMMAND, as git does). A
 * pager that cannot be started leaves the text on the terminal. */
static void pager_start(const char *command)
{
	int p[2];
	if (pipe(p) < 0)
		return;
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return;
	}
	if (pid == 0) {
		dup2(p[0], STDIN_FILENO);
		close(p[0]);
		close(p[1]);
		execl("/bin/sh", "sh", "-c", command, (char *)NULL);
		_exit(127);
	}
	dup2(p[1], STDOUT_FILENO);
	close(p[0]);
	close(p[1]);
	pager_pid = pid;
	/* A reader who quits the pager early ends us by SIGPIPE, silently,
	 * as it ends git; whatever exits, the pager is waited for. */
	signal(SIGPIPE, SIG_DFL);
	atexit(pager_end);
}

/* ---- runs ---------------------------------------------------------------- */

struct ctx {
	const char *ws;
	int fd, sfma_dirfd, torn;
	struct out *o;
	struct rv_splitter *split;
	json_t *writes;  /* what the runs shown so far wrote (rv_pass_writes) */
};

struct seed {
	struct rv_view *v;
	uint64_t last;
};

static int seed_line(const char *line, size_t len, uint64_t line_no, uint64_t offset, void *arg)
{
	(void)offset;
	struct seed *sd = arg;
	if (line_no > sd->last)
		return 1;
	if (line)
		rv_note_earlier(sd->v, line, len, line_no);
	return line_no >= sd->last;
}

/* A view of run i, knowing what the runs before it wrote (the first
 * view reads the lines before it for that). */
static void view_of(struct ctx *c, struct rv_view *v, size_t i, size_t clip)
{
	rv_view_init(v, c->sfma_dirfd, (long)i + 1, clip);
	if (c->writes) {
		json_decref(v->writes);
		v->writes = json_incref(c->writes);
	} else if (c->split->runs[i].first_line > 1) {
		struct seed sd = {v, c->split->runs[i].first_line - 1};
		struct reader r = {.fd = c->fd};
		read_lines(&r, seed_line, &sd);
	}
}

static void view_done(struct ctx *c, struct rv_view *v)
{
	json_decref(c->writes);
	c->writes = json_incref(v->writes);
	rv_view_free(v);
}

/* Run i as it stands, from its first line to its last. */
static void show_run(struct ctx *c, size_t i, size_t clip)
{
	const struct rv_run *run = &c->split->runs[i];
	struct rv_view v;
	view_of(c, &v, i, clip);
	struct show s = {.o = c->o, .v = &v, .last_line = run->last_line, .runs = c->split->n};
	struct reader r = {.fd = c->fd, .pos = run->offset, .line_no = run->first_line - 1};
	read_lines(&r, show_line, &s);
	if (c->torn && i == c->split->n - 1) {
		json_t *row = rv_row_invalid(&v, c->split->lines + 1, "torn final line (no newline)");
		show_row(&s, row);
	}
	finish_run(&s, c->ws, c->sfma_dirfd);
	view_done(c, &v);
}

/* Follow run i, the last: the rows there are, then each as it arrives,
 * until the run is sealed (1) or a later run begins (0). */
static int follow_one(struct ctx *c, size_t i)
{
	const struct rv_run *run = &c->split->runs[i];
	struct rv_view v;
	view_of(c, &v, i, CLIP_BYTES);
	struct show s = {.o = c->o, .v = &v, .last_line = c->split->lines, .runs = c->split->n};
	struct reader r = {.fd = c->fd, .pos = run->offset, .line_no = run->first_line - 1};
	/* the lines already split are read again; only later ones are fed */
	read_lines(&r, show_line, &s);
	s.last_line = 0;
	s.split = c->split;
	s.run_index = i;
	follow_run(&r, &s, c->ws, c->sfma_dirfd);
	finish_run(&s, c->ws, c->sfma_dirfd);
	view_done(c, &v);
	return !s.new_run;
}

struct waiting {
	struct rv_splitter *split;
	size_t runs;
};

static int wait_line(const char *line, size_t len, uint64_t line_no, uint64_t offset, void *arg)
{
	struct waiting *w = arg;
	if (line_no <= w->split->lines)
		return 0; /* fed when the trace was split: passed over */
	json_t *entry = line ? ndjson_parse(line, len, &(struct sfma_err){{0}}) : NULL;
	rv_split_feed(w->split, json_is_object(entry) ? entry : NULL, offset);
	json_decref(entry);
	return w->split->n > w->runs;
}

/* Wait for a run to begin after the trace's last line (fed to split as
 * they come); returns its index. */
static size_t wait_for_run(struct ctx *c)
{
	struct stat st;
	/* From the last run's first line: the lines split already are passed
	 * over, so the reading goes on exactly after the last whole line (a
	 * torn one is read once it is whole). */
	struct reader r = {.fd = c->fd};
	if (c->split->n) {
		r.pos = c->split->runs[c->split->n - 1].offset;
		r.line_no = c->split->runs[c->split->n - 1].first_line - 1;
	}
	struct waiting w = {c->split, c->split->n};
	long delay = POLL_MIN_MS;
	while (c->split->n == w.runs) {
		if (fstat(c->fd, &st) < 0)
			die(".sfma/trace.jsonl: %s", strerror(errno));
		if ((uint64_t)st.st_size < r.pos)
			die(".sfma/trace.jsonl: the trace shrank while being followed");
		uint64_t before = r.pos;
		if ((uint64_t)st.st_size > r.pos && !(r.torn && (uint64_t)st.st_size == r.size_seen))
			read_lines(&r, wait_line, &w);
		r.size_seen = (uint64_t)st.st_size;
		if (r.pos != before) {
			delay = POLL_MIN_MS;
			continue;
		}
		sleep_ms(delay);
		delay = delay * 2 > POLL_MAX_MS ? POLL_MAX_MS : delay * 2;
	}
	return c->split->n - 1;
}

/* The trace's last run is sealed: result.json commits to every line of
 * the trace (a record that claims so falsely makes --follow only wait). */
static int last_run_sealed(struct ctx *c)
{
	json_t *record = load_record(c->ws, c->sfma_dirfd);
	int sealed = record && !c->torn && rv_record_seals(record, c->split->lines, NULL);
	json_decref(record);
	return sealed;
}

/* --follow: the last run while it is not sealed; after a sealed run, the
 * next one to begin. A run that ends unsealed is followed until a later
 * run begins, which is followed in its turn. */
static void follow(struct ctx *c)
{
	size_t i;
	if (c->split->n == 0 || last_run_sealed(c)) {
		if (isatty(STDERR_FILENO))
			warning("%s: %s; waiting for the next run", c->ws,
			        c->split->n ? "the last run is sealed" : "no run yet");
		i = wait_for_run(c);
	} else {
		i = c->split->n - 1;
	}
	while (!follow_one(c, i))
		i = c->split->n - 1;
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	struct opts opts = {.run = -1};
	int run_given = 0;
	enum { OPT_TURN = 0x100, OPT_NO_PAGER };
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},   {"run", required_argument, NULL, 'r'},
		{"all", no_argument, NULL, 'a'},    {"follow", no_argument, NULL, 'f'},
		{"turn", required_argument, NULL, OPT_TURN}, {"no-pager", no_argument, NULL, OPT_NO_PAGER},
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
		case OPT_TURN: {
			unsigned long t;
			if (cli_parse_ulong(optarg, 1, 1000000000UL, &t) < 0)
				cli_usage_error(usage_text, "--turn: a turn number, 1 or more (not %s)", optarg);
			opts.turn = (long)t;
			break;
		}
		case OPT_NO_PAGER: opts.no_pager = 1; break;
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
	if (opts.turn && (opts.all || opts.follow))
		cli_usage_error(usage_text, "--turn shows one turn of one run: not with %s", opts.all ? "--all" : "--follow");
	const char *no_color = getenv("NO_COLOR");
	opts.colour = !opts.json && isatty(STDOUT_FILENO) && !(no_color && *no_color);
	const char *ws = argv[optind];

	struct out o = {.o = &opts};
	int sfma_dirfd = -1;
	int fd = open_trace(ws, opts.follow, &sfma_dirfd);
	/* Text for a person on a terminal goes through the pager; never rows
	 * for a program, never a run followed as it happens. */
	/* On a terminal the text is wrapped to its width (under the row's
	 * text, not at column 0), before any pager takes the terminal's place. */
	struct winsize ws_size;
	if (!opts.json && isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws_size) == 0)
		opts.width = ws_size.ws_col;
	/* The pager is started before sfma-log confines itself, which then
	 * may start nothing: the pager is the operator's program, not ours. */
	const char *pager = pager_command();
	if (pager && !opts.no_pager && !opts.json && !opts.follow && isatty(STDOUT_FILENO))
		pager_start(pager);
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

	struct ctx cx = {.ws = ws, .fd = fd, .sfma_dirfd = sfma_dirfd, .torn = torn, .o = &o, .split = &split};
	/* --follow follows the last run; a run chosen that is not the last
	 * is shown as it stands. */
	int following = opts.follow && (split.n == 0 || last == (long)split.n - 1);
	for (long i = first; split.n && i <= last && !(following && i == last); i++)
		show_run(&cx, (size_t)i, opts.turn ? TURN_CLIP_BYTES : CLIP_BYTES);
	if (following)
		follow(&cx);
	json_decref(cx.writes);
	rv_split_free(&split);
	close(fd);
	if (sfma_dirfd >= 0)
		close(sfma_dirfd);
	if (opts.turn && !o.turn_rows)
		die("%s: run %ld has no turn %ld (its last is %ld)", ws, first + 1, opts.turn, o.turns_seen);
	if (o.invalid)
		die("%s/.sfma/trace.jsonl: line %llu: %s%s", ws, (unsigned long long)o.first_bad_line, o.first_bad,
		    o.invalid > 1 ? " (and more lines that are not entries)" : "");
	return 0;
}
