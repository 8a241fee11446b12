/* credentials.h - which environment variables an endpoint's credentials
 * come from (sfma-model(1), ENVIRONMENT). */
#ifndef SFMA_CREDENTIALS_H
#define SFMA_CREDENTIALS_H

#include <stddef.h>

#include "manifest.h"

#define CREDENTIAL_VARS_MAX 3

/* Fill names with the variables endpoint ep needs set (non-empty) to be
 * usable, and return how many (at most CREDENTIAL_VARS_MAX): none for
 * mock; the client id and secret variables its auth names, or else its
 * provider's key (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY,
 * OPENAI_CODEX_TOKEN); codex also OPENAI_CODEX_ACCOUNT. The names are
 * static or borrowed from the manifest. */
size_t endpoint_credential_vars(const struct endpoint_cfg *ep, const char *names[CREDENTIAL_VARS_MAX]);

#endif
