/* mailbox.c - listing and reading the outbox, opening mailbox directories. */
#include "mailbox.h"
#include "ndjson.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* openat a directory component without following a link; with create, make
 * it first when missing. Returns the descriptor or -1 (errno set). */
static int open_component(int at, const char *name, int create)
{
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT && create) {
		if (mkdirat(at, name, 0700) < 0 && errno != EEXIST)
			return -1;
		fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	return fd;
}

int mailbox_dir(const char *workspace, const char *sub, int create, struct sfma_err *e)
{
	int ws = open(workspace, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ws < 0)
		return err_set(e, "%s: %s", workspace, strerror(errno));
	int dot = open_component(ws, ".sfma", create);
	int saved = errno;
	close(ws);
	if (dot < 0)
		return err_set(e, "%s/.sfma: %s", workspace,
		               saved == ENOTDIR || saved == ELOOP ? "not a directory (links are not followed)"
		                                                  : strerror(saved));
	if (!sub)
		return dot;
	int fd = open_component(dot, sub, create);
	saved = errno;
	close(dot);
	if (fd < 0)
		return err_set(e, "%s/.sfma/%s: %s", workspace, sub,
		               saved == ENOTDIR || saved == ELOOP ? "not a directory (links are not followed)"
		                                                  : strerror(saved));
	return fd;
}

/* The leading decimal number of an outbox name, or -1 when it has none. */
static long long leading_seq(const char *name)
{
	long long v = 0;
	int digits = 0;
	for (; *name >= '0' && *name <= '9' && digits < 17; name++, digits++)
		v = v * 10 + (*name - '0');
	return digits ? v : -1;
}

static int outbox_cmp(const void *pa, const void *pb)
{
	const char *a = *(char *const *)pa, *b = *(char *const *)pb;
	long long sa = leading_seq(a), sb = leading_seq(b);
	if (sa != sb) {
		if (sa < 0 || sb < 0)
			return sa < 0 ? 1 : -1;
		return sa < sb ? -1 : 1;
	}
	return strcmp(a, b);
}

int outbox_list(int dirfd, char ***names, size_t *n, struct sfma_err *e)
{
	*names = NULL;
	*n = 0;
	int fd = dup(dirfd);
	if (fd < 0)
		return err_set(e, "outbox: %s", strerror(errno));
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return err_set(e, "outbox: %s", strerror(errno));
	}
	/* The descriptor is shared with dirfd: start from the top every time. */
	rewinddir(d);
	struct dirent *de;
	char **v = NULL;
	size_t count = 0;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (de->d_name[0] == '.' || len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
			continue;
		v = xrealloc(v, (count + 1) * sizeof *v);
		v[count++] = xstrdup(de->d_name);
	}
	closedir(d);
	if (count)
		qsort(v, count, sizeof *v, outbox_cmp);
	*names = v;
	*n = count;
	return 0;
}

void mailbox_names_free(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

json_t *outbox_read(int dirfd, const char *name, struct sfma_err *e)
{
	json_t *msg = ndjson_load_at(dirfd, name, 1, OUTBOX_FILE_MAX, e);
	if (!msg)
		return NULL;
	json_t *at = json_object_get(msg, "at");
	if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "kind")) ||
	    !json_is_string(json_object_get(msg, "text")) || (at && !json_is_string(at))) {
		json_decref(msg);
		err_set(e, "%s: not an outbox message (an object with string kind and text)", name);
		return NULL;
	}
	return msg;
}

void mailbox_label(const char *in, char *out, size_t cap)
{
	size_t n = 0;
	for (; in && in[n] && n + 1 < cap; n++) {
		char c = in[n];
		int keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		           (c >= '0' && c <= '9') || c == '_' || c == '-';
		out[n] = keep ? c : '_';
	}
	out[n] = '\0';
	if (n == 0)
		snprintf(out, cap, "%s", "unknown");
}
