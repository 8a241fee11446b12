/* mailbox.h - the operator's side of the mailbox (sfma-formats(5)).
 *
 * The engine reads WORKSPACE/.sfma/inbox/ at run start and writes one file
 * per notify/ask into WORKSPACE/.sfma/outbox/. Operator surfaces (sfma-chat,
 * sfma-telegram) only list and read the outbox and add to the inbox; these
 * helpers do that without following links planted under .sfma. */
#ifndef SFMA_MAILBOX_H
#define SFMA_MAILBOX_H

#include <stddef.h>
#include <jansson.h>

#include "errors.h"
#include "utf8.h"

#define INBOX_FILE_MAX (64u << 10)   /* the engine skips larger inbox files */
#define OUTBOX_FILE_MAX (1u << 20)   /* an outbox file larger than this is not read */

/* Open WORKSPACE/.sfma/SUB (SUB one component, or NULL for .sfma itself) as
 * a directory. The workspace path is followed as given; .sfma and SUB are
 * opened with O_NOFOLLOW. With create, missing directories are made (0755,
 * like the engine). Returns an O_CLOEXEC descriptor, or -1 with e filled. */
int mailbox_dir(const char *workspace, const char *sub, int create, struct sfma_err *e);

/* The outbox file names of dirfd (regular names ending in ".json", not
 * starting with '.'), sorted by their leading sequence number, then by name
 * (names without a number last). Returns 0 and a new array of n new strings
 * (free with mailbox_names_free), or -1 with e filled. */
int outbox_list(int dirfd, char ***names, size_t *n, struct sfma_err *e);
void mailbox_names_free(char **names, size_t n);

/* Read outbox file dirfd/name: a regular file (not a link) of at most
 * OUTBOX_FILE_MAX bytes holding an object with string "kind" and "text"
 * ("at" optional, a string when present). Returns a new reference, or NULL
 * with e filled. */
json_t *outbox_read(int dirfd, const char *name, struct sfma_err *e);

/* Copy in to out (cap >= 2) keeping only [A-Za-z0-9_-], every other byte
 * becoming '_', clipped to cap - 1 bytes; "unknown" when in is NULL or
 * empty. The result is safe in a file name and on a terminal. */
void mailbox_label(const char *in, char *out, size_t cap);

#endif
