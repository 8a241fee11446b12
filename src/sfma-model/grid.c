/* grid.c - the endpoint grid: which endpoints are usable, in which order
 * they are tried for a class, failover, and the measured state.
 *
 * Score of a usable endpoint for class c (reasoning or mechanical):
 *
 *   reliability = (W * prior_c + successes) / (W + calls)      W = 4
 *   speed       = min(1, targetLatencyMs / latencyMsEwma)       1 when either is unknown
 *   score       = reliability * speed
 *
 * The prior counts as W observations, so measurements overrule it after a
 * handful of calls; an endpoint slower than the target loses score in
 * proportion. Ties keep manifest order. */
#include "model.h"
#include "ndjson.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRIOR_WEIGHT 4.0

static const char *key_var(enum provider p)
{
	switch (p) {
	case PROV_ANTHROPIC: return "ANTHROPIC_API_KEY";
	case PROV_OPENAI: return "OPENAI_API_KEY";
	case PROV_GEMINI: return "GEMINI_API_KEY";
	case PROV_CODEX: return "OPENAI_CODEX_TOKEN";
	case PROV_MOCK: break;
	}
	return NULL;
}

/* A variable's value when set and non-empty, else NULL. */
static const char *env_value(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

static void add_missing(struct endpoint *ep, const char *var)
{
	size_t n = strlen(ep->missing);
	snprintf(ep->missing + n, sizeof ep->missing - n, "%s%s", n ? " and " : "", var);
}

/* auth: {"type":"oauth2-client-credentials","tokenUrl","clientIdEnv","clientSecretEnv","scope"?} */
/* The manifest loader has checked the block's shape (lib/manifest.c). */
static void load_auth(struct endpoint *ep)
{
	json_t *a = ep->cfg->auth;
	const char *url = json_string_value(json_object_get(a, "tokenUrl"));
	const char *id_env = json_string_value(json_object_get(a, "clientIdEnv"));
	const char *secret_env = json_string_value(json_object_get(a, "clientSecretEnv"));
	json_t *scope = json_object_get(a, "scope");
	ep->oauth = xcalloc(1, sizeof *ep->oauth);
	ep->oauth->token_url = url;
	ep->oauth->scope = json_string_value(scope);
	if (!(ep->oauth->client_id = env_value(id_env)))
		add_missing(ep, id_env);
	if (!(ep->oauth->client_secret = env_value(secret_env)))
		add_missing(ep, secret_env);
	secret_add(ep->oauth->client_secret);
}

static void load_credentials(struct endpoint *ep)
{
	if (ep->prov == PROV_MOCK)
		return;
	if (!ep->oauth && !(ep->key = env_value(key_var(ep->prov))))
		add_missing(ep, key_var(ep->prov));
	if (ep->prov == PROV_CODEX && !(ep->account = env_value("OPENAI_CODEX_ACCOUNT")))
		add_missing(ep, "OPENAI_CODEX_ACCOUNT");
	secret_add(ep->key);
}

/* "no usable endpoint: set A or B, or configure a mock endpoint" */
static void describe_unusable(struct grid *g)
{
	struct buf b = {0};
	size_t listed = 0;
	const char **seen = xcalloc(g->n, sizeof *seen);
	for (size_t i = 0; i < g->n; i++) {
		int dup = 0;
		for (size_t j = 0; j < listed; j++)
			dup |= strcmp(seen[j], g->eps[i].missing) == 0;
		if (!dup && g->eps[i].missing[0])
			seen[listed++] = g->eps[i].missing;
	}
	buf_adds(&b, "no usable endpoint: ");
	if (listed) {
		buf_adds(&b, "set ");
		for (size_t j = 0; j < listed; j++)
			buf_printf(&b, "%s%s", j == 0 ? "" : j + 1 == listed ? " or " : ", ", seen[j]);
		buf_adds(&b, listed > 1 ? ", or configure a mock endpoint" : " or configure a mock endpoint");
	} else {
		buf_adds(&b, "configure a mock endpoint");
	}
	snprintf(g->no_usable, sizeof g->no_usable, "%s", b.p);
	buf_free(&b);
	free(seen);
}

void grid_init(struct grid *g, const struct manifest *m)
{
	memset(g, 0, sizeof *g);
	g->alpha = m->tuning.ewma_alpha;
	g->target_latency_ms = m->tuning.target_latency_ms;
	g->eps = xcalloc(m->n_endpoints, sizeof *g->eps);
	g->n = m->n_endpoints;
	for (size_t i = 0; i < g->n; i++) {
		struct endpoint *ep = &g->eps[i];
		ep->cfg = &m->endpoints[i];
		/* The manifest loader admits only the five providers. */
		if (provider_parse(ep->cfg->provider, &ep->prov) < 0)
			die("endpoint %.64s: unknown provider %.64s", ep->cfg->name, ep->cfg->provider);
		if (ep->cfg->auth && ep->prov != PROV_MOCK)
			load_auth(ep);
		load_credentials(ep);
		ep->usable = ep->missing[0] == '\0';
		if (ep->prov != PROV_MOCK && !(ep->curl = curl_easy_init()))
			die("cannot start libcurl");
	}
	describe_unusable(g);
}

void grid_free(struct grid *g)
{
	for (size_t i = 0; i < g->n; i++) {
		if (g->eps[i].curl)
			curl_easy_cleanup(g->eps[i].curl);
		oauth_free(g->eps[i].oauth);
	}
	free(g->eps);
	g->eps = NULL;
	g->n = 0;
}

/* The measured state of one endpoint as persisted, or -1 if it is not one. */
static int read_entry(const json_t *s, long long *calls, long long *failures, double *ewma,
                      int *has_ewma)
{
	json_t *e = json_object_get(s, "latencyMsEwma");
	if (!json_is_object(s) || !json_integer_of(json_object_get(s, "calls"), calls) ||
	    !json_integer_of(json_object_get(s, "failures"), failures) || *failures < 0 ||
	    *failures > *calls)
		return -1;
	*has_ewma = json_is_number(e) && json_number_value(e) >= 0;
	*ewma = *has_ewma ? json_number_value(e) : 0;
	return 0;
}

int grid_seed(struct grid *g, const json_t *state, struct sfma_err *e)
{
	if (!json_is_object(state))
		return err_set(e, "state must be an object of endpoint states");
	for (size_t i = 0; i < g->n; i++) {
		struct endpoint *ep = &g->eps[i];
		json_t *s = json_object_get(state, ep->cfg->name);
		/* An entry that is not a measured state (hand-edited memory, an
		 * older format) counts as unmeasured: it must not stop a run. */
		if (!s || read_entry(s, &ep->calls, &ep->failures, &ep->latency_ewma, &ep->has_ewma) < 0) {
			ep->calls = ep->failures = 0;
			ep->latency_ewma = 0;
			ep->has_ewma = 0;
		}
	}
	return 0;
}

json_t *grid_state(const struct grid *g)
{
	json_t *out = json_object();
	for (size_t i = 0; i < g->n; i++) {
		const struct endpoint *ep = &g->eps[i];
		json_t *ewma = ep->has_ewma ? json_real((double)(long long)(ep->latency_ewma * 1000 + 0.5) / 1000) : json_null();
		json_object_set_new(out, ep->cfg->name,
		                    json_pack("{s:I,s:I,s:o}", "calls", (json_int_t)ep->calls, "failures",
		                              (json_int_t)ep->failures, "latencyMsEwma", ewma));
	}
	return out;
}

static double score(const struct grid *g, const struct endpoint *ep, int reasoning)
{
	double prior = reasoning ? ep->cfg->prior_reasoning : ep->cfg->prior_mechanical;
	double successes = (double)(ep->calls - ep->failures);
	double reliability = (PRIOR_WEIGHT * prior + successes) / (PRIOR_WEIGHT + (double)ep->calls);
	double speed = 1;
	if (g->target_latency_ms > 0 && ep->has_ewma && ep->latency_ewma > g->target_latency_ms)
		speed = g->target_latency_ms / ep->latency_ewma;
	return reliability * speed;
}

/* Usable endpoints, best first (a stable insertion sort: ties keep manifest order). */
static size_t rank(const struct grid *g, int reasoning, struct endpoint **order, double *scores)
{
	size_t n = 0;
	for (size_t i = 0; i < g->n; i++) {
		struct endpoint *ep = &g->eps[i];
		if (!ep->usable)
			continue;
		double s = score(g, ep, reasoning);
		size_t at = n;
		while (at > 0 && scores[at - 1] < s) {
			order[at] = order[at - 1];
			scores[at] = scores[at - 1];
			at--;
		}
		order[at] = ep;
		scores[at] = s;
		n++;
	}
	return n;
}

static json_t *call_entry(const struct endpoint *ep, int reasoning, double elapsed, const char *err)
{
	long long ms = (long long)(elapsed + 0.5);
	json_t *c = json_pack("{s:s,s:s,s:I,s:b}", "endpoint", ep->cfg->name, "class",
	                      reasoning ? "reasoning" : "mechanical", "latencyMs", (json_int_t)ms,
	                      "ok", err == NULL);
	if (err)
		json_object_set_new(c, "error", json_string_lossy(err, strlen(err)));
	return c;
}

static void measure(const struct grid *g, struct endpoint *ep, double ms, int ok)
{
	ep->calls++;
	if (!ok) {
		ep->failures++;
		return;
	}
	/* Latency is learnt from successes only: a fast refusal is not speed. */
	if (ep->has_ewma)
		ep->latency_ewma = g->alpha * ms + (1 - g->alpha) * ep->latency_ewma;
	else
		ep->latency_ewma = ms;
	ep->has_ewma = 1;
}

static json_t *failure(json_t *calls, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *failure(json_t *calls, const char *fmt, ...)
{
	char text[SFMA_ERR_MAX * 2];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	secret_scrub(text, sizeof text);
	return json_pack("{s:b,s:o,s:o}", "ok", 0, "error", json_string_lossy(text, strlen(text)),
	                 "calls", calls);
}

json_t *grid_serve(struct grid *g, const struct model_request *rq)
{
	json_t *calls = json_array();
	if (rq->calls_left <= 0) {
		json_t *spent = failure(calls, "model call budget spent");
		json_object_set_new(spent, "endpoints", grid_state(g));
		return spent;
	}
	struct endpoint **order = xcalloc(g->n, sizeof *order);
	double *scores = xcalloc(g->n, sizeof *scores);
	size_t n = rank(g, rq->reasoning, order, scores);
	json_t *reply = NULL;
	char last[SFMA_ERR_MAX] = "";
	size_t tried = 0;

	if (n == 0)
		reply = failure(calls, "%s", g->no_usable);
	for (size_t i = 0; !reply && i < n; i++) {
		struct endpoint *ep = order[i];
		if ((long long)tried >= rq->calls_left) {
			reply = failure(calls, "model call budget spent (last: %s)", last);
			break;
		}
		if (wall_ms() >= rq->deadline_ms) {
			reply = tried ? failure(calls, "deadline passed (last: %s)", last)
			              : failure(calls, "deadline passed");
			break;
		}
		struct buf text = {0};
		struct sfma_err e;
		double t0 = mono_ms_frac();
		int rc = provider_call(ep, rq, &text, &e);
		double ms = mono_ms_frac() - t0;
		tried++;
		measure(g, ep, ms, rc == 0);
		if (rc == 0) {
			json_array_append_new(calls, call_entry(ep, rq->reasoning, ms, NULL));
			reply = json_pack("{s:b,s:o,s:s,s:o}", "ok", 1, "text",
			                  json_string_lossy(text.p ? text.p : "", text.len), "endpoint",
			                  ep->cfg->name, "calls", calls);
		} else {
			snprintf(last, sizeof last, "%.100s: %.400s", ep->cfg->name, e.text);
			secret_scrub(last, sizeof last);
			json_array_append_new(calls, call_entry(ep, rq->reasoning, ms, last));
		}
		buf_free(&text);
	}
	if (!reply)
		reply = tried == 1 ? failure(calls, "%s", last)
		                   : failure(calls, "all %zu usable endpoints failed (last: %s)", tried, last);
	free(order);
	free(scores);
	json_object_set_new(reply, "endpoints", grid_state(g));
	return reply;
}
