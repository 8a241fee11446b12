/* otelheaders.h - OTEL_EXPORTER_OTLP_HEADERS as the OpenTelemetry
 * specification defines it (protocol/exporter.md, "Specifying headers via
 * environment variables"): a list of key=value pairs in the format of the
 * W3C Baggage header content, "key1=value1,key2=value2", without
 * semicolon-delimited properties, every value a string. */
#ifndef SFMA_OTELHEADERS_H
#define SFMA_OTELHEADERS_H

#include <jansson.h>

#include "errors.h"

/* Parse s: each member, between commas, is optional whitespace, a key (an
 * HTTP token, RFC 9110 section 5.6.2), optional whitespace, "=", optional
 * whitespace, a value of W3C Baggage's baggage-octets with %XX escapes
 * (RFC 3986 percent-encoding), optional whitespace. Returns 0 with *out a
 * new array of [key, decoded value] pairs (empty for s empty or blank), or
 * -1 with e naming the member by its position and saying what is wrong -
 * never quoting a value, which may be a secret. A value that decodes to a
 * control character (it would end the header line) or a key naming a
 * header the exporter sets itself (Content-Type, Content-Length) is
 * refused. */
int otel_headers_parse(const char *s, json_t **out, struct sfma_err *e);

#endif
