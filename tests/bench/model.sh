#!/bin/sh
# What a kept connection saves per model call: sfma-model answering N
# requests, sent together, from a fake OpenAI-compatible server on
# 127.0.0.1 (plain HTTP/1.1 with keep-alive), with its libcurl handles kept
# per endpoint across calls (the program under test), against the same program built
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

# Requests at once: M mock requests, each answered SFMA_MOCK_LATENCY_MS=300
# late, all sent together, against the same requests sent one after the
# other (tests/fixtures/model/feed.py waits for each reply). Budget: at
# once takes at most half the time of one at a time.
M=${M:-6}
cat >mock.json <<JSON
{"name":"bench","workspace":"ws","modelEndpoints":[{"name":"m","provider":"mock","model":"m"}],
 "allowedCommands":[],"inputs":[],"outputs":[],"maxTurns":1,"dryRunDefault":true}
JSON
head -n "$M" requests.jsonl >mock-requests.jsonl
timed() { # timed COMMAND...: wall time in microseconds
	t0=$(date +%s%N)
	"$@" <mock-requests.jsonl >mock-out.jsonl
	t1=$(date +%s%N)
	[ "$(grep -c '"ok":true' mock-out.jsonl)" -eq "$M" ] || { echo "a mock call failed" >&2; exit 1; }
	echo $(( (t1 - t0) / 1000 ))
}
export SFMA_MOCK_LATENCY_MS=300
together=$(timed "$BIN/sfma-model" mock.json)
one_by_one=$(timed python3 "$SRC/tests/fixtures/model/feed.py" "$BIN/sfma-model" mock.json)
awk -v m="$M" -v a="$together" -v s="$one_by_one" 'BEGIN {
	printf "mock requests (%d, 300 ms latency each): at once %.0f ms, one at a time %.0f ms (%.2fx)\n",
	       m, a / 1000, s / 1000, s / a }'
[ $((together * 2)) -le "$one_by_one" ] || { echo "budget: requests at once took more than half the time of one at a time" >&2; exit 1; }
