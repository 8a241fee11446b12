#!/bin/sh
# The fixed cost of a small run: the 4-turn hello example (examples/hello,
# the offline model: a bootstrap candidate, a write, one sandboxed echo,
# done) with the programs under test against the same run with the
# programs built from a base commit, side by side in one run (interleaved,
# so that the machine's other load falls on both alike). Wall time, best
# of ROUNDS, in two workspaces: a fresh one (created by the run) and one
# holding PRIOR earlier runs (a longer trace to verify, a longer history);
# then the latter again with a signing key (when openssl(1) is present).
# Beside them, two floors measured in the same run: the run's process
# starts alone (each program started with --version, in the order the run
# starts them) and, after the breakdown, the run's syncs alone.
# Then, when strace(1) is present, where one run of each goes: processes
# started by program (git counted apart), fsync/fdatasync calls by
# program, and a timeline of milestones (under strace, so inflated).
#
#   BASE=COMMIT   the base (default: the merge-base of HEAD and main;
#                 HEAD itself when there is no main)
#   ROUNDS=N      runs per contender and workspace (default 10)
#   PRIOR=N       runs already in the "existing" workspace (default 50)
#   SFMA_BINDIR   the programs under test (default: bin/ beside tests/)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
bin=$(cd "${SFMA_BINDIR:-$src/bin}" && pwd)
rounds=${ROUNDS:-10}
prior=${PRIOR:-50}
for t in python3 git make; do
	command -v "$t" >/dev/null || { echo "run-cost bench: $t missing" >&2; exit 1; }
done
base=${BASE:-$(git -C "$src" merge-base HEAD main 2>/dev/null || git -C "$src" rev-parse HEAD)}
base_short=$(git -C "$src" rev-parse --short "$base")
tmp=$(mktemp -d /tmp/sfma-run-cost.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM

# The base, built from its own tree (git archive: no checkout is touched).
mkdir "$tmp/base-src"
git -C "$src" archive "$base" | tar -x -C "$tmp/base-src"
progs="sfma sfma-plan sfma-model sfma-exec sfma-chain sfma-seal sfma-verify"
# the memory stage, in a base that has one (sfma looks for it beside itself)
if [ -d "$tmp/base-src/src/sfma-mem" ]; then progs="$progs sfma-mem"; fi
# and the observer, in a base that has one
if [ -f "$tmp/base-src/src/sfma-tap.c" ]; then progs="$progs sfma-tap"; fi
targets=""
for p in $progs; do targets="$targets $tmp/base-bin/$p"; done
# shellcheck disable=SC2086 # one word per target
make -s -j2 -C "$tmp/base-src" BUILD="$tmp/base-build" BINDIR="$tmp/base-bin" $targets >/dev/null

for who in base test; do
	mkdir -p "$tmp/$who"
	cp "$src/examples/hello/manifest.json" "$tmp/$who/"
done

python3 - "$tmp" "$tmp/base-bin" "$bin" "$rounds" "$prior" "$base_short" <<'PY'
import os, re, shutil, subprocess, sys, time, collections
tmp, base_bin, test_bin, rounds, prior, base_name = sys.argv[1:7]
rounds, prior = int(rounds), int(prior)
bins = {"base": base_bin, "test": test_bin}

env = dict(os.environ)
env.pop("SFMA_AUDIT_PRIVATE_KEY", None)

def once(who, fresh):
    d = os.path.join(tmp, who)
    if fresh:
        shutil.rmtree(os.path.join(d, "ws"), ignore_errors=True)
    t = time.perf_counter()
    r = subprocess.run([bins[who] + "/sfma", "run", "manifest.json", "--apply"], cwd=d, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = (time.perf_counter() - t) * 1000
    if r.returncode != 0:
        sys.exit("run-cost bench: the %s run failed: %s" % (who, r.stderr.decode(errors="replace")))
    return dt

def verify(who):
    r = subprocess.run([bins[who] + "/sfma-verify", "ws"], cwd=os.path.join(tmp, who),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit("run-cost bench: the %s record does not verify: %s" % (who, r.stderr.decode(errors="replace")))

best = {}
scenarios = [(True, "fresh workspace"), (False, "after %d runs" % prior)]
key = shutil.which("openssl") and subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519"],
                                                 capture_output=True, text=True).stdout
if key:
    scenarios.append((None, "signed, after %d runs" % prior))
for fresh, label in scenarios:
    if fresh is None:  # the same workspaces, now with a signing key
        env["SFMA_AUDIT_PRIVATE_KEY"] = key
    elif not fresh:
        for who in bins:
            shutil.rmtree(os.path.join(tmp, who, "ws"), ignore_errors=True)
            for _ in range(prior):
                once(who, False)
    t = {"base": [], "test": []}
    for _ in range(rounds):
        for who in ("base", "test"):
            t[who].append(once(who, bool(fresh)))
    for who in bins:
        verify(who)
    b, n = min(t["base"]), min(t["test"])
    best[label] = (b, n)
    print("run cost, hello (4 turns), %s: base %s %.1f ms, under test %.1f ms (best of %d): %.2fx"
          % (label, base_name, b, n, rounds, n / b))

env.pop("SFMA_AUDIT_PRIVATE_KEY", None)

# The floor of process starts: the programs a hello run starts, each with
# --version (loaded, linked, exited, nothing done), in the order sfma
# starts them: sfma, sfma-plan, then the six other stages at once; then
# the sandboxed echo and git twice. Beside it the same eleven starts of
# true(1), a program that loads nothing but libc: what is left is the
# loading and linking of the programs' libraries. Best of ROUNDS each.
def start_floor(bare):
    stages = ["sfma-model", "sfma-exec", "sfma-chain", "sfma-seal", "sfma-mem", "sfma-tap"]
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def argv(p):
        return ["true"] if bare else [test_bin + "/" + p, "--version"]
    t = time.perf_counter()
    for p in ("sfma", "sfma-plan"):
        subprocess.run(argv(p), check=True, **quiet)
    for c in [subprocess.Popen(argv(p), **quiet) for p in stages]:
        c.wait()
    for a in (["echo"], ["git", "--version"], ["git", "--version"]):
        subprocess.run(["true"] if bare else a, check=True, **quiet)
    return (time.perf_counter() - t) * 1000

floor = {False: [], True: []}
for _ in range(rounds):
    for bare in (False, True):
        floor[bare].append(start_floor(bare))
print("floor, the run's 11 process starts (each program --version, in the run's order): %.1f ms; "
      "the same 11 starts of true(1): %.1f ms (best of %d)" % (min(floor[False]), min(floor[True]), rounds))

if not shutil.which("strace"):
    print("run cost: strace missing, no breakdown")
    sys.exit(0)

def breakdown(who):
    d = os.path.join(tmp, who)
    shutil.rmtree(os.path.join(d, "ws"), ignore_errors=True)
    once(who, True)  # the breakdown is of a second run: an existing store and chain
    log = os.path.join(tmp, who + ".strace")
    subprocess.run(["strace", "-f", "-ttt", "-qq", "-o", log, "-e", "trace=execve,exit_group,fsync,fdatasync,clone,clone3,fork,vfork",
                    bins[who] + "/sfma", "run", "manifest.json", "--apply"], cwd=d, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    prog, started, ended, pending = {}, {}, {}, {}
    events, run_plan = [], [None]
    procs, syncs = collections.Counter(), collections.Counter()
    for line in open(log):
        f = line.split(None, 2)
        if len(f) < 3:
            continue
        pid, ts, rest = f[0], float(f[1]), f[2]
        # (strace cuts argv strings at 32 bytes: "..." after the quote)
        m = re.match(r'execve\("([^"]+)", \["[^"]*"(?:\.\.\.)?(?:, "([^"]*)")?', rest)
        if m:
            pending[pid] = (os.path.basename(m.group(1)), m.group(2))
        # an execve that succeeded, on its own line or resumed on another
        if (m or rest.startswith("<... execve resumed>")) and re.search(r"\) = 0$", rest.strip()) and pid in pending:
            name, arg1 = pending.pop(pid)
            prog[pid] = name
            started[pid] = ts
            procs[name] += 1
            events.append((pid, ts, "exec"))
            if name == "sfma-plan" and arg1 == "run" and run_plan[0] is None:
                run_plan[0] = pid  # not a base's `sfma-plan --check` before it
        elif rest.startswith("exit_group") or "+++ exited" in rest:
            ended.setdefault(pid, ts)
            events.append((pid, ts, "exit"))
        elif rest.startswith(("fsync(", "fdatasync(")):
            syncs[prog.get(pid, "?")] += 1
            events.append((pid, ts, "sync"))
        # a forked child is its parent's program until it execs
        c = re.match(r"(?:<\.\.\. )?(?:clone3?|fork|vfork)\b.*= (\d+)$", rest.strip())
        if c and pid in prog:
            prog.setdefault(c.group(1), prog[pid])
    # Milestones, in ms from sfma's start (under strace: inflated, but in
    # proportion): the planner's exec, the first entry made durable, the
    # sandboxed echo, the last git exit, the record's fsync, the end.
    t0 = min(started.values())
    def first(pred):
        ts = [t for (p, t, what) in events if pred(p, what)]
        return "%.0f" % ((min(ts) - t0) * 1000) if ts else "-"
    def last(pred):
        ts = [t for (p, t, what) in events if pred(p, what)]
        return "%.0f" % ((max(ts) - t0) * 1000) if ts else "-"
    marks = [("planner", first(lambda p, w: w == "exec" and p == run_plan[0])),
             ("first entry", first(lambda p, w: w == "sync" and prog.get(p) == "sfma-chain")),
             ("echo", first(lambda p, w: w == "exec" and prog.get(p) == "echo")),
             ("last git", last(lambda p, w: w == "exit" and prog.get(p) == "git")),
             ("record", last(lambda p, w: w == "sync" and prog.get(p) == "sfma-seal")),
             ("end", last(lambda p, w: w == "exit"))]
    print("  %s: processes %s; fsync+fdatasync %s" % (
        base_name if who == "base" else "under test",
        ", ".join("%s %d" % kv for kv in sorted(procs.items())),
        ", ".join("%s %d" % kv for kv in sorted(syncs.items()))))
    print("    timeline under strace (ms): " + ", ".join("%s %s" % m for m in marks))
    return sum(syncs.values())

print("run cost breakdown (one run in a workspace with one run before it):")
for who in ("base", "test"):
    n_syncs = breakdown(who)

# The floor of the run's syncs: as many fdatasync(2)s as the run under
# test made, each after a 300-byte append to a file in the same file
# system, one after another (the run overlaps some of its own). Best of
# ROUNDS.
def sync_floor(n):
    path = os.path.join(tmp, "sync-floor")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    t = time.perf_counter()
    for _ in range(n):
        os.write(fd, b"x" * 299 + b"\n")
        os.fdatasync(fd)
    dt = (time.perf_counter() - t) * 1000
    os.close(fd)
    os.unlink(path)
    return dt

print("floor, the run's %d syncs one after another (300-byte appends, fdatasync): %.1f ms (best of %d)"
      % (n_syncs, min(sync_floor(n_syncs) for _ in range(rounds)), rounds))
PY
