/* cli.h - the command-line manners every sfma program shares.
 *
 * Every program parses with getopt_long (so `--opt VAL` and `--opt=VAL`
 * both work), answers --version and -h/--help on stdout with exit 0, and
 * reports usage errors on stderr as "<prog>: <what>" plus its usage text,
 * exit 2. These helpers print and exit: programs only, never the library. */
#ifndef SFMA_CLI_H
#define SFMA_CLI_H

#include <getopt.h>

#ifndef SFMA_VERSION
#define SFMA_VERSION "unknown"
#endif

/* The version every program and every result record reports. */
const char *sfma_version(void);

/* Print "<prog> <version>" on stdout and exit 0. */
_Noreturn void cli_version(void);

/* Print usage (the whole text, ending in a newline) on stdout and exit 0. */
_Noreturn void cli_help(const char *usage);

/* Print "<prog>: <fmt>" and then usage on stderr; exit 2. */
_Noreturn void cli_usage_error(const char *usage, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The error for what getopt_long returned as '?' or ':' (call it with
 * opterr = 0 and an optstring starting with ':'): names the option, never
 * the path the program was started by. Exits 2. */
_Noreturn void cli_bad_option(const char *usage, int c, char **argv);

/* Parse a whole decimal number in [min, max] from s; 0 on success, -1 on
 * anything else (empty, sign, trailing bytes, out of range). */
int cli_parse_ulong(const char *s, unsigned long min, unsigned long max, unsigned long *out);

struct reasons;
/* An invalid manifest, as sfma-manifest(5) fixes it: "TASK_INVALID"
 * then one "- reason" line per problem on stderr; frees why; exits 2. */
_Noreturn void cli_task_invalid(struct reasons *why);


#endif
