#!/usr/bin/env bats
# sfma-model loads libcurl only when an attempt needs HTTP (sfma-model(1)):
# a stage that only talks to the mock never maps it, one that reaches an
# HTTP endpoint does, and a libcurl that cannot be loaded fails those
# attempts with one clear line while the mock goes on answering. What is
# mapped is read from /proc/PID/maps of the live stage, between requests.

load helpers
bats_require_minimum_version 1.5.0

load fixtures/model/helpers

setup() {
	model_setup
	MODEL_PID=
}

teardown() {
	if [ -n "$MODEL_PID" ]; then
		kill "$MODEL_PID" 2>/dev/null || true
		wait "$MODEL_PID" 2>/dev/null || true
	fi
	model_teardown
}

# start_model [PREFIX...]: PREFIX... sfma-model m.json, fed through a fifo
# on fd 7, its replies read from another on fd 8 (bats keeps fd 3).
start_model() {
	mkfifo to-model from-model
	"$@" sfma-model m.json < to-model > from-model 2> err.txt &
	MODEL_PID=$!
	exec 7> to-model 8< from-model
}

# ask LINE: send one request; its reply lands in REPLY_LINE. The wait is
# a safety net for a stage that never answers, not a measure.
ask() {
	printf '%s\n' "$1" >&7
	IFS= read -r -t 60 REPLY_LINE <&8 || { echo "no reply"; cat err.txt; return 1; }
}

# reply QUERY: jq -e QUERY on the last reply.
reply() {
	jq -e "$1" >/dev/null <<<"$REPLY_LINE" || { echo "reply fails $1: $REPLY_LINE"; return 1; }
}

# curl_mapped: how many mappings of the live stage are libcurl's.
curl_mapped() {
	[ "$(cat "/proc/$MODEL_PID/comm")" = sfma-model ] || { echo "pid $MODEL_PID is not sfma-model"; return 1; }
	grep -c 'libcurl\.so' "/proc/$MODEL_PID/maps" || true
}

# stop_model: end of input; the stage must exit 0.
stop_model() {
	exec 7>&-
	cat <&8 >/dev/null
	exec 8<&-
	local pid=$MODEL_PID
	MODEL_PID=
	wait "$pid"
}

MOCK_EP='{"name":"m","provider":"mock","model":"x"}'

@test "a mock-only stage never maps libcurl, before or after it answers" {
	manifest "[$MOCK_EP]"
	start_model
	ask "$(req 1 reasoning 5)"
	reply '.ok and .endpoint == "m"'
	ask "$(req 2 mechanical 5)"
	reply '.ok and .endpoint == "m" and .calls[0].requestBytes > 0'
	[ "$(curl_mapped)" -eq 0 ]
	stop_model
	[ ! -s err.txt ] || { cat err.txt; return 1; }
}

@test "an HTTP endpoint loads libcurl with its first attempt, and the stage answers through it" {
	serve '{"/v1/chat/completions":[{"json":{"choices":[{"message":{"role":"assistant","content":"openai says hi"}}]}}]}'
	manifest "[{\"name\":\"o\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY
	start_model
	# nothing loaded before a request needs it
	ask '{"id":0,"bad":true}'
	reply '(.ok | not) and (.error | startswith("bad request"))'
	[ "$(curl_mapped)" -eq 0 ]
	ask "$(req 1 mechanical 5)"
	reply '.ok and .endpoint == "o" and .text == "openai says hi" and .calls[0].status == 200'
	[ "$(curl_mapped)" -gt 0 ]
	# loaded once: a second request goes through the same library
	ask "$(req 2 reasoning 5)"
	reply '.ok and .endpoint == "o"'
	stop_model
	[ "$(requests_to /v1/chat/completions)" -eq 2 ]
	secret_free
}

@test "a mock endpoint ranked first answers without loading libcurl for the HTTP one behind it" {
	serve '{"/v1/chat/completions":[{"json":{"choices":[{"message":{"role":"assistant","content":"openai says hi"}}]}}]}'
	manifest "[$MOCK_EP,{\"name\":\"o\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"$BASE\"}]"
	export OPENAI_API_KEY=$OPENAI_KEY
	start_model
	ask "$(req 1 mechanical 5)"
	reply '.ok and .endpoint == "m" and (.calls | length) == 1'
	[ "$(curl_mapped)" -eq 0 ]
	# the mock down (seeded state): the HTTP endpoint is tried, and loads it
	ask "$(req 2 mechanical 5 10000 '.state = {"m":{"calls":1,"failures":1,"downUntil":9999999999999}}')"
	reply '.ok and .endpoint == "o"'
	[ "$(curl_mapped)" -gt 0 ]
	stop_model
}

# The library made unreadable in a mount namespace of the stage's own
# (we are root): dlopen finds the name but cannot load the file.
@test "libcurl that cannot be loaded: each HTTP attempt fails with one line naming it, the mock still answers, no crash" {
	require unshare
	local lib
	lib=$(ldconfig -p | awk '/libcurl\.so\.4 .*x86-64/ { print $NF; exit }')
	[ -n "$lib" ] || lib=$(ldconfig -p | awk '/libcurl\.so\.4 / { print $NF; exit }')
	[ -e "$lib" ] || { echo "no libcurl.so.4 in ldconfig -p"; return 1; }
	: > empty
	manifest "[{\"name\":\"o\",\"provider\":\"openai\",\"model\":\"g\",\"baseUrl\":\"http://127.0.0.1:9\"},$MOCK_EP]"
	export OPENAI_API_KEY=$OPENAI_KEY
	start_model unshare -m sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' sh "$PWD/empty" "$lib"
	ask "$(req 1 mechanical 1)"
	reply '(.ok | not) and (.calls | length) == 1 and .calls[0].endpoint == "o" and .calls[0].errorClass == "transport"'
	reply '.calls[0].error | test("^o: [^\n]*libcurl\\.so[^\n]*$")'
	reply '.error | test("last: o: [^\n]*libcurl\\.so")'
	ask "$(req 2 mechanical 5)"
	reply '.ok and .endpoint == "m" and (.calls | map(.endpoint) | .[-1] == "m" and (.[:-1] | all(. == "o")))'
	reply '.calls[:-1] | all(.errorClass == "transport" and (.error | test("libcurl\\.so")))'
	[ "$(curl_mapped)" -eq 0 ]
	stop_model
	# said once on stderr, however many attempts failed
	[ "$(wc -l < err.txt)" -eq 1 ] || { cat err.txt; return 1; }
	grep -q '^sfma-model: .*libcurl\.so.*: only mock endpoints can answer$' err.txt || { cat err.txt; return 1; }
}
