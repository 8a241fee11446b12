/* fuzz_memory.c - the cross-run memory (src/sfma-plan/memory.c) over a
 * hostile memory.json: memory_parse, then what a run does with it.
 *
 * Properties: it never crashes or leaks; a refusal is one non-empty line;
 * an accepted document is an object with a runs array, an endpoints
 * object and a pinned member, and what memory_save would write of it
 * reads back as the same document; recording a run (the certification
 * window taken from the input's length, 1..20) keeps at most 100 runs, the
 * new one last, never certifies and demotes at once, certifies only an
 * unpinned memory (then pins the candidate) and demotes only a pinned
 * one; memory_clip cuts every run's summary to MEMORY_SUMMARY_MAX bytes
 * at a character boundary. */
#include "fuzz.h"

#include "canon.h"
#include "manifest.h"
#include "ndjson.h"
#include "src/sfma-plan/plan.h"

static void check_clip(json_t *summary)
{
	if (!json_is_string(summary))
		return;
	/* jansson refuses a string that is not UTF-8: a cut inside a
	 * character would make json_stringn fail */
	json_t *clipped = memory_clip(summary);
	FUZZ_CHECK(clipped, "clipped inside a character");
	size_t n = json_string_length(clipped), whole = json_string_length(summary);
	FUZZ_CHECK(n <= MEMORY_SUMMARY_MAX && n <= whole, "clipped %zu bytes to %zu", whole, n);
	FUZZ_CHECK(memcmp(json_string_value(clipped), json_string_value(summary), n) == 0, "clip is not a prefix");
	json_decref(clipped);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct memory mem;
	struct sfma_err e = {{0}};
	if (memory_parse(&mem, (const char *)data, size, &e) < 0) {
		FUZZ_CHECK(!mem.doc, "refused, but a document was kept");
		FUZZ_CHECK(e.text[0] && !strchr(e.text, '\n'), "refused without a one-line reason");
		return 0;
	}
	json_t *doc = mem.doc;
	FUZZ_CHECK(json_is_object(doc), "accepted a document that is not an object");
	FUZZ_CHECK(json_is_array(json_object_get(doc, "runs")), "accepted without runs");
	FUZZ_CHECK(json_is_object(json_object_get(doc, "endpoints")), "accepted without endpoints");
	FUZZ_CHECK(json_object_get(doc, "pinned"), "accepted without pinned");

	/* memory_save writes the pretty canonical form and a newline */
	struct buf b = {0};
	canon_dump_pretty(doc, &b, NULL);
	buf_addc(&b, '\n');
	struct memory back;
	FUZZ_CHECK(memory_parse(&back, b.p, b.len, &e) == 0, "what memory_save writes does not load: %s", e.text);
	FUZZ_CHECK(fuzz_json_same(doc, back.doc), "memory.json does not read back as written");
	memory_free(&back);
	buf_free(&b);

	json_t *runs = json_object_get(doc, "runs");
	for (size_t i = 0; i < json_array_size(runs); i++)
		check_clip(json_object_get(json_array_get(runs, i), "summary"));

	struct manifest m;
	memset(&m, 0, sizeof m);
	m.tuning.cert_window = 1 + (int)(size % 20);
	m.tuning.cert_completion = 0.9;
	m.tuning.cert_pass = 0.85;
	m.tuning.demote_pass = 0.6;
	int was_pinned = memory_pinned(&mem) != NULL;
	json_t *summary = json_pack("{s:s, s:s, s:i, s:i, s:i, s:b}", "at", "2026-01-01T00:00:00.000Z", "verdict",
	                            size % 3 ? "completed" : "failed", "turns", 3, "modelCalls", 3, "hardTierFailures",
	                            (int)(size % 5 == 0), "dryRun", 0);
	json_t *candidate = json_pack("{s:s}", "mission", "m");
	int certified, demoted;
	memory_record_run(&mem, &m, summary, candidate, (int)(size & 1), &certified, &demoted);
	runs = json_object_get(mem.doc, "runs");
	FUZZ_CHECK(json_array_size(runs) >= 1 && json_array_size(runs) <= 100, "%zu runs kept", json_array_size(runs));
	FUZZ_CHECK(json_array_get(runs, json_array_size(runs) - 1) == summary, "the new run is not last");
	FUZZ_CHECK(!(certified && demoted), "certified and demoted at once");
	FUZZ_CHECK(!certified || (!was_pinned && memory_pinned(&mem)), "certified without pinning, or over a pin");
	FUZZ_CHECK(!demoted || (was_pinned && !memory_pinned(&mem)), "demoted what was not pinned, or kept it");
	json_decref(summary);
	json_decref(candidate);
	memory_free(&mem);
	return 0;
}
