#!/usr/bin/env bats
# sfma replay: a recorded run re-derived offline from its evidence, through
# the code that decided it; every derived entry compared with the trace.

load helpers

CAND='{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
	cat >m.json <<'JSON'
{"name":"t","workspace":"ws","taskStatement":"write out.txt",
 "modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo","sleep"],"inputs":[],"outputs":["out.txt"],"maxTurns":12,
 "dryRunDefault":false}
JSON
}


# sfma-verify accepts the record and checked every reference the trace
# holds (each in an entry's top-level "evidence" member, sfma-formats(5)).
audit_ok() {
	local want
	want=$(jq -r '(.evidence // {}) | to_entries[] | .value | (if type == "array" then .[] else . end) | .sha256' \
		ws/.sfma/trace.jsonl | wc -l)
	[ "$want" -gt 0 ] || { echo "no evidence references"; return 1; }
	run sfma-verify ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == "AUDIT_OK "*" evidence=$want" ]] || { echo "$output (want evidence=$want)"; return 1; }
}

@test "a run with every kind of turn replays" {
	mock "$CAND" '"not json at all"' '{"tool":"teleport"}' \
		'{"tool":"run","cmd":"echo hi"}' '{"tool":"read","path":"missing.txt"}' \
		'{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"write","path":"../x","content":"y"}' \
		'{"tool":"run","cmd":"rm -rf /"}' '{"tool":"notify","text":"n"}' '{"tool":"ask","question":"q"}' \
		'{"nothing":"here"}' '{"tool":"wr\u0000ite","path":"out.txt","content":"z"}' '{"tool":"read","path":"a\u0000b"}' \
		'{"tool":5}' '{"tool":"recall","mode":"episodic"}' '{"tool":"recall","mode":"telepathy"}' \
		'{"tool":"done","summary":"s"}'
	jq '.maxTurns = 30' m.json >long.json
	run sfma run long.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	grep -q '"reason":"done"' ws/.sfma/trace.jsonl
	grep -q '"reason":"recall: unknown recall mode"' ws/.sfma/trace.jsonl
	replays_ok 1
}

@test "an unknown recall mode flipped to a pass does not replay" {
	mock "$CAND" '{"tool":"recall","mode":"telepathy"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	rewrite '
for e in es:
    if e["kind"] == "verdict" and e["data"].get("pass") is False:
        e["data"]["pass"], e["data"]["reason"] = True, "recall"
'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (verdict): trace has pass=true reason \"recall\", replay derives refused: recall: unknown recall mode" ]] ||
		{ echo "$output"; return 1; }
}

@test "completed, dry-run, reminder and several runs replay, as sfma replay and by result.json" {
	mock '{"tool":"read","path":"x"}' "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	replays_ok 1
	jq '.dryRunDefault = true' m.json >d.json
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"run","cmd":"echo x"}' '{"tool":"done","summary":"s"}'
	run sfma run d.json
	[ "$status" -eq 0 ]
	audit_ok
	replays_ok 2
	run sfma-replay ws/.sfma/result.json
	[ "$status" -eq 0 ]
	[[ "$output" == "REPLAY_OK runs=2 "* ]]
}

@test "halts replay: maxTurns, maxModelCalls, maxSeconds, a HALT file, the operator's inbox and --task" {
	jq '.maxTurns = 2' m.json >t.json
	mock "$CAND" '{"tool":"read","path":"a"}' '{"tool":"read","path":"b"}'
	run sfma run t.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	replays_ok 1
	jq '.maxModelCalls = 2' m.json >c.json
	run sfma run c.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	grep -q '"trigger":"maxModelCalls"' ws/.sfma/trace.jsonl
	replays_ok 2
	rm -rf ws
	jq '.maxSeconds = 1' m.json >s.json
	mock "$CAND" '{"tool":"run","cmd":"sleep 3"}' '{"tool":"done","summary":"s"}'
	run sfma run s.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	replays_ok 1
	echo "only narrow it" >ws/.sfma/inbox/note
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply --task "a narrower task"
	[ "$status" -eq 0 ]
	audit_ok
	replays_ok 2
	touch ws/.sfma/HALT
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	replays_ok 3
}

@test "a refused verdict flipped to a pass in a recomputed unsigned chain verifies, and does not replay" {
	mock "$CAND" '{"tool":"write","path":"elsewhere.txt","content":"x"}' \
		'{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	local seq; seq=$(jq -r 'select(.kind=="verdict" and .data.pass==false) | .seq' ws/.sfma/trace.jsonl)
	rewrite '
for e in es:
    if e["kind"] == "verdict" and e["data"].get("pass") is False:
        e["data"]["pass"] = True
        e["data"]["reason"] = "wrote 1 bytes to elsewhere.txt"
    if e["kind"] == "result" and "error" in e["data"]:
        e["kind"], e["id"], e["data"] = "lifecycle", "lifecycle-%d" % e["seq"], {"from": "probation", "to": "probation"}
    if e["kind"] == "lifecycle" and e["data"].get("to") == "failed":
        e["data"]["to"] = "completed"
' '.verdict = "completed" | .hardTierFailures = 0 | del(.error)'
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == AUDIT_OK* ]]
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq $seq (verdict): trace has pass=true reason \"wrote 1 bytes to elsewhere.txt\", replay derives refused: write elsewhere.txt: not a declared output" ]] ||
		{ echo "$output"; return 1; }
}

@test "a command refusal flipped to a pass does not replay either" {
	mock "$CAND" '{"tool":"run","cmd":"cat /etc/shadow"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	rewrite '
for e in es:
    if e["kind"] == "verdict" and e["data"].get("pass") is False:
        e["data"]["pass"] = True
'
	run sfma-verify ws
	[ "$status" -eq 0 ]
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (verdict): trace has pass=true "*"replay derives refused: run: cat: not in allowedCommands" ]] ||
		{ echo "$output"; return 1; }
}

@test "reads of .sfma, by name and through a link, are refused and replay" {
	mkdir -p ws
	ln -s .sfma/trace.jsonl ws/lnk
	mock "$CAND" '{"tool":"read","path":".sfma/trace.jsonl"}' '{"tool":"read","path":"lnk"}' \
		'{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	grep -q '"reason":"read .sfma/trace.jsonl: .sfma is reserved: ' ws/.sfma/trace.jsonl
	grep -q '"reason":"read lnk: leads into .sfma via link: .sfma is reserved"' ws/.sfma/trace.jsonl
	replays_ok 1
}

@test "a read flipped to a .sfma refusal does not replay: the name rule is the code's own" {
	mock "$CAND" '{"tool":"read","path":"notes.txt"}' '{"tool":"write","path":"out.txt","content":"x"}' \
		'{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	local seq; seq=$(jq -s -r '[.[] | select(.kind=="verdict")][0].seq' ws/.sfma/trace.jsonl)
	rewrite '
for e in es:
    if e["kind"] == "verdict" and e["data"].get("reason", "").startswith("read notes.txt"):
        e["data"]["pass"] = False
        e["data"]["reason"] = "read notes.txt: .sfma is reserved: the run'"'"'s memory comes through recall"
'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq $seq (verdict): trace has refused: read notes.txt: .sfma is reserved: "*", replay derives pass (no host fact recorded refuses it)" ]] ||
		{ echo "$output"; return 1; }
}

@test "a record whose reply evidence was swapped verifies, and does not replay" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"run","cmd":"echo hi"}' \
		'{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	# the run's reply becomes a stored blob of another reply (the done)
	local seq; seq=$(jq -s -r '[.[] | select(.kind=="call")][2].seq' ws/.sfma/trace.jsonl)
	rewrite '
calls = [e for e in es if e["kind"] == "call"]
calls[2]["evidence"]["reply"] = calls[3]["evidence"]["reply"]
'
	run sfma-verify ws
	[ "$status" -eq 0 ]
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq $((seq + 1)) (task): trace has call {\"cmd\":\"echo hi\",\"tool\":\"run\"}, replay derives call {\"tool\":\"done\"}" ]] ||
		{ echo "$output"; return 1; }
}

@test "a swapped tool result (what the model was told) does not replay" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"write","path":"../x","content":"y"}' \
		'{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	# the refusal the model was told becomes the earlier success
	rewrite '
vs = [e for e in es if e["kind"] == "verdict" and "output" in e.get("evidence", {})]
vs[1]["evidence"]["output"] = vs[0]["evidence"]["output"]
'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (verdict): trace has evidence.output "* ]] || { echo "$output"; return 1; }
}

@test "an altered counter in the record does not replay" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	tampered ws
	jq 'del(.integrity) | .turns = 2' ws/.sfma/result.json | sfma-seal ws >/dev/null
	run sfma-verify ws
	[ "$status" -eq 0 ]
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (clock-anchor): trace has record turns 2, replay derives turns 3" ]] || { echo "$output"; return 1; }
}

@test "records made before evidence existed are incomplete, not diverged" {
	for f in legacy unicode multirun; do
		cp -r "$INTEROP/$f" .
		run sfma replay "$f/ws"
		[ "$status" -eq 1 ] || { echo "$f: $output"; return 1; }
		[[ "$output" == REPLAY_INCOMPLETE:* ]] || { echo "$f: $output"; return 1; }
	done
}

@test "a record that does not verify does not replay" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	sed -i 's/"to":"completed"/"to":"failed"/' ws/.sfma/trace.jsonl
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_INCOMPLETE: the record does not verify: AUDIT_INVALID: "* ]] || { echo "$output"; return 1; }
}

@test "an altered reply blob is caught" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	local sha; sha=$(jq -s -r '[.[] | select(.kind=="call")][1].evidence.reply.sha256' ws/.sfma/trace.jsonl)
	chmod u+w "ws/.sfma/evidence/$sha"
	sed -i 's/out.txt/ou2.txt/' "ws/.sfma/evidence/$sha"
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == REPLAY_INCOMPLETE:*"evidence $sha altered"* ]] || { echo "$output"; return 1; }
}

@test "replay needs no other stage: only sfma-verify beside it" {
	mock "$CAND" '{"tool":"run","cmd":"echo hi"}' '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	mkdir alone
	cp "$SFMA_BINDIR/sfma-replay" "$SFMA_BINDIR/sfma-verify" alone/
	run env PATH=/nonexistent "$PWD/alone/sfma-replay" ws
	[ "$status" -eq 0 ]
	[[ "$output" == "REPLAY_OK runs=1 "* ]]
}

@test "usage errors exit 2" {
	run sfma-replay
	[ "$status" -eq 2 ]
	run sfma-replay --bogus ws
	[ "$status" -eq 2 ]
	run sfma-replay a b
	[ "$status" -eq 2 ]
	run sfma-replay --version
	[ "$status" -eq 0 ]
}

@test "a certified configuration's pinned run replays" {
	jq '.tuning = {"certWindow":1}' m.json >p.json
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run p.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	grep -q '"to":"certified"' ws/.sfma/trace.jsonl
	mock '{"tool":"write","path":"out.txt","content":"y"}' '{"tool":"done","summary":"s"}'
	run sfma run p.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	grep -q '"to":"pinned-replay"' ws/.sfma/trace.jsonl
	replays_ok 2
}

@test "a run halted by SIGTERM while a command ran replays" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"run","cmd":"sleep 3"}' \
		'{"tool":"done","summary":"s"}'
	timeout -s KILL 60 sfma run m.json --apply >out 2>err &
	local pid=$!
	for _ in $(seq 200); do
		grep -q '"cmd":"sleep' ws/.sfma/trace.jsonl 2>/dev/null && break
		sleep 0.05
	done
	kill -TERM "$(pgrep -P "$pid" -x sfma)"
	local st=0
	wait "$pid" || st=$?
	[ "$st" -eq 1 ]
	grep -q '"trigger":"SIGTERM"' ws/.sfma/trace.jsonl
	audit_ok
	replays_ok 1
}

@test "a reference moved from evidence into data is data: neither verify nor replay reads it" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	local before=$output seq
	seq=$(jq -s -r '[.[] | select(.kind=="call")][1].seq' ws/.sfma/trace.jsonl)
	rewrite '
c = [e for e in es if e["kind"] == "call"][1]
c["data"]["reply"] = c["evidence"].pop("reply")
'
	run sfma-verify ws
	[ "$status" -eq 0 ]
	local n=${before##*evidence=}
	[[ "$output" == "AUDIT_OK "*" evidence=$((n - 1))" ]] || { echo "$output"; return 1; }
	run sfma replay ws
	[ "$status" -eq 1 ]
	[ "$output" = "REPLAY_INCOMPLETE: run 1, seq $seq (call): no evidence.reply, where the run's earlier entries have theirs" ] ||
		{ echo "$output"; return 1; }
}

@test "refusals only the host can cause are recorded facts: links, non-files, non-directories replay" {
	jq '.outputs = ["out.txt","link/x.txt","f/g.txt"]' m.json >h.json
	mkdir -p ws outside
	ln -s "$PWD/outside" ws/link
	ln -s /etc/hostname ws/leak
	: >ws/f
	mkdir ws/dir
	mock "$CAND" '{"tool":"write","path":"link/x.txt","content":"x"}' '{"tool":"read","path":"leak"}' \
		'{"tool":"write","path":"f/g.txt","content":"x"}' '{"tool":"read","path":"dir"}' '{"tool":"done","summary":"s"}'
	run sfma run h.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	[ "$(jq -s '[.[] | select(.kind=="verdict" and .data.pass==false)] | length' ws/.sfma/trace.jsonl)" -eq 4 ]
	grep -q 'escapes workspace via link' ws/.sfma/trace.jsonl
	replays_ok 1
}

@test "the path facts a gate rested on are recorded and rebuilt: a forged link refusal or a moved link does not replay" {
	mkdir -p ws/sub outside
	echo hi >ws/ok.txt
	ln -s ../outside ws/link
	mock "$CAND" '{"tool":"read","path":"ok.txt"}' '{"tool":"read","path":"link/secret"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	audit_ok
	# what the hard tier looked at, with the decision it made
	jq -s -e '[.[] | select(.kind=="verdict" and .data.pass==false)][0].data.paths
		== [{"path":"link","kind":"link","target":"../outside"}]' ws/.sfma/trace.jsonl
	jq -s -e '[.[] | select(.kind=="verdict" and .data.pass==true)][0].data.paths
		== [{"path":"ok.txt","kind":"file"}]' ws/.sfma/trace.jsonl
	replays_ok 1
	cp -a ws orig
	# a pass turned into a link refusal, the chain recomputed: the facts refuse nothing
	rewrite '
for e in es:
    if e["kind"] == "verdict" and e["data"].get("reason", "").startswith("read 3 bytes"):
        e["data"]["pass"], e["data"]["reason"] = False, "read ok.txt: escapes workspace via link"
'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (verdict): trace has refused: read ok.txt: escapes workspace via link, replay derives pass (the recorded path facts refuse nothing)" ]] ||
		{ echo "$output"; return 1; }
	# the link's target moved inside, the refusal kept: no longer derivable
	rm -rf ws && cp -a orig ws
	rewrite '
for e in es:
    for f in e["data"].get("paths", []):
        if f["kind"] == "link":
            f["target"] = "sub"
'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == *"(verdict): trace has refused: read link/secret: escapes workspace via link, replay derives pass"* ]] ||
		{ echo "$output"; return 1; }
}

@test "hostile path facts are refused, and nothing is made outside the replay's own directory" {
	mkdir -p ws victim
	echo hi >ws/ok.txt
	mock "$CAND" '{"tool":"read","path":"ok.txt"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	audit_ok
	cp -a ws orig
	for facts in '[{"path":"../escape","kind":"dir"}]' '[{"path":"/abs","kind":"file"}]' \
		"[{\"path\":\"l\",\"kind\":\"link\",\"target\":\"$PWD/victim\"},{\"path\":\"l/planted\",\"kind\":\"dir\"}]" \
		'[{"path":"a/b","kind":"file"}]' '[{"path":"ok.txt","kind":"socketish"}]'; do
		rm -rf ws && cp -a orig ws
		FACTS=$facts rewrite '
import os
for e in es:
    if e["kind"] == "verdict" and "paths" in e["data"]:
        e["data"]["paths"] = json.loads(os.environ["FACTS"])
'
		run sfma replay ws
		[ "$status" -eq 1 ] || { echo "$facts: $output"; return 1; }
		[[ "$output" == "REPLAY_DIVERGED: seq "*" (verdict): trace has path fact"* ]] || { echo "$facts: $output"; return 1; }
	done
	[ -z "$(ls -A victim)" ]
	[ ! -e escape ] && [ ! -e /abs ]
}

@test "a pass turned into a refusal by a rule the code passed does not replay" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	audit_ok
	rewrite '
for e in es:
    if e["kind"] == "verdict" and e["data"].get("reason", "").startswith("wrote "):
        e["data"]["pass"], e["data"]["reason"] = False, "write out.txt: outside workspace"
'
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (verdict): trace has refused: write out.txt: outside workspace, replay derives pass (no host fact recorded refuses it)" ]] ||
		{ echo "$output"; return 1; }
}

@test "a signed record replays; a signed record altered after signing is not replayed" {
	openssl genpkey -algorithm ed25519 -out key.pem 2>/dev/null
	export SFMA_AUDIT_PRIVATE_KEY; SFMA_AUDIT_PRIVATE_KEY=$(cat key.pem)
	mock "$CAND" '{"tool":"write","path":"elsewhere.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 1 ]
	audit_ok
	unset SFMA_AUDIT_PRIVATE_KEY
	jq -e '.integrity.signature.algorithm == "ed25519"' ws/.sfma/result.json
	replays_ok 1
	# the flip, with the chain recomputed: the signature no longer holds
	cp ws/.sfma/result.json signed.json
	rewrite '
for e in es:
    if e["kind"] == "verdict" and e["data"].get("pass") is False:
        e["data"]["pass"] = True
'
	jq --argjson sig "$(jq .integrity.signature signed.json)" '.integrity.signature = $sig' ws/.sfma/result.json >r.json
	mv r.json ws/.sfma/result.json
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_INCOMPLETE: the record does not verify: AUDIT_INVALID: "* ]] || { echo "$output"; return 1; }
}

@test "a task call without an id replays, as the planner recorded it" {
	mock "$CAND" '{"tool":"task","description":"no id"}' '{"tool":"write","path":"out.txt","content":"x"}' \
		'{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	audit_ok
	run jq -c 'select(.kind == "task") | .data.call' ws/.sfma/trace.jsonl
	[[ "$output" == *'{"tool":"task"}'* ]] || { echo "$output"; return 1; }
	replays_ok 1
}

@test "a task entry without its call, re-chained and re-sealed, is a divergence and never a crash" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	run sfma run m.json --apply
	[ "$status" -eq 0 ]
	rewrite '
t = [e for e in es if e["kind"] == "task"][0]
del t["data"]["call"]
'
	run sfma-verify ws
	[ "$status" -eq 0 ]
	run sfma replay ws
	[ "$status" -eq 1 ]
	[[ "$output" == "REPLAY_DIVERGED: seq "*" (task): trace has call null, replay derives call {\"path\":\"out.txt\",\"tool\":\"write\"}" ]] ||
		{ echo "$output"; return 1; }
}

# tests/fuzz/differential.py: random manifests and reply scripts (loops,
# invalid replies, ids missing or repeated, compaction, dry runs, second
# runs) through a real run and the replay of its record; a fixed seed
# here, a random one in `make fuzz`.
@test "the planner and the replay agree on random reply scripts (a fixed seed)" {
	run python3 "$REPO/tests/fuzz/differential.py" --seed 20261201 --runs 40
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == *"40 cases (seed 20261201), 0 disagree"* ]] || { echo "$output"; return 1; }
}

# tests/fuzz/mutants.py: honest records changed one way at random (a member
# deleted, a value retyped, an entry dropped, doubled or swapped), re-chained
# and re-sealed so that they verify; the replay must end each in one verdict
# line, never a crash or a hang. A fixed seed here, a random one in
# `make fuzz`; under `make check-sanitize` a memory error fails it too.
@test "records changed and re-sealed so that they verify: each replay ends in one verdict line (a fixed seed)" {
	run python3 "$REPO/tests/fuzz/mutants.py" --seed 20261202 --runs 30
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == *"mutants: 30 records mutated (seed 20261202), 0 replays that did not end in one verdict line"* ]] ||
		{ echo "$output"; return 1; }
}

@test "a FIFO in place of the trace or the record is refused at once, never waited on" {
	mock "$CAND" '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	sfma run m.json --apply >/dev/null
	for f in trace.jsonl result.json; do
		mv "ws/.sfma/$f" keep
		mkfifo "ws/.sfma/$f"
		run timeout 10 sfma-replay ws
		[ "$status" -eq 1 ] || { echo "$f: exit $status: $output"; return 1; }
		[[ "$output" == *"not a regular file"* ]] || { echo "$f: $output"; return 1; }
		[ "${#lines[@]}" -eq 1 ] || { echo "$output"; return 1; }
		rm "ws/.sfma/$f"
		mv keep "ws/.sfma/$f"
	done
	run sfma-replay ws
	[ "$status" -eq 0 ]
}
