#!/usr/bin/env python3
"""generate.py SCHEMA OUTDIR - manifests for the loader and the schema to
judge alike (tests/schema.bats).

Starting from one valid manifest that holds every key the schema defines
(the same walk as the schema's own: objects by their properties, arrays
by their first item), for each key: the manifest without it, with it
misspelt (two letters swapped, a letter dropped, a case changed), with a
value of the wrong type, with values at its bounds (the minimum, the
maximum, as many items as allowed) and with values out of its range
(below the minimum, above the maximum, not an integer, outside the enum,
an empty string or array, one item too many, a string the pattern
refuses). Each
case is OUTDIR/NNNN.json; OUTDIR/index.tsv names them: file, then what
was changed.

The walk is driven by the schema, so a key added to it gets its cases
without a change here; BASE must hold it (the script fails when a key of
the schema is missing from BASE, so the set cannot silently shrink).
"""
import copy
import json
import os
import sys

# A valid manifest with every key: the loader and the schema both accept
# it (tests/schema.bats checks that first). Keys the schema refuses
# whatever their value (tuning.ntpAnchor) are added as cases instead.
BASE = {
    "$schema": "../../schema/sfma-manifest.schema.json",
    "x-owner": "tests",
    "name": "generated",
    "workspace": "ws",
    "taskStatement": "fix calc.py so that its unit test passes",
    "modelEndpoints": [{
        "name": "primary",
        "provider": "openai",
        "model": "gpt-test",
        "baseUrl": "https://api.example.test/v1",
        "priors": {"reasoning": 0.7, "mechanical": 0.4},
        "auth": {"type": "oauth2-client-credentials", "tokenUrl": "https://auth.example.test/token",
                 "clientIdEnv": "TEST_CLIENT_ID", "clientSecretEnv": "TEST_CLIENT_SECRET", "scope": "models"},
        "maxOutputTokens": 2048,
        "toolProtocol": "native",
        "pricing": {"inputPerMTok": 3, "outputPerMTok": 15, "cachedInputPerMTok": 0.3, "cacheWritePerMTok": 3.75},
    }],
    "allowedCommands": ["python3", "echo"],
    "inputs": ["calc.py", "test_calc.py"],
    "outputs": ["calc.py"],
    "maxTurns": 20,
    "dryRunDefault": False,
    "maxModelCalls": 100,
    "maxSeconds": 600,
    "maxLoops": 2,
    "maxPendingTasks": 16,
    "maxTokens": 1000000,
    "maxContextBytes": 131072,
    "allowSelfModification": False,
    "tuning": {
        "ewmaAlpha": 0.3, "targetLatencyMs": 2000,
        "routing": {"reasoning": {"prior": 0.2, "pass": 0.5, "avail": 0.2, "lat": 0.1},
                    "mechanical": {"prior": 0.1, "pass": 0.3, "avail": 0.2, "lat": 0.4}},
        "certWindow": 20, "certCompletion": 0.9, "certPass": 0.85, "demotePass": 0.6,
        "fastTierMaxBytes": 512, "softCalls": 3,
    },
    "acceptance": [{"cmd": "python3 -m unittest test_calc", "exit": 0}],
    "commandTimeoutSeconds": 120,
    "limits": {"memoryBytes": 1 << 30, "processes": 64, "fileSizeBytes": 64 << 20, "cpuSeconds": 100,
               "outputBytes": 4096, "workspaceBytes": 256 << 20},
    "maxCostUsd": 2.5,
    "requireConfinement": False,
}

# Strings each pattern refuses, by the key that holds the pattern.
BAD_STRINGS = {
    "workspace": ["a\u0000b"],
    "name": ["\u0000x"],
    "model": ["\u0000x"],
    "baseUrl": ["http://api.example.test/v1", "ftp://x.test", "http://user@127.0.0.1/", "https://"],
    "tokenUrl": ["http://auth.example.test/token", ""],
    "allowedCommands": ["/bin/sh", "py thon", ""],
    "inputs": ["../up", "/etc/passwd", ".", "a/../../b", ""],
    "outputs": [".sfma/x", "./.sfma", "../up", "/abs", ""],
    "cmd": ["echo a; rm x", "echo $HOME", "   ", "echo `id`", "echo a\nb"],
    "clientIdEnv": [""],
    "clientSecretEnv": [""],
}


def wrong_type(schema):
    """A value of another type than the schema wants."""
    t = schema.get("type")
    if t in ("integer", "number"):
        return "5"
    if t == "string":
        return 5
    if t == "boolean":
        return "true"
    if t == "array":
        return {}
    if t == "object":
        return []
    return 5  # enum, const


def out_of_range(key, schema, value):
    """Values the schema's own bounds refuse."""
    t = schema.get("type")
    out = []
    if t in ("integer", "number"):
        step = 1 if t == "integer" else 0.5
        if "minimum" in schema:
            out.append(("at minimum", schema["minimum"]))
            out.append(("below minimum", schema["minimum"] - step))
        if "exclusiveMinimum" in schema:
            out.append(("just above exclusiveMinimum", schema["exclusiveMinimum"] + 0.001))
            out.append(("at exclusiveMinimum", schema["exclusiveMinimum"]))
            out.append(("below exclusiveMinimum", schema["exclusiveMinimum"] - step))
        if "maximum" in schema:
            out.append(("at maximum", schema["maximum"]))
            out.append(("above maximum", schema["maximum"] + step))
        if t == "integer":
            out.append(("not an integer", value + 0.5))
    if "enum" in schema:
        out.append(("outside the enum", "bogus"))
    if "const" in schema:
        out.append(("not the const", "bogus"))
    if t == "string":
        if schema.get("minLength", 0) > 0:
            out.append(("empty string", ""))
        for bad in BAD_STRINGS.get(key, []) if "pattern" in schema else []:
            out.append(("pattern refuses %r" % bad, bad))
    if t == "array":
        if schema.get("minItems", 0) > 0:
            out.append(("empty array", []))
        if "maxItems" in schema:
            out.append(("as many items as allowed", [value[0]] * schema["maxItems"]))
            out.append(("one item too many", [value[0]] * (schema["maxItems"] + 1)))
        item = schema.get("items", {})
        if item.get("type") == "string":
            out.append(("an item of the wrong type", value + [5]))
            for bad in BAD_STRINGS.get(key, []) if "pattern" in item else []:
                out.append(("an item the pattern refuses %r" % bad, value + [bad]))
        elif item.get("type") == "object":
            out.append(("an item that is not an object", value + ["x"]))
    return out


def misspellings(key):
    spelt = []
    if len(key) > 3:
        spelt.append(key[:1] + key[2] + key[1] + key[3:])   # two letters swapped
        spelt.append(key[:-1])                              # the last letter dropped
    spelt.append(key[:1].swapcase() + key[1:])              # a case changed
    spelt.append(key + "s" if not key.endswith("s") else key[:-1] + "z")
    return [s for s in dict.fromkeys(spelt) if s != key]


def walk(schema, doc, path, cases):
    """Cases for every key of the object doc that schema describes."""
    props = schema.get("properties", {})
    for key in props:
        if key not in doc:
            if "not" in props[key]:
                cases.append((path + [key], "present (refused whatever its value)", "set", True))
                continue
            sys.exit("generate.py: BASE lacks %s" % ".".join(map(str, path + [key])))
    for key, value in doc.items():
        if key not in props:
            continue  # x- keys
        sub = props[key]
        where = path + [key]
        cases.append((where, "removed", "del", None))
        for spelt in misspellings(key):
            cases.append((where, "misspelt %s" % spelt, "rename", spelt))
        cases.append((where, "wrong type", "set", wrong_type(sub)))
        for label, bad in out_of_range(key, sub, value):
            cases.append((where, label, "set", bad))
        if sub.get("type") == "object":
            walk(sub, value, where, cases)
        elif sub.get("type") == "array" and sub.get("items", {}).get("type") == "object":
            walk(sub["items"], value[0], where + [0], cases)


# What a case at a bound changes besides, where the loader checks one key
# against another (sfma-manifest(5)): commandTimeoutSeconds is at most
# maxSeconds, which the schema cannot say. Without these the two would
# disagree by design.
ALONGSIDE = {
    ("commandTimeoutSeconds", "at maximum"): {"maxSeconds": 86400},
    ("maxSeconds", "at minimum"): {"commandTimeoutSeconds": 1},
}


def apply(base, where, op, arg, label=""):
    doc = copy.deepcopy(base)
    doc.update(ALONGSIDE.get((".".join(map(str, where)), label), {}))
    parent = doc
    for step in where[:-1]:
        parent = parent[step]
    key = where[-1]
    if op == "del":
        del parent[key]
    elif op == "rename":
        # keep the order of the keys: the misspelling stands where the key stood
        items = list(parent.items())
        parent.clear()
        for k, v in items:
            parent[arg if k == key else k] = v
    else:
        parent[key] = arg
    return doc


def main():
    schema_file, outdir = sys.argv[1], sys.argv[2]
    schema = json.load(open(schema_file, encoding="utf-8"))
    cases = []
    walk(schema, BASE, [], cases)
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "index.tsv"), "w", encoding="utf-8") as index:
        name = "0000.json"
        json.dump(BASE, open(os.path.join(outdir, name), "w", encoding="utf-8"))
        index.write("%s\tthe base manifest\n" % name)
        for n, (where, label, op, arg) in enumerate(cases, 1):
            name = "%04d.json" % n
            with open(os.path.join(outdir, name), "w", encoding="utf-8") as f:
                json.dump(apply(BASE, where, op, arg, label), f)
            index.write("%s\t%s: %s\n" % (name, ".".join(map(str, where)), label))


if __name__ == "__main__":
    main()
