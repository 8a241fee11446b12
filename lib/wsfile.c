/* wsfile.c - a workspace file opened as a reader must (wsfile.h). */
#include "wsfile.h"
#include "ndjson.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ws_open_regular(int dirfd, const char *path, struct sfma_err *e)
{
	/* O_NONBLOCK: open(2) of a FIFO for reading returns at once instead
	 * of waiting for a writer (fifo(7)); O_NOCTTY: a terminal device
	 * never becomes the controlling terminal; O_NOFOLLOW: a link as the
	 * last component fails ELOOP instead of being followed. */
	int fd = openat(dirfd, path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		struct stat st;
		/* ELOOP is also too many links on the way: say "link" only
		 * when the last component is one. */
		if (err == ELOOP && fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
			err_set(e, "%s: is a symbolic link, not followed", path);
		} else if (err == ENXIO) {
			/* A socket, or a device without its driver (open(2)). */
			err_set(e, "%s: not a regular file", path);
			err = EINVAL;
		} else {
			err_set(e, "%s: %s", path, strerror(err));
		}
		errno = err;
		return -1;
	}
	struct stat st;
	const char *why = NULL;
	int err = 0;
	if (fstat(fd, &st) < 0)
		err = errno;
	else if (!S_ISREG(st.st_mode))
		err = EINVAL, why = "not a regular file";
	/* Back to blocking reads. F_SETFL changes only the status flags
	 * (O_APPEND, O_NONBLOCK, O_ASYNC, O_DIRECT, O_NOATIME; fcntl(2)), and
	 * the file was opened with none of the others. */
	else if (fcntl(fd, F_SETFL, 0) < 0)
		err = errno;
	if (err) {
		close(fd);
		err_set(e, "%s: %s", path, why ? why : strerror(err));
		errno = err;
		return -1;
	}
	return fd;
}

char *ws_read_regular(int dirfd, const char *path, size_t max, size_t *len, struct sfma_err *e)
{
	int fd = ws_open_regular(dirfd, path, e);
	if (fd < 0)
		return NULL;
	char *text = read_all_fd(fd, max, len, e);
	close(fd);
	if (!text) {
		err_prefix(e, "%s", path);
		errno = EIO; /* too large, or a read that failed: not an absent file */
	}
	return text;
}
