#!/usr/bin/env bats
# sfma-chat: the terminal side of the mailbox. Lines typed (or piped) become
# inbox files; outbox messages are shown once, safely for the terminal.

load helpers

CAND='{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
	export USER=alice
	mkdir -p ws
}

teardown() {
	[ -z "${CHAT_PID:-}" ] || kill "$CHAT_PID" 2>/dev/null || true
	exec 7>&- 2>/dev/null || true
}

outbox() { # outbox NAME KIND TEXT
	mkdir -p ws/.sfma/outbox
	# written as the engine does: whole, by rename
	jq -cn --arg k "$2" --arg t "$3" '{kind:$k,text:$t,at:"2026-01-02T03:04:05.678Z"}' >"ws/.sfma/outbox/.$1.tmp"
	mv "ws/.sfma/outbox/.$1.tmp" "ws/.sfma/outbox/$1"
}

wait_for() { # wait_for SECONDS COMMAND...: poll until the command succeeds
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		[ "$SECONDS" -lt "$deadline" ] || { echo "timed out waiting for: $*"; return 1; }
		sleep 0.05
	done
}

@test "piped lines become inbox files with their exact text, in order, then it exits" {
	printf 'use JSON\n\n   \nsay "hi" \\ $HOME\r\nlast line without newline' >in.txt
	run sfma-chat ws <in.txt
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	run ls ws/.sfma/inbox
	[ "${#lines[@]}" -eq 3 ]
	for f in "${lines[@]}"; do
		[[ "$f" =~ ^[0-9]{13}-[0-9]+-chat-alice\.txt$ ]] || { echo "bad name $f"; return 1; }
	done
	# names sort in the order the lines were typed, and the text is exact
	[ "$(cat "ws/.sfma/inbox/${lines[0]}")" = 'use JSON' ]
	[ "$(cat "ws/.sfma/inbox/${lines[1]}")" = 'say "hi" \ $HOME' ]
	[ "$(cat "ws/.sfma/inbox/${lines[2]}")" = 'last line without newline' ]
	# no newline is added: the file is the line
	[ "$(wc -c <"ws/.sfma/inbox/${lines[0]}")" -eq 8 ]
}

@test "the user in the file name is sanitized" {
	USER='../evil name' run sfma-chat ws <<<"x"
	[ "$status" -eq 0 ]
	run ls ws/.sfma/inbox
	[[ "$output" =~ ^[0-9]{13}-[0-9]+-chat-___evil_name\.txt$ ]]
}

@test "outbox messages are shown oldest first with kind and time, once per workspace" {
	outbox 9-notify.json notify "started"
	outbox 10-ask.json ask "which format?"
	run sfma-chat ws </dev/null
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "[2026-01-02T03:04:05.678Z] notify: started" ]
	[ "${lines[1]}" = "[2026-01-02T03:04:05.678Z] ask: which format?" ]
	[ "${#lines[@]}" -eq 2 ]
	# a later session shows only what is new
	outbox 11-notify.json notify "more"
	run sfma-chat ws </dev/null
	[ "$status" -eq 0 ]
	[ "$output" = "[2026-01-02T03:04:05.678Z] notify: more" ]
	run sfma-chat ws </dev/null
	[ -z "$output" ]
	# --all replays everything
	run sfma-chat --all ws </dev/null
	[ "${#lines[@]}" -eq 3 ]
	jq -e '.shown == ["9-notify.json","10-ask.json","11-notify.json"]' ws/.sfma/chat.state
	# it names what the run's messages were: private, as sfma-telegram's state
	[ "$(stat -c %a ws/.sfma/chat.state)" = 600 ]
}

@test "outbox text cannot drive the terminal: controls and bidi overrides are shown escaped" {
	outbox 1-notify.json notify $'clear\e[2J\rbell\a\u202emirror\u0085 two\nlines'
	run sfma-chat ws </dev/null
	[ "$status" -eq 0 ]
	[[ "$output" != *$'\e'* ]]
	[[ "$output" != *$'\r'* ]]
	[[ "$output" != *$'\u202e'* ]]
	[ "${lines[0]}" = '[2026-01-02T03:04:05.678Z] notify: clear\x1b[2J\x0dbell\x07\u202emirror\u0085 two' ]
	[ "${lines[1]}" = '    lines' ]
}

@test "hostile outbox entries are reported once, never hang the client, and the rest is shown" {
	mkdir -p ws/.sfma/outbox
	echo '{"kind":"ask","text":' >ws/.sfma/outbox/1-ask.json
	echo '{"kind":"ask","kind":"notify","text":"dup"}' >ws/.sfma/outbox/2-ask.json
	ln -s /etc/passwd ws/.sfma/outbox/3-ask.json
	mkfifo ws/.sfma/outbox/4-ask.json
	head -c 2000000 /dev/zero | tr '\0' a >ws/.sfma/outbox/5-ask.json
	outbox 6-notify.json notify "still here"
	run timeout 10 sfma-chat ws </dev/null
	[ "$status" -eq 0 ]
	[[ "$output" == *"notify: still here"* ]]
	[[ "$output" == *"1-ask.json: invalid JSON"* ]]
	[[ "$output" == *"2-ask.json: invalid JSON"*"duplicate"* ]]
	[[ "$output" == *"3-ask.json: is a link, not read"* ]]
	[[ "$output" == *"4-ask.json: not a regular file"* ]]
	[[ "$output" == *"5-ask.json: input larger than 1048576 bytes"* ]]
	[[ "$output" != *root:* ]]
	run timeout 10 sfma-chat ws </dev/null
	[ -z "$output" ]
}

@test "lines that cannot be posted are refused with a message and exit 1; the others still go" {
	{
		printf 'good one\n'
		printf 'bad \xff\xfe utf8\n'
		head -c 70000 /dev/zero | tr '\0' b
		printf '\ngood two\n'
	} >in.txt
	run sfma-chat ws <in.txt
	[ "$status" -eq 1 ]
	[[ "$output" == *"line 2: not UTF-8 text; not posted"* ]]
	[[ "$output" == *"line 3: longer than 65536 bytes; not posted"* ]]
	local posted=(ws/.sfma/inbox/*)
	[ "${#posted[@]}" -eq 2 ]
	[ "$(cat "${posted[0]}")" = "good one" ]
	[ "$(cat "${posted[1]}")" = "good two" ]
}

@test "an open session shows messages as they arrive, posts as lines come, and ends cleanly on SIGINT" {
	mkfifo in
	sfma-chat ws <in >out 2>err &
	CHAT_PID=$!
	exec 7>in
	outbox 20-ask.json ask "live question"
	wait_for 5 grep -q "ask: live question" out
	echo "live answer" >&7
	wait_for 5 compgen -G 'ws/.sfma/inbox/*-chat-alice.txt'
	[ "$(cat ws/.sfma/inbox/*)" = "live answer" ]
	kill -INT "$CHAT_PID"
	local st=0
	wait "$CHAT_PID" || st=$?
	CHAT_PID=
	[ "$st" -eq 0 ]
	[ ! -s err ]
}

@test "usage errors exit 2; a missing workspace or a planted link exits 1" {
	run sfma-chat
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sfma-chat: a WORKSPACE is required" ]
	[[ "${lines[1]}" == "usage: sfma-chat"* ]]
	run sfma-chat --bogus ws
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sfma-chat: unknown option --bogus" ]
	run sfma-chat ws other
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sfma-chat: one WORKSPACE only (unexpected other)" ]
	run sfma-chat nowhere </dev/null
	[ "$status" -eq 1 ]
	[ "$output" = "sfma-chat: nowhere: No such file or directory" ]
	mkdir -p ws/.sfma elsewhere
	ln -s ../../elsewhere ws/.sfma/inbox
	run sfma-chat ws <<<"x"
	[ "$status" -eq 1 ]
	[[ "$output" == "sfma-chat: ws/.sfma/inbox: not a directory (links are not followed)" ]]
	[ -z "$(ls elsewhere)" ]
}

@test "a piped answer reaches the next run: traced as an inbound message, consumed, verified" {
	cat >m.json <<JSON
{"name":"t","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":8,"dryRunDefault":false}
JSON
	export SFMA_MOCK="[$CAND,{\"tool\":\"ask\",\"question\":\"which format?\"},{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"done\",\"summary\":\"s\"}]"
	run sfma run m.json
	[ "$status" -eq 0 ]
	run sfma-verify ws
	[ "$status" -eq 0 ]
	run sfma-chat ws <<<"use JSON, please"
	[ "$status" -eq 0 ]
	[[ "$output" == *"] ask: which format?" ]]
	export SFMA_MOCK="[$CAND,{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"x\"},{\"tool\":\"done\",\"summary\":\"s\"}]"
	run sfma run m.json
	[ "$status" -eq 0 ]
	jq -s -e 'any(.[]; .kind == "message" and .data.dir == "in" and .data.text == "use JSON, please"
	           and (.data.file | test("^[0-9]{13}-[0-9]+-chat-alice\\.txt$")))' ws/.sfma/trace.jsonl
	[ -z "$(ls ws/.sfma/inbox)" ]
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == AUDIT_OK* ]]
}
