# Common set-up for the bats suite: the programs under test come first on PATH.
# SFMA_BINDIR points at bin/ or at the sanitizer build (make check-sanitize).

SFMA_BINDIR=${SFMA_BINDIR:-$(cd "$BATS_TEST_DIRNAME/../bin" && pwd)}
export PATH="$SFMA_BINDIR:$PATH"
INTEROP=${SFMA_INTEROP:-$BATS_TEST_DIRNAME/fixtures/interop}
REPO=$(cd "$BATS_TEST_DIRNAME/.." && pwd)

# Fail loudly (never skip) when a facility the suite relies on is missing.
require() {
	command -v "$1" >/dev/null || { echo "required tool missing: $1" >&2; return 1; }
}

# build_driver OUT ARGS...: a small C test driver (ARGS: its sources and
# any -I), built against the library of the programs under test -
# BUILD/libsfma.a sits beside BINDIR for the sanitizer build (build/san),
# else in build/ (SFMA_LIBA overrides) - and sanitized like them.
build_driver() {
	local liba=${SFMA_LIBA:-}
	[ -n "$liba" ] || for liba in "$SFMA_BINDIR/../libsfma.a" "$REPO/build/libsfma.a"; do
		[ -f "$liba" ] && break
	done
	[ -f "$liba" ] || { echo "no libsfma.a for the test driver (set SFMA_LIBA)" >&2; return 1; }
	local cc=cc flags=
	[ -z "${SFMA_SANITIZED:-}" ] || { cc=clang; flags="-fsanitize=address,undefined -fno-omit-frame-pointer"; }
	local out=$1
	shift
	# shellcheck disable=SC2086 # flags: one word per flag
	$cc -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -I"$REPO/lib" $flags -o "$out" "$@" \
		"$liba" -ljansson -lcrypto -lpthread -lm
}

# strace ARGS...: LeakSanitizer cannot work under ptrace (it says so on
# stderr and fails), so a sanitized build runs without it under strace.
strace() {
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 command strace "$@"
}

# The SFMA_MOCK queue as a JSON array of the given JSON values.
mock() {
	local IFS=,
	export SFMA_MOCK="[$*]"
}

# sfma replay of workspace ws says REPLAY_OK for RUNS runs and every entry.
replays_ok() { # replays_ok RUNS
	run sfma replay ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == "REPLAY_OK runs=$1 entries=$(wc -l <ws/.sfma/trace.jsonl)" ]] || { echo "$output"; return 1; }
}

# tampered WORKSPACE: mark a record a test changed on purpose (or built by
# hand), which tests/replay-sweep.sh then leaves out: every other record
# the suite makes must replay. Copies of the workspace keep the mark.
tampered() {
	touch "$1/.sfma/tampered-by-test"
}

# rechain PYTHON [WORKSPACE]: apply the Python statements to the trace
# entries `es` of WORKSPACE (ws) and recompute every hash, writing each line
# as Python's json.dumps spells it (not canonical). The record is left as
# it is.
rechain() {
	python3 - "${2:-ws}/.sfma/trace.jsonl" "$1" <<'PY'
import hashlib, json, subprocess, sys
path, code = sys.argv[1], sys.argv[2]
es = [json.loads(l) for l in open(path, encoding="utf-8").read().split("\n")[:-1]]
exec(code)
out, prev = [], "0" * 64
for e in es:
    e["prevHash"] = prev
    e.pop("hash", None)
    canon = subprocess.run(["sfma-verify", "--canonicalize"], input=json.dumps(e).encode() + b"\n",
                           capture_output=True, check=True).stdout.rstrip(b"\n")
    e["hash"] = prev = hashlib.sha256(canon).hexdigest()
    out.append(json.dumps(e, ensure_ascii=False))
open(path, "w", encoding="utf-8").write("\n".join(out) + "\n")
PY
}

# forget_checkpoints WORKSPACE: a trace rewritten on purpose is another
# log: its checkpoints go, as whoever rewrites it would remove them
# (sfma-seal refuses to seal a tree that does not extend the last one).
forget_checkpoints() {
	rm -rf "$1/.sfma/checkpoint" "$1/.sfma/checkpoints"
}

# rewrite PYTHON [JQ [WORKSPACE]]: rechain the trace entries `es` by the
# Python statements and reseal the record after the jq filter (WORKSPACE:
# ws) - what a host actor without the signing key can do to an unsigned
# record: the checkpoints the rewritten trace no longer extends go too
# (sfma-seal refuses to seal a tree that does not extend the last one).
rewrite() {
	tampered "${3:-ws}"
	local w=${3:-ws}
	rechain "$1" "$w"
	forget_checkpoints "$w"
	jq "del(.integrity) | ${2:-.}" "$w/.sfma/result.json" >body.json
	sfma-seal "$w" <body.json >/dev/null
}

# merkle_root FILE [N]: the RFC 6962 root, in hex, of the first N lines of
# FILE (all of them by default), each leaf a line's bytes without its
# newline - a reference written from sfma-formats(5), not sfma's code.
merkle_root() {
	python3 - "$@" <<'PY'
import hashlib, sys
def mth(leaves):
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\0" + leaves[0]).digest()
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\1" + mth(leaves[:k]) + mth(leaves[k:])).digest()
lines = open(sys.argv[1], "rb").read().split(b"\n")[:-1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else len(lines)
print(mth(lines[:n]).hex())
PY
}

# tree_words WORKSPACE: what sfma-verify adds to AUDIT_OK for a record
# with a tree - its root, and the runs' checkpoints the workspace keeps.
tree_words() {
	local n
	n=$(find "$1/.sfma/checkpoints" -maxdepth 1 -name '[1-9]*' 2>/dev/null | wc -l)
	printf ' root=%s' "$(merkle_root "$1/.sfma/trace.jsonl" "$(jq .integrity.treeSize "$1/.sfma/result.json")")"
	[ "$n" -eq 0 ] || printf ' checkpoints=%s' "$n"
}
