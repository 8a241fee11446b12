/* record.c - digests shared by sfma-seal (which commits) and sfma-verify (which checks). */
#include "record.h"
#include "buf.h"
#include "canon.h"
#include "ndjson.h"
#include "sha.h"

#include <stdio.h>
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

/* The shape of the integrity object (sfma-formats(5)). A member that is
 * not here is refused: the signature covers the integrity object but not
 * itself, and nothing at all covers an unsigned one, so a member nobody
 * checks would let a record be changed and still verify. A new
 * commitment is one line here. */
enum member_type { MEMBER_STRING, MEMBER_COUNT, MEMBER_OBJECT };

struct member_rule {
	const char *name;
	enum member_type type;
	int required;
	const char *value;                 /* MEMBER_STRING: the only value allowed, or NULL */
	const struct member_rule *members; /* MEMBER_OBJECT: its own shape */
};

static const struct member_rule signature_members[] = {
	{"algorithm", MEMBER_STRING, 1, "ed25519", NULL},
	{"publicKey", MEMBER_STRING, 1, NULL, NULL}, /* exactly one key: ed25519_public_from_exact_pem */
	{"value", MEMBER_STRING, 1, NULL, NULL},
	{NULL, 0, 0, NULL, NULL},
};

static const struct member_rule integrity_members[] = {
	{"algorithm", MEMBER_STRING, 1, RECORD_ALGORITHM, NULL},
	{"headHash", MEMBER_STRING, 1, NULL, NULL},
	{"entries", MEMBER_COUNT, 1, NULL, NULL},
	{"manifestSha256", MEMBER_STRING, 1, NULL, NULL},
	{"resultSha256", MEMBER_STRING, 1, NULL, NULL},
	/* The Merkle tree of the trace (sfma-formats(5)): in every record
	 * sfma 0.4 seals, absent from older ones; one without the other is
	 * refused by record_integrity_shape. */
	{"treeSize", MEMBER_COUNT, 0, NULL, NULL},
	{"merkleRoot", MEMBER_STRING, 0, NULL, NULL},
	{"signature", MEMBER_OBJECT, 0, NULL, signature_members},
	/* What the observer saw (sfma-formats(5), The observed chain): the
	 * head of .sfma/observed.jsonl when the run's part closed, its entry
	 * count, and the observer's own signature over the two. Absent from
	 * a record of a run with no observer. */
	{"observedHead", MEMBER_STRING, 0, NULL, NULL},
	{"observedEntries", MEMBER_COUNT, 0, NULL, NULL},
	{"observerSignature", MEMBER_OBJECT, 0, NULL, signature_members},
	{NULL, 0, 0, NULL, NULL},
};

/* A member name for a message: quoted and escaped as JSON, so that a
 * name holding a newline or U+0000 stays one readable line; a long one is
 * cut (at a character boundary) and marked. */
static void quote_name(const char *name, size_t n, char *out, size_t cap)
{
	struct buf b = {0};
	canon_string(name, n, &b);
	size_t len = b.len;
	if (len > cap - 1) {
		len = cap - 4;
		while (len > 0 && ((unsigned char)b.p[len] & 0xC0) == 0x80)
			len--;
		memcpy(out, b.p, len);
		memcpy(out + len, "...", 4);
	} else {
		memcpy(out, b.p, len + 1);
	}
	buf_free(&b);
}

static int check_shape(const json_t *obj, const char *where, const struct member_rule *rules,
                       struct sfma_err *e)
{
	for (void *it = json_object_iter((json_t *)obj); it; it = json_object_iter_next((json_t *)obj, it)) {
		const char *key = json_object_iter_key(it);
		size_t key_len = json_object_iter_key_len(it);
		const struct member_rule *r = rules;
		while (r->name && !(strlen(r->name) == key_len && memcmp(r->name, key, key_len) == 0))
			r++;
		if (!r->name) {
			char name[128];
			quote_name(key, key_len, name, sizeof name);
			return err_set(e, "%s: unexpected member %s", where, name);
		}
	}
	for (const struct member_rule *r = rules; r->name; r++) {
		json_t *v = json_object_get(obj, r->name);
		long long count;
		if (!v && !r->required)
			continue;
		switch (r->type) {
		case MEMBER_STRING:
			if (!json_is_string(v))
				return err_set(e, "%s.%s is missing or not a string", where, r->name);
			if (r->value && !ndjson_string_is(v, r->value))
				return err_set(e, "%s.%s is not %s", where, r->name, r->value);
			break;
		case MEMBER_COUNT:
			if (!ndjson_integer(v, &count) || count < 0)
				return err_set(e, "%s.%s is missing or not a count", where, r->name);
			break;
		case MEMBER_OBJECT: {
			char inner[64];
			if (!json_is_object(v))
				return err_set(e, "%s.%s is not an object", where, r->name);
			snprintf(inner, sizeof inner, "%s.%s", where, r->name);
			if (check_shape(v, inner, r->members, e) < 0)
				return -1;
			break;
		}
		}
	}
	return 0;
}

int record_integrity_shape(const json_t *integrity, struct sfma_err *e)
{
	if (!json_is_object(integrity))
		return err_set(e, "record has no integrity object");
	if (check_shape(integrity, "integrity", integrity_members, e) < 0)
		return -1;
	if (!json_object_get(integrity, "treeSize") != !json_object_get(integrity, "merkleRoot"))
		return err_set(e, "integrity.%s without integrity.%s", json_object_get(integrity, "treeSize") ?
		               "treeSize" : "merkleRoot", json_object_get(integrity, "treeSize") ? "merkleRoot" : "treeSize");
	if (!json_object_get(integrity, "observedHead") != !json_object_get(integrity, "observedEntries"))
		return err_set(e, "integrity.%s without integrity.%s", json_object_get(integrity, "observedHead") ?
		               "observedHead" : "observedEntries",
		               json_object_get(integrity, "observedHead") ? "observedEntries" : "observedHead");
	if (json_object_get(integrity, "observerSignature") && !json_object_get(integrity, "observedHead"))
		return err_set(e, "integrity.observerSignature without integrity.observedHead");
	return 0;
}

int record_begins_run(const json_t *entry)
{
	json_t *kind = json_object_get(entry, "kind");
	json_t *data = json_object_get(entry, "data");
	if (!json_is_object(data))
		return 0;
	if (ndjson_string_is(kind, "clock-anchor"))
		return 1;
	return ndjson_string_is(kind, "result") &&
	       (json_is_object(json_object_get(data, "interrupted")) ||
	        ndjson_string_is(json_object_get(data, "error"), "torn-write-recovered"));
}
