#!/usr/bin/env bats
# A workspace is handed around, so its .sfma/mem is hostile input: git run
# on it must never execute anything the store's own files name, nor write
# outside it (sfma-mem(1), THE STORE IS HOSTILE INPUT). Every case runs
# as root and as an unprivileged user, entered here with setpriv on a
# workspace that user owns. A hostile command would leave a marker in a
# directory either user can write: none may appear. A refused store says
# why in one line, the run ends before any model call, and the store is
# byte for byte as it was.

load helpers
bats_require_minimum_version 1.5.0

setup() {
	require jq
	require git
	require setpriv
	# Not under BATS_TEST_TMPDIR: the unprivileged user must reach it.
	W=$(mktemp -d /tmp/sfma-hostile.XXXXXX)
	chmod 0755 "$W"
	mkdir -m 1777 "$W/mark"
	# What every hostile command runs: it leaves the marker, then passes
	# its input through (a filter or a textconv still "works").
	printf '#!/bin/sh\nid >>%s/mark/ran\nexec cat "$@"\n' "$W" >"$W/evil"
	chmod 0755 "$W/evil"
	cd "$W"
	unset SFMA_MOCK
	cat >m.json <<'JSON'
{"name":"mem","workspace":"ws","modelEndpoints":[{"name":"mock","provider":"mock","model":"m"}],
 "allowedCommands":["echo"],"inputs":[],"outputs":["out.txt"],"maxTurns":12,"dryRunDefault":false,
 "tuning":{"fastTierMaxBytes":64}}
JSON
	M=ws/.sfma/mem
}

teardown() {
	rm -rf "$W"
}

cand() { # cand MARKER
	printf '{"mission":"remember %s","successCriteria":["out.txt exists"],"loopRoles":[{"name":"solo","duty":"keep %s"}],"firstTasks":[],"schedule":[]}' "$1" "$1"
}

finish='{"tool":"write","path":"out.txt","content":"x"}'
done_='{"tool":"done","summary":"s"}'

# git on the store as its owner may not be root: the test's own reads.
g() {
	git -c safe.directory='*' -C "$W/$M" "$@"
}

# A store as sfma leaves it: one run, on branch main, whose commit holds
# memory.json and a record with the marker text recall looks for.
base_store() {
	mock "$(cand MARKER-7f3q)" "$finish" "$done_"
	run sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(g rev-list --count HEAD)" -eq 1 ]
}

detach() {
	g rev-parse HEAD >"$M/.git/HEAD.new"
	mv "$M/.git/HEAD.new" "$M/.git/HEAD"
}

# A run that, were the store taken, would start every git command the
# store has: the candidate (over fastTierMaxBytes: hash-object), recall in
# the three git modes (grep, pickaxe, cat-file), and the commit.
hostile_queue() {
	mock "$(cand second-run)" \
		'{"tool":"recall","mode":"lexical","query":"MARKER-7f3q"}' \
		'{"tool":"recall","mode":"change","query":"MARKER-7f3q"}' \
		'{"tool":"recall","mode":"referential","id":"not-in-files"}' \
		"$finish" "$done_"
}

# The programs where nobody reaches them: a clone may sit in a directory
# only its owner can enter (CI's mktemp -d is 0700), and sfma looks for
# its stages beside itself.
nobody_bin() {
	if [ ! -d "$W/bin" ]; then
		mkdir -m 0755 "$W/bin"
		cp "$SFMA_BINDIR"/sfma* "$W/bin/"
		chmod 0755 "$W/bin"/*
	fi
	echo "$W/bin"
}

# sfma_as MODE ARGS...: sfma as root, or as nobody on a workspace nobody owns.
sfma_as() {
	local mode=$1
	shift
	if [ "$mode" = nobody ]; then
		chown -R 65534:65534 "$W/ws"
		run setpriv --reuid=65534 --regid=65534 --clear-groups -- "$(nobody_bin)/sfma" "$@"
	else
		run sfma "$@"
	fi
}

nothing_ran() {
	[ ! -e "$W/mark/ran" ] || { echo "a command the store named ran: $(cat "$W/mark/ran")"; return 1; }
}

# Every entry of the store: type, mode, path, link target; every file's hash.
snapshot() {
	(cd "$W/$M" && find . -printf '%y %m %p %l\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum)
}

model_calls() {
	if [ -f ws/.sfma/trace.jsonl ]; then grep -c '"kind":"call"' ws/.sfma/trace.jsonl; else echo 0; fi
}

# refused MODE PHRASE: the run ends with exit 1, PHRASE on one line of
# its own after "memory store:", no model call, nothing run, the store as
# it was, and what was traced verifies.
refused() {
	local mode=$1 phrase=$2 before calls
	before=$(snapshot)
	calls=$(model_calls)
	hostile_queue
	sfma_as "$mode" run m.json
	nothing_ran
	[ "$status" -eq 1 ] || { echo "$output"; return 1; }
	[ "$(grep -c -F -- "$phrase" <<<"$output")" -eq 1 ] || { echo "$output"; return 1; }
	grep -F -- "$phrase" <<<"$output" | grep -q 'memory store: .sfma/mem/.git' || { echo "$output"; return 1; }
	[ "$(snapshot)" = "$before" ] || { diff <(echo "$before") <(snapshot); return 1; }
	[ "$(model_calls)" -eq "$calls" ] || { echo "the refused run called the model"; return 1; }
	run sfma-verify ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
}

# taken MODE [ENV...]: the store is used - the run completes, its commit
# lands on HEAD, recall finds run one in history - and nothing ran.
taken() {
	local mode=$1 before
	shift
	before=$(g rev-parse HEAD)
	hostile_queue
	if [ "$mode" = nobody ]; then
		chown -R 65534:65534 "$W/ws"
		run env "$@" setpriv --reuid=65534 --regid=65534 --clear-groups -- "$(nobody_bin)/sfma" run m.json
	else
		run env "$@" sfma run m.json
	fi
	nothing_ran
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(g rev-parse HEAD^)" = "$before" ] || { g log --oneline; return 1; }
	for recall in lexical change; do
		jq -s -e "any(.[]; .kind==\"store\" and .data.op==\"recall\" and .data.mode==\"$recall\" and .data.found)" \
			ws/.sfma/trace.jsonl >/dev/null || { echo "recall $recall found nothing"; return 1; }
	done
	run sfma-verify ws
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
}

# ---- the issue's reproduction, as it was reported ------------------------

reproduction() {
	cp "$REPO/examples/hello/manifest.json" .
	git init -q "$M"
	git -C "$M" -c user.name=a -c user.email=a@b commit -q --allow-empty -m x
	git -C "$M" rev-parse HEAD >"$M/.git/H" && mv "$M/.git/H" "$M/.git/HEAD"
	git -C "$M" config filter.x.clean "sh -c \"id >$W/mark/ran; cat\""
	echo '* filter=x' >"$M/.gitattributes"
	local before
	before=$(snapshot)
	sfma_as "$1" run manifest.json --apply
	nothing_ran
	[ "$status" -eq 1 ] || { echo "$output"; return 1; }
	[[ "$output" == *"memory store: .sfma/mem/.git/config: unsafe git configuration: filter.x.clean (line "* ]] ||
		{ echo "$output"; return 1; }
	[ "$(snapshot)" = "$before" ] || { diff <(echo "$before") <(snapshot); return 1; }
}

@test "the reported reproduction: a detached HEAD and filter.x.clean are refused, nothing runs (root)" {
	reproduction root
}

@test "the reported reproduction: a detached HEAD and filter.x.clean are refused, nothing runs (nobody)" {
	reproduction nobody
}

# ---- configuration that names a command: refused, one line, the key ----

filter_clean_detached() {
	base_store
	detach
	g config filter.x.clean "$W/evil"
	echo '* filter=x' >"$M/.gitattributes"
	refused "$1" 'unsafe git configuration: filter.x.clean (line'
}

@test "filter clean, detached HEAD (root)" { filter_clean_detached root; }
@test "filter clean, detached HEAD (nobody)" { filter_clean_detached nobody; }

# On a branch the commit was fast-import's already; the record over
# fastTierMaxBytes went through hash-object, which ran the clean filter.
filter_clean_branch() {
	base_store
	g config filter.x.clean "$W/evil"
	echo '* filter=x' >"$M/.gitattributes"
	refused "$1" 'unsafe git configuration: filter.x.clean (line'
}

@test "filter clean, on a branch (root)" { filter_clean_branch root; }
@test "filter clean, on a branch (nobody)" { filter_clean_branch nobody; }

filter_smudge_process() {
	base_store
	detach
	g config filter.x.smudge "$W/evil"
	g config filter.x.process "$W/evil"
	echo '* filter=x' >"$M/.gitattributes"
	refused "$1" 'unsafe git configuration: filter.x.smudge (line'
}

@test "filter smudge and process, detached HEAD (root)" { filter_smudge_process root; }
@test "filter smudge and process, detached HEAD (nobody)" { filter_smudge_process nobody; }

# recall's pickaxe (git log -S) ran the textconv of every path it compared.
textconv_recall() {
	base_store
	g config diff.x.textconv "$W/evil"
	echo '* diff=x' >"$M/.gitattributes"
	refused "$1" 'unsafe git configuration: diff.x.textconv (line'
}

@test "diff textconv with attributes, reached by recall (root)" { textconv_recall root; }
@test "diff textconv with attributes, reached by recall (nobody)" { textconv_recall nobody; }

diff_external() {
	base_store
	g config diff.external "$W/evil"
	refused "$1" 'unsafe git configuration: diff.external (line'
}

@test "diff.external (root)" { diff_external root; }
@test "diff.external (nobody)" { diff_external nobody; }

fsmonitor() {
	base_store
	detach
	g config core.fsmonitor "$W/evil"
	refused "$1" 'unsafe git configuration: core.fsmonitor (line'
}

@test "core.fsmonitor (root)" { fsmonitor root; }
@test "core.fsmonitor (nobody)" { fsmonitor nobody; }

hooks_path() {
	base_store
	mkdir -p "$W/hooks"
	for h in pre-commit post-commit reference-transaction; do cp "$W/evil" "$W/hooks/$h"; done
	g config core.hooksPath "$W/hooks"
	refused "$1" 'unsafe git configuration: core.hookspath (line'
}

@test "core.hooksPath to a directory of hooks (root)" { hooks_path root; }
@test "core.hooksPath to a directory of hooks (nobody)" { hooks_path nobody; }

ssh_command() {
	base_store
	g config core.sshCommand "$W/evil"
	refused "$1" 'unsafe git configuration: core.sshcommand (line'
}

@test "core.sshCommand (root)" { ssh_command root; }
@test "core.sshCommand (nobody)" { ssh_command nobody; }

pager_editor() {
	base_store
	detach
	g config core.pager "$W/evil"
	g config core.editor "$W/evil"
	g config pager.log "$W/evil"
	g config sequence.editor "$W/evil"
	refused "$1" 'unsafe git configuration: core.pager (line'
}

@test "core.pager, core.editor, pager.log, sequence.editor (root)" { pager_editor root; }
@test "core.pager, core.editor, pager.log, sequence.editor (nobody)" { pager_editor nobody; }

# include.path / includeIf: the filter is in a file beside the store.
include_path() {
	base_store
	detach
	printf '[filter "x"]\n\tclean = %s\n' "$W/evil" >"$W/inc.cfg"
	g config include.path "$W/inc.cfg"
	echo '* filter=x' >"$M/.gitattributes"
	refused "$1" 'unsafe git configuration: include.path (line'
}

@test "include.path of a file with a filter (root)" { include_path root; }
@test "include.path of a file with a filter (nobody)" { include_path nobody; }

include_if() {
	base_store
	detach
	printf '[filter "x"]\n\tclean = %s\n' "$W/evil" >"$W/inc.cfg"
	g config 'includeIf.gitdir:/.path' "$W/inc.cfg"
	echo '* filter=x' >"$M/.gitattributes"
	refused "$1" 'unsafe git configuration: includeif.gitdir:/.path (line'
}

@test "includeIf of a file with a filter (root)" { include_if root; }
@test "includeIf of a file with a filter (nobody)" { include_if nobody; }

# The attributes come from a file outside the store; the filter follows.
attributes_file() {
	base_store
	detach
	echo '* filter=x' >"$W/attrs"
	g config core.attributesFile "$W/attrs"
	g config filter.x.clean "$W/evil"
	refused "$1" 'unsafe git configuration: core.attributesfile (line'
}

@test "core.attributesFile (root)" { attributes_file root; }
@test "core.attributesFile (nobody)" { attributes_file nobody; }

# git honours extensions.worktreeConfig even in a version 0 repository,
# and then reads config.worktree too.
worktree_config() {
	base_store
	detach
	g config extensions.worktreeConfig true
	printf '[filter "x"]\n\tclean = %s\n' "$W/evil" >"$M/.git/config.worktree"
	echo '* filter=x' >"$M/.gitattributes"
	refused "$1" 'unsafe git configuration: extensions.worktreeconfig (line'
}

@test "extensions.worktreeConfig and config.worktree (root)" { worktree_config root; }
@test "extensions.worktreeConfig and config.worktree (nobody)" { worktree_config nobody; }

# A configuration written as git writes it, but a key per line header:
# the same line as its section, an upper-case spelling, a dotted section.
config_spellings() {
	base_store
	detach
	printf '[core] filemode = true\n[FILTER "x"] CLEAN = %s\n' "$W/evil" >>"$M/.git/config"
	echo '* filter=x' >"$M/.gitattributes"
	refused "$1" 'unsafe git configuration: filter.x.clean (line'
}

@test "a filter on its section's line, in capitals (root)" { config_spellings root; }
@test "a filter on its section's line, in capitals (nobody)" { config_spellings nobody; }

# ---- files of the repository that send git elsewhere -----------------

config_symlink() {
	base_store
	detach
	g config filter.x.clean "$W/evil"
	echo '* filter=x' >"$M/.gitattributes"
	mv "$M/.git/config" "$W/real.cfg"
	ln -s "$W/real.cfg" "$M/.git/config"
	refused "$1" '.sfma/mem/.git/config: unsafe git repository: a symlink'
}

@test "a config that is a symlink to a file with a filter (root)" { config_symlink root; }
@test "a config that is a symlink to a file with a filter (nobody)" { config_symlink nobody; }

alternates() {
	base_store
	git init -q "$W/other"
	git -C "$W/other" -c user.name=a -c user.email=a@b commit -q --allow-empty -m other
	local other
	other=$(cd "$W/other" && find . -printf '%y %p\n' | sort)
	echo "$W/other/.git/objects" >"$M/.git/objects/info/alternates"
	refused "$1" '.sfma/mem/.git/objects/info/alternates: unsafe git repository'
	[ "$(cd "$W/other" && find . -printf '%y %p\n' | sort)" = "$other" ]
}

@test "objects/info/alternates pointing at another repository (root)" { alternates root; }
@test "objects/info/alternates pointing at another repository (nobody)" { alternates nobody; }

info_attributes() {
	base_store
	mkdir -p "$M/.git/info"
	echo '* filter=x diff=x' >"$M/.git/info/attributes"
	refused "$1" '.sfma/mem/.git/info/attributes: unsafe git repository'
}

@test "info/attributes (root)" { info_attributes root; }
@test "info/attributes (nobody)" { info_attributes nobody; }

# The commit's reflog entry was appended wherever the link pointed.
reflog_symlink() {
	base_store
	echo host >"$W/hostfile"
	chmod 0666 "$W/hostfile"
	rm "$M/.git/logs/refs/heads/main"
	ln -s "$W/hostfile" "$M/.git/logs/refs/heads/main"
	refused "$1" '.sfma/mem/.git/logs/refs/heads/main: unsafe git repository: a symlink'
	[ "$(cat "$W/hostfile")" = host ]
}

@test "a reflog that is a symlink to a host file (root)" { reflog_symlink root; }
@test "a reflog that is a symlink to a host file (nobody)" { reflog_symlink nobody; }

# fast-import wrote its pack wherever objects/pack pointed.
pack_symlink() {
	base_store
	mkdir -m 0777 "$W/packs"
	cp -a "$M/.git/objects/pack/." "$W/packs/"
	rm -r "$M/.git/objects/pack"
	ln -s "$W/packs" "$M/.git/objects/pack"
	local packs
	packs=$(ls "$W/packs")
	refused "$1" '.sfma/mem/.git/objects/pack: unsafe git repository: a symlink'
	[ "$(ls "$W/packs")" = "$packs" ]
}

@test "objects/pack a symlink to a host directory (root)" { pack_symlink root; }
@test "objects/pack a symlink to a host directory (nobody)" { pack_symlink nobody; }

head_outside() {
	base_store
	echo 'ref: refs/../../../x' >"$M/.git/HEAD"
	refused "$1" '.sfma/mem/.git/HEAD: unsafe git repository: names neither a branch nor a commit'
}

@test "a HEAD that names neither a branch nor a commit (root)" { head_outside root; }
@test "a HEAD that names neither a branch nor a commit (nobody)" { head_outside nobody; }

# A gitfile was refused before any of this (guard 2); it stays refused
# when the repository it names carries a filter.
gitfile() {
	git init -q "$W/other"
	git -C "$W/other" -c user.name=a -c user.email=a@b commit -q --allow-empty -m other
	git -C "$W/other" config filter.x.clean "$W/evil"
	mkdir -p "$M"
	echo "gitdir: $W/other/.git" >"$M/.git"
	echo '* filter=x' >"$M/.gitattributes"
	refused "$1" '.sfma/mem/.git must be a real repository directory'
}

@test "a .git gitfile naming a repository with a filter (root)" { gitfile root; }
@test "a .git gitfile naming a repository with a filter (nobody)" { gitfile nobody; }

# ---- hostile but inert: the store is used, nothing runs ----------------

# Hooks are not refused (git init leaves samples behind): no git child
# ever looks for one, core.hooksPath is /dev/null on every command line.
hooks() {
	base_store
	for h in pre-commit post-commit commit-msg reference-transaction post-index-change pre-auto-gc \
	         post-rewrite post-checkout fsmonitor-watchman; do
		mkdir -p "$M/.git/hooks"
		cp "$W/evil" "$M/.git/hooks/$h"
	done
	taken "$1"
	detach
	taken "$1"
}

@test "executable hooks: the store is used, on a branch and detached, and no hook runs (root)" { hooks root; }
@test "executable hooks: the store is used, on a branch and detached, and no hook runs (nobody)" { hooks nobody; }

# Attributes in the work tree name drivers no configuration git reads
# defines; the caller's environment, a HOME and XDG_CONFIG_HOME that
# would define them, and a .gitconfig in the store itself are not read.
work_tree_and_environment() {
	base_store
	detach
	echo '* filter=x diff=x merge=x' >"$M/.gitattributes"
	printf '[filter "x"]\n\tclean = %s\n[diff "x"]\n\ttextconv = %s\n' "$W/evil" "$W/evil" >"$M/.gitconfig"
	mkdir -p "$W/home/.config/git" "$W/xdg/git"
	for f in "$W/home/.gitconfig" "$W/home/.config/git/config" "$W/xdg/git/config" "$W/global.cfg"; do
		cp "$M/.gitconfig" "$f"
	done
	echo '* filter=x diff=x' >"$W/xdg/git/attributes"
	chmod -R a+rX "$W/home" "$W/xdg" "$W/global.cfg"
	git init -q "$W/other"
	taken "$1" HOME="$W/home" XDG_CONFIG_HOME="$W/xdg" GIT_CONFIG_GLOBAL="$W/global.cfg" \
		GIT_CONFIG_COUNT=2 GIT_CONFIG_KEY_0=filter.x.clean GIT_CONFIG_VALUE_0="$W/evil" \
		GIT_CONFIG_KEY_1=diff.x.textconv GIT_CONFIG_VALUE_1="$W/evil" \
		GIT_CONFIG_PARAMETERS="'core.fsmonitor'='$W/evil'" GIT_EXTERNAL_DIFF="$W/evil" \
		GIT_PAGER="$W/evil" GIT_EDITOR="$W/evil" GIT_DIR="$W/other/.git" GIT_WORK_TREE="$W"
	[ -z "$(git -C "$W/other" rev-list --all 2>/dev/null)" ]
}

@test "work-tree attributes, a .gitconfig in the store, the caller's GIT_* and HOME: nothing runs (root)" {
	work_tree_and_environment root
}

@test "work-tree attributes, a .gitconfig in the store, the caller's GIT_* and HOME: nothing runs (nobody)" {
	work_tree_and_environment nobody
}

# ---- what an ordinary store holds is not refused ------------------------

@test "a store made by git init and git commit, on a branch or detached, is used" {
	git init -q "$M"
	git -C "$M" -c user.name=a -c user.email=a@b commit -q --allow-empty -m first
	git -C "$M" pack-refs --all
	mock "$(cand MARKER-7f3q)" "$finish" "$done_"
	run sfma run m.json
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[ "$(g rev-list --count HEAD)" -eq 2 ]
	detach
	taken root
}
