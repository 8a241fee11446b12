# Common set-up for the bats suite: the programs under test come first on PATH.
# SFMA_BINDIR points at bin/ or at the sanitizer build (make check-sanitize).

SFMA_BINDIR=${SFMA_BINDIR:-$(cd "$BATS_TEST_DIRNAME/../bin" && pwd)}
export PATH="$SFMA_BINDIR:$PATH"
INTEROP=${SFMA_INTEROP:-$BATS_TEST_DIRNAME/fixtures/interop}
REPO=$(cd "$BATS_TEST_DIRNAME/.." && pwd)

# Fail loudly (never skip) when a facility the suite relies on is missing.
require() {
	command -v "$1" >/dev/null || { echo "required tool missing: $1" >&2; return 1; }
}

# The SFMA_MOCK queue as a JSON array of the given JSON values.
mock() {
	local IFS=,
	export SFMA_MOCK="[$*]"
}
