/* statefile.c - reading and writing a tool's state file in .sfma. */
#include "statefile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic.h"
#include "buf.h"
#include "canon.h"
#include "ndjson.h"

int statefile_read(int sfma_fd, const char *name, size_t max, json_t **doc, struct sfma_err *e)
{
	*doc = NULL;
	int fd = openat(sfma_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0)
		return err_set(e, "%s: %s", name, strerror(errno));
	struct stat st;
	size_t len;
	char *text = NULL;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		text = read_all_fd(fd, max, &len, e);
	else
		err_set(e, "%s: not a regular file", name);
	close(fd);
	if (!text)
		return -1;
	*doc = ndjson_parse(text, len, e);
	free(text);
	if (*doc && !json_is_object(*doc)) {
		json_decref(*doc);
		*doc = NULL;
		err_set(e, "%s: not a JSON object", name);
	}
	return *doc ? 1 : -1;
}

int statefile_write(int sfma_fd, const char *name, const json_t *doc, struct sfma_err *e)
{
	struct buf out = {0};
	int rc = canon_dump(doc, &out, e);
	if (rc == 0) {
		buf_addc(&out, '\n');
		rc = atomic_write_at(sfma_fd, name, out.p, out.len, 0600, e);
	}
	buf_free(&out);
	return rc;
}
