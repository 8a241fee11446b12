/* traceparent.c - checking a W3C traceparent header value. */
#include "traceparent.h"

#include <string.h>

/* n lowercase hex digits at s, not all zeros when nonzero is set. */
static int hex_field(const char *s, size_t n, int nonzero)
{
	int any = 0;
	for (size_t i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
		any |= s[i] != '0';
	}
	return !nonzero || any;
}

int traceparent_valid(const char *s, const char **why)
{
	/* version "-" trace-id "-" parent-id "-" trace-flags: 2+1+32+1+16+1+2 */
	if (!s || strlen(s) != 55 || s[2] != '-' || s[35] != '-' || s[52] != '-')
		return *why = "not version-traceid-parentid-flags (55 characters)", 0;
	if (strncmp(s, "00", 2) != 0)
		return *why = "only version 00 is understood", 0;
	if (!hex_field(s + 3, 32, 1))
		return *why = "the trace-id is not 32 lowercase hex digits, not all zero", 0;
	if (!hex_field(s + 36, 16, 1))
		return *why = "the parent-id is not 16 lowercase hex digits, not all zero", 0;
	if (!hex_field(s + 53, 2, 0))
		return *why = "the trace-flags are not 2 lowercase hex digits", 0;
	return 1;
}
