#!/usr/bin/env python3
"""The planner and the replay, fed the same random reply scripts, must agree.

    differential.py [--seed N] [--runs N | --seconds S] [--keep DIR]

Each case is a random manifest (loops, soft calls, budgets, a small context
budget that compacts, dry run or applied) over a workspace with links that
stay inside and lead out, and a random SFMA_MOCK script (the array form, or
the object form with a queue per task and judgments): bootstrap candidates
valid and not, every tool with good and hostile arguments, task posts with
ids missing or repeated, invalid replies, done. Sometimes an operator
message, a --task, a HALT file, or a second run on the same workspace.

Each real run (`sfma run`) must seal a record that `sfma-verify` accepts,
and `sfma replay` of it must say REPLAY_OK: the replay derives every entry
with the code that decided the run. A case that does not is printed with
its seed and kept (--keep DIR, default a new directory) to reproduce.
Exit 0 when every case agrees, 1 otherwise.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("SFMA_BINDIR") or os.path.join(os.path.dirname(__file__), "..", "..", "bin")

READS = ["in.txt", "missing.txt", "../x", "/etc/passwd", "sub/../in.txt", "link-out/passwd", "link-in",
         ".sfma/trace.jsonl", "sub", "a\u0000b", ""]
WRITES = ["out.txt", "sub/out2.txt", "undeclared.txt", "../escape.txt", ".sfma/x", "link-out/x", "out.txt/"]
CMDS = ["echo hi", "true", "false", "sleep 0", "cat in.txt", "ls", "rm -rf /", "echo $HOME", "git status",
        "git log --oneline", "git -c x=y log", "echo a;b", "", "  ", "/bin/echo via path", "ls sub", "cat nope"]


def candidate(rng, tasks):
    first = []
    for i in range(tasks):
        t = {"description": "task %d" % i, "role": rng.choice(["worker", None, 5])}
        if rng.random() < 0.8:
            t["id"] = rng.choice(["t%d" % i, "dup", "", "x" * 10])
        if rng.random() < 0.7:
            t["class"] = rng.choice(["mechanical", "reasoning", "other"])
        first.append(t)
    c = {"mission": "m", "successCriteria": rng.choice([[], ["out.txt exists"], ["a", "b"]]),
         "loopRoles": [{"name": "worker", "duty": "d"}], "firstTasks": first, "schedule": []}
    if rng.random() < 0.1:
        del c["schedule"]
    return c


def call(rng):
    r = rng.random()
    if r < 0.15:
        return {"tool": "read", "path": rng.choice(READS)}
    if r < 0.30:
        return {"tool": "write", "path": rng.choice(WRITES), "content": rng.choice(["x", "héllo ✓\n", "", "y" * 300])}
    if r < 0.45:
        return {"tool": "run", "cmd": rng.choice(CMDS)}
    if r < 0.50:
        return {"tool": rng.choice(["notify", "ask"]), rng.choice(["text", "question"]): "n"}
    if r < 0.58:
        return {"tool": "recall", "mode": rng.choice(["episodic", "lexical", "change", "semantic", "referential",
                                                       "telepathy", None]),
                "query": rng.choice(["x", "", "out"]), "id": rng.choice(["candidate-6", "0" * 64, "x"])}
    if r < 0.66:
        t = {"tool": "task", "description": rng.choice(["more work", ""])}
        if rng.random() < 0.8:
            t["id"] = rng.choice(["p1", "p2", "t0", "dup", ""])
        if rng.random() < 0.3:
            t["class"] = rng.choice(["reasoning", "mechanical", "weird"])
        return t
    if r < 0.78:
        d = {"tool": "done"}
        if rng.random() < 0.8:
            d["summary"] = rng.choice(["done", "", "✓ fertig"])
        return d
    return rng.choice(["not json at all", "[1,2]", {"tool": 5}, {"nothing": 1}, {"tool": "wr\u0000ite"},
                       {"tool": "teleport"}, "```json\n{\"tool\":\"done\",\"summary\":\"fenced\"}\n```",
                       "prose {\"tool\":\"read\",\"path\":\"in.txt\"} more prose"])


def reply(v):
    return v if isinstance(v, str) else json.dumps(v)


def judgment(rng):
    return rng.choice(['{"pass":true,"reason":"ok"}', '{"pass":false,"reason":"no"}', "not a judgment",
                       '{"criteria":[{"criterion":"a","pass":true,"evidence":[]}]}'])


def script(rng):
    tasks = rng.choice([0, 0, 1, 2, 3])
    boot = [reply(call(rng)) for _ in range(rng.choice([0, 0, 1]))]
    if rng.random() < 0.1:
        boot.append(json.dumps({"mission": "incomplete"}))
    boot.append(json.dumps(candidate(rng, tasks)))
    work = [reply(call(rng)) for _ in range(rng.randint(1, 10))]
    if rng.random() < 0.5:
        return boot + work, tasks
    ids = ["t%d" % i for i in range(tasks)] or ["main"]
    ids += ["p1", "p2", "dup"]
    q = {"bootstrap": boot, "tasks": {i: [reply(call(rng)) for _ in range(rng.randint(0, 5))] for i in ids},
         "judge": [judgment(rng) for _ in range(rng.randint(0, 6))]}
    return q, tasks


def manifest(rng, ws):
    m = {"name": "diff", "workspace": ws, "taskStatement": "fuzz",
         "modelEndpoints": [{"name": "mock", "provider": "mock", "model": "m"}],
         "allowedCommands": ["echo", "true", "false", "sleep", "cat", "ls", "git"],
         "inputs": ["in.txt", "sub"], "outputs": ["out.txt", "sub/out2.txt"],
         "maxTurns": rng.randint(2, 20), "dryRunDefault": rng.random() < 0.3, "maxSeconds": 60}
    if rng.random() < 0.5:
        m["maxLoops"] = rng.randint(1, 3)
    if rng.random() < 0.3:
        m["maxModelCalls"] = rng.randint(1, 12)
    if rng.random() < 0.25:
        m["maxContextBytes"] = 4096
    if rng.random() < 0.3:
        m["tuning"] = {"softCalls": rng.randint(1, 3)}
    if rng.random() < 0.1:
        m["maxTokens"] = 1
    return m


def prepare(d, ws):
    w = os.path.join(d, ws)
    os.makedirs(os.path.join(w, "sub"))
    with open(os.path.join(w, "in.txt"), "w") as f:
        f.write("input\n")
    os.symlink("/etc", os.path.join(w, "link-out"))
    os.symlink("in.txt", os.path.join(w, "link-in"))


def run(cmd, env, cwd):
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, timeout=120)


def case(rng, d):
    """One case in directory d: (ok, what) where what says what disagreed."""
    ws = "ws"
    prepare(d, ws)
    runs = 2 if rng.random() < 0.2 else 1
    for k in range(runs):
        m = manifest(rng, ws)
        with open(os.path.join(d, "m.json"), "w") as f:
            json.dump(m, f)
        mock, _ = script(rng)
        env = dict(os.environ, SFMA_MOCK=json.dumps(mock))
        env.pop("SFMA_AUDIT_PRIVATE_KEY", None)
        sfma_dir = os.path.join(d, ws, ".sfma")
        if rng.random() < 0.15:
            os.makedirs(os.path.join(sfma_dir, "inbox"), exist_ok=True)
            with open(os.path.join(sfma_dir, "inbox", "001.txt"), "w") as f:
                f.write("please keep it short\n")
        halt = rng.random() < 0.05
        if halt:
            os.makedirs(sfma_dir, exist_ok=True)
            open(os.path.join(sfma_dir, "HALT"), "w").close()
        cmd = [os.path.join(BIN, "sfma"), "run", "m.json"]
        if rng.random() < 0.7:
            cmd.append("--apply")
        if rng.random() < 0.15:
            cmd.append("--task=fuzz with a clarification")
        r = run(cmd, env, d)
        if halt:
            os.unlink(os.path.join(sfma_dir, "HALT"))
        if r.returncode not in (0, 1):
            return False, "sfma run exit %d: %s" % (r.returncode, r.stderr.decode(errors="replace")[-300:])
        if not os.path.exists(os.path.join(sfma_dir, "result.json")):
            return False, "no record: %s" % r.stderr.decode(errors="replace")[-300:]
    v = run([os.path.join(BIN, "sfma-verify"), ws], dict(os.environ), d)
    if v.returncode != 0:
        return False, "sfma-verify: %s" % (v.stdout + v.stderr).decode(errors="replace").strip()
    p = run([os.path.join(BIN, "sfma-replay"), ws], dict(os.environ), d)
    out = p.stdout.decode(errors="replace").strip()
    if p.returncode != 0 or not out.startswith("REPLAY_OK"):
        return False, out or p.stderr.decode(errors="replace").strip()
    return True, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--keep")
    a = ap.parse_args()
    if not a.runs and not a.seconds:
        a.runs = 50
    base = tempfile.mkdtemp(prefix="sfma-diff.")
    keep = a.keep or tempfile.mkdtemp(prefix="sfma-diff-failed.")
    start, n, bad = time.time(), 0, 0
    try:
        while (a.runs and n < a.runs) or (a.seconds and time.time() - start < a.seconds):
            seed = a.seed * 100003 + n
            rng = random.Random(seed)
            d = os.path.join(base, str(n))
            os.makedirs(d)
            ok, what = case(rng, d)
            if not ok:
                bad += 1
                dest = os.path.join(keep, "case-%d" % seed)
                shutil.copytree(d, dest, symlinks=True)
                print("differential: case seed %d disagrees: %s (kept in %s)" % (seed, what, dest), file=sys.stderr)
            shutil.rmtree(d, ignore_errors=True)
            n += 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if not bad and not a.keep:
            shutil.rmtree(keep, ignore_errors=True)
    print("differential: %d cases (seed %d), %d disagree" % (n, a.seed, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
