#!/bin/sh
# Latency of one sandboxed /bin/true: sfma-exec (full path: staging,
# namespaces, mounts, seccomp, exec, copy-back) against unshare(1) and
# bwrap(1) with comparable isolation, in one run. Prints the medians.
#   SFMA_BINDIR  where sfma-exec is (default: bin/ beside tests/)
#   N            samples per contender (default 200)
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
python3 - "$bindir/sfma-exec" "$work" "${N:-200}" <<'PY'
import json, os, statistics, subprocess, sys, time
exe, work, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = dict(os.environ)

def median_ms(samples):
    return statistics.median(samples) * 1000

# sfma-exec, per call: one process serving n run requests.
p = subprocess.Popen([exe, "--apply", work + "/m.json"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, env=env, bufsize=0)
per_call = []
for i in range(n + 5):
    t = time.perf_counter()
    p.stdin.write(b'{"id":%d,"call":{"tool":"run","cmd":"true"}}\n' % i)
    reply = json.loads(p.stdout.readline())
    dt = time.perf_counter() - t
    if reply.get("run", {}).get("exit") != 0:
        sys.exit("sfma-exec: sandboxed true failed: %s" % reply)
    if i >= 5:  # warm-up
        per_call.append(dt)
p.stdin.close()
p.wait()

def timed(argv, stdin=None):
    out = []
    for i in range(n + 5):
        t = time.perf_counter()
        subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, check=True, env=env)
        if i >= 5:
            out.append(time.perf_counter() - t)
    return out

# sfma-exec, per process: start, load the manifest, one call, exit.
per_proc = timed([exe, "--apply", work + "/m.json"],
                 stdin=b'{"id":1,"call":{"tool":"run","cmd":"true"}}\n')
unshare = timed(["unshare", "--user", "--map-root-user", "--mount", "--net", "--pid",
                 "--fork", "/bin/true"])
# bwrap with the same isolation: all namespaces, read-only runtime, private
# /tmp and /dev, a workspace bind, cleared environment, new session.
ro = []
for d in ("usr", "bin", "lib", "lib64", "sbin"):
    path = "/" + d
    if os.path.islink(path):
        ro += ["--symlink", os.readlink(path), path]
    elif os.path.isdir(path):
        ro += ["--ro-bind", path, path]
bwrap = timed(["bwrap", "--unshare-all", "--die-with-parent", "--new-session",
               "--cap-drop", "ALL", *ro, "--dev", "/dev", "--tmpfs", "/tmp",
               "--bind", work + "/ws", "/workspace", "--chdir", "/workspace",
               "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "/bin/true"])

print("sandboxed /bin/true, median of %d (ms):" % n)
print("  sfma-exec per call      %7.2f" % median_ms(per_call))
print("  sfma-exec per process   %7.2f" % median_ms(per_proc))
print("  unshare                 %7.2f" % median_ms(unshare))
print("  bwrap                   %7.2f" % median_ms(bwrap))
PY
