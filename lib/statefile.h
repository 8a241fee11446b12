/* statefile.h - a tool's small state file in a workspace's .sfma (what
 * sfma-chat has shown, what sfma-telegram has delivered): one JSON object,
 * read as hostile input, written atomically and private. */
#ifndef SFMA_STATEFILE_H
#define SFMA_STATEFILE_H

#include <jansson.h>
#include <stddef.h>

#include "errors.h"

/* .sfma/NAME below sfma_fd as a JSON object: 1 with *doc (new); 0 when
 * there is none; -1 with e set when it is not a regular file of at most
 * max bytes holding one JSON object (never a link followed, never a FIFO
 * waited on). What a tool does about -1 is its own policy. */
int statefile_read(int sfma_fd, const char *name, size_t max, json_t **doc, struct sfma_err *e);

/* doc, canonical and newline-terminated, as .sfma/NAME: written atomically,
 * mode 0600 (it names what the run's messages said). 0, or -1 with e. */
int statefile_write(int sfma_fd, const char *name, const json_t *doc, struct sfma_err *e);

#endif
