/* fuzz_gitconfig.c - the memory store's configuration check (lib/gitsafe.c
 * gitsafe_config_check) over arbitrary bytes, as a repository's
 * .git/config, with git itself as the reference.
 *
 * Properties: it never crashes; a refusal is one non-empty line holding
 * "unsafe git configuration"; and whatever it accepts, git reads without
 * error (`git config --file F --no-includes --list --null`: the grammar
 * accepted is a part of git's) and lists only keys of GITSAFE_CONFIG_KEYS,
 * each with no value or a value of letters and digits - so no accepted
 * configuration names a command, a file or another repository for git. */
#include "fuzz.h"

#include "gitsafe.h"

#include <fcntl.h>

static char config_path[4096];

static void remove_config(void)
{
	unlink(config_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *tmp = getenv("TMPDIR");
	snprintf(config_path, sizeof config_path, "%s/fuzz-gitconfig.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	int fd = mkstemp(config_path);
	if (fd < 0) {
		dprintf(fuzz_report_fd, "fuzz_gitconfig: cannot make %s\n", config_path);
		abort();
	}
	close(fd);
	atexit(remove_config);
	fuzz_need_git("fuzz_gitconfig");
	return 0;
}

/* git config --list over the text: its exit status, its output in out. */
static int git_list(const uint8_t *data, size_t size, char **out, size_t *out_len)
{
	int fd = open(config_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
		fuzz_fail("cannot write %s", config_path);
	close(fd);
	char *const args[] = {"git", "config", "--file", config_path, "--no-includes", "--list", "--null", NULL};
	return fuzz_git(args, out, out_len);
}

static int safe_key(const char *key, size_t n)
{
	const char *list = GITSAFE_CONFIG_KEYS;
	while (*list) {
		size_t len = strcspn(list, ",");
		if (len == n && memcmp(list, key, n) == 0)
			return 1;
		list += len;
		while (*list == ',' || *list == ' ')
			list++;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sfma_err e = {{0}};
	int rc = gitsafe_config_check((const char *)data, size, &e);
	if (rc < 0) {
		FUZZ_CHECK(e.text[0], "refused without a reason");
		FUZZ_CHECK(strstr(e.text, "unsafe git configuration"), "reason without the phrase: %s", e.text);
		for (const char *c = e.text; *c; c++)
			FUZZ_CHECK((unsigned char)*c >= 0x20 && *c != 0x7f, "reason holds control character 0x%02x: %s",
			           (unsigned char)*c, e.text);
		return 0;
	}
	FUZZ_CHECK(rc == 0, "returned %d", rc);
	char *out;
	size_t out_len;
	int status = git_list(data, size, &out, &out_len);
	FUZZ_CHECK(status == 0, "accepted, but git cannot read it (status %d)", status);
	/* --null: each entry "<key>\n<value>" or "<key>" alone, ended by NUL */
	for (size_t at = 0; at < out_len;) {
		const char *entry = out + at;
		const char *end = memchr(entry, '\0', out_len - at);
		FUZZ_CHECK(end, "git's listing is not NUL-terminated");
		size_t n = (size_t)(end - entry);
		const char *nl = memchr(entry, '\n', n);
		size_t key_len = nl ? (size_t)(nl - entry) : n;
		FUZZ_CHECK(safe_key(entry, key_len), "accepted, but git reads key %.*s", (int)key_len, entry);
		for (const char *v = nl ? nl + 1 : end; v < end; v++)
			FUZZ_CHECK((*v >= 'a' && *v <= 'z') || (*v >= 'A' && *v <= 'Z') || (*v >= '0' && *v <= '9'),
			           "accepted, but git reads %.*s with value %.*s", (int)key_len, entry,
			           (int)(end - nl - 1), nl + 1);
		at += n + 1;
	}
	free(out);
	return 0;
}
