#!/bin/sh
# Run every benchmark script in this folder, one after another.
set -e
dir=$(dirname "$0")
for b in "$dir"/*.sh; do
	[ "$(basename "$b")" = run.sh ] && continue
	echo "== $(basename "$b" .sh)"
	sh "$b"
done
