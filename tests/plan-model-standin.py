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
#   "touch"      a path: created before the reply is sent (an operator's HALT)
# Loops (PIPELINE.md): requests may come several at once, replies go by id.
#   "bootstrap": [ITEM...]       bootstrap requests draw from it (else "replies")
#   "tasks": {"<task id>": [...]} work requests on that task (else "replies")
#   "judge": [ITEM...]           judge and criteria requests; absent: answered
#                                {"pass":true,"reason":"mock judge"} with no call
#   "endpoints": [NAME...]       work goes to the first; a judge to the first
#                                that is not "avoid" (independent:false if none)
#   "batchMs": N                 hold requests arriving within N ms of each other
#                                and answer them newest first (out of order)
# SFMA_MOCK_LATENCY_MS=N: each reply goes N ms after its request came, whatever
# else is in flight (a concurrent model stage).
# Each attempt reports requestBytes as the mock does: the canonical JSON of
# {system, messages, tools} (tools: the definitions, when offered).
import json, os, select, subprocess, sys, time

# No confinement here (a stand-in is no stage of the pipeline): the report
# channel the orchestrator handed over is closed unused, so the run
# records that this process did not report (PIPELINE.md, Confinement).
if os.environ.get("SFMA_CONFINE_FD"):
    os.close(int(os.environ.pop("SFMA_CONFINE_FD")))

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


queues = {"replies": replies, "bootstrap": script.get("bootstrap"), "judge": script.get("judge")}
task_queues = script.get("tasks", {})
names = script.get("endpoints", ["standin"])
pos = {}
counter = {"work": 0}


def draw(name, items):
    i = pos.get(name, 0)
    pos[name] = i + 1
    return items[i] if i < len(items) else None


def answer(req):
    purpose = req.get("purpose", "work")
    judging = purpose in ("judge", "criteria")
    endpoint, independent = names[0], True
    if judging:
        others = [n for n in names if n != req.get("avoid")]
        endpoint, independent = (others[0], True) if others else (names[0], False)
    if judging and queues["judge"] is None:
        # the mock's criteria answer passes every criterion, whatever it lists
        text = '{"pass":true,"reason":"mock judge"}' if purpose == "judge" else '{"criteria":[]}'
        return {"id": req["id"], "ok": True, "text": text, "endpoint": "mock-judge", "calls": [],
                "independent": True, "endpoints": {}}
    if judging:
        item = draw("judge", queues["judge"])
    elif purpose == "bootstrap" and queues["bootstrap"] is not None:
        item = draw("bootstrap", queues["bootstrap"])
    elif req.get("task") in task_queues:
        item = draw("task:" + req["task"], task_queues[req["task"]])
    else:
        item = draw("replies", replies)
    if item is None:
        item = {"text": '{"tool":"done","summary":"script exhausted"}'}
    if isinstance(item, str):
        item = {"text": item}
    body = {"system": req["system"], "messages": req["messages"]}
    if req.get("tools"):
        body["tools"] = tools
    size = len(canon(body).encode())
    attempt = {"endpoint": endpoint, "class": req["class"], "latencyMs": 1, "status": 200, "waitMs": 0,
               "requestBytes": size}
    calls = [dict(a, endpoint=endpoint, **{"class": req["class"], "requestBytes": size})
             for a in item.get("attempts", [])]
    reply = {"id": req["id"], "endpoint": endpoint, "provider": item.get("provider", "anthropic"),
             "endpoints": {}}
    if judging:
        reply["independent"] = independent
    if "fail" in item:
        calls.append(dict(attempt, ok=False, status=500, errorClass="transient", error=item["fail"]))
        reply.update(ok=False, error=item["fail"], calls=calls)
        return reply
    if "touch" in item:
        open(item["touch"], "w").close()
    text = item.get("text", "")
    native, tool_calls = item.get("native"), item.get("toolCalls")
    if item.get("recallStub"):
        stub = first_stub(req["messages"])
        item["calls"] = [["recall", {k: v for k, v in stub.items() if k != "tool"}]]
    counter["work"] += 1
    if "calls" in item:
        n = counter["work"]
        native = [{"type": "tool_use", "id": "toolu_%d_%d" % (n, i), "name": nm, "input": inp}
                  for i, (nm, inp) in enumerate(item["calls"])]
        tool_calls = [{"id": c["id"], "name": c["name"], "input": c["input"]} for c in native]
    ok = dict(attempt, ok=True)
    if "usage" in item:
        ok["usage"] = item["usage"]
        reply["usage"] = item["usage"]
    calls.append(ok)
    reply.update(ok=True, text=text, calls=calls)
    if tool_calls is not None:
        reply.update(toolCalls=tool_calls, native=native)
    return reply


batch_ms = script.get("batchMs", 0)
latency = int(os.environ.get("SFMA_MOCK_LATENCY_MS") or 0) / 1000.0
pending, buf, eof = [], b"", False
fd = sys.stdin.fileno()
while not eof or pending:
    now = time.monotonic()
    if latency:
        wait = max(0.0, min(due for due, _ in pending) - now) if pending else None
    else:
        wait = batch_ms / 1000.0 if pending else None
    ready = select.select([fd], [], [], wait)[0] if not eof else []
    if eof and pending and latency:
        time.sleep(max(0.0, min(due for due, _ in pending) - time.monotonic()))
    if ready:
        chunk = os.read(fd, 65536)
        if not chunk:
            eof = True
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            if log:
                log.write(canon(req) + "\n")
                log.flush()
            pending.append((time.monotonic() + latency, req))
        if batch_ms and not eof and not latency:
            continue
    if latency:
        now = time.monotonic()
        order = [p for p in pending if p[0] <= now]
        pending = [p for p in pending if p[0] > now]
    else:
        # what is held, newest first (in order without batchMs)
        order = list(reversed(pending)) if batch_ms else pending
        pending = []
    for _, req in order:
        sys.stdout.write(canon(answer(req)) + "\n")
        sys.stdout.flush()
