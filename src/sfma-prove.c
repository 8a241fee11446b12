/* sfma-prove - proofs about a workspace's trace, as a transparency log's.
 *
 *   sfma-prove [--checkpoint FILE] WORKSPACE LINE   inclusion proof of trace line LINE (from 1)
 *   sfma-prove [--checkpoint FILE] --since SIZE WORKSPACE
 *                                                   consistency proof from tree size SIZE
 *   sfma-prove --verifier-key KEY.pem               the audit key's signed-note verifier key
 *
 * An inclusion proof is a C2SP tlog-proof (c2sp.org/tlog-proof@v1: the
 * index LINE - 1, the RFC 6962 audit path, then the checkpoint verbatim);
 * a consistency proof is the body C2SP tlog-witness gives add-checkpoint
 * (old SIZE, the RFC 6962 consistency proof, then the checkpoint). Both
 * are of the tree the checkpoint names - the workspace's last one,
 * .sfma/checkpoint, or FILE (an earlier one of .sfma/checkpoints/) - and
 * made by one pass over that many lines of the trace, which must give the
 * checkpoint's root: the proof is then checkable with the checkpoint, the
 * line and the audit public key alone (sfma-verify --proof, or Go's
 * golang.org/x/mod/sumdb/tlog). Formats in sfma-formats(5).
 *
 * Exit 0 with the proof on stdout, 1 when it cannot be made (no
 * checkpoint, a line past it, a trace that is not the checkpoint's), 2
 * on usage errors. */
#include "buf.h"
#include "cli.h"
#include "confine.h"
#include "errors.h"
#include "merkle.h"
#include "ndjson.h"
#include "sign.h"
#include "tlog.h"
#include "wsfile.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: sfma-prove [--checkpoint FILE] WORKSPACE LINE\n"
	"       sfma-prove [--checkpoint FILE] --since SIZE WORKSPACE\n"
	"       sfma-prove --verifier-key KEY.pem\n"
	"       sfma-prove --version | --help\n";

/* --verifier-key: the key line for a public key (or the public half of a
 * private key file) that note.NewVerifier and sfma-formats(5) read. */
static int print_verifier_key(const char *path)
{
	struct sfma_err e;
	size_t len;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		die("%s: %s", path, strerror(errno));
	char *pem = read_all_fd(fd, 1u << 16, &len, &e);
	close(fd);
	if (!pem)
		die("%s: %s", path, e.text);
	EVP_PKEY *key = ed25519_public_from_pem(pem, len, &e);
	if (!key)
		key = ed25519_private_from_pem(pem, len, &e);
	explicit_bzero(pem, len); /* it may have been the private key */
	free(pem);
	struct tlog_key k;
	if (!key || tlog_key_from_pkey(key, &k, &e) < 0)
		die("%s: not an Ed25519 public or private key in PEM", path);
	EVP_PKEY_free(key);
	struct buf out = {0};
	tlog_vkey(&k, &out);
	printf("%s\n", out.p);
	buf_free(&out);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* The checkpoint the proof is of: its text and what it says. */
static char *load_checkpoint(const char *path, struct tlog_checkpoint *c, size_t *len)
{
	struct sfma_err e;
	enum tlog_signed how;
	char *text = ws_read_regular(AT_FDCWD, path, TLOG_TEXT_MAX, len, &e);
	if (!text && errno == ENOENT)
		die("%s: no checkpoint (no run of this workspace was sealed since sfma 0.4)", path);
	if (!text)
		die("%s", e.text);
	if (tlog_checkpoint_open(text, *len, NULL, c, &how, &e) < 0)
		die("%s: %s", path, e.text);
	return text;
}

/* One pass over the checkpoint's lines of the trace: the hashes of
 * ranges, and the root and origin to hold against the checkpoint's. */
static void hash_ranges(const char *trace, const struct tlog_checkpoint *c, const struct merkle_range *ranges,
                        size_t n, unsigned char (*out)[MERKLE_HASH_LEN])
{
	struct sfma_err e;
	int fd = ws_open_regular(AT_FDCWD, trace, &e);
	if (fd < 0)
		die("%s", e.text);
	struct line_reader r;
	struct merkle_ranges mr;
	struct merkle_frontier all;
	char origin[TLOG_ORIGIN_LEN + 1], *line;
	size_t len;
	int rc = 1;
	lr_init(&r, fd, NDJSON_DEFAULT_MAX);
	merkle_ranges_begin(&mr, ranges, n, out);
	merkle_frontier_init(&all);
	while (all.size < c->size && (rc = lr_next(&r, &line, &len, &e)) == 1) {
		unsigned char leaf[MERKLE_HASH_LEN];
		if (all.size == 0)
			tlog_origin(line, len, origin);
		merkle_leaf_hash(line, len, leaf);
		merkle_ranges_add(&mr, leaf);
		merkle_frontier_add(&all, leaf);
	}
	lr_free(&r);
	close(fd);
	if (rc < 0)
		die("%s: %s", trace, e.text);
	if (all.size < c->size)
		die("%s: %llu lines, fewer than the checkpoint's %llu: the trace was cut back", trace,
		    (unsigned long long)all.size, (unsigned long long)c->size);
	unsigned char root[MERKLE_HASH_LEN];
	merkle_frontier_root(&all, root);
	if (strcmp(origin, c->origin) != 0 || memcmp(root, c->root, MERKLE_HASH_LEN) != 0)
		die("%s: its first %llu lines are not the tree the checkpoint names (origin %s)", trace,
		    (unsigned long long)c->size, c->origin);
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	const char *checkpoint = NULL, *vkey = NULL;
	unsigned long since = 0, line = 0;
	int has_since = 0;
	enum { OPT_CHECKPOINT = 0x100, OPT_SINCE, OPT_VKEY, OPT_VERSION };
	static const struct option longopts[] = {
		{"checkpoint", required_argument, NULL, OPT_CHECKPOINT}, {"since", required_argument, NULL, OPT_SINCE},
		{"verifier-key", required_argument, NULL, OPT_VKEY},    {"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, OPT_VERSION},             {NULL, 0, NULL, 0},
	};
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == OPT_CHECKPOINT)
			checkpoint = optarg;
		else if (c == OPT_SINCE) {
			if (cli_parse_ulong(optarg, 1, (unsigned long)MERKLE_MAX_SIZE, &since) < 0)
				cli_usage_error(usage_text, "--since: a tree size, 1 or more");
			has_since = 1;
		} else if (c == OPT_VKEY)
			vkey = optarg;
		else if (c == 'h')
			cli_help(usage_text);
		else if (c == OPT_VERSION)
			cli_version();
		else
			cli_bad_option(usage_text, c, argv);
	}
	if (vkey) {
		if (optind != argc || checkpoint || has_since)
			cli_usage_error(usage_text, "--verifier-key takes no other argument");
		const char *const reads[] = { vkey, NULL };
		confine_self("sfma-prove", reads, NULL);
		return print_verifier_key(vkey);
	}
	int want = has_since ? 1 : 2;
	if (argc - optind != want)
		cli_usage_error(usage_text, has_since ? "--since SIZE WORKSPACE: one WORKSPACE" : "WORKSPACE LINE expected");
	const char *ws = argv[optind];
	if (!has_since && cli_parse_ulong(argv[optind + 1], 1, (unsigned long)MERKLE_MAX_SIZE, &line) < 0)
		cli_usage_error(usage_text, "LINE: a line number of the trace, from 1");
	/* Read-only on the workspace and --checkpoint's file (sfma(1),
	 * CONFINEMENT). */
	const char *const reads[] = { ws, checkpoint, NULL };
	confine_self("sfma-prove", reads, NULL);

	char *path = xmalloc(strlen(ws) + 64), *trace = xmalloc(strlen(ws) + 64);
	sprintf(path, "%s/.sfma/checkpoint", ws);
	sprintf(trace, "%s/.sfma/trace.jsonl", ws);
	struct tlog_checkpoint cp;
	size_t note_len;
	char *note = load_checkpoint(checkpoint ? checkpoint : path, &cp, &note_len);
	const char *named = checkpoint ? checkpoint : path;

	struct tlog_proof *proof = xcalloc(1, sizeof *proof);
	struct merkle_range ranges[MERKLE_PROOF_MAX];
	if (has_since) {
		if (since > cp.size)
			die("%s: --since %lu is past the checkpoint's tree size %llu", named, since,
			    (unsigned long long)cp.size);
		proof->kind = TLOG_CONSISTENCY;
		proof->index = since;
		merkle_consistency_ranges(since, cp.size, ranges, &proof->n);
	} else {
		if (line > cp.size)
			die("%s: line %lu is not in the checkpoint's tree of %llu lines (a later run's: prove it against "
			    "that run's checkpoint)", named, line, (unsigned long long)cp.size);
		proof->kind = TLOG_INCLUSION;
		proof->index = line - 1;
		merkle_inclusion_ranges(line - 1, cp.size, ranges, &proof->n);
	}
	hash_ranges(trace, &cp, ranges, proof->n, proof->hash);
	proof->note = note;
	proof->note_len = note_len;
	struct buf out = {0};
	tlog_proof_text(proof, &out);
	if (fwrite(out.p, 1, out.len, stdout) != out.len || fflush(stdout) != 0)
		die("stdout: %s", strerror(errno));
	buf_free(&out);
	free(proof);
	free(note);
	free(path);
	free(trace);
	return 0;
}
