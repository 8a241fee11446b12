/* evidence.c - content-addressed blobs under .sfma/evidence. */
#include "evidence.h"
#include "canon.h"
#include "ndjson.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* Blobs found intact, so that one referenced again (a repeated reminder,
 * the same tool result) is not read again: direct-mapped on the digest,
 * a fixed size whatever the length of the trace. */
#define CACHE_SLOTS 1024

struct cache_slot {
	unsigned char used;
	char sha256[SHA256_HEX_LEN];
	uint64_t bytes;
};

/* Blobs this writer knows to be durable. */
struct durable_slot {
	unsigned char used;
	char sha256[SHA256_HEX_LEN];
	uint64_t bytes;
};

/* The journal (evidence.h): one record per blob, a fixed header then the
 * bytes. */
#define JOURNAL_NAME EVIDENCE_JOURNAL
#define JOURNAL_HEADER_LEN EVIDENCE_JOURNAL_HEADER_LEN
/* Records the filing thread waits for before it sets to work. */
#define FILER_BATCH 8

struct rec_list {
	struct evidence_journal_rec *v;
	size_t n, cap;
};

struct evidence_store {
	int dirfd;                     /* .sfma/evidence, or -1 */
	int dir_dirty;                 /* the journal's new name not yet fsynced (under lock) */
	int writer;                    /* opened with create */
	int journal_broken;              /* a journal write failed and could not be cut off */
	int empty_at_open;             /* a writer found no blob filed: none can exist but its own */
	/* The writer's journal, opened at the first blob it takes. */
	int journal_fd;                /* or -1 */
	/* Records written (appended_gen) and known durable (synced_gen), under
	 * lock: evidence_sync may run on another thread than the appends, and
	 * covers exactly the records written before its fdatasync began. */
	uint64_t appended_gen, synced_gen;
	uint64_t journal_end;
	/* Records to file under their names: filed[0..next_to_file) are done.
	 * Shared with the filing thread, under lock, signalled by work. */
	struct rec_list to_file;
	size_t next_to_file;
	int filer_started, filer_stop;
	pthread_t filer;
	pthread_cond_t work;
	char filer_error[SFMA_ERR_MAX]; /* the first filing failure */
	/* A reader's index of the journal (blobs of a live or interrupted
	 * run), under lock: its sound records, in order, up to index_end,
	 * read from the journal (index_dev, index_ino) when it was
	 * index_size bytes long; index_bad is the record the reading stopped
	 * at when it is not its header's (sha256 "" when none is). */
	struct rec_list index;
	uint64_t index_end, index_size;
	int index_read;
	dev_t index_dev;
	ino_t index_ino;
	struct evidence_journal_rec index_bad;
	struct durable_slot durable[CACHE_SLOTS]; /* writers only; not locked */
	enum evidence_state dir_state; /* what every check answers when dirfd < 0 */
	char dir_error[SFMA_ERR_MAX];  /* with EVIDENCE_ERROR */
	pthread_mutex_t lock;          /* guards cache */
	struct cache_slot cache[CACHE_SLOTS];
};


static int recover_journal(struct evidence_store *s, struct sfma_err *e);
static void stop_filer(struct evidence_store *s);

static void rec_push(struct rec_list *l, const struct evidence_journal_rec *r)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 64;
		l->v = xrealloc(l->v, l->cap * sizeof *l->v);
	}
	l->v[l->n++] = *r;
}

static enum evidence_state hash_range(int fd, uint64_t off, const struct evidence_ref *ref, int probe_past,
                                      char *keep, uint64_t keep_max, struct sfma_err *e);

/* Records are appended in order, and a run names a record only once it is
 * whole and fdatasynced: only the last can be torn. A record that is not
 * its header's was written by someone else, and nothing behind it can be
 * trusted to be the run's - so every reader and the recovery stop at the
 * first record that is not sound (evidence.h). */
enum evidence_journal_step evidence_journal_next(int fd, uint64_t off, uint64_t end,
                                                 struct evidence_journal_rec *r, struct sfma_err *e)
{
	char h[JOURNAL_HEADER_LEN];
	r->sha256[0] = '\0';
	r->bytes = 0;
	r->off = off;
	if (off >= end)
		return EVIDENCE_JOURNAL_END;
	if (end - off < JOURNAL_HEADER_LEN)
		return EVIDENCE_JOURNAL_TORN;
	for (size_t got = 0; got < sizeof h;) {
		ssize_t n = pread(fd, h + got, sizeof h - got, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err_set(e, "%s: %s: read: %s", EVIDENCE_DIR, JOURNAL_NAME, strerror(errno));
			return EVIDENCE_JOURNAL_ERROR;
		}
		if (n == 0) /* shorter than its fstat: cut while being read */
			return EVIDENCE_JOURNAL_TORN;
		got += (size_t)n;
	}
	if (!is_sha256_hex(h, SHA256_HEX_LEN) || h[SHA256_HEX_LEN] != ' ' || h[sizeof h - 1] != '\n')
		return EVIDENCE_JOURNAL_BAD;
	uint64_t n = 0;
	for (size_t i = SHA256_HEX_LEN + 1; i < sizeof h - 1; i++) {
		char c = h[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return EVIDENCE_JOURNAL_BAD;
		n = n << 4 | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
	}
	if (n > EVIDENCE_MAX_REF_BYTES)
		return EVIDENCE_JOURNAL_BAD;
	memcpy(r->sha256, h, SHA256_HEX_LEN);
	r->sha256[SHA256_HEX_LEN] = '\0';
	r->bytes = n;
	r->off = off + JOURNAL_HEADER_LEN;
	if (n > end - off - JOURNAL_HEADER_LEN)
		return EVIDENCE_JOURNAL_TORN;
	struct evidence_ref ref;
	memcpy(ref.sha256, r->sha256, sizeof ref.sha256);
	ref.bytes = n;
	switch (hash_range(fd, r->off, &ref, 0, NULL, 0, e)) {
	case EVIDENCE_OK:
		return EVIDENCE_JOURNAL_RECORD;
	case EVIDENCE_ERROR:
		return EVIDENCE_JOURNAL_ERROR;
	default: /* other bytes (or fewer: the journal cut since its fstat) */
		return EVIDENCE_JOURNAL_BAD;
	}
}

/* 1 when the store holds no blob at all (a workspace's first run): its
 * writer, which holds the run's lock, then need not look for one on disk
 * before it journals a blob. Stops at the first blob found. */
static int no_blob_filed(int dirfd)
{
	int fd = dup(dirfd);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	int empty = 1;
	struct dirent *de;
	while (empty && (de = readdir(d)))
		empty = !is_sha256_hex(de->d_name, strlen(de->d_name));
	closedir(d);
	return empty;
}

struct evidence_store *evidence_open(int sfma_dirfd, int create, struct sfma_err *e)
{
	struct evidence_store *s = xcalloc(1, sizeof *s);
	s->dirfd = -1;
	s->journal_fd = -1;
	s->writer = create;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->work, NULL);
	if (create) {
		if (mkdirat(sfma_dirfd, EVIDENCE_DIR, 0700) == 0) {
			/* The new directory's own entry must be durable too, or a
			 * crash could lose every blob written into it. */
			if (fsync(sfma_dirfd) < 0 && errno != EINVAL && errno != EROFS) {
				err_set(e, "%s: fsync: %s", EVIDENCE_DIR, strerror(errno));
				evidence_close(s);
				return NULL;
			}
		} else if (errno != EEXIST) {
			err_set(e, "mkdir %s: %s", EVIDENCE_DIR, strerror(errno));
			evidence_close(s);
			return NULL;
		}
	}
	/* O_NOFOLLOW: the store is the runner's; a link planted in its place
	 * must not redirect blobs, or a verifier's reads, elsewhere. With
	 * O_DIRECTORY a link fails ENOTDIR, like a file there (Linux, open(2)). */
	s->dirfd = sfma_dirfd < 0 ? -1 :
	           openat(sfma_dirfd, EVIDENCE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (s->dirfd >= 0) {
		/* A writer keeps the store private even if it found it made
		 * with a looser mode (by hand, or under another umask). */
		struct stat st;
		if (create && fstat(s->dirfd, &st) == 0 && (st.st_mode & 07777) != 0700 &&
		    fchmod(s->dirfd, 0700) < 0) {
			err_set(e, "%s: chmod: %s", EVIDENCE_DIR, strerror(errno));
			evidence_close(s);
			return NULL;
		}
		s->dir_state = EVIDENCE_OK;
		/* A run that stopped before filing its journal: its blobs are
		 * filed now, before this writer adds any. */
		if (create && recover_journal(s, e) < 0) {
			evidence_close(s);
			return NULL;
		}
		if (create)
			s->empty_at_open = no_blob_filed(s->dirfd);
		return s;
	}
	int err = sfma_dirfd < 0 ? ENOENT : errno;
	if (create) {
		err_set(e, "%s: %s", EVIDENCE_DIR,
		        err == ENOTDIR || err == ELOOP ? "not a directory (a link or a file is in its place)"
		                                       : strerror(err));
		evidence_close(s);
		return NULL;
	}
	if (err == ENOENT) {
		s->dir_state = EVIDENCE_MISSING;
	} else if (err == ENOTDIR || err == ELOOP) {
		s->dir_state = EVIDENCE_ALTERED;
	} else {
		s->dir_state = EVIDENCE_ERROR;
		snprintf(s->dir_error, sizeof s->dir_error, "%s: %s", EVIDENCE_DIR, strerror(err));
	}
	return s;
}

void evidence_close(struct evidence_store *s)
{
	if (!s)
		return;
	/* Without evidence_finish the journal stays: it is durable, readers
	 * find its blobs, and the next writer files them. */
	stop_filer(s);
	if (s->journal_fd >= 0)
		close(s->journal_fd);
	if (s->dirfd >= 0)
		close(s->dirfd);
	free(s->to_file.v);
	free(s->index.v);
	pthread_cond_destroy(&s->work);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int evidence_ref_parse(const json_t *ref, struct evidence_ref *out, struct sfma_err *e)
{
	if (!json_is_object(ref))
		return err_set(e, "not a reference {\"sha256\",\"bytes\"}");
	json_t *h = json_object_get(ref, "sha256"), *b = json_object_get(ref, "bytes");
	if (!h || !b || json_object_size(ref) != 2)
		return err_set(e, "not a reference: its members must be exactly sha256 and bytes");
	if (!json_is_string(h) || !is_sha256_hex(json_string_value(h), json_string_length(h)))
		return err_set(e, "sha256 is not 64 lowercase hex digits");
	/* bytes is read as a double (sfma-formats(5)): an integral value,
	 * and small enough that the double is that exact integer. */
	double d = json_is_number(b) ? json_number_value(b) : -1;
	if (!json_is_number(b) || !(d >= 0) || d > (double)EVIDENCE_MAX_REF_BYTES || d != (double)(uint64_t)d)
		return err_set(e, "bytes is not a whole number from 0 to 2^53-1");
	memcpy(out->sha256, json_string_value(h), SHA256_HEX_LEN + 1);
	out->bytes = (uint64_t)d;
	return 0;
}

/* The canonical form's key order, so that a tree and a scan of the
 * canonical text meet references in the same order. */
static int key_cmp(const void *a, const void *b)
{
	const char *x = *(const char *const *)a, *y = *(const char *const *)b;
	return utf16_cmp(x, strlen(x), y, strlen(y));
}

int evidence_entry_refs(const json_t *entry,
                        int (*fn)(void *arg, const char *name, const struct evidence_ref *ref),
                        void *arg, uint64_t *count, struct sfma_err *e)
{
	*count = 0;
	json_t *ev = json_object_get(entry, EVIDENCE_MEMBER);
	if (!ev)
		return 0;
	if (!json_is_object(ev))
		return err_set(e, "evidence is not an object of references");
	size_t n = json_object_size(ev), k = 0;
	const char **keys = xmalloc((n ? n : 1) * sizeof *keys);
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)ev, key, v)
		keys[k++] = key;
	qsort(keys, n, sizeof *keys, key_cmp);
	int rc = 0;
	for (k = 0; k < n && rc == 0; k++) {
		v = json_object_get(ev, keys[k]);
		size_t items = json_is_array(v) ? json_array_size(v) : 1;
		for (size_t i = 0; i < items && rc == 0; i++) {
			struct evidence_ref ref;
			struct sfma_err why;
			json_t *item = json_is_array(v) ? json_array_get(v, i) : v;
			if (evidence_ref_parse(item, &ref, &why) < 0) {
				/* Keys are the writer's, but a hostile trace may put
				 * anything there: only printable ASCII is shown. */
				char shown[64];
				size_t j = 0;
				for (const char *p = keys[k]; *p && j < sizeof shown - 1; p++)
					shown[j++] = *p >= 0x20 && *p < 0x7f ? *p : '?';
				shown[j] = '\0';
				rc = json_is_array(v) ? err_set(e, "evidence.%s[%zu]: %s", shown, i, why.text)
				                      : err_set(e, "evidence.%s: %s", shown, why.text);
				break;
			}
			++*count;
			rc = fn(arg, keys[k], &ref);
		}
	}
	free(keys);
	return rc;
}

static int cache_slot_of(const char *hex)
{
	/* The digest is uniform: its first hex digits are index enough. */
	unsigned v = 0;
	for (int i = 0; i < 4; i++)
		v = v << 4 | (unsigned)(hex[i] <= '9' ? hex[i] - '0' : hex[i] - 'a' + 10);
	return (int)(v % CACHE_SLOTS);
}

static int cache_has(struct evidence_store *s, const struct evidence_ref *ref)
{
	struct cache_slot *c = &s->cache[cache_slot_of(ref->sha256)];
	pthread_mutex_lock(&s->lock);
	int hit = c->used && c->bytes == ref->bytes && memcmp(c->sha256, ref->sha256, SHA256_HEX_LEN) == 0;
	pthread_mutex_unlock(&s->lock);
	return hit;
}

static void cache_add(struct evidence_store *s, const struct evidence_ref *ref)
{
	struct cache_slot *c = &s->cache[cache_slot_of(ref->sha256)];
	pthread_mutex_lock(&s->lock);
	c->used = 1;
	c->bytes = ref->bytes;
	memcpy(c->sha256, ref->sha256, SHA256_HEX_LEN);
	pthread_mutex_unlock(&s->lock);
}

/* Hash bytes [off, off + ref->bytes) of fd, and with probe_past one byte
 * more (a file that grew since its fstat is seen as altered without
 * reading all of it); the bytes go to keep (ref->bytes + 1 bytes of room)
 * when keep is not NULL. */
static enum evidence_state hash_range(int fd, uint64_t off, const struct evidence_ref *ref, int probe_past,
                                      char *keep, uint64_t keep_max, struct sfma_err *e)
{
	struct sha256 ctx;
	sha256_init(&ctx);
	char chunk[64 << 10];
	uint64_t total = 0, limit = ref->bytes + (probe_past ? 1 : 0);
	for (;;) {
		/* Kept up to keep_max bytes (the rest only hashed). */
		int keeping = keep && total < keep_max;
		char *dst = keeping ? keep + total : chunk;
		uint64_t room = limit - total;
		if (room == 0)
			break;
		if (room > sizeof chunk)
			room = sizeof chunk;
		if (keeping && room > keep_max - total)
			room = keep_max - total;
		ssize_t got = pread(fd, dst, (size_t)room, (off_t)(off + total));
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			err_set(e, "evidence %s: read: %s", ref->sha256, strerror(errno));
			return EVIDENCE_ERROR;
		}
		if (got == 0)
			break;
		sha256_update(&ctx, dst, (size_t)got);
		total += (uint64_t)got;
	}
	unsigned char md[32];
	char hex[SHA256_HEX_LEN + 1];
	sha256_final(&ctx, md);
	hex_encode(md, sizeof md, hex);
	if (total != ref->bytes || memcmp(hex, ref->sha256, SHA256_HEX_LEN) != 0)
		return EVIDENCE_ALTERED;
	return EVIDENCE_OK;
}

/* Bring the reader's index of the journal fd (st: its fstat) up to date,
 * under s->lock: read on from where the last reading stopped, once the
 * journal has grown. Another journal (filed, removed and begun again: a
 * new inode, a shorter file, or another first record) is read afresh.
 * 0, or -1 with e filled when a read failed (the next look reads again). */
static int index_journal(struct evidence_store *s, int fd, const struct stat *st, struct sfma_err *e)
{
	uint64_t size = (uint64_t)st->st_size;
	int same = s->index_read && st->st_dev == s->index_dev && st->st_ino == s->index_ino &&
	           size >= s->index_end;
	if (same && s->index.n) {
		/* An inode number is reused at once on some file systems: the
		 * first record must still be the one indexed. */
		const struct evidence_journal_rec *first = &s->index.v[0];
		char h[JOURNAL_HEADER_LEN + 1], now[JOURNAL_HEADER_LEN];
		snprintf(h, sizeof h, "%s %016llx\n", first->sha256, (unsigned long long)first->bytes);
		same = pread(fd, now, sizeof now, 0) == (ssize_t)sizeof now && memcmp(now, h, sizeof now) == 0;
	}
	if (!same) {
		s->index.n = 0;
		s->index_end = 0;
	} else if (size == s->index_size) {
		return 0; /* nothing written since it was read */
	}
	s->index_bad.sha256[0] = '\0';
	for (;;) {
		struct evidence_journal_rec r;
		enum evidence_journal_step step = evidence_journal_next(fd, s->index_end, size, &r, e);
		if (step == EVIDENCE_JOURNAL_ERROR) {
			s->index_read = 0;
			return -1;
		}
		if (step != EVIDENCE_JOURNAL_RECORD) {
			if (step == EVIDENCE_JOURNAL_BAD)
				s->index_bad = r;
			break;
		}
		rec_push(&s->index, &r);
		s->index_end = r.off + r.bytes;
	}
	s->index_read = 1;
	s->index_dev = st->st_dev;
	s->index_ino = st->st_ino;
	s->index_size = size;
	return 0;
}

/* The journal, opened by a reader: a descriptor and its fstat, or -1
 * when there is none that is a regular file (a link or a FIFO in its
 * place is no journal: the next writer removes it unread). */
static int open_journal(struct evidence_store *s, struct stat *st)
{
	int fd = openat(s->dirfd, JOURNAL_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd >= 0 && (fstat(fd, st) < 0 || !S_ISREG(st->st_mode))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* The journal's record of blob hex: 1 with *found, its sound record; 2
 * with *found, the record the reading stopped at (not its header's); 0
 * none; -1 a read failed (e). Takes s->lock. */
static int journal_lookup(struct evidence_store *s, int fd, const struct stat *st, const char *hex,
                          struct evidence_journal_rec *found, struct sfma_err *e)
{
	int have = 0;
	pthread_mutex_lock(&s->lock);
	if (index_journal(s, fd, st, e) < 0)
		have = -1;
	for (size_t i = 0; have == 0 && i < s->index.n; i++)
		if (memcmp(s->index.v[i].sha256, hex, SHA256_HEX_LEN) == 0) {
			*found = s->index.v[i];
			have = 1;
		}
	if (have == 0 && s->index_bad.sha256[0] && memcmp(s->index_bad.sha256, hex, SHA256_HEX_LEN) == 0) {
		*found = s->index_bad;
		have = 2;
	}
	pthread_mutex_unlock(&s->lock);
	return have;
}

/* A reader's look into the journal for a blob not filed (or not intact
 * under its name): what the next writer would file is what is found. */
static enum evidence_state read_journal(struct evidence_store *s, const struct evidence_ref *ref, char *keep,
                                        uint64_t keep_max, struct sfma_err *e)
{
	struct stat st;
	int fd = open_journal(s, &st);
	if (fd < 0)
		return EVIDENCE_MISSING; /* no journal: nothing waits to be filed */
	struct evidence_journal_rec found;
	int have = journal_lookup(s, fd, &st, ref->sha256, &found, e);
	enum evidence_state state;
	if (have < 0)
		state = EVIDENCE_ERROR;
	else if (have == 0)
		state = EVIDENCE_MISSING;
	else if (have == 2 || found.bytes != ref->bytes) /* not its bytes, or not its size */
		state = EVIDENCE_ALTERED;
	else
		state = hash_range(fd, found.off, ref, 0, keep, keep_max, e);
	close(fd);
	return state;
}

/* Open, stat and hash blob ref; its bytes go to keep (ref->bytes + 1
 * bytes of room) when keep is not NULL. fd_out, when not NULL, receives
 * the still open descriptor of an intact blob (never one in the journal).
 * A blob that is not filed yet is looked for in the journal when
 * from_journal is set. */
static enum evidence_state read_blob_at(struct evidence_store *s, const struct evidence_ref *ref,
                                        char *keep, uint64_t keep_max, int *fd_out, int from_journal,
                                        struct sfma_err *e)
{
	if (s->dirfd < 0) {
		if (s->dir_state == EVIDENCE_ERROR)
			err_set(e, "%s", s->dir_error);
		return s->dir_state;
	}
	/* O_NONBLOCK: a FIFO planted under a blob's name must not hang the
	 * reader (it is then reported altered: not a regular file). */
	enum evidence_state state;
	int fd = openat(s->dirfd, ref->sha256, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 && errno == ENOENT) {
		state = EVIDENCE_MISSING;
	} else if (fd < 0 && (errno == ELOOP || errno == ENXIO)) { /* a link; a socket */
		state = EVIDENCE_ALTERED;
	} else if (fd < 0) {
		err_set(e, "evidence %s: %s", ref->sha256, strerror(errno));
		return EVIDENCE_ERROR;
	} else if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != ref->bytes) {
		state = EVIDENCE_ALTERED;
	} else {
		state = hash_range(fd, 0, ref, 1, keep, keep_max, e);
	}
	if (fd >= 0 && state == EVIDENCE_OK && fd_out) {
		*fd_out = fd;
		fd = -1;
	}
	if (fd >= 0)
		close(fd);
	if (state == EVIDENCE_OK || state == EVIDENCE_ERROR || !from_journal)
		return state;
	/* Not filed, or not intact under its name: the journal's sound
	 * record is what the next writer files there (recover_journal). */
	enum evidence_state in_journal = read_journal(s, ref, keep, keep_max, e);
	if (in_journal != EVIDENCE_MISSING || state == EVIDENCE_ALTERED)
		return in_journal != EVIDENCE_MISSING ? in_journal : state;
	/* Filed and its journal removed between the two looks (a live run
	 * ending): the name holds it now. */
	return read_blob_at(s, ref, keep, keep_max, fd_out, 0, e);
}

static enum evidence_state read_blob(struct evidence_store *s, const struct evidence_ref *ref,
                                     char *keep, int *fd_out, struct sfma_err *e)
{
	return read_blob_at(s, ref, keep, UINT64_MAX, fd_out, 1, e);
}

enum evidence_state evidence_head(struct evidence_store *s, const struct evidence_ref *ref, char *head,
                                  size_t max, size_t *have, struct sfma_err *e)
{
	/* hash_range reads one byte past a file's size: room for it. */
	enum evidence_state st = read_blob_at(s, ref, head, max, NULL, 1, e);
	*have = st == EVIDENCE_OK ? (ref->bytes < max ? (size_t)ref->bytes : max) : 0;
	return st;
}

int evidence_find(struct evidence_store *s, const char *hex, struct evidence_ref *out)
{
	if (s->dirfd < 0 || !is_sha256_hex(hex, strlen(hex)))
		return -1;
	memcpy(out->sha256, hex, SHA256_HEX_LEN + 1);
	struct stat st;
	if (fstatat(s->dirfd, hex, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
		out->bytes = (uint64_t)st.st_size;
		return 0;
	}
	/* Not filed yet: the journal's sound record knows its length. */
	int fd = open_journal(s, &st);
	if (fd < 0)
		return -1;
	struct evidence_journal_rec found;
	struct sfma_err ignored;
	int have = journal_lookup(s, fd, &st, hex, &found, &ignored);
	close(fd);
	if (have != 1)
		return -1;
	out->bytes = found.bytes;
	return 0;
}

enum evidence_state evidence_check(struct evidence_store *s, const struct evidence_ref *ref,
                                   struct sfma_err *e)
{
	if (s->dirfd >= 0 && cache_has(s, ref))
		return EVIDENCE_OK;
	enum evidence_state st = read_blob(s, ref, NULL, NULL, e);
	if (st == EVIDENCE_OK)
		cache_add(s, ref);
	return st;
}

char *evidence_get(struct evidence_store *s, const struct evidence_ref *ref, size_t max,
                   struct sfma_err *e)
{
	if (ref->bytes > max || ref->bytes >= SIZE_MAX - 1) {
		err_set(e, "evidence %s: %llu bytes, more than %zu", ref->sha256,
		        (unsigned long long)ref->bytes, max);
		return NULL;
	}
	char *data = xmalloc((size_t)ref->bytes + 2);
	switch (read_blob(s, ref, data, NULL, e)) {
	case EVIDENCE_OK:
		data[ref->bytes] = '\0';
		return data;
	case EVIDENCE_MISSING:
		err_set(e, "evidence %s missing", ref->sha256);
		break;
	case EVIDENCE_ALTERED:
		err_set(e, "evidence %s altered", ref->sha256);
		break;
	case EVIDENCE_ERROR:
		break;
	}
	free(data);
	return NULL;
}

/* The durable cache: blobs this writer knows to be durable (filed before
 * it opened the store, or in its fdatasynced journal). Direct-mapped: a
 * blob that drops out is only checked again. */
static struct durable_slot *durable_slot_of(struct evidence_store *s, const struct evidence_ref *ref)
{
	return &s->durable[cache_slot_of(ref->sha256)];
}

static int durable_has(struct evidence_store *s, const struct evidence_ref *ref)
{
	struct durable_slot *d = durable_slot_of(s, ref);
	return d->used && d->bytes == ref->bytes && memcmp(d->sha256, ref->sha256, SHA256_HEX_LEN) == 0;
}

static void durable_add(struct evidence_store *s, const struct evidence_ref *ref)
{
	struct durable_slot *d = durable_slot_of(s, ref);
	d->used = 1;
	d->bytes = ref->bytes;
	memcpy(d->sha256, ref->sha256, SHA256_HEX_LEN);
}

/* File one journal record under its name: a temporary file, renamed into
 * place (rename(2) replaces whatever was there, a link itself and never
 * its target). Not fsynced: the record stays in the durable journal until
 * evidence_finish has synced the store. */
static int file_record(struct evidence_store *s, int jfd, const struct evidence_journal_rec *r, struct sfma_err *e)
{
	char name[SHA256_HEX_LEN + 1], tmp[SHA256_HEX_LEN + 16];
	memcpy(name, r->sha256, SHA256_HEX_LEN);
	name[SHA256_HEX_LEN] = '\0';
	snprintf(tmp, sizeof tmp, ".filing-%s", name);
	int fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST) { /* left by a filer that was killed */
		unlinkat(s->dirfd, tmp, 0);
		fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		return err_set(e, "%s: %s: %s", EVIDENCE_DIR, tmp, strerror(errno));
	char chunk[64 << 10];
	uint64_t done = 0;
	while (done < r->bytes) {
		size_t want = r->bytes - done < sizeof chunk ? (size_t)(r->bytes - done) : sizeof chunk;
		ssize_t got = pread(jfd, chunk, want, (off_t)(r->off + done));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			err_set(e, "%s: journal: read: %s", EVIDENCE_DIR, got < 0 ? strerror(errno) : "cut short");
			goto fail;
		}
		for (ssize_t put = 0; put < got;) {
			ssize_t w = write(fd, chunk + put, (size_t)(got - put));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				err_set(e, "%s: %s: write: %s", EVIDENCE_DIR, name, strerror(errno));
				goto fail;
			}
			put += w;
		}
		done += (uint64_t)got;
	}
	if (close(fd) < 0) {
		fd = -1;
		err_set(e, "%s: %s: close: %s", EVIDENCE_DIR, name, strerror(errno));
		goto fail;
	}
	fd = -1;
	if (renameat(s->dirfd, tmp, s->dirfd, name) < 0) {
		err_set(e, "%s: %s: rename: %s", EVIDENCE_DIR, name, strerror(errno));
		goto fail;
	}
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlinkat(s->dirfd, tmp, 0);
	return -1;
}

/* The filing thread: files the journal's records as they come, beside
 * the run (a run waits on its stages most of the time), so that
 * evidence_finish has little left to do. */
static void *filer_main(void *arg)
{
	struct evidence_store *s = arg;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		/* In batches: a wake-up per blob costs the run more than the
		 * filing itself. */
		while (s->to_file.n - s->next_to_file < FILER_BATCH && !s->filer_stop)
			pthread_cond_wait(&s->work, &s->lock);
		if (s->next_to_file == s->to_file.n)
			break;
		/* Every record queued so far, claimed under one lock: the
		 * run's thread takes the same lock for each blob it appends. */
		struct evidence_journal_rec batch[4 * FILER_BATCH];
		size_t n = s->to_file.n - s->next_to_file;
		if (n > sizeof batch / sizeof batch[0])
			n = sizeof batch / sizeof batch[0];
		memcpy(batch, s->to_file.v + s->next_to_file, n * sizeof batch[0]);
		int failed = s->filer_error[0] != '\0';
		pthread_mutex_unlock(&s->lock);
		struct sfma_err e;
		int rc = 0;
		for (size_t i = 0; i < n && !failed && rc == 0; i++)
			rc = file_record(s, s->journal_fd, &batch[i], &e);
		pthread_mutex_lock(&s->lock);
		s->next_to_file += n;
		if (rc < 0)
			snprintf(s->filer_error, sizeof s->filer_error, "%s", e.text);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Let the filing thread finish what it has and end. */
static void stop_filer(struct evidence_store *s)
{
	if (!s->filer_started)
		return;
	pthread_mutex_lock(&s->lock);
	s->filer_stop = 1;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->filer, NULL);
	s->filer_started = 0;
	s->filer_stop = 0;
}

/* Flush everything filed to the disk: one syncfs(2) for the store's file
 * system instead of an fsync per blob and one for the directory - on a
 * journaling file system each fsync of a new file is a commit of its own:
 * a 100-turn run that files 204 blobs took 1.48x the time of the same run
 * without evidence on ext4 with a journal when each was fdatasynced,
 * 1.16x with one syncfs (1.20x and 1.15x on ext4 without one). syncfs
 * reports write-back errors since Linux 5.8 (syncfs(2), BUGS). */
static int sync_filed(struct evidence_store *s, struct sfma_err *e)
{
	if (syncfs(s->dirfd) < 0)
		return err_set(e, "%s: syncfs: %s", EVIDENCE_DIR, strerror(errno));
	return 0;
}

/* File the journal a stopped run left: its records as its readers read
 * them (evidence_journal_next), up to the first that is not sound; the
 * journal is removed once they are durable. A read that fails keeps it. */
static int recover_journal(struct evidence_store *s, struct sfma_err *e)
{
	int fd = openat(s->dirfd, JOURNAL_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 0;
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		/* Not a journal this runner wrote (a link, a FIFO): removed,
		 * never followed. */
		if (fd >= 0)
			close(fd);
		if (unlinkat(s->dirfd, JOURNAL_NAME, 0) < 0 && errno != ENOENT)
			return err_set(e, "%s: %s: %s", EVIDENCE_DIR, JOURNAL_NAME, strerror(errno));
		return 0;
	}
	struct evidence_journal_rec r;
	uint64_t off = 0;
	int rc = 0;
	enum evidence_journal_step step;
	while (rc == 0 &&
	       (step = evidence_journal_next(fd, off, (uint64_t)st.st_size, &r, e)) == EVIDENCE_JOURNAL_RECORD) {
		struct evidence_ref ref;
		memcpy(ref.sha256, r.sha256, sizeof ref.sha256);
		ref.bytes = r.bytes;
		struct sfma_err ignored;
		if (read_blob_at(s, &ref, NULL, 0, NULL, 0, &ignored) != EVIDENCE_OK)
			rc = file_record(s, fd, &r, e);
		off = r.off + r.bytes;
	}
	close(fd);
	if (rc == 0 && step == EVIDENCE_JOURNAL_ERROR)
		rc = -1;
	if (rc == 0)
		rc = sync_filed(s, e);
	/* The journal goes only once what it held is durable elsewhere. */
	if (rc == 0 && unlinkat(s->dirfd, JOURNAL_NAME, 0) < 0 && errno != ENOENT)
		rc = err_set(e, "%s: %s: %s", EVIDENCE_DIR, JOURNAL_NAME, strerror(errno));
	return rc;
}

int evidence_sync_pending(struct evidence_store *s)
{
	if (s->dirfd < 0)
		return 0;
	pthread_mutex_lock(&s->lock);
	int pending = s->appended_gen > s->synced_gen || s->dir_dirty;
	pthread_mutex_unlock(&s->lock);
	return pending;
}

int evidence_sync(struct evidence_store *s, struct sfma_err *e)
{
	if (s->dirfd < 0)
		return 0;
	pthread_mutex_lock(&s->lock);
	uint64_t upto = s->appended_gen;
	int journal_fd = s->journal_fd, dir_dirty = s->dir_dirty;
	int need = upto > s->synced_gen;
	pthread_mutex_unlock(&s->lock);
	/* Every record counted in upto was written before this fdatasync
	 * starts, so it is durable when it returns; records appended
	 * meanwhile wait for the next call. */
	if (need && fdatasync(journal_fd) < 0)
		return err_set(e, "%s: journal: fdatasync: %s", EVIDENCE_DIR, strerror(errno));
	/* The journal's own name, once, when this writer created it. A
	 * directory that cannot be fsynced (some file systems refuse) has
	 * still been updated atomically. */
	if (dir_dirty && fsync(s->dirfd) < 0 && errno != EINVAL && errno != EROFS)
		return err_set(e, "%s: fsync: %s", EVIDENCE_DIR, strerror(errno));
	pthread_mutex_lock(&s->lock);
	if (upto > s->synced_gen)
		s->synced_gen = upto;
	if (dir_dirty)
		s->dir_dirty = 0;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Append one record to the journal (opened, and the filing thread
 * started, at the first). A write that fails is cut off again, so that
 * no later record sits behind a torn one. */
static int journal_append(struct evidence_store *s, const struct evidence_ref *ref, const void *data, size_t n,
                          struct sfma_err *e)
{
	if (s->journal_fd < 0) {
		int fd = openat(s->dirfd, JOURNAL_NAME, O_RDWR | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC,
		                0600);
		if (fd < 0)
			return err_set(e, "%s: %s: %s", EVIDENCE_DIR, JOURNAL_NAME, strerror(errno));
		pthread_mutex_lock(&s->lock);
		s->journal_fd = fd;
		s->dir_dirty = 1;
		pthread_mutex_unlock(&s->lock);
		s->journal_end = 0;
		if (pthread_create(&s->filer, NULL, filer_main, s) == 0)
			s->filer_started = 1; /* else evidence_finish files them itself */
	}
	char h[JOURNAL_HEADER_LEN + 1];
	snprintf(h, sizeof h, "%s %016llx\n", ref->sha256, (unsigned long long)n);
	struct iovec iov[2] = {{h, JOURNAL_HEADER_LEN}, {(void *)data, n}};
	uint64_t want = JOURNAL_HEADER_LEN + (uint64_t)n, done = 0;
	while (done < want) {
		/* Skip what is written of the header and data so far. */
		struct iovec v[2];
		int k = 0;
		uint64_t at = done;
		for (int i = 0; i < 2; i++) {
			if (at >= iov[i].iov_len) {
				at -= iov[i].iov_len;
				continue;
			}
			v[k].iov_base = (char *)iov[i].iov_base + at;
			v[k].iov_len = iov[i].iov_len - at;
			at = 0;
			k++;
		}
		ssize_t w = writev(s->journal_fd, v, k);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int saved = errno;
			/* Nothing can be appended behind a torn record. (The
			 * descriptor stays open: the filing thread reads it.) */
			if (ftruncate(s->journal_fd, (off_t)s->journal_end) < 0)
				s->journal_broken = 1;
			return err_set(e, "%s: journal: write: %s", EVIDENCE_DIR, strerror(saved));
		}
		done += (uint64_t)w;
	}
	struct evidence_journal_rec r;
	memcpy(r.sha256, ref->sha256, SHA256_HEX_LEN);
	r.bytes = n;
	r.off = s->journal_end + JOURNAL_HEADER_LEN;
	s->journal_end += want;
	pthread_mutex_lock(&s->lock);
	s->appended_gen++;
	rec_push(&s->to_file, &r);
	if (s->to_file.n - s->next_to_file >= FILER_BATCH)
		pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

json_t *evidence_put_nosync(struct evidence_store *s, const void *data, size_t n, struct sfma_err *e)
{
	if (s->dirfd < 0 || !s->writer) {
		err_set(e, "%s: the store is not open for writing", EVIDENCE_DIR);
		return NULL;
	}
	if (s->journal_broken) {
		err_set(e, "%s: journal: an earlier write failed and could not be undone", EVIDENCE_DIR);
		return NULL;
	}
	if ((uint64_t)n > EVIDENCE_MAX_REF_BYTES) {
		err_set(e, "evidence of %zu bytes: more than a reference can state", n);
		return NULL;
	}
	struct evidence_ref ref;
	sha256_hex(data, n, ref.sha256);
	ref.bytes = n;
	/* Deduplicated. A blob already filed when this writer opened the
	 * store is durable: a journal is removed only once its blobs are
	 * synced, and one left by a stopped run is filed and synced at open.
	 * Anything else under the name - truncated, altered, a link, a FIFO -
	 * is not the blob, and the journal takes it again. */
	if (!durable_has(s, &ref)) {
		struct sfma_err ignored;
		int fd = -1;
		if (!s->empty_at_open && read_blob_at(s, &ref, NULL, 0, &fd, 0, &ignored) == EVIDENCE_OK) {
			struct stat st;
			int rc = fstat(fd, &st) < 0 || ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) < 0) ? -1 : 0;
			int saved = errno;
			close(fd);
			if (rc < 0) {
				err_set(e, "evidence %s: %s", ref.sha256, strerror(saved));
				return NULL;
			}
		} else if (journal_append(s, &ref, data, n, e) < 0) {
			return NULL;
		}
		durable_add(s, &ref);
	}
	return json_pack("{s:s, s:I}", "sha256", ref.sha256, "bytes", (json_int_t)n);
}

json_t *evidence_put(struct evidence_store *s, const void *data, size_t n, struct sfma_err *e)
{
	json_t *ref = evidence_put_nosync(s, data, n, e);
	if (ref && evidence_sync(s, e) < 0) {
		json_decref(ref);
		return NULL;
	}
	return ref;
}

int evidence_finish(struct evidence_store *s, struct sfma_err *e)
{
	if (!s || !s->writer || s->dirfd < 0 || s->journal_fd < 0)
		return 0;
	stop_filer(s);
	/* Records the thread did not get to (it could not start, or failed). */
	if (s->filer_error[0])
		return err_set(e, "%s", s->filer_error);
	for (; s->next_to_file < s->to_file.n; s->next_to_file++)
		if (file_record(s, s->journal_fd, &s->to_file.v[s->next_to_file], e) < 0)
			return -1;
	if (sync_filed(s, e) < 0)
		return -1;
	if (unlinkat(s->dirfd, JOURNAL_NAME, 0) < 0 && errno != ENOENT)
		return err_set(e, "%s: %s: %s", EVIDENCE_DIR, JOURNAL_NAME, strerror(errno));
	close(s->journal_fd);
	s->journal_fd = -1;
	s->appended_gen = s->synced_gen = 0;
	s->journal_end = 0;
	s->to_file.n = s->next_to_file = 0;
	return 0;
}
