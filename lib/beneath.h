/* beneath.h - opening paths below a directory without leaving it. */
#ifndef SFMA_BENEATH_H
#define SFMA_BENEATH_H

#include <jansson.h>
#include <sys/types.h>

/* Open rel below dirfd (O_CLOEXEC added) the way openat2 RESOLVE_BENEATH
 * does: a symlink leading out, or ".." above dirfd, fails with EXDEV; with
 * no_symlinks every symlink fails with ELOOP. Returns an fd or -1/errno. */
int open_beneath(int dirfd, const char *rel, int flags, int no_symlinks);

/* The fallback of open_beneath, by hand, for kernels without openat2
 * (exported so that a test can hold it against the kernel's answers). */
int open_beneath_walk(int dirfd, const char *rel, int flags, int no_symlinks);

/* The host facts the gate of a read or write of the normalized path norm
 * rests on: each path the resolution looks at, in order, with what it is
 * ("dir", "file", "link" with its "target", "fifo", "other", or "missing",
 * where the walk ends), at most PATH_FACTS_MAX of them. sfma replay
 * rebuilds them to derive the same verdict (sfma-formats(5)). */
#define PATH_FACTS_MAX 64
json_t *path_facts(int dirfd, const char *norm);

/* Open (creating if asked, never following links) the directory rel below
 * dirfd, one component at a time. Returns an fd or -1 with errno. */
int open_dir_walk(int dirfd, const char *rel, int create, mode_t mode);

#endif
