#!/usr/bin/env bats
# README.md, followed as a new user follows it: in a fresh clone of the
# repository, its first command, the walk from `sfma init` to a real
# provider, and the batch example, each command as the README gives it
# and its output against the one the README shows. The one stand-in: a
# fake Anthropic server on 127.0.0.1 for the real one, given to the
# manifest the walk makes as its baseUrl. A README that drifts from what
# the programs do fails here.

bats_require_minimum_version 1.5.0
load helpers
load fixtures/model/helpers

setup() {
	require git
	require make
	require jq
	require python3
	git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1 || skip "not a git checkout: nothing to clone"
	model_setup
	unset SFMA_MOCK SFMA_MOCK_LATENCY_MS SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY NO_COLOR PAGER SFMA_PAGER \
	      MAKEFLAGS MFLAGS MAKELEVEL
	git clone -q "$REPO" clone
	README=$PWD/clone/README.md
}

teardown() {
	model_teardown
}

# block SECTION FIRST: the code block (its lines indented by four spaces,
# without them) of the README section headed SECTION whose first line
# begins with FIRST.
block() {
	awk -v sec="$1" -v first="$2" '
		/^## / { in_sec = (substr($0, 4) == sec); next }
		in_sec && !found && substr($0, 1, 4 + length(first)) == "    " first { found = 1 }
		found && /^    / { print substr($0, 5); next }
		found { exit }' "$README"
}

# comment LINE: what follows "# " on a line of a block.
comment() {
	sed -n 's/.*[^#]# //p' <<<"$1"
}

# The model the walk's real endpoint meets: Anthropic's Messages shape, the
# candidate as text, the work as native tool calls, then the judgments.
fake_anthropic() {
	local cand
	cand=$(jq -cn '{mission:"greet",successCriteria:["hello.txt exists"],loopRoles:[{name:"solo",duty:"greet"}],
		firstTasks:[],schedule:[]} | tojson')
	serve "$(jq -cn --argjson cand "$cand" '
		def text(t): {json:{id:"m",type:"message",role:"assistant",content:[{type:"text",text:t}],
		              stop_reason:"end_turn",usage:{input_tokens:120,output_tokens:30}}};
		def call(id; name; input): {json:{id:"m",type:"message",role:"assistant",
		              content:[{type:"tool_use",id:id,name:name,input:input}],
		              stop_reason:"tool_use",usage:{input_tokens:300,output_tokens:40}}};
		{"/v1/messages":[text($cand),
		  call("toolu_1"; "write"; {path:"hello.txt",content:"hello from the stand-in\n"}),
		  call("toolu_2"; "done"; {summary:"hello.txt greets"}),
		  text({pass:true,reason:"hello.txt greets"} | tojson),
		  text({criteria:[{criterion:"hello.txt exists",pass:true,evidence:[]}]} | tojson)]}')"
}

@test "README: the first command, the walk from sfma init to a real provider, and the batch, in a fresh clone, print what it shows" {
	# ---- the first command, word for word (make in parallel, as make allows)
	local first
	first=$(block "Two commands on a fresh Debian machine" "make deps")
	[[ "$first" == "make deps && make && cd examples/hello && "* ]]
	(cd clone && MAKEFLAGS=-j2 bash -ec "$first") >first.out 2>&1 || { cat first.out; return 1; }
	grep -q '^COMPLETED turns=' first.out
	grep -q '^AUDIT_OK ' first.out

	# ---- the walk: each line in one shell, in the clone, its output kept
	local walk i=0 script=$PWD/walk.sh
	walk=$(block 'From `sfma init` to a real provider' 'export PATH=')
	[ "$(wc -l <<<"$walk")" -ge 10 ]
	fake_anthropic
	echo 'set -e' >$script
	while IFS= read -r line; do
		i=$((i + 1))
		printf '{ %s\n} >%s/walk.%d 2>&1\n' "$line" "$PWD" "$i" >>$script
		# the stand-in for the real provider: where the manifest's real endpoint points
		[[ "$line" != *">real.json"* ]] ||
			printf 'jq --arg b "%s" ".modelEndpoints[0].baseUrl = \\$b" real.json >r.json && mv r.json real.json\n' \
				"$BASE" >>$script
	done <<<"$walk"
	(cd clone && bash $script) || { tail -n +1 walk.*; cat server.err; return 1; }
	# what the README says two of them print
	i=0
	while IFS= read -r line; do
		i=$((i + 1))
		case "$line" in
		"sfma check manifest.json"* | "sfma run manifest.json --apply"*)
			[ "$(cat walk.$i)" = "$(comment "$line")" ] ||
				{ echo "README says '$(comment "$line")' for '$line'; it printed:"; cat walk.$i; return 1; } ;;
		esac
	done <<<"$walk"
	# the real provider's run: completed, its calls the stand-in's, its report the conversation
	local demo=clone/demo
	jq -e '.verdict == "completed" and .modelCalls == 5' $demo/ws/.sfma/result.json
	[ "$(cat $demo/ws/hello.txt)" = "hello from the stand-in" ]
	[ "$(jq -s 'length' log.jsonl)" -eq 5 ]
	jq -s -e 'all(.[]; .headers["x-api-key"] == "...")' log.jsonl
	grep -q 'hello from the stand-in' $demo/real.html
	grep -q '<div class="tool">write <span class="id">toolu_1</span></div>' $demo/real.html
	grep -q 'id="conversation"' $demo/run.html
	# the missing key the README quotes
	run env -u ANTHROPIC_API_KEY "$PWD/clone/bin/sfma" check $demo/real.json
	[ "$status" -eq 1 ]
	[[ "$output" == *"error: endpoint claude (anthropic): ANTHROPIC_API_KEY is not set"* ]]
	grep -qF '`error: endpoint claude (anthropic): ANTHROPIC_API_KEY is' "$README"

	# ---- SFMA_MOCK as the README scripts it
	local mock
	mock=$(block 'From `sfma init` to a real provider' "SFMA_MOCK=")
	(cd $demo && PATH="$PWD/../bin:$PATH" bash -ec "$mock") >mock.out 2>&1 || { cat mock.out; return 1; }
	[ "$(cat mock.out)" = "COMPLETED turns=3 dryRun=false record=ws/.sfma/result.json" ]
	[ "$(cat $demo/ws/hello.txt)" = hello ]

	# ---- the batch, and the summary the README shows
	local batch shown
	batch=$(block "Batches" "cd examples/batch && make")
	shown=$(sed -n 's/^# //p' <<<"$batch")
	[ "$(wc -l <<<"$shown")" -eq 5 ]
	(cd clone && PATH="$PWD/bin:$PATH" bash -ec "$(head -1 <<<"$batch")") >batch.out 2>&1 || { cat batch.out; return 1; }
	[ "$(tail -5 batch.out)" = "$shown" ] || { echo "README shows:"; echo "$shown"; echo "make printed:"; cat batch.out; return 1; }
	(cd clone/examples/batch && PATH="$PWD/../../bin:$PATH" bash -ec "$(sed -n 's/^\(sfma summary [^#]*\)#.*/\1/p' <<<"$batch")") >summary.out
	[ "$(cat summary.out)" = "$shown" ]
}
