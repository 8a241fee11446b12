/* credentials.c - which environment variables an endpoint's credentials
 * come from: the same rules as sfma-model's (src/sfma-model/grid.c). */
#include "credentials.h"

#include <string.h>

static const char *provider_key_var(const char *provider)
{
	static const struct { const char *provider, *var; } keys[] = {
		{"anthropic", "ANTHROPIC_API_KEY"}, {"openai", "OPENAI_API_KEY"},
		{"gemini", "GEMINI_API_KEY"}, {"codex", "OPENAI_CODEX_TOKEN"},
	};
	for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
		if (strcmp(provider, keys[i].provider) == 0)
			return keys[i].var;
	return NULL;
}

size_t endpoint_credential_vars(const struct endpoint_cfg *ep, const char *names[CREDENTIAL_VARS_MAX])
{
	size_t n = 0;
	if (strcmp(ep->provider, "mock") == 0)
		return 0;
	if (ep->auth) {
		/* The manifest loader has checked both are non-empty strings. */
		names[n++] = json_string_value(json_object_get(ep->auth, "clientIdEnv"));
		names[n++] = json_string_value(json_object_get(ep->auth, "clientSecretEnv"));
	} else if (provider_key_var(ep->provider)) {
		names[n++] = provider_key_var(ep->provider);
	}
	if (strcmp(ep->provider, "codex") == 0)
		names[n++] = "OPENAI_CODEX_ACCOUNT";
	return n;
}
