/* exec.h - the parts of sfma-exec: staging copy, sandbox, seccomp (the
 * hard tier is lib/hardtier.c, which sfma-replay decides with too). */
#ifndef SFMA_EXEC_H
#define SFMA_EXEC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "beneath.h"
#include "buf.h"
#include "hardtier.h"
#include "manifest.h"
#include "utf8.h"

struct cgroup_box;          /* cgroup.c */

#define OUTPUT_CLIP       ((size_t)LIMIT_OUTPUT_BYTES) /* bytes of a file shown to the model */

/* Ceilings of a sandboxed command (sfma-exec(1)). Those a manifest may
 * lower (limits) have their maxima in lib/ceilings.h and are in force as
 * struct command_limits (exec_ctx.limits); these are fixed. */
#define LIMIT_NOFILE      256
/* The three tmpfs of a sandbox: the root, /tmp and the staging copy as
 * /workspace (its size is limits.workspaceBytes). Their pages are memory:
 * size and inode count cap them. */
#define LIMIT_ROOT_BYTES  (16ull << 20)
#define LIMIT_ROOT_INODES 4096u
#define LIMIT_TMP_BYTES   (256ull << 20)
#define LIMIT_TMP_INODES  65536u
#define LIMIT_WORKSPACE_INODES 262144u
#define COPY_BACK_MAX     (64ull << 20)          /* largest output copied back */
#define STAGING_MAX_BYTES (512ull << 20)         /* all declared inputs together */
/* POSIX message queues: the bytes all queues of a sandbox may reserve,
 * the kernel's default (ipc/mqueue.c, MQ_BYTES_MAX). */
#define LIMIT_MSGQUEUE_BYTES 819200ull

/* The host ids sandboxes lease as root (sfma-exec(1), IDS; SFMA_EXEC_UIDS):
 * 65536 ids below 2^31, clear of the ranges useradd(8) hands out to
 * /etc/subuid (up to 600100000 by default, login.defs(5)) and of systemd's
 * dynamic users (61184-65519) and container ranges (524288-1879048191) and
 * its foreign range (2147352576-2147418111). */
#define SANDBOX_IDS_FIRST 2147000000u
#define SANDBOX_IDS_LAST  2147065535u

/* What the hard tier and the sandbox share about the task at hand. */
struct exec_ctx {
	const struct manifest *m;
	int ws_fd;              /* the workspace directory (O_PATH) */
	char *ws_real;          /* its canonical path, to tell where a link leads */
	int apply;              /* 0: dry run */
	long timeout_s;         /* a command's timeout: commandTimeoutSeconds, at most --timeout */
	const char *timeout_by; /* what set it, for the model: "commandTimeoutSeconds" or "--timeout" */
	struct command_limits limits; /* the manifest's limits (m->limits) */
	int lease_ids;          /* 1: each sandbox leases host ids of its own */
	unsigned ids_first, ids_last; /* from this range */
	unsigned own_uid, own_gid;    /* else the contained program runs as these */
	int acceptance;         /* this command is an acceptance check (§16): the
	                         * declared outputs are staged too, nothing is
	                         * copied back (set per request) */
};

/* The hard tier's view of the task at hand. */
static inline struct gate_ctx gate_of(const struct exec_ctx *c)
{
	return (struct gate_ctx){.m = c->m, .ws_fd = c->ws_fd, .ws_real = c->ws_real};
}

/* ---- uids.c ---- */

/* The host ids of one sandbox: uid and gid, the same number, leased while
 * fd (the lock) is open; fd -1 when they are the stage's own. */
struct id_lease {
	unsigned uid, gid;
	int fd;
};

/* Parse "FIRST-LAST", 1 <= FIRST <= LAST < 2^32 - 2. 0, or -1. */
int id_range_parse(const char *s, unsigned *first, unsigned *last);
/* 1 if every id of [first, last] is mapped in our user namespace, as uid
 * and as gid. */
int id_range_mapped(unsigned first, unsigned last);
/* Lease the lowest id of [first, last] that no account file names and no
 * other sandbox holds. Returns 0, or -1 with errno (EAGAIN: all taken). */
int id_lease_take(unsigned first, unsigned last, struct id_lease *l);
/* Release a lease (nothing for the stage's own ids). */
void id_lease_drop(struct id_lease *l);

/* ---- seccomp.c ---- */

/* Compile both filters once: the one with and the one without the rules
 * refusing shared memory. Returns 0 or -1 with *why (static text) set. */
int seccomp_prepare(const char **why);
/* Install a compiled filter on the calling thread (no allocation: safe
 * after RLIMIT_AS). Returns the listener of the calls the stage answers
 * (close-on-exec), -2 when there is none (the filter then fails them with
 * ENOSYS), or -1 with errno. */
int seccomp_install(int refuse_shm);

/* ---- notify.c ---- */

/* CLOCK_BOOTTIME in nanoseconds. */
int64_t boottime_ns(void);
/* Answer the next call waiting on listener for the sandbox made at
 * born_ns, whose cgroup is cg (may be NULL) and whose memory ceiling is
 * memory_bytes (limits.memoryBytes). Returns 0 (answered, or gone
 * meanwhile), or -1 with errno when the listener is unusable. */
int notify_answer(int listener, const struct cgroup_box *cg, long long memory_bytes, int64_t born_ns);

/* ---- cgroup.c ---- */

/* Create the cgroup of one command with its ceilings set (at most
 * processes processes, memory_bytes of memory). Returns it, or NULL when
 * no ceiling could be set up; *reason (static text, or NULL) says why a
 * ceiling is missing, in both cases. Release with cgroup_close. */
struct cgroup_box *cgroup_open(long processes, long long memory_bytes, const char **reason);
/* Move process pid into it (all hierarchies, or none). 0, or -1/errno. */
int cgroup_enter(struct cgroup_box *b, pid_t pid);
/* 1 if b holds a memory limit (b may be NULL). */
int cgroup_memory_limited(const struct cgroup_box *b);
/* That limit in bytes, or -1. */
long long cgroup_memory_max(const struct cgroup_box *b);
/* What b counts now: memory in bytes, processes (each left as it is when
 * b, or that controller, is missing). */
void cgroup_usage(const struct cgroup_box *b, long long *memory_bytes, long long *pids);
/* The ceilings in force, for the trace: an object, or null for NULL. */
json_t *cgroup_json(const struct cgroup_box *b);
/* Kill what is left inside, remove the cgroup (retrying while busy). */
void cgroup_close(struct cgroup_box *b);
/* Remove every cgroup still open (at exit; the second from a signal handler). */
void cgroup_shutdown(void);
void cgroup_shutdown_signal(void);

/* ---- sandbox.c ---- */

struct run_outcome {
	int executed;           /* 0 when refused before anything ran */
	int exit_code;          /* 124 timeout, 128+N signal */
	int timed_out;
	char *unavailable;      /* "secure command sandbox unavailable: ..." or NULL */
	struct buf out, err;    /* first limits.outputBytes bytes of each stream */
	uint64_t out_total, err_total;
	json_t *copied;         /* array of paths */
	json_t *refused;        /* array of {path, reason} */
	json_t *limits;         /* object */
	json_t *sandbox;        /* object: the host ids and what sysinfo gets */
};

/* Run argv in a fresh sandbox (the prepared one, else one made now) over
 * a staging copy of the declared inputs, then copy declared outputs back.
 * timeout_ms > 0. Nothing of the staging copy outlives the call. The
 * outcome is filled in all cases; free it with run_outcome_free. */
void sandbox_run(const struct exec_ctx *c, char **argv, long long timeout_ms,
                 struct run_outcome *o);
void run_outcome_free(struct run_outcome *o);
/* Between requests: let the last command's sandbox go and, with ahead set
 * (no request waiting) and when c may run commands (applied,
 * allowedCommands not empty), start preparing the next one unless one is
 * ready. Never fails: a sandbox that cannot be prepared is made again, and
 * its failure reported, by the next sandbox_run. */
void sandbox_prepare(const struct exec_ctx *c, int ahead);
/* Release what the sandbox keeps between commands (at exit). */
void sandbox_shutdown(void);
/* In a process forked from the stage: forget its sandboxes (never ended
 * from there). */
void sandbox_disown(void);
void sandbox_shutdown_signal(void); /* async-signal-safe */

/* /proc/self/mountinfo writes blanks, tabs, newlines and backslashes in
 * paths as \ooo (proc(5)): undo that in place. */
void mountinfo_unescape(char *s);

#endif
