/* otlp.h - runs of a trace as OpenTelemetry spans: the OTLP/JSON mapping
 * of sfma-export(1), following the OpenTelemetry GenAI semantic
 * conventions of the version pinned below.
 *
 * A pure function of what it is handed: the trace's lines, run by run,
 * the workspace's record and, through a callback, evidence blobs. It
 * reads nothing itself and never prints. The trace is hostile input: a
 * line that is not an entry, a member of the wrong type or out of range
 * is left out, never an error, and the same input always maps to the same
 * bytes (attributes sorted, ids and times derived from the entries, the
 * canonical JSON of lib/canon.h). sfma-export(1) documents the mapping. */
#ifndef SFMA_OTLP_H
#define SFMA_OTLP_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "evidence.h"

/* The semantic conventions followed, exactly: v1.41.0 is the last
 * release of open-telemetry/semantic-conventions that defines the gen_ai
 * namespace itself (from v1.42.0 it moved to a repository of its own and
 * is deprecated there). Recorded on every resource (sfma.semconv.version)
 * and as the schemaUrl. */
#define OTLP_SEMCONV_VERSION "1.41.0"
#define OTLP_SCHEMA_URL "https://opentelemetry.io/schemas/1.41.0"
/* The instrumentation scope of every span. */
#define OTLP_SCOPE_NAME "sfma-export"
/* Evidence text exported per item with content, at most (then clipped at
 * a character boundary, saying how much was left out). */
#define OTLP_CONTENT_MAX (64u << 10)
/* A reply blob is read whole to find its native call ids, up to this. */
#define OTLP_REPLY_MAX (16u << 20)

/* How the mapping reads a blob: the first max bytes of the blob ref
 * names when it is there intact, as a malloc'd NUL-terminated buffer
 * with *len its length (less than ref->bytes when the blob is longer);
 * NULL when it is missing, altered or cannot be read. */
struct otlp_blobs {
	char *(*read)(void *arg, const struct evidence_ref *ref, size_t max, size_t *len);
	void *arg;
};

struct otlp_opts {
	int content;                   /* export evidence contents (--content) */
	const struct otlp_blobs *blobs; /* NULL: no evidence is read */
	const char *workspace;         /* the workspace as named (sfma.workspace); NULL: none */
	const char *version;           /* the exporter's version (the scope's); NULL: none */
};

struct otlp_ws;

/* Start mapping one workspace whose record is record (NULL: none; not
 * owned, must outlive the mapping). opts is copied; its strings and
 * blobs must outlive the mapping. Never fails. */
struct otlp_ws *otlp_ws_new(const json_t *record, const struct otlp_opts *opts);

/* Map one run: otlp_run_begin with its number (1-based), then each of its
 * lines in order with its 1-based line number in the trace (line NULL for
 * one that could not be read, e.g. longer than the reader's maximum),
 * then otlp_run_end, which returns 1 when the run became a trace and 0
 * when it was left out: a run with no clock anchor that holds a time has
 * no time to put on a span (OTLP's times are required). */
void otlp_run_begin(struct otlp_ws *w, long run_no);
void otlp_run_line(struct otlp_ws *w, const char *line, size_t len, uint64_t line_no);
int otlp_run_end(struct otlp_ws *w);

/* The workspace's ResourceSpans object, as OTLP/JSON (new reference):
 * one resource, one scope, the spans of every run mapped. *spans and
 * *traces (may be NULL) get the number of spans and of runs. Frees w. */
json_t *otlp_ws_finish(struct otlp_ws *w, size_t *spans, size_t *traces);

/* An ExportTraceServiceRequest {"resourceSpans":[...]} of the array
 * resource_spans, which it takes. */
json_t *otlp_request(json_t *resource_spans);

#endif
