/* interrupted.c - a run that died before it sealed, recorded by the next one.
 *
 * A run appends to the trace as it goes and seals at its end. Killed in
 * between (the planner, or sfma-seal, or the machine), it leaves entries
 * after the head the last result record sealed. The next run says so in
 * the trace before it opens its own: one `result` entry
 *
 *   {"interrupted":{"afterSeq","entries","firstSeq","lastSeq","headHash"}}
 *
 * referring to the first and last unsealed entries, so that its record,
 * which covers the whole trace again, covers them as what they are. A torn
 * final line (a write cut short) is not extended: the run stops and tells
 * the operator how to recover it. */
#include "plan.h"
#include "chain.h"
#include "errors.h"
#include "record.h"
#include "sha.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The prefix the last record sealed: its entry count and head. No record
 * yet: the empty prefix. Returns 0, or -1 when there is a record that does
 * not say (warned: nothing is recorded then). */
static int sealed_prefix(const char *sfma_dir, uint64_t *entries, char head[65])
{
	char path[4200];
	struct sfma_err e;
	snprintf(path, sizeof path, "%s/result.json", sfma_dir);
	*entries = 0;
	strcpy(head, CHAIN_ZERO_HASH);
	if (access(path, F_OK) < 0 && errno == ENOENT)
		return 0;
	json_t *record = ndjson_load(path, RECORD_MAX_BYTES, &e);
	json_t *integrity = json_object_get(record, "integrity");
	json_t *h = json_object_get(integrity, "headHash");
	long long n;
	if (!record || !json_is_string(h) || !is_sha256_hex(json_string_value(h), json_string_length(h)) ||
	    !ndjson_integer(json_object_get(integrity, "entries"), &n) || n < 0) {
		warning("%s: %s; entries after it are not recorded as an interrupted run", path,
		      record ? "no integrity.entries and headHash" : e.text);
		json_decref(record);
		return -1;
	}
	*entries = (uint64_t)n;
	memcpy(head, json_string_value(h), 65);
	json_decref(record);
	return 0;
}

static json_t *seq_of(json_t *entry)
{
	json_t *seq = json_object_get(entry, "seq");
	return json_is_number(seq) ? json_real(json_number_value(seq)) : json_null();
}

json_t *interrupted_event(const char *sfma_dir, uint64_t *entries, int *torn, struct sfma_err *err)
{
	*entries = 0;
	char tpath[4200], head[65];
	struct sfma_err e;
	*torn = 0;
	snprintf(tpath, sizeof tpath, "%s/trace.jsonl", sfma_dir);
	int fd = open(tpath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		return NULL; /* no trace yet; anything stranger is sfma-chain's to refuse */
	}
	uint64_t sealed;
	if (sealed_prefix(sfma_dir, &sealed, head) < 0) {
		close(fd);
		return NULL;
	}
	struct chain_opts opts = {.mark_set = 1, .mark_count = sealed};
	struct chain_summary sum;
	char note[4200];
	int noted;
	snprintf(note, sizeof note, "%s/%s", sfma_dir, CHAIN_HEAD_CACHE);
	if (chain_verify_cached(fd, note, &opts, &sum, &noted, NULL, &e) < 0) {
		/* sfma-chain refuses to extend a torn line too; say here what the
		 * operator must do. Any other break is reported by sfma-chain as
		 * it refuses the first append. */
		if (sum.torn) {
			*torn = 1;
			err_set(err, "failed hash-chain verification: %.160s: a write was cut short; recover it with "
			        "`sfma-chain --recover-torn %.300s`, then run again", e.text, tpath);
		}
		close(fd);
		return NULL;
	}
	if (!sum.mark_found || strcmp(sum.mark_head, head) != 0) {
		warning("%s/result.json does not seal a prefix of %s; entries after it are not recorded as an "
		      "interrupted run", sfma_dir, tpath);
		close(fd);
		return NULL;
	}
	if (sum.entries == sealed) {
		close(fd);
		return NULL;
	}
	json_t *first = chain_entry_at(fd, sum.mark_offset, 0, &e);
	json_t *last = first ? chain_entry_at(fd, sum.last_offset, 0, &e) : NULL;
	close(fd);
	if (!last) {
		warning("%s: %s", tpath, e.text);
		json_decref(first);
		return NULL;
	}
	uint64_t n = sum.entries - sealed;
	json_t *data = json_pack("{s:{s:f, s:I, s:o, s:o, s:s}}", "interrupted", "afterSeq", sum.mark_seq,
	                         "entries", (json_int_t)n, "firstSeq", seq_of(first), "lastSeq", seq_of(last),
	                         "headHash", head);
	json_t *refs = json_array();
	const char *first_id = json_string_value(json_object_get(first, "id"));
	const char *last_id = json_string_value(json_object_get(last, "id"));
	if (first_id)
		json_array_append_new(refs, json_string(first_id));
	if (last_id && n > 1)
		json_array_append_new(refs, json_string(last_id));
	json_decref(first);
	json_decref(last);
	*entries = n;
	return json_pack("{s:s, s:o, s:i, s:o}", "kind", "result", "data", data, "loop", 0, "refs", refs);
}
