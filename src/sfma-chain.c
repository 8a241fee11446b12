/* sfma-chain - append events to a hash-chained trace (sha256-chain-v1).
 *
 *   sfma-chain [--no-wait] [--head-cache FILE] TRACE   < events > entries
 *   sfma-chain --recover-torn TRACE
 *
 * Each stdin line is an event {"kind":K,"data":{...}} with optional "loop",
 * "refs", "class", "evidence" (references, sfma-formats(5)), "wire" (the
 * records of the lines the entry stands for). Each is appended as one canonical trace line - seq,
 * anchor, id, prevHash and hash filled in here (sfma-formats(5)) - and
 * the appended entry is echoed on stdout so the caller learns its id.
 *
 * Before the first append the whole existing file is verified (legacy
 * prefix included) under an exclusive lock held until exit: a broken chain
 * refuses everything. With --head-cache FILE the verified head is noted
 * there at exit, and the next writer checks only the lines after it when
 * the bytes before it still match the note (chain.h); the note also holds
 * the trace's Merkle tree (sfma-formats(5)) as this writer extended it,
 * line by line, so that the seal reads its root off the note and the
 * lines after it. The file is opened lazily, at the first event, so a
 * pipeline that never sends one leaves nothing on disk.
 *
 * Exit: 0 at end of input, 1 on any error (nothing more is appended), 2 on
 * a usage error. */
#include "buf.h"
#include "canon.h"
#include "chain.h"
#include "confine.h"
#include "cli.h"
#include "errors.h"
#include "evidence.h"
#include "ndjson.h"
#include "observed.h"
#include "sha.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const kinds[] = {
	"task", "result", "verdict", "mutation", "weight", "lifecycle", "clarification",
	"candidate", "clock-anchor", "call", "message", "store", "compaction", "confinement", NULL,
};

/* The members an event may have. */
static const char *const fields[] = {"kind", "data", "loop", "refs", "class", EVIDENCE_MEMBER, OBSERVED_WIRE, NULL};

struct trace {
	const char *path;
	const char *head_cache;     /* --head-cache FILE, or NULL */
	int fd;
	double seq;                 /* last seq used or seen */
	char head[65];              /* hash of the last entry */
	char anchor[CHAIN_ID_MAX];  /* the anchor of the next entry */
	off_t size;                 /* bytes of verified, complete lines */
	struct chain_summary sum;   /* the file as verified and extended (with head_cache:
	                               its Merkle tree too, leaf by leaf) */
	struct chain_digest *digest; /* of every byte of it (with head_cache) */
	struct chain_tree_point opened; /* the tree as this writer found the trace */
};

/* Open, lock and verify the trace. A second writer waits for the lock, or
 * with no_wait fails at once; two writers never interleave. */
static void trace_open(struct trace *t, int no_wait, int allow_torn, struct chain_summary *sum)
{
	struct sfma_err e;
	/* O_NONBLOCK: a device where the trace should be must not make the
	 * open wait (a FIFO opened O_RDWR never does, fifo(7)); it is refused
	 * next, and a regular file's descriptor goes back to blocking. */
	t->fd = open(t->path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0600);
	if (t->fd < 0)
		die("%s: %s", t->path, strerror(errno));
	struct stat st;
	if (fstat(t->fd, &st) < 0 || !S_ISREG(st.st_mode))
		die("%s: not a regular file", t->path);
	if (fcntl(t->fd, F_SETFL, O_APPEND) < 0)
		die("%s: %s", t->path, strerror(errno));
	if (flock(t->fd, LOCK_EX | (no_wait ? LOCK_NB : 0)) < 0) {
		if (errno == EWOULDBLOCK)
			die("%s: locked by another writer (--no-wait)", t->path);
		die("%s: lock: %s", t->path, strerror(errno));
	}
	/* With a head cache, a prefix whose bytes still match the note is not
	 * checked entry by entry again (chain.h: the verified-head cache); any
	 * mismatch verifies the whole file. */
	int used_cache = 0, rc;
	if (t->head_cache && !allow_torn) {
		/* The tree goes into the note with the head: the seal's root
		 * is the note's frontier and the lines after it. */
		const struct chain_opts tree = {.tree = 1};
		rc = chain_verify_cached(t->fd, t->head_cache, &tree, sum, &used_cache, &t->digest, &e);
	} else {
		if (lseek(t->fd, 0, SEEK_SET) < 0)
			die("%s: seek: %s", t->path, strerror(errno));
		rc = chain_verify_fd(t->fd, NULL, sum, &e);
	}
	if (rc < 0) {
		if (!(allow_torn && sum->torn))
			die("%s: failed hash-chain verification: %s%s", t->path, e.text,
			    sum->torn ? " (see RECOVERY in sfma-chain(1): sfma-chain --recover-torn)" : "");
	} else if (allow_torn) {
		die("%s: no torn final line to recover", t->path);
	}
	t->seq = sum->max_seq;
	memcpy(t->head, sum->head, sizeof t->head);
	snprintf(t->anchor, sizeof t->anchor, "%s", sum->anchor);
	t->size = (off_t)sum->size;
	t->sum = *sum;
	t->opened.size = sum->entries;
	merkle_frontier_root(&sum->tree, t->opened.root);
	/* Appends go to the end whatever the offset (O_APPEND). */
}

/* Leave the note of what this writer verified and appended, for the next
 * one (still under the lock). A note that cannot be written only costs
 * the next writer a full verification. */
static void note_head(struct trace *t)
{
	struct sfma_err e;
	if (t->head_cache && t->digest)
		chain_head_cache_write(t->head_cache, &t->sum, &t->opened, t->digest, &e);
	chain_digest_free(t->digest);
	t->digest = NULL;
}

static int any_ref(void *arg, const char *name, const struct evidence_ref *ref)
{
	(void)arg, (void)name, (void)ref;
	return 0;
}

/* Build the chained entry for one event into line (canonical, with its
 * newline). 0, or -1 with fail saying what is wrong with the event. */
static int make_entry(struct trace *t, json_t *ev, struct buf *line, long long *line_no, struct sfma_err *fail)
{
	struct sfma_err e;
	if (!json_is_object(ev))
		return err_set(fail, "event %lld: not a JSON object", *line_no);
	/* Names and kinds are compared as the whole JSON strings they are:
	 * "kind\u0000x" is not "kind", and U+0000 in either is refused (a
	 * reader taking them as C strings would see another name). */
	for (void *it = json_object_iter(ev); it; it = json_object_iter_next(ev, it)) {
		const char *key = json_object_iter_key(it);
		size_t key_len = json_object_iter_key_len(it);
		if (memchr(key, '\0', key_len))
			return err_set(fail, "event %lld: a field name contains U+0000", *line_no);
		int known_field = 0;
		for (const char *const *f = fields; *f; f++)
			known_field |= strcmp(*f, key) == 0;
		if (!known_field)
			return err_set(fail, "event %lld: unknown field %s", *line_no, key);
	}
	json_t *kind_value = json_object_get(ev, "kind");
	if (json_is_string(kind_value) && memchr(json_string_value(kind_value), '\0', json_string_length(kind_value)))
		return err_set(fail, "event %lld: kind contains U+0000", *line_no);
	const char *kind = NULL;
	for (const char *const *k = kinds; *k && !kind; k++)
		if (ndjson_string_is(kind_value, *k))
			kind = *k;
	if (!kind)
		return err_set(fail, "event %lld: kind must be one of the trace kinds of sfma-formats(5)", *line_no);
	json_t *data = json_object_get(ev, "data");
	if (!json_is_object(data))
		return err_set(fail, "event %lld: data must be an object", *line_no);
	long long loop = 0;
	json_t *lv = json_object_get(ev, "loop");
	if (lv && (!ndjson_integer(lv, &loop) || loop < 0 || loop > 1000000))
		return err_set(fail, "event %lld: loop must be an integer >= 0", *line_no);
	json_t *refs = json_object_get(ev, "refs");
	if (refs) {
		size_t i;
		json_t *r;
		if (!json_is_array(refs))
			return err_set(fail, "event %lld: refs must be an array of entry ids", *line_no);
		json_array_foreach(refs, i, r)
			if (!json_is_string(r))
				return err_set(fail, "event %lld: refs must be an array of entry ids", *line_no);
	}
	json_t *cls = json_object_get(ev, "class");
	if (cls && !ndjson_string_is(cls, "reasoning") && !ndjson_string_is(cls, "mechanical"))
		return err_set(fail, "event %lld: class must be reasoning or mechanical", *line_no);
	/* References are checked for shape only: the blobs are the sender's
	 * to have stored (durably) before it sends the event. */
	json_t *evidence = json_object_get(ev, EVIDENCE_MEMBER);
	uint64_t nrefs;
	if (evidence && evidence_entry_refs(ev, any_ref, NULL, &nrefs, &e) < 0)
		return err_set(fail, "event %lld: %s", *line_no, e.text);

	/* The records of the lines the entry stands for (sfma-formats(5),
	 * The observed chain), checked for shape: what they say is held
	 * against the observer's chain by sfma-verify. */
	json_t *wire = json_object_get(ev, OBSERVED_WIRE);
	if (wire && obs_wire_valid(wire, &e) < 0)
		return err_set(fail, "event %lld: %s", *line_no, e.text);

	/* seq strictly increases over the whole file and stays an exact double. */
	double seq = t->seq + 1;
	if (seq > CHAIN_MAX_SEQ)
		return err_set(fail, "seq would exceed 2^53-1");
	char id[CHAIN_ID_MAX];
	chain_entry_id(id, kind, seq);

	json_t *entry = json_object();
	json_object_set_new(entry, "seq", json_real(seq));
	json_object_set_new(entry, "anchor", json_string(t->anchor));
	json_object_set_new(entry, "loop", json_real((double)loop));
	json_object_set_new(entry, "kind", json_string(kind));
	json_object_set_new(entry, "id", json_string(id));
	json_object_set_new(entry, "refs", refs ? json_incref(refs) : json_array());
	if (cls)
		json_object_set(entry, "class", cls);
	json_object_set(entry, "data", data);
	if (evidence)
		json_object_set(entry, EVIDENCE_MEMBER, evidence);
	if (wire)
		json_object_set(entry, OBSERVED_WIRE, wire);
	json_object_set_new(entry, "prevHash", json_string(t->head));

	char hash[65];
	buf_reset(line);
	if (canon_dump(entry, line, &e) < 0)
		return err_set(fail, "event %lld: %s", *line_no, e.text);
	sha256_hex(line->p, line->len, hash);
	json_object_set_new(entry, "hash", json_string(hash));
	buf_reset(line);
	canon_dump(entry, line, &e);
	buf_addc(line, '\n');
	json_decref(entry);

	t->seq = seq;
	memcpy(t->head, hash, sizeof t->head);
	if (strcmp(kind, "clock-anchor") == 0)
		snprintf(t->anchor, sizeof t->anchor, "%s", id);
	return 0;
}

/* One write per entry: a crash leaves either the whole line or a torn tail,
 * which the next writer reports instead of extending. A short write is
 * undone by truncating back to the last whole line. Not yet durable:
 * sync_and_report makes it so before anyone hears of it. */
static void append_line(struct trace *t, const struct buf *line)
{
	ssize_t w;
	do
		w = write(t->fd, line->p, line->len);
	while (w < 0 && errno == EINTR);
	if (w != (ssize_t)line->len) {
		int saved = w < 0 ? errno : ENOSPC;
		if (ftruncate(t->fd, t->size) < 0)
			die("%s: write: %s; and the partial line could not be removed: %s",
			    t->path, strerror(saved), strerror(errno));
		die("%s: write: %s", t->path, strerror(saved));
	}
	chain_digest_add(t->digest, line->p, line->len);
	if (t->digest) {
		/* The leaf is the line as written, without its newline. */
		unsigned char leaf[MERKLE_HASH_LEN];
		merkle_leaf_hash(line->p, line->len - 1, leaf);
		if (merkle_frontier_add(&t->sum.tree, leaf) < 0)
			die("%s: the trace has more lines than a tree can hold", t->path);
	}
	t->sum.last_offset = (uint64_t)t->size;
	t->size += (off_t)line->len;
	t->sum.size = (uint64_t)t->size;
	t->sum.entries++;
	t->sum.max_seq = t->seq;
	t->sum.last_seq = t->seq;
	memcpy(t->sum.head, t->head, sizeof t->sum.head);
	memcpy(t->sum.anchor, t->anchor, sizeof t->sum.anchor);
}

/* The trace is evidence: every entry is on disk before it is reported.
 * The entries appended since the last call (a group: events that arrived
 * together) share one fdatasync, then each is reported, in order. */
static void sync_and_report(struct trace *t, struct buf *reports)
{
	if (!reports->len)
		return;
	if (fdatasync(t->fd) < 0)
		die("%s: fdatasync: %s", t->path, strerror(errno));
	if (fwrite(reports->p, 1, reports->len, stdout) != reports->len || fflush(stdout) != 0)
		die("stdout: %s", strerror(errno));
	buf_reset(reports);
}

/* Another event is already here: a whole line in the reader's buffer, or
 * bytes waiting on the input. It joins the group instead of waiting for a
 * sync of its own. */
static int more_waiting(const struct line_reader *r)
{
	if (lr_has_line(r))
		return 1;
	struct pollfd p = {.fd = r->fd, .events = POLLIN};
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* --recover-torn: keep the torn bytes aside, cut them off, and append a
 * `result` entry that records what was cut - the recovery is evidence too. */
static int recover_torn(struct trace *t)
{
	struct chain_summary sum;
	trace_open(t, 0, 1, &sum);
	struct stat st;
	if (fstat(t->fd, &st) < 0)
		die("%s: %s", t->path, strerror(errno));
	size_t torn_len = (size_t)(st.st_size - (off_t)sum.torn_offset);
	if (torn_len > (64u << 20))
		die("%s: torn tail of %zu bytes is too large to keep", t->path, torn_len);
	char *torn = xmalloc(torn_len + 1);
	if (pread(t->fd, torn, torn_len, (off_t)sum.torn_offset) != (ssize_t)torn_len)
		die("%s: read torn tail: %s", t->path, strerror(errno));

	char saved[4096], digest[65];
	snprintf(saved, sizeof saved, "%s.torn-%lld", t->path, (long long)time(NULL));
	int sfd = open(saved, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (sfd < 0)
		die("%s: %s", saved, strerror(errno));
	if (write_all(sfd, torn, torn_len) < 0 || fsync(sfd) < 0 || close(sfd) < 0)
		die("%s: %s", saved, strerror(errno));
	sha256_hex(torn, torn_len, digest);
	free(torn);
	if (ftruncate(t->fd, (off_t)sum.torn_offset) < 0 || fsync(t->fd) < 0)
		die("%s: truncate: %s", t->path, strerror(errno));

	const char *base = strrchr(saved, '/');
	json_t *ev = json_pack("{s:s, s:{s:s, s:I, s:s, s:s}}", "kind", "result", "data",
	                       "error", "torn-write-recovered", "tornBytes", (json_int_t)torn_len,
	                       "tornSha256", digest, "savedAs", base ? base + 1 : saved);
	struct buf line = {0};
	long long no = 1;
	struct sfma_err e;
	if (make_entry(t, ev, &line, &no, &e) < 0)
		die("%s", e.text);
	append_line(t, &line);
	sync_and_report(t, &line);
	json_decref(ev);
	buf_free(&line);
	return 0;
}

/* The longest event line --max-line may allow. */
#define MAX_LINE_LIMIT (1ul << 30)
/* Entries that may share one fdatasync: a bound on how long the first of
 * them waits to be reported. */
#define GROUP_MAX 64

static const char usage_text[] =
	"usage: sfma-chain [--no-wait] [--max-line BYTES] [--head-cache FILE] TRACE < events\n"
	"       sfma-chain --recover-torn TRACE\n"
	"       sfma-chain --version | --help\n";

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	int no_wait = 0, recover = 0;
	const char *head_cache = NULL;
	unsigned long max_line = NDJSON_DEFAULT_MAX;
	static const struct option longopts[] = {
		{"no-wait", no_argument, NULL, 'n'},
		{"recover-torn", no_argument, NULL, 'r'},
		{"max-line", required_argument, NULL, 'm'},
		{"head-cache", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'n': no_wait = 1; break;
		case 'r': recover = 1; break;
		case 'c': head_cache = optarg; break;
		case 'm':
			if (cli_parse_ulong(optarg, 1, MAX_LINE_LIMIT, &max_line) < 0)
				cli_usage_error(usage_text, "--max-line: a number of bytes, 1 to %lu", MAX_LINE_LIMIT);
			break;
		case 'h': cli_help(usage_text);
		case 'V': cli_version();
		default: cli_bad_option(usage_text, c, argv);
		}
	}
	if (optind == argc)
		cli_usage_error(usage_text, "a TRACE is required");
	if (optind != argc - 1)
		cli_usage_error(usage_text, "one TRACE only (unexpected %s)", argv[optind + 1]);
	struct trace t = {.path = argv[optind], .head_cache = head_cache, .fd = -1};
	/* Confined to the directories of the trace and of its note (sfma(1),
	 * CONFINEMENT): at the planner's go when it passed a channel, else
	 * at the first event, when the trace's directory exists. */
	const char *const places_args[] = { t.path, head_cache, NULL };
	const struct confine_places places = {.args = places_args};
	struct confine_report confined;
	int channel = confine_channel_take(), is_confined = 0;
	if (channel >= 0 || recover) {
		confine_stage(&channel, "sfma-chain", &places, &confined);
		is_confined = 1;
	}
	if (recover)
		return recover_torn(&t);

	struct line_reader r;
	struct sfma_err e;
	struct buf line = {0};
	char *text;
	size_t len;
	int rc;
	lr_init(&r, 0, max_line);
	/* Whoever reads the entries echoed learns why they stopped coming. */
	set_error_echo_if_asked(1);
	struct buf reports = {0};
	size_t grouped = 0;
	while ((rc = lr_next(&r, &text, &len, &e)) == 1) {
		if (!is_confined) {
			confine_stage(&channel, "sfma-chain", &places, &confined);
			is_confined = 1;
		}
		long long no = (long long)r.line_no;
		json_t *ev = ndjson_parse(text, len, &e);
		if (!ev) {
			/* What was appended before it is reported first. */
			sync_and_report(&t, &reports);
			die("event %lld: %s", no, e.text);
		}
		if (t.fd < 0) {
			struct chain_summary sum;
			trace_open(&t, no_wait, 0, &sum);
		}
		if (make_entry(&t, ev, &line, &no, &e) < 0) {
			sync_and_report(&t, &reports);
			die("%s", e.text);
		}
		json_decref(ev);
		append_line(&t, &line);
		buf_add(&reports, line.p, line.len);
		if (++grouped < GROUP_MAX && more_waiting(&r))
			continue;
		sync_and_report(&t, &reports);
		grouped = 0;
	}
	sync_and_report(&t, &reports);
	buf_free(&reports);
	if (rc < 0)
		die("stdin: %s", e.text);
	lr_free(&r);
	buf_free(&line);
	if (t.fd >= 0) {
		note_head(&t);
		close(t.fd);
	}
	return 0;
}
