/* cli.c - --version, --help and usage errors, the same in every program. */
#include "cli.h"
#include "errors.h"
#include "manifest.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sfma_version(void)
{
	return SFMA_VERSION;
}

void cli_version(void)
{
	printf("%s %s\n", progname(), SFMA_VERSION);
	exit(fflush(stdout) == 0 ? 0 : 1);
}

void cli_help(const char *usage)
{
	fputs(usage, stdout);
	exit(fflush(stdout) == 0 ? 0 : 1);
}

void cli_usage_error(const char *usage, const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: %s\n%s", progname(), text, usage);
	exit(2);
}

void cli_bad_option(const char *usage, int c, char **argv)
{
	/* getopt_long leaves optind past the offending word, except inside a
	 * cluster of short options (-xq) it has not finished. optopt holds the
	 * short option, 0 for an unknown long one, and the option's val for a
	 * long one given a value it does not take or missing the one it needs:
	 * so a "--" word names the option unless a short cluster is pending. */
	const char *word = (optind > 0 && argv[optind - 1]) ? argv[optind - 1] : "?";
	const char *next = argv[optind > 0 ? optind : 0];
	int in_cluster = optopt && next && next[0] == '-' && next[1] && next[1] != '-' &&
	                 strchr(next + 1, optopt);
	if (strncmp(word, "--", 2) == 0 && word[2] && !in_cluster) {
		int len = (int)strcspn(word, "=");
		if (c == ':')
			cli_usage_error(usage, "option %.*s requires a value", len, word);
		if (optopt && word[len] == '=')
			cli_usage_error(usage, "option %.*s takes no value", len, word);
		cli_usage_error(usage, "unknown option %.*s", len, word);
	}
	if (!optopt)
		cli_usage_error(usage, "unknown option %s", word);
	if (c == ':')
		cli_usage_error(usage, "option -%c requires a value", optopt);
	cli_usage_error(usage, "unknown option -%c", optopt);
}

int cli_parse_ulong(const char *s, unsigned long min, unsigned long max, unsigned long *out)
{
	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

void cli_task_invalid(struct reasons *why)
{
	fputs("TASK_INVALID\n", stderr);
	for (size_t i = 0; i < why->n; i++)
		fprintf(stderr, "- %s\n", why->items[i]);
	reasons_free(why);
	exit(2);
}
