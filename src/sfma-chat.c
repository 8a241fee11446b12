/* sfma-chat - talk to a relay from a terminal, through the mailbox.
 *
 *   sfma-chat [--all] WORKSPACE
 *
 * Shows the engine's outbox messages (WORKSPACE/.sfma/outbox) as they
 * appear, and turns every line read on stdin into one inbox file
 * (WORKSPACE/.sfma/inbox) that the next run reads at its start. It never
 * touches the engine or the trace.
 *
 * The terminal stays in line mode (termios is never changed), so Ctrl-C and
 * Ctrl-D behave as the shell's users expect and there is nothing to restore.
 * Which outbox messages were already shown is kept in .sfma/chat.state, so
 * a new session starts with what arrived since the last one (--all shows
 * everything again). At end of input the program exits at once: a pipe
 * posts its lines and does not wait for answers.
 *
 * Exit status: 0 at end of input or on SIGINT/SIGTERM/SIGHUP, 1 when a line
 * could not be posted or on an error, 2 on a usage error. */
#include "atomic.h"
#include "statefile.h"
#include "buf.h"
#include "canon.h"
#include "cli.h"
#include "confine.h"
#include "clock.h"
#include "errors.h"
#include "mailbox.h"
#include "ndjson.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define POLL_MS 250                 /* how often the outbox is looked at */
#define STATE_NAME "chat.state"
#define STATE_MAX (4u << 20)

struct chat {
	const char *workspace;
	int sfma_fd, inbox_fd, outbox_fd;   /* outbox_fd is -1 until the engine makes it */
	json_t *shown;                      /* object used as a set of outbox names */
	bool interactive;                   /* stdin is a terminal */
	char user[64];
	long long last_ms;                  /* keeps inbox names strictly increasing */
	unsigned long line_no;
	bool rejected;                      /* some line was not posted */
	struct buf pending;                 /* a line still being read */
	bool discarding;                    /* the current line is over the limit */
};

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
	stop_signal = sig;
}

static const char usage_text[] =
	"usage: sfma-chat [--all] WORKSPACE\n"
	"       sfma-chat --version | --help\n";

/* ---- what was shown ------------------------------------------------------ */

/* A missing state means nothing was shown yet; an unreadable one is only
 * reported, since losing it merely shows old messages again. */
static void state_load(struct chat *c)
{
	c->shown = json_object();
	json_t *doc;
	struct sfma_err e;
	int got = statefile_read(c->sfma_fd, STATE_NAME, STATE_MAX, &doc, &e);
	json_t *names = json_object_get(doc, "shown"), *name;
	size_t i;
	if (got < 0 || (got > 0 && !json_is_array(names))) {
		warning(".sfma/%s: %s; showing every message", STATE_NAME, got < 0 ? e.text : "unreadable");
	} else {
		json_array_foreach(names, i, name)
			if (json_is_string(name))
				json_object_set_new(c->shown, json_string_value(name), json_true());
	}
	json_decref(doc);
}

/* Keep only names still in the outbox, so the state never outgrows it. */
static void state_save(struct chat *c, char **present, size_t n)
{
	json_t *names = json_array();
	for (size_t i = 0; i < n; i++)
		if (json_object_get(c->shown, present[i]))
			json_array_append_new(names, json_string(present[i]));
	json_t *doc = json_pack("{s:i, s:o}", "version", 1, "shown", names);
	struct sfma_err e;
	if (statefile_write(c->sfma_fd, STATE_NAME, doc, &e) < 0)
		warning(".sfma/%s", e.text);
	json_decref(doc);
}

/* ---- showing outbox messages -------------------------------------------- */

/* Print n bytes of UTF-8 so that nothing in them can drive the terminal: C0
 * and C1 controls (escape sequences, carriage returns) and the bidi
 * overrides that reorder what is seen are printed as visible escapes. A line
 * break starts an indented continuation line. */
static void put_safe(FILE *out, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = p[i];
		if (ch == '\n') {
			fputs("\n    ", out);
		} else if (ch == '\t' || (ch >= 0x20 && ch != 0x7f && ch < 0x80)) {
			fputc(ch, out);
		} else if (ch < 0x80) {
			fprintf(out, "\\x%02x", ch);
		} else if (ch == 0xc2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f) {
			fprintf(out, "\\u%04x", p[++i]);
		} else if (ch == 0xe2 && i + 2 < n && ((p[i + 1] == 0x80 && p[i + 2] >= 0xaa && p[i + 2] <= 0xae) ||
		                                     (p[i + 1] == 0x81 && p[i + 2] >= 0xa6 && p[i + 2] <= 0xa9))) {
			fprintf(out, "\\u%04x", 0x2000 | (p[i + 1] & 0x3f) << 6 | (p[i + 2] & 0x3f));
			i += 2;
		} else {
			fputc(ch, out);
		}
	}
}

static void show_message(const char *name, json_t *msg)
{
	json_t *kind = json_object_get(msg, "kind"), *text = json_object_get(msg, "text");
	json_t *at = json_object_get(msg, "at");
	fputc('[', stdout);
	if (at)
		put_safe(stdout, json_string_value(at), json_string_length(at));
	else
		fputs(name, stdout);
	fputs("] ", stdout);
	put_safe(stdout, json_string_value(kind), json_string_length(kind));
	fputs(": ", stdout);
	put_safe(stdout, json_string_value(text), json_string_length(text));
	fputc('\n', stdout);
}

/* Show every outbox message not shown before, oldest first. A message that
 * cannot be read is reported once and then counted as shown. */
static void show_new(struct chat *c)
{
	struct sfma_err e;
	if (c->outbox_fd < 0) {
		c->outbox_fd = mailbox_dir(c->workspace, "outbox", 0, &e);
		if (c->outbox_fd < 0)
			return; /* no run has written to the operator yet */
	}
	char **names;
	size_t n;
	if (outbox_list(c->outbox_fd, &names, &n, &e) < 0)
		die(".sfma/%s", e.text);
	bool changed = false;
	for (size_t i = 0; i < n; i++) {
		if (json_object_get(c->shown, names[i]))
			continue;
		json_t *msg = outbox_read(c->outbox_fd, names[i], &e);
		if (msg)
			show_message(names[i], msg);
		else
			warning("outbox/%s", e.text);
		json_decref(msg);
		json_object_set_new(c->shown, names[i], json_true());
		changed = true;
	}
	if (fflush(stdout) == EOF || ferror(stdout))
		die("stdout: %s", strerror(errno));
	if (changed)
		state_save(c, names, n);
	mailbox_names_free(names, n);
}

/* ---- posting lines ------------------------------------------------------- */

static bool blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t')
			return false;
	return true;
}

/* One line becomes one inbox file, named <epoch-ms>-<pid>-chat-<user>.txt:
 * sortable by time, unique per process (the time is bumped past any name
 * already used), written whole or not at all. */
static void post_line(struct chat *c, const char *line, size_t len)
{
	c->line_no++;
	if (len > 0 && line[len - 1] == '\r')
		len--;
	if (blank(line, len))
		return;
	if (!utf8_text_ok(line, len)) {
		warning("line %lu: not UTF-8 text; not posted", c->line_no);
		c->rejected = true;
		return;
	}
	long long ms = wall_ms();
	char name[160];
	struct stat st;
	for (;;) {
		if (ms <= c->last_ms)
			ms = c->last_ms + 1;
		c->last_ms = ms;
		snprintf(name, sizeof name, "%013lld-%ld-chat-%s.txt", ms, (long)getpid(), c->user);
		if (fstatat(c->inbox_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
			break;
	}
	struct sfma_err e;
	if (atomic_write_at(c->inbox_fd, name, line, len, 0600, &e) < 0)
		die("inbox/%s", e.text);
	if (c->interactive)
		warning("posted as inbox/%s (read when the next run starts)", name);
}

/* Split what was read into lines; a line over the inbox limit is dropped
 * whole (the engine would skip it) and reported once. */
static void feed(struct chat *c, const char *p, size_t n)
{
	while (n > 0) {
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;
		if (!c->discarding && c->pending.len + take > INBOX_FILE_MAX) {
			c->discarding = true;
			c->rejected = true;
			warning("line %lu: longer than %u bytes; not posted", c->line_no + 1, INBOX_FILE_MAX);
		}
		if (!c->discarding)
			buf_add(&c->pending, p, take);
		if (!nl)
			return;
		if (c->discarding)
			c->line_no++;
		else
			post_line(c, c->pending.p ? c->pending.p : "", c->pending.len);
		c->discarding = false;
		buf_reset(&c->pending);
		p += take + 1;
		n -= take + 1;
	}
}

/* ---- main ---------------------------------------------------------------- */

static void pick_user(struct chat *c)
{
	const char *u = getenv("USER");
	struct passwd *pw;
	if ((!u || !*u) && (pw = getpwuid(getuid())))
		u = pw->pw_name;
	mailbox_label(u, c->user, sizeof c->user);
}

static void catch_signals(void)
{
	struct sigaction sa = {.sa_handler = on_stop};
	sigemptyset(&sa.sa_mask);
	/* No SA_RESTART: poll() and read() return EINTR and the loop ends. */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	struct chat c = {.outbox_fd = -1};
	bool all = false;
	static const struct option longopts[] = {
		{"all", no_argument, NULL, 'a'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	opterr = 0;
	int opt;
	while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'a': all = true; break;
		case 'h': cli_help(usage_text);
		case 'V': cli_version();
		default: cli_bad_option(usage_text, opt, argv);
		}
	}
	if (optind == argc)
		cli_usage_error(usage_text, "a WORKSPACE is required");
	if (optind != argc - 1)
		cli_usage_error(usage_text, "one WORKSPACE only (unexpected %s)", argv[optind + 1]);
	c.workspace = argv[optind];

	struct sfma_err e;
	if ((c.sfma_fd = mailbox_dir(c.workspace, NULL, 1, &e)) < 0 ||
	    (c.inbox_fd = mailbox_dir(c.workspace, "inbox", 1, &e)) < 0)
		die("%s", e.text);
	pick_user(&c);
	/* The mailbox and its state only, from here on (sfma(1), CONFINEMENT). */
	const struct confine_places places = {.workspace = c.workspace};
	confine_self("sfma-chat", NULL, &places);
	c.interactive = isatty(STDIN_FILENO);
	if (all)
		c.shown = json_object();
	else
		state_load(&c);
	catch_signals();
	if (c.interactive)
		warning("each line you type goes to the next run of %s; Ctrl-D or Ctrl-C ends", c.workspace);

	show_new(&c);
	char chunk[8192];
	while (!stop_signal) {
		struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
		int ready = poll(&pfd, 1, POLL_MS);
		if (ready < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (ready > 0) {
			ssize_t got = read(STDIN_FILENO, chunk, sizeof chunk);
			if (got < 0 && errno != EINTR && errno != EAGAIN)
				die("stdin: %s", strerror(errno));
			if (got == 0) {
				/* A last line without its newline is still a line. */
				if (c.pending.len || c.discarding)
					feed(&c, "\n", 1);
				break;
			}
			if (got > 0)
				feed(&c, chunk, (size_t)got);
		}
		show_new(&c);
	}
	buf_free(&c.pending);
	json_decref(c.shown);
	return c.rejected ? 1 : 0;
}
