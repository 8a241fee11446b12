/* record.h - the result record's integrity commitments (sfma-formats(5)). */
#ifndef SFMA_RECORD_H
#define SFMA_RECORD_H

#include <jansson.h>

#include "errors.h"

#define RECORD_ALGORITHM "sha256-chain-v1"
#define RECORD_TRACE ".sfma/trace.jsonl"
#define RECORD_MAX_BYTES (64u << 20)

/* manifestSha256 and resultSha256 of a record, ignoring any `integrity`
 * member of it: SHA-256 of the canonical manifest and of the canonical
 * record without `integrity`. 0, or -1 (e filled). */
int record_digests(json_t *record, char manifest_hex[65], char result_hex[65], struct sfma_err *e);

/* 0 if integrity has exactly the shape sfma-formats(5) gives it: the
 * members of the table in record.c and no other, each required one
 * present and of its type, fixed values exactly as they must be (compared
 * as whole JSON strings), treeSize and merkleRoot both or neither, and a
 * signature, when present, of its own fixed shape. Else -1 with e naming the member ("integrity.signature:
 * unexpected member \"x\"", "integrity.entries is missing or not a
 * count"). What the values commit to is the verifier's to check. */
int record_integrity_shape(const json_t *integrity, struct sfma_err *e);

/* 1 if entry can be the first a run appends: the clock-anchor a run opens
 * with, or a `result` entry written before it: {"interrupted":{...}} (an
 * interrupted run recorded) or {"error":"torn-write-recovered",...}. Entries after a record's sealed prefix
 * that begin otherwise are not the tail of an interrupted run. */
int record_begins_run(const json_t *entry);

#endif
