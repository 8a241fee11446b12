/* grid.c - the endpoint grid: which endpoints are usable and up, in which
 * order they are tried for a class, retries, failover, and the measured
 * state.
 *
 * Score of a usable endpoint for class c (reasoning or mechanical), with
 * the weights of tuning.routing.c:
 *
 *   score = wPrior * prior_c + wPass * passRate_c + wAvail * availability
 *         + wLat * min(1, targetLatencyMs / latencyMsEwma)
 *
 * passRate_c is the planner's (0.5 until measured), availability an EWMA
 * of transport success (1 until measured), and the latency term is 1 when
 * no latency is measured or no target is set. Ties keep manifest order;
 * with one endpoint nothing is ranked, only its health is checked.
 *
 * Within one request an endpoint is retried at most MODEL_MAX_RETRIES
 * times: after a rate limit when the server's wait fits before the
 * deadline, after a transient failure following the backoff, unless the
 * answer said x-should-retry: false; anything else (a refusal too) falls
 * through to the next endpoint at once. MODEL_DOWN_AFTER consecutive
 * faults (no answer, or a 500, 502, 503, 504, 529) make it down until
 * downUntil, a state the planner persists, so a later run skips it without
 * a request. */
#include "model.h"
#include "canon.h"
#include "sha.h"
#include "soft.h"
#include "ndjson.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

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
	pthread_mutex_init(&ep->oauth->lock, NULL);
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

/* prompt_cache_key: "sfma-" and 32 hex digits of SHA-256 over the
 * workspace's absolute path and the manifest's digest (of its canonical
 * JSON), so that every request of a workspace run under one manifest
 * shares it, and nothing secret is in it (the manifest names variables,
 * never values). */
static void make_cache_key(struct grid *g, const struct manifest *m)
{
	struct buf doc = {0};
	if (canon_dump(m->json, &doc, NULL) < 0)
		die("cannot serialize the manifest"); /* it came through the strict reader */
	char digest[SHA256_HEX_LEN + 1], key[SHA256_HEX_LEN + 1];
	sha256_hex(doc.p, doc.len, digest);
	buf_free(&doc);
	struct buf in = {0};
	buf_printf(&in, "sfma prompt cache 1%c%s%c%s", '\0', m->workspace_path, '\0', digest);
	sha256_hex(in.p, in.len, key);
	buf_free(&in);
	snprintf(g->cache_key, sizeof g->cache_key, "sfma-%.32s", key);
}

void grid_init(struct grid *g, const struct manifest *m)
{
	memset(g, 0, sizeof *g);
	g->workspace = m->workspace_path;
	make_cache_key(g, m);
	pthread_mutex_init(&g->lock, NULL);
	g->alpha = m->tuning.ewma_alpha;
	g->target_latency_ms = m->tuning.target_latency_ms;
	g->weights[0] = m->tuning.routing_mechanical;
	g->weights[1] = m->tuning.routing_reasoning;
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
		ep->cache_key = g->cache_key;
		ep->usable = ep->missing[0] == '\0';
		ep->availability = 1;
		ep->has_cost = ep->cfg->pricing.set;
		pool_init(ep);
	}
	describe_unusable(g);
}

void grid_free(struct grid *g)
{
	for (size_t i = 0; i < g->n; i++) {
		struct endpoint *ep = &g->eps[i];
		pool_free(ep);
		oauth_free(ep->oauth);
	}
	free(g->eps);
	g->eps = NULL;
	g->n = 0;
	pthread_mutex_destroy(&g->lock);
}

/* ---- the measured state ------------------------------------------------ */

static int unit_number(json_t *v, double *out)
{
	if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1)
		return 0;
	*out = json_number_value(v);
	return 1;
}

/* *out set only when v is an integer >= 0. */
static int count_of(json_t *v, long long *out)
{
	long long n;
	if (!ndjson_integer(v, &n) || n < 0)
		return 0;
	*out = n;
	return 1;
}

static void unmeasured(struct endpoint *ep)
{
	ep->calls = ep->failures = 0;
	ep->latency_ewma = 0;
	ep->has_ewma = 0;
	ep->availability = 1;
	ep->consecutive_failures = ep->down_until = ep->outages = 0;
	ep->has_pass[0] = ep->has_pass[1] = 0;
	ep->cost_usd = 0;
	ep->has_cost = ep->cfg->pricing.set;
}

/* One endpoint's state as persisted. calls and failures make an entry (an
 * entry without them, or with failures > calls, is not one: unmeasured);
 * every other member is read alone and, malformed, left unmeasured. A
 * downUntil further ahead than the longest outage is cut to it: no
 * hand-edited memory can keep an endpoint away for longer. */
static void read_entry(struct endpoint *ep, json_t *s)
{
	unmeasured(ep);
	long long calls, failures;
	if (!json_is_object(s) || !count_of(json_object_get(s, "calls"), &calls) ||
	    !count_of(json_object_get(s, "failures"), &failures) || failures > calls)
		return;
	ep->calls = calls;
	ep->failures = failures;
	json_t *e = json_object_get(s, "latencyMsEwma");
	ep->has_ewma = json_is_number(e) && json_number_value(e) >= 0;
	ep->latency_ewma = ep->has_ewma ? json_number_value(e) : 0;
	unit_number(json_object_get(s, "availability"), &ep->availability);
	count_of(json_object_get(s, "consecutiveFailures"), &ep->consecutive_failures);
	count_of(json_object_get(s, "outages"), &ep->outages);
	if (ep->outages > 64)
		ep->outages = 64;
	if (count_of(json_object_get(s, "downUntil"), &ep->down_until)) {
		long long latest = wall_ms() + MODEL_DOWN_MAX_MS;
		if (ep->down_until > latest)
			ep->down_until = latest;
	}
	json_t *pass = json_object_get(s, "passRate");
	ep->has_pass[0] = unit_number(json_object_get(pass, "mechanical"), &ep->pass_rate[0]);
	ep->has_pass[1] = unit_number(json_object_get(pass, "reasoning"), &ep->pass_rate[1]);
	/* The cost so far, kept once an endpoint had pricing, even if it has
	 * none now: a figure once counted is not dropped. */
	json_t *cost = json_object_get(s, "costUsd");
	if (json_is_number(cost) && isfinite(json_number_value(cost)) && json_number_value(cost) >= 0 &&
	    json_number_value(cost) < 1e12) {
		ep->cost_usd = json_number_value(cost);
		ep->has_cost = 1;
	}
}

int grid_seed(struct grid *g, const json_t *state, struct sfma_err *e)
{
	if (!json_is_object(state))
		return err_set(e, "state must be an object of endpoint states");
	pthread_mutex_lock(&g->lock);
	for (size_t i = 0; i < g->n; i++)
		read_entry(&g->eps[i], json_object_get(state, g->eps[i].cfg->name));
	pthread_mutex_unlock(&g->lock);
	return 0;
}

static struct endpoint *endpoint_named(struct grid *g, const char *name)
{
	for (size_t i = 0; name && i < g->n; i++)
		if (strcmp(g->eps[i].cfg->name, name) == 0)
			return &g->eps[i];
	return NULL;
}

/* passRate[c] starts from the 0.5 it counts as while unmeasured, so one
 * verdict moves it by alpha, not all the way to 0 or 1. A verdict on an
 * endpoint the manifest does not have (the stage's own mock-judge) is no
 * measurement of any endpoint. */
int grid_verdicts(struct grid *g, const json_t *verdicts, int apply, struct sfma_err *e)
{
	if (!json_is_array(verdicts))
		return err_set(e, "verdicts must be an array of {\"endpoint\",\"class\",\"pass\"}");
	size_t i;
	json_t *v;
	json_array_foreach(verdicts, i, v) {
		const char *cls = json_string_value(json_object_get(v, "class"));
		if (!json_is_object(v) || !json_is_string(json_object_get(v, "endpoint")) ||
		    !json_is_boolean(json_object_get(v, "pass")) || !cls ||
		    (strcmp(cls, "reasoning") != 0 && strcmp(cls, "mechanical") != 0))
			return err_set(e, "verdicts[%zu] must be {\"endpoint\":S,\"class\":\"reasoning\"|\"mechanical\",\"pass\":BOOL}",
			               i);
	}
	if (!apply)
		return 0;
	pthread_mutex_lock(&g->lock);
	json_array_foreach(verdicts, i, v) {
		struct endpoint *ep = endpoint_named(g, json_string_value(json_object_get(v, "endpoint")));
		if (!ep)
			continue;
		int c = strcmp(json_string_value(json_object_get(v, "class")), "reasoning") == 0;
		double was = ep->has_pass[c] ? ep->pass_rate[c] : 0.5;
		ep->pass_rate[c] = g->alpha * json_is_true(json_object_get(v, "pass")) + (1 - g->alpha) * was;
		ep->has_pass[c] = 1;
	}
	pthread_mutex_unlock(&g->lock);
	return 0;
}

static json_t *rounded(double v, double unit)
{
	return json_real((double)(long long)(v / unit + 0.5) * unit);
}

json_t *grid_state(const struct grid *g)
{
	json_t *out = json_object();
	long long now = wall_ms();
	for (size_t i = 0; i < g->n; i++) {
		const struct endpoint *ep = &g->eps[i];
		json_t *s = json_pack("{s:I,s:I,s:o,s:o,s:I,s:o,s:I}", "calls", (json_int_t)ep->calls, "failures",
		                      (json_int_t)ep->failures, "latencyMsEwma",
		                      ep->has_ewma ? rounded(ep->latency_ewma, 0.001) : json_null(), "availability",
		                      rounded(ep->availability, 1e-6), "consecutiveFailures",
		                      (json_int_t)ep->consecutive_failures, "downUntil",
		                      ep->down_until > now ? json_integer((json_int_t)ep->down_until) : json_null(),
		                      "outages", (json_int_t)ep->outages);
		if (ep->has_cost)
			json_object_set_new(s, "costUsd", json_real(usd_rounded(ep->cost_usd)));
		if (ep->has_pass[0] || ep->has_pass[1]) {
			json_t *pass = json_object();
			if (ep->has_pass[1])
				json_object_set_new(pass, "reasoning", rounded(ep->pass_rate[1], 1e-6));
			if (ep->has_pass[0])
				json_object_set_new(pass, "mechanical", rounded(ep->pass_rate[0], 1e-6));
			json_object_set_new(s, "passRate", pass);
		}
		json_object_set_new(out, ep->cfg->name, s);
	}
	return out;
}

/* ---- ranking ----------------------------------------------------------- */

static double score(const struct grid *g, const struct endpoint *ep, int reasoning)
{
	const struct routing_weights *w = &g->weights[reasoning];
	double prior = reasoning ? ep->cfg->prior_reasoning : ep->cfg->prior_mechanical;
	double pass = ep->has_pass[reasoning] ? ep->pass_rate[reasoning] : 0.5;
	double lat = 1;
	if (g->target_latency_ms > 0 && ep->has_ewma && ep->latency_ewma > g->target_latency_ms)
		lat = g->target_latency_ms / ep->latency_ewma;
	return w->prior * prior + w->pass * pass + w->avail * ep->availability + w->lat * lat;
}

static int is_down(const struct endpoint *ep, long long now)
{
	return ep->down_until > now;
}

/* Usable endpoints that are up, best first (a stable insertion sort: ties
 * keep manifest order). *n_down counts the usable ones that are down and
 * *back_at the earliest instant one of them comes back. */
static size_t rank(const struct grid *g, int reasoning, struct endpoint **order, double *scores,
                   size_t *n_down, long long *back_at)
{
	size_t n = 0;
	long long now = wall_ms();
	*n_down = 0;
	*back_at = 0;
	for (size_t i = 0; i < g->n; i++) {
		struct endpoint *ep = &g->eps[i];
		if (!ep->usable)
			continue;
		if (is_down(ep, now)) {
			if (!*n_down || ep->down_until < *back_at)
				*back_at = ep->down_until;
			++*n_down;
			continue;
		}
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

/* ---- attempts ---------------------------------------------------------- */

/* The output ceiling a cut-off reply reached: the maxOutputTokens the
 * request carried; codex carries none (its backend refuses one), so there
 * the output tokens the stream reported, or null. */
static json_t *output_ceiling(const struct endpoint *ep, const struct attempt *a)
{
	json_t *out = json_object_get(a->usage, "outputTokens");
	if (ep->prov == PROV_CODEX)
		return json_is_integer(out) ? json_incref(out) : json_null();
	return json_integer((json_int_t)ep->cfg->max_output_tokens);
}

static json_t *call_entry(const struct endpoint *ep, int reasoning, double elapsed, long long wait_ms,
                          const struct attempt *a, const char *err)
{
	long long ms = (long long)(elapsed + 0.5);
	json_t *c = json_pack("{s:s,s:s,s:I,s:b,s:o,s:I,s:I}", "endpoint", ep->cfg->name, "class",
	                      reasoning ? "reasoning" : "mechanical", "latencyMs", (json_int_t)ms, "ok",
	                      err == NULL, "status", a->status ? json_integer(a->status) : json_null(),
	                      "waitMs", (json_int_t)wait_ms, "requestBytes", (json_int_t)a->request_bytes);
	if (err) {
		json_object_set_new(c, "errorClass", json_string(err_class_name(a->cls)));
		json_object_set_new(c, "error", json_string_lossy(err, strlen(err)));
	}
	if (a->stop_reason[0])
		json_object_set_new(c, "stopReason", json_string_lossy(a->stop_reason, strlen(a->stop_reason)));
	if (stop_class_name(a->stop))
		json_object_set_new(c, "stop", json_string(stop_class_name(a->stop)));
	if (a->stop == STOP_LENGTH)
		json_object_set_new(c, "maxOutputTokens", output_ceiling(ep, a));
	/* Any answer that reports usage was billed, a refused one too. */
	if (a->usage)
		json_object_set(c, "usage", a->usage);
	if (ep->cfg->pricing.set)
		json_object_set_new(c, "costUsd", json_real(cost_of(&ep->cfg->pricing, ep->prov, a->usage)));
	return c;
}

static void measure(const struct grid *g, struct endpoint *ep, double ms, const struct attempt *a, int ok)
{
	ep->calls++;
	if (ep->cfg->pricing.set)
		ep->cost_usd += cost_of(&ep->cfg->pricing, ep->prov, a->usage);
	int reached = ok || !a->fault;
	ep->availability = g->alpha * reached + (1 - g->alpha) * ep->availability;
	if (ok) {
		/* Latency is learnt from successes only: a fast refusal is not speed. */
		ep->latency_ewma = ep->has_ewma ? g->alpha * ms + (1 - g->alpha) * ep->latency_ewma : ms;
		ep->has_ewma = 1;
		ep->consecutive_failures = ep->outages = ep->down_until = 0;
		return;
	}
	ep->failures++;
	if (!a->fault)
		return;
	/* Once down, one more fault after it comes back is a new outage,
	 * twice as long: the count only restarts with a success. */
	if (++ep->consecutive_failures >= MODEL_DOWN_AFTER) {
		long long len = MODEL_DOWN_FIRST_MS;
		for (long long k = ++ep->outages; k > 1 && len < MODEL_DOWN_MAX_MS; k--)
			len *= 2;
		ep->down_until = wall_ms() + (len < MODEL_DOWN_MAX_MS ? len : MODEL_DOWN_MAX_MS);
	}
}

/* Full jitter: uniformly in [0, min(cap, base * 2^retry)]. */
static long long backoff_ms(int retry)
{
	long long ceiling = MODEL_BACKOFF_BASE_MS;
	for (int k = 0; k < retry && ceiling < MODEL_BACKOFF_CAP_MS; k++)
		ceiling *= 2;
	if (ceiling > MODEL_BACKOFF_CAP_MS)
		ceiling = MODEL_BACKOFF_CAP_MS;
	uint32_t r;
	if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
		return ceiling / 2;
	return (long long)((double)r / 4294967295.0 * (double)ceiling);
}

/* How long to wait before retrying ep after a, or -1 to fall through. */
static long long retry_wait(const struct endpoint *ep, const struct attempt *a, int retries, long long deadline_ms)
{
	long long wait;
	if (retries >= MODEL_MAX_RETRIES || a->no_retry || is_down(ep, wall_ms()))
		return -1;
	if (a->cls == EC_RATE && a->retry_after_ms >= 0)
		wait = a->retry_after_ms;
	else if (a->cls == EC_RATE || a->cls == EC_TRANSIENT || a->cls == EC_TRANSPORT)
		wait = backoff_ms(retries); /* a rate limit without a hint backs off too */
	else
		return -1;
	/* The wait and at least a moment for the attempt must fit. */
	return wall_ms() + wait < deadline_ms ? wait : -1;
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

/* The reply of the attempt that answered: its text and calls, how it
 * ended (a mock's reply is whole: end), and for one cut off the ceiling it
 * reached. A refusal left over when no endpoint answered is a reply too:
 * stop "refusal" and the provider's text of it. */
static json_t *success(const struct endpoint *ep, struct attempt *a, json_t *calls)
{
	json_t *r = json_pack("{s:b,s:o,s:s,s:s}", "ok", 1, "text",
	                      json_string_lossy(a->text.p ? a->text.p : "", a->text.len), "endpoint",
	                      ep->cfg->name, "provider", provider_name(ep->prov));
	const char *stop = a->cls == EC_REFUSAL ? "refusal" : stop_class_name(a->stop);
	json_object_set_new(r, "stop", json_string(stop ? stop : "end"));
	if (a->stop == STOP_LENGTH)
		json_object_set_new(r, "maxOutputTokens", output_ceiling(ep, a));
	if (a->tool_calls) {
		json_object_set(r, "toolCalls", a->tool_calls);
		json_object_set(r, "native", a->native);
	}
	/* A refusal's usage is on its call only: the reply's usage is the
	 * caller's for the last call, which may be another attempt's. */
	if (a->usage && a->cls != EC_REFUSAL)
		json_object_set(r, "usage", a->usage);
	json_object_set_new(r, "calls", calls);
	return r;
}

static int is_judgment(const struct model_request *rq)
{
	return rq->purpose == PURPOSE_JUDGE || rq->purpose == PURPOSE_CRITERIA;
}

/* The stage's own judgment (the array-form mock): no attempt, no call. */
static json_t *mock_judge_reply(const struct model_request *rq, json_t *calls)
{
	struct buf text = {0};
	mock_judgment(rq, &text);
	json_t *r = json_pack("{s:b,s:o,s:s,s:s,s:s,s:o,s:b}", "ok", 1, "text", json_string_lossy(text.p, text.len),
	                      "endpoint", MOCK_JUDGE, "provider", "mock", "stop", "end", "calls", calls,
	                      "independent", 1);
	buf_free(&text);
	return r;
}

void grid_plan(struct grid *g, const struct model_request *rq, struct plan *p)
{
	memset(p, 0, sizeof *p);
	p->order = xcalloc(g->n ? g->n : 1, sizeof *p->order);
	double *scores = xcalloc(g->n ? g->n : 1, sizeof *scores);
	pthread_mutex_lock(&g->lock);
	p->n = rank(g, rq->reasoning, p->order, scores, &p->n_down, &p->back_at);
	pthread_mutex_unlock(&g->lock);
	free(scores);
	/* Judge independence: the producer goes last, tried only when no
	 * other endpoint answers (the reply then says independent:false). */
	for (size_t i = 0; rq->avoid && i + 1 < p->n; i++)
		if (strcmp(p->order[i]->cfg->name, rq->avoid) == 0) {
			struct endpoint *avoided = p->order[i];
			memmove(p->order + i, p->order + i + 1, (p->n - i - 1) * sizeof *p->order);
			p->order[p->n - 1] = avoided;
			break;
		}
	/* The mock's queues are drawn in the order requests arrive, not in
	 * the order their threads happen to run. */
	if (p->n && p->order[0]->prov == PROV_MOCK && rq->calls_left > 0 && wall_ms() < rq->deadline_ms &&
	    !(is_judgment(rq) && mock_judges_itself())) {
		mock_reply(rq, &p->mock_text);
		p->drawn = 1;
	}
}

void plan_free(struct plan *p)
{
	free(p->order);
	buf_free(&p->mock_text);
	p->order = NULL;
}

/* Why the attempts stopped before every endpoint was tried. */
enum halt { GO_ON, HALT_BUDGET, HALT_DEADLINE };

/* A word of a shell command as typed: quoted unless every byte is plain. */
static void shell_word(struct buf *b, const char *w)
{
	int plain = *w != '\0';
	for (const char *p = w; *p; p++)
		plain &= (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		         strchr("/._-+,:@%=", *p) != NULL;
	if (plain) {
		buf_adds(b, w);
		return;
	}
	buf_addc(b, '\'');
	for (const char *p = w; *p; p++)
		buf_adds(b, *p == '\'' ? "'\\''" : (char[]){*p, '\0'});
	buf_addc(b, '\'');
}

/* "all endpoints down until T; sfma endpoints WS --reset NAME to try again
 * now" (--all when more than one is down). */
static json_t *all_down(const struct grid *g, const struct plan *p, json_t *calls)
{
	char when[ISO8601_LEN];
	struct buf b = {0};
	buf_printf(&b, "all endpoints down until %s; sfma endpoints ", iso8601_utc(p->back_at, when));
	shell_word(&b, g->workspace ? g->workspace : ".");
	const struct endpoint *first = NULL;
	for (size_t i = 0; i < g->n; i++)
		if (g->eps[i].usable && g->eps[i].down_until == p->back_at && !first)
			first = &g->eps[i];
	if (p->n_down == 1 && first) {
		buf_adds(&b, " --reset ");
		shell_word(&b, first->cfg->name);
	} else {
		buf_adds(&b, " --all");
	}
	buf_adds(&b, " to try again now");
	json_t *r = failure(calls, "%s", b.p);
	buf_free(&b);
	return r;
}

json_t *grid_serve(struct grid *g, const struct model_request *rq, struct plan *p)
{
	json_t *calls = json_array();
	json_t *reply = NULL;
	struct endpoint **order = p->order;
	size_t n = p->n;
	int own_judgment = is_judgment(rq) && mock_judges_itself();
	if (own_judgment && n && order[0]->prov == PROV_MOCK)
		reply = mock_judge_reply(rq, calls);
	else if (rq->calls_left <= 0)
		reply = failure(calls, "model call budget spent");
	char last[SFMA_ERR_MAX] = "";
	long long made = 0;
	size_t tried = 0;
	enum halt stop = GO_ON;
	/* The latest refusal, the reply when no endpoint answers. */
	struct attempt refused = {0};
	struct endpoint *refused_by = NULL;

	if (!reply && n == 0 && p->n_down) {
		pthread_mutex_lock(&g->lock);
		reply = all_down(g, p, calls);
		pthread_mutex_unlock(&g->lock);
	} else if (!reply && n == 0) {
		reply = failure(calls, "%s", g->no_usable);
	}
	for (size_t i = 0; !reply && stop == GO_ON && i < n; i++) {
		struct endpoint *ep = order[i];
		if (own_judgment && ep->prov == PROV_MOCK) {
			reply = mock_judge_reply(rq, calls);
			break;
		}
		long long wait = 0;
		int counted = 0;
		for (int retries = 0;; retries++) {
			if (made >= rq->calls_left) {
				stop = HALT_BUDGET;
				break;
			}
			/* This request's thread waits; the others go on. */
			if (wait > 0)
				sleep_ms(wait);
			if (wall_ms() >= rq->deadline_ms) {
				stop = HALT_DEADLINE;
				break;
			}
			struct attempt a = {0};
			double t0 = mono_ms_frac();
			int rc = provider_call(ep, rq, p->drawn && i == 0 && retries == 0 ? &p->mock_text : NULL, &a);
			double ms = mono_ms_frac() - t0;
			made++;
			if (!counted++)
				tried++;
			pthread_mutex_lock(&g->lock);
			measure(g, ep, ms, &a, rc == 0);
			pthread_mutex_unlock(&g->lock);
			if (rc == 0) {
				json_array_append_new(calls, call_entry(ep, rq->reasoning, ms, wait, &a, NULL));
				reply = success(ep, &a, calls);
				if (is_judgment(rq))
					json_object_set_new(reply, "independent",
					                    json_boolean(!rq->avoid || strcmp(rq->avoid, ep->cfg->name) != 0));
				attempt_free(&a);
				break;
			}
			snprintf(last, sizeof last, "%.100s: %.400s", ep->cfg->name, a.e.text);
			secret_scrub(last, sizeof last);
			json_array_append_new(calls, call_entry(ep, rq->reasoning, ms, wait, &a, last));
			pthread_mutex_lock(&g->lock);
			wait = retry_wait(ep, &a, retries, rq->deadline_ms);
			pthread_mutex_unlock(&g->lock);
			if (a.cls == EC_REFUSAL) {
				attempt_free(&refused);
				refused = a;
				refused_by = ep;
			} else {
				attempt_free(&a);
			}
			if (wait < 0)
				break;
		}
	}
	/* Refused wherever it was asked: that is the model's answer, for the
	 * planner to take as a refused turn, not a failed call. */
	if (!reply && refused_by) {
		reply = success(refused_by, &refused, calls);
		if (is_judgment(rq))
			json_object_set_new(reply, "independent",
			                    json_boolean(!rq->avoid || strcmp(rq->avoid, refused_by->cfg->name) != 0));
	}
	attempt_free(&refused);
	if (!reply && stop == HALT_BUDGET)
		reply = failure(calls, "model call budget spent (last: %s)", last);
	else if (!reply && stop == HALT_DEADLINE)
		reply = made ? failure(calls, "deadline passed (last: %s)", last) : failure(calls, "deadline passed");
	else if (!reply)
		reply = tried == 1 ? failure(calls, "%s", last)
		                   : failure(calls, "all %zu usable endpoints failed (last: %s)", tried, last);
	pthread_mutex_lock(&g->lock);
	json_object_set_new(reply, "endpoints", grid_state(g));
	pthread_mutex_unlock(&g->lock);
	return reply;
}
