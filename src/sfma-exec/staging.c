/* staging.c - the staging copy a sandboxed command sees as /workspace.
 *
 * Built fresh for every command from the declared inputs only, never
 * following a symlink (a link in the workspace could otherwise smuggle a
 * host file in), inside the staging tmpfs of the command's own mount
 * namespace (see staging.h); after the command, declared outputs are
 * copied back only when they are plain files under the size ceiling.
 * Nothing here removes anything: the kernel frees the whole tmpfs with its
 * last reference, however deep or large the tree the command left. */
#include "staging.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic.h"
#include "errors.h"
#include "ndjson.h"

#define STAGING_MAX_DEPTH 64

static void refuse(json_t *list, const char *path, const char *why)
{
	json_t *r = json_object();
	json_object_set_new(r, "path", utf8_json(path, strlen(path)));
	json_object_set_new(r, "reason", json_string(why));
	json_array_append_new(list, r);
}

static int copy_fd(int in, int out, uint64_t size)
{
	uint64_t left = size;
	while (left > 0) {
		ssize_t n = copy_file_range(in, NULL, out, NULL, left, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
		              errno == EOPNOTSUPP))
			break; /* fall back to read/write */
		if (n < 0)
			return -1;
		if (n == 0)
			return 0; /* the file shrank meanwhile: copy what there is */
		left -= (uint64_t)n;
	}
	char chunk[65536];
	while (left > 0) {
		ssize_t n = read(in, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -1 : 0;
		if (write_all(out, chunk, (size_t)n) < 0)
			return -1;
		left -= (uint64_t)n > left ? left : (uint64_t)n;
	}
	return 0;
}

/* Who creates entries in the staging tmpfs. init mounted it as uid 0 of
 * the command's user namespace, so its superblock belongs to that
 * namespace, and the kernel refuses (EOVERFLOW) to create an inode whose
 * owner has no mapping there (fs/namei.c may_o_create and may_create,
 * fsuidgid_has_mapping; Linux 4.8). Host root is unmapped: when this stage
 * is root it creates as the contained ids (the ids that sandbox leased,
 * uids.c), and so they own everything, by switching its file-system ids
 * (setfsuid(2)), and only around the creating calls, because reading the
 * workspace still needs root's own rights: a change of fsuid from 0 clears
 * the file capabilities (CAP_DAC_OVERRIDE and the like) from the effective
 * set and the change back restores them (capabilities(7), "Effect of user
 * ID changes on capabilities"). Run as that user already, nothing switches. */
struct copier {
	json_t *refused;
	uint64_t total;
	int failed;             /* an I/O error: the staging copy is incomplete */
	int err;                /* the first such error */
	int switch_ids;
	unsigned uid, gid;      /* the contained ids, on the host */
};

static void fail(struct copier *s)
{
	if (!s->failed)
		s->err = errno ? errno : EIO;
	s->failed = 1;
}

static void as_contained(const struct copier *s)
{
	if (s->switch_ids) {
		setfsgid(s->gid);
		setfsuid(s->uid);
	}
}

static void as_self(const struct copier *s)
{
	int saved = errno;
	if (s->switch_ids) {
		setfsuid(geteuid());
		setfsgid(getegid());
	}
	errno = saved;
}

static int mkdir_contained(const struct copier *s, int dir, const char *name)
{
	as_contained(s);
	int rc = mkdirat(dir, name, 0755);
	as_self(s);
	return rc;
}

/* The directory rel below dirfd, made (as the contained ids) if missing. */
static int dir_walk_contained(const struct copier *s, int dirfd, const char *rel)
{
	as_contained(s);
	int fd = open_dir_walk(dirfd, rel, 1, 0755);
	as_self(s);
	return fd;
}

/* Copy the regular file open as src into dstdir/name. */
static void copy_in_file(struct copier *s, int src, const struct stat *st, int dstdir,
                       const char *name, const char *rel)
{
	if (s->total + (uint64_t)st->st_size > STAGING_MAX_BYTES) {
		refuse(s->refused, rel, "over the staging size ceiling");
		return;
	}
	/* Keep the execute bits, never set-id bits. */
	as_contained(s);
	int out = openat(dstdir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
	                 (st->st_mode & 0111) ? 0755 : 0644);
	as_self(s);
	if (out < 0) {
		if (errno != EEXIST) /* nested inputs ("src" and "src/a.c") */
			fail(s);
		return;
	}
	if (copy_fd(src, out, (uint64_t)st->st_size) < 0)
		fail(s);
	s->total += (uint64_t)st->st_size;
	close(out);
}

static void copy_in_tree(struct copier *s, int src, int dst, const char *rel, int depth)
{
	if (depth > STAGING_MAX_DEPTH) {
		refuse(s->refused, rel, "nested too deeply");
		return;
	}
	int walk = dup(src);
	DIR *d = walk >= 0 ? fdopendir(walk) : NULL;
	if (!d) {
		fail(s);
		if (walk >= 0)
			close(walk);
		return;
	}
	struct dirent *ent;
	while ((ent = readdir(d))) {
		const char *nm = ent->d_name;
		if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0)
			continue;
		struct buf child = {0};
		buf_printf(&child, "%s/%s", rel, nm);
		struct stat st;
		if (fstatat(src, nm, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			fail(s);
		} else if (S_ISLNK(st.st_mode)) {
			refuse(s->refused, child.p, "symlink refused while staging");
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(src, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0 || (mkdir_contained(s, dst, nm) < 0 && errno != EEXIST))
				fail(s);
			int dsub = openat(dst, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0 && dsub >= 0)
				copy_in_tree(s, sub, dsub, child.p, depth + 1);
			else
				fail(s);
			if (sub >= 0)
				close(sub);
			if (dsub >= 0)
				close(dsub);
		} else if (S_ISREG(st.st_mode)) {
			int in = openat(src, nm, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
			struct stat again;
			if (in < 0 || fstat(in, &again) < 0 || !S_ISREG(again.st_mode))
				refuse(s->refused, child.p, "changed while staging");
			else
				copy_in_file(s, in, &again, dst, nm, child.p);
			if (in >= 0)
				close(in);
		} else {
			refuse(s->refused, child.p, "not a regular file or directory");
		}
		buf_free(&child);
	}
	closedir(d);
}

/* Stage one declared path (a file, or a directory's tree) into ws_fd. */
static void stage_path(struct copier *s, const struct exec_ctx *c, int ws_fd, const char *rel, json_t *refused)
{
	/* No symlink anywhere along its path. */
	int in = open_beneath(c->ws_fd, rel, O_RDONLY | O_NONBLOCK, 1);
	if (in < 0) {
		if (errno == ELOOP || errno == EXDEV)
			refuse(refused, rel, "symlink refused while staging");
		else if (errno != ENOENT) /* an absent input is simply not staged */
			refuse(refused, rel, strerror(errno));
		return;
	}
	struct stat sb;
	if (fstat(in, &sb) < 0) {
		fail(s);
	} else if (S_ISDIR(sb.st_mode)) {
		int dst = dir_walk_contained(s, ws_fd, rel);
		if (dst < 0) {
			fail(s);
		} else {
			copy_in_tree(s, in, dst, rel, 0);
			close(dst);
		}
	} else if (S_ISREG(sb.st_mode)) {
		char *dir = xstrdup(rel), *slash = strrchr(dir, '/');
		const char *leaf = slash ? slash + 1 : rel;
		int dst = slash ? (*slash = '\0', dir_walk_contained(s, ws_fd, dir)) : dup(ws_fd);
		if (dst < 0)
			fail(s);
		else
			copy_in_file(s, in, &sb, dst, leaf, rel);
		if (dst >= 0)
			close(dst);
		free(dir);
	} else {
		refuse(refused, rel, "not a regular file or directory");
	}
	close(in);
}

int staging_fill(const struct exec_ctx *c, int ws_fd, unsigned uid, unsigned gid,
                 json_t *refused, const char **step)
{
	struct copier s = {
		.refused = refused,
		.switch_ids = uid != (unsigned)geteuid() || gid != (unsigned)getegid(),
		.uid = uid,
		.gid = gid,
	};
	*step = "staging inputs";
	for (size_t i = 0; i < c->m->n_inputs; i++)
		stage_path(&s, c, ws_fd, c->m->inputs[i], refused);
	/* An acceptance check sees the work as it stands: the outputs too. */
	for (size_t i = 0; c->acceptance && i < c->m->n_outputs; i++)
		stage_path(&s, c, ws_fd, c->m->outputs[i], refused);
	/* The directories of declared outputs exist, so a command can write them. */
	for (size_t i = 0; i < c->m->n_outputs; i++) {
		char *dir = xstrdup(c->m->outputs[i]), *slash = strrchr(dir, '/');
		if (slash) {
			*slash = '\0';
			int fd = dir_walk_contained(&s, ws_fd, dir);
			if (fd >= 0)
				close(fd);
		}
		free(dir);
	}
	if (s.failed) {
		errno = s.err;
		return -1;
	}
	return 0;
}

static const char *boundary_refusal(mode_t mode)
{
	if (S_ISLNK(mode))
		return "is a symlink";
	if (S_ISCHR(mode) || S_ISBLK(mode))
		return "is a device";
	if (S_ISFIFO(mode))
		return "is a FIFO";
	if (S_ISSOCK(mode))
		return "is a socket";
	if (S_ISDIR(mode))
		return "is a directory";
	return S_ISREG(mode) ? NULL : "not a regular file";
}

/* 1 if the workspace already holds exactly data at rel. */
static int unchanged(const struct exec_ctx *c, const char *rel, const char *data, size_t n)
{
	char *refusal = NULL, *error = NULL;
	struct gate_ctx g = gate_of(c);
	int fd = path_open_read(&g, rel, strlen(rel), &refusal, &error);
	free(refusal);
	free(error);
	if (fd < 0)
		return 0;
	struct sfma_err e;
	size_t len = 0;
	char *old = read_all_fd(fd, n, &len, &e);
	close(fd);
	int same = old && len == n && memcmp(old, data, n) == 0;
	free(old);
	return same;
}

void staging_copy_back(const struct exec_ctx *c, int ws_fd, json_t *copied, json_t *refused)
{
	for (size_t i = 0; i < c->m->n_outputs; i++) {
		const char *rel = c->m->outputs[i];
		char *dir = xstrdup(rel), *slash = strrchr(dir, '/');
		const char *leaf = slash ? slash + 1 : rel;
		int dfd = slash ? (*slash = '\0', open_dir_walk(ws_fd, dir, 0, 0)) : dup(ws_fd);
		if (dfd < 0) {
			/* A directory replaced by a link on the way is a refusal; a
			 * missing one just means the output was not made. */
			if (errno == ELOOP || errno == ENOTDIR)
				refuse(refused, rel, "a directory on its path is a symlink");
			free(dir);
			continue;
		}
		struct stat sb;
		const char *why = NULL;
		int fd = -1;
		if (fstatat(dfd, leaf, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			why = errno == ENOENT ? "" : strerror(errno);
		} else if ((why = boundary_refusal(sb.st_mode))) {
		} else if ((uint64_t)sb.st_size > COPY_BACK_MAX) {
			why = "over the copy-back size ceiling";
		} else if ((fd = openat(dfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) < 0 ||
		           fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) ||
		           (uint64_t)sb.st_size > COPY_BACK_MAX) {
			why = "changed during copy-back";
		}
		char *data = NULL;
		size_t len = 0;
		if (!why) {
			struct sfma_err e;
			if (!(data = read_all_fd(fd, COPY_BACK_MAX, &len, &e)))
				why = "unreadable";
		}
		if (!why && !unchanged(c, rel, data, len)) {
			/* The workspace side passes the same gate as a write call. */
			int wdir = -1;
			char *name = NULL, *refusal = NULL;
			struct gate_ctx g = gate_of(c);
			if (path_gate_write(&g, rel, strlen(rel), 1, &wdir, &name, &refusal) < 0) {
				refuse(refused, rel, refusal);
			} else {
				struct sfma_err e;
				if (atomic_write_at(wdir, name, data, len, 0644, &e) < 0)
					refuse(refused, rel, e.text);
				else
					json_array_append_new(copied, utf8_json(rel, strlen(rel)));
				close(wdir);
			}
			free(name);
			free(refusal);
		} else if (why && *why) {
			refuse(refused, rel, why);
		}
		free(data);
		if (fd >= 0)
			close(fd);
		close(dfd);
		free(dir);
	}
}
