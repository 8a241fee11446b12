#!/bin/sh
# What the Merkle tree (sfma-formats(5)) costs and what it buys, side by side:
#
#  1. one entry of a trace of ENTRIES entries (default 1 000 000, about 320
#     MB, tests/bench/gen-trace.py) checked by its inclusion proof - the
#     proof's hashes, sfma-verify --proof as a process, and the check
#     itself in process (a small driver over lib/tlog.c and lib/merkle.c)
#     - against sfma-verify of the whole workspace; and what making the
#     proof costs (sfma prove: one pass over the lines);
#  2. sfma-verify of that workspace with the tree checked, and built
#     without it (-DSFMA_BENCH_NO_TREE into a temporary directory: leaves
#     and nodes not hashed; no built program has that switch), against
#     `openssl dgst -sha256` of the same bytes, the hashing floor (target:
#     with the tree within 2x of it). Best of three, interleaved, warm
#     page cache;
#  3. the 100-turn mock run of tests/bench/evidence.sh (a bootstrap
#     candidate, 98 reads, done) with the programs under test and with
#     sfma-chain and sfma-seal built without the tree (which also write
#     no checkpoint): the median of ROUNDS runs each, interleaved, each in
#     a workspace of its own (target: at most 3 % more).
#
#   ENTRIES=N ROUNDS=N (default 21)  SFMA_BINDIR (default ../../bin)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$here/../.." && pwd)
BIN=${SFMA_BINDIR:-$SRC/bin}
entries=${ENTRIES:-1000000}
ROUNDS=${ROUNDS:-21}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s -C "$SRC" BUILD="$tmp/build" BINDIR="$tmp/nt" CFLAGS="-O2 -g -DSFMA_BENCH_NO_TREE" \
	"$tmp/nt/sfma-chain" "$tmp/nt/sfma-seal" "$tmp/nt/sfma-verify" >/dev/null

# The check of one proof, in process: parse, open the checkpoint, check,
# N times; microseconds per check.
cat >"$tmp/check.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "merkle.h"
#include "ndjson.h"
#include "tlog.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv)
{
	struct sfma_err e;
	size_t n, ln;
	FILE *f = fopen(argv[1], "rb"), *g = fopen(argv[2], "rb");
	char *text = read_all_fd(fileno(f), 1 << 16, &n, &e), *line = read_all_fd(fileno(g), 1 << 24, &ln, &e);
	if (ln && line[ln - 1] == '\n')
		ln--;
	int rounds = 20000, ok = 0;
	static struct tlog_proof p;
	struct tlog_checkpoint c;
	enum tlog_signed how;
	unsigned char leaf[MERKLE_HASH_LEN];
	double t0 = now();
	for (int i = 0; i < rounds; i++) {
		merkle_leaf_hash(line, ln, leaf);
		ok += tlog_proof_parse(text, n, &p, &e) == 0 && tlog_checkpoint_open(p.note, p.note_len, NULL, &c, &how, &e) == 0 &&
		      merkle_check_inclusion((const unsigned char (*)[MERKLE_HASH_LEN])p.hash, p.n, p.index, c.size, leaf, c.root) == 0;
	}
	double t1 = now();
	for (int i = 0; i < rounds; i++)
		ok += merkle_check_inclusion((const unsigned char (*)[MERKLE_HASH_LEN])p.hash, p.n, p.index, c.size, leaf, c.root) == 0;
	double t2 = now();
	if (ok != 2 * rounds)
		return 1;
	printf("%.2f %.2f %zu\n", (t1 - t0) / rounds * 1e6, (t2 - t1) / rounds * 1e6, p.n);
	return 0;
}
C
liba=$SRC/build/libsfma.a
cc -std=c11 -O2 -D_GNU_SOURCE -I"$SRC/lib" -o "$tmp/check" "$tmp/check.c" "$liba" -ljansson -lcrypto -lpthread -lm

ws=$tmp/ws
mkdir -p "$ws/.sfma"
python3 "$here/gen-trace.py" "$entries" >"$ws/.sfma/trace.jsonl"
echo '{"manifest":{"name":"bench","workspace":"ws"},"verdict":"completed"}' | "$BIN/sfma-seal" "$ws" >/dev/null
mid=$((entries / 2 + 1))
python3 - "$ws" "$BIN" "$tmp/nt" "$tmp/check" "$mid" <<'EOF'
import os, subprocess, sys, time
ws, bin_, nt, check, mid = sys.argv[1:]
trace = os.path.join(ws, ".sfma", "trace.jsonl")
with open(trace, "rb") as f:  # warm the page cache
    while f.read(1 << 20):
        pass
def run(argv, **kw):
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, **kw)
    if p.returncode != 0:
        sys.exit("bench: %s failed: %s" % (argv[0], p.stderr.decode().strip()))
    return time.perf_counter() - t0, p.stdout
proof, line = os.path.join(ws, "p"), os.path.join(ws, "line")
tprove, out = run([bin_ + "/sfma-prove", ws, mid])
open(proof, "wb").write(out)
with open(trace, "rb") as f:
    for i, l in enumerate(f, 1):
        if i == int(mid):
            open(line, "wb").write(l)
            break
best = {}
for _ in range(3):
    for name, argv in [("openssl", ["openssl", "dgst", "-sha256", trace]), ("verify", [bin_ + "/sfma-verify", ws]),
                       ("notree", [nt + "/sfma-verify", ws])]:
        t, out = run(argv)
        if name not in best or t < best[name][0]:
            best[name] = (t, out)
pt = min(run([bin_ + "/sfma-verify", "--proof", proof, "--line", line])[0] for _ in range(5))
inproc, pure, hashes = run([check, proof, line])[1].decode().split()
fw, vw, nw = best["openssl"][0], best["verify"][0], best["notree"][0]
print("trace: %s entries, %.0f MB" % (best["verify"][1].decode().split("entries=")[1].split()[0],
      os.path.getsize(trace) / 1e6))
print("one entry by its inclusion proof (line %s): %s hashes" % (mid, hashes))
print("  the check in process              %7.2f us  (parse, checkpoint, %s node hashes: %s us of it)" % (float(inproc), hashes, pure))
print("  sfma-verify --proof (a process)   %7.2f ms" % (pt * 1e3))
print("  the whole trace, sfma-verify      %7.3f s   (%.0fx the process)" % (vw, vw / pt))
print("  making the proof, sfma prove      %7.3f s   (one pass over the lines)" % tprove)
print("sfma-verify against the hashing floor:")
print("  openssl dgst -sha256              %7.3f s" % fw)
print("  sfma-verify with the tree         %7.3f s   %.2fx the floor (target: within 2x)" % (vw, vw / fw))
print("  sfma-verify built without it      %7.3f s   %.2fx the floor; the tree: %+.1f %%" % (nw, nw / fw, (vw / nw - 1) * 100))
EOF
rm -rf "$ws"

# 3. The 100-turn run, with and without the tree.
mkdir -p "$tmp/base"
for p in "$BIN"/sfma*; do ln -s "$p" "$tmp/base/"; done
rm "$tmp/base/sfma-chain" "$tmp/base/sfma-seal" "$tmp/base/sfma"
cp "$tmp/nt/sfma-chain" "$tmp/nt/sfma-seal" "$tmp/base/"
cp "$BIN/sfma" "$tmp/base/" # sfma starts the stages found beside it
cd "$tmp"
mkdir inputs
i=0
while [ $i -lt 100 ]; do echo "file $i" >"inputs/f$i.txt"; i=$((i + 1)); done
cat >m.json <<'JSON'
{"name":"bench","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":[],"inputs":[],"outputs":[],"maxTurns":200,"maxModelCalls":300,
 "dryRunDefault":false}
JSON
cand='{"mission":"m","successCriteria":[],"loopRoles":[{"name":"r","duty":"d"}],"firstTasks":[],"schedule":[]}'
SFMA_MOCK=$(printf '[%s' "$cand"; i=0; while [ $i -lt 98 ]; do printf ',{"tool":"read","path":"f%d.txt"}' "$i"; i=$((i + 1)); done; printf ',{"tool":"done","summary":"read them"}]')
export SFMA_MOCK
. "$here/runs.subr"
: >without
: >with
r=0
while [ $r -lt "$ROUNDS" ]; do
	once "$tmp/base" >>without
	once "$BIN" >>with
	r=$((r + 1))
done
last=$(cat "$tmp/last")
turns=$(jq .turns "$last/ws/.sfma/result.json")
lines=$(wc -l <"$last/ws/.sfma/trace.jsonl")
w=$(median without) t=$(median with)
echo "the tree during a run: $turns turns, $lines lines, median of $ROUNDS: $w ms without, $t ms with (checkpoint written): $(awk -v a="$t" -v b="$w" 'BEGIN { printf "%+.1f %%", (a / b - 1) * 100 }') (target: at most +3 %; best: $(best without) and $(best with) ms)"
