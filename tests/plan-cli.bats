#!/usr/bin/env bats
# Command-line manners of sfma, sfma-plan and sfma-seal: --version, --help,
# --opt VAL as well as --opt=VAL, usage errors named and on stderr (exit 2),
# `sfma NAME` running sfma-NAME from beside sfma, and the runner's version in
# every record.

load helpers
bats_require_minimum_version 1.5.0

CAND='{"mission":"m","successCriteria":[],"loopRoles":[],"firstTasks":[],"schedule":[]}'

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY
	cat >m.json <<'JSON'
{"name":"t","workspace":"ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],
 "allowedCommands":[],"inputs":[],"outputs":["out.txt"],"maxTurns":4,"dryRunDefault":false}
JSON
	VERSION=$(sed -n 's/^VERSION *:= *//p' "$REPO/Makefile")
	[ -n "$VERSION" ]
}

quick() {
	export SFMA_MOCK="[$CAND,{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"done\",\"summary\":\"s\"}]"
}

@test "--version prints the program and the version on stdout, exit 0" {
	for p in sfma sfma-plan sfma-seal; do
		run --separate-stderr "$p" --version
		[ "$status" -eq 0 ]
		[ "$output" = "$p $VERSION" ] || { echo "$p: $output"; return 1; }
		[ -z "$stderr" ]
	done
}

@test "-h and --help print the usage on stdout, exit 0" {
	for p in sfma sfma-plan sfma-seal; do
		for h in -h --help; do
			run --separate-stderr "$p" $h
			[ "$status" -eq 0 ] || { echo "$p $h: $status"; return 1; }
			[[ "${lines[0]}" == "usage: $p "* ]] || { echo "$p $h: $output"; return 1; }
			[ -z "$stderr" ]
		done
	done
	run sfma run -h
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: sfma run MANIFEST"* ]]
}

@test "usage errors name the program, go to stderr, exit 2, and touch nothing" {
	check() { # check PROG ARGS... : a usage error
		run --separate-stderr "$@"
		[ "$status" -eq 2 ] || { echo "$*: status $status"; return 1; }
		[ -z "$output" ] || { echo "$*: stdout $output"; return 1; }
		[[ "${stderr_lines[0]}" == "$1: "* ]] || { echo "$*: $stderr"; return 1; }
		[[ "$stderr" == *"usage: $1 "* ]]
	}
	check sfma-plan
	check sfma-plan --bogus
	check sfma-plan --check
	check sfma-plan --check m.json extra
	check sfma-plan run m.json
	check sfma-plan walk m.json
	check sfma-plan run m.json --task
	check sfma-plan --check m.json --handshake-fd 5
	check sfma-plan --tools --handshake-fd 5
	check sfma-plan run m.json --handshake-fd 2
	[[ "$stderr" == *"--handshake-fd 2: expected a descriptor number above 2"* ]]
	check sfma-plan run m.json --handshake-fd x
	check sfma-seal
	check sfma-seal a b
	check sfma-seal --bogus ws
	check sfma-seal --check-key ws
	check sfma run m.json --max-runs 2
	check sfma relay m.json --max-runs two
	[[ "$stderr" == *"--max-runs two: expected a positive integer"* ]]
	[ ! -e ws ]
}

@test "sfma-plan run --handshake-fd: the --check line first, and nothing touched until the go" {
	peer="$BATS_TEST_DIRNAME/plan-handshake-peer.py"
	plan=$(command -v sfma-plan)
	# End of input instead of the go: a quiet exit 1, nothing on disk.
	run --separate-stderr "$peer" "$plan" m.json eof
	[ "$status" -eq 1 ]
	[ "$output" = "$(sfma-plan --check m.json)" ]
	[ -z "$stderr" ]
	[ ! -e ws ]
	mkdir ws
	run --separate-stderr "$peer" "$plan" m.json eof
	[ "$status" -eq 1 ]
	[ -z "$stderr" ]
	[ -z "$(ls -A ws)" ]
	# The go lets it start (here on stages that are not there: it says so).
	run --separate-stderr "$peer" "$plan" m.json go
	[ "$status" -eq 1 ]
	[ "$output" = "$(sfma-plan --check m.json)" ]
	[[ "$stderr" == *"the run did not start"* ]]
	[ -d ws/.sfma ]
	# An invalid manifest: no line, its reasons, exit 2, as --check.
	rm -rf ws
	echo '{"name":"bad"}' >bad.json
	run --separate-stderr "$peer" "$plan" bad.json go
	[ "$status" -eq 2 ]
	[ -z "$output" ]
	[ "${stderr_lines[0]}" = TASK_INVALID ]
	[ ! -e ws ]
}

@test "--task VAL and --task=VAL are the same option" {
	quick
	run sfma run m.json --task "only the first line"
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	quick
	run sfma run --task="second, with = and spaces" m.json
	[ "$status" -eq 0 ]
	[ "$(jq -r 'select(.kind=="clarification") | .data.text' ws/.sfma/trace.jsonl)" = "$(printf '%s\n' "only the first line" "second, with = and spaces")" ]
	quick
	run sfma relay m.json --max-runs 1 --every 0
	[ "$status" -eq 0 ]
	[[ "$output" == *"relay: run 1/1"* ]]
	run sfma-plan --check m.json --apply
	[ "$status" -eq 0 ]
	[[ "$output" == *'"dryRun":false'* ]]
}

@test "sfma NAME runs sfma-NAME from beside sfma with the remaining arguments" {
	quick
	sfma run m.json >/dev/null
	run sfma verify ws
	[ "$status" -eq 0 ]
	[ "$output" = "$(sfma-verify ws)" ]
	run sfma verify --trusted-head 0:1 ws
	[ "$status" -ne 0 ]
	[ "$output" = "$(sfma-verify --trusted-head 0:1 ws 2>&1)" ]
	# a program on PATH but not beside sfma is not a command
	mkdir elsewhere
	printf '#!/bin/sh\necho planted\n' >elsewhere/sfma-planted
	chmod +x elsewhere/sfma-planted
	PATH=$PWD/elsewhere:$PATH run --separate-stderr sfma planted
	[ "$status" -eq 2 ]
	[[ "$stderr" == "sfma: planted: unknown command"* ]]
	[[ "$output" != *planted* ]]
	# names are plain words: never a path
	for name in teleport ../bin/sfma-verify -verify "" VERIFY; do
		run --separate-stderr sfma "$name" ws
		[ "$status" -eq 2 ] || { echo "$name: $status"; return 1; }
		[[ "$stderr" == "sfma: "* ]]
	done
	run --separate-stderr sfma teleport ws
	[[ "$stderr" == "sfma: teleport: unknown command (no sfma-teleport beside sfma)"* ]]
}

@test "the record carries runnerVersion, covered by resultSha256" {
	quick
	run sfma run m.json
	[ "$status" -eq 0 ]
	[ "$(jq -r .runnerVersion ws/.sfma/result.json)" = "$VERSION" ]
	sfma-verify ws
	jq '.runnerVersion = "0.0.0-forged"' ws/.sfma/result.json >forged && mv forged ws/.sfma/result.json
	run sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$output" == *AUDIT_INVALID* ]]
}
