/* ceilings.h - the ceilings of one sandboxed command (sfma-exec(1)): the
 * built-in maxima, which are also the defaults, and the floors below which
 * a manifest's limits (sfma-manifest(5)) may not go. The maxima stop a fork
 * bomb, a memory bomb and a disk bomb without getting in the way of
 * compilers, git or test suites; the floors leave a small command room to
 * start (a Python interpreter maps some 30 MiB before its first line). */
#ifndef SFMA_CEILINGS_H
#define SFMA_CEILINGS_H

/* memoryBytes: the address space of each process (RLIMIT_AS) and, where a
 * memory cgroup is in force, all processes and tmpfs pages together. */
#define LIMIT_MEMORY_MIN          (64ll << 20)
#define LIMIT_MEMORY_BYTES        (4ll << 30)
/* processes: RLIMIT_NPROC and the pids cgroup. */
#define LIMIT_PROCESSES_MIN       8
#define LIMIT_NPROC               256
/* fileSizeBytes: the largest file a command may write (RLIMIT_FSIZE). */
#define LIMIT_FSIZE_MIN           (1ll << 20)
#define LIMIT_FSIZE_BYTES         (1ll << 30)
/* cpuSeconds: RLIMIT_CPU, never above the command's timeout + 1 s, which
 * is also its value when the manifest sets none. */
#define LIMIT_CPU_MIN             1
#define LIMIT_CPU_SECONDS         86400
/* outputBytes: the bytes of a command's output kept (of each stream) and
 * shown to the model (of both together). */
#define LIMIT_OUTPUT_MIN          1024
#define LIMIT_OUTPUT_BYTES        8192
/* workspaceBytes: the staging tmpfs a command sees as /workspace. */
#define LIMIT_WORKSPACE_MIN       (16ll << 20)
#define LIMIT_WORKSPACE_BYTES     (2ll << 30)

/* commandTimeoutSeconds when the manifest sets none. */
#define COMMAND_TIMEOUT_DEFAULT   60

#endif
