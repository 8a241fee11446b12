/* beneath.c - opening paths below a directory without leaving it: openat2
 * RESOLVE_BENEATH, its fallback by hand, and the host facts a resolution
 * met (sfma-exec's gates, the staging copy and sfma-replay use them). */
#include "beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "buf.h"
#include "errors.h"
#include "utf8.h"

#define MAX_LINKS 40
#define OPENAT2_RETRIES 32

/* The same resolution as openat2 RESOLVE_BENEATH, done by hand for kernels
 * before 5.6 (and valgrind, which does not know openat2): components are
 * taken one at a time, a symlink's target is spliced in front of the rest
 * and resolved the same way, and ".." above the start is EXDEV. Only
 * directories already checked to be real are on the prefix that is opened.
 * It refuses as openat2(2) does: an absolute path is EXDEV (RESOLVE_BENEATH
 * rejects absolute pathnames), an empty one ENOENT (path_resolution(7):
 * an empty pathname does not resolve), and a trailing slash requires a
 * directory (ENOTDIR). */
/* What a walk met, for path_facts: each path looked at once, in order. */
static void fact_add(json_t *facts, const char *path, const struct stat *st, int err, int dirfd)
{
	if (!facts || json_array_size(facts) >= PATH_FACTS_MAX)
		return;
	size_t i;
	json_t *f;
	json_array_foreach(facts, i, f)
		if (strcmp(json_string_value(json_object_get(f, "path")), path) == 0)
			return;
	const char *kind = err ? "missing" : S_ISDIR(st->st_mode) ? "dir" : S_ISREG(st->st_mode) ? "file"
	                 : S_ISLNK(st->st_mode) ? "link" : S_ISFIFO(st->st_mode) ? "fifo" : "other";
	if (err && err != ENOENT)
		return; /* not a fact of the tree: the walk's error speaks for itself */
	f = json_pack("{s:o, s:s}", "path", utf8_json(path, strlen(path)), "kind", kind);
	if (!err && S_ISLNK(st->st_mode)) {
		char target[PATH_MAX];
		ssize_t tl = readlinkat(dirfd, path, target, sizeof target - 1);
		if (tl < 0) {
			json_decref(f);
			return;
		}
		json_object_set_new(f, "target", utf8_json(target, (size_t)tl));
	}
	json_array_append_new(facts, f);
}

static int walk_beneath(int dirfd, const char *rel, int flags, int no_symlinks, json_t *facts);

int open_beneath_walk(int dirfd, const char *rel, int flags, int no_symlinks)
{
	return walk_beneath(dirfd, rel, flags, no_symlinks, NULL);
}

json_t *path_facts(int dirfd, const char *norm)
{
	json_t *facts = json_array();
	int fd = walk_beneath(dirfd, norm, O_PATH, 0, facts);
	if (fd >= 0)
		close(fd);
	return facts;
}

static int walk_beneath(int dirfd, const char *rel, int flags, int no_symlinks, json_t *facts)
{
	if (rel[0] == '\0' || rel[0] == '/') {
		errno = rel[0] ? EXDEV : ENOENT;
		return -1;
	}
	struct buf pending = {0}, done = {0};
	buf_adds(&pending, rel);
	int links = 0, fd = -1, err = 0;
	int want_dir = rel[strlen(rel) - 1] == '/'; /* of the path left to resolve */
	int at_dir = 1; /* what done names is a directory */
	while (pending.len > 0) {
		size_t len = strcspn(pending.p, "/");
		char *comp = xstrdup(pending.p);
		comp[len] = '\0';
		size_t skip = len + (pending.p[len] == '/');
		memmove(pending.p, pending.p + skip, pending.len - skip + 1);
		pending.len -= skip;
		int dots = len == 0 || strcmp(comp, ".") == 0 ? 1 : strcmp(comp, "..") == 0 ? 2 : 0;
		if (dots && !at_dir) { /* "file/." and "file/..": the kernel's ENOTDIR */
			free(comp);
			err = ENOTDIR;
			break;
		}
		if (dots == 1) {
			free(comp);
			continue;
		}
		if (dots == 2) {
			free(comp);
			char *up = strrchr(done.p ? done.p : "", '/');
			if (done.len == 0) {
				err = EXDEV;
				break;
			}
			done.len = up ? (size_t)(up - done.p) : 0;
			done.p[done.len] = '\0';
			continue;
		}
		size_t before = done.len;
		if (done.len)
			buf_addc(&done, '/');
		buf_adds(&done, comp);
		free(comp);
		struct stat st;
		if (fstatat(dirfd, done.p, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			err = errno;
			fact_add(facts, done.p, &st, err, dirfd);
			break;
		}
		fact_add(facts, done.p, &st, 0, dirfd);
		at_dir = S_ISDIR(st.st_mode);
		if (!S_ISLNK(st.st_mode))
			continue;
		char target[PATH_MAX];
		ssize_t tl = readlinkat(dirfd, done.p, target, sizeof target - 1);
		if (no_symlinks || ++links > MAX_LINKS || tl < 0) {
			err = tl < 0 ? errno : ELOOP;
			break;
		}
		target[tl] = '\0';
		if (target[0] == '/') {
			err = EXDEV;
			break;
		}
		if (pending.len == 0) /* the target takes the place of the last component */
			want_dir |= tl > 0 && target[tl - 1] == '/';
		done.len = before; /* a checked directory again */
		if (done.p)
			done.p[before] = '\0';
		at_dir = 1;
		struct buf next = {0};
		buf_printf(&next, "%s%s%s", target, pending.len ? "/" : "", pending.p ? pending.p : "");
		buf_free(&pending);
		pending = next;
	}
	if (!err) {
		/* The kernel checks the trailing slash: "file/" is ENOTDIR (the
		 * start itself, "." here, is a directory). */
		if (want_dir && done.len)
			buf_addc(&done, '/');
		fd = openat(dirfd, done.len ? done.p : ".", flags | O_NOFOLLOW | O_CLOEXEC);
		err = errno;
	}
	buf_free(&pending);
	buf_free(&done);
	errno = err;
	return fd;
}

/* openat2 confined to the workspace: symlinks that stay inside are
 * followed, one that leads out (absolute or through "..") fails with
 * EXDEV; magic links (/proc/self/fd/N) are refused outright. */
int open_beneath(int dirfd, const char *rel, int flags, int no_symlinks)
{
	static int have_openat2 = 1;
	struct open_how how = {
		.flags = (unsigned long long)(flags | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
		           (no_symlinks ? RESOLVE_NO_SYMLINKS : 0),
	};
	long fd = -1;
	if (have_openat2) {
		/* EAGAIN: with RESOLVE_BENEATH the kernel could not make sure a
		 * ".." did not escape, because something on the system renamed
		 * meanwhile (any rename: sfma's own atomic writes and evidence
		 * filing do); openat2(2) says the caller may retry. A bounded
		 * number of times, then the walk by hand, which resolves ".."
		 * itself and is not subject to the race. */
		for (int again = 0; again < OPENAT2_RETRIES; again++) {
			do
				fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
			while (fd < 0 && errno == EINTR);
			if (fd >= 0 || errno != EAGAIN)
				break;
		}
		if (fd >= 0 || (errno != ENOSYS && errno != EAGAIN))
			return (int)fd;
		if (errno == ENOSYS)
			have_openat2 = 0;
	}
	return open_beneath_walk(dirfd, rel, flags, no_symlinks);
}

int open_dir_walk(int dirfd, const char *rel, int create, mode_t mode)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char *copy = xstrdup(rel), *save = NULL;
	for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		int next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, c, mode) < 0 && errno != EEXIST)
				goto fail;
			next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (next < 0)
			goto fail;
		close(fd);
		fd = next;
	}
	free(copy);
	return fd;
fail: {
	int saved = errno;
	close(fd);
	free(copy);
	errno = saved;
	return -1;
}
}

