/* sfma-verify - offline verification of a trace and its result record.
 *
 *   sfma-verify [--trusted-head HEX:COUNT] [--since CHECKPOINT] [--threads N] [--allow-pruned]
 *               WORKSPACE | RESULT.json
 *   sfma-verify --proof PROOF [--line FILE]       (an inclusion proof)
 *   sfma-verify --proof PROOF --since CHECKPOINT  (a consistency proof)
 *
 * Recomputes the hash chain, its head and length, the Merkle tree of its
 * lines (in the same pass), every evidence blob the chain references, the
 * manifest and result digests and the Ed25519 signature, and checks that
 * every checkpoint kept in the workspace (and --since's) is a tree of a
 * prefix of the trace (sfma-formats(5)). Prints
 * "AUDIT_OK signature=<none|untrusted-key|trusted> entries=<n> head=<hex>"
 * (plus " observed=<n|none> observer=<untrusted-key|trusted>" for a record
 * of sfma, held against the observer's chain when it has its head, see
 * check_observed; " evidence=<n>" and " pruned=<k>" when there are
 * references, and " root=<hex> checkpoints=<k> since=<size>" for a record
 * with a tree) and
 * exits 0, or "AUDIT_INVALID: <reason>" on stderr and exits 1. --proof
 * checks a proof with nothing but its own text, the line (or the earlier
 * checkpoint) and SFMA_AUDIT_PUBLIC_KEY: "AUDIT_OK proof=inclusion ..." or
 * "AUDIT_OK proof=consistency ...".
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
#include "confine.h"
#include "errors.h"
#include "evidence.h"
#include "ndjson.h"
#include "observed.h"
#include "record.h"
#include "sign.h"
#include "buf.h"
#include "canon.h"
#include "sha.h"
#include "tlog.h"
#include "wsfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
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

/* AUDIT_INVALID: reason, then one line of detail "sfma-verify: ..." for a
 * person: the first line is the one scripts match. */
static _Noreturn void invalid_because(const char *reason, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static _Noreturn void invalid_because(const char *reason, const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	fprintf(stderr, "AUDIT_INVALID: %s\n", reason);
	warning("%s", text);
	exit(1);
}

/* ---- the observer (sfma-formats(5), The observed chain) ------------------- */

/* The observed chain the record commits to, checked, and held against
 * the trace's sealed prefix (its first trace_bytes bytes, on trace_fd):
 * the words AUDIT_OK gains, " observed=<n>" and, for a signed head,
 * " observer=<untrusted-key|trusted>". A record with no observer's head
 * says " observed=none" when sfma made it (it names its runnerVersion);
 * the earlier runner's records print their line as they always did. */
static void check_observed(const char *workspace, const json_t *record, const json_t *integrity, int trace_fd,
                           uint64_t trace_bytes, char *words, size_t cap)
{
	struct sfma_err e;
	const char *trusted = getenv("SFMA_OBSERVER_PUBLIC_KEY");
	json_t *head = json_object_get(integrity, "observedHead"), *sig = json_object_get(integrity, "observerSignature");
	if (!head) {
		if (trusted && *trusted)
			invalid("observed: the record has no observer's head, and SFMA_OBSERVER_PUBLIC_KEY is set");
		snprintf(words, cap, "%s", json_object_get(record, "runnerVersion") ? " observed=none" : "");
		return;
	}
	long long entries;
	ndjson_integer(json_object_get(integrity, "observedEntries"), &entries);
	const char *hex = json_string_value(head);
	if (!is_sha256_hex(hex, json_string_length(head)))
		invalid("observed: integrity.observedHead is not 64 lowercase hex digits");
	const char *sigword = "";
	if (sig) {
		if (obs_signature_check(sig, (uint64_t)entries, hex, trusted && *trusted ? trusted : NULL, &e) < 0)
			invalid("observed: %s", e.text);
		sigword = trusted && *trusted ? " observer=trusted" : " observer=untrusted-key";
	} else if (trusted && *trusted) {
		invalid("observed: the observer's head is not signed, and SFMA_OBSERVER_PUBLIC_KEY is set");
	}
	/* 1. The chain, to the head the record names. */
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/.sfma/%s", workspace, OBSERVED_FILE);
	int fd = ws_open_regular(AT_FDCWD, path, &e);
	struct chain_summary sum = {.entries = 0};
	if (fd < 0 && !(errno == ENOENT && entries == 0 && strcmp(hex, CHAIN_ZERO_HASH) == 0))
		invalid("observed: %s", e.text);
	struct obs_check *c = obs_check_new(trace_bytes);
	if (fd >= 0) {
		const struct chain_opts mark = {.mark_set = 1, .mark_count = (uint64_t)entries};
		if (chain_verify_fd(fd, &mark, &sum, &e) < 0)
			invalid("observed: %s: %s", path, e.text);
		if (sum.legacy)
			invalid("observed: %s: line 1 is not chained", path);
		if (!sum.mark_found)
			invalid("observed: %s has %" PRIu64 " entries, fewer than the %lld the record commits to", path,
			        sum.entries, entries);
		if (strcmp(sum.mark_head, hex) != 0)
			invalid("observed: integrity.observedHead does not match the observed chain's entry %lld (%s)", entries,
			        sum.mark_head);
		/* 2. Its entries, fed to the check. */
		struct line_reader lr;
		char *line;
		size_t len;
		lseek(fd, 0, SEEK_SET);
		lr_init(&lr, fd, NDJSON_DEFAULT_MAX);
		for (long long n = 1; n <= entries && lr_next(&lr, &line, &len, &e) == 1; n++) {
			json_t *v = ndjson_parse(line, len, &e);
			int rc = v ? obs_check_observed(c, v, (uint64_t)n, &e) : -1;
			json_decref(v);
			if (rc < 0)
				invalid("%s", e.text);
		}
		lr_free(&lr);
		close(fd);
	}
	/* 3. The trace's sealed prefix: only the lines that may carry what
	 * the check reads are parsed. */
	struct line_reader lr;
	char *line;
	size_t len;
	if (lseek(trace_fd, 0, SEEK_SET) < 0)
		invalid("observed: trace: seek: %s", strerror(errno));
	lr_init(&lr, trace_fd, NDJSON_DEFAULT_MAX);
	while (lr_next(&lr, &line, &len, &e) == 1 && lr.offset < trace_bytes) {
		json_t *v = obs_trace_line_relevant(line, len) ? ndjson_parse(line, len, NULL) : NULL;
		int rc = obs_check_trace(c, v, lr.offset, &e);
		json_decref(v);
		if (rc < 0)
			invalid("%s", e.text);
	}
	lr_free(&lr);
	struct obs_counts counts;
	if (obs_check_end(c, &counts, &e) < 0)
		invalid("%s", e.text);
	obs_check_free(c);
	snprintf(words, cap, " observed=%" PRIu64 "%s", counts.matched, sigword);
}

static const char usage_text[] =
	"usage: sfma-verify [--trusted-head HEX:COUNT] [--since CHECKPOINT] [--threads N]\n"
	"                   [--allow-pruned] WORKSPACE|RESULT.json\n"
	"       sfma-verify --proof PROOF [--line FILE]      (the line: FILE, or stdin)\n"
	"       sfma-verify --proof PROOF --since CHECKPOINT\n"
	"       sfma-verify --canonicalize < JSON-LINES\n"
	"       sfma-verify --version | --help\n";

/* --threads beyond what chain_verify_fd runs at once are accepted (and
 * capped there): the bound only rejects nonsense. */
#define THREADS_LIMIT 256

static _Noreturn void bad_trusted_head(void)
{
	cli_usage_error(usage_text, "--trusted-head: HEX:COUNT, 64 lowercase hex digits and a count >= 1");
}

/* 1 if path names a file in an existing .sfma directory: a record that
 * should be there (a workspace's own), not a mistyped operand. */
static int in_sfma_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return 0;
	char *dir = xmalloc((size_t)(slash - path) + 1);
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	const char *base = strrchr(dir, '/');
	base = base ? base + 1 : dir;
	struct stat st;
	int yes = strcmp(base, ".sfma") == 0 && stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
	free(dir);
	return yes;
}

/* Where the record and the workspace are: a directory is a workspace; a
 * file is a result record inside <workspace>/.sfma/. Returns 1 for a
 * workspace. */
static int locate(const char *target, char **record_path, char **workspace)
{
	struct stat st;
	/* A path that is not there is a mistyped operand, not a record that
	 * fails to verify: said plainly, exit 2, and never AUDIT_INVALID. */
	if (stat(target, &st) < 0) {
		if ((errno == ENOENT || errno == ENOTDIR) && !in_sfma_dir(target))
			die_status(2, "%s: no such workspace or record", target);
		invalid("%s: %s", target, strerror(errno));
	}
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
 * record_integrity_shape); returns the signature= word, and in *tree_key
 * the key that checks the checkpoints: the trusted key, else the
 * record's, else NULL (the caller frees it). */
static const char *check_signature(json_t *integrity, json_t *signature, EVP_PKEY **tree_key)
{
	const char *trusted_pem = getenv("SFMA_AUDIT_PUBLIC_KEY");
	struct sfma_err e;
	EVP_PKEY *trusted = NULL;
	if (trusted_pem && *trusted_pem) {
		trusted = ed25519_public_from_pem(trusted_pem, strlen(trusted_pem), &e);
		if (!trusted)
			invalid("SFMA_AUDIT_PUBLIC_KEY: %s", e.text);
	}
	*tree_key = NULL;
	if (!signature) {
		if (trusted) {
			EVP_PKEY_free(trusted); /* invalid() exits: nothing else holds it */
			invalid("record is unsigned but SFMA_AUDIT_PUBLIC_KEY demands a trusted signature");
		}
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
		char want[ED25519_FINGERPRINT_LEN + 1], found[ED25519_FINGERPRINT_LEN + 1];
		ed25519_fingerprint(trusted, want);
		ed25519_fingerprint(embedded, found);
		int same = ed25519_same_public(trusted, embedded);
		if (!ed25519_verify(trusted, msg.p, msg.len, sig, (size_t)siglen)) {
			/* The contract's line stays exactly what scripts match
			 * (tests/fixtures/interop/README.md); which keys were
			 * compared follows on a line of its own. */
			if (!same)
				invalid_because("invalid audit signature",
				                "expected key %s (SFMA_AUDIT_PUBLIC_KEY), the record is signed with key %s "
				                "(integrity.signature.publicKey; SHA-256 of each SubjectPublicKeyInfo, "
				                "first 16 hex)", want, found);
			invalid("invalid audit signature");
		}
		if (!same)
			invalid("embedded public key is not the trusted key (expected %s, found %s)", want, found);
		word = "trusted";
	}
	if (!ed25519_verify(embedded, msg.p, msg.len, sig, (size_t)siglen))
		invalid("invalid audit signature");
	buf_free(&msg);
	if (trusted) {
		*tree_key = trusted;
		EVP_PKEY_free(embedded);
	} else {
		*tree_key = embedded;
	}
	return word;
}

/* ---- the tree, its checkpoints and proofs (sfma-formats(5)) ------------------- */

/* SFMA_AUDIT_PUBLIC_KEY as signed-note names it: 1 with k filled, 0 when unset. */
static int trusted_tlog_key(struct tlog_key *k)
{
	const char *pem = getenv("SFMA_AUDIT_PUBLIC_KEY");
	struct sfma_err e;
	if (!pem || !*pem)
		return 0;
	EVP_PKEY *key = ed25519_public_from_pem(pem, strlen(pem), &e);
	if (!key || tlog_key_from_pkey(key, k, &e) < 0)
		invalid("SFMA_AUDIT_PUBLIC_KEY: %s", e.text);
	EVP_PKEY_free(key);
	return 1;
}

static const char *signed_word(enum tlog_signed how)
{
	return how == TLOG_VERIFIED ? "trusted" : how == TLOG_UNVERIFIED ? "unverified" : "none";
}

/* A file the operator names (a proof, a checkpoint, a line; "-" is
 * standard input), at most max bytes. Unlike the workspace's own files it
 * may be a pipe: `--proof <(sfma prove ...)`. */
static char *read_named(const char *path, size_t max, size_t *len)
{
	struct sfma_err e;
	int fd = strcmp(path, "-") == 0 ? 0 : open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		invalid("%s: %s", path, strerror(errno));
	char *text = read_all_fd(fd, max, len, &e);
	if (fd != 0)
		close(fd);
	if (!text)
		invalid("%s: %s", path, e.text);
	return text;
}

/* A checkpoint to hold the trace against: a file of the workspace or --since's. */
struct kept {
	char *name;
	char *text;
	size_t len;
	struct tlog_checkpoint c;
	int current; /* KEPT_CURRENT: .sfma/checkpoint; KEPT_SINCE: --since's */
};
enum { KEPT_STORED, KEPT_CURRENT, KEPT_SINCE };

struct kept_list {
	struct kept *v;
	size_t n, cap;
};

/* At most this many kept checkpoints (one per run): a bound on memory. */
#define KEPT_MAX 100000

static void keep(struct kept_list *l, const char *name, char *text, size_t len, int current)
{
	struct sfma_err e;
	enum tlog_signed how;
	if (l->n == KEPT_MAX)
		invalid("more than %d checkpoints", KEPT_MAX);
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 16;
		l->v = xrealloc(l->v, l->cap * sizeof *l->v);
	}
	struct kept *k = &l->v[l->n++];
	*k = (struct kept){.name = xstrdup(name), .text = text, .len = len, .current = current};
	/* The signatures are checked once the record's key is known. */
	if (tlog_checkpoint_open(text, len, NULL, &k->c, &how, &e) < 0)
		invalid("%s: %s", name, e.text);
}

/* 1 if name is a tree size as a kept checkpoint's file is named. */
static int size_name(const char *name, uint64_t *size)
{
	uint64_t v = 0;
	size_t n = strlen(name);
	if (n == 0 || n > 19 || (name[0] == '0' && n > 1))
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (name[i] < '0' || name[i] > '9')
			return 0;
		v = v * 10 + (uint64_t)(name[i] - '0');
	}
	*size = v;
	return 1;
}

/* .sfma/checkpoint and every .sfma/checkpoints/<size> (other names, and
 * the temporary files a writer leaves, beginning with a dot, are not
 * checkpoints). Each is read as a hostile party may have left it. */
static void load_kept(const char *workspace, struct kept_list *l)
{
	struct sfma_err e;
	size_t len;
	char *path = xmalloc(strlen(workspace) + 64);
	sprintf(path, "%s/.sfma/checkpoint", workspace);
	char *text = ws_read_regular(AT_FDCWD, path, TLOG_TEXT_MAX, &len, &e);
	if (text)
		keep(l, path, text, len, KEPT_CURRENT);
	else if (errno != ENOENT)
		invalid("%s", e.text);
	sprintf(path, "%s/.sfma/checkpoints", workspace);
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (dfd < 0 && errno != ENOENT)
		invalid("%s: %s", path, errno == ELOOP ? "is a symbolic link, not followed" : strerror(errno));
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (dfd >= 0 && !d)
		invalid("%s: %s", path, strerror(errno));
	struct dirent *de;
	while (d && (de = readdir(d))) {
		uint64_t size;
		if (de->d_name[0] == '.' || !size_name(de->d_name, &size))
			continue;
		text = ws_read_regular(dfd, de->d_name, TLOG_TEXT_MAX, &len, &e);
		char *name = xmalloc(strlen(path) + strlen(de->d_name) + 2);
		sprintf(name, "%s/%s", path, de->d_name);
		if (!text)
			invalid("%s/%s", path, e.text);
		keep(l, name, text, len, KEPT_STORED);
		if (l->v[l->n - 1].c.size != size)
			invalid("%s: a checkpoint of tree size %llu", name, (unsigned long long)l->v[l->n - 1].c.size);
		free(name);
	}
	if (d)
		closedir(d);
	free(path);
}

static int by_size(const void *a, const void *b)
{
	uint64_t x = ((const struct chain_tree_point *)a)->size, y = ((const struct chain_tree_point *)b)->size;
	return x < y ? -1 : x > y;
}

/* The sizes the tree must be seen at, sorted, each once. */
static struct chain_tree_point *kept_points(const struct kept_list *l, size_t *n)
{
	struct chain_tree_point *p = xcalloc(l->n ? l->n : 1, sizeof *p);
	for (size_t i = 0; i < l->n; i++)
		p[i].size = l->v[i].c.size;
	qsort(p, l->n, sizeof *p, by_size);
	size_t k = 0;
	for (size_t i = 0; i < l->n; i++)
		if (k == 0 || p[k - 1].size != p[i].size)
			p[k++] = p[i];
	*n = k;
	return p;
}

/* Every kept checkpoint is the tree of a prefix of the trace: the same
 * origin (its first line), no more entries than it has, the same root. */
static void check_kept_trees(const struct kept_list *l, const struct chain_tree_point *points, size_t npoints,
                             const struct chain_summary *sum, int fd, uint64_t max_line)
{
	struct sfma_err e;
	char origin[TLOG_ORIGIN_LEN + 1] = "";
	if (l->n && sum->entries) {
		size_t len;
		char *first = chain_line_at(fd, 0, max_line, &len, &e);
		if (!first)
			invalid("trace line 1: %s", e.text);
		tlog_origin(first, len, origin);
		free(first);
	}
	for (size_t i = 0; i < l->n; i++) {
		const struct kept *k = &l->v[i];
		if (k->c.size > sum->entries)
			invalid("%s: a tree of %llu entries, but the trace has %" PRIu64 ": the trace was cut back", k->name,
			        (unsigned long long)k->c.size, sum->entries);
		if (strcmp(k->c.origin, origin) != 0)
			invalid("%s: origin %s is not this trace's (its first line is another)", k->name, k->c.origin);
		const struct chain_tree_point key = {.size = k->c.size};
		const struct chain_tree_point *p = bsearch(&key, points, npoints, sizeof *points, by_size);
		if (!p || !p->found || memcmp(p->root, k->c.root, MERKLE_HASH_LEN) != 0)
			invalid("%s: not the tree of the trace's first %llu entries: the trace was rewritten below it",
			        k->name, (unsigned long long)k->c.size);
	}
}

/* The kept checkpoints' signatures by key (the trusted key, else the
 * record's, else none to check): a signature by it that does not verify
 * is invalid, and with a trusted key --since's must carry one that does.
 * A checkpoint without one is only what its tree is: checked above (a
 * record signed apart from sfma-seal, by openssl, has an unsigned one). */
static void check_kept_signatures(const struct kept_list *l, EVP_PKEY *key, int trusted)
{
	struct sfma_err e;
	struct tlog_key k;
	int have = key && tlog_key_from_pkey(key, &k, &e) == 0;
	for (size_t i = 0; i < l->n; i++) {
		const struct kept *c = &l->v[i];
		struct tlog_checkpoint again;
		enum tlog_signed how;
		if (tlog_checkpoint_open(c->text, c->len, have ? &k : NULL, &again, &how, &e) < 0)
			invalid("%s: %s", c->name, e.text);
		if (c->current == KEPT_SINCE && trusted && how != TLOG_VERIFIED)
			invalid("%s: not signed by SFMA_AUDIT_PUBLIC_KEY", c->name);
	}
}

/* The line a proof is of: FILE or standard input, one line with or
 * without its newline; its leaf hash. */
static void line_leaf(const char *path, unsigned char leaf[MERKLE_HASH_LEN])
{
	size_t len;
	char *line = read_named(path ? path : "-", NDJSON_DEFAULT_MAX + 1, &len);
	if (len && line[len - 1] == '\n')
		len--;
	if (memchr(line, '\n', len)) {
		free(line); /* the sanitizer's leak check runs at exit */
		invalid("%s: more than one line (a proof is of one trace line)", path ? path : "stdin");
	}
	merkle_leaf_hash(line, len, leaf);
	free(line);
}

/* Open the checkpoint of a proof, or an earlier one, under the trusted
 * key when there is one (then it must be signed by it). */
static enum tlog_signed open_checkpoint(const char *what, const char *text, size_t len, const struct tlog_key *key,
                                        struct tlog_checkpoint *c)
{
	struct sfma_err e;
	enum tlog_signed how;
	if (tlog_checkpoint_open(text, len, key, c, &how, &e) < 0)
		invalid("%s: %s", what, e.text);
	if (key && how != TLOG_VERIFIED)
		invalid("%s: not signed by SFMA_AUDIT_PUBLIC_KEY", what);
	return how;
}

/* --proof: an inclusion proof with its line, or a consistency proof with
 * the earlier checkpoint, and nothing else. */
static int verify_proof(const char *proof_path, const char *line_path, const char *since_path)
{
	struct tlog_key key;
	int have_key = trusted_tlog_key(&key);
	size_t len;
	char *text = read_named(proof_path, TLOG_TEXT_MAX, &len);
	struct sfma_err e;
	struct tlog_proof *p = xmalloc(sizeof *p);
	if (tlog_proof_parse(text, len, p, &e) < 0)
		invalid("%s: %s", proof_path, e.text);
	struct tlog_checkpoint c, old;
	char root[65];
	enum tlog_signed how = open_checkpoint(proof_path, p->note, p->note_len, have_key ? &key : NULL, &c);
	hex_encode(c.root, MERKLE_HASH_LEN, root);
	if (p->kind == TLOG_INCLUSION) {
		unsigned char leaf[MERKLE_HASH_LEN];
		if (since_path)
			invalid("%s: an inclusion proof, checked with a line, not with --since", proof_path);
		if (p->index >= c.size)
			invalid("%s: index %llu is not in a tree of %llu entries", proof_path, (unsigned long long)p->index,
			        (unsigned long long)c.size);
		line_leaf(line_path, leaf);
		if (merkle_check_inclusion((const unsigned char (*)[MERKLE_HASH_LEN])p->hash, p->n, p->index, c.size, leaf,
		                           c.root) < 0)
			invalid("%s: the inclusion proof does not verify: the line is not entry %llu of the tree the "
			        "checkpoint names", proof_path, (unsigned long long)p->index + 1);
		printf("AUDIT_OK proof=inclusion signature=%s origin=%s line=%llu size=%llu root=%s\n", signed_word(how),
		       c.origin, (unsigned long long)p->index + 1, (unsigned long long)c.size, root);
	} else {
		if (!since_path)
			invalid("%s: a consistency proof, checked against the earlier checkpoint: --since CHECKPOINT",
			        proof_path);
		if (line_path)
			invalid("%s: a consistency proof takes no --line", proof_path);
		size_t old_len;
		char *old_text = read_named(since_path, TLOG_TEXT_MAX, &old_len);
		open_checkpoint(since_path, old_text, old_len, have_key ? &key : NULL, &old);
		free(old_text);
		if (strcmp(old.origin, c.origin) != 0)
			invalid("%s: another log's checkpoint (origin %s, the proof's is %s)", since_path, old.origin,
			        c.origin);
		if (p->index != old.size)
			invalid("%s: a proof from tree size %llu, the checkpoint is of %llu", proof_path,
			        (unsigned long long)p->index, (unsigned long long)old.size);
		/* The empty tree is consistent with every tree (C2SP tlog-witness). */
		int ok = old.size == 0 ? p->n == 0
		                       : merkle_check_consistency((const unsigned char (*)[MERKLE_HASH_LEN])p->hash, p->n,
		                                                  old.size, old.root, c.size, c.root) == 0;
		if (!ok)
			invalid("%s: the consistency proof does not verify: the tree of %llu entries does not extend %s",
			        proof_path, (unsigned long long)c.size, since_path);
		printf("AUDIT_OK proof=consistency signature=%s origin=%s since=%llu size=%llu root=%s\n",
		       signed_word(how), c.origin, (unsigned long long)old.size, (unsigned long long)c.size, root);
	}
	free(p);
	free(text);
	return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	struct chain_opts opts = {0};
	int canonicalize = 0;
	const char *proof = NULL, *line = NULL, *since = NULL;
	unsigned long threads;
	static const struct option longopts[] = {
		{"trusted-head", required_argument, NULL, 't'},
		{"threads", required_argument, NULL, 'j'},
		{"allow-pruned", no_argument, NULL, 'p'},
		{"canonicalize", no_argument, NULL, 'c'},
		{"proof", required_argument, NULL, 'P'},
		{"line", required_argument, NULL, 'L'},
		{"since", required_argument, NULL, 'S'},
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
		case 'P': proof = optarg; break;
		case 'L': line = optarg; break;
		case 'S': since = optarg; break;
		case 'h': cli_help(usage_text);
		case 'V': cli_version();
		default: cli_bad_option(usage_text, c, argv);
		}
	}
	if (canonicalize) {
		if (optind != argc)
			cli_usage_error(usage_text, "--canonicalize reads standard input only (unexpected %s)", argv[optind]);
		confine_self("sfma-verify", NULL, NULL);
		return canonicalize_stdin();
	}
	if (line && !proof)
		cli_usage_error(usage_text, "--line gives the line of a --proof");
	if (proof) {
		if (optind != argc)
			cli_usage_error(usage_text, "--proof is checked alone, without a workspace (unexpected %s)",
			                argv[optind]);
		if (opts.trusted_count || opts.allow_pruned)
			cli_usage_error(usage_text, "--proof takes only --line or --since");
		if (line && strcmp(line, "-") == 0 && strcmp(proof, "-") == 0)
			cli_usage_error(usage_text, "the proof and the line cannot both be standard input");
		if (!line && strcmp(proof, "-") == 0 && !since)
			cli_usage_error(usage_text, "--proof -: the line is then --line FILE");
		/* Read-only on what it names (sfma(1), CONFINEMENT). */
		const char *const reads[] = { proof, line ? line : "-", since, NULL };
		confine_self("sfma-verify", reads, NULL);
		return verify_proof(proof, line, since);
	}
	if (optind == argc)
		cli_usage_error(usage_text, "a WORKSPACE or RESULT.json is required");
	if (optind != argc - 1)
		cli_usage_error(usage_text, "one WORKSPACE or RESULT.json only (unexpected %s)", argv[optind + 1]);

	char *record_path, *workspace;
	int given_workspace = locate(argv[optind], &record_path, &workspace);
	const char *const reads[] = { workspace, record_path, since, NULL };
	confine_self("sfma-verify", reads, NULL);

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
	long long entries, tree_size = -1;
	ndjson_integer(json_object_get(integrity, "entries"), &entries);
	json_t *merkle_root = json_object_get(integrity, "merkleRoot");
	if (merkle_root)
		ndjson_integer(json_object_get(integrity, "treeSize"), &tree_size);

	/* The checkpoints the trace must extend: those the workspace keeps,
	 * and --since's. */
	struct kept_list kept = {0};
	load_kept(workspace, &kept);
	if (since) {
		size_t len;
		char *text = read_named(since, TLOG_TEXT_MAX, &len);
		keep(&kept, since, text, len, KEPT_SINCE);
	}
	size_t npoints;
	struct chain_tree_point *points = kept_points(&kept, &npoints);
#ifndef SFMA_BENCH_NO_TREE
	/* The tree is computed in the same pass as the chain (tests/bench
	 * measures what it costs with a build that leaves it out). */
	opts.tree = 1;
	opts.points = points;
	opts.npoints = npoints;
#endif

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

	/* 3. The digests of manifest and result. */
	char manifest_hex[65], result_hex[65];
	if (record_digests(record, manifest_hex, result_hex, &e) < 0)
		invalid("%s", e.text);
	if (!ndjson_string_is(json_object_get(integrity, "manifestSha256"), manifest_hex))
		invalid("integrity.manifestSha256 does not match the manifest");
	if (!ndjson_string_is(json_object_get(integrity, "resultSha256"), result_hex))
		invalid("integrity.resultSha256 does not match the record (a result field was altered)");

	/* 4. The signature, if any, over the integrity object. */
	EVP_PKEY *tree_key;
	const char *sigword = check_signature(integrity, json_object_get(integrity, "signature"), &tree_key);
	/* 5. The tree the record seals: of its prefix of the trace (the mark). */
	char root_hex[65] = "";
	if (opts.tree && merkle_root) {
		hex_encode(sum.mark_root, MERKLE_HASH_LEN, root_hex);
		if (tree_size != entries)
			invalid("integrity.treeSize says %lld but the record seals %lld entries", tree_size, entries);
		if (!ndjson_string_is(merkle_root, root_hex))
			invalid("integrity.merkleRoot does not match the Merkle tree of the trace %s", root_hex);
	}
	/* 6. The kept checkpoints: trees of prefixes of the trace, their
	 * signatures checked with the record's key (or the trusted one). */
	if (opts.tree)
		check_kept_trees(&kept, points, npoints, &sum, fd, opts.max_line);
	/* 7. What the observer saw, against the sealed prefix of the trace. */
	char observed_words[128];
	check_observed(workspace, record, integrity, fd, sum.mark_found ? sum.mark_offset : sum.size, observed_words,
	               sizeof observed_words);
	close(fd);
	const char *trusted = getenv("SFMA_AUDIT_PUBLIC_KEY");
	check_kept_signatures(&kept, tree_key, trusted && *trusted);
	EVP_PKEY_free(tree_key);
	uint64_t since_size = since ? kept.v[kept.n - 1].c.size : 0;
	size_t stored = 0; /* the runs' checkpoints, as checkpoints/ keeps them */
	for (size_t i = 0; i < kept.n; i++) {
		stored += kept.v[i].current == KEPT_STORED;
		free(kept.v[i].name);
		free(kept.v[i].text);
	}
	free(kept.v);
	free(points);

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
	/* Records made before the tree print exactly what they printed. */
	char tree_words[160] = "";
	int k = 0;
	if (root_hex[0])
		k = snprintf(tree_words, sizeof tree_words, " root=%s", root_hex);
	if (stored)
		k += snprintf(tree_words + k, sizeof tree_words - (size_t)k, " checkpoints=%zu", stored);
	if (since)
		snprintf(tree_words + k, sizeof tree_words - (size_t)k, " since=%" PRIu64, since_size);
	/* The tree's words before evidence's: what scripts matched at the
	 * end of the line stays there. */
	printf("AUDIT_OK signature=%s entries=%" PRIu64 " head=%s%s%s%s\n", sigword, sum.entries, sum.head,
	       observed_words, tree_words, evidence_words);
	return fflush(stdout) == 0 ? 0 : 1;
}
