#!/usr/bin/env bats
# Canonical JSON (sfma-formats(5), RFC 8785): known-good vectors, and
# the one-pass checker of canonical trace lines agreeing with the tree path.
# Expected strings were produced by ECMAScript (JSON.stringify semantics,
# keys sorted by UTF-16 code units) and are fixed here.

load helpers

setup() {
	cd "$BATS_TEST_TMPDIR"
}

canon() {
	printf '%s\n' "$1" | sfma-verify --canonicalize
}

@test "numbers print as ECMAScript prints them" {
	run canon '[0.1, 1e21, 1e-7, 5e-324, -0, 9007199254740991, 1e20, 1e300, 123.456, 1152921504606846976, -2.5e-8, 1e-6]'
	[ "$status" -eq 0 ]
	[ "$output" = '[0.1,1e+21,1e-7,5e-324,0,9007199254740991,100000000000000000000,1e+300,123.456,1152921504606847000,-2.5e-8,0.000001]' ]
}

@test "number edge cases: exponent thresholds, rounding, integers beyond 2^53 and 2^64" {
	run canon '[0.000001, 0.0000001, 100000000000000000000, 1000000000000000000000, 999999999999999999999, 1.5e-7, 12345678901234567890, 9007199254740993, 18446744073709551616, 1E2, 1.0, -1e-7, 0.30000000000000004, 2.2250738585072014e-308, 1.7976931348623157e308, 4.35, 0.5e-6, 1e+2, -0.0, 0e10]'
	[ "$status" -eq 0 ]
	[ "$output" = '[0.000001,1e-7,100000000000000000000,1e+21,1e+21,1.5e-7,12345678901234567000,9007199254740992,18446744073709552000,100,1,-1e-7,0.30000000000000004,2.2250738585072014e-308,1.7976931348623157e+308,4.35,5e-7,100,0,0]' ]
}

@test "strings: control characters escaped, short forms where JSON has them, U+2028 and astral characters raw" {
	run canon '["\u0000\u0001\u0007\b\t\n\u000b\f\r\u000e\u001f", "\"\\/", "\u007f", "\u2028\u2029", "\ud83d\ude00😀", "é\u00e9"]'
	[ "$status" -eq 0 ]
	[ "$output" = $'["\\u0000\\u0001\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u001f","\\"\\\\/","\x7f","\u2028\u2029","😀😀","éé"]' ]
}

@test "keys sort by UTF-16 code units, not by code points" {
	# U+1F600 is a surrogate pair (0xD83D...) and so sorts before U+FB01
	# (0xFB01), although its code point is larger.
	run canon '{"\ud83d\ude00":1,"\ufb01":2,"a":3,"é":4,"":5,"\u0080":6,"b":{"z":1,"\u20ac":2,"y":[{"b":1,"a":2}]}}'
	[ "$status" -eq 0 ]
	[ "$output" = $'{"":5,"a":3,"b":{"y":[{"a":2,"b":1}],"z":1,"\u20ac":2},"\u0080":6,"é":4,"😀":1,"ﬁ":2}' ]
}

@test "U+0000 inside keys and values is kept, escaped, and sorts first" {
	run canon '{"a\u0000b":1,"a":2,"a\u0000":3,"\u0000":4,"x":"v\u0000w"}'
	[ "$status" -eq 0 ]
	[ "$output" = '{"\u0000":4,"a":2,"a\u0000":3,"a\u0000b":1,"x":"v\u0000w"}' ]
}

@test "whitespace and member order do not change the canonical form" {
	run canon $' { "b" : [ 1 , 2.50 , { "d":true, "c":null } ] ,\t"a" : "x" } '
	[ "$status" -eq 0 ]
	[ "$output" = '{"a":"x","b":[1,2.5,{"c":null,"d":true}]}' ]
}

@test "input with no canonical form is refused, one error line per bad input, good lines still printed" {
	printf '%s\n' '{"a":1,"a":2}' '{"a":' '[NaN]' '{"ok":1}' > in
	run sh -c 'sfma-verify --canonicalize < in 2>err'
	[ "$status" -eq 1 ]
	[ "$output" = '{"ok":1}' ]
	run cat err
	[ "${#lines[@]}" -eq 3 ]
	[[ "${lines[0]}" == "sfma-verify: line 1: invalid JSON: duplicate object key"* ]]
	[[ "${lines[1]}" == "sfma-verify: line 2: invalid JSON"* ]]
	[[ "${lines[2]}" == "sfma-verify: line 3: invalid JSON"* ]]
}

# One chained entry per variant: the hash is computed over the canonical
# form (via --canonicalize), the line keeps the variant's own text. Keys
# hash < prevHash < seq < x are already in canonical order, so only the
# variant decides whether the fast checker may hash the raw bytes. A checker
# that took a non-canonical variant for canonical would hash the wrong bytes.
chain_variants() {
	local prev=0000000000000000000000000000000000000000000000000000000000000000 seq=0 v c h
	mkdir -p ws/.sfma
	: > ws/.sfma/trace.jsonl
	while IFS= read -r v; do
		seq=$((seq + 1))
		c=$(printf '{"prevHash":"%s","seq":%d,"x":%s}\n' "$prev" "$seq" "$v" | sfma-verify --canonicalize) || return 1
		h=$(printf '%s' "$c" | sha256sum | cut -d' ' -f1)
		printf '{"hash":"%s","prevHash":"%s","seq":%d,"x":%s}\n' "$h" "$prev" "$seq" "$v" >> ws/.sfma/trace.jsonl
		prev=$h
	done
	echo "$prev"
}

@test "fast path and tree path agree on near-canonical lines" {
	cat > variants <<'VARIANTS'
1
1.0
1.50
1E2
1e2
1e+21
1e21
1000000000000000000000
100000000000000000000
-0
-0.0
0.0000001
1e-7
0.000001
0.0000010
5e-324
4.9e-324
123.456
123.4560
9007199254740993
0.30000000000000004
0.3000000000000000444
"\u00e9"
"é"
"\/"
"/"
"\u001F"
"\u001f"
"\u000a"
"\n"
"\u2028"
" "
{"b":1,"a":2}
{"a":2,"b":1}
{"\u0061":1}
{"a\u0000":1,"a":2}
{"😀":1,"ﬁ":2}
{"ﬁ":2,"😀":1}
[1, 2]
[1,2]
VARIANTS
	head=$(chain_variants < variants)
	[ ${#head} -eq 64 ]
	run sfma-seal ws <<<'{"manifest":{}}'
	[ "$status" -eq 0 ]
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[ "$output" = "AUDIT_OK signature=none entries=40 head=$head$(tree_words ws)" ]
}

@test "a trace written canonically by sfma-chain verifies the same when re-ordered and spaced out" {
	mkdir -p ws/.sfma
	sfma-chain ws/.sfma/trace.jsonl > /dev/null <<'EVENTS'
{"kind":"clock-anchor","data":{"wallMs":1795985236340,"source":"system-wall"}}
{"kind":"candidate","data":{"mission":"Résumé ✓ 😀 tab\there\nnewline \u0007bell \u2028 \"q\" back\\slash","numbers":[0.1,1e21,1e-7,5e-324,-0,9007199254740991,1e20,123.456,-2.5e-8]},"loop":1}
{"kind":"call","data":{"endpoint":"e","latencyMs":12.5,"ok":true},"class":"reasoning","refs":["candidate-2"]}
{"kind":"store","data":{"\ud83d\ude00":1,"\ufb01":2,"a\u0000b":3,"€":4}}
EVENTS
	# The writer's lines are canonical: --canonicalize leaves them as they are.
	run sh -c 'sfma-verify --canonicalize < ws/.sfma/trace.jsonl | cmp - ws/.sfma/trace.jsonl'
	[ "$status" -eq 0 ]
	sfma-seal ws <<<'{"manifest":{}}' > /dev/null
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == "AUDIT_OK signature=none entries=4 head="* ]]
	fast=${output%% root=*}

	# Same entries, members reversed, spaces everywhere, non-ASCII escaped.
	python3 - ws/.sfma/trace.jsonl <<'PY'
import json, sys
path = sys.argv[1]
out = []
for line in open(path, encoding="utf-8"):
    obj = json.loads(line)
    out.append(json.dumps(dict(reversed(list(obj.items()))), separators=(" , ", " : "), ensure_ascii=True))
open(path, "w", encoding="utf-8").write("\n".join(out) + "\n")
PY
	run sh -c 'sfma-verify --canonicalize < ws/.sfma/trace.jsonl | cmp -s - ws/.sfma/trace.jsonl'
	[ "$status" -ne 0 ]
	# The chain hashes values, the Merkle tree the lines as written
	# (sfma-formats(5)): the record's tree is no longer the trace's ...
	run sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$output" == "AUDIT_INVALID: integrity.merkleRoot does not match the Merkle tree of the trace"* ]]
	# ... and sealed again (a new log: new bytes) the chain verifies the same.
	rm -r ws/.sfma/checkpoint ws/.sfma/checkpoints
	sfma-seal ws <<<'{"manifest":{}}' > /dev/null
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[ "${output%% root=*}" = "$fast" ]
	[[ "$output" == *" root=$(merkle_root ws/.sfma/trace.jsonl) checkpoints=1" ]]
}

# U+0000 in keys: Jansson refuses it there, so such a text is read through a
# rewrite (lib/ndjson.c). Each case below once read wrong.

@test "a \\u escape of U+FDD0 in any case stays U+FDD0 beside a U+0000 key" {
	run canon '{"\u0000":"\uFdd0"}'
	[ "$status" -eq 0 ]
	[ "$output" = '{"\u0000":"﷐"}' ]
	run canon '{"\u0000":"\ufDD0","b":"\uFDD0","c":"\ufdd0","d":"﷐"}'
	[ "$status" -eq 0 ]
	[ "$output" = '{"\u0000":"﷐","b":"﷐","c":"﷐","d":"﷐"}' ]
}

@test "a U+0000 key beside raw U+FDD0..U+FDD3 in keys and values is read" {
	run canon '{"\u0000":"﷐﷑﷒﷓","﷐":1,"﷑":2,"﷒":3,"﷓\u0000":4}'
	[ "$status" -eq 0 ]
	[ "$output" = '{"\u0000":"﷐﷑﷒﷓","﷐":1,"﷑":2,"﷒":3,"﷓\u0000":4}' ]
}

@test "keys that differ only in U+0000 against U+FDD0 are distinct; the same key in two spellings is a duplicate" {
	run canon '{"a\u0000":1,"a\uFdD0":2}'
	[ "$status" -eq 0 ]
	[ "$output" = '{"a\u0000":1,"a﷐":2}' ]
	run canon '{"a\u0000":1,"\u0061\u0000":2}'
	[ "$status" -eq 1 ]
	[ "$output" = "sfma-verify: line 1: invalid JSON: duplicate object key near '\"\\u0061\\u0000\"' at line 1 column 27" ]
	run canon '{"\u0000":0,"﷐x":1,"\ufDd0x":2}'
	[ "$status" -eq 1 ]
	[[ "$output" == *"duplicate object key near '\"\\ufdd0x\"'"* ]]
	run canon '{"\u0000":0,"\ufdd0\ufdd1":1,"\uFDD0\ufdd1":2}'
	[ "$status" -eq 1 ]
	[ "$output" = "sfma-verify: line 1: invalid JSON: duplicate object key near '\"\\ufdd0\\ufdd1\"' at line 1 column 43" ]
}

@test "an escaped backslash before u0000 is text, not U+0000" {
	run canon '{"\u0000":1,"\\u0000":2,"\\\u0000":3}'
	[ "$status" -eq 0 ]
	[ "$output" = '{"\u0000":1,"\\\u0000":3,"\\u0000":2}' ]
}

@test "sfma-chain refuses to append after a U+0000 value is edited into a mixed-case \\uFdD0" {
	printf '{"kind":"task","data":{"\\u0000":"k","v":"\\u0000"}}\n' | sfma-chain --no-wait t.jsonl > /dev/null
	sed -i 's/"v":"\\u0000"/"v":"\\uFdD0"/' t.jsonl
	grep -q 'uFdD0' t.jsonl
	cp t.jsonl before
	run sh -c 'printf "{\"kind\":\"task\",\"data\":{}}\n" | sfma-chain --no-wait t.jsonl'
	[ "$status" -eq 1 ]
	[[ "$output" == *"failed hash-chain verification: line 1: hash mismatch"* ]]
	cmp t.jsonl before
}

@test "a power of two prints with the 16 digits ECMAScript prints, not 17" {
	run canon '[5.960464477539063e-8, 5.9604644775390625e-8, 0.00000005960464477539063, 2e-24, 1.2676506002282294e30]'
	[ "$status" -eq 0 ]
	[ "$output" = '[5.960464477539063e-8,5.960464477539063e-8,5.960464477539063e-8,2e-24,1.2676506002282294e+30]' ]
}

# Every input that ever canonicalized wrong, one per line, beside what
# ECMAScript makes of it. A new case is a line appended to regressions.jsonl,
# then: node tests/fixtures/canon/jcs.js < regressions.jsonl > regressions.expected
# (tests/canon-node.bats checks that the expected lines still are that).
@test "regression cases canonicalize as ECMAScript does" {
	fixtures=$BATS_TEST_DIRNAME/fixtures/canon
	run sh -c "sfma-verify --canonicalize < '$fixtures/regressions.jsonl' | cmp - '$fixtures/regressions.expected'"
	[ "$status" -eq 0 ]
}

# canon_size counts what canon_dump writes without writing it (sfma-model
# weighs every mock request by it): a small driver prints both lengths for
# each line, read with every number a double and with integers kept.
@test "canon_size is the length of canon_dump: escapes, unicode, numbers, nesting, U+0000" {
	build_driver canon-size "$REPO/tests/fixtures/canon/canon-size.c"
	cat > in <<'LINES'
[null, true, false, ""]
["plain ascii"]
["\u0000\u0001\u0007\b\t\n\u000b\f\r\u000e\u001f\u007f"]
["\"quoted\" and \\backslashed\\ /"]
["é ﬁ \u2028\u2029 \ud83d\ude00 😀"]
[0, -0, 0.1, 1e21, 1e-7, 5e-324, 9007199254740991, 1e20, 1e300, 123.456, -2.5e-8, 1e-6, 0.30000000000000004, 1.7976931348623157e308, 12345678901234567890.0]
[9223372036854775807, -9223372036854775808, -1, 10, 99, 100, -100000]
[]
{}
[[], {}, [[]], {"": {}}]
{"b": [1, 2.50, {"d": true, "c": null}], "a": "x", "\ud83d\ude00": 1, "\ufb01": 2, "é": [false]}
{"a\u0000b": 1, "\u0000": "v\u0000w", "k\n": "\t"}
{"messages": [{"role": "user", "content": "héllo\n"}, {"role": "assistant", "content": "", "toolCalls": [{"id": "c1", "name": "read", "input": {"path": "a.txt", "n": 1.5e-7}}]}], "system": "be \"brief\""}
[1, 2
LINES
	run ./canon-size < in
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 14 ]
	[ "${lines[13]}" = invalid ]
	local l dump size dump2 size2
	for l in "${lines[@]:0:13}"; do
		read -r dump size dump2 size2 <<<"$l"
		[ "$dump" -gt 0 ] && [ "$dump" = "$size" ] && [ "$dump2" = "$size2" ] || { echo "differs: $l"; return 1; }
	done
	# U+0000 keys only through ndjson_parse; the rest both ways
	[ "$(grep -c -- ' - -$' <<<"$output")" -eq 1 ]
	[[ "${lines[11]}" == *" - -" ]]
}
