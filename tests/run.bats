#!/usr/bin/env bats
# End to end through `sfma run`: the planner with every real stage, the mock
# model scripted by SFMA_MOCK. Every run, whatever its verdict, must verify.

load helpers
bats_require_minimum_version 1.5.0

CAND='{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
}

manifest() { # manifest FILE [extra JSON members]
	local extra=${2:-}
	cat >"$1" <<JSON
{"name":"t","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo","sleep"],"inputs":[],"outputs":["out.txt"],"maxTurns":8,
 "dryRunDefault":false${extra:+,$extra}}
JSON
}

verified() {
	run sfma-verify ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == AUDIT_OK* ]]
}

# trace_has FILTER: some entry of the trace matches the jq condition.
trace_has() {
	jq -s -e "any(.[]; $1)" ws/.sfma/trace.jsonl >/dev/null
}


@test "the example runs end to end on the built-in mock and verifies" {
	cp "$REPO/examples/hello/manifest.json" .
	run sfma run manifest.json --apply
	[ "$status" -eq 0 ]
	[[ "$output" == *"COMPLETED turns="*" dryRun=false record=ws/.sfma/result.json"* ]]
	[ -s ws/hello.txt ]
	# the allowlisted command ran in the sandbox
	grep -q '"cmd":"echo hello from the sandbox"' ws/.sfma/trace.jsonl
	trace_has '.kind=="verdict" and .data.run != null and .data.pass and .data.run.exit == 0'
	verified
}

# standins [CHAIN_PYTHON]: bin/ with sfma and its stages, where sfma-chain
# is a stand-in that holds every event back 50 ms before the real
# sfma-chain appends it (so that an entry still owed would show), or runs
# CHAIN_PYTHON with the real one as p, and sfma-exec is one that notes in
# exec.log, at each request, what the trace on disk holds, then hands the
# request to the real sfma-exec.
standins() {
	local relay=${1:-'for line in sys.stdin.buffer:
    time.sleep(0.05)
    p.stdin.write(line)
    p.stdin.flush()'}
	mkdir bin
	cp "$SFMA_BINDIR"/sfma* bin/
	cat >bin/sfma-chain <<PY
#!/usr/bin/env python3
import subprocess, sys, threading, time
p = subprocess.Popen(["$SFMA_BINDIR/sfma-chain"] + sys.argv[1:], stdin=subprocess.PIPE)
$relay
p.stdin.close()
sys.exit(p.wait())
PY
	cat >bin/sfma-exec <<PY
#!/usr/bin/env python3
import json, subprocess, sys
p = subprocess.Popen(["$SFMA_BINDIR/sfma-exec"] + sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
log = open("$BATS_TEST_TMPDIR/exec.log", "a")
for line in sys.stdin.buffer:
    with open("$BATS_TEST_TMPDIR/ws/.sfma/trace.jsonl") as t:
        entries = [json.loads(l) for l in t]
    log.write(json.dumps({"request": json.loads(line), "ondisk": len(entries), "last": entries[-1]}) + "\n")
    log.flush()
    p.stdin.write(line)
    p.stdin.flush()
    sys.stdout.buffer.write(p.stdout.readline())
    sys.stdout.buffer.flush()
p.stdin.close()
sys.exit(p.wait())
PY
	chmod +x bin/sfma-chain bin/sfma-exec
}

@test "a command or a write reaches sfma-exec only once every entry before it is on disk" {
	standins
	cp "$REPO/examples/hello/manifest.json" .
	run bin/sfma run manifest.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	verified
	# a write and a command, each sent with its task entry the last on
	# disk and no entry before it missing
	[ "$(jq -r .request.call.tool exec.log | tr '\n' ' ')" = "write run " ]
	run jq -c 'select(.last.kind != "task" or .last.data.call.tool != .request.call.tool or .ondisk != .last.seq)' exec.log
	[ -z "$output" ] || { echo "sent too early: $output"; return 1; }
}

@test "a read goes to sfma-exec at once; every entry is appended under the id the run gave it before" {
	standins
	manifest m.json
	mkdir ws
	echo "some input" >ws/in.txt
	export SFMA_MOCK="[$CAND,{\"tool\":\"read\",\"path\":\"in.txt\"},{\"tool\":\"read\",\"path\":\"in.txt\"},{\"tool\":\"read\",\"path\":\"in.txt\"},{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"run\",\"cmd\":\"echo hi\"},{\"tool\":\"done\",\"summary\":\"s\"}]"
	run bin/sfma run m.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	verified
	run sfma replay ws
	[[ "$output" == "REPLAY_OK runs=1 entries="* ]] || { echo "$output"; return 1; }
	[ "$(jq -r .request.call.tool exec.log | tr '\n' ' ')" = "read read read write run " ]
	# the write and the command still wait for every entry before them
	run jq -c 'select(.request.call.tool != "read") | select(.last.kind != "task" or .ondisk != .last.seq)' exec.log
	[ -z "$output" ] || { echo "sent too early: $output"; return 1; }
	# a read was sent while its task entry was still held back (three
	# reads, each entry 50 ms behind: not one of them waited)
	jq -se '[.[] | select(.request.call.tool == "read" and .ondisk < .request.seq)] | length >= 1' exec.log
	# the seq each request carried is its task entry's, as appended
	jq -c '{seq: .request.seq, tool: .request.call.tool}' exec.log >sent
	jq -c --slurpfile sent sent 'select(.kind == "task" and .data.call.tool != "done") | {seq, tool: .data.call.tool}' ws/.sfma/trace.jsonl >appended
	diff sent appended
	# and every id an entry refers to (a verdict to its task, ...) is
	# that of an entry before it
	jq -se '[.[] | select(.kind == "verdict" and (.refs | length) > 0)] | length >= 5' ws/.sfma/trace.jsonl
	jq -se '. as $t | [range(length) as $i | $t[$i].refs[] as $r | any($t[:$i][]; .id == $r)] | all' ws/.sfma/trace.jsonl
}

@test "an entry appended under another id than the run gave it ends the run" {
	# a stand-in that slips an event of its own in after the run's
	# second: every acknowledgement after it is one seq off
	standins 'n = 0
for line in sys.stdin.buffer:
    p.stdin.write(line)
    n += 1
    if n == 2:
        p.stdin.write(b"{\"kind\":\"message\",\"data\":{\"dir\":\"in\",\"file\":\"slipped\"},\"loop\":0}\n")
    p.stdin.flush()'
	cp "$REPO/examples/hello/manifest.json" .
	run --separate-stderr bin/sfma run manifest.json --apply
	[ "$status" -eq 1 ] || { echo "$output $stderr"; return 1; }
	[[ "$stderr" == *"trace: sfma-chain appended message-3 where "*"-3 was next"* ]] || { echo "$stderr"; return 1; }
	# nothing acted on the world after it
	[ ! -s exec.log ]
	[ ! -e ws/hello.txt ]
	verified
}

@test "entries larger than a pipe, back to back, do not stall the run" {
	# A 100 KB --task clarification and a 100 KB candidate: each entry's
	# acknowledgement fills sfma-chain's output pipe on its own, so a
	# planner that kept writing events without reading them would block
	# on a chain blocked on it. Output to files: a stalled stage must not
	# hold this test's pipe open.
	manifest m.json
	local big; big=$(head -c 100000 /dev/zero | tr '\0' m)
	export SFMA_MOCK="[{\"mission\":\"$big\",\"successCriteria\":[\"out.txt exists\"],\"loopRoles\":[{\"name\":\"solo\",\"duty\":\"d\"}],\"firstTasks\":[],\"schedule\":[]},{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"done\",\"summary\":\"s\"}]"
	local status=0
	timeout -k 5 60 sfma run m.json --apply --task "${big//m/t}" >out.txt 2>err.txt </dev/null || status=$?
	[ "$status" -eq 0 ] || { echo "status $status"; cat out.txt err.txt; return 1; }
	grep -q '^COMPLETED' out.txt
	verified
	[ "$(jq -s '[.[] | select(.kind == "candidate" or .kind == "clarification") | tostring | length | select(. > 65536)] | length' ws/.sfma/trace.jsonl)" -eq 2 ]
}

@test "a dry run records writes without applying them and completes" {
	cp "$REPO/examples/hello/manifest.json" .
	run sfma run manifest.json
	[ "$status" -eq 0 ]
	[[ "$output" == *"COMPLETED"*"dryRun=true"* ]]
	[ ! -e ws/hello.txt ]
	jq -e '.dryRun == true and .outputs[0].ok == true' ws/.sfma/result.json
	verified
}

@test "each hard-tier refusal ends the run failed, exit 1, and verifies" {
	manifest m.json
	local cases=(
		'{"tool":"write","path":"../x","content":"x"}|outside workspace'
		'{"tool":"write","path":"other.txt","content":"x"}|not a declared output'
		'{"tool":"write","path":".sfma/memory.json","content":"x"}|reserved'
		'{"tool":"run","cmd":"echo hi; id"}|shell metacharacters are not allowed'
		'{"tool":"run","cmd":"cat /etc/passwd"}|not in allowedCommands'
		'{"tool":"run","cmd":"   "}|empty command'
		'{"tool":"teleport"}|unknown tool'
	)
	for c in "${cases[@]}"; do
		rm -rf ws
		mock "$CAND" "${c%%|*}" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
		run sfma run m.json
		[ "$status" -eq 1 ] || { echo "case $c: $output"; return 1; }
		[[ "$output" == *FAILED* ]]
		trace_has ".kind==\"verdict\" and .data.pass==false and (.data.reason | contains(\"${c##*|}\"))" ||
			{ echo "no refusal with ${c##*|}"; grep verdict ws/.sfma/trace.jsonl; return 1; }
		jq -e '.hardTierFailures == 1 and .verdict == "failed"' ws/.sfma/result.json
		verified
	done
}

@test "maxTurns halts the run with exact counts" {
	manifest m.json
	sed -i 's/"maxTurns":8/"maxTurns":3/' m.json
	mock "$CAND" '"not json"' '{"tool":"read","path":"nothing"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json
	[ "$status" -eq 1 ]
	[[ "$output" == *"HALTED-MAXTURNS turns=3"* ]]
	jq -e '.turns == 3 and .modelCalls == 3 and .verdict == "halted-maxTurns"' ws/.sfma/result.json
	verified
}

@test "maxModelCalls halts the run when every attempt is spent" {
	manifest m.json '"maxModelCalls":2'
	mock "$CAND" '{"tool":"read","path":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json
	[ "$status" -eq 1 ]
	[[ "$output" == *HALTED-BUDGET* ]]
	jq -e '.modelCalls == 2 and .verdict == "halted-budget"' ws/.sfma/result.json
	[ "$(grep -c '"kind":"call"' ws/.sfma/trace.jsonl)" -eq 2 ]
	verified
}

@test "maxSeconds cuts a slow command at the deadline" {
	manifest m.json '"maxSeconds":2'
	mock "$CAND" '{"tool":"run","cmd":"sleep 30"}' '{"tool":"done","summary":"s"}'
	SECONDS=0
	run sfma run m.json
	[ "$status" -eq 1 ]
	[[ "$output" == *HALTED-BUDGET* ]]
	[ "$SECONDS" -lt 15 ]
	verified
}

@test "a HALT file stops the run before its next turn, with no model call" {
	manifest m.json
	mkdir -p ws/.sfma && touch ws/.sfma/HALT
	run sfma run m.json
	[ "$status" -eq 1 ]
	[[ "$output" == *"HALTED-OPERATOR turns=0"* ]]
	run grep -q '"kind":"call"' ws/.sfma/trace.jsonl
	[ "$status" -eq 1 ]
	trace_has '.kind=="result" and .data.halt=="HALT file" and .data.trigger=="HALT file"'
	verified
}

@test "an invalid manifest prints every reason, exits 2 and creates nothing" {
	cat >m.json <<'JSON'
{"name":"","workspace":"ws","modelEndpoints":[],"allowedCommands":["a b","/bin/x"],
 "inputs":["../up"],"outputs":[".sfma/x"],"maxTurns":0,"dryRunDefault":"yes","tuning":{"bogus":1}}
JSON
	run sfma run m.json
	[ "$status" -eq 2 ]
	[[ "$output" == *TASK_INVALID* ]]
	for r in name modelEndpoints "allowedCommands[0]" "allowedCommands[1]" "inputs[0]" "outputs[0]" maxTurns dryRunDefault \
	         'manifest: tuning: unknown key "bogus"'; do
		[[ "$output" == *"- "*"$r"* ]] || { echo "missing reason for $r"; return 1; }
	done
	[ ! -e ws ]
	run sfma run missing.json
	[ "$status" -eq 2 ]
	printf '{"name":"a","name":"b"}' >dup.json
	run sfma-plan --check dup.json
	[ "$status" -eq 2 ]
	[[ "$output" == *duplicate* ]]
}

@test "a v1 manifest with modelAdapter is rejected" {
	manifest m.json '"modelAdapter":"mock"'
	run sfma run m.json
	[ "$status" -eq 2 ]
	[[ "$output" == *"modelAdapter was replaced by modelEndpoints"* ]]
	[ ! -e ws ]
}

@test "certification after certWindow clean runs, pinned replay saves a call, demotion on a refusal" {
	manifest m.json '"tuning":{"certWindow":2}'
	for i in 1 2; do
		mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
		run sfma run m.json
		[ "$status" -eq 0 ]
		verified
	done
	jq -e '.lifecycle == ["probation","certified","completed"]' ws/.sfma/result.json
	jq -e '.pinned.candidate.mission == "m"' ws/.sfma/memory.json
	# pinned replay: no bootstrap call, so the first reply is already work
	mock '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json
	[ "$status" -eq 0 ]
	jq -e '.lifecycle[0] == "pinned-replay" and .modelCalls == 2' ws/.sfma/result.json
	verified
	# a hard-tier failure in a pinned run demotes
	mock '{"tool":"write","path":"../escape","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json
	[ "$status" -eq 1 ]
	jq -e '.lifecycle == ["pinned-replay","demoted","failed"]' ws/.sfma/result.json
	jq -e '.pinned == null' ws/.sfma/memory.json
	verified
}

@test "the inbox is consumed and traced; notify and ask land in the outbox" {
	manifest m.json
	mkdir -p ws/.sfma/inbox
	echo "use plain text" >ws/.sfma/inbox/001-operator.txt
	mock "$CAND" '{"tool":"notify","text":"started"}' '{"tool":"ask","question":"which format?"}' \
		'{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json
	[ "$status" -eq 0 ]
	[ ! -e ws/.sfma/inbox/001-operator.txt ]
	trace_has '.kind=="message" and .data.dir=="in" and .data.file=="001-operator.txt" and (.data.text | contains("use plain text"))'
	[ "$(ls ws/.sfma/outbox | wc -l)" -eq 2 ]
	cat ws/.sfma/outbox/*-ask.json | jq -e '.kind == "ask" and .text == "which format?"'
	trace_has '.kind=="message" and .data.dir=="out" and .data.kind=="notify"'
	verified
}

@test "a tampered trace refuses the next run and nothing is appended" {
	manifest m.json
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json
	[ "$status" -eq 0 ]
	cp ws/.sfma/trace.jsonl pristine
	sed -i '2s/"probation"/"certified"/' ws/.sfma/trace.jsonl
	run cmp -s pristine ws/.sfma/trace.jsonl
	[ "$status" -eq 1 ]
	cp ws/.sfma/trace.jsonl before
	run sfma run m.json
	[ "$status" -eq 1 ]
	[[ "$output" == *"failed hash-chain verification"* ]]
	cmp before ws/.sfma/trace.jsonl
}

@test "a signed run verifies as trusted with the right key only" {
	require openssl
	openssl genpkey -algorithm ed25519 -out k.pem 2>/dev/null
	openssl pkey -in k.pem -pubout -out k.pub
	openssl genpkey -algorithm ed25519 -out other.pem 2>/dev/null
	openssl pkey -in other.pem -pubout -out other.pub
	cp "$REPO/examples/hello/manifest.json" .
	SFMA_AUDIT_PRIVATE_KEY="$(cat k.pem)" run sfma run manifest.json --apply
	[ "$status" -eq 0 ]
	SFMA_AUDIT_PUBLIC_KEY="$(cat k.pub)" run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == "AUDIT_OK signature=trusted "* ]]
	SFMA_AUDIT_PUBLIC_KEY="$(cat other.pub)" run sfma-verify ws
	[ "$status" -eq 1 ]
	! grep -rqF "$(sed -n 2p k.pem)" ws
}

@test "hostile manifests are answered with TASK_INVALID and exit 2, never a crash" {
	printf '{"name":"\xff\xfe"}' >utf8.json
	python3 -c 'print("[" * 10000 + "]" * 10000)' >deep.json
	python3 -c 'print("{\"name\":\"" + "x" * (2 << 20) + "\"}")' >huge.json
	: >empty.json
	mkdir dir.json
	for f in utf8.json deep.json huge.json empty.json dir.json; do
		run sfma-plan --check "$f"
		[ "$status" -eq 2 ] || { echo "$f: status $status: $output"; return 1; }
		[ "${lines[0]}" = TASK_INVALID ]
		[ "${#lines[@]}" -eq 2 ]
		run sfma run "$f"
		[ "$status" -eq 2 ]
	done
	[ ! -e ws ]
}

@test "SFMA_EXEC_UIDS reaches sfma-exec: the trace records sandbox ids from that range" {
	[ "$(id -u)" = 0 ] || skip "sandboxes lease host ids as root only"
	manifest m.json
	mock "$CAND" '{"tool":"run","cmd":"echo hi"}' '{"tool":"done","summary":"s"}'
	SFMA_EXEC_UIDS=2147200000-2147200099 run sfma run m.json --apply
	trace_has '.kind=="verdict" and .data.run.exit == 0 and .data.run.sandbox.ids == "leased" and
		.data.run.sandbox.hostUid >= 2147200000 and .data.run.sandbox.hostUid <= 2147200099' ||
		{ echo "$output"; grep '"run"' ws/.sfma/trace.jsonl; return 1; }
	verified
}
