/* sfma-plan - the run's state machine.
 *
 *   sfma-plan --check MANIFEST [--apply]
 *   sfma-plan run MANIFEST [--apply] [--task=TEXT] --to-model P --from-model P
 *             --to-exec P --from-exec P --to-chain P --from-chain P --to-seal P --from-seal P
 *
 * `--check` validates a manifest (CONTRACT.md section 2) and prints what the
 * orchestrator needs to wire a run. `run` drives one bounded run through the
 * other stages, which it reaches only through the given pipes: it asks the
 * model, hands tool calls to the hard tier, records every event in the
 * trace, keeps the budgets, and ends every path in a sealed record.
 * Exit: 0 completed, 1 any other verdict or a runtime failure, 2 an invalid
 * manifest or usage. */
#include "plan.h"
#include "store.h"
#include "buf.h"
#include "canon.h"
#include "err.h"
#include "sha.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static void on_halt_signal(int sig)
{
	(void)sig;
	halt_requested = 1;
}

/* ---- the trace -------------------------------------------------------- */

/* Append one event through sfma-chain; returns the entry (new reference) or
 * NULL once the chain is gone (the run then ends without more entries). */
json_t *trace(struct run *r, const char *kind, json_t *data, int loop, json_t *refs,
                     const char *cls)
{
	if (!r->chain_alive) {
		json_decref(data);
		json_decref(refs);
		return NULL;
	}
	json_t *ev = json_pack("{s:s, s:o, s:i}", "kind", kind, "data", data, "loop", loop);
	if (refs)
		json_object_set_new(ev, "refs", refs);
	if (cls)
		json_object_set_new(ev, "class", json_string(cls));
	const char *why = NULL;
	enum stage_id dead;
	json_t *entry = NULL;
	if (stage_send(STAGE_CHAIN, ev) == 0)
		entry = stage_wait(STAGE_CHAIN, 0, 0, &why, &dead);
	json_decref(ev);
	if (!entry) {
		r->chain_alive = 0;
		if (!r->error[0])
			snprintf(r->error, sizeof r->error, "trace: %s", why ? why : "stage sfma-chain died");
		return NULL;
	}
	double seq = json_number_value(json_object_get(entry, "seq"));
	if (r->first_seq == 0)
		r->first_seq = seq;
	r->last_seq = seq;
	return entry;
}

void trace_quiet(struct run *r, const char *kind, json_t *data, int loop, json_t *refs)
{
	json_decref(trace(r, kind, data, loop, refs, NULL));
}

const char *entry_id(json_t *entry)
{
	return entry ? json_string_value(json_object_get(entry, "id")) : NULL;
}

void lifecycle(struct run *r, const char *to)
{
	json_t *from = r->last_lifecycle ? json_string(r->last_lifecycle) : json_null();
	trace_quiet(r, "lifecycle", json_pack("{s:o, s:s}", "from", from, "to", to), 0, NULL);
	json_array_append_new(r->lifecycle, json_string(to));
	r->last_lifecycle = json_string_value(json_array_get(r->lifecycle, json_array_size(r->lifecycle) - 1));
}

static void clock_anchor(struct run *r)
{
	trace_quiet(r, "clock-anchor",
	            json_pack("{s:f, s:s}", "wallMs", (double)now_ms(), "source", "system-wall"), 0, NULL);
}

void end_with(struct run *r, const char *verdict, const char *fmt, ...)
{
	r->verdict = verdict;
	if (fmt && !r->error[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(r->error, sizeof r->error, fmt, ap);
		va_end(ap);
	}
}

void progress(struct run *r, const char *fmt, ...)
{
	if (!r->progress)
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "sfma: turn %ld: ", r->turns);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ---- the mailbox (CONTRACT.md section 10) ----------------------------- */

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Read, trace and delete every inbox file, sorted by name; returns the
 * operator's messages as one text for the model ("" when none). Files are
 * opened without following links: the inbox is the operator's, and a link
 * planted there must not make the runner read (or delete) anything else. */
static char *consume_inbox(struct run *r)
{
	char dir[4200];
	struct buf text = {0};
	buf_adds(&text, "");
	snprintf(dir, sizeof dir, "%s/inbox", r->sfma_dir);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return text.p;
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return text.p;
	}
	char **names = NULL;
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		names = xrealloc(names, (n + 1) * sizeof *names);
		names[n++] = xstrdup(de->d_name);
	}
	if (n)
		qsort(names, n, sizeof *names, name_cmp);
	for (size_t i = 0; i < n; i++) {
		struct sfma_err e;
		size_t len = 0;
		char *body = NULL;
		int fd = openat(dfd, names[i], O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		struct stat st;
		if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
			body = read_all_fd(fd, 64u << 10, &len, &e);
		if (fd >= 0)
			close(fd);
		if (!body) {
			warnx("inbox/%s: skipped (not a regular file of at most 64 KiB)", names[i]);
			free(names[i]);
			continue;
		}
		trace_quiet(r, "message", json_pack("{s:s, s:s, s:s%}", "dir", "in", "file", names[i],
		                                    "text", body, len), 0, NULL);
		buf_printf(&text, "- (%s) %.*s\n", names[i], (int)len, body);
		unlinkat(dfd, names[i], 0);
		free(body);
		free(names[i]);
	}
	free(names);
	closedir(d);
	return text.p;
}

/* ---- the record -------------------------------------------------------- */

static json_t *outputs_list(struct run *r)
{
	json_t *list = json_array();
	for (size_t i = 0; i < r->m->n_outputs; i++) {
		const char *p = r->m->outputs[i];
		json_t *o = json_pack("{s:s, s:b}", "path", p, "ok", 0);
		if (r->dry_run) {
			json_t *sha = json_object_get(r->written, p);
			if (sha) {
				json_object_set_new(o, "ok", json_true());
				json_object_set(o, "sha256", sha);
			}
		} else {
			char full[8300], hex[65];
			snprintf(full, sizeof full, "%s/%s", r->m->workspace_path, p);
			int fd = open(full, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
			struct stat st;
			if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && sha256_file_hex(fd, hex) == 0) {
				json_object_set_new(o, "ok", json_true());
				json_object_set_new(o, "sha256", json_string(hex));
			}
			if (fd >= 0)
				close(fd);
		}
		json_array_append_new(list, o);
	}
	return list;
}

static json_t *result_body(struct run *r)
{
	json_t *criteria = json_array();
	size_t i;
	json_t *c;
	json_array_foreach(r->candidate ? json_object_get(r->candidate, "successCriteria") : NULL, i, c)
		json_array_append_new(criteria, json_pack("{s:O, s:n, s:[]}", "criterion", c, "pass", "evidence"));
	json_t *body = json_object();
	json_object_set(body, "manifest", r->m->json);
	json_object_set_new(body, "genesisVersion", json_string(GENESIS_VERSION));
	json_object_set(body, "bootstrap", r->candidate ? r->candidate : json_null());
	json_object_set(body, "lifecycle", r->lifecycle);
	json_t *memory = json_pack("{s:I, s:b}", "runs",
	                           (json_int_t)json_array_size(json_object_get(r->mem.doc, "runs")),
	                           "pinned", memory_pinned(&r->mem) != NULL);
	if (r->store_ok)
		json_object_set_new(memory, "store", r->store.git_available
		    ? json_pack("{s:s, s:f, s:s?}", "name", "git-long", "latencyMs", r->store.latency_git,
		                "commit", r->commit_sha)
		    : json_pack("{s:s, s:b, s:s}", "name", "git-long", "available", 0, "reason",
		                r->store.git_unavailable_why));
	json_object_set_new(body, "memory", memory);
	json_object_set_new(body, "outputs", outputs_list(r));
	json_object_set_new(body, "criteria", criteria);
	json_object_set_new(body, "weights", r->endpoints ? json_incref(r->endpoints) : json_object());
	json_object_set_new(body, "mutations", json_pack("{s:I, s:O}", "count",
	                    (json_int_t)json_array_size(r->mutation_refs), "refs", r->mutation_refs));
	json_object_set_new(body, "clock", json_pack("{s:f, s:f, s:s}", "firstSeq", r->first_seq,
	                    "lastSeq", r->last_seq, "anchorSource", "system-wall"));
	json_object_set_new(body, "trace", json_string(".sfma/trace.jsonl"));
	json_object_set_new(body, "dryRun", json_boolean(r->dry_run));
	json_object_set_new(body, "turns", json_integer(r->turns));
	json_object_set_new(body, "modelCalls", json_integer(r->model_calls));
	json_object_set_new(body, "budget", json_pack("{s:I, s:I, s:I, s:I}",
	                    "maxModelCalls", (json_int_t)r->m->max_model_calls,
	                    "maxSeconds", (json_int_t)r->m->max_seconds,
	                    "maxLoops", (json_int_t)r->m->max_loops,
	                    "maxPendingTasks", (json_int_t)r->m->max_pending_tasks));
	json_object_set_new(body, "hardTierFailures", json_integer(r->hard_failures));
	json_object_set_new(body, "verdict", json_string(r->verdict));
	if (r->error[0] && strcmp(r->verdict, "completed") != 0)
		json_object_set_new(body, "error", json_string(r->error));
	return body;
}

static void commit_memory(struct run *r);

/* Close the run in the trace and in memory.json. */
static void finish(struct run *r)
{
	if (strcmp(r->verdict, "completed") != 0) {
		const char *key = strncmp(r->verdict, "halted", 6) == 0 ? "halt" : "error";
		json_t *data = json_pack("{s:s}", key, strcmp(key, "halt") == 0 ? r->verdict : r->error);
		if (strcmp(key, "halt") == 0 && r->error[0])
			json_object_set_new(data, "reason", json_string(r->error));
		trace_quiet(r, "result", data, 0, NULL);
	}
	if (r->endpoints)
		trace_quiet(r, "weight", json_deep_copy(r->endpoints), 0, NULL);

	json_t *summary = json_pack("{s:s, s:s, s:I, s:I, s:I, s:b}", "at", iso_time(now_ms()),
	                            "verdict", r->verdict, "turns", (json_int_t)r->turns,
	                            "modelCalls", (json_int_t)r->model_calls,
	                            "hardTierFailures", (json_int_t)r->hard_failures, "dryRun", r->dry_run);
	int certified, demoted;
	memory_record_run(&r->mem, r->m, summary, r->candidate, r->pinned_run, &certified, &demoted);
	json_decref(summary);
	if (r->endpoints)
		json_object_set(r->mem.doc, "endpoints", r->endpoints);
	char mem_path[4200], mem_err[600];
	snprintf(mem_path, sizeof mem_path, "%s/memory.json", r->sfma_dir);
	if (memory_save(&r->mem, mem_path, mem_err, sizeof mem_err) < 0)
		warnx("memory.json: %s", mem_err);
	commit_memory(r);
	if (certified)
		lifecycle(r, "certified");
	if (demoted)
		lifecycle(r, "demoted");
	lifecycle(r, r->verdict);
	clock_anchor(r);
}

/* One commit per run in .sfma/mem: memory.json and the run's records. */
static void commit_memory(struct run *r)
{
	if (!r->store_ok || !r->store.git_available)
		return;
	char subject[600];
	struct buf mem = {0};
	snprintf(subject, sizeof subject, "run %s %s turns=%ld calls=%ld", r->m->name, r->verdict, r->turns,
	         r->model_calls);
	canon_dump_pretty(r->mem.doc, &mem, NULL);
	buf_addc(&mem, '\n');
	json_t *entry = store_commit(&r->store, mem.p, subject, &r->commit_sha);
	buf_free(&mem);
	if (entry)
		trace_quiet(r, "store", entry, 0, NULL);
}

/* Hand the body to sfma-seal and wait for its integrity line. */
static int seal(struct run *r, json_t *body)
{
	const char *why = NULL;
	enum stage_id dead;
	json_t *integrity = NULL;
	if (stage_send(STAGE_SEAL, body) == 0) {
		stage_close_input(STAGE_SEAL);
		integrity = stage_wait(STAGE_SEAL, 0, 0, &why, &dead);
	}
	if (!integrity) {
		warnx("sealing failed (%s): no result record was written", why ? why : "stage sfma-seal died");
		return -1;
	}
	(void)r;
	json_decref(integrity);
	return 0;
}

/* ---- commands ----------------------------------------------------------- */

static void run_free(struct run *r)
{
	free(r->system);
	json_decref(r->candidate);
	json_decref(r->lifecycle);
	json_decref(r->messages);
	json_decref(r->mutation_refs);
	json_decref(r->written);
	json_decref(r->endpoints);
	memory_free(&r->mem);
	store_close(&r->store);
	manifest_free(r->m);
	for (int s = 0; s < STAGE_COUNT; s++)
		lr_free(&stages[s].reader);
}

static _Noreturn void usage(void)
{
	fprintf(stderr,
	        "usage: sfma-plan --check MANIFEST [--apply]\n"
	        "       sfma-plan run MANIFEST [--apply] [--task=TEXT] --to-model P --from-model P\n"
	        "                 --to-exec P --from-exec P --to-chain P --from-chain P --to-seal P --from-seal P\n");
	exit(2);
}

static struct manifest *load_or_exit(const char *path)
{
	struct reasons why = {0};
	struct manifest *m = manifest_load(path, &why);
	if (!m) {
		fprintf(stderr, "TASK_INVALID\n");
		for (size_t i = 0; i < why.n; i++)
			fprintf(stderr, "- %s\n", why.items[i]);
		reasons_free(&why);
		exit(2);
	}
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

static int cmd_check(const char *path, int apply)
{
	struct manifest *m = load_or_exit(path);
	char trace_path[4200];
	snprintf(trace_path, sizeof trace_path, "%s/.sfma/trace.jsonl", m->workspace_path);
	json_t *out = json_pack("{s:s, s:s, s:b, s:o}", "workspace", m->workspace_path, "trace", trace_path,
	                        "dryRun", m->dry_run_default && !apply, "modelEnv", model_env_names(m));
	json_print_line(stdout, out);
	json_decref(out);
	manifest_free(m);
	return 0;
}

static int mkdir_p(const char *path)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(tmp, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	int apply = 0, check = 0;
	const char *task = NULL;
	const char *paths[2 * STAGE_COUNT] = {0};
	static const struct option longopts[] = {
		{"check", no_argument, NULL, 'c'}, {"apply", no_argument, NULL, 'a'},
		{"task", required_argument, NULL, 't'},
		{"to-model", required_argument, NULL, 0}, {"from-model", required_argument, NULL, 1},
		{"to-exec", required_argument, NULL, 2}, {"from-exec", required_argument, NULL, 3},
		{"to-chain", required_argument, NULL, 4}, {"from-chain", required_argument, NULL, 5},
		{"to-seal", required_argument, NULL, 6}, {"from-seal", required_argument, NULL, 7},
		{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (c >= 0 && c < 2 * STAGE_COUNT)
			paths[c] = optarg;
		else if (c == 'c')
			check = 1;
		else if (c == 'a')
			apply = 1;
		else if (c == 't')
			task = optarg;
		else
			usage();
	}
	if (check) {
		if (optind != argc - 1)
			usage();
		return cmd_check(argv[optind], apply);
	}
	if (optind != argc - 2 || strcmp(argv[optind], "run") != 0)
		usage();
	for (int i = 0; i < 2 * STAGE_COUNT; i++)
		if (!paths[i])
			usage();

	/* 1. The contract: nothing is touched before it validates. */
	struct run r = {0};
	r.m = load_or_exit(argv[optind + 1]);
	r.dry_run = r.m->dry_run_default && !apply;
	r.task = task ? task : r.m->task_statement;
	r.progress = isatty(2);
	r.start_ms = now_ms();
	r.deadline_ms = r.start_ms + r.m->max_seconds * 1000;
	r.chain_alive = 1;
	r.lifecycle = json_array();
	r.messages = json_array();
	r.mutation_refs = json_array();
	r.written = json_object();

	/* 2. Signals: a halt is honoured before the next turn; a stage's
	 * closed pipe must be an error we see, not a signal that kills us. */
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
	stages_open(paths);

	/* 3. The workspace, locked for this run alone. flock on the .sfma
	 * directory itself: a second run fails at once and creates nothing. */
	snprintf(r.sfma_dir, sizeof r.sfma_dir, "%s/.sfma", r.m->workspace_path);
	if (mkdir_p(r.sfma_dir) < 0)
		die("%s: %s", r.sfma_dir, strerror(errno));
	int lock = open(r.sfma_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (lock < 0)
		die("%s: %s", r.sfma_dir, strerror(errno));
	if (flock(lock, LOCK_EX | LOCK_NB) < 0)
		die("workspace busy: another sfma run holds %s", r.sfma_dir);
	char err[600], mem_path[4200];
	snprintf(mem_path, sizeof mem_path, "%s/memory.json", r.sfma_dir);
	if (memory_load(&r.mem, mem_path, err, sizeof err) < 0)
		die("%s", err);
	json_t *known = json_object_get(r.mem.doc, "endpoints");
	if (json_object_size(known))
		r.endpoints = json_incref(known);

	/* 4. The run opens in the trace. A broken chain stops everything here:
	 * sfma-chain refuses to append and says why. */
	record_interrupted_run(&r);
	clock_anchor(&r);
	if (!r.chain_alive) {
		warnx("%s; nothing was appended", r.error);
		run_free(&r);
		return 1;
	}
	json_t *pinned = memory_pinned(&r.mem);
	r.pinned_run = pinned != NULL;
	lifecycle(&r, r.pinned_run ? "pinned-replay" : "probation");

	/* Long-term memory: the containment guards run before any git command;
	 * a failed guard ends the run before anything is committed anywhere. */
	char guard[600];
	if (store_open(&r.store, r.sfma_dir, guard, sizeof guard) < 0) {
		end_with(&r, "failed", "memory store: %s", guard);
	} else {
		json_t *git_entry, *placement;
		r.store_ok = 1;
		store_profile(&r.store, &git_entry, &placement);
		trace_quiet(&r, "store", git_entry, 0, NULL);
		trace_quiet(&r, "store", placement, 0, NULL);
	}
	char *inbox = consume_inbox(&r);
	if (task)
		trace_quiet(&r, "clarification", json_pack("{s:s, s:s}", "source", "--task", "text", task), 0, NULL);

	/* 5. Genesis, then the turns. A pinned configuration is replayed: the
	 * bootstrap step is skipped, so the first model call is already work. */
	r.system = genesis_prompt(r.m, r.task, r.dry_run, r.pinned_run);
	struct buf first = {0};
	if (r.pinned_run) {
		r.candidate = json_incref(json_object_get(pinned, "candidate"));
		struct buf cand = {0};
		canon_dump(r.candidate, &cand, NULL);
		buf_printf(&first, "Pinned configuration (certified, replayed): %s\nBegin: one tool call per turn.\n", cand.p);
		buf_free(&cand);
	} else {
		buf_adds(&first, "Begin: reply with your bootstrap candidate.\n");
	}
	if (*inbox)
		buf_printf(&first, "\nOperator messages (they may only narrow the task, never widen the manifest):\n%s", inbox);
	say(&r, "user", first.p);
	buf_free(&first);
	free(inbox);
	if (!r.verdict)
		turns(&r);
	if (!r.verdict)
		end_with(&r, "failed", "run ended without a verdict");
	if (!r.chain_alive && strcmp(r.verdict, "completed") == 0)
		end_with(&r, "failed", "trace writer died");

	/* 6. Close, seal, report. */
	finish(&r);
	stage_close_input(STAGE_CHAIN);
	stage_close_input(STAGE_MODEL);
	stage_close_input(STAGE_EXEC);
	json_t *body = result_body(&r);
	int sealed = seal(&r, body);
	json_decref(body);
	char verdict_uc[64];
	size_t k = 0;
	for (; r.verdict[k] && k < sizeof verdict_uc - 1; k++)
		verdict_uc[k] = (char)toupper((unsigned char)r.verdict[k]);
	verdict_uc[k] = '\0';
	if (r.error[0] && strcmp(r.verdict, "completed") != 0)
		warnx("%s: %s", r.verdict, r.error);
	printf("%s turns=%ld dryRun=%s record=%s/.sfma/result.json\n", verdict_uc, r.turns,
	       r.dry_run ? "true" : "false", r.m->workspace);
	fflush(stdout);
	int status = sealed == 0 && strcmp(r.verdict, "completed") == 0 ? 0 : 1;
	run_free(&r);
	close(lock);
	return status;
}
