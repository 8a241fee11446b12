/* sfma-plan - the run's state machine.
 *
 *   sfma-plan --check MANIFEST [--apply]
 *   sfma-plan --tools
 *   sfma-plan run MANIFEST [--apply] [--task TEXT] [--progress] [--handshake-fd FD]
 *             --to-model P --from-model P --to-exec P --from-exec P
 *             --to-chain P --from-chain P --to-seal P --from-seal P
 *             --to-mem P --from-mem P
 *             [--confine-model FD --confine-exec FD --confine-chain FD --confine-seal FD
 *              --confine-mem FD] [--confine-tap FD]
 *
 * `--check` validates a manifest (sfma-manifest(5)) and prints what the
 * orchestrator needs to wire a run. `run` drives one bounded run through the
 * other stages, which it reaches only through the given pipes: it asks the
 * model, hands tool calls to the hard tier, records every event in the
 * trace, keeps the budgets, and ends every path in a sealed record. With
 * --handshake-fd, `run` first tells the orchestrator what --check would
 * print and waits for its go, so one process both validates and runs.
 * Exit: 0 completed, 1 any other verdict or a runtime failure, 2 an invalid
 * manifest or usage. */
#include "plan.h"
#include "buf.h"
#include "canon.h"
#include "cli.h"
#include "confine.h"
#include "tools.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: sfma-plan --check MANIFEST [--apply]\n"
	"       sfma-plan --tools\n"
	"       sfma-plan run MANIFEST [--apply] [--task TEXT] [-v | --progress] [--handshake-fd FD]\n"
	"                 --to-model P --from-model P --to-exec P --from-exec P\n"
	"                 --to-chain P --from-chain P --to-seal P --from-seal P\n"
	"                 --to-mem P --from-mem P\n"
	"                 [--confine-model FD --confine-exec FD --confine-chain FD --confine-seal FD\n"
	"                  --confine-mem FD] [--confine-tap FD]\n"
	"       sfma-plan --version | --help\n";

struct options {
	int check, apply, progress, tools;
	const char *task;
	const char *manifest;
	int handshake_fd;                   /* -1: none */
	int confine_fd[CONFINE_REPORTERS];  /* each stage's report channel, the tap's last; -1: none */
	const char *paths[2 * STAGE_COUNT]; /* to-model, from-model, to-exec, ... */
};

/* A descriptor number given on the command line: above the standard three,
 * which are never the handshake. */
static int parse_fd(const char *option, const char *arg)
{
	unsigned long n;
	if (cli_parse_ulong(arg, 3, INT_MAX, &n) < 0)
		cli_usage_error(usage_text, "--%s %s: expected a descriptor number above 2", option, arg);
	return (int)n;
}

static void parse_options(int argc, char **argv, struct options *o)
{
	enum { OPT_VERSION = 'V', OPT_HANDSHAKE = 'H', OPT_PATH = 0x100, OPT_CONFINE = 0x200 };
	static const struct option longopts[] = {
		{"check", no_argument, NULL, 'c'}, {"apply", no_argument, NULL, 'a'},
		{"task", required_argument, NULL, 't'}, {"progress", no_argument, NULL, 'v'},
		{"to-model", required_argument, NULL, OPT_PATH + 0}, {"from-model", required_argument, NULL, OPT_PATH + 1},
		{"to-exec", required_argument, NULL, OPT_PATH + 2}, {"from-exec", required_argument, NULL, OPT_PATH + 3},
		{"to-chain", required_argument, NULL, OPT_PATH + 4}, {"from-chain", required_argument, NULL, OPT_PATH + 5},
		{"to-seal", required_argument, NULL, OPT_PATH + 6}, {"from-seal", required_argument, NULL, OPT_PATH + 7},
		{"to-mem", required_argument, NULL, OPT_PATH + 8}, {"from-mem", required_argument, NULL, OPT_PATH + 9},
		{"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, OPT_VERSION},
		{"tools", no_argument, NULL, 'T'}, {"handshake-fd", required_argument, NULL, OPT_HANDSHAKE},
		/* in enum stage_id order */
		{"confine-model", required_argument, NULL, OPT_CONFINE + 0},
		{"confine-exec", required_argument, NULL, OPT_CONFINE + 1},
		{"confine-chain", required_argument, NULL, OPT_CONFINE + 2},
		{"confine-seal", required_argument, NULL, OPT_CONFINE + 3},
		{"confine-mem", required_argument, NULL, OPT_CONFINE + 4},
		{"confine-tap", required_argument, NULL, OPT_CONFINE + REPORTER_TAP},
		{NULL, 0, NULL, 0},
	};
	*o = (struct options){.handshake_fd = -1};
	for (int s = 0; s < CONFINE_REPORTERS; s++)
		o->confine_fd[s] = -1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":hv", longopts, NULL)) != -1) {
		if (c >= OPT_PATH && c < OPT_PATH + 2 * STAGE_COUNT)
			o->paths[c - OPT_PATH] = optarg;
		else if (c >= OPT_CONFINE && c < OPT_CONFINE + CONFINE_REPORTERS) {
			char name[32];
			int s = c - OPT_CONFINE;
			snprintf(name, sizeof name, "confine-%s", s == REPORTER_TAP ? "tap" : stages[s].name + 5);
			o->confine_fd[s] = parse_fd(name, optarg);
		}
		else if (c == 'c')
			o->check = 1;
		else if (c == 'a')
			o->apply = 1;
		else if (c == 't')
			o->task = optarg;
		else if (c == 'v')
			o->progress = 1;
		else if (c == 'h')
			cli_help(usage_text);
		else if (c == 'T')
			o->tools = 1;
		else if (c == OPT_VERSION)
			cli_version();
		else if (c == OPT_HANDSHAKE)
			o->handshake_fd = parse_fd("handshake-fd", optarg);
		else
			cli_bad_option(usage_text, c, argv);
	}
	if ((o->tools || o->check) && o->handshake_fd >= 0)
		cli_usage_error(usage_text, "--handshake-fd is an option of run only");
	if (o->tools) {
		if (o->check || optind != argc)
			cli_usage_error(usage_text, "--tools takes no other argument");
		return;
	}
	if (o->check) {
		if (optind != argc - 1)
			cli_usage_error(usage_text, "--check takes exactly one MANIFEST");
		o->manifest = argv[optind];
		return;
	}
	if (optind >= argc)
		cli_usage_error(usage_text, "no command given");
	if (strcmp(argv[optind], "run") != 0)
		cli_usage_error(usage_text, "%s: unknown command", argv[optind]);
	if (optind != argc - 2)
		cli_usage_error(usage_text, "run takes exactly one MANIFEST");
	o->manifest = argv[optind + 1];
	for (int i = 0; i < 2 * STAGE_COUNT; i++)
		if (!o->paths[i])
			cli_usage_error(usage_text, "run needs --%s", longopts[4 + i].name);
}

static struct manifest *load_or_exit(const char *path)
{
	struct reasons why = {0};
	struct manifest *m = manifest_load(path, &why);
	if (!m)
		cli_task_invalid(&why);
	return m;
}

/* The variable names the model stage needs besides the fixed provider
 * keys: OAuth client id and secret variables named by the manifest. */
static json_t *model_env_names(const struct manifest *m)
{
	json_t *names = json_array();
	for (size_t i = 0; i < m->n_endpoints; i++) {
		json_t *auth = m->endpoints[i].auth;
		static const char *const keys[] = {"clientIdEnv", "clientSecretEnv"};
		for (int k = 0; auth && k < 2; k++) {
			const char *n = json_string_value(json_object_get(auth, keys[k]));
			if (n && *n)
				json_array_append_new(names, json_string(n));
		}
	}
	return names;
}

/* What the orchestrator needs to wire a run of a valid manifest: the
 * workspace, the trace, whether the run is dry, the model's variables. */
static json_t *wiring(const struct manifest *m, int apply)
{
	char trace_path[PATH_MAX];
	path_join(trace_path, m->workspace_path, ".sfma/trace.jsonl");
	return json_pack("{s:s, s:s, s:b, s:o}", "workspace", m->workspace_path, "trace", trace_path,
	                 "dryRun", m->dry_run_default && !apply, "modelEnv", model_env_names(m));
}

static int cmd_check(const char *path, int apply)
{
	struct manifest *m = load_or_exit(path);
	json_t *out = wiring(m, apply);
	int rc = ndjson_print(stdout, out) < 0 ? 1 : 0;
	json_decref(out);
	manifest_free(m);
	return rc;
}

/* The handshake with the orchestrator (sfma-plan(1), --handshake-fd): the
 * line --check prints goes to fd, then one byte back is the go, and after
 * it, up to the end, sfma's own confinement report (PIPELINE.md,
 * Confinement), into *orchestrator (NULL when none came). Until the go
 * nothing on disk has been touched and no stage has been written to, so
 * end of input instead (the orchestrator could not start a stage, or the
 * signing key is unusable, and has said why) ends the run quietly with
 * nothing left behind. Returns 0 on the go, -1 otherwise. */
static int handshake(int fd, const struct manifest *m, int apply, json_t **orchestrator)
{
	*orchestrator = NULL;
	/* The socket is the orchestrator's and ours alone. */
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
		warning("--handshake-fd %d: %s", fd, strerror(errno));
		return -1;
	}
	json_t *reply = wiring(m, apply);
	struct buf line = {0};
	int rc = canon_dump(reply, &line, NULL);
	json_decref(reply);
	if (rc == 0) {
		buf_addc(&line, '\n');
		rc = write_all(fd, line.p, line.len);
	}
	buf_free(&line);
	if (rc < 0) {
		/* A peer that has gone is the same quiet end as a refusal. */
		if (errno != EPIPE && errno != ECONNRESET)
			warning("--handshake-fd %d: %s", fd, strerror(errno));
		close(fd);
		return -1;
	}
	char go;
	ssize_t n;
	while ((n = read(fd, &go, 1)) < 0 && errno == EINTR)
		;
	if (n != 1) {
		close(fd);
		return -1;
	}
	/* sfma's report, one line: it closes its end right after. */
	char report[1024];
	size_t len = 0;
	ssize_t r;
	while (len < sizeof report && ((r = read(fd, report + len, sizeof report - len)) > 0 || (r < 0 && errno == EINTR)))
		if (r > 0)
			len += (size_t)r;
	close(fd);
	while (len > 0 && report[len - 1] == '\n')
		len--;
	*orchestrator = confine_report_read(len ? report : NULL, len, "sfma");
	return 0;
}

/* A report channel handed over (--confine-STAGE FD): a socket, kept from
 * the processes the run starts. */
static void take_channel(int fd, const char *stage)
{
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode) || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0))
		die("--confine-%s %d: not a socket", stage + 5, fd);
}

/* The tool definitions offered to an endpoint with native tool use, as the
 * context budget counts them: one line of canonical JSON. */
static int cmd_tools(void)
{
	json_t *defs = tools_definitions();
	struct buf b = {0};
	canon_dump(defs, &b, NULL);
	json_decref(defs);
	int rc = printf("%s\n", b.p) < 0 || fflush(stdout) != 0 ? 1 : 0;
	buf_free(&b);
	return rc;
}

static void on_halt_signal(int sig)
{
	halt_signal = sig;
}

/* A halt is honoured before the next turn; a stage's closed pipe must be
 * an error we see, not a signal that kills us. */
static void take_halt_signals(void)
{
	struct sigaction sa = {.sa_handler = on_halt_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* sfma starts the planner with these blocked so that none is lost
	 * before the handler exists; from here on they mean "halt". */
	sigset_t halts;
	sigemptyset(&halts);
	sigaddset(&halts, SIGTERM);
	sigaddset(&halts, SIGINT);
	sigaddset(&halts, SIGHUP);
	sigprocmask(SIG_UNBLOCK, &halts, NULL);
}

static int cmd_run(const struct options *o)
{
	/* The contract first: nothing is touched before it validates. */
	struct manifest *m = load_or_exit(o->manifest);
	/* A peer gone from the handshake or a stage's pipe is an error seen. */
	signal(SIGPIPE, SIG_IGN);
	json_t *orchestrator = NULL;
	if (o->handshake_fd >= 0 && handshake(o->handshake_fd, m, o->apply, &orchestrator) < 0) {
		manifest_free(m);
		return 1;
	}
	int channels[CONFINE_REPORTERS];
	for (int s = 0; s < CONFINE_REPORTERS; s++) {
		take_channel(o->confine_fd[s], s == REPORTER_TAP ? "sfma-tap" : stages[s].name);
		channels[s] = o->confine_fd[s];
	}
	/* The budgets' clock starts here, once every stage is up. */
	take_halt_signals();
	stages_open(o->paths);
	const struct run_options ro = {.dry_run = m->dry_run_default && !o->apply, .progress = o->progress,
	                               .task = o->task, .confine_channels = channels, .orchestrator = orchestrator};
	int status = run_manifest(m, &ro);
	json_decref(orchestrator);
	return status;
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	struct options o;
	parse_options(argc, argv, &o);
	if (o.tools)
		return cmd_tools();
	return o.check ? cmd_check(o.manifest, o.apply) : cmd_run(&o);
}
