/* sfma - the orchestrator: starts the stages of a run, wires them, supervises.
 *
 *   sfma run MANIFEST [--apply] [--task TEXT] [-v]
 *   sfma relay MANIFEST [--every SECONDS] [--max-runs N] [--apply] [--task TEXT] [-v]
 *   sfma NAME [ARGS...]          (runs sfma-NAME from beside sfma: chat, verify, ...)
 *
 * The pipeline is a star centred on the planner (PIPELINE.md): sfma-plan
 * talks to sfma-model, sfma-exec, sfma-chain, sfma-seal and sfma-mem over
 * ten pipes, and no stage talks to another. sfma decides nothing about a run. It starts
 * the planner first, which validates the manifest and says how to wire the
 * run (struct wiring), starts every other stage with an environment holding
 * only what that stage needs, then lets the planner go; it forwards SIGINT and
 * SIGTERM to the planner (which halts and still seals), reaps, and exits
 * with the planner's status: 0 completed, 1 anything else, 2 invalid
 * manifest or usage. */
#include "beside.h"
#include "buf.h"
#include "chain.h"
#include "cli.h"
#include "clock.h"
#include "confine.h"
#include "errors.h"
#include "ndjson.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK_REPLY_MAX (1u << 20)
#define GRACE_SECONDS 5 /* how long stages may take to exit on EOF */

/* The planner's peers first (each on a pair of pipes with it), then the
 * planner, then the observer, which talks to none of them as a peer. */
enum stage { MODEL, EXEC, CHAIN, SEAL, MEM, PLAN, TAP, N_STAGES };
static const char *const stage_prog[N_STAGES] = {
	"sfma-model", "sfma-exec", "sfma-chain", "sfma-seal", "sfma-mem", "sfma-plan", "sfma-tap",
};
static const char *const stage_flag[PLAN] = { "model", "exec", "chain", "seal", "mem" };
static char *stage_path[N_STAGES];

/* The stages whose pipes with the planner go through sfma-tap, which
 * records every line that crosses (sfma-tap(1)): one entry each. `acts`:
 * the stage acts on the world (commands; the memory store and
 * memory.json), so the tap makes its records durable before a line
 * reaches it. The chain and the seal are not among them:
 * their traffic is the trace and the record themselves. */
static const struct observed_stage {
	enum stage s;
	bool acts;
} observed[] = {
	{MODEL, false},
	{EXEC, true},
	{MEM, true},
};
#define OBSERVED_MAX (sizeof observed / sizeof *observed)

/* How many of them are observed: all, except in the sfma that
 * tests/bench/tap.sh builds with SFMA_BENCH_NO_TAP to measure what the
 * tap costs, which starts none (no built program has that switch). */
static size_t n_observed(void)
{
#ifdef SFMA_BENCH_NO_TAP
	return 0;
#else
	return OBSERVED_MAX;
#endif
}

/* Least privilege by construction: what each stage's environment may hold.
 * Everything else the operator's shell holds is left behind. */
static const char *const env_everyone[] = {
	"PATH", "LANG", "LC_ALL", "TZ", "TERM", "HOME",
	"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", NULL,
};
static const char *const env_model[] = {
	"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY",
	"OPENAI_CODEX_TOKEN", "OPENAI_CODEX_ACCOUNT", "SFMA_MOCK", "SFMA_MOCK_LATENCY_MS",
	"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE", NULL,
};
static const char *const env_seal[] = { "SFMA_AUDIT_PRIVATE_KEY", NULL };
static const char *const env_tap[] = { "SFMA_OBSERVER_PRIVATE_KEY", NULL };
static const char *const env_exec[] = { "SFMA_EXEC_UIDS", NULL };
/* The caller's W3C trace context, which the run records and joins. */
static const char *const env_plan[] = { "TRACEPARENT", NULL };

struct opts {
	const char *cmd;        /* "run" or "relay" */
	char *manifest;         /* as handed to the stages (owned) */
	char *task;             /* "--task=TEXT" for the planner, or NULL (owned) */
	bool apply, progress;
	double every;           /* seconds between relay run starts */
	long max_runs;          /* 0: unbounded */
};

/* What the planner announced about a valid manifest (the line
 * `sfma-plan --check` prints). */
struct checked {
	json_t *doc;            /* owns the strings below */
	const char *workspace, *trace;
	bool dry_run;
	json_t *model_env;      /* array of variable names */
};

static sigset_t supervised;     /* SIGINT SIGTERM SIGHUP SIGCHLD, kept blocked */
static bool interrupted;        /* the operator asked us to stop */

static const char usage_text[] =
	"usage: sfma run MANIFEST [--apply] [--task TEXT] [-v|--progress]\n"
	"       sfma relay MANIFEST [--every SECONDS] [--max-runs N] [--apply] [--task TEXT] [-v]\n"
	"       sfma NAME [ARGS...]   run sfma-NAME from beside sfma (chat, verify, ...)\n"
	"       sfma --version | --help\n";

/* The manifest name as handed to the stages (caller frees): a relative
 * name that begins with '-' must not read as an option. */
static char *safe_path(const char *p)
{
	char *s = xmalloc(strlen(p) + 3);
	sprintf(s, "%s%s", p[0] == '-' ? "./" : "", p);
	return s;
}

/* The options of run and relay; argv[0] is the command. */
static void parse_run_args(int argc, char **argv, struct opts *o)
{
	enum { OPT_APPLY = 0x100, OPT_TASK, OPT_EVERY, OPT_MAX_RUNS, OPT_VERSION };
	static const struct option longopts[] = {
		{"apply", no_argument, NULL, OPT_APPLY}, {"task", required_argument, NULL, OPT_TASK},
		{"every", required_argument, NULL, OPT_EVERY}, {"max-runs", required_argument, NULL, OPT_MAX_RUNS},
		{"progress", no_argument, NULL, 'v'}, {"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, OPT_VERSION}, {NULL, 0, NULL, 0},
	};
	*o = (struct opts){.cmd = argv[0]};
	bool relay = strcmp(o->cmd, "relay") == 0;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":hv", longopts, NULL)) != -1) {
		char *end;
		unsigned long n;
		switch (c) {
		case OPT_APPLY:
			o->apply = true;
			break;
		case OPT_TASK:
			free(o->task);
			o->task = xmalloc(strlen(optarg) + 8);
			sprintf(o->task, "--task=%s", optarg);
			break;
		case OPT_EVERY:
		case OPT_MAX_RUNS:
			if (!relay)
				cli_usage_error(usage_text, "--%s is an option of relay only",
				                c == OPT_EVERY ? "every" : "max-runs");
			if (c == OPT_MAX_RUNS) {
				if (cli_parse_ulong(optarg, 1, LONG_MAX, &n) < 0)
					cli_usage_error(usage_text, "--max-runs %s: expected a positive integer", optarg);
				o->max_runs = (long)n;
				break;
			}
			errno = 0;
			o->every = strtod(optarg, &end);
			if (errno || end == optarg || *end || !isfinite(o->every) || o->every < 0 || o->every > 1e7)
				cli_usage_error(usage_text, "--every %s: expected a number of seconds", optarg);
			break;
		case 'v':
			o->progress = true;
			break;
		case 'h':
			cli_help(usage_text);
		case OPT_VERSION:
			cli_version();
		default:
			cli_bad_option(usage_text, c, argv);
		}
	}
	if (optind == argc)
		cli_usage_error(usage_text, "%s: no MANIFEST given", o->cmd);
	if (optind != argc - 1)
		cli_usage_error(usage_text, "%s: one MANIFEST only (%s is one too many)", o->cmd, argv[optind + 1]);
	o->manifest = safe_path(argv[optind]);
}


/* `sfma NAME ARGS...` runs sfma-NAME with ARGS, git style. Only a program
 * beside sfma qualifies (the installed set belongs together; PATH is not
 * searched), and NAME is a plain word, so it can never name a path. */
static _Noreturn void run_subcommand(char **argv)
{
	const char *name = argv[1];
	size_t len = strlen(name);
	bool plain = len > 0 && len <= 64 && strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-") == len;
	if (!plain)
		cli_usage_error(usage_text, "'%s': not a command name (lower-case letters, digits, -)", name);
	char prog[80], path[PATH_MAX];
	snprintf(prog, sizeof prog, "sfma-%s", name);
	if (beside_self(prog, path, sizeof path) < 0 || access(path, X_OK) < 0)
		cli_usage_error(usage_text, "%s: unknown command (no sfma-%s beside sfma)", name, name);
	argv[1] = path;
	execv(path, argv + 1);
	die("%s: %s", path, strerror(errno));
}

/* A stage must never find its stdin or stdout pipe on fd 0..2 by accident:
 * occupy any closed standard descriptor with /dev/null. */
static void ensure_std_fds(void)
{
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd)
			die("cannot open /dev/null: %s", strerror(errno));
}

/* Signals are taken synchronously (sigtimedwait) so that supervision is one
 * plain loop. SIGCHLD must not be ignored, or the kernel reaps for us. */
static void take_signals(void)
{
	signal(SIGCHLD, SIG_DFL);
	sigemptyset(&supervised);
	sigaddset(&supervised, SIGINT);
	sigaddset(&supervised, SIGTERM);
	sigaddset(&supervised, SIGHUP);
	sigaddset(&supervised, SIGCHLD);
	sigprocmask(SIG_BLOCK, &supervised, NULL);
}

/* Stages are looked up next to the sfma binary first (an installed or built
 * set belongs together), then on PATH. */
static char *find_program(const char *name)
{
	char cand[PATH_MAX + 64];
	if (beside_self(name, cand, sizeof cand) == 0 && access(cand, X_OK) == 0)
		return xstrdup(cand);
	const char *path = getenv("PATH");
	for (const char *p = path ? path : ""; *p;) {
		size_t len = strcspn(p, ":");
		if (len > 0 && len < PATH_MAX) {
			snprintf(cand, sizeof cand, "%.*s/%s", (int)len, p, name);
			struct stat st;
			if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
				return xstrdup(cand);
		}
		p += len + (p[len] == ':');
	}
	die("%s: not found next to sfma nor on PATH", name);
}

static void env_add(char **env, size_t *n, const char *name)
{
	const char *val = getenv(name);
	size_t len = strlen(name);
	if (!val || !*name || strchr(name, '='))
		return;
	for (size_t i = 0; i < *n; i++)
		if (strncmp(env[i], name, len) == 0 && env[i][len] == '=')
			return;
	char *kv = xmalloc(len + strlen(val) + 2);
	sprintf(kv, "%s=%s", name, val);
	env[(*n)++] = kv;
}

/* A fresh environment for stage s: the common minimum plus that stage's own
 * secrets, and its confinement report channel (>= 0: the descriptor).
 * Free it with env_free() once the stage has started. */
static char **stage_env(enum stage s, const struct checked *c, int channel)
{
	size_t cap = 64 + json_array_size(c->model_env), n = 0;
	char **env = xcalloc(cap + 1, sizeof *env);
	for (const char *const *v = env_everyone; *v; v++)
		env_add(env, &n, *v);
	if (s == MODEL) {
		for (const char *const *v = env_model; *v; v++)
			env_add(env, &n, *v);
		size_t i;
		json_t *name;
		json_array_foreach(c->model_env, i, name) {
			const char *nm = json_string_value(name);
			/* The signing keys belong to sfma-seal and sfma-tap alone,
			 * whatever a manifest names as an OAuth variable. */
			if (!nm || strcmp(nm, "SFMA_AUDIT_PRIVATE_KEY") == 0 || strcmp(nm, "SFMA_OBSERVER_PRIVATE_KEY") == 0)
				warning("modelEnv: %s is not passed to sfma-model", nm ? nm : "(not a string)");
			else
				env_add(env, &n, nm);
		}
	} else if (s == SEAL) {
		for (const char *const *v = env_seal; *v; v++)
			env_add(env, &n, *v);
	} else if (s == EXEC) {
		for (const char *const *v = env_exec; *v; v++)
			env_add(env, &n, *v);
	} else if (s == PLAN) {
		for (const char *const *v = env_plan; *v; v++)
			env_add(env, &n, *v);
	} else if (s == TAP) {
		for (const char *const *v = env_tap; *v; v++)
			env_add(env, &n, *v);
	}
	/* A stage the planner reads that stops on an error says so on its
	 * output too, so that the planner can tell why it went (PIPELINE.md). */
	if (s == MODEL || s == CHAIN || s == SEAL || s == MEM)
		env[n++] = xstrdup("SFMA_ERROR_LINE=1");
	if (channel >= 0) {
		env[n] = xmalloc(sizeof CONFINE_FD_ENV + 16);
		sprintf(env[n++], "%s=%d", CONFINE_FD_ENV, channel);
	}
	return env;
}

static void env_free(char **env)
{
	for (char **v = env; *v; v++) {
		explicit_bzero(*v, strlen(*v)); /* some hold keys */
		free(*v);
	}
	free(env);
}

/* The child's half of spawn(); never returns. Async-signal-safe calls only
 * from here to execve, apart from the error report. */
static _Noreturn void child_exec(pid_t parent, const char *path, char *const argv[], char *const envp[],
                                 int in, int out, const int *keep, size_t n_keep, bool planner, int report)
{
	/* Its own process group: a terminal's ^C reaches sfma only, which
	 * forwards it to the planner alone, so the other stages stay up for
	 * the planner to seal the run. */
	setpgid(0, 0);
	/* If sfma dies, the stages must not linger. The death signal is set
	 * after fork, so sfma may already be gone: check again. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(1);
	/* ensure_std_fds() put every pipe above 2, so dup2 never aliases. */
	if ((in >= 0 && dup2(in, 0) < 0) || (out >= 0 && dup2(out, 1) < 0))
		goto fail;
	/* Everything else inherited (pipes of other stages, a test harness's
	 * descriptors) must not cross execve; keep exactly the listed fds. */
	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		for (int fd = 3; fd < 4096; fd++)
			fcntl(fd, F_SETFD, FD_CLOEXEC);
	for (size_t i = 0; i < n_keep; i++)
		if (fcntl(keep[i], F_SETFD, 0) < 0)
			goto fail;
	/* Dispositions set to "ignore" and the signal mask survive execve. */
	const int reset[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD };
	for (size_t i = 0; i < sizeof reset / sizeof *reset; i++)
		signal(reset[i], SIG_DFL);
	/* The planner starts with the halt signals blocked and unblocks them
	 * once its handler is in place: a signal that arrives in between is
	 * held, not fatal, and the run is still sealed. Every other stage
	 * starts with an empty mask. */
	sigset_t mask;
	sigemptyset(&mask);
	if (planner) {
		sigaddset(&mask, SIGINT);
		sigaddset(&mask, SIGTERM);
		sigaddset(&mask, SIGHUP);
	}
	sigprocmask(SIG_SETMASK, &mask, NULL);
	execve(path, argv, envp);
fail:;
	int err = errno;
	ssize_t ignored = write(report, &err, sizeof err);
	(void)ignored;
	_exit(127);
}

/* A started child whose execve has not been confirmed yet. */
struct started {
	pid_t pid;
	int report; /* read end of the report pipe, -1 once confirmed */
};

/* Fork a child that will exec path with stdin on in (-1: /dev/null) and
 * stdout on out (-1: ours), without waiting for the execve: the caller
 * confirms it with spawn_confirm(), so that several children load their
 * programs at once. Returns 0, or -1 with errno (nothing started). */
static int spawn_start(const char *path, char *const argv[], char *const envp[], int in, int out,
                       const int *keep, size_t n_keep, bool planner, struct started *c)
{
	int report[2], devnull = -1, err = 0;
	c->pid = -1;
	c->report = -1;
	if (in < 0 && (in = devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	if (pipe2(report, O_CLOEXEC) < 0) {
		err = errno;
		close(devnull);
		errno = err;
		return -1;
	}
	pid_t parent = getpid(), pid = fork();
	if (pid == 0)
		child_exec(parent, path, argv, envp, in, out, keep, n_keep, planner, report[1]);
	err = errno;
	close(report[1]);
	if (devnull >= 0)
		close(devnull);
	if (pid < 0) {
		close(report[0]);
		errno = err;
		return -1;
	}
	c->pid = pid;
	c->report = report[0];
	return 0;
}

/* Wait for the child's execve. The report pipe closes on a successful
 * execve: EOF means started. Returns the pid, or -1 with errno (the child
 * reaped). */
static pid_t spawn_confirm(struct started *c)
{
	int err = 0;
	ssize_t r;
	while ((r = read(c->report, &err, sizeof err)) < 0 && errno == EINTR)
		;
	close(c->report);
	c->report = -1;
	if (r == (ssize_t)sizeof err) {
		waitpid(c->pid, NULL, 0);
		c->pid = -1;
		errno = err;
		return -1;
	}
	return c->pid;
}

/* Start path and wait for its execve (spawn_start + spawn_confirm). */
static pid_t spawn(const char *path, char *const argv[], char *const envp[],
                   int in, int out, const int *keep, size_t n_keep, bool planner)
{
	struct started c;
	if (spawn_start(path, argv, envp, in, out, keep, n_keep, planner, &c) < 0)
		return -1;
	return spawn_confirm(&c);
}

static double now_seconds(void)
{
	return mono_ms_frac() / 1000.0;
}

/* Wait for one supervised signal until the monotonic deadline (< 0: none;
 * 0: just poll). Returns the signal, or 0 once the deadline has passed. */
static int next_signal(double deadline)
{
	for (;;) {
		int sig;
		if (deadline < 0) {
			sig = sigwaitinfo(&supervised, NULL);
		} else {
			double left = deadline - now_seconds();
			if (left < 0)
				left = 0;
			time_t whole = (time_t)left;
			struct timespec ts = { whole, (long)((left - (double)whole) * 1e9) };
			sig = sigtimedwait(&supervised, NULL, &ts);
		}
		if (sig > 0)
			return sig;
		if (errno == EAGAIN)
			return 0;
		if (errno != EINTR)
			die("sigtimedwait: %s", strerror(errno));
	}
}

/* Take the signals that arrived while no run was being supervised. */
static bool operator_stopped(void)
{
	int sig;
	while ((sig = next_signal(0)) > 0)
		if (sig != SIGCHLD)
			interrupted = true;
	return interrupted;
}

/* Only a stage killed by a signal is reported: one that exits has said why
 * itself (every stage's error is one line on stderr), and the planner
 * names the stage that went away. SIGPIPE means the stage wrote to the
 * planner after the planner had gone, which the planner reports. */
static void describe_death(const char *what, int st)
{
	if (WIFSIGNALED(st) && WTERMSIG(st) != SIGPIPE)
		warning("stage %s killed by signal %d", what, WTERMSIG(st));
}

/* Reap the stages until all are gone; return the run's exit status. The
 * planner decides everything: a dying stage is its to notice (EOF on its
 * pipe), an operator's signal is its to act on. Once the planner is gone,
 * the others get GRACE_SECONDS to finish on EOF before SIGKILL. */
static int supervise(pid_t pid[N_STAGES])
{
	bool gone[N_STAGES] = {0}, killed = false;
	int plan_status = 0, left = N_STAGES;
	double deadline = -1;
	while (left > 0) {
		/* The planner is looked at first: a stage that ended because the
		 * planner had already gone (EOF on its pipe) is no news. */
		static const enum stage order[N_STAGES] = { PLAN, MODEL, EXEC, CHAIN, SEAL, MEM, TAP };
		for (int i = 0; i < N_STAGES; i++) {
			enum stage s = order[i];
			int st;
			if (gone[s])
				continue;
			if (pid[s] < 0) { /* not started (the tap, when no stage is observed) */
				gone[s] = true;
				left--;
				continue;
			}
			if (waitpid(pid[s], &st, WNOHANG) != pid[s])
				continue;
			gone[s] = true;
			left--;
			if (s == PLAN) {
				plan_status = st;
				deadline = now_seconds() + GRACE_SECONDS;
			} else if (!gone[PLAN]) {
				describe_death(stage_prog[s], st);
			}
		}
		if (left == 0)
			break;
		int sig = next_signal(deadline);
		if ((sig == SIGINT || sig == SIGTERM || sig == SIGHUP)) {
			interrupted = true;
			/* The same signal, so the record names what the
			 * operator did. */
			if (!gone[PLAN])
				kill(pid[PLAN], sig);
		} else if (sig == 0 && !killed) {
			for (int s = 0; s < N_STAGES; s++) {
				if (gone[s] || s == PLAN)
					continue;
				/* After the operator's own ^C a stage still busy
				 * (a model call in flight) is what they asked to
				 * stop: no news to them. */
				if (!interrupted)
					warning("stage %s still running %d s after the planner ended; killing it",
					        stage_prog[s], GRACE_SECONDS);
				kill(pid[s], SIGKILL);
			}
			killed = true;
			deadline = -1;
		}
	}
	if (WIFSIGNALED(plan_status)) {
		describe_death(stage_prog[PLAN], plan_status);
		return 1;
	}
	return WEXITSTATUS(plan_status);
}

/* The stages' command lines (their manual pages give the interface). */
static void stage_args(enum stage s, const char *manifest, const struct checked *c, int key_ready,
                       int observed_head, char *argv[8])
{
	static char head_cache[PATH_MAX + 32], ready[16], head[16];
	size_t k = 0;
	argv[k++] = stage_path[s];
	if (s == MODEL) {
		argv[k++] = (char *)manifest;
	} else if (s == EXEC) {
		if (!c->dry_run)
			argv[k++] = "--apply";
		argv[k++] = (char *)manifest;
	} else if (s == CHAIN) {
		/* The verified head, noted for the next run (sfma-chain(1)). */
		snprintf(head_cache, sizeof head_cache, "%s/.sfma/%s", c->workspace, CHAIN_HEAD_CACHE);
		argv[k++] = "--head-cache";
		argv[k++] = head_cache;
		argv[k++] = (char *)c->trace;
	} else if (s == SEAL) {
		/* A planner that stops before sealing has said why: its closed
		 * pipe is no second error. */
		argv[k++] = "--allow-empty";
		if (key_ready >= 0) {
			snprintf(ready, sizeof ready, "%d", key_ready);
			argv[k++] = "--key-ready-fd";
			argv[k++] = ready;
		}
		if (observed_head >= 0) {
			snprintf(head, sizeof head, "%d", observed_head);
			argv[k++] = "--observed-fd";
			argv[k++] = head;
		}
		argv[k++] = (char *)c->workspace;
	} else if (s == MEM) {
		argv[k++] = (char *)c->workspace;
	}
	argv[k] = NULL;
}

/* The signing key is checked before any other stage starts, so that a bad
 * key is one message (sfma-seal's), the same every time, and nothing on
 * disk. sfma never parses the key: the seal stage itself is started first
 * and says on its --key-ready-fd that it loaded the key (it exits with its
 * message when it cannot), so no process is started only to check it.
 * Returns 0 with the seal started (pid in *seal), or -1. */
static int start_seal_first(const char *manifest, const struct checked *c, int in, int out, int channel,
                            int observed_head,
                            pid_t *seal)
{
	int ready[2];
	char *argv[8];
	if (pipe2(ready, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	stage_args(SEAL, manifest, c, ready[1], observed_head, argv);
	char **env = stage_env(SEAL, c, channel);
	int keep[3], n_keep = 0;
	keep[n_keep++] = ready[1];
	if (channel >= 0)
		keep[n_keep++] = channel;
	if (observed_head >= 0)
		keep[n_keep++] = observed_head;
	*seal = spawn(stage_path[SEAL], argv, env, in, out, keep, (size_t)n_keep, false);
	env_free(env);
	close(ready[1]);
	if (*seal < 0) {
		warning("%s: %s", stage_path[SEAL], strerror(errno));
		close(ready[0]);
		return -1;
	}
	char byte;
	ssize_t r;
	while ((r = read(ready[0], &byte, 1)) < 0 && errno == EINTR)
		;
	close(ready[0]);
	if (r == 1)
		return 0;
	/* It ended before it had a key: it has said why. */
	int st;
	while (waitpid(*seal, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(st))
		warning("stage sfma-seal killed by signal %d", WTERMSIG(st));
	*seal = -1;
	return -1;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* A run being started. The planner is started first: it validates the
 * manifest and tells sfma on the handshake socket what --check would print
 * (sfma-plan(1), --handshake-fd), then waits for one byte, the go, before
 * it touches anything on disk or writes to a stage. So one process both
 * checks and runs, and the stages, whose arguments and environments depend
 * on that reply, start while it waits. */
struct wiring {
	int to[PLAN][2], from[PLAN][2];   /* named from the planner's side; -1 once closed */
	int confine[PLAN];                /* each stage's end of its report channel; -1 once closed */
	int confine_tap;                  /* the observer's end of its one; -1 once closed, or none */
	pid_t planner;
	int handshake;                    /* sfma's end of the socket pair; -1 once closed */
	struct checked c;                 /* what the planner announced */
};

static void checked_free(struct checked *c)
{
	json_decref(c->doc);
	*c = (struct checked){0};
}

static void close_pipes(struct wiring *w)
{
	for (int s = 0; s < PLAN; s++) {
		for (int end = 0; end < 2; end++)
			close_fd(&w->to[s][end]), close_fd(&w->from[s][end]);
		close_fd(&w->confine[s]);
	}
	close_fd(&w->confine_tap);
}

static int reap(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			die("waitpid: %s", strerror(errno));
	return st;
}

/* No go: end of input on the handshake makes the planner exit, quietly and
 * having touched nothing. Returns its wait status. */
static int release_planner(struct wiring *w)
{
	close_fd(&w->handshake);
	close_pipes(w);
	int st = reap(w->planner);
	w->planner = -1;
	checked_free(&w->c);
	return st;
}

/* The planner ended without announcing the run. Returns sfma's exit status:
 * 2 for an invalid manifest (the planner has said why), else 1. */
static int planner_ended_early(struct wiring *w)
{
	int st = release_planner(w);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 2)
		return 2;
	if (WIFSIGNALED(st))
		warning("stage sfma-plan killed by signal %d", WTERMSIG(st));
	else if (WEXITSTATUS(st) != 1) /* 1: it has said why */
		warning("sfma-plan exited with status %d before the run started", WEXITSTATUS(st));
	return 1;
}

/* Read the planner's one line (the reply --check prints) into w->c. The
 * planner has only read its manifest by then, a bounded task, so this is a
 * plain blocking read; an operator's signal meanwhile stays pending and is
 * taken right after (operator_stopped). Returns 0, or the exit status once
 * the planner has been reaped. */
static int read_announcement(struct wiring *w)
{
	size_t len = 0, cap = 4096;
	char *line = xmalloc(cap), *nl = NULL;
	while (!nl) {
		if (len == cap) {
			if (cap >= CHECK_REPLY_MAX) {
				warning("sfma-plan handshake: a reply longer than %u bytes", CHECK_REPLY_MAX);
				free(line);
				release_planner(w);
				return 1;
			}
			line = xrealloc(line, cap *= 2);
		}
		ssize_t r = read(w->handshake, line + len, cap - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			free(line);
			return planner_ended_early(w);
		}
		nl = memchr(line + len, '\n', (size_t)r);
		len += (size_t)r;
	}
	struct sfma_err e;
	struct checked *c = &w->c;
	c->doc = ndjson_parse(line, (size_t)(nl - line), &e);
	free(line);
	if (!c->doc) {
		warning("sfma-plan handshake: %s", e.text);
		release_planner(w);
		return 1;
	}
	json_t *dry = json_object_get(c->doc, "dryRun");
	c->workspace = json_string_value(json_object_get(c->doc, "workspace"));
	c->trace = json_string_value(json_object_get(c->doc, "trace"));
	c->model_env = json_object_get(c->doc, "modelEnv");
	if (!c->workspace || !c->trace || !json_is_boolean(dry) || (c->model_env && !json_is_array(c->model_env))) {
		warning("sfma-plan handshake: reply lacks workspace, trace, dryRun or modelEnv");
		release_planner(w);
		return 1;
	}
	c->dry_run = json_is_true(dry);
	return 0;
}

/* Create the pipes and the handshake, start the planner, and read
 * what it says about the manifest. Returns 0 with the planner waiting for
 * its go, or the exit status (1, or 2 for an invalid manifest) with nothing
 * left running. */
static int start_planner(const struct opts *o, struct wiring *w)
{
	int sv[2], keep[3 * PLAN + 2], channel[PLAN][2], tap_channel[2] = {-1, -1};
	char fdpath[2 * PLAN][32], flag[2 * PLAN][16], handshake_fd[16], confine_flag[PLAN][24], confine_fd[PLAN][16];
	char tap_fd[16];
	char *argv[12 + 6 * PLAN];
	size_t n = 0, n_keep = 3 * PLAN + 1;

	*w = (struct wiring){.planner = -1, .handshake = -1, .confine_tap = -1};
	for (int s = 0; s < PLAN; s++) {
		if (pipe2(w->to[s], O_CLOEXEC) < 0 || pipe2(w->from[s], O_CLOEXEC) < 0)
			die("pipe: %s", strerror(errno));
		/* The stage's confinement report channel (PIPELINE.md,
		 * Confinement): one message each way, never run data. */
		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel[s]) < 0)
			die("socketpair: %s", strerror(errno));
		w->confine[s] = channel[s][1];
	}
	/* The observer's, when the run has one: it talks to the planner on
	 * no pipe of its own, and this is how its confinement is recorded. */
	if (n_observed()) {
		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, tap_channel) < 0)
			die("socketpair: %s", strerror(errno));
		w->confine_tap = tap_channel[1];
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair: %s", strerror(errno));

	argv[n++] = stage_path[PLAN];
	argv[n++] = "run";
	argv[n++] = o->manifest;
	if (o->apply)
		argv[n++] = "--apply";
	if (o->task)
		argv[n++] = o->task;
	if (o->progress)
		argv[n++] = "--progress";
	for (int s = 0; s < PLAN; s++) {
		/* Opened by the planner in this order: to-model, from-model, ... */
		for (int dir = 0; dir < 2; dir++) {
			int k = 2 * s + dir, fd = dir == 0 ? w->to[s][1] : w->from[s][0];
			snprintf(flag[k], sizeof flag[k], "--%s-%s", dir == 0 ? "to" : "from", stage_flag[s]);
			snprintf(fdpath[k], sizeof fdpath[k], "/dev/fd/%d", fd);
			keep[k] = fd;
			argv[n++] = flag[k];
			argv[n++] = fdpath[k];
		}
		snprintf(confine_flag[s], sizeof confine_flag[s], "--confine-%s", stage_flag[s]);
		snprintf(confine_fd[s], sizeof confine_fd[s], "%d", channel[s][0]);
		keep[2 * PLAN + 1 + s] = channel[s][0];
		argv[n++] = confine_flag[s];
		argv[n++] = confine_fd[s];
	}
	if (tap_channel[0] >= 0) {
		snprintf(tap_fd, sizeof tap_fd, "%d", tap_channel[0]);
		keep[n_keep++] = tap_channel[0];
		argv[n++] = "--confine-tap";
		argv[n++] = tap_fd;
	}
	snprintf(handshake_fd, sizeof handshake_fd, "%d", sv[1]);
	keep[2 * PLAN] = sv[1];
	argv[n++] = "--handshake-fd";
	argv[n++] = handshake_fd;
	argv[n] = NULL;

	/* The planner's environment does not depend on the manifest. */
	struct checked none = {0};
	char **env = stage_env(PLAN, &none, -1);
	w->planner = spawn(stage_path[PLAN], argv, env, -1, -1, keep, n_keep, true);
	int err = errno;
	env_free(env);
	/* Its ends are the planner's alone now: EOF travels as it exits. */
	close(sv[1]);
	for (int s = 0; s < PLAN; s++)
		close_fd(&w->to[s][1]), close_fd(&w->from[s][0]), close(channel[s][0]);
	close_fd(&tap_channel[0]);
	if (w->planner < 0) {
		warning("%s: %s", stage_path[PLAN], strerror(err));
		close(sv[0]);
		close_pipes(w);
		return 1;
	}
	w->handshake = sv[0];
	return read_announcement(w);
}

/* The pipes of the observer, for one run: an observed stage reads and
 * writes the tap's pipes, and the tap the planner's (sfma-tap(1)). */
struct tapping {
	int to[PLAN][2], from[PLAN][2]; /* the tap to the stage, the stage to the tap; -1: none */
	int head[2];                    /* the tap's head line to sfma-seal */
	int ready[2];                   /* the tap's byte once it measured the trace */
};

static bool is_observed(enum stage s)
{
	for (size_t i = 0; i < n_observed(); i++)
		if (observed[i].s == s)
			return true;
	return false;
}

static void tapping_open(struct tapping *t)
{
	int *all = &t->to[0][0];
	for (size_t i = 0; i < sizeof *t / sizeof(int); i++)
		all[i] = -1;
	if (!n_observed())
		return;
	if (pipe2(t->head, O_CLOEXEC) < 0 || pipe2(t->ready, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	for (size_t i = 0; i < n_observed(); i++)
		if (pipe2(t->to[observed[i].s], O_CLOEXEC) < 0 || pipe2(t->from[observed[i].s], O_CLOEXEC) < 0)
			die("pipe: %s", strerror(errno));
}

static void tapping_close(struct tapping *t)
{
	int *all = &t->to[0][0];
	for (size_t i = 0; i < sizeof *t / sizeof(int); i++)
		close_fd(&all[i]);
}

/* Start sfma-tap on the pipes of the observed stages without waiting for
 * its execve (spawn_start). 0, or -1 with errno. */
static int start_tap(const struct wiring *w, const struct tapping *t, struct started *st)
{
	char fds[OBSERVED_MAX][96], ready[16], head[16];
	char *argv[8 + 3 * OBSERVED_MAX];
	int keep[3 + 4 * OBSERVED_MAX];
	size_t n = 0, k = 0;
	argv[n++] = stage_path[TAP];
	snprintf(ready, sizeof ready, "%d", t->ready[1]);
	snprintf(head, sizeof head, "%d", t->head[1]);
	argv[n++] = "--ready-fd";
	argv[n++] = ready;
	argv[n++] = "--head-fd";
	argv[n++] = head;
	keep[k++] = t->ready[1];
	keep[k++] = t->head[1];
	for (size_t i = 0; i < n_observed(); i++)
		if (observed[i].acts) {
			argv[n++] = "--acts";
			argv[n++] = (char *)stage_prog[observed[i].s];
		}
	argv[n++] = (char *)w->c.workspace;
	for (size_t i = 0; i < n_observed(); i++) {
		enum stage s = observed[i].s;
		/* NAME:FROM_PLANNER:TO_STAGE:FROM_STAGE:TO_PLANNER */
		int ends[4] = {w->to[s][0], t->to[s][1], t->from[s][0], w->from[s][1]};
		snprintf(fds[i], sizeof fds[i], "%s:%d:%d:%d:%d", stage_prog[s], ends[0], ends[1], ends[2], ends[3]);
		argv[n++] = fds[i];
		for (int e = 0; e < 4; e++)
			keep[k++] = ends[e];
	}
	argv[n] = NULL;
	if (w->confine_tap >= 0)
		keep[k++] = w->confine_tap;
	struct checked none = {0};
	char **env = stage_env(TAP, &none, w->confine_tap);
	int out = open("/dev/null", O_WRONLY | O_CLOEXEC);
	int rc = out < 0 ? -1 : spawn_start(stage_path[TAP], argv, env, -1, out, keep, k, false, st);
	int err = errno;
	env_free(env);
	if (out >= 0)
		close(out);
	errno = err;
	return rc;
}

/* The tap says it measured the trace (one byte); end of input instead:
 * it stopped, and said why. */
static bool tap_ready(struct tapping *t)
{
	char byte;
	ssize_t r;
	close_fd(&t->ready[1]);
	while ((r = read(t->ready[0], &byte, 1)) < 0 && errno == EINTR)
		;
	return r == 1;
}

/* Start the other stages of an announced run, send the planner its go and
 * supervise. announce (or NULL) is said once the signing key is known to be
 * usable. Returns the run's exit status, or -1 when the signing key is
 * unusable; either way the planner has been reaped. */
static int start_stages(const struct opts *o, struct wiring *w, const char *announce)
{
	const struct checked *c = &w->c;
	char *stage_argv[8];
	pid_t pid[N_STAGES];
	for (int s = 0; s < N_STAGES; s++)
		pid[s] = -1;
	pid[PLAN] = w->planner;
	struct tapping t;
	tapping_open(&t);

	/* With a signing key the seal stage starts first and loads it; the
	 * other stages then start only with a usable key. */
	const char *key = getenv("SFMA_AUDIT_PRIVATE_KEY");
	bool seal_first = key && *key;
	if (seal_first && start_seal_first(o->manifest, c, w->to[SEAL][0], w->from[SEAL][1], w->confine[SEAL],
	                                   t.head[0], &pid[SEAL]) < 0) {
		tapping_close(&t);
		release_planner(w);
		return -1;
	}
	if (announce)
		warning("%s", announce);
	/* The other stages are forked first and their execs confirmed after:
	 * they load their programs at the same time instead of one after
	 * another. The planner gets its go only once all have, and once the
	 * tap has measured the trace, so a stage that cannot start leaves
	 * nothing behind. An observed stage's pipes are the tap's. */
	struct started st[N_STAGES];
	int failed = -1, failed_errno = 0;
	for (int s = 0; s < N_STAGES; s++)
		st[s] = (struct started){.pid = -1, .report = -1};
	for (int s = 0; s < PLAN && failed < 0; s++) {
		if (s == SEAL && seal_first)
			continue;
		stage_args(s, o->manifest, c, -1, s == SEAL ? t.head[0] : -1, stage_argv);
		char **env = stage_env(s, c, w->confine[s]);
		int in = is_observed(s) ? t.to[s][0] : w->to[s][0], out = is_observed(s) ? t.from[s][1] : w->from[s][1];
		int keep[2], n_keep = 0;
		if (w->confine[s] >= 0)
			keep[n_keep++] = w->confine[s];
		if (s == SEAL && t.head[0] >= 0)
			keep[n_keep++] = t.head[0];
		int rc = spawn_start(stage_path[s], stage_argv, env, in, out, keep, (size_t)n_keep, false, &st[s]);
		env_free(env);
		if (rc < 0) {
			failed = s;
			failed_errno = errno;
		}
	}
	if (failed < 0 && n_observed() && start_tap(w, &t, &st[TAP]) < 0) {
		failed = TAP;
		failed_errno = errno;
	}
	for (int s = 0; s < N_STAGES; s++) {
		if (st[s].report < 0)
			continue;
		pid[s] = spawn_confirm(&st[s]);
		if (pid[s] < 0 && failed < 0) {
			failed = s;
			failed_errno = errno;
		}
	}
	if (failed >= 0)
		warning("%s: %s", stage_path[failed], strerror(failed_errno));
	else if (n_observed() && !tap_ready(&t))
		failed = TAP; /* it has said why */
	if (failed >= 0) {
		for (int s = 0; s < N_STAGES; s++) {
			if (pid[s] < 0 || s == PLAN)
				continue;
			kill(pid[s], SIGKILL);
			reap(pid[s]);
		}
		tapping_close(&t);
		release_planner(w);
		return 1;
	}
	/* Only the stages hold pipe ends now: EOF travels as each one exits. */
	close_pipes(w);
	tapping_close(&t);
	/* Every program of the run has started: from here on sfma only
	 * waits, forwards signals and reaps, and confines itself to that
	 * (sfma(1), CONFINEMENT). Its report goes to the planner with the go,
	 * for the run's first entries. A planner that has gone meanwhile is
	 * supervise()'s to report; its closed socket must not kill sfma
	 * (MSG_NOSIGNAL: no SIGPIPE). */
	struct confine_report confined;
	confine_apply(confine_policy("sfma"), NULL, &confined);
	json_t *report = confine_report_json(&confined);
	char *text = json_dumps(report, JSON_COMPACT);
	json_decref(report);
	struct buf go = {0};
	buf_printf(&go, "g%s\n", text ? text : "");
	free(text);
	for (size_t off = 0; off < go.len;) {
		ssize_t sent = send(w->handshake, go.p + off, go.len - off, MSG_NOSIGNAL);
		if (sent < 0 && errno == EINTR)
			continue;
		if (sent <= 0)
			break;
		off += (size_t)sent;
	}
	buf_free(&go);
	close_fd(&w->handshake);
	w->planner = -1;
	return supervise(pid);
}

static int cmd_run(const struct opts *o)
{
	struct wiring w;
	int status = start_planner(o, &w);
	if (status != 0)
		return status;
	if (operator_stopped()) {
		warning("interrupted before the run started");
		release_planner(&w);
		return 1;
	}
	status = start_stages(o, &w, NULL);
	checked_free(&w.c);
	return status < 0 ? 1 : status;
}

static bool halt_requested(const char *workspace)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof path, "%s/.sfma/HALT", workspace);
	return lstat(path, &st) == 0;
}

/* How a relay's run ended, as its orchestrator process exits: the run's
 * status (0, 1, 2), or one of these. */
enum {
	RELAY_CHECKED = 10,  /* + the status: the manifest refused (the relay ends with it) */
	RELAY_HALTED = 20,   /* .sfma/HALT before the run: the relay ends */
	RELAY_STOPPED = 21,  /* an operator's signal before the run started: the relay ends */
	RELAY_BAD_KEY = 22,  /* the signing key cannot sign: every run would fail alike */
};

/* One run of a relay, in a process of its own: exactly `sfma run`, whose
 * orchestrator confines itself once its stages have started, as every
 * run's does; so the relay's own process never does, and can start the
 * next. Returns what the process exits with. */
static int relay_run(const struct opts *o, long i, const char *bound)
{
	struct wiring w;
	int checked = start_planner(o, &w);
	if (checked != 0)
		return RELAY_CHECKED + checked;
	if (halt_requested(w.c.workspace)) {
		warning("relay: halted by .sfma/HALT");
		release_planner(&w);
		return RELAY_HALTED;
	}
	if (operator_stopped()) {
		release_planner(&w);
		return RELAY_STOPPED;
	}
	char announce[80];
	snprintf(announce, sizeof announce, "relay: run %ld/%s", i, bound);
	int status = start_stages(o, &w, announce);
	checked_free(&w.c);
	return status < 0 ? RELAY_BAD_KEY : status;
}

/* Fork the run's orchestrator and wait for it, forwarding the operator's
 * signals: it is in a process group of its own, as the stages are, so a
 * terminal's ^C reaches the relay only, which passes it on once. Returns
 * what relay_run returned, or 1 when the process died. */
static int relay_fork(const struct opts *o, long i, const char *bound)
{
	fflush(NULL);
	pid_t parent = getpid(), pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		setpgid(0, 0);
		/* A relay that dies takes its run with it, halted and sealed. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(1);
		_exit(relay_run(o, i, bound));
	}
	for (;;) {
		int st;
		pid_t got = waitpid(pid, &st, WNOHANG);
		if (got == pid) {
			if (WIFSIGNALED(st)) {
				warning("sfma (run %ld) killed by signal %d", i, WTERMSIG(st));
				return 1;
			}
			return WEXITSTATUS(st);
		}
		if (got < 0 && errno != EINTR)
			die("waitpid: %s", strerror(errno));
		int sig = next_signal(-1);
		if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
			interrupted = true;
			kill(pid, sig);
		}
	}
}

/* Bounded runs one after another, each exactly `sfma run`. Each run's
 * planner validates the manifest again, so that an operator may edit it
 * between runs; a signal lets the current run halt and seal, then ends the
 * relay. */
static int cmd_relay(const struct opts *o)
{
	/* What every run's processes inherit (sfma(1), CONFINEMENT). */
	struct confine_report confined;
	confine_apply(confine_policy("sfma/relay"), NULL, &confined);
	char bound[32] = "inf";
	if (o->max_runs > 0)
		snprintf(bound, sizeof bound, "%ld", o->max_runs);
	int status = 0;
	for (long i = 1; !interrupted && (o->max_runs == 0 || i <= o->max_runs); i++) {
		double started = now_seconds();
		int ended = relay_fork(o, i, bound);
		if (ended >= RELAY_CHECKED && ended < RELAY_HALTED)
			return ended - RELAY_CHECKED;
		if (ended == RELAY_HALTED || ended == RELAY_STOPPED)
			break;
		if (ended == RELAY_BAD_KEY)
			return 1;
		status = ended;
		if (interrupted || (o->max_runs > 0 && i == o->max_runs))
			break;
		double until = started + o->every;
		while (!interrupted) {
			int sig = next_signal(until);
			if (sig == 0)
				break;
			if (sig != SIGCHLD)
				interrupted = true;
		}
	}
	if (interrupted)
		warning("relay: stopped by signal");
	return status;
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	if (argc < 2)
		cli_usage_error(usage_text, "no command given");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
		cli_help(usage_text);
	if (strcmp(argv[1], "--version") == 0)
		cli_version();
	if (argv[1][0] == '-')
		cli_usage_error(usage_text, "%s: expected a command before any option", argv[1]);
	if (strcmp(argv[1], "run") != 0 && strcmp(argv[1], "relay") != 0)
		run_subcommand(argv);
	struct opts o;
	parse_run_args(argc - 1, argv + 1, &o);
	ensure_std_fds();
	take_signals();
	for (int s = 0; s < N_STAGES; s++)
		stage_path[s] = find_program(stage_prog[s]);
	int status = strcmp(o.cmd, "run") == 0 ? cmd_run(&o) : cmd_relay(&o);
	free(o.manifest);
	free(o.task);
	return status;
}
