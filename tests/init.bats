#!/usr/bin/env bats
# sfma-init: a starting manifest that the manifest's own checker accepts,
# that runs as it is on the mock model, says what each part is for, holds
# a real endpoint to switch to, and never replaces a manifest.

bats_require_minimum_version 1.5.0
load helpers

setup() {
	require jq
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY ANTHROPIC_API_KEY
}

# check MANIFEST: the manifest's checker accepts it - sfma-check where it
# is built, else the planner's own validation.
check() {
	if [ -x "$SFMA_BINDIR/sfma-check" ]; then
		sfma-check "$1"
	else
		sfma-plan --check "$1" >/dev/null
	fi
}

@test "sfma init DIR: a manifest the checker accepts, that runs on the mock model as it is and verifies" {
	umask 022
	run --separate-stderr sfma init hello
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	[ "$output" = "wrote hello/manifest.json: a manifest on the offline mock model; check it with: sfma check hello/manifest.json" ]
	[ "$(stat -c %a hello/manifest.json)" = 644 ]
	run check hello/manifest.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	cd hello
	run sfma run manifest.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == "COMPLETED turns="* ]]
	[ -s ws/hello.txt ]
	run sfma-verify ws
	[ "$status" -eq 0 ]
	# dry by default: nothing applied without --apply
	rm -rf ws
	run sfma run manifest.json
	[[ "$output" == *"dryRun=true"* ]]
	[ ! -e ws/hello.txt ]
}

@test "the manifest says what each part is for in x- members, names its schema, and holds the parts a task needs" {
	sfma init t >/dev/null
	local m=t/manifest.json
	jq -e . "$m" >/dev/null
	# every member the loader reads is preceded by its comment
	jq -e '.name == "t" and .workspace == "ws" and (.taskStatement | length > 0) and .dryRunDefault == true' "$m"
	jq -e '.["$schema"] | endswith("/sfma-manifest.schema.json")' "$m"
	jq -e '[keys[] | select(startswith("x-comment"))] | length >= 8' "$m"
	jq -r 'keys_unsorted[]' "$m" >keys
	for k in workspace taskStatement modelEndpoints allowedCommands inputs outputs acceptance dryRunDefault; do
		grep -B1 -x "$k" keys | head -n 1 | grep -q '^x-comment' || { echo "no comment before $k"; cat keys; return 1; }
	done
	# the mock to start with, a real endpoint to switch to
	jq -e '.modelEndpoints == [{"name":"offline","provider":"mock","model":"builtin"}]' "$m"
	jq -e '.["x-modelEndpoints-anthropic"][0] | .provider == "anthropic" and (.model | length > 0)' "$m"
	grep -q 'ANTHROPIC_API_KEY' "$m"
	# acceptance and the ceilings, within the bounds sfma-manifest(5) gives
	jq -e '.acceptance == [{"cmd":"cat hello.txt","exit":0}] and (.allowedCommands | index("cat"))' "$m"
	jq -e '.maxTurns >= 1 and .maxModelCalls >= 1 and .maxSeconds <= 86400 and .maxLoops <= 16 and .maxTokens >= 1' "$m"
}

@test "the real endpoint switched in is a manifest the checker accepts, with its key set" {
	sfma init t >/dev/null
	jq '.modelEndpoints = ."x-modelEndpoints-anthropic"' t/manifest.json >real.json
	jq -e '.modelEndpoints[0].provider == "anthropic"' real.json
	export ANTHROPIC_API_KEY=sk-ant-test-key
	run check real.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
}

@test "an existing manifest, or a link in its place, is never replaced: one line, exit 1" {
	mkdir d
	echo '{"mine":true}' >d/manifest.json
	run --separate-stderr sfma init d
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[ "$stderr" = "sfma-init: d/manifest.json: already exists; not overwritten" ]
	[ "$(cat d/manifest.json)" = '{"mine":true}' ]
	# a link, dangling or not, is something in its place
	mkdir l && ln -s ../elsewhere.json l/manifest.json
	run --separate-stderr sfma init l
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-init: l/manifest.json: already exists; not overwritten" ]
	[ ! -e elsewhere.json ]
	# a second init in the same place
	sfma init again >/dev/null
	cp again/manifest.json first.json
	run sfma init again
	[ "$status" -eq 1 ]
	cmp first.json again/manifest.json
}

@test "without DIR the current directory; a missing DIR is made, a missing parent or a file is one line" {
	mkdir here && cd here
	run sfma-init
	[ "$status" -eq 0 ]
	jq -e '.name == "here"' manifest.json
	cd ..
	run --separate-stderr sfma-init no/such/dir
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-init: no/such/dir: its parent directory does not exist" ]
	[ ! -e no ]
	touch plain
	run --separate-stderr sfma-init plain
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-init: plain: not a directory" ]
	# a name that is no plain word is no task name
	mkdir 'we ird'
	sfma-init 'we ird' >/dev/null
	jq -e '.name == "my-task"' 'we ird/manifest.json'
	run --separate-stderr sfma-init a b
	[ "$status" -eq 2 ]
	[[ "${stderr_lines[0]}" == "sfma-init: one DIR only (unexpected b)" ]]
}
