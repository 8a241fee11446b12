#!/usr/bin/env bats
# The manifest's JSON Schema (schema/sfma-manifest.schema.json,
# sfma-manifest(5) SCHEMA) checked with a validator that is not ours: ajv
# from the npm registry, pinned in tests/package.json (make test-deps).
# Every example and test manifest validates; the loader and the schema
# agree on a generated set of manifests (tests/schema/generate.py). The
# manifests the rest of the suite wrote are swept the same way after it
# (tests/schema-sweep.sh).

load helpers

SCHEMA=$REPO/schema/sfma-manifest.schema.json

setup() {
	require node
	require python3
	require jq
	[ -f "$REPO/tests/node_modules/ajv/dist/2020.js" ] ||
		{ echo "ajv is missing: run make test-deps (npm ci in tests/)" >&2; return 1; }
	cd "$BATS_TEST_TMPDIR"
}

ajv() { node "$REPO/tests/schema/validate.js" "$SCHEMA" "$@"; }

# loader FILE...: "valid FILE" or "invalid FILE" by sfma-plan --check, run
# where FILE is (a relative workspace resolves against the current directory).
loader() {
	local f
	for f in "$@"; do
		if (cd "$(dirname "$f")" && sfma-plan --check "$(basename "$f")" >/dev/null 2>&1); then
			echo "valid $f"
		else
			echo "invalid $f"
		fi
	done
}

@test "the schema is draft 2020-12, has a stable \$id, and ajv compiles it in strict mode" {
	[ "$(jq -r '."$schema"' "$SCHEMA")" = https://json-schema.org/draft/2020-12/schema ]
	[ "$(jq -r '."$id"' "$SCHEMA")" = urn:sfma:manifest-schema:v2 ]
	run ajv
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	# no unknown key anywhere: every object of the schema closes itself
	# (but the overlay of dependentSchemas, which only adds a requirement)
	[ "$(jq '[paths(objects) as $p | select($p | index("dependentSchemas") | not) | getpath($p)
		| select(.type == "object" and .additionalProperties != false)] | length' "$SCHEMA")" = 0 ]
	[ "$(jq '[.. | objects | select(.type == "object")] | length' "$SCHEMA")" -ge 10 ]
}

@test "every example manifest names the schema by a relative path that leads to it, and validates" {
	local files=("$REPO"/examples/*/manifest.json "$REPO"/examples/batch/manifests/*.json) f
	[ "${#files[@]}" -ge 5 ]
	for f in "${files[@]}"; do
		local ref; ref=$(jq -r '."$schema" // empty' "$f")
		[ -n "$ref" ] || { echo "$f: no \$schema"; return 1; }
		[[ "$ref" != /* ]] || { echo "$f: \$schema is absolute"; return 1; }
		[ "$(realpath "$(dirname "$f")/$ref")" = "$(realpath "$SCHEMA")" ] || { echo "$f: $ref"; return 1; }
	done
	run ajv "${files[@]}"
	[ "$status" -eq 0 ]
	[ "$(grep -c '^valid ' <<<"$output")" -eq "${#files[@]}" ] || { echo "$output"; return 1; }
	run loader "${files[@]}"
	[ "$(grep -c '^valid ' <<<"$output")" -eq "${#files[@]}" ] || { echo "$output"; return 1; }
}

@test "every curated test manifest validates, and the loader accepts it" {
	local files=("$REPO"/tests/fixtures/manifests/*.json)
	[ "${#files[@]}" -ge 7 ]
	run ajv "${files[@]}"
	[ "$(grep -c '^valid ' <<<"$output")" -eq "${#files[@]}" ] || { echo "$output"; return 1; }
	run loader "${files[@]}"
	[ "$(grep -c '^valid ' <<<"$output")" -eq "${#files[@]}" ] || { echo "$output"; return 1; }
}

@test "the loader and the schema accept and refuse the same generated manifests" {
	python3 "$REPO/tests/schema/generate.py" "$SCHEMA" cases
	local n; n=$(wc -l <cases/index.tsv)
	[ "$n" -ge 400 ] || { echo "only $n cases"; return 1; }
	ajv cases/[0-9]*.json | cut -d' ' -f1,2 | sed 's/:$//' >by-ajv
	loader cases/[0-9]*.json >by-loader
	[ "$(wc -l <by-ajv)" -eq "$n" ] && [ "$(wc -l <by-loader)" -eq "$n" ]
	# the base manifest holds every key, and both accept it
	[ "$(head -1 by-ajv)" = "valid cases/0000.json" ] && [ "$(head -1 by-loader)" = "valid cases/0000.json" ]
	local differ
	differ=$(paste -d' ' by-ajv by-loader cases/index.tsv | awk '$1 != $3 { $2 = ""; $4 = ""; print }')
	[ -z "$differ" ] || { echo "ajv, loader, case:"; echo "$differ"; return 1; }
	# both verdicts occur: removing an optional key is fine, a typo never is
	[ "$(grep -c '^valid' by-loader)" -ge 40 ]
	[ "$(grep -c '^invalid' by-loader)" -ge 300 ]
	paste by-loader cases/index.tsv | grep -q '^invalid.*misspelt maxSecond$'
	paste by-loader cases/index.tsv | grep -q '^valid.*maxSeconds: removed$'
}

@test "the schema defines exactly the keys the loader knows, object by object" {
	# The loader's lists, as lib/manifest.c spells them...
	keys_of() {
		awk -v name="$1" 'index($0, "static const char *const " name "[] = {") == 1 { on = 1 }
			on { print } on && /};/ { on = 0 }' "$REPO/lib/manifest.c" |
			grep -o '"[^"]*"' | tr -d '"' | sort | tr '\n' ' '
	}
	# ...and the schema's, at the same place.
	schema_keys() { jq -r "$1 | .properties | keys[]" "$SCHEMA" | grep -v '^\$schema$' | sort | tr '\n' ' '; }
	local pairs=(
		"top_keys|."
		"endpoint_keys|.properties.modelEndpoints.items"
		"auth_keys|.properties.modelEndpoints.items.properties.auth"
		"pricing_keys|.properties.modelEndpoints.items.properties.pricing"
		"priors_keys|.properties.modelEndpoints.items.properties.priors"
		"tuning_keys|.properties.tuning"
		"routing_keys|.properties.tuning.properties.routing"
		"weight_keys|.properties.tuning.properties.routing.properties.reasoning"
		"weight_keys|.properties.tuning.properties.routing.properties.mechanical"
		"limits_keys|.properties.limits"
		"acceptance_keys|.properties.acceptance.items"
	) p
	for p in "${pairs[@]}"; do
		local c s
		c=$(keys_of "${p%%|*}")
		s=$(schema_keys "${p#*|}")
		[ -n "$c" ] && [ "$c" = "$s" ] || { echo "${p%%|*}: loader [$c] schema [$s]"; return 1; }
	done
}

@test "the sweep fails on a manifest the loader accepts and the schema refuses" {
	mkdir -p left/a left/b
	cp "$REPO/tests/fixtures/manifests/minimal.json" left/a/m.json
	run sh "$REPO/tests/schema-sweep.sh" left
	[ "$status" -eq 0 ] || { echo "$output"; return 1; }
	[[ "$output" == *"schema sweep: 1 manifests the loader accepts, all valid"* ]] || { echo "$output"; return 1; }
	# a manifest the schema knows nothing of, if the loader accepted it
	jq '.maxTurns = 0' left/a/m.json >left/b/refused.json
	jq 'del(.modelEndpoints[0].model) | .modelEndpoints[0].model = "x"' left/a/m.json >left/b/same.json
	run sh "$REPO/tests/schema-sweep.sh" left
	[ "$status" -eq 0 ]
	[[ "$output" == *"schema sweep: 2 manifests the loader accepts, all valid"* ]] || { echo "$output"; return 1; }
	sed 's/"maxTurns":6/"maxTurns":6,"x-ok":1/' left/a/m.json >left/b/x.json
	# a schema without maxTurns: the sweep must catch what it then refuses
	jq 'del(.properties.maxTurns) | .required -= ["maxTurns"]' "$SCHEMA" >narrow.json
	SFMA_SCHEMA=$PWD/narrow.json run sh "$REPO/tests/schema-sweep.sh" left
	[ "$status" -eq 1 ]
	[[ "$output" == *"the loader accepts, the schema refuses: "*"left/a/m.json"* ]] || { echo "$output"; return 1; }
}
