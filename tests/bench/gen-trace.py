#!/usr/bin/env python3
"""Write a synthetic sha256-chain-v1 trace of N entries on stdout, fast.

    gen-trace.py N [EVIDENCE_DIR] > trace.jsonl

Each line is already in canonical form (sfma-formats(5): members sorted,
no whitespace, integers as digits) and chained with hashlib, the way
sfma-chain writes it, about 300 bytes each, with a realistic mix of kinds. It
stands in for sfma-chain, which fdatasyncs every entry and would take hours
for a million. Keys are ASCII and numbers are integers or plain decimals, so
sorted json.dumps output is exactly the canonical form.

With EVIDENCE_DIR, every other entry also references a blob of 2 to 6 KiB
(distinct random bytes, so nothing is deduplicated) written there as
<sha256>, mode 0600, in the entry's "evidence" member (sfma-formats(5)).
"""
import os
import hashlib
import json
import random
import sys

ZERO = "0" * 64


def dumps(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def ms(x):
    """x milliseconds with two decimals, integral values as integers (1.0 is 1)."""
    x = round(x, 2)
    return int(x) if x == int(x) else x


def event(rng, seq, last_task):
    """kind, data, refs, class for entry number seq."""
    r = rng.random()
    if seq == 1 or r < 0.01:
        return "clock-anchor", {"source": "system-wall", "wallMs": 1795985236340 + seq * 7}, [], None
    if r < 0.35:
        ok = rng.random() > 0.05
        data = {"endpoint": rng.choice(["claude-main", "gpt-backup", "local-qwen"]), "ok": ok}
        if ok:
            data["latencyMs"] = ms(rng.uniform(80, 4000))
        else:
            data["error"] = "HTTP 529 overloaded; retrying on the next endpoint"
        return "call", data, [], rng.choice(["reasoning", "mechanical"])
    if r < 0.60:
        call = rng.choice([
            {"tool": "run", "cmd": "make -C build test TESTS=unit/%d" % rng.randrange(999)},
            {"tool": "read", "path": "src/module_%03d.c" % rng.randrange(1000)},
            {"tool": "write", "path": "out/report-%d.md" % rng.randrange(100)},
        ])
        return "task", {"call": call}, [], None
    if r < 0.85:
        ok = rng.random() > 0.1
        reason = "ok" if ok else "not in allowedCommands: curl"
        return "verdict", {"tier": "hard", "pass": ok, "reason": reason}, [last_task], None
    if r < 0.92:
        return "message", {"dir": "out", "kind": "notify", "text": "progress: %d of %d checks pass" %
                           (rng.randrange(50), 50)}, [], None
    if r < 0.97:
        return "store", {"op": "placement", "name": "git-long", "latencyMs": ms(rng.uniform(0.5, 9)),
                         "tier": "long"}, [], None
    return "lifecycle", {"from": "probation", "to": "running"}, [], None


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000000
    evidence_dir = sys.argv[2] if len(sys.argv) > 2 else None
    rng = random.Random(42)
    out = sys.stdout
    prev, anchor, last_task = ZERO, "unanchored", "task-0"
    lines = []
    for seq in range(1, n + 1):
        kind, data, refs, cls = event(rng, seq, last_task)
        ident = "%s-%d" % (kind, seq)
        head = '{"anchor":%s,' % dumps(anchor)
        if cls:
            head += '"class":"%s",' % cls
        head += '"data":%s,' % dumps(data)
        if evidence_dir and seq % 2 == 0:
            blob = rng.randbytes(rng.randrange(2048, 6144))
            name = hashlib.sha256(blob).hexdigest()
            fd = os.open(os.path.join(evidence_dir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, blob)
            os.close(fd)
            head += '"evidence":{"output":{"bytes":%d,"sha256":"%s"}},' % (len(blob), name)
        tail = '"id":"%s","kind":"%s","loop":%d,"prevHash":"%s","refs":%s,"seq":%d}' % (
            ident, kind, 1 if kind in ("task", "verdict", "call") else 0, prev, dumps(refs), seq)
        digest = hashlib.sha256((head + tail).encode()).hexdigest()
        lines.append(head + '"hash":"%s",' % digest + tail + "\n")
        if len(lines) >= 4096:
            out.write("".join(lines))
            lines.clear()
        prev = digest
        if kind == "clock-anchor":
            anchor = ident
        elif kind == "task":
            last_task = ident
    out.write("".join(lines))


if __name__ == "__main__":
    main()
