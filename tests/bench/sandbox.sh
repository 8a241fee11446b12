#!/bin/sh
# Latency of one sandboxed /bin/true: sfma-exec (full path: staging,
# namespaces, mounts, seccomp, exec, copy-back) against unshare(1) and
# bwrap(1) with comparable isolation, and against the floor, a bare
# posix_spawn(3) of /bin/true and its wait, in one run. Prints the medians
# and the prepared sandbox's ratio to the floor.
#   prepared     one stage, a pause between requests (the model thinking):
#                the sandbox is ready when the request comes; request->reply
#   per call     one stage, requests back to back: each also waits for the
#                sandbox prepared after the last reply
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

def per_call(exe, pause_s):
    """One process serving n run requests; the time of each, request to reply."""
    p = subprocess.Popen([exe, "--apply", work + "/m.json"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, env=env, bufsize=0)
    # Buffered replies: a raw readline would read one byte per system call.
    replies = os.fdopen(os.dup(p.stdout.fileno()), "rb")
    out = []
    for i in range(n + 5):
        if pause_s:
            time.sleep(pause_s)
        t = time.perf_counter()
        p.stdin.write(b'{"id":%d,"call":{"tool":"run","cmd":"true"}}\n' % i)
        reply = json.loads(replies.readline())
        dt = time.perf_counter() - t
        if reply.get("run", {}).get("exit") != 0:
            sys.exit("sfma-exec: sandboxed true failed: %s" % reply)
        if i >= 5:  # warm-up
            out.append(dt)
    p.stdin.close()
    p.wait()
    replies.close()
    return out

def timed(argv, stdin=None):
    out = []
    for i in range(n + 5):
        t = time.perf_counter()
        subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, check=True, env=env)
        if i >= 5:
            out.append(time.perf_counter() - t)
    return out

rows = []
for b, bindir in enumerate(builds):
    exe = bindir + "/sfma-exec"
    name = "sfma-exec" if b == 0 else "baseline"
    rows.append(("%s prepared" % name, per_call(exe, pause)))
    rows.append(("%s per call" % name, per_call(exe, 0)))
    rows.append(("%s per process" % name,
                 timed([exe, "--apply", work + "/m.json"],
                       stdin=b'{"id":1,"call":{"tool":"run","cmd":"true"}}\n')))
def bare_spawn():
    """posix_spawn of /bin/true and its wait, no sandbox: the floor."""
    out = []
    for i in range(n + 5):
        t = time.perf_counter()
        pid = os.posix_spawn("/bin/true", ["/bin/true"], env)
        os.waitpid(pid, 0)
        if i >= 5:
            out.append(time.perf_counter() - t)
    return out

rows.append(("posix_spawn, no sandbox", bare_spawn()))
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

print("sandboxed /bin/true, median of %d (ms; prepared: %d ms between requests):"
      % (n, pause * 1000))
for name, samples in rows:
    print("  %-26s %7.2f" % (name, median_ms(samples)))
floor = median_ms(dict(rows)["posix_spawn, no sandbox"])
print("  prepared / posix_spawn     %7.2fx (target: at most 2x)" % (median_ms(rows[0][1]) / floor))
PY
