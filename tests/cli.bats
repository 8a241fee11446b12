#!/usr/bin/env bats
# Command-line manners every program in bin/ shares: --version, --help and
# -h on stdout with exit 0, usage errors on stderr with exit 2 and the
# program's name (never the path it was started by), and option values
# given as the next word or after '=' alike.

load helpers
bats_require_minimum_version 1.5.0

PROGRAMS="sfma sfma-plan sfma-model sfma-exec sfma-chain sfma-seal sfma-mem sfma-verify sfma-replay sfma-chat sfma-telegram sfma-log sfma-report sfma-summary sfma-check sfma-export sfma-endpoints sfma-prove sfma-attest sfma-tap sfma-init"

setup() {
	cd "$BATS_TEST_TMPDIR"
	VERSION=$(sed -n 's/^VERSION *:= *//p' "$REPO/Makefile")
	[ -n "$VERSION" ]
	# ./bin/../bin/NAME from the directory above the programs
	BINBASE=${SFMA_BINDIR##*/}
	BINPARENT=$(cd "$SFMA_BINDIR/.." && pwd)
}

# by_path NAME ARGS...: start NAME as ./bin/../bin/NAME (stdin empty).
by_path() {
	local name=$1
	shift
	(cd "$BINPARENT" && "./$BINBASE/../$BINBASE/$name" "$@" </dev/null)
}

# broke WHAT: say what broke (with the output seen) and fail.
broke() {
	printf '%s\nstatus: %s\nstdout:\n%s\nstderr:\n%s\n' "$1" "$status" "$output" "$stderr" >&2
	return 1
}

# usage_error NAME WORD: the last run was a usage error of NAME: exit 2,
# nothing on stdout, one "NAME: ..." line mentioning WORD, then the usage.
usage_error() {
	local name=$1 word=$2
	[ "$status" -eq 2 ] || broke "$name: expected exit 2"
	[ -z "$output" ] || broke "$name: a usage error printed on stdout"
	[[ "${stderr_lines[0]}" == "$name: "* ]] || broke "$name: first stderr line does not start with '$name: '"
	[[ "${stderr_lines[0]}" == *"$word"* ]] || broke "$name: the error does not name $word"
	[[ "${stderr_lines[0]}" != */* ]] || broke "$name: the error carries a path"
	[[ "${stderr_lines[1]:-}" == "usage: $name"* ]] || broke "$name: the error is not followed by the usage"
	local named
	named=$(printf '%s\n' "${stderr_lines[@]}" | grep -c "^$name: ") || true
	[ "$named" -eq 1 ] || broke "$name: $named message lines, expected one"
}

# manners NAME [optional-operand]: everything this file expects of every
# program (one whose operand is optional does its work without one: that
# is tested where it belongs, not here in the source tree).
manners() {
	local name=$1 flag
	[ -x "$SFMA_BINDIR/$name" ] || { echo "$SFMA_BINDIR/$name is missing" >&2; return 1; }

	run --separate-stderr by_path "$name" --version
	[ "$status" -eq 0 ] || broke "$name --version: expected exit 0"
	[ "$output" = "$name $VERSION" ] || broke "$name --version: expected '$name $VERSION'"
	[ -z "$stderr" ] || broke "$name --version: stderr not empty"

	for flag in --help -h; do
		run --separate-stderr by_path "$name" "$flag"
		[ "$status" -eq 0 ] || broke "$name $flag: expected exit 0"
		[[ "${lines[0]:-}" == "usage: $name"* ]] || broke "$name $flag: no usage on stdout"
		[ -z "$stderr" ] || broke "$name $flag: stderr not empty"
	done
	run --separate-stderr "$name" --help </dev/null
	local help=$output

	for flag in --no-such-option -Z --no-such-option=1; do
		run --separate-stderr by_path "$name" "$flag"
		usage_error "$name" "${flag%%=*}"
	done
	# started through PATH the same words come out
	run --separate-stderr "$name" --no-such-option </dev/null
	usage_error "$name" --no-such-option
	# the usage after the error is the one --help prints
	[[ "$help" == "${stderr_lines[1]}"* ]] || broke "$name: the usage after an error is not the --help text"

	[ "${2:-}" = optional-operand ] && return 0
	run --separate-stderr by_path "$name"
	[ "$status" -eq 2 ] || broke "$name without arguments: expected exit 2"
	[ -z "$output" ] || broke "$name without arguments: printed on stdout"
	[[ "$stderr" == *"usage: $name"* ]] || broke "$name without arguments: no usage on stderr"
	[[ "$stderr" != *"$BINBASE/"* ]] || broke "$name without arguments: the message carries a path"
}

@test "every program in bin/ is covered here" {
	local f name
	for f in "$SFMA_BINDIR"/sfma*; do
		name=${f##*/}
		[[ " $PROGRAMS " == *" $name "* ]] || { echo "$name has no manners test" >&2; return 1; }
	done
}

@test "sfma: --version, --help, -h, usage errors by name" { manners sfma; }
@test "sfma-plan: --version, --help, -h, usage errors by name" { manners sfma-plan; }
@test "sfma-model: --version, --help, -h, usage errors by name" { manners sfma-model; }
@test "sfma-exec: --version, --help, -h, usage errors by name" { manners sfma-exec; }
@test "sfma-chain: --version, --help, -h, usage errors by name" { manners sfma-chain; }
@test "sfma-seal: --version, --help, -h, usage errors by name" { manners sfma-seal; }
@test "sfma-mem: --version, --help, -h, usage errors by name" { manners sfma-mem; }
@test "sfma-verify: --version, --help, -h, usage errors by name" { manners sfma-verify; }
@test "sfma-replay: --version, --help, -h, usage errors by name" { manners sfma-replay; }
@test "sfma-chat: --version, --help, -h, usage errors by name" { manners sfma-chat; }
@test "sfma-telegram: --version, --help, -h, usage errors by name" { manners sfma-telegram; }
@test "sfma-log: --version, --help, -h, usage errors by name" { manners sfma-log; }
@test "sfma-report: --version, --help, -h, usage errors by name" { manners sfma-report; }
@test "sfma-summary: --version, --help, -h, usage errors by name" { manners sfma-summary; }
@test "sfma-check: --version, --help, -h, usage errors by name" { manners sfma-check; }
@test "sfma-export: --version, --help, -h, usage errors by name" { manners sfma-export; }
@test "sfma-endpoints: --version, --help, -h, usage errors by name" { manners sfma-endpoints; }
@test "sfma-prove: --version, --help, -h, usage errors by name" { manners sfma-prove; }
@test "sfma-attest: --version, --help, -h, usage errors by name" { manners sfma-attest; }
@test "sfma-tap: --version, --help, -h, usage errors by name" { manners sfma-tap; }
@test "sfma-init: --version, --help, -h, usage errors by name" { manners sfma-init optional-operand; }

# A small sealed workspace.
workspace() {
	mkdir -p ws/.sfma
	printf '%s\n' '{"kind":"task","data":{"n":1}}' '{"kind":"verdict","data":{"pass":true}}' |
		sfma-chain ws/.sfma/trace.jsonl > /dev/null
	sfma-seal ws <<<'{"manifest":{"name":"t"},"verdict":"completed"}' > /dev/null
}

@test "sfma-verify --threads: a whole number from 1 to 256, as the next word or after =" {
	workspace
	run sfma-verify ws
	[ "$status" -eq 0 ]
	want=$output
	for form in "--threads=1" "--threads 1" "--threads=2" "--threads 2" "--threads=256"; do
		run --separate-stderr sfma-verify $form ws
		[ "$status" -eq 0 ] || broke "$form"
		[ "$output" = "$want" ] || broke "$form"
	done
	for value in abc 0 99999 257 -1 '' 2x ' 2' +2 0x2; do
		run --separate-stderr sfma-verify "--threads=$value" ws
		usage_error sfma-verify --threads
		eq=$stderr
		run --separate-stderr sfma-verify --threads "$value" ws
		usage_error sfma-verify --threads
		[ "$stderr" = "$eq" ] || broke "--threads '$value' and --threads='$value' differ"
	done
	run --separate-stderr by_path sfma-verify ws --threads
	usage_error sfma-verify --threads
}

@test "sfma-chain --max-line: the same bound as the next word or after =" {
	long='{"kind":"task","data":{"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}'
	for form in "--max-line=40" "--max-line 40"; do
		rm -f t.jsonl
		run --separate-stderr sfma-chain $form t.jsonl <<<'{"kind":"task","data":{}}'
		[ "$status" -eq 0 ] || broke "$form: a short event"
		run --separate-stderr sfma-chain $form t.jsonl <<<"$long"
		[ "$status" -eq 1 ] || broke "$form: a long event"
		[ "$stderr" = "sfma-chain: stdin: line 1: longer than 40 bytes" ] || broke "$form"
	done
	for value in 0 abc 1073741825 ''; do
		run --separate-stderr sfma-chain "--max-line=$value" t.jsonl </dev/null
		usage_error sfma-chain --max-line
		eq=$stderr
		run --separate-stderr sfma-chain --max-line "$value" t.jsonl </dev/null
		usage_error sfma-chain --max-line
		[ "$stderr" = "$eq" ] || broke "--max-line '$value' and --max-line='$value' differ"
	done
}

@test "sfma-exec --timeout: a bad value is the same usage error as the next word or after =" {
	echo '{}' > m.json
	for value in abc -1 1x ''; do
		run --separate-stderr sfma-exec "--timeout=$value" m.json </dev/null
		usage_error sfma-exec --timeout
		eq=$stderr
		run --separate-stderr sfma-exec --timeout "$value" m.json </dev/null
		usage_error sfma-exec --timeout
		[ "$stderr" = "$eq" ] || broke "--timeout '$value' and --timeout='$value' differ"
	done
}

@test "sfma-telegram --poll-timeout: a bad value is the same usage error as the next word or after =" {
	for value in abc -1 1x 3601 ''; do
		run --separate-stderr sfma-telegram "--poll-timeout=$value" ws </dev/null
		usage_error sfma-telegram --poll-timeout
		eq=$stderr
		run --separate-stderr sfma-telegram --poll-timeout "$value" ws </dev/null
		usage_error sfma-telegram --poll-timeout
		[ "$stderr" = "$eq" ] || broke "--poll-timeout '$value' and --poll-timeout='$value' differ"
	done
}

# The options a text names: words that begin with - or -- after a space,
# a bracket, a bar, a parenthesis, a comma or '=' (not the - inside a
# program's name, not a negative number). -h is --help by another name.
options_in() {
	grep -o -- '\(^\|[][ |(,=]\)--\?[a-zA-Z][-a-zA-Z0-9]*' | sed 's/^[][ |(,=]//' | grep -vx -- '-h' | sort -u
}

@test "every program's --help lists the options its man page's SYNOPSIS lists, and no other" {
	require mandoc
	local f name page man help bad=0
	for f in "$SFMA_BINDIR"/sfma*; do
		name=${f##*/}
		page="$REPO/man/$name.1"
		[ -f "$page" ] || { echo "$name has no man page man/$name.1" >&2; bad=1; continue; }
		man=$(mandoc -Tascii "$page" | col -b | awk '/^SYNOPSIS/ {f = 1; next} /^[A-Z]/ {f = 0} f' | options_in)
		help=$("$f" --help </dev/null | options_in)
		[ -n "$help" ] || { echo "$name --help names no option" >&2; bad=1; continue; }
		if [ "$man" != "$help" ]; then
			echo "$name: SYNOPSIS and --help differ (< SYNOPSIS, > --help):" >&2
			diff <(echo "$man") <(echo "$help") | grep '^[<>]' >&2
			bad=1
		fi
	done
	[ "$bad" -eq 0 ]
}
