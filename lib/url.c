/* url.c - https everywhere, plain http only to loopback. */
#include "url.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* 127.0.0.0/8 written as a dotted quad: RFC 1122 section 3.2.1.3 reserves
 * the whole block for loopback. Anything unusual is not loopback. */
static int is_loopback_v4(const char *h, size_t n)
{
	int parts = 0;
	size_t i = 0;
	while (i < n) {
		size_t start = i;
		long v = 0;
		while (i < n && h[i] >= '0' && h[i] <= '9' && i - start < 3)
			v = v * 10 + (h[i++] - '0');
		if (i == start || v > 255 || (parts == 0 && v != 127))
			return 0;
		parts++;
		if (i < n && h[i] != '.')
			return 0;
		if (i < n)
			i++;
		if (i == n && h[n - 1] == '.')
			return 0;
	}
	return parts == 4;
}

int url_transport_ok(const char *url, struct sfma_err *e)
{
	if (!url)
		return err_set(e, "not a URL");
	if (strncasecmp(url, "https://", 8) == 0)
		return url[8] ? 0 : err_set(e, "not a URL (no host)");
	if (strncasecmp(url, "http://", 7) != 0)
		return err_set(e, "must be an https:// URL");
	const char *host = url + 7;
	size_t n = strcspn(host, "/?#");
	if (memchr(host, '@', n))
		return err_set(e, "must not carry user information");
	size_t hlen;
	if (host[0] == '[') {
		const char *close = memchr(host, ']', n);
		if (!close)
			return err_set(e, "not a URL (bad IPv6 host)");
		hlen = (size_t)(close - host) + 1;
	} else {
		hlen = strcspn(host, ":/?#");
	}
	int loopback = (hlen == 9 && strncasecmp(host, "localhost", 9) == 0) ||
	               (hlen == 5 && strncmp(host, "[::1]", 5) == 0) || is_loopback_v4(host, hlen);
	if (!loopback)
		return err_set(e, "must be https:// (plain http:// only to a loopback host: keys never travel in clear text)");
	return 0;
}

int url_port(const char *url)
{
	if (!url || !*url)
		return -1;
	int port = 1080; /* libcurl's default for a proxy written without a scheme */
	const char *host = strstr(url, "://");
	if (host) {
		size_t scheme = (size_t)(host - url);
		port = scheme == 5 && strncasecmp(url, "https", 5) == 0 ? 443
		       : scheme == 4 && strncasecmp(url, "http", 4) == 0 ? 80 : 1080;
		host += 3;
	} else {
		host = url;
	}
	size_t n = strcspn(host, "/?#");
	const char *at = memchr(host, '@', n);
	if (at) {
		n -= (size_t)(at + 1 - host);
		host = at + 1;
	}
	const char *colon = NULL;
	if (host[0] == '[') {
		const char *close = memchr(host, ']', n);
		if (!close)
			return -1;
		if ((size_t)(close - host) + 1 < n && close[1] == ':')
			colon = close + 1;
	} else {
		colon = memchr(host, ':', n);
	}
	if (!colon)
		return port;
	long v = 0;
	const char *p = colon + 1, *end = host + n;
	if (p == end)
		return port;
	for (; p < end; p++) {
		if (*p < '0' || *p > '9' || (v = v * 10 + (*p - '0')) > 65535)
			return -1;
	}
	return v > 0 ? (int)v : -1;
}

void url_proxy_ports(uint16_t *ports, size_t *n, size_t cap)
{
	static const char *const proxies[] = { "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", NULL };
	if (*n < cap)
		ports[(*n)++] = 53;
	for (const char *const *v = proxies; *v && *n < cap; v++) {
		int port = url_port(getenv(*v));
		if (port > 0)
			ports[(*n)++] = (uint16_t)port;
	}
}
