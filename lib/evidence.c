/* evidence.c - content-addressed blobs under .sfma/evidence. */
#include "evidence.h"
#include "atomic.h"
#include "canon.h"
#include "ndjson.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>

/* Blobs found intact, so that one referenced again (a repeated reminder,
 * the same tool result) is not read again: direct-mapped on the digest,
 * a fixed size whatever the length of the trace. */
#define CACHE_SLOTS 1024

struct cache_slot {
	unsigned char used;
	char sha256[SHA256_HEX_LEN];
	uint64_t bytes;
};

/* Blobs this store wrote or fsynced, by inode: their file is durable, and
 * their name is once dir_dirty is clear. A put of the same bytes finding
 * that very file again needs no fsync of its own. */
struct durable_slot {
	unsigned char used;
	char sha256[SHA256_HEX_LEN];
	uint64_t bytes;
	dev_t dev;
	ino_t ino;
};

struct evidence_store {
	int dirfd;                     /* .sfma/evidence, or -1 */
	int dir_dirty;                 /* a rename into dirfd not yet fsynced */
	struct durable_slot durable[CACHE_SLOTS]; /* writers only; not locked */
	enum evidence_state dir_state; /* what every check answers when dirfd < 0 */
	char dir_error[SFMA_ERR_MAX];  /* with EVIDENCE_ERROR */
	EVP_MD *md;                    /* fetched once: the implicit fetch locks per use */
	pthread_mutex_t lock;          /* guards cache */
	struct cache_slot cache[CACHE_SLOTS];
};

struct evidence_store *evidence_open(int sfma_dirfd, int create, struct sfma_err *e)
{
	EVP_MD *md = EVP_MD_fetch(NULL, "SHA256", NULL);
	if (!md) {
		err_set(e, "SHA-256 is not available");
		return NULL;
	}
	struct evidence_store *s = xcalloc(1, sizeof *s);
	s->md = md;
	s->dirfd = -1;
	pthread_mutex_init(&s->lock, NULL);
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
	if (s->dirfd >= 0)
		close(s->dirfd);
	EVP_MD_free(s->md);
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

/* Open, stat and hash blob ref; its bytes go to keep (ref->bytes + 1
 * bytes of room) when keep is not NULL. fd_out, when not NULL, receives
 * the still open descriptor of an intact blob. */
static enum evidence_state read_blob(struct evidence_store *s, const struct evidence_ref *ref,
                                     char *keep, int *fd_out, struct sfma_err *e)
{
	if (s->dirfd < 0) {
		if (s->dir_state == EVIDENCE_ERROR)
			err_set(e, "%s", s->dir_error);
		return s->dir_state;
	}
	/* O_NONBLOCK: a FIFO planted under a blob's name must not hang the
	 * reader (it is then reported altered: not a regular file). */
	int fd = openat(s->dirfd, ref->sha256, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return EVIDENCE_MISSING;
		if (errno == ELOOP || errno == ENXIO) /* a link; a socket */
			return EVIDENCE_ALTERED;
		err_set(e, "evidence %s: %s", ref->sha256, strerror(errno));
		return EVIDENCE_ERROR;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != ref->bytes) {
		close(fd);
		return EVIDENCE_ALTERED;
	}
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx || EVP_DigestInit_ex(ctx, s->md, NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		close(fd);
		err_set(e, "SHA-256 is not available");
		return EVIDENCE_ERROR;
	}
	/* Read one byte beyond the stated size, so a blob that grew since the
	 * fstat is seen as altered without reading all of it. */
	char chunk[64 << 10];
	uint64_t total = 0, limit = ref->bytes + 1;
	for (;;) {
		char *dst = keep ? keep + total : chunk;
		uint64_t room = limit - total;
		if (room == 0)
			break;
		if (room > sizeof chunk)
			room = sizeof chunk;
		ssize_t got = read(fd, dst, (size_t)room);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			err_set(e, "evidence %s: read: %s", ref->sha256, strerror(errno));
			EVP_MD_CTX_free(ctx);
			close(fd);
			return EVIDENCE_ERROR;
		}
		if (got == 0)
			break;
		EVP_DigestUpdate(ctx, dst, (size_t)got);
		total += (uint64_t)got;
	}
	unsigned char md[32];
	char hex[SHA256_HEX_LEN + 1];
	EVP_DigestFinal_ex(ctx, md, NULL);
	EVP_MD_CTX_free(ctx);
	hex_encode(md, sizeof md, hex);
	if (total != ref->bytes || memcmp(hex, ref->sha256, SHA256_HEX_LEN) != 0) {
		close(fd);
		return EVIDENCE_ALTERED;
	}
	if (fd_out)
		*fd_out = fd;
	else
		close(fd);
	return EVIDENCE_OK;
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

/* Write data[0..n) to a temporary file in the store, fsync it and rename
 * it to name; the directory is left for evidence_sync (*dev, *ino: the
 * blob's file). */
static int write_blob(struct evidence_store *s, const char *name, const void *data, size_t n, dev_t *dev,
                      ino_t *ino, struct sfma_err *e)
{
	struct stat st;
	if (atomic_replace_at(s->dirfd, name, data, n, 0600, 0, &st, e) < 0)
		return err_prefix(e, "%s", EVIDENCE_DIR);
	s->dir_dirty = 1;
	*dev = st.st_dev;
	*ino = st.st_ino;
	return 0;
}

static struct durable_slot *durable_slot_of(struct evidence_store *s, const struct evidence_ref *ref)
{
	return &s->durable[cache_slot_of(ref->sha256)];
}

static int durable_has(struct evidence_store *s, const struct evidence_ref *ref, const struct stat *st)
{
	struct durable_slot *d = durable_slot_of(s, ref);
	return d->used && d->bytes == ref->bytes && d->dev == st->st_dev && d->ino == st->st_ino &&
	       memcmp(d->sha256, ref->sha256, SHA256_HEX_LEN) == 0;
}

static void durable_add(struct evidence_store *s, const struct evidence_ref *ref, dev_t dev, ino_t ino)
{
	struct durable_slot *d = durable_slot_of(s, ref);
	d->used = 1;
	d->bytes = ref->bytes;
	d->dev = dev;
	d->ino = ino;
	memcpy(d->sha256, ref->sha256, SHA256_HEX_LEN);
}

int evidence_sync(struct evidence_store *s, struct sfma_err *e)
{
	if (s->dirfd < 0 || !s->dir_dirty)
		return 0;
	/* A directory that cannot be fsynced (some file systems refuse) has
	 * still been updated atomically. */
	if (fsync(s->dirfd) < 0 && errno != EINVAL && errno != EROFS)
		return err_set(e, "%s: fsync: %s", EVIDENCE_DIR, strerror(errno));
	s->dir_dirty = 0;
	return 0;
}

json_t *evidence_put_nosync(struct evidence_store *s, const void *data, size_t n, struct sfma_err *e)
{
	if (s->dirfd < 0) {
		err_set(e, "%s: the store is not open for writing", EVIDENCE_DIR);
		return NULL;
	}
	if ((uint64_t)n > EVIDENCE_MAX_REF_BYTES) {
		err_set(e, "evidence of %zu bytes: more than a reference can state", n);
		return NULL;
	}
	struct evidence_ref ref;
	sha256_hex(data, n, ref.sha256);
	ref.bytes = n;
	/* Deduplicated: a blob already there is kept only if it is intact.
	 * Unless this store made that very file durable itself, it may come
	 * from an earlier put that crashed before its directory fsync, so it
	 * is made durable again (cheap when clean). Anything else under the
	 * name - truncated, altered, a link, a FIFO - is replaced by the
	 * rename (rename(2) replaces a link itself, never its target). */
	struct sfma_err ignored;
	int fd = -1;
	if (read_blob(s, &ref, NULL, &fd, &ignored) == EVIDENCE_OK) {
		struct stat st;
		int rc = fstat(fd, &st) < 0 ? -1 : 0;
		if (rc == 0 && !durable_has(s, &ref, &st)) {
			rc = ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) < 0) || fsync(fd) < 0 ? -1 : 0;
			if (rc == 0) {
				s->dir_dirty = 1;
				durable_add(s, &ref, st.st_dev, st.st_ino);
			}
		}
		int saved = errno;
		close(fd);
		if (rc < 0) {
			err_set(e, "evidence %s: %s", ref.sha256, strerror(saved));
			return NULL;
		}
	} else {
		dev_t dev = 0;
		ino_t ino = 0;
		if (write_blob(s, ref.sha256, data, n, &dev, &ino, e) < 0)
			return NULL;
		durable_add(s, &ref, dev, ino);
	}
	json_t *obj = json_pack("{s:s, s:I}", "sha256", ref.sha256, "bytes", (json_int_t)n);
	if (!obj)
		err_set(e, "out of memory");
	return obj;
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
