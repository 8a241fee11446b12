/* url.h - the one rule for where secrets may travel.
 *
 * Provider keys, OAuth secrets and bot tokens go out in headers, bodies or
 * paths: over the network that is only safe inside TLS. Plain http is
 * allowed to this machine alone (tests, a local proxy, a local model). */
#ifndef SFMA_URL_H
#define SFMA_URL_H

#include <stddef.h>
#include <stdint.h>
#include "errors.h"

/* 0 if url is https://..., or http:// to a loopback host (localhost,
 * 127.0.0.0/8, [::1]) with no user info; else -1 with the reason in e
 * (no URL text in it: the caller names the field). */
int url_transport_ok(const char *url, struct sfma_err *e);

/* The TCP port url names: its own, or its scheme's (https 443, http 80;
 * a proxy written without a scheme, 1080 as libcurl takes it); -1 when
 * it names none that can be read. */
int url_port(const char *url);

/* The ports a program that speaks HTTP through libcurl may have to
 * connect to besides its servers': 53 (a DNS answer too long for UDP is
 * asked again over TCP, RFC 7766) and each proxy's that the environment
 * names (HTTPS_PROXY, https_proxy, HTTP_PROXY, http_proxy). Appended to
 * ports from *n on, up to cap. */
void url_proxy_ports(uint16_t *ports, size_t *n, size_t cap);

#endif
