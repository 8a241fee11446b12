/* memory.c - cross-run memory (sfma-plan(1)): run summaries,
 * endpoint state, certification, pinning and demotion. Pure arithmetic. */
#include "plan.h"
#include "protocol.h"
#include "buf.h"
#include "canon.h"
#include "clock.h"
#include "errors.h"
#include "ndjson.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define MEMORY_MAX_RUNS 100
#define MEMORY_MAX_BYTES (16u << 20)

/* Take doc (a new reference, or NULL for a first run's empty memory) as
 * the memory, or refuse it. */
static int memory_adopt(struct memory *mem, json_t *doc, struct sfma_err *e)
{
	mem->doc = doc;
	if (!doc) {
		mem->doc = json_pack("{s:i, s:[], s:n, s:{}}", "version", 1, "runs", "pinned", "endpoints");
	} else if (!json_is_object(doc) || !json_is_array(json_object_get(doc, "runs"))) {
		json_decref(doc);
		mem->doc = NULL;
		return err_set(e, "memory.json: not a memory document");
	}
	if (!json_is_object(json_object_get(mem->doc, "endpoints")))
		json_object_set_new(mem->doc, "endpoints", json_object());
	if (!json_object_get(mem->doc, "pinned"))
		json_object_set_new(mem->doc, "pinned", json_null());
	return 0;
}

int memory_load(struct memory *mem, const char *path, struct sfma_err *e)
{
	struct stat st;
	mem->doc = NULL;
	if (stat(path, &st) == 0) {
		json_t *doc = ndjson_load(path, MEMORY_MAX_BYTES, e);
		return doc ? memory_adopt(mem, doc, e) : -1;
	}
	if (errno != ENOENT)
		return err_set(e, "%s: %s", path, strerror(errno));
	return memory_adopt(mem, NULL, e);
}

int memory_parse(struct memory *mem, const char *text, size_t len, struct sfma_err *e)
{
	mem->doc = NULL;
	if (len > MEMORY_MAX_BYTES)
		return err_set(e, "memory.json: larger than %u bytes", MEMORY_MAX_BYTES);
	json_t *doc = ndjson_parse(text, len, e);
	return doc ? memory_adopt(mem, doc, e) : -1;
}

json_t *memory_pinned(struct memory *mem)
{
	json_t *p = json_object_get(mem->doc, "pinned");
	return json_is_object(p) && json_is_object(json_object_get(p, "candidate")) ? p : NULL;
}

/* The soft-tier window (sfma-plan(1), Certification): the last `window`
 * judgments of non-dry runs, newest run first, and over the runs they
 * come from: how many, how many completed, how many had a hard-tier
 * failure. A run records its judgments as "soft":{"judged","passed"}; a
 * run without it (made before the soft tier, or one that never came to a
 * judgment) counts as one judgment, passed when the run completed. A run
 * whose acceptance checks did not pass ("acceptance":false) passed none
 * of its judgments: what the judges said is no pass without them. */
struct window {
	long judged, passed;
	int runs, completed, failures;
};

static void window_stats(json_t *runs, int window, struct window *w)
{
	*w = (struct window){0};
	for (size_t i = json_array_size(runs); i-- > 0 && w->judged < window;) {
		json_t *r = json_array_get(runs, i);
		if (json_is_true(json_object_get(r, "dryRun")))
			continue;
		w->runs++;
		const char *v = json_string_value(json_object_get(r, "verdict"));
		int completed = v && strcmp(v, "completed") == 0;
		w->completed += completed;
		json_t *h = json_object_get(r, "hardTierFailures");
		if (json_is_number(h) && json_number_value(h) > 0)
			w->failures++;
		json_t *soft = json_object_get(r, "soft");
		double judged = json_number_value(json_object_get(soft, "judged"));
		double passed = json_number_value(json_object_get(soft, "passed"));
		if (json_is_false(json_object_get(r, "acceptance")))
			passed = 0;
		if (judged >= 1 && passed >= 0 && passed <= judged && judged <= 1e6) {
			/* only as many of this run's judgments as the window still holds */
			long take = (long)judged, left = window - w->judged;
			if (take > left) {
				passed = passed * (double)left / judged;
				take = left;
			}
			w->judged += take;
			w->passed += (long)passed;
		} else {
			w->judged++;
			w->passed += completed;
		}
	}
}

void memory_record_run(struct memory *mem, const struct manifest *m, json_t *run_summary,
                       const json_t *candidate, int pinned_run, int *certified, int *demoted)
{
	json_t *runs = json_object_get(mem->doc, "runs");
	json_array_append(runs, run_summary);
	while (json_array_size(runs) > MEMORY_MAX_RUNS)
		json_array_remove(runs, 0);
	*certified = *demoted = 0;

	struct window w;
	window_stats(runs, m->tuning.cert_window, &w);
	int full = w.judged >= m->tuning.cert_window;
	double completion = w.runs ? (double)w.completed / w.runs : 0;
	double pass_rate = w.judged ? (double)w.passed / (double)w.judged : 0;
	json_t *h = json_object_get(run_summary, "hardTierFailures");
	int this_failed_hard = json_is_number(h) && json_number_value(h) > 0;
	int dry = json_is_true(json_object_get(run_summary, "dryRun"));

	if (memory_pinned(mem)) {
		/* A pinned configuration is demoted by a hard-tier failure in a
		 * pinned run, or when the soft pass rate falls below demotePass. */
		if (!dry && ((pinned_run && this_failed_hard) || (full && pass_rate < m->tuning.demote_pass))) {
			json_object_set_new(mem->doc, "pinned", json_null());
			*demoted = 1;
		}
		return;
	}
	if (!dry && candidate && full && completion >= m->tuning.cert_completion &&
	    pass_rate >= m->tuning.cert_pass && w.failures == 0) {
		char at[ISO8601_LEN];
		json_object_set_new(mem->doc, "pinned",
		                    json_pack("{s:O, s:s, s:s}", "candidate", candidate, "genesisVersion",
		                              GENESIS_VERSION, "certifiedAt", iso8601_utc(wall_ms(), at)));
		*certified = 1;
	}
}

json_t *memory_clip(const json_t *summary)
{
	size_t n = json_string_length(summary);
	if (n <= MEMORY_SUMMARY_MAX)
		return json_incref((json_t *)summary);
	const char *s = json_string_value(summary);
	size_t keep = MEMORY_SUMMARY_MAX;
	while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80)
		keep--;
	return json_stringn(s, keep);
}

void memory_free(struct memory *mem)
{
	json_decref(mem->doc);
	mem->doc = NULL;
}
