/* fuzz_confine.c - what a stage's report channel may carry (lib/confine.c:
 * confine_report_read, then confine_lacks, the decision core's rule for
 * requireConfinement, on what it made).
 *
 * Input byte 0 picks the channel's stage (sfma, sfma-plan, sfma-model,
 * sfma-exec, sfma-chain, sfma-seal); the rest is the message, as received.
 * Properties, whatever the bytes:
 *  - the entry is an object of only the members a report has: "stage"
 *    the channel's own name or "<stage>/<process>" (letters, digits, '-',
 *    '/'), and either "reported":false with a "why", or "landlock" (1..255
 *    or "unavailable"), "seccomp" and "noNewPrivs" (booleans) and perhaps
 *    "why" (a string shorter than 160 bytes, no U+0000);
 *  - confine_lacks says the entry lacks confinement exactly when it was
 *    not reported, or its Landlock, seccomp or no_new_privs is missing;
 *  - an entry that reports reads back, as its canonical JSON, to itself. */
#include "fuzz.h"

#include "canon.h"
#include "confine.h"
#include "ndjson.h"

static const char *const stages[] = { "sfma", "sfma-plan", "sfma-model", "sfma-exec", "sfma-chain", "sfma-seal" };

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *stage = stages[data[0] % (sizeof stages / sizeof *stages)];
	json_t *e = confine_report_read((const char *)data + 1, size - 1, stage);
	FUZZ_CHECK(json_is_object(e), "not an object");
	const char *name = json_string_value(json_object_get(e, "stage"));
	size_t len = strlen(stage);
	FUZZ_CHECK(name && strncmp(name, stage, len) == 0 && (name[len] == '\0' || (name[len] == '/' && name[len + 1])),
	           "stage %s on %s's channel", name ? name : "(none)", stage);
	FUZZ_CHECK(strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-/") == strlen(name), "stage %s", name);
	json_t *reported = json_object_get(e, "reported"), *ll = json_object_get(e, "landlock"),
	       *sc = json_object_get(e, "seccomp"), *nnp = json_object_get(e, "noNewPrivs"),
	       *why = json_object_get(e, "why");
	if (why)
		FUZZ_CHECK(json_is_string(why) && json_string_length(why) < 160 &&
		           strlen(json_string_value(why)) == json_string_length(why), "why");
	const char *what;
	int lacks = confine_lacks(e, &what);
	if (reported) {
		FUZZ_CHECK(json_is_false(reported) && !ll && !sc && !nnp && why, "an unreported entry with more");
		FUZZ_CHECK(json_object_size(e) == 3, "members");
		FUZZ_CHECK(lacks, "an unreported entry that does not lack");
	} else {
		long long abi = 0;
		int abi_ok = (ndjson_integer(ll, &abi) && abi >= 1 && abi <= 255) || ndjson_string_is(ll, "unavailable");
		FUZZ_CHECK(abi_ok && json_is_boolean(sc) && json_is_boolean(nnp), "a report's members");
		FUZZ_CHECK(json_object_size(e) == 4 + (why != NULL), "members");
		FUZZ_CHECK(lacks == (abi == 0 || !json_is_true(sc) || !json_is_true(nnp)), "lacks %d", lacks);
		struct buf b = {0};
		FUZZ_CHECK(canon_dump(e, &b, NULL) == 0, "canonical form");
		json_t *again = confine_report_read(b.p, b.len, stage);
		FUZZ_CHECK(fuzz_json_same(e, again), "read back");
		json_decref(again);
		buf_free(&b);
	}
	json_decref(e);
	return 0;
}
