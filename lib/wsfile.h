/* wsfile.h - opening a file of a workspace the way every reader must.
 *
 * Whoever can write to a workspace can leave anything where a reader
 * expects a file: a FIFO (a plain open(2) for reading waits for a writer,
 * forever), a device, a socket, a directory, or a symbolic link that
 * makes the reader read some other file. A reader of a workspace
 * (verifier, replay, log, report, summary) opens each file it reads with
 * ws_open_regular and reads only what that returns. */
#ifndef SFMA_WSFILE_H
#define SFMA_WSFILE_H

#include <stddef.h>

#include "errors.h"

/* Open path, relative to dirfd (AT_FDCWD: the current directory), for
 * reading: without following a symbolic link in its last component,
 * without waiting on a FIFO or device, and only if it is a regular file.
 * Returns a descriptor (close-on-exec, reads block as usual) that the
 * caller closes, or -1 with errno set and e "PATH: REASON":
 *   ELOOP   "is a symbolic link, not followed"
 *   EINVAL  "not a regular file" (a FIFO, device, socket or directory)
 *   other   open(2)'s errno and its strerror (ENOENT: nothing there).
 * Links in the components before the last are followed, as by open(2). */
int ws_open_regular(int dirfd, const char *path, struct sfma_err *e);

/* The whole of such a file, of at most max bytes: a new NUL-terminated
 * buffer (*len its length), or NULL with errno (ENOENT: nothing there)
 * and e "PATH: REASON" - a larger file is refused (EIO), never cut. */
char *ws_read_regular(int dirfd, const char *path, size_t max, size_t *len, struct sfma_err *e);

#endif
