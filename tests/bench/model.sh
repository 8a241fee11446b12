#!/bin/sh
# What a kept connection saves per model call: sfma-model answering N
# requests from a fake OpenAI-compatible server on 127.0.0.1 (plain
# HTTP/1.1 with keep-alive), with its one libcurl handle per endpoint kept
# across calls (the program under test), against the same program built
# with -DSFMA_BENCH_FRESH_HANDLE into a temporary directory (a new handle,
# so a new connection, for every call; no built program has that switch).
# Best of ROUNDS runs each, interleaved; per-call figures are wall time / N.
# Budget: a kept connection is never slower per call than a new one.
# On loopback a connection costs little; across a network each new one
# adds at least a round trip, and a TLS handshake on top.
set -eu
BIN=${SFMA_BINDIR:-$(cd "$(dirname "$0")/../../bin" && pwd)}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${ROUNDS:-3}
N=${N:-300}
tmp=$(mktemp -d)
server=
cleanup() {
	[ -n "$server" ] && kill "$server" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
make -s -C "$SRC" BUILD="$tmp/build" BINDIR="$tmp/bin" \
	CFLAGS="-O2 -g -DSFMA_BENCH_FRESH_HANDLE" "$tmp/bin/sfma-model" >/dev/null

cd "$tmp"
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
printf '%s' '{"/v1/chat/completions":[{"json":{"choices":[{"message":{"role":"assistant","content":"{\"tool\":\"done\",\"summary\":\"ok\"}"}}],"usage":{"prompt_tokens":10,"completion_tokens":5}}}]}' >script.json
python3 "$SRC/tests/fixtures/model/fake_server.py" script.json /dev/null port 2>server.err &
server=$!
i=0
while [ ! -s port ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
[ -s port ] || { cat server.err >&2; exit 1; }
cat >m.json <<JSON
{"name":"bench","workspace":"ws","modelEndpoints":[{"name":"local","provider":"openai","model":"m",
 "baseUrl":"http://127.0.0.1:$(cat port)"}],"allowedCommands":[],"inputs":[],"outputs":[],
 "maxTurns":1,"dryRunDefault":true}
JSON
deadline=$(( $(date +%s) * 1000 + 3600000 ))
i=0
while [ $i -lt "$N" ]; do
	printf '{"id":%d,"system":"s","class":"mechanical","deadlineMs":%s,"callsLeft":5,"messages":[{"role":"user","content":"go"}]}\n' "$i" "$deadline"
	i=$((i + 1))
done >requests.jsonl
export OPENAI_API_KEY=bench-key-not-secret
once() { # once BINARY: wall time of N calls in microseconds
	t0=$(date +%s%N)
	"$1" m.json <requests.jsonl >out.jsonl
	t1=$(date +%s%N)
	[ "$(grep -c '"ok":true' out.jsonl)" -eq "$N" ] || { echo "a call failed:" >&2; grep -m1 '"ok":false' out.jsonl >&2; exit 1; }
	echo $(( (t1 - t0) / 1000 ))
}
min() { if [ -z "$1" ] || [ "$2" -lt "$1" ]; then echo "$2"; else echo "$1"; fi; }
kept="" fresh=""
r=0
while [ $r -lt "$ROUNDS" ]; do
	kept=$(min "$kept" "$(once "$BIN/sfma-model")")
	fresh=$(min "$fresh" "$(once "$tmp/bin/sfma-model")")
	r=$((r + 1))
done
awk -v n="$N" -v k="$kept" -v f="$fresh" 'BEGIN {
	printf "model calls (%d, loopback, HTTP/1.1): kept connection %.3f ms/call, new connection per call %.3f ms/call (%.2fx; %.3f ms saved per call)\n",
	       n, k / n / 1000, f / n / 1000, f / k, (f - k) / n / 1000 }'
[ "$kept" -le "$fresh" ] || { echo "budget: the kept connection was slower" >&2; exit 1; }
