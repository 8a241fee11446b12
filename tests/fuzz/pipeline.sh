#!/bin/sh
# pipeline.sh SECONDS: the fuzzers that drive the real programs rather than
# a harness, SECONDS each, with random seeds (printed, to reproduce):
#   differential.py  random reply scripts through a run and its replay;
#   mutants.py       records mutated and re-sealed so they verify, replayed;
#   sudden-death.sh  a random stage killed at a random moment, then a run.
# Needs SFMA_BINDIR. Exit 1 if any finds a case.
set -u
here=$(dirname "$0")
secs=${1:-60}
failed=0
python3 "$here/differential.py" --seconds "$secs" || failed=1
python3 "$here/mutants.py" --seconds "$secs" || failed=1
# a run of sudden death takes about a second
bash "$here/sudden-death.sh" "$(date +%s)" "$((secs > 4 ? secs / 2 : 2))" || failed=1
exit $failed
