#!/bin/sh
# Latency of one sandboxed /bin/true: sfma-exec (full path: staging,
# namespaces, mounts, seccomp, exec, copy-back) against unshare(1) and
# bwrap(1) with comparable isolation, and against the floor, a bare
# posix_spawn(3) of /bin/true and its wait, in one run. Prints the medians
# and the prepared sandbox's ratio to the floor.
#   prepared     one stage, a pause between requests (the model thinking):
#                the sandbox is ready when the request comes; request->reply.
#                Sampled interleaved with the floor after the same pause
#                (and with the baseline's prepared line, if any), in turn,
#                so that all meet the same machine: a CPU that has idled
#                for the pause wakes slower than one kept busy.
#   per call     one stage, requests back to back: each also waits for the
#                sandbox prepared after the last reply (with a baseline:
#                the two stages in turn, runs of 10 each)
#   per process  start, load the manifest, one call, exit
#   SFMA_BINDIR  where sfma-exec is (default: bin/ beside tests/)
#   SFMA_BASELINE_BINDIR  another build to measure beside it (optional)
#   N            samples per contender (default 200)
#   PAUSE_MS     the pause of the prepared line (default 20)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bindir=${SFMA_BINDIR:-$here/../../bin}
for t in python3 unshare bwrap; do
	command -v "$t" >/dev/null || { echo "sandbox bench: $t missing" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws/src"
echo input >"$work/ws/src/a.txt"
cat >"$work/m.json" <<JSON
{"name":"bench","workspace":"$work/ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],
 "allowedCommands":["true"],"inputs":["src"],"outputs":["out.txt"],"maxTurns":1,"dryRunDefault":false}
JSON
python3 - "$work" "${N:-200}" "${PAUSE_MS:-20}" "$bindir" ${SFMA_BASELINE_BINDIR:+"$SFMA_BASELINE_BINDIR"} <<'PY'
import json, os, statistics, subprocess, sys, time
work, n, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) / 1000
builds = sys.argv[4:]
env = dict(os.environ)

def median_ms(samples):
    return statistics.median(samples) * 1000

class Stage:
    """One sfma-exec serving run requests, each timed request to reply."""
    def __init__(self, exe):
        self.p = subprocess.Popen([exe, "--apply", work + "/m.json"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, env=env, bufsize=0)
        # Buffered replies: a raw readline would read one byte per system call.
        self.replies = os.fdopen(os.dup(self.p.stdout.fileno()), "rb")
        self.i = 0

    def call(self):
        self.i += 1
        t = time.perf_counter()
        self.p.stdin.write(b'{"id":%d,"call":{"tool":"run","cmd":"true"}}\n' % self.i)
        reply = json.loads(self.replies.readline())
        dt = time.perf_counter() - t
        if reply.get("run", {}).get("exit") != 0:
            sys.exit("sfma-exec: sandboxed true failed: %s" % reply)
        return dt

    def close(self):
        self.p.stdin.close()
        self.p.wait()
        self.replies.close()

def spawn_once():
    """posix_spawn of /bin/true and its wait, no sandbox: the floor."""
    t = time.perf_counter()
    pid = os.posix_spawn("/bin/true", ["/bin/true"], env)
    os.waitpid(pid, 0)
    return time.perf_counter() - t

def per_call(exes):
    """Requests back to back, in runs of 10 taking the stages in turn; the
    first call of a run, whose sandbox was prepared during the other
    stages' run, is not counted: n samples of each."""
    stages = [Stage(exe) for exe in exes]
    out = [[] for _ in stages]
    while len(out[0]) < n:
        for k, stage in enumerate(stages):
            stage.call()
            out[k] += [stage.call() for i in range(min(10, n - len(out[k])))]
    for s in stages:
        s.close()
    return out

def prepared(exes, pause_s):
    """The pause, then one sample, taking the stages and the floor in
    turn (the order rotating): n samples of each after 5 of warm-up."""
    stages = [Stage(exe) for exe in exes]
    takers = [s.call for s in stages] + [spawn_once]
    out = [[] for _ in takers]
    for i in range(n + 5):
        for k in range(len(takers)):
            j = (i + k) % len(takers)
            time.sleep(pause_s)
            dt = takers[j]()
            if i >= 5:
                out[j].append(dt)
    for s in stages:
        s.close()
    return out

def timed(argv, stdin=None):
    out = []
    for i in range(n + 5):
        t = time.perf_counter()
        subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, check=True, env=env)
        if i >= 5:
            out.append(time.perf_counter() - t)
    return out

names = ["sfma-exec" if b == 0 else "baseline" for b in range(len(builds))]
exes = [bindir + "/sfma-exec" for bindir in builds]
rows = []
interleaved = prepared(exes, pause)
for name, samples in zip(names, interleaved):
    rows.append(("%s prepared" % name, samples))
rows.append(("posix_spawn after the pause", interleaved[-1]))
for name, samples in zip(names, per_call(exes)):
    rows.append(("%s per call" % name, samples))
for name, exe in zip(names, exes):
    rows.append(("%s per process" % name,
                 timed([exe, "--apply", work + "/m.json"],
                       stdin=b'{"id":1,"call":{"tool":"run","cmd":"true"}}\n')))
rows.append(("posix_spawn, back to back", [spawn_once() for i in range(n + 5)][5:]))
rows.append(("unshare", timed(["unshare", "--user", "--map-root-user", "--mount", "--net",
                               "--pid", "--fork", "/bin/true"])))
# bwrap with the same isolation: all namespaces, read-only runtime, private
# /tmp and /dev, a workspace bind, cleared environment, new session.
ro = []
for d in ("usr", "bin", "lib", "lib64", "sbin"):
    path = "/" + d
    if os.path.islink(path):
        ro += ["--symlink", os.readlink(path), path]
    elif os.path.isdir(path):
        ro += ["--ro-bind", path, path]
rows.append(("bwrap", timed(["bwrap", "--unshare-all", "--die-with-parent", "--new-session",
                             "--cap-drop", "ALL", *ro, "--dev", "/dev", "--tmpfs", "/tmp",
                             "--bind", work + "/ws", "/workspace", "--chdir", "/workspace",
                             "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "/bin/true"])))

print("sandboxed /bin/true, median of %d (ms; prepared: %d ms between requests;"
      " load %.2f):" % (n, pause * 1000, os.getloadavg()[0]))
for name, samples in rows:
    print("  %-30s %7.2f" % (name, median_ms(samples)))
medians = {name: median_ms(samples) for name, samples in rows}
print("  prepared / posix_spawn after the pause %5.2fx (target: at most 2x)"
      % (medians["sfma-exec prepared"] / medians["posix_spawn after the pause"]))
print("  prepared / posix_spawn back to back    %5.2fx"
      % (medians["sfma-exec prepared"] / medians["posix_spawn, back to back"]))
PY
