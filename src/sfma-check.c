/* sfma-check - what a run of a manifest would stumble on, before it
 * spends a token.
 *
 *   sfma-check MANIFEST       (sfma check MANIFEST)
 *
 * One line per problem on stdout, "error: ..." or "warning: ...": the
 * manifest's keys and values (the loader's own reasons, the same that make
 * a run TASK_INVALID), declared inputs missing from the workspace, the
 * credentials an endpoint needs that the environment lacks, and an
 * SFMA_MOCK that a run would trip over. The last line sums up. Exit 0 when
 * a run could start (warnings allowed), 1 when it would be refused or an
 * endpoint or input is missing, 2 on usage errors. Reads, never writes:
 * nothing on disk is created or changed. */
#include "beneath.h"
#include "cli.h"
#include "confine.h"
#include "credentials.h"
#include "errors.h"
#include "manifest.h"
#include "ndjson.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: sfma-check MANIFEST\n"
	"       sfma-check --version | --help\n"
	"  prints one line per problem a run of MANIFEST would meet; exit 1 if any is fatal\n";

static size_t errors, warnings;

static void say(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const char *level, const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	/* Names from the manifest and the environment are shown, never a
	 * control byte of theirs (one problem, one line). */
	for (char *c = text; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	printf("%s: %s\n", level, text);
	if (strcmp(level, "error") == 0)
		errors++;
	else
		warnings++;
}

/* Each declared input must be in the workspace, reached without leaving
 * it: a run stages only what is there (sfma-exec(1)), so a missing one
 * is a task the model cannot do. A workspace that does not exist yet is
 * fine without inputs (the run creates it). */
static void check_inputs(const struct manifest *m)
{
	if (m->n_inputs == 0)
		return;
	int ws = open(m->workspace_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ws < 0) {
		say("error", "workspace %s: %s: none of its %zu declared inputs can be there", m->workspace_path,
		    strerror(errno), m->n_inputs);
		return;
	}
	for (size_t i = 0; i < m->n_inputs; i++) {
		int fd = open_beneath(ws, m->inputs[i], O_PATH, 0);
		if (fd >= 0) {
			close(fd);
		} else if (errno == EXDEV || errno == ELOOP) {
			say("error", "input %s: escapes the workspace via link (it would not be staged)", m->inputs[i]);
		} else {
			say("error", "input %s: not in the workspace %s (%s)", m->inputs[i], m->workspace_path,
			    strerror(errno));
		}
	}
	close(ws);
}

/* Every endpoint's credentials, as sfma-model reads them. */
static void check_credentials(const struct manifest *m)
{
	for (size_t i = 0; i < m->n_endpoints; i++) {
		const struct endpoint_cfg *ep = &m->endpoints[i];
		const char *vars[CREDENTIAL_VARS_MAX];
		size_t n = endpoint_credential_vars(ep, vars);
		for (size_t k = 0; k < n; k++) {
			const char *v = getenv(vars[k]);
			if (!v || !*v)
				say("error", "endpoint %.64s (%s): %.64s is not set", ep->name, ep->provider, vars[k]);
		}
	}
}

/* SFMA_MOCK, when a mock endpoint will read it (sfma-model(1), MOCK). */
static void check_mock(const struct manifest *m)
{
	const char *env = getenv("SFMA_MOCK");
	int has_mock = 0;
	for (size_t i = 0; i < m->n_endpoints; i++)
		has_mock |= strcmp(m->endpoints[i].provider, "mock") == 0;
	if (!env || !has_mock)
		return;
	struct sfma_err e;
	json_t *v = ndjson_parse(env, strlen(env), &e);
	if (!v) {
		say("error", "SFMA_MOCK: %s", e.text);
		return;
	}
	if (json_is_object(v) && !json_object_get(v, "judge"))
		say("warning", "SFMA_MOCK is an object without a \"judge\" queue: every task's judgment will be "
		    "invalid; add \"judge\":[...]");
	else if (!json_is_object(v) && !json_is_array(v))
		say("error", "SFMA_MOCK: must be a JSON array of replies or an object {\"bootstrap\",\"tasks\",\"judge\"}");
	json_decref(v);
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	static const struct option longopts[] = {
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	opterr = 0;
	int opt;
	while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'V':
			cli_version();
		case 'h':
			cli_help(usage_text);
		default:
			cli_bad_option(usage_text, opt, argv);
		}
	}
	if (optind == argc)
		cli_usage_error(usage_text, "missing MANIFEST");
	if (argc - optind > 1)
		cli_usage_error(usage_text, "unexpected argument: %s", argv[optind + 1]);
	const char *path = argv[optind];

	struct reasons why = {0};
	struct manifest *m = manifest_load(path, &why);
	for (size_t i = 0; i < why.n; i++)
		say("error", "%s", why.items[i]);
	reasons_free(&why);
	/* Read-only, on the workspace only, from here on (sfma(1),
	 * CONFINEMENT). */
	const char *const reads[] = { m ? m->workspace_path : NULL, NULL };
	confine_self("sfma-check", reads, NULL);
	if (m) {
		check_inputs(m);
		check_credentials(m);
		check_mock(m);
	}
	if (!m)
		printf("%s: refused: a run would be TASK_INVALID (%zu error%s)\n", path, errors, errors == 1 ? "" : "s");
	else if (errors || warnings)
		printf("%s: %zu error%s, %zu warning%s\n", path, errors, errors == 1 ? "" : "s", warnings,
		       warnings == 1 ? "" : "s");
	else
		printf("%s: ok\n", path);
	manifest_free(m);
	if (fflush(stdout) != 0)
		die("write: %s", strerror(errno));
	return errors ? 1 : 0;
}
