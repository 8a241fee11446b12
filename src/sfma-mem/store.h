/* store.h - tiered memory stores and recall, the memory stage's own
 * (sfma-mem(1)).
 *
 * Three stores: in-process (this run only: the memory stage's process),
 * files (.sfma/mem/records/) and git (.sfma/mem as its own repository:
 * one commit per run). Each run measures them and places them fast /
 * medium / long by latency. */
#ifndef SFMA_MEM_STORE_H
#define SFMA_MEM_STORE_H

#include <jansson.h>
#include <string.h>
#include <limits.h>
#include <sys/types.h>

#include "errors.h"
#include "gitsafe.h"

struct store {
	char mem_dir[PATH_MAX];     /* <ws>/.sfma/mem */
	char records_dir[PATH_MAX]; /* <ws>/.sfma/mem/records */
	char git_dir[PATH_MAX];     /* <ws>/.sfma/mem/.git (real path once checked) */
	char ceiling[PATH_MAX];     /* <ws>/.sfma: git's discovery never climbs into it */
	char trace_path[PATH_MAX];
	int git_available;
	int committed;              /* this run's commit landed */
	char parent[65];           /* the branch's commit when the run began, "" if none yet */
	char git_unavailable_why[200];
	double latency_inproc, latency_file, latency_git;
	const char *fast, *medium, *longer; /* store names by tier */
	json_t *inproc;            /* id -> pointer ("file:<id>" / "git:<sha>") */
	struct gitsafe_child importer; /* the commit's fast-import, started by store_open */
};

/* Set up the stores for the workspace's .sfma directory, running the
 * containment guards and gitsafe_check_repo before any git command.
 * Returns 0, or -1 with e set to a message containing the contract's
 * phrase (the run must abort; the store is left as it was). */
int store_open(struct store *st, const char *sfma_dir, struct sfma_err *e);

/* Measure the stores and place them. Returns the two `store` entries'
 * data: the git store's description and the placement. */
void store_profile(struct store *st, json_t **git_entry, json_t **placement);

/* An id that is safe as a file name under records/ (letters, digits,
 * . _ -, at most 128 bytes, no leading dot, no ".."): 1 or 0. */
int store_safe_id(const char *id);

/* Write a record durably under a safe id (store_safe_id); returns the
 * `store` entry data (op "put"). */
json_t *store_put(struct store *st, const char *id, json_t *payload, long fast_max_bytes);

/* Serve a recall call. A mode that is not one of the five is refused
 * here too (in a run the core's gate came first; by hand it did not).
 * Returns the text shown to the model (owned) and fills *entry with the
 * `store` entry data (op "recall"); or NULL when the call cannot be
 * served, the reason in refusal. */
char *store_recall(struct store *st, json_t *call, json_t **entry, struct sfma_err *refusal);

/* Commit memory.json and the records: one commit per run, made by one
 * `git fast-import` on the branch HEAD names, or on HEAD itself when it
 * is detached. Returns the
 * `store` entry data (stage "commit"), or NULL without git. *sha receives
 * the commit id (static buffer) or NULL. */
json_t *store_commit(struct store *st, const char *memory_json, const char *subject, const char **sha);

void store_close(struct store *st);

/* The longest workspace path the store takes: its paths under
 * .sfma/mem/records/ then always fit in PATH_MAX. */
#define STORE_WORKSPACE_MAX (PATH_MAX - 512)

#endif
