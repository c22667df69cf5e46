"""kubeconform's JSON schemas written from a real kube-apiserver's OpenAPI v2 document
(/openapi/v2, CRDs included once installed), so nothing is downloaded: one file per kind,
standalone (the definitions it refers to inside it) and strict (an object with declared
properties refuses any other), at DIR/GROUP/VERSION/KIND.json (GROUP is the version for the
core group), which `kubeconform -schema-location SCHEMA_LOCATION` reads.

    openapi = api.admin.get("/openapi/v2")
    write(openapi, directory, {("apps/v1", "DaemonSet"), ("v1", "ConfigMap")})
"""

import json
import pathlib

# kubeconform's template variables: Group is the apiVersion before "/", ResourceAPIVersion
# after it ("v1" for both in the core group), ResourceKind the kind in lower case.
SCHEMA_LOCATION = "{{ .Group }}/{{ .ResourceAPIVersion }}/{{ .ResourceKind }}.json"
GVK = "x-kubernetes-group-version-kind"
INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
# Types the document gives as a string with a format, which YAML may write as a number.
AS_IS = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": INT_OR_STRING,
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        "anyOf": [{"type": "string"}, {"type": "number"}]
    },
}
REF = "#/definitions/"


def schema_path(directory: pathlib.Path, api_version: str, kind: str) -> pathlib.Path:
    group, _, version = api_version.rpartition("/")
    return directory / (group or version) / version / f"{kind.lower()}.json"


def _refs(node, found: set):
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF):
            found.add(ref[len(REF) :])
        for v in node.values():
            _refs(v, found)
    elif isinstance(node, list):
        for v in node:
            _refs(v, found)


def closure(definitions: dict, name: str) -> list[str]:
    """`name` and every definition it refers to, directly or not."""
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        found = set()
        _refs(definitions[n], found)
        todo.extend(found - seen)
    return sorted(seen)


def strict(node):
    """The schema as kubeconform's strict schemas have it: objects with properties refuse
    others (unless they keep unknown fields), int-or-string and quantities take either, and
    null is allowed where a field has a type (the API server takes null for a field left
    out)."""
    if isinstance(node, list):
        return [strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    if node.get("x-kubernetes-int-or-string"):
        return {
            **INT_OR_STRING,
            **({"description": node["description"]} if "description" in node else {}),
        }
    out = {k: strict(v) for k, v in node.items() if k != GVK}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def write(
    openapi: dict, directory: pathlib.Path, wanted: set[tuple[str, str]]
) -> list[pathlib.Path]:
    """A schema file for each (apiVersion, kind) wanted; KeyError names one the document
    does not serve."""
    definitions = {
        name: AS_IS.get(name) or schema for name, schema in openapi["definitions"].items()
    }
    by_gvk = {}
    for name, schema in openapi["definitions"].items():
        for gvk in schema.get(GVK, ()):
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            by_gvk[api_version, gvk["kind"]] = name
    written = []
    for api_version, kind in sorted(wanted):
        name = by_gvk[api_version, kind]
        doc = strict(definitions[name])
        doc["definitions"] = {n: strict(definitions[n]) for n in closure(definitions, name)}
        path = schema_path(directory, api_version, kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
        written.append(path)
    return written
