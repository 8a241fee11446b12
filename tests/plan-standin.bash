# Shared by the plan-native, plan-context and plan-usage tests: the
# programs under test, with sfma-model replaced by a scripted stand-in
# (tests/plan-model-standin.py) that returns native calls and usage.

# standin_bin: a bin directory beside the test (sfma finds its stages
# beside itself) holding copies of the programs and the stand-in model.
standin_bin() {
	mkdir -p "$BATS_TEST_TMPDIR/bin"
	cp "$SFMA_BINDIR"/sfma* "$BATS_TEST_TMPDIR/bin/"
	cp "$BATS_TEST_DIRNAME/plan-model-standin.py" "$BATS_TEST_TMPDIR/bin/sfma-model"
	export PATH="$BATS_TEST_TMPDIR/bin:$PATH"
}

# script REPLY...: the stand-in's replies (JSON values), its requests
# logged to requests.jsonl.
script() {
	local IFS=,
	export SFMA_MOCK="{\"log\":\"$BATS_TEST_TMPDIR/requests.jsonl\",\"replies\":[$*]}"
}

replays_ok() { # replays_ok RUNS
	run sfma replay ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == "REPLAY_OK runs=$1 entries=$(wc -l <ws/.sfma/trace.jsonl)" ]] || { echo "$output"; return 1; }
}

# rewrite PYTHON [JQ]: apply the Python statements to the trace entries
# `es`, recompute every hash, and reseal the record after the jq filter -
# what a host actor without the signing key can do to an unsigned record.
rewrite() {
	python3 - ws/.sfma/trace.jsonl "$1" <<'PY'
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
	jq "del(.integrity) | ${2:-.}" ws/.sfma/result.json >body.json
	sfma-seal ws <body.json >/dev/null
}

# The i-th request the model got (1-based), as JSON.
request() {
	sed -n "${1}p" "$BATS_TEST_TMPDIR/requests.jsonl"
}
