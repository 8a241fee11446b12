/* sfma-seal - commit a run's result record to its trace, and sign it.
 *
 *   sfma-seal [--allow-empty] [--key-ready-fd FD] [--observed-fd FD] WORKSPACE < result-body.json
 *   sfma-seal --check-key
 *
 * Reads the result body (sfma-formats(5), without `integrity`),
 * verifies WORKSPACE/.sfma/trace.jsonl, computes `integrity` (head, entry
 * count, manifest and result digests, the Merkle tree's size and root),
 * signs it with Ed25519 when SFMA_AUDIT_PRIVATE_KEY holds a PKCS#8 PEM
 * key, writes the tree's checkpoint (signed with the same key) as
 * WORKSPACE/.sfma/checkpoint and checkpoints/<size>, and replaces
 * WORKSPACE/.sfma/result.json atomically. A checkpoint is never written
 * for a trace that does not extend the last one: a trace rewritten or cut
 * back below it is refused. Prints the integrity object as one canonical
 * line. This is the only stage that sees the signing key;
 * the key is wiped from memory and the environment once loaded, and never
 * printed. `--key-ready-fd FD` writes one byte to FD once the key is
 * loaded: the orchestrator starts this stage first and the others only
 * then, so a bad key is one message and nothing on disk. `--check-key`
 * only loads the key. `--observed-fd FD` reads the observer's head
 * (sfma-tap(1)) once the body is in, checks it against
 * WORKSPACE/.sfma/observed.jsonl and commits to it (integrity.observedHead,
 * observedEntries, observerSignature). Exit 0 when sealed (or the key is usable), 1 on any error (nothing
 * written), 2 on usage errors. */
#include "atomic.h"
#include "buf.h"
#include "canon.h"
#include "chain.h"
#include "confine.h"
#include "cli.h"
#include "errors.h"
#include "ndjson.h"
#include "observed.h"
#include "record.h"
#include "sha.h"
#include "sign.h"
#include "tlog.h"
#include "wsfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The signing key, taken from the environment (ed25519_private_take_env:
 * wiped and unset, so no later child or core dump holds it). */
static EVP_PKEY *take_signing_key(void)
{
	struct sfma_err e;
	EVP_PKEY *key = ed25519_private_take_env("SFMA_AUDIT_PRIVATE_KEY", &e);
	if (!key && e.text[0])
		die("SFMA_AUDIT_PRIVATE_KEY: %s; refusing to write an unsigned record", e.text);
	return key;
}

static json_t *sign_integrity(EVP_PKEY *key, json_t *integrity)
{
	struct buf msg = {0};
	struct sfma_err e;
	unsigned char sig[64];
	if (canon_dump(integrity, &msg, &e) < 0)
		die("integrity: %s", e.text);
	if (ed25519_sign(key, msg.p, msg.len, sig) < 0)
		die("SFMA_AUDIT_PRIVATE_KEY: signing failed; refusing to write an unsigned record");
	buf_free(&msg);
	char *pub = ed25519_public_pem(key);
	char *value = base64_encode(sig, sizeof sig);
	if (!pub)
		die("SFMA_AUDIT_PRIVATE_KEY: cannot derive the public key");
	json_t *s = json_pack("{s:s, s:s, s:s}", "algorithm", "ed25519", "publicKey", pub, "value", value);
	free(pub);
	free(value);
	return s;
}

/* tests/bench/merkle.sh measures what the tree costs a run with programs
 * built apart with SFMA_BENCH_NO_TREE (lib/merkle.c); none is otherwise. */
#ifdef SFMA_BENCH_NO_TREE
#define WITH_TREE 0
#else
#define WITH_TREE 1
#endif

/* The workspace's last checkpoint (.sfma/checkpoint), when it has one:
 * 1 with c filled, 0 when there is none. Any other file there is not a
 * checkpoint this log can be shown to extend: refused. */
static int last_checkpoint(const char *ws, struct tlog_checkpoint *c)
{
	char path[PATH_MAX];
	struct sfma_err e;
	size_t len;
	enum tlog_signed how;
	if (snprintf(path, sizeof path, "%s/.sfma/checkpoint", ws) >= (int)sizeof path)
		die("%s: path too long", ws);
	char *text = ws_read_regular(AT_FDCWD, path, TLOG_TEXT_MAX, &len, &e);
	if (!text && errno == ENOENT)
		return 0;
	if (!text || tlog_checkpoint_open(text, len, NULL, c, &how, &e) < 0)
		die("%s; refusing to seal (move it and checkpoints/ aside to begin a new log)", text ? path : e.text);
	free(text);
	return 1;
}

/* The trace extends the last checkpoint: the same first line, at least as
 * many entries, and the same tree at its size. */
static void check_extends(const char *trace, const struct tlog_checkpoint *last, const char *origin,
                          const struct chain_summary *sum, const struct chain_tree_point *at)
{
	if (last->size > sum->entries)
		die("%s: %llu entries, fewer than the last checkpoint's %llu: the trace was cut back; refusing to seal",
		    trace, (unsigned long long)sum->entries, (unsigned long long)last->size);
	if (strcmp(last->origin, origin) != 0)
		die("%s: its first line is not the one the last checkpoint's origin names (%s): another log; "
		    "refusing to seal", trace, last->origin);
	if (!at->found || memcmp(at->root, last->root, MERKLE_HASH_LEN) != 0)
		die("%s: its first %llu entries are not the tree of the last checkpoint: the trace was rewritten "
		    "below it; refusing to seal", trace, (unsigned long long)last->size);
}

/* The checkpoint of the sealed tree, signed when there is a key: as
 * checkpoints/<size> (every run's is kept), then as checkpoint. */
static void write_checkpoint(const char *ws, const struct tlog_checkpoint *c, EVP_PKEY *key)
{
	struct sfma_err e;
	struct buf text = {0}, note = {0};
	struct tlog_key k;
	char dir[PATH_MAX], name[32];
	tlog_checkpoint_text(c, &text);
	if (key) {
		if (tlog_key_from_pkey(key, &k, &e) < 0 || tlog_note_sign(key, &k, text.p, text.len, &note, &e) < 0)
			die("SFMA_AUDIT_PRIVATE_KEY: %s; refusing to write an unsigned checkpoint", e.text);
	} else {
		/* A signed note has at least one signature: without a key the
		 * checkpoint is its note text alone (sfma-formats(5)). */
		buf_add(&note, text.p, text.len);
	}
	if (snprintf(dir, sizeof dir, "%s/.sfma", ws) >= (int)sizeof dir)
		die("%s: path too long", ws);
	int sfma = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfma < 0)
		die("%s: %s", dir, strerror(errno));
	if (mkdirat(sfma, "checkpoints", 0755) < 0 && errno != EEXIST)
		die("%s/checkpoints: %s", dir, strerror(errno));
	int kept = openat(sfma, "checkpoints", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (kept < 0)
		die("%s/checkpoints: %s", dir, strerror(errno));
	snprintf(name, sizeof name, "%llu", (unsigned long long)c->size);
	if (atomic_write_at(kept, name, note.p, note.len, 0644, &e) < 0)
		die("%s/checkpoints: %s", dir, e.text);
	if (atomic_write_at(sfma, "checkpoint", note.p, note.len, 0644, &e) < 0)
		die("%s: %s", dir, e.text);
	close(kept);
	close(sfma);
	buf_free(&text);
	buf_free(&note);
}

/* What the observer saw: the head sfma-tap writes on fd once the planner
 * is done with the stages it watches (sfma-tap(1)), checked against the
 * chain it names - the file verified up to that many entries, ending in
 * that head, every line chained, the observer's signature valid. The
 * members integrity gains (new). A tap that stopped first wrote none:
 * a run it did not see whole is not sealed. */
static json_t *observed_head(const char *ws, int fd)
{
	struct sfma_err e;
	struct line_reader lr;
	char *text, hex[SHA256_HEX_LEN + 1], path[PATH_MAX], note[PATH_MAX];
	size_t len;
	/* One line, not the pipe to its end: the head is the tap's last word,
	 * whoever else may hold the pipe open. */
	lr_init(&lr, fd, 1u << 16);
	int got = lr_next(&lr, &text, &len, &e);
	if (got < 0 && !lr.torn)
		die("--observed-fd: %s", e.text);
	if (got <= 0)
		die("the observer (sfma-tap) stopped before the run's end: it gave no head; refusing to seal a run it "
		    "did not see whole");
	json_t *head = ndjson_parse(text, len, &e);
	lr_free(&lr);
	close(fd);
	uint64_t entries;
	int valid = head && obs_head_valid(head, &entries, hex, &e) == 0;
	/* Static: still reachable at a fatal exit below (LeakSanitizer). */
	static json_t *sig;
	sig = valid ? json_incref(json_object_get(head, "signature")) : NULL;
	json_decref(head);
	if (!valid)
		die("--observed-fd: the observer's head: %s", e.text);
	if (snprintf(path, sizeof path, "%s/.sfma/%s", ws, OBSERVED_FILE) >= (int)sizeof path ||
	    snprintf(note, sizeof note, "%s/.sfma/%s", ws, OBSERVED_NOTE) >= (int)sizeof note)
		die("%s: path too long", ws);
	int ofd = ws_open_regular(AT_FDCWD, path, &e);
	struct chain_summary sum = {.entries = 0};
	memcpy(sum.head, CHAIN_ZERO_HASH, sizeof sum.head);
	if (ofd < 0 && !(errno == ENOENT && entries == 0))
		die("%s", e.text);
	if (ofd >= 0) {
		int used;
		const struct chain_opts mark = {.mark_set = 1, .mark_count = entries};
		if (chain_verify_cached(ofd, note, &mark, &sum, &used, NULL, &e) < 0)
			die("%s: failed hash-chain verification: %s", path, e.text);
		close(ofd);
	}
	if (sum.legacy)
		die("%s: line 1 is not chained: not an observed chain", path);
	if (sum.entries != entries || strcmp(sum.head, hex) != 0)
		die("%s: %llu entries ending in %.16s..., where the observer closed on %llu ending in %.16s...", path,
		    (unsigned long long)sum.entries, sum.head, (unsigned long long)entries, hex);
	json_t *members = json_pack("{s:s, s:I}", "observedHead", hex, "observedEntries", (json_int_t)entries);
	if (sig)
		json_object_set_new(members, "observerSignature", sig);
	sig = NULL;
	return members;
}

static const char usage_text[] =
	"usage: sfma-seal [--allow-empty] [--key-ready-fd FD] [--observed-fd FD] WORKSPACE < result-body.json\n"
	"       sfma-seal --check-key\n"
	"       sfma-seal --version | --help\n";

struct options {
	int check_key, allow_empty;
	int key_ready_fd; /* -1: none */
	int observed_fd;  /* -1: none */
	const char *workspace;
};

static void parse_options(int argc, char **argv, struct options *o)
{
	enum { OPT_CHECK_KEY = 0x100, OPT_ALLOW_EMPTY, OPT_KEY_READY_FD, OPT_OBSERVED_FD, OPT_VERSION };
	static const struct option longopts[] = {
		{"check-key", no_argument, NULL, OPT_CHECK_KEY}, {"allow-empty", no_argument, NULL, OPT_ALLOW_EMPTY},
		{"key-ready-fd", required_argument, NULL, OPT_KEY_READY_FD},
		{"observed-fd", required_argument, NULL, OPT_OBSERVED_FD},
		{"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, OPT_VERSION},
		{NULL, 0, NULL, 0},
	};
	*o = (struct options){.key_ready_fd = -1, .observed_fd = -1};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == OPT_CHECK_KEY)
			o->check_key = 1;
		else if (c == OPT_ALLOW_EMPTY)
			o->allow_empty = 1;
		else if (c == OPT_KEY_READY_FD) {
			unsigned long fd;
			if (cli_parse_ulong(optarg, 3, INT_MAX, &fd) < 0 || fcntl((int)fd, F_GETFD) < 0)
				cli_usage_error(usage_text, "--key-ready-fd: an open descriptor, 3 or more");
			o->key_ready_fd = (int)fd;
		}
		else if (c == OPT_OBSERVED_FD) {
			unsigned long fd;
			if (cli_parse_ulong(optarg, 3, INT_MAX, &fd) < 0 || fcntl((int)fd, F_GETFD) < 0)
				cli_usage_error(usage_text, "--observed-fd: an open descriptor, 3 or more");
			o->observed_fd = (int)fd;
		}
		else if (c == 'h')
			cli_help(usage_text);
		else if (c == OPT_VERSION)
			cli_version();
		else
			cli_bad_option(usage_text, c, argv);
	}
	if (o->check_key) {
		if (optind != argc || o->allow_empty || o->key_ready_fd >= 0 || o->observed_fd >= 0)
			cli_usage_error(usage_text, "--check-key takes no other argument");
		return;
	}
	if (optind != argc - 1)
		cli_usage_error(usage_text, optind == argc ? "no WORKSPACE given" : "exactly one WORKSPACE");
	o->workspace = argv[optind];
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	struct options o;
	parse_options(argc, argv, &o);
	const char *ws = o.workspace;
	/* The key is taken first, before any input: a bad key fails the same
	 * way whatever else is wrong. */
	EVP_PKEY *key = take_signing_key();
	if (o.check_key) {
		EVP_PKEY_free(key);
		return 0;
	}
	/* The key is usable (or there is none): say so to whoever waits
	 * before starting the rest of the run. */
	if (o.key_ready_fd >= 0) {
		ssize_t w;
		while ((w = write(o.key_ready_fd, "k", 1)) < 0 && errno == EINTR)
			;
		close(o.key_ready_fd);
	}

	/* Whoever waits for the integrity line learns why none comes. */
	set_error_echo_if_asked(1);

	/* Confined to WORKSPACE/.sfma (sfma(1), CONFINEMENT): at the
	 * planner's go when it passed a channel, else once the body is here
	 * (the run has made .sfma by then), before it is parsed. */
	const struct confine_places places = {.workspace = ws};
	struct confine_report confined = {.stage = ""};
	int channel = confine_channel_take();
	if (channel >= 0)
		confine_stage(&channel, "sfma-seal", &places, &confined);

	/* 1. The body. */
	struct sfma_err e;
	size_t len;
	char *text = read_all_fd(0, RECORD_MAX_BYTES, &len, &e);
	if (!text)
		die("stdin: %s", e.text);
	if (!confined.stage[0])
		confine_stage(&channel, "sfma-seal", &places, &confined);
	if (len == 0 && o.allow_empty) {
		/* The planner stopped before it could seal, and has said why. */
		free(text);
		EVP_PKEY_free(key);
		return 0;
	}
	if (len == 0)
		die("stdin: empty: no result body to seal");
	json_t *record = ndjson_parse(text, len, &e);
	free(text);
	if (!record)
		die("stdin: %s", e.text);
	if (!json_is_object(record))
		die("stdin: the result body must be a JSON object");
	if (json_object_get(record, "integrity"))
		die("stdin: the result body must not carry integrity; sfma-seal computes it");
	json_t *trace = json_object_get(record, "trace");
	if (!trace)
		json_object_set_new(record, "trace", json_string(RECORD_TRACE));
	else if (!json_is_string(trace) || strcmp(json_string_value(trace), RECORD_TRACE) != 0)
		die("stdin: trace must be \"%s\"", RECORD_TRACE);

	/* 2. The chain it commits to. */
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s/%s", ws, RECORD_TRACE) >= (int)sizeof path)
		die("%s: path too long", ws);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
	if (fd < 0)
		die("%s: %s", path, strerror(errno));
	/* The writer's note of the head it verified spares checking that
	 * prefix entry by entry again when its bytes still match (chain.h),
	 * and holds the tree of that prefix, and at the size its writer found
	 * (the last checkpoint's, as a rule): the tree is then the note's and
	 * the lines after it, hashed as they are verified. */
	char cache[PATH_MAX];
	struct chain_summary sum;
	struct tlog_checkpoint last;
	int has_last = WITH_TREE && last_checkpoint(ws, &last), used_cache;
	struct chain_tree_point at_last = {.size = has_last ? last.size : 0};
	struct chain_opts tree = {.tree = 1, .points = &at_last, .npoints = has_last};
	if (snprintf(cache, sizeof cache, "%s/.sfma/%s", ws, CHAIN_HEAD_CACHE) >= (int)sizeof cache)
		die("%s: path too long", ws);
	if (chain_verify_cached(fd, cache, &tree, &sum, &used_cache, NULL, &e) < 0)
		die("%s: failed hash-chain verification: %s", path, e.text);
	struct tlog_checkpoint now = {.size = sum.entries};
	merkle_frontier_root(&sum.tree, now.root);
	if (sum.entries > 0) {
		size_t first_len;
		char *first = chain_line_at(fd, 0, 0, &first_len, &e);
		if (!first)
			die("%s: %s", path, e.text);
		tlog_origin(first, first_len, now.origin);
		free(first);
	}
	if (has_last)
		check_extends(path, &last, now.origin, &sum, &at_last);
	close(fd);

	/* 3. What the observer saw, once it closed (sfma-tap(1)). */
	json_t *observed = o.observed_fd >= 0 ? observed_head(ws, o.observed_fd) : NULL;

	/* 4. The commitments, then the signature over them. */
	char manifest_hex[65], result_hex[65], root_hex[65];
	if (record_digests(record, manifest_hex, result_hex, &e) < 0)
		die("stdin: %s", e.text);
	hex_encode(now.root, MERKLE_HASH_LEN, root_hex);
	json_t *integrity = json_pack("{s:s, s:s, s:f, s:s, s:s, s:f, s:s}", "algorithm", RECORD_ALGORITHM,
	                              "headHash", sum.head, "entries", (double)sum.entries,
	                              "manifestSha256", manifest_hex, "resultSha256", result_hex,
	                              "treeSize", (double)now.size, "merkleRoot", root_hex);
	if (observed)
		json_object_update(integrity, observed);
	json_decref(observed);
	if (key)
		json_object_set_new(integrity, "signature", sign_integrity(key, integrity));
	json_object_set(record, "integrity", integrity);

	/* 5. The checkpoint, before the record: a checkpoint without its
	 * record (a crash between) is still true of the trace; an empty
	 * trace has no origin and no checkpoint. */
	if (WITH_TREE && sum.entries > 0)
		write_checkpoint(ws, &now, key);
	EVP_PKEY_free(key);

	/* 6. result.json, replaced atomically. */
	struct buf out = {0};
	if (canon_dump_pretty(record, &out, &e) < 0)
		die("record: %s", e.text);
	buf_addc(&out, '\n');
	if (snprintf(path, sizeof path, "%s/.sfma/result.json", ws) >= (int)sizeof path)
		die("%s: path too long", ws);
	if (atomic_write(path, out.p, out.len, 0600, &e) < 0)
		die("%s", e.text);
	if (ndjson_print(stdout, integrity) < 0)
		die("stdout: %s", strerror(errno));
	buf_free(&out);
	json_decref(integrity);
	json_decref(record);
	return 0;
}
