#!/usr/bin/env bats
# The repository stands on its own: a clone with nothing beside it has the
# fixtures, the documentation users rely on, and a suite whose assertions
# can fail.

load helpers

@test "the lint refuses a bare '! cmd' that is not the last line of its test" {
	# Written with printf: a literal test header here would be read by bats.
	printf '%s\n' "@""test \"weak\" {" "  ! grep -q x /dev/null" "  true" "}" > "$BATS_TEST_TMPDIR/weak.bats"
	run sh "$REPO/tests/lint.sh" "$BATS_TEST_TMPDIR/weak.bats"
	[ "$status" -eq 1 ]
	[[ "$output" == *"weak.bats:2"* ]]
}

@test "the lint accepts 'run !', '&& return 1' and a negation that ends its test" {
	printf '%s\n' "@""test \"strong\" {" "  run ! grep -q x /dev/null" "  [ \"\$status\" -eq 1 ]" \
		"  grep -q x /dev/null && return 1" "  ! grep -q x /dev/null" "}" > "$BATS_TEST_TMPDIR/strong.bats"
	run sh "$REPO/tests/lint.sh" "$BATS_TEST_TMPDIR/strong.bats"
	[ "$status" -eq 0 ]
}

@test "the suite itself passes the lint, and nothing reads outside the repository" {
	run sh "$REPO/tests/lint.sh"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
}

@test "the lint refuses a .c file that includes another; fuzz_chain.c's lib/chain.c alone is let through" {
	# A tree of its own: lib/, src/ and tests/ beside the lint, as in the repository.
	t=$BATS_TEST_TMPDIR/tree
	mkdir -p "$t/lib" "$t/src/sfma-x" "$t/tests/fuzz"
	cp "$REPO/tests/lint.sh" "$t/tests/"
	printf '%s\n' '#include "lib/chain.c"' > "$t/tests/fuzz/fuzz_chain.c"
	printf '%s\n' '/* what lib/ndjson.c reads */' '#include "ndjson.h"' '#include <stdio.h>' > "$t/lib/a.c"
	run sh "$t/tests/lint.sh"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }

	printf '%s\n' '#include "http.h"' '#include "providers.c"' > "$t/src/sfma-x/main.c"
	printf '%s\n' ' #  include "lib/ndjson.c"' > "$t/tests/fuzz/fuzz_lines.c"
	printf '%s\n' '#include <lib/a.c>' > "$t/lib/b.h"
	run sh "$t/tests/lint.sh"
	[ "$status" -eq 1 ]
	[[ "$output" == *"src/sfma-x/main.c:2:"* ]]
	[[ "$output" == *"tests/fuzz/fuzz_lines.c:1:"* ]]
	[[ "$output" == *"lib/b.h:1:"* ]]
	[[ "$output" != *"fuzz_chain.c"* ]]
	[[ "$output" != *"lib/a.c:"* ]]
}

@test "the interop fixtures are in the repository with the lines they must print" {
	for f in legacy multirun signed unicode unsigned; do
		[ -s "$INTEROP/$f/ws/.sfma/trace.jsonl" ]
		[ -s "$INTEROP/$f/ws/.sfma/result.json" ]
		[ -s "$INTEROP/$f/manifest.json" ]
		grep -q "^# $f\$" "$INTEROP/README.md"
	done
	[ -s "$INTEROP/signed/trusted-public.pem" ] && [ -s "$INTEROP/signed/other-public.pem" ]
}

@test "every refusal phrase scripts grep for is documented in the man pages" {
	phrases=('outside workspace' 'escapes workspace via link' 'not a declared output'
	         'reserved' 'shell metacharacters are not allowed' 'not in allowedCommands'
	         'empty command' 'unknown tool' 'unknown recall mode' 'subcommand not permitted'
	         'global flags are not permitted' 'argument not permitted' 'git requires a subcommand'
	         'secure command sandbox unavailable' 'failed hash-chain verification'
	         'modelAdapter was replaced by modelEndpoints' 'TASK_INVALID' 'AUDIT_OK' 'AUDIT_INVALID'
	         'must not be a symlink' 'must be a real repository directory' 'enclosing repository'
	         'exceeds fastTierMaxBytes' 'unsafe git configuration' 'unsafe git repository'
	         '.sfma is reserved' 'unknown key' 'did you mean' 'timed out after' '(commandTimeoutSeconds)'
	         'not in allowedCommands' 'maxCostUsd needs pricing on every endpoint')
	for p in "${phrases[@]}"; do
		grep -q -F -- "$p" "$REPO"/man/* || { echo "undocumented: $p"; return 1; }
	done
}

@test "every program has a man page with an EXIT STATUS section" {
	for b in "$SFMA_BINDIR"/sfma*; do
		name=$(basename "$b")
		page="$REPO/man/$name.1"
		[ -f "$page" ] || { echo "no man page for $name"; return 1; }
		grep -q '^\.Sh EXIT STATUS' "$page" || grep -q '^\.SH "\?EXIT STATUS' "$page" ||
			{ echo "$page has no EXIT STATUS"; return 1; }
	done
}
