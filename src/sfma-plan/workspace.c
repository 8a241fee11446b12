/* workspace.c - what the planner itself reads and makes in a workspace:
 * the workspace and its .sfma with the lock, the operator's inbox, the
 * HALT file, and the declared outputs as a judge and the record see them.
 * Every file is opened without following links and must be a regular
 * file: the workspace is hostile input. */
#include "plan.h"
#include "buf.h"
#include "sha.h"
#include "utf8.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

char *path_join(char out[PATH_MAX], const char *dir, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
	if (n < 0 || n >= PATH_MAX)
		die("%s/%s: path too long (at most %d bytes)", dir, name, PATH_MAX - 1);
	return out;
}

/* The workspace is created only inside a directory that exists: a typo in
 * a manifest must not build a tree of directories (as root, anywhere). */
static void make_workspace(const char *ws)
{
	if (mkdir(ws, 0755) == 0 || errno == EEXIST)
		return;
	if (errno != ENOENT)
		die("workspace %s: %s", ws, strerror(errno));
	char parent[PATH_MAX];
	snprintf(parent, sizeof parent, "%s", ws); /* fits: the manifest bounds it */
	size_t n = strlen(parent);
	while (n > 1 && parent[n - 1] == '/')
		parent[--n] = '\0';
	char *slash = strrchr(parent, '/');
	slash[slash == parent] = '\0';
	die("workspace %s: parent directory %s does not exist; create it first (nothing was created)", ws,
	    parent);
}

void workspace_open(struct workspace *w, const struct manifest *m)
{
	*w = (struct workspace){.m = m, .lock_fd = -1};
	make_workspace(m->workspace_path);
	path_join(w->sfma_dir, m->workspace_path, ".sfma");
	/* 0700: .sfma holds the run's content - replies, command output,
	 * evidence - which may come from inputs only the user may read. */
	if (mkdir(w->sfma_dir, 0700) < 0 && errno != EEXIST)
		die("%s: %s", w->sfma_dir, strerror(errno));
	/* Locked for this run alone: flock on the .sfma directory itself, so
	 * a second run fails at once and creates nothing. */
	w->lock_fd = open(w->sfma_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (w->lock_fd < 0)
		die("%s: %s", w->sfma_dir, strerror(errno));
	if (flock(w->lock_fd, LOCK_EX | LOCK_NB) < 0)
		die("workspace busy: another sfma run holds %s", w->sfma_dir);
	/* The mailbox exists from the first run on, so the operator finds
	 * where to write. mkdirat never follows a link planted there. */
	static const char *const mailbox[] = {"inbox", "outbox"};
	for (int i = 0; i < 2; i++)
		if (mkdirat(w->lock_fd, mailbox[i], 0700) < 0 && errno != EEXIST)
			die("%s/%s: %s", w->sfma_dir, mailbox[i], strerror(errno));
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A regular file of at most max bytes below dirfd, never through a link
 * and never blocking on a FIFO (malloc'd, *n its length), or NULL. */
static char *read_regular(int dirfd, const char *name, size_t max, size_t *n)
{
	struct sfma_err e;
	char *body = NULL;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	struct stat st;
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		body = read_all_fd(fd, max, n, &e);
	if (fd >= 0)
		close(fd);
	return body;
}

json_t *workspace_inbox(struct workspace *w)
{
	json_t *messages = json_array();
	int dfd = openat(w->lock_fd, "inbox", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return messages;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		w->inbox = xrealloc(w->inbox, (w->n_inbox + 1) * sizeof *w->inbox);
		w->inbox[w->n_inbox++] = xstrdup(de->d_name);
	}
	if (w->n_inbox)
		qsort(w->inbox, w->n_inbox, sizeof *w->inbox, name_cmp);
	size_t kept = 0;
	for (size_t i = 0; i < w->n_inbox; i++) {
		size_t len = 0;
		char *body = read_regular(dfd, w->inbox[i], 64u << 10, &len);
		if (!body || !utf8_text_ok(body, len)) {
			warning("inbox/%s: skipped (not a regular file of at most 64 KiB of UTF-8 text)", w->inbox[i]);
			free(body);
			free(w->inbox[i]);
			continue;
		}
		/* The message is its lines: a file's final newline is not part of
		 * it (the earlier runner records "use JSON format", not "...\n"). */
		if (len > 0 && body[len - 1] == '\n')
			len -= len > 1 && body[len - 2] == '\r' ? 2 : 1;
		json_array_append_new(messages, json_pack("{s:s, s:s%}", "file", w->inbox[i], "text", body, len));
		free(body);
		w->inbox[kept++] = w->inbox[i];
	}
	w->n_inbox = kept;
	closedir(d);
	return messages;
}

void workspace_inbox_done(struct workspace *w)
{
	int dfd = openat(w->lock_fd, "inbox", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	for (size_t i = 0; i < w->n_inbox; i++) {
		if (dfd >= 0)
			unlinkat(dfd, w->inbox[i], 0);
		free(w->inbox[i]);
	}
	if (dfd >= 0)
		close(dfd);
	free(w->inbox);
	w->inbox = NULL;
	w->n_inbox = 0;
}

int workspace_halt_file(const struct workspace *w)
{
	struct stat st;
	return fstatat(w->lock_fd, "HALT", &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static int open_output(const struct workspace *w, const char *rel)
{
	char full[PATH_MAX];
	int fd = open(path_join(full, w->m->workspace_path, rel), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK |
	              O_NOCTTY);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
		close(fd);
		return -1;
	}
	return fd;
}

json_t *workspace_outputs(const struct workspace *w)
{
	json_t *list = json_array();
	for (size_t i = 0; i < w->m->n_outputs; i++) {
		const char *p = w->m->outputs[i];
		json_t *o = json_pack("{s:s, s:b}", "path", p, "exists", 0);
		int fd = open_output(w, p);
		char data[JUDGE_OUTPUT_MAX];
		ssize_t n = -1;
		if (fd >= 0) {
			while ((n = read(fd, data, sizeof data)) < 0 && errno == EINTR)
				;
			close(fd);
		}
		if (n >= 0) {
			size_t keep = (size_t)n;
			while (keep > 0 && !utf8_text_ok(data, keep))
				keep--;
			json_object_set_new(o, "exists", json_true());
			json_object_set_new(o, "content", json_stringn(data, keep));
			json_object_set_new(o, "clipped", json_boolean(keep < (size_t)n || (size_t)n == sizeof data));
		}
		json_array_append_new(list, o);
	}
	return list;
}

json_t *workspace_outputs_record(const struct workspace *w, int dry_run, const json_t *written)
{
	json_t *list = json_array();
	for (size_t i = 0; i < w->m->n_outputs; i++) {
		const char *p = w->m->outputs[i];
		json_t *o = json_pack("{s:s, s:b}", "path", p, "ok", 0);
		if (dry_run) {
			json_t *sha = json_object_get(written, p);
			if (sha) {
				json_object_set_new(o, "ok", json_true());
				json_object_set(o, "sha256", sha);
			}
		} else {
			char hex[65];
			int fd = open_output(w, p);
			if (fd >= 0 && sha256_file_hex(fd, hex) == 0) {
				json_object_set_new(o, "ok", json_true());
				json_object_set_new(o, "sha256", json_string(hex));
			}
			if (fd >= 0)
				close(fd);
		}
		json_array_append_new(list, o);
	}
	return list;
}

void workspace_close(struct workspace *w)
{
	for (size_t i = 0; i < w->n_inbox; i++)
		free(w->inbox[i]);
	free(w->inbox);
	if (w->lock_fd >= 0)
		close(w->lock_fd);
	*w = (struct workspace){.lock_fd = -1};
}
