/* stage.h - the staging copy behind /workspace. */
#ifndef SFMA_EXEC_STAGE_H
#define SFMA_EXEC_STAGE_H

#include <limits.h>

#include "exec.h"

struct stage {
	char path[PATH_MAX];            /* $TMPDIR/sfma-stage.XXXXXX, empty when none */
	int dir_fd;                     /* holds "ws" (the copy bound as /workspace) */
	int ws_fd;                      /* and "root" (mount point of the new root) */
};

/* Make a staging copy of the declared inputs (symlinks and special files
 * refused into refused[]). Returns 0, or -1 with errno and *step naming the
 * failed step; call stage_discard in both cases. */
int stage_create(const struct exec_ctx *c, struct stage *st, json_t *refused, const char **step);

/* Copy the declared outputs present in the staging copy back into the
 * workspace; paths written go to copied[], refusals to refused[]. */
void stage_copy_back(const struct exec_ctx *c, struct stage *st, json_t *copied, json_t *refused);

/* 1 if staging copies live in the private tmpfs (set up on first use). */
int stage_private_tmpfs(void);
/* Unmount and remove the private tmpfs, if any (at exit). */
void stage_shutdown(void);
/* The same from a signal handler (async-signal-safe). */
void stage_shutdown_signal(void);

/* Remove the staging copy (always: also after any failure). */
void stage_discard(struct stage *st);

#endif
