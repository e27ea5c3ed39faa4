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
"""The keys the bridge's Check filled with a default, in the inputs and in each nested block."""
META_KEY = "__meta"
"""The bridge's Terraform metadata in the state: a JSON string of the timeouts (ns, under the
plugin SDK's timeouts key) and the resource's `schema_version`."""
RAW_STATE_DELTA_KEY = "__pulumi_raw_state_delta"
"""The bridge's recipe for the Terraform raw state from the Pulumi state (renames, MaxItems=1
blocks): only valid for the state it was written with."""
TIMEOUTS_KEY = "e2bfb730-ecaa-11e6-8f88-34363bc7c4c0"
DEFAULT_TIMEOUT_NS = 20 * 60 * 10**9
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


def reserved(key: str) -> bool:
    """A key of the bridge's own (`__defaults`, `__meta`, ...), not a property."""
    return key.startswith("__")


def bridge_meta(schema_version: str | None, create_timeout_s: float = 0) -> str:
    """The `__meta` the bridge writes on Create: every timeout the 20 min default, `create` the
    step's custom timeout when given, and the Terraform schema version (if not 0)."""
    create = int(create_timeout_s * 10**9) if create_timeout_s else DEFAULT_TIMEOUT_NS
    meta: dict[str, Any] = {
        TIMEOUTS_KEY: {"create": create, "delete": DEFAULT_TIMEOUT_NS, "update": DEFAULT_TIMEOUT_NS}
    }
    if schema_version:
        meta["schema_version"] = schema_version
    return json.dumps(meta, separators=(",", ":"))


def kept_meta(state: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a new state keeps of the old one's reserved keys: `__meta` (its timeouts and schema
    version); not the raw state delta, which described the old state only."""
    old = (state or {}).get(META_KEY)
    return {META_KEY: old} if isinstance(old, str) and old else {}


def without_reserved(value: Any) -> Any:
    """`value` without the bridge's keys (`__defaults` of the inputs' blocks, ...) at any
    depth: a state holds properties only."""
    if isinstance(value, Mapping):
        return {k: without_reserved(v) for k, v in value.items() if not reserved(k)}
    if isinstance(value, list):
        return [without_reserved(v) for v in value]
    return value


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
        if reserved(key):
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
                for sub in sorted(k for k in set(block) - set(prop.fields) if not reserved(k)):
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
    (falsy defaults stay unset, pulumi-terraform-bridge#2618); `__defaults` lists the keys so
    filled, at the top and in each block (`[]` where none was). An old value that was itself a
    default is kept."""
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
    filled = {k: v for k, v in block.items() if not reserved(k)}
    added = []
    for name, sub in prop.fields.items():
        if name not in filled and sub.has_default and not is_empty(sub.default):
            filled[name] = sub.default
            added.append(name)
    filled[DEFAULTS_KEY] = sorted(added)
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
    state: dict[str, Any] = without_reserved(inputs)
    for name, prop in schema.items():
        if prop.computed and name not in state:
            state[name] = UNKNOWN
    for name in outputs:
        state.setdefault(name, UNKNOWN)
    return state
