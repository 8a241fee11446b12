/* staging.h - the staging copy behind /workspace.
 *
 * The copy lives in a tmpfs that the sandbox init mounts inside the
 * command's own mount namespace; this stage reaches it only through the
 * directory descriptor init passes back. No host path ever names it, and
 * the kernel frees it when the last reference goes: the namespace and that
 * descriptor (see sandbox.c). */
#ifndef SFMA_EXEC_STAGING_H
#define SFMA_EXEC_STAGING_H

#include "exec.h"

/* Fill the empty staging tmpfs open as ws_fd with the declared inputs
 * (symlinks and special files refused into refused[]) and make the
 * directories of declared outputs. Entries are created as the contained
 * ids, host uid and gid, who must own what they may change. Returns 0, or
 * -1 with errno and *step naming the failed step (the copy is incomplete:
 * the command must not run). */
int staging_fill(const struct exec_ctx *c, int ws_fd, unsigned uid, unsigned gid,
                 json_t *refused, const char **step);

/* Copy the declared outputs present in the staging copy ws_fd back into
 * the workspace; paths written go to copied[], refusals to refused[]. */
void staging_copy_back(const struct exec_ctx *c, int ws_fd, json_t *copied, json_t *refused);

#endif
