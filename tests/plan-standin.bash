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

# The i-th request the model got (1-based), as JSON.
request() {
	sed -n "${1}p" "$BATS_TEST_TMPDIR/requests.jsonl"
}
