/* atomic.h - atomic file replacement.
 *
 * A reader sees either the old file or the whole new one, also after a
 * crash: write a temporary file in the same directory, fsync it, rename it
 * over the target, fsync the directory (rename is atomic within a file
 * system; the directory fsync makes the rename itself durable). */
#ifndef SFMA_ATOMIC_H
#define SFMA_ATOMIC_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/stat.h>

#include "errors.h"

/* Replace dirfd/name with data. name must be a single component (no '/').
 * The temporary file is removed on any failure. Returns 0 or -1 (e filled). */
int atomic_write_at(int dirfd, const char *name, const void *data, size_t n,
                    mode_t mode, struct sfma_err *e);

/* The same with the temporary file made in tmp_dirfd, another directory
 * of the same file system: for a program that may create files there but
 * write none in dirfd (a Landlock grant of MAKE_REG, REMOVE_FILE and
 * REFER only: sfma-mem and .sfma/memory.json). */
int atomic_write_via(int tmp_dirfd, int dirfd, const char *name, const void *data, size_t n, mode_t mode,
                     struct sfma_err *e);

/* Same for a path: its directory is opened, then atomic_write_at. */
int atomic_write(const char *path, const void *data, size_t n, mode_t mode,
                 struct sfma_err *e);

/* A file a crash may take back, never tear: temporary file and rename as
 * atomic_write, without either fsync. After a crash the path may hold the
 * old content, the new, or (on some file systems) be empty; for caches
 * whose loss costs only a recomputation. */
int atomic_write_volatile(const char *path, const void *data, size_t n, mode_t mode,
                          struct sfma_err *e);

#endif
