#!/usr/bin/env bats
# sfma-seal: the result record's commitments and Ed25519 signature
# (sfma-formats(5)), interoperating with the OpenSSL CLI.

load helpers

setup() {
	require openssl
	require jq
	cd "$BATS_TEST_TMPDIR"
	mkdir -p ws/.sfma
	printf '%s\n' '{"kind":"clock-anchor","data":{"wallMs":1,"source":"system-wall"}}' \
		'{"kind":"task","data":{"call":{"tool":"run","cmd":"make"}}}' \
		'{"kind":"result","data":{"halt":"done"}}' | sfma-chain ws/.sfma/trace.jsonl > /dev/null
	BODY='{"manifest":{"name":"t","workspace":"ws","maxTurns":8,"r":0.1},"genesisVersion":"genesis-v1","verdict":"completed","turns":3,"outputs":[{"path":"é😀","ok":true}]}'
}

sha() {
	sha256sum | cut -d' ' -f1
}

# The canonical bytes of a JSON value (no trailing newline).
canonical() {
	sfma-verify --canonicalize | tr -d '\n'
}

@test "writes result.json with the right integrity fields and prints them" {
	run sfma-seal ws <<<"$BODY"
	[ "$status" -eq 0 ]
	R=ws/.sfma/result.json
	[ "$output" = "$(jq -c .integrity "$R" | canonical)" ]
	[ "$(jq -r .integrity.algorithm "$R")" = sha256-chain-v1 ]
	[ "$(jq -r .integrity.entries "$R")" -eq 3 ]
	[ "$(jq -r .integrity.headHash "$R")" = "$(tail -1 ws/.sfma/trace.jsonl | jq -r .hash)" ]
	[ "$(jq -r .integrity.manifestSha256 "$R")" = "$(jq -c .manifest <<<"$BODY" | canonical | sha)" ]
	[ "$(jq -r .integrity.resultSha256 "$R")" = "$(jq -c 'del(.integrity)' "$R" | canonical | sha)" ]
	[ "$(jq -r .trace "$R")" = .sfma/trace.jsonl ]
	[ "$(jq -c 'del(.integrity, .trace)' "$R")" = "$(jq -c . <<<"$BODY")" ]
	[ "$(jq -r '.integrity | has("signature")' "$R")" = false ]
	run sfma-verify ws
	[ "$status" -eq 0 ]
	[ "$output" = "AUDIT_OK signature=none entries=3 head=$(tail -1 ws/.sfma/trace.jsonl | jq -r .hash)$(tree_words ws)" ]
}

@test "result.json is replaced atomically: a new file renamed into place, no temporary left" {
	sfma-seal ws <<<"$BODY" > /dev/null
	ln ws/.sfma/result.json old-link
	cp ws/.sfma/result.json old-copy
	sfma-chain ws/.sfma/trace.jsonl <<<'{"kind":"task","data":{}}' > /dev/null
	run sfma-seal ws <<<"$BODY"
	[ "$status" -eq 0 ]
	# the old inode was never written to: the record was renamed over it
	cmp old-link old-copy
	run cmp -s old-link ws/.sfma/result.json
	[ "$status" -eq 1 ]
	[ "$(jq .integrity.entries ws/.sfma/result.json)" -eq 4 ]
	[ "$(ls -A ws/.sfma)" = "$(printf '%s\n' checkpoint checkpoints result.json trace.jsonl)" ]
	[ "$(ls -A ws/.sfma/checkpoints)" = "$(printf '%s\n' 3 4)" ]
}

@test "signed with an openssl-made Ed25519 key: trusted under its public key, and openssl pkeyutl verifies the signature" {
	openssl genpkey -algorithm ed25519 -out key.pem 2> /dev/null
	openssl pkey -in key.pem -pubout -out pub.pem
	SFMA_AUDIT_PRIVATE_KEY=$(cat key.pem) run sfma-seal ws <<<"$BODY"
	[ "$status" -eq 0 ]
	R=ws/.sfma/result.json
	[ "$(jq -r .integrity.signature.algorithm "$R")" = ed25519 ]
	[ "$(jq -r .integrity.signature.publicKey "$R")" = "$(cat pub.pem)" ]
	SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) run sfma-verify ws
	[ "$status" -eq 0 ]
	[ "$output" = "AUDIT_OK signature=trusted entries=3 head=$(tail -1 ws/.sfma/trace.jsonl | jq -r .hash)$(tree_words ws)" ]
	run sfma-verify ws
	[ "$output" = "AUDIT_OK signature=untrusted-key entries=3 head=$(tail -1 ws/.sfma/trace.jsonl | jq -r .hash)$(tree_words ws)" ]

	# The OpenSSL CLI checks the same signature over the canonical integrity bytes.
	jq -c '.integrity | del(.signature)' "$R" | canonical > msg
	jq -r .integrity.signature.value "$R" | base64 -d > sig
	[ "$(stat -c %s sig)" -eq 64 ]
	run openssl pkeyutl -verify -pubin -inkey pub.pem -rawin -in msg -sigfile sig
	[ "$status" -eq 0 ]
	[[ "$output" == *"Signature Verified Successfully"* ]]
	# and refuses it for other bytes
	printf ' ' >> msg
	run openssl pkeyutl -verify -pubin -inkey pub.pem -rawin -in msg -sigfile sig
	[ "$status" -ne 0 ]
}

@test "the integrity object has the fixed shape sfma-verify requires; the embedded key is byte for byte openssl's PEM" {
	sfma-seal ws <<<"$BODY" > /dev/null
	R=ws/.sfma/result.json
	[ "$(jq -c '.integrity | keys_unsorted' "$R")" = '["algorithm","headHash","entries","manifestSha256","resultSha256","treeSize","merkleRoot"]' ]
	openssl genpkey -algorithm ed25519 -out key.pem 2> /dev/null
	openssl pkey -in key.pem -pubout -out pub.pem
	SFMA_AUDIT_PRIVATE_KEY=$(cat key.pem) sfma-seal ws <<<"$BODY" > /dev/null
	[ "$(jq -c '.integrity | keys_unsorted' "$R")" = '["algorithm","headHash","entries","manifestSha256","resultSha256","treeSize","merkleRoot","signature"]' ]
	[ "$(jq -c '.integrity.signature | keys_unsorted' "$R")" = '["algorithm","publicKey","value"]' ]
	# the BEGIN line, base64 in lines of 64, the END line and its newline:
	# exactly what sfma-verify accepts as the one embedded key
	jq -j .integrity.signature.publicKey "$R" > embedded.pem
	cmp embedded.pem pub.pem
	SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == "AUDIT_OK signature=trusted "* ]]
}

@test "the other way: a record signed by openssl pkeyutl verifies as trusted" {
	openssl genpkey -algorithm ed25519 -out key.pem 2> /dev/null
	openssl pkey -in key.pem -pubout -out pub.pem
	sfma-seal ws <<<"$BODY" > /dev/null
	R=ws/.sfma/result.json
	jq -c .integrity "$R" | canonical > msg
	openssl pkeyutl -sign -inkey key.pem -rawin -in msg -out sig
	jq --arg pem "$(cat pub.pem)" --arg v "$(base64 -w0 sig)" \
		'.integrity.signature = {algorithm: "ed25519", publicKey: ($pem + "\n"), value: $v}' "$R" > r2
	mv r2 "$R"
	SFMA_AUDIT_PUBLIC_KEY=$(cat pub.pem) run sfma-verify ws
	[ "$status" -eq 0 ]
	[[ "$output" == "AUDIT_OK signature=trusted entries=3 "* ]]
}

@test "a bad key is a clear error, exit 1, and no record is written or changed" {
	openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 -out rsa.pem 2> /dev/null
	openssl genpkey -algorithm X25519 -out x25519.pem 2> /dev/null
	openssl genpkey -algorithm ed448 -out ed448.pem 2> /dev/null
	openssl genpkey -algorithm ed25519 -out ed.pem 2> /dev/null
	openssl pkey -in ed.pem -pubout -out edpub.pem
	openssl genpkey -algorithm ed25519 -aes-256-cbc -pass pass:secret -out enc.pem 2> /dev/null
	head -c 60 ed.pem > truncated.pem
	echo 'not a key at all' > garbage.pem
	bad() {
		SFMA_AUDIT_PRIVATE_KEY=$(cat "$1") run sfma-seal ws <<<"$BODY"
		[ "$status" -eq 1 ] || { echo "$1: status $status"; return 1; }
		[ "${#lines[@]}" -eq 1 ]
		[[ "$output" == "sfma-seal: SFMA_AUDIT_PRIVATE_KEY: $2; refusing to write an unsigned record" ]] || { echo "$1: $output"; return 1; }
	}
	# no record yet: none may appear
	bad garbage.pem 'not a PEM PKCS#8 private key'
	[ ! -e ws/.sfma/result.json ]
	# an existing record stays as it was
	sfma-seal ws <<<"$BODY" > /dev/null
	cp ws/.sfma/result.json before
	bad garbage.pem 'not a PEM PKCS#8 private key'
	bad rsa.pem 'not an Ed25519 key'
	bad x25519.pem 'not an Ed25519 key'
	bad ed448.pem 'not an Ed25519 key'
	bad edpub.pem 'not a PEM PKCS#8 private key'
	bad truncated.pem 'not a PEM PKCS#8 private key'
	# encrypted: refused at once, never a passphrase prompt
	bad enc.pem 'not a PEM PKCS#8 private key'
	cmp before ws/.sfma/result.json
	[ "$(ls -A ws/.sfma)" = "$(printf '%s\n' checkpoint checkpoints result.json trace.jsonl)" ]
}

@test "the signing key never appears in stdout, stderr or any file" {
	openssl genpkey -algorithm ed25519 -out key.pem 2> /dev/null
	openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 -out rsa.pem 2> /dev/null
	# the base64 body of each key: any of its lines showing up is a leak
	body_lines() { grep -v -- '-----' "$1"; }
	SFMA_AUDIT_PRIVATE_KEY=$(cat key.pem) sfma-seal ws <<<"$BODY" > out 2> err
	SFMA_AUDIT_PRIVATE_KEY=$(cat rsa.pem) sfma-seal ws <<<"$BODY" >> out 2>> err || true
	[ -s ws/.sfma/result.json ]
	for k in key.pem rsa.pem; do
		while IFS= read -r l; do
			run grep -rF -- "$l" out err ws
			[ "$status" -eq 1 ]
		done < <(body_lines "$k")
	done
	# nor does the raw 32-byte seed, in base64 or hex
	seed_hex=$(openssl pkey -in key.pem -outform DER | tail -c 32 | od -An -tx1 | tr -d ' \n')
	[ ${#seed_hex} -eq 64 ]
	run grep -rF -- "$seed_hex" out err ws
	[ "$status" -eq 1 ]
}

@test "a body carrying integrity, or that is not a result body, is refused" {
	refused() {
		run sfma-seal ws <<<"$1"
		[ "$status" -eq 1 ]
		[ "${#lines[@]}" -eq 1 ]
		[[ "$output" == "sfma-seal: stdin: $2"* ]] || { echo "$output"; return 1; }
		[ ! -e ws/.sfma/result.json ]
	}
	refused '{"manifest":{},"integrity":{"algorithm":"sha256-chain-v1"}}' 'the result body must not carry integrity'
	refused '{"manifest":{},"integrity":null}' 'the result body must not carry integrity'
	refused '{"verdict":"completed"}' 'record has no manifest object'
	refused '{"manifest":[]}' 'record has no manifest object'
	refused '{"manifest":{},"trace":"../other.jsonl"}' 'trace must be ".sfma/trace.jsonl"'
	refused '[1,2]' 'the result body must be a JSON object'
	refused '{"manifest":{},"a":1,"a":2}' 'invalid JSON: duplicate object key'
}

@test "a broken trace refuses to seal" {
	sed -i '2s/"make"/"rm"/' ws/.sfma/trace.jsonl
	run sfma-seal ws <<<"$BODY"
	[ "$status" -eq 1 ]
	[ "$output" = "sfma-seal: ws/.sfma/trace.jsonl: failed hash-chain verification: line 2: hash mismatch (the entry's content was altered)" ]
	[ ! -e ws/.sfma/result.json ]
	rm ws/.sfma/trace.jsonl
	run sfma-seal ws <<<"$BODY"
	[ "$status" -eq 1 ]
	[ "$output" = "sfma-seal: ws/.sfma/trace.jsonl: No such file or directory" ]
}

@test "hostile input never crashes sfma-seal: one-line error, exit 1, nothing written" {
	hostile() {
		run sfma-seal "${2:-ws}" < "$1"
		[ "$status" -eq 1 ] || { echo "status $status"; return 1; }
		[ "${#lines[@]}" -eq 1 ]
		[[ "$output" == "sfma-seal: "* ]]
		[ ! -e ws/.sfma/result.json ]
	}
	printf '{"manifest":{' > in; hostile in
	printf '{"manifest":{},"v":"\xc3\x28"}' > in; hostile in
	python3 -c 'print("{\"manifest\":{},\"x\":" + "[" * 10000 + "]" * 10000 + "}")' > in; hostile in
	: > in; hostile in
	{ printf '{"manifest":{},"x":"'; head -c 100000000 /dev/zero | tr '\0' a; printf '"}'; } > in; hostile in
	[[ "$output" == *"larger than"* ]]
	# a directory where a file should be
	echo "$BODY" > in
	mkdir ws/.sfma/result.json
	run sfma-seal ws < in
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
	rmdir ws/.sfma/result.json
	mv ws/.sfma/trace.jsonl t && mkdir ws/.sfma/trace.jsonl
	hostile in
	rmdir ws/.sfma/trace.jsonl && mv t ws/.sfma/trace.jsonl
	touch notdir
	hostile in notdir
	# a trace of hostile lines
	python3 -c 'print("{\"a\":" * 10000 + "1" + "}" * 10000)' > ws/.sfma/trace.jsonl; hostile in
	printf '{"a":"\xff"}\n' > ws/.sfma/trace.jsonl; hostile in
	# an empty trace begins a new log: the old one's checkpoint (of the
	# trace sealed above, before result.json failed) goes with it
	: > ws/.sfma/trace.jsonl
	run sfma-seal ws < in
	[ "$status" -eq 1 ]
	[[ "$output" == *"0 entries, fewer than the last checkpoint's 3: the trace was cut back; refusing to seal" ]]
	rm -r ws/.sfma/checkpoint ws/.sfma/checkpoints
	run sfma-seal ws < in
	[ "$status" -eq 0 ]
	[ "$(jq -r .integrity.headHash ws/.sfma/result.json)" = 0000000000000000000000000000000000000000000000000000000000000000 ]
}
