#!/bin/sh
# run.sh - run libFuzzer harnesses built by `make fuzz-build`.
#
#   sh tests/fuzz/run.sh NAME...            fuzz each for FUZZ_SECONDS
#   sh tests/fuzz/run.sh --regress NAME...  run each saved regression once
#
# The seed corpus in the tree is never written: it is copied into a scratch
# corpus under $FUZZ_DIR/work/NAME/, where new inputs accumulate between
# runs. A crash, a leak, a timeout or running out of memory fails the run,
# naming the harness and the saved input.
set -u
FUZZ_DIR=${FUZZ_DIR:-build/fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-300}
here=$(dirname "$0")

regress=0
if [ "${1:-}" = --regress ]; then
	regress=1
	shift
fi

# Inputs larger than a harness needs only slow it down.
max_len() {
	case $1 in
	hardtier) echo 512 ;;
	canon | reply) echo 4096 ;;
	line_reader | manifest | providers) echo 8192 ;;
	chain) echo 8192 ;;
	runview | otlp) echo 8192 ;;
	*) echo 4096 ;;
	esac
}

# The failure libFuzzer reported, from the name it gave the saved input.
kind_of() {
	case $(basename "$1") in
	crash-*) echo crash ;;
	leak-*) echo leak ;;
	timeout-*) echo timeout ;;
	oom-*) echo "out of memory" ;;
	*) echo failure ;;
	esac
}

failed=0
for name in "$@"; do
	bin=$FUZZ_DIR/$name
	if [ ! -x "$bin" ]; then
		echo "fuzz: $name: $bin missing (make fuzz-build)" >&2
		failed=1
		continue
	fi
	work=$FUZZ_DIR/work/$name
	mkdir -p "$work"
	if [ $regress = 1 ]; then
		n=0
		bad=0
		for input in "$here/regressions/$name"/*; do
			[ -f "$input" ] || continue
			n=$((n + 1))
			mkdir -p "$work/tmp"
			if ! TMPDIR=$PWD/$work/tmp "$bin" -rss_limit_mb=2048 -timeout=25 "$input" >"$work/regress.log" 2>&1; then
				why=$(grep -m1 -E 'fuzz property failed|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$work/regress.log")
				echo "fuzz-regress: $name: FAILED on $input: ${why:-see $work/regress.log}" >&2
				bad=1
			fi
		done
		if [ $bad = 0 ] && [ $n = 0 ]; then
			echo "fuzz-regress: $name: no saved inputs"
		elif [ $bad = 0 ]; then
			echo "fuzz-regress: $name: $n saved inputs pass"
		fi
		[ $bad = 0 ] || failed=1
		continue
	fi

	mkdir -p "$work/corpus" "$work/artifacts"
	if [ -d "$here/corpus/$name" ]; then
		cp "$here/corpus/$name"/* "$work/corpus/" 2>/dev/null
	fi
	dict=
	[ -f "$here/$name.dict" ] && dict=-dict=$here/$name.dict
	log=$work/fuzz.log
	# -close_fd_mask=3: what the code under test prints is dropped;
	# libFuzzer and the sanitizers keep reporting on their own copy of stderr.
	# TMPDIR: where a harness makes its scratch files (hardtier's workspace).
	mkdir -p "$work/tmp"
	TMPDIR=$PWD/$work/tmp "$bin" -max_total_time="$FUZZ_SECONDS" -max_len="$(max_len "$name")" -rss_limit_mb=2048 \
	       -timeout=25 -close_fd_mask=3 -print_final_stats=1 \
	       -artifact_prefix="$work/artifacts/" $dict "$work/corpus" >"$log" 2>&1
	rc=$?
	last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	if [ $rc != 0 ]; then
		saved=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
		why=$(grep -m1 -E 'fuzz property failed|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log")
		echo "fuzz: $name: FAILED ($(kind_of "${saved:-?}")): input saved as ${saved:-? (see $log)}" >&2
		echo "fuzz: $name: ${why:-exit status $rc}; log: $log" >&2
		failed=1
	else
		echo "fuzz: $name: ok, ${runs:-?} runs in ${FUZZ_SECONDS}s: ${last#*DONE }"
	fi
done
exit $failed
