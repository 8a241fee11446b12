/* sfma-summary - the outcome of a batch of runs, one line per workspace.
 *
 *   sfma-summary [--json] [--jobs N] WORKSPACE...
 *
 * For each workspace: its name (the argument as given), the verdict,
 * turns, model calls and tokens of its last result record, and whether
 * that record verifies. Verification is the sfma-verify found beside this
 * program, run on each workspace: the summary never vouches for a record
 * on its own. The record is hostile input: every string is printed with
 * its control characters made visible. Exit 0 when every workspace holds
 * a record that verifies, 1 when any does not (invalid, unsealed, or no
 * record at all), 2 on usage errors. */
#include "beside.h"
#include "buf.h"
#include "cli.h"
#include "confine.h"
#include "errors.h"
#include "ndjson.h"
#include "record.h"
#include "runview.h"
#include "utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: sfma-summary [--json] [--jobs N] WORKSPACE...\n"
	"       sfma-summary --version | --help\n"
	"  --json     one NDJSON object per workspace\n"
	"  --jobs N   verify N workspaces at once (default: the CPUs this may use)\n";

/* What sfma-verify may print that is kept, and shown of its reason. */
#define VERIFY_OUTPUT_MAX (64u << 10)
#define REASON_CHARS 300
/* Characters of a workspace name or verdict shown on a text line. */
#define NAME_CHARS 60
#define VERDICT_CHARS 24

/* How a workspace's record fared; every status but ST_VERIFIED fails the batch. */
enum status { ST_VERIFIED, ST_UNSEALED, ST_INVALID, ST_NO_RECORD };
static const char *const status_word[] = {"verified", "unsealed", "invalid", "no-record"};

struct row {
	const char *arg;
	char *name;          /* arg, made visible */
	json_t *record;      /* NULL: none, or not readable as JSON */
	enum status status;
	char *detail;        /* AUDIT_OK's words, or the reason (visible) */
	char signature[16];  /* verified: none | untrusted-key | trusted */
	long long entries;   /* verified: the count sfma-verify reported, else -1 */
	char head[65];       /* verified: the head hash it reported */
};

struct opts {
	int json, colour;
	size_t jobs;         /* sfma-verify processes at once */
	char verify_prog[PATH_MAX];
};

/* --jobs beyond this is a typo, not a machine. */
#define JOBS_LIMIT 256

/* The CPUs this process may run on (sched_getaffinity(2)): a Slurm task
 * or a container is given fewer than the machine has. */
static size_t cpus_allowed(void)
{
	cpu_set_t set;
	long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > JOBS_LIMIT ? JOBS_LIMIT : (size_t)n;
}

/* ---- verification -------------------------------------------------------- */

/* The sfma-verify beside this program (/proc/self/exe), or die: without it
 * nothing can be vouched for, and that is one error, not a line per
 * workspace. */
static void find_verify(struct opts *o)
{
	if (beside_self("sfma-verify", o->verify_prog, sizeof o->verify_prog) < 0)
		die("/proc/self/exe: %s (no directory to find sfma-verify in)", strerror(errno));
	if (access(o->verify_prog, X_OK) != 0)
		die("%s: %s (sfma-verify must be installed beside sfma-summary)", o->verify_prog, strerror(errno));
}

/* Start sfma-verify on ws, its stdout and stderr together on *fd. */
static pid_t start_verify(const struct opts *o, const char *ws, int *fd)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(p[1], STDOUT_FILENO) < 0 ||
		    dup2(p[1], STDERR_FILENO) < 0)
			_exit(127);
		/* "--": a workspace named like an option is still a workspace. */
		execl(o->verify_prog, "sfma-verify", "--", ws, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	*fd = p[0];
	return pid;
}

/* The exit status of pid, or 128 + the signal that ended it. */
static int reap(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			die("waitpid: %s", strerror(errno));
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* The line of out that begins with prefix (NULL: none); its length in *len. */
static const char *line_with(const struct buf *out, const char *prefix, size_t *len)
{
	const char *text = out->p ? out->p : "";
	size_t plen = strlen(prefix);
	for (const char *l = text; *l;) {
		size_t n = strcspn(l, "\n");
		if (n >= plen && memcmp(l, prefix, plen) == 0) {
			*len = n;
			return l;
		}
		l += n + (l[n] == '\n');
	}
	return NULL;
}

static char *visible_dup(const char *s, size_t n, size_t max_chars)
{
	struct buf b = {0};
	rv_visible(&b, s, n, max_chars);
	return b.p ? b.p : xstrdup("");
}

/* The value of " key=" in an AUDIT_OK line, copied to out. */
static void word_after(const char *line, size_t len, const char *key, char *out, size_t size)
{
	out[0] = '\0';
	size_t klen = strlen(key);
	for (size_t i = 0; i + klen <= len; i++) {
		if ((i == 0 || line[i - 1] == ' ') && memcmp(line + i, key, klen) == 0) {
			size_t n = 0;
			while (i + klen + n < len && line[i + klen + n] != ' ')
				n++;
			snprintf(out, size, "%.*s", (int)n, line + i + klen);
			return;
		}
	}
}

/* What can be told of a workspace before sfma-verify: 1 when it has a
 * record to verify. A workspace with no record (or no workspace at all)
 * is never passed to sfma-verify: there is nothing to vouch for, and for
 * a batch that is a run that did not finish. */
static int judge_before(struct row *r)
{
	struct sfma_err e;
	struct stat st;
	r->entries = -1;
	r->name = visible_dup(r->arg, strlen(r->arg), 0);
	if (stat(r->arg, &st) < 0) {
		r->status = ST_NO_RECORD;
		r->detail = xstrdup(strerror(errno));
		return 0;
	}
	if (!S_ISDIR(st.st_mode)) {
		r->status = ST_NO_RECORD;
		r->detail = xstrdup("not a workspace directory");
		return 0;
	}
	/* Every file is opened as a reader of a workspace must (lib/runview.h):
	 * a FIFO or a link where the record or the trace should be makes the
	 * workspace invalid here, and sfma-verify is never handed it. */
	int dfd = rv_open_sfma(r->arg, &e);
	if (dfd < 0 && errno == ENOENT) {
		r->status = ST_NO_RECORD;
		r->detail = xstrdup("no .sfma/result.json");
		return 0;
	}
	if (dfd < 0) {
		r->status = ST_INVALID;
		r->detail = xstrdup(".sfma: not a directory (a link or a file is in its place)");
		return 0;
	}
	int has_record = fstatat(dfd, "result.json", &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT;
	/* The columns come from the record as it is; whether to believe them
	 * is what the verify column says. */
	int refused = has_record && rv_load_record(dfd, &r->record, &e) < 0;
	if (has_record && !refused) {
		int fd = rv_open_trace(dfd, &e);
		/* no trace at all is sfma-verify's to report */
		refused = fd < 0 && errno != ENOENT;
		if (fd >= 0)
			close(fd);
	}
	close(dfd);
	if (!has_record) {
		r->status = ST_NO_RECORD;
		r->detail = xstrdup("no .sfma/result.json");
		return 0;
	}
	if (refused) {
		r->status = ST_INVALID;
		struct buf why = {0};
		buf_adds(&why, ".sfma/");
		rv_visible(&why, e.text, strlen(e.text), REASON_CHARS);
		r->detail = why.p;
		return 0;
	}
	return 1;
}

/* The verify status from what sfma-verify said (out) and its exit rc. */
static void judge_after(struct row *r, int rc, const struct buf *out)
{
	size_t len = 0;
	const char *line;
	if (rc == 0 && (line = line_with(out, "AUDIT_OK", &len))) {
		r->status = ST_VERIFIED;
		word_after(line, len, "signature=", r->signature, sizeof r->signature);
		word_after(line, len, "head=", r->head, sizeof r->head);
		char count[32];
		word_after(line, len, "entries=", count, sizeof count);
		r->entries = strtoll(count, NULL, 10);
		struct buf words = {0};
		buf_printf(&words, "signature=%s entries=%lld", r->signature, r->entries);
		r->detail = words.p;
	} else if (rc == 3 && (line = line_with(out, "AUDIT_UNSEALED: ", &len))) {
		r->status = ST_UNSEALED;
		r->detail = visible_dup(line + 16, len - 16, REASON_CHARS);
	} else if ((line = line_with(out, "AUDIT_INVALID: ", &len))) {
		r->status = ST_INVALID;
		r->detail = visible_dup(line + 15, len - 15, REASON_CHARS);
	} else {
		/* sfma-verify failed in a way it does not report (a crash, a
		 * usage error): not verified, and said as such. */
		r->status = ST_INVALID;
		const char *text = out->p ? out->p : "";
		struct buf why = {0};
		buf_printf(&why, "sfma-verify %s %d: ", rc > 128 ? "died of signal" : "exited",
		           rc > 128 ? rc - 128 : rc);
		rv_visible(&why, text, strcspn(text, "\n"), REASON_CHARS);
		r->detail = why.p;
	}
}

static void print_json(const struct row *r);

/* One sfma-verify at work. */
struct job {
	pid_t pid;
	int fd;
	size_t row;
	struct buf out;
};

/* Judge every row, up to o->jobs verifications at once; rows are done in
 * any order, and with --json each goes out as soon as every row before it
 * is done (so the output is in argument order, and a long batch can be
 * watched while it is read). */
static void judge_all(const struct opts *o, struct row *rows, size_t n)
{
	struct job *jobs = xcalloc(o->jobs, sizeof *jobs);
	struct pollfd *fds = xcalloc(o->jobs, sizeof *fds);
	char *done = xcalloc(n ? n : 1, 1);
	size_t next = 0, emitted = 0, active = 0;
	while (next < n || active) {
		while (active < o->jobs && next < n) {
			if (judge_before(&rows[next])) {
				struct job *j = &jobs[active++];
				j->pid = start_verify(o, rows[next].arg, &j->fd);
				j->row = next;
				j->out = (struct buf){0};
			} else {
				done[next] = 1;
			}
			next++;
		}
		for (; o->json && emitted < n && done[emitted]; emitted++)
			print_json(&rows[emitted]);
		if (!active)
			continue;
		for (size_t k = 0; k < active; k++)
			fds[k] = (struct pollfd){.fd = jobs[k].fd, .events = POLLIN};
		if (poll(fds, active, -1) < 0) {
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		/* from the end, so that a finished job can take the last one's place */
		for (size_t k = active; k-- > 0;) {
			if (!fds[k].revents)
				continue;
			struct job *j = &jobs[k];
			char chunk[4096];
			ssize_t got = read(j->fd, chunk, sizeof chunk);
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (got > 0) {
				if (j->out.len < VERIFY_OUTPUT_MAX)
					buf_add(&j->out, chunk, (size_t)got);
				continue;
			}
			close(j->fd);
			judge_after(&rows[j->row], reap(j->pid), &j->out);
			done[j->row] = 1;
			buf_free(&j->out);
			jobs[k] = jobs[--active];
		}
	}
	for (; o->json && emitted < n && done[emitted]; emitted++)
		print_json(&rows[emitted]);
	free(done);
	free(fds);
	free(jobs);
}

/* ---- output -------------------------------------------------------------- */

static const json_t *field(const struct row *r, const char *k)
{
	return r->record ? json_object_get(r->record, k) : NULL;
}

/* A whole number of the record, or -1 when absent or not one. */
static long long count_of(const struct row *r, const char *k)
{
	long long v;
	return ndjson_integer(field(r, k), &v) && v >= 0 ? v : -1;
}

/* Usage, when the record has it and a provider reported any: the
 * planner records zeros for a run whose model reported none (the mock). */
static int usage_of(const struct row *r, long long *in, long long *out, long long *cached)
{
	const json_t *u = field(r, "usage");
	*cached = -1;
	if (!json_is_object(u) || !ndjson_integer(json_object_get(u, "inputTokens"), in) ||
	    !ndjson_integer(json_object_get(u, "outputTokens"), out))
		return 0;
	if (!ndjson_integer(json_object_get(u, "cachedInputTokens"), cached))
		*cached = -1;
	return *in > 0 || *out > 0 || *cached > 0;
}

/* The run's cost in US dollars, when its endpoints were priced (the
 * record's usage.costUsd, the sum of its calls'): 1, or 0 without one. */
static int cost_of(const struct row *r, double *usd)
{
	const json_t *u = field(r, "usage");
	const json_t *c = json_is_object(u) ? json_object_get(u, "costUsd") : NULL;
	if (!json_is_number(c))
		return 0;
	*usd = json_number_value(c);
	return isfinite(*usd) && *usd >= 0 && *usd < 1e12;
}

static json_t *json_visible(const char *s, size_t n)
{
	if (utf8_text_ok(s, n))
		return json_stringn(s, n);
	struct buf b = {0};
	rv_visible(&b, s, n, 0);
	json_t *v = json_string(b.p ? b.p : "");
	buf_free(&b);
	return v;
}

/* The record's acceptance checks, when the manifest had any: how many,
 * the dones that ran them, whether the last passed (1, 0; -1 unsettled,
 * as in a dry run). */
static int acceptance_of(const struct row *r, long long *checks, long long *attempts, int *passed)
{
	const json_t *a = field(r, "acceptance");
	if (!json_is_object(a) || !ndjson_integer(json_object_get(a, "commands"), checks) || *checks <= 0)
		return 0;
	if (!ndjson_integer(json_object_get(a, "attempts"), attempts) || *attempts < 0)
		*attempts = 0;
	const json_t *p = json_object_get(a, "passed");
	*passed = json_is_true(p) ? 1 : json_is_false(p) ? 0 : -1;
	return 1;
}

static void print_json(const struct row *r)
{
	json_t *o = json_object();
	json_object_set_new(o, "workspace", json_visible(r->arg, strlen(r->arg)));
	const json_t *v;
	if ((v = field(r, "verdict")) && json_is_string(v))
		json_object_set(o, "verdict", (json_t *)v);
	const json_t *m = field(r, "manifest");
	if (json_is_object(m) && json_is_string(json_object_get(m, "name")))
		json_object_set(o, "name", json_object_get(m, "name"));
	long long n;
	if ((n = count_of(r, "turns")) >= 0)
		json_object_set_new(o, "turns", json_integer(n));
	if ((n = count_of(r, "modelCalls")) >= 0)
		json_object_set_new(o, "modelCalls", json_integer(n));
	long long in, out, cached;
	if (usage_of(r, &in, &out, &cached)) {
		json_t *u = json_pack("{sIsI}", "inputTokens", (json_int_t)in, "outputTokens", (json_int_t)out);
		if (cached >= 0)
			json_object_set_new(u, "cachedInputTokens", json_integer(cached));
		json_object_set_new(o, "usage", u);
	}
	double usd;
	/* like the tokens, only a cost there is: the mock's records say 0 */
	if (cost_of(r, &usd) && usd > 0) {
		json_t *u = json_object_get(o, "usage");
		if (!u)
			json_object_set_new(o, "usage", u = json_object());
		json_object_set_new(u, "costUsd", json_real(usd));
	}
	if ((v = field(r, "dryRun")) && json_is_boolean(v))
		json_object_set(o, "dryRun", (json_t *)v);
	long long checks, attempts;
	int passed;
	if (acceptance_of(r, &checks, &attempts, &passed))
		json_object_set_new(o, "acceptance", json_pack("{s:I, s:I, s:o}", "commands", (json_int_t)checks, "attempts",
		                                               (json_int_t)attempts, "passed",
		                                               passed < 0 ? json_null() : json_boolean(passed)));
	json_object_set_new(o, "verify", json_string(status_word[r->status]));
	if (r->status == ST_VERIFIED) {
		json_object_set_new(o, "signature", json_string(r->signature));
		if (r->entries >= 0)
			json_object_set_new(o, "entries", json_integer(r->entries));
		json_object_set_new(o, "head", json_string(r->head));
	} else {
		json_object_set_new(o, "reason", json_string(r->detail));
	}
	if (ndjson_print(stdout, o) < 0)
		die("standard output: %s", strerror(errno));
	json_decref(o);
}

enum { C_RESET, C_RED, C_GREEN, C_YELLOW };
static const char *const sgr[] = {"\033[0m", "\033[1;31m", "\033[32m", "\033[33m"};

/* Characters of s (UTF-8 as rv_visible leaves it): its width on a terminal
 * for the scripts a name is likely in. */
static size_t width_of(const char *s)
{
	size_t w = 0;
	for (; *s; s++)
		w += ((unsigned char)*s & 0xc0) != 0x80;
	return w;
}

/* The cells of a text line: name, verdict, turns, calls, tokens,
 * acceptance, verify. */
#define CELLS 7
struct cells {
	char *text[CELLS];
	int colour[CELLS];
};

static int verdict_colour(const char *v)
{
	if (strcmp(v, "completed") == 0)
		return C_GREEN;
	return strncmp(v, "halted-", 7) == 0 ? C_YELLOW : C_RED;
}

static void make_cells(const struct row *r, struct cells *c)
{
	struct buf b = {0};
	for (int i = 0; i < CELLS; i++)
		c->colour[i] = C_RESET;
	c->text[0] = xstrdup(r->name);
	if (width_of(c->text[0]) > NAME_CHARS) {
		free(c->text[0]);
		c->text[0] = visible_dup(r->arg, strlen(r->arg), NAME_CHARS);
	}
	size_t n;
	const char *verdict = rv_str(field(r, "verdict"), &n);
	c->text[1] = verdict ? visible_dup(verdict, n, VERDICT_CHARS) : xstrdup("-");
	/* a verdict in colour is a claim: only a verified record makes one */
	if (verdict && r->status == ST_VERIFIED)
		c->colour[1] = verdict_colour(c->text[1]);
	long long turns = count_of(r, "turns"), calls = count_of(r, "modelCalls");
	buf_reset(&b);
	if (turns >= 0)
		buf_printf(&b, "turns %lld", turns);
	c->text[2] = xstrdup(b.p ? b.p : "");
	buf_reset(&b);
	if (calls >= 0)
		buf_printf(&b, "calls %lld", calls);
	c->text[3] = xstrdup(b.p ? b.p : "");
	long long in, out, cached;
	buf_reset(&b);
	if (usage_of(r, &in, &out, &cached)) {
		buf_printf(&b, "tokens in %lld out %lld", in, out);
		if (cached > 0)
			buf_printf(&b, " cached %lld", cached);
	}
	double usd;
	if (cost_of(r, &usd) && usd > 0)
		buf_printf(&b, "%scost $%.4f", b.len ? " " : "", usd);
	c->text[4] = xstrdup(b.p ? b.p : "");
	long long checks, attempts;
	int passed;
	buf_reset(&b);
	if (acceptance_of(r, &checks, &attempts, &passed)) {
		buf_printf(&b, "acceptance %s (%lld check%s, %lld attempt%s)",
		           passed > 0 ? "passed" : passed == 0 ? "FAILED" : "unsettled", checks, checks == 1 ? "" : "s",
		           attempts, attempts == 1 ? "" : "s");
		/* like the verdict, a claim only a verified record makes */
		if (r->status == ST_VERIFIED && passed >= 0)
			c->colour[5] = passed ? C_GREEN : C_RED;
	}
	c->text[5] = xstrdup(b.p ? b.p : "");
	buf_reset(&b);
	switch (r->status) {
	case ST_VERIFIED:
		buf_printf(&b, "verified %s", r->detail);
		c->colour[6] = C_GREEN;
		break;
	case ST_UNSEALED:
		buf_printf(&b, "UNSEALED: %s", r->detail);
		c->colour[6] = C_YELLOW;
		break;
	case ST_INVALID:
		buf_printf(&b, "INVALID: %s", r->detail);
		c->colour[6] = C_RED;
		break;
	case ST_NO_RECORD:
		buf_printf(&b, "NO RECORD: %s", r->detail);
		c->colour[6] = C_RED;
		break;
	}
	c->text[6] = b.p;
}

static void print_text(const struct opts *o, struct row *rows, size_t n)
{
	struct cells *cells = xcalloc(n ? n : 1, sizeof *cells);
	size_t width[CELLS] = {0};
	for (size_t i = 0; i < n; i++) {
		make_cells(&rows[i], &cells[i]);
		for (int k = 0; k < CELLS; k++) {
			size_t w = width_of(cells[i].text[k]);
			if (w > width[k])
				width[k] = w;
		}
	}
	size_t count[4] = {0}, completed = 0;
	for (size_t i = 0; i < n; i++) {
		struct buf line = {0};
		int pending = 0; /* spaces owed before the next non-empty cell */
		for (int k = 0; k < CELLS; k++) {
			const char *t = cells[i].text[k];
			if (*t) {
				for (int s = 0; s < pending; s++)
					buf_addc(&line, ' ');
				pending = 0;
				if (o->colour && cells[i].colour[k] != C_RESET)
					buf_printf(&line, "%s%s%s", sgr[cells[i].colour[k]], t, sgr[C_RESET]);
				else
					buf_adds(&line, t);
			}
			/* an empty column keeps its place, so the next ones line up */
			if (width[k])
				pending += (int)(width[k] - width_of(t)) + 2;
			free(cells[i].text[k]);
		}
		buf_addc(&line, '\n');
		fwrite(line.p, 1, line.len, stdout);
		buf_free(&line);
		count[rows[i].status]++;
		const json_t *v = field(&rows[i], "verdict");
		completed += rows[i].status == ST_VERIFIED && json_is_string(v) &&
		             strcmp(json_string_value(v), "completed") == 0;
	}
	printf("total %zu: verified %zu, invalid %zu, unsealed %zu, no record %zu; completed %zu\n", n,
	       count[ST_VERIFIED], count[ST_INVALID], count[ST_UNSEALED], count[ST_NO_RECORD], completed);
	free(cells);
}

/* A closed standard descriptor would be the next pipe's number, and the
 * child's dup2 onto 0..2 would then clobber it: hold them on /dev/null. */
static void hold_std_fds(void)
{
	int fd;
	while ((fd = open("/dev/null", O_RDWR | O_CLOEXEC)) >= 0 && fd <= STDERR_FILENO)
		fcntl(fd, F_SETFD, 0);
	if (fd > STDERR_FILENO)
		close(fd);
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	hold_std_fds();
	struct opts opts = {.jobs = cpus_allowed()};
	unsigned long jobs;
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},
		{"jobs", required_argument, NULL, 'J'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': opts.json = 1; break;
		case 'J':
			if (cli_parse_ulong(optarg, 1, JOBS_LIMIT, &jobs) < 0)
				cli_usage_error(usage_text, "--jobs: a whole number from 1 to %d", JOBS_LIMIT);
			opts.jobs = jobs;
			break;
		case 'h': cli_help(usage_text);
		case 'V': cli_version();
		default: cli_bad_option(usage_text, c, argv);
		}
	}
	if (optind >= argc)
		cli_usage_error(usage_text, "at least one WORKSPACE is required");
	const char *no_color = getenv("NO_COLOR");
	opts.colour = !opts.json && isatty(STDOUT_FILENO) && !(no_color && *no_color);
	find_verify(&opts);
	/* Read-only on the workspaces; what it executes is the sfma-verify
	 * beside it, one per workspace, which inherits this and narrows it
	 * again (sfma(1), CONFINEMENT). */
	const struct confine_places places = {.args = (const char *const *)argv + optind};
	struct confine_report confined;
	int channel = -1;
	confine_stage(&channel, "sfma-summary", &places, &confined);

	size_t n = (size_t)(argc - optind);
	struct row *rows = xcalloc(n, sizeof *rows);
	for (size_t i = 0; i < n; i++)
		rows[i].arg = argv[optind + (int)i];
	judge_all(&opts, rows, n);
	int failed = 0;
	for (size_t i = 0; i < n; i++)
		failed |= rows[i].status != ST_VERIFIED;
	if (!opts.json)
		print_text(&opts, rows, n);
	for (size_t i = 0; i < n; i++) {
		json_decref(rows[i].record);
		free(rows[i].name);
		free(rows[i].detail);
	}
	free(rows);
	if (fflush(stdout) != 0 || ferror(stdout))
		die("standard output: %s", strerror(errno));
	return failed;
}
