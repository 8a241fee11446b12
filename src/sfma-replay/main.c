/* sfma-replay - re-derive a recorded run offline.
 *
 *   sfma-replay WORKSPACE | RESULT.json
 *
 * No model, no network, no command executed. The record is checked by
 * sfma-verify (found beside this program, run alongside); every run in
 * the trace is then fed through the decision core that decided it
 * (lib/core.h) - the same code, not a copy - with what the stages
 * answered read back from the record (standin.c), and each entry the core
 * derives is compared with the one the trace holds. Facts that came from
 * the host at run time (a link met on a path, the outputs at a done, the
 * time a budget halt saw, a HALT file, a signal) are taken from the
 * entries that recorded them, never from today's disk. A run cut short (a
 * stage killed, the machine gone) is an honest record: it replays as far
 * as it went.
 *
 * stdout, one line: REPLAY_OK runs=<r> entries=<n> (exit 0),
 * REPLAY_DIVERGED: seq <n> (<kind>): trace has <X>, replay derives <Y>,
 * or REPLAY_INCOMPLETE: <why> (exit 1). Usage: exit 2. */
#include "replay.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "beside.h"
#include "buf.h"
#include "canon.h"
#include "chain.h"
#include "cli.h"
#include "confine.h"
#include "evidence.h"
#include "ndjson.h"
#include "protocol.h"
#include "sha.h"
#include "soft.h"

static const char usage_text[] = "usage: sfma-replay [--run N] WORKSPACE | RESULT.json\n"
                                 "       sfma-replay --version | --help\n";

/* Where one run ended: an interrupted run's record names one such
 * boundary (the last sealed head) and counts the entries after it. */
struct boundary {
	double seq, seq_after;
	char hash[SHA256_HEX_LEN + 1];
	size_t count;
};

static struct {
	json_t *record;
	struct manifest *record_m, *run_m;
	char run_prompt[SHA256_HEX_LEN + 1]; /* the prompt run_m was read from */
	int sfma_fd;
	char ws[PATH_MAX];          /* the record's workspace */
	char empty_dir[64];
	char *empty_real;
	struct core *core;
	long runs;
	json_t *last_candidate;     /* the latest adopted candidate in the trace */
	int last_cut;               /* the last run ended before its close */
	struct boundary *ends;
	size_t n_ends;
	size_t evidence_before;     /* entries with evidence before the run */
	pid_t verify_pid;
	int verify_fd;
	/* The mode run_dry found last, and for what prompt, task and pinning. */
	char dry_prompt[SHA256_HEX_LEN + 1];
	char *dry_task;
	int dry_pinned, dry;
} R = {.sfma_fd = -1, .verify_pid = -1, .verify_fd = -1};

/* ---- sfma-verify, alongside ----------------------------------------------- */

/* sfma-verify, beside this program, checks the record while the replay
 * reads it; no verdict is given before it has accepted the record. */
static void verify_start(const char *target)
{
	char verify[PATH_MAX + 16];
	if (beside_self("sfma-verify", verify, sizeof verify) < 0)
		die("/proc/self/exe: %s (no directory to find sfma-verify in)", strerror(errno));
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		execl(verify, verify, target, (char *)NULL);
		fprintf(stderr, "%s: %s\n", verify, strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	R.verify_pid = pid;
	R.verify_fd = pfd[0];
}

static void verify_wait(void)
{
	if (R.verify_pid < 0)
		return;
	size_t n;
	struct sfma_err e;
	char *out = read_all_fd(R.verify_fd, 1u << 20, &n, &e);
	close(R.verify_fd);
	int status;
	while (waitpid(R.verify_pid, &status, 0) < 0 && errno == EINTR)
		;
	R.verify_pid = -1;
	if (!out)
		out = xstrdup("");
	char *nl = strchr(out, '\n');
	if (nl)
		*nl = '\0';
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char line[600];
		snprintf(line, sizeof line, "%s", *out ? out : "sfma-verify failed");
		free(out);
		incomplete("the record does not verify: %s", line);
	}
	free(out);
}

static void cleanup(void)
{
	/* A verdict is given only for a record sfma-verify accepts. */
	verify_wait();
	core_free(R.core);
	R.core = NULL;
	trace_close();
	evidence_close(S.store);
	S.store = NULL;
	json_decref(R.last_candidate);
	R.last_candidate = NULL;
	free(R.ends);
	R.ends = NULL;
	manifest_free(R.run_m);
	R.run_m = NULL;
	free(R.dry_task);
	R.dry_task = NULL;
	manifest_free(R.record_m);
	R.record_m = NULL;
	json_decref(R.record);
	R.record = NULL;
	if (R.empty_dir[0]) {
		unbuild();
		if (S.gate.ws_fd >= 0)
			close(S.gate.ws_fd);
		rmdir(R.empty_dir);
		R.empty_dir[0] = '\0';
	}
	free(R.empty_real);
	R.empty_real = NULL;
	if (R.sfma_fd >= 0)
		close(R.sfma_fd);
	R.sfma_fd = -1;
}

/* ---- where runs begin and end ------------------------------------------- */

/* Entry i opens a run: a clock anchor followed by the first lifecycle,
 * or an interrupted run's record that comes before one. */
/* A record the host put between runs: an interrupted run's record, or
 * what `sfma-chain --recover-torn` appends when an operator recovers a
 * torn line (sfma-chain(1), RECOVERY). */
static int between_runs(const json_t *e)
{
	return is_result(e, "interrupted") ||
	       (is_result(e, "error") && ndjson_string_is(json_object_get(data_of(e), "error"), "torn-write-recovered"));
}

static int run_starts_at(size_t i)
{
	json_t *e = peek_at(i);
	if (!e || between_runs(e))
		return e != NULL;
	if (strcmp(kind_of(e), "clock-anchor") != 0)
		return 0;
	json_t *l = peek_at(i + 1);
	return l && strcmp(kind_of(l), "lifecycle") == 0 && json_is_null(json_object_get(data_of(l), "from"));
}

/* The run's own entries are over: the trace ends, or another run begins. */
static int run_ended(void)
{
	return !peek() || run_starts_at(0);
}

static void note_boundary(const json_t *last)
{
	R.ends = xrealloc(R.ends, (R.n_ends + 1) * sizeof *R.ends);
	struct boundary *b = &R.ends[R.n_ends++];
	*b = (struct boundary){.seq = (double)seq_of(last), .count = trace_count()};
	snprintf(b->hash, sizeof b->hash, "%s", ndjson_str(last, "hash") ? ndjson_str(last, "hash") : "");
	json_t *after = peek();
	b->seq_after = after ? (double)seq_of(after) : 0;
}

/* An interrupted run's record: it counts the entries after the last
 * sealed head up to the one before it, which the trace must bear out. */
static void interrupted(void)
{
	json_t *prev = last_consumed();
	double prev_seq = prev ? (double)seq_of(prev) : -1;
	json_t *e = next(), *d = json_object_get(data_of(e), "interrupted");
	const char *head = ndjson_str(d, "headHash");
	const struct boundary *b = NULL;
	static const struct boundary start = {.hash = CHAIN_ZERO_HASH};
	if (head && strcmp(head, CHAIN_ZERO_HASH) == 0)
		b = &start;
	for (size_t i = R.n_ends; !b && head && i-- > 0;)
		if (strcmp(R.ends[i].hash, head) == 0)
			b = &R.ends[i];
	double n = (double)(trace_count() - 1 - (b ? b->count : 0));
	if (!b || prev_seq < 0 || json_number_value(json_object_get(d, "afterSeq")) != b->seq ||
	    json_number_value(json_object_get(d, "entries")) != n ||
	    json_number_value(json_object_get(d, "lastSeq")) != prev_seq ||
	    (b != &start && json_number_value(json_object_get(d, "firstSeq")) != b->seq_after))
		diverged(e, "an interrupted run's record that the trace does not bear out",
		         sx("the %.0f entries after a run's end", n));
}

/* ---- the run's manifest, task and mode ------------------------------------ */

/* The first call entry of the run that carries the system prompt, or NULL. */
static json_t *prompt_call(void)
{
	for (size_t i = 1;; i++) {
		json_t *e = peek_at(i);
		if (!e || run_starts_at(i))
			return NULL;
		/* The run's first request carries it; a request no call answered,
		 * its result entry (a stop). */
		if ((strcmp(kind_of(e), "call") == 0 || strcmp(kind_of(e), "result") == 0) &&
		    json_object_get(json_object_get(e, EVIDENCE_MEMBER), "prompt"))
			return e;
	}
}

/* The manifest stated verbatim in a genesis prompt, between the line
 * "MANIFEST (verbatim):" and the blank line before "TASK:". */
static json_t *prompt_manifest(const char *p, size_t n)
{
	static const char open_mark[] = "MANIFEST (verbatim):\n", close_mark[] = "\n\nTASK:\n";
	const char *a = memmem(p, n, open_mark, sizeof open_mark - 1);
	if (!a)
		return NULL;
	a += sizeof open_mark - 1;
	const char *b = memmem(a, (size_t)(p + n - a), close_mark, sizeof close_mark - 1);
	return b ? ndjson_parse(a, (size_t)(b - a), NULL) : NULL;
}

/* The manifest a run was bound by: the one its system prompt states
 * verbatim (the record keeps only the last run's, and in canonical member
 * order, while the prompt keeps the operator's). A run without a model
 * call keeps the record's. */
static const struct manifest *run_manifest(const json_t *call)
{
	if (!call)
		return R.record_m;
	/* Runs of one workspace mostly state the same prompt: its manifest
	 * is read once. */
	const char *sha = ndjson_str(json_object_get(json_object_get(call, EVIDENCE_MEMBER), "prompt"), "sha256");
	if (R.run_m && sha && strcmp(sha, R.run_prompt) == 0)
		return R.run_m;
	manifest_free(R.run_m);
	R.run_m = NULL;
	snprintf(R.run_prompt, sizeof R.run_prompt, "%s", sha ? sha : "");
	size_t n;
	char *prompt = blob_of(call, "prompt", &n);
	json_t *doc = prompt ? prompt_manifest(prompt, n) : NULL;
	free(prompt);
	if (!doc)
		diverged(call, "a system prompt without a manifest", "the genesis prompt");
	struct reasons why = {0};
	R.run_m = manifest_from_json(doc, &why);
	reasons_free(&why);
	json_decref(doc);
	if (!R.run_m)
		diverged(call, "a system prompt with an invalid manifest", "a valid manifest");
	return R.run_m;
}

/* The mode the run was in: the one whose genesis prompt it sent. The
 * prompt is a function of the manifest (the one that prompt states, see
 * run_manifest), the task and whether the run was pinned: a run that sent
 * the same prompt as the run before, with the same task and pinning, was
 * in the same mode (runs of one workspace mostly are), which is not
 * worked out again. */
static int run_dry(const json_t *call, const struct manifest *m, const char *task, int pinned)
{
	if (!call)
		return json_is_true(json_object_get(R.record, "dryRun"));
	const char *has = ndjson_str(json_object_get(json_object_get(call, EVIDENCE_MEMBER), "prompt"), "sha256");
	if (has && m == R.run_m && strcmp(R.run_prompt, has) == 0 && R.dry_task && strcmp(R.dry_prompt, has) == 0 &&
	    R.dry_pinned == pinned && task && strcmp(R.dry_task, task) == 0)
		return R.dry;
	free(R.dry_task);
	R.dry_task = NULL;
	for (int dry = 0; dry <= 1; dry++) {
		char *g = genesis_prompt(m, task, dry, pinned), hex[SHA256_HEX_LEN + 1];
		sha256_hex(g, strlen(g), hex);
		free(g);
		if (has && strcmp(hex, has) == 0) {
			if (!task)
				return dry;
			snprintf(R.dry_prompt, sizeof R.dry_prompt, "%s", has);
			R.dry_task = xstrdup(task);
			R.dry_pinned = pinned;
			R.dry = dry;
			return dry;
		}
	}
	diverged(call, "another system prompt", "the genesis prompt of the run's manifest and task");
}

/* ---- feeding the core ------------------------------------------------------- */

/* The host facts a stop rests on: the stop the trace records next (past
 * the replies drained after a verdict), as the planner saw it. */
static struct core_facts stop_facts(const struct manifest *m)
{
	struct core_facts f = {0};
	size_t i = 0;
	json_t *e;
	while ((e = peek_at(i)) && strcmp(kind_of(e), "call") == 0 &&
	       json_is_true(json_object_get(data_of(e), "drained")))
		i++;
	const char *trigger = is_result(e, "halt") ? ndjson_str(data_of(e), "trigger") : NULL;
	if (!trigger)
		return f;
	if (strcmp(trigger, "HALT file") == 0) {
		f.halt_file = 1;
	} else if (strncmp(trigger, "SIG", 3) == 0) {
		f.halt_signal = strcmp(trigger, "SIGINT") == 0 ? SIGINT : strcmp(trigger, "SIGHUP") == 0 ? SIGHUP : SIGTERM;
	} else if (strcmp(trigger, "maxSeconds") == 0) {
		long long ms;
		if (!ndjson_integer(json_object_get(data_of(e), "elapsedMs"), &ms) || ms < m->max_seconds * 1000LL)
			diverged(e, "a maxSeconds halt before maxSeconds", sx("elapsedMs of at least %ld", m->max_seconds * 1000L));
		f.elapsed_ms = ms;
	}
	return f;
}

/* Every effect the core queued: its entries compared with the trace, its
 * synchronous requests answered from it. 0 when the run's entries end
 * before the core's (the run was cut short), else 1. */
static int effects(void)
{
	struct core_fx *fx;
	int cut = 0;
	while ((fx = core_next(R.core))) {
		if (!cut && fx->kind == CORE_EVENT && run_ended())
			cut = 1;
		if (!cut && fx->kind == CORE_EVENT)
			expect_event(fx->v, fx->id);
		else if (!cut && fx->kind == CORE_EXEC)
			answer_exec(R.core, fx->v);
		else if (!cut && fx->kind == CORE_RECALL)
			answer_recall(R.core, fx->v);
		else if (!cut && fx->kind == CORE_KEEP)
			answer_keep(R.core);
		else if (!cut && fx->kind == CORE_OUTPUTS)
			answer_outputs(R.core);
		core_fx_free(fx);
	}
	return !cut && (core_waiting(R.core) == CORE_WAIT_NONE || !run_ended());
}

/* Zero-call replies leave no entry: the soft verdict a loop's judges led
 * to holds their texts (the array-form mock's judge answers so). */
static void zero_call_judges(const json_t *e, int loop)
{
	const char *purpose;
	int judge_i, fed = 0;
	long ids[128];
	size_t n_ids = core_requests(R.core, ids, 128);
	for (size_t k = 0; k < n_ids && k < 128 && !fed; k++) {
		long id = ids[k];
		if (core_request_owner(R.core, id, &purpose, &judge_i) != loop || strcmp(purpose, "judge") != 0)
			continue;
		char name[16];
		snprintf(name, sizeof name, judge_i ? "reply%d" : "reply", judge_i + 1);
		size_t n;
		char *text = blob_of(e, name, &n);
		const char *judge = ndjson_str(json_array_get(json_object_get(data_of(e), "judgments"), (size_t)judge_i), "judge");
		json_t *reply = empty_reply(id, text != NULL, text, judge, text ? NULL : "no reply");
		free(text);
		const struct core_facts f = {0};
		core_model_reply(R.core, reply, &f);
		fed = 1;
	}
	if (!fed)
		diverged(e, "a soft verdict", sx("no judgment of loop %d in flight", loop));
}

/* The next reply the run served, as the trace shows it: 1; 2 when the
 * wait for one ended without it (the turns are over, as in sfma-plan's
 * drive); 0 when the run's entries end here. */
static int next_input(const struct manifest *m)
{
	if (run_ended())
		return 0;
	json_t *e = peek();
	const char *purpose;
	int judge_i;
	struct core_facts f = stop_facts(m);
	if (strcmp(kind_of(e), "call") == 0) {
		long id = (long)json_number_value(json_object_get(data_of(e), "request"));
		if (core_request_owner(R.core, id, &purpose, &judge_i) < 0)
			diverged(e, sx("a call of request %.0f", json_number_value(json_object_get(data_of(e), "request"))),
			         "a call of a request in flight");
		size_t n;
		core_model_reply(R.core, recorded_reply(id, &n), &f);
		return 1;
	}
	const char *tier = ndjson_str(data_of(e), "tier");
	if (strcmp(kind_of(e), "verdict") == 0 && tier && strcmp(tier, "soft") == 0) {
		zero_call_judges(e, loop_of(e));
		return 1;
	}
	if (strcmp(kind_of(e), "verdict") == 0 && tier && strcmp(tier, "criteria") == 0) {
		long ids[128];
		size_t n_ids = core_requests(R.core, ids, 128);
		for (size_t k = 0; k < n_ids && k < 128; k++)
			if (core_request_owner(R.core, ids[k], &purpose, &judge_i) == 0) {
				long id = ids[k];
				size_t n;
				char *text = blob_of(e, "reply", &n);
				core_model_reply(R.core, empty_reply(id, text != NULL, text, ndjson_str(data_of(e), "judge"), NULL), &f);
				free(text);
				return 1;
			}
	}
	if (strcmp(kind_of(e), "result") == 0) {
		const char *trigger = ndjson_str(data_of(e), "trigger"), *err = ndjson_str(data_of(e), "error");
		long work = core_request_in_flight(R.core);
		if (err && strncmp(err, "model: ", 7) == 0 && work) {
			core_model_reply(R.core, empty_reply(work, 0, NULL, NULL, err + 7), &f);
			return 1;
		}
		if (trigger && strcmp(trigger, "maxModelCalls") == 0 && work) {
			core_model_reply(R.core, empty_reply(work, 0, NULL, NULL, "model call budget spent"), &f);
			return 1;
		}
		const char *halt = ndjson_str(data_of(e), "halt");
		if (halt && !f.halt_signal && !(trigger && strcmp(trigger, "maxSeconds") == 0))
			diverged(e, sx("a halt by %s", trigger ? trigger : halt), sx("no halt by %s here", trigger ? trigger : halt));
		enum core_stop_why why = f.halt_signal ? CORE_STOP_SIGNAL
		                         : trigger && strcmp(trigger, "maxSeconds") == 0 ? CORE_STOP_TIMEOUT : CORE_STOP_FAILED;
		core_stop(R.core, why, err ? err : ndjson_str(data_of(e), "reason"), &f);
		return 2;
	}
	if (strcmp(kind_of(e), "compaction") == 0)
		diverged(e, "a compaction", "none (the request fits)");
	diverged(e, sx("a %s entry", kind_of(e)), "a model reply");
}

/* The run's turns, as sfma-plan's drive: dispatch, then the next reply.
 * 0 when the run was cut short. */
static int turns(const struct manifest *m)
{
	for (;;) {
		struct core_facts f = stop_facts(m);
		core_dispatch(R.core, &f);
		if (!effects())
			return 0;
		if (core_over(R.core) || !core_in_flight(R.core))
			return 1;
		const char *trigger = core_halt_trigger(R.core);
		if (core_verdict(R.core) && trigger && strncmp(trigger, "SIG", 3) == 0)
			return 1;
		int got = next_input(m);
		if (!got || !effects())
			return 0;
		if (got == 2)
			return 1;
	}
}

/* The close: the result and weight entries, the commit, the lifecycles and
 * the clock anchor, with the host facts they hold. 0 when cut short. */
static int close_run(const struct manifest *m)
{
	struct core_facts f = stop_facts(m);
	json_t *e;
	for (size_t i = 0; (e = peek_at(i)) && i < 2; i++)
		if (strcmp(kind_of(e), "weight") == 0)
			core_set_endpoints(R.core, data_of(e));
	core_finish(R.core, &f);
	if (!effects())
		return 0;
	struct core_close cl = {0};
	for (size_t i = 0; (e = peek_at(i)); i++) {
		const char *to = ndjson_str(data_of(e), "to");
		if (strcmp(kind_of(e), "store") == 0 && ndjson_str(data_of(e), "stage") && !strcmp(ndjson_str(data_of(e), "stage"), "commit"))
			cl.commit = data_of(e);
		else if (strcmp(kind_of(e), "lifecycle") == 0 && to && strcmp(to, "certified") == 0)
			cl.certified = 1;
		else if (strcmp(kind_of(e), "lifecycle") == 0 && to && strcmp(to, "demoted") == 0)
			cl.demoted = 1;
		else if (strcmp(kind_of(e), "lifecycle") != 0)
			break;
	}
	if (e && strcmp(kind_of(e), "clock-anchor") == 0)
		cl.wall_ms = (int64_t)json_number_value(json_object_get(data_of(e), "wallMs"));
	json_t *commit = cl.commit ? json_incref((json_t *)cl.commit) : NULL;
	cl.commit = commit;
	core_close(R.core, &cl);
	json_decref(commit);
	return effects();
}

/* What the run's first entries record of the host: what each process
 * had in force, the stores' profile (or why they failed), the inbox,
 * --task. */
static void begin_facts(struct core_begin *b, json_t *confined, json_t *stores, json_t *inbox, json_t *resets,
                        const char **task, const char **store_error)
{
	size_t i = 2;
	json_t *e;
	for (; (e = peek_at(i)) && strcmp(kind_of(e), "confinement") == 0; i++)
		json_array_append(confined, data_of(e));
	b->confinement = confined;
	/* an operator's endpoint reset since the run before */
	if ((e = peek_at(i)) && strcmp(kind_of(e), "weight") == 0 && json_is_object(json_object_get(data_of(e), "reset"))) {
		const char *name;
		json_t *r;
		json_object_foreach(json_object_get(data_of(e), "reset"), name, r)
			json_object_set_new(resets, name, json_pack("{s:O}", "reset", r));
		b->endpoints = resets;
		i++;
	}
	for (; (e = peek_at(i)) && strcmp(kind_of(e), "store") == 0 && loop_of(e) == 0; i++)
		json_array_append(stores, data_of(e));
	for (; (e = peek_at(i)) && strcmp(kind_of(e), "message") == 0 && !strcmp(ndjson_str(data_of(e), "dir") ? ndjson_str(data_of(e), "dir") : "", "in"); i++)
		json_array_append_new(inbox, json_pack("{s:O?, s:O?}", "file", json_object_get(data_of(e), "file"), "text",
		                                       json_object_get(data_of(e), "text")));
	if ((e = peek_at(i)) && strcmp(kind_of(e), "clarification") == 0 && ndjson_str(data_of(e), "source") &&
	    strcmp(ndjson_str(data_of(e), "source"), "--task") == 0)
		*task = ndjson_str(data_of(e), "text");
	*store_error = NULL;
	if (json_array_size(stores) == 0)
		for (i = 2; (e = peek_at(i)) && !run_starts_at(i); i++)
			if (is_result(e, "error") && ndjson_str(data_of(e), "error") &&
			    strncmp(ndjson_str(data_of(e), "error"), "memory store: ", 14) == 0) {
				*store_error = ndjson_str(data_of(e), "error") + 14;
				break;
			}
	b->stores = json_array_size(stores) || !*store_error ? stores : NULL;
	b->store_error = *store_error;
	b->inbox = inbox;
}

/* A pinned run's candidate: the latest adopted in the trace (memory.json
 * pins the candidate of the run that certified it), else the record's. */
static const json_t *pinned_candidate(void)
{
	const json_t *c = R.last_candidate ? R.last_candidate : json_object_get(R.record, "bootstrap");
	if (!json_is_object(c))
		incomplete("a pinned run whose candidate the trace does not hold");
	return c;
}

/* A run whose first call carries no evidence was made before evidence
 * existed (or by the earlier runner): it cannot be derived again. */
static void evidence_first(void)
{
	for (size_t i = 1;; i++) {
		json_t *e = peek_at(i);
		if (!e || run_starts_at(i))
			return;
		if (strcmp(kind_of(e), "call") != 0)
			continue;
		/* Only the last attempt of a request carries its evidence. */
		if (json_object_get(json_object_get(e, EVIDENCE_MEMBER), "message"))
			return;
		json_t *after = peek_at(i + 1);
		if (!after || strcmp(kind_of(after), "call") != 0)
			evidence_lost(e, "message");
	}
}

/* A run whose evidence stops part way could not store it (a full disk):
 * the planner then writes its entries without references, fails the run
 * and says why in its result - or the trace failed too, and the run was
 * cut short. The rest of the run is read to tell which; a run with no
 * evidence before this entry was made before evidence existed. */
_Noreturn void evidence_lost(const json_t *e, const char *member)
{
	long run = R.runs + 1;
	long long seq = seq_of(e);
	char kind[64], cause[400] = "";
	snprintf(kind, sizeof kind, "%s", kind_of(e));
	const char *m = sx("%s", member);
	int had = trace_evidence_count() > R.evidence_before, closed = 0;
	long long cause_seq = -1;
	/* Only read: the record is checked whole by sfma-verify all the same. */
	while (peek() && !run_ended()) {
		json_t *x = next();
		const char *err = is_result(x, "error") ? ndjson_str(data_of(x), "error") : NULL;
		/* a run that closed ends with its clock anchor */
		closed = strcmp(kind_of(x), "clock-anchor") == 0;
		if (err && strncmp(err, "evidence", 8) == 0) {
			cause_seq = seq_of(x);
			snprintf(cause, sizeof cause, "%s", err);
		}
	}
	const char *then = peek() ? sx("; --run %ld replays the next run", run + 1) : "";
	if (cause_seq >= 0)
		incomplete("run %ld, seq %lld (%s): no evidence.%s: the run could not store its evidence (seq %lld: %.300s)%s",
		           run, seq, kind, m, cause_seq, cause, then);
	if (had && !closed)
		incomplete("run %ld, seq %lld (%s): no evidence.%s: the run's evidence stops here and the run was cut short "
		           "(it could not store more)%s", run, seq, kind, m, then);
	if (had)
		incomplete("run %ld, seq %lld (%s): no evidence.%s, where the run's earlier entries have theirs%s", run, seq,
		           kind, m, then);
	incomplete("seq %lld (%s): no evidence.%s (a record made before evidence existed)", seq, kind, m);
}

static void replay_run(void)
{
	for (json_t *e; (e = peek()) && between_runs(e);)
		if (is_result(e, "interrupted"))
			interrupted();
		else
			next();
	R.evidence_before = trace_evidence_count();
	evidence_first();
	json_t *anchor = peek(), *life = peek_at(1);
	if (!anchor || strcmp(kind_of(anchor), "clock-anchor") != 0)
		diverged(anchor, anchor ? sx("a %s entry", kind_of(anchor)) : "no further entry", "the run's clock anchor");
	/* A run whose entries end with its clock anchor (its trace writer
	 * died right after it, the planner sealed what there was): cut short
	 * there, before anything it decided. */
	if (!life || run_starts_at(1)) {
		next();
		R.last_cut = 1;
		R.runs++;
		note_boundary(last_consumed());
		return;
	}
	const char *to = life ? ndjson_str(data_of(life), "to") : NULL;
	if (!life || strcmp(kind_of(life), "lifecycle") != 0 || !json_is_null(json_object_get(data_of(life), "from")) ||
	    !to || (strcmp(to, "probation") != 0 && strcmp(to, "pinned-replay") != 0))
		diverged(life, life ? sx("a %s entry", kind_of(life)) : "no further entry", "the run's first lifecycle");
	int pinned = strcmp(to, "pinned-replay") == 0;
	json_t *stores = json_array(), *inbox = json_array(), *resets = json_object(), *confined = json_array();
	struct core_begin b = {.anchor_seq = (double)seq_of(anchor), .pinned = pinned ? pinned_candidate() : NULL,
	                       .traceparent = ndjson_str(data_of(life), "traceparent")};
	const char *clarification = NULL, *store_error;
	begin_facts(&b, confined, stores, inbox, resets, &clarification, &store_error);
	json_t *call = prompt_call();
	const struct manifest *m = run_manifest(call);
	S.gate.m = m;
	const char *task = clarification ? clarification : m->task_statement;
	S.dry_run = run_dry(call, m, task, pinned);
	const struct core_config cfg = {.m = m, .dry_run = S.dry_run, .task = task, .clarification = clarification,
	                                .wire = wire_of_entry};
	core_free(R.core);
	R.core = core_new(&cfg);
	core_open(R.core, (int64_t)json_number_value(json_object_get(data_of(anchor), "wallMs")));
	/* The run's own opening anchor, which a cut-short check would take
	 * for the next run's. */
	struct core_fx *opening = core_next(R.core);
	expect_event(opening->v, opening->id);
	core_fx_free(opening);
	core_begin(R.core, &b);
	int whole = effects() && turns(m) && close_run(m);
	json_decref(confined);
	json_decref(stores);
	json_decref(inbox);
	json_decref(resets);
	const json_t *cand = core_candidate(R.core);
	if (cand && !pinned) {
		json_decref(R.last_candidate);
		R.last_candidate = json_deep_copy(cand);
	}
	R.last_cut = !whole;
	R.runs++;
	if (last_consumed())
		note_boundary(last_consumed());
}

/* A run not chosen with --run: read past, its end noted (an interrupted
 * run's record may name it) and its adopted candidate kept (a pinned run
 * starts with it), nothing derived. */
static void skip_run(void)
{
	for (json_t *e; (e = peek()) && between_runs(e);)
		if (is_result(e, "interrupted"))
			interrupted();
		else
			next();
	json_t *life = peek_at(1);
	const char *to = life ? ndjson_str(data_of(life), "to") : NULL;
	int pinned = to && strcmp(to, "pinned-replay") == 0;
	if (!next())
		return;
	while (!run_ended()) {
		json_t *e = next();
		if (!pinned && strcmp(kind_of(e), "candidate") == 0) {
			json_decref(R.last_candidate);
			R.last_candidate = json_deep_copy(data_of(e));
		}
	}
	R.runs++;
	note_boundary(last_consumed());
}

/* The runs in the trace, for a --run counted from the end: read through
 * once, then from the start again. */
static long count_runs(void)
{
	while (peek())
		skip_run();
	long n = R.runs;
	trace_close();
	trace_open(R.sfma_fd);
	R.runs = 0;
	free(R.ends);
	R.ends = NULL;
	R.n_ends = 0;
	json_decref(R.last_candidate);
	R.last_candidate = NULL;
	return n;
}

/* ---- the record ------------------------------------------------------------- */

/* The record's own run: its body must be the one the core derives, but
 * for what the host holds (the outputs as found, memory, the runner's
 * version). A run cut short claims no completion. */
static void check_record(void)
{
	json_t *last = last_consumed(), *rec = R.record;
	const char *rv = ndjson_str(rec, "verdict");
	if (R.last_cut) {
		if (rv && strcmp(rv, "completed") == 0)
			diverged(last, "record verdict completed", "a run cut short before its close");
		return;
	}
	const struct core_record_host h = {.outputs = json_object_get(rec, "outputs"),
	                                   .memory = json_object_get(rec, "memory"),
	                                   .runner_version = ndjson_str(rec, "runnerVersion") ? ndjson_str(rec, "runnerVersion") : ""};
	json_t *body = core_record(R.core, &h);
	if (!json_object_get(rec, "runnerVersion"))
		json_object_del(body, "runnerVersion");
	const char *key;
	json_t *v;
	/* Counts first, as a reader checks them; then every member. */
	static const char *const first[] = {"verdict", "turns", "modelCalls", "hardTierFailures", "usage", NULL};
	for (size_t i = 0; first[i]; i++) {
		json_t *has = json_object_get(rec, first[i]), *want = json_object_get(body, first[i]);
		if (!same_json(has, want)) {
			struct buf a = {0}, b = {0};
			canon_dump(has ? has : json_null(), &a, NULL);
			canon_dump(want, &b, NULL);
			const char *x = sx("record %s %.200s", first[i], a.p), *y = sx("%s %.200s", first[i], b.p);
			buf_free(&a);
			buf_free(&b);
			json_decref(body);
			diverged(last, x, y);
		}
	}
	json_object_foreach(body, key, v) {
		if (same_json(json_object_get(rec, key), v))
			continue;
		const char *x = sx("record %s that is not the derived one", key), *y = sx("the run's %s", key);
		json_decref(body);
		diverged(last, x, y);
	}
	json_object_foreach(rec, key, v) {
		if (strcmp(key, "integrity") == 0 || json_object_get(body, key))
			continue;
		const char *x = sx("record member %s", key);
		json_decref(body);
		diverged(last, x, "no such member");
	}
	json_decref(body);
}

static void load(const char *target)
{
	struct stat st;
	if (stat(target, &st) < 0)
		die("%s: %s", target, strerror(errno));
	char ws[PATH_MAX], record_path[PATH_MAX + 32];
	if (S_ISDIR(st.st_mode)) {
		snprintf(ws, sizeof ws, "%s", target);
		snprintf(record_path, sizeof record_path, "%s/.sfma/result.json", target);
	} else {
		/* WORKSPACE/.sfma/result.json */
		char copy[PATH_MAX];
		snprintf(record_path, sizeof record_path, "%s", target);
		snprintf(copy, sizeof copy, "%s", target);
		snprintf(ws, sizeof ws, "%s/..", dirname(copy));
	}
	struct sfma_err e;
	R.record = ndjson_load_at(AT_FDCWD, record_path, 1, 64u << 20, &e);
	if (!R.record || !json_is_object(R.record))
		incomplete("%s", R.record ? "the record is not an object" : e.text);
	struct reasons why = {0};
	R.record_m = manifest_from_json(json_object_get(R.record, "manifest"), &why);
	if (!R.record_m) {
		char first[300];
		snprintf(first, sizeof first, "%s", why.n ? why.items[0] : "invalid");
		reasons_free(&why);
		incomplete("the record's manifest does not load: %s", first);
	}
	reasons_free(&why);
	char sfma_dir[PATH_MAX + 8];
	snprintf(R.ws, sizeof R.ws, "%s", ws);
	snprintf(sfma_dir, sizeof sfma_dir, "%s/.sfma", ws);
	R.sfma_fd = open(sfma_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (R.sfma_fd < 0)
		die("%s: %s", sfma_dir, strerror(errno));
	S.store = evidence_open(R.sfma_fd, 0, &e);
	if (!S.store)
		die("%s", e.text);
	trace_open(R.sfma_fd);
}

/* The hard tier's view of a workspace with nothing in it: every decision
 * it makes there is one no host fact can change. */
static void open_empty_workspace(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(R.empty_dir, sizeof R.empty_dir, "%s/sfma-replay-XXXXXX", tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
	if (!mkdtemp(R.empty_dir)) {
		R.empty_dir[0] = '\0';
		die("mkdtemp: %s", strerror(errno));
	}
	S.gate.ws_fd = open(R.empty_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	S.gate.ws_real = R.empty_real = realpath(R.empty_dir, NULL);
	if (S.gate.ws_fd < 0 || !R.empty_real)
		die("%s: %s", R.empty_dir, strerror(errno));
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'},
		{"run", required_argument, NULL, 'r'}, {NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	long want = 0; /* the one run to replay: 1 the first, -1 the last; 0 all */
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == 'h')
			cli_help(usage_text);
		else if (c == 'V')
			cli_version();
		else if (c == 'r') {
			char *end;
			errno = 0;
			want = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || want == 0)
				cli_usage_error(usage_text, "--run: a run number (1 the first, -1 the last)");
		} else
			cli_bad_option(usage_text, c, argv);
	}
	if (argc - optind != 1)
		cli_usage_error(usage_text, "expected one WORKSPACE or RESULT.json");
	S.gate.ws_fd = -1;
	replay_cleanup = cleanup;
	replay_gate = verify_wait;
	verify_start(argv[optind]);
	load(argv[optind]);
	open_empty_workspace();
	/* sfma-verify is running, the record is open: from here on the
	 * replay reads the record and fills its empty workspace, nothing
	 * else (sfma(1), CONFINEMENT). */
	const char *const reads[] = { argv[optind], R.ws, NULL };
	const struct confine_places places = {.scratch = R.empty_dir};
	confine_self("sfma-replay", reads, &places);
	if (!peek())
		incomplete("the trace is empty");
	long chosen = want;
	if (want < 0) {
		long total = count_runs();
		chosen = total + 1 + want;
		if (chosen < 1)
			incomplete("no run %ld: the trace holds %ld", want, total);
	}
	while (peek())
		if (!chosen || R.runs + 1 == chosen)
			replay_run();
		else
			skip_run();
	if (chosen > R.runs)
		incomplete("no run %ld: the trace holds %ld", chosen, R.runs);
	/* The record is the last run's. */
	if (!chosen || chosen == R.runs)
		check_record();
	size_t n = trace_count();
	replay_gate = NULL;
	verify_wait();
	cleanup();
	if (chosen)
		printf("REPLAY_OK run=%ld runs=%ld entries=%zu\n", chosen, R.runs, n);
	else
		printf("REPLAY_OK runs=%ld entries=%zu\n", R.runs, n);
	return 0;
}
