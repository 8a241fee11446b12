#!/usr/bin/env bats
# Long-term memory in git, tiered stores and the recall tool (sfma-plan(1)).

load helpers

setup() {
	cd "$BATS_TEST_TMPDIR"
	unset SFMA_MOCK
	cat >m.json <<'JSON'
{"name":"mem","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":12,"dryRunDefault":false,
 "tuning":{"fastTierMaxBytes":64}}
JSON
}

cand() { # cand MARKER
	printf '{"mission":"remember %s","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"keep %s"}],"firstTasks":[],"schedule":[]}' "$1" "$1"
}

finish='{"tool":"write","path":"out.txt","content":"x"}'
done_='{"tool":"done","summary":"s"}'

trace_has() {
	jq -s -e "any(.[]; $1)" ws/.sfma/trace.jsonl >/dev/null
}

verified() {
	run sfma-verify ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
}

run_a() {
	export SFMA_MOCK="[$(cand MARKER-A-7f3q),$finish,$done_]"
	run sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
}

@test "two runs leave two commits named after the runs, the second holding memory.json" {
	run_a
	export SFMA_MOCK="[$(cand second-run),$finish,$done_]"
	run sfma run m.json
	[ "$status" -eq 0 ]
	[ "$(git -C ws/.sfma/mem rev-list --count HEAD)" -eq 2 ]
	git -C ws/.sfma/mem log --format=%s | grep -qx 'run mem completed turns=3 calls=3'
	git -C ws/.sfma/mem show HEAD:memory.json | jq -e '.runs | length == 2'
	jq -e '.memory.store.commit == "'"$(git -C ws/.sfma/mem rev-parse HEAD)"'"' ws/.sfma/result.json
	trace_has '.kind=="store" and .data.stage=="commit" and .data.ok'
	verified
}

@test "stores are profiled and placed; git claims no semantic capability" {
	run_a
	trace_has '.kind=="store" and .data.op=="placement" and .data.placement.fast=="inproc" and (.data.measured|length)==3'
	trace_has '.kind=="store" and .data.kind=="git" and .data.capabilities.semantic==false and .data.capabilities.lexical and .data.capabilities.changePoint'
	run jq -s -e 'any(.[]; .kind=="store" and .data.capabilities.semantic==true)' ws/.sfma/trace.jsonl
	[ "$status" -eq 1 ]
	verified
}

@test "a record over fastTierMaxBytes becomes a committed git blob, never dangling" {
	run_a
	ref=$(jq -r 'select(.kind=="store" and .data.op=="put") | .data.ref' ws/.sfma/trace.jsonl)
	[[ "$ref" == git:* ]]
	# Tiers are placed by latency measured on this run, so which tier git
	# holds varies with the machine's load: the invariant is that the
	# record went to git's tier, never the fast one, with a pointer left
	# in the fast tier and the ceiling named.
	jq -s -e '(map(select(.kind=="store" and .data.op=="placement"))[0].data.placement | to_entries
	           | map(select(.value=="git"))[0].key) as $git_tier
	          | any(.[]; .kind=="store" and .data.op=="put" and .data.tier==$git_tier and .data.tier!="fast"
	                and .data.fastHolds=="pointer" and (.data.reason|contains("exceeds fastTierMaxBytes")))' ws/.sfma/trace.jsonl
	git -C ws/.sfma/mem ls-tree -r HEAD | grep -q "${ref#git:}"
	[ -z "$(git -C ws/.sfma/mem fsck --unreachable --no-reflogs 2>/dev/null)" ]
	verified
}

@test "every recall mode in run B finds what run A stored" {
	run_a
	id=$(jq -r 'select(.kind=="candidate") | .id' ws/.sfma/trace.jsonl)
	export SFMA_MOCK="[$(cand run-b),
	 {\"tool\":\"recall\",\"mode\":\"referential\",\"id\":\"$id\"},
	 {\"tool\":\"recall\",\"mode\":\"episodic\",\"since\":1,\"until\":8,\"limit\":5},
	 {\"tool\":\"recall\",\"mode\":\"lexical\",\"query\":\"MARKER-A-7f3q\"},
	 {\"tool\":\"recall\",\"mode\":\"change\",\"query\":\"MARKER-A-7f3q\"},
	 {\"tool\":\"recall\",\"mode\":\"semantic\",\"query\":\"remember marker\"},
	 $finish,$done_]"
	run sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	for mode in referential episodic lexical change semantic; do
		trace_has ".kind==\"store\" and .data.op==\"recall\" and .data.mode==\"$mode\" and .data.found==true and .data.count>=1" ||
			{ echo "mode $mode found nothing"; grep recall ws/.sfma/trace.jsonl; return 1; }
	done
	# referential answers from the tier the file store was placed in (by
	# this run's measured latency, so not a fixed name)
	file_tier=$(jq -r 'select(.kind=="store" and .data.op=="placement") | .data.placement | to_entries[] | select(.value=="file") | .key' ws/.sfma/trace.jsonl | tail -1)
	[ -n "$file_tier" ]
	[ "$file_tier" != fast ]
	trace_has ".kind==\"store\" and .data.op==\"recall\" and .data.mode==\"referential\" and .data.tier==\"$file_tier\""
	trace_has '.kind=="store" and .data.op=="recall" and .data.mode=="semantic" and .data.degraded==true'
	verified
}

@test "recall refusals: unknown mode, an id that climbs out, an empty query" {
	for call in '{"tool":"recall","mode":"telepathy"}|unknown recall mode' \
	            '{"tool":"recall","mode":"referential","id":"../../../etc/passwd"}|must be an entry id' \
	            '{"tool":"recall","mode":"lexical","query":""}|query must be'; do
		rm -rf ws
		export SFMA_MOCK="[$(cand x),${call%%|*},$finish,$done_]"
		run sfma run m.json
		[ "$status" -eq 1 ]
		trace_has ".kind==\"verdict\" and .data.pass==false and (.data.reason|contains(\"${call##*|}\"))"
		verified
	done
}

@test "guard: .sfma/mem as a symlink aborts the run before git touches anything" {
	mkdir -p elsewhere ws/.sfma
	ln -s "$PWD/elsewhere" ws/.sfma/mem
	export SFMA_MOCK="[$(cand x),$finish,$done_]"
	run sfma run m.json
	[ "$status" -eq 1 ]
	[[ "$output" == *"must not be a symlink"* ]]
	[ -z "$(ls -A elsewhere)" ]
	run grep -q '"kind":"call"' ws/.sfma/trace.jsonl
	[ "$status" -eq 1 ]
	verified
}

# An enclosing repository, outer/, with one commit; its state noted.
outer_repository() {
	git init -q outer
	git -C outer -c user.name=t -c user.email=t@t commit -q --allow-empty -m base
	objects=$(find outer/.git -type f | wc -l)
	refs=$(git -C outer for-each-ref)
	commits=$(git -C outer rev-list --count --all)
}

# refused_in_outer PHRASE: a run in outer/ws ends with PHRASE, exit 1,
# nothing lands in outer's repository, and what was traced verifies.
refused_in_outer() {
	sed 's/"workspace":"ws"/"workspace":"outer\/ws"/' m.json >outer.json
	export SFMA_MOCK="[$(cand x),$finish,$done_]"
	run sfma run outer.json
	[ "$status" -eq 1 ]
	[[ "$output" == *"$1"* ]] || { echo "$output"; return 1; }
	[ "$(find outer/.git -type f | wc -l)" -eq "$objects" ]
	[ "$(git -C outer for-each-ref)" = "$refs" ]
	[ "$(git -C outer rev-list --count --all)" -eq "$commits" ]
	run sfma-verify outer/ws
	[ "$status" -eq 0 ]
}

@test "guard: a .git file pointing into an enclosing repository; not one object lands there" {
	outer_repository
	mkdir -p outer/ws/.sfma/mem
	echo "gitdir: $PWD/outer/.git" >outer/ws/.sfma/mem/.git
	refused_in_outer "must be a real repository directory"
}

@test "guard: a .git directory with a commondir into an enclosing repository; not one object lands there" {
	outer_repository
	git init -q outer/ws/.sfma/mem
	echo "$PWD/outer/.git" > outer/ws/.sfma/mem/.git/commondir
	refused_in_outer "must be a real repository directory"
}

@test "guard: a store git does not resolve to itself is an enclosing repository" {
	outer_repository
	mkdir -p outer/ws/.sfma/mem/.git  # an empty .git: git would look further up
	refused_in_outer "enclosing repository"
}

@test "without git on PATH runs complete, the store says unavailable, recall does not crash" {
	mkdir nogit
	for t in jq; do ln -s "$(command -v $t)" nogit/; done
	export SFMA_MOCK="[$(cand x),{\"tool\":\"recall\",\"mode\":\"lexical\",\"query\":\"x\"},{\"tool\":\"recall\",\"mode\":\"change\",\"query\":\"x\"},{\"tool\":\"recall\",\"mode\":\"referential\",\"id\":\"none\"},$finish,$done_]"
	PATH="$SFMA_BINDIR:$PWD/nogit" run "$SFMA_BINDIR/sfma" run m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ ! -d ws/.sfma/mem/.git ]
	trace_has '.kind=="store" and .data.kind=="git" and .data.available==false'
	trace_has '.kind=="store" and .data.op=="recall" and .data.mode=="lexical" and .data.available==false'
	jq -e '.memory.store.available == false' ws/.sfma/result.json
	verified
}

@test "one commit per run builds on the last: a record a killed run left behind is committed by the next" {
	run_a
	# a record written after the last commit, as by a run killed before it committed
	echo '{"left":"behind-9q2"}' > ws/.sfma/mem/records/candidate-9999.json
	export SFMA_MOCK="[$(cand second-run),$finish,$done_]"
	run sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(git -C ws/.sfma/mem rev-list --count HEAD)" -eq 2 ]
	git -C ws/.sfma/mem show HEAD:records/candidate-9999.json | grep -q behind-9q2
	# the first run's record is still in the tree, and no record twice in the history's objects
	[ "$(git -C ws/.sfma/mem ls-tree --name-only HEAD records/ | wc -l)" -eq 3 ]
	[ "$(git -C ws/.sfma/mem rev-parse HEAD^)" = "$(jq -r 'select(.kind=="store" and .data.stage=="commit") | .data.sha' ws/.sfma/trace.jsonl | head -1)" ]
	git -C ws/.sfma/mem fsck --strict 2>&1
	verified
}

@test "a store whose HEAD is detached still gets its commit, on that HEAD" {
	run_a
	first=$(git -C ws/.sfma/mem rev-parse HEAD)
	# (the store's index is not kept: -f over the work tree's files)
	git -C ws/.sfma/mem checkout -q -f --detach
	export SFMA_MOCK="[$(cand second-run),$finish,$done_]"
	run sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(git -C ws/.sfma/mem rev-parse HEAD^)" = "$first" ]
	git -C ws/.sfma/mem log -1 --format=%s | grep -qx 'run mem completed turns=3 calls=3'
	jq -e '.memory.store.commit == "'"$(git -C ws/.sfma/mem rev-parse HEAD)"'"' ws/.sfma/result.json
	verified
}

@test "a run starts three git processes or fewer, and none runs a hook, a pager or maintenance" {
	mkdir -p wrap
	real=$(command -v git)
	# The log is kept where the process that runs git may write (it is
	# confined to the store: sfma(1), CONFINEMENT).
	printf '#!/bin/sh\necho "$*" >> %s/ws/.sfma/mem/git.log\nexec %s "$@"\n' "$PWD" "$real" > wrap/git
	chmod +x wrap/git
	run_a
	PATH="$PWD/wrap:$PATH" run_a
	# The second run: the guard's rev-parse, the hash-object of the record
	# over fastTierMaxBytes, one fast-import, which keeps its pack (no
	# unpack-objects after it).
	[ "$(grep -c . ws/.sfma/mem/git.log)" -le 3 ] || { cat ws/.sfma/mem/git.log; return 1; }
	grep -q ' rev-parse --absolute-git-dir' ws/.sfma/mem/git.log
	grep -q ' fast-import' ws/.sfma/mem/git.log
	run grep -E ' (add|commit|config|maintenance|--version)( |$)' ws/.sfma/mem/git.log
	[ "$status" -eq 1 ] || { cat ws/.sfma/mem/git.log; return 1; }
	verified
}

@test "each run's commit is one pack, not loose objects; past 32 packs they are folded into one, history whole" {
	packs() { find ws/.sfma/mem/.git/objects/pack -name '*.pack' | wc -l; }
	# the commit fast-import wrote is in the pack, not a loose object
	commit_loose() { h=$(git -C ws/.sfma/mem rev-parse HEAD); [ -e "ws/.sfma/mem/.git/objects/${h:0:2}/${h:2}" ]; }
	mock "$(cand one)" "$finish" "$done_"
	sfma run m.json >/dev/null 2>&1
	[ "$(packs)" -eq 1 ]
	commit_loose && return 1
	n=1
	while [ "$n" -lt 32 ]; do
		mock "$(cand one)" "$finish" "$done_"
		sfma run m.json >/dev/null 2>&1
		n=$((n + 1))
	done
	[ "$(packs)" -eq 32 ]
	mock "$(cand one)" "$finish" "$done_"
	sfma run m.json >/dev/null 2>&1
	[ "$(packs)" -eq 1 ]
	[ "$(git -C ws/.sfma/mem rev-list --count HEAD)" -eq 33 ]
	git -C ws/.sfma/mem fsck --strict --no-dangling
	# every run's memory.json is still there to be read back
	[ "$(git -C ws/.sfma/mem log --format=%H -- memory.json | wc -l)" -eq 33 ]
	mock "$(cand one)" "$finish" "$done_"
	sfma run m.json >/dev/null 2>&1
	[ "$(packs)" -eq 2 ]
	verified
}
