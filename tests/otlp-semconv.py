#!/usr/bin/python3
# otlp-semconv.py [FILE] - check an OTLP/JSON export (FILE or stdin, as
# tests/otlp-decode.js prints it) against the OpenTelemetry semantic
# conventions' own definitions at the version the export pins, kept in
# tests/fixtures/otlp/semconv (the YAML model of that tag):
#
#  - the version: every resource says sfma.semconv.version, and every
#    schemaUrl, is the fixture's tag;
#  - every attribute outside sfma.* (resource, span, event) is defined in
#    the registry, with a value of its type (int, double, boolean, string,
#    string[], any as a JSON string, an enum's member values);
#  - each GenAI span (by gen_ai.operation.name) has the kind, name and
#    required attributes of its definition, carries no attribute outside
#    sfma.* that its definition (with what it extends) does not list, and
#    error.type exactly when its status is an error;
#  - each gen_ai.* event likewise against its event definition; other
#    events carry sfma.* attributes only.
# Prints one line per problem and exits 1, or one line of counts.
import glob, json, os, re, sys

import yaml

here = os.path.dirname(os.path.abspath(__file__))
fixture = os.path.join(here, "fixtures", "otlp", "semconv")
version = re.search(r"semantic-conventions, tag v([0-9.]+)", open(os.path.join(here, "fixtures", "otlp", "README")).read()).group(1)

groups = {}
registry = {}
for f in glob.glob(os.path.join(fixture, "model", "**", "*.yaml"), recursive=True):
    for g in yaml.safe_load(open(f))["groups"]:
        groups[g["id"]] = g
        if g["id"].startswith("registry."):
            for a in g.get("attributes", []):
                if "id" in a:
                    registry[a["id"]] = a

# The span definitions the export follows, by operation, and the events.
SPANS = {"chat": "span.gen_ai.inference.client", "execute_tool": "span.gen_ai.execute_tool.internal",
         "invoke_agent": "span.gen_ai.invoke_agent.internal"}
EVENTS = {g["name"]: g for g in groups.values() if g.get("type") == "event"}
KINDS = {"internal": 1, "server": 2, "client": 3}
# Values of gen_ai.provider.name beyond the registry's members (an open
# enum): sfma's own mock, and an endpoint the record's manifest lacks.
EXTRA_PROVIDERS = {"sfma.mock", "unknown"}

problems = []


def problem(msg):
    problems.append(msg)


def refs(gid):
    """{attribute id: requirement level} of a group and what it extends."""
    g = groups[gid]
    out = dict(refs(g["extends"])) if "extends" in g else {}
    for a in g.get("attributes", []):
        if "ref" in a:
            out[a["ref"]] = a.get("requirement_level", out.get(a["ref"], "recommended"))
    return out


def check_value(where, key, value):
    d = registry.get(key)
    if d is None:
        problem(f"{where}: {key} is not an attribute of semantic conventions {version}")
        return
    if d.get("deprecated"):
        problem(f"{where}: {key} is deprecated in {version}")
    t = d["type"]
    (kind, v), = value.items()
    if isinstance(t, dict):
        members = [m["value"] for m in t["members"]]
        if kind != "stringValue":
            problem(f"{where}: {key} is an enum of strings, not {kind}")
        elif key == "gen_ai.operation.name" and v not in members:
            problem(f"{where}: {key} {v!r} is not one of {members}")
        elif key == "gen_ai.provider.name" and v not in members and v not in EXTRA_PROVIDERS:
            problem(f"{where}: {key} {v!r} is neither a member nor a documented extra")
        return
    want = {"string": "stringValue", "int": "intValue", "double": "doubleValue", "boolean": "boolValue",
            "string[]": "arrayValue", "any": "stringValue"}[t]
    if kind != want:
        problem(f"{where}: {key} is {t}, written as {kind}")
    elif t == "string[]" and not all(list(x) == ["stringValue"] for x in v.get("values", [])):
        problem(f"{where}: {key} is string[], an element is not a string")
    elif t == "any":
        try:
            json.loads(v)
        except ValueError:
            problem(f"{where}: {key} is recorded on a span as a JSON string; this is not JSON")


def attrs_of(o):
    return {kv["key"]: kv["value"] for kv in o.get("attributes", [])}


def check_known(where, attrs, allowed=None):
    for k, v in attrs.items():
        if k.startswith("sfma."):
            continue
        check_value(where, k, v)
        if allowed is not None and k not in allowed:
            problem(f"{where}: {k} is not an attribute of this span's definition in {version}")


def required(level):
    return level == "required"


export = json.load(open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin)
nspans = nevents = 0
for r, rs in enumerate(export.get("resourceSpans", [])):
    res = attrs_of(rs.get("resource", {}))
    if res.get("sfma.semconv.version") != {"stringValue": version}:
        problem(f"resource {r}: sfma.semconv.version is not {version}")
    url = f"https://opentelemetry.io/schemas/{version}"
    if rs.get("schemaUrl") != url:
        problem(f"resource {r}: schemaUrl is not {url}")
    check_known(f"resource {r}", res)
    for ss in rs.get("scopeSpans", []):
        if ss.get("schemaUrl") != url:
            problem(f"resource {r}: a scope's schemaUrl is not {url}")
        for sp in ss.get("spans", []):
            nspans += 1
            a = attrs_of(sp)
            where = f"span {sp['spanId']} ({sp['name']})"
            op = a.get("gen_ai.operation.name", {}).get("stringValue")
            if op not in SPANS:
                problem(f"{where}: gen_ai.operation.name {op!r} is none of {sorted(SPANS)}")
                continue
            g = groups[SPANS[op]]
            levels = refs(SPANS[op])
            check_known(where, a, set(levels))
            for k, level in levels.items():
                if required(level) and k not in a:
                    problem(f"{where}: {k} is required on {SPANS[op]}")
            if sp.get("kind") != KINDS[g["span_kind"]]:
                problem(f"{where}: kind {sp.get('kind')}, the definition's is {g['span_kind']}")
            err = sp.get("status", {}).get("code") == 2
            if err != ("error.type" in a):
                problem(f"{where}: error.type is set exactly when the operation ended in an error")
            second = {"chat": "gen_ai.request.model", "execute_tool": "gen_ai.tool.name",
                      "invoke_agent": "gen_ai.agent.name"}[op]
            name = op + (" " + a[second]["stringValue"] if second in a else "")
            if sp["name"] != name:
                problem(f"{where}: the span name should be {name!r}")
            for ev in sp.get("events", []):
                nevents += 1
                ea = attrs_of(ev)
                ew = f"{where} event {ev['name']}"
                if ev["name"].startswith("gen_ai."):
                    d = EVENTS.get(ev["name"])
                    if d is None:
                        problem(f"{ew}: no such event in {version}")
                        continue
                    levels = refs(d["id"])
                    check_known(ew, ea, set(levels))
                    for k, level in levels.items():
                        if required(level) and k not in ea:
                            problem(f"{ew}: {k} is required")
                elif not ev["name"].startswith("sfma."):
                    problem(f"{ew}: an event of neither the conventions nor sfma")
                else:
                    for k in ea:
                        if not k.startswith("sfma."):
                            problem(f"{ew}: {k} on an sfma event")
for p in problems:
    print(p)
if problems:
    sys.exit(1)
print(f"semconv {version}: {nspans} spans and {nevents} events conform")
