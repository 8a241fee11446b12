#!/bin/sh
# suite.sh BATS-ARGS...: the bats suite with its directories kept in one
# of its own, then every honest record it left replayed
# (tests/replay-sweep.sh) and every manifest it left that the loader
# accepts validated against the schema (tests/schema-sweep.sh), then the
# directory removed. Exit 1 when any fails.
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sfma-check.XXXXXX")
TMPDIR=$tmp bats --no-tempdir-cleanup --print-output-on-failure "$@"
rc=$?
sh "$here/replay-sweep.sh" "$tmp" || rc=1
sh "$here/schema-sweep.sh" "$tmp" || rc=1
rm -rf "$tmp"
exit $rc
