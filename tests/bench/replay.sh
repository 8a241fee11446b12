#!/bin/sh
# sfma replay of a long record against sfma-verify of the same record, in
# one run: a record of ENTRIES entries (default 1 000 000) made from the
# hello example's run repeated (tests/bench/replay-record.py: each copy an
# honest run, re-chained, the record re-sealed), then, with a warm page
# cache, `sfma-verify` (the chain, every digest and blob) and `sfma replay`
# (which verifies alongside and derives every entry again), RUNS times
# each (default 3), interleaved so that both see the same machine. Prints
# the median wall seconds and the largest peak RSS of both, their ratio
# and the machine's load average before and after; the targets are a
# replay within 2x of verify's time and under 64 MB. Beside them, in the
# same turns, the floor of a replay that reads its entries into Jansson
# values: every line parsed once and freed, on one thread
# (tests/bench/parse-floor.c, built here against the library).
#
#   ENTRIES=N  RUNS=N  BENCH_DIR=DIR (default: a new directory under /tmp, removed)
#   SFMA_LIBA  libsfma.a to build parse-floor with (default: the build beside
#              SFMA_BINDIR, else build/libsfma.a of this tree)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bindir=${SFMA_BINDIR:-$here/../../bin}
entries=${ENTRIES:-1000000}
if [ -n "${BENCH_DIR:-}" ]; then dir=$BENCH_DIR/replay-bench; mkdir -p "$dir"; else dir=$(mktemp -d /tmp/sfma-bench.XXXXXX); fi
trap 'rm -rf "$dir"' EXIT INT TERM
src=$(cd "$here/../.." && pwd)
liba=${SFMA_LIBA:-$(dirname "$bindir")/libsfma.a}
[ -f "$liba" ] || liba=$src/build/libsfma.a
cc -std=c11 -O2 -D_GNU_SOURCE -I"$src/lib" -o "$dir/parse-floor" "$here/parse-floor.c" "$liba" \
	-ljansson -lcrypto -lpthread -lm -lseccomp
cd "$dir"
jq '.workspace = "ws"' "$here/../../examples/hello/manifest.json" >m.json
"$bindir/sfma" run m.json --apply >/dev/null
info=$(python3 "$here/replay-record.py" ws "$entries")
set -- $(echo "$info" | sed -n 's/^clock //p')
# the record of the last copy: its clock and its mutations' ids moved with it
jq -c --argjson f "$1" --argjson l "$2" --argjson by "$3" 'del(.integrity) | .clock.firstSeq = $f | .clock.lastSeq = $l
	| .mutations.refs |= map(capture("^(?<k>[a-z-]+)-(?<n>[0-9]+)$") | "\(.k)-\(.n | tonumber + $by)")' \
	ws/.sfma/result.json | "$bindir/sfma-seal" ws >/dev/null
size=$(wc -c <ws/.sfma/trace.jsonl)
n=$(wc -l <ws/.sfma/trace.jsonl)
out=$("$bindir/sfma-replay" ws)
case $out in REPLAY_OK*) ;; *) echo "replay bench: the record does not replay: $out" >&2; exit 1 ;; esac
# warm: the page cache holds the trace and the blobs
"$bindir/sfma-verify" ws >/dev/null
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
: >times
i=0
while [ $i -lt "${RUNS:-3}" ]; do
	/usr/bin/time -f 'verify %e %M' "$bindir/sfma-verify" ws 2>>times >/dev/null
	/usr/bin/time -f 'replay %e %M' "$bindir/sfma-replay" ws 2>>times >/dev/null
	/usr/bin/time -f 'parse %e %M' ./parse-floor ws/.sfma/trace.jsonl 2>>times >/dev/null
	i=$((i + 1))
done
# median wall seconds and largest peak RSS (KiB) of NAME
stat_of() {
	awk -v k="$1" '$1 == k { print $2 }' times | sort -n |
		awk '{ t[++n] = $1 } END { printf "%s", n % 2 ? t[(n + 1) / 2] : (t[n / 2] + t[n / 2 + 1]) / 2 }'
	awk -v k="$1" '$1 == k && $3 > m { m = $3 } END { printf " %d", m }' times
}
set -- $(stat_of verify) $(stat_of replay) $(stat_of parse)
vs=$1 vk=$2 rs=$3 rk=$4 ps=$5
echo "replay: $n entries, $size bytes ($(echo "$info" | head -n 1)); medians of ${RUNS:-3} runs; load $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after"
echo "  sfma-verify  ${vs} s, peak RSS $((vk / 1024)) MB"
echo "  sfma-replay  ${rs} s, peak RSS $((rk / 1024)) MB  ($(echo "$rs $vs" | awk '{printf "%.2f", $1 / ($2 > 0 ? $2 : 0.001)}')x verify; targets: 2x, 64 MB)"
echo "  Jansson parse of every line, once, one thread  ${ps} s  ($(echo "$ps $vs" | awk '{printf "%.2f", $1 / ($2 > 0 ? $2 : 0.001)}')x verify; over $(getconf _NPROCESSORS_ONLN) cores at best $(echo "$ps $vs" | awk -v c="$(getconf _NPROCESSORS_ONLN)" '{printf "%.2f", $1 / c / ($2 > 0 ? $2 : 0.001)}')x)"
