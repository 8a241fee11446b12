#!/usr/bin/env bats
# sfma-exec: the command limits a manifest sets (commandTimeoutSeconds,
# limits; sfma-manifest(5)). Each limit must bite, and each command's
# record must say what was in force. Every bomb is bounded itself, as in
# exec-sandbox.bats.

load helpers

FIX=$BATS_TEST_DIRNAME/fixtures/exec

setup() {
	require jq
	require python3
	W=$BATS_TEST_TMPDIR
	mkdir -p "$W/ws"
	cp "$FIX"/mem.py "$FIX"/loop.sh "$W/ws/"
	# A fork loop that says each process it started: the last number is
	# how far it got.
	cat >"$W/ws/forks.sh" <<'SH'
n=0
while [ "$n" -lt 300 ]; do
	sleep 3173 &
	n=$((n + 1))
	echo "$n"
done
echo "started $n"
SH
	export TMPDIR=$W/stage
	mkdir -p "$TMPDIR"
}

manifest() { # manifest [TOP-LEVEL MEMBERS]
	cat >"$W/m.json" <<JSON
{"name":"t","workspace":"$W/ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],
 "allowedCommands":["sh","python3","dd","head","true","sleep"],
 "inputs":["mem.py","loop.sh","forks.sh"],"outputs":[],"maxTurns":5,"dryRunDefault":false${1:+,$1}}
JSON
}

calls() { # calls [--flags] CALL...: replies in $W/out
	local flags=()
	while [[ ${1:-} == --* ]]; do flags+=("$1"); shift; done
	local i=0
	for c in "$@"; do
		i=$((i + 1))
		printf '{"id":%d,"call":%s}\n' "$i" "$c"
	done | sfma-exec --apply "${flags[@]}" "$W/m.json" >"$W/out"
}

run_cmd() { printf '{"tool":"run","cmd":"%s"}' "$1"; }
reply() { sed -n "${1}p" "$W/out"; }
field() { reply "$1" | jq -r "$2"; }
no_sleepers() { ! pgrep -f 'sleep 317[13]' >/dev/null || { echo "processes left behind"; return 1; }; }

@test "commandTimeoutSeconds stops a command and the model is told what stopped it" {
	manifest '"commandTimeoutSeconds":2'
	local t0 t1
	t0=$(date +%s%N)
	calls "$(run_cmd 'sleep 5')"
	t1=$(date +%s%N)
	local ms=$(( (t1 - t0) / 1000000 ))
	[ "$ms" -ge 1500 ] && [ "$ms" -le 4000 ] || { echo "took $ms ms"; return 1; }
	[ "$(field 1 .run.exit)" = 124 ]
	[ "$(field 1 .run.timedOut)" = true ]
	[ "$(field 1 .run.limits.timeoutMs)" = 2000 ]
	[ "$(field 1 .result)" = $'exit=124: timed out after 2 s (commandTimeoutSeconds)\nstdout:\nstderr:' ] ||
		{ reply 1; return 1; }
	[ "$(field 1 .reason)" = "exit=124: timed out after 2 s (commandTimeoutSeconds)" ]
}

@test "--timeout only shortens commandTimeoutSeconds, and then names itself" {
	manifest '"commandTimeoutSeconds":2'
	calls --timeout=1 "$(run_cmd 'sleep 5')"
	[ "$(field 1 .run.limits.timeoutMs)" = 1000 ]
	[[ "$(field 1 .result)" == "exit=124: timed out after 1 s (--timeout)"$'\n'* ]] || { reply 1; return 1; }
	calls --timeout=30 "$(run_cmd 'sleep 5')"
	[ "$(field 1 .run.limits.timeoutMs)" = 2000 ]
	[[ "$(field 1 .reason)" == "exit=124: timed out after 2 s (commandTimeoutSeconds)" ]]
	# without the key, the default is 60 s, and a command that ends in time says only its exit
	manifest
	calls "$(run_cmd true)"
	[ "$(field 1 .run.limits.timeoutMs)" = 60000 ]
	[ "$(field 1 .reason)" = "exit=0" ]
}

@test "the run's deadline, when it comes first, is what the model is told stopped it" {
	manifest '"commandTimeoutSeconds":30'
	local deadline=$(( $(date +%s%3N) + 1500 ))
	printf '{"id":1,"deadlineMs":%s,"call":{"tool":"run","cmd":"sleep 5"}}\n' "$deadline" |
		sfma-exec --apply "$W/m.json" >"$W/out"
	[ "$(field 1 .run.exit)" = 124 ]
	[[ "$(field 1 .reason)" == "exit=124: timed out after "*" s (the run's maxSeconds)" ]] || { reply 1; return 1; }
}

@test "every limit a manifest sets is the one in force and in the record" {
	manifest '"limits":{"memoryBytes":268435456,"processes":16,"fileSizeBytes":2097152,"cpuSeconds":5,"outputBytes":2048,"workspaceBytes":33554432}'
	calls "$(run_cmd true)"
	[ "$(field 1 .run.exit)" = 0 ] || { reply 1; return 1; }
	[ "$(field 1 .run.limits.addressSpaceBytes)" = 268435456 ]
	[ "$(field 1 .run.limits.processes)" = 16 ]
	[ "$(field 1 .run.limits.fileSizeBytes)" = 2097152 ]
	[ "$(field 1 .run.limits.cpuSeconds)" = 5 ]
	[ "$(field 1 .run.limits.outputBytes)" = 2048 ]
	[ "$(field 1 .run.limits.workspaceBytes)" = 33554432 ]
	# the cgroup ceilings too, where cgroups are delegated (this host and CI)
	[ "$(field 1 .run.limits.cgroup.pidsMax)" = 16 ]
	[ "$(field 1 .run.limits.cgroup.memoryMaxBytes)" = 268435456 ]
	# a cpuSeconds above the timeout + 1 s is the timeout + 1 s
	manifest '"commandTimeoutSeconds":3,"limits":{"cpuSeconds":100}'
	calls "$(run_cmd true)"
	[ "$(field 1 .run.limits.cpuSeconds)" = 4 ]
}

@test "memoryBytes: a memory hog over it fails, under the default it gets further" {
	manifest '"limits":{"memoryBytes":268435456}'
	calls "$(run_cmd 'python3 mem.py')"
	local r got
	r=$(field 1 .result)
	[[ "$r" == *"MemoryError after"* ]] || { echo "$r"; return 1; }
	got=$(grep -o 'after [0-9]*' <<<"$r" | cut -d' ' -f2)
	[ "$got" -lt 256 ] || { echo "$r"; return 1; }
	manifest
	calls "$(run_cmd 'python3 mem.py')"
	got=$(grep -o 'after [0-9]*' <<<"$(field 1 .result)" | cut -d' ' -f2)
	[ "$got" -ge 2048 ] || { reply 1; return 1; }
}

@test "processes: a fork loop stops there, as root too, leaving nothing behind" {
	manifest '"limits":{"processes":16}'
	calls "$(run_cmd 'sh forks.sh')"
	local r last
	r=$(field 1 .result)
	[[ "$r" != *"started 300"* ]] || { echo "$r"; return 1; }
	last=$(grep -o '^[0-9]*$' <<<"$r" | tail -1)
	[ "${last:-0}" -lt 16 ] || { echo "$r"; return 1; }
	[ "${last:-0}" -ge 4 ] || { echo "$r"; return 1; }
	no_sleepers
}

@test "fileSizeBytes: a file over it fails, one under it is written" {
	manifest '"limits":{"fileSizeBytes":2097152}'
	calls "$(run_cmd 'dd if=/dev/zero of=small bs=1M count=1')" "$(run_cmd 'dd if=/dev/zero of=big bs=1M count=3')"
	[ "$(field 1 .run.exit)" = 0 ] || { reply 1; return 1; }
	# SIGXFSZ (25): exit=128+25
	[ "$(field 2 .run.exit)" = 153 ] || { reply 2; return 1; }
}

@test "workspaceBytes: the staging copy is full past it" {
	manifest '"limits":{"workspaceBytes":16777216}'
	calls "$(run_cmd 'dd if=/dev/zero of=fill bs=1M count=20')" "$(run_cmd 'dd if=/dev/zero of=fill bs=1M count=8')"
	[[ "$(field 1 .result)" == *"No space left on device"* ]] || { reply 1; return 1; }
	[ "$(field 2 .run.exit)" = 0 ] || { reply 2; return 1; }
}

@test "cpuSeconds: a busy loop is stopped by SIGXCPU long before its timeout" {
	manifest '"commandTimeoutSeconds":30,"limits":{"cpuSeconds":1}'
	local t0=$SECONDS
	calls "$(run_cmd 'sh loop.sh')"
	[ $((SECONDS - t0)) -lt 15 ]
	# SIGXCPU (24): exit=128+24
	[ "$(field 1 .run.exit)" = 152 ] || { reply 1; return 1; }
	[ "$(field 1 .run.timedOut)" = false ]
}

@test "outputBytes: what the model is shown of a command fits in it" {
	manifest '"limits":{"outputBytes":1024}'
	calls "$(run_cmd 'head -c 100000 /dev/zero')"
	[ "$(field 1 '.result | utf8bytelength')" -le 1024 ] || { reply 1; return 1; }
	[[ "$(field 1 .result)" == *"[clipped: "*" bytes not shown]"* ]]
	manifest
	calls "$(run_cmd 'head -c 100000 /dev/zero')"
	[ "$(field 1 '.result | utf8bytelength')" -gt 4096 ]
}

@test "in a run: the model's tool result says the timeout stopped the command; the limits are in the record" {
	cd "$W"
	cat >r.json <<'JSON'
{"name":"t","workspace":"rws","taskStatement":"write out.txt",
 "modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["sleep"],"inputs":[],"outputs":["out.txt"],"maxTurns":8,"dryRunDefault":false,
 "commandTimeoutSeconds":2,"limits":{"processes":32,"memoryBytes":536870912,"outputBytes":4096}}
JSON
	local cand='{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'
	mock "$cand" '{"tool":"run","cmd":"sleep 5"}' '{"tool":"write","path":"out.txt","content":"x"}' '{"tool":"done","summary":"s"}'
	local t0=$SECONDS
	run sfma run r.json --apply
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ $((SECONDS - t0)) -lt 5 ]
	local v; v=$(jq -c 'select(.kind == "verdict" and .data.run)' rws/.sfma/trace.jsonl)
	[ "$(jq -r .data.reason <<<"$v")" = "exit=124: timed out after 2 s (commandTimeoutSeconds)" ]
	[ "$(jq -r .data.run.timedOut <<<"$v")" = true ]
	[ "$(jq -r .data.run.limits.timeoutMs <<<"$v")" = 2000 ]
	[ "$(jq -r .data.run.limits.processes <<<"$v")" = 32 ]
	[ "$(jq -r .data.run.limits.addressSpaceBytes <<<"$v")" = 536870912 ]
	[ "$(jq -r .data.run.limits.outputBytes <<<"$v")" = 4096 ]
	# what the model was told: the verdict's evidence.output blob
	local sha; sha=$(jq -r .evidence.output.sha256 <<<"$v")
	[ "$(jq -r .toolResult "rws/.sfma/evidence/$sha")" = $'exit=124: timed out after 2 s (commandTimeoutSeconds)\nstdout:\nstderr:' ] ||
		{ cat "rws/.sfma/evidence/$sha"; return 1; }
	run sfma-verify rws
	[ "$status" -eq 0 ]
	run sfma replay rws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
}
