#!/bin/sh
# sfma-verify against the hashing floor: a generated trace of ENTRIES entries
# (default 1 000 000, about 320 MB) sealed by sfma-seal, then, in one run and
# with a warm page cache, `openssl dgst -sha256` of the trace (no verifier
# can beat hashing every byte once) beside `sfma-verify` of the workspace.
# Prints wall seconds of both, their ratio and sfma-verify's peak RSS.
#
# The evidence variant: a trace of EVIDENCE_ENTRIES entries (default
# 200 000) of which every other one references a distinct blob of 2 to 6
# KiB (about 400 MB of evidence); the floor is then `openssl dgst -sha256`
# of the trace and of every blob (the files a verifier must read), and of
# the same bytes as one stream (no file to open), beside
# `sfma-verify` checking chain and evidence.
#
#   VARIANT=plain|evidence|both (default both)
#   ENTRIES=N  EVIDENCE_ENTRIES=N
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
python3 - "$ws" "$bindir/sfma-verify" <<'EOF'
import os, subprocess, sys, threading, time

ws, verify = sys.argv[1], sys.argv[2]
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
best = {}
for _ in range(3):  # best of three, interleaved so all see the same machine
    for name, argv in floors + [("verify", [verify, ws])]:
        r = run(argv)
        if name not in best or r[0] < best[name][0]:
            best[name] = r
(fw, _, _), (vw, vrss, vout) = best["openssl"], best["verify"]
print("trace: %s, %.0f MB%s" % (vout.split(" ", 2)[2].split(" ")[0], size / 1e6,
      ", %d evidence blobs included" % (len(files) - 1) if len(files) > 1 else ""))
if "stream" in best:
    print("openssl dgst -sha256  %.3f s  (each file)" % fw)
    print("  the same bytes      %.3f s  (one stream)" % best["stream"][0])
else:
    print("openssl dgst -sha256  %.3f s" % fw)
print("sfma-verify           %.3f s  (peak RSS %.1f MB)" % (vw, vrss / 1024))
print("ratio                 %.2fx  (target: within 4x)" % (vw / fw))
if "stream" in best:
    print("  to one stream       %.2fx" % (vw / best["stream"][0]))
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
