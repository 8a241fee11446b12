#!/usr/bin/env bats
# sfma-exec: the request/reply interface and the hard tier (sfma-exec(1),
# the hard tier section). Every refusal phrase has a test; the happy path sits beside.
# Sandbox behaviour proper is in exec-sandbox.bats.

load helpers
bats_require_minimum_version 1.5.0

setup() {
	require jq
	W=$BATS_TEST_TMPDIR
	mkdir -p "$W/ws/src" "$W/host"
	printf 'hello\n' >"$W/ws/src/a.txt"
	printf 'host secret\n' >"$W/host/secret.txt"
	export TMPDIR=$W/stage
	mkdir -p "$TMPDIR"
	manifest '["echo","git","true","ls"]' '["src"]' '["out/r.txt","top.txt","deep/a/b/c.txt","ln/x.txt","via/x.txt"]'
}

manifest() { # manifest ALLOWED INPUTS OUTPUTS
	cat >"$W/m.json" <<JSON
{"name":"t","workspace":"$W/ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],
 "allowedCommands":$1,"inputs":$2,"outputs":$3,"maxTurns":5,"dryRunDefault":true}
JSON
}

# calls [--apply] CALL...: one request per CALL (a JSON object), id = its
# position; replies land in $W/out, one per line.
calls() {
	local flags=()
	while [[ ${1:-} == --* ]]; do flags+=("$1"); shift; done
	local i=0
	for c in "$@"; do
		i=$((i + 1))
		printf '{"id":%d,"call":%s}\n' "$i" "$c"
	done | sfma-exec "${flags[@]}" "$W/m.json" >"$W/out"
}

reply() { sed -n "${1}p" "$W/out"; }
field() { reply "$1" | jq -r "$2"; }

refused_with() { # refused_with N PHRASE: a refusal whose reason contains PHRASE
	reply "$1" | jq -e --arg p "$2" '.pass == false and (.reason | contains($p))
		and .result == "EPSILON_HARD_FAIL: " + .reason' >/dev/null ||
		{ echo "reply $1 is not a refusal with '$2':"; reply "$1"; return 1; }
}

all_refused() { # all_refused N PHRASE: N replies, every one is such a refusal (one jq for all)
	jq -se --arg p "$2" --arg n "$1" 'length == ($n | tonumber) and all(.pass == false
		and (.reason | contains($p)) and .result == "EPSILON_HARD_FAIL: " + .reason)' \
		"$W/out" >/dev/null || { echo "not all $1 replies refused with '$2':"; cat "$W/out"; return 1; }
}

# ---- invocation ----

@test "an invalid manifest prints TASK_INVALID with reasons and exits 2" {
	echo '{"name":"t","modelAdapter":"x"}' >"$W/bad.json"
	run sfma-exec "$W/bad.json" </dev/null
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = TASK_INVALID ]
	[[ "$output" == *"- "*"modelAdapter was replaced by modelEndpoints"* ]]
}

@test "usage errors go to stderr with exit 2, named by the program, not its path" {
	run --separate-stderr "$SFMA_BINDIR/sfma-exec" </dev/null
	[ "$status" -eq 2 ] && [ -z "$output" ]
	[[ "$stderr" == "sfma-exec: missing MANIFEST"$'\n'"usage: sfma-exec "* ]] || { echo "$stderr"; return 1; }
	run --separate-stderr "$SFMA_BINDIR/sfma-exec" --timeout=0 "$W/m.json" </dev/null
	[ "$status" -eq 2 ] && [ -z "$output" ]
	[[ "$stderr" == "sfma-exec: --timeout: expected whole seconds 1..86400"$'\n'* ]]
	run --separate-stderr sfma-exec --timeout 86401 "$W/m.json" </dev/null
	[ "$status" -eq 2 ]
	run --separate-stderr sfma-exec --timeout "$W/m.json" </dev/null
	[ "$status" -eq 2 ] && [[ "$stderr" == *"--timeout: expected whole seconds"* ]]
	run --separate-stderr sfma-exec --bogus "$W/m.json" </dev/null
	[ "$status" -eq 2 ] && [[ "$stderr" == "sfma-exec: unknown option --bogus"$'\n'* ]]
	run --separate-stderr sfma-exec -x "$W/m.json" </dev/null
	[ "$status" -eq 2 ] && [[ "$stderr" == "sfma-exec: unknown option -x"$'\n'* ]]
	run --separate-stderr sfma-exec "$W/m.json" extra </dev/null
	[ "$status" -eq 2 ] && [[ "$stderr" == "sfma-exec: unexpected argument: extra"$'\n'* ]]
}

@test "--version and --help answer on stdout with exit 0" {
	run --separate-stderr sfma-exec --version
	[ "$status" -eq 0 ] && [ -z "$stderr" ]
	[[ "$output" =~ ^sfma-exec\ [0-9]+\.[0-9]+\.[0-9]+ ]] || { echo "$output"; return 1; }
	for h in -h --help; do
		run --separate-stderr sfma-exec "$h"
		[ "$status" -eq 0 ] && [ -z "$stderr" ]
		[[ "$output" == "usage: sfma-exec [--apply] [--timeout SECONDS] MANIFEST"* ]] || { echo "$output"; return 1; }
	done
}

@test "--timeout takes its value as the next word or after =" {
	manifest '["sleep"]' '[]' '[]'
	printf '%s\n' '{"id":1,"call":{"tool":"run","cmd":"sleep 30"}}' >"$W/req"
	sfma-exec --apply --timeout 1 "$W/m.json" <"$W/req" >"$W/out"
	[ "$(field 1 .run.limits.timeoutMs)" = 1000 ] && [ "$(field 1 .run.exit)" = 124 ]
	sfma-exec --apply --timeout=1 "$W/m.json" <"$W/req" >"$W/out"
	[ "$(field 1 .run.limits.timeoutMs)" = 1000 ] && [ "$(field 1 .run.exit)" = 124 ]
}

@test "a reader gone (EPIPE on the replies) ends the stage quietly" {
	require python3
	cat >"$W/epipe.py" <<'PY'
import subprocess, sys
p = subprocess.Popen([sys.argv[1], sys.argv[2]], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
p.stdout.close()  # the reader is gone before the first reply
p.stdin.write(b'{"id":1,"call":{"tool":"read","path":"src/a.txt"}}\n' * 64)
p.stdin.close()
err = p.stderr.read()
print(p.wait(), repr(err.decode()))
PY
	[ "$(python3 "$W/epipe.py" "$SFMA_BINDIR/sfma-exec" "$W/m.json")" = "0 ''" ]
}

# ---- protocol ----

@test "malformed lines get an error reply and the next line is still served" {
	{
		echo 'not json'
		echo '[1,2]'
		echo '{"id":7}'
		echo '{"id":8,"call":"read"}'
		printf '{"id":9,"call":{"tool":"read","path":"src/\xff"}}\n'
		python3 -c 'print("[" * 100000 + "]" * 100000)'
		echo '{"id":10,"call":{"tool":"read","path":"src/a.txt"}}'
	} | sfma-exec "$W/m.json" >"$W/out"
	[ "$(wc -l <"$W/out")" -eq 7 ]
	for n in 1 2 3 4 5 6; do
		[ "$(field $n .pass)" = false ]
		[ -n "$(field $n .error)" ]
		[ "$(field $n '.error | test("\n")')" = false ]
	done
	[ "$(field 1 .id)" = null ]
	[ "$(field 3 .id)" = 7 ]
	[ "$(field 7 .id)" = 10 ]
	[ "$(field 7 .result)" = hello ]
}

@test "an over-long line is answered with an error and skipped" {
	{
		printf '{"id":1,"call":{"tool":"write","path":"top.txt","content":"'
		head -c $((17 * 1024 * 1024)) /dev/zero | tr '\0' a
		printf '"}}\n'
		echo '{"id":2,"call":{"tool":"read","path":"src/a.txt"}}'
	} | sfma-exec "$W/m.json" >"$W/out"
	[ "$(wc -l <"$W/out")" -eq 2 ]
	[[ "$(field 1 .error)" == *"longer than"* ]]
	[ "$(field 2 .id)" = 2 ]
	[ "$(field 2 .pass)" = true ]
}

@test "ids are echoed verbatim, any JSON" {
	printf '%s\n' '{"id":{"turn":3,"k":["a"]},"call":{"tool":"read","path":"src/a.txt"}}' |
		sfma-exec "$W/m.json" >"$W/out"
	[ "$(reply 1 | jq -c .id)" = '{"k":["a"],"turn":3}' ]
	[ "$(field 1 .tool)" = read ]
}

@test "unknown tool, missing tool, done and recall are refused" {
	calls '{"tool":"frobnicate"}' '{"path":"x"}' '{"tool":"done","summary":"s"}' '{"tool":"recall","mode":"episodic"}'
	refused_with 1 "unknown tool"
	[ "$(field 1 .tool)" = frobnicate ]
	refused_with 2 "unknown tool"
	[ "$(field 2 .tool)" = null ]
	refused_with 3 "done is handled by the planner"
	refused_with 4 "recall is not available"
}

# ---- read ----

@test "read returns the file content" {
	calls '{"tool":"read","path":"src/a.txt"}' '{"tool":"read","path":"./src//a.txt"}'
	[ "$(field 1 .pass)" = true ]
	[ "$(field 1 .result)" = hello ]
	[ "$(field 2 .result)" = hello ]
}

@test "read clips at 8 KiB with a marker and shows invalid UTF-8 as U+FFFD" {
	head -c 20000 /dev/zero | tr '\0' x >"$W/ws/src/big.txt"
	printf 'ok\xff\xfe!' >"$W/ws/src/bin.txt"
	calls '{"tool":"read","path":"src/big.txt"}' '{"tool":"read","path":"src/bin.txt"}'
	local r
	r=$(field 1 .result)
	[[ "$r" == *"[clipped: 11808 bytes not shown]" ]]
	[ "${#r}" -lt 8300 ]
	[ "$(field 2 .result)" = $'ok\uFFFD\uFFFD!' ]
}

@test "read refuses .. and absolute paths: outside workspace" {
	calls '{"tool":"read","path":"../host/secret.txt"}' '{"tool":"read","path":"/etc/passwd"}' \
		'{"tool":"read","path":"src/../../host/secret.txt"}'
	refused_with 1 "read ../host/secret.txt: outside workspace"
	refused_with 2 "read /etc/passwd: outside workspace"
	refused_with 3 "outside workspace"
}

@test "read refuses a symlink leading out: escapes workspace via link" {
	ln -s "$W/host/secret.txt" "$W/ws/abs"
	ln -s ../host/secret.txt "$W/ws/rel"
	ln -s "$W/host" "$W/ws/hostdir"
	ln -s /proc/self/root/etc/passwd "$W/ws/magic"
	calls '{"tool":"read","path":"abs"}' '{"tool":"read","path":"rel"}' \
		'{"tool":"read","path":"hostdir/secret.txt"}' '{"tool":"read","path":"magic"}'
	for n in 1 2 3 4; do refused_with $n "escapes workspace via link"; done
	! grep -q "host secret" "$W/out"
}

@test "read follows a symlink that stays inside the workspace" {
	ln -s src/a.txt "$W/ws/inner"
	calls '{"tool":"read","path":"inner"}'
	[ "$(field 1 .result)" = hello ]
}

@test "read of a FIFO is refused without hanging; a missing file is an error, not a refusal" {
	mkfifo "$W/ws/src/fifo"
	timeout 10 bash -c "printf '%s\n' '{\"id\":1,\"call\":{\"tool\":\"read\",\"path\":\"src/fifo\"}}' \
		'{\"id\":2,\"call\":{\"tool\":\"read\",\"path\":\"nope.txt\"}}' | sfma-exec '$W/m.json' >'$W/out'"
	refused_with 1 "not a regular file"
	[ "$(field 2 .pass)" = true ]
	[[ "$(field 2 .error)" == *"No such file"* ]]
}

@test "read refuses .sfma by its name, before looking at the host, and through a link" {
	mkdir -p "$W/ws/.sfma/mem" "$W/ws/d"
	printf 'the trace\n' >"$W/ws/.sfma/trace.jsonl"
	ln -s .sfma/trace.jsonl "$W/ws/lnk"
	ln -s ../.sfma "$W/ws/d/up"
	calls '{"tool":"read","path":".sfma/trace.jsonl"}' '{"tool":"read","path":"./.sfma"}' \
		'{"tool":"read","path":"src/../.sfma/trace.jsonl"}' '{"tool":"read","path":".sfma//no-such"}' \
		'{"tool":"read","path":"lnk"}' '{"tool":"read","path":"d/up/trace.jsonl"}' \
		'{"tool":"read","path":".sfmax"}'
	refused_with 1 "read .sfma/trace.jsonl: .sfma is reserved"
	refused_with 2 ".sfma is reserved"
	refused_with 3 "outside workspace"
	refused_with 4 ".sfma is reserved"
	# Decided on the name: no host fact is looked at, not even whether it exists.
	[ "$(field 1 .paths)" = null ] && [ "$(field 4 .paths)" = null ]
	refused_with 5 "read lnk: leads into .sfma via link: .sfma is reserved"
	refused_with 6 ".sfma is reserved"
	# the link refusals rest on the path facts, which the reply records
	[ "$(field 5 '.paths | length')" -gt 0 ]
	# a name that only begins like it is an ordinary path
	[ "$(field 7 .pass)" = true ] && [[ "$(field 7 .error)" == *"No such file"* ]]
	grep -q "the trace" "$W/out" && return 1
	# nor does a write into .sfma by name look at what is there
	calls '{"tool":"write","path":".sfma/trace.jsonl","content":"x"}'
	refused_with 1 "write .sfma/trace.jsonl: reserved"
	[ "$(field 1 .paths)" = null ]
}

@test "a NUL byte in a path is refused, not truncated" {
	calls '{"tool":"read","path":"src/a.txt\u0000junk"}'
	refused_with 1 "NUL"
}

# ---- write ----

@test "an applied write lands with its sha256, replacing the file by rename" {
	mkdir -p "$W/ws/out"
	printf 'old\n' >"$W/ws/out/r.txt"
	# a second name for the old file: a write in place would change it too
	ln "$W/ws/out/r.txt" "$W/old-r.txt"
	local before
	before=$(stat -c %i "$W/ws/out/r.txt")
	calls --apply '{"tool":"write","path":"out/r.txt","content":"data\n"}' \
		'{"tool":"write","path":"deep/a/b/c.txt","content":"x"}'
	[ "$(field 1 .pass)" = true ]
	[ "$(cat "$W/ws/out/r.txt")" = data ]
	# a new inode took the name in one step and the old one is intact: a
	# reader of out/r.txt has the old file or the new one, never a mix
	[ "$(stat -c %i "$W/ws/out/r.txt")" != "$before" ]
	[ "$(cat "$W/old-r.txt")" = old ]
	[ "$(field 1 .mutation.sha256)" = "$(printf 'data\n' | sha256sum | cut -d' ' -f1)" ]
	[ "$(field 1 .mutation.bytes)" = 5 ]
	[ "$(field 1 .mutation.applied)" = true ]
	[ "$(field 1 .mutation.path)" = out/r.txt ]
	[ "$(cat "$W/ws/deep/a/b/c.txt")" = x ]
	# no temporary file left beside the output
	[ "$(ls -A "$W/ws/out")" = r.txt ]
}

@test "a dry-run write passes the same gate, is recorded and not applied" {
	calls '{"tool":"write","path":"out/r.txt","content":"data"}' '{"tool":"write","path":"src/a.txt","content":"x"}'
	[ "$(field 1 .pass)" = true ]
	[ "$(field 1 .mutation.applied)" = false ]
	[[ "$(field 1 .result)" == *"recorded, not applied"* ]]
	[ ! -e "$W/ws/out" ]
	refused_with 2 "not a declared output"
}

@test "write refuses undeclared outputs, .sfma, .. and absolute paths" {
	calls --apply '{"tool":"write","path":"src/a.txt","content":"x"}' \
		'{"tool":"write","path":".sfma/trace.jsonl","content":"x"}' \
		'{"tool":"write","path":"./.sfma/HALT","content":"x"}' \
		'{"tool":"write","path":"../x","content":"x"}' \
		'{"tool":"write","path":"/tmp/x","content":"x"}' \
		'{"tool":"write","path":"out/r.txt"}'
	refused_with 1 "write src/a.txt: not a declared output"
	refused_with 2 "write .sfma/trace.jsonl: reserved"
	refused_with 3 "reserved"
	refused_with 4 "write ../x: outside workspace"
	refused_with 5 "outside workspace"
	refused_with 6 "content must be a string"
	[ "$(cat "$W/ws/src/a.txt")" = hello ]
	[ ! -e "$W/x" ] && [ ! -e "$W/ws/.sfma/HALT" ]
}

@test "write through a directory link: out of the workspace, into .sfma, or elsewhere inside" {
	mkdir -p "$W/ws/.sfma" "$W/ws/elsewhere"
	ln -s "$W/host" "$W/ws/ln"
	ln -s .sfma "$W/ws/via"
	calls --apply '{"tool":"write","path":"ln/x.txt","content":"x"}' \
		'{"tool":"write","path":"via/x.txt","content":"x"}'
	refused_with 1 "write ln/x.txt: escapes workspace via link"
	refused_with 2 "write via/x.txt: reserved"
	[ ! -e "$W/host/x.txt" ] && [ ! -e "$W/ws/.sfma/x.txt" ]
	rm "$W/ws/via" && ln -s elsewhere "$W/ws/via"
	calls --apply '{"tool":"write","path":"via/x.txt","content":"x"}'
	refused_with 1 "not a declared output"
	[ ! -e "$W/ws/elsewhere/x.txt" ]
	# dry run: identical gating
	calls '{"tool":"write","path":"ln/x.txt","content":"x"}'
	refused_with 1 "escapes workspace via link"
}

@test "a write replaces a symlinked output instead of following it" {
	ln -s "$W/host/secret.txt" "$W/ws/top.txt"
	calls --apply '{"tool":"write","path":"top.txt","content":"new"}'
	[ "$(field 1 .pass)" = true ]
	[ ! -L "$W/ws/top.txt" ]
	[ "$(cat "$W/ws/top.txt")" = new ]
	[ "$(cat "$W/host/secret.txt")" = "host secret" ]
}

# ---- commands ----

@test "every shell metacharacter is refused" {
	local cs=()
	for ch in ';' '&' '|' '<' '>' '`' '$' '(' ')' '{' '}' '\\' '\n'; do
		cs+=("{\"tool\":\"run\",\"cmd\":\"echo a${ch}b\"}")
	done
	calls --apply "${cs[@]}"
	all_refused 13 "shell metacharacters are not allowed"
}

@test "empty and blank commands are refused" {
	calls '{"tool":"run","cmd":""}' '{"tool":"run","cmd":"  \t "}' '{"tool":"run"}'
	refused_with 1 "empty command"
	refused_with 2 "empty command"
	refused_with 3 "cmd must be a string"
}

@test "an executable not in allowedCommands is refused, by basename" {
	calls --apply '{"tool":"run","cmd":"rm -rf src"}' '{"tool":"run","cmd":"/usr/bin/cat src/a.txt"}' \
		'{"tool":"run","cmd":"bin/ "}'
	refused_with 1 "run: rm: not in allowedCommands"
	refused_with 2 "cat: not in allowedCommands"
	refused_with 3 "not in allowedCommands"
	[ -e "$W/ws/src/a.txt" ]
}

@test "a model-given directory is discarded and arguments split on whitespace" {
	calls --apply '{"tool":"run","cmd":"/tmp/evil/echo   one \t two"}' '{"tool":"run","cmd":"./echo three"}'
	[ "$(field 1 .pass)" = true ]
	[ "$(field 1 .result)" = $'exit=0\nstdout:one two\n\nstderr:' ]
	[ "$(field 2 .result)" = $'exit=0\nstdout:three\n\nstderr:' ]
}

@test "a dry-run command passes the gate and is not executed" {
	manifest '["mkdir"]' '[]' '["made"]'
	calls '{"tool":"run","cmd":"mkdir made"}' '{"tool":"run","cmd":"rm made"}'
	[ "$(field 1 .pass)" = true ]
	[[ "$(field 1 .result)" == *"not executed"* ]]
	[ "$(field 1 .run.executed)" = false ]
	[ ! -e "$W/ws/made" ]
	refused_with 2 "not in allowedCommands"
}

@test "git: a subcommand is required" {
	calls '{"tool":"run","cmd":"git"}' '{"tool":"run","cmd":"git   "}'
	refused_with 1 "git requires a subcommand"
	refused_with 2 "git requires a subcommand"
}

@test "git: every flag before the subcommand is refused" {
	local cs=()
	for f in '-c a=b' '-C /' --exec-path --git-dir=x --work-tree=y --config-env=a=b -p --bare; do
		cs+=("{\"tool\":\"run\",\"cmd\":\"git $f log\"}")
	done
	calls --apply "${cs[@]}"
	all_refused ${#cs[@]} "global flags are not permitted"
}

@test "git: subcommands off the list are refused, one by one" {
	local subs=(push fetch pull clone config remote submodule ls-remote archive daemon
		upload-pack receive-pack credential difftool mergetool filter-branch bisect
		send-email instaweb worktree checkout reset rebase am apply help var hook)
	local cs=()
	for s in "${subs[@]}"; do cs+=("{\"tool\":\"run\",\"cmd\":\"git $s x\"}"); done
	calls --apply "${cs[@]}"
	all_refused ${#subs[@]} "subcommand not permitted"
}

@test "git: denied arguments after the subcommand, bare, with =value, abbreviated, -O" {
	local args=(--upload-pack --upload-pack=x --receive-pack --receive-pack=x
		--open-files-in-pager --open-files-in-pager=vi --exec-path --exec-path=/tmp
		--git-dir --git-dir=/x --work-tree --work-tree=/ --upload-p=x --open -O -Ovi -Oless)
	local cs=()
	for a in "${args[@]}"; do cs+=("{\"tool\":\"run\",\"cmd\":\"git grep $a x\"}"); done
	cs+=('{"tool":"run","cmd":"git grep -nOvi x"}' '{"tool":"run","cmd":"git log -Oorder"}')
	calls --apply "${cs[@]}"
	all_refused $((${#args[@]} + 2)) "argument not permitted"
}

@test "git: every permitted subcommand passes the gate" {
	local cs=()
	for s in init add commit cat-file rev-parse rev-list log grep show notes gc; do
		cs+=("{\"tool\":\"run\",\"cmd\":\"git $s\"}")
	done
	cs+=('{"tool":"run","cmd":"git grep -n -e Onion"}' '{"tool":"run","cmd":"git log --oneline -n 3"}')
	calls "${cs[@]}"
	jq -se --arg n ${#cs[@]} 'length == ($n | tonumber) and all(.pass)' "$W/out" >/dev/null ||
		{ cat "$W/out"; return 1; }
}

@test "git runs for real inside the sandbox on the staging copy" {
	calls --apply '{"tool":"run","cmd":"git init -q"}' '{"tool":"run","cmd":"git rev-parse --is-inside-work-tree"}'
	[ "$(field 1 .pass)" = true ]
	[ "$(field 1 .run.exit)" = 0 ] || { reply 1; return 1; }
	# the repository lived in the discarded staging copy only
	[ ! -e "$W/ws/.git" ]
	[ "$(field 2 .run.exit)" != 0 ]
}

# ---- mailbox ----

@test "notify and ask write the outbox atomically, also in a dry run" {
	printf '%s\n' '{"id":1,"seq":41,"call":{"tool":"notify","text":"half way"}}' \
		'{"id":2,"seq":42,"call":{"tool":"ask","question":"which branch?\nmain?"}}' \
		'{"id":3,"call":{"tool":"notify","text":"no seq"}}' \
		'{"id":4,"seq":43,"call":{"tool":"ask"}}' | sfma-exec "$W/m.json" >"$W/out"
	local f=$W/ws/.sfma/outbox/0000000000000041-notify.json
	[ "$(jq -r .kind "$f")" = notify ]
	[ "$(jq -r .text "$f")" = "half way" ]
	[[ "$(jq -r .at "$f")" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$ ]]
	[ "$(jq -r .text "$W/ws/.sfma/outbox/0000000000000042-ask.json")" = $'which branch?\nmain?' ]
	[ "$(reply 1 | jq -c .message)" = '{"dir":"out","file":"0000000000000041-notify.json","kind":"notify","text":"half way"}' ]
	[ "$(field 2 .message.kind)" = ask ]
	[ "$(field 3 .pass)" = true ]
	[ -e "$W/ws/.sfma/outbox/$(field 3 .message.file)" ]
	refused_with 4 "question must be a string"
	[ "$(ls -A "$W/ws/.sfma/outbox" | wc -l)" -eq 3 ]
}

@test "outbox names sort in the order they were written (ls order is seq order)" {
	printf '%s\n' '{"id":1,"seq":9,"call":{"tool":"ask","question":"first"}}' \
		'{"id":2,"seq":13,"call":{"tool":"notify","text":"second"}}' \
		'{"id":3,"seq":120,"call":{"tool":"notify","text":"third"}}' | sfma-exec "$W/m.json" >"$W/out"
	run sh -c "cd '$W/ws/.sfma/outbox' && ls | xargs -n1 jq -r '.text // .question' | tr '\n' ' '"
	[ "$output" = "first second third " ]
}

@test "the outbox is never reached through a link" {
	ln -s "$W/host" "$W/ws/.sfma"
	printf '%s\n' '{"id":1,"seq":1,"call":{"tool":"notify","text":"x"}}' | sfma-exec "$W/m.json" >"$W/out"
	[ -n "$(field 1 .error)" ]
	[ ! -e "$W/host/outbox" ]
}

# ---- resources ----

@test "a session leaks nothing (valgrind; LeakSanitizer in the sanitizer build)" {
	ln -s "$W/host/secret.txt" "$W/ws/abs"
	ln -s src "$W/ws/srclink"
	ln -s ../host/secret.txt "$W/ws/rel"
	printf '%s\n' '{"id":1,"call":{"tool":"read","path":"src/a.txt"}}' \
		'{"id":2,"call":{"tool":"read","path":"abs"}}' \
		'{"id":3,"call":{"tool":"read","path":"srclink/a.txt"}}' \
		'{"id":4,"call":{"tool":"write","path":"deep/a/b/c.txt","content":"x"}}' \
		'{"id":5,"call":{"tool":"run","cmd":"git push"}}' \
		'{"id":6,"seq":3,"call":{"tool":"notify","text":"n"}}' \
		'not json' '{"id":8,"call":{"tool":"nope"}}' \
		'{"id":9,"call":{"tool":"read","path":"rel"}}' >"$W/req"
	if [ -n "${SFMA_SANITIZED:-}" ]; then
		# LeakSanitizer runs at exit and turns a leak into exit status 99.
		run sfma-exec --apply "$W/m.json" <"$W/req"
	else
		require valgrind
		# valgrind knows no openat2: this also drives the fallback resolver.
		run valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect,possible \
			--error-exitcode=9 sfma-exec --apply "$W/m.json" <"$W/req"
	fi
	[ "$status" -eq 0 ]
	[ "$(grep -c '"id":' <<<"$output")" -eq 9 ]
	grep -q '"id":2,"pass":false,.*"reason":"read abs: escapes workspace via link"' <<<"$output"
	grep -q '"id":3,"pass":true,.*"reason":"read 6 bytes","result":"hello\\n"' <<<"$output"
	grep -q '"id":9,"pass":false,.*"reason":"read rel: escapes workspace via link"' <<<"$output"
	grep -q '"id":4,.*"pass":true' <<<"$output"
	[ "$(cat "$W/ws/deep/a/b/c.txt")" = x ]
}

# ---- the openat2 fallback ----

# Kernels before 5.6 (and valgrind) have no openat2: open_beneath_walk
# resolves by hand instead. A small program holds its answers against the
# kernel's own, case by case: absolute and empty paths, "..", links out and
# in, trailing slashes, "file/.", loops.
@test "the openat2 fallback refuses exactly as openat2 RESOLVE_BENEATH does" {
	build_driver "$W/beneath" "$REPO/tests/fixtures/exec/beneath.c"
	local d=$W/ws
	mkdir -p "$d/d/e"
	echo x >"$d/f"
	ln -s f "$d/lf"; ln -s d "$d/ld"; ln -s d/ "$d/lds"; ln -s /etc "$d/abs"
	ln -s ../.. "$d/d/up"; ln -s loop "$d/loop"; ln -s ../f "$d/d/back"
	run "$W/beneath" "$d" '' / /etc f f/ f/. f/.. f// f//x lf lf/ lf/. ld ld/ ld/. lds lds/ \
		lds/e d/e/ d/.. d/../ .. ../ws d/../.. abs abs/x d/up d/up/x d/back d/back/ loop \
		. ./ d//e nope nope/ d/e/../../f ld/../f ./../ws/f
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	# the cases that matter, by name
	grep -qx "'': kernel=ENOENT walk=ENOENT" <<<"$output"
	grep -qx "'/etc': kernel=EXDEV walk=EXDEV" <<<"$output"
	grep -qx "'f/.': kernel=ENOTDIR walk=ENOTDIR" <<<"$output"
	grep -qx "'abs/x': kernel=EXDEV walk=EXDEV" <<<"$output"
}

# openat2(2): with RESOLVE_BENEATH the kernel answers EAGAIN for a ".."
# whenever anything on the system renamed meanwhile (sfma's own atomic
# writes and evidence filing rename), and the caller may retry. A read
# through a link whose target climbs with ".." while a rename loop runs
# beside it must pass every time.
@test "a read through a link with .. is never refused because something else renamed meanwhile" {
	mkdir -p "$W/ws/src/d" "$W/spin"
	ln -s ../a.txt "$W/ws/src/d/up"
	touch "$W/spin/a"
	python3 -c 'import os, sys
d = sys.argv[1]
while True:
    os.rename(d + "/a", d + "/b"); os.rename(d + "/b", d + "/a")' "$W/spin" 2>/dev/null &
	local spinner=$!
	local i
	for i in $(seq 3000); do printf '{"id":%d,"call":{"tool":"read","path":"src/d/up"}}\n' "$i"; done |
		sfma-exec "$W/m.json" >"$W/out"
	kill "$spinner"; wait "$spinner" 2>/dev/null || true
	[ "$(wc -l <"$W/out")" -eq 3000 ]
	run jq -r 'select(.pass != true or .reason != "read 6 bytes") | .reason' "$W/out"
	[ -z "$output" ] || { echo "$output" | sort | uniq -c; return 1; }
}
