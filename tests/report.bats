#!/usr/bin/env bats
# sfma-report: one run as a self-contained HTML page, checked in a real
# browser (headless Chromium): the key facts are in the DOM, nothing is
# fetched, no script runs, hostile strings stay text, AUDIT_INVALID shows.

bats_require_minimum_version 1.5.0
load helpers
load fixtures/report/eventful
load fixtures/model/helpers
load fixtures/report/native
load fixtures/report/loops
load fixtures/report/acceptance

CHROME="$BATS_TEST_DIRNAME/fixtures/report/chrome.sh"
CDP="$BATS_TEST_DIRNAME/fixtures/report/cdp.py"

setup() {
	require jq
	require python3
	require chromium
	model_setup
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY
}

teardown() {
	model_teardown
}

# measure PAGE WIDTH EXPRESSION [PNG]: the value of a JavaScript expression
# in the page as the browser laid it out at that width (fixtures/report/cdp.py),
# as JSON on stdout; no console message allowed.
measure() {
	python3 "$CDP" "$@" 2>cdp.err || { cat cdp.err >&2; return 1; }
	! grep -q CONSOLE cdp.err || { cat cdp.err >&2; return 1; }
}

# png_size PNG: "WIDTH HEIGHT" of a PNG file.
png_size() {
	python3 -c 'import struct,sys; d=open(sys.argv[1],"rb").read(24); assert d[:8]==b"\x89PNG\r\n\x1a\n"; print(*struct.unpack(">II", d[16:24]))' "$1"
}

# dom PAGE: the page's DOM after loading, on stdout; the browser's console
# messages (errors, CSP violations) in console.log.
dom() {
	"$CHROME" --dump-dom "file://$PWD/$1" 2>browser.log
	grep ':CONSOLE' browser.log >console.log || true
}

no_console_messages() {
	[ ! -s console.log ] || { cat console.log; return 1; }
}

@test "the page shows the run's key facts, verified, in a browser without a console message" {
	eventful_run evidence
	run sfma-report ws -o report.html
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	dom report.html >dom.html
	no_console_messages
	grep -q '<title>sfma report: eventful — failed</title>' dom.html
	grep -q 'class="audit ok" id="audit"><b>AUDIT_OK</b>' dom.html
	grep -q "$(sfma-verify ws | cut -d' ' -f2-)" dom.html
	grep -q '<div class="v failed">failed</div>' dom.html
	# the refused write and its reason, the marker and its output, the summary
	grep -q '<span class="badge refused">REFUSED</span> write ../evil: outside workspace' dom.html
	grep -q 'run echo MARKER-42: exit=0' dom.html
	grep -q 'stdout:MARKER-42' dom.html
	grep -q 'id="summary"><b>Summary</b> (the model.s done)' dom.html
	grep -q 'Wrote out.txt; SUMMARY-7 all done' dom.html
	grep -q '<div class="v ">12600 / 492</div>' dom.html
	# the refusals, listed before the timeline, each linked to its row
	grep -q '<div class="note why" id="refusals"><b>Refused</b>' dom.html
	grep -q '<li><a href="#line-[0-9]*">T6</a> write ../evil: outside workspace</li>' dom.html
	# the timeline: one cell per turn, to scale bars for calls and the command
	[ "$(grep -o '<rect[^>]*rx="4"' dom.html | wc -l)" -eq 8 ]
	grep -q 'T5 write' dom.html
	grep -q 'fill="#8e44ad"' dom.html
	# one table row per trace line
	[ "$(grep -o '<tr id="line-' dom.html | wc -l)" -eq "$(wc -l <ws/.sfma/trace.jsonl)" ]
}

@test "the page fetches nothing and carries no script" {
	eventful_run evidence
	sfma-report ws -o report.html
	grep -q "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; " report.html
	run grep -ci '<script\|<link\|<iframe\|<object\|<embed\|<img\|@import\|url(' report.html
	[ "$output" = 0 ]
	# every link stays inside the page; the one URL is the SVG namespace name
	[ -z "$(grep -o 'href="[^"]*"' report.html | grep -Ev '^href="#(line|loop|prompt)-[0-9]+"$')" ]
	# and each names a place the page has
	for id in $(grep -o 'href="#[^"]*"' report.html | sed 's/href="#//; s/"$//' | sort -u); do
		grep -q "id=\"$id\"" report.html || { echo "no $id"; return 1; }
	done
	[ "$(grep -o 'https\?://[^" ]*' report.html | sort -u)" = "http://www.w3.org/2000/svg" ]
	# and the browser, asked to load it, logs no blocked request
	dom report.html >/dev/null
	no_console_messages
}

@test "a hostile reply and path stay text: no script runs, the SVG and the table stay whole" {
	eventful_run evidence
	sfma-report ws -o report.html
	# without the page's CSP, so an escaping mistake would run the script
	sed "/Content-Security-Policy/d" report.html >open.html
	grep -q Content-Security-Policy open.html && return 1
	for page in report.html open.html; do
		dom "$page" >dom.html
		no_console_messages
		grep -q '<title>sfma report: eventful — failed</title>' dom.html
		run grep -c PWNED1 <(grep -o '<title>.*</title>' dom.html)
		[ "$output" = 0 ]
		run grep -ci '<script' dom.html
		[ "$output" = 0 ]
		# the strings are shown, as text
		grep -q "write &lt;/svg&gt;&lt;script&gt;document.title=&#39;PWNED2&#39;&lt;/script&gt;: not a declared output" dom.html ||
			grep -q "write &lt;/svg&gt;&lt;script&gt;document.title='PWNED2'&lt;/script&gt;: not a declared output" dom.html
		grep -q "not json &lt;script&gt;document.title=.PWNED1.&lt;/script&gt;&lt;/svg&gt;" dom.html
		# the SVG still holds every turn after the hostile one, the table every row
		grep -q '>T8 done</text>' dom.html
		grep -q "<tr id=\"line-$(wc -l <ws/.sfma/trace.jsonl)\"" dom.html
		grep -q '</footer>' dom.html
	done
}

@test "AUDIT_INVALID is shown first and prominently when the trace was altered" {
	eventful_run
	sed -i 's/outside workspace/inside workspace/' ws/.sfma/trace.jsonl
	run sfma-verify ws
	[ "$status" -eq 1 ]
	run sfma-report ws -o report.html
	[ "$status" -eq 0 ]
	dom report.html >dom.html
	no_console_messages
	grep -q 'class="audit invalid" id="audit" role="alert"><b>AUDIT_INVALID</b>' dom.html
	grep -q 'nothing on this page can be trusted' dom.html
	# the record's claim to seal the run is not taken on trust either
	grep -q '<div class="k">sealed</div><div class="v bad">unverified</div>' dom.html
	grep -q 'AUDIT_INVALID</b><span class="mono">trace line [0-9]*: hash mismatch' dom.html
	# before the summary, the timeline and the entries
	[ "$(grep -n 'id="audit"' dom.html | cut -d: -f1)" -lt "$(grep -n '<h2>Timeline' dom.html | cut -d: -f1)" ]
	grep -c 'AUDIT_OK' dom.html && return 1
	true
}

@test "without sfma-verify beside it the page says the run is not verified" {
	eventful_run
	mkdir alone && cp "$SFMA_BINDIR/sfma-report" alone/
	run alone/sfma-report ws -o report.html
	[ "$status" -eq 0 ]
	grep -q 'class="audit unknown" id="audit" role="alert"><b>NOT VERIFIED</b>' report.html
	grep -q 'sfma-verify not found beside sfma-report' report.html
	grep -c 'AUDIT_OK' report.html && return 1
	true
}

@test "-o replaces FILE atomically with what standard output would get; the workspace is not touched" {
	eventful_run evidence
	local before
	before=$(find ws -printf '%p %s %T@\n' | sort)
	sfma-report ws >stdout.html
	echo old >report.html
	sfma-report ws -o report.html
	cmp stdout.html report.html
	[ "$(ls -A | grep -c '^\.\|tmp')" -eq 0 ]
	[ "$(find ws -printf '%p %s %T@\n' | sort)" = "$before" ]
	run --separate-stderr sfma-report ws -o no/such/dir/report.html
	[ "$status" -eq 1 ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ "$stderr" == "sfma-report: no/such/dir/report.html: "* ]]
}

@test "-o FILE is mode 0600 under umask 022, also over a file of mode 0644: it shows evidence the store keeps 0600" {
	eventful_run evidence
	local out_sha
	out_sha=$(jq -r 'select(.kind == "verdict" and .data.run) | .evidence.output.sha256' ws/.sfma/trace.jsonl)
	[ "$(stat -c %a "ws/.sfma/evidence/$out_sha")" = 600 ]
	(umask 022 && sfma-report ws -o new.html)
	grep -q 'stdout:MARKER-42' new.html
	[ "$(stat -c %a new.html)" = 600 ]
	echo old >old.html && chmod 644 old.html
	(umask 022 && sfma-report ws -o old.html)
	[ "$(stat -c %a old.html)" = 600 ]
	cmp new.html old.html
	# standard output is the shell's file, made with the umask
	(umask 022 && sfma-report ws >stdout.html)
	[ "$(stat -c %a stdout.html)" = 644 ]
}

@test "--run picks a run of a trace with three; the report of an older run is not sealed" {
	cp -r "$INTEROP/multirun/ws" mr && chmod -R u+w mr
	sfma-report mr --run 2 -o r2.html
	grep -q 'run 2 of 3' r2.html
	# the table's refused rows (the conversation shows them again)
	[ "$(grep -c '<td class="what"><span class="badge refused">REFUSED</span>' r2.html)" -eq 3 ]
	grep -q '<div class="k">sealed</div><div class="v halted">no</div>' r2.html
	grep -q 'AUDIT_OK' r2.html
	sfma-report mr -o r3.html
	grep -q 'run 3 of 3' r3.html
	grep -q '<div class="k">sealed</div><div class="v ">yes</div>' r3.html
	run sfma-report mr --run 9
	[ "$status" -eq 1 ]
}

@test "a hostile trace still makes a whole page: invalid lines are rows, control characters are visible" {
	mkdir -p h/.sfma
	printf '%s\n' '{"kind":"clock-anchor","data":{"wallMs":1795985236340}}' \
		'{"kind":"lifecycle","data":{"from":null,"to":"probation"}}' \
		'not json </table></svg><script>document.title="PWNED3"</script>' \
		'{"kind":"task","loop":1,"data":{"call":{"tool":"write","path":"\u001b[2J\u202e<b>x</b>"}}}' \
		'{"kind":"call","loop":1,"data":{"endpoint":"<i>e</i>","latencyMs":1e308,"ok":true}}' \
		'{"kind":"\u001b[2J\r\u202e<b>k</b>","data":{}}' \
		'{"kind":"lifecycle","data":{"from":"probation","to":"halted-<b>v</b>\u001b[2J"}}' >h/.sfma/trace.jsonl
	printf '{"torn":' >>h/.sfma/trace.jsonl
	run sfma-report h -o h.html
	[ "$status" -eq 0 ]
	dom h.html >dom.html
	no_console_messages
	grep -q '<title>sfma report: run 1 — halted-&lt;b&gt;v&lt;/b&gt;\\x1b\[2J</title>' dom.html
	grep -q '<div class="v halted">halted-&lt;b&gt;v&lt;/b&gt;\\x1b\[2J</div>' dom.html
	grep -q '<span class="badge invalid">INVALID</span> not a trace entry: invalid JSON' dom.html
	grep -q 'write \\x1b\[2J\\u{202e}&lt;b&gt;x&lt;/b&gt;' dom.html
	grep -q '&lt;i&gt;e&lt;/i&gt;' dom.html
	grep -q 'torn final line' dom.html
	grep -q 'NOT VERIFIED\|AUDIT_INVALID' dom.html
	run grep -ci '<script\|<b>x\|<i>e\|<b>v\|<b>k' dom.html
	[ "$output" = 0 ]
	# no control character of the trace is in the page, not even in an attribute
	run grep -c $'[\001-\010\013-\037\177]\|\xe2\x80\xae' h.html
	[ "$output" = 0 ]
	grep -q 'data-kind="\\x1b\[2J\\r\\u{202e}&lt;b&gt;k&lt;/b&gt;"' h.html
}

@test "an entry with evidence but no kind is a row of the page, its evidence flagged: no crash" {
	mkdir -p ws/.sfma
	echo '{"evidence":{"reply":{"bytes":1,"sha256":"2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"}}}' \
		>ws/.sfma/trace.jsonl
	run --separate-stderr sfma-report ws -o r.html
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	grep -q '<tr id="line-1" class="" data-kind=""><td class="mono">+0.000s</td><td>1</td><td>L0</td><td></td><td></td><td class="what">entry without a kind<div><span class="badge halt">evidence missing</span> reply</div></td></tr>' r.html
}

@test "a FIFO or a link in place of result.json or the trace is refused; a FIFO elsewhere is never waited on" {
	eventful_run evidence
	cp -r ws keep
	rm ws/.sfma/result.json && mkfifo ws/.sfma/result.json
	run --separate-stderr timeout 5 sfma-report ws -o r.html
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-report: ws/.sfma/result.json: not a regular file" ]
	[ ! -e r.html ]
	rm ws/.sfma/result.json && ln -s ../../keep/.sfma/result.json ws/.sfma/result.json
	run --separate-stderr timeout 5 sfma-report ws
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-report: ws/.sfma/result.json: is a symbolic link, not followed" ]
	rm -r ws && cp -r keep ws
	rm ws/.sfma/trace.jsonl && mkfifo ws/.sfma/trace.jsonl
	run --separate-stderr timeout 5 sfma-report ws
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-report: ws/.sfma/trace.jsonl: not a regular file" ]
	rm -r ws && cp -r keep ws
	local out_sha
	out_sha=$(jq -r 'select(.kind == "verdict" and .data.run) | .evidence.output.sha256' ws/.sfma/trace.jsonl)
	rm "ws/.sfma/evidence/$out_sha" && mkfifo "ws/.sfma/evidence/$out_sha"
	mkfifo ws/.sfma/evidence/journal
	rm -f ws/.sfma/memory.json && mkfifo ws/.sfma/memory.json
	run --separate-stderr timeout 5 sfma-report ws -o r.html
	[ "$status" -eq 0 ]
	grep -q '<span class="badge error">evidence altered</span> output' r.html
}

@test "a screenshot of the page renders" {
	eventful_run evidence
	sfma-report ws -o report.html
	"$CHROME" --screenshot="$PWD/report.png" --window-size=1280,1600 "file://$PWD/report.html" 2>browser.log
	grep ':CONSOLE' browser.log && return 1
	[ "$(head -c 8 report.png | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]
	[ "$(stat -c %s report.png)" -gt 20000 ]
}

@test "usage errors exit 2; an unreadable trace is one line and exit 1" {
	run sfma-report
	[ "$status" -eq 2 ]
	run sfma-report --bogus ws
	[ "$status" -eq 2 ]
	[[ "$output" == "sfma-report: unknown option --bogus"* ]]
	run sfma-report a b
	[ "$status" -eq 2 ]
	run sfma-report ws -o
	[ "$status" -eq 2 ]
	run sfma-report --run 0 ws
	[ "$status" -eq 2 ]
	run --separate-stderr sfma-report nowhere
	[ "$status" -eq 1 ]
	[ "$stderr" = "sfma-report: nowhere: No such file or directory" ]
	run sfma-report --version
	[ "$status" -eq 0 ]
	[[ "$output" == "sfma-report "[0-9]* ]]
	run sfma-report --help
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: sfma-report WORKSPACE"* ]]
}

# What a page at one width must show of the native run: nothing escaped
# twice, the conversation, each call beside its result, the diff; and
# nothing wider than the screen.
NATIVE_PAGE_FACTS='(() => {
	const q = (s) => Array.from(document.querySelectorAll(s));
	const text = document.body.innerText;
	const pairs = q("#conversation .pair").map((p) => {
		const [a, b] = p.querySelectorAll(":scope > .side");
		const ra = a.getBoundingClientRect(), rb = b.getBoundingClientRect();
		return {call: a.innerText, result: b.innerText, beside: rb.left >= ra.right - 1 && Math.abs(rb.top - ra.top) < 2,
		        below: rb.top >= ra.bottom - 1};
	});
	return {
		overflow: document.documentElement.scrollWidth - innerWidth,
		escapedQuote: text.includes("\\\""), escapedNewline: text.includes("\\\\n"),
		backslashN: text.includes("\\n"), providerJson: /"native"|"results"|"function"|"arguments"/.test(text),
		exchanges: q("#conversation .exchange").length,
		prompts: q("#conversation details.prompt").length,
		prompt: (document.querySelector("#prompt-1 pre") || {}).textContent || "",
		pairs: pairs,
		del: q("#conversation pre.diff .del").map((e) => e.textContent),
		add: q("#conversation pre.diff .add").map((e) => e.textContent),
		newFile: q("#conversation .tag.new").length,
		costs: q("#conversation .xhead").map((e) => e.innerText).filter((t) => /\$0\.\d{4}/.test(t)).length,
		loopCost: (document.querySelector("#loops tr[data-loop=\"1\"]") || {}).innerText || "",
		lanes: q("#timeline svg g.lane[data-loop]").map((g) => g.getAttribute("data-loop"))
	};
})()'

@test "the report of a native OpenAI-shaped run: the conversation in the provider's words, nothing escaped twice, each call beside its result, a diff; at desktop and phone widths" {
	native_run
	sfma-report ws -o report.html
	# the page as it is written: no JSON inside JSON, no provider object
	run grep -c -F '\"' report.html
	[ "$output" = 0 ]
	run grep -c -F '\\n' report.html
	[ "$output" = 0 ]
	measure report.html 1280 "$NATIVE_PAGE_FACTS" desktop.png >desk.json
	measure report.html 390 "$NATIVE_PAGE_FACTS" phone.png >phone.json
	for f in desk.json phone.json; do
		jq -e '.overflow <= 0 and (.escapedQuote | not) and (.escapedNewline | not) and (.backslashN | not) and
			(.providerJson | not)' $f
		# every call of the run: six turns, the judge, the criteria
		jq -e '.exchanges == 8 and .prompts == 1 and (.prompt | contains("OPERATOR MESSAGES may only narrow the task"))' $f
		# each tool call beside its result; the second call of turn 5 was not carried out
		jq -e '.pairs | length == 6' $f
		jq -e '.pairs[0].call | startswith("CALL\nwrite call_w1\npath\tnotes.txt\ncontent")' $f
		jq -e '.pairs[0].result | contains("allowed write notes.txt: wrote 43 bytes to notes.txt")' $f
		jq -e '.pairs[2].call | contains("echo one two")' $f
		jq -e '.pairs[2].result | contains("stdout:one two")' $f
		jq -e '.pairs[4].call | contains("echo never")' $f
		jq -e '.pairs[4].result | contains("not carried out")' $f
		# the second write against the first; the first a new file
		jq -e '.del == ["-says \"hello\" \\ there\n"] and .add == ["+says \"goodbye\" \\ there\n"] and .newFile == 1' $f
		# the cost of each call (six turns and the two judgments) and of the loop
		jq -e '.costs == 8 and (.loopCost | test("\\$0\\.[0-9]{4}"))' $f
		jq -e '.lanes == ["1", "0"]' $f
	done
	# side by side on a desktop, one below the other on a phone
	jq -e '.pairs | all(.beside)' desk.json
	jq -e '.pairs | all(.below)' phone.json
	# the screenshots, whole pages at their widths
	read -r w h < <(png_size desktop.png)
	[ "$w" -eq 1280 ] && [ "$h" -gt 2500 ]
	read -r w h < <(png_size phone.png)
	[ "$w" -eq 390 ] && [ "$h" -gt "$(( $(png_size desktop.png | cut -d' ' -f2) ))" ]
}

@test "the report of a three-loop run: a swimlane per loop with their calls overlapping, each loop's conversation and done" {
	loops_run
	sfma-report ws -o report.html
	local facts='(() => {
		const q = (s) => Array.from(document.querySelectorAll(s));
		const bars = (l) => q("#timeline g.lane[data-loop=\"" + l + "\"] rect.bar").map((r) =>
			[+r.getAttribute("x"), +r.getAttribute("x") + +r.getAttribute("width")]);
		const overlap = (a, b) => a.some(([x0, x1]) => b.some(([y0, y1]) => x0 < y1 && y0 < x1));
		return {
			overflow: document.documentElement.scrollWidth - innerWidth,
			lanes: q("#timeline g.lane[data-loop]").map((g) => g.getAttribute("data-loop")),
			calls: [1, 2, 3].map((l) => bars(l).length),
			overlap12: overlap(bars(1), bars(2)), overlap23: overlap(bars(2), bars(3)),
			sections: q("#conversation section.loop").map((s) => s.getAttribute("data-loop")),
			samePrompt: q("#conversation section.loop p.muted a[href=\"#prompt-1\"]").length,
			summaries: q("#summary li").map((l) => l.innerText),
			loopRows: q("#loops tbody tr").map((r) => r.getAttribute("data-loop"))
		};
	})()'
	measure report.html 1280 "$facts" desktop.png >desk.json
	measure report.html 390 "$facts" phone.png >phone.json
	cat desk.json
	for f in desk.json phone.json; do
		jq -e '.overflow <= 0 and .lanes == ["1", "2", "3", "0"]' $f
		# loop 1 bootstraps, writes and says done; loops 2 and 3 write and say done; each is judged
		jq -e '.calls == [4, 3, 3] and .overlap12 and .overlap23' $f
		jq -e '.sections == ["1", "2", "3", "0"] and .samePrompt == 2' $f
		jq -e '.summaries == ["loop 1 wrote a.txt", "loop 2 wrote b.txt", "loop 3 wrote c.txt"]' $f
		jq -e '.loopRows == ["1", "2", "3", "0"]' $f
	done
}

@test "the report of a run with an acceptance check: the checks, how often each ran, its last output; verdicts as allowed or REFUSED beside the outcome, linked to what they rest on" {
	acceptance_run
	sfma-report ws -o report.html
	dom report.html >dom.html
	no_console_messages
	grep -q '<div class="k">acceptance</div><div class="v completed">passed</div>' dom.html
	grep -q '<span class="badge pass">passed</span> 1 check, 2 attempts' dom.html
	grep -q '<td class="mono">python3 -m unittest test_calc</td><td>2</td><td>1</td>' dom.html
	# the last run's output, and the FAILED check in the table, with its exit against the one expected
	grep -A3 'id="acceptance"' dom.html | grep -q 'exit 0 (expected 0)'
	grep -q '<td class="what"><span class="badge refused">FAILED</span> acceptance check 1: python3 -m unittest test_calc: exit 1 (expected 0)' dom.html
	# the hard tier allowed the commands; the one that exited 3 and the one that timed out are marked
	grep -q '<td class="what"><span class="badge warn">allowed</span> run python3 status.py 3: exit=3' dom.html
	grep -q '<td class="what"><span class="badge warn">allowed</span> run sleep 5: exit=124: timed out after 1 s' dom.html
	grep -q '<td class="what"><span class="badge pass">allowed</span> write calc.py' dom.html
	run grep -c '>PASS<' dom.html # the judges' word only
	[ "$output" -eq 2 ]
	# a failed check is no refusal
	grep -q '<div class="k">refused</div><div class="v ">0</div>' dom.html
	run grep -c 'id="refusals"' dom.html
	[ "$output" = 0 ]
	# every verdict links to the entry it rests on
	local task line
	task=$(jq -r 'select(.kind == "verdict" and .data.tier == "acceptance") | .refs[0]' ws/.sfma/trace.jsonl | head -1)
	line=$(jq -r --arg t "$task" 'select(.id == $t) | .seq' ws/.sfma/trace.jsonl)
	[ -n "$line" ]
	grep -q "rests on <a href=\"#line-$line\">line $line</a>" dom.html
}
