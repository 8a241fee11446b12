/* sfma-export - runs as OpenTelemetry traces, for the tools people look at
 * agents in.
 *
 *   sfma-export --otlp [--content] [--run N] [--endpoint URL] WORKSPACE...
 *
 * Reads each WORKSPACE/.sfma/trace.jsonl (after checking its hash chain),
 * its result.json and, where the mapping needs them, evidence blobs, and
 * prints one OTLP/JSON ExportTraceServiceRequest: a resourceSpans per
 * workspace, a trace per run (lib/otlp.c; sfma-export(1)). With
 * --endpoint it POSTs that request to an OTLP/HTTP collector instead, at
 * URL/v1/traces, with the headers of OTEL_EXPORTER_OTLP_HEADERS. A reader
 * only: nothing in a workspace is written. Exit 0; 1 when a workspace
 * cannot be read, its trace does not verify, or the collector did not
 * take every span; 2 on usage errors. */
#include "buf.h"
#include "canon.h"
#include "chain.h"
#include "clock.h"
#include "cli.h"
#include "confine.h"
#include "errors.h"
#include "evidence.h"
#include "ndjson.h"
#include "otelheaders.h"
#include "otlp.h"
#include "runview.h"
#include "url.h"

#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: sfma-export --otlp [--content] [--run N] [--endpoint URL] WORKSPACE...\n"
	"       sfma-export --version | --help\n"
	"  --otlp          OTLP/JSON (an ExportTraceServiceRequest), the one format\n"
	"  --content       also export what crossed the model boundary (prompts, messages,\n"
	"                  replies, tool arguments and results): spans leave the machine\n"
	"  --run N         only the Nth run of each trace (1 the first, -1 the last; default: every run)\n"
	"  --endpoint URL  POST to the OTLP/HTTP collector at URL (URL/v1/traces) instead of printing\n";

/* OTLP/HTTP (opentelemetry-proto docs/specification.md): a client keeps
 * its requests to 64 MiB and reads at most 4 MiB of a response. */
#define REQUEST_MAX (64u << 20)
#define RESPONSE_MAX (4u << 20)
/* Evidence is checked whole before its head is used; past this a blob is
 * taken as not there (a reader stays bounded over a hostile store). */
#define BLOB_CHECK_MAX (1ull << 30)
/* The specification's default Timeout (10 s) per attempt, and the
 * attempts made on an answer it calls retryable. */
#define TIMEOUT_MS_DEFAULT 10000
#define ATTEMPTS 3
#define RETRY_AFTER_MAX_S 30
/* Characters of a collector's message shown. */
#define MESSAGE_CHARS 200

struct opts {
	int otlp, content;
	int run_given;
	long run;
	const char *endpoint;
};

/* ---- reading a workspace --------------------------------------------------- */

static char *read_blob(void *arg, const struct evidence_ref *ref, size_t max, size_t *len)
{
	struct evidence_store *store = arg;
	if (ref->bytes > BLOB_CHECK_MAX)
		return NULL;
	char *head = xmalloc(max + 1);
	size_t have = 0;
	struct sfma_err e;
	if (evidence_head(store, ref, head, max, &have, &e) != EVIDENCE_OK) {
		free(head);
		return NULL;
	}
	head[have] = '\0';
	*len = have;
	return head;
}

/* The chain must hold before anything of it goes out: entries whose hashes
 * do not link are no record of a run. A final line without its newline
 * (a run still writing, or killed) is left out, as every reader does. */
static void verify_chain(const char *ws, int fd)
{
	struct chain_opts co = {0};
	struct chain_summary sum;
	struct sfma_err e;
	if (lseek(fd, 0, SEEK_SET) < 0)
		die("%s/.sfma/trace.jsonl: seek: %s", ws, strerror(errno));
	if (chain_verify_fd(fd, &co, &sum, &e) < 0 && !sum.torn)
		die("%s: the trace does not verify: %s (nothing exported; sfma-verify tells more)", ws, e.text);
}

/* Feed the lines of run to the mapping: each with its number, a line too
 * long to read as NULL. */
static void feed_run(struct otlp_ws *w, const char *ws, int fd, const struct rv_run *run)
{
	struct line_reader lr;
	if (lseek(fd, (off_t)run->offset, SEEK_SET) < 0)
		die("%s/.sfma/trace.jsonl: seek: %s", ws, strerror(errno));
	lr_init(&lr, fd, RV_MAX_LINE);
	uint64_t line_no = run->first_line - 1;
	while (line_no < run->last_line) {
		char *line;
		size_t len;
		struct sfma_err e;
		int rc = lr_next(&lr, &line, &len, &e);
		if (rc == 0 || (rc < 0 && lr.torn))
			break;
		if (rc == 1) {
			otlp_run_line(w, line, len, ++line_no);
			continue;
		}
		if (!strstr(e.text, "longer than"))
			die("%s/.sfma/trace.jsonl: %s", ws, e.text);
		otlp_run_line(w, NULL, 0, ++line_no);
		if (!lr_skip_line(&lr))
			break;
	}
	lr_free(&lr);
}

/* The workspaces exported so far, by their .sfma directory: a workspace
 * named twice (two manifests of a batch on one workspace, a path and a
 * link to it) is exported once, or its spans would go out twice. */
struct seen {
	dev_t dev;
	ino_t ino;
	const char *as;
};

/* One workspace as a ResourceSpans; adds its spans and traces. NULL for
 * one already exported. */
static json_t *export_workspace(const char *ws, const struct opts *o, struct seen *seen, size_t *nseen,
                                size_t *spans, size_t *traces)
{
	struct sfma_err e;
	int dfd = rv_open_sfma(ws, &e);
	if (dfd < 0)
		die("%s", e.text);
	struct stat st;
	if (fstat(dfd, &st) < 0)
		die("%s/.sfma: %s", ws, strerror(errno));
	for (size_t i = 0; i < *nseen; i++)
		if (seen[i].dev == st.st_dev && seen[i].ino == st.st_ino) {
			warning("%s: the same workspace as %s, exported once", ws, seen[i].as);
			close(dfd);
			return NULL;
		}
	seen[(*nseen)++] = (struct seen){st.st_dev, st.st_ino, ws};
	int fd = rv_open_trace(dfd, &e);
	if (fd < 0)
		die("%s/.sfma/%s", ws, e.text);
	json_t *record;
	if (rv_load_record(dfd, &record, &e) < 0)
		die("%s/.sfma/%s", ws, e.text);
	verify_chain(ws, fd);
	struct rv_splitter split;
	rv_split_init(&split);
	int torn;
	if (rv_split_fd(fd, &split, &torn, &e) < 0)
		die("%s/.sfma/trace.jsonl: %s", ws, e.text);
	if (split.n == 0)
		die("%s/.sfma/trace.jsonl: no entries", ws);
	long first = 0, last = (long)split.n - 1;
	if (o->run_given) {
		first = last = rv_pick(&split, o->run);
		if (first < 0)
			die("%s: no run %ld (the trace holds %zu)", ws, o->run, split.n);
	}
	struct evidence_store *store = evidence_open(dfd, 0, &e);
	struct otlp_blobs blobs = {read_blob, store};
	struct otlp_opts mo = {.content = o->content, .blobs = store ? &blobs : NULL, .workspace = ws,
	                       .version = sfma_version()};
	struct otlp_ws *w = otlp_ws_new(record, &mo);
	for (long i = first; i <= last; i++) {
		otlp_run_begin(w, i + 1);
		feed_run(w, ws, fd, &split.runs[i]);
		if (!otlp_run_end(w))
			warning("%s: run %ld left out: no clock anchor holds a time for its spans", ws, i + 1);
	}
	size_t n_spans, n_traces;
	json_t *rs = otlp_ws_finish(w, &n_spans, &n_traces);
	*spans += n_spans;
	*traces += n_traces;
	evidence_close(store);
	rv_split_free(&split);
	json_decref(record);
	close(fd);
	close(dfd);
	return rs;
}

/* ---- the collector ---------------------------------------------------------- */

/* URL/v1/traces, as OTEL_EXPORTER_OTLP_ENDPOINT is read (the
 * specification's exporter.md: the base URL made to end in a slash, then
 * "v1/traces"). The transport is url_transport_ok's rule, as for model
 * providers: headers may carry a key. Without user, query or fragment:
 * the path is appended to. */
static char *traces_url(const char *base)
{
	struct sfma_err e;
	if (url_transport_ok(base, &e) < 0)
		die_status(2, "--endpoint: %s", e.text);
	CURLU *u = curl_url();
	char *host = NULL, *user = NULL, *query = NULL, *frag = NULL;
	if (!u || curl_url_set(u, CURLUPART_URL, base, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK)
		die_status(2, "--endpoint: not a URL");
	curl_url_get(u, CURLUPART_USER, &user, 0);
	curl_url_get(u, CURLUPART_QUERY, &query, 0);
	curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0);
	int extra = user || query || frag;
	curl_free(host), curl_free(user), curl_free(query), curl_free(frag);
	curl_url_cleanup(u);
	if (extra)
		die_status(2, "--endpoint: no user, query or fragment allowed (the collector's base URL)");
	struct buf b = {0};
	buf_adds(&b, base);
	if (b.len == 0 || b.p[b.len - 1] != '/')
		buf_addc(&b, '/');
	buf_adds(&b, "v1/traces");
	return b.p;
}

/* The headers: OTEL_EXPORTER_OTLP_TRACES_HEADERS when set (the signal's
 * own setting overrides, exporter.md), else OTEL_EXPORTER_OTLP_HEADERS. */
static struct curl_slist *otel_headers(void)
{
	const char *name = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
	const char *spec = getenv(name);
	if (!spec) {
		name = "OTEL_EXPORTER_OTLP_HEADERS";
		spec = getenv(name);
	}
	struct curl_slist *list = curl_slist_append(NULL, "Content-Type: application/json");
	/* curl would otherwise wait for a 100 Continue on a large body */
	list = curl_slist_append(list, "Expect:");
	if (!spec)
		return list;
	json_t *pairs;
	struct sfma_err e;
	if (otel_headers_parse(spec, &pairs, &e) < 0)
		die_status(2, "%s: %s", name, e.text);
	size_t i;
	json_t *p;
	json_array_foreach(pairs, i, p) {
		const char *k = json_string_value(json_array_get(p, 0)), *v = json_string_value(json_array_get(p, 1));
		struct buf h = {0};
		/* "Name;" is how libcurl sends a header with an empty value */
		buf_printf(&h, *v ? "%s: %s" : "%s;", k, v);
		list = curl_slist_append(list, h.p);
		explicit_bzero(h.p, h.len);
		buf_free(&h);
		explicit_bzero((char *)v, strlen(v));
	}
	json_decref(pairs);
	return list;
}

/* Per-attempt timeout: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, else
 * OTEL_EXPORTER_OTLP_TIMEOUT (milliseconds), else 10 s. */
static long timeout_ms(void)
{
	static const char *const names[] = {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"};
	for (size_t i = 0; i < 2; i++) {
		const char *v = getenv(names[i]);
		unsigned long ms;
		if (!v)
			continue;
		if (cli_parse_ulong(v, 1, 3600000, &ms) < 0)
			die_status(2, "%s: milliseconds from 1 to 3600000 (not %s)", names[i], v);
		return (long)ms;
	}
	return TIMEOUT_MS_DEFAULT;
}

struct sink {
	struct buf body;
	int too_big;
};

static size_t on_data(char *p, size_t size, size_t nmemb, void *arg)
{
	struct sink *k = arg;
	size_t n = size * nmemb;
	if (k->body.len + n > RESPONSE_MAX) {
		k->too_big = 1;
		return 0;
	}
	buf_add(&k->body, p, n);
	return n;
}

/* What a collector said, made printable and short. */
static void said(struct buf *out, const char *s, size_t n)
{
	size_t shown = 0;
	for (size_t i = 0; i < n && shown < MESSAGE_CHARS; i++, shown++)
		buf_addc(out, (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?');
	if (n > MESSAGE_CHARS)
		buf_adds(out, "...");
}

/* The message of an error answer: google.rpc.Status's message in JSON, or
 * the body's text when it is short and printable. */
static void answer_message(struct buf *out, const struct buf *body)
{
	json_t *st = body->len ? ndjson_parse(body->p, body->len, &(struct sfma_err){{0}}) : NULL;
	const json_t *m = json_object_get(st, "message");
	if (json_is_string(m) && json_string_length(m)) {
		buf_adds(out, ": ");
		said(out, json_string_value(m), json_string_length(m));
	} else if (!st && body->len && body->len <= MESSAGE_CHARS) {
		buf_adds(out, ": ");
		said(out, body->p, body->len);
	}
	json_decref(st);
}

/* A partial success (ExportTraceServiceResponse.partialSuccess): the
 * spans rejected (int64: a string or a number) and why. */
static void partial_success(const char *url, const struct buf *body, size_t spans)
{
	json_t *r = body->len ? ndjson_parse(body->p, body->len, &(struct sfma_err){{0}}) : NULL;
	const json_t *ps = json_object_get(r, "partialSuccess");
	if (!json_is_object(ps)) {
		json_decref(r);
		return;
	}
	const json_t *rej = json_object_get(ps, "rejectedSpans"), *msg = json_object_get(ps, "errorMessage");
	long long rejected = 0;
	if (json_is_string(rej)) {
		unsigned long v;
		if (cli_parse_ulong(json_string_value(rej), 0, 1000000000000ul, &v) == 0)
			rejected = (long long)v;
	} else {
		ndjson_integer(rej, &rejected);
	}
	struct buf m = {0};
	if (json_is_string(msg) && json_string_length(msg)) {
		buf_adds(&m, ": ");
		said(&m, json_string_value(msg), json_string_length(msg));
	}
	json_decref(r);
	if (rejected > 0)
		die("POST %s: the collector rejected %lld of %zu spans%s", url, rejected, spans, m.p ? m.p : "");
	/* a collector may warn while it takes everything (specification.md) */
	if (m.len)
		warning("POST %s: the collector took every span and says%s", url, m.p);
	buf_free(&m);
}

/* A retryable answer's wait: its Retry-After in seconds, or a backoff
 * that doubles from 1 s, less a random part of up to a half (jitter, as
 * the specification's retry rule asks). -1 when the collector asks for
 * longer than is worth waiting. */
static long retry_wait_ms(CURL *c, int attempt)
{
	struct curl_header *h;
	if (curl_easy_header(c, "Retry-After", 0, CURLH_HEADER, -1, &h) == CURLHE_OK) {
		unsigned long s;
		if (cli_parse_ulong(h->value, 0, 86400, &s) == 0)
			return s > RETRY_AFTER_MAX_S ? -1 : (long)s * 1000;
	}
	long base = 1000L << attempt;
	unsigned short r = 0;
	if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
		r = 0;
	return base - (long)(r % (unsigned)(base / 2));
}

#define SET(opt, val) \
	do { \
		if (curl_easy_setopt(c, opt, val) != CURLE_OK) \
			die("libcurl: cannot set %s", #opt); \
	} while (0)

/* POST body to url: 200 (any 2xx) and no span rejected, or one line and
 * exit 1. Answers 429, 502, 503 and 504 are retried (specification.md,
 * Retryable Response Codes); a connection that fails is not: the command
 * is run again. */
static void post(const char *url, const struct buf *body, size_t spans, size_t traces, size_t workspaces)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		die("libcurl: cannot initialise");
	CURL *c = curl_easy_init();
	if (!c)
		die("libcurl: cannot initialise");
	struct curl_slist *headers = otel_headers();
	long timeout = timeout_ms();
	char agent[64];
	snprintf(agent, sizeof agent, "sfma-export/%s", sfma_version());
	for (int attempt = 0;; attempt++) {
		char errbuf[CURL_ERROR_SIZE] = "";
		struct sink k = {0};
		curl_easy_reset(c);
		SET(CURLOPT_URL, url);
		SET(CURLOPT_PROTOCOLS_STR, "http,https");
		SET(CURLOPT_FOLLOWLOCATION, 0L); /* a redirect would carry the headers elsewhere */
		SET(CURLOPT_SSL_VERIFYPEER, 1L);
		SET(CURLOPT_SSL_VERIFYHOST, 2L);
		SET(CURLOPT_NOSIGNAL, 1L);
		SET(CURLOPT_TIMEOUT_MS, timeout);
		SET(CURLOPT_USERAGENT, agent);
		SET(CURLOPT_HTTPHEADER, headers);
		SET(CURLOPT_POSTFIELDS, body->p);
		SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
		SET(CURLOPT_WRITEFUNCTION, on_data);
		SET(CURLOPT_WRITEDATA, &k);
		SET(CURLOPT_ERRORBUFFER, errbuf);
		CURLcode cc = curl_easy_perform(c);
		if (k.too_big)
			die("POST %s: the answer is larger than %u bytes", url, RESPONSE_MAX);
		if (cc != CURLE_OK)
			die("POST %s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(cc));
		long status = 0;
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		if (status >= 200 && status < 300) {
			partial_success(url, &k.body, spans);
			buf_free(&k.body);
			break;
		}
		int retryable = status == 429 || status == 502 || status == 503 || status == 504;
		long wait = retryable && attempt + 1 < ATTEMPTS ? retry_wait_ms(c, attempt) : -1;
		if (wait < 0) {
			struct buf m = {0};
			answer_message(&m, &k.body);
			die("POST %s: HTTP %ld%s%s", url, status, m.p ? m.p : "",
			    retryable ? (attempt + 1 < ATTEMPTS ? " (asked to retry later than is worth waiting)"
			                                        : " (after 3 attempts)") : "");
		}
		buf_free(&k.body);
		sleep_ms(wait);
	}
	curl_slist_free_all(headers);
	curl_easy_cleanup(c);
	curl_global_cleanup();
	printf("EXPORT_OK spans=%zu traces=%zu workspaces=%zu endpoint=%s\n", spans, traces, workspaces, url);
	if (fflush(stdout) != 0)
		die("standard output: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	struct opts o = {0};
	static const struct option longopts[] = {
		{"otlp", no_argument, NULL, 'o'},     {"content", no_argument, NULL, 'c'},
		{"run", required_argument, NULL, 'r'}, {"endpoint", required_argument, NULL, 'e'},
		{"help", no_argument, NULL, 'h'},     {"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': o.otlp = 1; break;
		case 'c': o.content = 1; break;
		case 'r':
			if (rv_parse_run(optarg, &o.run) < 0)
				cli_usage_error(usage_text, "--run: a run number, 1 for the first or -1 for the last (not %s)",
				                optarg);
			o.run_given = 1;
			break;
		case 'e': o.endpoint = optarg; break;
		case 'h': cli_help(usage_text);
		case 'V': cli_version();
		default: cli_bad_option(usage_text, c, argv);
		}
	}
	if (!o.otlp)
		cli_usage_error(usage_text, "--otlp is required (the one format there is)");
	if (optind >= argc)
		cli_usage_error(usage_text, "a WORKSPACE is required");
	/* What could stop the export is checked before any workspace is read. */
	char *url = o.endpoint ? traces_url(o.endpoint) : NULL;
	if (url) {
		curl_slist_free_all(otel_headers());
		(void)timeout_ms();
	}
	/* Read-only on the workspaces; the network only with --endpoint, to
	 * the collector's port (sfma(1), CONFINEMENT). */
	uint16_t ports[16];
	size_t n_ports = 0;
	if (url && url_port(url) > 0)
		ports[n_ports++] = (uint16_t)url_port(url);
	if (url)
		url_proxy_ports(ports, &n_ports, sizeof ports / sizeof *ports);
	const struct confine_places places = {.args = (const char *const *)argv + optind, .ports = ports,
	                                      .n_ports = n_ports};
	struct confine_report confined;
	int channel = -1;
	confine_stage(&channel, url ? "sfma-export/endpoint" : "sfma-export", &places, &confined);

	/* Every workspace first: one request, all of it or nothing. */
	json_t *all = json_array();
	size_t spans = 0, traces = 0, nseen = 0;
	struct seen *seen = xcalloc((size_t)(argc - optind), sizeof *seen);
	for (int i = optind; i < argc; i++) {
		json_t *rs = export_workspace(argv[i], &o, seen, &nseen, &spans, &traces);
		if (rs)
			json_array_append_new(all, rs);
	}
	free(seen);
	size_t workspaces = json_array_size(all);
	json_t *req = otlp_request(all);
	struct buf body = {0};
	struct sfma_err e;
	if (canon_dump(req, &body, &e) < 0)
		die("export: %s", e.text);
	json_decref(req);
	if (url) {
		if (body.len > REQUEST_MAX)
			die("the export is %zu bytes, more than the %u an OTLP request may carry: export fewer "
			    "workspaces at once, or one run (--run)", body.len, REQUEST_MAX);
		post(url, &body, spans, traces, workspaces);
	} else {
		buf_addc(&body, '\n');
		if (fwrite(body.p, 1, body.len, stdout) != body.len || fflush(stdout) != 0)
			die("standard output: %s", strerror(errno));
	}
	buf_free(&body);
	free(url);
	return 0;
}
