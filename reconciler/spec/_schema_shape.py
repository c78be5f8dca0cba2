"""Shapes pydantic's schema of one complete Deployment into the schema of the spec *language*.

Editors and check-jsonschema see single files, and three kinds of file are valid npuctl input:

- a complete `kind: Deployment` (every required field present);
- a `kind: Deployment` with `extends:` (fields may come from the base, so none below `metadata.name`
  is required, but every field present must still be valid);
- a `kind: DeploymentBase` (a partial spec: nothing required, not even `metadata.name`).

So every object is described twice in `$defs`: its *partial* form (all constraints but `required`), which
validates whatever is written, and its *required-only* form (only the `required` lists, reached through
the same properties, and the `const` tags that tell union branches apart), added for complete Deployments. Validating a complete spec against both reports each
wrong value once, and a missing field once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

_STRUCTURE = ("properties", "items", "additionalProperties", "anyOf", "oneOf", "allOf", "prefixItems")
_ANNOTATIONS = ("title", "description", "default")


def language_schema(body: dict[str, Any], targets: dict[str, str], options: dict[str, Any]) -> dict[str, Any]:
    """`body` is pydantic's schema of Deployment; `targets` maps catalog id -> description; `options`
    maps backend name -> (its compile.options schema, the target ids it builds by default)."""
    defs = body.pop("$defs")
    spec_def, metadata_def = "DeploymentSpec", "Metadata"
    _target_enum(defs[spec_def]["properties"]["target"], targets)
    shaped: dict[str, Any] = {}
    for name, node in defs.items():
        shaped[f"Partial{name}"] = _partial(node)
        if _has_required(node, defs):
            shaped[f"Required{name}"] = _required_only(node, defs)
    for backend, (schema, _ids) in sorted(options.items()):
        shaped[f"Options_{backend}"] = _embedded(schema)
    top = body["properties"]
    top["kind"] = {
        "enum": ["Deployment", "DeploymentBase"],
        "description": "Deployment: one deployment to build. DeploymentBase: a partial spec, shared "
        "through other specs' `extends` and never built on its own.",
        "title": "Kind",
    }
    top["spec"] = {**_annotations(top["spec"]), "$ref": f"#/$defs/Partial{spec_def}"}
    top["metadata"] = {**_annotations(top["metadata"]), "$ref": f"#/$defs/Partial{metadata_def}"}
    body["required"] = ["apiVersion", "kind"]
    is_deployment = {"properties": {"kind": {"const": "Deployment"}}, "required": ["kind"]}
    body["allOf"] = [
        {  # every Deployment names itself; a base has no name of its own
            "if": is_deployment,
            "then": {
                "required": ["metadata"],
                "properties": {"metadata": {"$ref": f"#/$defs/Required{metadata_def}"}},
            },
        },
        {  # a Deployment without extends is complete on its own
            "if": {**is_deployment, "not": {"required": ["extends"]}},
            "then": {"required": ["spec"], "properties": {"spec": {"$ref": f"#/$defs/Required{spec_def}"}}},
        },
        *(_options_rule(backend, ids) for backend, (_schema, ids) in sorted(options.items())),
    ]
    body["$defs"] = dict(sorted(shaped.items()))
    return body


def _target_enum(node: dict[str, Any], targets: dict[str, str]) -> None:
    node.pop("type", None)
    node["enum"] = sorted(targets)
    node["enumDescriptions"] = [targets[t] for t in sorted(targets)]  # editors show these beside completions
    node["markdownEnumDescriptions"] = node["enumDescriptions"]


def _options_rule(backend: str, target_ids: list[str]) -> dict[str, Any]:
    """compile.options is checked against the backend that builds the spec: `compile.backend` when set,
    else the target's. A spec whose target comes from its base is left to `npuctl validate`."""
    chosen = {
        "properties": {"compile": {"properties": {"backend": {"const": backend}}, "required": ["backend"]}}
    }
    by_target = {
        "properties": {"target": {"enum": sorted(target_ids)}, "compile": {"not": {"required": ["backend"]}}},
        "required": ["target"],
    }
    spec_if = {"anyOf": [{**chosen, "required": ["compile"]}, by_target]}
    return {
        "if": {"properties": {"spec": spec_if}, "required": ["spec"]},
        "then": {
            "properties": {
                "spec": {
                    "properties": {
                        "compile": {"properties": {"options": {"$ref": f"#/$defs/Options_{backend}"}}}
                    }
                }
            }
        },
    }


def _annotations(node: dict[str, Any]) -> dict[str, Any]:
    return {k: node[k] for k in _ANNOTATIONS if k in node}


def _embedded(schema: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in copy.deepcopy(schema).items() if k not in ("$schema", "$id")}
    out.setdefault("description", out.get("title", ""))
    return out


def _rewrite_refs(node: Any, prefix: str) -> Any:
    return _map(
        node,
        lambda d: {**d, "$ref": d["$ref"].replace("#/$defs/", f"#/$defs/{prefix}")} if "$ref" in d else d,
    )


def _partial(node: dict[str, Any]) -> dict[str, Any]:
    def drop_required(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if not (k == "required" and isinstance(v, list))}

    out: dict[str, Any] = _rewrite_refs(_map(copy.deepcopy(node), drop_required), "Partial")
    return out


def _required_only(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Only the structure that leads to `required` lists; `type: null` is kept so that an optional
    object's branch cannot be satisfied by an empty schema."""

    def keep(d: dict[str, Any]) -> dict[str, Any]:
        # `const` stays: it is what tells the branches of a tagged union (evaluate.task's `type`) apart
        out = {k: v for k, v in d.items() if k in (*_STRUCTURE, "required", "$ref", "const")}
        if d.get("type") == "null":
            out["type"] = "null"
        if "$ref" in out and not _has_required(defs[out["$ref"].rsplit("/", 1)[1]], defs):
            del out["$ref"]
        if isinstance(out.get("additionalProperties"), bool):
            del out["additionalProperties"]
        if "oneOf" in out:  # stripped to their required lists, a union's variants all match: any one will do
            out["anyOf"] = out.pop("oneOf")
        return out

    out: dict[str, Any] = _rewrite_refs(_map(copy.deepcopy(node), keep), "Required")
    return out


def _has_required(node: Any, defs: dict[str, Any], seen: frozenset[str] = frozenset()) -> bool:
    if isinstance(node, list):
        return any(_has_required(v, defs, seen) for v in node)
    if not isinstance(node, dict):
        return False
    if isinstance(node.get("required"), list) and node["required"]:
        return True
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[1]
        if name not in seen and _has_required(defs[name], defs, seen | {name}):
            return True
    subs = [node[k] for k in _STRUCTURE if k in node and k != "properties"]
    subs.extend((node.get("properties") or {}).values())
    return any(_has_required(sub, defs, seen) for sub in subs)


def _map(node: Any, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """Applies `fn` to every schema object bottom-up, through the structural keywords only (so property
    *names* such as a field called `required` are never mistaken for keywords)."""
    if isinstance(node, list):
        return [_map(v, fn) for v in node]
    if not isinstance(node, dict):
        return node
    out = dict(node)
    for key in _STRUCTURE:
        if key not in out:
            continue
        if key == "properties":
            out[key] = {name: _map(sub, fn) for name, sub in out[key].items()}
        else:
            out[key] = _map(out[key], fn)
    return fn(out)
