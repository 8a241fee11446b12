/* fuzz_hardtier.c - the hard tier (lib/hardtier.c, lib/beneath.c) over a workspace full of
 * links that stay inside, lead out, loop or dangle.
 *
 * Input byte 0 picks the gate, the rest is the path or command:
 *  0: path_open_read - an accepted path is an open regular file whose real
 *     location is inside the workspace;
 *  1, 2: path_gate_write (dry run, applied run) - an accepted path is a
 *     declared output outside .sfma, and where it really lands (its parent
 *     resolved through every link) is inside the workspace and is itself a
 *     declared output outside .sfma;
 *  3: command_gate - an accepted command holds no NUL and no shell
 *     metacharacter, runs an allowed basename, and a git command passes
 *     no global flag and no denied option;
 *  4: open_beneath (openat2 RESOLVE_BENEATH) against open_beneath_walk (the
 *     fallback for kernels without openat2) on a normalized relative path:
 *     both succeed or both fail, on the same file, inside the workspace.
 * Every refusal is one printable line. */
#include "fuzz.h"

#include <ftw.h>
#include <sys/stat.h>

#include "beneath.h"
#include "hardtier.h"

static char base[PATH_MAX];
static struct gate_ctx ctx;
static struct manifest *man;

static const char *const outputs[] = {
	"out/result.txt", "report.md", "link_out_dir/x", "link_sfma/y", "link_dir_in/new.c",
	"src/up/report.md", "new/dir/file", "out/to_sfma/z", "link_in", "src/main.c", "chain/file",
	"dotdot_out/x", NULL,
};

static const char *const allowed[] = {"ls", "cat", "git", "make", "echo", NULL};

static void must(int ok, const char *what)
{
	if (!ok) {
		perror(what);
		abort();
	}
}

/* base/rel into p; the scratch paths are short, a long one is a bug here. */
static void at_base(char p[PATH_MAX], const char *rel)
{
	int n = snprintf(p, PATH_MAX, "%s/%s", base, rel);
	must(n > 0 && n < PATH_MAX, rel);
}

static void put(const char *rel, const char *text)
{
	char p[PATH_MAX];
	at_base(p, rel);
	FILE *f = fopen(p, "w");
	must(f != NULL, p);
	fputs(text, f);
	fclose(f);
}

static void dir(const char *rel)
{
	char p[PATH_MAX];
	at_base(p, rel);
	must(mkdir(p, 0755) == 0, p);
}

static void link_(const char *target, const char *rel)
{
	char p[PATH_MAX];
	at_base(p, rel);
	must(symlink(target, p) == 0, p);
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static void cleanup(void)
{
	if (base[0])
		nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *tmp = getenv("TMPDIR");
	snprintf(base, sizeof base, "%s/sfma-fuzz-hardtier.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	must(mkdtemp(base) != NULL, "mkdtemp");
	atexit(cleanup);
	dir("outside");
	put("outside/secret.txt", "secret\n");
	dir("outside/dir");
	dir("ws");
	put("ws/a.txt", "a\n");
	dir("ws/src");
	put("ws/src/main.c", "int main(void) { return 0; }\n");
	dir("ws/src/sub");
	put("ws/src/sub/deep.txt", "deep\n");
	dir("ws/out");
	dir("ws/.sfma");
	put("ws/.sfma/trace.jsonl", "{}\n");
	link_("a.txt", "ws/link_in");
	link_("src", "ws/link_dir_in");
	link_("..", "ws/src/up");
	link_("../..", "ws/src/upup");
	link_("../outside/secret.txt", "ws/link_out");
	link_("../outside", "ws/link_out_dir");
	char abs[PATH_MAX + 32];
	snprintf(abs, sizeof abs, "%s/outside/secret.txt", base);
	link_(abs, "ws/link_abs");
	link_("/", "ws/link_root");
	link_("/proc/self/cwd", "ws/link_proc");
	link_("loop", "ws/loop");
	link_("loop_b", "ws/loop_a");
	link_("loop_a", "ws/loop_b");
	link_(".sfma", "ws/link_sfma");
	link_("../.sfma", "ws/out/to_sfma");
	link_("src/up/link_dir_in/up", "ws/chain");
	link_("nowhere", "ws/dangling");
	link_("src/../a.txt", "ws/dotdot_in");
	link_("src/../../outside", "ws/dotdot_out");
	link_("src/", "ws/dir_slash");
	link_("a.txt/", "ws/file_slash");
	char fifo[PATH_MAX + 32];
	snprintf(fifo, sizeof fifo, "%s/ws/fifo", base);
	must(mkfifo(fifo, 0644) == 0, "mkfifo");

	char ws[PATH_MAX + 8];
	snprintf(ws, sizeof ws, "%s/ws", base);
	json_t *outs = json_array(), *cmds = json_array();
	for (size_t i = 0; outputs[i]; i++)
		json_array_append_new(outs, json_string(outputs[i]));
	for (size_t i = 0; allowed[i]; i++)
		json_array_append_new(cmds, json_string(allowed[i]));
	json_t *doc = json_pack("{s:s,s:s,s:[{s:s,s:s,s:s}],s:o,s:[s,s],s:o,s:i,s:b}", "name", "fuzz",
	                        "workspace", ws, "modelEndpoints", "name", "m", "provider", "mock", "model", "m",
	                        "allowedCommands", cmds, "inputs", "src", "a.txt", "outputs", outs, "maxTurns", 1,
	                        "dryRunDefault", 1);
	struct reasons why = {0};
	man = manifest_from_json(doc, &why);
	must(man != NULL, why.n ? why.items[0] : "manifest");
	json_decref(doc);
	ctx.m = man;
	ctx.ws_fd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ctx.ws_real = realpath(ws, NULL);
	must(ctx.ws_fd >= 0 && ctx.ws_real, ws);
	return 0;
}

/* Where a real path is relative to the workspace: "" for the workspace
 * itself, NULL when outside (owned). */
static char *inside(const char *real)
{
	size_t wl = strlen(ctx.ws_real);
	if (strncmp(real, ctx.ws_real, wl) != 0 || (real[wl] && real[wl] != '/'))
		return NULL;
	return strdup(real[wl] ? real + wl + 1 : "");
}

static char *fd_inside(int fd)
{
	char link[64], real[PATH_MAX];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, real, sizeof real - 1);
	must(n >= 0, "readlink");
	real[n] = '\0';
	return inside(real);
}

static void check_reason(const char *r)
{
	FUZZ_CHECK(r && *r, "an empty refusal");
	size_t n = strlen(r);
	FUZZ_CHECK(n < REASON_PATH_MAX + 120, "a refusal of %zu bytes", n);
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK((unsigned char)r[i] >= 0x20 && r[i] != 0x7f, "a refusal holds 0x%02x", (unsigned char)r[i]);
}

static int reserved(const char *p)
{
	return strcmp(p, ".sfma") == 0 || strncmp(p, ".sfma/", 6) == 0;
}

static void gate_read(const char *p, size_t n)
{
	char *refusal, *error;
	int fd = path_open_read(&ctx, p, n, &refusal, &error);
	if (fd < 0) {
		FUZZ_CHECK(!refusal != !error, "read failed with refusal and error both set or both unset");
		check_reason(refusal ? refusal : error);
		free(refusal);
		free(error);
		return;
	}
	struct stat st;
	FUZZ_CHECK(fstat(fd, &st) == 0 && S_ISREG(st.st_mode), "read accepted a non-regular file");
	char *rel = fd_inside(fd);
	FUZZ_CHECK(rel != NULL, "read of %.*s opened a file outside the workspace", (int)n, p);
	free(rel);
	close(fd);
}

static void gate_write(const char *p, size_t n, int create)
{
	int dirfd;
	char *name, *refusal;
	if (path_gate_write(&ctx, p, n, create, &dirfd, &name, &refusal) < 0) {
		check_reason(refusal);
		free(refusal);
		return;
	}
	char *norm = path_normalize(p);
	FUZZ_CHECK(norm && strlen(p) == n, "write accepted a path that does not normalize");
	FUZZ_CHECK(manifest_is_output(man, norm) && !reserved(norm), "write accepted %s", norm);
	const char *slash = strrchr(norm, '/');
	const char *leaf = slash ? slash + 1 : norm;
	char *parent_rel = NULL;
	if (create) {
		FUZZ_CHECK(dirfd >= 0 && name && strcmp(name, leaf) == 0, "applied write: no parent or wrong name");
		parent_rel = fd_inside(dirfd);
		FUZZ_CHECK(parent_rel != NULL, "write of %s: parent outside the workspace", norm);
		close(dirfd);
		free(name);
	} else {
		FUZZ_CHECK(dirfd == -1 && !name, "dry-run write returned a directory");
		char parent[2 * PATH_MAX], real[PATH_MAX];
		snprintf(parent, sizeof parent, "%s/%.*s", ctx.ws_real, slash ? (int)(slash - norm) : 0, norm);
		if (realpath(parent, real)) {
			parent_rel = inside(real);
			FUZZ_CHECK(parent_rel != NULL, "write of %s: parent really at %s", norm, real);
		}
	}
	if (parent_rel) {
		char target[2 * PATH_MAX];
		snprintf(target, sizeof target, "%s%s%s", parent_rel, *parent_rel ? "/" : "", leaf);
		FUZZ_CHECK(manifest_is_output(man, target) && !reserved(target),
		           "write of %s really lands on %s", norm, target);
		free(parent_rel);
	}
	free(norm);
}

static void gate_command(const char *cmd, size_t n)
{
	char *refusal;
	char **argv = command_gate(man, cmd, n, &refusal);
	if (!argv) {
		check_reason(refusal);
		free(refusal);
		return;
	}
	FUZZ_CHECK(strlen(cmd) == n, "a command with a NUL byte accepted");
	FUZZ_CHECK(!strpbrk(cmd, ";&|<>`$(){}\\\n"), "a command with a shell metacharacter accepted: %s", cmd);
	int ok = 0;
	for (size_t i = 0; allowed[i]; i++)
		ok |= strcmp(argv[0], allowed[i]) == 0;
	FUZZ_CHECK(ok, "command %s accepted", argv[0]);
	size_t argc = 0;
	for (; argv[argc]; argc++)
		FUZZ_CHECK(*argv[argc] && !strpbrk(argv[argc], " \t\r\v\f"), "argument %zu not split", argc);
	if (strcmp(argv[0], "git") == 0) {
		static const char *const denied[] = {"--upload-pack", "--receive-pack", "--open-files-in-pager",
		                                     "--exec-path", "--git-dir", "--work-tree", NULL};
		FUZZ_CHECK(argc >= 2 && argv[1][0] != '-', "git without a subcommand or with a global flag");
		for (size_t i = 2; i < argc; i++) {
			const char *a = argv[i];
			FUZZ_CHECK(strncmp(a, "-O", 2) != 0, "git %s: -O accepted", argv[1]);
			size_t len = strcspn(a, "=");
			if (strncmp(a, "--", 2) == 0 && len > 2)
				for (size_t k = 0; denied[k]; k++)
					FUZZ_CHECK(!(len <= strlen(denied[k]) && strncmp(a, denied[k], len) == 0),
					           "git %s: %s accepted", argv[1], a);
		}
	}
	argv_free(argv);
}

/* What the callers pass: relative, no empty or "." component (they pass
 * path_normalize output); ".." is kept, the resolvers must handle it. */
static int normalized(const char *p)
{
	if (!*p || *p == '/')
		return 0;
	for (const char *s = p;;) {
		size_t len = strcspn(s, "/");
		if (len == 0 || (len == 1 && s[0] == '.'))
			return 0;
		s += len;
		if (!*s)
			return 1;
		s++;
	}
}

static void resolvers(const char *rel, int flags)
{
	if (!normalized(rel))
		return;
	int a = open_beneath(ctx.ws_fd, rel, flags, 0);
	int ea = errno;
	int b = open_beneath_walk(ctx.ws_fd, rel, flags, 0);
	int eb = errno;
	FUZZ_CHECK((a >= 0) == (b >= 0), "%s: openat2 %s, the walk %s", rel, a >= 0 ? "opens" : strerror(ea),
	           b >= 0 ? "opens" : strerror(eb));
	if (a >= 0) {
		struct stat sa, sb;
		FUZZ_CHECK(fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino,
		           "%s: openat2 and the walk open different files", rel);
		char *ra = fd_inside(a), *rb = fd_inside(b);
		FUZZ_CHECK(ra && rb, "%s: opened outside the workspace", rel);
		free(ra);
		free(rb);
		close(a);
		close(b);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	char *p = fuzz_strndup(data + 1, size - 1);
	size_t n = size - 1;
	switch (data[0] % 5) {
	case 0: gate_read(p, n); break;
	case 1: gate_write(p, n, 0); break;
	case 2: gate_write(p, n, 1); break;
	case 3: gate_command(p, n); break;
	default:
		resolvers(p, O_RDONLY | O_NOCTTY | O_NONBLOCK | (data[0] & 0x80 ? O_DIRECTORY : 0));
		break;
	}
	free(p);
	return 0;
}
