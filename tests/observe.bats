#!/usr/bin/env bats
# The observer (sfma-tap(1)) and its check in sfma-verify: every line on
# the pipes between the planner and sfma-model / sfma-exec is recorded in
# .sfma/observed.jsonl and on the trace entry that stands for it, and a
# planner that lies about what crossed - built with the test hooks of
# sfma-plan (CFLAGS=-DSFMA_TEST_HOOKS, in a build of its own) - leaves a
# record sfma-verify refuses (sfma-formats(5), The observed chain).

load helpers
bats_require_minimum_version 1.5.0

CANDIDATE='{"mission":"m","successCriteria":["out.txt written"],"loopRoles":[],"firstTasks":[],"schedule":"now"}'
HOLD="[$CANDIDATE,{\"tool\":\"run\",\"cmd\":\"sleep 40\"},{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"done\",\"summary\":\"ok\"}]"

setup_file() {
	# The planner with its test hooks, built apart: never in bin/.
	HOOKS=$REPO/build/hooks
	make -s -C "$REPO" BUILD="$HOOKS" BINDIR="$HOOKS/bin" CFLAGS="-O2 -g -DSFMA_TEST_HOOKS" "$HOOKS/bin/sfma-plan" >&2
	export HOOKS
}

setup() {
	require jq
	require openssl
	require python3
	cd "$BATS_TEST_TMPDIR"
	cp "$REPO/examples/hello/manifest.json" .
}

teardown() {
	if [ -n "${sfma_pid:-}" ]; then
		kill -KILL "$sfma_child" "$sfma_pid" 2>/dev/null || true
	fi
}

# hooked HOOK: a copy of the programs whose planner lies as HOOK says
# (sfma finds its stages beside itself; the environment of the planner is
# sfma's to decide, so the hook's name is the wrapper's).
hooked() {
	mkdir -p "hooked-$1"
	for p in "$SFMA_BINDIR"/sfma-*; do ln -sf "$p" "hooked-$1/"; done
	cp "$SFMA_BINDIR/sfma" "hooked-$1/"
	rm "hooked-$1/sfma-plan"
	printf '#!/bin/sh\nSFMA_TEST_HOOK=%s exec %s "$@"\n' "$1" "$HOOKS/bin/sfma-plan" >"hooked-$1/sfma-plan"
	chmod +x "hooked-$1/sfma-plan"
}

# The wire records of the trace, one per line: stage dir n sha256 bytes.
wire_records() {
	jq -r 'select(.wire) | .wire[] | "\(.stage) \(.dir) \(.n) \(.sha256) \(.bytes)"' ws/.sfma/trace.jsonl | sort
}
observed_records() {
	jq -r 'select(.kind == "line") | "\(.stage) \(.dir) \(.n) \(.sha256) \(.bytes)"' ws/.sfma/observed.jsonl | sort
}

@test "every line the planner sends or reads is observed once and on one trace entry: observed=<n>" {
	run sfma run manifest.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	n=$(grep -c '"kind":"line"' ws/.sfma/observed.jsonl)
	[ "$n" -gt 8 ]
	# the same records on both sides, none twice
	[ "$(wire_records)" = "$(observed_records)" ]
	[ "$(wire_records | cut -d' ' -f1-3 | uniq -d)" = "" ]
	# a model reply's call entry holds its request's line and its own
	jq -s -e 'map(select(.kind == "call") | .wire | map(.stage + " " + .dir) == ["sfma-model out", "sfma-model in"]) | all' \
		ws/.sfma/trace.jsonl >/dev/null
	# an exec answer's verdict, its command's line and its own
	[ "$(jq -c 'select(.wire and .kind == "verdict" and .wire[0].stage == "sfma-exec") | [.wire[].dir]' \
		ws/.sfma/trace.jsonl | sort -u)" = '["out","in"]' ]
	# the memory stage's too: the open, the keep and the commit, each
	# request with its answer on one entry
	[ "$(jq -c 'select(.wire) | [.wire[] | select(.stage == "sfma-mem") | .dir] | select(length > 0)' \
		ws/.sfma/trace.jsonl)" = $'["out","in"]\n["out","in"]\n["out","in"]' ]
	jq -s -e 'map(select(.kind == "store" and .data.stage == "commit"))[0].wire | map(.stage + " " + .dir) ==
		["sfma-mem out", "sfma-mem in"]' ws/.sfma/trace.jsonl >/dev/null
	# the chain opens where the run's entries begin and closes with the counts
	[ "$(head -1 ws/.sfma/observed.jsonl | jq -c '{kind, stages, trace}')" = \
		'{"kind":"open","stages":["sfma-model","sfma-exec","sfma-mem"],"trace":0}' ]
	tail -1 ws/.sfma/observed.jsonl | jq -e '.kind == "close" and .lines["sfma-model"].out > 0'
	jq -e --arg h "$(tail -1 ws/.sfma/observed.jsonl | jq -r .hash)" --argjson n "$(wc -l <ws/.sfma/observed.jsonl)" \
		'.integrity.observedHead == $h and .integrity.observedEntries == $n' ws/.sfma/result.json
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == *" observed=$n "* ]] || { echo "$output"; return 1; }
	replays_ok 1
}

@test "a second run's part begins where its trace entries begin; both runs are checked" {
	sfma run manifest.json --apply >/dev/null
	size=$(stat -c %s ws/.sfma/trace.jsonl)
	sfma run manifest.json --apply >/dev/null
	[ "$(jq -s -c '[.[] | select(.kind == "open") | .trace]' ws/.sfma/observed.jsonl)" = "[0,$size]" ]
	n=$(grep -c '"kind":"line"' ws/.sfma/observed.jsonl)
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == *" observed=$n "* ]] || { echo "$output"; return 1; }
	replays_ok 2
}

@test "a planner that sends a model request it does not record: AUDIT_INVALID, observed" {
	hooked unrecorded-request
	run hooked-unrecorded-request/sfma run manifest.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	tampered ws
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	# the request, or the reply to it, whichever the observer wrote first
	[[ "$stderr" =~ ^"AUDIT_INVALID: observed: sfma-model "(in|out)" message "[12]" has no trace entry" ]] ||
		{ echo "$stderr"; return 1; }
	# the same run without the lie verifies
	rm -rf ws
	sfma run manifest.json --apply >/dev/null
	sfma-verify ws
}

@test "a planner that records a model call it never sent: AUDIT_INVALID, observed" {
	hooked phantom-call
	run hooked-phantom-call/sfma run manifest.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	tampered ws
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"AUDIT_INVALID: observed: seq "[0-9]+": sfma-model out message "[0-9]+" was never observed"$ ]] ||
		{ echo "$stderr"; return 1; }
}

@test "a planner that changes a model reply before recording it: AUDIT_INVALID, observed" {
	hooked altered-reply
	run hooked-altered-reply/sfma run manifest.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	tampered ws
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$stderr" == "AUDIT_INVALID: observed: sfma-model in message 1 has no trace entry (seq "*" records another line in its place: "* ]] ||
		{ echo "$stderr"; return 1; }
	# what the trace holds is what the planner made of the altered reply
	jq -s -e 'map(select(.kind == "call") | .data.latencyMs) | max >= 1000' ws/.sfma/trace.jsonl >/dev/null
}

@test "a planner that alters an exec answer before recording it: AUDIT_INVALID, observed" {
	hooked altered-exec
	run hooked-altered-exec/sfma run manifest.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	tampered ws
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$stderr" == "AUDIT_INVALID: observed: sfma-exec in message 1 has no trace entry (seq "*" records another line in its place: "* ]] ||
		{ echo "$stderr"; return 1; }
}

@test "a planner that alters a memory answer before recording it: AUDIT_INVALID, observed" {
	hooked altered-memory
	run hooked-altered-memory/sfma run manifest.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	tampered ws
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$stderr" == "AUDIT_INVALID: observed: sfma-mem in message 1 has no trace entry (seq "*" records another line in its place: "* ]] ||
		{ echo "$stderr"; return 1; }
	# what the trace holds is what the planner made of the altered answer
	jq -s -e 'map(select(.kind == "store" and .data.name == "git-long" and .data.latencyMs)) | .[0].data.latencyMs >= 1000' \
		ws/.sfma/trace.jsonl >/dev/null
}

@test "the trace rewritten to agree with a lie and resealed, without the keys, still disagrees with the observer" {
	sfma run manifest.json --apply >/dev/null
	head=$(jq -c '.integrity | {observedEntries, observedHead}' ws/.sfma/result.json)
	# a host actor recomputes the chain and reseals the record with the
	# observer's head as it was: the trace alone verifies, but a wire
	# record no longer is what crossed
	rewrite 'for e in es:
    if e.get("wire") and e["wire"][-1]["stage"] == "sfma-model":
        e["wire"][-1]["sha256"] = "0" * 64
        break'
	jq -e '.integrity | has("observedHead") | not' ws/.sfma/result.json
	jq 'del(.integrity)' ws/.sfma/result.json >body.json
	sfma-seal --observed-fd 3 ws <body.json 3< <(echo "$head") >/dev/null
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$stderr" == "AUDIT_INVALID: observed: sfma-model in message 1 has no trace entry (seq "*" records another line in its place: "* ]] ||
		{ echo "$stderr"; return 1; }
}

@test "the observed chain tampered - a line edited, a line removed, the file deleted or cut - is AUDIT_INVALID" {
	sfma run manifest.json --apply >/dev/null
	sfma-verify ws >/dev/null
	tampered ws
	O=ws/.sfma/observed.jsonl
	cp "$O" kept
	sed -i '3s/"bytes":[0-9]*/"bytes":1/' "$O"
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[ "$stderr" = "AUDIT_INVALID: observed: $O: line 3: hash mismatch (the entry's content was altered)" ]
	cp kept "$O"
	sed -i 3d "$O"
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$stderr" == "AUDIT_INVALID: observed: $O: line 3: prevHash does not match the previous entry"* ]]
	head -n 5 kept >"$O"
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$stderr" == "AUDIT_INVALID: observed: $O has 5 entries, fewer than the "*" the record commits to" ]]
	rm "$O"
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[ "$stderr" = "AUDIT_INVALID: observed: $O: No such file or directory" ]
	# a line edited and the chain recomputed: not the head the record names
	python3 - kept "$O" <<'PY'
import hashlib, json, subprocess, sys
es = [json.loads(l) for l in open(sys.argv[1])]
es[2]["bytes"] += 1
prev = "0" * 64
with open(sys.argv[2], "w") as out:
    for e in es:
        e.pop("hash"); e["prevHash"] = prev
        canon = subprocess.run(["sfma-verify", "--canonicalize"], input=json.dumps(e).encode() + b"\n",
                               capture_output=True, check=True).stdout.rstrip(b"\n")
        e["hash"] = prev = hashlib.sha256(canon).hexdigest()
        out.write(json.dumps(e) + "\n")
PY
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$stderr" == "AUDIT_INVALID: observed: integrity.observedHead does not match the observed chain's entry "* ]]
	cp kept "$O"
	sfma-verify ws
}

@test "the observer's signature: its own key, verified, trusted by key, tampering caught" {
	okey=$(openssl genpkey -algorithm ed25519)
	openssl pkey -pubout <<<"$okey" >observer.pub
	other=$(openssl genpkey -algorithm ed25519 | openssl pkey -pubout)
	SFMA_OBSERVER_PRIVATE_KEY=$okey run sfma run manifest.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	R=ws/.sfma/result.json
	jq -e '.integrity.observerSignature.algorithm == "ed25519"' "$R"
	[ "$(jq -r .integrity.observerSignature.publicKey "$R")" = "$(cat observer.pub)" ]
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == *" observed="[0-9]*" observer=untrusted-key "* ]] || { echo "$output"; return 1; }
	SFMA_OBSERVER_PUBLIC_KEY=$(cat observer.pub) run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == *" observer=trusted "* ]] || { echo "$output"; return 1; }
	SFMA_OBSERVER_PUBLIC_KEY=$other run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[ "$stderr" = "AUDIT_INVALID: observed: observer signature is not by the trusted key (SFMA_OBSERVER_PUBLIC_KEY)" ]
	# the signed text is the canonical {observedEntries, observedHead}: OpenSSL agrees
	jq -j '.integrity | {observedEntries, observedHead} | tojson' "$R" >signed
	jq -r .integrity.observerSignature.value "$R" | base64 -d >sig
	openssl pkeyutl -verify -pubin -inkey observer.pub -rawin -in signed -sigfile sig
	# the signature altered, or the head it signs
	cp "$R" kept.json
	jq '.integrity.observerSignature.value |= (.[0:10] + (if .[10:11] == "A" then "B" else "A" end) + .[11:])' kept.json >"$R"
	tampered ws
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[ "$stderr" = "AUDIT_INVALID: observed: observer signature does not verify" ]
	jq '.integrity.observedEntries -= 1' kept.json >"$R"
	run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[ "$stderr" = "AUDIT_INVALID: observed: observer signature does not verify" ]
	# unsigned, where a trusted observer key is required
	jq 'del(.integrity.observerSignature)' kept.json >"$R"
	SFMA_OBSERVER_PUBLIC_KEY=$(cat observer.pub) run --separate-stderr sfma-verify ws
	[ "$status" -eq 1 ]
	[ "$stderr" = "AUDIT_INVALID: observed: the observer's head is not signed, and SFMA_OBSERVER_PUBLIC_KEY is set" ]
	# a bad key: the run does not start, nothing on disk
	rm -rf ws
	SFMA_OBSERVER_PRIVATE_KEY=not-a-key run --separate-stderr sfma run manifest.json --apply
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sfma-tap: SFMA_OBSERVER_PRIVATE_KEY: "* ]] || { echo "$stderr"; return 1; }
	[ ! -e ws ]
}

# Start `sfma ARGS...` in the background (stdout in out, stderr in err).
start_sfma() {
	timeout -s KILL 60 sfma "$@" >out 2>err &
	sfma_pid=$!
	for _ in $(seq 300); do
		child=$(pgrep -P "$sfma_pid" -x sfma || true)
		[ -n "$child" ] && break
		sleep 0.05
	done
	[ -n "$child" ] || { echo "sfma did not start: $(cat err)" >&2; return 1; }
	sfma_child=$child
}
stage_pid() {
	for p in $(pgrep -P "$sfma_child"); do
		read -r -d '' argv0 <"/proc/$p/cmdline" || true
		[ "$(basename "$argv0")" = "$1" ] && { echo "$p"; return 0; }
	done
	echo "stage $1 not found" >&2
	return 1
}

@test "the planner holds no descriptor of the observed chain or the tap's head, and no stage but the tap the observer key" {
	cat >held.json <<-EOF
	{"name":"held","workspace":"ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],"allowedCommands":["sleep"],
	 "inputs":[],"outputs":["out.txt"],"maxTurns":6,"maxSeconds":60,"dryRunDefault":false}
	EOF
	okey=$(openssl genpkey -algorithm ed25519)
	SFMA_MOCK=$HOLD SFMA_OBSERVER_PRIVATE_KEY=$okey start_sfma run held.json
	for _ in $(seq 200); do
		grep -q '"cmd":"sleep' ws/.sfma/trace.jsonl 2>/dev/null && break
		sleep 0.05
	done
	tap=$(stage_pid sfma-tap)
	plan=$(stage_pid sfma-plan)
	# the tap has the chain open, and its head pipe
	ls -l /proc/"$tap"/fd | grep -q "$BATS_TEST_TMPDIR/ws/.sfma/observed.jsonl"
	head_fd=$(tr '\0' '\n' <"/proc/$tap/cmdline" | sed -n '/^--head-fd$/{n;p}')
	head_pipe=$(readlink "/proc/$tap/fd/$head_fd")
	[[ "$head_pipe" == pipe:* ]]
	for fd in /proc/"$plan"/fd/*; do
		t=$(readlink "$fd")
		[[ "$t" != *observed* ]] || { echo "the planner holds $t" >&2; return 1; }
		[ "$t" != "$head_pipe" ] || { echo "the planner holds the tap's head pipe" >&2; return 1; }
	done
	tr '\0' '\n' <"/proc/$tap/environ" | grep -q '^SFMA_OBSERVER_PRIVATE_KEY='
	for s in sfma-plan sfma-model sfma-exec sfma-chain sfma-seal; do
		if tr '\0' '\n' <"/proc/$(stage_pid "$s")/environ" | grep -Eq 'SFMA_OBSERVER_PRIVATE_KEY|PRIVATE KEY'; then
			echo "$s has the observer's key" >&2
			return 1
		fi
	done
	kill -TERM "$sfma_pid" "$sfma_child" 2>/dev/null || true
	wait "$sfma_pid" || true
	sfma_pid=
	# halted with a command in flight: the record still verifies
	run sfma-verify ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == *" observed="[1-9]*" observer=untrusted-key "* ]] || { echo "$output"; return 1; }
}

@test "a record without an observer's head says observed=none and verifies as before; the earlier runner's print their line" {
	sfma run manifest.json --apply >/dev/null
	rewrite 'pass'
	jq -e '.integrity | has("observedHead") | not' ws/.sfma/result.json
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^"AUDIT_OK signature=none entries="[0-9]+" head="[0-9a-f]{64}" observed=none root=" ]] || { echo "$output"; return 1; }
	run sfma-verify "$INTEROP/unsigned/ws"
	[ "$output" = "AUDIT_OK signature=none entries=16 head=3a88a81fb91a4abdddc7e7ff1fce6b5cdaeaee5849647701d7e18359ad4b4d72" ]
}

@test "an observed chain with a torn final line (a crash while appending) is cut back and said so" {
	sfma run manifest.json --apply >/dev/null
	printf '{"kind":"line","sta' >>ws/.sfma/observed.jsonl
	sfma run manifest.json --apply >/dev/null
	[ "$(jq -s -c '[.[] | select(.kind == "open") | .tornBytes]' ws/.sfma/observed.jsonl)" = '[null,19]' ]
	sfma-verify ws
}

@test "hostile bytes through the tap - a 20 MiB line, invalid UTF-8, NUL, CR, a torn tail - pass unchanged and are recorded" {
	mkdir -p ws/.sfma
	python3 - "$SFMA_BINDIR/sfma-tap" <<'PY'
import hashlib, json, os, subprocess, sys, threading
tap = sys.argv[1]
out_lines = [b"x" * (20 << 20), b"\xff\xfe\xc0\x80 not UTF-8", b"nul\x00inside", b"cr\r", b""]
in_lines = [b"\xed\xa0\x80 a lone surrogate", b"y" * (17 << 20), b"{\"ok\":true}"]
data_out = b"".join(l + b"\n" for l in out_lines) + b"torn out"
data_in = b"".join(l + b"\n" for l in in_lines) + b"torn in"
fp, ts, st, tp, hd = os.pipe(), os.pipe(), os.pipe(), os.pipe(), os.pipe()
ends = (fp[0], ts[1], st[0], tp[1], hd[1])
p = subprocess.Popen([tap, "--head-fd", str(hd[1]), "ws", "sfma-model:%d:%d:%d:%d" % ends[:4]], pass_fds=ends)
for fd in ends:
    os.close(fd)
got = {}
def drain(name, fd):
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            break
        chunks.append(b)
    got[name] = b"".join(chunks)
a = threading.Thread(target=drain, args=("out", ts[0]))
b = threading.Thread(target=drain, args=("in", tp[0]))
a.start(); b.start()
with os.fdopen(st[1], "wb") as w:
    w.write(data_in)
b.join()            # the planner reads all the stage said, then ends its side
with os.fdopen(fp[1], "wb") as w:
    w.write(data_out)
a.join()
head = os.read(hd[0], 4096)
assert p.wait() == 0
assert got["out"] == data_out, "planner to stage altered"
assert got["in"] == data_in, "stage to planner altered"
es = [json.loads(l) for l in open("ws/.sfma/observed.jsonl")]
lines = [e for e in es if e["kind"] == "line"]
def want(dir, ls, tail):
    r = [(dir, i + 1, hashlib.sha256(l).hexdigest(), len(l), False) for i, l in enumerate(ls)]
    return r + [(dir, len(ls) + 1, hashlib.sha256(tail).hexdigest(), len(tail), True)]
have = [(e["dir"], e["n"], e["sha256"], e["bytes"], e.get("torn", False)) for e in lines]
assert sorted(have) == sorted(want("out", out_lines, b"torn out") + want("in", in_lines, b"torn in")), have
h = json.loads(head)
assert h == {"observedEntries": len(es), "observedHead": es[-1]["hash"]}, h
assert es[0]["kind"] == "open" and es[-1]["kind"] == "close"
assert es[-1]["lines"] == {"sfma-model": {"out": 6, "in": 4}}, es[-1]["lines"]
PY
}

@test "an observer that cannot write its chain mid-run stops it, in its own name, and nothing is sealed" {
	# the chain on a file system of 4 KiB, bound over it in a mount
	# namespace of this test's own: the tap's writes meet ENOSPC a few
	# turns in
	mkdir -p ws/.sfma tiny
	: >ws/.sfma/observed.jsonl
	run --separate-stderr unshare -m sh -c 'mount -t tmpfs -o size=4k tmpfs tiny && : >tiny/obs &&
		mount --bind tiny/obs ws/.sfma/observed.jsonl && exec sfma run manifest.json --apply'
	[ "$status" -eq 1 ] || { echo "$output $stderr"; return 1; }
	grep -Fqx "sfma-tap: $PWD/ws/.sfma/observed.jsonl: write: No space left on device" <<<"$stderr"
	# the planner names the observer, not the stage whose pipe it was on
	grep -Eqx "sfma-plan: failed: sfma-tap: $PWD/ws/.sfma/observed.jsonl: write: No space left on device \(on the pipes of sfma-(model|exec|mem)\)" \
		<<<"$stderr" || { echo "$stderr"; return 1; }
	[[ "$stderr" != *"sfma-exec: sfma-tap"* && "$stderr" != *"sfma-model: sfma-tap"* ]]
	# a run the observer did not see whole is not sealed
	[[ "$stderr" == *"sfma-seal: the observer (sfma-tap) stopped before the run's end"* ]]
	[ ! -e ws/.sfma/result.json ]
	run sfma-verify ws
	[ "$status" -eq 3 ] && [[ "$output" == AUDIT_UNSEALED:* ]] || { echo "$output"; return 1; }
	# with room again the next run records the interrupted one and is
	# observed whole
	sfma run manifest.json --apply >/dev/null
	run sfma-verify ws
	[ "$status" -eq 0 ] && [[ "$output" == *" observed="[1-9]* ]] || { echo "$output"; return 1; }
}

@test "sfma-tap refuses a stage given wrong, and the observed chain when it is not one" {
	run --separate-stderr sfma-tap ws sfma-model:3:4:5
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sfma-tap: sfma-model:3:4:5: expected NAME:FROM_PLANNER:TO_STAGE:FROM_STAGE:TO_PLANNER" ]
	run --separate-stderr sfma-tap ws Model:0:1:0:1
	[ "$status" -eq 2 ]
	run --separate-stderr sfma-tap ws sfma-model:7:8:9:10
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"not an open descriptor"* ]]
	# a chain that does not verify: the tap stops before passing the line on
	mkdir -p ws/.sfma
	echo '{"hash":"00","prevHash":"00"}' >ws/.sfma/observed.jsonl
	run --separate-stderr bash -c 'exec 3< <(echo "{}") 4>got 5</dev/null 6>/dev/null; sfma-tap ws sfma-model:3:4:5:6'
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sfma-tap: ws/.sfma/observed.jsonl: failed hash-chain verification: "* ]] || { echo "$stderr"; return 1; }
	[ ! -s got ]
}

@test "a command that acts reaches sfma-exec only once the records before it are durable; a read goes at once" {
	require strace
	cat >acts.json <<-EOF
	{"name":"acts","workspace":"ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],"allowedCommands":["echo"],
	 "inputs":[],"outputs":["b.txt"],"maxTurns":12,"maxSeconds":60,"dryRunDefault":false}
	EOF
	mkdir ws && echo data >ws/a.txt
	# every program of the run traced (strace holds no pipe of theirs):
	# the tap's writes and syncs are told apart by its pid
	SFMA_MOCK="[$CANDIDATE,{\"tool\":\"read\",\"path\":\"a.txt\"},{\"tool\":\"write\",\"path\":\"b.txt\",\"content\":\"x\"},
		{\"tool\":\"read\",\"path\":\"b.txt\"},{\"tool\":\"run\",\"cmd\":\"echo hi\"},{\"tool\":\"read\",\"path\":\"a.txt\"},
		{\"tool\":\"done\",\"summary\":\"ok\"}]" \
		run strace -ff -o trace -e trace=execve,openat,write,fdatasync -s 64 sfma run acts.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	sfma-verify ws
	python3 - trace.* <<'PY'
import re, sys
# the tap's own trace (strace -ff: one file a process), the chain's
# descriptor, and its descriptor to sfma-exec (TO_STAGE of its argument)
for name in sys.argv[1:]:
    mine = open(name).read().splitlines()
    if mine and re.search(r'execve\("[^"]*/sfma-tap"', mine[0]):
        break
else:
    sys.exit("no trace of sfma-tap")
xfd = re.search(r'"sfma-exec:\d+:(\d+):', mine[0]).group(1)
ofd = next(re.search(r"= (\d+)$", l).group(1) for l in mine if l.startswith("openat(") and "observed.jsonl" in l)
synced, seen = True, []
for l in mine:
    if l.startswith("write(%s, " % ofd):
        synced = False
    elif l.startswith("fdatasync(%s)" % ofd):
        synced = True
    elif l.startswith("write(%s, " % xfd):
        tool = re.search(r'\\"tool\\":\\"(\w+)', l)
        seen.append((tool.group(1) if tool else "?", synced))
want = [("read", False), ("write", True), ("read", False), ("run", True), ("read", False)]
assert seen == want, seen
PY
}
