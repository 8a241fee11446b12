#!/usr/bin/env python3
"""Make a replayable record of about N entries from one honest run, fast.

    replay-record.py WS N

WS holds the record of one real run (sfma run). Its entries are repeated,
run after run, until the trace has about N entries: each copy's seqs moved
past the last one's, every id and reference with them, the chain computed
again, the blobs shared (evidence is content-addressed). The record itself
is re-sealed by the caller (sfma-seal) with its clock moved to the last
copy. What it stands in for is a workspace that ran the same task N/len
times: every copy is as honest as the run it copies, and sfma replay
derives each one again, so the time and memory of a replay of a long
record can be measured without making a million entries through the
pipeline's fsyncs.

Entries are written canonically (keys sorted, no whitespace, as sfma-chain
writes them); the run must be one whose strings need no escape beyond
JSON's own and whose numbers print the same in Python and ECMAScript (the
hello example's run does), which sfma-verify of the result checks.
"""
import hashlib
import json
import re
import sys

ws, want = sys.argv[1], int(sys.argv[2])
path = ws + "/.sfma/trace.jsonl"
run = [json.loads(line) for line in open(path, encoding="utf-8").read().split("\n") if line]
ID = re.compile(r"^([a-z-]+)-([0-9]+)$")


def moved(v, by):
    """v with every entry id <kind>-<seq> in it moved by `by`."""
    if isinstance(v, str):
        m = ID.match(v)
        return "%s-%d" % (m.group(1), int(m.group(2)) + by) if m else v
    if isinstance(v, list):
        return [moved(x, by) for x in v]
    if isinstance(v, dict):
        return {k: moved(x, by) for k, x in v.items()}
    return v


def dumps(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


first, n = run[0]["seq"], len(run)
out = open(path, "w", encoding="utf-8")
prev, copies, written = "0" * 64, 0, 0
while written < want:
    by = copies * n
    for e in run:
        c = {k: v for k, v in e.items() if k not in ("hash", "prevHash")}
        c["seq"] = e["seq"] + by
        c["id"] = moved(e["id"], by)
        c["anchor"] = moved(e["anchor"], by)
        c["refs"] = moved(e.get("refs", []), by)
        c["prevHash"] = prev
        prev = hashlib.sha256(dumps(c).encode()).hexdigest()
        c["hash"] = prev
        out.write(dumps(c) + "\n")
        written += 1
    copies += 1
out.close()
print("%d entries, %d copies of a run of %d, last seq %d" % (written, copies, n, first + (copies - 1) * n + n - 1))
print("clock %d %d %d" % (first + (copies - 1) * n, first + copies * n - 1, (copies - 1) * n))
