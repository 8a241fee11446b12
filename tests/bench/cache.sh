#!/bin/sh
# What prompt caching saves: a 40-turn run (a bootstrap candidate, 40 reads
# of an 8 KiB file, a write, done, the judgments) by a real `sfma run`
# against a fake Anthropic endpoint that simulates Anthropic's prefix cache
# at the breakpoints each request marks (tests/fixtures/model/fake_server.py,
# "$cache": a prefix read from the cache billed 0.1x, one written 1.25x,
# the rest 1x; the cache keyed by the exact bytes of the prefix up to each
# breakpoint, found up to 20 blocks before one). Side by side: caching on
# (the requests as sfma-model sends them) and off (the same requests with
# cache_control stripped by the server before it bills them: no knob in the
# program), with maxContextBytes at its default and at 32 KiB.
#
# Reported per run, over the requests of the work loop (those that offer
# the tools; the bootstrap and the judgments are conversations of their
# own): the average share of each request that is a byte-identical prefix of
# the one before (the blocks in cache order, cache_control left out), how
# many requests broke the prefix (did not start with the whole one before)
# against how many compactions the trace records, and over every request
# of the run the billed-equivalent input tokens (0.1 cached + 1.25 written +
# uncached, 4 bytes a token, rounded up per request), also as a ratio to the same run without
# caching. The billed figure is read twice: from the server's bill and from
# the costUsd the trace records under a pricing of $1, $0.1 and $1.25 per
# million input, cached and written tokens (and $0 output): they must agree.
# SFMA_BENCH_KEEP=1 keeps the scratch directory (its path is printed), with
# each run's workspace and the server's per-request bill (<run>.cache).
set -eu
BIN=${SFMA_BINDIR:-$(cd "$(dirname "$0")/../../bin" && pwd)}
TESTS=$(cd "$(dirname "$0")/.." && pwd)
FAKE=$TESTS/fixtures/model/fake_server.py
tmp=$(mktemp -d)
server=
trap '[ -z "$server" ] || kill "$server" 2>/dev/null; [ -n "${SFMA_BENCH_KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$tmp"
[ -z "${SFMA_BENCH_KEEP:-}" ] || echo "scratch: $tmp"
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
export ANTHROPIC_API_KEY=sk-ant-bench-cache-0000

# 128 lines of 64 bytes: 8 KiB
python3 -c 'import sys; sys.stdout.write("".join(("line %05d of big.txt" % i).ljust(63, ".") + "\n" for i in range(128)))' >big.txt

# The script of answers: the candidate, 40 reads, a write, done, then the
# judgments (the last answer repeats).
python3 - >script-on.json <<'PY'
import json
cand = json.dumps({"mission": "m", "successCriteria": ["out.txt exists"],
                   "loopRoles": [{"name": "solo", "duty": "d"}], "firstTasks": [], "schedule": []})
def msg(content, stop):
    return {"json": {"id": "msg", "type": "message", "role": "assistant", "model": "m-x",
                     "stop_reason": stop, "content": content, "usage": {"output_tokens": 20}}}
def call(i, name, inp):
    return msg([{"type": "tool_use", "id": "toolu_%03d" % i, "name": name, "input": inp}], "tool_use")
q = [msg([{"type": "text", "text": cand}], "end_turn")]
q += [call(i, "read", {"path": "big.txt"}) for i in range(40)]
q += [call(40, "write", {"path": "out.txt", "content": "x"}), call(41, "done", {"summary": "s"})]
q += [msg([{"type": "text", "text": json.dumps({"pass": True, "reason": "out.txt is there"})}], "end_turn")]
q += [msg([{"type": "text", "text": json.dumps({"criteria": [{"criterion": "out.txt exists", "pass": True, "evidence": []}]})}], "end_turn")]
print(json.dumps({"/v1/messages": q, "$cache": {"strip": False}}))
PY
jq -c '."$cache".strip = true' script-on.json >script-off.json

manifest() { # manifest NAME BUDGET BASE: BUDGET "" for the default
	jq -n --arg n "$1" --arg b "$3" --arg budget "$2" '{name:$n,workspace:$n,
	  modelEndpoints:[{name:"claude",provider:"anthropic",model:"m-x",baseUrl:$b,
	    pricing:{inputPerMTok:1,outputPerMTok:0,cachedInputPerMTok:0.1,cacheWritePerMTok:1.25}}],
	  allowedCommands:["echo"],inputs:["big.txt"],outputs:["out.txt"],maxTurns:50,maxModelCalls:100,
	  dryRunDefault:false} + (if $budget == "" then {} else {maxContextBytes:($budget | tonumber)} end)'
}

run_one() { # run_one NAME on|off BUDGET
	name=$1
	rm -f port log.jsonl log.jsonl.cache log.jsonl.events
	python3 "$FAKE" "script-$2.json" log.jsonl port 2>"$name.server.err" &
	server=$!
	for _ in $(seq 200); do [ -s port ] && break; sleep 0.05; done
	mkdir "$name" && cp big.txt "$name/"
	manifest "$name" "$3" "http://127.0.0.1:$(cat port)" >"$name.json"
	"$BIN/sfma" run "$name.json" --apply >"$name.out" 2>&1 || true
	kill "$server"; wait "$server" 2>/dev/null || true
	server=
	cp log.jsonl.cache "$name.cache"
	# the server's bill and the trace's, side by side
	python3 - "$name" "$2" "${3:-default}" <<'PY'
import json, sys
name, mode, budget = sys.argv[1:4]
rows = [json.loads(l) for l in open(name + ".cache")]
work = [r for r in rows if r["work"]]
shares = [r["common"] / r["bytes"] for r in work[1:]]
prev = None
breaks = 0
for r in work:
    if prev is not None and r["common"] < prev:
        breaks += 1
    prev = r["bytes"]
tokens = lambda n: (n + 3) // 4
billed = sum(0.1 * tokens(r["cached"]) + 1.25 * tokens(r["written"]) + tokens(r["rest"]) for r in rows)
trace = [json.loads(l) for l in open(name + "/.sfma/trace.jsonl")]
cost = sum(e["data"].get("costUsd", 0) for e in trace if e.get("kind") == "call")
compactions = sum(1 for e in trace if e.get("kind") == "compaction")
verdict = [e for e in trace if e.get("kind") == "lifecycle"][-1]["data"].get("to")
out = {"name": name, "mode": mode, "budget": budget, "verdict": verdict, "requests": len(rows),
       "work": len(work), "share": sum(shares) / len(shares) if shares else 0, "breaks": breaks,
       "compactions": compactions, "billed": billed, "traceBilled": cost * 1e6}
print(json.dumps(out))
PY
}

: >results.jsonl
for budget in "" 32768; do
	for mode in on off; do
		run_one "w${budget:-default}-$mode" "$mode" "$budget" >>results.jsonl
	done
done

printf '%-16s %-7s %-9s %8s %5s %13s %7s %11s %13s %12s\n' maxContextBytes caching verdict requests work prefix_share breaks compactions billed_tokens vs_uncached
python3 - <<'PY'
import json
rows = [json.loads(l) for l in open("results.jsonl")]
off = {r["budget"]: r["billed"] for r in rows if r["mode"] == "off"}
bad = 0
for r in rows:
    ratio = r["billed"] / off[r["budget"]] if off.get(r["budget"]) else 0
    print("%-16s %-7s %-9s %8d %5d %13.3f %7d %11d %13.0f %11.3fx" % (
        r["budget"], r["mode"], r["verdict"], r["requests"], r["work"], r["share"], r["breaks"],
        r["compactions"], r["billed"], ratio))
    # the trace's costUsd says the same bill
    if abs(r["traceBilled"] - r["billed"]) > 0.01 * r["requests"]:
        print("  the trace bills %.0f tokens, the server %.0f" % (r["traceBilled"], r["billed"]))
        bad = 1
raise SystemExit(bad)
PY
