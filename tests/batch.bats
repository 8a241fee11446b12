#!/usr/bin/env bats
# Batches: sfma summary (one line per workspace, each record checked by
# sfma-verify, exit 1 when any is not verified) and the make -j example of
# examples/batch/ (one verified record per manifest, incremental, the
# summary at the end; runs on different workspaces never interfere, two on
# one workspace are refused by its lock).

bats_require_minimum_version 1.5.0
load helpers

setup() {
	require jq
	require make
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY NO_COLOR MAKEFLAGS MFLAGS MAKELEVEL
}

# A candidate the mock model answers the bootstrap request with.
CAND='{"mission":"Write out.txt","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"do the work"}],"firstTasks":[],"schedule":[]}'

# mock_manifest FILE NAME WORKSPACE [OUTPUT]: a manifest on the built-in mock model.
mock_manifest() {
	cat >"$1" <<JSON
{"name":"$2","workspace":"$3","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo","sleep"],"inputs":[],"outputs":["${4:-out.txt}"],"maxTurns":8,"dryRunDefault":false}
JSON
}

# run_into WORKSPACE: one completed mock run whose record verifies.
run_into() {
	mock_manifest "m-$1.json" "$1" "$1"
	sfma run "m-$1.json" >/dev/null 2>&1
	sfma-verify "$1" >/dev/null
}

# The batch example, copied (the repository is never written to).
batch_copy() {
	cp -r "$REPO/examples/batch" batch
	rm -rf batch/runs batch/stamps batch/summary.txt
	cd batch
}

# Line count of every trace under runs/.
trace_lengths() {
	for t in runs/*/.sfma/trace.jsonl; do printf '%s %s\n' "$t" "$(wc -l <"$t")"; done
}

# ---- sfma summary --------------------------------------------------------

@test "summary: one line per workspace with verdict, turns, calls and verify status, then a total" {
	run_into a
	run_into bb
	run sfma summary a bb
	[ "$status" -eq 0 ]
	echo "$output"
	[ "${#lines[@]}" -eq 3 ]
	[[ "${lines[0]}" =~ ^a\ +completed\ +turns\ 4\ +calls\ 4\ +verified\ signature=none\ entries=[0-9]+$ ]]
	[[ "${lines[1]}" =~ ^bb\ +completed\ +turns\ 4\ +calls\ 4\ +verified\ signature=none ]]
	# the columns line up
	[ "$(awk '{print index($0, "completed")}' <<<"${lines[0]}")" = "$(awk '{print index($0, "completed")}' <<<"${lines[1]}")" ]
	[ "${lines[2]}" = "total 2: verified 2, invalid 0, unsealed 0, no record 0; completed 2" ]
	# the git-style name and the program are the same thing
	[ "$(sfma-summary a bb)" = "$output" ]
}

@test "summary --json: one NDJSON object per workspace with the documented members, and no total" {
	run_into a
	mkdir empty
	run --separate-stderr sfma summary --json a empty
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 2 ]
	local head
	head=$(sfma-verify a | sed 's/.* head=\([0-9a-f]*\).*/\1/')
	jq -e --arg head "$head" '.workspace == "a" and .name == "a" and .verdict == "completed" and .turns == 4 and
		.modelCalls == 4 and .dryRun == false and .verify == "verified" and .signature == "none" and
		.entries > 0 and .head == $head and (has("usage") | not) and (has("reason") | not)' <<<"${lines[0]}"
	jq -e '. == {"workspace":"empty","verify":"no-record","reason":"no .sfma/result.json"}' <<<"${lines[1]}"
}

@test "summary: tokens are shown when the record has usage" {
	run_into a
	run_into b
	# a record with usage, sealed again so that it still verifies
	tampered a
	jq -c 'del(.integrity) | .usage = {"inputTokens":12600,"outputTokens":492,"cachedInputTokens":100}' \
		a/.sfma/result.json | sfma-seal a >/dev/null
	run sfma summary a b
	[ "$status" -eq 0 ]
	echo "$output"
	[[ "${lines[0]}" =~ ^a\ +completed\ +turns\ 4\ +calls\ 4\ +tokens\ in\ 12600\ out\ 492\ cached\ 100\ +verified ]]
	# no usage: no tokens, and the verify column still lines up
	[[ "${lines[1]}" != *tokens* ]]
	[ "$(awk '{print index($0, "verified")}' <<<"${lines[0]}")" = "$(awk '{print index($0, "verified")}' <<<"${lines[1]}")" ]
	sfma summary --json a | jq -e '.usage == {"inputTokens":12600,"outputTokens":492,"cachedInputTokens":100}'
}

@test "summary: the acceptance checks, when the manifest has any: passed or FAILED, how many, the dones that ran them" {
	run_into a
	mock_manifest m-b.json b b
	jq '.acceptance = [{"cmd":"echo ok"}]' m-b.json >t.json && mv t.json m-b.json
	sfma run m-b.json >/dev/null 2>&1
	mock_manifest m-c.json c c
	jq '.acceptance = [{"cmd":"echo ok"},{"cmd":"echo no","exit":3}]' m-c.json >t.json && mv t.json m-c.json
	run sfma run m-c.json
	[ "$status" -ne 0 ]
	run sfma summary a b c
	[ "$status" -eq 0 ]
	echo "$output"
	[[ "${lines[0]}" != *acceptance* ]]
	[[ "${lines[1]}" =~ ^b\ +completed\ +turns\ 4\ +calls\ 4\ +acceptance\ passed\ \(1\ check,\ 1\ attempt\)\ +verified ]]
	[[ "${lines[2]}" == "c "*"  acceptance FAILED (2 checks, "*" attempt"*")  verified"* ]]
	# the verify column still lines up
	[ "$(awk '{print index($0, "verified")}' <<<"${lines[0]}")" = "$(awk '{print index($0, "verified")}' <<<"${lines[2]}")" ]
	sfma summary --json b | jq -e '.acceptance == {"commands":1,"attempts":1,"passed":true}'
	sfma summary --json c | jq -e '.acceptance.commands == 2 and .acceptance.passed == false'
	sfma summary --json a | jq -e 'has("acceptance") | not'
	# in colour on a terminal, as a verified record's claim
	script -qec "sfma summary c" /dev/null >tty.out || true
	grep -q $'\033\\[1;31macceptance FAILED' tty.out
}

@test "summary: a tampered record exits 1, and every other workspace is still reported" {
	run_into a
	run_into b
	run_into c
	jq '.turns = 1' b/.sfma/result.json >r && mv r b/.sfma/result.json
	run sfma summary a b c
	[ "$status" -eq 1 ]
	echo "$output"
	[[ "${lines[0]}" == "a "*" verified signature=none"* ]]
	# what the record claims is shown, and that it cannot be believed
	[[ "${lines[1]}" =~ ^b\ +completed\ +turns\ 1\ .*INVALID:\ integrity.resultSha256\ does\ not\ match ]]
	[[ "${lines[2]}" == "c "*" verified "* ]]
	# a record that does not verify is not counted as completed
	[ "${lines[3]}" = "total 3: verified 2, invalid 1, unsealed 0, no record 0; completed 2" ]
	run sfma summary --json b
	[ "$status" -eq 1 ]
	jq -e '.verify == "invalid" and (.reason | startswith("integrity.resultSha256 does not match"))' <<<"$output"
	# a trace edited under a sound record fails as well
	run_into d
	sed -i '3s/"seq":3/"seq":33/' d/.sfma/trace.jsonl
	run sfma summary d
	[ "$status" -eq 1 ]
	[[ "${lines[0]}" == *"INVALID: trace "* ]]
}

@test "summary: no record, or no workspace at all, is a failure of the batch and said so" {
	run_into a
	mkdir never-ran
	touch not-a-dir
	run sfma summary a never-ran missing not-a-dir
	[ "$status" -eq 1 ]
	echo "$output"
	[[ "${lines[0]}" == "a "*" verified "* ]]
	[[ "${lines[1]}" =~ ^never-ran\ +-\ +NO\ RECORD:\ no\ .sfma/result.json$ ]]
	[[ "${lines[2]}" =~ ^missing\ +-\ +NO\ RECORD:\ No\ such\ file\ or\ directory$ ]]
	[[ "${lines[3]}" =~ ^not-a-dir\ +-\ +NO\ RECORD:\ not\ a\ workspace\ directory$ ]]
	[ "${lines[4]}" = "total 4: verified 1, invalid 0, unsealed 0, no record 3; completed 1" ]
}

@test "summary: a FIFO or a link in place of the record or the trace is invalid at once, never waited on" {
	run_into a
	local w
	for w in trace-fifo record-fifo trace-link record-link memory-fifo; do cp -r a "$w"; done
	rm trace-fifo/.sfma/trace.jsonl && mkfifo trace-fifo/.sfma/trace.jsonl
	rm record-fifo/.sfma/result.json && mkfifo record-fifo/.sfma/result.json
	mv trace-link/.sfma/trace.jsonl trace-link/t && ln -s ../t trace-link/.sfma/trace.jsonl
	mv record-link/.sfma/result.json record-link/r && ln -s ../r record-link/.sfma/result.json
	rm -f memory-fifo/.sfma/memory.json && mkfifo memory-fifo/.sfma/memory.json
	run --separate-stderr timeout 5 sfma-summary --json trace-fifo record-fifo trace-link record-link memory-fifo
	[ "$status" -eq 1 ]
	[ -z "$stderr" ]
	[ "${#lines[@]}" -eq 5 ]
	# the record's columns are shown as they are; no record is read through a link or a FIFO
	jq -e '.workspace == "trace-fifo" and .verdict == "completed" and .verify == "invalid" and
		.reason == ".sfma/trace.jsonl: not a regular file"' <<<"${lines[0]}"
	jq -e '. == {"workspace":"record-fifo","verify":"invalid","reason":".sfma/result.json: not a regular file"}' <<<"${lines[1]}"
	jq -e '.verify == "invalid" and .reason == ".sfma/trace.jsonl: is a symbolic link, not followed"' <<<"${lines[2]}"
	jq -e '. == {"workspace":"record-link","verify":"invalid",
		"reason":".sfma/result.json: is a symbolic link, not followed"}' <<<"${lines[3]}"
	# memory.json is not the summary's to read: the record still verifies
	jq -e '.workspace == "memory-fifo" and .verify == "verified"' <<<"${lines[4]}"
}

@test "summary: a run interrupted after the record (unsealed) is a failure" {
	run_into a
	# what a run killed before it sealed leaves: its opening clock-anchor
	echo '{"kind":"clock-anchor","data":{"wallMs":1,"source":"system-wall"}}' |
		sfma-chain a/.sfma/trace.jsonl >/dev/null
	run sfma-verify a
	[ "$status" -eq 3 ]
	run sfma summary a
	[ "$status" -eq 1 ]
	[[ "${lines[0]}" =~ ^a\ +completed\ +turns\ 4\ +calls\ 4\ +UNSEALED:\ 1\ entry\ after\ the\ sealed\ head ]]
	[ "$(sfma summary --json a | jq -r .verify)" = unsealed ]
}

@test "summary: SFMA_AUDIT_PUBLIC_KEY reaches sfma-verify: an unsigned record is then not verified" {
	require openssl
	run_into a
	openssl genpkey -algorithm ed25519 -out key.pem 2>/dev/null
	openssl pkey -in key.pem -pubout -out pub.pem
	SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) run sfma summary a
	[ "$status" -eq 1 ]
	[[ "${lines[0]}" == *"INVALID: record is unsigned but SFMA_AUDIT_PUBLIC_KEY demands a trusted signature"* ]]
	# signed with that key: trusted
	mock_manifest m-s.json s s
	SFMA_AUDIT_PRIVATE_KEY=$(cat key.pem) sfma run m-s.json >/dev/null 2>&1
	SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) run sfma summary s
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == *"verified signature=trusted "* ]]
}

@test "summary: hostile strings in a record and in names are made visible, never sent to the terminal" {
	require script
	run_into a
	jq '.verdict = "\u001b]0;owned\u0007\u001b[2J" | .manifest.name = "\u009b31m"' a/.sfma/result.json >r &&
		mv r a/.sfma/result.json
	local odd=$'odd\033[31mname'
	mkdir "$odd"
	run sfma summary a "$odd"
	[ "$status" -eq 1 ]
	echo "$output"
	[[ "${lines[0]}" == 'a '*' \x1b]0;owned\x07\x1b[2J '*'INVALID: '* ]]
	[[ "${lines[1]}" == 'odd\x1b[31mname  -'*'NO RECORD: '* ]]
	run grep -c $'\033' <<<"$output"
	[ "$output" = 0 ]
	# on a terminal: only the program's own colour sequences
	script -qec "sfma summary a" /dev/null >tty.out || true
	grep -q 'INVALID' tty.out
	run grep -c $'\033\\]\\|\033\\[2J\\|\302\233' tty.out
	[ "$output" = 0 ]
	# --json is valid JSON with the strings as they are
	sfma summary --json a | jq -e '.verdict == "\u001b]0;owned\u0007\u001b[2J" and .name == "\u009b31m"'
}

@test "summary: colour only on a terminal, never with NO_COLOR set, never into a pipe or with --json" {
	require script
	run_into a
	mkdir empty
	script -qec "sfma summary a empty" /dev/null >tty.out || true
	grep -q $'\033\\[32mcompleted' tty.out
	grep -q $'\033\\[32mverified' tty.out
	grep -q $'\033\\[1;31mNO RECORD' tty.out
	# a tampered record's verdict is shown plain: colour would vouch for it
	run_into b
	jq '.turns = 1' b/.sfma/result.json >r && mv r b/.sfma/result.json
	script -qec "sfma summary b" /dev/null >tty-tampered.out || true
	grep -q $'\033\\[1;31mINVALID' tty-tampered.out
	grep -q 'completed' tty-tampered.out
	run grep -c $'\033\\[32m' tty-tampered.out
	[ "$output" = 0 ]
	NO_COLOR= script -qec "sfma summary a" /dev/null >tty-empty.out
	grep -q $'\033\\[' tty-empty.out
	NO_COLOR=1 script -qec "sfma summary a" /dev/null >tty-nocolor.out
	grep -q 'verified' tty-nocolor.out
	run grep -c $'\033' tty-nocolor.out
	[ "$output" = 0 ]
	script -qec "sfma summary --json a" /dev/null >tty-json.out
	run grep -c $'\033' tty-json.out
	[ "$output" = 0 ]
	run sfma summary a
	[[ "$output" != *$'\033'* ]]
}

@test "summary: usage errors exit 2; a workspace named like an option is still a workspace" {
	run sfma summary
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "sfma-summary: at least one WORKSPACE is required" ]]
	run sfma summary --bogus a
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == *"--bogus"* ]]
	run sfma summary --help
	[ "$status" -eq 0 ]
	[[ "$output" == usage:* ]]
	mock_manifest m.json w ./-w
	sfma run m.json >/dev/null 2>&1
	run sfma summary -- -w
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "-w "*" verified "* ]]
}

@test "summary: --jobs verifies several workspaces at once, and the output keeps the order of the arguments" {
	local ws=() i
	for i in 1 2 3 4 5 6; do run_into "w$i"; ws+=("w$i"); done
	jq '.turns = 9' w2/.sfma/result.json >r && mv r w2/.sfma/result.json
	mkdir w7 && ws+=(w7 missing)
	sfma summary --jobs 1 "${ws[@]}" >one.txt && return 1
	sfma summary --jobs 4 "${ws[@]}" >four.txt && return 1
	diff one.txt four.txt
	[ "$(cut -d' ' -f1 four.txt | head -n 8 | tr '\n' ' ')" = "w1 w2 w3 w4 w5 w6 w7 missing " ]
	sfma summary --json --jobs 1 "${ws[@]}" >one.json && return 1
	sfma summary --json --jobs 8 "${ws[@]}" >eight.json && return 1
	diff one.json eight.json
	[ "$(jq -r .workspace eight.json | tr '\n' ' ')" = "w1 w2 w3 w4 w5 w6 w7 missing " ]
	[ "$(jq -r .verify eight.json | tr '\n' ' ')" = "verified invalid verified verified verified verified no-record no-record " ]
	run sfma summary --jobs 0 w1
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "sfma-summary: --jobs: a whole number from 1 to 256" ]]
}

@test "summary: without sfma-verify beside it nothing is vouched for: one error, exit 1" {
	run_into a
	mkdir alone
	cp "$SFMA_BINDIR/sfma-summary" alone/
	run alone/sfma-summary a
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "${lines[0]}" == "sfma-summary: "*"/alone/sfma-verify: No such file or directory (sfma-verify must be installed beside sfma-summary)" ]]
}

# ---- the make example ----------------------------------------------------

@test "make -j2: every manifest runs once, each record verified where it ran, the summary at the end" {
	batch_copy
	[ "$(ls manifests/*.json | wc -l)" -ge 3 ]
	run make -j2
	[ "$status" -eq 0 ]
	echo "$output"
	local n
	n=$(ls manifests/*.json | wc -l)
	[ "$(ls stamps/*.verified | wc -l)" -eq "$n" ]
	for m in manifests/*.json; do
		name=$(basename "$m" .json)
		ws=$(jq -r .workspace "$m")
		sfma-verify "$ws" >/dev/null
		# the stamp holds the run's line and the verification of its record
		[ "$(sed -n 1p "stamps/$name.verified")" = "$ws" ]
		[[ "$(sed -n 2p "stamps/$name.verified")" == "COMPLETED turns="*" record=$ws/.sfma/result.json" ]]
		[[ "$(sed -n 3p "stamps/$name.verified")" == "AUDIT_OK "* ]]
		[[ "$output" == *"$name: COMPLETED turns="* ]]
		# one run each
		[ "$(grep -c '"from":null' "$ws/.sfma/trace.jsonl")" = 1 ]
	done
	[ "${lines[-1]}" = "total $n: verified $n, invalid 0, unsealed 0, no record 0; completed $n" ]
	[ "$(grep -c ' verified signature=none' summary.txt)" -eq "$n" ]
}

@test "make: a second make runs nothing; an edited manifest runs again, alone" {
	batch_copy
	make -j2 >/dev/null
	local before stamps
	before=$(trace_lengths)
	stamps=$(ls -l --time-style=full-iso stamps)
	run make -j2
	[ "$status" -eq 0 ]
	[ "$output" = "make: Nothing to be done for 'all'." ]
	[ "$(trace_lengths)" = "$before" ]
	[ "$(ls -l --time-style=full-iso stamps)" = "$stamps" ]
	# an edited manifest: its run again (its trace gains a run), no other
	jq '.taskStatement = "Again."' manifests/beta.json >m && mv m manifests/beta.json
	run make -j2
	[ "$status" -eq 0 ]
	echo "$output"
	[ "$(grep -c ': COMPLETED turns=' <<<"$output")" -eq 1 ]
	[[ "$output" == *"beta: COMPLETED"* ]]
	[ "$(grep -c '"from":null' runs/beta/.sfma/trace.jsonl)" = 2 ]
	[ "$(trace_lengths | grep -v runs/beta/)" = "$(grep -v runs/beta/ <<<"$before")" ]
}

@test "make: a tampered record fails the summary (exit 1) though the stamps are up to date" {
	batch_copy
	make -j2 >/dev/null
	jq '.verdict = "completed" | .turns = 99' runs/gamma/.sfma/result.json >r && mv r runs/gamma/.sfma/result.json
	run make summary
	[ "$status" -ne 0 ]
	echo "$output"
	[[ "$output" == *"runs/gamma "*"turns 99 "*"INVALID: integrity.resultSha256 does not match"* ]]
	[[ "$output" == *"invalid 1"* ]]
	run sfma summary runs/*
	[ "$status" -eq 1 ]
	# and a fresh summary.txt is not kept when a record fails
	rm summary.txt
	run make
	[ "$status" -ne 0 ]
	[ ! -e summary.txt ]
}

@test "make: a run that seals no record leaves no stamp, even beside an old record that verifies" {
	batch_copy
	make -j2 >/dev/null
	# the manifest becomes invalid: the run seals nothing, the old record still verifies
	jq '.maxTurns = 0' manifests/alpha.json >m && mv m manifests/alpha.json
	run make -j2
	[ "$status" -ne 0 ]
	echo "$output"
	[[ "$output" == *"manifests/alpha.json: the run sealed no record (exit 2)"* ]]
	[ ! -e stamps/alpha.verified ]
	[ ! -e summary.txt.tmp ]
	sfma-verify runs/alpha >/dev/null
}

@test "make summary: a manifest that names no workspace fails it, and the others are still summarised" {
	batch_copy
	make -j2 >/dev/null
	echo '{"name":' >manifests/broken.json
	run --separate-stderr make summary
	[ "$status" -ne 0 ]
	[[ "$stderr" == *"manifests/broken.json: names no workspace, not summarised"* ]]
	[ "${lines[-1]}" = "total 4: verified 4, invalid 0, unsealed 0, no record 0; completed 4" ]
	run make -j2
	[ "$status" -ne 0 ]
	[ ! -e stamps/broken.verified ]
}

@test "make summary: one jq reads every manifest, however many there are (not a jq each, a step no -j shares out)" {
	batch_copy
	rm manifests/*.json
	for i in $(seq 20); do mock_manifest "manifests/m$i.json" "m$i" "runs/m$i"; done
	# jq, counted: every call leaves a line
	local real
	real=$(command -v jq)
	mkdir "$BATS_TEST_TMPDIR/counted"
	printf '#!/bin/sh\necho call >>"%s"\nexec "%s" "$@"\n' "$BATS_TEST_TMPDIR/jq.calls" "$real" \
		>"$BATS_TEST_TMPDIR/counted/jq"
	chmod +x "$BATS_TEST_TMPDIR/counted/jq"
	# no run yet: every workspace has no record, the summary still lists all 20
	PATH="$BATS_TEST_TMPDIR/counted:$PATH" run --separate-stderr make summary
	echo "$output"
	[ "$status" -eq 2 ]
	[ "${lines[-1]}" = "total 20: verified 0, invalid 0, unsealed 0, no record 20; completed 0" ]
	[ "$(wc -l <"$BATS_TEST_TMPDIR/jq.calls")" -eq 1 ]
}

@test "make summary: an empty manifest, or one whose workspace is no string, is said; the others are summarised" {
	batch_copy
	make -j2 >/dev/null
	: >manifests/empty.json
	echo '{"workspace":7}' >manifests/number.json
	# two values in one file: with empty.json, as many workspaces as files
	echo '{"workspace":"runs/alpha"} {"workspace":"runs/beta"}' >manifests/two.json
	run --separate-stderr make summary
	[ "$status" -ne 0 ]
	[[ "$stderr" == *"manifests/empty.json: names no workspace, not summarised"* ]]
	[[ "$stderr" == *"manifests/number.json: names no workspace, not summarised"* ]]
	for ws in alpha beta gamma delta; do
		grep -q "^runs/$ws .* verified " <<<"$output"
	done
}

@test "make -j: parallel runs on different workspaces never interfere" {
	batch_copy
	rm manifests/*.json
	for i in 1 2 3 4; do mock_manifest "manifests/p$i.json" "p$i" "runs/p$i"; done
	# every run sleeps a second before it writes, so under -j4 they overlap
	mock "$CAND" '{"tool":"run","cmd":"sleep 1"}' '{"tool":"write","path":"out.txt","content":"x"}' \
		'{"tool":"done","summary":"ok"}'
	run make -j4
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(ls runs)" = "$(printf 'p1\np2\np3\np4')" ]
	for i in 1 2 3 4; do
		ws=runs/p$i
		sfma-verify "$ws" >/dev/null
		# each workspace holds its own run only: its manifest, one run in
		# its trace, its one output
		[ "$(jq -r .manifest.name "$ws/.sfma/result.json")" = "p$i" ]
		[ "$(jq -r .verdict "$ws/.sfma/result.json")" = completed ]
		[ "$(grep -c '"from":null' "$ws/.sfma/trace.jsonl")" = 1 ]
		[ "$(ls -A "$ws")" = "$(printf '.sfma\nout.txt')" ]
	done
	[[ "${lines[-1]}" == "total 4: verified 4, invalid 0, unsealed 0, no record 0; completed 4" ]]
}

@test "make -j: two manifests on one workspace, the lock refuses one run and only the other is stamped" {
	batch_copy
	rm manifests/*.json
	mock_manifest manifests/first.json first runs/common
	mock_manifest manifests/second.json second runs/common
	# the run that gets the lock holds it for seconds: the other one starts meanwhile
	mock "$CAND" '{"tool":"run","cmd":"sleep 3"}' '{"tool":"write","path":"out.txt","content":"x"}' \
		'{"tool":"done","summary":"ok"}'
	run make -j2
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"workspace busy: another sfma run holds "*"runs/common/.sfma"* ]]
	[[ "$output" == *"the run sealed no record (exit 1)"* ]]
	[ "$(ls stamps | wc -l)" -eq 1 ]
	local won
	won=$(basename "$(ls stamps/*.verified)" .verified)
	# the workspace holds exactly the run that had the lock, and it verifies
	sfma-verify runs/common >/dev/null
	[ "$(jq -r .manifest.name runs/common/.sfma/result.json)" = "$won" ]
	[ "$(grep -c '"from":null' runs/common/.sfma/trace.jsonl)" = 1 ]
	[ ! -e summary.txt ]
}

@test "the README's GNU parallel one-liner runs every manifest, verifies each, and ends with the summary" {
	require parallel
	local line
	line=$(grep '^    mkdir -p runs && parallel ' "$REPO/README.md" | sed 's/^    //')
	[ -n "$line" ]
	batch_copy
	run sh -c "$line"
	echo "$output"
	[ "$status" -eq 0 ]
	local n
	n=$(ls manifests/*.json | wc -l)
	[ "$(grep -c $'\tAUDIT_OK ' <<<"$output")" -eq "$n" ]
	[ "${lines[-1]}" = "total $n: verified $n, invalid 0, unsealed 0, no record 0; completed $n" ]
}
