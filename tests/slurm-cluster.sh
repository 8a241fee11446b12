#!/bin/sh
# A real single-node Slurm for the Slurm test (tests/slurm.bats) and its
# benchmark (tests/bench/slurm.sh), started the same way for both: munged
# on its own socket and key, slurmctld and slurmd on a generated
# slurm.conf with free ports, everything in one temporary directory.
#
#   slurm-cluster.sh start [--max-array-size=K]   prints the directory
#   slurm-cluster.sh stop DIR                      its jobs, then its daemons
#
# start returns once the node is idle, or fails (the daemons' logs on
# stderr, the daemons it started stopped). Then SLURM_CONF=DIR/slurm.conf
# reaches the cluster; DIR/batch is a place for the batch directories
# (every node sees it: there is one). The node has the machine's CPUs,
# one task each. --max-array-size is slurm.conf's MaxArraySize (Slurm's
# default, 1001, takes arrays of up to 1001 tasks). stop ends only what
# start started, by the pids it kept in DIR/pids, then removes DIR.
set -eu

# A port nobody listens on now (the kernel's choice for port 0).
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Print the daemons' logs: when the cluster fails, they say why.
show_logs() {
	for f in "$cluster"/log/*; do echo "--- $f"; tail -n 30 "$f"; done
}

# Poll (at most ~60 s) until "$@" succeeds.
await() {
	for _ in $(seq 120); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	echo "never came true: $*" >&2
	show_logs >&2
	return 1
}

# Started by pid into $cluster/pids; never a daemon this script did not
# start. Its output goes to a log and fd 3 is closed: bats waits for fd 3,
# and a caller's $(...) for stdout, so a daemon must hold neither.
start_daemon() {
	name=$1
	shift
	"$@" >"$cluster/log/$name.out" 2>&1 3>&- &
	echo "$name $!" >>"$cluster/pids"
}

# Jobs first (their slurmstepd ends with them), then the daemons start
# started, by pid, newest first; then the directory.
stop() {
	cluster=$1
	[ -f "$cluster/pids" ] || { echo "slurm-cluster.sh: $cluster is no cluster this script started" >&2; return 1; }
	export SLURM_CONF="$cluster/slurm.conf"
	if [ -f "$SLURM_CONF" ] && command -v scancel >/dev/null; then
		scancel --quiet --user=root 2>/dev/null || true
		for _ in $(seq 100); do
			[ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
			sleep 0.2
		done
	fi
	tac "$cluster/pids" | while read -r name pid; do
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -rf "$cluster"
}

start() {
	max_array=
	case "${1:-}" in
	--max-array-size=*)
		max_array=${1#--max-array-size=}
		case "$max_array" in '' | *[!0-9]*) echo "slurm-cluster.sh: --max-array-size: not a number: $max_array" >&2; return 2 ;; esac
		;;
	'') ;;
	*) echo "slurm-cluster.sh: start: unknown option: $1" >&2; return 2 ;;
	esac
	for tool in munged mungekey slurmctld slurmd sbatch scontrol sinfo squeue scancel jq python3; do
		command -v "$tool" >/dev/null || { echo "Slurm cluster: missing: $tool (make test-deps)" >&2; return 1; }
	done
	# munged refuses a socket directory that others cannot traverse, so the
	# cluster lives in a directory of its own, 0755 from / down.
	cluster=$(mktemp -d /tmp/sfma-slurm.XXXXXX)
	chmod 0755 "$cluster"
	mkdir -p "$cluster"/state "$cluster"/spool "$cluster"/run "$cluster"/log "$cluster"/munge "$cluster"/batch
	chmod 0700 "$cluster/munge"
	: >"$cluster/pids"
	# from here on a failure, or a signal, stops what was started
	trap 'stop "$cluster"' EXIT
	trap 'exit 1' INT TERM HUP

	# munge: a key made here, a daemon on its own socket (never the system's)
	mungekey --create --keyfile="$cluster/munge/munge.key"
	start_daemon munged munged --foreground --socket="$cluster/run/munge.socket" \
		--key-file="$cluster/munge/munge.key" --pid-file="$cluster/run/munged.pid" \
		--seed-file="$cluster/munge/munged.seed" --log-file="$cluster/log/munged.log"
	await test -S "$cluster/run/munge.socket"

	host=$(hostname -s)
	ctld_port=$(free_port)
	d_port=$(free_port)
	while [ "$d_port" = "$ctld_port" ]; do d_port=$(free_port); done
	# slurm.conf(5) of Slurm 22.05 (Debian 12): no accounting, no cgroups
	# (proctrack/linuxproc, task/none), root runs everything, every path
	# in $cluster; AuthInfo socket= points auth/munge and cred/munge at our
	# munged. Epilog=/bin/true and batch_sched_delay=0: without an epilog
	# most tasks that end do not set the scheduler going (slurmctld's log:
	# the next task starts on a later pass, batch_sched_delay, default
	# 3 s, after the last); on one node whose tasks last a fraction of a
	# second that pause, not the runs, would be what the benchmark
	# measures. With an epilog (most clusters have one) the node's
	# epilog-complete message schedules at once; batch_sched_delay=0 keeps
	# any other wait to the controller's round of about a second.
	# MaxJobCount stays "much larger than MaxArraySize" (slurm.conf(5)).
	max_jobs=
	[ -z "$max_array" ] || [ "$((max_array * 10))" -le 10000 ] || max_jobs=$((max_array * 10))
	cat >"$cluster/slurm.conf" <<CONF
ClusterName=sfmatest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$cluster/run/munge.socket
StateSaveLocation=$cluster/state
SlurmdSpoolDir=$cluster/spool
SlurmctldPidFile=$cluster/run/slurmctld.pid
SlurmdPidFile=$cluster/run/slurmd.pid
SlurmctldLogFile=$cluster/log/slurmctld.log
SlurmdLogFile=$cluster/log/slurmd.log
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
Epilog=/bin/true
SchedulerParameters=batch_sched_delay=0
${max_array:+MaxArraySize=$max_array}
${max_jobs:+MaxJobCount=$max_jobs}
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
	export SLURM_CONF="$cluster/slurm.conf"
	start_daemon slurmctld slurmctld -D -i -f "$SLURM_CONF"
	await scontrol ping
	start_daemon slurmd slurmd -D -N "$host" -f "$SLURM_CONF"
	await sh -c 'sinfo -h -N -o %t | grep -qx idle'
	trap - EXIT INT TERM HUP
	echo "$cluster"
}

case "${1:-}" in
start) shift; start "$@" ;;
stop)
	[ $# -eq 2 ] || { echo "usage: slurm-cluster.sh stop DIR" >&2; exit 2; }
	stop "$2"
	;;
*) echo "usage: slurm-cluster.sh start [--max-array-size=K] | stop DIR" >&2; exit 2 ;;
esac
