/* hardtier.h - the hard tier: the deterministic gate in front of every
 * tool call (sfma-exec(1)). sfma-exec decides each call with it before it
 * acts; sfma-replay decides each recorded call again with it. */
#ifndef SFMA_HARDTIER_H
#define SFMA_HARDTIER_H

#include <jansson.h>
#include <stddef.h>

#include "manifest.h"

#define REASON_PATH_MAX 160 /* path bytes quoted in a reason */

/* What a gate looks at: the manifest and the workspace it resolves in. */
struct gate_ctx {
	const struct manifest *m;
	int ws_fd;              /* the workspace directory */
	const char *ws_real;    /* its canonical path, to tell where a link leads */
};

/* A path argument made safe to quote in a one-line reason (owned). */
char *quote_path(const char *s, size_t n);

/* 1 if the normalized path is .sfma or under it: the runner's own. */
int hardtier_reserved(const char *norm);

/* Why a read of .sfma is refused: named in the path itself (a rule of
 * the code, decided without the host), or reached through a link (a
 * path fact). The first is not a substring of the second. */
#define HARDTIER_READ_RESERVED ".sfma is reserved: the run's memory comes through recall"
#define HARDTIER_READ_RESERVED_LINK "leads into .sfma via link: .sfma is reserved"

/* Resolve a model-given path for reading. Returns an open O_RDONLY fd, or -1
 * with *refusal set to a reason (pass false) or *error set (pass true,
 * an operational failure such as a missing file); .sfma and what a link
 * leads to under it are refused. Both owned by the caller. */
int path_open_read(const struct gate_ctx *c, const char *path, size_t n, char **refusal, char **error);

/* Gate a write of path: lexical rules, declared output, reserved, and where
 * the parent directory really is. On success returns 0 and, when create is
 * set (applied run), *dirfd is the parent directory (missing directories
 * made) and *name its last component (owned); with create unset *dirfd is
 * -1. On refusal returns -1 with *refusal set (owned). */
int path_gate_write(const struct gate_ctx *c, const char *path, size_t n, int create, int *dirfd, char **name,
                    char **refusal);

/* Gate a command line. Returns a NULL-terminated argv (owned: free argv[0]
 * storage with argv_free) whose argv[0] is the allowed basename, or NULL
 * with *refusal set (owned). */
char **command_gate(const struct manifest *m, const char *cmd, size_t n, char **refusal);
void argv_free(char **argv);

/* The texts sfma-exec answers with itself (the replay derives them). */
#define HARDTIER_DRY_RUN_REASON "dry run: not executed"
#define HARDTIER_DRY_RUN_RESULT "dry run: the command passed the hard tier and was not executed"
#define HARDTIER_NOTIFIED "notified"
#define HARDTIER_ASKED "question sent"
/* A write's pass reason: "wrote N bytes to P", or the dry run's. */
void hardtier_write_text(char *out, size_t cap, size_t bytes, const char *norm, int dry_run);

/* What a call that passed the gate needs to be carried out. */
struct gate_pass {
	int fd;                 /* read: the file, open (-1: none) */
	char *error;            /* read: it could not be opened (a pass, not a refusal) */
	int dirfd;              /* write with create: the parent directory (-1: none) */
	char *name;             /* ... and the name in it */
	char **argv;            /* run: the command line */
};

/* The hard tier's verdict on one call object {"tool",...}, as sfma-exec
 * applies it before anything is carried out: NULL when the call passes
 * (*g filled; release with gate_pass_free), else the refusal (owned), the
 * reason the verdict entry records. create: a write makes the missing
 * directories of its declared output (an applied run). */
char *hardtier_gate(const struct gate_ctx *c, const json_t *call, int create, struct gate_pass *g);
void gate_pass_free(struct gate_pass *g);

#endif
