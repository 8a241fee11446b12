/* parse-floor.c - the parse a replay built on Jansson cannot skip, for
 * tests/bench/replay.sh: every line of a trace read (lib/ndjson.c's line
 * reader) and parsed once, strictly, as sfma-replay parses it
 * (ndjson_parse: Jansson with duplicate keys refused, allocating through
 * xmalloc as every program does), then freed. No
 * canonical form, no hashing, no derivation: what is left of a replay
 * once everything but reading its entries into values is taken away.
 * Prints the lines and bytes parsed; the bench times the process.
 *
 *   parse-floor TRACE */
#include "errors.h"
#include "ndjson.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	if (argc != 2) {
		fprintf(stderr, "usage: parse-floor TRACE\n");
		return 2;
	}
	int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	struct line_reader lr;
	lr_init(&lr, fd, NDJSON_DEFAULT_MAX);
	size_t lines = 0, bytes = 0;
	char *line;
	size_t len;
	struct sfma_err e;
	int rc;
	while ((rc = lr_next(&lr, &line, &len, &e)) > 0) {
		json_t *v = ndjson_parse(line, len, &e);
		if (!v) {
			fprintf(stderr, "parse-floor: line %zu: %s\n", lines + 1, e.text);
			return 1;
		}
		json_decref(v);
		lines++;
		bytes += len + 1;
	}
	if (rc < 0) {
		fprintf(stderr, "parse-floor: %s\n", e.text);
		return 1;
	}
	lr_free(&lr);
	close(fd);
	printf("%zu lines, %zu bytes\n", lines, bytes);
	return 0;
}
