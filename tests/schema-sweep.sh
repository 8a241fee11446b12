#!/bin/sh
# schema-sweep.sh DIR: every manifest the test suite left under DIR (a
# JSON object with modelEndpoints, in a file of at most 1 MiB) that the
# loader accepts - sfma-plan --check, run in its own directory - must
# validate against the manifest's JSON Schema with ajv
# (tests/schema/validate.js; SFMA_SCHEMA overrides the schema). What the
# loader refuses is left alone: some are refused on purpose, and some for
# what no schema can see (where the workspace resolves). Exit 1 when any
# fails, 0 otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
dir=$1
# The loader under test: SFMA_BINDIR (bin/ or the sanitizer build), else PATH.
[ -z "${SFMA_BINDIR:-}" ] || PATH=$SFMA_BINDIR:$PATH
schema=${SFMA_SCHEMA:-$here/../schema/sfma-manifest.schema.json}
[ -f "$here/node_modules/ajv/dist/2020.js" ] || { echo "schema sweep: ajv is missing: run make test-deps" >&2; exit 1; }
list=$(mktemp)
accepted=$(mktemp)
trap 'rm -f "$list" "$accepted"' EXIT
find "$dir" -name '*.json' -type f -size -1024k -not -path '*/.sfma/*' -not -path '*/node_modules/*' 2>/dev/null |
	sort | python3 -c '
import json, sys
for path in sys.stdin.read().split("\n"):
    if not path:
        continue
    try:
        doc = json.load(open(path, encoding="utf-8"))
    except Exception:
        continue
    if isinstance(doc, dict) and "modelEndpoints" in doc:
        print(path)
' >"$list"
while IFS= read -r f; do
	if (cd "$(dirname "$f")" && sfma-plan --check "$(basename "$f")" >/dev/null 2>&1); then
		echo "$f" >>"$accepted"
	fi
done <"$list"
n=$(wc -l <"$accepted")
[ "$n" -gt 0 ] || { echo "schema sweep: no manifest the loader accepts under $dir"; exit 0; }
tr '\n' '\0' <"$accepted" | xargs -0 node "$here/schema/validate.js" "$schema" |
	awk -v n="$n" '
	/^valid / { ok++; next }
	{ sub(/^invalid /, ""); print "schema sweep: the loader accepts, the schema refuses: " $0; bad++ }
	END {
		if (bad) { print "schema sweep: " bad " of " n " manifests the loader accepts do not validate"; exit 1 }
		print "schema sweep: " n " manifests the loader accepts, all valid"
	}'
