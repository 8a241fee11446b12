#!/bin/sh
# make check-valgrind: every stage under valgrind on a normal session of its
# own messages; any leak or memory error fails. The stages run standalone
# (each is usable alone), fed the same kind of lines a run sends them.
set -eu
bin=${SFMA_BINDIR:-$(cd "$(dirname "$0")/../bin" && pwd)}
interop=${SFMA_INTEROP:-$(cd "$(dirname "$0")" && pwd)/fixtures/interop}
tests=$(cd "$(dirname "$0")" && pwd)
fake_server=$tests/fixtures/model/fake_server.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
vg="valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible"
cd "$tmp"
cat >m.json <<'JSON'
{"name":"vg","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":8,"dryRunDefault":false}
JSON
mkdir -p ws/.sfma
fail=0
check() { # check NAME COMMAND...
	name=$1; shift
	if "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; then echo "ok   $name"; else
		echo "FAIL $name"; cat "$tmp/$name.err"; fail=1; fi
}

printf '%s\n' '{"kind":"clock-anchor","data":{"wallMs":1,"source":"system-wall"}}' \
	'{"kind":"call","class":"reasoning","loop":1,"data":{"endpoint":"mock","latencyMs":0.5,"ok":true}}' \
	'{"kind":"task","refs":["call-2"],"data":{"call":{"tool":"read","path":"a"}}}' >events
check sfma-chain sh -c "$vg $bin/sfma-chain ws/.sfma/trace.jsonl <events"
# twice with the verified-head note: the second resumes from it (and
# sfma-seal, next, reads it)
check sfma-chain-noted sh -c "$vg $bin/sfma-chain --head-cache ws/.sfma/chain-head.json ws/.sfma/trace.jsonl <events &&
	test -s ws/.sfma/chain-head.json && $vg $bin/sfma-chain --head-cache ws/.sfma/chain-head.json ws/.sfma/trace.jsonl <events"
check sfma-seal sh -c "jq -c '{manifest:., verdict:\"completed\"}' m.json | $vg $bin/sfma-seal ws"
check sfma-verify sh -c "$vg $bin/sfma-verify ws && $vg $bin/sfma-verify $interop/unicode/ws && $vg $bin/sfma-verify $interop/legacy/ws"
check sfma-verify-invalid sh -c "echo '{' > ws/.sfma/result.json; $vg $bin/sfma-verify ws; test \$? -eq 1"
check sfma-plan-check sh -c "$vg $bin/sfma-plan --check m.json"
# sfma-check on a good manifest, a refused one, and one with a missing input and key.
jq '.maxSecond = 1 | .acceptance = [{cmd:"rm x"}]' m.json >check-bad.json
jq '.inputs = ["nope"] | .modelEndpoints[0].provider = "anthropic"' m.json >check-missing.json
check sfma-check sh -c "SFMA_MOCK='{}' $vg $bin/sfma-check m.json &&
	{ $vg $bin/sfma-check check-bad.json; test \$? -eq 1; } &&
	{ env -u ANTHROPIC_API_KEY $vg $bin/sfma-check check-missing.json; test \$? -eq 1; }"
# The planner's handshake (sfma-plan(1), --handshake-fd) ended without the go.
printf '#!/bin/sh\nexec %s %s/sfma-plan "$@"\n' "$vg" "$bin" >vg-plan
chmod +x vg-plan
check sfma-plan-handshake sh -c "python3 $tests/plan-handshake-peer.py ./vg-plan m.json eof; test \$? -eq 1"
printf '%s\n' '{"id":1,"system":"s","messages":[{"role":"user","content":"go"}],"class":"reasoning","deadlineMs":9999999999999,"callsLeft":5}' \
	'{"id":2,"system":"s","messages":[{"role":"user","content":"go"}],"class":"mechanical","deadlineMs":9999999999999,"callsLeft":5}' \
	'not json' >model.in
check sfma-model sh -c "$vg $bin/sfma-model m.json <model.in"
# Requests at once: the object form, a judgment, the mock's latency.
printf '%s\n' '{"id":1,"purpose":"work","task":"t1","messages":[{"role":"user","content":"go"}],"class":"mechanical","deadlineMs":9999999999999,"callsLeft":5}' \
	'{"id":2,"purpose":"judge","task":"t1","avoid":"mock","verdicts":[{"endpoint":"mock","class":"mechanical","pass":true}],"system":"sfma soft-tier judgment 1","messages":[{"role":"user","content":"judge"}],"class":"reasoning","deadlineMs":9999999999999,"callsLeft":5}' \
	'{"id":3,"purpose":"bootstrap","messages":[{"role":"user","content":"go"}],"class":"reasoning","deadlineMs":9999999999999,"callsLeft":5}' >model-loops.in
check sfma-model-at-once sh -c "SFMA_MOCK_LATENCY_MS=50 SFMA_MOCK='{\"tasks\":{\"t1\":[\"a\"]},\"judge\":[\"{}\"]}' $vg $bin/sfma-model m.json <model-loops.in && test \$(wc -l < $tmp/sfma-model-at-once.out) -eq 3"
# An HTTP endpoint: libcurl, loaded by the first attempt that needs it
# (dlopen), and a mock behind it.
printf '%s' '{"/v1/chat/completions":[{"json":{"choices":[{"message":{"role":"assistant","content":"hi"}}]}}]}' >fake.json
python3 "$fake_server" fake.json fake.log fake.port 2>fake.err &
fake=$!
for _ in $(seq 200); do [ -s fake.port ] && break; sleep 0.05; done
jq --arg base "http://127.0.0.1:$(cat fake.port)" \
	'.modelEndpoints = [{name:"o",provider:"openai",model:"g",baseUrl:$base}] + .modelEndpoints' m.json >m-http.json
check sfma-model-http sh -c "OPENAI_API_KEY=k $vg $bin/sfma-model m-http.json <model.in &&
	test \$(jq -s 'map(select(.endpoint == \"o\")) | length' $tmp/sfma-model-http.out) -eq 2"
kill "$fake"; wait "$fake" 2>/dev/null || true
# How replies end: a refusal falling over, a reply cut off, a codex stream
# rate-limited in-stream then answering; cache marks, prompt_cache_key and
# costs on the way.
cat >fake-stop.json <<'JSON'
{"/a/v1/messages":[{"json":{"type":"message","role":"assistant","stop_reason":"refusal","content":[{"type":"text","text":"no"}],"usage":{"input_tokens":5,"output_tokens":1}}}],
 "/b/v1/chat/completions":[{"json":{"choices":[{"finish_reason":"length","message":{"role":"assistant","content":"cut","refusal":null}}],"usage":{"prompt_tokens":9,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}}],
 "/c/responses":[{"sse":[{"type":"error","code":"rate_limit_exceeded","message":"Please try again in 0.05s"}]},
                 {"sse":[{"type":"response.output_text.delta","delta":"hi"},{"type":"response.completed","response":{"status":"completed","output":[],"usage":{"input_tokens":3,"output_tokens":1}}}]}]}
JSON
python3 "$fake_server" fake-stop.json fake-stop.log fake-stop.port 2>fake-stop.err &
fake=$!
for _ in $(seq 200); do [ -s fake-stop.port ] && break; sleep 0.05; done
price='{"inputPerMTok":3,"outputPerMTok":15}'
jq --arg base "http://127.0.0.1:$(cat fake-stop.port)" --argjson p "$price" \
	'.modelEndpoints = [{name:"a",provider:"anthropic",model:"c",baseUrl:($base + "/a"),pricing:$p},
	                    {name:"b",provider:"openai",model:"g",baseUrl:($base + "/b"),pricing:$p},
	                    {name:"c",provider:"codex",model:"x",baseUrl:($base + "/c")}]' m.json >m-stop.json
down='{"calls":0,"failures":0,"downUntil":9999999999999}'
printf '%s\n' '{"id":1,"system":"s","tools":true,"messages":[{"role":"user","content":"go"}],"class":"mechanical","deadlineMs":9999999999999,"callsLeft":5}' \
	"{\"id\":2,\"state\":{\"a\":$down,\"b\":$down},\"tools\":true,\"messages\":[{\"role\":\"user\",\"content\":\"go\"}],\"class\":\"mechanical\",\"deadlineMs\":9999999999999,\"callsLeft\":5}" >model-stop.in
check sfma-model-stop sh -c "ANTHROPIC_API_KEY=k1k1 OPENAI_API_KEY=k2k2 OPENAI_CODEX_TOKEN=k3k3 OPENAI_CODEX_ACCOUNT=acct \
	$vg $bin/sfma-model m-stop.json <model-stop.in &&
	jq -e -s '(map(select(.id == 1))[0] | .stop == \"length\" and .calls[0].errorClass == \"refusal\") and
	          (map(select(.id == 2))[0] | .text == \"hi\" and (.calls | length) == 2)' $tmp/sfma-model-stop.out >/dev/null"
kill "$fake"; wait "$fake" 2>/dev/null || true
# sfma-endpoints on the state that left: listed, as JSON, reset.
mkdir -p eps/.sfma
jq -s '{version:1,runs:[],pinned:null,endpoints:(map(select(.id == 2))[0].endpoints)}' $tmp/sfma-model-stop.out >eps/.sfma/memory.json
check sfma-endpoints sh -c "$vg $bin/sfma-endpoints eps && $vg $bin/sfma-endpoints --json eps >/dev/null &&
	$vg $bin/sfma-endpoints --all eps && jq -e '.endpoints.a.reset.by == \"sfma endpoints\"' eps/.sfma/memory.json >/dev/null"
printf '%s\n' '{"id":1,"call":{"tool":"write","path":"out.txt","content":"hi"}}' \
	'{"id":2,"call":{"tool":"read","path":"out.txt"}}' \
	'{"id":3,"call":{"tool":"write","path":"../x","content":"x"}}' \
	'{"id":4,"call":{"tool":"run","cmd":"echo hi; id"}}' \
	'{"id":5,"seq":7,"call":{"tool":"notify","text":"hello"}}' 'garbage' >exec.in
check sfma-exec sh -c "$vg $bin/sfma-exec --apply m.json <exec.in"
# The memory stage alone: a first store laid out, a record over
# fastMaxBytes (hash-object), every recall mode, the commit, then lines it
# refuses; again on the store the first session left (recall in history).
mkdir -p memws/.sfma
printf '%s\n' '{"id":1,"op":"open"}' \
	'{"id":2,"op":"keep","key":"candidate-3","payload":{"mission":"remember vg-7q"},"fastMaxBytes":8}' \
	'{"id":3,"op":"recall","call":{"tool":"recall","mode":"referential","id":"candidate-3"}}' \
	'{"id":4,"op":"recall","call":{"tool":"recall","mode":"semantic","query":"remember"}}' \
	'{"id":5,"op":"recall","call":{"tool":"recall","mode":"episodic","since":1,"until":3}}' \
	'{"id":6,"op":"commit","subject":"run vg completed turns=1 calls=1","memory":{"version":1,"runs":[]}}' \
	'garbage' '{"id":8,"op":"nope"}' '{"id":9,"op":"recall","call":{"tool":"recall","mode":"lexical","query":""}}' \
	'{"id":10,"op":"keep","key":"../x","payload":{},"fastMaxBytes":1}' '{"id":11,"op":"open"}' >mem.in
printf '%s\n' '{"id":1,"op":"open"}' \
	'{"id":2,"op":"recall","call":{"tool":"recall","mode":"lexical","query":"vg-7q"}}' \
	'{"id":3,"op":"recall","call":{"tool":"recall","mode":"change","query":"vg-7q"}}' \
	'{"id":4,"op":"recall","call":{"tool":"recall","mode":"referential","id":"candidate-3"}}' >mem-again.in
check sfma-mem sh -c "$vg $bin/sfma-mem memws <mem.in && $vg $bin/sfma-mem memws <mem-again.in >mem-again.out &&
	test \$(grep -c '\"found\":true' mem-again.out) -eq 3"
# The planner, in a whole run wired by hand (PIPELINE.md), under valgrind;
# plan_run NAME STATUS: one run of it, which must exit with STATUS.
plan_run() {
	rm -rf fifo; mkdir fifo
	for f in tm fm te fe tc fc ts fs tg fg; do mkfifo fifo/$f; done
	"$bin/sfma-model" m.json <fifo/tm >fifo/fm &
	"$bin/sfma-exec" --apply m.json <fifo/te >fifo/fe &
	"$bin/sfma-chain" ws/.sfma/trace.jsonl <fifo/tc >fifo/fc &
	"$bin/sfma-seal" ws <fifo/ts >fifo/fs &
	# the memory stage under valgrind too, its status kept for the check after
	sh -c "$vg $bin/sfma-mem ws <fifo/tg >fifo/fg 2>$tmp/$1-mem.err; echo \$? >$tmp/$1-mem.status" &
	check "$1" sh -c "$vg $bin/sfma-plan run m.json --apply --to-model fifo/tm --from-model fifo/fm \
		--to-exec fifo/te --from-exec fifo/fe --to-chain fifo/tc --from-chain fifo/fc --to-seal fifo/ts \
		--from-seal fifo/fs --to-mem fifo/tg --from-mem fifo/fg; test \$? -eq $2"
	wait
	check "$1-mem" sh -c "cat $tmp/$1-mem.err >&2; test \$(cat $tmp/$1-mem.status) -eq 0"
}
rm -rf ws
plan_run sfma-plan-run 0
check sfma-verify-run "$bin/sfma-verify" ws
check sfma-log sh -c "$vg $bin/sfma-log ws >/dev/null && $vg $bin/sfma-log --json --all $interop/multirun/ws >/dev/null"
check sfma-replay sh -c "$vg $bin/sfma-replay ws | grep -q '^REPLAY_OK '"
check sfma-report sh -c "$vg $bin/sfma-report -o report.html ws && grep -q AUDIT_OK report.html"
check sfma-summary sh -c "$vg $bin/sfma-summary ws | grep -q ' verified signature=' && { $vg $bin/sfma-summary --json ws missing; [ \$? -eq 1 ]; }"
# sfma-export: a run (with its evidence as content) and the earlier
# runner's record, printed; then sent to a collector stand-in (libcurl).
check sfma-export sh -c "$vg $bin/sfma-export --otlp --content ws $interop/multirun/ws >export.json &&
	jq -e '.resourceSpans | length == 2' export.json >/dev/null"
mkdir col
python3 "$tests/otlp-collector.py" col >/dev/null 2>&1 &
collector=$!
for _ in $(seq 200); do [ -s col/port ] && break; sleep 0.05; done
check sfma-export-post sh -c "OTEL_EXPORTER_OTLP_HEADERS='k=v%20w' $vg $bin/sfma-export --otlp --endpoint http://127.0.0.1:$(cat col/port) ws |
	grep -q '^EXPORT_OK ' && jq -e '.headers.k == \"v w\"' col/req-1.json >/dev/null"
kill "$collector"; wait "$collector" 2>/dev/null || true
# Again on the store the first run left (read and checked before git
# runs), then on one whose configuration names a filter: refused.
plan_run sfma-plan-run-store 0
# The tree of the two runs: a signed seal over the last checkpoint (its
# root read from the writer's note), proofs made and checked, and the
# attestation.
openssl genpkey -algorithm ed25519 -out key.pem 2>/dev/null
openssl pkey -in key.pem -pubout -out pub.pem
jq -c 'del(.integrity)' ws/.sfma/result.json >body.json
check sfma-seal-signed sh -c "SFMA_AUDIT_PRIVATE_KEY=\"\$(cat key.pem)\" $vg $bin/sfma-seal ws <body.json"
old=$(ls ws/.sfma/checkpoints | sort -n | head -n 1)
check sfma-verify-tree sh -c "$vg $bin/sfma-verify --since ws/.sfma/checkpoints/$old ws | grep -q ' checkpoints=2 since=$old'"
check sfma-prove sh -c "$vg $bin/sfma-prove ws 3 >p && sed -n 3p ws/.sfma/trace.jsonl >l && $vg $bin/sfma-prove --since $old ws >c &&
	$vg $bin/sfma-prove --verifier-key pub.pem | grep -q '^sfma-audit+'"
check sfma-verify-proof sh -c "SFMA_AUDIT_PUBLIC_KEY=\"\$(cat pub.pem)\" $vg $bin/sfma-verify --proof p --line l &&
	$vg $bin/sfma-verify --proof c --since ws/.sfma/checkpoints/$old && { $vg $bin/sfma-verify --proof c --line l; test \$? -eq 1; }"
check sfma-attest sh -c "SFMA_AUDIT_PRIVATE_KEY=\"\$(cat key.pem)\" $vg $bin/sfma-attest ws | jq -e '.signatures | length == 1' >/dev/null"
git -C ws/.sfma/mem config filter.x.clean false
plan_run sfma-plan-run-refused 1
check sfma-plan-refused-said sh -c "grep -q 'unsafe git configuration: filter.x.clean' $tmp/sfma-plan-run-refused.err"
# A run through sfma, its observer (signing its head) and the seal that
# checks and commits to it under valgrind (exec'd, so that no shell holds
# their pipes; what valgrind finds goes to a log of each, which must stay
# empty); then the check of the observed record.
mkdir -p vgbin obs
for p in "$bin"/sfma-*; do ln -s "$p" vgbin/; done
cp "$bin/sfma" vgbin/
for s in sfma-tap sfma-seal; do
	rm "vgbin/$s"
	printf '#!/bin/sh\nexec %s --log-file=%s/%s.vg %s/%s "$@"\n' "$vg" "$tmp" "$s" "$bin" "$s" >"vgbin/$s"
	chmod +x "vgbin/$s"
done
cp m.json obs/
# (an error is a line of valgrind's "==PID==" form; its "--PID--" notes -
# the confinement's landlock and seccomp calls, which it does not know and
# answers ENOSYS - are not)
check sfma-tap sh -c "cd obs && SFMA_OBSERVER_PRIVATE_KEY=\"\$(cat ../key.pem)\" ../vgbin/sfma run m.json --apply >/dev/null &&
	test -e $tmp/sfma-tap.vg && ! grep -q '^==' $tmp/sfma-tap.vg && test -e $tmp/sfma-seal.vg && ! grep -q '^==' $tmp/sfma-seal.vg"
check sfma-verify-observed sh -c "$vg $bin/sfma-verify obs/ws | grep -q ' observed=[1-9][0-9]* observer=untrusted-key '"
exit $fail
