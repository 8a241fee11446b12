/* sfma-report - one run of a workspace as a self-contained HTML page.
 *
 *   sfma-report WORKSPACE [-o FILE] [--run N]
 *
 * The page holds everything it shows: inline CSS, an inline SVG timeline,
 * no script, and a Content-Security-Policy that forbids every fetch, so it
 * can be mailed or archived and opened offline. Every string from the
 * trace is hostile input and is escaped for HTML. The verify status comes
 * from running the sfma-verify found beside this program: the page never
 * vouches for a trace on its own. The page itself is lib/reportpage.c;
 * this reads the run and writes the page. Exit 0, 1 on an unreadable
 * trace or a failed write, 2 on usage errors. */
#include "atomic.h"
#include "beside.h"
#include "buf.h"
#include "cli.h"
#include "confine.h"
#include "errors.h"
#include "ndjson.h"
#include "reportpage.h"
#include "runview.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: sfma-report WORKSPACE [-o FILE] [--run N]\n"
	"       sfma-report --version | --help\n"
	"  -o FILE    write the page to FILE (atomically, mode 0600) instead of standard output\n"
	"  --run N    the Nth run (1 is the first, -1 the last; default -1)\n";

/* Evidence text kept per item: the conversation shows it whole up to
 * this (a system prompt, a command's output), then clipped. */
#define CLIP_BYTES 65536
#define VERIFY_OUTPUT_MAX (64u << 10)

/* ---- verification -------------------------------------------------------- */

/* Run the sfma-verify that sits beside this program on the workspace and
 * keep its one-line verdict (stdout and stderr together, bounded). */
static void run_verify(const char *ws, struct report_verify *out)
{
	char prog[PATH_MAX + 16];
	out->status = -1;
	snprintf(out->line, sizeof out->line, "sfma-verify could not be run");
	if (beside_self("sfma-verify", prog, sizeof prog) < 0)
		return;
	if (access(prog, X_OK) != 0) {
		snprintf(out->line, sizeof out->line, "sfma-verify not found beside sfma-report (%.900s)", prog);
		return;
	}
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return;
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return;
	}
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		dup2(p[1], STDERR_FILENO);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (null >= 0)
			dup2(null, STDIN_FILENO);
		execl(prog, "sfma-verify", "--", ws, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	struct buf b = {0};
	char chunk[4096];
	for (;;) {
		ssize_t got = read(p[0], chunk, sizeof chunk);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		if (b.len < VERIFY_OUTPUT_MAX)
			buf_add(&b, chunk, (size_t)got);
	}
	close(p[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	out->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	/* the verdict line: the one that starts AUDIT_, else the first */
	const char *text = b.p ? b.p : "";
	const char *pick = strstr(text, "AUDIT_");
	while (pick && pick != text && pick[-1] != '\n')
		pick = strstr(pick + 1, "AUDIT_");
	if (!pick)
		pick = text;
	size_t len = strcspn(pick, "\n");
	struct buf vis = {0};
	rv_visible(&vis, pick, len, 400);
	snprintf(out->line, sizeof out->line, "%s", vis.p ? vis.p : "(no output)");
	if (!vis.len)
		snprintf(out->line, sizeof out->line, "sfma-verify printed nothing (exit %d)", out->status);
	buf_free(&vis);
	buf_free(&b);
}

/* ---- the run -------------------------------------------------------------- */

struct report {
	json_t *rows;     /* entry and invalid rows, in order */
	json_t *header, *footer, *record;
	size_t runs;
	long run;
	int torn;
};

/* <workspace>/.sfma and its trace, opened as every reader of a workspace
 * opens them (rv_open_sfma, rv_open_trace: a FIFO or a link is refused). */
static int open_sfma(const char *ws, int *trace_fd)
{
	struct sfma_err e;
	int dfd = rv_open_sfma(ws, &e);
	if (dfd < 0)
		die("%s", e.text);
	int fd = rv_open_trace(dfd, &e);
	if (fd < 0)
		die("%s/.sfma/%s", ws, e.text);
	*trace_fd = fd;
	return dfd;
}

static void load_run(const char *ws, long pick, struct report *rep, int sfma_dirfd, int fd)
{
	struct rv_splitter split;
	struct sfma_err e;
	rv_split_init(&split);
	if (rv_split_fd(fd, &split, &rep->torn, &e) < 0)
		die("%s/.sfma/trace.jsonl: %s", ws, e.text);
	if (split.n == 0)
		die("%s/.sfma/trace.jsonl: no entries", ws);
	long i = rv_pick(&split, pick);
	if (i < 0)
		die("%s: no run %ld (the trace holds %zu)", ws, pick, split.n);
	const struct rv_run *run = &split.runs[i];
	rep->runs = split.n;
	rep->run = i + 1;
	if (i != (long)split.n - 1)
		rep->torn = 0;
	struct rv_view v;
	rv_view_init(&v, sfma_dirfd, i + 1, CLIP_BYTES);
	rep->rows = json_array();
	struct line_reader lr;
	/* what the runs before it wrote: a write is shown against it */
	if (run->first_line > 1) {
		if (lseek(fd, 0, SEEK_SET) < 0)
			die("%s/.sfma/trace.jsonl: seek: %s", ws, strerror(errno));
		lr_init(&lr, fd, RV_MAX_LINE);
		for (uint64_t seen = 0; seen < run->first_line - 1;) {
			char *line;
			size_t len;
			int rc = lr_next(&lr, &line, &len, &e);
			if (rc == 0 || (rc < 0 && (lr.torn || !lr_skip_line(&lr))))
				break;
			seen++;
			if (rc == 1)
				rv_note_earlier(&v, line, len, seen);
		}
		lr_free(&lr);
	}
	if (lseek(fd, (off_t)run->offset, SEEK_SET) < 0)
		die("%s/.sfma/trace.jsonl: seek: %s", ws, strerror(errno));
	lr_init(&lr, fd, RV_MAX_LINE);
	uint64_t line_no = run->first_line - 1;
	while (line_no < run->last_line) {
		char *line;
		size_t len;
		int rc = lr_next(&lr, &line, &len, &e);
		if (rc == 0)
			break;
		line_no++;
		if (rc == 1) {
			json_array_append_new(rep->rows, rv_row(&v, line, len, line_no));
			continue;
		}
		if (lr.torn)
			break;
		if (!strstr(e.text, "longer than"))
			die("%s/.sfma/trace.jsonl: %s", ws, e.text);
		json_array_append_new(rep->rows, rv_row_invalid(&v, line_no, "longer than the line maximum"));
		if (!lr_skip_line(&lr))
			break;
	}
	lr_free(&lr);
	if (rep->torn)
		json_array_append_new(rep->rows, rv_row_invalid(&v, split.lines + 1, "torn final line (no newline)"));
	if (rv_load_record(sfma_dirfd, &rep->record, &e) < 0)
		die("%s/.sfma/%s", ws, e.text);
	rep->header = rv_header(&v, split.n);
	rep->footer = rv_footer(&v, rep->record);
	rv_view_free(&v);
	rv_split_free(&split);
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	const char *out_path = NULL;
	long pick = -1;
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'}, {"run", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},         {"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":ho:", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': out_path = optarg; break;
		case 'r':
			if (rv_parse_run(optarg, &pick) < 0)
				cli_usage_error(usage_text, "--run: a run number, 1 for the first or -1 for the last (not %s)",
				                optarg);
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
	if (out_path && !*out_path)
		cli_usage_error(usage_text, "-o: a file name is required");
	const char *ws = argv[optind];

	int fd;
	int sfma_dirfd = open_sfma(ws, &fd);
	struct report_verify vr;
	run_verify(ws, &vr);
	/* sfma-verify has run (in a process of its own): from here on only
	 * the workspace is read and -o's file written (sfma(1), CONFINEMENT). */
	const char *const reads[] = { ws, NULL }, *const outs[] = { out_path, NULL };
	const struct confine_places places = {.outs = outs};
	confine_self("sfma-report", reads, &places);
	struct report rep = {0};
	load_run(ws, pick, &rep, sfma_dirfd, fd);
	close(fd);
	close(sfma_dirfd);

	struct buf html = {0};
	const struct report_run shown = {rep.rows, rep.header, rep.footer, rep.run, rep.runs};
	report_page(&html, ws, &shown, &vr);
	struct sfma_err e;
	if (out_path) {
		/* 0600: the page shows evidence, which the store keeps 0600
		 * (lib/evidence.h); the umask can only make it stricter. */
		if (atomic_write(out_path, html.p, html.len, 0600, &e) < 0)
			die("%s: %s", out_path, e.text);
	} else if (write_all(STDOUT_FILENO, html.p, html.len) < 0) {
		die("standard output: %s", strerror(errno));
	}
	buf_free(&html);
	json_decref(rep.rows);
	json_decref(rep.header);
	json_decref(rep.footer);
	json_decref(rep.record);
	return 0;
}
