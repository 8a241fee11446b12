/* fuzz_manifest.c - the manifest loader (lib/manifest.c manifest_from_json)
 * over whatever ndjson_parse makes of the input.
 *
 * Properties: it never crashes or leaks; when it refuses, it gives at least
 * one reason, each a non-empty single line (they are printed one per line
 * under TASK_INVALID, so a newline in one would forge another); when it
 * accepts, every rule of the schema holds for what it hands the stages:
 * no unknown key, every acceptance check passes the run tool's gate,
 * every limit within its floor and maximum, a cost ceiling only with
 * every endpoint priced. */
#include "fuzz.h"

#include "hardtier.h"
#include "manifest.h"
#include "ndjson.h"

static void check_path(const char *p, const char *what)
{
	FUZZ_CHECK(p && *p && p[0] != '/', "%s: empty or absolute path accepted", what);
	char *norm = path_normalize(p);
	FUZZ_CHECK(norm && strcmp(norm, p) == 0, "%s %s: not normalized", what, p);
	free(norm);
}

static int in_range(long v, long lo, long hi)
{
	return v >= lo && v <= hi;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *doc = ndjson_parse((const char *)data, size, NULL);
	if (!doc)
		return 0;
	struct reasons why = {0};
	struct manifest *m = manifest_from_json(doc, &why);
	if (!m) {
		FUZZ_CHECK(why.n > 0, "refused without a reason");
		for (size_t i = 0; i < why.n; i++) {
			const char *r = why.items[i];
			FUZZ_CHECK(r && *r, "reason %zu is empty", i);
			for (const char *c = r; *c; c++)
				FUZZ_CHECK((unsigned char)*c >= 0x20 && *c != 0x7f,
				           "reason %zu holds control character 0x%02x: %s", i, (unsigned char)*c, r);
		}
		reasons_free(&why);
		json_decref(doc);
		return 0;
	}
	FUZZ_CHECK(why.n == 0, "accepted with %zu reasons", why.n);
	FUZZ_CHECK(m->json == doc, "the manifest holds another document");
	FUZZ_CHECK(m->name && *m->name, "accepted without a name");
	FUZZ_CHECK(m->workspace && *m->workspace && m->workspace_path, "accepted without a workspace");
	FUZZ_CHECK(m->n_endpoints > 0, "accepted without an endpoint");
	for (size_t i = 0; i < m->n_endpoints; i++) {
		const struct endpoint_cfg *e = &m->endpoints[i];
		FUZZ_CHECK(e->name && *e->name && e->provider && e->model && *e->model, "endpoint %zu incomplete", i);
		FUZZ_CHECK(strcmp(e->provider, "anthropic") == 0 || strcmp(e->provider, "openai") == 0 ||
		           strcmp(e->provider, "gemini") == 0 || strcmp(e->provider, "codex") == 0 ||
		           strcmp(e->provider, "mock") == 0,
		           "endpoint %zu: unknown provider %s accepted", i, e->provider);
		for (size_t j = 0; j < i; j++)
			FUZZ_CHECK(strcmp(m->endpoints[j].name, e->name) != 0, "endpoint name %s twice", e->name);
		FUZZ_CHECK(e->prior_reasoning >= 0 && e->prior_reasoning <= 1 && e->prior_mechanical >= 0 &&
		           e->prior_mechanical <= 1, "endpoint %zu: prior out of [0, 1]", i);
		if (e->auth) {
			const char *type = json_string_value(json_object_get(e->auth, "type"));
			FUZZ_CHECK(type && strcmp(type, "oauth2-client-credentials") == 0, "auth type accepted");
			FUZZ_CHECK(json_is_string(json_object_get(e->auth, "tokenUrl")) &&
			           json_is_string(json_object_get(e->auth, "clientIdEnv")) &&
			           json_is_string(json_object_get(e->auth, "clientSecretEnv")),
			           "endpoint %zu: incomplete auth accepted", i);
		}
	}
	for (size_t i = 0; i < m->n_allowed; i++) {
		const char *c = m->allowed[i];
		FUZZ_CHECK(c && *c && !strchr(c, '/') && !strpbrk(c, " \t\n\r\v\f"), "allowed command %zu: %s", i, c);
	}
	FUZZ_CHECK(m->allowed[m->n_allowed] == NULL, "allowed list not terminated");
	for (size_t i = 0; i < m->n_inputs; i++)
		check_path(m->inputs[i], "input");
	for (size_t i = 0; i < m->n_outputs; i++) {
		check_path(m->outputs[i], "output");
		FUZZ_CHECK(strcmp(m->outputs[i], ".sfma") != 0 && strncmp(m->outputs[i], ".sfma/", 6) != 0,
		           "output %s inside .sfma accepted", m->outputs[i]);
		FUZZ_CHECK(manifest_is_output(m, m->outputs[i]), "output %s not found again", m->outputs[i]);
	}
	FUZZ_CHECK(in_range(m->max_turns, 1, 1000000000L) && in_range(m->max_model_calls, 1, 100000) &&
	           in_range(m->max_seconds, 1, 86400) && in_range(m->max_loops, 1, 16) &&
	           in_range(m->max_pending_tasks, 1, 4096), "a ceiling out of range");
	const struct tuning *t = &m->tuning;
	FUZZ_CHECK(t->ewma_alpha > 0 && t->ewma_alpha <= 1 && t->cert_completion >= 0 && t->cert_completion <= 1 &&
	           t->cert_pass >= 0 && t->cert_pass <= 1 && t->demote_pass >= 0 && t->demote_pass <= 1 &&
	           t->target_latency_ms >= 0 && t->cert_window >= 1 && t->cert_window <= 1000 &&
	           t->fast_tier_max_bytes >= 0, "a tuning value out of range");
	/* acceptance: 0..8 checks, each a command the run tool's own gate passes */
	FUZZ_CHECK(m->n_acceptance <= MANIFEST_ACCEPTANCE_MAX, "%zu acceptance checks", m->n_acceptance);
	FUZZ_CHECK(m->n_acceptance == 0 || json_array_size(json_object_get(doc, "acceptance")) == m->n_acceptance,
	           "an acceptance check dropped");
	for (size_t i = 0; i < m->n_acceptance; i++) {
		const struct acceptance_cmd *a = &m->acceptance[i];
		FUZZ_CHECK(a->cmd && a->exit >= 0 && a->exit <= 255, "acceptance %zu", i);
		char *refusal = NULL;
		char **argv = command_gate(m, a->cmd, strlen(a->cmd), &refusal);
		FUZZ_CHECK(argv != NULL, "acceptance %zu accepted, the gate refuses it: %s", i, refusal);
		argv_free(argv);
		free(refusal);
	}
	FUZZ_CHECK(m->command_timeout_seconds >= 1 && m->command_timeout_seconds <= m->max_seconds,
	           "commandTimeoutSeconds %ld", m->command_timeout_seconds);
	const struct command_limits *l = &m->limits;
	FUZZ_CHECK(l->memory_bytes >= LIMIT_MEMORY_MIN && l->memory_bytes <= LIMIT_MEMORY_BYTES &&
	           l->processes >= LIMIT_PROCESSES_MIN && l->processes <= LIMIT_NPROC &&
	           l->file_size_bytes >= LIMIT_FSIZE_MIN && l->file_size_bytes <= LIMIT_FSIZE_BYTES &&
	           (l->cpu_seconds == 0 || (l->cpu_seconds >= LIMIT_CPU_MIN && l->cpu_seconds <= LIMIT_CPU_SECONDS)) &&
	           l->output_bytes >= LIMIT_OUTPUT_MIN && l->output_bytes <= LIMIT_OUTPUT_BYTES &&
	           l->workspace_bytes >= LIMIT_WORKSPACE_MIN && l->workspace_bytes <= LIMIT_WORKSPACE_BYTES,
	           "a limit out of range");
	for (size_t i = 0; i < m->n_endpoints; i++) {
		const struct endpoint_pricing *p = &m->endpoints[i].pricing;
		FUZZ_CHECK(!p->set || (p->input_per_mtok >= 0 && p->output_per_mtok >= 0 &&
		           p->cached_input_per_mtok >= 0 && p->cache_write_per_mtok >= 0), "a negative price");
		FUZZ_CHECK(m->max_cost_usd == 0 || p->set, "maxCostUsd accepted with endpoint %zu unpriced", i);
	}
	FUZZ_CHECK(m->max_cost_usd >= 0, "a negative maxCostUsd");
	/* No key beyond the schema's, but x- and a top-level $schema. */
	static const char *const top[] = {
		"name", "workspace", "taskStatement", "modelEndpoints", "allowedCommands", "inputs", "outputs",
		"maxTurns", "maxModelCalls", "maxSeconds", "maxLoops", "maxPendingTasks", "maxTokens",
		"maxContextBytes", "dryRunDefault", "allowSelfModification", "tuning", "acceptance",
		"commandTimeoutSeconds", "limits", "maxCostUsd", "requireConfinement", "$schema", NULL,
	};
	const char *key;
	json_t *val;
	json_object_foreach(doc, key, val) {
		int known = strncmp(key, "x-", 2) == 0;
		for (const char *const *k = top; *k && !known; k++)
			known = strcmp(*k, key) == 0;
		FUZZ_CHECK(known, "unknown top-level key %s accepted", key);
	}
	json_t *dry = json_object_get(doc, "dryRunDefault");
	FUZZ_CHECK(json_is_boolean(dry) && m->dry_run_default == json_is_true(dry), "dryRunDefault");
	manifest_free(m);
	json_decref(doc);
	return 0;
}
