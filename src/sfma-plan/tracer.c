/* tracer.c - the trace, written behind the run.
 *
 * An entry the run does not need back (trace_quiet) goes to a thread that
 * makes the blobs it names durable (evidence_sync: one fdatasync of the
 * evidence journal) and then hands it to sfma-chain, while the run goes
 * on: the next model request is out while the last verdict is being
 * appended. Nothing about durability is given up:
 *
 *   - a blob is durable before sfma-chain sees the entry naming it;
 *   - sfma-chain fdatasyncs every entry before it acknowledges it;
 *   - the run reads every acknowledgement (tracer_settle) before anything
 *     acts on the world - a command or a write goes to sfma-exec only once
 *     every entry before it is on disk - before an entry whose id it needs
 *     (trace waits for its own), and before the record is sealed.
 *
 * Entries reach sfma-chain in the order they were posted: one thread, one
 * queue. Acknowledgements are read by the run's own thread only. */
#include "plan.h"
#include "buf.h"
#include "canon.h"
#include "evidence.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Acknowledgements owed before the run settles of its own accord: each is
 * a whole entry echoed back, and sfma-chain stops reading once the pipe
 * holding them is full (64 KiB on Linux, pipe(7)). */
#define OWED_MAX 32

struct post {
	struct post *next;
	char *line;        /* the event, canonical, newline-terminated */
	char *bare;        /* the same without its evidence (NULL: it names none) */
	size_t len, bare_len;
};

/* What the run needs from an acknowledgement when it arrives. */
struct owed {
	int task_of_loop;  /* a task entry of loops[task_of_loop]; -1: not one */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t work, idle;
	pthread_t thread;
	int started;       /* the thread runs (else posts are written inline) */
	int stop, busy;
	struct post *head, *tail;
	int write_failed;  /* sfma-chain's input closed: nothing more reaches it */
	char sync_error[SFMA_ERR_MAX]; /* the first evidence_sync failure */
	int sync_reported;
	struct evidence_store *evidence;
	/* under the run's thread only */
	struct owed *owed;
	size_t n_owed, cap_owed;
} tq = {
	.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER,
};

/* Blobs first, then the entry. A store that cannot make them durable
 * fails the run (reported by the run's thread), and the entry goes
 * without its references: it must not name what may not be there. */
static void deliver(struct post *p)
{
	const char *line = p->line;
	size_t len = p->len;
	if (p->bare && tq.evidence) {
		struct sfma_err e;
		if (evidence_sync(tq.evidence, &e) < 0) {
			pthread_mutex_lock(&tq.lock);
			if (!tq.sync_error[0])
				snprintf(tq.sync_error, sizeof tq.sync_error, "%s", e.text);
			pthread_mutex_unlock(&tq.lock);
			line = p->bare;
			len = p->bare_len;
		}
	}
	pthread_mutex_lock(&tq.lock);
	int failed = tq.write_failed;
	pthread_mutex_unlock(&tq.lock);
	/* EPIPE when sfma-chain is gone (SIGPIPE is ignored in the planner);
	 * the run learns it from the acknowledgement that never comes. */
	if (!failed && write_all(stages[STAGE_CHAIN].to, line, len) < 0) {
		pthread_mutex_lock(&tq.lock);
		tq.write_failed = 1;
		pthread_mutex_unlock(&tq.lock);
	}
	free(p->line);
	free(p->bare);
	free(p);
}

static void *tracer_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&tq.lock);
	for (;;) {
		while (!tq.head && !tq.stop)
			pthread_cond_wait(&tq.work, &tq.lock);
		struct post *p = tq.head;
		if (!p)
			break;
		tq.head = p->next;
		if (!tq.head)
			tq.tail = NULL;
		tq.busy = 1;
		pthread_mutex_unlock(&tq.lock);
		deliver(p);
		pthread_mutex_lock(&tq.lock);
		tq.busy = 0;
		if (!tq.head)
			pthread_cond_broadcast(&tq.idle);
	}
	pthread_mutex_unlock(&tq.lock);
	return NULL;
}

static char *dump_line(const json_t *ev, size_t *len)
{
	struct buf b = {0};
	if (canon_dump(ev, &b, NULL) < 0) {
		buf_free(&b);
		return NULL;
	}
	buf_addc(&b, '\n');
	*len = b.len;
	return b.p;
}

/* A failed evidence_sync, said once by the run's thread. */
static void report_sync_failure(struct run *r)
{
	pthread_mutex_lock(&tq.lock);
	char why[SFMA_ERR_MAX];
	int report = tq.sync_error[0] && !tq.sync_reported;
	if (report) {
		snprintf(why, sizeof why, "%s", tq.sync_error);
		tq.sync_reported = 1;
	}
	pthread_mutex_unlock(&tq.lock);
	if (!report)
		return;
	/* the store's messages name it already ("evidence ...") */
	const char *prefix = strncmp(why, "evidence", 8) == 0 ? "" : "evidence: ";
	end_with(r, "failed", "%s%s", prefix, why);
	progress(r, "%s%s", prefix, why);
}

int tracer_post(struct run *r, const json_t *ev, int waiting)
{
	report_sync_failure(r);
	struct post *p = calloc(1, sizeof *p);
	if (!p || !(p->line = dump_line(ev, &p->len)))
		die("out of memory");
	if (json_object_get(ev, EVIDENCE_MEMBER)) {
		json_t *bare = json_copy((json_t *)ev);
		if (!bare)
			die("out of memory");
		json_object_del(bare, EVIDENCE_MEMBER);
		p->bare = dump_line(bare, &p->bare_len);
		json_decref(bare);
		if (!p->bare)
			die("out of memory");
	}
	if (tq.n_owed == tq.cap_owed) {
		size_t cap = tq.cap_owed ? 2 * tq.cap_owed : 16;
		struct owed *o = realloc(tq.owed, cap * sizeof *o);
		if (!o)
			die("out of memory");
		tq.owed = o;
		tq.cap_owed = cap;
	}
	const char *kind = json_string_value(json_object_get(ev, "kind"));
	tq.owed[tq.n_owed++] = (struct owed){
		.task_of_loop = r->loops && kind && strcmp(kind, "task") == 0 ? r->cur : -1,
	};
	tq.evidence = r->evidence;
	/* Only an entry whose blobs still need their fdatasync, and that the
	 * run does not wait for, goes to the thread: anything else costs a
	 * write to a pipe, and a hand-over would cost more than it saves. */
	pthread_mutex_lock(&tq.lock);
	int idle = !tq.head && !tq.busy;
	pthread_mutex_unlock(&tq.lock);
	int slow = p->bare && tq.evidence && evidence_sync_pending(tq.evidence);
	if (idle && slow && !waiting && !tq.started && !tq.stop) {
		/* Started at the first such entry; a thread that cannot start
		 * leaves the run writing its entries itself. */
		if (pthread_create(&tq.thread, NULL, tracer_main, NULL) == 0)
			tq.started = 1;
		else
			tq.stop = 1;
	}
	if (idle && (!slow || waiting || !tq.started)) {
		deliver(p);
	} else {
		pthread_mutex_lock(&tq.lock);
		if (tq.tail)
			tq.tail->next = p;
		else
			tq.head = p;
		tq.tail = p;
		pthread_cond_signal(&tq.work);
		pthread_mutex_unlock(&tq.lock);
	}
	if (tq.n_owed >= OWED_MAX)
		return tracer_settle(r, NULL);
	return 0;
}

/* One acknowledgement: the entry sfma-chain appended. */
static void take_ack(struct run *r, const struct owed *o, json_t *entry)
{
	double seq = json_number_value(json_object_get(entry, "seq"));
	if (r->first_seq == 0)
		r->first_seq = seq;
	r->last_seq = seq;
	/* The entries of a loop's task, which its soft verdict refers to. */
	if (o->task_of_loop >= 0 && r->loops && o->task_of_loop < r->n_loops && entry_id(entry))
		json_array_append_new(r->loops[o->task_of_loop].entries, json_string(entry_id(entry)));
}

int tracer_settle(struct run *r, json_t **last)
{
	if (last)
		*last = NULL;
	pthread_mutex_lock(&tq.lock);
	while (tq.head || tq.busy)
		pthread_cond_wait(&tq.idle, &tq.lock);
	pthread_mutex_unlock(&tq.lock);
	report_sync_failure(r);
	/* The chain's answers are read whatever other stages do: an entry it
	 * has appended is part of the run, and a reply never read would
	 * kill it with SIGPIPE. */
	static const struct wait_opts chain_wait = {0};
	size_t i = 0;
	int rc = 0;
	for (; i < tq.n_owed; i++) {
		enum wait_why why;
		struct sfma_err e = {""};
		json_t *entry = r->chain_alive ? stage_wait(STAGE_CHAIN, &chain_wait, &why, &e) : NULL;
		if (!entry) {
			if (r->chain_alive && !r->error[0])
				snprintf(r->error, sizeof r->error, "trace: %s", e.text);
			r->chain_alive = 0;
			rc = -1;
			break;
		}
		take_ack(r, &tq.owed[i], entry);
		if (last && i + 1 == tq.n_owed)
			*last = entry;
		else
			json_decref(entry);
	}
	tq.n_owed = 0;
	return rc;
}

void tracer_stop(struct run *r)
{
	if (r->chain_alive)
		tracer_settle(r, NULL);
	pthread_mutex_lock(&tq.lock);
	tq.stop = 1;
	pthread_cond_signal(&tq.work);
	pthread_mutex_unlock(&tq.lock);
	if (tq.started)
		pthread_join(tq.thread, NULL);
	tq.started = 0;
	/* What the thread never delivered (a run that stops on a dead chain). */
	while (tq.head) {
		struct post *p = tq.head;
		tq.head = p->next;
		free(p->line);
		free(p->bare);
		free(p);
	}
	tq.tail = NULL;
	free(tq.owed);
	tq.owed = NULL;
	tq.n_owed = tq.cap_owed = 0;
	tq.evidence = NULL;
}
