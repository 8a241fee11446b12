#!/usr/bin/env bats
# The Slurm example (examples/slurm/) against a real single-node Slurm that
# this file starts itself with tests/slurm-cluster.sh (as the benchmark
# tests/bench/slurm.sh does): munged on its own socket and key, slurmctld
# and slurmd on a generated slurm.conf with free ports, everything in one
# temporary directory; all of it stopped by pid at the end. Nothing is
# skipped: a missing daemon or a cluster that does not come up fails.

bats_require_minimum_version 1.5.0
load helpers

setup_file() {
	CLUSTER=$("$REPO/tests/slurm-cluster.sh" start)
	export CLUSTER
}

teardown_file() {
	[ -n "${CLUSTER:-}" ] || return 0
	"$REPO/tests/slurm-cluster.sh" stop "$CLUSTER"
}

setup() {
	unset SFMA_MOCK SFMA_AUDIT_PRIVATE_KEY SFMA_AUDIT_PUBLIC_KEY NO_COLOR
	export SLURM_CONF="$CLUSTER/slurm.conf"
}

# A fresh batch folder on the "shared filesystem" with the four example manifests.
batch_dir() {
	local d="$CLUSTER/batch/$1"
	mkdir -p "$d"
	cp -r "$REPO/examples/batch/manifests" "$d/"
	[ "$(ls "$d"/manifests/*.json | wc -l)" -eq 4 ]
	echo "$d"
}

@test "slurm: an array of four manifests, each run and verified on its node, then the summary job says so" {
	local d
	d=$(batch_dir ok)
	cd "$d"
	run timeout 300 "$REPO/examples/slurm/submit.sh" --wait manifests
	echo "$output"
	cat logs/*.out || true
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" =~ ^array\ job\ [0-9]+:\ 4\ manifests$ ]]
	local array=${lines[0]#array job }
	array=${array%%:*}
	# four array tasks, one stamp each, verified on the node that ran it
	[ "$(ls logs/sfma-run-"$array"_*.out | wc -l)" -eq 4 ]
	for m in manifests/*.json; do
		name=$(basename "$m" .json)
		ws=$(jq -r .workspace "$m")
		[[ "$(sed -n 3p "stamps/$name.verified")" == "AUDIT_OK "* ]]
		[[ "$(sed -n 4p "stamps/$name.verified")" == "node=$(hostname -s) job=${array}_"[0-3] ]]
		sfma-verify "$ws" >/dev/null
		[ "$(jq -r .verdict "$ws/.sfma/result.json")" = completed ]
	done
	# the dependent job's summary: four verified workspaces
	cat summary.txt
	[ "$(grep -c ' completed .* verified signature=none ' summary.txt)" -eq 4 ]
	[ "$(tail -n 1 summary.txt)" = "total 4: verified 4, invalid 0, unsealed 0, no record 0; completed 4" ]
	# and it ran after every task, as a job of its own
	[[ "${lines[-1]}" =~ ^summary\ job\ [0-9]+$ ]]
	[ "${lines[-1]#summary job }" -gt "$array" ]
}

@test "slurm: a task that fails still gets its summary (afterany), which fails the batch" {
	local d
	d=$(batch_dir failing)
	cd "$d"
	# one manifest is invalid: its task seals no record; one is not even
	# JSON: its task fails, and the summary must not pass it over
	jq '.maxTurns = 0' manifests/gamma.json >m && mv m manifests/gamma.json
	echo '{"name":' >manifests/zeta.json
	run timeout 300 "$REPO/examples/slurm/submit.sh" --wait manifests
	echo "$output"
	cat logs/*.out || true
	[ "$status" -eq 1 ]
	[ ! -e stamps/gamma.verified ]
	grep -q 'manifests/gamma.json: the run sealed no record (exit 2)' logs/sfma-run-*.out
	[ "$(ls stamps/*.verified | wc -l)" -eq 3 ]
	[ "$(ls logs/sfma-run-*.out | wc -l)" -eq 5 ]
	cat summary.txt
	[ "$(head -n 1 summary.txt)" = "manifests/zeta.json: names no workspace, not summarised" ]
	grep -q '^runs/gamma  *-  *NO RECORD: ' summary.txt
	[ "$(tail -n 1 summary.txt)" = "total 4: verified 3, invalid 0, unsealed 0, no record 1; completed 3" ]
}

@test "slurm summary.sh: one jq reads every manifest of the list; an empty one is said, the others summarised" {
	local d
	d=$(batch_dir summary-only)
	cd "$d"
	for i in $(seq 20); do
		jq --arg ws "runs/m$i" '.workspace = $ws' manifests/alpha.json >"manifests/m$i.json"
	done
	find manifests -name 'm*.json' | LC_ALL=C sort >list
	# jq, counted: every call leaves a line
	local real
	real=$(command -v jq)
	mkdir "$BATS_TEST_TMPDIR/counted"
	printf '#!/bin/sh\necho call >>"%s"\nexec "%s" "$@"\n' "$BATS_TEST_TMPDIR/jq.calls" "$real" \
		>"$BATS_TEST_TMPDIR/counted/jq"
	chmod +x "$BATS_TEST_TMPDIR/counted/jq"
	# no run yet: every workspace has no record, the summary lists all 20
	PATH="$BATS_TEST_TMPDIR/counted:$PATH" run "$REPO/examples/slurm/summary.sh" list
	[ "$status" -eq 1 ]
	[ "$(tail -n 1 summary.txt)" = "total 20: verified 0, invalid 0, unsealed 0, no record 20; completed 0" ]
	[ "$(wc -l <"$BATS_TEST_TMPDIR/jq.calls")" -eq 1 ]
	: >manifests/empty.json
	echo manifests/empty.json >>list
	run "$REPO/examples/slurm/summary.sh" list
	[ "$status" -eq 1 ]
	[ "$(head -n 1 summary.txt)" = "manifests/empty.json: names no workspace, not summarised" ]
	[ "$(tail -n 1 summary.txt)" = "total 20: verified 0, invalid 0, unsealed 0, no record 20; completed 0" ]
}

@test "slurm: a folder of more manifests than an array may have (MaxArraySize) is refused in one line, nothing submitted" {
	local d max
	max=$(scontrol show config | awk '$1 == "MaxArraySize" { print $3 }')
	[ "$max" -eq 1001 ]
	d=$(batch_dir too-many)
	cd "$d"
	for i in $(seq 5 $((max + 1))); do cp manifests/alpha.json "manifests/m$i.json"; done
	[ "$(ls manifests/*.json | wc -l)" -eq $((max + 1)) ]
	local before
	before=$(squeue -h -o %i | wc -l)
	run --separate-stderr "$REPO/examples/slurm/submit.sh" --wait manifests
	[ "$status" -eq 1 ]
	[ "$output" = "" ]
	[ "$stderr" = "submit.sh: 1002 manifests in manifests/, more than the 1001 tasks an array may have here (MaxArraySize in slurm.conf): split the folder" ]
	[ "$(squeue -h -o %i | wc -l)" -eq "$before" ]
	# one fewer is one array (held: none of it runs; cancelled at once)
	rm "manifests/m$((max + 1)).json"
	SBATCH_OPTS=--hold run "$REPO/examples/slurm/submit.sh" manifests
	local array=${lines[0]#array job }
	scancel --quiet "${array%%:*}" "${lines[1]#summary job }" || true
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "array job ${array%%:*}: 1001 manifests" ]
	[[ "${lines[1]}" =~ ^summary\ job\ [0-9]+$ ]]
}
