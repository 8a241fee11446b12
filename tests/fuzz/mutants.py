#!/usr/bin/env python3
"""sfma-replay over records mutated and re-sealed so that they verify.

    mutants.py [--seed N] [--runs N | --seconds S]

An attacker without the signing key can change an unsigned record any way
they like and recompute its chain and seal: sfma-verify then says AUDIT_OK,
and only the replay can tell. This makes honest records (the differential
fuzzer's random runs), changes one thing in one entry at random - a member
deleted, a value of another type, a number moved, a string changed, an entry
deleted, duplicated or swapped with the next - re-chains and re-seals, and
replays. Every replay must end with exactly one line, REPLAY_OK,
REPLAY_DIVERGED or REPLAY_INCOMPLETE, and exit 0 or 1: never a crash, a
hang or a second line. With an ASan build on SFMA_BINDIR a memory error
fails too (the sanitizer's exit status).
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import differential  # noqa: E402  (the honest records come from its cases)

BIN = differential.BIN


def canon(e):
    p = subprocess.run([os.path.join(BIN, "sfma-verify"), "--canonicalize"], input=json.dumps(e).encode() + b"\n",
                       capture_output=True, check=True)
    return p.stdout.rstrip(b"\n")


def mutate(rng, es):
    """One change to the entries es (a list of dicts), described."""
    i = rng.randrange(len(es))
    e = es[i]
    r = rng.random()
    if r < 0.1 and len(es) > 2:
        del es[i]
        return "entry %d deleted" % i
    if r < 0.15:
        es.insert(i, json.loads(json.dumps(e)))
        return "entry %d duplicated" % i
    if r < 0.2 and i + 1 < len(es):
        es[i], es[i + 1] = es[i + 1], es[i]
        return "entries %d and %d swapped" % (i, i + 1)
    # a member somewhere inside the entry, hash and prevHash aside
    paths = []

    def walk(v, path):
        if isinstance(v, dict):
            for k in v:
                if path == [] and k in ("hash", "prevHash"):
                    continue
                paths.append(path + [k])
                walk(v[k], path + [k])
        elif isinstance(v, list):
            for j in range(len(v)):
                paths.append(path + [j])
                walk(v[j], path + [j])
    walk(e, [])
    if not paths:
        return "nothing"
    path = rng.choice(paths)
    parent = e
    for k in path[:-1]:
        parent = parent[k]
    k = path[-1]
    old = parent[k]
    choice = rng.random()
    if choice < 0.25 and isinstance(parent, dict):
        del parent[k]
        return "%s deleted" % path
    if choice < 0.5:
        parent[k] = rng.choice([None, True, False, 0, -1, 1.5, 1e300, "", "x", [], {}, "\u0000", "é" * 3])
    elif isinstance(old, (int, float)) and not isinstance(old, bool):
        parent[k] = old + rng.choice([-1, 1, 1000, -old])
    elif isinstance(old, str):
        parent[k] = old[:-1] if old and rng.random() < 0.5 else old + rng.choice(["x", "\n", "0"])
    else:
        parent[k] = rng.choice(["seq", 7, None])
    return "%s changed" % path


def reseal(ws, es):
    prev = "0" * 64
    out = []
    for e in es:
        e["prevHash"] = prev
        e.pop("hash", None)
        e["hash"] = prev = hashlib.sha256(canon(e)).hexdigest()
        out.append(json.dumps(e, ensure_ascii=False))
    with open(os.path.join(ws, ".sfma", "trace.jsonl"), "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    with open(os.path.join(ws, ".sfma", "result.json")) as f:
        rec = json.load(f)
    rec.pop("integrity", None)
    subprocess.run([os.path.join(BIN, "sfma-seal"), ws], input=json.dumps(rec).encode(), capture_output=True,
                   check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=0)
    a = ap.parse_args()
    if not a.runs and not a.seconds:
        a.runs = 50
    base = tempfile.mkdtemp(prefix="sfma-mutants.")
    start, n, bad = time.time(), 0, 0
    try:
        while (a.runs and n < a.runs) or (a.seconds and time.time() - start < a.seconds):
            seed = a.seed * 100003 + n
            rng = random.Random(seed)
            d = os.path.join(base, str(n))
            os.makedirs(d)
            ok, _ = differential.case(rng, d)
            ws = os.path.join(d, "ws")
            if ok:
                with open(os.path.join(ws, ".sfma", "trace.jsonl"), encoding="utf-8") as f:
                    es = [json.loads(line) for line in f.read().split("\n") if line]
                what = mutate(rng, es)
                try:
                    reseal(ws, es)
                except subprocess.CalledProcessError:
                    shutil.rmtree(d, ignore_errors=True)
                    n += 1
                    continue
                try:
                    p = subprocess.run([os.path.join(BIN, "sfma-replay"), ws], capture_output=True, timeout=60)
                    lines = p.stdout.decode(errors="replace").split("\n")
                    good = p.returncode in (0, 1) and len(lines) == 2 and lines[1] == "" and \
                        lines[0].split(":")[0].split(" ")[0] in ("REPLAY_OK", "REPLAY_DIVERGED", "REPLAY_INCOMPLETE")
                    said = "exit %d: %r %r" % (p.returncode, p.stdout[-300:], p.stderr[-300:])
                except subprocess.TimeoutExpired:
                    good, said = False, "timed out"
                if not good:
                    bad += 1
                    keep = tempfile.mkdtemp(prefix="sfma-mutant-%d." % seed)
                    shutil.copytree(d, os.path.join(keep, "case"), symlinks=True)
                    print("mutants: seed %d, %s: replay %s (kept in %s)" % (seed, what, said, keep), file=sys.stderr)
            shutil.rmtree(d, ignore_errors=True)
            n += 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("mutants: %d records mutated (seed %d), %d replays that did not end in one verdict line" % (n, a.seed, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
