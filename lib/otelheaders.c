/* otelheaders.c - OTEL_EXPORTER_OTLP_HEADERS read as W3C Baggage. */
#include "otelheaders.h"
#include "buf.h"

#include <string.h>
#include <strings.h>

/* tchar of RFC 9110 section 5.6.2 */
static int tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* baggage-octet of the W3C Baggage specification: US-ASCII without
 * controls, whitespace, DQUOTE, comma, semicolon and backslash. */
static int baggage_octet(unsigned char c)
{
	return c == 0x21 || (c >= 0x23 && c <= 0x2b) || (c >= 0x2d && c <= 0x3a) || (c >= 0x3c && c <= 0x5b) ||
	       (c >= 0x5d && c <= 0x7e);
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int ows(unsigned char c)
{
	return c == ' ' || c == '\t';
}

/* One member m[0..n), the nth: appended to out as [key, value]. */
static int member(const char *m, size_t n, size_t nth, json_t *out, struct sfma_err *e)
{
	size_t i = 0, end = n;
	while (i < end && ows((unsigned char)m[i]))
		i++;
	while (end > i && ows((unsigned char)m[end - 1]))
		end--;
	if (i == end)
		return err_set(e, "entry %zu is empty", nth);
	size_t k0 = i;
	while (i < end && tchar((unsigned char)m[i]))
		i++;
	size_t k1 = i;
	while (i < end && ows((unsigned char)m[i]))
		i++;
	if (k1 == k0)
		return err_set(e, "entry %zu has no key (a key is letters, digits and !#$%%&'*+-.^_`|~)", nth);
	if (i == end || m[i] != '=')
		return err_set(e, "entry %zu is not key=value", nth);
	i++;
	while (i < end && ows((unsigned char)m[i]))
		i++;
	if ((k1 - k0 == 12 && strncasecmp(m + k0, "content-type", 12) == 0) ||
	    (k1 - k0 == 14 && strncasecmp(m + k0, "content-length", 14) == 0))
		return err_set(e, "entry %zu: %.*s is set by the exporter itself", nth, (int)(k1 - k0), m + k0);
	struct buf v = {0};
	for (; i < end; i++) {
		unsigned char c = (unsigned char)m[i];
		if (c == ';') {
			buf_free(&v);
			return err_set(e, "entry %zu: properties after ';' are not supported", nth);
		}
		if (c == '%') {
			int hi = i + 2 < end ? hexval((unsigned char)m[i + 1]) : -1;
			int lo = hi >= 0 ? hexval((unsigned char)m[i + 2]) : -1;
			if (lo < 0) {
				buf_free(&v);
				return err_set(e, "entry %zu: %% is not followed by two hex digits", nth);
			}
			c = (unsigned char)(hi << 4 | lo);
			i += 2;
			/* it would end the header line, or hide in it */
			if (c < 0x20 || c == 0x7f) {
				buf_free(&v);
				return err_set(e, "entry %zu: the value decodes to a control character", nth);
			}
			buf_addc(&v, (char)c);
			continue;
		}
		if (!baggage_octet(c)) {
			buf_free(&v);
			return err_set(e, "entry %zu: the value holds a character that must be percent-encoded "
			               "(a space is %%20, a comma %%2C)", nth);
		}
		buf_addc(&v, (char)c);
	}
	json_array_append_new(out, json_pack("[s%, s%]", m + k0, k1 - k0, v.p ? v.p : "", v.len));
	buf_free(&v);
	return 0;
}

int otel_headers_parse(const char *s, json_t **out, struct sfma_err *e)
{
	*out = json_array();
	size_t n = strlen(s), blank = 0;
	while (blank < n && ows((unsigned char)s[blank]))
		blank++;
	if (blank == n)
		return 0;
	size_t start = 0, nth = 1;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && s[i] != ',')
			continue;
		if (member(s + start, i - start, nth++, *out, e) < 0) {
			json_decref(*out);
			*out = NULL;
			return -1;
		}
		start = i + 1;
	}
	return 0;
}
