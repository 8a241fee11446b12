/* manifest.c - schema v2 validation, shared by every stage. */
#include "manifest.h"
#include "errors.h"
#include "hardtier.h"
#include "ndjson.h"
#include "suggest.h"
#include "url.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void reason(struct reasons *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reason(struct reasons *r, const char *fmt, ...)
{
	char text[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	/* Reasons quote the manifest's own strings, and each is printed as one
	 * "- reason" line: a control byte there (a newline could forge another
	 * reason line, an escape sequence could rewrite the terminal) is shown
	 * as \xNN instead. */
	char shown[4 * sizeof text];
	size_t k = 0;
	for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
		if (*c < 0x20 || *c == 0x7f)
			k += (size_t)snprintf(shown + k, sizeof shown - k, "\\x%02x", *c);
		else
			shown[k++] = (char)*c;
	}
	shown[k] = '\0';
	r->items = xrealloc(r->items, (r->n + 1) * sizeof *r->items);
	r->items[r->n++] = xstrdup(shown);
}

void reasons_free(struct reasons *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->items[i]);
	free(r->items);
	r->items = NULL;
	r->n = 0;
}

/* ---- unknown keys ------------------------------------------------------ */

/* The keys each object of the manifest may hold (sfma-manifest(5), and
 * sfma-manifest.schema.json, which says the same). */
static const char *const top_keys[] = {
	"name", "workspace", "taskStatement", "modelEndpoints", "allowedCommands", "inputs", "outputs",
	"maxTurns", "maxModelCalls", "maxSeconds", "maxLoops", "maxPendingTasks", "maxTokens",
	"maxContextBytes", "dryRunDefault", "allowSelfModification", "tuning", "acceptance",
	"commandTimeoutSeconds", "limits", "maxCostUsd", "requireConfinement", NULL,
};
static const char *const endpoint_keys[] = {
	"name", "provider", "model", "baseUrl", "priors", "auth", "maxOutputTokens", "toolProtocol",
	"pricing", NULL,
};
static const char *const auth_keys[] = {
	"type", "tokenUrl", "clientIdEnv", "clientSecretEnv", "scope", NULL,
};
static const char *const pricing_keys[] = {
	"inputPerMTok", "outputPerMTok", "cachedInputPerMTok", "cacheWritePerMTok", NULL,
};
static const char *const priors_keys[] = {"reasoning", "mechanical", NULL};
static const char *const tuning_keys[] = {
	"ewmaAlpha", "targetLatencyMs", "routing", "certWindow", "certCompletion",
	"certPass", "demotePass", "fastTierMaxBytes", "ntpAnchor", "softCalls", NULL,
};
static const char *const routing_keys[] = {"reasoning", "mechanical", NULL};
static const char *const weight_keys[] = {"prior", "pass", "avail", "lat", NULL};
static const char *const limits_keys[] = {
	"memoryBytes", "processes", "fileSizeBytes", "cpuSeconds", "outputBytes", "workspaceBytes", NULL,
};
static const char *const acceptance_keys[] = {"cmd", "exit", NULL};

/* Refuse every key of obj that known does not list: a typo must never
 * quietly leave a default in force. Keys beginning "x-" are the
 * operator's own and ignored; so is "$schema" at the top level (where is
 * NULL there), which names the schema for an editor. */
static void unknown_keys(json_t *obj, const char *where, const char *const *known, struct reasons *why)
{
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v) {
		int listed = 0;
		for (const char *const *k = known; *k && !listed; k++)
			listed = strcmp(*k, key) == 0;
		if (listed || strncmp(key, "x-", 2) == 0 || (!where && strcmp(key, "$schema") == 0))
			continue;
		/* A v1 manifest is told what replaced it instead. */
		if (!where && strcmp(key, "modelAdapter") == 0)
			continue;
		const char *near = suggest_word(key, known);
		char hint[128] = "";
		if (near)
			snprintf(hint, sizeof hint, " (did you mean \"%s\"?)", near);
		reason(why, "manifest: %s%sunknown key \"%.100s%s\"%s", where ? where : "", where ? ": " : "",
		       key, strlen(key) > 100 ? "..." : "", hint);
	}
}

char *path_normalize(const char *p)
{
	if (!p || !*p || p[0] == '/')
		return NULL;
	size_t n = strlen(p);
	char *out = xmalloc(n + 1), *o = out;
	const char *s = p;
	while (*s) {
		const char *end = strchr(s, '/');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		if (len == 2 && s[0] == '.' && s[1] == '.') {
			free(out);
			return NULL;
		}
		if (len > 0 && !(len == 1 && s[0] == '.')) {
			if (o != out)
				*o++ = '/';
			memcpy(o, s, len);
			o += len;
		}
		s += len;
		if (*s == '/')
			s++;
	}
	*o = '\0';
	if (o == out) {
		free(out);
		return NULL;
	}
	return out;
}

static int in_list(char **list, size_t n, const char *p)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(list[i], p) == 0)
			return 1;
	return 0;
}

int manifest_is_output(const struct manifest *m, const char *p)
{
	return in_list(m->outputs, m->n_outputs, p);
}

int manifest_is_input(const struct manifest *m, const char *p)
{
	return in_list(m->inputs, m->n_inputs, p);
}

/* An integer field: absent gives def; present must be an integer in [lo, hi]. */
static long int_field(json_t *doc, const char *key, int required, long def, long lo,
                      long hi, struct reasons *why)
{
	json_t *v = json_object_get(doc, key);
	long long x;
	if (!v) {
		if (required)
			reason(why, "%s is required", key);
		return def;
	}
	if (!ndjson_integer(v, &x) || x < lo || x > hi) {
		if (hi >= 1000000000L)
			reason(why, "%s must be an integer >= %ld", key, lo);
		else
			reason(why, "%s must be an integer from %ld to %ld", key, lo, hi);
		return def;
	}
	return (long)x;
}

static double prob_field(json_t *obj, const char *where, const char *key, double def,
                         struct reasons *why)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return def;
	if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1) {
		reason(why, "%s.%s must be a number from 0 to 1", where, key);
		return def;
	}
	return json_number_value(v);
}

/* Declared paths live under the workspace: each must fit in PATH_MAX once
 * joined to it (ws_len is 0 while the workspace itself is invalid). */
static char **path_list(json_t *doc, const char *key, size_t *count, int outputs, size_t ws_len,
                        struct reasons *why)
{
	json_t *arr = json_object_get(doc, key);
	*count = 0;
	if (!arr) {
		reason(why, "%s is required", key);
		return NULL;
	}
	if (!json_is_array(arr)) {
		reason(why, "%s must be an array of relative paths", key);
		return NULL;
	}
	char **list = xcalloc(json_array_size(arr) + 1, sizeof *list);
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v) {
		const char *s = json_string_value(v);
		char *norm = NULL;
		if (!json_is_string(v) || !*s || strlen(s) != json_string_length(v)) {
			reason(why, "%s[%zu] must be a non-empty path", key, i);
			continue;
		}
		if (s[0] == '/') {
			reason(why, "%s[%zu] %s: must be a relative path", key, i, s);
			continue;
		}
		if (!(norm = path_normalize(s))) {
			reason(why, "%s[%zu] %s: must not climb out with ..", key, i, s);
			continue;
		}
		if (outputs && (strcmp(norm, ".sfma") == 0 || strncmp(norm, ".sfma/", 6) == 0)) {
			reason(why, "%s[%zu] %s: .sfma is reserved to the runner", key, i, s);
			free(norm);
			continue;
		}
		if (ws_len + 1 + strlen(norm) >= PATH_MAX) {
			reason(why, "%s[%zu]: path too long (%zu bytes; with the workspace it must fit in %d)",
			       key, i, strlen(norm), PATH_MAX - 1);
			free(norm);
			continue;
		}
		list[(*count)++] = norm;
	}
	return list;
}

/* tuning.routing: {"reasoning":{prior,pass,avail,lat},"mechanical":{...}};
 * a class or weight left out keeps its default. */
static void load_routing(struct tuning *tu, json_t *r, struct reasons *why)
{
	if (!r)
		return;
	if (!json_is_object(r)) {
		reason(why, "tuning.routing must be an object");
		return;
	}
	unknown_keys(r, "tuning.routing", routing_keys, why);
	const char *cls;
	json_t *w;
	json_object_foreach(r, cls, w) {
		struct routing_weights *rw = strcmp(cls, "reasoning") == 0 ? &tu->routing_reasoning
		                           : strcmp(cls, "mechanical") == 0 ? &tu->routing_mechanical
		                                                            : NULL;
		if (!rw)
			continue;
		char where[64];
		snprintf(where, sizeof where, "tuning.routing.%s", cls);
		if (!json_is_object(w)) {
			reason(why, "%s must be an object", where);
			continue;
		}
		unknown_keys(w, where, weight_keys, why);
		rw->prior = prob_field(w, where, "prior", rw->prior, why);
		rw->pass = prob_field(w, where, "pass", rw->pass, why);
		rw->avail = prob_field(w, where, "avail", rw->avail, why);
		rw->lat = prob_field(w, where, "lat", rw->lat, why);
	}
}

static void load_tuning(struct manifest *m, json_t *t, struct reasons *why)
{
	struct tuning *tu = &m->tuning;
	tu->ewma_alpha = 0.3;
	tu->cert_window = 20;
	tu->cert_completion = 0.9;
	tu->cert_pass = 0.85;
	tu->demote_pass = 0.6;
	tu->fast_tier_max_bytes = 512;
	tu->soft_calls = 1;
	tu->routing_reasoning = (struct routing_weights){0.20, 0.50, 0.20, 0.10};
	tu->routing_mechanical = (struct routing_weights){0.10, 0.30, 0.20, 0.40};
	if (!t)
		return;
	if (!json_is_object(t)) {
		reason(why, "tuning must be an object");
		return;
	}
	json_t *v;
	unknown_keys(t, "tuning", tuning_keys, why);
	/* Part of the schema, not yet of the runner: accepting them would
	 * promise a behaviour nothing delivers. */
	static const char *const unsupported[] = {"ntpAnchor", NULL};
	for (const char *const *k = unsupported; *k; k++)
		if (json_object_get(t, *k))
			reason(why, "tuning.%s is not supported yet: remove it", *k);
	tu->ewma_alpha = prob_field(t, "tuning", "ewmaAlpha", 0.3, why);
	if ((v = json_object_get(t, "ewmaAlpha")) && json_is_number(v) && json_number_value(v) == 0)
		reason(why, "tuning.ewmaAlpha must be greater than 0");
	tu->cert_completion = prob_field(t, "tuning", "certCompletion", 0.9, why);
	tu->cert_pass = prob_field(t, "tuning", "certPass", 0.85, why);
	tu->demote_pass = prob_field(t, "tuning", "demotePass", 0.6, why);
	if ((v = json_object_get(t, "targetLatencyMs"))) {
		if (!json_is_number(v) || json_number_value(v) <= 0)
			reason(why, "tuning.targetLatencyMs must be a positive number");
		else
			tu->target_latency_ms = json_number_value(v);
	}
	tu->cert_window = (int)int_field(t, "certWindow", 0, 20, 1, 1000, why);
	tu->fast_tier_max_bytes = int_field(t, "fastTierMaxBytes", 0, 512, 0, 1L << 30, why);
	/* The soft tier's judgments per done (majority; a tie fails). */
	tu->soft_calls = (int)int_field(t, "softCalls", 0, 1, 1, 5, why);
	load_routing(tu, json_object_get(t, "routing"), why);
}

/* A price or an amount of money: a number >= 0 (> 0 when positive is
 * set). Absent gives def; *bad is set when present and refused. */
static double money_field(json_t *obj, const char *where, const char *key, double def, int positive,
                          int *bad, struct reasons *why)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return def;
	double x = json_is_number(v) ? json_number_value(v) : -1;
	if (!json_is_number(v) || !isfinite(x) || x < 0 || (positive && x == 0)) {
		reason(why, "%s%s%s must be a number %s", where ? where : "", where ? "." : "", key,
		       positive ? "greater than 0" : ">= 0");
		*bad = 1;
		return def;
	}
	return x;
}

/* pricing: {inputPerMTok, outputPerMTok, cachedInputPerMTok?,
 * cacheWritePerMTok?}, US dollars per million tokens (§17). A cache price
 * left out is the input price: no provider's discount is assumed. Returns
 * 0 (absent or valid), or -1. */
static int load_pricing(struct endpoint_pricing *p, json_t *v, const char *where, struct reasons *why)
{
	*p = (struct endpoint_pricing){0};
	if (!v)
		return 0;
	if (!json_is_object(v)) {
		reason(why, "%s must be an object", where);
		return -1;
	}
	size_t before = why->n;
	unknown_keys(v, where, pricing_keys, why);
	int bad = 0;
	static const char *const required[] = {"inputPerMTok", "outputPerMTok"};
	for (int k = 0; k < 2; k++)
		if (!json_object_get(v, required[k])) {
			reason(why, "%s.%s is required", where, required[k]);
			bad = 1;
		}
	p->input_per_mtok = money_field(v, where, "inputPerMTok", 0, 0, &bad, why);
	p->output_per_mtok = money_field(v, where, "outputPerMTok", 0, 0, &bad, why);
	p->cached_input_per_mtok = money_field(v, where, "cachedInputPerMTok", p->input_per_mtok, 0, &bad, why);
	p->cache_write_per_mtok = money_field(v, where, "cacheWritePerMTok", p->input_per_mtok, 0, &bad, why);
	if (bad || why->n > before)
		return -1;
	p->set = 1;
	return 0;
}

static void load_endpoints(struct manifest *m, json_t *doc, struct reasons *why)
{
	json_t *arr = json_object_get(doc, "modelEndpoints");
	if (!arr) {
		reason(why, "modelEndpoints is required");
		return;
	}
	if (!json_is_array(arr) || json_array_size(arr) == 0) {
		reason(why, "modelEndpoints must be a non-empty array");
		return;
	}
	m->endpoints = xcalloc(json_array_size(arr), sizeof *m->endpoints);
	size_t i;
	json_t *e;
	json_array_foreach(arr, i, e) {
		struct endpoint_cfg *ep = &m->endpoints[m->n_endpoints];
		if (!json_is_object(e)) {
			reason(why, "modelEndpoints[%zu] must be an object", i);
			continue;
		}
		char where[64];
		snprintf(where, sizeof where, "modelEndpoints[%zu]", i);
		unknown_keys(e, where, endpoint_keys, why);
		static const char *const req[] = {"name", "provider", "model"};
		const char *val[3];
		int ok = 1;
		for (int k = 0; k < 3; k++) {
			json_t *s = json_object_get(e, req[k]);
			val[k] = json_string_value(s);
			if (!json_is_string(s) || !*val[k]) {
				reason(why, "modelEndpoints[%zu].%s must be a non-empty string", i, req[k]);
				ok = 0;
			}
		}
		json_t *b = json_object_get(e, "baseUrl");
		struct sfma_err ue;
		if (b && !json_is_string(b)) {
			reason(why, "modelEndpoints[%zu].baseUrl must be a string", i);
			ok = 0;
		} else if (b && url_transport_ok(json_string_value(b), &ue) < 0) {
			reason(why, "modelEndpoints[%zu].baseUrl %s", i, ue.text);
			ok = 0;
		}
		static const char *const providers[] = {"anthropic", "openai", "gemini", "codex", "mock", NULL};
		int known = 0;
		for (int k = 0; val[1] && providers[k]; k++)
			known |= strcmp(val[1], providers[k]) == 0;
		if (val[1] && *val[1] && !known) {
			reason(why, "modelEndpoints[%zu].provider %s is not one of anthropic, openai, gemini, codex, mock",
			       i, val[1]);
			ok = 0;
		}
		json_t *auth = json_object_get(e, "auth");
		if (auth && !json_is_object(auth)) {
			reason(why, "modelEndpoints[%zu].auth must be an object", i);
			ok = 0;
		} else if (auth) {
			snprintf(where, sizeof where, "modelEndpoints[%zu].auth", i);
			unknown_keys(auth, where, auth_keys, why);
			/* The manifest names variables, never secret values. */
			const char *type = json_string_value(json_object_get(auth, "type"));
			static const char *const need[] = {"tokenUrl", "clientIdEnv", "clientSecretEnv"};
			if (!type || strcmp(type, "oauth2-client-credentials") != 0) {
				reason(why, "modelEndpoints[%zu].auth.type must be oauth2-client-credentials", i);
				ok = 0;
			}
			for (int k = 0; k < 3; k++) {
				json_t *f = json_object_get(auth, need[k]);
				if (!json_is_string(f) || !*json_string_value(f)) {
					reason(why, "modelEndpoints[%zu].auth.%s must be a non-empty string", i, need[k]);
					ok = 0;
				} else if (k == 0 && url_transport_ok(json_string_value(f), &ue) < 0) {
					reason(why, "modelEndpoints[%zu].auth.tokenUrl %s", i, ue.text);
					ok = 0;
				}
			}
			json_t *scope = json_object_get(auth, "scope");
			if (scope && !json_is_string(scope)) {
				reason(why, "modelEndpoints[%zu].auth.scope must be a string", i);
				ok = 0;
			}
		}
		ep->prior_reasoning = ep->prior_mechanical = 0.5;
		json_t *pr = json_object_get(e, "priors");
		if (pr) {
			snprintf(where, sizeof where, "modelEndpoints[%zu].priors", i);
			if (!json_is_object(pr))
				reason(why, "%s must be an object", where);
			else {
				unknown_keys(pr, where, priors_keys, why);
				ep->prior_reasoning = prob_field(pr, where, "reasoning", 0.5, why);
				ep->prior_mechanical = prob_field(pr, where, "mechanical", 0.5, why);
			}
		}
		ep->max_output_tokens = 4096;
		json_t *mot = json_object_get(e, "maxOutputTokens");
		long long motv;
		if (mot && (!ndjson_integer(mot, &motv) || motv < 1 || motv > 1000000)) {
			reason(why, "modelEndpoints[%zu].maxOutputTokens must be an integer from 1 to 1000000", i);
			ok = 0;
		} else if (mot)
			ep->max_output_tokens = (long)motv;
		json_t *tp = json_object_get(e, "toolProtocol");
		const char *tps = json_string_value(tp);
		if (tp && (!tps || (strcmp(tps, "native") && strcmp(tps, "text")))) {
			reason(why, "modelEndpoints[%zu].toolProtocol must be \"native\" or \"text\"", i);
			ok = 0;
		}
		/* The mock speaks the text protocol of sfma-formats(5) only. */
		ep->tool_protocol_text = (tps && strcmp(tps, "text") == 0) ||
		                         (val[1] && strcmp(val[1], "mock") == 0);
		snprintf(where, sizeof where, "modelEndpoints[%zu].pricing", i);
		if (load_pricing(&ep->pricing, json_object_get(e, "pricing"), where, why) < 0)
			ok = 0;
		for (size_t j = 0; ok && j < m->n_endpoints; j++)
			if (strcmp(m->endpoints[j].name, val[0]) == 0) {
				reason(why, "modelEndpoints[%zu].name %s is used twice", i, val[0]);
				ok = 0;
			}
		if (!ok)
			continue;
		ep->name = val[0];
		ep->provider = val[1];
		ep->model = val[2];
		ep->base_url = json_string_value(b);
		ep->auth = auth;
		m->n_endpoints++;
	}
}

static void load_commands(struct manifest *m, json_t *doc, struct reasons *why)
{
	json_t *arr = json_object_get(doc, "allowedCommands");
	if (!arr) {
		reason(why, "allowedCommands is required");
		return;
	}
	if (!json_is_array(arr)) {
		reason(why, "allowedCommands must be an array of executable basenames");
		return;
	}
	m->allowed = xcalloc(json_array_size(arr) + 1, sizeof *m->allowed);
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v) {
		const char *s = json_string_value(v);
		if (!json_is_string(v) || !*s || strlen(s) != json_string_length(v)) {
			reason(why, "allowedCommands[%zu] must be a non-empty string", i);
			continue;
		}
		if (strchr(s, '/')) {
			reason(why, "allowedCommands[%zu] %s: must be a basename without /", i, s);
			continue;
		}
		if (strpbrk(s, " \t\n\r\v\f")) {
			reason(why, "allowedCommands[%zu] must not contain whitespace", i);
			continue;
		}
		m->allowed[m->n_allowed++] = s;
	}
}

/* acceptance: 1..8 {"cmd", "exit"?}; each cmd passes the run tool's own
 * gate (command_gate), so that no check can run what the model may not.
 * Gated only once allowedCommands itself was read: without it every
 * command would be refused for want of a list. */
static void load_acceptance(struct manifest *m, json_t *doc, struct reasons *why)
{
	json_t *arr = json_object_get(doc, "acceptance");
	if (!arr)
		return;
	if (!json_is_array(arr) || json_array_size(arr) < 1 || json_array_size(arr) > MANIFEST_ACCEPTANCE_MAX) {
		reason(why, "acceptance must be an array of 1 to %d {\"cmd\",\"exit\"} objects",
		       MANIFEST_ACCEPTANCE_MAX);
		return;
	}
	size_t i;
	json_t *item;
	json_array_foreach(arr, i, item) {
		char where[48];
		snprintf(where, sizeof where, "acceptance[%zu]", i);
		if (!json_is_object(item)) {
			reason(why, "%s must be an object {\"cmd\",\"exit\"}", where);
			continue;
		}
		unknown_keys(item, where, acceptance_keys, why);
		json_t *c = json_object_get(item, "cmd");
		const char *cmd = json_string_value(c);
		int ok = 1;
		if (!c) {
			reason(why, "%s.cmd is required", where);
			ok = 0;
		} else if (!json_is_string(c)) {
			reason(why, "%s.cmd must be a string", where);
			ok = 0;
		} else if (m->allowed) {
			char *refusal = NULL;
			char **argv = command_gate(m, cmd, json_string_length(c), &refusal);
			if (!argv) {
				reason(why, "%s.cmd: %s", where, refusal);
				ok = 0;
			}
			argv_free(argv);
			free(refusal);
		}
		json_t *x = json_object_get(item, "exit");
		long long code = 0;
		if (x && (!ndjson_integer(x, &code) || code < 0 || code > 255)) {
			reason(why, "%s.exit must be an integer from 0 to 255", where);
			ok = 0;
		}
		if (ok)
			m->acceptance[m->n_acceptance++] = (struct acceptance_cmd){.cmd = cmd, .exit = (int)code};
	}
}

/* One member of limits: absent gives the maximum; present must be an
 * integer between its floor and the maximum. */
static long long limit_field(json_t *lim, const char *key, long long lo, long long hi, long long def,
                             const char *unit, struct reasons *why)
{
	json_t *v = json_object_get(lim, key);
	long long x;
	if (!v)
		return def;
	if (!ndjson_integer(v, &x) || x < lo || x > hi) {
		reason(why, "limits.%s must be an integer from %lld to %lld%s", key, lo, hi, unit);
		return def;
	}
	return x;
}

static void load_limits(struct manifest *m, json_t *doc, struct reasons *why)
{
	struct command_limits *l = &m->limits;
	*l = (struct command_limits){
		.memory_bytes = LIMIT_MEMORY_BYTES, .processes = LIMIT_NPROC,
		.file_size_bytes = LIMIT_FSIZE_BYTES, .cpu_seconds = 0,
		.output_bytes = LIMIT_OUTPUT_BYTES, .workspace_bytes = LIMIT_WORKSPACE_BYTES,
	};
	json_t *lim = json_object_get(doc, "limits");
	if (!lim)
		return;
	if (!json_is_object(lim)) {
		reason(why, "limits must be an object");
		return;
	}
	unknown_keys(lim, "limits", limits_keys, why);
	l->memory_bytes = limit_field(lim, "memoryBytes", LIMIT_MEMORY_MIN, LIMIT_MEMORY_BYTES, l->memory_bytes,
	                              " (64 MiB to 4 GiB)", why);
	l->processes = (long)limit_field(lim, "processes", LIMIT_PROCESSES_MIN, LIMIT_NPROC, l->processes, "", why);
	l->file_size_bytes = limit_field(lim, "fileSizeBytes", LIMIT_FSIZE_MIN, LIMIT_FSIZE_BYTES,
	                                 l->file_size_bytes, " (1 MiB to 1 GiB)", why);
	l->cpu_seconds = (long)limit_field(lim, "cpuSeconds", LIMIT_CPU_MIN, LIMIT_CPU_SECONDS, 0, "", why);
	l->output_bytes = (long)limit_field(lim, "outputBytes", LIMIT_OUTPUT_MIN, LIMIT_OUTPUT_BYTES,
	                                    l->output_bytes, " (1 KiB to 8 KiB)", why);
	l->workspace_bytes = limit_field(lim, "workspaceBytes", LIMIT_WORKSPACE_MIN, LIMIT_WORKSPACE_BYTES,
	                                 l->workspace_bytes, " (16 MiB to 2 GiB)", why);
}

/* maxCostUsd (§17): a ceiling in dollars needs a price on every endpoint,
 * or a call's cost could not be known before it is made. */
static void load_cost(struct manifest *m, json_t *doc, struct reasons *why)
{
	int bad = 0;
	m->max_cost_usd = money_field(doc, NULL, "maxCostUsd", 0, 1, &bad, why);
	json_t *arr = json_object_get(doc, "modelEndpoints");
	if (!json_object_get(doc, "maxCostUsd") || bad || !json_is_array(arr))
		return;
	size_t i;
	json_t *e;
	json_array_foreach(arr, i, e)
		if (json_is_object(e) && !json_object_get(e, "pricing"))
			reason(why, "maxCostUsd needs pricing on every endpoint: modelEndpoints[%zu] has none", i);
}

/* ---- the workspace ----------------------------------------------------- */

/* The workspace as an absolute path: as written, or joined to the current
 * directory. NULL (with a reason) when it cannot be, or would not fit. */
static char *workspace_absolute(const char *ws, struct reasons *why)
{
	char cwd[PATH_MAX];
	if (ws[0] != '/' && !getcwd(cwd, sizeof cwd)) {
		reason(why, "workspace: cannot resolve the current directory: %s", strerror(errno));
		return NULL;
	}
	size_t len = ws[0] == '/' ? strlen(ws) : strlen(cwd) + 1 + strlen(ws);
	if (len > MANIFEST_WORKSPACE_MAX) {
		reason(why, "workspace: path too long (%zu bytes resolved; at most %d, so that every file "
		       "the runner keeps under it fits in PATH_MAX)", len, MANIFEST_WORKSPACE_MAX);
		return NULL;
	}
	char *abs = xmalloc(len + 1);
	if (ws[0] == '/')
		memcpy(abs, ws, len + 1);
	else
		sprintf(abs, "%s/%s", cwd, ws);
	return abs;
}

/* Append component c (of length n) to the absolute path p (capacity
 * PATH_MAX), lexically: "." is nothing, ".." drops the last component. */
static void lexical_append(char *p, const char *c, size_t n)
{
	if (n == 0 || (n == 1 && c[0] == '.'))
		return;
	if (n == 2 && c[0] == '.' && c[1] == '.') {
		char *slash = strrchr(p, '/');
		slash[slash == p] = '\0'; /* "/a" -> "/", "/a/b" -> "/a" */
		return;
	}
	size_t len = strlen(p);
	if (len + (len > 1) + n >= PATH_MAX)
		return; /* cannot happen: the input was shorter than PATH_MAX */
	if (len > 1)
		p[len++] = '/';
	memcpy(p + len, c, n);
	p[len + n] = '\0';
}

/* Where abs really leads: the longest prefix that exists, resolved with
 * realpath(3) (links followed), then the rest applied lexically, so that
 * "ws/../../.." or a link to "/" is seen for what it is even before the
 * workspace exists. out has PATH_MAX bytes. */
static void resolve_as_far_as_exists(const char *abs, char out[PATH_MAX])
{
	char prefix[PATH_MAX];
	snprintf(prefix, sizeof prefix, "%s", abs);
	size_t cut = strlen(prefix);
	for (;;) {
		char *real = realpath(prefix, NULL);
		if (real) {
			snprintf(out, PATH_MAX, "%s", real);
			free(real);
			break;
		}
		/* Drop the last component and try its parent; "/" always resolves. */
		char *slash = strrchr(prefix, '/');
		while (slash && slash > prefix && slash[-1] == '/')
			slash--;
		if (!slash || slash == prefix) {
			snprintf(out, PATH_MAX, "/");
			cut = 0;
			break;
		}
		*slash = '\0';
		cut = (size_t)(slash - prefix);
	}
	for (const char *s = abs + cut; *s;) {
		while (*s == '/')
			s++;
		size_t n = strcspn(s, "/");
		lexical_append(out, s, n);
		s += n;
	}
}

/* A top-level system directory (refused as a workspace itself), or one of
 * the trees no task may work in (refused with everything under them: kernel
 * interfaces, devices, the boot loader and the host's configuration). */
static int is_system_dir(const char *p)
{
	static const char *const dirs[] = {
		"/bin", "/boot", "/dev", "/etc", "/home", "/media", "/mnt", "/opt", "/proc", "/root",
		"/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr", "/var", "/usr/bin",
		"/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local", "/usr/share",
		"/usr/include", "/usr/src", "/var/lib", "/var/log", "/var/tmp", "/var/cache",
		"/var/spool", "/var/mail", NULL,
	};
	static const char *const trees[] = {"/boot", "/dev", "/etc", "/proc", "/sys", NULL};
	if (strcmp(p, "/") == 0)
		return 1;
	for (const char *const *d = dirs; *d; d++)
		if (strcmp(p, *d) == 0)
			return 1;
	for (const char *const *t = trees; *t; t++) {
		size_t n = strlen(*t);
		if (strncmp(p, *t, n) == 0 && p[n] == '/')
			return 1;
	}
	/* /lib, /lib32, /lib64, /libx32 ...: every top-level lib* */
	return strncmp(p, "/lib", 4) == 0 && !strchr(p + 1, '/');
}

/* 1 if p is home itself or a directory holding it. */
static int holds_home(const char *p, const char *home)
{
	char real_home[PATH_MAX];
	if (!home || home[0] != '/' || strlen(home) >= PATH_MAX)
		return 0;
	resolve_as_far_as_exists(home, real_home);
	if (strcmp(real_home, "/") == 0)
		return 0; /* a home of "/" is already a system directory */
	size_t n = strlen(p);
	return strcmp(p, real_home) == 0 || (strncmp(real_home, p, n) == 0 && real_home[n] == '/');
}

/* A workspace gives the model every file under it to read: refuse one that
 * resolves to the host's system directories or the operator's home. */
static int workspace_refused(const char *ws, const char *abs, struct reasons *why)
{
	char real[PATH_MAX];
	resolve_as_far_as_exists(abs, real);
	if (is_system_dir(real)) {
		reason(why, "workspace %s resolves to %s, a system directory: choose a directory of its own",
		       ws, real);
		return 1;
	}
	struct passwd *pw = getpwuid(getuid());
	if (holds_home(real, getenv("HOME")) || (pw && holds_home(real, pw->pw_dir))) {
		reason(why, "workspace %s resolves to %s, the operator's home or a directory holding it: "
		       "choose a directory of its own", ws, real);
		return 1;
	}
	return 0;
}

struct manifest *manifest_from_json(json_t *doc, struct reasons *why)
{
	struct manifest *m = xcalloc(1, sizeof *m);
	m->json = json_incref(doc);
	if (!json_is_object(doc)) {
		reason(why, "manifest must be a JSON object");
		manifest_free(m);
		return NULL;
	}
	if (json_object_get(doc, "modelAdapter"))
		reason(why, "modelAdapter was replaced by modelEndpoints (schema v2)");
	unknown_keys(doc, NULL, top_keys, why);
	json_t *v = json_object_get(doc, "$schema");
	if (v && !json_is_string(v))
		reason(why, "$schema must be a string (where an editor finds the schema)");

	v = json_object_get(doc, "name");
	if (!json_is_string(v) || !*json_string_value(v))
		reason(why, v ? "name must be a non-empty string" : "name is required");
	else
		m->name = json_string_value(v);

	v = json_object_get(doc, "workspace");
	if (!json_is_string(v) || !*json_string_value(v) ||
	    strlen(json_string_value(v)) != json_string_length(v)) {
		reason(why, v ? "workspace must be a non-empty string" : "workspace is required");
	} else {
		m->workspace = json_string_value(v);
		m->workspace_path = workspace_absolute(m->workspace, why);
		if (m->workspace_path && workspace_refused(m->workspace, m->workspace_path, why)) {
			free(m->workspace_path);
			m->workspace_path = NULL;
		}
	}

	v = json_object_get(doc, "taskStatement");
	if (v && !json_is_string(v))
		reason(why, "taskStatement must be a string");
	m->task_statement = json_string_value(v);

	load_endpoints(m, doc, why);
	load_commands(m, doc, why);
	size_t ws_len = m->workspace_path ? strlen(m->workspace_path) : 0;
	m->inputs = path_list(doc, "inputs", &m->n_inputs, 0, ws_len, why);
	m->outputs = path_list(doc, "outputs", &m->n_outputs, 1, ws_len, why);

	m->max_turns = int_field(doc, "maxTurns", 1, 1, 1, 1000000000L, why);
	m->max_model_calls = int_field(doc, "maxModelCalls", 0, m->max_turns * 8, 1, 100000, why);
	if (!json_object_get(doc, "maxModelCalls") && m->max_model_calls > 100000)
		m->max_model_calls = 100000;
	m->max_seconds = int_field(doc, "maxSeconds", 0, 900, 1, 86400, why);
	m->max_loops = int_field(doc, "maxLoops", 0, 3, 1, 16, why);
	m->max_pending_tasks = int_field(doc, "maxPendingTasks", 0, 32, 1, 4096, why);
	m->max_tokens = int_field(doc, "maxTokens", 0, 0, 1, 1000000000L, why);
	m->max_context_bytes = int_field(doc, "maxContextBytes", 0, 262144, 4096, 16777216, why);

	v = json_object_get(doc, "dryRunDefault");
	if (!json_is_boolean(v))
		reason(why, v ? "dryRunDefault must be a boolean" : "dryRunDefault is required");
	m->dry_run_default = json_is_true(v);
	v = json_object_get(doc, "allowSelfModification");
	if (v && !json_is_boolean(v))
		reason(why, "allowSelfModification must be a boolean");
	m->allow_self_modification = json_is_true(v);

	load_tuning(m, json_object_get(doc, "tuning"), why);

	load_acceptance(m, doc, why);
	/* A command may take as long as the run, never longer. */
	m->command_timeout_seconds = COMMAND_TIMEOUT_DEFAULT;
	if ((v = json_object_get(doc, "commandTimeoutSeconds"))) {
		long long t;
		if (!ndjson_integer(v, &t) || t < 1 || t > m->max_seconds)
			reason(why, "commandTimeoutSeconds must be an integer from 1 to %ld (maxSeconds)", m->max_seconds);
		else
			m->command_timeout_seconds = (long)t;
	}
	load_limits(m, doc, why);
	load_cost(m, doc, why);
	v = json_object_get(doc, "requireConfinement");
	if (v && !json_is_boolean(v))
		reason(why, "requireConfinement must be a boolean");
	m->require_confinement = json_is_true(v);

	if (why->n) {
		manifest_free(m);
		return NULL;
	}
	return m;
}

struct manifest *manifest_load(const char *path, struct reasons *why)
{
	struct sfma_err e;
	json_t *doc = ndjson_load(path, MANIFEST_MAX_BYTES, &e);
	if (!doc) {
		reason(why, "%s", e.text);
		return NULL;
	}
	struct manifest *m = manifest_from_json(doc, why);
	json_decref(doc);
	return m;
}

void manifest_free(struct manifest *m)
{
	if (!m)
		return;
	for (size_t i = 0; m->inputs && m->inputs[i]; i++)
		free(m->inputs[i]);
	for (size_t i = 0; m->outputs && m->outputs[i]; i++)
		free(m->outputs[i]);
	free(m->inputs);
	free(m->outputs);
	free(m->allowed);
	free(m->endpoints);
	free(m->workspace_path);
	json_decref(m->json);
	free(m);
}
