#!/usr/bin/env bats
# The Slurm example (examples/slurm/) against a real single-node Slurm that
# this file starts itself: munged on its own socket and key, slurmctld and
# slurmd on a generated slurm.conf with free ports, everything in one
# temporary directory; all of it stopped by pid at the end. Nothing is
# skipped: a missing daemon or a cluster that does not come up fails.

bats_require_minimum_version 1.5.0
load helpers

# A port nobody listens on now (the kernel's choice for port 0).
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Print the daemons' logs: when the cluster fails, they say why.
show_logs() {
	for f in "$CLUSTER"/log/*; do echo "--- $f"; tail -n 30 "$f"; done
}

# Poll (at most ~60 s) until "$@" succeeds.
await() {
	local i
	for i in $(seq 120); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	echo "never came true: $*" >&2
	show_logs >&2
	return 1
}

# Started by pid into $CLUSTER/pids; never a daemon this file did not start.
start_daemon() {
	local name=$1
	shift
	# fd 3 closed: bats waits for it, and a daemon must not hold it
	"$@" >"$CLUSTER/log/$name.out" 2>&1 3>&- &
	echo "$name $!" >>"$CLUSTER/pids"
}

setup_file() {
	for tool in munged mungekey slurmctld slurmd sbatch scontrol sinfo squeue jq python3; do
		command -v "$tool" >/dev/null || { echo "required for the Slurm test, missing: $tool (make test-deps)" >&2; return 1; }
	done
	# munged refuses a socket directory that others cannot traverse, so the
	# cluster lives in a directory of its own, 0755 from / down.
	CLUSTER=$(mktemp -d /tmp/sfma-slurm.XXXXXX)
	export CLUSTER
	chmod 0755 "$CLUSTER"
	mkdir -p "$CLUSTER"/{state,spool,run,log,munge,batch}
	chmod 0700 "$CLUSTER/munge"
	: >"$CLUSTER/pids"

	# munge: a key made here, a daemon on its own socket (never the system's)
	mungekey --create --keyfile="$CLUSTER/munge/munge.key"
	start_daemon munged munged --foreground --socket="$CLUSTER/run/munge.socket" \
		--key-file="$CLUSTER/munge/munge.key" --pid-file="$CLUSTER/run/munged.pid" \
		--seed-file="$CLUSTER/munge/munged.seed" --log-file="$CLUSTER/log/munged.log"
	await test -S "$CLUSTER/run/munge.socket"

	local host ctld_port d_port
	host=$(hostname -s)
	ctld_port=$(free_port)
	d_port=$(free_port)
	while [ "$d_port" = "$ctld_port" ]; do d_port=$(free_port); done
	# slurm.conf(5) of Slurm 22.05 (Debian 12): no accounting, no cgroups
	# (proctrack/linuxproc, task/none), root runs everything, every path
	# in $CLUSTER; AuthInfo socket= points auth/munge and cred/munge at our
	# munged.
	cat >"$CLUSTER/slurm.conf" <<CONF
ClusterName=sfmatest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$CLUSTER/run/munge.socket
StateSaveLocation=$CLUSTER/state
SlurmdSpoolDir=$CLUSTER/spool
SlurmctldPidFile=$CLUSTER/run/slurmctld.pid
SlurmdPidFile=$CLUSTER/run/slurmd.pid
SlurmctldLogFile=$CLUSTER/log/slurmctld.log
SlurmdLogFile=$CLUSTER/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MailProg=/bin/true
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
	export SLURM_CONF="$CLUSTER/slurm.conf"
	start_daemon slurmctld slurmctld -D -i -f "$SLURM_CONF"
	await scontrol ping
	start_daemon slurmd slurmd -D -N "$host" -f "$SLURM_CONF"
	await sh -c 'sinfo -h -N -o %t | grep -qx idle'
}

teardown_file() {
	[ -n "${CLUSTER:-}" ] || return 0
	# jobs first (their slurmstepd ends with them), then the daemons this
	# file started, by pid, newest first
	export SLURM_CONF="$CLUSTER/slurm.conf"
	scancel --quiet --user=root 2>/dev/null || true
	for _ in $(seq 100); do
		[ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
		sleep 0.2
	done
	local name pid
	tac "$CLUSTER/pids" | while read -r name pid; do
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -rf "$CLUSTER"
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
