#!/bin/sh
# What evidence costs a run: a 100-turn mock run (a bootstrap candidate,
# 98 reads of a small file, done) with the programs under test, against the
# same programs built without evidence (sfma-plan compiled with
# -DSFMA_BENCH_NO_EVIDENCE into a temporary directory; no built program has
# that switch), and against the programs as they were before evidence
# existed (PRE_EVIDENCE, a commit: built from its own tree with git
# archive; left out when the source has no git history). Two scripts: the
# same read repeated (replies and results repeat, so the store
# deduplicates them) and reads that differ in every reply and result
# (every turn stores new blobs: appended to the store's journal, synced
# before the entries that name them, filed under their names by a thread
# beside the run, one syncfs at the end). The median of ROUNDS runs each
# (the best of a few, on a virtual machine, measures its luckiest moment),
# interleaved, each run in a workspace of its own: no workspace is removed
# until the end, because on ext4 without a journal the inode allocator
# skips every inode freed in the last minutes (fs/ext4/ialloc.c,
# recently_deleted()), and a bench that removes what it just made would
# measure that instead of the run. (A bench run just after another one
# still meets the inodes that one freed: TMPDIR on another file system, or
# a few minutes between, keeps the runs apart.)
# Budget: both scripts at most 1.2x.
set -eu
BIN=${SFMA_BINDIR:-$(cd "$(dirname "$0")/../../bin" && pwd)}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${ROUNDS:-21}
# The last commit before evidence was kept.
PRE_EVIDENCE=${PRE_EVIDENCE:-b8395c9}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s -C "$SRC" BUILD="$tmp/build" BINDIR="$tmp/bin" \
	CFLAGS="-O2 -g -DSFMA_BENCH_NO_EVIDENCE" "$tmp/bin/sfma-plan" >/dev/null
# The baseline differs only in sfma-plan: every other stage is the one under test.
mkdir -p "$tmp/base"
for p in "$BIN"/sfma*; do ln -s "$p" "$tmp/base/"; done
rm "$tmp/base/sfma-plan" "$tmp/base/sfma"
cp "$tmp/bin/sfma-plan" "$tmp/base/"
cp "$BIN/sfma" "$tmp/base/" # sfma starts the stages found beside it
pre=""
if git -C "$SRC" cat-file -e "$PRE_EVIDENCE^{commit}" 2>/dev/null; then
	mkdir "$tmp/pre-src"
	git -C "$SRC" archive "$PRE_EVIDENCE" | tar -x -C "$tmp/pre-src"
	make -s -j2 -C "$tmp/pre-src" BUILD="$tmp/pre-build" BINDIR="$tmp/pre" >/dev/null
	pre="$tmp/pre"
fi

cd "$tmp"
mkdir inputs
i=0
while [ $i -lt 100 ]; do echo "file $i" >"inputs/f$i.txt"; i=$((i + 1)); done
cat >m.json <<'JSON'
{"name":"bench","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":[],"inputs":[],"outputs":[],"maxTurns":200,"maxModelCalls":300,
 "dryRunDefault":false}
JSON
script() { # script same|distinct
	cand='{"mission":"m","successCriteria":[],"loopRoles":[{"name":"r","duty":"d"}],"firstTasks":[],"schedule":[]}'
	printf '[%s' "$cand"
	i=0
	while [ $i -lt 98 ]; do
		if [ "$1" = same ]; then printf ',{"tool":"read","path":"f0.txt"}'
		else printf ',{"tool":"read","path":"f%d.txt"}' "$i"; fi
		i=$((i + 1))
	done
	printf ',{"tool":"done","summary":"read them"}]'
}
. "$SRC/tests/bench/runs.subr"
for kind in same distinct; do
	SFMA_MOCK=$(script $kind)
	export SFMA_MOCK
	# Interleaved, so that the machine's other load falls on all alike.
	: >"$tmp/before"
	: >"$tmp/without"
	: >"$tmp/with"
	r=0
	while [ $r -lt "$ROUNDS" ]; do
		if [ -n "$pre" ]; then once "$pre" >>"$tmp/before"; fi
		once "$tmp/base" >>"$tmp/without"
		once "$BIN" >>"$tmp/with"
		r=$((r + 1))
	done
	last=$(cat "$tmp/last") # a run with evidence: the last of each round
	turns=$(jq .turns "$last/ws/.sfma/result.json")
	blobs=$(ls "$last/ws/.sfma/evidence" | wc -l)
	without=$(median "$tmp/without") with=$(median "$tmp/with")
	echo "evidence: $kind replies, $turns turns, median of $ROUNDS: $without ms without, $with ms with ($blobs blobs): $(ratio "$with" "$without")x (best: $(best "$tmp/without") and $(best "$tmp/with") ms)"
	if [ -n "$pre" ]; then
		before=$(median "$tmp/before")
		echo "  before evidence ($PRE_EVIDENCE): $before ms: $(ratio "$with" "$before")x (best: $(best "$tmp/before") ms)"
	fi
done
