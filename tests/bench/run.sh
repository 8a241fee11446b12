#!/bin/sh
# Run every benchmark script in this folder, one after another.
set -e
dir=$(dirname "$0")
# batch.sh: N (default 200) mock runs with make -j2 against the same N one after another;
# slurm.sh: N (default 1000) as one array on a single-node Slurm against make -j2
for b in "$dir"/*.sh; do
	[ "$(basename "$b")" = run.sh ] && continue
	echo "== $(basename "$b" .sh)"
	sh "$b"
done
