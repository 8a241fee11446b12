#!/usr/bin/env bats
# The trace as a transparency log (sfma-formats(5)): the Merkle tree in the
# record, the checkpoint, inclusion and consistency proofs, the DSSE
# attestation - each checked by code that is not sfma's: Go's
# golang.org/x/mod/sumdb/note and sumdb/tlog (tests/fixtures/tlog/verify.go,
# built here from Debian's golang-golang-x-mod-dev, offline), a recursive
# RFC 6962 tree in Python (helpers.bash merkle_root), and the OpenSSL CLI.

load helpers

setup_file() {
	require go
	local dir=$BATS_FILE_TMPDIR/go
	mkdir -p "$dir"
	# GOPATH mode: the packages come from /usr/share/gocode, nothing from a network.
	HOME=$dir GOPATH=/usr/share/gocode GO111MODULE=off GOFLAGS= GOCACHE=$dir/cache GOPROXY=off \
		go build -o "$BATS_FILE_TMPDIR/tlogverify" "$BATS_TEST_DIRNAME/fixtures/tlog/verify.go"
}

setup() {
	require openssl
	require jq
	cd "$BATS_TEST_TMPDIR"
	GOV=$BATS_FILE_TMPDIR/tlogverify
	cp "$REPO/examples/hello/manifest.json" m.json
	T=ws/.sfma/trace.jsonl
}

# A keyed run of the hello example (the built-in offline model), twice by default.
keyed() {
	openssl genpkey -algorithm ed25519 -out key.pem 2> /dev/null
	openssl pkey -in key.pem -pubout -out pub.pem
	local i
	for i in $(seq "${1:-2}"); do
		SFMA_AUDIT_PRIVATE_KEY=$(cat key.pem) sfma run m.json --apply > /dev/null 2>&1 || return 1
	done
	VKEY=$(sfma prove --verifier-key pub.pem)
}

# flip FILE LINE BYTE: one byte of line LINE (from 1) of FILE changed, to
# another base64 character.
flip() {
	python3 - "$@" <<'PY'
import sys
path, line, col = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = open(path, "rb").read().split(b"\n")
b = bytearray(lines[line - 1])
b[col] = ord("B") if b[col] != ord("B") else ord("C")
lines[line - 1] = bytes(b)
open(path, "wb").write(b"\n".join(lines))
PY
}

# Both verifiers refuse: Go's (its arguments) and sfma-verify (after --).
both_refuse() {
	local go=() sf=()
	while [ "$1" != -- ]; do go+=("$1"); shift; done
	shift
	run "$GOV" "${go[@]}"
	[ "$status" -eq 1 ] || { echo "Go accepted: $output"; return 1; }
	SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) run sfma-verify "$@"
	[ "$status" -eq 1 ] || { echo "sfma-verify accepted: $output"; return 1; }
	[[ "$output" == "AUDIT_INVALID: "* ]] && [ "${#lines[@]}" -eq 1 ] || { echo "$output"; return 1; }
}

@test "a record seals the RFC 6962 tree of its trace's lines as written; the checkpoint says the same; sfma-verify checks it" {
	sfma run m.json --apply > /dev/null
	n=$(wc -l < "$T")
	R=ws/.sfma/result.json
	root=$(merkle_root "$T")
	[ "$(jq .integrity.treeSize "$R")" -eq "$n" ]
	[ "$(jq -r .integrity.merkleRoot "$R")" = "$root" ]
	# the checkpoint: origin, size, base64 root; unsigned: its note text alone
	origin=sfma/$(head -n 1 "$T" | tr -d '\n' | sha256sum | cut -c1-64)
	printf '%s\n%s\n%s\n' "$origin" "$n" "$(xxd -r -p <<<"$root" | base64 -w0)" > want
	cmp want ws/.sfma/checkpoint
	cmp want "ws/.sfma/checkpoints/$n"
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[ "$output" = "AUDIT_OK signature=none entries=$n head=$(tail -1 "$T" | jq -r .hash) root=$root checkpoints=1 evidence=$(jq -s '[.[] | .evidence // {} | [.[]] | flatten | length] | add' "$T")" ]
	# the root is covered by resultSha256 and so by nothing else changing it
	jq '.integrity.merkleRoot = "'"$(merkle_root "$T" 3)"'"' "$R" > r && mv r "$R"
	run sfma-verify ws
	[ "$status" -eq 1 ]
	[ "$output" = "AUDIT_INVALID: integrity.merkleRoot does not match the Merkle tree of the trace $root" ]
}

@test "the tree is kept while the run appends: the writer's note holds the frontier, whose root is the reference's" {
	sfma run m.json --apply > /dev/null
	C=ws/.sfma/chain-head.json
	# fold the noted frontier (left to right) into a root: the last node is
	# the smallest subtree, each one before it the left child of a parent
	python3 - "$C" "$(merkle_root "$T")" "$(wc -l < "$T")" <<'PY'
import hashlib, json, sys
note = json.load(open(sys.argv[1]))
nodes = [bytes.fromhex(h) for h in note["tree"]]
assert note["entries"] == int(sys.argv[3]) and len(nodes) == bin(note["entries"]).count("1"), note
root = nodes[-1]
for n in reversed(nodes[:-1]):
    root = hashlib.sha256(b"\1" + n + root).digest()
assert root.hex() == sys.argv[2], (root.hex(), sys.argv[2])
assert note["opened"] == {"entries": 0, "root": hashlib.sha256(b"").hexdigest()}, note["opened"]
PY
	# a second run opens at the first's size and notes it
	first=$(wc -l < "$T")
	sfma run m.json --apply > /dev/null
	jq -e --argjson n "$first" --arg r "$(merkle_root "$T" "$first")" '.opened == {entries: $n, root: $r}' "$C"
	[ "$(jq -r .integrity.merkleRoot ws/.sfma/result.json)" = "$(merkle_root "$T")" ]
}

@test "checkpoints signed with the audit key open with Go's note.Open under the key line sfma prove --verifier-key prints" {
	keyed
	# the key line: name, key ID = SHA-256(name || 0x0A || 0x01 || key)[:4], base64(0x01 || key)
	raw=$(openssl pkey -pubin -in pub.pem -outform DER | tail -c 32 | xxd -p -c 64)
	id=$({ printf 'sfma-audit\n\001'; xxd -r -p <<<"$raw"; } | sha256sum | cut -c1-8)
	[ "$VKEY" = "sfma-audit+$id+$({ printf '\001'; xxd -r -p <<<"$raw"; } | base64 -w0)" ]
	# the private key file names the same key
	[ "$(sfma prove --verifier-key key.pem)" = "$VKEY" ]
	n=$(wc -l < "$T")
	for cp in ws/.sfma/checkpoint ws/.sfma/checkpoints/*; do
		run "$GOV" checkpoint "$VKEY" "$cp"
		[ "$status" -eq 0 ] || { echo "$cp: $output"; return 1; }
	done
	run "$GOV" checkpoint "$VKEY" ws/.sfma/checkpoint
	[ "$output" = "OK checkpoint origin=$(head -1 ws/.sfma/checkpoint) size=$n root=$(sed -n 3p ws/.sfma/checkpoint)" ]
	# the signature line: an em dash, the key name, base64(key ID || Ed25519 over the note text)
	sig=$(sed -n 5p ws/.sfma/checkpoint)
	[[ "$sig" == "— sfma-audit "* ]]
	[ "$(base64 -d <<<"${sig#— sfma-audit }" | head -c 4 | xxd -p)" = "$id" ]
	head -n 3 ws/.sfma/checkpoint > text
	base64 -d <<<"${sig#— sfma-audit }" | tail -c 64 > sig.bin
	run openssl pkeyutl -verify -pubin -inkey pub.pem -rawin -in text -sigfile sig.bin
	[ "$status" -eq 0 ]
	# one byte changed - the root, the size, the signature - and Go refuses
	for at in "3 5" "2 0" "5 40"; do
		cp ws/.sfma/checkpoint cp
		flip cp $at
		run "$GOV" checkpoint "$VKEY" cp
		[ "$status" -eq 1 ] || { echo "$at: $output"; return 1; }
	done
	# another key's verifier refuses the note
	openssl genpkey -algorithm ed25519 2> /dev/null | openssl pkey -pubout -out other.pem
	run "$GOV" checkpoint "$(sfma prove --verifier-key other.pem)" ws/.sfma/checkpoint
	[ "$status" -eq 1 ]
}

@test "an inclusion proof of every line verifies with tlog.CheckRecord and sfma-verify --proof; a changed line, proof hash, root or signature is refused by both" {
	keyed
	n=$(wc -l < "$T")
	for i in $(seq "$n"); do
		sfma prove ws "$i" > p
		sed -n "${i}p" "$T" > line
		run "$GOV" inclusion "$VKEY" p line
		[ "$status" -eq 0 ] || { echo "line $i: $output"; return 1; }
		SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) run sfma-verify --proof p --line line
		[ "$status" -eq 0 ] || { echo "line $i: $output"; return 1; }
	done
	# the format: header, index, the audit path (O(log n) hashes), an empty line, the checkpoint verbatim
	sfma prove ws 5 > p
	[ "$(sed -n 1p p)" = c2sp.org/tlog-proof@v1 ]
	[ "$(sed -n 2p p)" = "index 4" ]
	hashes=$(sed -n '3,/^$/p' p | grep -c .)
	[ "$hashes" -le "$(awk -v n="$n" 'BEGIN { print int(log(n) / log(2)) + 1 }')" ]
	[ "$(sed -n "$((hashes + 4)),\$p" p)" = "$(cat ws/.sfma/checkpoint)" ]
	sed -n 5p "$T" > line
	SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) run sfma-verify --proof p --line line
	[ "$output" = "AUDIT_OK proof=inclusion signature=trusted origin=$(head -1 ws/.sfma/checkpoint) line=5 size=$n root=$(jq -r .integrity.merkleRoot ws/.sfma/result.json)" ]
	# the line on standard input, with or without its newline
	run sh -c "sed -n 5p $T | tr -d '\n' | sfma-verify --proof p"
	[ "$status" -eq 0 ]
	[[ "$output" == "AUDIT_OK proof=inclusion signature=unverified "* ]]
	# one byte changed: the line, a hash of the path, the checkpoint's root, its signature
	cp line l2 && flip l2 1 20
	both_refuse inclusion "$VKEY" p l2 -- --proof p --line l2
	sed -n 4p "$T" > l2
	both_refuse inclusion "$VKEY" p l2 -- --proof p --line l2
	for at in "3 5" "$((hashes + 6)) 5" "$((hashes + 8)) 40"; do
		cp p p2 && flip p2 $at
		both_refuse inclusion "$VKEY" p2 line -- --proof p2 --line line
	done
	# the index of another line
	sed 's/^index 4$/index 5/' p > p2
	both_refuse inclusion "$VKEY" p2 line -- --proof p2 --line line
	# a proof of an earlier checkpoint: of that tree
	first=$(ls ws/.sfma/checkpoints | sort -n | head -1)
	sfma prove --checkpoint "ws/.sfma/checkpoints/$first" ws 3 > p3
	sed -n 3p "$T" > line
	run "$GOV" inclusion "$VKEY" p3 line
	[ "$status" -eq 0 ]
	[ "$output" = "OK inclusion index=2 size=$first hashes=$(sed -n '3,/^$/p' p3 | grep -c .)" ]
}

@test "a consistency proof from every earlier size verifies with tlog.CheckTree and sfma-verify --proof --since; changed, refused" {
	keyed 3
	n=$(wc -l < "$T")
	for old in $(ls ws/.sfma/checkpoints | sort -n); do
		sfma prove --since "$old" ws > c
		[ "$(head -1 c)" = "old $old" ]
		run "$GOV" consistency "$VKEY" "ws/.sfma/checkpoints/$old" c
		[ "$status" -eq 0 ] || { echo "$old: $output"; return 1; }
		SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) run sfma-verify --proof c --since "ws/.sfma/checkpoints/$old"
		[ "$status" -eq 0 ] || { echo "$old: $output"; return 1; }
		[ "$output" = "AUDIT_OK proof=consistency signature=trusted origin=$(head -1 ws/.sfma/checkpoint) since=$old size=$n root=$(jq -r .integrity.merkleRoot ws/.sfma/result.json)" ]
	done
	# every size, against unsigned old trees computed here
	for old in $(seq "$n"); do
		sfma prove --since "$old" ws > c
		printf '%s\n%s\n%s\n' "$(head -1 ws/.sfma/checkpoint)" "$old" "$(merkle_root "$T" "$old" | xxd -r -p | base64 -w0)" > old.cp
		run sfma-verify --proof c --since old.cp
		[ "$status" -eq 0 ] || { echo "$old: $output"; return 1; }
	done
	old=$(ls ws/.sfma/checkpoints | sort -n | head -1)
	sfma prove --since "$old" ws > c
	hashes=$(sed -n '2,/^$/p' c | grep -c .)
	for at in "2 5" "$((hashes + 1)) 7" "$((hashes + 5)) 5" "$((hashes + 7)) 40"; do
		cp c c2 && flip c2 $at
		both_refuse consistency "$VKEY" "ws/.sfma/checkpoints/$old" c2 -- --proof c2 --since "ws/.sfma/checkpoints/$old"
	done
	# against another old tree (its root changed) both refuse
	cp "ws/.sfma/checkpoints/$old" old2 && flip old2 3 5
	run "$GOV" consistency "$VKEY" old2 c
	[ "$status" -eq 1 ]
	run sfma-verify --proof c --since old2
	[ "$status" -eq 1 ]
}

@test "across runs: every run's checkpoint is kept and is a prefix of today's tree; a rewritten trace is refused by the seal and by sfma-verify" {
	keyed 3
	sizes=$(ls ws/.sfma/checkpoints | sort -n | tr '\n' ' ')
	[ "$(wc -w <<<"$sizes")" -eq 3 ]
	for s in $sizes; do
		[ "$(sed -n 3p "ws/.sfma/checkpoints/$s")" = "$(merkle_root "$T" "$s" | xxd -r -p | base64 -w0)" ]
	done
	SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == *" root=$(merkle_root "$T") checkpoints=3 evidence="* ]]
	# --since: the trace extends an earlier checkpoint handed back
	first=${sizes%% *}
	cp "ws/.sfma/checkpoints/$first" earlier
	SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) run sfma-verify --since earlier ws
	[ "$status" -eq 0 ]
	[[ "$output" == *" checkpoints=3 since=$first evidence="* ]]
	# an earlier checkpoint not of this trace's prefix
	flip earlier 3 5
	run sfma-verify --since earlier ws
	[ "$status" -eq 1 ]
	[ "$output" = "AUDIT_INVALID: earlier: not the tree of the trace's first $first entries: the trace was rewritten below it" ]
	# a kept checkpoint whose signature by the record's key fails
	cp "ws/.sfma/checkpoints/$first" keep
	flip "ws/.sfma/checkpoints/$first" 5 40
	run sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$output" == "AUDIT_INVALID: ws/.sfma/checkpoints/$first: checkpoint: invalid signature by sfma-audit+"* ]]
	cp keep "ws/.sfma/checkpoints/$first"
	# a line below the first checkpoint rewritten and every hash after it
	# recomputed: the chain holds, the kept checkpoints do not - and the
	# next seal refuses to sign a tree that does not extend the last one
	tampered ws
	cp "$T" orig
	rechain 'es[1]["data"]["to"] = "certified"' ws
	sfma-verify --canonicalize < "$T" > canon && mv canon "$T" # as sfma-chain spells lines: line 1 is as it was
	[ "$(head -1 "$T")" = "$(head -1 orig)" ]
	run sfma-verify ws
	[ "$status" -eq 1 ]
	[[ "$output" == "AUDIT_INVALID: integrity.headHash does not match"* ]]
	# resealed unsigned by whoever rewrote it, only the kept checkpoints tell
	cp ws/.sfma/result.json rec
	jq 'del(.integrity)' rec > body
	mv ws/.sfma/checkpoint kept-last
	mkdir aside && mv ws/.sfma/checkpoints aside/
	sfma-seal ws < body > /dev/null
	cp "aside/checkpoints/$first" ws/.sfma/checkpoints/
	run sfma-verify ws
	[ "$status" -eq 1 ]
	[ "$output" = "AUDIT_INVALID: ws/.sfma/checkpoints/$first: not the tree of the trace's first $first entries: the trace was rewritten below it" ]
	rm -r ws/.sfma/checkpoints && mv aside/checkpoints ws/.sfma/
	cp rec ws/.sfma/result.json
	mv kept-last ws/.sfma/checkpoint
	jq 'del(.integrity)' rec > body
	SFMA_AUDIT_PRIVATE_KEY=$(cat key.pem) run sfma-seal ws < body
	[ "$status" -eq 1 ]
	[[ "$output" == *"the trace was rewritten below it; refusing to seal" ]]
	cmp rec ws/.sfma/result.json
	# cut back below the last checkpoint: refused too
	cp orig "$T"
	head -n "$first" orig > "$T"
	run sfma-seal ws < body
	[ "$status" -eq 1 ]
	[[ "$output" == *"entries, fewer than the last checkpoint's"*"the trace was cut back; refusing to seal" ]]
	cp orig "$T"
	SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) run sfma-verify ws
	[ "$status" -eq 0 ]
}

@test "the previous checkpoint's root is read from the writer's note, or found by a whole verification: the same either way" {
	sfma run m.json --apply > /dev/null
	first=$(wc -l < "$T")
	# more appended and noted after the seal (opened at the checkpoint's size) ...
	tampered ws # entries no run made: not for tests/replay-sweep.sh
	sfma-chain --head-cache ws/.sfma/chain-head.json "$T" <<<'{"kind":"task","data":{"n":1}}' > /dev/null
	jq -e --argjson n "$first" '.opened.entries == $n and .entries == $n + 1' ws/.sfma/chain-head.json
	jq 'del(.integrity)' ws/.sfma/result.json > body
	sfma-seal ws < body > /dev/null
	[ "$(jq -r .integrity.merkleRoot ws/.sfma/result.json)" = "$(merkle_root "$T")" ]
	# ... and a note opened elsewhere: the trace is verified from its first line
	sfma-chain --head-cache ws/.sfma/chain-head.json "$T" <<<'{"kind":"task","data":{"n":2}}' > /dev/null
	sfma-chain --head-cache ws/.sfma/chain-head.json "$T" <<<'{"kind":"task","data":{"n":3}}' > /dev/null
	sfma-seal ws < body > /dev/null
	[ "$(ls ws/.sfma/checkpoints | sort -n | tr '\n' ' ')" = "$first $((first + 1)) $((first + 3)) " ]
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == *" root=$(merkle_root "$T") checkpoints=3 "* ]]
	# a note altered (its frontier) no longer matches its check: it is
	# not used, and the tree is computed from the first line
	jq -c '.tree[0] = "'"$(printf '%064d' 0)"'"' ws/.sfma/chain-head.json > n && mv n ws/.sfma/chain-head.json
	sfma-seal ws < body > /dev/null
	run sfma-verify ws
	[ "$status" -eq 0 ]
}

@test "sfma attest: a DSSE envelope of an in-toto Statement; openssl pkeyutl verifies its signature over PAE and refuses a byte changed" {
	keyed 1
	SFMA_AUDIT_PRIVATE_KEY=$(cat key.pem) run sfma attest ws
	[ "$status" -eq 0 ]
	echo "$output" > env.json
	[ "$(jq -r .payloadType env.json)" = application/vnd.in-toto+json ]
	[ "$(jq -r '.signatures | length' env.json)" -eq 1 ]
	[ "$(jq -r '.signatures[0].keyid' env.json)" = "$(openssl pkey -pubin -in pub.pem -outform DER | sha256sum | cut -c1-64)" ]
	jq -r .payload env.json | base64 -d > payload
	jq -r '.signatures[0].sig' env.json | base64 -d > sig
	pae() { printf 'DSSEv1 %d %s %d ' 28 application/vnd.in-toto+json "$(stat -c %s "$1")"; cat "$1"; }
	pae payload > pae.bin
	run openssl pkeyutl -verify -pubin -inkey pub.pem -rawin -in pae.bin -sigfile sig
	[ "$status" -eq 0 ]
	# the Statement: the declared outputs and the trace, and the predicate
	R=ws/.sfma/result.json
	jq -e '._type == "https://in-toto.io/Statement/v1" and .predicateType == "https://sfma.dev/run/v1"' payload
	jq -e --arg h "$(sha256sum ws/hello.txt | cut -c1-64)" --arg t "$(sha256sum "$T" | cut -c1-64)" \
		'.subject == [{name: "hello.txt", digest: {sha256: $h}}, {name: ".sfma/trace.jsonl", digest: {sha256: $t}}]' payload
	jq -e --slurpfile r "$R" --arg origin "$(head -1 ws/.sfma/checkpoint)" '.predicate == {
		manifestSha256: $r[0].integrity.manifestSha256, resultSha256: $r[0].integrity.resultSha256,
		verdict: "completed", acceptance: $r[0].acceptance, treeSize: $r[0].integrity.treeSize,
		merkleRoot: $r[0].integrity.merkleRoot, origin: $origin, runnerVersion: $r[0].runnerVersion,
		startedAt: .predicate.startedAt, endedAt: .predicate.endedAt}' payload
	# start and end: the run's first and last clock-anchor, in RFC 3339
	start=$(jq -r --argjson s "$(jq .clock.firstSeq "$R")" 'select(.seq == $s) | .data.wallMs' "$T")
	[ "$(jq -r .predicate.startedAt payload)" = "$(date -u -d "@$((start / 1000))" +%Y-%m-%dT%H:%M:%S).$(printf %03d $((start % 1000)))Z" ]
	jq -e '.predicate.endedAt >= .predicate.startedAt' payload
	# one byte changed in the payload, or in the signature: refused
	cp payload p2 && flip p2 1 30
	pae p2 > pae2.bin
	run openssl pkeyutl -verify -pubin -inkey pub.pem -rawin -in pae2.bin -sigfile sig
	[ "$status" -ne 0 ]
	cp sig s2 && printf '\001' | dd of=s2 bs=1 seek=10 conv=notrunc 2> /dev/null
	run openssl pkeyutl -verify -pubin -inkey pub.pem -rawin -in pae.bin -sigfile s2
	[ "$status" -ne 0 ]
	# the statement alone needs no key; it is the envelope's payload
	run sfma attest --statement ws
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat payload)" ]
}

@test "sfma attest signs only what sfma-verify accepts, and only with a key; the key never reaches the verifier" {
	keyed 1
	run sfma attest ws
	[ "$status" -eq 1 ]
	[ "$output" = "sfma-attest: SFMA_AUDIT_PRIVATE_KEY is not set: an attestation is signed (--statement prints it unsigned)" ]
	SFMA_AUDIT_PRIVATE_KEY='not a key' run sfma attest ws
	[ "$status" -eq 1 ]
	[[ "$output" == "sfma-attest: SFMA_AUDIT_PRIVATE_KEY: not a PEM PKCS#8 private key" ]]
	# a record altered: sfma-verify's reason, then nothing attested
	jq '.verdict = "failed"' ws/.sfma/result.json > r && mv r ws/.sfma/result.json
	tampered ws
	SFMA_AUDIT_PRIVATE_KEY=$(cat key.pem) run sfma attest ws
	[ "$status" -eq 1 ]
	[ "${lines[0]}" = "AUDIT_INVALID: integrity.resultSha256 does not match the record (a result field was altered)" ]
	[[ "${lines[1]}" == "sfma-attest: ws: does not verify ("*"sfma-verify exited 1): nothing is attested" ]]
	# the key is gone from the environment before sfma-verify starts
	mkdir spy && cp "$SFMA_BINDIR"/sfma-attest spy/
	printf '#!/bin/sh\nenv > %s/verify.env\nexec "%s/sfma-verify" "$@"\n' "$PWD" "$SFMA_BINDIR" > spy/sfma-verify
	chmod +x spy/sfma-verify
	SFMA_AUDIT_PRIVATE_KEY=$(cat key.pem) run spy/sfma-attest --statement ws
	[ -s verify.env ]
	grep -q SFMA_AUDIT_PRIVATE_KEY verify.env && return 1
	grep -q -- "$(sed -n 2p key.pem)" verify.env && return 1
	true
}

@test "old records verify exactly as before and say nothing about a checkpoint; there is nothing to prove of them" {
	for f in legacy multirun signed unicode unsigned; do
		rm -rf $f && cp -r "$INTEROP/$f/ws" $f && chmod -R u+w $f
		want=$(sed -n "/^# $f\$/{n;p;}" "$INTEROP/README.md")
		run sfma-verify $f
		[ "$status" -eq 0 ]
		[ "$output" = "$want" ] || { echo "$f: $output"; return 1; }
		[ ! -e $f/.sfma/checkpoint ]
		run sfma prove $f 1
		[ "$status" -eq 1 ]
		[ "$output" = "sfma-prove: $f/.sfma/checkpoint: no checkpoint (no run of this workspace was sealed since sfma 0.4)" ]
	done
	# a workspace of the earlier runner sealed again: the record has the
	# tree, of the whole trace, legacy lines included
	sfma-chain legacy/.sfma/trace.jsonl <<<'{"kind":"clock-anchor","data":{"wallMs":1,"source":"system-wall"}}' > /dev/null
	jq 'del(.integrity)' legacy/.sfma/result.json | sfma-seal legacy > /dev/null
	run sfma-verify legacy
	[ "$status" -eq 0 ]
	[[ "$output" == *" root=$(merkle_root legacy/.sfma/trace.jsonl) checkpoints=1"* ]]
}

@test "hostile proofs and checkpoints are one-line refusals; usage errors exit 2" {
	sfma run m.json --apply > /dev/null
	sfma prove ws 2 > p
	sed -n 2p "$T" > line
	refuse() { # refuse FILE REASON
		run sfma-verify --proof "$1" --line line
		[ "$status" -eq 1 ] || { echo "$1: $status $output"; return 1; }
		[ "${#lines[@]}" -eq 1 ]
		[[ "$output" == "AUDIT_INVALID: $1: "*"$2"* ]] || { echo "$output"; return 1; }
	}
	printf '' > e; refuse e 'no complete first line'
	printf 'hello\n' > e; refuse e 'neither c2sp.org/tlog-proof@v1 nor'
	sed 's/^index 1$/index 01/' p > e; refuse e 'no "index N" line'
	sed 's/^index 1$/index 99999999999999999999/' p > e; refuse e 'no "index N" line'
	sed '3s/=$//' p > e; refuse e 'hash 1 is not a base64 SHA-256'
	sed '/^$/,$d' p > e; refuse e 'no empty line before the checkpoint'
	head -n "$(grep -n '^$' p | cut -d: -f1)" p > e; refuse e 'no checkpoint after the empty line'
	{ head -n 2 p; for i in $(seq 70); do sed -n 3p p; done; sed -n '/^$/,$p' p; } > e; refuse e 'more than 64 hashes'
	{ sed '/^$/q' p; printf 'example.com/log\n2\n%s\n' "$(sed -n 3p ws/.sfma/checkpoint)"; } > e
	refuse e 'the origin is not sfma/'
	{ sed '/^$/q' p; cat ws/.sfma/checkpoint; echo extension; } > e; refuse e 'lines after the root'
	{ sed '/^$/q' p; cat ws/.sfma/checkpoint; printf '\n— sfma-audit !!!!\n'; } > e; refuse e 'not base64'
	{ sed '/^$/q' p; head -c -1 ws/.sfma/checkpoint; } > e; refuse e 'does not end in a newline'
	{ sed '/^$/q' p; printf 'sfma/%064d\n\001\n' 0; } > e; refuse e 'control characters'
	sed 's/^index 1$/index 999/' p > e; refuse e 'index 999 is not in a tree of'
	# the extra line of C2SP tlog-proof is read and ignored
	sed '1a extra YWJj' p > e
	run sfma-verify --proof e --line line
	[ "$status" -eq 0 ]
	# a line file of two lines, a proof of the other kind
	sed -n 2,3p "$T" > two
	run sfma-verify --proof p --line two
	[ "$status" -eq 1 ]
	[[ "$output" == "AUDIT_INVALID: two: more than one line"* ]]
	run sfma-verify --proof p --since ws/.sfma/checkpoint
	[ "$status" -eq 1 ]
	usage() { run "$@"; [ "$status" -eq 2 ] || { echo "$*: $status $output"; return 1; }; }
	usage sfma-verify --line line ws
	usage sfma-verify --proof p ws
	usage sfma-verify --proof p --trusted-head "$(printf '%064d' 0):1"
	usage sfma-verify --proof - --line -
	usage sfma prove ws
	usage sfma prove ws 0
	usage sfma prove ws x
	usage sfma prove --since 0 ws
	usage sfma prove --verifier-key pub.pem ws
	usage sfma attest
	run sfma prove ws 999
	[ "$status" -eq 1 ]
	[[ "$output" == "sfma-prove: ws/.sfma/checkpoint: line 999 is not in the checkpoint's tree of "* ]]
	# a trace that is not the checkpoint's: no proof is made of it
	cp "$T" orig
	flip "$T" 2 30
	run sfma prove ws 1
	[ "$status" -eq 1 ]
	[[ "$output" == "sfma-prove: $T: its first "*" lines are not the tree the checkpoint names"* ]]
}
