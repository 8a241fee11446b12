#!/bin/bash
# sudden-death.sh [SEED [RUNS]]: runs with a random stage SIGKILLed at a
# random moment, each followed by a run on the same workspace that ends
# normally; every final record must verify (AUDIT_OK) and replay
# (REPLAY_OK): a run cut short is an honest record, replayed as far as it
# went. A torn final line is recovered the way sfma-chain(1) tells the
# operator (--recover-torn) before the next run. SEED defaults to the
# time, RUNS to 40; the seed is printed so a failure can be reproduced.
# Needs SFMA_BINDIR (or bin/ beside tests/) and jq.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SFMA_BINDIR:-$here/bin}
seed=${1:-$(date +%s)}
runs=${2:-40}
RANDOM=$seed
stages=(sfma sfma-plan sfma-model sfma-exec sfma-chain sfma-seal sfma-mem)
top=$(mktemp -d "${TMPDIR:-/tmp}/sfma-death.XXXXXX")
trap 'pkill -KILL -f "$top" 2>/dev/null; rm -rf "$top"' EXIT
CAND='{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"w","duty":"d"}],"firstTasks":[],"schedule":[]}'
failed=0
for i in $(seq "$runs"); do
	d=$top/$i
	mkdir -p "$d/ws"
	echo input >"$d/ws/in.txt"
	jq -n --arg ws "$d/ws" '{name:"death",workspace:$ws,modelEndpoints:[{name:"mock",provider:"mock",model:"m"}],
	  allowedCommands:["echo","cat","sleep"],inputs:["in.txt"],outputs:["out.txt"],maxTurns:30,maxSeconds:120,
	  dryRunDefault:false}' >"$d/m.json"
	turns=$CAND
	for k in $(seq $((3 + RANDOM % 8))); do
		case $((RANDOM % 4)) in
		0) turns+=',{"tool":"read","path":"in.txt"}' ;;
		1) turns+=',{"tool":"write","path":"out.txt","content":"x'$k'"}' ;;
		2) turns+=',{"tool":"run","cmd":"echo '$k'"}' ;;
		3) turns+=',{"tool":"run","cmd":"sleep 0.0'$((RANDOM % 9))'"}' ;;
		esac
	done
	turns+=',{"tool":"write","path":"out.txt","content":"done"},{"tool":"done","summary":"s"}'
	stage=${stages[RANDOM % ${#stages[@]}]}
	delay_ms=$((RANDOM % 700))
	(cd "$d" && SFMA_MOCK="[$turns]" SFMA_MOCK_LATENCY_MS=$((5 + RANDOM % 30)) \
		exec "$bin/sfma" run m.json --apply >"$d/first.out" 2>&1) &
	runner=$!
	sleep "$(printf '0.%03d' "$delay_ms")"
	pid=$(pgrep -f "$bin/$stage( .*)? .*$d/" | head -n 1)
	[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
	for _ in $(seq 600); do kill -0 "$runner" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$runner" 2>/dev/null
	wait "$runner" 2>/dev/null
	# whatever is left of the killed run (a stage outliving its planner)
	for _ in $(seq 100); do pgrep -f "$d/" >/dev/null || break; sleep 0.1; done
	pkill -KILL -f "$d/" 2>/dev/null
	again() { (cd "$d" && SFMA_MOCK="[$CAND,{\"tool\":\"write\",\"path\":\"out.txt\",\"content\":\"y\"},{\"tool\":\"done\",\"summary\":\"s\"}]" \
		"$bin/sfma" run m.json --apply >"$d/second.out" 2>&1); }
	again
	if grep -q -- '--recover-torn' "$d/second.out"; then
		"$bin/sfma-chain" --recover-torn "$d/ws/.sfma/trace.jsonl" >/dev/null 2>&1
		again
	fi
	v=$("$bin/sfma-verify" "$d/ws" 2>&1)
	r=$("$bin/sfma-replay" "$d/ws" 2>&1)
	case "$v/$r" in
	AUDIT_OK*/REPLAY_OK*) ;;
	*)
		failed=$((failed + 1))
		keep=$top.failed-$i
		cp -a "$d" "$keep"
		echo "sudden-death: seed $seed run $i ($stage killed after ${delay_ms} ms): $v / $r (kept in $keep)" >&2
		;;
	esac
	rm -rf "$d"
done
echo "sudden-death: $runs runs (seed $seed), $failed not both verified and replayed"
[ "$failed" -eq 0 ]
