/* atomic.c - temp file, fsync, rename, fsync dir. */
#include "atomic.h"
#include "ndjson.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static int replace_at(int tmp_dirfd, int dirfd, const char *name, const void *data, size_t n, mode_t mode,
                      int sync_file, int sync_dir, struct stat *st, struct sfma_err *e);

int atomic_write_at(int dirfd, const char *name, const void *data, size_t n,
                    mode_t mode, struct sfma_err *e)
{
	return replace_at(dirfd, dirfd, name, data, n, mode, 1, 1, NULL, e);
}

int atomic_write_via(int tmp_dirfd, int dirfd, const char *name, const void *data, size_t n, mode_t mode,
                     struct sfma_err *e)
{
	return replace_at(tmp_dirfd, dirfd, name, data, n, mode, 1, 1, NULL, e);
}

/* The temporary file is made in tmp_dirfd (usually dirfd itself) and
 * renamed to dirfd/name. */
static int replace_at(int tmp_dirfd, int dirfd, const char *name, const void *data, size_t n, mode_t mode,
                      int sync_file, int sync_dir, struct stat *st, struct sfma_err *e)
{
	char tmp[512];
	unsigned long long r = 0;
	int fd = -1;
	if (strchr(name, '/') || strlen(name) > 200)
		return err_set(e, "%s: not a single file name", name);
	for (int tries = 0; tries < 16 && fd < 0; tries++) {
		if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
			r ^= (unsigned long long)getpid() * 2654435761u + (unsigned long long)tries;
		snprintf(tmp, sizeof tmp, ".%s.tmp-%016llx", name, r);
		fd = openat(tmp_dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
		if (fd < 0 && errno != EEXIST)
			return err_set(e, "%s: create temporary file: %s", name, strerror(errno));
	}
	if (fd < 0)
		return err_set(e, "%s: create temporary file: %s", name, strerror(errno));
	const char *step = "write";
	if (write_all(fd, data, n) < 0)
		goto fail;
	step = "fsync";
	if ((sync_file && fsync(fd) < 0) || (st && fstat(fd, st) < 0))
		goto fail;
	step = "close";
	if (close(fd) < 0) {
		fd = -1;
		goto fail;
	}
	fd = -1;
	step = "rename";
	if (renameat(tmp_dirfd, tmp, dirfd, name) < 0)
		goto fail;
	/* Make the rename durable; a directory that cannot be fsynced (some
	 * file systems refuse) has still been updated atomically. */
	if (sync_dir && fsync(dirfd) < 0 && errno != EINVAL && errno != EROFS)
		return err_set(e, "%s: fsync directory: %s", name, strerror(errno));
	return 0;
fail: {
	int saved = errno;
	if (fd >= 0)
		close(fd);
	unlinkat(tmp_dirfd, tmp, 0);
	return err_set(e, "%s: %s: %s", name, step, strerror(saved));
}
}

static int write_path(const char *path, const void *data, size_t n, mode_t mode, int sync,
                      struct sfma_err *e);

int atomic_write(const char *path, const void *data, size_t n, mode_t mode,
                 struct sfma_err *e)
{
	return write_path(path, data, n, mode, 1, e);
}

int atomic_write_volatile(const char *path, const void *data, size_t n, mode_t mode,
                          struct sfma_err *e)
{
	return write_path(path, data, n, mode, 0, e);
}

static int write_path(const char *path, const void *data, size_t n, mode_t mode, int sync,
                      struct sfma_err *e)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');
	const char *name = slash ? slash + 1 : path;
	if (slash) {
		size_t dl = (size_t)(slash - path);
		if (dl >= sizeof dir)
			return err_set(e, "%s: path too long", path);
		memcpy(dir, path, dl);
		dir[dl] = '\0';
		if (dl == 0)
			strcpy(dir, "/");
	} else {
		strcpy(dir, ".");
	}
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return err_set(e, "%s: %s", dir, strerror(errno));
	int rc = replace_at(dirfd, dirfd, name, data, n, mode, sync, sync, NULL, e);
	close(dirfd);
	if (rc < 0)
		return err_prefix(e, "%s", dir);
	return 0;
}
