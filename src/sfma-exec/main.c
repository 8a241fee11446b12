/* sfma-exec - carry out the model's tool calls behind the hard tier.
 *
 * Reads one request per line on stdin ({"id","call","seq"?,"deadlineMs"?}),
 * answers each with one line on stdout ({"id","tool","pass","reason",
 * "result",...}). The only stage that writes workspace files for the model
 * and the only one that starts commands, each inside a fresh sandbox.
 * See sfma-exec(1) and PIPELINE.md. */
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atomic.h"
#include "canon.h"
#include "cli.h"
#include "confine.h"
#include "clock.h"
#include "errors.h"
#include "ndjson.h"
#include "sha.h"

#define REQUEST_MAX NDJSON_DEFAULT_MAX

static const char usage[] =
	"usage: sfma-exec [--apply] [--timeout SECONDS] MANIFEST\n"
	"       sfma-exec --version | --help\n"
	"  --apply            apply writes and run commands (default: dry run)\n"
	"  --timeout SECONDS  caps the wall-clock limit of one command, 1..86400\n"
	"                     (the manifest's commandTimeoutSeconds, default 60)\n";

/* ---- replies ---- */

static json_t *reply_new(json_t *id, const char *tool)
{
	json_t *r = json_object();
	json_object_set(r, "id", id ? id : json_null());
	json_object_set_new(r, "tool", tool ? json_string(tool) : json_null());
	return r;
}

static json_t *refuse(json_t *r, const char *reason)
{
	struct buf b = {0};
	buf_printf(&b, "EPSILON_HARD_FAIL: %s", reason);
	json_object_set_new(r, "pass", json_false());
	json_object_set_new(r, "reason", json_string(reason));
	json_object_set_new(r, "result", json_string(b.p));
	buf_free(&b);
	return r;
}

static json_t *accept_reply(json_t *r, const char *reason, json_t *result)
{
	json_object_set_new(r, "pass", json_true());
	json_object_set_new(r, "reason", json_string(reason));
	json_object_set_new(r, "result", result);
	return r;
}

static void emit(json_t *r)
{
	if (ndjson_print(stdout, r) < 0) {
		/* The reader is gone (the planner ended, or ^C ended the whole
		 * pipeline): nobody is left to answer, and nothing to say. The
		 * atexit handler still cleans up. */
		if (errno == EPIPE)
			exit(0);
		die("write reply: %s", strerror(errno));
	}
	json_decref(r);
}

static void emit_error(json_t *id, const char *text)
{
	json_t *r = json_object();
	json_object_set(r, "id", id ? id : json_null());
	json_object_set_new(r, "pass", json_false());
	json_object_set_new(r, "error", json_string(text));
	emit(r);
}

/* ---- tools ---- */

/* The host facts the gate of path rests on, in the reply as "paths",
 * looked at before the gate decides (and before a write makes missing
 * directories). A path the lexical rules refuse has none: no host fact
 * enters that decision. */
static json_t *record_paths(const struct exec_ctx *c, json_t *call)
{
	json_t *pv = json_object_get(call, "path");
	const char *path = json_string_value(pv);
	if (!path || strlen(path) != json_string_length(pv))
		return NULL; /* no path, or a NUL byte: refused by the lexical rules */
	char *norm = path_normalize(path);
	/* .sfma is refused on its name: nothing under it is looked at. */
	json_t *facts = norm && !hardtier_reserved(norm) ? path_facts(c->ws_fd, norm) : NULL;
	free(norm);
	return facts;
}

/* A read that passed the gate: the file's first OUTPUT_CLIP bytes, or why
 * it could not be opened (a pass: the model asked for something absent). */
static json_t *do_read(struct gate_pass *g, json_t *r)
{
	if (g->fd < 0) {
		accept_reply(r, g->error, json_string(g->error));
		json_object_set_new(r, "error", json_string(g->error));
		return r;
	}
	struct stat st;
	char data[OUTPUT_CLIP];
	size_t got = 0;
	while (got < sizeof data) {
		ssize_t k = read(g->fd, data + got, sizeof data - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	uint64_t size = fstat(g->fd, &st) == 0 ? (uint64_t)st.st_size : got;
	struct buf text = {0};
	buf_add(&text, data, got);
	if (size > got)
		buf_printf(&text, "\n[clipped: %llu bytes not shown]",
		           (unsigned long long)(size - got));
	struct buf why = {0};
	buf_printf(&why, "read %llu bytes", (unsigned long long)size);
	accept_reply(r, why.p, utf8_json(text.p, text.len));
	buf_free(&text);
	buf_free(&why);
	return r;
}

static json_t *do_write(const struct exec_ctx *c, json_t *call, struct gate_pass *g, json_t *r)
{
	json_t *cv = json_object_get(call, "content");
	const char *path = json_string_value(json_object_get(call, "path"));
	const char *content = json_string_value(cv);
	size_t len = json_string_length(cv);
	char hex[SHA256_HEX_LEN + 1];
	sha256_hex(content, len, hex);
	char *norm = path_normalize(path);
	struct buf text = {0};
	if (c->apply) {
		struct sfma_err e;
		int rc = atomic_write_at(g->dirfd, g->name, content, len, 0644, &e);
		if (rc < 0) {
			buf_printf(&text, "write %s: %s", norm, e.text);
			json_object_set_new(r, "error", json_string(text.p));
			accept_reply(r, text.p, json_string(text.p));
			free(norm);
			buf_free(&text);
			return r;
		}
	}
	char said[PATH_MAX + 100];
	hardtier_write_text(said, sizeof said, len, norm, !c->apply);
	accept_reply(r, said, json_string(said));
	json_object_set_new(r, "mutation",
	                    json_pack("{s:s,s:I,s:s,s:b}", "path", norm, "bytes", (json_int_t)len,
	                              "sha256", hex, "applied", c->apply));
	free(norm);
	buf_free(&text);
	return r;
}

/* What ended a command that ran, as the model and the verdict say it:
 * "exit=<code>", and for a timeout what stopped it, "exit=124: timed out
 * after 2 s (commandTimeoutSeconds)" - the manifest's key, --timeout, or
 * the run's own deadline (maxSeconds) when that came first. */
static void run_status(char *out, size_t cap, const struct run_outcome *o, long long timeout_ms,
                       const char *by)
{
	if (!o->timed_out) {
		snprintf(out, cap, "exit=%d", o->exit_code);
		return;
	}
	if (timeout_ms % 1000 == 0)
		snprintf(out, cap, "exit=%d: timed out after %lld s (%s)", o->exit_code, timeout_ms / 1000, by);
	else
		snprintf(out, cap, "exit=%d: timed out after %.1f s (%s)", o->exit_code, (double)timeout_ms / 1000, by);
}

/* "<status>\nstdout:<...>\nstderr:<...>" within limits.outputBytes
 * bytes: each stream gets half, or more when the other needs less. */
static json_t *run_text(const struct run_outcome *o, const char *status, size_t clip)
{
	/* The status line, two clipped markers and the stream labels. */
	const size_t overhead = strlen(status) + 2 * 48 + 16;
	const size_t avail = clip > overhead ? clip - overhead : 0;
	size_t so = o->out.len, se = o->err.len;
	if (so + se > avail) {
		size_t half = avail / 2;
		if (so > half && se > half)
			so = se = half;
		else if (so > half)
			so = avail - se;
		else
			se = avail - so;
	}
	struct buf t = {0};
	buf_printf(&t, "%s\nstdout:", status);
	buf_add(&t, o->out.p ? o->out.p : "", so);
	if (o->out_total > so)
		buf_printf(&t, "\n[clipped: %llu bytes not shown]",
		           (unsigned long long)(o->out_total - so));
	buf_adds(&t, "\nstderr:");
	buf_add(&t, o->err.p ? o->err.p : "", se);
	if (o->err_total > se)
		buf_printf(&t, "\n[clipped: %llu bytes not shown]",
		           (unsigned long long)(o->err_total - se));
	json_t *j = utf8_json(t.p, t.len);
	buf_free(&t);
	return j;
}

static json_t *do_run(const struct exec_ctx *c, json_t *req, struct gate_pass *g, json_t *r)
{
	char **argv = g->argv;
	g->argv = NULL;
	if (!c->apply) {
		argv_free(argv);
		accept_reply(r, HARDTIER_DRY_RUN_REASON, json_string(HARDTIER_DRY_RUN_RESULT));
		json_object_set_new(r, "run", json_pack("{s:b}", "executed", 0));
		return r;
	}
	long long timeout_ms = (long long)c->timeout_s * 1000, deadline;
	const char *timeout_by = c->timeout_by;
	if (ndjson_integer(json_object_get(req, "deadlineMs"), &deadline)) {
		long long left = deadline - wall_ms();
		if (left <= 0) {
			argv_free(argv);
			return refuse(r, "run: the run's deadline has passed");
		}
		if (left < timeout_ms) {
			timeout_ms = left;
			timeout_by = "the run's maxSeconds";
		}
	}
	struct run_outcome o;
	/* The whole call as the run waits for it: sandbox, staging, the
	 * command, copy-back (sfma log and sfma report draw it to scale). */
	double started = mono_ms_frac();
	sandbox_run(c, argv, timeout_ms, &o);
	double took = mono_ms_frac() - started;
	argv_free(argv);
	json_t *run = json_object();
	json_object_set_new(run, "exit", o.executed ? json_integer(o.exit_code) : json_null());
	json_object_set_new(run, "durationMs", json_real((double)(int64_t)(took * 1000) / 1000));
	json_object_set_new(run, "timedOut", json_boolean(o.timed_out));
	json_object_set(run, "limits", o.limits);
	if (o.sandbox)
		json_object_set(run, "sandbox", o.sandbox);
	json_object_set(run, "copiedBack", o.copied);
	json_object_set(run, "refused", o.refused);
	if (o.unavailable) {
		refuse(r, o.unavailable);
	} else {
		char status[128];
		run_status(status, sizeof status, &o, timeout_ms, timeout_by);
		accept_reply(r, status, run_text(&o, status, (size_t)c->limits.output_bytes));
	}
	json_object_set_new(r, "run", run);
	run_outcome_free(&o);
	return r;
}

/* notify and ask: one file in .sfma/outbox, written atomically; never waits. */
static json_t *do_message(const struct exec_ctx *c, json_t *call, json_t *req, json_t *r,
                          const char *kind, const char *key)
{
	char name[96], at[ISO8601_LEN];
	long long seq;
	int64_t ms = wall_ms();
	if (ndjson_integer(json_object_get(req, "seq"), &seq) && seq >= 0)
		snprintf(name, sizeof name, "%016lld-%s.json", seq, kind); /* zero-padded: ls order is write order (seq < 2^53, 16 digits) */
	else
		snprintf(name, sizeof name, "t%lld-%s.json", (long long)ms, kind);
	iso8601_utc(ms, at);

	json_t *msg = json_object();
	json_object_set_new(msg, "kind", json_string(kind));
	json_object_set(msg, "text", json_object_get(call, key));
	json_object_set_new(msg, "at", json_string(at));
	struct buf doc = {0};
	struct sfma_err e;
	int ok = canon_dump(msg, &doc, &e) == 0;
	json_decref(msg);
	buf_addc(&doc, '\n');
	/* .sfma and .sfma/outbox are opened without following links. */
	int dir = ok ? open_dir_walk(c->ws_fd, ".sfma/outbox", 1, 0700) : -1;
	struct buf err = {0};
	if (dir < 0)
		buf_printf(&err, "%s: .sfma/outbox: %s", kind, strerror(errno));
	else if (atomic_write_at(dir, name, doc.p, doc.len, 0600, &e) < 0)
		buf_printf(&err, "%s: .sfma/outbox/%s", kind, e.text);
	if (dir >= 0)
		close(dir);
	buf_free(&doc);
	if (err.p) {
		json_object_set_new(r, "error", json_string(err.p));
		accept_reply(r, err.p, json_string(err.p));
		buf_free(&err);
		return r;
	}
	accept_reply(r, strcmp(kind, "ask") == 0 ? HARDTIER_ASKED : HARDTIER_NOTIFIED,
	       json_string(strcmp(kind, "ask") == 0
	                   ? "question delivered to the operator's outbox; an answer, if any, "
	                     "arrives as an operator message"
	                   : "message delivered to the operator's outbox"));
	json_t *m = json_pack("{s:s,s:s,s:s}", "dir", "out", "kind", kind, "file", name);
	json_object_set(m, "text", json_object_get(call, key));
	json_object_set_new(r, "message", m);
	return r;
}

static void handle(struct exec_ctx *c, const char *line, size_t len)
{
	struct sfma_err e;
	json_t *req = ndjson_parse(line, len, &e);
	if (!req) {
		emit_error(NULL, e.text);
		return;
	}
	json_t *id = json_is_object(req) ? json_object_get(req, "id") : NULL;
	json_t *call = json_is_object(req) ? json_object_get(req, "call") : NULL;
	if (!json_is_object(req)) {
		emit_error(NULL, "request must be a JSON object");
	} else if (!call) {
		emit_error(id, "request has no call");
	} else if (!json_is_object(call)) {
		emit_error(id, "call must be a JSON object");
	} else {
		json_t *tv = json_object_get(call, "tool");
		const char *tool = json_is_string(tv) && strlen(json_string_value(tv)) ==
		                   json_string_length(tv) ? json_string_value(tv) : NULL;
		json_t *r = reply_new(id, tool);
		/* The host facts the gate of a read or write rests on, looked at
		 * before it decides (and before a write makes directories). */
		json_t *facts = tool && (strcmp(tool, "read") == 0 || strcmp(tool, "write") == 0)
		                    ? record_paths(c, call) : NULL;
		struct gate_ctx gc = gate_of(c);
		struct gate_pass g;
		char *refusal = hardtier_gate(&gc, call, c->apply, &g);
		if (refusal)
			refuse(r, refusal);
		else if (strcmp(tool, "read") == 0)
			do_read(&g, r);
		else if (strcmp(tool, "write") == 0)
			do_write(c, call, &g, r);
		else if (strcmp(tool, "run") == 0) {
			/* {"acceptance":INDEX}: the manifest's acceptance check, run
			 * over the workspace as it stands (sfma-exec(1)). */
			c->acceptance = json_is_number(json_object_get(req, "acceptance"));
			do_run(c, req, &g, r);
			c->acceptance = 0;
		}
		else if (strcmp(tool, "notify") == 0)
			do_message(c, call, req, r, "notify", "text");
		else
			do_message(c, call, req, r, "ask", "question");
		free(refusal);
		gate_pass_free(&g);
		if (facts)
			json_object_set_new(r, "paths", facts);
		emit(r);
	}
	json_decref(req);
}

/* 1 if the reader holds input not yet returned, or more can be read at
 * once (the end of input included): no time to prepare a sandbox in. */
static int input_pending(const struct line_reader *lr)
{
	struct pollfd pf = {.fd = lr->fd, .events = POLLIN};
	return lr->eof || lr->end > lr->start || poll(&pf, 1, 0) > 0;
}

/* ---- the tools process ---- */

/* The tool calls that touch the workspace through the hard tier (read,
 * write, notify, ask) run in a process of their own, forked once the
 * workspace exists and confined to it by Landlock: this process makes the
 * command sandboxes, whose init mounts and pivots, which a thread with
 * Landlock file rules cannot do (landlock(7), "Filesystem topology
 * modification"), so its own ruleset handles no file access (sfma(1),
 * CONFINEMENT). Requests go to it whole, one line each way. */
static struct {
	pid_t pid;
	int fd;
	struct line_reader lr;
} tools = {.pid = -1, .fd = -1};

static _Noreturn void tools_main(struct exec_ctx *c, int channel)
{
	sandbox_disown();
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	/* Not left behind by a stage killed with SIGKILL. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	const struct confine_places places = {.workspace = c->m->workspace_path};
	struct confine_report r;
	confine_apply(confine_policy("sfma-exec/tools"), &places, &r);
	if (channel >= 0) {
		confine_channel_send(channel, &r);
		close(channel);
	}
	c->ws_fd = open(c->m->workspace_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(c->ws_real);
	if (c->ws_fd < 0 || !(c->ws_real = realpath(c->m->workspace_path, NULL)))
		die("workspace %s: %s", c->m->workspace_path, strerror(errno));
	struct line_reader lr;
	lr_init(&lr, 0, REQUEST_MAX);
	lr.cap = 64u << 10;
	lr.buf = xmalloc(lr.cap);
	for (;;) {
		char *line;
		size_t len;
		struct sfma_err e;
		int got = lr_next(&lr, &line, &len, &e);
		if (got <= 0)
			break;
		handle(c, line, len);
	}
	lr_free(&lr);
	close(c->ws_fd);
	free(c->ws_real);
	c->ws_real = NULL;
	/* The manifest is the stage's (main's frame, reachable to the end). */
	exit(0);
}

/* Fork the tools process; its stdin and stdout are one end of a socket
 * pair, everything else it inherited but stderr and the report channel
 * is closed (a prepared sandbox's go pipe above all: its init waits for
 * the end of it). */
static void tools_start(struct exec_ctx *c, int *channel)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair: %s", strerror(errno));
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		if (dup2(sv[1], 0) < 0 || dup2(sv[1], 1) < 0)
			_exit(1);
		int keep = -1;
		if (*channel >= 0 && (keep = dup2(*channel, 3)) < 0)
			_exit(1);
		close_range(keep >= 0 ? 4 : 3, ~0U, 0);
		tools_main(c, keep);
	}
	close(sv[1]);
	if (*channel >= 0)
		close(*channel);
	*channel = -1;
	tools.pid = pid;
	tools.fd = sv[0];
	lr_init(&tools.lr, sv[0], REQUEST_MAX);
}

/* 1 if the request is a run (this process's), else 0 (the tools'). */
static int is_run(const char *line, size_t len)
{
	struct sfma_err e;
	json_t *req = ndjson_parse(line, len, &e);
	json_t *tool = json_object_get(json_object_get(req, "call"), "tool");
	int run = json_is_string(tool) && strcmp(json_string_value(tool), "run") == 0 &&
	          strlen(json_string_value(tool)) == json_string_length(tool);
	json_decref(req);
	return run;
}

static void route(struct exec_ctx *c, const char *line, size_t len)
{
	if (is_run(line, len)) {
		handle(c, line, len);
		return;
	}
	char *reply;
	size_t reply_len;
	struct sfma_err e;
	if (write_all(tools.fd, line, len) < 0 || write_all(tools.fd, "\n", 1) < 0 ||
	    lr_next(&tools.lr, &reply, &reply_len, &e) != 1)
		die("the tools process ended");
	if (fwrite(reply, 1, reply_len, stdout) != reply_len || putchar('\n') == EOF || fflush(stdout) == EOF) {
		if (errno == EPIPE)
			exit(0);
		die("write reply: %s", strerror(errno));
	}
}

static void tools_stop(void)
{
	if (tools.pid < 0)
		return;
	close(tools.fd);
	lr_free(&tools.lr);
	while (waitpid(tools.pid, NULL, 0) < 0 && errno == EINTR)
		;
	tools.pid = -1;
}

static void on_signal(int sig)
{
	sandbox_shutdown_signal();
	signal(sig, SIG_DFL);
	raise(sig);
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	struct exec_ctx c = {.timeout_s = 0};
	static const struct option longopts[] = {
		{"apply", no_argument, NULL, 'a'},
		{"timeout", required_argument, NULL, 't'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	opterr = 0;
	int opt;
	while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		unsigned long t;
		switch (opt) {
		case 'a':
			c.apply = 1;
			break;
		case 't':
			if (cli_parse_ulong(optarg, 1, 86400, &t) < 0)
				cli_usage_error(usage, "--timeout: expected whole seconds 1..86400");
			c.timeout_s = (long)t;
			break;
		case 'V':
			cli_version();
		case 'h':
			cli_help(usage);
		default:
			cli_bad_option(usage, opt, argv);
		}
	}
	if (optind == argc)
		cli_usage_error(usage, "missing MANIFEST");
	if (argc - optind > 1)
		cli_usage_error(usage, "unexpected argument: %s", argv[optind + 1]);
	const char *manifest_path = argv[optind];

	struct reasons why = {0};
	struct manifest *m = manifest_load(manifest_path, &why);
	if (!m)
		cli_task_invalid(&why);
	c.m = m;
	c.limits = m->limits;
	/* The manifest sets a command's timeout; --timeout can only shorten it. */
	c.timeout_by = "commandTimeoutSeconds";
	if (c.timeout_s > 0 && c.timeout_s < m->command_timeout_seconds) {
		c.timeout_by = "--timeout";
	} else {
		c.timeout_s = m->command_timeout_seconds;
	}
	/* The workspace is opened at the first request, not here: in a run the
	 * planner creates it after every stage has started. */
	c.ws_fd = -1;

	/* This stage never gains privileges by exec (it execs nothing itself;
	 * the sandboxed command inherits the flag). */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		die("no-new-privileges: %s", strerror(errno));
	/* As root, the contained program must not be host uid 0: the kernel
	 * exempts uid 0 from RLIMIT_NPROC and root owns most of the host. Nor
	 * may it share a uid with anything else, which could signal it
	 * (kill(2)): each sandbox leases host ids of its own from the range
	 * (uids.c), when our user namespace maps all of it (always so in the
	 * initial one; not so under an `unshare --map-root-user`), and root's
	 * supplementary groups, which would otherwise follow it into the
	 * sandbox, are shed. Otherwise it runs as our own ids, the only ones
	 * an unprivileged user can map (user_namespaces(7)). */
	const char *range = getenv("SFMA_EXEC_UIDS");
	c.ids_first = SANDBOX_IDS_FIRST;
	c.ids_last = SANDBOX_IDS_LAST;
	if (range && id_range_parse(range, &c.ids_first, &c.ids_last) < 0)
		cli_usage_error(usage, "SFMA_EXEC_UIDS: expected FIRST-LAST, 1 <= FIRST <= LAST <= 4294967293");
	c.own_uid = (unsigned)geteuid();
	c.own_gid = (unsigned)getegid();
	if (geteuid() == 0 && id_range_mapped(c.ids_first, c.ids_last)) {
		c.lease_ids = 1;
		if (setgroups(0, NULL) < 0 && errno != EPERM)
			die("setgroups: %s", strerror(errno));
	} else if (geteuid() == 0 && range) {
		cli_usage_error(usage, "SFMA_EXEC_UIDS: %s is not mapped in this user namespace", range);
	}
	/* A reader that went away is noticed as a write error, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	/* Also after die(): no cgroup and no exiting sandbox is left behind
	 * (staging copies need nothing: see sandbox.c). */
	atexit(sandbox_shutdown);
	/* Stopped by a signal, the same. */
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	struct line_reader lr;
	lr_init(&lr, 0, REQUEST_MAX);
	/* Start with a buffer: lr_next computes buf + 0 on a fresh reader,
	 * undefined behaviour on a NULL buffer (UBSan stops there). The reader
	 * grows it from any non-zero capacity. */
	lr.cap = 64u << 10;
	lr.buf = xmalloc(lr.cap);
	/* This process is confined now (sfma(1), CONFINEMENT): no file rules
	 * (see tools_start), no TCP, no internet socket; its report goes at
	 * once, the tools process's once the workspace exists - at the
	 * planner's go, or at the first request when there is no channel. */
	int channel = confine_channel_take();
	struct confine_report confined;
	confine_apply(confine_policy("sfma-exec"), NULL, &confined);
	if (channel >= 0)
		confine_channel_send(channel, &confined);
	/* The first sandbox is prepared while the planner starts up. */
	sandbox_prepare(&c, !input_pending(&lr));
	/* A planner gone before its go (it could not make the workspace, say)
	 * runs nothing: end of input follows. */
	if (channel >= 0 && confine_channel_await(channel) == 0)
		tools_start(&c, &channel);
	if (channel >= 0)
		close(channel);
	channel = -1;
	for (;;) {
		char *line;
		size_t len;
		struct sfma_err e;
		int got = lr_next(&lr, &line, &len, &e);
		if (got == 0)
			break;
		if (got < 0) {
			emit_error(NULL, e.text);
			if (!lr_skip_line(&lr))
				break;
			continue;
		}
		if (c.ws_fd < 0) {
			c.ws_fd = open(m->workspace_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (c.ws_fd < 0 || !(c.ws_real = realpath(m->workspace_path, NULL)))
				die("workspace %s: %s", m->workspace_path, strerror(errno));
		}
		if (tools.pid < 0)
			tools_start(&c, &channel);
		route(&c, line, len);
		/* The reply is out: the next sandbox is made while the model
		 * thinks, unless the next request (or the end) is already here. */
		sandbox_prepare(&c, !input_pending(&lr));
	}
	lr_free(&lr);
	tools_stop();
	if (c.ws_fd >= 0)
		close(c.ws_fd);
	free(c.ws_real);
	manifest_free(m);
	return 0;
}
