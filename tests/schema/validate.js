#!/usr/bin/env node
// validate.js SCHEMA FILE... - each FILE against the JSON Schema (draft
// 2020-12) with ajv, a validator that is not sfma's own: one line per
// file, "valid FILE" or "invalid FILE: <the first error>". Exit 0 when
// the schema compiles (whatever the files), 2 when it does not.
"use strict";
const fs = require("fs");
const path = require("path");
// ajv comes from tests/node_modules (make test-deps).
const Ajv2020 = require(path.join(__dirname, "..", "node_modules", "ajv", "dist", "2020"));

const [schemaFile, ...files] = process.argv.slice(2);
let validate;
try {
	const ajv = new Ajv2020({ allErrors: false, strict: true, strictRequired: false });
	validate = ajv.compile(JSON.parse(fs.readFileSync(schemaFile, "utf8")));
} catch (e) {
	console.error(`validate.js: ${schemaFile}: ${e.message}`);
	process.exit(2);
}
for (const f of files) {
	let doc;
	try {
		doc = JSON.parse(fs.readFileSync(f, "utf8"));
	} catch (e) {
		console.log(`invalid ${f}: not JSON: ${e.message}`);
		continue;
	}
	if (validate(doc)) {
		console.log(`valid ${f}`);
	} else {
		const e = validate.errors[0];
		console.log(`invalid ${f}: ${e.instancePath || "/"} ${e.message}${e.params && e.params.additionalProperty ? ` (${e.params.additionalProperty})` : ""}`);
	}
}
