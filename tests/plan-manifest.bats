#!/usr/bin/env bats
# Hostile manifests: a workspace that exposes the host, keys sent in clear
# text, tuning keys that do nothing, paths too long to build. Each is
# TASK_INVALID, exit 2, before anything is touched.

load helpers
bats_require_minimum_version 1.5.0

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK
}

manifest() { # manifest FILE WORKSPACE [ENDPOINT-EXTRA] [TOP-EXTRA]
	cat >"$1" <<JSON
{"name":"t","workspace":"$2","modelEndpoints":[{"name":"m","provider":"mock","model":"x"${3:+,$3}}],
 "allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":4,"dryRunDefault":true${4:+,$4}}
JSON
}

# invalid FILE PHRASE: sfma-plan --check refuses FILE with a reason holding PHRASE.
invalid() {
	run sfma-plan --check "$1"
	[ "$status" -eq 2 ] || { echo "$1: status $status: $output"; return 1; }
	[ "${lines[0]}" = TASK_INVALID ]
	[[ "$output" == *"- "*"$2"* ]] || { echo "$1: $output"; return 1; }
}

@test "a workspace that resolves to / or a system directory is refused, so read etc/shadow never runs" {
	mkdir -p real
	ln -s / rootlink
	ln -s /etc real/etclink
	for ws in / /etc /etc/ssh /usr /usr/lib /bin /lib /var /tmp /home /root /proc/self /sys /dev/shm /boot \
	          /opt /srv /run ../../../../../../../../.. rootlink rootlink/var real/etclink /no/such/../../etc; do
		manifest m.json "$ws"
		invalid m.json "resolves to" || return 1
		[[ "$output" == *"a system directory"* ]]
	done
	# The hard tier never sees the manifest: sfma-exec refuses it too.
	manifest m.json /
	run sfma-exec m.json <<<'{"id":1,"call":{"tool":"read","path":"etc/shadow"}}'
	[ "$status" -eq 2 ]
	[[ "$output" == *TASK_INVALID* ]]
	[[ "$output" != *root:* ]]
	# and a run stops before anything exists
	run sfma run m.json
	[ "$status" -eq 2 ]
	[ ! -e /.sfma ]
	# a directory of its own under one of them is fine
	manifest m.json "$BATS_TEST_TMPDIR/real/ws"
	run sfma-plan --check m.json
	[ "$status" -eq 0 ]
}

@test "the operator's home, or a directory holding it, is refused; a directory inside it is not" {
	mkdir -p users/op/project
	ln -s users/op homelink
	for ws in users/op users homelink "$PWD/users/op/"; do
		manifest m.json "$ws"
		HOME=$PWD/users/op invalid m.json "the operator's home" || return 1
	done
	manifest m.json users/op/project
	HOME=$PWD/users/op run sfma-plan --check m.json
	[ "$status" -eq 0 ]
	[[ "$output" == *"\"workspace\":\"$PWD/users/op/project\""* ]]
}

@test "a baseUrl or tokenUrl in clear text to another host is refused, without echoing the URL" {
	auth() { printf '"auth":{"type":"oauth2-client-credentials","tokenUrl":"%s","clientIdEnv":"ID","clientSecretEnv":"SECRET"}' "$1"; }
	for url in http://api.example.com/v1 http://user:hunter2@127.0.0.1/v1 HTTP://10.0.0.1 ftp://x.example 'http://127.0.0.1.evil.example/'; do
		manifest m.json ws "\"baseUrl\":\"$url\""
		invalid m.json "modelEndpoints[0].baseUrl must" || return 1
		[[ "$output" != *hunter2* && "$output" != *example* ]]
		manifest m.json ws "$(auth "$url")"
		invalid m.json "modelEndpoints[0].auth.tokenUrl must" || return 1
		[[ "$output" != *hunter2* && "$output" != *example* ]]
	done
	[[ "$output" == *"clear text"* ]]
	for url in https://api.example.com/v1 http://127.0.0.1:8080/v1 http://localhost/v1 'http://[::1]:9/'; do
		manifest m.json ws "\"baseUrl\":\"$url\",$(auth "$url/token")"
		run sfma-plan --check m.json
		[ "$status" -eq 0 ] || { echo "$url: $output"; return 1; }
	done
	[ ! -e ws ]
}

@test "tuning.routing: weights per class, 0..1; tuning.ntpAnchor refused until it does something" {
	manifest m.json ws "" '"tuning":{"routing":{"reasoning":{"prior":0.3,"lat":0}}}'
	run sfma-plan --check m.json
	[ "$status" -eq 0 ]
	manifest m.json ws "" '"tuning":{"routing":{"reasoning":"m","batch":{},"mechanical":{"pass":2,"speed":1}}}'
	invalid m.json "tuning.routing.reasoning must be an object"
	invalid m.json "tuning.routing.batch is not a class"
	invalid m.json "tuning.routing.mechanical.pass must be a number from 0 to 1"
	invalid m.json "tuning.routing.mechanical.speed is not a weight"
	manifest m.json ws "" '"tuning":{"ntpAnchor":"pool.ntp.org","certWindow":3}'
	invalid m.json "tuning.ntpAnchor is not supported yet"
	[ "${#lines[@]}" -eq 2 ]
	run sfma run m.json
	[ "$status" -eq 2 ]
	[ ! -e ws ]
}

@test "maxTokens, maxContextBytes, maxOutputTokens and toolProtocol are checked" {
	manifest m.json ws "" '"maxTokens":5000,"maxContextBytes":32768'
	run sfma-plan --check m.json
	[ "$status" -eq 0 ]
	manifest m.json ws "" '"maxTokens":0,"maxContextBytes":100'
	invalid m.json "maxTokens must be an integer >= 1"
	invalid m.json "maxContextBytes must be an integer from 4096 to 16777216"
	cat >m.json <<-'JSON'
	{"name":"t","workspace":"ws","allowedCommands":[],"inputs":[],"outputs":[],"maxTurns":2,
	 "dryRunDefault":false,"modelEndpoints":[
	  {"name":"a","provider":"openai","model":"x","maxOutputTokens":0,"toolProtocol":"xml"}]}
	JSON
	invalid m.json "modelEndpoints[0].maxOutputTokens must be an integer from 1 to 1000000"
	invalid m.json 'modelEndpoints[0].toolProtocol must be "native" or "text"'
	[ ! -e ws ]
}

@test "a workspace path too long to build under is refused, never printed cut short" {
	long=$BATS_TEST_TMPDIR/$(printf 'd%.0s' $(seq 4300))
	long=${long:0:4221}
	manifest m.json "$long"
	run --separate-stderr sfma-plan --check m.json
	[ "$status" -eq 2 ]
	[ -z "$output" ]
	[[ "$stderr" == *"workspace: path too long (4221 bytes"* ]]
	# The longest accepted workspace gets its trace path whole.
	fits=${long:0:3840}
	manifest m.json "$fits"
	run sfma-plan --check m.json
	[ "$status" -eq 0 ]
	[ "$(jq -r .trace <<<"$output")" = "$fits/.sfma/trace.jsonl" ]
	[ "$(jq -r .workspace <<<"$output")" = "$fits" ]
	manifest m.json "${long:0:3841}"
	invalid m.json "workspace: path too long (3841 bytes"
	# A relative workspace counts with the directory it resolves against.
	manifest m.json "${long:$(( ${#BATS_TEST_TMPDIR} + 1 )):3840}"
	invalid m.json "workspace: path too long"
	# A declared path that cannot fit under the workspace is refused too.
	manifest m.json "$fits"
	jq --arg o "$(printf 'o%.0s' $(seq 300))" '.outputs = [$o]' m.json >m2.json
	invalid m2.json "outputs[0]: path too long"
}

@test "a manifest's own strings cannot forge a reason line or reach the terminal raw" {
	# An output path with a newline and "- " after it, a tuning key with a CR
	# and an escape sequence: both are quoted in reasons.
	printf '%s' '{"name":"t","workspace":"ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],
	 "allowedCommands":["echo"],"inputs":[],"outputs":["../a\n- forged reason"],"maxTurns":4,
	 "dryRunDefault":true,"tuning":{"x\r\u001b[2Jy":1}}' > m.json
	run sfma-plan --check m.json
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = TASK_INVALID ]
	# exactly the two real reasons, each on its own "- " line
	[ "${#lines[@]}" -eq 3 ] || { echo "$output"; return 1; }
	[[ "${lines[1]}${lines[2]}" == *'\x0a- forged reason'* ]]
	[[ "${lines[1]}${lines[2]}" == *'x\x0d\x1b[2Jy'* ]]
	[[ "$output" != *$'\e'* && "$output" != *$'\r'* ]]
}
