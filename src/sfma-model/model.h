/* model.h - the parts of sfma-model: request loop (main.c), endpoint grid
 * (grid.c), providers (providers.c), how a reply ended, its usage and cost
 * (stop.c), HTTP and SSE (http.c), OAuth2 client credentials (oauth.c), the
 * offline mock (mock.c), secret scrubbing (secret.c) and libcurl, loaded on
 * first need (curl-load.c). */
#ifndef SFMA_MODEL_H
#define SFMA_MODEL_H

#include <pthread.h>
#include <stddef.h>
#include <jansson.h>

#include "buf.h"
#include "clock.h"
#include "curl-load.h"
#include "errors.h"
#include "manifest.h"

/* Largest response body accepted from a provider or token endpoint (after
 * content decoding): a reply past it is aborted mid-transfer. */
#define MODEL_BODY_MAX (8u << 20)
/* Largest request line on stdin; a longer one is skipped and answered. */
#define MODEL_REQUEST_MAX (16u << 20)
/* Bytes of a failing response quoted in an error message. */
#define MODEL_EXCERPT_MAX 200
/* Connecting never takes more than this, even with a far deadline. */
#define MODEL_CONNECT_MAX_MS 30000
/* Retries at one endpoint within one request (rate limits and transient
 * failures), and the backoff of a transient one: full jitter over
 * [0, min(BACKOFF_CAP, BACKOFF_BASE * 2^k)] before the k-th retry. */
#define MODEL_MAX_RETRIES 2
#define MODEL_BACKOFF_BASE_MS 500
#define MODEL_BACKOFF_CAP_MS 8000
/* Consecutive faults (transport failures, 500/502/503/504/529 answers, a
 * stream's server_error) that make an endpoint down, for how long
 * its first outage lasts, and the longest one (each new outage doubles). */
#define MODEL_DOWN_AFTER 3
#define MODEL_DOWN_FIRST_MS 30000LL
#define MODEL_DOWN_MAX_MS 600000LL
/* Requests served at once; one more waits (unread on stdin) for a free
 * worker. The planner has at most maxLoops (16) + softCalls (5) out. */
#define MODEL_INFLIGHT_MAX 32
/* Idle libcurl handles kept per endpoint, each with its connection: as
 * many as requests have used it at once, up to this. */
#define MODEL_POOL_MAX 8
/* The longest SFMA_MOCK_LATENCY_MS. */
#define MODEL_MOCK_LATENCY_MAX_MS 600000LL

enum provider { PROV_ANTHROPIC, PROV_OPENAI, PROV_GEMINI, PROV_CODEX, PROV_MOCK };

/* US dollars per million tokens (the endpoint's "pricing", sfma-model(1)). */
struct pricing {
	int set;
	double input, output, cached_input, cache_write;
};

struct oauth {
	const char *token_url, *scope;     /* borrowed from the manifest */
	const char *client_id, *client_secret; /* borrowed from the environment */
	pthread_mutex_t lock;              /* one token fetch at a time; guards the cache */
	char *token;                       /* cached bearer token, or NULL */
	long long expires_mono_ms;         /* refresh at or after this instant */
};

struct endpoint {
	const struct endpoint_cfg *cfg;
	enum provider prov;
	int usable;
	struct pricing pricing;
	const char *cache_key;             /* prompt_cache_key (the grid's), openai and codex */
	char missing[160];                 /* variables to set before it is usable */
	const char *key;                   /* API key or codex token (environment) */
	const char *account;               /* codex account (environment) */
	struct oauth *oauth;               /* NULL without auth */
	/* Idle handles, each keeping its connection alive: a request takes
	 * one (or makes one) and gives it back (pool_lock guards them). */
	pthread_mutex_t pool_lock;
	CURL *pool[MODEL_POOL_MAX];
	size_t n_pool;
	/* measured state (persisted by the planner, seeded back as "state"),
	 * guarded by the grid's lock */
	long long calls, failures;
	double latency_ewma;
	int has_ewma;
	double availability;               /* EWMA of attempts without a fault, 1 unmeasured */
	long long consecutive_failures;    /* faults since the last success */
	long long down_until;              /* epoch ms, 0 when up */
	long long outages;                 /* outages since the last success */
	double pass_rate[2];               /* [mechanical, reasoning], EWMA of soft verdicts */
	int has_pass[2];
	double cost_usd;                   /* costUsd summed over every run */
	int has_cost;                      /* cost_usd is kept (priced, or seeded with one) */
};

enum purpose { PURPOSE_WORK, PURPOSE_BOOTSTRAP, PURPOSE_JUDGE, PURPOSE_CRITERIA };

struct model_request {
	json_t *id;                        /* borrowed */
	enum purpose purpose;
	const char *task;                  /* the blackboard task, or NULL */
	const char *avoid;                 /* the endpoint a judgment must not use, or NULL */
	const char *system;
	size_t system_len;
	json_t *messages;                  /* borrowed: validated (sfma-model(1)) */
	int tools;                         /* offer the tool table natively */
	int reasoning;                     /* class: 1 reasoning, 0 mechanical */
	long long deadline_ms;             /* epoch ms */
	long long calls_left;
};

/* A request's plan, made in arrival order: the endpoints to try, and
 * the mock reply drawn for it when a mock endpoint comes first. */
struct plan {
	struct endpoint **order;
	size_t n, n_down;
	long long back_at;                 /* the earliest downUntil of the down ones */
	int independent;                   /* a judgment whose first endpoint is not the avoided one */
	int mock_judge;                    /* answered by the stage: no attempt */
	int drawn;                         /* mock_text holds the first attempt's reply */
	struct buf mock_text;
};

struct grid {
	pthread_mutex_t lock;              /* the measured state of every endpoint */
	struct endpoint *eps;
	size_t n;
	double alpha, target_latency_ms;
	struct routing_weights weights[2]; /* [mechanical, reasoning] */
	char no_usable[SFMA_ERR_MAX];       /* the error when no endpoint is usable */
	const char *workspace;             /* absolute (the manifest's), for the reset hint */
	char cache_key[40];                /* "sfma-" + 32 hex digits */
};

/* ---- grid.c ---- */
/* Resolve providers and credentials for every endpoint of m; an endpoint
 * that cannot be used is marked so (and warned about once on stderr). */
void grid_init(struct grid *g, const struct manifest *m);
/* Replace the measured state with state ({"<name>":{calls,failures,
 * latencyMsEwma,availability,consecutiveFailures,downUntil,outages,
 * passRate,costUsd}}); endpoints absent or malformed in it start
 * unmeasured; any other member (a "reset" sfma endpoints left) is read by
 * the planner, not here, and is not carried on.
 * 0, or -1 with e filled when state is not an object. */
int grid_seed(struct grid *g, const json_t *state, struct sfma_err *e);
/* Fold soft-tier verdicts ([{"endpoint","class","pass"}]) into passRate
 * (with apply 0, only check them). 0, or -1 with e filled when one is
 * malformed (then none is folded). */
int grid_verdicts(struct grid *g, const json_t *verdicts, int apply, struct sfma_err *e);
/* Rank the endpoints for rq into p, in arrival order (and draw its mock
 * reply when a mock endpoint comes first). */
void grid_plan(struct grid *g, const struct model_request *rq, struct plan *p);
void plan_free(struct plan *p);
/* Serve one planned request: try, retry, fail over. Any number of
 * threads at once. Returns a new reply object (without "id"). */
json_t *grid_serve(struct grid *g, const struct model_request *rq, struct plan *p);
/* The measured state (caller holds g->lock). */
json_t *grid_state(const struct grid *g);
void grid_free(struct grid *g);

/* ---- providers.c ---- */
/* Why an attempt failed (the "errorClass" of its call entry). */
enum err_class {
	EC_NONE,        /* it did not */
	EC_RATE,        /* rate-limited: 429, 503, 529 */
	EC_TRANSIENT,   /* 408, 500, 502, 504 */
	EC_TRANSPORT,   /* no HTTP answer: connection error, timeout */
	EC_CLIENT,      /* any other 4xx (and any other status) */
	EC_REPLY,       /* a 2xx whose body cannot be used */
	EC_AUTH,        /* 401, 403, or the token endpoint failed */
	EC_REFUSAL,     /* the provider refused or filtered the reply */
};
const char *err_class_name(enum err_class c);

/* How a reply ended (its "stop"): STOP_NONE when no answer came, or when
 * the provider's word is absent or says nothing more than that the reply is
 * whole (then it is end or tool by whether it made calls); STOP_INVALID for
 * a word that makes the reply unusable (gemini MALFORMED_FUNCTION_CALL). */
enum stop_class { STOP_NONE, STOP_END, STOP_TOOL, STOP_LENGTH, STOP_REFUSAL, STOP_FILTER, STOP_INVALID };
#define STOP_WORD_MAX 64

/* What one attempt did. */
struct attempt {
	long status;                       /* HTTP status, 0 when none came */
	enum err_class cls;
	long long retry_after_ms;          /* the server's wait hint, -1 when none */
	int no_retry;                      /* the answer said x-should-retry: false */
	int fault;                         /* counts toward down: no answer, a 5xx of MODEL_DOWN_AFTER's kind */
	size_t request_bytes;              /* bytes of the body sent */
	struct buf text;                   /* the reply text (a refusal: the provider's text of it) */
	json_t *native;                    /* the provider's call objects, or NULL */
	json_t *tool_calls;                /* tools_from_native of native, or NULL */
	json_t *usage;                     /* {inputTokens,outputTokens,cachedInputTokens?,
	                                    *  cacheWriteTokens?,reasoningTokens?} or NULL */
	char stop_reason[STOP_WORD_MAX];   /* the provider's own word, "" when none */
	enum stop_class stop;
	struct sfma_err e;                 /* when it failed: not prefixed, not scrubbed */
};
void attempt_free(struct attempt *a);

/* 1 when requests to ep carry the tool table and native messages. */
int provider_native(const struct endpoint *ep, const struct model_request *rq);
/* One attempt at ep, filling a (zeroed by the caller). 0 on success, -1
 * with a->cls and a->e set. A mock attempt answers drawn when non-NULL
 * (the reply drawn in arrival order), else draws now. */
int provider_call(struct endpoint *ep, const struct model_request *rq, const struct buf *drawn,
                  struct attempt *a);
int provider_parse(const char *name, enum provider *out);
const char *provider_name(enum provider p);
/* Forget what the providers kept between calls (gemini's signatures). */
void provider_free_all(void);

/* ---- stop.c ---- */
/* "end", "tool", "length", "refusal", "filter", or NULL (none, invalid). */
const char *stop_class_name(enum stop_class s);
/* How a JSON provider's 2xx body (anthropic, openai, gemini) says the reply
 * ended: the provider's word into word ("" when there is none; gemini's
 * blocked prompt reads "blockReason:<reason>") and its class. For a refusal
 * or a filter, the provider's own text of it (possibly none) is appended to
 * why; for an invalid reply, its finishMessage. */
enum stop_class stop_of_body(enum provider p, json_t *doc, char word[STOP_WORD_MAX], struct buf *why);
/* The class of a codex response.incomplete reason. */
enum stop_class stop_of_incomplete(const char *reason);
/* Token usage from a provider's reply body (codex: response.usage), or NULL
 * when it reports none: {inputTokens, outputTokens, cachedInputTokens?,
 * cacheWriteTokens?, reasoningTokens?}, reasoning counted in outputTokens. */
json_t *usage_of(enum provider p, json_t *doc);
/* What usage cost at p, in US dollars, rounded to 1e-10 (sfma-model(1),
 * COST: which input tokens each provider bills at which price). 0 without
 * usage. */
double cost_of(const struct endpoint_pricing *p, enum provider prov, const json_t *usage);
/* A dollar figure rounded to 1e-10, so that sums print without noise. */
double usd_rounded(double v);
/* The wait a rate-limit message asks for ("Please try again in 1.5s",
 * "... in 20ms", "... in 3 seconds"), in ms, or -1 when it names none. */
long long wait_in_message(const char *msg);

/* ---- http.c ---- */
/* An endpoint's idle handles: set up empty, and every one cleaned up. */
void pool_init(struct endpoint *ep);
void pool_free(struct endpoint *ep);
/* A handle for one attempt at ep (an idle one, whose connection may still
 * be open, else a new one), and giving it back after the attempt. */
CURL *endpoint_handle(struct endpoint *ep);
void endpoint_handle_back(struct endpoint *ep, CURL *c);
struct sse;
struct http_reply {
	long status;
	struct buf body;                   /* whole body; with an SSE parser only its head */
	long long retry_after_ms;          /* retry-after-ms or Retry-After, -1 when absent */
	int retry_ms_seen;                 /* retry-after-ms was among the headers */
	int should_retry;                  /* x-should-retry: 1 true, 0 false, -1 absent */
};
/* POST body to url with headers, bounded by deadline_ms (epoch) and
 * MODEL_BODY_MAX. With sse non-NULL the body is fed to it as it arrives.
 * Returns 0 when a response was received (any status), -1 with e filled on
 * a transport failure, a timeout or an oversized body. */
int http_post(CURL *c, const char *url, struct curl_slist *headers, const char *body,
              size_t body_len, long long deadline_ms, struct sse *sse,
              struct http_reply *out, struct sfma_err *e);
/* "HTTP <status>: <clipped printable excerpt>" into e. Returns -1. */
int http_status_error(const struct http_reply *r, struct sfma_err *e);
/* Free a header list after overwriting every header (they hold secrets). */
void headers_wipe_free(struct curl_slist *h);

struct sse *sse_new(void);
void sse_free(struct sse *s);
/* The reply text of a finished stream, or -1 with e filled. A stream that
 * made function calls, ended incomplete or refused succeeds with whatever
 * text it has. */
int sse_result(struct sse *s, struct buf *text, struct sfma_err *e);
/* The function_call items of the stream (new reference), or NULL. */
json_t *sse_calls(struct sse *s);
/* response.completed's (or .incomplete's) usage object (new reference), or NULL. */
json_t *sse_usage(struct sse *s);
/* The error code of the response.failed or error event that failed the
 * stream ("rate_limit_exceeded", ...), "" when it gave none; and the
 * message it came with. */
const char *sse_error_code(const struct sse *s);
const char *sse_error_message(const struct sse *s);
/* How a stream that did not fail ended: "completed" (or response.status)
 * with STOP_NONE, "incomplete:<reason>" with stop_of_incomplete, or "" with
 * STOP_NONE when it ended without saying. A refusal part, when the response
 * had one, makes it STOP_REFUSAL, its text appended to why. */
enum stop_class sse_stop(const struct sse *s, char word[STOP_WORD_MAX], struct buf *why);

/* ---- oauth.c ---- */
/* A bearer token for ep (cached until 60 s before expiry), fetched with
 * c: a copy the caller wipes and frees. NULL with e filled when the token
 * endpoint fails. */
char *oauth_token(struct endpoint *ep, CURL *c, long long deadline_ms, struct sfma_err *e);
/* Forget the cached token (the provider refused it). */
void oauth_forget(struct endpoint *ep);
void oauth_free(struct oauth *o);

/* ---- mock.c ---- */
/* Read SFMA_MOCK and SFMA_MOCK_LATENCY_MS (if set). 0, or -1 with e
 * filled when one is invalid. */
int mock_init(const struct manifest *m, struct sfma_err *e);
/* The next scripted reply for rq (from its queue in the object form).
 * Any thread. */
void mock_reply(const struct model_request *rq, struct buf *text);
/* 1 when judgments are the stage's own (the array form, or no SFMA_MOCK). */
int mock_judges_itself(void);
/* The stage's own judgment of rq: a pass (every criterion, for criteria). */
void mock_judgment(const struct model_request *rq, struct buf *text);
/* SFMA_MOCK_LATENCY_MS, 0 when unset. */
long long mock_latency_ms(void);
void mock_free(void);

/* ---- secret.c ---- */
#define SECRET_REDACTED "[redacted]"
/* Remember a secret value so that no message ever carries it. */
void secret_add(const char *value);
/* Length of the longest known secret that s[0..n) starts with, or 0. */
size_t secret_at(const char *s, size_t n);
/* Rewrite s (NUL-terminated, capacity cap) with every known secret, any
 * "key=" query value and any piece of a secret (8 bytes or more anywhere,
 * 4 or more ending the text) replaced by "[redacted]", then clipped to
 * cap - 1 bytes. */
void secret_scrub(char *s, size_t cap);
void secret_free_all(void);
/* Rule 1 alone, for what a provider answered: each copy of a known secret
 * value becomes "[redacted]" (in b, or in every string value of v). A
 * reply is otherwise passed on exactly as received. */
void secret_redact_text(struct buf *b);
void secret_redact_json(json_t *v);
/* A JSON string from bytes that may not be valid UTF-8: invalid bytes
 * become '?'. Never NULL. */
json_t *json_string_lossy(const char *s, size_t n);

#endif
