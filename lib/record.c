/* record.c - digests shared by sfma-seal (which commits) and sfma-verify (which checks). */
#include "record.h"
#include "buf.h"
#include "canon.h"
#include "ndjson.h"
#include "sha.h"

#include <string.h>

int record_digests(json_t *record, char manifest_hex[65], char result_hex[65], struct sfma_err *e)
{
	json_t *manifest = json_object_get(record, "manifest");
	if (!json_is_object(manifest))
		return err_set(e, "record has no manifest object");
	struct buf b = {0};
	if (canon_dump(manifest, &b, e) < 0) {
		buf_free(&b);
		return -1;
	}
	sha256_hex(b.p, b.len, manifest_hex);
	buf_reset(&b);

	/* The result digest covers every member but `integrity`: dump a shallow
	 * copy without it, leaving the caller's record untouched. */
	json_t *body = json_copy(record);
	json_object_del(body, "integrity");
	int rc = canon_dump(body, &b, e);
	json_decref(body);
	if (rc == 0)
		sha256_hex(b.p, b.len, result_hex);
	buf_free(&b);
	return rc;
}

int record_begins_run(const json_t *entry)
{
	json_t *kind = json_object_get(entry, "kind");
	json_t *data = json_object_get(entry, "data");
	if (!json_is_object(data))
		return 0;
	if (json_string_is(kind, "clock-anchor"))
		return 1;
	return json_string_is(kind, "result") &&
	       (json_is_object(json_object_get(data, "interrupted")) ||
	        json_string_is(json_object_get(data, "error"), "torn-write-recovered"));
}
