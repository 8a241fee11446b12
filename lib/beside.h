/* beside.h - a program's own directory: the programs of sfma are found
 * beside the one that runs (an installed or built set belongs together). */
#ifndef SFMA_BESIDE_H
#define SFMA_BESIDE_H

#include <stddef.h>

/* "<the directory of /proc/self/exe>/<name>" into buf (cap bytes).
 * 0, or -1 with errno set: readlink's, ENOENT when the link names no
 * directory, ENAMETOOLONG when it does not fit. */
int beside_self(const char *name, char *buf, size_t cap);

#endif
