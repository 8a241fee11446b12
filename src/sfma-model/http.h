/* http.h - the pieces of http.c below http_post: the state of a
 * Server-Sent Events stream, the transfer callbacks' steps, and the wait
 * hint of a header line. Only http.c and the fuzz harness
 * (tests/fuzz/fuzz_providers.c) use them; the rest of sfma-model goes
 * through model.h. */
#ifndef SFMA_MODEL_HTTP_H
#define SFMA_MODEL_HTTP_H

#include "model.h"

/* What an SSE stream has told so far. */
struct sse {
	struct buf line;        /* the current, incomplete line */
	struct buf data;        /* data: lines of the current event */
	struct buf deltas;      /* response.output_text.delta, concatenated */
	struct buf completed;   /* output_text parts of response.completed */
	json_t *calls_done;     /* function_call items of response.output_item.done */
	json_t *calls_completed;/* function_call items of response.completed */
	json_t *usage;          /* response.completed's (or .incomplete's) response.usage */
	int saw_completed, bad_events;
	char status[STOP_WORD_MAX];     /* response.status of response.completed */
	char incomplete[STOP_WORD_MAX]; /* incomplete_details.reason of response.incomplete */
	int saw_incomplete;
	struct buf refusal;     /* response.refusal.delta, concatenated */
	struct buf refused;     /* refusal parts of the final response */
	int failed;             /* a response.failed or error event came */
	char failure[256];      /* its message */
	char code[64];          /* its error code, "" when none */
};

/* Where a response body goes as it arrives: all of it into body, or, with
 * an SSE parser, into the parser with only its head kept in body. */
struct sink {
	struct buf *body;
	struct sse *sse;
	size_t total;
	int too_big;
};

/* Keep this many leading bytes of a streamed body: enough for an error excerpt. */
#define STREAM_HEAD_KEEP 4096

/* Feed n bytes of the stream, cut anywhere, to s: each whole line (LF or
 * CRLF) is read as it completes, the rest kept for the next call. */
void sse_feed(struct sse *s, const char *p, size_t n);
/* The write callback (CURLOPT_WRITEFUNCTION) with a struct sink: returns
 * size * nmemb, or 0 (aborting the transfer, too_big set) once the body
 * would pass MODEL_BODY_MAX. */
size_t http_on_data(char *p, size_t size, size_t nmemb, void *userdata);
/* Fold one header line of n bytes (no NUL needed) into out's hints
 * (retry_after_ms, retry_ms_seen, should_retry); a status line starts them
 * over. */
void http_retry_hint(struct http_reply *out, const char *p, size_t n);

#endif
