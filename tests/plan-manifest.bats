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
	invalid m.json 'manifest: tuning.routing: unknown key "batch"'
	invalid m.json "tuning.routing.mechanical.pass must be a number from 0 to 1"
	invalid m.json 'manifest: tuning.routing.mechanical: unknown key "speed"'
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

# ---- keys the schema does not define (sfma-manifest(5), UNKNOWN KEYS) ----

# base [TOP-LEVEL MEMBERS]: a valid manifest on stdout, with more members.
base() {
	printf '{"name":"t","workspace":"ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x"}],"allowedCommands":["echo","git"],"inputs":[],"outputs":["out.txt"],"maxTurns":4,"dryRunDefault":true%s}\n' "${1:+,$1}"
}

@test "the edit distance counts a transposition as one; suggestions need distance 2 or a case difference" {
	build_driver "$BATS_TEST_TMPDIR/suggest" "$REPO/tests/fixtures/suggest/suggest.c"
	run "$BATS_TEST_TMPDIR/suggest" maxSecond maxSeconds,maxTurns  ab ba  abcd abdc,acbd  \
		MAXSECONDS maxSeconds  zzzzzz maxSeconds  kitten sitting  x maxLoops,xy  "" ab,abc
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "1 3 maxSeconds" ]
	[ "${lines[1]}" = "1 ba" ]
	[ "${lines[2]}" = "1 1 abdc" ]
	[ "${lines[3]}" = "3 maxSeconds" ]
	[ "${lines[4]}" = "3 -" ]
	[ "${lines[5]}" = "3 -" ]
	[ "${lines[6]}" = "3 1 xy" ]
	[ "${lines[7]}" = "2 3 ab" ]
}

@test "each misspelling is refused with its suggestion, before anything is touched" {
	for typo in '"maxSecond":30' '"maxLoop":2' '"inputz":[]' '"dryrunDefault":true' '"maxturns":3' '"Workspace":"w"'; do
		base "$typo" >m.json
		key=${typo%%\":*}; key=${key#\"}
		run sfma-plan --check m.json
		[ "$status" -eq 2 ] || { echo "$typo: $output"; return 1; }
		[ "${lines[0]}" = TASK_INVALID ]
		[[ "${lines[1]}" == "- manifest: unknown key \"$key\" (did you mean \""*"\"?)" ]] || { echo "$output"; return 1; }
	done
	base '"maxSecond":30' >m.json
	invalid m.json 'manifest: unknown key "maxSecond" (did you mean "maxSeconds"?)'
	[ "${#lines[@]}" -eq 2 ]
	# an endpoint's key, and one far from every known key
	sed 's/"model":"x"/"Model":"x"/' m.json >e.json
	invalid e.json 'manifest: modelEndpoints[0]: unknown key "Model" (did you mean "model"?)'
	[[ "$output" == *"- modelEndpoints[0].model must be a non-empty string"* ]]
	base '"frobnicate":1' >f.json
	invalid f.json 'manifest: unknown key "frobnicate"'
	[[ "$output" != *"did you mean"* ]]
	# allowedComands: both lines, each true
	base | sed 's/allowedCommands/allowedComands/' >c.json
	invalid c.json 'manifest: unknown key "allowedComands" (did you mean "allowedCommands"?)'
	[[ "$output" == *"- allowedCommands is required"* ]]
	# nothing touched: the run stops before any stage starts
	run sfma run m.json --apply
	[ "$status" -eq 2 ]
	[[ "$output" == *'unknown key "maxSecond"'* ]]
	[ ! -e ws ]
}

@test "unknown keys are refused in every object: endpoint, auth, priors, pricing, tuning, routing, limits, acceptance" {
	auth='"auth":{"type":"oauth2-client-credentials","tokenUrl":"https://t.example/token","clientIdEnv":"I","clientSecretEnv":"S","scop":"x"}'
	printf '{"name":"t","workspace":"ws","modelEndpoints":[{"name":"m","provider":"openai","model":"x","baseUrl":"https://a.example","priors":{"reasonin":0.5},"pricing":{"inputPerMTok":1,"outputPerMTok":2,"cachedInputPerMTOK":0.1},%s}],"allowedCommands":["echo"],"inputs":[],"outputs":[],"maxTurns":4,"dryRunDefault":true,"tuning":{"softCall":1},"limits":{"proceses":16},"acceptance":[{"cmd":"echo ok","exitt":0}]}\n' "$auth" >m.json
	run sfma-plan --check m.json
	[ "$status" -eq 2 ]
	[[ "$output" == *'- manifest: modelEndpoints[0].auth: unknown key "scop" (did you mean "scope"?)'* ]] || { echo "$output"; return 1; }
	[[ "$output" == *'- manifest: modelEndpoints[0].priors: unknown key "reasonin" (did you mean "reasoning"?)'* ]]
	[[ "$output" == *'- manifest: modelEndpoints[0].pricing: unknown key "cachedInputPerMTOK" (did you mean "cachedInputPerMTok"?)'* ]]
	[[ "$output" == *'- manifest: tuning: unknown key "softCall" (did you mean "softCalls"?)'* ]]
	[[ "$output" == *'- manifest: limits: unknown key "proceses" (did you mean "processes"?)'* ]]
	[[ "$output" == *'- manifest: acceptance[0]: unknown key "exitt" (did you mean "exit"?)'* ]]
	[ "${#lines[@]}" -eq 7 ]
}

@test "x- keys everywhere and a top-level \$schema are ignored; \$schema elsewhere is not" {
	printf '{"$schema":"../sfma-manifest.schema.json","x-owner":"ops","name":"t","workspace":"ws","modelEndpoints":[{"name":"m","provider":"mock","model":"x","x-note":1,"priors":{"x-why":"z"},"pricing":{"inputPerMTok":1,"outputPerMTok":2,"x-src":"list"}}],"allowedCommands":["echo"],"inputs":[],"outputs":[],"maxTurns":4,"dryRunDefault":true,"tuning":{"x-t":1},"limits":{"x-l":1},"acceptance":[{"cmd":"echo ok","x-a":1}]}\n' >m.json
	run sfma-plan --check m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	sed 's/"x-note":1/"$schema":"s"/' m.json >s.json
	invalid s.json 'manifest: modelEndpoints[0]: unknown key "$schema"'
	# x is not x-
	base '"xowner":1' >x.json
	invalid x.json 'unknown key "xowner"'
}

# ---- acceptance, commandTimeoutSeconds, limits, pricing, maxCostUsd, requireConfinement ----

@test "acceptance: 1 to 8 commands, each passing the run tool's own gate" {
	base '"acceptance":[{"cmd":"echo ok"},{"cmd":"git log","exit":1}]' >m.json
	run sfma-plan --check m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	base '"acceptance":[{"cmd":"echo ok"},{"cmd":"rm -rf x"}]' >m.json
	invalid m.json "acceptance[1].cmd: run: rm: not in allowedCommands"
	[ "${#lines[@]}" -eq 2 ]
	for bad in '{"cmd":"echo a; rm x"}|run: shell metacharacters are not allowed' \
	           '{"cmd":"git --git-dir=/x log"}|run: git --git-dir=/x: global flags are not permitted' \
	           '{"cmd":"git push"}|run: git push: subcommand not permitted' \
	           '{"cmd":"  "}|run: empty command' \
	           '{"cmd":"/bin/rm x"}|run: rm: not in allowedCommands'; do
		base "\"acceptance\":[${bad%%|*}]" >m.json
		invalid m.json "acceptance[0].cmd: ${bad#*|}" || return 1
	done
	for bad in '[]' '{}' '"echo ok"' '[1]' '[{"exit":0}]' '[{"cmd":5}]' '[{"cmd":"echo","exit":256}]' \
	           '[{"cmd":"echo","exit":-1}]' '[{"cmd":"echo","exit":"0"}]' '[{"cmd":"echo","exit":1.5}]'; do
		base "\"acceptance\":$bad" >m.json
		invalid m.json "acceptance" || return 1
	done
	local nine; nine=$(printf '{"cmd":"echo %d"},' 1 2 3 4 5 6 7 8 9)
	base "\"acceptance\":[${nine%,}]" >m.json
	invalid m.json "acceptance must be an array of 1 to 8"
	local eight; eight=$(printf '{"cmd":"echo %d"},' 1 2 3 4 5 6 7 8)
	base "\"acceptance\":[${eight%,}]" >m.json
	run sfma-plan --check m.json
	[ "$status" -eq 0 ]
}

@test "commandTimeoutSeconds and limits: each between its floor and the built-in maximum" {
	for ok in '"commandTimeoutSeconds":1' '"commandTimeoutSeconds":900' '"maxSeconds":3600,"commandTimeoutSeconds":3600' \
	          '"limits":{"memoryBytes":67108864,"processes":8,"fileSizeBytes":1048576,"cpuSeconds":1,"outputBytes":1024,"workspaceBytes":16777216}' \
	          '"limits":{"memoryBytes":4294967296,"processes":256,"fileSizeBytes":1073741824,"cpuSeconds":86400,"outputBytes":8192,"workspaceBytes":2147483648}' \
	          '"limits":{}'; do
		base "$ok" >m.json
		run sfma-plan --check m.json
		[ "$status" -eq 0 ] || { echo "$ok: $output"; return 1; }
	done
	base '"commandTimeoutSeconds":901' >m.json
	invalid m.json "commandTimeoutSeconds must be an integer from 1 to 900 (maxSeconds)"
	for bad in 0 -1 '"60"' 2.5 true; do
		base "\"commandTimeoutSeconds\":$bad" >m.json
		invalid m.json "commandTimeoutSeconds must be an integer" || return 1
	done
	for bad in memoryBytes:67108863 memoryBytes:4294967297 processes:7 processes:257 fileSizeBytes:1048575 \
	           fileSizeBytes:1073741825 cpuSeconds:0 cpuSeconds:86401 outputBytes:1023 outputBytes:8193 \
	           workspaceBytes:16777215 workspaceBytes:2147483649 'processes:"16"' processes:16.5; do
		base "\"limits\":{\"${bad%%:*}\":${bad#*:}}" >m.json
		invalid m.json "limits.${bad%%:*} must be an integer from" || return 1
	done
	base '"limits":[]' >m.json
	invalid m.json "limits must be an object"
}

@test "pricing: input and output prices required, >= 0; maxCostUsd needs pricing on every endpoint" {
	ep() { printf '{"name":"%s","provider":"mock","model":"x"%s}' "$1" "${2:+,\"pricing\":$2}"; }
	with() { # with ENDPOINTS [TOP-LEVEL MEMBERS]
		base "$2" | jq -c --argjson e "[$1]" '.modelEndpoints = $e' >m.json
	}
	with "$(ep a '{"inputPerMTok":3,"outputPerMTok":15}'),$(ep b '{"inputPerMTok":0,"outputPerMTok":0,"cachedInputPerMTok":0.3,"cacheWritePerMTok":3.75}')" '"maxCostUsd":0.5'
	run sfma-plan --check m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	with "$(ep a '{"inputPerMTok":3}')"
	invalid m.json "modelEndpoints[0].pricing.outputPerMTok is required"
	with "$(ep a '{"inputPerMTok":-1,"outputPerMTok":"2"}')"
	invalid m.json "modelEndpoints[0].pricing.inputPerMTok must be a number >= 0"
	[[ "$output" == *"- modelEndpoints[0].pricing.outputPerMTok must be a number >= 0"* ]]
	with "$(ep a '{"inputPerMTok":1,"outputPerMTok":1,"cacheWritePerMTok":-0.1}')"
	invalid m.json "modelEndpoints[0].pricing.cacheWritePerMTok must be a number >= 0"
	with "$(ep a '[1,2]')"
	invalid m.json "modelEndpoints[0].pricing must be an object"
	with "$(ep a '{"inputPerMTok":3,"outputPerMTok":15}'),$(ep b)" '"maxCostUsd":2'
	invalid m.json "maxCostUsd needs pricing on every endpoint: modelEndpoints[1] has none"
	for bad in 0 -1 '"5"' null; do
		with "$(ep a '{"inputPerMTok":3,"outputPerMTok":15}')" "\"maxCostUsd\":$bad"
		invalid m.json "maxCostUsd must be a number greater than 0" || return 1
	done
}

@test "requireConfinement is a boolean" {
	base '"requireConfinement":true' >m.json
	run sfma-plan --check m.json
	[ "$status" -eq 0 ]
	base '"requireConfinement":"yes"' >m.json
	invalid m.json "requireConfinement must be a boolean"
}
