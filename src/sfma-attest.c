/* sfma-attest - a run's record as an in-toto attestation in a DSSE envelope.
 *
 *   sfma-attest WORKSPACE               the envelope, signed with SFMA_AUDIT_PRIVATE_KEY
 *   sfma-attest --statement WORKSPACE   the in-toto Statement alone, unsigned
 *
 * The Statement (in-toto Statement v1) names as subjects the declared
 * outputs present after the run, with the sha256 the record gives them,
 * and the trace, with the sha256 of its bytes; its predicate
 * (https://sfma.dev/run/v1, sfma-formats(5)) holds what a consumer needs
 * to decide: the manifest's digest, the verdict, the acceptance, the
 * Merkle tree's size, root and origin, the runner's version and the run's
 * start and end. The envelope (DSSE, payloadType
 * application/vnd.in-toto+json) carries one Ed25519 signature over DSSE's
 * pre-authentication encoding, which `openssl pkeyutl -verify -rawin`
 * checks.
 *
 * Only what sfma-verify accepts is attested: it is run first, on the
 * workspace, and must print AUDIT_OK; then the trace is read once more
 * and its sealed lines must still give the record's tree. Besides
 * sfma-seal this is the one program that reads the audit key: an
 * attestation is signed when an operator asks for one, after the run,
 * as signing a release is. The key is wiped from memory and the
 * environment as soon as it is loaded, before sfma-verify starts, and
 * never printed.
 *
 * Exit 0 with the envelope (or Statement) on stdout as one canonical
 * JSON line, 1 when the workspace does not verify or there is no key, 2
 * on usage errors. */
#include "beside.h"
#include "buf.h"
#include "canon.h"
#include "cli.h"
#include "confine.h"
#include "errors.h"
#include "merkle.h"
#include "ndjson.h"
#include "record.h"
#include "sha.h"
#include "sign.h"
#include "tlog.h"
#include "wsfile.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STATEMENT_TYPE "https://in-toto.io/Statement/v1"
#define PREDICATE_TYPE "https://sfma.dev/run/v1"
#define PAYLOAD_TYPE "application/vnd.in-toto+json"

static const char usage_text[] =
	"usage: sfma-attest WORKSPACE          (signed with SFMA_AUDIT_PRIVATE_KEY)\n"
	"       sfma-attest --statement WORKSPACE\n"
	"       sfma-attest --version | --help\n";

/* The signing key from the environment, taken as sfma-seal takes it;
 * NULL when there is none. */
static EVP_PKEY *take_signing_key(void)
{
	struct sfma_err e;
	EVP_PKEY *key = ed25519_private_take_env("SFMA_AUDIT_PRIVATE_KEY", &e);
	if (!key && e.text[0])
		die("SFMA_AUDIT_PRIVATE_KEY: %s", e.text);
	return key;
}

/* sfma-verify, beside this program, must accept the workspace (AUDIT_OK,
 * exit 0). Its reasons go to stderr as it says them. */
static void must_verify(const char *ws)
{
	char prog[PATH_MAX + 16];
	if (beside_self("sfma-verify", prog, sizeof prog) < 0)
		die("/proc/self/exe: %s (no directory to find sfma-verify in)", strerror(errno));
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(null, STDOUT_FILENO) < 0)
			_exit(127);
		execl(prog, "sfma-verify", "--", ws, (char *)NULL);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			die("waitpid: %s", strerror(errno));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die("%s: does not verify (%s %s %d): nothing is attested", ws, prog,
		    WIFEXITED(st) ? "exited" : "died of signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

/* RFC 3339 in UTC with milliseconds, of a clock-anchor's wallMs; JSON
 * null when it is not a plausible time. */
static json_t *wall_time(json_t *ms)
{
	long long v;
	if (!ndjson_integer(ms, &v) || v < 0 || v > 253402300799999LL) /* up to 9999-12-31 */
		return json_null();
	time_t s = (time_t)(v / 1000);
	struct tm tm;
	char text[40];
	if (!gmtime_r(&s, &tm) || !strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm))
		return json_null();
	char out[48];
	snprintf(out, sizeof out, "%s.%03lldZ", text, v % 1000);
	return json_string(out);
}

struct scan {
	char trace_hex[65];
	unsigned char root[MERKLE_HASH_LEN];
	char origin[TLOG_ORIGIN_LEN + 1];
	json_t *started, *ended; /* the run's first and last clock-anchor times */
};

/* The sealed lines of the trace, once: their bytes' digest, their tree,
 * and the times of the clock-anchors the record's clock names (the last
 * with each seq: the record's run is the last in the prefix). Nothing
 * may follow them. */
static void scan_trace(const char *ws, uint64_t entries, double first_seq, double last_seq, struct scan *out)
{
	struct sfma_err e;
	char path[PATH_MAX], *line;
	size_t len;
	snprintf(path, sizeof path, "%s/%s", ws, RECORD_TRACE);
	int fd = ws_open_regular(AT_FDCWD, path, &e);
	if (fd < 0)
		die("%s", e.text);
	struct line_reader r;
	struct sha256 bytes;
	struct merkle_frontier tree;
	lr_init(&r, fd, NDJSON_DEFAULT_MAX);
	sha256_init(&bytes);
	merkle_frontier_init(&tree);
	out->started = json_null();
	out->ended = json_null();
	out->origin[0] = '\0';
	int rc = 1;
	while (tree.size < entries && (rc = lr_next(&r, &line, &len, &e)) == 1) {
		unsigned char leaf[MERKLE_HASH_LEN];
		if (tree.size == 0)
			tlog_origin(line, len, out->origin);
		sha256_update(&bytes, line, len);
		sha256_update(&bytes, "\n", 1);
		merkle_leaf_hash(line, len, leaf);
		merkle_frontier_add(&tree, leaf);
		if (!memmem(line, len, "\"clock-anchor\"", 14))
			continue;
		json_t *entry = ndjson_parse(line, len, &e);
		json_t *seq = json_object_get(entry, "seq"), *data = json_object_get(entry, "data");
		if (ndjson_string_is(json_object_get(entry, "kind"), "clock-anchor") && json_is_number(seq)) {
			json_t **slot = json_number_value(seq) == first_seq ? &out->started
			                : json_number_value(seq) == last_seq ? &out->ended : NULL;
			if (slot) {
				json_decref(*slot);
				*slot = wall_time(json_object_get(data, "wallMs"));
			}
		}
		json_decref(entry);
	}
	if (rc == 1 && tree.size == entries)
		rc = lr_next(&r, &line, &len, &e);
	lr_free(&r);
	close(fd);
	if (rc < 0)
		die("%s: %s", path, e.text);
	if (rc == 1 || tree.size != entries)
		die("%s: the trace changed after it was verified; nothing is attested", path);
	unsigned char md[32];
	sha256_final(&bytes, md);
	hex_encode(md, 32, out->trace_hex);
	merkle_frontier_root(&tree, out->root);
}

/* The Statement of the record at ws. */
static json_t *statement(const char *ws)
{
	struct sfma_err e;
	char path[PATH_MAX];
	size_t len;
	snprintf(path, sizeof path, "%s/.sfma/result.json", ws);
	char *text = ws_read_regular(AT_FDCWD, path, RECORD_MAX_BYTES, &len, &e);
	json_t *record = text ? ndjson_parse(text, len, &e) : NULL;
	free(text);
	if (!record)
		die("%s", e.text);
	json_t *integrity = json_object_get(record, "integrity"), *clock = json_object_get(record, "clock");
	long long entries;
	if (!ndjson_integer(json_object_get(integrity, "entries"), &entries) || entries < 0)
		die("%s: no integrity.entries", path);
	json_t *first = json_object_get(clock, "firstSeq"), *last = json_object_get(clock, "lastSeq");
	struct scan s;
	scan_trace(ws, (uint64_t)entries, json_is_number(first) ? json_number_value(first) : -1,
	           json_is_number(last) ? json_number_value(last) : -1, &s);
	char root_hex[65];
	hex_encode(s.root, MERKLE_HASH_LEN, root_hex);
	/* A record made before the tree commits to none: the tree of the
	 * prefix it sealed is attested, computed now. One that does must
	 * still be that tree. */
	json_t *sealed_root = json_object_get(integrity, "merkleRoot");
	if (sealed_root && !ndjson_string_is(sealed_root, root_hex))
		die("%s: integrity.merkleRoot is not the tree of the trace; nothing is attested", path);

	json_t *subjects = json_array(), *o;
	size_t i;
	json_array_foreach(json_object_get(record, "outputs"), i, o) {
		json_t *name = json_object_get(o, "path"), *sha = json_object_get(o, "sha256");
		if (json_is_true(json_object_get(o, "ok")) && json_is_string(name) && json_is_string(sha))
			json_array_append_new(subjects, json_pack("{s:O, s:{s:O}}", "name", name, "digest", "sha256", sha));
	}
	json_array_append_new(subjects, json_pack("{s:s, s:{s:s}}", "name", RECORD_TRACE, "digest", "sha256", s.trace_hex));

	json_t *acceptance = json_object_get(record, "acceptance"), *runner = json_object_get(record, "runnerVersion");
	json_t *predicate = json_pack(
		"{s:O, s:O, s:O, s:I, s:s, s:s, s:O, s:O, s:o, s:o}", "manifestSha256",
		json_object_get(integrity, "manifestSha256"), "resultSha256", json_object_get(integrity, "resultSha256"),
		"verdict", json_object_get(record, "verdict") ? json_object_get(record, "verdict") : json_null(),
		"treeSize", (json_int_t)entries, "merkleRoot", root_hex, "origin", s.origin,
		"acceptance", acceptance ? acceptance : json_null(), "runnerVersion", runner ? runner : json_null(),
		"startedAt", s.started, "endedAt", s.ended);
	if (!predicate)
		die("%s: a record sfma-verify accepted, yet without manifestSha256 or resultSha256", path);
	json_decref(record);
	return json_pack("{s:s, s:o, s:s, s:o}", "_type", STATEMENT_TYPE, "subject", subjects, "predicateType",
	                 PREDICATE_TYPE, "predicate", predicate);
}

/* DSSE's pre-authentication encoding of the payload: what is signed. */
static void pae(const char *type, const struct buf *body, struct buf *out)
{
	buf_printf(out, "DSSEv1 %zu %s %zu ", strlen(type), type, body->len);
	buf_add(out, body->p, body->len);
}

/* The keyid hint: hex SHA-256 of the key's DER SubjectPublicKeyInfo (what
 * `openssl pkey -pubout -outform DER | sha256sum` prints). */
static void key_id(EVP_PKEY *key, char out[65])
{
	unsigned char *der = NULL;
	int n = i2d_PUBKEY(key, &der);
	if (n <= 0)
		die("SFMA_AUDIT_PRIVATE_KEY: cannot encode the public key");
	sha256_hex(der, (size_t)n, out);
	OPENSSL_free(der);
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	int statement_only = 0;
	enum { OPT_STATEMENT = 0x100, OPT_VERSION };
	static const struct option longopts[] = {
		{"statement", no_argument, NULL, OPT_STATEMENT}, {"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, OPT_VERSION},     {NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == OPT_STATEMENT)
			statement_only = 1;
		else if (c == 'h')
			cli_help(usage_text);
		else if (c == OPT_VERSION)
			cli_version();
		else
			cli_bad_option(usage_text, c, argv);
	}
	if (optind != argc - 1)
		cli_usage_error(usage_text, optind == argc ? "no WORKSPACE given" : "exactly one WORKSPACE");
	const char *ws = argv[optind];
	/* The key first, and gone from the environment before sfma-verify
	 * starts; a bad key fails before anything is read. */
	EVP_PKEY *key = take_signing_key();
	if (!key && !statement_only)
		die("SFMA_AUDIT_PRIVATE_KEY is not set: an attestation is signed (--statement prints it unsigned)");
	must_verify(ws);
	/* sfma-verify has accepted it: from here on the workspace is only
	 * read (sfma(1), CONFINEMENT). */
	const char *const reads[] = { ws, NULL };
	confine_self("sfma-attest", reads, NULL);

	struct sfma_err e;
	json_t *st = statement(ws);
	struct buf payload = {0}, out = {0};
	if (canon_dump(st, &payload, &e) < 0)
		die("statement: %s", e.text);
	json_decref(st);
	if (statement_only) {
		buf_add(&out, payload.p, payload.len);
	} else {
		struct buf msg = {0};
		unsigned char sig[64];
		char keyid[65];
		pae(PAYLOAD_TYPE, &payload, &msg);
		if (ed25519_sign(key, msg.p, msg.len, sig) < 0)
			die("SFMA_AUDIT_PRIVATE_KEY: signing failed");
		buf_free(&msg);
		key_id(key, keyid);
		char *body = base64_encode((const unsigned char *)payload.p, payload.len);
		char *sig64 = base64_encode(sig, sizeof sig);
		json_t *envelope = json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "payloadType", PAYLOAD_TYPE, "payload", body,
		                             "signatures", "keyid", keyid, "sig", sig64);
		free(body);
		free(sig64);
		if (canon_dump(envelope, &out, &e) < 0)
			die("envelope: %s", e.text);
		json_decref(envelope);
	}
	EVP_PKEY_free(key);
	buf_addc(&out, '\n');
	if (fwrite(out.p, 1, out.len, stdout) != out.len || fflush(stdout) != 0)
		die("stdout: %s", strerror(errno));
	buf_free(&payload);
	buf_free(&out);
	return 0;
}
