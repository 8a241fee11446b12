/* fuzz_sha.c - sha256_many (lib/sha_many.c), which hashes many messages
 * at once (sixteen in the lanes of AVX-512 registers where the processor
 * has them), against libcrypto's SHA-256 of each message.
 *
 * Input: byte 0 gives the number of jobs (1 + its value), then each job
 * takes 12 bytes: for each of its three parts an offset and a length, two
 * bytes each, little-endian, into the input itself (cut to fit). Every
 * digest must be libcrypto's, in a batch and for each job alone, whatever
 * the lengths (the padding's edges at 55, 56 and 64 bytes, parts of
 * length 0) and however many jobs (fewer than the lanes, more, one lane
 * refilled many times). */
#include "fuzz.h"

#include "lib/sha.h"

#define MAX_JOBS 256

static size_t field(const uint8_t *data, size_t size, size_t at)
{
	return at + 1 < size ? (size_t)data[at] | (size_t)data[at + 1] << 8 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	size_t n = (size_t)data[0] + 1;
	static struct sha256_job jobs[MAX_JOBS];
	static unsigned char got[MAX_JOBS][32], alone[32], want[32];
	for (size_t i = 0; i < n; i++) {
		for (int k = 0; k < SHA256_JOB_PARTS; k++) {
			size_t at = 1 + 12 * i + 4 * (size_t)k;
			size_t off = field(data, size, at) % (size + 1);
			size_t len = field(data, size, at + 2) % (size - off + 1);
			jobs[i].part[k] = len ? data + off : NULL;
			jobs[i].len[k] = len;
		}
		jobs[i].md = got[i];
	}
	sha256_many(jobs, n);
	for (size_t i = 0; i < n; i++) {
		struct sha256 s;
		sha256_init(&s);
		for (int k = 0; k < SHA256_JOB_PARTS; k++)
			if (jobs[i].len[k])
				sha256_update(&s, jobs[i].part[k], jobs[i].len[k]);
		sha256_final(&s, want);
		FUZZ_CHECK(memcmp(got[i], want, 32) == 0, "job %zu of %zu (parts of %zu, %zu, %zu bytes): digest differs",
		           i, n, jobs[i].len[0], jobs[i].len[1], jobs[i].len[2]);
		struct sha256_job one = jobs[i];
		one.md = alone;
		sha256_many(&one, 1);
		FUZZ_CHECK(memcmp(alone, want, 32) == 0, "job %zu alone: digest differs", i);
	}
	return 0;
}
