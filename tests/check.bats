#!/usr/bin/env bats
# sfma check MANIFEST (sfma-check(1)): one line per problem a run would
# meet, before it spends a token; exit 1 when any is fatal.

load helpers
bats_require_minimum_version 1.5.0

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK ANTHROPIC_API_KEY OPENAI_API_KEY GEMINI_API_KEY OPENAI_CODEX_TOKEN OPENAI_CODEX_ACCOUNT
	mkdir -p ws
	printf 'def add(a, b):\n    return a - b\n' >ws/calc.py
	printf 'import unittest\n' >ws/test_calc.py
}

# manifest ENDPOINTS [TOP-LEVEL MEMBERS]
manifest() {
	cat >m.json <<JSON
{"name":"fix","workspace":"ws","modelEndpoints":$1,
 "allowedCommands":["python3"],"inputs":["calc.py","test_calc.py"],"outputs":["calc.py"],
 "maxTurns":10,"dryRunDefault":false,"acceptance":[{"cmd":"python3 -m unittest test_calc"}]${2:+,$2}}
JSON
}

MOCK='[{"name":"m","provider":"mock","model":"x"}]'
CLAUDE='[{"name":"claude","provider":"anthropic","model":"claude-sonnet-4-5"}]'

@test "a manifest a run would accept, with its inputs and credentials, is ok (exit 0)" {
	manifest "$MOCK"
	run sfma check m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$output" = "m.json: ok" ]
	manifest "$CLAUDE"
	ANTHROPIC_API_KEY=sk-test run sfma check m.json
	[ "$status" -eq 0 ]
	[ "$output" = "m.json: ok" ]
	# sfma check is sfma-check, which answers by its own name too
	ANTHROPIC_API_KEY=sk-test run sfma-check m.json
	[ "$status" -eq 0 ]
	[ "$output" = "m.json: ok" ]
}

@test "the loader's reasons, one line each: a refused manifest is exit 1 and names the typo" {
	manifest "$MOCK" '"maxSecond":30,"acceptance":[{"cmd":"rm -rf ws"}]'
	sed -i 's/"acceptance":\[{"cmd":"python3 -m unittest test_calc"}\],//' m.json
	run sfma check m.json
	[ "$status" -eq 1 ]
	[ "${lines[0]}" = 'error: manifest: unknown key "maxSecond" (did you mean "maxSeconds"?)' ] || { echo "$output"; return 1; }
	[ "${lines[1]}" = 'error: acceptance[0].cmd: run: rm: not in allowedCommands' ]
	[ "${lines[2]}" = 'm.json: refused: a run would be TASK_INVALID (2 errors)' ]
	[ "${#lines[@]}" -eq 3 ]
	# the same reasons a run gives, and the run touches nothing
	run sfma run m.json
	[ "$status" -eq 2 ]
	[[ "$output" == *'- manifest: unknown key "maxSecond" (did you mean "maxSeconds"?)'* ]]
	[ ! -e ws/.sfma ]
	# an unreadable manifest is one error too
	run sfma check no-such.json
	[ "$status" -eq 1 ]
	[[ "${lines[0]}" == "error: "*"no-such.json"* ]]
}

@test "each declared input missing from the workspace is a line, and exit 1" {
	manifest "$MOCK"
	rm ws/test_calc.py
	run sfma check m.json
	[ "$status" -eq 1 ]
	[ "${lines[0]}" = "error: input test_calc.py: not in the workspace $PWD/ws (No such file or directory)" ] ||
		{ echo "$output"; return 1; }
	[ "${lines[1]}" = "m.json: 1 error, 0 warnings" ]
	# an input that leaves the workspace through a link is not there either
	ln -s /etc/passwd ws/test_calc.py
	run sfma check m.json
	[ "$status" -eq 1 ]
	[ "${lines[0]}" = "error: input test_calc.py: escapes the workspace via link (it would not be staged)" ]
	# no workspace at all: one line for all of its inputs
	rm -rf ws
	run sfma check m.json
	[ "$status" -eq 1 ]
	[[ "${lines[0]}" == "error: workspace $PWD/ws: No such file or directory: none of its 2 declared inputs can be there" ]]
	# and without inputs a missing workspace is fine: the run makes it
	jq '.inputs = []' m.json >n.json
	run sfma check n.json
	[ "$status" -eq 0 ]
	[ ! -e ws ]
}

@test "an endpoint whose credentials the environment lacks is a line per variable; a mock needs none" {
	manifest '[{"name":"claude","provider":"anthropic","model":"c"},{"name":"gpt","provider":"openai","model":"g"},
	           {"name":"gem","provider":"gemini","model":"m"},{"name":"cx","provider":"codex","model":"x"},
	           {"name":"grid","provider":"openai","model":"g","baseUrl":"https://grid.example.test/v1",
	            "auth":{"type":"oauth2-client-credentials","tokenUrl":"https://grid.example.test/token","clientIdEnv":"GRID_ID","clientSecretEnv":"GRID_SECRET"}},
	           {"name":"m","provider":"mock","model":"x"}]'
	run env -u GRID_ID -u GRID_SECRET sfma check m.json
	[ "$status" -eq 1 ]
	[ "$output" = "error: endpoint claude (anthropic): ANTHROPIC_API_KEY is not set
error: endpoint gpt (openai): OPENAI_API_KEY is not set
error: endpoint gem (gemini): GEMINI_API_KEY is not set
error: endpoint cx (codex): OPENAI_CODEX_TOKEN is not set
error: endpoint cx (codex): OPENAI_CODEX_ACCOUNT is not set
error: endpoint grid (openai): GRID_ID is not set
error: endpoint grid (openai): GRID_SECRET is not set
m.json: 7 errors, 0 warnings" ] || { echo "$output"; return 1; }
	# an empty variable is not a credential; the OAuth endpoint needs no OPENAI_API_KEY of its own
	ANTHROPIC_API_KEY= OPENAI_API_KEY=k GEMINI_API_KEY=k OPENAI_CODEX_TOKEN=t OPENAI_CODEX_ACCOUNT=a GRID_ID=i GRID_SECRET=s \
		run sfma check m.json
	[ "$status" -eq 1 ]
	[ "$output" = "error: endpoint claude (anthropic): ANTHROPIC_API_KEY is not set
m.json: 1 error, 0 warnings" ]
	ANTHROPIC_API_KEY=k OPENAI_API_KEY= GEMINI_API_KEY=k OPENAI_CODEX_TOKEN=t OPENAI_CODEX_ACCOUNT=a GRID_ID=i GRID_SECRET=s \
		run sfma check m.json
	[ "$status" -eq 1 ]
	[ "${lines[0]}" = "error: endpoint gpt (openai): OPENAI_API_KEY is not set" ]
	[ "${#lines[@]}" -eq 2 ]
}

@test "the object-form SFMA_MOCK without a judge queue is a warning with the fix; exit 0" {
	manifest "$MOCK"
	SFMA_MOCK='{"bootstrap":[],"tasks":{}}' run sfma check m.json
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = 'warning: SFMA_MOCK is an object without a "judge" queue: every task'"'"'s judgment will be invalid; add "judge":[...]' ] ||
		{ echo "$output"; return 1; }
	[ "${lines[1]}" = "m.json: 0 errors, 1 warning" ]
	SFMA_MOCK='{"bootstrap":[],"judge":[]}' run sfma check m.json
	[ "$output" = "m.json: ok" ]
	SFMA_MOCK='[]' run sfma check m.json
	[ "$output" = "m.json: ok" ]
	# an SFMA_MOCK the model stage could not read at all is fatal
	SFMA_MOCK='{"bootstrap":' run sfma check m.json
	[ "$status" -eq 1 ]
	[[ "${lines[0]}" == "error: SFMA_MOCK: "* ]]
	SFMA_MOCK='"x"' run sfma check m.json
	[ "$status" -eq 1 ]
	# without a mock endpoint SFMA_MOCK is nobody's business
	manifest "$CLAUDE"
	ANTHROPIC_API_KEY=k SFMA_MOCK='{"tasks":{}}' run sfma check m.json
	[ "$output" = "m.json: ok" ]
}

@test "problems of every kind together, control bytes never printed raw, nothing written" {
	manifest '[{"name":"c\u001b[2Jx","provider":"anthropic","model":"c"}]'
	rm ws/calc.py
	local before; before=$(ls -laR --time-style=full-iso . | sha256sum)
	SFMA_MOCK='{}' run sfma check m.json
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 3 ]
	[[ "$output" != *$'\e'* ]]
	[ "${lines[1]}" = "error: endpoint c?[2Jx (anthropic): ANTHROPIC_API_KEY is not set" ]
	[ "$(ls -laR --time-style=full-iso . | sha256sum)" = "$before" ]
	[ ! -e ws/.sfma ]
}

@test "usage: a missing or extra argument is exit 2; --help and --version" {
	run sfma-check
	[ "$status" -eq 2 ]
	[[ "$output" == *"sfma-check: missing MANIFEST"* ]]
	run sfma-check a.json b.json
	[ "$status" -eq 2 ]
	run sfma-check --bogus
	[ "$status" -eq 2 ]
	run sfma-check --help
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: sfma-check MANIFEST"* ]]
	run sfma-check --version
	[ "$status" -eq 0 ]
	[[ "$output" == "sfma-check "* ]]
}
