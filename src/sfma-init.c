/* sfma-init - a starting manifest to edit, with its comments.
 *
 *   sfma-init [DIR]
 *
 * Writes DIR/manifest.json (DIR: the current directory, made when it does
 * not exist and its parent does): a manifest that runs as it is, on the
 * offline mock model, and says in it what each part is for. JSON has no
 * comments, so the comments are members whose names begin with "x-",
 * which the loader ignores (sfma-manifest(5)); the real endpoint to
 * switch to is one of them. An existing manifest is never overwritten.
 * Exit 0, 1 when the file exists or cannot be written, 2 on usage errors. */
#include "beside.h"
#include "cli.h"
#include "errors.h"
#include "ndjson.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: sfma-init [DIR]\n"
	"       sfma-init --version | --help\n"
	"  DIR   where to write manifest.json (default: the current directory;\n"
	"        made when missing, inside a directory that exists)\n";

/* The manifest's JSON Schema, where `make install` puts it, and where it
 * is in a source tree beside bin/. The first that exists beside this
 * program is named; else the installed path of the default prefix. */
#define SCHEMA_NAME "sfma-manifest.schema.json"
#define SCHEMA_DEFAULT "/usr/local/share/sfma/" SCHEMA_NAME

static void schema_path(char *out, size_t n)
{
	snprintf(out, n, "%s", SCHEMA_DEFAULT);
	static const char *const beside[] = {"../share/sfma/" SCHEMA_NAME, "../schema/" SCHEMA_NAME};
	for (size_t i = 0; i < sizeof beside / sizeof *beside; i++) {
		char candidate[PATH_MAX + 64], real[PATH_MAX];
		if (beside_self(beside[i], candidate, sizeof candidate) < 0)
			return;
		if (realpath(candidate, real)) {
			snprintf(out, n, "%s", real);
			return;
		}
	}
}

/* The task's name: DIR's last component when it is a plain name, else
 * "my-task". */
static void task_name(const char *dir, char *out, size_t n)
{
	snprintf(out, n, "my-task");
	char abs[PATH_MAX];
	if (!realpath(dir, abs))
		return;
	const char *base = strrchr(abs, '/');
	base = base ? base + 1 : abs;
	size_t len = strlen(base);
	if (len == 0 || len > 64)
		return;
	for (const char *p = base; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.", *p))
			return;
	snprintf(out, n, "%s", base);
}

static void comment(json_t *m, const char *key, const char *text)
{
	json_object_set_new(m, key, json_string(text));
}

/* The manifest, member by member, each comment before what it explains. */
static json_t *starting_manifest(const char *name, const char *schema)
{
	json_t *m = json_object();
	json_object_set_new(m, "$schema", json_string(schema));
	comment(m, "x-comment",
	        "A starting manifest written by sfma init. Members whose names begin with x- are comments: sfma "
	        "ignores them (sfma-manifest(5)). Check it with `sfma check manifest.json` and run it with "
	        "`sfma run manifest.json --apply`; then `sfma log ws` and `sfma report ws -o run.html` show the run.");
	json_object_set_new(m, "name", json_string(name));
	comment(m, "x-comment-workspace",
	        "The directory the agent works in, made by the first run, relative to the directory sfma runs in. "
	        "Its .sfma/ keeps the trace, the evidence and the result record.");
	json_object_set_new(m, "workspace", json_string("ws"));
	comment(m, "x-comment-taskStatement", "What the agent is to do, in your words.");
	json_object_set_new(m, "taskStatement",
	                    json_string("Write a short greeting to hello.txt and show that commands run in the sandbox."));
	comment(m, "x-comment-modelEndpoints",
	        "Who answers. The mock endpoint is offline: a built-in script (or the replies in SFMA_MOCK) that "
	        "writes the declared outputs, runs echo and says done, to try the manifest with. For a real model "
	        "use the endpoints of x-modelEndpoints-anthropic in their place (remove this modelEndpoints and "
	        "rename that one modelEndpoints; README.md shows a jq line that does it) and export "
	        "ANTHROPIC_API_KEY; only sfma-model ever sees the key. openai (OPENAI_API_KEY), gemini "
	        "(GEMINI_API_KEY) and codex (OPENAI_CODEX_TOKEN, OPENAI_CODEX_ACCOUNT) work the same way.");
	json_object_set_new(m, "modelEndpoints",
	                    json_pack("[{s:s, s:s, s:s}]", "name", "offline", "provider", "mock", "model", "builtin"));
	json_object_set_new(m, "x-modelEndpoints-anthropic",
	                    json_pack("[{s:s, s:s, s:s}]", "name", "claude", "provider", "anthropic", "model",
	                              "claude-sonnet-4-5"));
	comment(m, "x-comment-allowedCommands",
	        "The executables the agent may run, by name, each in a sandbox that sees only the declared inputs "
	        "and outputs, no secrets and no network; there is no shell.");
	json_object_set_new(m, "allowedCommands", json_pack("[s, s]", "echo", "cat"));
	comment(m, "x-comment-inputs", "Workspace files the agent may read, staged into the sandbox.");
	json_object_set_new(m, "inputs", json_array());
	comment(m, "x-comment-outputs", "The only files the agent may write; done requires each of them.");
	json_object_set_new(m, "outputs", json_pack("[s]", "hello.txt"));
	comment(m, "x-comment-acceptance",
	        "Commands that must succeed before a done counts, run in the sandbox over the workspace as it "
	        "stands (an applied run only); each must be an allowed command.");
	json_object_set_new(m, "acceptance", json_pack("[{s:s, s:i}]", "cmd", "cat hello.txt", "exit", 0));
	comment(m, "x-comment-ceilings",
	        "Ceilings: the run halts when it would pass one (halted-maxTurns, halted-budget). maxTurns counts "
	        "the model's replies, maxModelCalls every attempt, maxSeconds the wall clock, maxLoops the "
	        "conversations at once, maxTokens input and output tokens together.");
	json_object_set_new(m, "maxTurns", json_integer(8));
	json_object_set_new(m, "maxModelCalls", json_integer(32));
	json_object_set_new(m, "maxSeconds", json_integer(300));
	json_object_set_new(m, "maxLoops", json_integer(1));
	json_object_set_new(m, "maxTokens", json_integer(200000));
	comment(m, "x-comment-dryRunDefault",
	        "true: writes are recorded and not applied, commands do not run, unless sfma run is given --apply.");
	json_object_set_new(m, "dryRunDefault", json_true());
	return m;
}

/* DIR, made when missing (one level: its parent must exist). */
static void ensure_dir(const char *dir)
{
	struct stat st;
	if (stat(dir, &st) == 0) {
		if (!S_ISDIR(st.st_mode))
			die("%s: not a directory", dir);
		return;
	}
	if (errno != ENOENT)
		die("%s: %s", dir, strerror(errno));
	if (mkdir(dir, 0777) < 0)
		die("%s: %s", dir, errno == ENOENT ? "its parent directory does not exist" : strerror(errno));
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h': cli_help(usage_text);
		case 'V': cli_version();
		default: cli_bad_option(usage_text, c, argv);
		}
	}
	if (argc - optind > 1)
		cli_usage_error(usage_text, "one DIR only (unexpected %s)", argv[optind + 1]);
	const char *dir = optind < argc ? argv[optind] : ".";
	if (!*dir)
		cli_usage_error(usage_text, "DIR: a directory name is required");

	ensure_dir(dir);
	char path[PATH_MAX];
	if ((size_t)snprintf(path, sizeof path, "%s/manifest.json", dir) >= sizeof path)
		die("%s: name too long", dir);
	char name[80], schema[PATH_MAX];
	task_name(dir, name, sizeof name);
	schema_path(schema, sizeof schema);
	json_t *m = starting_manifest(name, schema);
	char *text = json_dumps(m, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(m);
	if (!text)
		die("out of memory");
	/* O_EXCL: an existing manifest (or anything in its place, a link
	 * included) is never replaced; it is the operator's. */
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		if (errno == EEXIST)
			die("%s: already exists; not overwritten", path);
		die("%s: %s", path, strerror(errno));
	}
	size_t len = strlen(text);
	if (write_all(fd, text, len) < 0 || write_all(fd, "\n", 1) < 0 || fsync(fd) < 0) {
		int err = errno;
		unlink(path);
		die("%s: %s", path, strerror(err));
	}
	if (close(fd) < 0) {
		int err = errno;
		unlink(path);
		die("%s: %s", path, strerror(err));
	}
	free(text);
	printf("wrote %s: a manifest on the offline mock model; check it with: sfma check %s\n", path, path);
	return 0;
}
