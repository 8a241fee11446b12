/* fuzz_gitref.c - the memory store's refs as found on disk (lib/gitsafe.c:
 * gitsafe_ref_parse for HEAD and loose refs, gitsafe_refname_ok,
 * gitsafe_packed_refs_check), with git itself as the reference.
 *
 * Input byte 0 picks what the rest is:
 *  0: a ref file (HEAD, refs/...): GITSAFE_REF_OID is the text (one
 *     trailing newline aside) and 40 or 64 lowercase hex digits; SYMBOLIC
 *     is "ref: " and its target, which `git check-ref-format` takes and
 *     which holds only letters, digits and . _ - /;
 *  1: a ref name: gitsafe_refname_ok agrees with `git check-ref-format`
 *     both ways (names under refs/ without NUL), and strict implies loose;
 *  2: a packed-refs file: a refusal is one line; an accepted file is made
 *     of the lines it allows, each ref name one git takes.
 * None of them may crash, whatever the bytes. */
#include "fuzz.h"

#include "gitsafe.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_need_git("fuzz_gitref");
	return 0;
}

/* git check-ref-format NAME (len bytes, no NUL): 1 when git takes it. */
static int git_takes(const char *name, size_t len)
{
	char *copy = fuzz_strndup((const uint8_t *)name, len);
	char *const args[] = {"git", "check-ref-format", copy, NULL};
	char *out;
	size_t out_len;
	int status = fuzz_git(args, &out, &out_len);
	free(out);
	free(copy);
	return status == 0;
}

static int is_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

static void ref_file(const char *text, size_t n)
{
	char target[300];
	enum gitsafe_ref kind = gitsafe_ref_parse(text, n, target, sizeof target);
	size_t body = n && text[n - 1] == '\n' ? n - 1 : n;
	if (kind == GITSAFE_REF_OID) {
		FUZZ_CHECK((body == 40 || body == 64) && is_hex(text, body), "an id that is not one: %.*s", (int)n, text);
		FUZZ_CHECK(strlen(target) == body && memcmp(target, text, body) == 0, "the id copied wrong");
	} else if (kind == GITSAFE_REF_SYMBOLIC) {
		size_t t = strlen(target);
		FUZZ_CHECK(body == t + 5 && memcmp(text, "ref: ", 5) == 0 && memcmp(text + 5, target, t) == 0,
		           "target %s is not what the file says", target);
		for (size_t i = 0; i < t; i++)
			FUZZ_CHECK((target[i] >= 'a' && target[i] <= 'z') || (target[i] >= 'A' && target[i] <= 'Z') ||
			           (target[i] >= '0' && target[i] <= '9') || strchr("._-/", target[i]),
			           "target %s holds 0x%02x", target, (unsigned char)target[i]);
		FUZZ_CHECK(git_takes(target, t), "git check-ref-format refuses target %s", target);
	} else {
		FUZZ_CHECK(kind == GITSAFE_REF_BAD, "unknown kind %d", (int)kind);
	}
	/* a buffer too small for the target is never overrun: BAD instead */
	char small[8];
	kind = gitsafe_ref_parse(text, n, small, sizeof small);
	FUZZ_CHECK(kind == GITSAFE_REF_BAD || strlen(small) < sizeof small, "small target overrun");
}

static void ref_name(const char *name, size_t n)
{
	int loose = gitsafe_refname_ok(name, n, 0), strict = gitsafe_refname_ok(name, n, 1);
	FUZZ_CHECK(!strict || loose, "strict takes %.*s, loose does not", (int)n, name);
	if (n < 5 || n > 255 || memcmp(name, "refs/", 5) != 0 || memchr(name, '\0', n))
		return;
	int git = git_takes(name, n);
	FUZZ_CHECK(loose == git, "%.*s: gitsafe says %d, git check-ref-format says %d", (int)n, name, loose, git);
}

static void packed_refs(const char *text, size_t n)
{
	struct sfma_err e = {{0}};
	if (gitsafe_packed_refs_check(text, n, &e) < 0) {
		FUZZ_CHECK(e.text[0] && !strchr(e.text, '\n'), "refused without a one-line reason");
		return;
	}
	int line = 0;
	for (size_t at = 0; at < n; line++) {
		const char *s = text + at, *nl = memchr(s, '\n', n - at);
		FUZZ_CHECK(nl, "an accepted line without its end");
		size_t len = (size_t)(nl - s);
		at += len + 1;
		if (line == 0 && len >= 17 && memcmp(s, "# pack-refs with:", 17) == 0)
			continue;
		if (len && s[0] == '^') {
			FUZZ_CHECK(line > 0 && (len == 41 || len == 65) && is_hex(s + 1, len - 1), "a peeled line that is not");
			continue;
		}
		size_t hex = len > 41 && s[40] == ' ' ? 40 : 64;
		FUZZ_CHECK(len > hex + 1 && is_hex(s, hex) && s[hex] == ' ', "a ref line without its id");
		if (!memchr(s + hex + 1, '\0', len - hex - 1))
			FUZZ_CHECK(git_takes(s + hex + 1, len - hex - 1), "git refuses packed ref %.*s",
			           (int)(len - hex - 1), s + hex + 1);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	/* a copy of exactly the rest: reads past it are caught */
	char *rest = malloc(size - 1 ? size - 1 : 1);
	if (!rest)
		abort();
	memcpy(rest, data + 1, size - 1);
	switch (data[0] % 3) {
	case 0:
		ref_file(rest, size - 1);
		break;
	case 1:
		ref_name(rest, size - 1);
		break;
	default:
		packed_refs(rest, size - 1);
		break;
	}
	free(rest);
	return 0;
}
