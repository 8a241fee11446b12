#!/usr/bin/env bats
# The runner keeps evidence: every byte that crosses the boundary between
# the model and the runner is stored in .sfma/evidence/<sha256> and
# referenced from the trace entry that reports it.

load helpers

CAND='{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
	cat >m.json <<'JSON'
{"name":"t","workspace":"ws","taskStatement":"TASK_STATEMENT_MARKER: write out.txt",
 "modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo","sleep"],"inputs":[],"outputs":["out.txt"],"maxTurns":12,
 "dryRunDefault":false}
JSON
}


# Every evidence reference in the trace, one "sha256 bytes" line each. The
# placement rule (sfma-formats(5), Evidence): the entry's top-level member
# "evidence", an object of references or arrays of references.
refs() {
	jq -r '(.evidence // {}) | to_entries[] | .value | (if type == "array" then .[] else . end)
		| "\(.sha256) \(.bytes)"' ws/.sfma/trace.jsonl
}

# sfma-verify accepts the run and checked every reference the trace holds.
audit_ok() {
	local want; want=$(refs | wc -l)
	run sfma-verify ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	if [ "$want" -eq 0 ]; then # a run whose store failed at once: no reference
		[[ "$output" == "AUDIT_OK "* && "$output" != *evidence=* ]] || { echo "$output"; return 1; }
	else
		[[ "$output" == "AUDIT_OK "*" evidence=$want" ]] || { echo "$output (want evidence=$want)"; return 1; }
	fi
}

# Every reference names a blob that exists, has the stated size and
# SHA-256, and is private to the runner.
refs_sound() {
	local n=0 sha bytes
	while read -r sha bytes; do
		local f=ws/.sfma/evidence/$sha
		[ -f "$f" ] || { echo "missing blob $sha"; return 1; }
		[ "$(stat -c %s "$f")" -eq "$bytes" ] || { echo "size of $sha"; return 1; }
		[ "$(sha256sum <"$f" | cut -d' ' -f1)" = "$sha" ] || { echo "hash of $sha"; return 1; }
		[ "$(stat -c %a "$f")" = 600 ] || { echo "mode of $sha: $(stat -c %a "$f")"; return 1; }
		n=$((n + 1))
	done < <(refs)
	[ "$n" -gt 0 ] || { echo "no evidence references"; return 1; }
}

# in_evidence TEXT: some referenced blob contains TEXT.
in_evidence() {
	local sha
	for sha in $(refs | cut -d' ' -f1 | sort -u); do
		grep -qF -- "$1" "ws/.sfma/evidence/$sha" && return 0
	done
	echo "not in any referenced blob: $1"
	return 1
}

@test "every byte string between model and runner is in a referenced blob" {
	local invalid='this is not json INVALID_REPLY_MARKER'
	mock "$CAND" "\"$invalid\"" \
		'{"tool":"run","cmd":"echo COMMAND_OUTPUT_MARKER"}' \
		'{"tool":"write","path":"out.txt","content":"WRITE_CONTENT_MARKER\n"}' \
		'{"tool":"write","path":"elsewhere.txt","content":"REFUSED_CONTENT_MARKER"}' \
		'{"tool":"notify","text":"NOTIFY_TEXT_MARKER"}' \
		'{"tool":"ask","question":"ASK_TEXT_MARKER"}' \
		'{"tool":"done","summary":"DONE_SUMMARY_MARKER"}'
	run sfma run m.json --apply
	[ "$status" -eq 1 ] # the refused write fails the run
	audit_ok
	refs_sound
	# the system prompt as sent, with the task; the first message
	in_evidence 'TASK_STATEMENT_MARKER: write out.txt'
	in_evidence 'Begin: reply with your bootstrap candidate.'
	# replies exactly as received: the invalid one too, byte for byte
	in_evidence "$invalid"
	# what the runner answered: the reminder, the candidate's adoption
	in_evidence '{"toolResult":"invalid reply: answer with exactly one JSON object"}'
	in_evidence 'candidate adopted'
	# the command's output as the model got it
	in_evidence 'COMMAND_OUTPUT_MARKER'
	jq -s -e 'any(.[]; .kind=="verdict" and .data.run.exit==0 and .evidence.output.bytes > 0)' ws/.sfma/trace.jsonl
	# write contents, also of the refused write, and its refusal as the model saw it
	in_evidence 'WRITE_CONTENT_MARKER'
	in_evidence 'REFUSED_CONTENT_MARKER'
	in_evidence 'EPSILON_HARD_FAIL: write elsewhere.txt: not a declared output'
	in_evidence 'NOTIFY_TEXT_MARKER'
	in_evidence 'ASK_TEXT_MARKER'
	in_evidence 'DONE_SUMMARY_MARKER'
	# a blob holds the item alone: the write's content blob is exactly it
	local sha; sha=$(jq -r 'select(.data.call.path=="out.txt") | .evidence.content.sha256' ws/.sfma/trace.jsonl)
	[ "$(cat "ws/.sfma/evidence/$sha")" = WRITE_CONTENT_MARKER ]
	[ "$(printf 'WRITE_CONTENT_MARKER\n' | sha256sum | cut -d' ' -f1)" = "$sha" ]
	# the reply blob of the invalid reply is exactly the text received
	sha=$(printf '%s' "$invalid" | sha256sum | cut -d' ' -f1)
	jq -s -e --arg s "$sha" 'any(.[]; .kind=="call" and .evidence.reply.sha256==$s)' ws/.sfma/trace.jsonl
	audit_ok
}

@test "a reference is exactly {sha256, bytes}, on the entries that report the item" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	# no reference sits in data: nothing there is named like the draft's *Evidence members
	jq -e -s 'all(.[]; [.data | paths | .[-1] | strings | select(endswith("Evidence"))] == [])' ws/.sfma/trace.jsonl
	# every value under evidence is a reference of exactly two members
	jq -e -s '[.[] | (.evidence // {}) | to_entries[] | .value]
		| length > 0 and all(.[]; (keys == ["bytes","sha256"]) and (.sha256 | test("^[0-9a-f]{64}$"))
		                        and (.bytes | type == "number" and . >= 0 and floor == .))' ws/.sfma/trace.jsonl
	# the first call carries the system prompt, every call its message and reply
	jq -e -s '[.[] | select(.kind=="call")] | (.[0].evidence.prompt != null)
		and all(.[]; .evidence.message != null and .evidence.reply != null)
		and ([.[1:][] | select(.evidence.prompt != null)] | length == 0)' ws/.sfma/trace.jsonl
	jq -e -s 'any(.[]; .kind=="task" and .data.call.tool=="write" and .evidence.content.bytes==1)' ws/.sfma/trace.jsonl
	jq -e -s 'any(.[]; .kind=="task" and .data.call.tool=="done" and .evidence.summary.bytes==1)' ws/.sfma/trace.jsonl
	jq -e -s 'any(.[]; .kind=="verdict" and .evidence.output != null)' ws/.sfma/trace.jsonl
	# the message a call reports is the tool result the previous verdict reported
	jq -e -s '[.[] | select(.kind=="verdict" and .evidence.output) | .evidence.output.sha256] as $out
		| [.[] | select(.kind=="call") | .evidence.message.sha256] as $msg
		| all($out[]; . as $o | $msg | index($o) != null)' ws/.sfma/trace.jsonl
}

@test "the same reply twice is one blob" {
	echo hi >in.txt
	mkdir ws && cp in.txt ws/
	mock "$CAND" '{"tool":"read","path":"in.txt"}' '{"tool":"read","path":"in.txt"}' \
		'{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	local sha; sha=$(printf '{"path":"in.txt","tool":"read"}' | sha256sum | cut -d' ' -f1)
	# two calls reference it, one blob holds it
	[ "$(jq -s --arg s "$sha" '[.[] | select(.evidence.reply.sha256==$s)] | length' ws/.sfma/trace.jsonl)" -eq 2 ]
	[ -f "ws/.sfma/evidence/$sha" ]
	[ "$(grep -lxF '{"path":"in.txt","tool":"read"}' ws/.sfma/evidence/* | wc -l)" -eq 1 ]
	# and the same read's result: two verdicts, one blob
	[ "$(jq -r 'select(.kind=="verdict" and .data.reason=="read 3 bytes") | .evidence.output.sha256' ws/.sfma/trace.jsonl | sort -u | wc -l)" -eq 1 ]
	# nothing in the store is unreferenced
	[ "$(ls ws/.sfma/evidence | wc -l)" -eq "$(refs | cut -d' ' -f1 | sort -u | wc -l)" ]
	refs_sound
}

@test "the journal goes only once every blob is filed under its name and the store is synced" {
	mkdir ws
	for i in 1 2 3; do echo "input $i" >ws/in$i.txt; done
	mock "$CAND" '{"tool":"read","path":"in1.txt"}' '{"tool":"read","path":"in2.txt"}' \
		'{"tool":"read","path":"in3.txt"}' '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	strace -f -ttt -qq -e trace=openat,syncfs,renameat,unlinkat -o sys.log sfma run m.json --apply
	audit_ok
	python3 - sys.log ws/.sfma/evidence <<'PY'
import os, re, sys
calls = []  # (time, tid, name, args, result), a call split by another thread joined up
pending = {}
for line in open(sys.argv[1]):
    tid, t, rest = line.rstrip("\n").split(None, 2)
    if rest.endswith("<unfinished ...>"):
        pending[tid] = (t, rest[: -len("<unfinished ...>")].rstrip())
        continue
    m = re.match(r"<\.\.\. \w+ resumed>(.*)", rest)
    if m and tid in pending:
        t, start = pending.pop(tid)
        rest = start + m[1]
    m = re.match(r"(\w+)\((.*)\) += (-?\d+)", rest)
    if m:
        calls.append((float(t), tid, m[1], m[2], int(m[3])))
assert calls, "strace saw nothing"
blobs = set(os.listdir(sys.argv[2]))
assert len(blobs) >= 10, blobs
renamed = {}
for i, (t, tid, name, args, res) in enumerate(calls):
    m = re.search(r'"\.filing-([0-9a-f]{64})", \d+, "([0-9a-f]{64})"', args) if name == "renameat" else None
    if not m:
        continue
    assert m[1] == m[2], args
    assert res == 0, args
    renamed[m[1]] = t
assert blobs == set(renamed), "filed without the rename seen: %s" % (blobs ^ set(renamed))
gone = [c for c in calls if c[2] == "unlinkat" and '"journal"' in c[3] and c[4] == 0]
assert len(gone) == 1, gone
t, tid, _, args, _ = gone[0]
dirfd = args.split(",")[0]
assert any(c[1] == tid and c[2] == "syncfs" and c[3] == dirfd and max(renamed.values()) < c[0] <= t for c in calls), \
    "the journal went before the store was synced"
PY
}

@test "a second run adds its evidence beside the first run's, and both stay sound" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"FIRST"}' '{"tool":"done","summary":"one"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"SECOND"}' '{"tool":"done","summary":"two"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	refs_sound
	in_evidence FIRST
	in_evidence SECOND
	[ "$(stat -c %a ws/.sfma/evidence)" = 700 ]
}

@test "what holds the run's content is the user's alone under umask 022: .sfma 0700, its files 0600 (a checkpoint is for others)" {
	umask 022
	mock "$CAND" '{"tool":"notify","text":"to the operator"}' '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	[ "$(stat -c %a ws/.sfma)" = 700 ]
	[ "$(stat -c %a ws/.sfma/trace.jsonl)" = 600 ]
	[ "$(stat -c %a ws/.sfma/result.json)" = 600 ]
	[ "$(stat -c %a ws/.sfma/memory.json)" = 600 ]
	for d in inbox outbox evidence; do
		[ "$(stat -c %a "ws/.sfma/$d")" = 700 ] || { echo "$d: $(stat -c %a "ws/.sfma/$d")"; return 1; }
	done
	[ -n "$(ls ws/.sfma/outbox)" ]
	for f in ws/.sfma/outbox/* ws/.sfma/evidence/*; do
		[ "$(stat -c %a "$f")" = 600 ] || { echo "$f: $(stat -c %a "$f")"; return 1; }
	done
	audit_ok
}

@test "the done summary is in the record and in memory.json; null without done" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"all \"done\" é"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	[ "$(jq -r .summary ws/.sfma/result.json)" = 'all "done" é' ]
	[ "$(jq -r '.runs[-1].summary' ws/.sfma/memory.json)" = 'all "done" é' ]
	audit_ok
	# a run that never said done has none
	mock "$CAND" '{"tool":"read","path":"nothing"}'
	jq '.maxTurns = 2' m.json >m2.json
	run sfma run m2.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	jq -e '.summary == null' ws/.sfma/result.json
	jq -e '.runs[-1].summary == null' ws/.sfma/memory.json
}

@test "memory.json keeps a long summary clipped at a UTF-8 boundary; the record keeps it whole" {
	local long; long=$(printf 'é%.0s' $(seq 3000)) # 6000 bytes
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' "{\"tool\":\"done\",\"summary\":\"$long\"}"
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	[ "$(jq -r .summary ws/.sfma/result.json)" = "$long" ]
	local kept; kept=$(jq -r '.runs[-1].summary' ws/.sfma/memory.json)
	[ "$(printf '%s' "$kept" | wc -c)" -eq 4096 ]
	[[ "$long" == "$kept"* ]]
}

@test "host facts are recorded where they were used: outputs at done, elapsed time at a halt" {
	mock "$CAND" '{"tool":"done","summary":"nothing written"}'
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	jq -e -s 'any(.[]; .kind=="verdict" and .data.reason=="done" and .data.outputs==[{"path":"out.txt","exists":false}])' \
		ws/.sfma/trace.jsonl
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	jq -e -s '[.[] | select(.kind=="verdict" and .data.reason=="done")][-1].data.outputs==[{"path":"out.txt","exists":true}]' \
		ws/.sfma/trace.jsonl
	# the time budget: the elapsed time is in the result entry beside the trigger
	jq '.maxSeconds = 1' m.json >s.json
	mock "$CAND" '{"tool":"run","cmd":"sleep 3"}' '{"tool":"done","summary":"s"}'
	run sfma run s.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	jq -e -s '[.[] | select(.kind=="result")][-1].data | .trigger=="maxSeconds" and .elapsedMs >= 1000' \
		ws/.sfma/trace.jsonl
	# a HALT file: the trigger is the fact
	touch ws/.sfma/HALT
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	jq -e -s '[.[] | select(.kind=="result")][-1].data | .trigger=="HALT file" and has("elapsedMs") == false' \
		ws/.sfma/trace.jsonl
}

@test "a run halted by SIGTERM leaves no reference to a missing blob" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"BEFORE_HALT"}' '{"tool":"run","cmd":"sleep 3"}' \
		'{"tool":"done","summary":"s"}'
	timeout -s KILL 60 sfma run m.json --apply >out 2>err &
	local pid=$!
	for _ in $(seq 200); do
		grep -q '"cmd":"sleep' ws/.sfma/trace.jsonl 2>/dev/null && break
		sleep 0.05
	done
	local child; child=$(pgrep -P "$pid" -x sfma)
	kill -TERM "$child"
	local st=0
	wait "$pid" || st=$?
	[ "$st" -eq 1 ]
	grep -q HALTED-OPERATOR out
	refs_sound
	in_evidence BEFORE_HALT
	audit_ok
}

@test "a store that cannot be written fails the run, and nothing references a missing blob" {
	mkdir -p ws/.sfma
	: >ws/.sfma/evidence # a file where the directory belongs
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	[[ "$output" == *FAILED* ]]
	audit_ok
	jq -e '.verdict=="failed" and (.error | startswith("evidence: "))' ws/.sfma/result.json
	[ "$(refs | wc -l)" -eq 0 ]
	audit_ok
}

@test "a link planted at .sfma/evidence is not followed: no blob lands outside" {
	mkdir -p ws/.sfma elsewhere
	ln -s "$PWD/elsewhere" ws/.sfma/evidence
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	[ -z "$(ls elsewhere)" ]
	jq -e '.verdict=="failed"' ws/.sfma/result.json
}

@test "no provider key reaches the evidence" {
	export OPENAI_API_KEY=sk-EVIDENCE-SECRET-0123456789 ANTHROPIC_API_KEY=sk-ant-EVIDENCE-SECRET
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	run grep -rl EVIDENCE-SECRET ws/.sfma
	[ "$status" -eq 1 ]
}

@test "a dry run keeps evidence too" {
	jq '.dryRunDefault = true' m.json >d.json
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"DRY_CONTENT"}' '{"tool":"run","cmd":"echo x"}' \
		'{"tool":"done","summary":"s"}'
	run sfma run d.json
	[ "$status" -eq 0 ]
	audit_ok
	[ ! -e ws/out.txt ]
	refs_sound
	in_evidence DRY_CONTENT
	in_evidence 'dry run: the command passed the hard tier and was not executed'
}

@test "a request no call answered is reported by the result entry: its message and prompt" {
	cat >o.json <<'JSON'
{"name":"t","workspace":"ws","modelEndpoints":[{"name":"o","provider":"openai","model":"gpt"}],
 "allowedCommands":[],"inputs":[],"outputs":["out.txt"],"maxTurns":8,"dryRunDefault":false}
JSON
	run env -u OPENAI_API_KEY sfma run o.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	jq -e -s 'any(.[]; .kind=="result" and (.data.error | startswith("model: "))
		and .evidence.message.bytes > 0 and .evidence.prompt.bytes > 0)' ws/.sfma/trace.jsonl
	refs_sound
	in_evidence 'Begin: reply with your bootstrap candidate.'
}
