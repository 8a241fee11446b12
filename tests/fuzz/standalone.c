/* standalone.c - run a fuzz harness over saved inputs without libFuzzer,
 * so that `make check` replays every regression input with the C compiler
 * the programs are built with (no clang needed): each argument that is
 * not a libFuzzer flag (-name=value) is a file fed once to
 * LLVMFuzzerTestOneInput. A broken property aborts, as under libFuzzer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

int main(int argc, char **argv)
{
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		if (argv[i][0] == '-')
			continue;
		FILE *f = fopen(argv[i], "rb");
		if (!f) {
			fprintf(stderr, "standalone: %s: cannot open\n", argv[i]);
			return 1;
		}
		size_t cap = 1 << 16, n = 0;
		uint8_t *data = malloc(cap);
		size_t got;
		while (data && (got = fread(data + n, 1, cap - n, f)) > 0) {
			n += got;
			if (n == cap)
				data = realloc(data, cap *= 2);
		}
		fclose(f);
		if (!data) {
			fprintf(stderr, "standalone: out of memory\n");
			return 1;
		}
		/* A copy of exactly the input's size: a read past it is caught. */
		uint8_t *exact = malloc(n ? n : 1);
		memcpy(exact, data, n);
		free(data);
		LLVMFuzzerTestOneInput(exact, n);
		free(exact);
	}
	return 0;
}
