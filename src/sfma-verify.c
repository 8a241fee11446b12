/* sfma-verify - offline verification of a trace and its result record.
 *
 *   sfma-verify [--trusted-head HEX:COUNT] [--threads N] [--allow-pruned] WORKSPACE | RESULT.json
 *
 * Recomputes the hash chain, its head and length, every evidence blob the
 * chain references, the manifest and result digests and the Ed25519
 * signature (sfma-formats(5)). Prints
 * "AUDIT_OK signature=<none|untrusted-key|trusted> entries=<n> head=<hex>"
 * (plus " evidence=<n>" and " pruned=<k>" when there are references) and
 * exits 0, or "AUDIT_INVALID: <reason>" on stderr and exits 1.
 * A sound record whose trace goes on past its sealed prefix the way an
 * interrupted run leaves it is "AUDIT_UNSEALED: ..." on stderr, exit 3.
 * Usage errors exit 2.
 *
 * Whatever the workspace holds is read as a hostile party may have left
 * it: every file through ws_open_regular (a FIFO, device, directory or
 * link where a file should be is refused at once, never waited on or
 * followed), every string compared as the whole JSON string it is. */
#include "chain.h"
#include "cli.h"
#include "errors.h"
#include "evidence.h"
#include "ndjson.h"
#include "record.h"
#include "sign.h"
#include "buf.h"
#include "canon.h"
#include "wsfile.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static _Noreturn void invalid(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void invalid(const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	for (char *p = text; *p; p++)
		if (*p == '\n')
			*p = ' ';
	fprintf(stderr, "AUDIT_INVALID: %s\n", text);
	exit(1);
}

static const char usage_text[] =
	"usage: sfma-verify [--trusted-head HEX:COUNT] [--threads N] [--allow-pruned]\n"
	"                   WORKSPACE|RESULT.json\n"
	"       sfma-verify --canonicalize < JSON-LINES\n"
	"       sfma-verify --version | --help\n";

/* --threads beyond what chain_verify_fd runs at once are accepted (and
 * capped there): the bound only rejects nonsense. */
#define THREADS_LIMIT 256

static _Noreturn void bad_trusted_head(void)
{
	cli_usage_error(usage_text, "--trusted-head: HEX:COUNT, 64 lowercase hex digits and a count >= 1");
}

/* Where the record and the workspace are: a directory is a workspace; a
 * file is a result record inside <workspace>/.sfma/. Returns 1 for a
 * workspace. */
static int locate(const char *target, char **record_path, char **workspace)
{
	struct stat st;
	if (stat(target, &st) < 0)
		invalid("%s: %s", target, strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		*workspace = xstrdup(target);
		*record_path = xmalloc(strlen(target) + 32);
		sprintf(*record_path, "%s/.sfma/result.json", target);
		return 1;
	}
	*record_path = xstrdup(target);
	/* <workspace>/.sfma/result.json: the workspace is two levels up. */
	char *ws = xmalloc(strlen(target) + 8);
	const char *slash = strrchr(target, '/');
	if (!slash)
		strcpy(ws, "..");
	else
		sprintf(ws, "%.*s/..", (int)(slash - target), target);
	*workspace = ws;
	return 0;
}

/* --canonicalize: print the canonical form (sfma-formats(5)) of each
 * JSON line on stdin - the exact bytes that are hashed and signed. A line
 * may hold any JSON value, a scalar as well as an object or array. */
static int canonicalize_stdin(void)
{
	struct line_reader r;
	struct sfma_err e;
	struct buf out = {0};
	char *line;
	size_t len;
	int rc, status = 0;
	lr_init(&r, 0, NDJSON_DEFAULT_MAX);
	while ((rc = lr_next(&r, &line, &len, &e)) == 1) {
		json_t *v = ndjson_parse_any(line, len, &e);
		buf_reset(&out);
		if (!v || canon_dump(v, &out, &e) < 0) {
			warning("line %llu: %s", (unsigned long long)r.line_no, e.text);
			status = 1;
		} else {
			buf_addc(&out, '\n');
			fwrite(out.p, 1, out.len, stdout);
		}
		json_decref(v);
	}
	if (rc < 0) {
		warning("%s", e.text);
		status = 1;
	}
	lr_free(&r);
	buf_free(&out);
	return fflush(stdout) == 0 ? status : 1;
}

static void parse_trusted_head(const char *arg, struct chain_opts *opts)
{
	static char hex[65];
	const char *colon = strchr(arg, ':');
	char *end;
	if (!colon || colon - arg != 64)
		bad_trusted_head();
	memcpy(hex, arg, 64);
	hex[64] = '\0';
	for (int i = 0; i < 64; i++)
		if (!strchr("0123456789abcdef", hex[i]))
			bad_trusted_head();
	errno = 0;
	unsigned long long count = strtoull(colon + 1, &end, 10);
	if (errno || *end || count == 0 || colon[1] == '-')
		bad_trusted_head();
	opts->trusted_hash = hex;
	opts->trusted_count = count;
}

/* The trace named by the record, relative to the workspace, never above it. */
static char *trace_path(json_t *record, const char *workspace)
{
	json_t *t = json_object_get(record, "trace");
	const char *rel = RECORD_TRACE;
	if (t) {
		if (!json_is_string(t))
			invalid("record: trace is not a string");
		rel = json_string_value(t);
		if (!*rel || rel[0] == '/' || strstr(rel, "..") || strlen(rel) != json_string_length(t))
			invalid("record: trace %s is not a path inside the workspace", rel);
	}
	char *p = xmalloc(strlen(workspace) + strlen(rel) + 2);
	sprintf(p, "%s/%s", workspace, rel);
	return p;
}

static int open_trace(const char *tpath)
{
	struct sfma_err e;
	int fd = ws_open_regular(AT_FDCWD, tpath, &e);
	if (fd < 0)
		invalid("%s", e.text);
	return fd;
}

/* 1 if nothing at all is at path: not even a link (a dangling one is
 * there, and refused when read, not taken for an absent file). */
static int absent(const char *path)
{
	struct stat st;
	return lstat(path, &st) < 0 && errno == ENOENT;
}

/* The record at path: a regular file, not a link, at most
 * RECORD_MAX_BYTES, one JSON text. */
static json_t *load_record(const char *path)
{
	struct sfma_err e;
	int fd = ws_open_regular(AT_FDCWD, path, &e);
	if (fd < 0)
		invalid("%s", e.text);
	size_t len;
	char *text = read_all_fd(fd, RECORD_MAX_BYTES, &len, &e);
	close(fd);
	if (!text)
		invalid("%s: %s", path, e.text);
	json_t *record = ndjson_parse(text, len, &e);
	free(text);
	if (!record)
		invalid("%s: %s", path, e.text);
	return record;
}

/* The entries after the sealed prefix (sum->mark_*), on a chain that
 * verified up to them (torn: up to a torn final line), must be what an
 * interrupted run leaves: an intact continuation that begins as a run
 * begins. Anything else is not explained by a crash. */
static void check_tail(int fd, const struct chain_summary *sum, const struct chain_opts *opts,
                       uint64_t sealed, int torn, const char *no_record_path)
{
	struct sfma_err e;
	if (torn && opts->trusted_count > sum->entries)
		invalid("trace trusted head not found: the trace has %" PRIu64 " complete entries, fewer "
		        "than %" PRIu64, sum->entries, opts->trusted_count);
	if (sum->entries == sealed)
		return;
	json_t *first = chain_entry_at(fd, sum->mark_offset, opts->max_line, &e);
	if (!first)
		invalid("trace line %" PRIu64 ": %s", sealed + 1, e.text);
	int begins = record_begins_run(first);
	char kind[64];
	const char *k = json_string_value(json_object_get(first, "kind"));
	snprintf(kind, sizeof kind, "%s", k ? k : "no kind");
	json_decref(first);
	if (begins)
		return;
	if (no_record_path)
		invalid("%s: %s, and trace line 1 (%s) does not begin a run", no_record_path, strerror(ENOENT),
		        kind);
	invalid("integrity.entries says %" PRIu64 " but the trace has %" PRIu64 " entries, and line %" PRIu64
	        " (%s) does not begin a run", sealed, sum->entries, sealed + 1, kind);
}

/* AUDIT_UNSEALED: the record (or its absence) is sound, and the trace goes
 * on past it the way an interrupted run leaves it. Not a tamper claim, and
 * not AUDIT_OK either: no record covers those entries yet. Exit 3. */
static _Noreturn void report_unsealed(uint64_t n, int torn, int no_record)
{
	char what[96];
	int k = n ? snprintf(what, sizeof what, "%" PRIu64 " %s", n, n == 1 ? "entry" : "entries") : 0;
	if (torn)
		snprintf(what + k, sizeof what - (size_t)k, "%sa torn final line", n ? " and " : "");
	fprintf(stderr, "AUDIT_UNSEALED: %s %s (%s)\n", what,
	        no_record ? "and no result record" : "after the sealed head",
	        torn ? "an interrupted write; sfma-chain --recover-torn repairs it, then the next run records it"
	             : "an interrupted run; the next run records it");
	exit(3);
}

/* A workspace with a trace and no record: a first run that never got to
 * seal. The whole trace is its unsealed tail. */
static _Noreturn void no_record(const char *record_path, const char *workspace, struct chain_opts *opts)
{
	char *tpath = xmalloc(strlen(workspace) + sizeof RECORD_TRACE + 1);
	sprintf(tpath, "%s/%s", workspace, RECORD_TRACE);
	if (absent(tpath))
		invalid("%s: %s", record_path, strerror(ENOENT));
	int fd = open_trace(tpath);
	struct sfma_err e;
	struct chain_summary sum;
	opts->mark_set = 1;
	opts->mark_count = 0;
	int rc = chain_verify_fd(fd, opts, &sum, &e);
	if (rc < 0 && !sum.torn)
		invalid("trace %s", e.text);
	if (rc == 0 && sum.entries == 0)
		invalid("%s: %s", record_path, strerror(ENOENT));
	check_tail(fd, &sum, opts, 0, rc < 0, record_path);
	close(fd);
	free(tpath);
	report_unsealed(sum.entries, rc < 0, 1);
}

/* Check the signature block (its shape already checked by
 * record_integrity_shape); returns the signature= word. */
static const char *check_signature(json_t *integrity, json_t *signature)
{
	const char *trusted_pem = getenv("SFMA_AUDIT_PUBLIC_KEY");
	struct sfma_err e;
	EVP_PKEY *trusted = NULL;
	if (trusted_pem && *trusted_pem) {
		trusted = ed25519_public_from_pem(trusted_pem, strlen(trusted_pem), &e);
		if (!trusted)
			invalid("SFMA_AUDIT_PUBLIC_KEY: %s", e.text);
	}
	if (!signature) {
		if (trusted)
			invalid("record is unsigned but SFMA_AUDIT_PUBLIC_KEY demands a trusted signature");
		return "none";
	}
	json_t *pem = json_object_get(signature, "publicKey"), *value = json_object_get(signature, "value");
	EVP_PKEY *embedded = ed25519_public_from_exact_pem(json_string_value(pem), json_string_length(pem), &e);
	if (!embedded)
		invalid("integrity.signature.publicKey: %s", e.text);
	unsigned char sig[96];
	long siglen = base64_decode(json_string_value(value), json_string_length(value), sig, sizeof sig);
	if (siglen != 64)
		invalid("invalid audit signature (value is not a base64 Ed25519 signature)");

	/* The signed message: the canonical integrity object without signature. */
	json_t *unsigned_integrity = json_copy(integrity);
	json_object_del(unsigned_integrity, "signature");
	struct buf msg = {0};
	if (canon_dump(unsigned_integrity, &msg, &e) < 0)
		invalid("integrity: %s", e.text);
	json_decref(unsigned_integrity);

	/* Under a trusted key the signature must verify with that key first,
	 * and the embedded key must be the same key. */
	const char *word = "untrusted-key";
	if (trusted) {
		if (!ed25519_verify(trusted, msg.p, msg.len, sig, (size_t)siglen))
			invalid("invalid audit signature");
		if (!ed25519_same_public(trusted, embedded))
			invalid("embedded public key is not the trusted key");
		word = "trusted";
	}
	if (!ed25519_verify(embedded, msg.p, msg.len, sig, (size_t)siglen))
		invalid("invalid audit signature");
	buf_free(&msg);
	EVP_PKEY_free(embedded);
	EVP_PKEY_free(trusted);
	return word;
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	struct chain_opts opts = {0};
	int canonicalize = 0;
	unsigned long threads;
	static const struct option longopts[] = {
		{"trusted-head", required_argument, NULL, 't'},
		{"threads", required_argument, NULL, 'j'},
		{"allow-pruned", no_argument, NULL, 'p'},
		{"canonicalize", no_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 't': parse_trusted_head(optarg, &opts); break;
		case 'j':
			if (cli_parse_ulong(optarg, 1, THREADS_LIMIT, &threads) < 0)
				cli_usage_error(usage_text, "--threads: a whole number from 1 to %d", THREADS_LIMIT);
			opts.threads = (int)threads;
			break;
		case 'c': canonicalize = 1; break;
		case 'p': opts.allow_pruned = 1; break;
		case 'h': cli_help(usage_text);
		case 'V': cli_version();
		default: cli_bad_option(usage_text, c, argv);
		}
	}
	if (canonicalize) {
		if (optind != argc)
			cli_usage_error(usage_text, "--canonicalize reads standard input only (unexpected %s)", argv[optind]);
		return canonicalize_stdin();
	}
	if (optind == argc)
		cli_usage_error(usage_text, "a WORKSPACE or RESULT.json is required");
	if (optind != argc - 1)
		cli_usage_error(usage_text, "one WORKSPACE or RESULT.json only (unexpected %s)", argv[optind + 1]);

	char *record_path, *workspace;
	int given_workspace = locate(argv[optind], &record_path, &workspace);

	/* A workspace whose first run was interrupted has a trace and no
	 * record yet: its whole trace is the unsealed tail. */
	struct sfma_err e;
	json_t *record = NULL;
	if (!(given_workspace && absent(record_path)))
		record = load_record(record_path);
	if (!record)
		no_record(record_path, workspace, &opts);
	if (!json_is_object(record))
		invalid("%s: not a JSON object", record_path);
	/* The integrity object's shape first: no member or byte may be in it
	 * that nothing checks. */
	json_t *integrity = json_object_get(record, "integrity");
	if (record_integrity_shape(integrity, &e) < 0)
		invalid("%s", e.text);
	json_t *head = json_object_get(integrity, "headHash");
	long long entries;
	ndjson_integer(json_object_get(integrity, "entries"), &entries);

	/* 1. The chain, streamed, marking where the sealed prefix ends. */
	char *tpath = trace_path(record, workspace);
	int fd = open_trace(tpath);
	/* The workspace's evidence store; absent, every reference is
	 * missing (the store opens without failing; see evidence_open). */
	char *sfma_path = xmalloc(strlen(workspace) + 8);
	sprintf(sfma_path, "%s/.sfma", workspace);
	int sfma_fd = open(sfma_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	opts.evidence = evidence_open(sfma_fd, 0, &e);
	if (!opts.evidence)
		invalid("%s", e.text);
	struct chain_summary sum;
	opts.mark_set = 1;
	opts.mark_count = (uint64_t)entries;
	int chain_rc = chain_verify_fd(fd, &opts, &sum, &e);
	if (chain_rc < 0 && sum.evidence_failed)
		invalid("%s", e.text);
	evidence_close(opts.evidence);
	if (sfma_fd >= 0)
		close(sfma_fd);
	free(sfma_path);

	/* 2. The record's commitments to that chain: to all of it, or to a
	 * prefix that an interrupted run extended. The tail must be intact
	 * (the whole chain verified, at most a torn final line) and begin as
	 * a run begins; anything else is judged against the whole trace. */
	int unsealed = sum.mark_found && ndjson_string_is(head, sum.mark_head) &&
	               (sum.entries > (uint64_t)entries || (chain_rc < 0 && sum.torn));
	if (chain_rc < 0 && !(unsealed && sum.torn))
		invalid("trace %s", e.text);
	if (unsealed) {
		check_tail(fd, &sum, &opts, (uint64_t)entries, chain_rc < 0, NULL);
	} else {
		if (!ndjson_string_is(head, sum.head))
			invalid("integrity.headHash does not match the trace head %s", sum.head);
		if ((unsigned long long)entries != sum.entries)
			invalid("integrity.entries says %lld but the trace has %" PRIu64 " entries", entries,
			        sum.entries);
	}
	close(fd);

	/* 3. The digests of manifest and result. */
	char manifest_hex[65], result_hex[65];
	if (record_digests(record, manifest_hex, result_hex, &e) < 0)
		invalid("%s", e.text);
	if (!ndjson_string_is(json_object_get(integrity, "manifestSha256"), manifest_hex))
		invalid("integrity.manifestSha256 does not match the manifest");
	if (!ndjson_string_is(json_object_get(integrity, "resultSha256"), result_hex))
		invalid("integrity.resultSha256 does not match the record (a result field was altered)");

	/* 4. The signature, if any, over the integrity object. */
	const char *sigword = check_signature(integrity, json_object_get(integrity, "signature"));

	json_decref(record);
	free(tpath);
	free(record_path);
	free(workspace);
	if (unsealed)
		report_unsealed(sum.entries - (uint64_t)entries, chain_rc < 0, 0);
	/* Records without references print exactly the earlier runner's line. */
	char evidence_words[64] = "";
	if (sum.evidence && sum.pruned)
		snprintf(evidence_words, sizeof evidence_words, " evidence=%" PRIu64 " pruned=%" PRIu64,
		         sum.evidence, sum.pruned);
	else if (sum.evidence)
		snprintf(evidence_words, sizeof evidence_words, " evidence=%" PRIu64, sum.evidence);
	printf("AUDIT_OK signature=%s entries=%" PRIu64 " head=%s%s\n", sigword, sum.entries, sum.head,
	       evidence_words);
	return fflush(stdout) == 0 ? 0 : 1;
}
