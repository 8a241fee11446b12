#!/usr/bin/env node
// otlp-decode.js [FILE] - read an OTLP/JSON ExportTraceServiceRequest (FILE
// or stdin) with protobufjs against the official opentelemetry-proto
// definitions (tests/fixtures/otlp/proto), as the OTLP specification reads
// it, and print what was decoded as JSON (ids as lowercase hex, 64-bit
// numbers as decimal strings). Exits 1 naming the first thing wrong:
//
//  - the JSON encoding rules of OTLP (opentelemetry-proto
//    docs/specification.md, "JSON Protobuf Encoding"): keys are the fields'
//    lowerCamelCase names (an unknown or snake_case key is an error here,
//    though a receiver would ignore it: ours must not write one), enums
//    are integers, trace and span ids are hex (not proto3 JSON's base64),
//    64-bit integers are decimal strings;
//  - the message verifies and survives a binary encode and decode;
//  - the fields every span needs: ids of 16 and 8 bytes, not all zero, a
//    name, a kind, start <= end; every attribute value holds one value;
//  - per trace, the parent links form one tree: one root (no parent, or a
//    parent outside the trace: the caller's span), every other parent in
//    the trace, and each child's times inside its parent's.
"use strict";
const fs = require("fs");
const path = require("path");
const protobuf = require("protobufjs");

function fail(msg) {
	process.stderr.write("otlp-decode: " + msg + "\n");
	process.exit(1);
}

const protoDir = path.join(__dirname, "fixtures", "otlp", "proto");
const root = new protobuf.Root();
root.resolvePath = (origin, target) => path.join(protoDir, target);
root.loadSync("opentelemetry/proto/collector/trace/v1/trace_service.proto");
root.resolveAll();
const Request = root.lookupType("opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest");

const text = fs.readFileSync(process.argv[2] || 0, "utf8");
let json;
try {
	json = JSON.parse(text);
} catch (e) {
	fail("not JSON: " + e.message);
}

// The fields whose bytes OTLP/JSON writes as hex (every trace_id and span_id).
const HEX_FIELDS = new Map([["traceId", 16], ["spanId", 8], ["parentSpanId", 8]]);
const INT64 = new Set(["int64", "uint64", "sint64", "fixed64", "sfixed64"]);

// Walk value as message type: keys, enums, hex ids, 64-bit strings; return
// the proto3-JSON object protobufjs's fromObject reads (ids as bytes).
function walk(type, value, where) {
	if (value === null || typeof value !== "object" || Array.isArray(value))
		fail(`${where}: not an object`);
	const out = {};
	for (const [key, v] of Object.entries(value)) {
		const field = type.fields[key];
		if (!field)
			fail(`${where}: ${key} is not a field of ${type.name} (OTLP/JSON keys are lowerCamelCase field names)`);
		out[key] = field.repeated ? checkList(field, v, `${where}.${key}`) : one(field, v, `${where}.${key}`);
	}
	return out;
}

function checkList(field, v, where) {
	if (!Array.isArray(v))
		fail(`${where}: not an array`);
	return v.map((x, i) => one(field, x, `${where}[${i}]`));
}

function one(field, v, where) {
	field.resolve();
	if (field.resolvedType instanceof protobuf.Type)
		return walk(field.resolvedType, v, where);
	if (field.resolvedType instanceof protobuf.Enum) {
		if (!Number.isInteger(v) || !Object.values(field.resolvedType.values).includes(v))
			fail(`${where}: an enum is written as one of its integers in OTLP/JSON, not ${JSON.stringify(v)}`);
		return v;
	}
	if (field.type === "bytes" && HEX_FIELDS.has(field.name)) {
		const n = HEX_FIELDS.get(field.name);
		if (typeof v !== "string" || !/^[0-9a-f]*$/.test(v) || v.length !== 2 * n)
			fail(`${where}: not ${n} bytes as ${2 * n} lowercase hex digits: ${JSON.stringify(v)}`);
		if (/^0+$/.test(v))
			fail(`${where}: an all-zero id is invalid`);
		return Buffer.from(v, "hex");
	}
	if (INT64.has(field.type)) {
		if (typeof v !== "string" || !/^(0|-?[1-9][0-9]*)$/.test(v))
			fail(`${where}: a 64-bit integer is a decimal string in OTLP/JSON, not ${JSON.stringify(v)}`);
		return v;
	}
	if (field.type === "string" && typeof v !== "string")
		fail(`${where}: not a string`);
	if (field.type === "bool" && typeof v !== "boolean")
		fail(`${where}: not a boolean`);
	if (["double", "float"].includes(field.type) && typeof v !== "number")
		fail(`${where}: not a number`);
	if (["int32", "uint32", "fixed32", "sint32", "sfixed32"].includes(field.type) && !Number.isInteger(v))
		fail(`${where}: not an integer`);
	return v;
}

const obj = walk(Request, json, "request");
const msg = Request.fromObject(obj);
const err = Request.verify(msg);
if (err)
	fail("does not verify: " + err);
const wire = Request.encode(msg).finish();
const back = Request.toObject(Request.decode(wire), { longs: String, enums: Number, bytes: String, defaults: false });

// Ids back to hex (toObject gives base64 for bytes).
function hexIds(o) {
	if (Array.isArray(o))
		return o.forEach(hexIds);
	if (o && typeof o === "object")
		for (const [k, v] of Object.entries(o)) {
			if (HEX_FIELDS.has(k) && typeof v === "string")
				o[k] = Buffer.from(v, "base64").toString("hex");
			else
				hexIds(v);
		}
}
hexIds(back);

// The decoded message holds what the JSON said: nothing was dropped.
function canon(v) {
	if (Array.isArray(v))
		return v.map(canon);
	if (v && typeof v === "object")
		return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])]));
	return v;
}
// proto3 does not tell a default value (0, "", false, []) from an absent one.
const isDefault = (v) => v === 0 || v === "0" || v === "" || v === false || (Array.isArray(v) && v.length === 0);
function firstDiff(a, b, where) {
	if (JSON.stringify(canon(a)) === JSON.stringify(canon(b)) || (a === undefined && isDefault(b)))
		return null;
	if (a && b && typeof a === "object" && typeof b === "object") {
		for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
			const d = firstDiff(a[k], b[k], `${where}.${k}`);
			if (d)
				return d;
		}
		return null;
	}
	return `${where}: ${JSON.stringify(b)} came back as ${JSON.stringify(a)}`;
}
const diff = firstDiff(back, json, "request");
if (diff)
	fail("the decoded message differs from the JSON (a field lost or changed on the way through protobuf): " + diff);

function checkAttrs(attrs, where) {
	for (const [i, kv] of (attrs || []).entries()) {
		if (!kv.key)
			fail(`${where}.attributes[${i}]: no key`);
		const set = Object.keys(kv.value || {});
		if (set.length !== 1)
			fail(`${where}.attributes[${i}] (${kv.key}): a value holds exactly one of AnyValue's fields`);
	}
}

const big = (s) => BigInt(s || "0");
for (const [r, rs] of (back.resourceSpans || []).entries()) {
	if (!rs.resource)
		fail(`resourceSpans[${r}]: no resource`);
	checkAttrs(rs.resource.attributes, `resourceSpans[${r}].resource`);
	const traces = new Map();
	for (const [s, ss] of (rs.scopeSpans || []).entries()) {
		if (!ss.scope || !ss.scope.name)
			fail(`resourceSpans[${r}].scopeSpans[${s}]: no scope name`);
		for (const [i, sp] of (ss.spans || []).entries()) {
			const where = `resourceSpans[${r}].scopeSpans[${s}].spans[${i}]`;
			for (const f of ["traceId", "spanId", "name", "kind", "startTimeUnixNano", "endTimeUnixNano"])
				if (sp[f] === undefined || sp[f] === "")
					fail(`${where}: no ${f}`);
			if (big(sp.startTimeUnixNano) > big(sp.endTimeUnixNano))
				fail(`${where}: ends before it starts`);
			checkAttrs(sp.attributes, where);
			for (const [k, ev] of (sp.events || []).entries()) {
				if (!ev.name || ev.timeUnixNano === undefined)
					fail(`${where}.events[${k}]: no name or time`);
				if (big(ev.timeUnixNano) < big(sp.startTimeUnixNano) || big(ev.timeUnixNano) > big(sp.endTimeUnixNano))
					fail(`${where}.events[${k}] (${ev.name}): outside its span's times`);
				checkAttrs(ev.attributes, `${where}.events[${k}]`);
			}
			if (!traces.has(sp.traceId))
				traces.set(sp.traceId, []);
			traces.get(sp.traceId).push(sp);
		}
	}
	for (const [trace, spans] of traces) {
		const byId = new Map();
		for (const sp of spans) {
			if (byId.has(sp.spanId))
				fail(`trace ${trace}: span id ${sp.spanId} twice`);
			byId.set(sp.spanId, sp);
		}
		// one root per run: a trace the caller's TRACEPARENT names may hold
		// several runs, each a root under the caller's span
		const roots = spans.filter((sp) => !sp.parentSpanId || !byId.has(sp.parentSpanId));
		const runs = new Set(spans.filter((sp) => (sp.attributes || []).some((a) => a.key === "sfma.run")));
		if (roots.length !== runs.size || roots.some((sp) => !runs.has(sp)))
			fail(`trace ${trace}: ${roots.length} roots for ${runs.size} runs (every root must be a run span)`);
		for (const sp of spans) {
			let seen = new Set(), at = sp;
			while (at.parentSpanId && byId.has(at.parentSpanId)) {
				if (seen.has(at.spanId))
					fail(`trace ${trace}: a cycle through ${at.spanId}`);
				seen.add(at.spanId);
				const p = byId.get(at.parentSpanId);
				if (at === sp && (big(sp.startTimeUnixNano) < big(p.startTimeUnixNano) ||
				                  big(sp.endTimeUnixNano) > big(p.endTimeUnixNano)))
					fail(`trace ${trace}: span ${sp.spanId} (${sp.name}) is not inside its parent ${p.spanId} (${p.name})`);
				at = p;
			}
		}
	}
}
process.stdout.write(JSON.stringify(back) + "\n");
