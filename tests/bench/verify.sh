#!/bin/sh
# sfma-verify against the hashing floor: a generated trace of ENTRIES entries
# (default 1 000 000, about 320 MB) sealed by sfma-seal, then, in one run and
# with a warm page cache, `openssl dgst -sha256` of the trace (no verifier
# can beat hashing every byte once) beside `sfma-verify` of the workspace.
# Prints wall seconds of both, their ratio and sfma-verify's peak RSS.
#
#   ENTRIES=N  BENCH_DIR=DIR (default: a new directory under /tmp, removed)
#   SFMA_BINDIR (default: ../../bin)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bindir=${SFMA_BINDIR:-$here/../../bin}
entries=${ENTRIES:-1000000}
if [ -n "${BENCH_DIR:-}" ]; then
	dir=$BENCH_DIR/verify-bench
	mkdir -p "$dir"
else
	dir=$(mktemp -d /tmp/sfma-bench.XXXXXX)
fi
trap 'rm -rf "$dir"' EXIT INT TERM

ws=$dir/ws
mkdir -p "$ws/.sfma"
python3 "$here/gen-trace.py" "$entries" > "$ws/.sfma/trace.jsonl"
echo '{"manifest":{"name":"bench","workspace":"ws"},"verdict":"completed"}' |
	"$bindir/sfma-seal" "$ws" > /dev/null

# Time each command (wall clock) and sample its peak RSS (VmHWM) from /proc
# while it runs: the rusage of a child forked by python3 would count the
# interpreter's own pages from before the exec.
python3 - "$ws" "$bindir/sfma-verify" <<'EOF'
import os, subprocess, sys, threading, time

ws, verify = sys.argv[1], sys.argv[2]
trace = os.path.join(ws, ".sfma", "trace.jsonl")
size = os.path.getsize(trace)

def hwm_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0

def run(argv):
    peak = [0]
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = threading.Event()

    def sample():  # VmHWM only grows: a sample every 10 ms loses nothing but the last few
        while not done.wait(0.01):
            peak[0] = max(peak[0], hwm_kb(p.pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    out, err = (s.decode().strip() for s in p.communicate())
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    if p.returncode != 0:
        sys.exit("bench: %s failed: %s" % (argv[0], err or out))
    return wall, peak[0], out

with open(trace, "rb") as f:  # warm the page cache
    while f.read(1 << 20):
        pass
best = {}
for _ in range(3):  # best of three, interleaved so both see the same machine
    for name, argv in (("openssl", ["openssl", "dgst", "-sha256", trace]), ("verify", [verify, ws])):
        r = run(argv)
        if name not in best or r[0] < best[name][0]:
            best[name] = r
(fw, _, _), (vw, vrss, vout) = best["openssl"], best["verify"]
print("trace: %s, %.0f MB" % (vout.split(" ", 2)[2].split(" ")[0], size / 1e6))
print("openssl dgst -sha256  %.3f s" % fw)
print("sfma-verify           %.3f s  (peak RSS %.1f MB)" % (vw, vrss / 1024))
print("ratio                 %.2fx  (target: within 4x)" % (vw / fw))
print(vout)
EOF
