/* stage.c - the staging copy a sandboxed command sees as /workspace.
 *
 * Built fresh for every command from the declared inputs only, never
 * following a symlink (a link in the workspace could otherwise smuggle a
 * host file in); after the command, declared outputs are copied back only
 * when they are plain files under the size ceiling; the copy is always
 * removed. */
#include "stage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic.h"
#include "err.h"
#include "ndjson.h"

#define STAGE_MAX_DEPTH 64

static void rm_tree(int dirfd, int depth);

static void refuse(json_t *list, const char *path, const char *why)
{
	json_t *r = json_object();
	json_object_set_new(r, "path", json_text(path, strlen(path)));
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

struct stager {
	json_t *refused;
	uint64_t total;
	int failed;             /* an I/O error: the staging copy is incomplete */
};

/* Copy the regular file open as src into dstdir/name. */
static void stage_file(struct stager *s, int src, const struct stat *st, int dstdir,
                       const char *name, const char *rel)
{
	if (s->total + (uint64_t)st->st_size > STAGE_MAX_BYTES) {
		refuse(s->refused, rel, "over the staging size ceiling");
		return;
	}
	/* Keep the execute bits, never set-id bits. */
	int out = openat(dstdir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
	                 (st->st_mode & 0111) ? 0755 : 0644);
	if (out < 0) {
		if (errno != EEXIST) /* nested inputs ("src" and "src/a.c") */
			s->failed = 1;
		return;
	}
	if (copy_fd(src, out, (uint64_t)st->st_size) < 0)
		s->failed = 1;
	s->total += (uint64_t)st->st_size;
	close(out);
}

static void stage_tree(struct stager *s, int src, int dst, const char *rel, int depth)
{
	if (depth > STAGE_MAX_DEPTH) {
		refuse(s->refused, rel, "nested too deeply");
		return;
	}
	int walk = dup(src);
	DIR *d = walk >= 0 ? fdopendir(walk) : NULL;
	if (!d) {
		if (walk >= 0)
			close(walk);
		s->failed = 1;
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
			s->failed = 1;
		} else if (S_ISLNK(st.st_mode)) {
			refuse(s->refused, child.p, "symlink refused while staging");
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(src, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (mkdirat(dst, nm, 0755) < 0 && errno != EEXIST)
				s->failed = 1;
			int dsub = openat(dst, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0 && dsub >= 0)
				stage_tree(s, sub, dsub, child.p, depth + 1);
			else
				s->failed = 1;
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
				stage_file(s, in, &again, dst, nm, child.p);
			if (in >= 0)
				close(in);
		} else {
			refuse(s->refused, child.p, "not a regular file or directory");
		}
		buf_free(&child);
	}
	closedir(d);
}

static int chown_tree(int dirfd, unsigned uid, unsigned gid, int depth)
{
	if (fchown(dirfd, uid, gid) < 0 || depth > STAGE_MAX_DEPTH + 2)
		return -1;
	int walk = dup(dirfd);
	DIR *d = walk >= 0 ? fdopendir(walk) : NULL;
	if (!d) {
		if (walk >= 0)
			close(walk);
		return -1;
	}
	int rc = 0;
	struct dirent *ent;
	while (rc == 0 && (ent = readdir(d))) {
		if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
			continue;
		if (ent->d_type == DT_DIR) {
			int sub = openat(dirfd, ent->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			rc = sub < 0 ? -1 : chown_tree(sub, uid, gid, depth + 1);
			if (sub >= 0)
				close(sub);
		} else if (fchownat(dirfd, ent->d_name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = -1;
		}
	}
	closedir(d);
	return rc;
}

/* Where staging copies are made: one directory per sfma-exec process,
 * $TMPDIR/sfma-exec.XXXXXX (TMPDIR defaulting to /tmp), holding "root" -
 * the mount point every sandbox mounts its own root on, each in its own
 * mount namespace - and one sfma-stage.XXXXXX per command. Removed at exit. */
static char base_dir[PATH_MAX - 64];
static int base_state; /* 0 not yet, 1 plain directory, 2 private tmpfs, -1 failed */
static int base_errno;

/* As root the base is a tmpfs only this process and its children can see:
 * unshare(CLONE_NEWNS) gives sfma-exec a private copy of the mount table,
 * so the host never sees the mount, and the kernel drops it with the
 * namespace when sfma-exec exits - staging copies are gone even after a
 * crash. It is also a ceiling: all a command writes under /workspace counts
 * against its size. If that fails the base stays a plain directory. */
static void base_init(void)
{
	const char *tmp = getenv("TMPDIR");
	if (!tmp || tmp[0] != '/')
		tmp = "/tmp";
	base_state = -1;
	if ((size_t)snprintf(base_dir, sizeof base_dir, "%s/sfma-exec.XXXXXX", tmp) >=
	    sizeof base_dir) {
		base_errno = ENAMETOOLONG;
		return;
	}
	if (!mkdtemp(base_dir)) {
		base_errno = errno;
		return;
	}
	base_state = 1;
	char opts[64];
	snprintf(opts, sizeof opts, "mode=0711,size=%llu", (unsigned long long)LIMIT_WORKSPACE_BYTES);
	if (geteuid() == 0 && unshare(CLONE_NEWNS) == 0 &&
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
	    mount("tmpfs", base_dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) == 0)
		base_state = 2;
	/* Searchable by the contained ids, which reach "root" as ../root from
	 * their staging directory; nothing in it is listable. */
	char root[PATH_MAX];
	snprintf(root, sizeof root, "%s/root", base_dir);
	if (chmod(base_dir, 0711) < 0 || mkdir(root, 0755) < 0) {
		base_errno = errno;
		stage_shutdown();
		base_state = -1;
	}
}

int stage_private_tmpfs(void)
{
	if (!base_state)
		base_init();
	return base_state == 2;
}

/* Only system calls: also runs in a signal handler. */
void stage_shutdown_signal(void)
{
	if (base_state <= 0)
		return;
	if (base_state == 2)
		umount2(base_dir, MNT_DETACH);
	int fd = open(base_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		unlinkat(fd, "root", AT_REMOVEDIR);
		close(fd);
	}
	rmdir(base_dir);
}

void stage_shutdown(void)
{
	if (base_state == 1) {
		/* Leftover staging copies (there should be none) go too. */
		int fd = open(base_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0) {
			rm_tree(fd, 0);
			close(fd);
		}
	}
	stage_shutdown_signal();
	base_state = 0;
}

int stage_create(const struct exec_ctx *c, struct stage *st, json_t *refused, const char **step)
{
	memset(st, 0, sizeof *st);
	st->dir_fd = st->ws_fd = -1;
	if (!base_state)
		base_init();
	*step = "staging directory";
	if (base_state < 0) {
		errno = base_errno;
		return -1;
	}
	snprintf(st->path, sizeof st->path, "%s/sfma-stage.XXXXXX", base_dir);
	if (!mkdtemp(st->path)) {
		st->path[0] = '\0';
		return -1;
	}
	st->dir_fd = open(st->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (st->dir_fd < 0 || mkdirat(st->dir_fd, "ws", 0755) < 0)
		return -1;
	st->ws_fd = openat(st->dir_fd, "ws", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (st->ws_fd < 0)
		return -1;

	*step = "staging inputs";
	struct stager s = {.refused = refused};
	for (size_t i = 0; i < c->m->n_inputs; i++) {
		const char *rel = c->m->inputs[i];
		/* No symlink anywhere along its path. */
		int in = open_beneath(c->ws_fd, rel, O_RDONLY | O_NONBLOCK, 1);
		if (in < 0) {
			if (errno == ELOOP || errno == EXDEV)
				refuse(refused, rel, "symlink refused while staging");
			else if (errno != ENOENT) /* an absent input is simply not staged */
				refuse(refused, rel, strerror(errno));
			continue;
		}
		struct stat sb;
		if (fstat(in, &sb) < 0) {
			s.failed = 1;
		} else if (S_ISDIR(sb.st_mode)) {
			int dst = open_dir_walk(st->ws_fd, rel, 1, 0755);
			if (dst < 0) {
				s.failed = 1;
			} else {
				stage_tree(&s, in, dst, rel, 0);
				close(dst);
			}
		} else if (S_ISREG(sb.st_mode)) {
			char *dir = xstrdup(rel), *slash = strrchr(dir, '/');
			const char *leaf = slash ? slash + 1 : rel;
			int dst = slash ? (*slash = '\0', open_dir_walk(st->ws_fd, dir, 1, 0755))
			                : dup(st->ws_fd);
			if (dst < 0)
				s.failed = 1;
			else
				stage_file(&s, in, &sb, dst, leaf, rel);
			if (dst >= 0)
				close(dst);
			free(dir);
		} else {
			refuse(refused, rel, "not a regular file or directory");
		}
		close(in);
	}
	/* The directories of declared outputs exist, so a command can write them. */
	for (size_t i = 0; i < c->m->n_outputs; i++) {
		char *dir = xstrdup(c->m->outputs[i]), *slash = strrchr(dir, '/');
		if (slash) {
			*slash = '\0';
			int fd = open_dir_walk(st->ws_fd, dir, 1, 0755);
			if (fd >= 0)
				close(fd);
		}
		free(dir);
	}
	if (s.failed)
		return -1;
	/* The contained program is a different host user when sfma runs as
	 * root: it must own its copy to be able to change it. */
	*step = "staging ownership";
	if (c->host_uid != (unsigned)geteuid() &&
	    (chown_tree(st->ws_fd, c->host_uid, c->host_gid, 0) < 0 ||
	     fchown(st->dir_fd, c->host_uid, c->host_gid) < 0))
		return -1;
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
	int fd = path_open_read(c, rel, strlen(rel), &refusal, &error);
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

void stage_copy_back(const struct exec_ctx *c, struct stage *st, json_t *copied, json_t *refused)
{
	for (size_t i = 0; i < c->m->n_outputs; i++) {
		const char *rel = c->m->outputs[i];
		char *dir = xstrdup(rel), *slash = strrchr(dir, '/');
		const char *leaf = slash ? slash + 1 : rel;
		int dfd = slash ? (*slash = '\0', open_dir_walk(st->ws_fd, dir, 0, 0)) : dup(st->ws_fd);
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
			if (path_gate_write(c, rel, strlen(rel), 1, &wdir, &name, &refusal) < 0) {
				refuse(refused, rel, refusal);
			} else {
				struct sfma_err e;
				if (atomic_write_at(wdir, name, data, len, 0644, &e) < 0)
					refuse(refused, rel, e.text);
				else
					json_array_append_new(copied, json_text(rel, strlen(rel)));
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

/* Remove everything below dirfd; directories the command made unreadable
 * are opened up first. Best effort, never follows a link. */
static void rm_tree(int dirfd, int depth)
{
	int walk = dup(dirfd);
	DIR *d = walk >= 0 ? fdopendir(walk) : NULL;
	if (!d) {
		if (walk >= 0)
			close(walk);
		return;
	}
	struct dirent *ent;
	while ((ent = readdir(d))) {
		const char *nm = ent->d_name;
		if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0)
			continue;
		if (unlinkat(dirfd, nm, 0) == 0)
			continue;
		if (errno != EISDIR && errno != EPERM)
			continue;
		int sub = openat(dirfd, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0 && errno == EACCES && fchmodat(dirfd, nm, 0700, 0) == 0)
			sub = openat(dirfd, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0) {
			fchmod(sub, 0700);
			if (depth < 4096)
				rm_tree(sub, depth + 1);
			close(sub);
		}
		unlinkat(dirfd, nm, AT_REMOVEDIR);
	}
	closedir(d);
}

void stage_discard(struct stage *st)
{
	if (st->ws_fd >= 0)
		close(st->ws_fd);
	if (st->dir_fd >= 0) {
		rm_tree(st->dir_fd, 0);
		close(st->dir_fd);
	}
	if (st->path[0] && rmdir(st->path) < 0 && errno != ENOENT)
		warnx("remove staging copy %s: %s", st->path, strerror(errno));
	st->ws_fd = st->dir_fd = -1;
	st->path[0] = '\0';
}
