/* curl-load.h - libcurl, loaded with dlopen(3) when the first request
 * needs HTTP: a run that only talks to the mock never maps it (nor the
 * thirty-odd libraries it pulls in, whose constructors would run at
 * start-up). Every libcurl function sfma-model calls is reached through
 * the table below; its entries have the types <curl/curl.h> declares. */
#ifndef SFMA_CURL_LOAD_H
#define SFMA_CURL_LOAD_H

#include <curl/curl.h>

#include "errors.h"

struct libcurl_api {
	__typeof__(curl_global_init) *global_init;
	__typeof__(curl_global_cleanup) *global_cleanup;
	__typeof__(curl_easy_init) *easy_init;
	__typeof__(curl_easy_cleanup) *easy_cleanup;
	__typeof__(curl_easy_reset) *easy_reset;
	__typeof__(curl_easy_setopt) *easy_setopt;
	__typeof__(curl_easy_perform) *easy_perform;
	__typeof__(curl_easy_getinfo) *easy_getinfo;
	__typeof__(curl_easy_strerror) *easy_strerror;
	__typeof__(curl_easy_escape) *easy_escape;
	__typeof__(curl_free) *free;
	__typeof__(curl_getdate) *getdate;
	__typeof__(curl_slist_append) *slist_append;
	__typeof__(curl_slist_free_all) *slist_free_all;
};

/* Filled by the first successful curl_load, never changed after: read it
 * only once curl_load has returned 0 (on this thread or before it). */
extern struct libcurl_api libcurl;

/* Load libcurl and curl_global_init it, the first time any thread asks
 * (pthread_once: the others wait for that one); the same answer every
 * later time. 0, or -1 with e filled ("libcurl.so.4: cannot open shared
 * object file: ..."). */
int curl_load(struct sfma_err *e);

/* At exit, once every request is done: curl_global_cleanup, when it was
 * loaded. */
void curl_unload(void);

#endif
