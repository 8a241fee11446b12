#!/usr/bin/env bats
# Evidence (sfma-formats(5)): the content-addressed store
# .sfma/evidence/<sha256> (lib/evidence, through a test driver) and
# sfma-verify's check of every reference in the chain (sfma-formats(5)).

load helpers

# The test driver, built once (build_driver, tests/helpers.bash).
setup_file() {
	build_driver "$BATS_FILE_TMPDIR/evidence-tool" "$REPO/tests/fixtures/evidence/evidence-tool.c"
}

setup() {
	require jq
	require sha256sum
	cd "$BATS_TEST_TMPDIR"
	tool="$BATS_FILE_TMPDIR/evidence-tool"
}

# blob WS TEXT: store TEXT by hand, as the runner would (0600, named by its
# SHA-256); prints its reference.
blob() {
	local h
	mkdir -p "$1/.sfma/evidence"
	chmod 700 "$1/.sfma/evidence"
	h=$(printf '%s' "$2" | sha256sum | cut -c1-64)
	printf '%s' "$2" > "$1/.sfma/evidence/$h"
	chmod 600 "$1/.sfma/evidence/$h"
	printf '{"sha256":"%s","bytes":%d}' "$h" "$(printf '%s' "$2" | wc -c)"
}

seal() {
	mkdir -p "$1/.sfma" && tampered "$1"
	sfma-seal "$1" <<<'{"manifest":{"name":"ev","workspace":"ev"},"verdict":"completed"}' > /dev/null
}

# Workspace ev: five references to four blobs, A twice (seq 2 and 4), C
# through the test driver, and a reference-shaped object inside data that
# is not a reference (it is not in the entry's evidence member).
make_ev() {
	mkdir -p ev/.sfma
	A=$(blob ev 'the system prompt')
	B=$(blob ev '{"tool":"read","path":"notes.md"}')
	C=$(printf 'line 1\nline 2\n\0binary\n' | "$tool" put ev/.sfma)
	D=$(blob ev 'make: Nothing to be done for all.')
	HA=$(jq -r .sha256 <<<"$A") HB=$(jq -r .sha256 <<<"$B")
	HC=$(jq -r .sha256 <<<"$C") HD=$(jq -r .sha256 <<<"$D")
	printf '%s\n' '{"kind":"clock-anchor","data":{"wallMs":1795985236340,"source":"system-wall"}}' \
		"{\"kind\":\"message\",\"data\":{\"dir\":\"out\"},\"evidence\":{\"prompt\":$A}}" \
		"{\"kind\":\"call\",\"data\":{\"endpoint\":\"e\",\"ok\":true},\"class\":\"reasoning\",\"evidence\":{\"reply\":$B,\"request\":$C}}" \
		"{\"kind\":\"task\",\"data\":{\"call\":{\"tool\":\"run\",\"cmd\":\"make\"}},\"evidence\":{\"output\":[$A,$D]}}" \
		"{\"kind\":\"candidate\",\"data\":{\"mission\":\"m\",\"evidence\":{\"sha256\":\"$(printf x | sha256sum | cut -c1-64)\",\"bytes\":1}}}" \
		'{"kind":"clock-anchor","data":{"wallMs":1795985239999,"source":"system-wall"}}' |
		sfma-chain ev/.sfma/trace.jsonl > /dev/null
	seal ev
	OK=$(sfma-verify ev)
}

# verify_invalid ARGS... -- REASON: exit 1, nothing on stdout, exactly the
# one line "AUDIT_INVALID: REASON" on stderr.
verify_invalid() {
	local args=() err status=0
	while [ "$1" != -- ]; do args+=("$1"); shift; done
	err=$(sfma-verify "${args[@]}" 2>&1 > verify.out) || status=$?
	[ "$status" -eq 1 ] || { echo "expected exit 1, got $status: $err"; return 1; }
	[ ! -s verify.out ] || { echo "stdout: $(cat verify.out)"; return 1; }
	[ "$err" = "AUDIT_INVALID: $2" ] || { echo "got:  $err"; echo "want: AUDIT_INVALID: $2"; return 1; }
}

# rechain FILE: recompute every prevHash and hash of a trace after a hand
# edit (lines are written canonically: ASCII keys, integers only).
rechain() {
	python3 - "$1" <<'PY'
import hashlib, json, sys
path = sys.argv[1]
prev, out = "0" * 64, []
for line in open(path):
    e = json.loads(line)
    e.pop("hash", None)
    e["prevHash"] = prev
    canon = json.dumps(e, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    prev = hashlib.sha256(canon.encode()).hexdigest()
    e["hash"] = prev
    out.append(json.dumps(e, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n")
open(path, "w").write("".join(out))
PY
}

@test "a trace with references verifies; the OK line counts references, not blobs" {
	make_ev
	[[ "$OK" == "AUDIT_OK signature=none entries=6 head="*" evidence=5" ]]
	[ "$(ls ev/.sfma/evidence | wc -l)" -eq 4 ]
	# the same line through the record's path and with --allow-pruned (nothing pruned)
	[ "$(sfma-verify ev/.sfma/result.json)" = "$OK" ]
	[ "$(sfma-verify --allow-pruned ev)" = "$OK" ]
	[ "$(sfma-verify --threads 1 ev)" = "$OK" ]
	# the reference-shaped object in the candidate's data names no blob and
	# is not checked: only the entry's evidence member holds references
	grep -q '"data":{"evidence":{"bytes":1,"sha256":' ev/.sfma/trace.jsonl
}

@test "records without references print exactly as before, with or without --allow-pruned" {
	for f in legacy multirun signed unicode unsigned; do
		rm -rf $f && cp -r "$INTEROP/$f/ws" $f && chmod -R u+w $f
		run sfma-verify $f
		[ "$status" -eq 0 ]
		# the README's line, whole (the README lists each on a line of its own)
		grep -qxF "$output" "$INTEROP/README.md"
		[ "$(sfma-verify --allow-pruned $f)" = "$output" ]
		# an evidence directory does not change a record without references
		mkdir -p $f/.sfma/evidence
		[ "$(sfma-verify $f)" = "$output" ]
	done
}

@test "a deleted blob is 'missing', naming the first entry in trace order" {
	make_ev
	rm ev/.sfma/evidence/"$HD"
	verify_invalid ev -- "seq 4: evidence $HD missing"
	rm ev/.sfma/evidence/"$HB"
	verify_invalid ev -- "seq 3: evidence $HB missing"
	verify_invalid ev/.sfma/result.json -- "seq 3: evidence $HB missing"
}

@test "a blob changed in any way is 'altered': one byte, same size, truncated, grown, emptied" {
	make_ev
	E=ev/.sfma/evidence
	cp "$E/$HC" keep
	alter() { # alter COMMAND...: apply to blob C, check, restore
		"$@"
		verify_invalid ev -- "seq 3: evidence $HC altered"
		cp keep "$E/$HC"
		[ "$(sfma-verify ev)" = "$OK" ]
	}
	alter sed -i 's/line 1/line 7/' "$E/$HC"                       # one byte
	alter sh -c 'head -c "$(wc -c < "$1")" /dev/zero > "$1"' sh "$E/$HC" # same size, other bytes
	alter truncate -s -1 "$E/$HC"
	alter sh -c 'printf x >> "$1"' sh "$E/$HC"
	alter truncate -s 0 "$E/$HC"
	# a blob named by one reference holding another blob's bytes
	alter cp "$E/$HA" "$E/$HC"
	# --allow-pruned never accepts an altered blob
	sed -i 's/line 1/line 7/' "$E/$HC"
	verify_invalid --allow-pruned ev -- "seq 3: evidence $HC altered"
}

@test "a link, a directory or a FIFO in place of a blob is 'altered', never followed" {
	make_ev
	E=ev/.sfma/evidence
	mv "$E/$HB" real
	ln -s "$PWD/real" "$E/$HB"        # the link's target holds the right bytes
	verify_invalid ev -- "seq 3: evidence $HB altered"
	verify_invalid --allow-pruned ev -- "seq 3: evidence $HB altered"
	ln -sf "$HA" "$E/$HB"             # relative, to another intact blob
	verify_invalid ev -- "seq 3: evidence $HB altered"
	rm "$E/$HB" && mkdir "$E/$HB"
	verify_invalid ev -- "seq 3: evidence $HB altered"
	rmdir "$E/$HB" && mkfifo "$E/$HB"
	verify_invalid ev -- "seq 3: evidence $HB altered"   # and returns: the FIFO is never read
	rm "$E/$HB" && mv real "$E/$HB"
	[ "$(sfma-verify ev)" = "$OK" ]
}

@test "the evidence directory: a link or a file in its place is 'altered', its absence 'missing'" {
	make_ev
	mv ev/.sfma/evidence store
	ln -s "$PWD/store" ev/.sfma/evidence   # an intact copy, through a link
	verify_invalid ev -- "seq 2: evidence $HA altered"
	verify_invalid --allow-pruned ev -- "seq 2: evidence $HA altered"
	rm ev/.sfma/evidence && touch ev/.sfma/evidence
	verify_invalid ev -- "seq 2: evidence $HA altered"
	rm ev/.sfma/evidence
	verify_invalid ev -- "seq 2: evidence $HA missing"
	# all of it pruned at once
	run sfma-verify --allow-pruned ev
	[ "$status" -eq 0 ]
	[ "$output" = "$OK pruned=5" ]
	mv store ev/.sfma/evidence
	[ "$(sfma-verify ev)" = "$OK" ]
}

@test "--allow-pruned accepts deliberately removed blobs and says how many references it pruned" {
	make_ev
	rm ev/.sfma/evidence/"$HA"            # referenced twice
	verify_invalid ev -- "seq 2: evidence $HA missing"
	run sfma-verify --allow-pruned ev
	[ "$status" -eq 0 ]
	[ "$output" = "$OK pruned=2" ]
	rm ev/.sfma/evidence/"$HD"
	[ "$(sfma-verify --allow-pruned ev)" = "$OK pruned=3" ]
	# a pruned record with one altered blob left is still invalid
	printf 'X' | dd of=ev/.sfma/evidence/"$HB" bs=1 seek=0 conv=notrunc status=none
	verify_invalid --allow-pruned ev -- "seq 3: evidence $HB altered"
	# and the chain is still checked
	sed -i '2s/"dir":"out"/"dir":"in"/' ev/.sfma/trace.jsonl
	run sfma-verify --allow-pruned ev
	[ "$status" -eq 1 ]
	[[ "$output" == "AUDIT_INVALID: trace line 2: hash mismatch"* ]]
}

@test "a malformed reference is AUDIT_INVALID naming it; sfma-chain refuses to write one" {
	make_ev
	T=ev/.sfma/trace.jsonl
	cp "$T" good
	H=$HA
	forge() { # forge JSON: the evidence of seq 2 set to JSON, rechained, resealed
		jq -c --argjson ev "$1" 'if .seq == 2 then .evidence = $ev else . end' good > "$T"
		rechain "$T"
		tampered ev
		forget_checkpoints ev
		jq 'del(.integrity)' ev/.sfma/result.json | sfma-seal ev > /dev/null
	}
	bad() { # bad JSON REASON
		forge "$1"
		verify_invalid --allow-pruned ev -- "seq 2: $2"
		# the writer refuses the same evidence member
		run sfma-chain other.jsonl <<<"{\"kind\":\"message\",\"data\":{},\"evidence\":$1}"
		[ "$status" -eq 1 ]
		[ "$output" = "sfma-chain: event 1: $2" ] || { echo "$output"; return 1; }
		[ ! -s other.jsonl ]
	}
	bad "{\"p\":{\"sha256\":\"${H^^}\",\"bytes\":17}}" 'evidence.p: sha256 is not 64 lowercase hex digits'
	bad "{\"p\":{\"sha256\":\"${H:0:63}\",\"bytes\":17}}" 'evidence.p: sha256 is not 64 lowercase hex digits'
	bad "{\"p\":{\"sha256\":17,\"bytes\":17}}" 'evidence.p: sha256 is not 64 lowercase hex digits'
	bad "{\"p\":{\"sha256\":\"$H\",\"bytes\":-1}}" 'evidence.p: bytes is not a whole number from 0 to 2^53-1'
	bad "{\"p\":{\"sha256\":\"$H\",\"bytes\":1.5}}" 'evidence.p: bytes is not a whole number from 0 to 2^53-1'
	bad "{\"p\":{\"sha256\":\"$H\",\"bytes\":\"17\"}}" 'evidence.p: bytes is not a whole number from 0 to 2^53-1'
	bad "{\"p\":{\"sha256\":\"$H\",\"bytes\":9007199254740992}}" 'evidence.p: bytes is not a whole number from 0 to 2^53-1'
	bad "{\"p\":{\"sha256\":\"$H\",\"bytes\":17,\"x\":1}}" 'evidence.p: not a reference: its members must be exactly sha256 and bytes'
	bad "{\"p\":{\"sha256\":\"$H\"}}" 'evidence.p: not a reference: its members must be exactly sha256 and bytes'
	bad "{\"p\":\"$H\"}" 'evidence.p: not a reference {"sha256","bytes"}'
	bad "{\"p\":[{\"sha256\":\"$H\",\"bytes\":17},null]}" 'evidence.p[1]: not a reference {"sha256","bytes"}'
	bad "[{\"sha256\":\"$H\",\"bytes\":17}]" 'evidence is not an object of references'
	bad "{\"sha256\":\"$H\",\"bytes\":17}" 'evidence.bytes: not a reference {"sha256","bytes"}'
	bad "{\"a\u001b[31m\":1}" 'evidence.a?[31m: not a reference {"sha256","bytes"}'
	# a well-formed reference with the wrong size names a blob that does not match
	forge "{\"p\":{\"sha256\":\"$H\",\"bytes\":16}}"
	verify_invalid --allow-pruned ev -- "seq 2: evidence $H altered"
	# the rechained original verifies again: the failures above were the edits'
	forge "$(jq -c 'select(.seq == 2) | .evidence' good)"
	[ "$(sfma-verify ev)" = "$OK" ]
}

@test "lines in any form are checked: whitespace, an escaped key, a legacy prefix" {
	make_ev
	T=ev/.sfma/trace.jsonl
	rm ev/.sfma/evidence/"$HB"
	want="seq 3: evidence $HB missing"
	verify_invalid ev -- "$want"
	# respaced, with the key spelled with an escape: not canonical, parsed
	sed -i '3s/"evidence":{/ "\\u0065vidence" : { /' "$T"
	grep -q '\\u0065vidence' "$T"
	verify_invalid ev -- "$want"
	# references in an unchained legacy line are checked too (no seq: the line is named)
	printf '%s\n' "{\"kind\":\"message\",\"evidence\":{\"x\":$B}}" > legacy
	make_ev_legacy() {
		cat legacy "$T" > t2 && mv t2 "$T"
		python3 - "$T" <<'PY'
import hashlib, json, sys
path = sys.argv[1]
lines = open(path).read().splitlines(True)
prev = hashlib.sha256(lines[0].encode()).hexdigest()
out = [lines[0]]
for line in lines[1:]:
    e = json.loads(line)
    e.pop("hash", None)
    e["prevHash"] = prev
    c = json.dumps(e, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    prev = hashlib.sha256(c.encode()).hexdigest()
    e["hash"] = prev
    out.append(json.dumps(e, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n")
open(path, "w").write("".join(out))
PY
		tampered ev
		forget_checkpoints ev
		jq 'del(.integrity)' ev/.sfma/result.json | sfma-seal ev > /dev/null
	}
	make_ev_legacy
	verify_invalid ev -- "line 1: evidence $HB missing"
}

@test "a long trace: every reference checked across blocks and threads" {
	mkdir -p big/.sfma/evidence
	python3 "$REPO/tests/bench/gen-trace.py" 40000 big/.sfma/evidence > big/.sfma/trace.jsonl
	seal big
	run sfma-verify big
	[ "$status" -eq 0 ]
	[[ "$output" == "AUDIT_OK signature=none entries=40000 head="*" evidence=20000" ]]
	# one blob removed, many blocks past the first
	ref=$(sed -n 39000p big/.sfma/trace.jsonl | jq -r '.evidence.output.sha256')
	rm big/.sfma/evidence/"$ref"
	verify_invalid big -- "seq 39000: evidence $ref missing"
	verify_invalid --threads 1 big -- "seq 39000: evidence $ref missing"
	run sfma-verify --allow-pruned big
	[[ "$output" == *" evidence=20000 pruned=1" ]]
}

@test "put: blobs are named by their SHA-256, mode 0600 in a 0700 directory, deduplicated, atomic" {
	mkdir -p ws/.sfma
	printf 'hello' > in
	ref=$(umask 0; "$tool" put ws/.sfma < in)
	h=$(sha256sum in | cut -c1-64)
	[ "$ref" = "{\"bytes\":5,\"sha256\":\"$h\"}" ]
	[ "$(stat -c %a ws/.sfma/evidence)" = 700 ]
	[ "$(stat -c %a ws/.sfma/evidence/"$h")" = 600 ]
	cmp in ws/.sfma/evidence/"$h"
	# the same bytes again: the same reference, one file, no temporary left
	ino=$(stat -c %i ws/.sfma/evidence/"$h")
	[ "$("$tool" put ws/.sfma < in)" = "$ref" ]
	[ "$(ls -A ws/.sfma/evidence)" = "$h" ]
	[ "$(stat -c %i ws/.sfma/evidence/"$h")" = "$ino" ]   # kept, not rewritten
	# a store found with a looser mode is made private again
	chmod 755 ws/.sfma/evidence
	"$tool" put ws/.sfma < in > /dev/null
	[ "$(stat -c %a ws/.sfma/evidence)" = 700 ]
	# an empty blob is a blob
	[ "$("$tool" put ws/.sfma < /dev/null)" = "{\"bytes\":0,\"sha256\":\"$(sha256sum < /dev/null | cut -c1-64)\"}" ]
	[ "$("$tool" check ws/.sfma "$ref")" = ok ]
	[ "$("$tool" get ws/.sfma "$ref" 5)" = hello ]
	run "$tool" get ws/.sfma "$ref" 4
	[ "$status" -eq 1 ]
	[[ "$output" == *"evidence $h: 5 bytes, more than 4" ]]
}

@test "put replaces what is not the blob: altered bytes, a link (its target untouched)" {
	mkdir -p ws/.sfma
	printf 'hello' > in
	ref=$("$tool" put ws/.sfma < in)
	h=$(jq -r .sha256 <<<"$ref")
	B=ws/.sfma/evidence/$h
	printf 'jello' > "$B"
	[ "$("$tool" check ws/.sfma "$ref")" = altered ]
	run "$tool" get ws/.sfma "$ref" 100
	[ "$status" -eq 1 ]
	[[ "$output" == *"evidence $h altered" ]]
	"$tool" put ws/.sfma < in > /dev/null
	cmp in "$B"
	chmod 644 "$B"
	"$tool" put ws/.sfma < in > /dev/null
	[ "$(stat -c %a "$B")" = 600 ]
	rm "$B" && printf 'other' > target && ln -s "$PWD/target" "$B"
	[ "$("$tool" check ws/.sfma "$ref")" = altered ]
	"$tool" put ws/.sfma < in > /dev/null
	[ ! -L "$B" ] && cmp in "$B"
	[ "$(cat target)" = other ]
	rm "$B"
	[ "$("$tool" check ws/.sfma "$ref")" = missing ]
	# the store itself replaced by a link: refused, nothing written through it
	mv ws/.sfma/evidence real && ln -s "$PWD/real" ws/.sfma/evidence
	run "$tool" put ws/.sfma < in
	[ "$status" -eq 1 ]
	[[ "$output" == *"evidence: not a directory (a link or a file is in its place)" ]]
	[ -z "$(ls -A real)" ]
	[ "$("$tool" check ws/.sfma "$ref")" = altered ]
}

@test "a writer that stops before filing leaves a durable journal: readers find its blobs, the next writer files them" {
	mkdir -p ws/.sfma
	printf 'first' > a
	printf 'second' > b
	ra=$("$tool" put-unfiled ws/.sfma < a)
	ha=$(jq -r .sha256 <<<"$ra")
	J=ws/.sfma/evidence/journal
	[ -f "$J" ] && [ "$(stat -c %a "$J")" = 600 ]
	# killed before its blob was filed: the journal alone holds it
	rm -f "ws/.sfma/evidence/$ha"
	[ "$("$tool" check ws/.sfma "$ra")" = ok ]
	[ "$("$tool" get ws/.sfma "$ra" 100)" = first ]
	# the next writer files it before it adds its own, and removes the journal
	rb=$("$tool" put ws/.sfma < b)
	[ ! -e "$J" ]
	cmp a "ws/.sfma/evidence/$ha"
	cmp b "ws/.sfma/evidence/$(jq -r .sha256 <<<"$rb")"
	[ "$(stat -c %a "ws/.sfma/evidence/$ha")" = 600 ]
	[ "$(ls -A ws/.sfma/evidence | grep -cv '^[0-9a-f]\{64\}$')" -eq 0 ]   # no temporary left
}

@test "a journal record that is torn or not what its header says is not evidence" {
	mkdir -p ws/.sfma
	printf 'kept' > a
	ra=$("$tool" put-unfiled ws/.sfma < a)
	ha=$(jq -r .sha256 <<<"$ra")
	J=ws/.sfma/evidence/journal
	rm -f "ws/.sfma/evidence/$ha"
	cp "$J" j.orig
	# cut short, as a crash in the middle of its write would leave it
	truncate -s -2 "$J"
	[ "$("$tool" check ws/.sfma "$ra")" = missing ]
	# the bytes changed under the header: altered, and never filed
	cp j.orig "$J"
	sed -i 's/kept/kelp/' "$J"
	[ "$("$tool" check ws/.sfma "$ra")" = altered ]
	run "$tool" get ws/.sfma "$ra" 100
	[ "$status" -eq 1 ]
	[[ "$output" == *"evidence $ha altered" ]]
	printf 'x' | "$tool" put ws/.sfma > /dev/null
	[ ! -e "$J" ]
	[ "$("$tool" check ws/.sfma "$ra")" = missing ]
	# a link planted as the journal is removed, its target neither read nor touched
	cp j.orig t
	ln -s "$PWD/t" "$J"
	[ "$("$tool" check ws/.sfma "$ra")" = missing ]
	printf 'y' | "$tool" put ws/.sfma > /dev/null
	[ ! -e "$J" ] && cmp t j.orig
	[ "$("$tool" check ws/.sfma "$ra")" = missing ]
}

# journal FILE SPEC...: write a journal by hand, one record per SPEC:
# "good:TEXT" (a sound record of TEXT), "bad:TEXT" (the header of TEXT over
# other bytes of its length), "junk" (a line that is no header).
journal() {
	python3 - "$@" <<'PY'
import hashlib, sys
out = b""
for spec in sys.argv[2:]:
    kind, _, text = spec.partition(":")
    data = text.encode()
    head = b"%s %016x\n" % (hashlib.sha256(data).hexdigest().encode(), len(data))
    if kind == "good":
        out += head + data
    elif kind == "bad":
        out += head + bytes(b ^ 1 for b in data)
    else:
        out += b"not a header, though as long as one: " + b"x" * 44 + b"\n"
open(sys.argv[1], "wb").write(out)
PY
}

# ref_of TEXT: the reference of TEXT's blob.
ref_of() {
	printf '{"bytes":%d,"sha256":"%s"}' "$(printf '%s' "$1" | wc -c)" "$(printf '%s' "$1" | sha256sum | cut -c1-64)"
}

# journal_reads SPEC WANT...: the journal of SPEC (see journal) read by the
# store's readers gives each of first, second, third the state WANT in
# turn; the next writer then files exactly the blobs found ok and removes
# the journal.
journal_reads() {
	local spec=$1 text want
	shift
	rm -rf ws && mkdir -p ws/.sfma/evidence && chmod 700 ws/.sfma/evidence
	# shellcheck disable=SC2086 # one word per record
	journal ws/.sfma/evidence/journal $spec
	local -a wants=("$@")
	local i=0
	for text in first second third; do
		want=${wants[$i]}
		i=$((i + 1))
		[ "$("$tool" check ws/.sfma "$(ref_of "$text")")" = "$want" ] ||
			{ echo "$spec: $text is $("$tool" check ws/.sfma "$(ref_of "$text")"), want $want"; return 1; }
	done
	printf 'other' | "$tool" put ws/.sfma >/dev/null
	[ ! -e ws/.sfma/evidence/journal ] || { echo "$spec: the journal stayed"; return 1; }
	i=0
	for text in first second third; do
		want=${wants[$i]}
		i=$((i + 1))
		local f
		f=ws/.sfma/evidence/$(printf '%s' "$text" | sha256sum | cut -c1-64)
		if [ "$want" = ok ]; then
			[ "$(cat "$f")" = "$text" ] || { echo "$spec: $text not filed"; return 1; }
		else
			[ ! -e "$f" ] || { echo "$spec: $text filed, though no reader found it"; return 1; }
		fi
	done
}

@test "the journal is read up to its first unsound record, by the readers as by the next writer" {
	journal_reads "good:first good:second good:third" ok ok ok
	# behind a record whose bytes are not its header's, or a line that is
	# no header, nothing is evidence; the bad record's own blob is altered
	journal_reads "bad:first good:second" altered missing missing
	journal_reads "good:first bad:second good:third" ok altered missing
	journal_reads "junk good:second good:third" missing missing missing
	journal_reads "good:first junk good:third" ok missing missing
}

@test "a blob behind an unsound journal record is not evidence: verify and replay never say OK, before or after the next run" {
	cat >m.json <<'JSON'
{"name":"j","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":8,"dryRunDefault":false}
JSON
	local cand='{"mission":"m","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"d"}],"firstTasks":[],"schedule":[]}'
	mock "$cand" '{"tool":"write","path":"out.txt","content":"hi\n"}' '{"tool":"done","summary":"FIRST-SUMMARY"}'
	sfma run m.json --apply >/dev/null 2>&1
	sfma-verify ws >/dev/null
	# the done summary's blob, as a killed run leaves it: in the journal
	# only, behind a record whose bytes are not its header's
	local b
	b=$(jq -r 'select(.kind == "task" and .evidence.summary) | .evidence.summary.sha256' ws/.sfma/trace.jsonl)
	[ "$(cat "ws/.sfma/evidence/$b")" = FIRST-SUMMARY ]
	journal ws/.sfma/evidence/journal bad:planted good:FIRST-SUMMARY
	rm "ws/.sfma/evidence/$b"
	run sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$output" == "AUDIT_INVALID: seq "*": evidence $b missing" ]]
	local before=$output
	run sfma replay ws
	[ "$status" -ne 0 ]
	[[ "$output" != *REPLAY_OK* ]]
	# the next run opens the store for writing: the journal goes, the blob
	# was never evidence, and the verifier says what it said before
	mock "$cand" '{"tool":"write","path":"out.txt","content":"hi\n"}' '{"tool":"done","summary":"SECOND-SUMMARY"}'
	sfma run m.json --apply >/dev/null 2>&1
	[ ! -e ws/.sfma/evidence/journal ]
	[ ! -e "ws/.sfma/evidence/$b" ]
	run sfma-verify ws
	[ "$status" -eq 1 ]
	[ "$output" = "$before" ]
}

@test "a blob altered under its name while the journal holds it sound is found, as the next writer files it" {
	mkdir -p ws/.sfma/evidence && chmod 700 ws/.sfma/evidence
	local h
	h=$(printf 'kept' | sha256sum | cut -c1-64)
	journal ws/.sfma/evidence/journal good:kept
	printf 'kelp' >"ws/.sfma/evidence/$h"
	[ "$("$tool" check ws/.sfma "$(ref_of kept)")" = ok ]
	[ "$("$tool" get ws/.sfma "$(ref_of kept)" 100)" = kept ]
	printf 'x' | "$tool" put ws/.sfma >/dev/null
	[ "$(cat "ws/.sfma/evidence/$h")" = kept ]
	# without the journal the name alone speaks
	printf 'kelp' >"ws/.sfma/evidence/$h"
	[ "$("$tool" check ws/.sfma "$(ref_of kept)")" = altered ]
}

@test "the scan of canonical lines and the parse of any other line agree on every shape" {
	# seeds chosen to cover intact, missing, altered and malformed references
	for seed in $(seq 1 40); do
		python3 "$REPO/tests/fixtures/evidence/agree.py" "$seed" > verdict ||
			{ cat verdict; return 1; }
		cat verdict >> verdicts
	done
	# both outcomes occurred
	grep -q '^0 ' verdicts
	grep -q '^1 AUDIT_INVALID: seq [0-9]: evidence [0-9a-f]* missing' verdicts
	grep -q '^1 AUDIT_INVALID: seq [0-9]: evidence\.' verdicts
}
