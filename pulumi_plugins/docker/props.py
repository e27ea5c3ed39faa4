"""Property schemas and the Terraform-style check/diff rules of the bridged resources.

A resource's schema is a mapping of Pulumi property names to `Prop`s, each carrying what the
Terraform schema says: the kind of value, `ForceNew`, `Computed`, a `Default`. From those,
`apply_defaults` fills the checked inputs as the bridge does (only non-falsy defaults, listed
under `__defaults`) and `diff` compares the new inputs with the old *state* as the plugin SDK
does (`ForceNew` changes replace, others update; unset Optional+Computed values keep the state)::

    schema = {"image": Prop("str", force_new=True, required=True)}
    result = diff(schema, olds={"image": "a"}, news={"image": "b"}, ignore=[])
    assert result.replaces == ["image"]
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pulumi_plugins.rpc import UNKNOWN, contains_unknown

Kind = Literal["str", "int", "bool", "list", "set", "map", "objset", "obj"]
DEFAULTS_KEY = "__defaults"
_NO_DEFAULT = object()


@dataclass(frozen=True)
class Prop:
    kind: Kind
    force_new: bool = False
    computed: bool = False
    required: bool = False
    default: Any = _NO_DEFAULT
    fields: Mapping[str, Prop] = field(default_factory=dict)
    """The block's properties: `objset` is a TypeSet of blocks, `obj` a MaxItems=1 block."""
    validate: Callable[[Any], str | None] | None = None
    """A reason the (known) value is invalid, or None."""
    suppress_unset: bool = False
    """An unset or empty new value is no change (the schema's DiffSuppressFunc)."""

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT


Schema = Mapping[str, Prop]


@dataclass
class Failure:
    property: str
    reason: str


@dataclass
class DiffResult:
    replaces: list[str] = field(default_factory=list)
    updates: list[str] = field(default_factory=list)
    stables: list[str] = field(default_factory=list)
    detailed: dict[str, str] = field(default_factory=dict)
    """Top-level property -> ADD/UPDATE/DELETE, with `_REPLACE` where it forces a replacement."""

    @property
    def changed(self) -> bool:
        return bool(self.detailed)


def is_empty(value: Any) -> bool:
    """Terraform's zero values: an unset attribute and one read back as zero do not differ."""
    return value is None or value is False or value == 0 or value in ("", [], {})


def _zero(prop: Prop) -> Any:
    return {"str": "", "int": 0, "bool": False, "map": {}}.get(prop.kind, [])


def canonical(prop: Prop, value: Any) -> Any:
    """A comparable form: sets sorted, blocks with every field present (zero if unset)."""
    if value is None:
        return _zero(prop)
    if prop.kind == "set":
        return sorted(json.dumps(v, sort_keys=True) for v in value)
    if prop.kind == "objset":
        return sorted(json.dumps(_canonical_block(prop, v), sort_keys=True) for v in value)
    if prop.kind == "obj":
        return _canonical_block(prop, value)
    if prop.kind == "map":
        return {k: str(v) for k, v in value.items()}
    return value


def _canonical_block(prop: Prop, block: Mapping[str, Any]) -> dict[str, Any]:
    return {name: canonical(sub, block.get(name)) for name, sub in prop.fields.items()}


def equal(prop: Prop, old: Any, new: Any) -> bool:
    return canonical(prop, old) == canonical(prop, new)


def unsupported(schema: Schema, news: Mapping[str, Any], what: str) -> list[Failure]:
    """Failures for properties of the real schema that this provider does not implement."""
    failures = []
    for key in sorted(news):
        if key.startswith("__"):
            continue
        if key not in schema:
            failures.append(Failure(key, f"{what}: '{key}' is not implemented by this provider"))
            continue
        prop, value = schema[key], news[key]
        if prop.kind in ("objset", "obj") and isinstance(value, list | dict):
            blocks = value if isinstance(value, list) else [value]
            for i, block in enumerate(blocks):
                if not isinstance(block, Mapping):
                    continue
                for sub in sorted(set(block) - set(prop.fields)):
                    where = f"{key}[{i}].{sub}" if prop.kind == "objset" else f"{key}.{sub}"
                    failures.append(
                        Failure(where, f"{what}: '{where}' is not implemented by this provider")
                    )
    return failures


def validate(schema: Schema, news: Mapping[str, Any]) -> list[Failure]:
    """Required properties and the schema's validators (unknown values are not judged)."""
    failures: list[Failure] = []
    _validate_level(schema, news, "", failures)
    return failures


def _validate_level(
    schema: Schema, values: Mapping[str, Any], prefix: str, out: list[Failure]
) -> None:
    for name, prop in schema.items():
        path = f"{prefix}{name}"
        value = values.get(name)
        if value is None:
            if prop.required:
                out.append(Failure(path, f"Missing required property '{path}'"))
            continue
        if contains_unknown(value):
            continue
        if prop.validate is not None and (reason := prop.validate(value)):
            out.append(Failure(path, f"{path}: {reason}"))
        if prop.kind == "objset" and isinstance(value, list):
            for i, block in enumerate(value):
                if isinstance(block, Mapping):
                    _validate_level(prop.fields, block, f"{path}[{i}].", out)
        elif prop.kind == "obj" and isinstance(value, Mapping):
            _validate_level(prop.fields, value, f"{path}.", out)


def apply_defaults(
    schema: Schema, news: dict[str, Any], olds: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The inputs with the schema's non-falsy defaults filled in, as the bridge's Check does
    (falsy defaults stay unset, pulumi-terraform-bridge#2618); `__defaults` lists the top-level
    keys so filled. An old value that was itself a default is kept."""
    out = dict(news)
    old_defaults = set((olds or {}).get(DEFAULTS_KEY) or [])
    filled = []
    for name, prop in schema.items():
        if name in out:
            if prop.kind == "objset" and isinstance(out[name], list):
                out[name] = [_block_defaults(prop, b) for b in out[name]]
            elif prop.kind == "obj" and isinstance(out[name], Mapping):
                out[name] = _block_defaults(prop, out[name])
            continue
        if not prop.has_default or is_empty(prop.default):
            continue
        if olds and name in olds and name in old_defaults:
            out[name] = olds[name]
        else:
            out[name] = prop.default
        filled.append(name)
    out[DEFAULTS_KEY] = sorted(filled)
    return out


def _block_defaults(prop: Prop, block: Any) -> Any:
    if not isinstance(block, Mapping):
        return block
    filled = dict(block)
    for name, sub in prop.fields.items():
        if name not in filled and sub.has_default and not is_empty(sub.default):
            filled[name] = sub.default
    return filled


def ignored(key: str, ignore: list[str]) -> bool:
    """Whether an ignoreChanges path covers the whole top-level property `key` (nested paths
    are applied by the engine to the new inputs before Check)."""
    return any(path == key or path in (f"{key}[*]", f'["{key}"]') for path in ignore)


def diff(
    schema: Schema, olds: Mapping[str, Any], news: Mapping[str, Any], ignore: list[str]
) -> DiffResult:
    """The plugin SDK's decision, property by property, of new inputs against the old state."""
    result = DiffResult()
    for name, prop in schema.items():
        if ignored(name, ignore):
            continue
        old, new = olds.get(name), news.get(name)
        kind = _change(prop, old, new)
        if kind is None:
            if prop.force_new:
                result.stables.append(name)
            continue
        if prop.force_new:
            result.replaces.append(name)
            kind += "_REPLACE"
        else:
            result.updates.append(name)
        result.detailed[name] = kind
    return result


def _change(prop: Prop, old: Any, new: Any) -> str | None:
    if new is not None and contains_unknown(new):
        return "UPDATE" if old is not None else "ADD"
    if new is None or (prop.suppress_unset and new == ""):
        if prop.computed or prop.suppress_unset or is_empty(old):
            return None
        return "DELETE"
    if equal(prop, old, new):
        return None
    return "ADD" if old is None else "UPDATE"


def unknowns_for(schema: Schema, inputs: Mapping[str, Any], outputs: list[str]) -> dict[str, Any]:
    """The preview's state: the inputs, with Computed properties not given and the output-only
    properties unknown."""
    state = {k: v for k, v in inputs.items() if not k.startswith("__")}
    for name, prop in schema.items():
        if prop.computed and name not in state:
            state[name] = UNKNOWN
    for name in outputs:
        state.setdefault(name, UNKNOWN)
    return state
