/* manifest.h - the manifest (schema v2, sfma-manifest(5)).
 *
 * One loader for every stage, so that no two stages can read one manifest
 * differently: strict JSON (duplicate keys are an error), every rule of the
 * contract checked, every problem reported (not just the first). */
#ifndef SFMA_MANIFEST_H
#define SFMA_MANIFEST_H

#include <limits.h>
#include <stddef.h>
#include <jansson.h>

#include "ceilings.h"

#define MANIFEST_MAX_BYTES (1u << 20)
#define MANIFEST_ACCEPTANCE_MAX 8   /* acceptance commands, at most */
/* The longest workspace path accepted (resolved to an absolute path): the
 * runner's deepest file, .sfma/mem/records/<id>.json, lies at most 256
 * bytes below it, so every path built under a valid workspace fits in
 * PATH_MAX and none is ever cut short. */
#define MANIFEST_WORKSPACE_MAX (PATH_MAX - 256)

/* An endpoint's prices, US dollars per million tokens (§17). */
struct endpoint_pricing {
	int set;                        /* 1 when the endpoint has pricing */
	double input_per_mtok;          /* inputPerMTok: uncached input tokens */
	double output_per_mtok;         /* outputPerMTok: output tokens (reasoning included) */
	double cached_input_per_mtok;   /* cachedInputPerMTok: input read from a cache (default inputPerMTok) */
	double cache_write_per_mtok;    /* cacheWritePerMTok: input written to a cache (default inputPerMTok) */
};

struct endpoint_cfg {
	const char *name, *provider, *model;
	const char *base_url;           /* NULL when absent */
	double prior_reasoning, prior_mechanical;
	json_t *auth;                   /* borrowed from manifest->json, or NULL */
	long max_output_tokens;         /* maxOutputTokens, 4096 */
	int tool_protocol_text;         /* toolProtocol "text" (always 1 for mock) */
	struct endpoint_pricing pricing; /* pricing; .set 0 when absent */
};

/* One acceptance check (§16): a command line the run tool would pass, and
 * the exit status that means the work is accepted. */
struct acceptance_cmd {
	const char *cmd;                /* the command line as written (borrowed from manifest->json) */
	int exit;                       /* the exit status expected, 0..255 (default 0) */
};

/* The ceilings of one sandboxed command (limits, §16), each between its
 * floor and the built-in maximum of ceilings.h; absent, the maximum. */
struct command_limits {
	long long memory_bytes;         /* memoryBytes: RLIMIT_AS and the memory cgroup */
	long processes;                 /* processes: RLIMIT_NPROC and the pids cgroup */
	long long file_size_bytes;      /* fileSizeBytes: RLIMIT_FSIZE */
	long cpu_seconds;               /* cpuSeconds: RLIMIT_CPU; 0 when absent (the timeout + 1 s) */
	long output_bytes;              /* outputBytes: a command's output kept and shown to the model */
	long long workspace_bytes;      /* workspaceBytes: the size of the staging tmpfs /workspace */
};

/* The score weights of one task class (tuning.routing). */
struct routing_weights {
	double prior, pass, avail, lat;
};

struct tuning {
	double ewma_alpha;              /* 0.3 */
	double target_latency_ms;       /* 0 when unset */
	int cert_window;                /* 20 */
	double cert_completion;         /* 0.9 */
	double cert_pass;               /* 0.85 */
	double demote_pass;             /* 0.6 */
	long fast_tier_max_bytes;       /* 512 */
	int soft_calls;                 /* softCalls 1..5, 1: judgments per done */
	struct routing_weights routing_reasoning;  /* 0.20 0.50 0.20 0.10 */
	struct routing_weights routing_mechanical; /* 0.10 0.30 0.20 0.40 */
};

struct manifest {
	json_t *json;                   /* the document as read; owns all strings below */
	const char *name;
	const char *workspace;          /* as written */
	char *workspace_path;           /* absolute: joined to the current directory (owned);
	                                 * at most MANIFEST_WORKSPACE_MAX bytes, never a system
	                                 * directory nor the operator's home once resolved */
	const char *task_statement;     /* NULL when absent */
	struct endpoint_cfg *endpoints;
	size_t n_endpoints;
	const char **allowed;
	size_t n_allowed;
	char **inputs, **outputs;       /* normalized: no "." or empty components (owned) */
	size_t n_inputs, n_outputs;
	long max_turns, max_model_calls, max_seconds, max_loops, max_pending_tasks;
	long max_tokens;                /* maxTokens, 0 when absent (no ceiling) */
	long max_context_bytes;         /* maxContextBytes, 262144 */
	int dry_run_default, allow_self_modification;
	struct tuning tuning;
	struct acceptance_cmd acceptance[MANIFEST_ACCEPTANCE_MAX]; /* acceptance, in order */
	size_t n_acceptance;            /* 0 when the manifest has none */
	long command_timeout_seconds;   /* commandTimeoutSeconds, 1..maxSeconds, default 60 */
	struct command_limits limits;   /* limits: every member set (defaults filled in) */
	double max_cost_usd;            /* maxCostUsd, > 0; 0 when absent (no ceiling) */
	int require_confinement;        /* requireConfinement, default 0 */
};

struct reasons {
	char **items;
	size_t n;
};

/* Load and validate the manifest at path. Returns the manifest, or NULL
 * with every problem in *why (one human sentence each). A key the schema
 * does not define is refused ("manifest: unknown key ..." with a
 * suggestion), but for keys beginning "x-" and a top-level "$schema".
 * Each acceptance cmd must pass command_gate() (lib/hardtier.h). Beyond
 * the schema:
 * the workspace may not resolve (links followed as far as the path exists)
 * to "/", a system directory, or $HOME or a directory holding it; baseUrl
 * and auth.tokenUrl must pass url_transport_ok(); tuning.ntpAnchor is
 * refused until it does something. */
struct manifest *manifest_load(const char *path, struct reasons *why);

/* Validate an already parsed document (takes a reference of its own). */
struct manifest *manifest_from_json(json_t *doc, struct reasons *why);

void manifest_free(struct manifest *m);
void reasons_free(struct reasons *r);

/* Normalize a relative path: drop "." and empty components. Returns a new
 * string, or NULL if the path is empty, absolute or has a ".." component. */
char *path_normalize(const char *p);

/* 1 if the normalized path p is exactly one of the declared outputs. */
int manifest_is_output(const struct manifest *m, const char *normalized);
int manifest_is_input(const struct manifest *m, const char *normalized);

#endif
