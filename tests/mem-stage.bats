#!/usr/bin/env bats
# sfma-mem, the memory stage (sfma-mem(1)): driven by hand over NDJSON, as
# the planner drives it - the store opened, a record kept, every recall
# mode, the commit - and fed what a hostile or broken peer would send.
# Then the planner's side: a whole run wired by hand, in which the planner
# starts no process and never touches .sfma/mem.

load helpers
bats_require_minimum_version 1.5.0

setup() {
	require jq
	require git
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK
	mkdir -p ws/.sfma host
	echo '{"secret":"host-7x"}' >host/secret.json
	M=ws/.sfma/mem
}

# mem LINE...: one session of sfma-mem on ws, a line of input each; its
# replies in $output (one per line), its status in $status.
mem() {
	run --separate-stderr sfma-mem ws < <(printf '%s\n' "$@")
}

# reply N FILTER: jq FILTER holds of the N-th reply (1-based).
reply() {
	sed -n "$1p" <<<"$output" | jq -e "$2" >/dev/null || { echo "reply $1: $(sed -n "$1p" <<<"$output")"; return 1; }
}

replies() { # the number of reply lines
	[ -z "$output" ] && echo 0 || wc -l <<<"$output"
}

open='{"id":1,"op":"open"}'
memory_doc='{"version":1,"runs":[{"verdict":"completed"}],"pinned":null,"endpoints":{}}'

# A store with one commit: a record kept over fastMaxBytes, committed.
first_session() {
	mem "$open" \
		'{"id":2,"op":"keep","key":"candidate-3","payload":{"mission":"remember MARKER-m3q"},"fastMaxBytes":8}' \
		"{\"id\":3,\"op\":\"commit\",\"subject\":\"run m completed turns=1 calls=1\",\"memory\":$memory_doc}"
	[ "$status" -eq 0 ] || { echo "$output $stderr"; return 1; }
}

# Everything in the workspace and the host directory, with every file's hash.
snapshot() {
	find ws host -printf '%y %m %p %l\n' | sort
	find ws host -type f -print0 | sort -z | xargs -0 sha256sum
}

# ---- the happy path --------------------------------------------------------

@test "open, keep, recall, commit: each request answered on its line, the store committed as the planner's run is" {
	first_session
	[ "$(replies)" -eq 3 ]
	[ -z "$stderr" ]
	# open: the git store described and the three stores placed
	reply 1 '.id == 1 and .ok and (.stores | length) == 2'
	reply 1 '.stores[0] | .kind == "git" and .available and .capabilities.semantic == false and (.latencyMs | type) == "number"'
	reply 1 '.stores[1] | .op == "placement" and (.measured | length) == 3 and .placement.fast == "inproc"'
	# keep: over fastMaxBytes, a git blob, the fast tier holding a pointer
	reply 2 '.id == 2 and .ok and .entry.op == "put" and (.entry.ref | startswith("git:")) and .entry.fastHolds == "pointer"'
	reply 2 '.entry.reason == "payload of 33 bytes exceeds fastTierMaxBytes (8)"'
	# commit: on the branch, memory.json and the record in its tree
	reply 3 '.id == 3 and .ok and .entry.stage == "commit" and .entry.ok and .entry.message == "run m completed turns=1 calls=1"'
	sha=$(sed -n 3p <<<"$output" | jq -r .entry.sha)
	[ "$(git -C "$M" rev-parse HEAD)" = "$sha" ]
	[ "$(git -C "$M" log --format=%s)" = "run m completed turns=1 calls=1" ]
	git -C "$M" show HEAD:memory.json | jq -e '.runs[0].verdict == "completed"'
	git -C "$M" show HEAD:records/candidate-3.json | grep -q MARKER-m3q
	ref=$(sed -n 2p <<<"$output" | jq -r .entry.ref)
	git -C "$M" ls-tree -r HEAD | grep -q "${ref#git:}"
	# the work tree's copy of memory.json, as .sfma/memory.json spells it:
	# that one written first, whole, by this stage (the planner writes
	# nothing in .sfma), its temporary file gone
	jq -e '.runs | length == 1' "$M/memory.json"
	cmp "$M/memory.json" ws/.sfma/memory.json
	[ "$(stat -c %a ws/.sfma/memory.json)" = 600 ]
	[ -z "$(find ws/.sfma -name '.memory.json.tmp-*')" ]
	git -C "$M" fsck --strict
}

@test "recall in every mode finds what an earlier session kept, in history and in files" {
	first_session
	printf '%s\n' '{"kind":"clock-anchor","data":{"wallMs":1,"source":"system-wall"}}' \
		'{"kind":"message","data":{"dir":"in","text":"hi"}}' | sfma-chain ws/.sfma/trace.jsonl >/dev/null
	mem "$open" \
		'{"id":"r","op":"recall","call":{"tool":"recall","mode":"referential","id":"candidate-3"}}' \
		'{"id":3,"op":"recall","call":{"tool":"recall","mode":"episodic","since":1,"until":2}}' \
		'{"id":4,"op":"recall","call":{"tool":"recall","mode":"lexical","query":"MARKER-m3q"}}' \
		'{"id":5,"op":"recall","call":{"tool":"recall","mode":"change","query":"MARKER-m3q"}}' \
		'{"id":6,"op":"recall","call":{"tool":"recall","mode":"semantic","query":"remember marker"}}'
	[ "$status" -eq 0 ]
	[ "$(replies)" -eq 6 ]
	# any JSON id comes back as it was sent
	reply 2 '.id == "r" and .ok and .entry.found and (.text | fromjson | .record.mission) == "remember MARKER-m3q"'
	reply 3 '.entry.mode == "episodic" and .entry.count == 2 and (.text | fromjson | .results[1].kind) == "message"'
	sha=$(git -C "$M" rev-parse HEAD)
	reply 4 ".entry.found and (.text | fromjson | .results[0] | .commit == \"$sha\" and .path == \"records/candidate-3.json\")"
	reply 5 '.entry.found and (.text | fromjson | .results[0].run) == "run m completed turns=1 calls=1"'
	reply 6 '.entry.degraded and .entry.found and (.text | fromjson | .notice | contains("not semantic similarity"))'
}

@test "without git on PATH the stage opens the store on files, and the commit is null" {
	mkdir nogit
	run --separate-stderr env PATH="$PWD/nogit" "$SFMA_BINDIR/sfma-mem" ws < <(printf '%s\n' "$open" \
		'{"id":2,"op":"recall","call":{"tool":"recall","mode":"lexical","query":"x"}}' \
		"{\"id\":3,\"op\":\"commit\",\"subject\":\"run m failed turns=0 calls=0\",\"memory\":$memory_doc}")
	[ "$status" -eq 0 ]
	reply 1 '.ok and .stores[0].available == false and .stores[0].reason == "git not found on PATH"'
	reply 2 '.ok and .entry.available == false and .entry.found == false'
	reply 3 '.ok and .entry == null'
	[ ! -e "$M/.git" ]
}

# ---- refusals ------------------------------------------------------------

@test "a hostile store is refused at open, in one error naming it, before any git runs; then nothing is served but memory.json" {
	first_session
	git -C "$M" config filter.x.clean "touch $PWD/host/ran"
	echo '* filter=x' >"$M/.gitattributes"
	mkdir wrap
	printf '#!/bin/sh\necho "$*" >>%s/git.log\nexec %s "$@"\n' "$PWD" "$(command -v git)" >wrap/git
	chmod +x wrap/git
	before=$(snapshot | grep -v ' ws/.sfma/memory.json')
	PATH=$PWD/wrap:$PATH mem "$open" \
		'{"id":2,"op":"keep","key":"candidate-9","payload":{"a":1},"fastMaxBytes":1}' \
		'{"id":3,"op":"recall","call":{"tool":"recall","mode":"lexical","query":"MARKER"}}' \
		"{\"id\":4,\"op\":\"commit\",\"subject\":\"run\",\"memory\":$memory_doc}" "$open"
	[ "$status" -eq 0 ]
	[ "$(replies)" -eq 5 ]
	reply 1 '.id == 1 and .ok == false and (.error | test("^\\.sfma/mem/\\.git/config: unsafe git configuration: filter\\.x\\.clean \\(line [0-9]+\\)$"))'
	reply 2 '.ok == false and .error == "keep: the store is not open"'
	reply 3 '.ok == false and .error == "recall: the store is not open"'
	# the commit: memory.json replaced in .sfma (the planner writes none
	# there), nothing committed
	reply 4 '.ok == true and .entry == null'
	reply 5 '.ok == false and .error == "open: the store was opened already"'
	[ ! -e git.log ] || { echo "git ran: $(cat git.log)"; return 1; }
	[ ! -e host/ran ]
	jq -e --argjson m "$memory_doc" '. == $m' ws/.sfma/memory.json
	[ "$(snapshot | grep -v ' ws/.sfma/memory.json')" = "$before" ] ||
		{ diff <(echo "$before") <(snapshot | grep -v ' ws/.sfma/memory.json'); return 1; }
}

@test "a line that is not a request gets an error on its line, and the next line is served" {
	deep=$(printf '%0.s[' $(seq 5000))$(printf '%0.s]' $(seq 5000))
	mem 'not json' '[1,2]' '"a string"' '{"id":2}' '{"id":3,"op":7}' '{"id":4,"op":"delete"}' \
		'{"id":5,"op":"open","extra":true}' "{\"id\":6,\"op\":\"keep\",\"payload\":$deep}" \
		"$(printf '{"id":7,"op":"open\xff"}')" '{"id":8,"op":"open","op":"open"}' \
		'{"id":9,"op":"recall","call":{"tool":"recall","mode":"lexical","query":"x"}}' "$open"
	[ "$status" -eq 0 ]
	[ "$(replies)" -eq 12 ]
	reply 1 '.id == null and .ok == false and (.error | startswith("request: invalid JSON"))'
	reply 2 '.id == null and .ok == false and .error == "request: not a JSON object"'
	reply 3 '.id == null and .ok == false and (.error | startswith("request: invalid JSON"))'
	reply 4 '.id == 2 and .error == "request: no op (open, keep, recall or commit)"'
	reply 5 '.id == 3 and .error == "request: no op (open, keep, recall or commit)"'
	reply 6 '.id == 4 and .error == "delete: unknown request"'
	reply 7 '.id == 5 and .error == "open: unknown member extra"'
	reply 8 '.id == null and (.error | startswith("request: invalid JSON: maximum parsing depth reached"))'
	reply 9 '.id == null and (.error | startswith("request: invalid JSON")) and (.error | contains("unable to decode byte 0xff"))'
	reply 10 '.id == null and (.error | contains("duplicate"))'
	reply 11 '.id == 9 and .error == "recall: the store is not open"'
	reply 12 '.id == 1 and .ok'
	# none of it wrote anything but the store the last line opened
	[ "$(ls -A ws/.sfma)" = mem ]
}

@test "a line over the bound is refused without being held whole, and the stream stays in step" {
	{
		head -c $((17 << 20)) /dev/zero | tr '\0' a
		printf '\n%s\n' "$open"
	} >huge.in
	run --separate-stderr command time -f '%M' -o rss sfma-mem ws <huge.in
	[ "$status" -eq 0 ]
	[ "$(replies)" -eq 2 ]
	reply 1 '.id == null and .ok == false and (.error | test("^request: line 1: longer than [0-9]+ bytes$"))'
	reply 2 '.id == 1 and .ok'
	# at most the bound (16 MiB and a little) held, not the line's 17 MiB and more
	[ -n "${SFMA_SANITIZED:-}" ] || [ "$(tail -n 1 rss)" -lt $((40 << 10)) ] || { echo "max RSS $(tail -n 1 rss) KiB"; return 1; }
}

@test "keys and ids that would leave the store are refused; a link planted in records/ is not followed" {
	mem "$open" \
		'{"id":2,"op":"keep","key":"../../host/x","payload":{"a":1},"fastMaxBytes":100}' \
		'{"id":3,"op":"keep","key":"a/b","payload":{"a":1},"fastMaxBytes":100}' \
		'{"id":4,"op":"keep","key":".probe","payload":{"a":1},"fastMaxBytes":100}' \
		'{"id":5,"op":"keep","key":"ok\u0000/../../x","payload":{"a":1},"fastMaxBytes":100}' \
		'{"id":6,"op":"keep","key":"k","payload":{"a":1},"fastMaxBytes":-1}' \
		'{"id":7,"op":"recall","call":{"tool":"recall","mode":"referential","id":"../../../host/secret"}}' \
		'{"id":8,"op":"recall","call":{"tool":"recall","mode":"referential","id":"candidate-1\u0000/../x"}}' \
		'{"id":9,"op":"recall","call":{"tool":"recall","mode":"telepathy"}}' \
		'{"id":10,"op":"recall","call":"x"}'
	[ "$status" -eq 0 ]
	for n in 2 3 4 5; do
		reply "$n" '.ok == false and .error == "keep: key must be an entry id (letters, digits, . _ -)"'
	done
	reply 6 '.ok == false and .error == "keep: fastMaxBytes must be a whole number of bytes"'
	reply 7 '.ok == false and (.error | contains("id must be an entry id"))'
	reply 8 '.ok == false and (.error | contains("id must be an entry id"))'
	reply 9 '.ok == false and .error == "recall: unknown recall mode"'
	reply 10 '.ok == false and .error == "recall: call must be an object"'
	[ "$(ls -A ws/.sfma/mem/records)" = "" ]
	[ "$(ls -A host)" = secret.json ]
	# a record that is a link to a host file: never read through
	ln -s "$PWD/host/secret.json" ws/.sfma/mem/records/leak.json
	mem "$open" '{"id":2,"op":"recall","call":{"tool":"recall","mode":"referential","id":"leak"}}' \
		'{"id":3,"op":"recall","call":{"tool":"recall","mode":"semantic","query":"secret host"}}'
	reply 2 '.ok and .entry.found == false'
	reply 3 '.ok and .entry.found == false'
	[[ "$output" != *host-7x* ]]
}

@test "usage: one WORKSPACE; a fatal error is also the last line with SFMA_ERROR_LINE=1" {
	run --separate-stderr sfma-mem
	[ "$status" -eq 2 ]
	[[ "$stderr" == "sfma-mem: no WORKSPACE given"* ]]
	run --separate-stderr sfma-mem a b
	[ "$status" -eq 2 ]
	run --separate-stderr sfma-mem "$(printf 'x%.0s' $(seq 5000))"
	[ "$status" -eq 2 ]
	[[ "$stderr" == "sfma-mem: WORKSPACE longer than"* ]]
	# a relative workspace from a directory that is gone: it cannot say where
	mkdir gone
	cd gone
	rmdir ../gone
	run --separate-stderr env SFMA_ERROR_LINE=1 sfma-mem ws </dev/null
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sfma-mem: the current directory: "* ]]
	jq -e '.error | startswith("the current directory: ")' <<<"$output"
	# wired by hand, without the variable, stdout holds nothing
	run --separate-stderr sfma-mem ws </dev/null
	[ "$status" -eq 1 ]
	[ -z "$output" ]
}

@test "a session leaks nothing (valgrind; LeakSanitizer in the sanitizer build)" {
	first_session
	printf '%s\n' "$open" \
		'{"id":2,"op":"keep","key":"candidate-4","payload":{"mission":"again"},"fastMaxBytes":4}' \
		'{"id":3,"op":"recall","call":{"tool":"recall","mode":"lexical","query":"MARKER-m3q"}}' \
		'{"id":4,"op":"recall","call":{"tool":"recall","mode":"change","query":"MARKER-m3q"}}' \
		'{"id":5,"op":"recall","call":{"tool":"recall","mode":"referential","id":"candidate-3"}}' \
		'{"id":6,"op":"recall","call":{"tool":"recall","mode":"semantic","query":"again"}}' \
		'{"id":7,"op":"recall","call":{"tool":"recall","mode":"lexical","query":""}}' \
		'garbage' '{"id":9,"op":"nope"}' '{"id":10,"op":"keep","key":"../x","payload":{},"fastMaxBytes":1}' \
		"{\"id\":11,\"op\":\"commit\",\"subject\":\"run m completed turns=2 calls=2\",\"memory\":$memory_doc}" >session.in
	if [ -n "${SFMA_SANITIZED:-}" ]; then
		# LeakSanitizer runs at exit and turns a leak into exit status 99.
		run --separate-stderr sfma-mem ws <session.in
	else
		require valgrind
		run --separate-stderr valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect,possible \
			--error-exitcode=9 sfma-mem ws <session.in
	fi
	[ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
	[ "$(replies)" -eq 11 ]
	reply 11 '.ok and .entry.ok'
	[ "$(git -C "$M" rev-list --count HEAD)" -eq 2 ]
	# a session whose open was refused leaks nothing either
	echo '* filter=x' >"$M/.gitattributes"
	git -C "$M" config diff.x.textconv cat
	if [ -n "${SFMA_SANITIZED:-}" ]; then
		run --separate-stderr sfma-mem ws <session.in
	else
		run --separate-stderr valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect,possible \
			--error-exitcode=9 sfma-mem ws <session.in
	fi
	[ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
	reply 1 '.ok == false and (.error | contains("unsafe git configuration: diff.x.textconv"))'
}

# ---- the planner's side ------------------------------------------------------

# A run of sfma-plan wired by hand to every stage (PIPELINE.md), the
# planner itself started as "$@" (strace, valgrind...) before sfma-plan.
plan_by_hand() {
	rm -rf fifo
	mkdir fifo
	for f in tm fm te fe tc fc ts fs tg fg; do mkfifo fifo/$f; done
	sfma-model m.json <fifo/tm >fifo/fm &
	sfma-exec --apply m.json <fifo/te >fifo/fe &
	sfma-chain ws/.sfma/trace.jsonl <fifo/tc >fifo/fc &
	sfma-seal ws <fifo/ts >fifo/fs &
	sfma-mem ws <fifo/tg >fifo/fg &
	run "$@" sfma-plan run m.json --apply --to-model fifo/tm --from-model fifo/fm --to-exec fifo/te \
		--from-exec fifo/fe --to-chain fifo/tc --from-chain fifo/fc --to-seal fifo/ts --from-seal fifo/fs \
		--to-mem fifo/tg --from-mem fifo/fg
	wait
}

@test "in a run the planner starts no process and never touches .sfma/mem: sfma-mem does the git work" {
	require strace
	cat >m.json <<-'JSON'
	{"name":"mem","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
	 "allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":12,"dryRunDefault":false,
	 "tuning":{"fastTierMaxBytes":64}}
	JSON
	cand='{"mission":"remember MARKER-p4z","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"keep"}],"firstTasks":[],"schedule":[]}'
	finish='{"tool":"write","path":"out.txt","content":"x"}'
	mock "$cand" "$finish" '{"tool":"done","summary":"s"}'
	run sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	# The second run reaches every git command a store has: hash-object
	# (the candidate is over fastTierMaxBytes), grep, the pickaxe,
	# cat-file (a referential recall of a record not in files), the commit.
	mock "$cand" '{"tool":"recall","mode":"lexical","query":"MARKER-p4z"}' \
		'{"tool":"recall","mode":"change","query":"MARKER-p4z"}' \
		'{"tool":"recall","mode":"referential","id":"not-in-files"}' "$finish" '{"tool":"done","summary":"s"}'
	plan_by_hand strace -f -qq -o plan.strace -e trace=execve,fork,vfork,clone,clone3,%file
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == "COMPLETED turns=6 "* ]]
	# one execve, the planner's own, and nothing cloned that is not a thread
	[ "$(grep -c ' execve(' plan.strace)" -eq 1 ] || { grep ' execve(' plan.strace; return 1; }
	grep ' execve(' plan.strace | grep -q '/sfma-plan", \["sfma-plan", "run"'
	run grep -E ' v?fork\(' plan.strace
	[ "$status" -eq 1 ] || { echo "$output"; return 1; }
	grep -E ' clone3?\(' plan.strace >clones || true
	run grep -v CLONE_THREAD clones
	[ "$status" -eq 1 ] || { echo "not a thread: $output"; return 1; }
	# no path under the store, not even looked at
	run grep -E '\.sfma/mem[/"]' plan.strace
	[ "$status" -eq 1 ] || { echo "$output"; return 1; }
	# and yet every git command ran (in sfma-mem): the commit landed on
	# the first, recall found the first run in history
	[ "$(git -C "$M" rev-list --count HEAD)" -eq 2 ]
	for mode in lexical change; do
		jq -s -e "any(.[]; .kind==\"store\" and .data.op==\"recall\" and .data.mode==\"$mode\" and .data.found)" \
			ws/.sfma/trace.jsonl >/dev/null || { echo "recall $mode found nothing"; return 1; }
	done
	jq -s -e 'any(.[]; .kind=="store" and .data.op=="put" and (.data.ref | startswith("git:")))' ws/.sfma/trace.jsonl
	jq -e ".memory.store.commit == \"$(git -C "$M" rev-parse HEAD)\"" ws/.sfma/result.json
	run sfma-verify ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	replays_ok 2
}

@test "sfma-plan run needs both ends of the memory stage's pipe" {
	echo '{"name":"m","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],"allowedCommands":[],"inputs":[],"outputs":[]}' >m.json
	set -- --to-model a --from-model b --to-exec c --from-exec d --to-chain e --from-chain f --to-seal g --from-seal h
	run --separate-stderr sfma-plan run m.json "$@"
	[ "$status" -eq 2 ]
	[[ "${stderr_lines[0]}" == "sfma-plan: run needs --to-mem" ]]
	run --separate-stderr sfma-plan run m.json "$@" --to-mem i
	[ "$status" -eq 2 ]
	[[ "${stderr_lines[0]}" == "sfma-plan: run needs --from-mem" ]]
	[ -z "$(ls -A ws/.sfma)" ]
}

@test "a recall answered after the run's time is up is dropped, and the run's commit still lands" {
	cat >m.json <<-'JSON'
	{"name":"slow","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
	 "allowedCommands":[],"inputs":[],"outputs":[],"maxTurns":12,"maxSeconds":1,"dryRunDefault":false}
	JSON
	# sfma-mem behind a relay that holds a recall's answer past the run's
	# deadline and its five seconds of grace
	cat >slow-mem.py <<-'PY'
	import json, subprocess, sys, time
	mem = subprocess.Popen(["sfma-mem"] + sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
	for line in sys.stdin.buffer:
	    mem.stdin.write(line)
	    mem.stdin.flush()
	    answer = mem.stdout.readline()
	    if json.loads(line).get("op") == "recall":
	        time.sleep(7)
	    sys.stdout.buffer.write(answer)
	    sys.stdout.buffer.flush()
	mem.stdin.close()
	sys.exit(mem.wait())
	PY
	mock '{"mission":"m","successCriteria":["x"],"loopRoles":[],"firstTasks":[],"schedule":[]}' \
		'{"tool":"recall","mode":"episodic","since":1,"until":2}' '{"tool":"done","summary":"s"}'
	rm -rf fifo
	mkdir fifo
	for f in tm fm te fe tc fc ts fs tg fg; do mkfifo fifo/$f; done
	sfma-model m.json <fifo/tm >fifo/fm &
	sfma-exec --apply m.json <fifo/te >fifo/fe &
	sfma-chain ws/.sfma/trace.jsonl <fifo/tc >fifo/fc &
	sfma-seal ws <fifo/ts >fifo/fs &
	python3 slow-mem.py ws <fifo/tg >fifo/fg &
	run --separate-stderr sfma-plan run m.json --apply --to-model fifo/tm --from-model fifo/fm --to-exec fifo/te \
		--from-exec fifo/fe --to-chain fifo/tc --from-chain fifo/fc --to-seal fifo/ts --from-seal fifo/fs \
		--to-mem fifo/tg --from-mem fifo/fg
	wait
	[ "$status" -eq 1 ]
	[[ "$output" == "HALTED-BUDGET turns="* ]] || { echo "$output $stderr"; return 1; }
	[[ "$stderr" != *"not committed"* ]] || { echo "$stderr"; return 1; }
	[ "$(git -C "$M" log --format=%s)" = "run slow halted-budget turns=2 calls=2" ]
	jq -e ".memory.store.commit == \"$(git -C "$M" rev-parse HEAD)\"" ws/.sfma/result.json
	run sfma-verify ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
}
