/* fuzz_journal.c - the evidence journal (lib/evidence.c): its one reading,
 * evidence_journal_next, and the two things decided by it - what a reader
 * of the store finds (evidence_find, evidence_check, evidence_get) and
 * what the next writer's recovery (evidence_open with create) files.
 *
 * Input byte 0: bit 0 picks the mode, the other bits where the journal is
 * cut for a first look (as a reader looks at a live run's journal, then
 * again once it has grown).
 *  - raw: the rest is the journal.
 *  - built: the rest is a list of records, each an op byte, a length byte
 *    and that many bytes of data (fewer at the end of the input), turned
 *    into a journal: sound records (which random bytes almost never are),
 *    one over other bytes, one cut short, a digest in capitals, a length
 *    beyond 2^53 or beyond the end, bytes that are no header, a repeat.
 * Properties:
 *  - the walk agrees with a reading written here from sfma-formats(5):
 *    the same records, then the same kind of stop, at the same place;
 *  - a reader finds (evidence_find, evidence_check, evidence_get: ok, with
 *    the bytes) exactly the sound records before the stop, and nothing else
 *    a header of the journal names; the record the walk stopped at, when
 *    not its header's, is "altered"; a reader that first read a prefix of
 *    the journal and then the whole answers as a fresh one;
 *  - recovery files exactly those blobs, mode 0600, their bytes, leaves no
 *    other file and removes the journal; a reader then finds the same. */
#include "fuzz.h"
#include "lib/evidence.h"
#include "lib/sha.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

/* Durability is not what is tested, and a syncfs(2) per input on a disk
 * shared with other work would make most of the run waiting: the store's
 * one call to it is answered here. */
int syncfs(int fd);
int syncfs(int fd)
{
	(void)fd;
	return 0;
}

static char base[4096], sfma_dir[4200], ev_dir[4300], journal_path[4400];

static void must(int ok, const char *what)
{
	if (!ok) {
		dprintf(fuzz_report_fd, "fuzz_journal: %s: %s\n", what, strerror(errno));
		abort();
	}
}

/* Empty the evidence directory (the harness's own: names it made). */
static void clear_store(void)
{
	DIR *d = opendir(ev_dir);
	must(d != NULL, "opendir");
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			must(unlinkat(dirfd(d), de->d_name, 0) == 0, "unlink");
	closedir(d);
}

static void cleanup(void)
{
	if (!base[0])
		return;
	clear_store();
	rmdir(ev_dir);
	rmdir(sfma_dir);
	rmdir(base);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *tmp = getenv("TMPDIR");
	snprintf(base, sizeof base, "%s/sfma-fuzz-journal.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	must(mkdtemp(base) != NULL, "mkdtemp");
	atexit(cleanup);
	snprintf(sfma_dir, sizeof sfma_dir, "%s/.sfma", base);
	snprintf(ev_dir, sizeof ev_dir, "%s/evidence", sfma_dir);
	snprintf(journal_path, sizeof journal_path, "%s/journal", ev_dir);
	must(mkdir(sfma_dir, 0700) == 0, "mkdir .sfma");
	must(mkdir(ev_dir, 0700) == 0, "mkdir evidence");
	return 0;
}

/* ---- building a journal ------------------------------------------------- */

struct bytes {
	unsigned char *p;
	size_t n, cap;
};

static void add(struct bytes *b, const void *p, size_t n)
{
	if (!b->p || b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		must(b->p != NULL, "realloc");
	}
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void header(struct bytes *b, const char *hex, unsigned long long len)
{
	char h[EVIDENCE_JOURNAL_HEADER_LEN + 1];
	snprintf(h, sizeof h, "%.64s %016llx\n", hex, len);
	add(b, h, EVIDENCE_JOURNAL_HEADER_LEN);
}

static void build(const uint8_t *in, size_t n, struct bytes *j)
{
	size_t last_at = 0, last_len = 0;
	int have_last = 0;
	for (size_t i = 0; i + 2 <= n;) {
		uint8_t op = in[i], len = in[i + 1];
		i += 2;
		if (len > n - i)
			len = (uint8_t)(n - i);
		const uint8_t *d = in + i;
		i += len;
		char hex[SHA256_HEX_LEN + 1];
		sha256_hex(d, len, hex);
		switch (op % 8) {
		case 0:
		case 1: /* sound */
			last_at = j->n;
			last_len = EVIDENCE_JOURNAL_HEADER_LEN + len;
			have_last = 1;
			header(j, hex, len);
			add(j, d, len);
			break;
		case 2: { /* other bytes under the header */
			unsigned char flipped[256];
			memcpy(flipped, d, len);
			if (len)
				flipped[op % len] ^= (uint8_t)(1u << (op >> 5));
			else
				sha256_hex("x", 1, hex);
			header(j, hex, len);
			add(j, flipped, len);
			break;
		}
		case 3: /* cut short: what follows is read as its bytes */
			header(j, hex, len + 1u + (op >> 3));
			add(j, d, len);
			break;
		case 4: /* the digest in capitals */
			for (char *p = hex; *p; p++)
				if (*p >= 'a' && *p <= 'f')
					*p = (char)(*p - 'a' + 'A');
			header(j, hex, len);
			add(j, d, len);
			break;
		case 5: /* bytes as they are */
			add(j, d, len);
			break;
		case 6: /* the last sound record again */
			if (have_last) {
				struct bytes copy = {0};
				add(&copy, j->p + last_at, last_len);
				add(j, copy.p, copy.n);
				free(copy.p);
			}
			break;
		case 7: /* a length no reference can state, or past the end */
			header(j, hex, (op & 8) ? (1ull << 53) + len : len + 4096u);
			add(j, d, len);
			break;
		}
	}
}

/* ---- the reading of sfma-formats(5) ---------------------------------- */

struct rec {
	char sha256[SHA256_HEX_LEN + 1];
	uint64_t bytes, off;
};

struct reading {
	struct rec *v;
	size_t n;
	enum evidence_journal_step stop; /* END, TORN or BAD */
	uint64_t stop_at;
	char bad_sha[SHA256_HEX_LEN + 1]; /* a BAD record's header digest, "" when it had none */
};

static int lower_hex(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return 0;
	return 1;
}

static void read_reference(const unsigned char *j, size_t n, struct reading *r)
{
	memset(r, 0, sizeof *r);
	r->v = calloc(n / EVIDENCE_JOURNAL_HEADER_LEN + 1, sizeof *r->v);
	must(r->v != NULL, "calloc");
	size_t off = 0;
	for (;;) {
		r->stop_at = off;
		if (off == n) {
			r->stop = EVIDENCE_JOURNAL_END;
			return;
		}
		if (n - off < EVIDENCE_JOURNAL_HEADER_LEN) {
			r->stop = EVIDENCE_JOURNAL_TORN;
			return;
		}
		const unsigned char *h = j + off;
		if (!lower_hex(h, 64) || h[64] != ' ' || !lower_hex(h + 65, 16) || h[81] != '\n') {
			r->stop = EVIDENCE_JOURNAL_BAD;
			return;
		}
		uint64_t len = 0;
		for (int i = 65; i < 81; i++)
			len = len * 16 + (uint64_t)(h[i] <= '9' ? h[i] - '0' : h[i] - 'a' + 10);
		if (len > 9007199254740991ull) {
			r->stop = EVIDENCE_JOURNAL_BAD;
			return;
		}
		if (len > n - off - EVIDENCE_JOURNAL_HEADER_LEN) {
			r->stop = EVIDENCE_JOURNAL_TORN;
			return;
		}
		char hex[SHA256_HEX_LEN + 1];
		sha256_hex(h + EVIDENCE_JOURNAL_HEADER_LEN, (size_t)len, hex);
		if (memcmp(hex, h, 64) != 0) {
			r->stop = EVIDENCE_JOURNAL_BAD;
			memcpy(r->bad_sha, h, 64);
			return;
		}
		struct rec *x = &r->v[r->n++];
		memcpy(x->sha256, h, 64);
		x->bytes = len;
		x->off = off + EVIDENCE_JOURNAL_HEADER_LEN;
		off += EVIDENCE_JOURNAL_HEADER_LEN + (size_t)len;
	}
}

static const struct rec *sound(const struct reading *r, const char *hex)
{
	for (size_t i = 0; i < r->n; i++)
		if (memcmp(r->v[i].sha256, hex, 64) == 0)
			return &r->v[i];
	return NULL;
}

/* ---- the properties ------------------------------------------------------ */

static void write_journal(const unsigned char *p, size_t n, int append)
{
	int fd = open(journal_path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0600);
	must(fd >= 0, "open journal");
	for (size_t done = 0; done < n;) {
		ssize_t w = write(fd, p + done, n - done);
		must(w > 0, "write journal");
		done += (size_t)w;
	}
	close(fd);
}

/* The walk, step by step, is the reading. */
static void check_walk(size_t n, const struct reading *want)
{
	int fd = open(journal_path, O_RDONLY | O_CLOEXEC);
	must(fd >= 0, "open journal");
	uint64_t off = 0;
	for (size_t i = 0;; i++) {
		struct evidence_journal_rec r;
		struct sfma_err e;
		enum evidence_journal_step step = evidence_journal_next(fd, off, n, &r, &e);
		if (i < want->n) {
			FUZZ_CHECK(step == EVIDENCE_JOURNAL_RECORD, "record %zu at %llu: step %d, the reading has a record",
			           i, (unsigned long long)off, step);
			FUZZ_CHECK(strcmp(r.sha256, want->v[i].sha256) == 0 && r.bytes == want->v[i].bytes &&
			           r.off == want->v[i].off, "record %zu differs from the reading", i);
			off = r.off + r.bytes;
			continue;
		}
		FUZZ_CHECK(step == want->stop, "stop at %llu: step %d, the reading stops with %d",
		           (unsigned long long)off, step, want->stop);
		FUZZ_CHECK(off == want->stop_at, "stopped at %llu, the reading at %llu", (unsigned long long)off,
		           (unsigned long long)want->stop_at);
		if (step == EVIDENCE_JOURNAL_BAD)
			FUZZ_CHECK(strcmp(r.sha256, want->bad_sha) == 0, "a bad record's digest: \"%s\", want \"%s\"",
			           r.sha256, want->bad_sha);
		break;
	}
	close(fd);
}

/* Every 64 lowercase hex digits the journal holds, at any offset: the
 * digests a reader could be asked for. */
static size_t candidates(const unsigned char *j, size_t n, char (**out)[SHA256_HEX_LEN + 1])
{
	size_t k = 0;
	*out = calloc(n / 64 + n + 1, sizeof **out);
	must(*out != NULL, "calloc");
	for (size_t i = 0; i + 64 <= n; i++)
		if (lower_hex(j + i, 64)) {
			memcpy((*out)[k], j + i, 64);
			(*out)[k][64] = '\0';
			k++;
		}
	return k;
}

/* What a reader of the store answers for hex, against the reading. */
static void check_reader(struct evidence_store *s, const unsigned char *j, const struct reading *want,
                         const char *hex, int journal_there, const char *who)
{
	const struct rec *r = sound(want, hex);
	struct evidence_ref ref;
	int found = evidence_find(s, hex, &ref) == 0;
	FUZZ_CHECK(found == (r != NULL), "%s: evidence_find %s: %d, the reading %s it", who, hex, found,
	           r ? "has" : "has not");
	struct sfma_err e;
	if (r) {
		FUZZ_CHECK(ref.bytes == r->bytes, "%s: evidence_find %s: %llu bytes, not %llu", who, hex,
		           (unsigned long long)ref.bytes, (unsigned long long)r->bytes);
		FUZZ_CHECK(evidence_check(s, &ref, &e) == EVIDENCE_OK, "%s: evidence_check %s not ok", who, hex);
		char *data = evidence_get(s, &ref, 1 << 20, &e);
		FUZZ_CHECK(data != NULL, "%s: evidence_get %s: %s", who, hex, e.text);
		FUZZ_CHECK(memcmp(data, j + r->off, (size_t)r->bytes) == 0, "%s: evidence_get %s: other bytes", who, hex);
		free(data);
		return;
	}
	/* Asked for with any size: never ok. The bad record's own digest, while
	 * its journal is there and no sound record holds it, is altered. */
	memcpy(ref.sha256, hex, sizeof ref.sha256);
	ref.bytes = 0;
	enum evidence_state st = evidence_check(s, &ref, &e);
	FUZZ_CHECK(st != EVIDENCE_OK && st != EVIDENCE_ERROR, "%s: evidence_check %s: %d for a blob not sound", who,
	           hex, st);
	if (journal_there && want->stop == EVIDENCE_JOURNAL_BAD && strcmp(hex, want->bad_sha) == 0)
		FUZZ_CHECK(st == EVIDENCE_ALTERED, "%s: the bad record's %s: %d, not altered", who, hex, st);
	else
		FUZZ_CHECK(st == EVIDENCE_MISSING, "%s: %s: %d, not missing", who, hex, st);
	char *data = evidence_get(s, &ref, 1 << 20, &e);
	FUZZ_CHECK(data == NULL, "%s: evidence_get %s gave bytes for a blob not sound", who, hex);
}

static struct evidence_store *open_store(int create, int *fd)
{
	*fd = open(sfma_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	must(*fd >= 0, "open .sfma");
	struct sfma_err e;
	struct evidence_store *s = evidence_open(*fd, create, &e);
	FUZZ_CHECK(s != NULL, "evidence_open(create=%d): %s", create, e.text);
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	struct bytes j = {0};
	if (data[0] & 1)
		add(&j, data + 1, size - 1);
	else
		build(data + 1, size - 1, &j);
	if (!j.p) /* no record built: an empty journal */
		add(&j, "", 0);
	size_t cut = (size_t)((uint64_t)j.n * (data[0] >> 1) / 127);

	clear_store();
	struct reading whole, part;
	read_reference(j.p, j.n, &whole);
	read_reference(j.p, cut, &part);
	char(*cand)[SHA256_HEX_LEN + 1];
	size_t ncand = candidates(j.p, j.n, &cand);

	/* A reader that looked while the journal held its first cut bytes,
	 * then again once it held them all; and one that only sees the whole. */
	write_journal(j.p, cut, 0);
	check_walk(cut, &part);
	int fd_early, fd_fresh;
	struct evidence_store *early = open_store(0, &fd_early);
	for (size_t i = 0; i < ncand; i++)
		check_reader(early, j.p, &part, cand[i], 1, "reader of the first bytes");
	write_journal(j.p + cut, j.n - cut, 1);
	check_walk(j.n, &whole);
	struct evidence_store *fresh = open_store(0, &fd_fresh);
	for (size_t i = 0; i < ncand; i++) {
		check_reader(early, j.p, &whole, cand[i], 1, "reader of the grown journal");
		check_reader(fresh, j.p, &whole, cand[i], 1, "reader");
	}
	evidence_close(early);
	evidence_close(fresh);
	close(fd_early);
	close(fd_fresh);

	/* The next writer files what the readers found, and only that. */
	int fd_writer;
	struct evidence_store *writer = open_store(1, &fd_writer);
	evidence_close(writer);
	close(fd_writer);
	size_t filed = 0;
	DIR *d = opendir(ev_dir);
	must(d != NULL, "opendir");
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		FUZZ_CHECK(strlen(de->d_name) == 64, "recovery left %s", de->d_name);
		const struct rec *r = sound(&whole, de->d_name);
		FUZZ_CHECK(r != NULL, "recovery filed %s, which no reader found", de->d_name);
		struct stat st;
		must(fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0, "stat blob");
		FUZZ_CHECK(S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0600 && (uint64_t)st.st_size == r->bytes,
		           "blob %s: mode %o, %lld bytes", de->d_name, (unsigned)st.st_mode, (long long)st.st_size);
		filed++;
	}
	closedir(d);
	size_t distinct = 0;
	for (size_t i = 0; i < whole.n; i++)
		distinct += sound(&whole, whole.v[i].sha256) == &whole.v[i];
	FUZZ_CHECK(filed == distinct, "recovery filed %zu blobs, the readers found %zu", filed, distinct);
	int fd_after;
	struct evidence_store *after = open_store(0, &fd_after);
	for (size_t i = 0; i < ncand; i++)
		check_reader(after, j.p, &whole, cand[i], 0, "reader after recovery");
	evidence_close(after);
	close(fd_after);

	free(cand);
	free(whole.v);
	free(part.v);
	free(j.p);
	return 0;
}
