#!/bin/sh
# sfma-verify against the hashing floor: a generated trace of ENTRIES entries
# (default 1 000 000, about 320 MB) sealed by sfma-seal, then, in one run and
# with a warm page cache, `openssl dgst -sha256` of the trace (no verifier
# can beat hashing every byte once) beside `sfma-verify` of the workspace,
# RUNS times each (default 5), interleaved so that both see the same
# machine. Prints the median wall seconds of both, their ratio (target:
# at most 1.5x), sfma-verify's peak RSS (target: at most 16 MB) and the
# machine's load average before and after.
#
# The evidence variant: a trace of EVIDENCE_ENTRIES entries (default
# 200 000) of which every other one references a distinct blob of 2 to 6
# KiB (about 400 MB of evidence); the floor is then `openssl dgst -sha256`
# of the trace and of every blob (the files a verifier must read), and of
# the same bytes as one stream (no file to open), beside
# `sfma-verify` checking chain and evidence.
#
#   VARIANT=plain|evidence|both (default both)
#   ENTRIES=N  EVIDENCE_ENTRIES=N  RUNS=N
#   BENCH_DIR=DIR (default: a new directory under /tmp, removed)
#   SFMA_BINDIR (default: ../../bin)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bindir=${SFMA_BINDIR:-$here/../../bin}
entries=${ENTRIES:-1000000}
evidence_entries=${EVIDENCE_ENTRIES:-200000}
variant=${VARIANT:-both}
if [ -n "${BENCH_DIR:-}" ]; then
	dir=$BENCH_DIR/verify-bench
	mkdir -p "$dir"
else
	dir=$(mktemp -d /tmp/sfma-bench.XXXXXX)
fi
trap 'rm -rf "$dir"' EXIT INT TERM

bench() { # bench ENTRIES [evidence]
ws=$dir/ws
rm -rf "$ws"
mkdir -p "$ws/.sfma"
if [ "${2:-}" = evidence ]; then
	mkdir -m 700 "$ws/.sfma/evidence"
	python3 "$here/gen-trace.py" "$1" "$ws/.sfma/evidence" > "$ws/.sfma/trace.jsonl"
else
	python3 "$here/gen-trace.py" "$1" > "$ws/.sfma/trace.jsonl"
fi
echo '{"manifest":{"name":"bench","workspace":"ws"},"verdict":"completed"}' |
	"$bindir/sfma-seal" "$ws" > /dev/null

# Time each command (wall clock) and sample its peak RSS (VmHWM) from /proc
# while it runs: the rusage of a child forked by python3 would count the
# interpreter's own pages from before the exec.
RUNS=${RUNS:-5} python3 - "$ws" "$bindir/sfma-verify" <<'EOF'
import os, statistics, subprocess, sys, threading, time

ws, verify = sys.argv[1], sys.argv[2]
runs = int(os.environ["RUNS"])


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])
trace = os.path.join(ws, ".sfma", "trace.jsonl")
evdir = os.path.join(ws, ".sfma", "evidence")
# Every file the verifier must read: the trace, then each blob.
files = [trace] + ([os.path.join(evdir, b) for b in sorted(os.listdir(evdir))]
                   if os.path.isdir(evdir) else [])
size = sum(os.path.getsize(f) for f in files)

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

for path in files:  # warm the page cache
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass
# openssl over many files: xargs hands it as many per process as fit. The
# stricter floor hashes the same bytes as one stream, with no file to open.
digest = ["openssl", "dgst", "-sha256"]
floors = [("openssl", digest + files)]
if len(files) > 1:
    listing = os.path.join(ws, "bench-files")
    with open(listing, "w") as f:
        f.write("\0".join(files))
    stream = os.path.join(ws, "bench-stream")
    with open(stream, "wb") as out:
        for path in files:
            with open(path, "rb") as f:
                out.write(f.read())
    floors = [("openssl", ["sh", "-c", 'xargs -0 %s < "$1" > /dev/null' % " ".join(digest), "sh", listing]),
              ("stream", digest + [stream])]
load_before = load()
seen = {}
for _ in range(runs):  # interleaved, so that all see the same machine
    for name, argv in floors + [("verify", [verify, ws])]:
        seen.setdefault(name, []).append(run(argv))
median = {name: statistics.median(r[0] for r in rs) for name, rs in seen.items()}
fw, vw = median["openssl"], median["verify"]
vrss = max(r[1] for r in seen["verify"])
vout = seen["verify"][-1][2]
print("trace: %s, %.0f MB%s; medians of %d runs; load %s before, %s after" % (
      vout.split(" ", 2)[2].split(" ")[0], size / 1e6,
      ", %d evidence blobs included" % (len(files) - 1) if len(files) > 1 else "", runs, load_before, load()))
if "stream" in median:
    print("openssl dgst -sha256  %.3f s  (each file)" % fw)
    print("  the same bytes      %.3f s  (one stream)" % median["stream"])
else:
    print("openssl dgst -sha256  %.3f s" % fw)
print("sfma-verify           %.3f s  (peak RSS %.1f MB; target: 16 MB)" % (vw, vrss / 1024))
print("ratio                 %.2fx  (target: within 1.5x)" % (vw / fw))
if "stream" in median:
    print("  to one stream       %.2fx" % (vw / median["stream"]))
print(vout)
EOF
}

case $variant in
plain) bench "$entries" ;;
evidence) bench "$evidence_entries" evidence ;;
both)
	bench "$entries"
	echo "-- with evidence"
	bench "$evidence_entries" evidence
	;;
*) echo "verify.sh: VARIANT must be plain, evidence or both" >&2; exit 2 ;;
esac
