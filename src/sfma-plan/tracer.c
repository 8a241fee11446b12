/* tracer.c - the trace, written behind the run.
 *
 * Entries go to sfma-chain while the run goes on: the next model request
 * is out while the last verdict is being appended. One that names new
 * blobs goes through a thread that first makes them durable
 * (evidence_sync: one fdatasync of the evidence journal for a batch).
 * Nothing about durability is given up:
 *
 *   - a blob is durable before sfma-chain sees the entry naming it;
 *   - sfma-chain fdatasyncs every entry before it acknowledges it;
 *   - the run reads every acknowledgement (tracer_settle) before anything
 *     acts on the world - a command, a write or a message goes to
 *     sfma-exec only once every entry before it is on disk - and before
 *     the record is sealed.
 *
 * Entries reach sfma-chain in the order they were posted: one thread, one
 * queue. Acknowledgements are read by the run's own thread only.
 *
 * An entry's id is known before its acknowledgement: sfma-chain gives each
 * event the seq after the last (sfma-chain(1)), so once the run's first
 * entry is acknowledged the next is last + 1, and so on in posting order.
 * The core goes on with the id it predicted (a task's id for its verdict,
 * its seq for sfma-exec) and the poster says which id each entry must
 * get; every acknowledgement is checked against it: an entry appended
 * under another id (an event the run never posted, one lost) ends the
 * run, since what it referred to would be wrong. */
#include "plan.h"
#include "buf.h"
#include "canon.h"
#include "chain.h"
#include "evidence.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* What may be owed before the run settles of its own accord. Each
 * acknowledgement is the whole entry echoed back, and sfma-chain stops
 * reading events once the pipe holding its acknowledgements is full
 * (64 KiB on Linux, pipe(7)), while the run's thread stops reading
 * acknowledgements as it writes an event: with less than half of that
 * owed, neither pipe fills. An acknowledgement is the event and at most
 * ACK_EXTRA bytes more (seq, id, anchor, prevHash, hash). */
#define OWED_MAX 64
#define OWED_BYTES_MAX (32 << 10)
#define ACK_EXTRA 256

struct post {
	struct post *next;
	char *line;        /* the event, canonical, newline-terminated */
	char *bare;        /* the same without its evidence (NULL: it names none) */
	size_t len, bare_len;
};

/* An acknowledgement still to be read. */
struct owed {
	char id[CHAIN_ID_MAX]; /* the id it must have ("" before the first ack) */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t work, idle;
	pthread_t thread;
	int started;       /* the thread runs (else posts are written inline) */
	int stop, busy;
	int flush;         /* the run settles: no commit window */
	struct post *head, *tail;
	size_t queued;     /* posts in the queue */
	int write_failed;  /* sfma-chain's input closed: nothing more reaches it */
	char sync_error[SFMA_ERR_MAX]; /* the first evidence_sync failure */
	int sync_reported;
	struct evidence_store *evidence;
	/* under the run's thread only */
	struct owed *owed;
	size_t n_owed, cap_owed;
	size_t owed_bytes;
	int gone;          /* the trace refused an entry, or sfma-chain is gone */
	char error[SFMA_ERR_MAX];
} tq = {
	.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER,
};

static void free_posts(struct post *list)
{
	while (list) {
		struct post *p = list;
		list = p->next;
		free(p->line);
		free(p->bare);
		free(p);
	}
}

/* Blobs first, then the entries: posts taken from the queue together
 * share one evidence_sync (it covers every blob appended before it
 * starts, and each post's blobs were appended before it was posted) and
 * reach sfma-chain in one write, which it appends under one fdatasync. A
 * store that cannot make them durable fails the run (reported by the
 * run's thread), and the entries go without their references: they must
 * not name what may not be there. */
static void deliver(struct post *list)
{
	int blobs = 0, bare = 0;
	for (struct post *p = list; p; p = p->next)
		blobs |= p->bare != NULL;
	if (blobs && tq.evidence) {
		struct sfma_err e;
		if (evidence_sync(tq.evidence, &e) < 0) {
			pthread_mutex_lock(&tq.lock);
			if (!tq.sync_error[0])
				snprintf(tq.sync_error, sizeof tq.sync_error, "%s", e.text);
			pthread_mutex_unlock(&tq.lock);
			bare = 1;
		}
	}
	struct buf out = {0};
	for (struct post *p = list; p; p = p->next) {
		if (bare && p->bare)
			buf_add(&out, p->bare, p->bare_len);
		else
			buf_add(&out, p->line, p->len);
	}
	pthread_mutex_lock(&tq.lock);
	int failed = tq.write_failed;
	pthread_mutex_unlock(&tq.lock);
	/* EPIPE when sfma-chain is gone (SIGPIPE is ignored in the planner);
	 * the run learns it from the acknowledgement that never comes. */
	if (!failed && write_all(stages[STAGE_CHAIN].to, out.p, out.len) < 0) {
		pthread_mutex_lock(&tq.lock);
		tq.write_failed = 1;
		pthread_mutex_unlock(&tq.lock);
	}
	buf_free(&out);
	free_posts(list);
}

/* When the first post of a batch has waited COMMIT_DELAY_US, or
 * COMMIT_BATCH posts are queued, or the run settles: a batch shares one
 * journal fdatasync and one of sfma-chain's, and nothing waits on it in
 * the meantime (a settle takes it at once). */
#define COMMIT_DELAY_US 2000
#define COMMIT_BATCH 16

static void *tracer_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&tq.lock);
	for (;;) {
		while (!tq.head && !tq.stop)
			pthread_cond_wait(&tq.work, &tq.lock);
		if (tq.head && !tq.stop && !tq.flush && tq.queued < COMMIT_BATCH) {
			struct timespec until;
			clock_gettime(CLOCK_MONOTONIC, &until);
			until.tv_nsec += COMMIT_DELAY_US * 1000L;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			while (!tq.stop && !tq.flush && tq.queued < COMMIT_BATCH &&
			       pthread_cond_clockwait(&tq.work, &tq.lock, CLOCK_MONOTONIC, &until) != ETIMEDOUT)
				;
		}
		struct post *list = tq.head;
		if (!list)
			break;
		tq.head = tq.tail = NULL;
		tq.queued = 0;
		tq.busy = 1;
		pthread_mutex_unlock(&tq.lock);
		deliver(list);
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

const char *tracer_sync_failure(void)
{
	static char why[SFMA_ERR_MAX];
	pthread_mutex_lock(&tq.lock);
	int report = tq.sync_error[0] && !tq.sync_reported;
	if (report) {
		snprintf(why, sizeof why, "%s", tq.sync_error);
		tq.sync_reported = 1;
	}
	pthread_mutex_unlock(&tq.lock);
	return report ? why : NULL;
}

static int gone(struct sfma_err *e)
{
	return err_set(e, "%s", tq.error[0] ? tq.error : "trace: sfma-chain is gone");
}

int tracer_post(struct evidence_store *store, const json_t *ev, const char *id, struct sfma_err *e)
{
	if (tq.gone)
		return gone(e);
	struct post *p = xcalloc(1, sizeof *p);
	/* The core's events are JSON it made: they always serialize. */
	p->line = dump_line(ev, &p->len);
	assert(p->line);
	if (json_object_get(ev, EVIDENCE_MEMBER)) {
		json_t *bare = json_copy((json_t *)ev);
		json_object_del(bare, EVIDENCE_MEMBER);
		p->bare = dump_line(bare, &p->bare_len);
		json_decref(bare);
	}
	if (tq.n_owed == tq.cap_owed) {
		tq.cap_owed = tq.cap_owed ? 2 * tq.cap_owed : 16;
		tq.owed = xrealloc(tq.owed, tq.cap_owed * sizeof *tq.owed);
	}
	tq.owed_bytes += p->len + ACK_EXTRA;
	struct owed *o = &tq.owed[tq.n_owed++];
	snprintf(o->id, sizeof o->id, "%s", id ? id : "");
	/* Read by the thread once it runs: set before it starts, never after. */
	if (!tq.started)
		tq.evidence = store;
	/* Only an entry whose blobs still need their fdatasync goes to the
	 * thread: anything else costs a write to a pipe, and a hand-over
	 * would cost more than it saves. Before ids are known the run settles
	 * at once: nothing is gained by the thread. */
	pthread_mutex_lock(&tq.lock);
	int idle = !tq.head && !tq.busy;
	pthread_mutex_unlock(&tq.lock);
	int slow = p->bare && tq.evidence && evidence_sync_pending(tq.evidence) && o->id[0];
	if (idle && slow && !tq.started && !tq.stop) {
		/* Started at the first such entry; a thread that cannot start
		 * leaves the run writing its entries itself. */
		if (pthread_create(&tq.thread, NULL, tracer_main, NULL) == 0)
			tq.started = 1;
		else
			tq.stop = 1;
	}
	if (idle && (!slow || !tq.started)) {
		deliver(p);
	} else {
		pthread_mutex_lock(&tq.lock);
		if (tq.tail)
			tq.tail->next = p;
		else
			tq.head = p;
		tq.tail = p;
		/* The thread waits out its commit window unwoken. */
		if (++tq.queued == 1 || tq.queued == COMMIT_BATCH)
			pthread_cond_signal(&tq.work);
		pthread_mutex_unlock(&tq.lock);
	}
	if (tq.n_owed >= OWED_MAX || tq.owed_bytes >= OWED_BYTES_MAX)
		return tracer_settle(NULL, e);
	return 0;
}

/* One acknowledgement: the entry sfma-chain appended, under the id the
 * run gave it. */
static int take_ack(const struct owed *o, const json_t *entry)
{
	const char *id = json_string_value(json_object_get(entry, "id"));
	if (o->id[0] && (!id || strcmp(id, o->id) != 0)) {
		snprintf(tq.error, sizeof tq.error, "trace: sfma-chain appended %.100s where %s was next",
		         id ? id : "an entry without an id", o->id);
		return -1;
	}
	return 0;
}

int tracer_settle(json_t **last, struct sfma_err *e)
{
	if (last)
		*last = NULL;
	pthread_mutex_lock(&tq.lock);
	tq.flush = 1;
	pthread_cond_signal(&tq.work);
	while (tq.head || tq.busy)
		pthread_cond_wait(&tq.idle, &tq.lock);
	tq.flush = 0;
	pthread_mutex_unlock(&tq.lock);
	/* The chain's answers are read whatever other stages do: an entry it
	 * has appended is part of the run, and a reply never read would
	 * kill it with SIGPIPE. */
	static const struct wait_opts chain_wait = {0};
	for (size_t i = 0; i < tq.n_owed && !tq.gone; i++) {
		enum wait_why why;
		struct sfma_err we = {""};
		json_t *entry = stage_wait(STAGE_CHAIN, &chain_wait, &why, &we);
		if (!entry) {
			snprintf(tq.error, sizeof tq.error, "trace: %s", we.text);
			tq.gone = 1;
		} else if (take_ack(&tq.owed[i], entry) < 0) {
			tq.gone = 1;
		} else if (last && i + 1 == tq.n_owed) {
			*last = json_incref(entry);
		}
		json_decref(entry);
	}
	tq.n_owed = 0;
	tq.owed_bytes = 0;
	if (tq.gone) {
		if (last) {
			json_decref(*last);
			*last = NULL;
		}
		return gone(e);
	}
	return 0;
}

void tracer_stop(int alive)
{
	if (alive && !tq.gone)
		tracer_settle(NULL, NULL);
	pthread_mutex_lock(&tq.lock);
	tq.stop = 1;
	pthread_cond_signal(&tq.work);
	pthread_mutex_unlock(&tq.lock);
	if (tq.started)
		pthread_join(tq.thread, NULL);
	tq.started = 0;
	/* What the thread never delivered (a run that stops on a dead chain). */
	free_posts(tq.head);
	tq.head = tq.tail = NULL;
	tq.queued = 0;
	free(tq.owed);
	tq.owed = NULL;
	tq.n_owed = tq.cap_owed = 0;
	tq.owed_bytes = 0;
	tq.evidence = NULL;
}
