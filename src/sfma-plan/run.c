/* run.c - one run, from its workspace to its seal.
 *
 * The run's frame: the workspace and its lock, the trace (every event goes
 * through sfma-chain), the lifecycle, the verdict, and at the end the
 * record, sealed by sfma-seal, and the summary line. turn.c fills in the
 * middle. */
#include "plan.h"
#include "buf.h"
#include "canon.h"
#include "cli.h"
#include "clock.h"
#include "evidence.h"
#include "sha.h"
#include "utf8.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

char *path_join(char out[PATH_MAX], const char *dir, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
	if (n < 0 || n >= PATH_MAX)
		die("%s/%s: path too long (at most %d bytes)", dir, name, PATH_MAX - 1);
	return out;
}

void run_init(struct run *r, struct manifest *m, int apply, const char *task, int progress_wanted)
{
	*r = (struct run){0};
	r->m = m;
	r->dry_run = m->dry_run_default && !apply;
	r->clarification = task;
	r->task = task ? task : m->task_statement;
	r->progress = progress_wanted || isatty(2);
	/* Budgets run on the monotonic clock: setting the date can neither
	 * stretch nor cut them. */
	r->start_mono = mono_ms();
	r->deadline_mono = r->start_mono + m->max_seconds * 1000;
	r->chain_alive = 1;
	r->lock_fd = -1;
	r->lifecycle = json_array();
	r->messages = json_array();
	r->message_refs = json_array();
	r->candidate_msg = -1;
	r->mutation_refs = json_array();
	r->written = json_object();
}

int64_t deadline_wall_ms(const struct run *r)
{
	return wall_ms() + (r->deadline_mono - mono_ms());
}

/* ---- the workspace ------------------------------------------------------- */

/* The workspace is created only inside a directory that exists: a typo in
 * a manifest must not build a tree of directories (as root, anywhere). */
static void make_workspace(const char *ws)
{
	if (mkdir(ws, 0755) == 0 || errno == EEXIST)
		return;
	if (errno != ENOENT)
		die("workspace %s: %s", ws, strerror(errno));
	char parent[PATH_MAX];
	snprintf(parent, sizeof parent, "%s", ws); /* fits: the manifest bounds it */
	size_t n = strlen(parent);
	while (n > 1 && parent[n - 1] == '/')
		parent[--n] = '\0';
	char *slash = strrchr(parent, '/');
	slash[slash == parent] = '\0';
	die("workspace %s: parent directory %s does not exist; create it first (nothing was created)", ws,
	    parent);
}

void run_open_workspace(struct run *r)
{
	make_workspace(r->m->workspace_path);
	path_join(r->sfma_dir, r->m->workspace_path, ".sfma");
	if (mkdir(r->sfma_dir, 0755) < 0 && errno != EEXIST)
		die("%s: %s", r->sfma_dir, strerror(errno));
	/* Locked for this run alone: flock on the .sfma directory itself, so
	 * a second run fails at once and creates nothing. */
	r->lock_fd = open(r->sfma_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (r->lock_fd < 0)
		die("%s: %s", r->sfma_dir, strerror(errno));
	if (flock(r->lock_fd, LOCK_EX | LOCK_NB) < 0)
		die("workspace busy: another sfma run holds %s", r->sfma_dir);
	/* The mailbox exists from the first run on, so the operator finds
	 * where to write. mkdirat never follows a link planted there. */
	static const char *const mailbox[] = {"inbox", "outbox"};
	for (int i = 0; i < 2; i++)
		if (mkdirat(r->lock_fd, mailbox[i], 0755) < 0 && errno != EEXIST)
			die("%s/%s: %s", r->sfma_dir, mailbox[i], strerror(errno));
	/* The evidence store, once for the run. A store that cannot be opened
	 * fails the run at its first blob, in the record like any other
	 * evidence failure. */
	struct sfma_err ee;
	r->evidence = evidence_open(r->lock_fd, 1, &ee);
	if (!r->evidence)
		snprintf(r->evidence_error, sizeof r->evidence_error, "%s", ee.text);
	char mem_path[PATH_MAX];
	struct sfma_err e;
	if (memory_load(&r->mem, path_join(mem_path, r->sfma_dir, "memory.json"), &e) < 0)
		die("%s", e.text);
	json_t *known = json_object_get(r->mem.doc, "endpoints");
	if (json_object_size(known))
		r->endpoints = json_incref(known);
}

/* ---- the trace ------------------------------------------------------------ */

/* The event sfma-chain makes an entry of; consumes data, evidence, refs. */
static json_t *event(const char *kind, json_t *data, json_t *evidence, int loop, json_t *refs, const char *cls)
{
	json_t *ev = json_pack("{s:s, s:o, s:i}", "kind", kind, "data", data, "loop", loop);
	/* sfma-chain copies the member into the entry as it is. */
	if (evidence)
		json_object_set_new(ev, EVIDENCE_MEMBER, evidence);
	if (refs)
		json_object_set_new(ev, "refs", refs);
	if (cls)
		json_object_set_new(ev, "class", json_string(cls));
	return ev;
}

/* Every blob the entry names is durable before the entry exists: the
 * tracer syncs the store's journal before it hands the entry on
 * (tracer.c). */
static json_t *append(struct run *r, const char *kind, json_t *data, json_t *evidence, int loop, json_t *refs,
                      const char *cls, int wait)
{
	if (!r->chain_alive) {
		json_decref(data);
		json_decref(evidence);
		json_decref(refs);
		return NULL;
	}
	json_t *ev = event(kind, data, evidence, loop, refs, cls);
	/* An entry whose id is known in advance is not waited for: its
	 * acknowledgement is checked against that id when it is read. */
	json_t *entry = NULL;
	tracer_post(r, ev, wait ? &entry : NULL);
	json_decref(ev);
	if (wait && !entry)
		tracer_settle(r, &entry);
	return entry;
}

json_t *trace(struct run *r, const char *kind, json_t *data, int loop, json_t *refs, const char *cls)
{
	return append(r, kind, data, NULL, loop, refs, cls, 1);
}

json_t *trace_ev(struct run *r, const char *kind, json_t *data, json_t *evidence, int loop, json_t *refs,
                 const char *cls)
{
	return append(r, kind, data, evidence, loop, refs, cls, 1);
}

void trace_quiet(struct run *r, const char *kind, json_t *data, int loop, json_t *refs)
{
	append(r, kind, data, NULL, loop, refs, NULL, 0);
}

void trace_quiet_ev(struct run *r, const char *kind, json_t *data, json_t *evidence, int loop, json_t *refs)
{
	append(r, kind, data, evidence, loop, refs, NULL, 0);
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
	            json_pack("{s:f, s:s}", "wallMs", (double)wall_ms(), "source", "system-wall"), 0, NULL);
}

/* ---- verdicts and progress ----------------------------------------------- */

static void set_error(struct run *r, const char *fmt, va_list ap)
{
	if (fmt && !r->error[0])
		vsnprintf(r->error, sizeof r->error, fmt, ap);
}

void end_with(struct run *r, const char *verdict, const char *fmt, ...)
{
	va_list ap;
	r->verdict = verdict;
	va_start(ap, fmt);
	set_error(r, fmt, ap);
	va_end(ap);
}

void end_halted(struct run *r, const char *verdict, const char *trigger, const char *fmt, ...)
{
	va_list ap;
	r->verdict = verdict;
	r->halt_trigger = trigger;
	va_start(ap, fmt);
	set_error(r, fmt, ap);
	va_end(ap);
}

json_t *evidence(struct run *r, const void *data, size_t n)
{
#ifdef SFMA_BENCH_NO_EVIDENCE
	/* Only for tests/bench/evidence.sh, which measures what evidence costs
	 * against a build without it; never in a built program. */
	(void)r, (void)data, (void)n;
	return NULL;
#endif
	struct sfma_err e;
	json_t *ref = NULL;
	if (!r->evidence)
		err_set(&e, "%s", r->evidence_error);
	else
		ref = evidence_put_nosync(r->evidence, data, n, &e); /* synced by the tracer */
	if (!ref) {
		/* the store's messages name it already ("evidence ...") */
		const char *why = strncmp(e.text, "evidence", 8) == 0 ? "" : "evidence: ";
		end_with(r, "failed", "%s%s", why, e.text);
		progress(r, "%s%s", why, e.text);
	}
	return ref;
}

void attach_evidence(json_t **evidence, const char *name, json_t *ref)
{
	if (!ref)
		return;
	if (!*evidence)
		*evidence = json_object();
	json_object_set_new(*evidence, name, ref);
}

void refused(struct run *r, const char *reason)
{
	if (r->loops)
		r->loops[r->cur].hard_failures++;
	if (r->hard_failures++ == 0)
		snprintf(r->first_refusal, sizeof r->first_refusal, "%s", reason ? reason : "refused");
}

/* Model text reaches the operator's terminal here: control bytes (C0, DEL,
 * C1), bidi overrides and invalid UTF-8 are shown as \xNN, never sent. */
static void put_safely(const char *s, FILE *out)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	for (size_t i = 0; i < n;) {
		size_t len = p[i] < 0x80 ? 1 : utf8_seq(p + i, n - i);
		unsigned cp = p[i];
		if (len == 2)
			cp = (unsigned)(p[i] & 0x1f) << 6 | (p[i + 1] & 0x3f);
		else if (len == 3)
			cp = (unsigned)(p[i] & 0x0f) << 12 | (unsigned)(p[i + 1] & 0x3f) << 6 | (p[i + 2] & 0x3f);
		int unsafe = len == 0 || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) ||
		             (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
		if (len == 0)
			len = 1;
		for (size_t k = 0; k < len; k++)
			if (unsafe)
				fprintf(out, "\\x%02x", p[i + k]);
			else
				fputc(p[i + k], out);
		i += len;
	}
}

void progress(struct run *r, const char *fmt, ...)
{
	if (!r->progress)
		return;
	char text[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	long long ms = (long long)(mono_ms() - r->start_mono);
	fprintf(stderr, "%s: +%lld.%03llds turn %ld: ", progname(), ms / 1000, ms % 1000, r->turns);
	put_safely(text, stderr);
	fputc('\n', stderr);
	fflush(stderr);
}

/* ---- the start -------------------------------------------------------------- */

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
	struct buf text = {0};
	buf_adds(&text, "");
	int dfd = openat(r->lock_fd, "inbox", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
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

/* Long-term memory: the containment guards run before any git command; a
 * failed guard ends the run before anything is committed anywhere. */
static void open_stores(struct run *r)
{
	struct sfma_err e;
	if (store_open(&r->store, r->sfma_dir, &e) < 0) {
		end_with(r, "failed", "memory store: %s", e.text);
		return;
	}
	json_t *git_entry, *placement;
	r->store_ok = 1;
	store_profile(&r->store, &git_entry, &placement);
	trace_quiet(r, "store", git_entry, 0, NULL);
	trace_quiet(r, "store", placement, 0, NULL);
}

int run_begin(struct run *r)
{
	/* A broken chain stops everything here: sfma-chain refuses to append
	 * and says why. An interrupted run's unsealed entries are recorded
	 * first, so that the record this run seals says what happened. */
	record_interrupted_run(r);
	if (!r->chain_alive) {
		warnx("%s; nothing was appended", r->error);
		return -2;
	}
	clock_anchor(r);
	/* The first entry is waited for: a chain that refuses it ends the
	 * run before anything else happens. */
	tracer_settle(r, NULL);
	if (!r->chain_alive)
		return -1;
	json_t *pinned = memory_pinned(&r->mem);
	r->pinned_run = pinned != NULL;
	if (pinned)
		r->candidate = json_incref(json_object_get(pinned, "candidate"));
	lifecycle(r, r->pinned_run ? "pinned-replay" : "probation");
	open_stores(r);
	r->inbox = consume_inbox(r);
	if (r->clarification)
		trace_quiet(r, "clarification", json_pack("{s:s, s:s}", "source", "--task", "text", r->clarification),
		            0, NULL);
	return 0;
}

/* ---- the record ------------------------------------------------------------ */

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
			char full[PATH_MAX], hex[65];
			int fd = open(path_join(full, r->m->workspace_path, p),
			              O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
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
	/* Filled by the criteria judgment at the end of the work; null
	 * where the run never came to it. */
	if (r->criteria)
		json_array_extend(criteria, r->criteria);
	else
		json_array_foreach(r->candidate ? json_object_get(r->candidate, "successCriteria") : NULL, i, c)
			json_array_append_new(criteria, json_pack("{s:O, s:n, s:[]}", "criterion", c, "pass", "evidence"));
	json_t *body = json_object();
	json_object_set(body, "manifest", r->m->json);
	json_object_set_new(body, "genesisVersion", json_string(GENESIS_VERSION));
	/* Which runner made the record; covered by resultSha256 like every member. */
	json_object_set_new(body, "runnerVersion", json_string(sfma_version()));
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
	/* Tokens as the providers reported them, summed over the call entries. */
	json_object_set_new(body, "usage", usage_json(&r->usage));
	json_t *budget = json_pack("{s:I, s:I, s:I, s:I}",
	                           "maxModelCalls", (json_int_t)r->m->max_model_calls,
	                           "maxSeconds", (json_int_t)r->m->max_seconds,
	                           "maxLoops", (json_int_t)r->m->max_loops,
	                           "maxPendingTasks", (json_int_t)r->m->max_pending_tasks);
	if (r->m->max_tokens > 0)
		json_object_set_new(budget, "maxTokens", json_integer(r->m->max_tokens));
	json_object_set_new(body, "budget", budget);
	json_object_set_new(body, "hardTierFailures", json_integer(r->hard_failures));
	/* What the model said it did: the done summary, or null without one. */
	json_object_set(body, "summary", r->summary ? r->summary : json_null());
	json_object_set_new(body, "verdict", json_string(r->verdict));
	if (r->error[0] && strcmp(r->verdict, "completed") != 0)
		json_object_set_new(body, "error", json_string(r->error));
	return body;
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

/* Close the run in the trace and in memory.json. */
static void finish(struct run *r)
{
	if (strcmp(r->verdict, "completed") != 0) {
		int halt = strncmp(r->verdict, "halted", 6) == 0;
		json_t *data = json_pack("{s:s}", halt ? "halt" : "error", halt ? r->verdict : r->error);
		if (halt && r->halt_trigger)
			json_object_set_new(data, "trigger", json_string(r->halt_trigger));
		if (halt && r->error[0])
			json_object_set_new(data, "reason", json_string(r->error));
		/* The host fact a time-budget halt rests on, which a replay takes
		 * from here, never from a clock: how long the run had taken. */
		if (halt && r->halt_trigger && strcmp(r->halt_trigger, "maxSeconds") == 0)
			json_object_set_new(data, "elapsedMs", json_integer((json_int_t)(mono_ms() - r->start_mono)));
		/* A request the stop interrupted: its message went out, and no
		 * call entry reports it. */
		json_t *evidence = NULL;
		if (r->message_sent && r->message_ref) {
			attach_evidence(&evidence, "message", json_incref(r->message_ref));
			if (r->prompt_ref)
				attach_evidence(&evidence, "prompt", json_incref(r->prompt_ref));
		}
		trace_quiet_ev(r, "result", data, evidence, 0, NULL);
	}
	if (r->endpoints)
		trace_quiet(r, "weight", json_deep_copy(r->endpoints), 0, NULL);

	char at[ISO8601_LEN];
	json_t *summary = json_pack("{s:s, s:s, s:I, s:I, s:I, s:b}", "at", iso8601_utc(wall_ms(), at),
	                            "verdict", r->verdict, "turns", (json_int_t)r->turns,
	                            "modelCalls", (json_int_t)r->model_calls,
	                            "hardTierFailures", (json_int_t)r->hard_failures, "dryRun", r->dry_run);
	json_object_set_new(summary, "summary", r->summary ? memory_clip(r->summary) : json_null());
	if (r->soft_judged)
		json_object_set_new(summary, "soft", json_pack("{s:I, s:I}", "judged", (json_int_t)r->soft_judged,
		                                              "passed", (json_int_t)r->soft_passed));
	int certified, demoted;
	memory_record_run(&r->mem, r->m, summary, r->candidate, r->pinned_run, &certified, &demoted);
	json_decref(summary);
	if (r->endpoints)
		json_object_set(r->mem.doc, "endpoints", r->endpoints);
	char mem_path[PATH_MAX];
	struct sfma_err e;
	if (memory_save(&r->mem, path_join(mem_path, r->sfma_dir, "memory.json"), &e) < 0)
		warnx("memory.json: %s", e.text);
	commit_memory(r);
	if (certified)
		lifecycle(r, "certified");
	if (demoted)
		lifecycle(r, "demoted");
	lifecycle(r, r->verdict);
	clock_anchor(r);
}

/* Hand the body to sfma-seal and wait for its integrity line. 0, or -1
 * with e saying why there is no record. */
static int seal(json_t *body, struct sfma_err *e)
{
	static const struct wait_opts seal_wait = {0};
	enum wait_why why;
	json_t *integrity = NULL;
	if (stage_send(STAGE_SEAL, body) < 0)
		return err_set(e, "stage sfma-seal died");
	stage_close_input(STAGE_SEAL);
	if (!(integrity = stage_wait(STAGE_SEAL, &seal_wait, &why, e)))
		return -1;
	json_decref(integrity);
	return 0;
}

/* The verdict's cause, on stderr: the run's error, and the hard tier's
 * refusals when there were any and the error does not already say so. */
static void report_failure(struct run *r)
{
	if (!r->hard_failures || strstr(r->error, "refused by the hard tier")) {
		warnx("%s: %s", r->verdict, r->error);
		return;
	}
	warnx("%s: %s; %ld call%s refused by the hard tier (the first: %s)", r->verdict, r->error,
	      r->hard_failures, r->hard_failures == 1 ? " was" : "s were", r->first_refusal);
}

struct finishing {
	struct evidence_store *store;
	int failed;
	struct sfma_err e;
};

static void *finish_evidence(void *arg)
{
	struct finishing *f = arg;
	f->failed = f->store && evidence_finish(f->store, &f->e) < 0;
	return NULL;
}

int run_end(struct run *r)
{
	if (!r->verdict)
		end_with(r, "failed", "run ended without a verdict");
	tracer_settle(r, NULL);
	if (!r->chain_alive && strcmp(r->verdict, "completed") == 0)
		end_with(r, "failed", "trace writer died");
	finish(r);
	/* Every entry acknowledged, on disk, before the record commits to
	 * the trace. */
	tracer_stop(r);
	/* Every entry is appended: the blobs go under their own names, and
	 * the journal that made them durable goes - while sfma-seal works:
	 * the journal keeps every blob durable and readable until then, so
	 * the record does not wait for the filing. */
	struct finishing fin = {.store = r->evidence};
	pthread_t finisher;
	int beside = r->evidence && pthread_create(&finisher, NULL, finish_evidence, &fin) == 0;
	if (!beside)
		finish_evidence(&fin);
	stage_close_input(STAGE_CHAIN);
	stage_close_input(STAGE_MODEL);
	stage_close_input(STAGE_EXEC);
	json_t *body = result_body(r);
	struct sfma_err e;
	int sealed = seal(body, &e);
	json_decref(body);
	if (beside)
		pthread_join(finisher, NULL);
	if (fin.failed)
		warnx("evidence: %s (the blobs stay in .sfma/evidence/journal, durable; the next run files them)",
		      fin.e.text);

	int completed = strcmp(r->verdict, "completed") == 0;
	if (!completed && r->error[0])
		report_failure(r);
	if (sealed < 0) {
		/* No summary line: it would name a record that does not exist. */
		warnx("the run was not sealed (%s): no result record was written", e.text);
	} else {
		if (r->dry_run)
			warnx("dry run: nothing was applied (writes were recorded, commands not run); "
			      "run again with --apply to apply");
		char verdict_uc[64];
		size_t k = 0;
		for (; r->verdict[k] && k < sizeof verdict_uc - 1; k++)
			verdict_uc[k] = (char)toupper((unsigned char)r->verdict[k]);
		verdict_uc[k] = '\0';
		printf("%s turns=%ld dryRun=%s record=%s/.sfma/result.json\n", verdict_uc, r->turns,
		       r->dry_run ? "true" : "false", r->m->workspace);
		fflush(stdout);
	}
	int status = sealed == 0 && completed ? 0 : 1;
	run_free(r);
	return status;
}

void run_free(struct run *r)
{
	free(r->system);
	free(r->inbox);
	json_decref(r->candidate);
	json_decref(r->lifecycle);
	json_decref(r->messages);
	json_decref(r->message_refs);
	json_decref(r->native_calls);
	json_decref(r->tool_defs);
	json_decref(r->mutation_refs);
	json_decref(r->written);
	json_decref(r->endpoints);
	json_decref(r->prompt_ref);
	json_decref(r->message_ref);
	json_decref(r->summary);
	loops_free(r);
	tracer_stop(r);
	memory_free(&r->mem);
	store_close(&r->store);
	manifest_free(r->m);
	for (int s = 0; s < STAGE_COUNT; s++)
		lr_free(&stages[s].reader);
	evidence_close(r->evidence);
	if (r->lock_fd >= 0)
		close(r->lock_fd);
	*r = (struct run){.lock_fd = -1};
}
