/* curl-load.c - libcurl through dlopen(3), once, on first need.
 *
 * Loaded lazily (pthread_once from the request's own thread) rather than
 * before dispatch on the reading thread: only an attempt at a non-mock
 * endpoint loads it, so a mock endpoint first in the ranking with HTTP
 * ones behind it loads nothing unless the mock fails over; the few
 * milliseconds of the load are spent by the request that needs them, and
 * threads that arrive meanwhile wait in pthread_once for its result.
 * curl_global_init is part of the load: it runs before any handle exists
 * and exactly once, as curl_global_init(3) asks (before libcurl 7.84 it is
 * not thread-safe, and no other libcurl call may run beside it). */
#include "curl-load.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* The SONAME the linker records for -lcurl, read from the development
 * library by the Makefile; libcurl.so.4 is the ABI name libcurl has kept
 * since 7.16 (Debian's libcurl4, whichever TLS flavour) for a build that
 * could not read it. */
#ifndef SFMA_CURL_SONAME
#define SFMA_CURL_SONAME "libcurl.so.4"
#endif

struct libcurl_api libcurl;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded;                       /* written in load only */
static char load_error[SFMA_ERR_MAX];

/* Resolve name into *slot; 0, or -1 with load_error set. */
static int resolve(void *lib, const char *name, void *slot)
{
	void *fn = dlsym(lib, name);
	if (!fn) {
		snprintf(load_error, sizeof load_error, "%s", dlerror()); /* "<path>: undefined symbol: <name>" */
		return -1;
	}
	/* POSIX dlsym(3): a function's address comes back as a void * that
	 * converts to the function pointer type. */
	memcpy(slot, &fn, sizeof fn);
	return 0;
}

static void load(void)
{
	/* RTLD_NOW: an incomplete library fails here, not mid-request;
	 * RTLD_LOCAL: its symbols stay out of everyone else's lookups. */
	void *lib = dlopen(SFMA_CURL_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(load_error, sizeof load_error, "%s", dlerror());
		return;
	}
	struct libcurl_api api;
	int bad = resolve(lib, "curl_global_init", &api.global_init) < 0 ||
	          resolve(lib, "curl_global_cleanup", &api.global_cleanup) < 0 ||
	          resolve(lib, "curl_easy_init", &api.easy_init) < 0 ||
	          resolve(lib, "curl_easy_cleanup", &api.easy_cleanup) < 0 ||
	          resolve(lib, "curl_easy_reset", &api.easy_reset) < 0 ||
	          resolve(lib, "curl_easy_setopt", &api.easy_setopt) < 0 ||
	          resolve(lib, "curl_easy_perform", &api.easy_perform) < 0 ||
	          resolve(lib, "curl_easy_getinfo", &api.easy_getinfo) < 0 ||
	          resolve(lib, "curl_easy_strerror", &api.easy_strerror) < 0 ||
	          resolve(lib, "curl_easy_escape", &api.easy_escape) < 0 ||
	          resolve(lib, "curl_free", &api.free) < 0 ||
	          resolve(lib, "curl_getdate", &api.getdate) < 0 ||
	          resolve(lib, "curl_slist_append", &api.slist_append) < 0 ||
	          resolve(lib, "curl_slist_free_all", &api.slist_free_all) < 0;
	if (!bad && api.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		snprintf(load_error, sizeof load_error, "%s: curl_global_init failed", SFMA_CURL_SONAME);
		bad = 1;
	}
	if (bad) {
		dlclose(lib);
		return;
	}
	libcurl = api;
	loaded = 1;
	/* The library stays mapped to the end, as a linked one would: a
	 * dependency that registered an exit handler (OpenSSL's libcrypto
	 * does, with atexit(3)) must still find its code at exit. */
}

/* Said once on stderr: every attempt at an HTTP endpoint fails the same
 * way from now on, each reply saying why. */
static void load_now(void)
{
	load();
	if (!loaded)
		warning("%s: only mock endpoints can answer", load_error);
}

int curl_load(struct sfma_err *e)
{
	pthread_once(&load_once, load_now);
	return loaded ? 0 : err_set(e, "%s", load_error);
}

void curl_unload(void)
{
	if (loaded)
		libcurl.global_cleanup();
}
