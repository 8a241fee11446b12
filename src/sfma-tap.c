/* sfma-tap - the observer on the planner's pipes (sfma-tap(1)).
 *
 *   sfma-tap [--ready-fd FD] [--head-fd FD] [--acts NAME]... WORKSPACE
 *            NAME:FROM_PLANNER:TO_STAGE:FROM_STAGE:TO_PLANNER...
 *
 * sfma puts it between the planner and the stages it watches: for each
 * stage NAME it reads what the planner writes on FROM_PLANNER and passes
 * it on to the stage on TO_STAGE, and what the stage writes on FROM_STAGE
 * to the planner on TO_PLANNER, every byte unchanged and in order. For
 * every line that crosses (its newline included) it appends a record
 * {stage, dir, n, sha256, bytes} to WORKSPACE/.sfma/observed.jsonl, a
 * sha256-chain-v1 chain of its own (sfma-formats(5), The observed chain),
 * which the planner is given no descriptor or path of.
 *
 * When: the bytes read in one poll round are passed on once the round's
 * records are written (one write), so no line's newline reaches its
 * reader before its record is in the file; before a line that acts goes
 * to a stage named by --acts (sfma-exec: every request but a read, which
 * acts on nothing), every record of an earlier round is made durable
 * (one fdatasync, none when nothing new was written). The planner, for
 * its part, acts on the world only through that stage and only once the
 * trace entries that led there are on disk: a trace entry that stands
 * for a line is thus acted on no earlier than the line's record is
 * durable. Model lines and reads wait for the next such sync, or the
 * close: a sync of their own would cost each turn a journal commit
 * (tests/bench/tap.sh).
 * Once the planner has ended its side of every pipe, a close entry,
 * fdatasync, and the chain's head goes to --head-fd as one line,
 * {"observedEntries","observedHead"} and, with SFMA_OBSERVER_PRIVATE_KEY
 * (the tap's alone), "signature" over the canonical text of the two
 * (sfma-seal puts them in the record); what the stages still write is
 * drained, unrecorded and passed on to no one, until they exit.
 *
 * The file is opened, locked and verified at the first line, so a run
 * that never sends one leaves nothing: the workspace may not exist
 * before. --ready-fd gets one byte once the key is loaded and the trace's
 * size measured (where this run's entries will begin): sfma lets the
 * planner go only then. A record that cannot be written stops the tap
 * before the line it stands for is passed on: nothing crosses unobserved.
 *
 * Exit: 0 once every pipe ended, 1 on an error (said on stderr, and to the
 * planner as a stage's error line when its pipe is between lines), 2 on a
 * usage error. */
#include "buf.h"
#include "canon.h"
#include "chain.h"
#include "cli.h"
#include "confine.h"
#include "errors.h"
#include "merkle.h"
#include "ndjson.h"
#include "observed.h"
#include "record.h"
#include "sha.h"
#include "sign.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define FLOW_BUF (64u << 10) /* bytes read at once, and held at most, per direction */
#define SCAN_DEPTH 32         /* nesting a line's scan follows (read_scan) */

/* Whether a line to a stage that acts is a read - a request whose call's
 * tool is "read", which acts on nothing (sfma-exec(1)) - as far as a scan
 * of its bytes as they pass can tell: member names and strings are
 * followed, nothing is kept but the few bytes of the names and the value
 * it looks for. Anything it does not follow (an escape in those, a second
 * call or tool, nesting past SCAN_DEPTH) makes the line one that acts:
 * the scan only ever spares a sync, never decides what crosses. */
struct read_scan {
	int depth;                 /* open objects and arrays */
	unsigned long arrays;      /* bit d: the container at depth d+1 is an array */
	int in_string, escaped, is_key, expect_key;
	char text[8];              /* the string so far, when it is one the scan wants */
	size_t len;                /* its length (past 8: longer than any wanted) */
	char key1[8], key2[8];     /* the last member name at depth 1, and in the call */
	int in_call, calls, tools, read, odd;
};

/* One direction of one stage's pipe. */
struct flow {
	const char *stage;
	const char *dir;           /* "out": the planner to the stage; "in": back */
	int from, to;              /* -1 once closed */
	int acts;                  /* its reader acts on the world: records durable first */
	struct read_scan scan;     /* of the line crossing now (acts flows) */
	uint64_t need_synced;      /* bytes of the chain durable before its bytes go on */
	struct obs_stream hash;    /* the line crossing now */
	char *buf;
	size_t start, end;         /* buf[start..end): read, not yet passed on */
	int ended;                 /* its input ended */
	int broken;                /* its reader is gone: what comes is read, recorded, dropped */
	int mid_line;              /* what was passed on ends inside a line */
};

/* A line's record, until the round's records are chained. */
struct pending_line {
	const char *stage, *dir;
	struct obs_line l;
	int torn;
};

static struct tap {
	const char *workspace;
	int nstages;
	const char *names[OBS_STAGES_MAX];
	uint64_t lines[OBS_STAGES_MAX][2];
	struct flow flows[2 * OBS_STAGES_MAX];
	int nflows;
	uint64_t trace_bytes;      /* the trace's size when the tap started */
	/* the observed chain */
	int fd;                    /* -1 until opened */
	char path[PATH_MAX], note[PATH_MAX];
	int part_open;             /* this run's open entry made */
	double seq;
	char head[SHA256_HEX_LEN + 1];
	uint64_t torn_bytes;       /* cut off the file's end when it was opened */
	struct chain_summary sum;
	struct chain_digest *digest;
	struct pending_line *waiting; /* this round's records, not yet chained */
	size_t nwaiting, capwaiting;
	struct buf pending;        /* ... chained, not yet written */
	uint64_t synced;           /* bytes of the chain known durable */
	EVP_PKEY *key;
	int channel;               /* the confinement report channel (SFMA_CONFINE_FD); -1: none, or done */
} T = {.fd = -1, .channel = -1};

/* ---- failing closed -------------------------------------------------------- */

/* Stop: nothing more crosses. The planner hears why on each pipe that is
 * between lines (an error line, PIPELINE.md), as from a stage that
 * stopped on an error; stderr has it in any case. */
static _Noreturn void stop(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void stop(const char *fmt, ...)
{
	char text[SFMA_ERR_MAX], said[SFMA_ERR_MAX + 16];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	snprintf(said, sizeof said, "%s: %s", progname(), text);
	json_t *line = json_pack("{s:s}", "error", said);
	struct buf b = {0};
	if (line && canon_dump(line, &b, NULL) == 0) {
		buf_addc(&b, '\n');
		for (int i = 0; i < T.nflows; i++) {
			struct flow *f = &T.flows[i];
			if (strcmp(f->dir, "in") == 0 && f->to >= 0 && !f->broken && !f->mid_line) {
				ssize_t w = write(f->to, b.p, b.len); /* best effort: the tap is ending */
				(void)w;
			}
		}
	}
	json_decref(line);
	buf_free(&b);
	die("%s", text);
}

/* ---- the observed chain ------------------------------------------------------ */

/* Open, lock and verify the chain, cutting off a torn final line (a
 * crash while appending: its bytes are counted in the open entry). 0, or
 * -1 when the workspace's .sfma is not there (yet: the planner makes it
 * once it has its go); with create 0 a file that is not there is an
 * empty chain. */
static int chain_open(int create)
{
	struct sfma_err e;
	char dir[PATH_MAX];
	if (snprintf(dir, sizeof dir, "%s/.sfma", T.workspace) >= (int)sizeof dir ||
	    snprintf(T.path, sizeof T.path, "%s/%s", dir, OBSERVED_FILE) >= (int)sizeof T.path ||
	    snprintf(T.note, sizeof T.note, "%s/%s", dir, OBSERVED_NOTE) >= (int)sizeof T.note)
		stop("%s: path too long", T.workspace);
	memcpy(T.head, CHAIN_ZERO_HASH, sizeof T.head);
	/* O_NONBLOCK: a FIFO or device in its place is refused, not waited on. */
	int sfma = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sfma < 0 && errno == ENOENT)
		return -1;
	if (sfma < 0)
		stop("%s: %s", dir, strerror(errno));
	T.fd = openat(sfma, OBSERVED_FILE, O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK |
	                                   (create ? O_CREAT : 0), 0644);
	close(sfma);
	if (T.fd < 0 && !create && errno == ENOENT)
		return 0;
	struct stat st;
	if (T.fd < 0)
		stop("%s: %s", T.path, strerror(errno));
	if (fstat(T.fd, &st) < 0 || !S_ISREG(st.st_mode))
		stop("%s: not a regular file", T.path);
	if (fcntl(T.fd, F_SETFL, O_APPEND) < 0 || flock(T.fd, LOCK_EX) < 0)
		stop("%s: %s", T.path, strerror(errno));
	const struct chain_opts tree = {.tree = 1};
	int used;
	if (chain_verify_cached(T.fd, T.note, &tree, &T.sum, &used, &T.digest, &e) < 0) {
		if (!T.sum.torn)
			stop("%s: failed hash-chain verification: %s", T.path, e.text);
		T.torn_bytes = (uint64_t)st.st_size - T.sum.torn_offset;
		if (ftruncate(T.fd, (off_t)T.sum.torn_offset) < 0 || fsync(T.fd) < 0)
			stop("%s: cutting off a torn final line: %s", T.path, strerror(errno));
		if (chain_verify_cached(T.fd, T.note, &tree, &T.sum, &used, &T.digest, &e) < 0)
			stop("%s: failed hash-chain verification: %s", T.path, e.text);
	}
	if (T.sum.legacy)
		stop("%s: line 1 is not chained: not an observed chain", T.path);
	T.seq = T.sum.max_seq;
	memcpy(T.head, T.sum.head, sizeof T.head);
	/* Confined once its chain is open (sfma(1), CONFINEMENT): .sfma now
	 * exists, which a Landlock rule needs; from here on it may write in
	 * .sfma alone (its chain, and its note replaced beside it), reach no
	 * network and start nothing. With a channel, at the planner's go
	 * (the chain is opened then, run()), and what is in force is
	 * reported for the run's confinement entries. */
	struct confine_report r;
	confine_stage(&T.channel, "sfma-tap", &(const struct confine_places){.workspace = T.workspace}, &r);
	return 0;
}

/* The canonical line of one line's record, with its hash (NULL: the
 * text the hash is of), written by hand: it is most of what the tap
 * writes, and its members (numbers, hex, a stage name of [a-z0-9-]) need
 * no escape. The same bytes canon_dump makes of obs_line_entry's object
 * with seq and prevHash (the chain's verification says so). */
static void line_text(struct buf *out, const struct pending_line *p, const char *seq, const char *hash)
{
	char text[512];
	int n = snprintf(text, sizeof text,
	                 "{\"bytes\":%llu,\"dir\":\"%s\",%s%s%s\"kind\":\"line\",\"n\":%llu,\"prevHash\":\"%s\","
	                 "\"seq\":%s,\"sha256\":\"%s\",\"stage\":\"%s\"%s}",
	                 (unsigned long long)p->l.bytes, p->dir, hash ? "\"hash\":\"" : "", hash ? hash : "",
	                 hash ? "\"," : "", (unsigned long long)p->l.n, T.head, seq, p->l.sha256, p->stage,
	                 p->torn ? ",\"torn\":true" : "");
	buf_add(out, text, (size_t)n);
}

/* Append one canonical entry line (without its newline; hash its hash)
 * to this round's records. */
static void append_line(struct buf *line, const char hash[SHA256_HEX_LEN + 1])
{
	unsigned char leaf[MERKLE_HASH_LEN];
	merkle_leaf_hash(line->p, line->len, leaf);
	if (merkle_frontier_add(&T.sum.tree, leaf) < 0)
		stop("%s: more lines than a tree can hold", T.path);
	buf_addc(line, '\n');
	T.sum.last_offset = T.sum.size + T.pending.len;
	buf_add(&T.pending, line->p, line->len);
	T.sum.entries++;
	T.sum.max_seq = T.sum.last_seq = T.seq;
	memcpy(T.head, hash, SHA256_HEX_LEN + 1);
	memcpy(T.sum.head, hash, sizeof T.sum.head);
}

/* Append entry v (consumed) to this round's records, chained. */
static void append_entry(json_t *v)
{
	struct sfma_err e;
	struct buf line = {0};
	char hash[SHA256_HEX_LEN + 1];
	json_object_set_new(v, "seq", json_real(++T.seq));
	json_object_set_new(v, "prevHash", json_string(T.head));
	if (canon_dump(v, &line, &e) < 0)
		stop("record: %s", e.text);
	sha256_hex(line.p, line.len, hash);
	json_object_set_new(v, "hash", json_string(hash));
	buf_reset(&line);
	canon_dump(v, &line, &e);
	json_decref(v);
	append_line(&line, hash);
	buf_free(&line);
}

/* Append the record of one line to this round's records, chained. */
static void append_record(const struct pending_line *p)
{
	struct buf line = {0};
	char hash[SHA256_HEX_LEN + 1], seq[32];
	canon_number(++T.seq, seq);
	line_text(&line, p, seq, NULL);
	sha256_hex(line.p, line.len, hash);
	buf_reset(&line);
	line_text(&line, p, seq, hash);
	append_line(&line, hash);
	buf_free(&line);
}

/* The record of one line that crossed flow f, for this round's write. */
static void record_line(struct flow *f, const struct obs_line *l, int torn)
{
	if (T.nwaiting == T.capwaiting) {
		T.capwaiting = T.capwaiting ? 2 * T.capwaiting : 64;
		T.waiting = xrealloc(T.waiting, T.capwaiting * sizeof *T.waiting);
	}
	T.waiting[T.nwaiting++] = (struct pending_line){.stage = f->stage, .dir = f->dir, .l = *l, .torn = torn};
	int k = (int)((f - T.flows) / 2);
	T.lines[k][strcmp(f->dir, "in") == 0]++;
}

/* Make the chain's first `bytes` durable, and with them all it holds:
 * one fdatasync, none when they already are. */
static void synced_to(uint64_t bytes)
{
	if (T.synced >= bytes || T.fd < 0)
		return;
	if (fdatasync(T.fd) < 0)
		stop("%s: fdatasync: %s", T.path, strerror(errno));
	T.synced = T.sum.size;
}

/* The round's records chained and written in one write (with sync:
 * made durable); a short write is cut off again. 0, or -1 while the
 * chain cannot be opened yet (a stage spoke before the planner made the
 * workspace): nothing may be passed on. */
static int flush_records(int sync)
{
	if (T.nwaiting) {
		if (T.fd < 0 && chain_open(1) < 0)
			return -1;
		if (!T.part_open) {
			append_entry(obs_open_entry(T.names, T.nstages, T.trace_bytes, T.torn_bytes));
			T.part_open = 1;
		}
		for (size_t i = 0; i < T.nwaiting; i++)
			append_record(&T.waiting[i]);
		T.nwaiting = 0;
	}
	if (T.pending.len) {
		if (write_all(T.fd, T.pending.p, T.pending.len) < 0) {
			int err = errno;
			if (ftruncate(T.fd, (off_t)T.sum.size) < 0)
				stop("%s: write: %s; and the partial line could not be removed: %s", T.path, strerror(err),
				     strerror(errno));
			stop("%s: write: %s", T.path, strerror(err));
		}
		chain_digest_add(T.digest, T.pending.p, T.pending.len);
		T.sum.size += T.pending.len;
		buf_reset(&T.pending);
	}
	if (sync)
		synced_to(T.sum.size);
	return 0;
}

/* ---- the pipes ----------------------------------------------------------------- */

/* A string the scan wants ended: a member name at depth 1 or in the
 * call, or the call's tool. */
static void scan_string(struct read_scan *r)
{
	int kept = r->len <= sizeof r->text;
	char *key = r->depth == 1 ? r->key1 : r->in_call && r->depth == 2 ? r->key2 : NULL;
	if (r->is_key && key) {
		memset(key, 0, 8);
		if (kept)
			memcpy(key, r->text, r->len < 8 ? r->len : 7); /* "tool"/"call": 4 bytes; longer never match */
		if (!kept || r->len >= 8)
			key[0] = '\0';
	} else if (!r->is_key && r->in_call && r->depth == 2 && strcmp(r->key2, "tool") == 0) {
		r->tools++;
		r->read = kept && r->len == 4 && memcmp(r->text, "read", 4) == 0;
	}
}

static void scan_byte(struct read_scan *r, char c)
{
	if (r->in_string) {
		if (r->escaped) {
			r->escaped = 0;
			r->odd |= r->is_key || r->in_call; /* an escape in what it compares: not followed */
		} else if (c == '\\') {
			r->escaped = 1;
		} else if (c == '"') {
			r->in_string = 0;
			scan_string(r);
			return;
		}
		if (r->len < sizeof r->text)
			r->text[r->len] = c;
		r->len++;
		return;
	}
	int in_array = r->depth > 0 && (r->arrays >> (r->depth - 1) & 1);
	switch (c) {
	case '"':
		r->in_string = 1;
		r->is_key = !in_array && r->depth > 0 && r->expect_key;
		r->len = 0;
		break;
	case '{':
	case '[':
		if (r->depth == SCAN_DEPTH) {
			r->odd = 1;
			break;
		}
		if (c == '{' && r->depth == 1 && strcmp(r->key1, "call") == 0) {
			r->in_call = 1;
			r->calls++;
			memset(r->key2, 0, sizeof r->key2);
		}
		r->arrays = (r->arrays & ~(1ul << r->depth)) | (unsigned long)(c == '[') << r->depth;
		r->depth++;
		r->expect_key = c == '{';
		break;
	case '}':
	case ']':
		if (r->depth == 0) {
			r->odd = 1;
			break;
		}
		r->depth--;
		if (r->depth == 1)
			r->in_call = 0;
		r->expect_key = 0;
		break;
	case ',':
		r->expect_key = !in_array;
		break;
	case ':':
		r->expect_key = 0;
		break;
	default:
		break;
	}
}

/* 1 if the scanned line was a read, and the scan starts again. */
static int scan_end(struct read_scan *r)
{
	int read = !r->odd && !r->in_string && r->depth == 0 && r->calls == 1 && r->tools == 1 && r->read;
	*r = (struct read_scan){0};
	return read;
}

/* Hash what was read into f, recording each line it completes; a line
 * to a stage that acts, unless a read, must find every record before
 * this round durable before it goes on. */
static void account(struct flow *f, const char *p, size_t n)
{
	while (n > 0) {
		struct obs_line l;
		int complete;
		size_t took = obs_stream_feed(&f->hash, p, n, &l, &complete);
		if (f->acts)
			for (size_t i = 0; i + complete < took; i++)
				scan_byte(&f->scan, p[i]);
		if (complete) {
			record_line(f, &l, 0);
			if (f->acts && !scan_end(&f->scan) && T.sum.size > f->need_synced)
				f->need_synced = T.sum.size;
		}
		p += took;
		n -= took;
	}
}

/* Read what f's input has; with record 0 (the part closed) it is only
 * drained, so that its writer can finish. */
static void read_flow(struct flow *f, int record)
{
	ssize_t r;
	while ((r = read(f->from, f->buf, FLOW_BUF)) < 0 && errno == EINTR)
		;
	if (r < 0 && errno == EAGAIN)
		return;
	if (r <= 0) {
		/* The end (or a read error, which ends it alike): a line cut off
		 * by it is recorded as torn - bytes, not a message. */
		f->ended = 1;
		close(f->from);
		f->from = -1;
		if (record && f->hash.bytes > 0) {
			struct obs_line l;
			obs_stream_tail(&f->hash, &l);
			record_line(f, &l, 1);
		}
		return;
	}
	if (!record)
		return;
	f->start = 0;
	f->end = (size_t)r;
	account(f, f->buf, (size_t)r);
}

/* Pass on what f holds, as much as its reader takes now. */
static void write_flow(struct flow *f)
{
	if (f->need_synced && f->start < f->end && !f->broken && f->to >= 0)
		synced_to(f->need_synced);
	f->need_synced = 0;
	while (f->start < f->end && !f->broken && f->to >= 0) {
		ssize_t w = write(f->to, f->buf + f->start, f->end - f->start);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			return;
		if (w < 0) {
			/* EPIPE: the reader is gone. What still comes is read and
			 * recorded (it was sent), then dropped. */
			f->broken = 1;
			break;
		}
		f->start += (size_t)w;
		f->mid_line = f->buf[f->start - 1] != '\n';
	}
	if (f->broken || f->to < 0)
		f->start = f->end;
	if (f->start == f->end && f->ended && f->to >= 0) {
		close(f->to); /* the end travels on */
		f->to = -1;
	}
}

static void close_to(struct flow *f)
{
	if (f->to >= 0)
		close(f->to);
	f->to = -1;
	f->start = f->end;
}

/* f's reader has gone (a planner killed, a stage dead): its writer must
 * learn it as it would without the tap between them, at once and not at
 * its next write - sfma-exec stops a running command when nobody is left
 * to read its answer. So the flow ends both ways: what it had of a line
 * is recorded as torn, and its writer's pipe is closed (EPIPE there). */
static void reader_gone(struct flow *f, int record)
{
	f->broken = 1;
	close_to(f);
	if (f->from < 0)
		return;
	f->ended = 1;
	close(f->from);
	f->from = -1;
	if (record && f->hash.bytes > 0) {
		struct obs_line l;
		obs_stream_tail(&f->hash, &l);
		record_line(f, &l, 1);
	}
}

/* 1 once the planner has ended its side of every pipe: it sends nothing
 * more, and reads nothing more from the stages (sfma-plan closes a
 * stage's input when it is done with it, at the end of the run). */
static int planner_done(void)
{
	for (int i = 0; i < T.nflows; i++)
		if (strcmp(T.flows[i].dir, "out") == 0 && !T.flows[i].ended)
			return 0;
	return 1;
}

static int all_ended(void)
{
	for (int i = 0; i < T.nflows; i++)
		if (T.flows[i].from >= 0 || T.flows[i].to >= 0)
			return 0;
	return 1;
}

/* Until the planner is done: every byte passed on, every line recorded.
 * Then the part is closed (close_part, called once) and what the stages
 * still write - answers the planner will not read - is drained unseen by
 * the planner, so that they can finish and exit, and what the planner
 * sent them last is delivered. */
static void run(void (*close_part)(void))
{
	struct pollfd pfd[4 * OBS_STAGES_MAX + 1];
	int map[4 * OBS_STAGES_MAX + 1], closed = 0, blocked = 0;
	while (!all_ended()) {
		if (!closed && planner_done()) {
			/* A planner that never made the workspace reads nothing: what
			 * the stages said meanwhile goes nowhere, unrecorded. */
			if (blocked && flush_records(0) < 0)
				T.nwaiting = 0;
			blocked = 0;
			/* What a stage still says goes to nobody: its output is
			 * closed, as the planner's own end would be without the
			 * tap, so a stage still working (a command running after
			 * ^C) learns at once that nobody reads its answer. */
			for (int i = 0; i < T.nflows; i++)
				if (strcmp(T.flows[i].dir, "in") == 0)
					reader_gone(&T.flows[i], 1);
			close_part();
			closed = 1;
			continue;
		}
		int n = 0;
		for (int i = 0; i < T.nflows; i++) {
			struct flow *f = &T.flows[i];
			if (f->start < f->end && f->to >= 0 && !blocked) {
				pfd[n] = (struct pollfd){.fd = f->to, .events = POLLOUT};
				map[n++] = i;
			} else if (f->from >= 0 && f->start == f->end) {
				pfd[n] = (struct pollfd){.fd = f->from, .events = POLLIN};
				map[n++] = i;
				/* No event asked: a pipe's write end reports POLLERR
				 * once its reader has closed (pipe(7)). */
				if (f->to >= 0) {
					pfd[n] = (struct pollfd){.fd = f->to, .events = 0};
					map[n++] = i;
				}
			}
		}
		/* The planner's go on the report channel: the workspace is
		 * made, and the chain is opened and the tap confined now, for
		 * the run's first entries, not at the first line. */
		int go = -1;
		if (T.channel >= 0 && T.fd < 0) {
			go = n;
			pfd[n] = (struct pollfd){.fd = T.channel, .events = POLLIN};
			map[n++] = -1;
		}
		if (n == 0 && !blocked)
			break;
		/* Blocked, the chain is tried again every 10 ms. */
		if (poll(pfd, (nfds_t)n, blocked ? 10 : -1) < 0) {
			if (errno == EINTR)
				continue;
			stop("poll: %s", strerror(errno));
		}
		if (go >= 0 && pfd[go].revents) {
			/* No .sfma: the planner went before its go, and there
			 * is nobody to report to. */
			if (chain_open(1) < 0) {
				close(T.channel);
				T.channel = -1;
			}
		}
		/* Read every flow that has input, then write the round's
		 * records, and only then pass the bytes on. */
		for (int k = 0; k < n; k++) {
			if (map[k] < 0)
				continue;
			struct flow *f = &T.flows[map[k]];
			if (pfd[k].fd == f->from && (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
				read_flow(f, !closed);
			else if (pfd[k].fd == f->to && (pfd[k].revents & POLLERR))
				reader_gone(f, !closed);
		}
		blocked = flush_records(0) < 0;
		for (int i = 0; i < T.nflows && !blocked; i++)
			write_flow(&T.flows[i]);
	}
	if (!closed)
		close_part();
}

/* ---- the head ------------------------------------------------------------------- */

static json_t *sign_head(uint64_t entries, const char *head)
{
	char text[OBS_SIGNED_MAX];
	unsigned char sig[64];
	obs_signed_text(entries, head, text);
	if (ed25519_sign(T.key, text, strlen(text), sig) < 0)
		stop("SFMA_OBSERVER_PRIVATE_KEY: signing failed");
	char *pub = ed25519_public_pem(T.key), *value = base64_encode(sig, sizeof sig);
	if (!pub)
		stop("SFMA_OBSERVER_PRIVATE_KEY: cannot derive the public key");
	json_t *s = json_pack("{s:s, s:s, s:s}", "algorithm", "ed25519", "publicKey", pub, "value", value);
	free(pub);
	free(value);
	return s;
}

static int head_fd = -1;

/* The planner is done: close the part, make it durable, note the head
 * for the next tap, and hand the head over. */
static void close_part(void)
{
	struct sfma_err e;
	if (T.part_open) {
		append_entry(obs_close_entry(T.names, T.nstages, (const uint64_t(*)[2])T.lines));
		flush_records(1);
		/* A note that cannot be written costs the next tap a full
		 * verification, nothing more. */
		if (chain_head_cache_write(T.note, &T.sum, NULL, T.digest, &e) < 0)
			warning("%s: %s", T.note, e.text);
	} else if (T.fd < 0) {
		chain_open(0); /* nothing crossed: the head is the chain's as it stands */
	}
	if (head_fd < 0)
		return;
	json_t *h = json_pack("{s:I, s:s}", "observedEntries", (json_int_t)T.sum.entries, "observedHead", T.head);
	if (T.key)
		json_object_set_new(h, "signature", sign_head(T.sum.entries, T.head));
	struct buf b = {0};
	canon_dump(h, &b, NULL);
	buf_addc(&b, '\n');
	/* EPIPE: the seal went before it read it, having nothing to seal
	 * (the planner stopped first and said why): no news. Otherwise the
	 * seal, without a head, refuses, and says so. */
	if (write_all(head_fd, b.p, b.len) < 0 && errno != EPIPE)
		warning("--head-fd: %s", strerror(errno));
	close(head_fd);
	head_fd = -1;
	buf_free(&b);
	json_decref(h);
}

/* ---- the start ------------------------------------------------------------------ */

static const char usage_text[] =
	"usage: sfma-tap [--ready-fd FD] [--head-fd FD] [--acts NAME]... WORKSPACE\n"
	"                NAME:FROM_PLANNER:TO_STAGE:FROM_STAGE:TO_PLANNER...\n"
	"       sfma-tap --version | --help\n";

/* The key from the environment, its bytes wiped and the variable unset. */
static void take_key(void)
{
	struct sfma_err e;
	T.key = ed25519_private_take_env("SFMA_OBSERVER_PRIVATE_KEY", &e);
	if (!T.key && e.text[0])
		die("SFMA_OBSERVER_PRIVATE_KEY: %s; refusing to observe without the key given", e.text);
}

static int parse_fd(const char *s, int want_write, const char *spec)
{
	unsigned long fd;
	int fl;
	if (cli_parse_ulong(s, 3, INT_MAX, &fd) < 0 || (fl = fcntl((int)fd, F_GETFL)) < 0)
		cli_usage_error(usage_text, "%s: %s is not an open descriptor, 3 or more", spec, s);
	if ((fl & O_ACCMODE) != (want_write ? O_WRONLY : O_RDONLY) && (fl & O_ACCMODE) != O_RDWR)
		cli_usage_error(usage_text, "%s: descriptor %s is not open for %s", spec, s, want_write ? "writing" : "reading");
	return (int)fd;
}

static void add_stage(char *spec)
{
	char *parts[5], *save = NULL, *p = spec;
	char copy[256];
	snprintf(copy, sizeof copy, "%s", spec);
	int n = 0;
	for (char *tok; n < 5 && (tok = strtok_r(p, ":", &save)); p = NULL)
		parts[n++] = tok;
	if (n != 5 || strtok_r(NULL, ":", &save))
		cli_usage_error(usage_text, "%s: expected NAME:FROM_PLANNER:TO_STAGE:FROM_STAGE:TO_PLANNER", copy);
	if (!obs_stage_name_ok(parts[0], strlen(parts[0])))
		cli_usage_error(usage_text, "%s: a stage name is 1 to 31 of a-z, 0-9 and -", copy);
	if (T.nstages == OBS_STAGES_MAX)
		cli_usage_error(usage_text, "at most %d stages", OBS_STAGES_MAX);
	for (int k = 0; k < T.nstages; k++)
		if (strcmp(T.names[k], parts[0]) == 0)
			cli_usage_error(usage_text, "%s: stage %s named twice", copy, parts[0]);
	int k = T.nstages++;
	T.names[k] = parts[0];
	for (int d = 0; d < 2; d++) {
		struct flow *f = &T.flows[T.nflows++];
		*f = (struct flow){.stage = parts[0], .dir = d ? "in" : "out",
		                   .from = parse_fd(parts[d ? 3 : 1], 0, copy), .to = parse_fd(parts[d ? 4 : 2], 1, copy)};
		obs_stream_init(&f->hash);
	}
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	enum { OPT_READY = 0x100, OPT_HEAD, OPT_ACTS, OPT_VERSION };
	static const struct option longopts[] = {
		{"ready-fd", required_argument, NULL, OPT_READY}, {"head-fd", required_argument, NULL, OPT_HEAD},
		{"acts", required_argument, NULL, OPT_ACTS}, {"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, OPT_VERSION}, {NULL, 0, NULL, 0},
	};
	int ready_fd = -1, c, nacts = 0;
	const char *acts[OBS_STAGES_MAX];
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_READY: ready_fd = parse_fd(optarg, 1, "--ready-fd"); break;
		case OPT_HEAD: head_fd = parse_fd(optarg, 1, "--head-fd"); break;
		case OPT_ACTS:
			if (nacts == OBS_STAGES_MAX)
				cli_usage_error(usage_text, "--acts: at most %d stages", OBS_STAGES_MAX);
			acts[nacts++] = optarg;
			break;
		case 'h': cli_help(usage_text);
		case OPT_VERSION: cli_version();
		default: cli_bad_option(usage_text, c, argv);
		}
	}
	if (optind == argc)
		cli_usage_error(usage_text, "no WORKSPACE given");
	T.workspace = argv[optind++];
	if (optind == argc)
		cli_usage_error(usage_text, "no stage to observe");
	for (; optind < argc; optind++)
		add_stage(argv[optind]);
	for (int a = 0; a < nacts; a++) {
		int found = 0;
		for (int i = 0; i < T.nflows; i++)
			if (strcmp(T.flows[i].stage, acts[a]) == 0 && strcmp(T.flows[i].dir, "out") == 0)
				found = T.flows[i].acts = 1;
		if (!found)
			cli_usage_error(usage_text, "--acts %s: not a stage given", acts[a]);
	}
	take_key();
	T.channel = confine_channel_take();
	/* A reader that went away is an EPIPE to handle, not a death. */
	signal(SIGPIPE, SIG_IGN);
	for (int i = 0; i < T.nflows; i++) {
		struct flow *f = &T.flows[i];
		f->buf = xmalloc(FLOW_BUF);
		/* Its own writes never wait on one slow reader: the others go on. */
		if (fcntl(f->to, F_SETFL, fcntl(f->to, F_GETFL) | O_NONBLOCK) < 0)
			die("%s %s: %s", f->stage, f->dir, strerror(errno));
	}
	/* Where this run's trace entries begin: the trace as it stands now,
	 * before the planner is let go (sfma waits for the ready byte). */
	char trace[PATH_MAX];
	struct stat st;
	if (snprintf(trace, sizeof trace, "%s/%s", T.workspace, RECORD_TRACE) >= (int)sizeof trace)
		die("%s: path too long", T.workspace);
	if (lstat(trace, &st) == 0 && S_ISREG(st.st_mode))
		T.trace_bytes = (uint64_t)st.st_size;
	if (ready_fd >= 0) {
		if (write_all(ready_fd, "r", 1) < 0)
			die("--ready-fd: %s", strerror(errno));
		close(ready_fd);
	}
	run(close_part);
	for (int i = 0; i < T.nflows; i++)
		free(T.flows[i].buf);
	buf_free(&T.pending);
	free(T.waiting);
	chain_digest_free(T.digest);
	EVP_PKEY_free(T.key);
	if (T.fd >= 0)
		close(T.fd);
	return 0;
}
