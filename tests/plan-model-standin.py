#!/usr/bin/python3
# A scripted stand-in for sfma-model (its NDJSON protocol, PIPELINE.md), to
# drive the planner's side of native tool use, usage and the context budget.
#
# SFMA_MOCK holds the script, a JSON object:
#   {"log": PATH,          every request, one JSON line each (optional)
#    "replies": [ITEM...]} one per request, in order; exhausted: done
# ITEM is a string (a text reply) or an object:
#   "text"       the reply's text ("" by default)
#   "calls"      [[NAME, INPUT], ...]: native anthropic tool_use blocks
#   "native"     the provider's raw call objects, as they are (with "toolCalls")
#   "toolCalls"  the calls as sfma-model derives them
#   "provider"   default "anthropic"
#   "usage"      {"inputTokens","outputTokens","cachedInputTokens"?}
#   "attempts"   [CALL...]: failed attempts reported before the successful one
#   "recallStub" true: call recall with the first compaction stub of the request
#   "fail"       an error text: the reply is {"ok":false}
# Each attempt reports requestBytes as the mock does: the canonical JSON of
# {system, messages, tools} (tools: the definitions, when offered).
import json, os, subprocess, sys

script = json.loads(os.environ.get("SFMA_MOCK") or "{}")
replies = script.get("replies", [])
log = open(script["log"], "a", encoding="utf-8") if script.get("log") else None
here = os.path.dirname(os.path.abspath(sys.argv[0]))
tools = json.loads(subprocess.run([os.path.join(here, "sfma-plan"), "--tools"], capture_output=True,
                                  check=True).stdout)


def canon(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def first_stub(messages):
    for m in messages:
        texts = [m.get("content")] + [r.get("content") for r in m.get("results", [])]
        for t in texts:
            try:
                v = json.loads(t)
            except (TypeError, ValueError):
                continue
            if isinstance(v, dict) and "elided" in v and "recall" in v:
                return v["recall"]
    return None


turn = 0
for line in sys.stdin:
    req = json.loads(line)
    if log:
        log.write(canon(req) + "\n")
        log.flush()
    body = {"system": req["system"], "messages": req["messages"]}
    if req.get("tools"):
        body["tools"] = tools
    size = len(canon(body).encode())
    item = replies[turn] if turn < len(replies) else {"text": '{"tool":"done","summary":"script exhausted"}'}
    turn += 1
    if isinstance(item, str):
        item = {"text": item}
    attempt = {"endpoint": "standin", "class": req["class"], "latencyMs": 1, "status": 200, "waitMs": 0,
               "requestBytes": size}
    calls = [dict(a, endpoint="standin", **{"class": req["class"], "requestBytes": size})
             for a in item.get("attempts", [])]
    reply = {"id": req["id"], "endpoint": "standin", "provider": item.get("provider", "anthropic"),
             "endpoints": {}}
    if "fail" in item:
        calls.append(dict(attempt, ok=False, status=500, errorClass="transient", error=item["fail"]))
        reply.update(ok=False, error=item["fail"], calls=calls)
    else:
        text = item.get("text", "")
        native, tool_calls = item.get("native"), item.get("toolCalls")
        if item.get("recallStub"):
            stub = first_stub(req["messages"])
            item["calls"] = [["recall", {k: v for k, v in stub.items() if k != "tool"}]]
        if "calls" in item:
            native = [{"type": "tool_use", "id": "toolu_%d_%d" % (turn, i), "name": n, "input": inp}
                      for i, (n, inp) in enumerate(item["calls"])]
            tool_calls = [{"id": c["id"], "name": c["name"], "input": c["input"]} for c in native]
        ok = dict(attempt, ok=True)
        if "usage" in item:
            ok["usage"] = item["usage"]
            reply["usage"] = item["usage"]
        calls.append(ok)
        reply.update(ok=True, text=text, calls=calls)
        if tool_calls is not None:
            reply.update(toolCalls=tool_calls, native=native)
    sys.stdout.write(canon(reply) + "\n")
    sys.stdout.flush()
