/* sfma-endpoints - what a workspace's cross-run memory knows of its model
 * endpoints, and a way to clear an outage.
 *
 *   sfma-endpoints [--json] WORKSPACE
 *   sfma-endpoints (--reset NAME... | --all) [--json] WORKSPACE
 *
 * Reads WORKSPACE/.sfma/memory.json, the "endpoints" state sfma-model
 * keeps and the planner persists (sfma-model(1)), and prints one line per
 * endpoint: calls, failures, availability, latency, pass rate, down until
 * when, cost so far. --reset clears the named endpoints' down state and
 * failure count (consecutiveFailures, downUntil, outages) and records
 * "reset":{"at","by"} in their state, which the next run traces; --all
 * does so for every endpoint. A reset takes the lock a run holds on .sfma
 * (flock(2) on the directory, as sfma-plan takes it) and refuses while a
 * run holds it; memory.json is replaced atomically, mode 0600. The memory
 * is hostile input: every string is printed made visible. Exit 0, 1 on a
 * failure (no memory, a busy workspace, an unknown endpoint), 2 on usage
 * errors. */
#include "atomic.h"
#include "buf.h"
#include "canon.h"
#include "cli.h"
#include "confine.h"
#include "clock.h"
#include "errors.h"
#include "ndjson.h"
#include "runview.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: sfma-endpoints [--json] WORKSPACE\n"
	"       sfma-endpoints (--reset NAME | --all) [--json] WORKSPACE\n"
	"       sfma-endpoints --version | --help\n"
	"  --json        one NDJSON object per endpoint\n"
	"  --reset NAME  clear NAME's outage and failure count (repeatable)\n"
	"  --all         clear every endpoint's\n";

/* The planner's own ceiling on memory.json (src/sfma-plan/memory.c). */
#define MEMORY_MAX_BYTES (16u << 20)
/* Characters of an endpoint name shown on a text line. */
#define NAME_CHARS 64

struct opts {
	int json, all;
	const char **reset;   /* names to reset */
	size_t n_reset;
	const char *workspace;
};

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum { OPT_JSON = 0x100, OPT_RESET, OPT_ALL, OPT_VERSION };
	static const struct option longopts[] = {
		{"json", no_argument, NULL, OPT_JSON}, {"reset", required_argument, NULL, OPT_RESET},
		{"all", no_argument, NULL, OPT_ALL}, {"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, OPT_VERSION}, {NULL, 0, NULL, 0},
	};
	*o = (struct opts){0};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_JSON: o->json = 1; break;
		case OPT_ALL: o->all = 1; break;
		case OPT_RESET:
			if (!*optarg)
				cli_usage_error(usage_text, "--reset needs an endpoint name");
			o->reset = xrealloc(o->reset, (o->n_reset + 1) * sizeof *o->reset);
			o->reset[o->n_reset++] = optarg;
			break;
		case 'h': cli_help(usage_text);
		case OPT_VERSION: cli_version();
		default: cli_bad_option(usage_text, c, argv);
		}
	}
	if (o->all && o->n_reset)
		cli_usage_error(usage_text, "--reset NAME and --all exclude each other");
	if (optind == argc)
		cli_usage_error(usage_text, "a WORKSPACE is required");
	if (optind != argc - 1)
		cli_usage_error(usage_text, "one WORKSPACE only (unexpected %s)", argv[optind + 1]);
	o->workspace = argv[optind];
}

/* ---- the memory ----------------------------------------------------------- */

/* WORKSPACE/.sfma, opened without following a link planted as .sfma. */
static int open_sfma(const char *ws)
{
	int wfd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (wfd < 0)
		die("%s: %s", ws, strerror(errno));
	int fd = openat(wfd, ".sfma", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	int err = errno;
	close(wfd);
	if (fd < 0 && err == ENOENT)
		die("%s: no .sfma: no run has used this workspace", ws);
	if (fd < 0)
		die("%s/.sfma: %s", ws, strerror(err));
	return fd;
}

/* memory.json as a document, or NULL when there is none. A link, a FIFO
 * or anything but a regular file in its place is refused. */
static json_t *load_memory(int sfma_fd, const char *ws)
{
	int fd = openat(sfma_fd, "memory.json", O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	if (fd < 0 && errno == ENOENT)
		return NULL;
	if (fd < 0)
		die("%s/.sfma/memory.json: %s", ws, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		die("%s/.sfma/memory.json: not a regular file", ws);
	struct sfma_err e;
	size_t n;
	char *text = read_all_fd(fd, MEMORY_MAX_BYTES, &n, &e);
	close(fd);
	if (!text)
		die("%s/.sfma/memory.json: %s", ws, e.text);
	json_t *doc = ndjson_parse(text, n, &e);
	free(text);
	if (!doc)
		die("%s/.sfma/memory.json: %s", ws, e.text);
	if (!json_is_object(doc) || !json_is_array(json_object_get(doc, "runs")))
		die("%s/.sfma/memory.json: not a memory document", ws);
	return doc;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The endpoint names in byte order (the caller frees the array). */
static const char **names_of(json_t *endpoints, size_t *n)
{
	const char **names = xcalloc(json_object_size(endpoints) + 1, sizeof *names);
	const char *k;
	json_t *v;
	*n = 0;
	json_object_foreach(endpoints, k, v)
		names[(*n)++] = k;
	qsort(names, *n, sizeof *names, name_cmp);
	return names;
}

/* ---- one endpoint, as shown ----------------------------------------------- */

/* A member that is a number, else NULL. */
static json_t *number(json_t *s, const char *key)
{
	json_t *v = json_object_get(s, key);
	return json_is_number(v) && isfinite(json_number_value(v)) ? v : NULL;
}

/* downUntil as the epoch ms it is, when it is ahead of now. */
static int down_until(json_t *s, long long now, long long *at)
{
	long long v;
	if (!ndjson_integer(json_object_get(s, "downUntil"), &v) || v <= now)
		return 0;
	*at = v;
	return 1;
}

static void add_visible(struct buf *b, const char *s, size_t max)
{
	rv_visible(b, s, strlen(s), max);
}

static void text_line(struct buf *b, const char *name, json_t *s, long long now)
{
	add_visible(b, name, NAME_CHARS);
	json_t *calls = number(s, "calls"), *failures = number(s, "failures"), *avail = number(s, "availability");
	json_t *lat = number(s, "latencyMsEwma"), *cost = number(s, "costUsd");
	buf_printf(b, " calls=%.0f failures=%.0f", calls ? json_number_value(calls) : 0,
	           failures ? json_number_value(failures) : 0);
	if (avail)
		buf_printf(b, " availability=%.3f", json_number_value(avail));
	else
		buf_adds(b, " availability=-");
	if (lat)
		buf_printf(b, " latencyMs=%.0f", json_number_value(lat));
	else
		buf_adds(b, " latencyMs=-");
	json_t *pass = json_object_get(s, "passRate");
	json_t *pr = number(pass, "reasoning"), *pm = number(pass, "mechanical");
	buf_adds(b, " passRate=");
	if (pr)
		buf_printf(b, "reasoning:%.3f", json_number_value(pr));
	if (pm)
		buf_printf(b, "%smechanical:%.3f", pr ? "," : "", json_number_value(pm));
	if (!pr && !pm)
		buf_adds(b, "-");
	long long at;
	char iso[ISO8601_LEN];
	if (down_until(s, now, &at))
		buf_printf(b, " downUntil=%s", iso8601_utc(at, iso));
	else
		buf_adds(b, " downUntil=up");
	if (cost)
		buf_printf(b, " costUsd=%.4f", json_number_value(cost));
	else
		buf_adds(b, " costUsd=-");
	json_t *reset_at = json_object_get(json_object_get(s, "reset"), "at");
	if (json_is_string(reset_at)) {
		buf_adds(b, " reset=");
		add_visible(b, json_string_value(reset_at), 40);
	}
	buf_addc(b, '\n');
}

/* A member copied when it has the type it should, else null. */
static void copy_or_null(json_t *out, json_t *s, const char *key, int (*is)(const json_t *))
{
	json_t *v = json_object_get(s, key);
	json_object_set_new(out, key, v && is(v) ? json_deep_copy(v) : json_null());
}

static int is_number(const json_t *v) { return json_is_number(v) && isfinite(json_number_value(v)); }
static int is_object(const json_t *v) { return json_is_object(v); }

static json_t *json_row(const char *name, json_t *s, long long now)
{
	json_t *o = json_pack("{s:s%}", "endpoint", name, strlen(name));
	if (!o) /* a name that is no UTF-8 cannot have come through the strict reader */
		die("an endpoint name is not UTF-8");
	static const char *const numbers[] = {
		"calls", "failures", "availability", "latencyMsEwma", "consecutiveFailures", "outages", "costUsd", NULL,
	};
	for (size_t i = 0; numbers[i]; i++)
		copy_or_null(o, s, numbers[i], is_number);
	copy_or_null(o, s, "passRate", is_object);
	copy_or_null(o, s, "reset", is_object);
	long long at;
	char iso[ISO8601_LEN];
	int down = down_until(s, now, &at);
	json_object_set_new(o, "downUntil", down ? json_string(iso8601_utc(at, iso)) : json_null());
	json_object_set_new(o, "down", json_boolean(down));
	return o;
}

static void list(json_t *endpoints, const struct opts *o)
{
	size_t n;
	const char **names = names_of(endpoints, &n);
	long long now = wall_ms();
	if (n == 0)
		warning("%s: no endpoint state yet (no run has called a model)", o->workspace);
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_object_get(endpoints, names[i]);
		if (o->json) {
			json_t *row = json_row(names[i], s, now);
			if (ndjson_print(stdout, row) < 0)
				die("write stdout: %s", strerror(errno));
			json_decref(row);
			continue;
		}
		struct buf b = {0};
		text_line(&b, names[i], s, now);
		if (fwrite(b.p, 1, b.len, stdout) != b.len || fflush(stdout) != 0)
			die("write stdout: %s", strerror(errno));
		buf_free(&b);
	}
	free(names);
}

/* ---- resets --------------------------------------------------------------- */

/* Clear one endpoint's outage; says what it was (with --json, the state
 * it is left in). */
static void reset_one(json_t *endpoints, const char *name, const char *at, long long now, int json)
{
	json_t *s = json_object_get(endpoints, name);
	if (!json_is_object(s)) {
		s = json_object();
		json_object_set_new(endpoints, name, s);
	}
	long long until, streak = 0;
	int was_down = down_until(s, now, &until);
	ndjson_integer(json_object_get(s, "consecutiveFailures"), &streak);
	json_object_set_new(s, "consecutiveFailures", json_integer(0));
	json_object_set_new(s, "downUntil", json_null());
	json_object_set_new(s, "outages", json_integer(0));
	json_object_set_new(s, "reset", json_pack("{s:s,s:s}", "at", at, "by", "sfma endpoints"));
	if (json) {
		json_t *row = json_row(name, s, now);
		if (ndjson_print(stdout, row) < 0)
			die("write stdout: %s", strerror(errno));
		json_decref(row);
		return;
	}
	struct buf b = {0};
	add_visible(&b, name, NAME_CHARS);
	char iso[ISO8601_LEN];
	if (was_down)
		buf_printf(&b, ": reset (was down until %s, %lld consecutive failures)\n", iso8601_utc(until, iso), streak);
	else
		buf_printf(&b, ": reset (was up, %lld consecutive failures)\n", streak);
	fputs(b.p, stdout);
	buf_free(&b);
}

static void reset(int sfma_fd, json_t *doc, const struct opts *o)
{
	json_t *endpoints = json_object_get(doc, "endpoints");
	if (!json_is_object(endpoints))
		die("%s: no endpoint state yet (no run has called a model)", o->workspace);
	for (size_t i = 0; i < o->n_reset; i++)
		if (!json_object_get(endpoints, o->reset[i])) {
			struct buf b = {0}, known = {0};
			add_visible(&b, o->reset[i], NAME_CHARS);
			size_t n;
			const char **names = names_of(endpoints, &n);
			for (size_t k = 0; k < n; k++) {
				buf_adds(&known, k ? ", " : "");
				add_visible(&known, names[k], NAME_CHARS);
			}
			free(names);
			die("%s: no endpoint %s in its memory (known: %s)", o->workspace, b.p, n ? known.p : "none");
		}
	long long now = wall_ms();
	char at[ISO8601_LEN];
	iso8601_utc(now, at);
	size_t n;
	const char **names = names_of(endpoints, &n);
	for (size_t i = 0; i < n; i++) {
		int chosen = o->all;
		for (size_t k = 0; k < o->n_reset; k++)
			chosen |= strcmp(o->reset[k], names[i]) == 0;
		if (chosen)
			reset_one(endpoints, names[i], at, now, o->json);
	}
	free(names);
	/* As the planner writes it: canonical, pretty, one newline. */
	struct buf b = {0};
	struct sfma_err e;
	if (canon_dump_pretty(doc, &b, &e) < 0)
		die("memory.json: %s", e.text);
	buf_addc(&b, '\n');
	if (atomic_write_at(sfma_fd, "memory.json", b.p, b.len, 0600, &e) < 0)
		die("%s/.sfma/memory.json: %s", o->workspace, e.text);
	buf_free(&b);
	if (fflush(stdout) != 0)
		die("write stdout: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	/* Static: what a fatal exit leaves allocated stays reachable. */
	static struct opts o;
	parse_args(argc, argv, &o);
	int sfma_fd = open_sfma(o.workspace);
	int resetting = o.all || o.n_reset;
	/* memory.json read, and replaced by a reset (sfma(1), CONFINEMENT). */
	const char *const reads[] = { o.workspace, NULL };
	const struct confine_places places = {.workspace = o.workspace};
	confine_self(resetting ? "sfma-endpoints/reset" : "sfma-endpoints", reads, &places);
	/* A run holds this lock from start to seal (sfma-plan's workspace_open):
	 * a reset must not race the memory the run will write at its end. */
	if (resetting && flock(sfma_fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK)
			die("workspace busy: another sfma run holds %s/.sfma", o.workspace);
		die("%s/.sfma: lock: %s", o.workspace, strerror(errno));
	}
	json_t *doc = load_memory(sfma_fd, o.workspace);
	if (!doc && resetting)
		die("%s: no memory.json: no run has called a model", o.workspace);
	if (resetting) {
		reset(sfma_fd, doc, &o);
	} else {
		json_t *endpoints = json_object_get(doc, "endpoints");
		json_t *none = json_object();
		list(json_is_object(endpoints) ? endpoints : none, &o);
		json_decref(none);
	}
	json_decref(doc);
	free(o.reset);
	close(sfma_fd); /* releases the lock */
	return 0;
}
