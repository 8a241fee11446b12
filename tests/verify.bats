#!/usr/bin/env bats
# sfma-verify: offline verification (sfma-formats(5)) against the
# interop fixtures, a tampering suite, --trusted-head, and hostile input.

load helpers
bats_require_minimum_version 1.5.0

setup() {
	require jq
	cd "$BATS_TEST_TMPDIR"
}

# Copy a fixture's workspace here (the originals are read-only).
fixture() {
	rm -rf "$1" && cp -r "$INTEROP/$1/ws" "$1" && chmod -R u+w "$1"
}

# A workspace written by sfma-chain and sfma-seal, optionally signed.
ours() {
	mkdir -p ours/.sfma
	printf '%s\n' '{"kind":"clock-anchor","data":{"wallMs":1795985236340,"source":"system-wall"}}' \
		'{"kind":"lifecycle","data":{"from":null,"to":"probation"}}' \
		'{"kind":"call","data":{"endpoint":"e","latencyMs":12.5,"ok":true},"class":"reasoning"}' \
		'{"kind":"candidate","data":{"mission":"Résumé 😀 \u2028 tab\there","n":[1e21,5e-324,-0]},"loop":1}' \
		'{"kind":"task","data":{"call":{"tool":"run","cmd":"make"}},"loop":1,"refs":["candidate-4"]}' \
		'{"kind":"verdict","data":{"tier":"hard","pass":true,"reason":"ok"},"loop":1,"refs":["task-5"]}' \
		'{"kind":"clock-anchor","data":{"wallMs":1795985239999,"source":"system-wall"}}' |
		sfma-chain ours/.sfma/trace.jsonl > /dev/null
	sfma-seal ours <<<'{"manifest":{"name":"ours","workspace":"ours"},"verdict":"completed","turns":2}' > /dev/null
}

# Run sfma-verify on $1 and require AUDIT_INVALID (exit 1, nothing on
# stdout, one stderr line) whose reason contains $2. Called hundreds of
# times: no subshell beyond the one capturing stderr.
invalid() {
	local err status=0
	err=$(sfma-verify "$1" 2>&1 > verify.out) || status=$?
	[ "$status" -eq 1 ] || { echo "expected AUDIT_INVALID, got status $status: $err"; return 1; }
	[ ! -s verify.out ] && [[ "$err" != *$'\n'* ]] || { echo "expected one line on stderr: $err"; return 1; }
	[[ "$err" == "AUDIT_INVALID: "*"$2"* ]] || { echo "reason '$err' does not name: $2"; return 1; }
}

@test "every interop fixture prints exactly its README line" {
	expect() {
		fixture "$1"
		run sfma-verify "$1"
		[ "$status" -eq 0 ]
		[ "$output" = "$2" ] || { echo "$1: $output"; return 1; }
		# the result.json path works the same as the workspace
		run sfma-verify "$1/.sfma/result.json"
		[ "$output" = "$2" ]
	}
	expect legacy 'AUDIT_OK signature=none entries=18 head=618bf5a8d10b43461a0ef2989abb1fc8ab52c78d404f7171c112eb2d403faea6'
	expect multirun 'AUDIT_OK signature=none entries=58 head=0fac10712b021090d384d32e80a39afdd29e71bd57eae8c4fc5b81fb8c51a666'
	expect signed 'AUDIT_OK signature=untrusted-key entries=16 head=6072d571e7521ae5a441149549589a5dffbd37b7f944a8def54b6aec54a446ab'
	expect unicode 'AUDIT_OK signature=none entries=16 head=2bf0d3e97bc787743265483f0ae5c08261748fa1ec07feff0fafffaadb07fe73'
	expect unsigned 'AUDIT_OK signature=none entries=16 head=3a88a81fb91a4abdddc7e7ff1fce6b5cdaeaee5849647701d7e18359ad4b4d72'
	SFMA_AUDIT_PUBLIC_KEY=$(cat "$INTEROP/signed/trusted-public.pem") run sfma-verify signed
	[ "$status" -eq 0 ]
	[ "$output" = 'AUDIT_OK signature=trusted entries=16 head=6072d571e7521ae5a441149549589a5dffbd37b7f944a8def54b6aec54a446ab' ]
}

# The fingerprint of a public key PEM file as sfma-verify prints it.
fingerprint() {
	openssl pkey -pubin -in "$1" -outform DER | sha256sum | cut -c1-16
}

@test "the wrong key fails exactly as the README says, then names the key expected and the key found" {
	fixture signed
	SFMA_AUDIT_PUBLIC_KEY=$(cat "$INTEROP/signed/other-public.pem") run --separate-stderr sfma-verify signed
	[ "$status" -eq 1 ]
	# the README's line, exactly, first: scripts match it
	[ "${stderr_lines[0]}" = "AUDIT_INVALID: invalid audit signature" ]
	[ "${#stderr_lines[@]}" -eq 2 ]
	local want found
	want=$(fingerprint "$INTEROP/signed/other-public.pem")
	found=$(fingerprint "$INTEROP/signed/trusted-public.pem")
	[ "$want" != "$found" ]
	[[ "${stderr_lines[1]}" == "sfma-verify: expected key $want (SFMA_AUDIT_PUBLIC_KEY), the record is signed with key $found "* ]]
	# a signature that is simply bad under the right key has nothing more to say
	jq '.integrity.headHash = "0000000000000000000000000000000000000000000000000000000000000000"' \
		signed/.sfma/result.json >r && cp r signed/.sfma/result.json
	SFMA_AUDIT_PUBLIC_KEY=$(cat "$INTEROP/signed/trusted-public.pem") run --separate-stderr sfma-verify signed
	[ "$status" -eq 1 ]
	[[ "$stderr" == "AUDIT_INVALID: "* ]]
	[ "${#stderr_lines[@]}" -eq 1 ]
	fixture signed
	# stdout stays empty: the line is on stderr
	SFMA_AUDIT_PUBLIC_KEY=$(cat "$INTEROP/signed/other-public.pem") run sh -c 'sfma-verify signed 2>/dev/null'
	[ -z "$output" ]
	# an unsigned record cannot pass for trusted
	fixture unsigned
	SFMA_AUDIT_PUBLIC_KEY=$(cat "$INTEROP/signed/trusted-public.pem") invalid unsigned 'record is unsigned'
}

# Tamper with every line of a workspace's trace in turn. Legacy (unchained)
# lines are caught where the chain starts, chained lines by their own hash.
tamper_each_line() {
	local ws=$1 T=$1/.sfma/trace.jsonl n legacy i first k line
	local -a L
	cp "$T" orig
	mapfile -t L < orig
	n=${#L[@]}
	legacy=$(grep -c -v '"prevHash"' orig || true)
	first=$((legacy + 1))
	# the trace with line $1 (1-based) replaced by $2
	with_line() {
		for k in "${!L[@]}"; do
			if [ "$k" -eq "$(($1 - 1))" ]; then printf '%s\n' "$2"; else printf '%s\n' "${L[$k]}"; fi
		done > "$T"
	}
	for i in $(seq "$n"); do
		# change a value: the entry's seq gains a leading digit
		line=${L[$((i - 1))]}
		[[ "$line" =~ (\"seq\" ?: ?)([0-9]) ]]
		with_line "$i" "${line/"${BASH_REMATCH[0]}"/${BASH_REMATCH[1]}1${BASH_REMATCH[2]}}"
		if [ "$i" -le "$legacy" ]; then
			invalid "$ws" "trace line $first: prevHash does not match the previous entry"
		else
			invalid "$ws" "trace line $i: hash mismatch (the entry's content was altered)"
		fi
	done
	# Moving lines: at each end, around the legacy boundary, in the middle.
	for i in $(printf '%s\n' 1 2 "$legacy" "$first" "$((n / 2))" "$((n - 1))" "$n" | awk -v n="$n" '$1 >= 1 && $1 <= n && !seen[$1]++'); do
		# delete it
		sed "${i}d" orig > "$T"
		if [ "$i" -eq "$n" ]; then
			invalid "$ws" "integrity.headHash does not match the trace head"
		elif [ "$i" -lt "$first" ]; then
			invalid "$ws" "trace line $legacy: prevHash does not match"
		else
			invalid "$ws" "trace line $i: prevHash does not match the previous entry (a line was deleted, inserted or reordered)"
		fi
		# insert a copy of it after itself
		sed "${i}p" orig > "$T"
		if [ "$i" -lt "$legacy" ]; then
			invalid "$ws" "trace line $((first + 1)): prevHash does not match"
		elif [ "$i" -eq "$legacy" ]; then
			invalid "$ws" "trace line $((legacy + 2)): prevHash does not match"
		else
			invalid "$ws" "trace line $((i + 1)): prevHash does not match"
		fi
		# swap it with the next one
		if [ "$i" -lt "$n" ]; then
			sed "${i}{h;d};$((i + 1)){G}" orig > "$T"
			[ "$(sed -n "${i}p" "$T")" = "${L[$i]}" ]
			invalid "$ws" "prevHash does not match"
		fi
	done
	# truncate mid-line
	head -c -20 orig > "$T"
	invalid "$ws" "trace line $n: torn final line ("
	# an unchained line after the chain
	cp orig "$T" && echo '{"seq":1}' >> "$T"
	invalid "$ws" "trace line $((n + 1)): unchained line after chained entries"
	cp orig "$T"
}

@test "tampering with any line of the fixtures' traces is AUDIT_INVALID naming the line" {
	for f in legacy multirun signed unicode unsigned; do
		fixture $f
		tamper_each_line $f
		run sfma-verify $f
		[ "$status" -eq 0 ]
	done
}

@test "tampering with any line of a trace written by sfma-chain is AUDIT_INVALID naming the line" {
	ours
	tamper_each_line ours
	# a data value, not only seq
	sed 's/"cmd":"make"/"cmd":"rm"/' orig > ours/.sfma/trace.jsonl
	invalid ours "trace line 5: hash mismatch"
	# a changed value with its own hash recomputed breaks the next link
	line=$(sed -n 5p orig | jq -c '.data.call.cmd = "rm" | del(.hash)')
	h=$(sfma-verify --canonicalize <<<"$line" | tr -d '\n' | sha256sum | cut -d' ' -f1)
	{ sed -n 1,4p orig; jq -c --arg h "$h" '.hash = $h' <<<"$line"; sed -n '6,$p' orig; } > ours/.sfma/trace.jsonl
	invalid ours "trace line 6: prevHash does not match"
}

@test "edits in the unicode fixture's canonicalization edge cases are caught" {
	fixture unicode
	T=unicode/.sfma/trace.jsonl
	cp "$T" orig
	edit() {
		python3 -c 'import sys; d=open(sys.argv[1],encoding="utf-8").read(); assert sys.argv[2] in d, sys.argv[2]; open(sys.argv[3],"w",encoding="utf-8").write(d.replace(sys.argv[2], sys.argv[3 + 1], 1))' orig "$1" "$T" "$2"
		invalid unicode "hash mismatch"
	}
	edit '1e+21' '1e+20'
	edit '5e-324' '0'
	edit 'Résumé' 'Resume'
	edit '😀' '😁'
	edit '\u0007bell' '\u0008bell'
	edit $'\u2028' $'\u2029'
}

# Rewrite a record with a jq filter (values keep their meaning: layout is not
# the point here).
edit_record() {
	jq "$2" "$1" > "$1.new" && mv "$1.new" "$1"
}

@test "editing each integrity field, a result field or the manifest is AUDIT_INVALID naming it" {
	for f in signed unsigned ours; do
		if [ $f = ours ]; then ours; else fixture $f; fi
		R=$f/.sfma/result.json
		cp "$R" rec
		try() {
			cp rec "$R"
			edit_record "$R" "$1"
			invalid $f "$2"
		}
		try '.integrity.algorithm = "sha256-chain-v2"' 'integrity.algorithm is not sha256-chain-v1'
		try '.integrity.headHash = ("0" * 64)' 'integrity.headHash does not match the trace head'
		try '.integrity.entries += 1' 'integrity.entries says'
		try '.integrity.entries |= tostring' 'integrity.entries is missing or not a count'
		try '.integrity.manifestSha256 = ("f" * 64)' 'integrity.manifestSha256 does not match the manifest'
		try '.integrity.resultSha256 = ("f" * 64)' 'integrity.resultSha256 does not match the record'
		try 'del(.integrity.resultSha256)' 'integrity.resultSha256 is missing or not a string'
		try '.verdict = "failed"' 'integrity.resultSha256 does not match the record (a result field was altered)'
		try '.turns = 99' 'integrity.resultSha256 does not match the record'
		try '.extra = 1' 'integrity.resultSha256 does not match the record'
		try '.manifest.name = "x"' 'integrity.manifestSha256 does not match the manifest'
		try 'del(.integrity)' 'record has no integrity object'
		try '.trace = "../../etc/passwd"' 'is not a path inside the workspace'
		cp rec "$R"
	done
}

@test "signature tampering: flipped byte, swapped embedded key, wrong algorithm" {
	fixture signed
	R=signed/.sfma/result.json
	cp "$R" rec
	openssl genpkey -algorithm ed25519 -out k2.pem 2> /dev/null
	openssl pkey -in k2.pem -pubout -out k2pub.pem
	try() {
		cp rec "$R"
		edit_record "$R" "$1"
		invalid signed "$2"
	}
	# flip one bit of the first byte, and of the last (keeping the padding bits zero)
	sig=$(jq -r .integrity.signature.value rec)
	flip() { base64 -d <<<"$sig" | python3 -c 'import sys; b=bytearray(sys.stdin.buffer.read()); b[int(sys.argv[1])]^=int(sys.argv[2]); sys.stdout.buffer.write(b)' "$@" | base64 -w0; }
	try ".integrity.signature.value = \"$(flip 0 1)\"" 'invalid audit signature'
	try ".integrity.signature.value = \"$(flip 63 128)\"" 'invalid audit signature'
	try '.integrity.signature.value |= .[:-4]' 'invalid audit signature (value is not a base64 Ed25519 signature)'
	try '.integrity.signature.value |= "!" + .[1:]' 'value is not a base64 Ed25519 signature'
	# another key embedded: the signature no longer verifies under it
	try ".integrity.signature.publicKey = $(jq -Rs . k2pub.pem)" 'invalid audit signature'
	try '.integrity.signature.publicKey = "garbage"' 'integrity.signature.publicKey: not a PEM public key'
	try '.integrity.signature.algorithm = "rsa"' 'integrity.signature.algorithm is not ed25519'
	try '.integrity.signature = "x"' 'integrity.signature is not an object'
	try 'del(.integrity.signature.value)' 'integrity.signature.value is missing or not a string'
	# a signed field changed under a valid signature
	cp rec "$R"
	SFMA_AUDIT_PUBLIC_KEY=$(cat "$INTEROP/signed/trusted-public.pem") run sfma-verify signed
	[ "$status" -eq 0 ]

	# Re-signed by an attacker with their own key and embedded key: it is a
	# valid signature by an untrusted key, and the trusted key rejects it.
	jq -c '.integrity | del(.signature)' rec | sfma-verify --canonicalize | tr -d '\n' > msg
	openssl pkeyutl -sign -inkey k2.pem -rawin -in msg -out sig
	jq --arg pem "$(cat k2pub.pem)" --arg v "$(base64 -w0 sig)" \
		'.integrity.signature.publicKey = ($pem + "\n") | .integrity.signature.value = $v' rec > "$R"
	run sfma-verify signed
	[ "$status" -eq 0 ]
	[[ "$output" == "AUDIT_OK signature=untrusted-key "* ]]
	SFMA_AUDIT_PUBLIC_KEY=$(cat "$INTEROP/signed/trusted-public.pem") run --separate-stderr sfma-verify signed
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "AUDIT_INVALID: invalid audit signature" ]
	[[ "${stderr_lines[1]}" == "sfma-verify: expected key $(fingerprint "$INTEROP/signed/trusted-public.pem") (SFMA_AUDIT_PUBLIC_KEY), the record is signed with key $(fingerprint k2pub.pem) "* ]]
	# A valid signature by the trusted key with another key embedded.
	jq --arg pem "$(cat k2pub.pem)" '.integrity.signature.publicKey = ($pem + "\n")' rec > "$R"
	SFMA_AUDIT_PUBLIC_KEY=$(cat "$INTEROP/signed/trusted-public.pem") invalid signed \
		"embedded public key is not the trusted key (expected $(fingerprint "$INTEROP/signed/trusted-public.pem"), found $(fingerprint k2pub.pem))"
	# A trusted key that is not a key
	cp rec "$R"
	SFMA_AUDIT_PUBLIC_KEY=nonsense invalid signed 'SFMA_AUDIT_PUBLIC_KEY: not a PEM public key'
}

# Put spaces and tabs between the tokens of every line of a JSON file.
spread() {
	python3 - "$@" <<'PY'
import sys

def spread(line):
    res, in_str, esc = [], False, False
    for ch in line:
        if in_str:
            res.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
            res.append(ch)
        elif ch in "{[,:":
            res.append(ch + " \t ")
        elif ch in "}]":
            res.append(" " + ch)
        else:
            res.append(ch)
    return "".join(res)

for path in sys.argv[1:]:
    text = open(path, encoding="utf-8").read()
    open(path, "w", encoding="utf-8").write("\n".join(spread(l) for l in text.split("\n")))
PY
}

@test "whitespace-only changes between tokens still verify, in traces and records; a record's tree commits to the trace's bytes" {
	for f in legacy unicode signed ours; do
		if [ $f = ours ]; then ours; else fixture $f; fi
		run sfma-verify $f
		want=$output
		T=$f/.sfma/trace.jsonl
		cp "$T" unspread
		# legacy lines are hashed as bytes: only chained lines may be respaced
		legacy=$(grep -c -v '"prevHash"' "$T" || true)
		head -n "$legacy" "$T" > keep
		tail -n +"$((legacy + 1))" "$T" > rest
		spread rest $f/.sfma/result.json
		cat keep rest > "$T"
		grep -q ' 	 ' "$T"
		if [ $f = ours ]; then
			# the chain still holds (it hashes values), the Merkle tree
			# (sfma-formats(5): leaves are the lines as written) does not
			invalid ours "integrity.merkleRoot does not match the Merkle tree of the trace"
			cp unspread "$T"
		fi
		run sfma-verify $f
		[ "$status" -eq 0 ]
		[ "$output" = "$want" ]
	done
	# but a legacy line's bytes are committed to, whitespace included
	fixture legacy
	sed -i '1s/"seq": 1/"seq":  1/' legacy/.sfma/trace.jsonl
	invalid legacy "trace line 3: prevHash does not match"
}

@test "a long trace verifies the same whatever the threads, and the first broken line is the one named" {
	# 60000 lines, some 19 MB: blocks checked while the one before is
	# linked, each cut into chunks taken by whichever thread is free.
	mkdir -p long/.sfma
	python3 "$REPO/tests/bench/gen-trace.py" 60000 > long/.sfma/trace.jsonl
	sfma-seal long <<<'{"manifest":{"name":"long","workspace":"long"},"verdict":"completed"}' > /dev/null
	want=$(sfma-verify --threads 1 long)
	[[ "$want" == "AUDIT_OK signature=none entries=60000 head="*" root="* ]]
	for t in 2 3 8; do
		got=$(sfma-verify --threads "$t" long)
		[ "$got" = "$want" ] || { echo "--threads $t: $got"; return 1; }
	done
	cp long/.sfma/trace.jsonl sound
	# each thread count: AUDIT_INVALID, and the reason names $1
	names() {
		local t err status
		for t in 1 2 3 8; do
			status=0
			err=$(sfma-verify --threads "$t" long 2>&1 > verify.out) || status=$?
			[ "$status" -eq 1 ] && [ ! -s verify.out ] && [[ "$err" == "AUDIT_INVALID: "*"$1"* ]] ||
				{ echo "--threads $t: status $status: $err (want $1)"; return 1; }
		done
	}
	# two lines broken far apart: the earlier is named, however soon the
	# later one's block was checked
	sed -e '41234s/"seq":41234}$/"seq":41230}/' -e '52001s/^{/[/' sound > long/.sfma/trace.jsonl
	names "line 41234: hash mismatch"
	sed -e '52001s/^{/[/' sound > long/.sfma/trace.jsonl
	names "line 52001: "
	sed -e '30000d' sound > long/.sfma/trace.jsonl
	names "line 30000: prevHash does not match the previous entry"
}

@test "--trusted-head accepts a trace only appended to, rejects one rewritten or truncated" {
	ours
	T=ours/.sfma/trace.jsonl
	H4=$(sed -n 4p "$T" | jq -r .hash)
	run sfma-verify --trusted-head "$H4:4" ours
	[ "$status" -eq 0 ]
	run sfma-verify --trusted-head "$(tail -1 "$T" | jq -r .hash):7" ours
	[ "$status" -eq 0 ]
	# appended to and resealed: still extends the trusted head
	sfma-chain "$T" <<<'{"kind":"task","data":{}}' > /dev/null
	jq 'del(.integrity)' ours/.sfma/result.json | sfma-seal ours > /dev/null
	run sfma-verify --trusted-head "$H4:4" ours
	[ "$status" -eq 0 ]
	[[ "$output" == "AUDIT_OK signature=none entries=8 "* ]]
	cp "$T" orig
	cp ours/.sfma/result.json rec

	# rewritten: line 2 changed, every hash after it recomputed, resealed -
	# an unsigned record alone cannot tell, the trusted head can
	rewrite 'es[1]["data"]["to"] = "certified"' . ours
	run sfma-verify ours
	[ "$status" -eq 0 ]
	invalid_th() {
		run sfma-verify --trusted-head "$1" ours
		[ "$status" -eq 1 ]
		[ "${#lines[@]}" -eq 1 ]
		[[ "$output" == "AUDIT_INVALID: trace $2"* ]] || { echo "$output"; return 1; }
	}
	invalid_th "$H4:4" "line 4: trusted head not found (the trace was rewritten, not only appended to)"

	# truncated: fewer entries than the trusted count (and the checkpoints
	# that show it removed, as the one who truncates would)
	head -n 3 orig > "$T"
	rm -r ours/.sfma/checkpoint ours/.sfma/checkpoints
	jq 'del(.integrity)' rec | sfma-seal ours > /dev/null
	run sfma-verify ours
	[ "$status" -eq 0 ]
	invalid_th "$H4:4" "trusted head not found: the trace has 3 entries, fewer than 4 (it was truncated)"
	# the right hash at the wrong count
	cp orig "$T"
	jq 'del(.integrity)' rec | sfma-seal ours > /dev/null
	invalid_th "$H4:5" "line 5: trusted head not found"
	# malformed arguments are usage errors
	for arg in "$H4" "$H4:" "$H4:0" "$H4:-1" "${H4:0:63}:4" "$(tr a-f A-F <<<"$H4"):4" "$H4:4x"; do
		run sfma-verify --trusted-head "$arg" ours
		[ "$status" -eq 2 ] || { echo "$arg: $status"; return 1; }
	done
}

@test "hostile input never crashes sfma-verify: one line on stderr, exit 1" {
	ours
	cp ours/.sfma/result.json rec
	cp ours/.sfma/trace.jsonl trace
	hostile() {
		run sh -c 'sfma-verify "$1" 2>err; echo "status=$?"' sh "${1:-ours}"
		[ "$output" = "status=1" ] || { echo "$output"; cat err; return 1; }
		[ "$(wc -l < err)" -eq 1 ]
		grep -q '^AUDIT_INVALID: ' err
	}
	restore() {
		rm -rf ours/.sfma/result.json ours/.sfma/trace.jsonl
		cp rec ours/.sfma/result.json
		cp trace ours/.sfma/trace.jsonl
	}
	{ printf '{"x":"'; head -c 100000000 /dev/zero | tr '\0' a; printf '"}\n'; } > big
	for which in result.json trace.jsonl; do
		F=ours/.sfma/$which
		printf '{"manifest":{' > $F; hostile; restore
		printf '{"manifest":{},"v":"\xc3\x28"}\n' > $F; hostile; restore
		printf '{"a":"\xed\xa0\x80"}\n' > $F; hostile; restore
		python3 -c 'print("{\"x\":" + "[" * 10000 + "]" * 10000 + "}")' > $F; hostile; restore
		python3 -c 'print("{\"x\":" * 10000 + "1" + "}" * 10000)' > $F; hostile; restore
		: > $F; hostile; restore
		printf '\n\n\n' > $F; hostile; restore
		cp big $F; hostile; restore
		rm $F && mkdir $F; hostile; restore
	done
	rm ours/.sfma/trace.jsonl; hostile; restore
	# (a path that is not there is a usage error: its own test)
	touch plainfile; hostile plainfile
	# a million empty lines: refused at the first, quickly and in bounded memory
	head -c 1000000 /dev/zero | tr '\0' '\n' > ours/.sfma/trace.jsonl; hostile
}

@test "option values: --opt VALUE and --opt=VALUE agree; --threads is a number from 1 to 256" {
	ours
	H4=$(sed -n 4p ours/.sfma/trace.jsonl | jq -r .hash)
	run sfma-verify ours
	[ "$status" -eq 0 ]
	want=$output
	for args in "--threads=1" "--threads 1" "--threads=256" "--trusted-head=$H4:4" "--trusted-head $H4:4" \
	            "--threads=3 --trusted-head=$H4:4"; do
		run sfma-verify $args ours
		[ "$status" -eq 0 ] || { echo "$args: $output"; return 1; }
		[ "$output" = "$want" ]
	done
	for bad in --threads=abc --threads=0 --threads=99999 --threads=257 --threads=-1 --threads= \
	           --threads=4x "--threads= 4" --threads=0x10 --threads=18446744073709551617; do
		st=0
		sfma-verify "$bad" ours > out 2> err || st=$?
		[ "$st" -eq 2 ] || { echo "$bad: status $st"; cat err; return 1; }
		[ ! -s out ]
		[ "$(head -1 err)" = "sfma-verify: --threads: a whole number from 1 to 256" ]
		[[ "$(sed -n 2p err)" == "usage: sfma-verify "* ]]
	done
	st=0
	sfma-verify ours --threads > out 2> err || st=$?
	[ "$st" -eq 2 ]
	[ "$(head -1 err)" = "sfma-verify: option --threads requires a value" ]
	# --canonicalize reads stdin only; the options do not stop at the first
	st=0
	sfma-verify --canonicalize ours < /dev/null > out 2> err || st=$?
	[ "$st" -eq 2 ]
	[ "$(head -1 err)" = "sfma-verify: --canonicalize reads standard input only (unexpected ours)" ]
	st=0
	echo '{"b":1,"a":2}' | sfma-verify --canonicalize --threads=abc > out 2> err || st=$?
	[ "$st" -eq 2 ]
	[ ! -s out ]
	echo '{"b":1,"a":2}' | sfma-verify --canonicalize > out
	[ "$(cat out)" = '{"a":2,"b":1}' ]
}

# sfma-verify ARGS under a timeout: AUDIT_INVALID, one line, whose reason is
# exactly $1. A verifier that waits on what it opens fails here (status
# 124), not by hanging the suite.
refused_at_once() {
	local want=$1
	shift
	run timeout 5 sfma-verify "$@"
	[ "$status" -eq 1 ] || { echo "status $status: $output"; return 1; }
	[ "${#lines[@]}" -eq 1 ] && [ "$output" = "AUDIT_INVALID: $want" ] || { echo "got: $output"; return 1; }
}

@test "a FIFO, a link or a directory where a workspace file should be is refused at once, never waited on or followed" {
	ours
	cp -a ours pristine
	S=ours/.sfma
	restore() { rm -rf ours && cp -a pristine ours; }
	# the trace
	mv $S/trace.jsonl real-trace && mkfifo $S/trace.jsonl
	refused_at_once "$S/trace.jsonl: not a regular file" ours
	refused_at_once "$S/../.sfma/trace.jsonl: not a regular file" $S/result.json
	rm $S/result.json
	refused_at_once "$S/trace.jsonl: not a regular file" ours   # no record: the unsealed-trace path
	restore
	mv $S/trace.jsonl real-trace && ln -s "$PWD/real-trace" $S/trace.jsonl   # the target is intact
	refused_at_once "$S/trace.jsonl: is a symbolic link, not followed" ours
	restore
	rm $S/trace.jsonl && mkdir $S/trace.jsonl
	refused_at_once "$S/trace.jsonl: not a regular file" ours
	restore
	# a trace the record names elsewhere in the workspace
	jq '.trace = ".sfma/other"' pristine/.sfma/result.json > $S/result.json
	mkfifo $S/other
	refused_at_once "ours/.sfma/other: not a regular file" ours
	restore
	# the record
	mv $S/result.json real-record && mkfifo $S/result.json
	refused_at_once "$S/result.json: not a regular file" ours
	refused_at_once "$S/result.json: not a regular file" $S/result.json
	restore
	mv $S/result.json real-record && ln -s "$PWD/real-record" $S/result.json
	refused_at_once "$S/result.json: is a symbolic link, not followed" ours
	ln -sf "$PWD/nowhere" $S/result.json    # dangling: there, not absent
	refused_at_once "$S/result.json: is a symbolic link, not followed" ours
	restore
	rm $S/result.json && mkdir $S/result.json
	refused_at_once "$S/result.json: not a regular file" ours
	restore
	run sfma-verify ours
	[ "$status" -eq 0 ]
}

@test "a FIFO in place of an evidence blob or of the journal is never waited on" {
	mkdir -p ev/.sfma/evidence
	h=$(printf 'the output' | sha256sum | cut -c1-64)
	printf 'the output' > ev/.sfma/evidence/$h
	printf '{"kind":"task","data":{},"evidence":{"output":{"bytes":10,"sha256":"%s"}}}\n' "$h" |
		sfma-chain ev/.sfma/trace.jsonl > /dev/null
	sfma-seal ev <<<'{"manifest":{"name":"ev","workspace":"ev"},"verdict":"completed"}' > /dev/null
	run sfma-verify ev
	[ "$status" -eq 0 ]
	rm ev/.sfma/evidence/$h && mkfifo ev/.sfma/evidence/$h
	refused_at_once "seq 1: evidence $h altered" ev
	# not filed: looked for in the journal, which is a FIFO here
	rm ev/.sfma/evidence/$h && mkfifo ev/.sfma/evidence/journal
	refused_at_once "seq 1: evidence $h missing" ev
}

@test "kinds and names are whole JSON strings: U+0000 in a kind or an entry's own member name is AUDIT_INVALID, in data it verifies" {
	ours
	T=ours/.sfma/trace.jsonl
	cp "$T" orig
	cp ours/.sfma/result.json rec
	# "clock-anchor" then U+0000: an anchor to strcmp, not to a byte
	# comparison. Refused alike canonical (hashed as it is) and spaced out
	# (parsed first), as the first line and after others.
	for form in spaced canonical; do
		for i in 0 6; do
			cp orig "$T"
			rechain "es[$i][\"kind\"] = \"clock-anchor\\u0000\"" ours
			[ $form = spaced ] || { sfma-verify --canonicalize < "$T" > canon && mv canon "$T"; }
			grep -q '"clock-anchor\\u0000"' "$T"
			invalid ours "trace line $((i + 1)): kind contains U+0000"
		done
	done
	cp orig "$T"
	rechain 'es[4]["kind"] = "task\u0000anything"' ours
	invalid ours "trace line 5: kind contains U+0000"
	# a second "kind" that a C string would take for the first
	cp orig "$T"
	rechain 'es[4]["kind\u0000"] = "clock-anchor"' ours
	invalid ours "trace line 5: a member name contains U+0000"
	# inside data, a name is the model's to choose (the earlier runner
	# wrote one: the unicode fixture's "a\u0000b"), and the entry verifies
	cp orig "$T"
	rechain 'es[3]["data"]["a\u0000b"] = 1' ours
	grep -q '"a\\u0000b"' "$T"
	rm -r ours/.sfma/checkpoint ours/.sfma/checkpoints # another trace: another log
	jq 'del(.integrity)' rec | sfma-seal ours > /dev/null
	run sfma-verify ours
	[ "$status" -eq 0 ]
	[[ "$output" == "AUDIT_OK signature=none entries=7 "* ]]
}

# ours, signed by a key made here (key.pem, pub.pem; other.pem another key's
# public half).
ours_signed() {
	ours
	openssl genpkey -algorithm ed25519 -out key.pem 2> /dev/null
	openssl pkey -in key.pem -pubout -out pub.pem
	openssl genpkey -algorithm ed25519 2> /dev/null | openssl pkey -pubout -out other.pem
	jq 'del(.integrity)' ours/.sfma/result.json | SFMA_AUDIT_PRIVATE_KEY=$(cat key.pem) sfma-seal ours > /dev/null
}

@test "a signed record is not malleable: a member or a byte beyond the fixed shape is AUDIT_INVALID, the trusted key notwithstanding" {
	ours_signed
	for f in signed ours; do
		if [ $f = signed ]; then
			fixture signed
			trusted=$(cat "$INTEROP/signed/trusted-public.pem")
		else
			trusted=$(cat pub.pem)
		fi
		R=$f/.sfma/result.json
		cp "$R" rec
		SFMA_AUDIT_PUBLIC_KEY=$trusted run sfma-verify $f
		[[ "$output" == "AUDIT_OK signature=trusted "* ]]
		try() {
			cp rec "$R"
			edit_record "$R" "$1"
			SFMA_AUDIT_PUBLIC_KEY=$trusted invalid $f "$2"
			invalid $f "$2"
		}
		try '.integrity.signature.note = "x"' 'integrity.signature: unexpected member "note"'
		try '.integrity.signature.publicKey |= "junk\n" + .' 'integrity.signature.publicKey: text before the BEGIN line'
		try '.integrity.signature.publicKey |= . + "junk"' 'integrity.signature.publicKey: text after the END line'
		try '.integrity.signature.publicKey |= . + "\n"' 'integrity.signature.publicKey: text after the END line'
		try '.integrity.signature.publicKey |= .[:-1]' 'integrity.signature.publicKey: no newline after the END line'
		try ".integrity.signature.publicKey += $(jq -Rs . other.pem)" \
			'integrity.signature.publicKey: a second PEM block after the key'
		try '.integrity.signature.publicKey |= gsub("\n"; "\r\n")' \
			'integrity.signature.publicKey: not one PEM block as sfma-seal writes it'
		try '.integrity.signature.publicKey |= "\u0000" + .' 'integrity.signature.publicKey: '
		try '.integrity.signature.value += "\u0000junk"' 'value is not a base64 Ed25519 signature'
		try '.integrity.signature.algorithm += "\u0000"' 'integrity.signature.algorithm is not ed25519'
		# an extra member is refused even where the signature covers it
		try '.integrity.note = 1' 'integrity: unexpected member "note"'
		cp rec "$R"
	done
}

@test "an unsigned record's integrity has exactly its members (five, seven with the tree), compared as whole strings" {
	for f in unsigned ours; do
		if [ $f = ours ]; then ours; else fixture $f; fi
		R=$f/.sfma/result.json
		cp "$R" rec
		try() {
			cp rec "$R"
			edit_record "$R" "$1"
			invalid $f "$2"
		}
		try '.integrity.note = 1' 'integrity: unexpected member "note"'
		if [ $f = ours ]; then
			try '.integrity.treeSize = 16' 'integrity.treeSize says 16 but the record seals 7 entries'
			try '.integrity.treeSize = "7"' 'integrity.treeSize is missing or not a count'
			try 'del(.integrity.merkleRoot)' 'integrity.treeSize without integrity.merkleRoot'
			try 'del(.integrity.treeSize)' 'integrity.merkleRoot without integrity.treeSize'
			try '.integrity.merkleRoot += "\u0000"' 'integrity.merkleRoot does not match the Merkle tree'
			try '.integrity.merkleRoot |= ascii_upcase' 'integrity.merkleRoot does not match the Merkle tree'
		else
			# a record of the earlier runner has no tree: half of one is refused
			try '.integrity.treeSize = 16' 'integrity.treeSize without integrity.merkleRoot'
		fi
		try '.integrity["algorithm\u0000"] = 1' 'integrity: unexpected member "algorithm\u0000"'
		try '.integrity["a\nb"] = 1' 'integrity: unexpected member "a\nb"'
		try '.integrity.signature = {}' 'integrity.signature.algorithm is missing or not a string'
		try '.integrity.algorithm += "\u0000"' 'integrity.algorithm is not sha256-chain-v1'
		try '.integrity.headHash += "\u0000"' 'integrity.headHash does not match the trace head'
		try '.integrity.manifestSha256 += "\u0000x"' 'integrity.manifestSha256 does not match the manifest'
		try '.integrity.resultSha256 += "\u0000"' 'integrity.resultSha256 does not match the record'
		cp rec "$R"
		run sfma-verify $f
		[ "$status" -eq 0 ]
	done
}

@test "--canonicalize reads any JSON value, scalars at the top level too, as sfma-verify(1) says" {
	printf '%s\n' 1 -0 1E21 ' 0.10 ' '"a\u0000b"' true null '[ ]' ' {"b":1, "a":[2.50]} ' > in
	run sh -c 'sfma-verify --canonicalize < in'
	[ "$status" -eq 0 ]
	[ "$output" = '1
0
1e+21
0.1
"a\u0000b"
true
null
[]
{"a":[2.5],"b":1}' ]
	# still one value per line: two, or none, is an error for that line only
	printf '%s\n' '1 2' '"x"' '' 'nul' > in
	run sh -c 'sfma-verify --canonicalize < in 2> err'
	[ "$status" -eq 1 ]
	[ "$output" = '"x"' ]
	[ "$(wc -l < err)" -eq 3 ]
	grep -q '^sfma-verify: line 1: invalid JSON' err
}

@test "a workspace or record that is not there is said plainly: exit 2, never AUDIT_INVALID" {
	run --separate-stderr sfma-verify nothere
	[ "$status" -eq 2 ]
	[ -z "$output" ]
	[ "$stderr" = "sfma-verify: nothere: no such workspace or record" ]
	touch afile
	run --separate-stderr sfma-verify afile/result.json
	[ "$status" -eq 2 ]
	[ "$stderr" = "sfma-verify: afile/result.json: no such workspace or record" ]
	# a workspace's own record missing is still the record's fault
	fixture unsigned
	rm unsigned/.sfma/result.json
	run --separate-stderr sfma-verify unsigned/.sfma/result.json
	[ "$status" -eq 1 ]
	[ "$stderr" = "AUDIT_INVALID: unsigned/.sfma/result.json: No such file or directory" ]
	run sfma verify nothere
	[ "$status" -eq 2 ]
}
