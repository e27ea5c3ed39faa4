"""The arguments of `vllm serve MODEL_PATH [flags]` as the vLLM simulator accepts them.

Exactly the flags that paddleocr-fleet's vLLM launch command uses (see docs/architecture.md);
anything else is a :class:`UsageError`, so a typo in the rendered launch command fails against
the simulator just as it would against the real vLLM. Like vLLM's own parser, a flag may be
spelt with `_` or `-` (`--additional_config` and `--additional-config` are the same flag) and
take its value as `--flag value` or `--flag=value`.

Usage::

    args = parse_serve(["/models/PaddleOCR-VL", "--port", "8118"])
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ACCEPTED_FLAGS = (
    "--served-model-name",
    "--host",
    "--port",
    "--max-num-batched-tokens",
    "--max-model-len",
    "--max-num-seqs",
    "--trust-remote-code",
    "--no-enable-prefix-caching",
    "--mm-processor-cache-gb",
    "--gpu-memory-utilization",
    "--compilation-config",
    "--additional-config",
)


class UsageError(Exception):
    """A command line the real vLLM would refuse too."""


@dataclass(frozen=True)
class ServeArgs:
    """The validated `vllm serve` arguments."""

    model: str
    served_model_name: str
    host: str
    port: int
    max_num_batched_tokens: int | None
    max_model_len: int
    max_num_seqs: int | None
    trust_remote_code: bool
    enable_prefix_caching: bool
    mm_processor_cache_gb: float | None
    gpu_memory_utilization: float
    compilation_config: dict[str, Any] | None
    additional_config: dict[str, Any] | None


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"must be > 0, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 < value < 65536:
        raise ValueError(f"not a TCP port: {value}")
    return value


def _memory_fraction(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"must be in (0, 1], got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError(f"must be >= 0, got {value}")
    return value


def json_object(text: str) -> dict[str, Any]:
    """`text` as a JSON object, or ValueError saying why not."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg}): {text!r}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object, got {text!r}")
    return value


_CONVERTERS = {
    "--port": _port,
    "--max-num-batched-tokens": _positive_int,
    "--max-model-len": _positive_int,
    "--max-num-seqs": _positive_int,
    "--mm-processor-cache-gb": _non_negative_float,
    "--gpu-memory-utilization": _memory_fraction,
    "--compilation-config": json_object,
    "--additional-config": json_object,
}
_SWITCHES = ("--trust-remote-code", "--no-enable-prefix-caching")


def normalise_flag(token: str) -> str:
    """`--additional_config=x` -> `--additional-config=x` (vLLM treats `_` and `-` alike)."""
    if not token.startswith("--"):
        return token
    name, sep, value = token.partition("=")
    return name.replace("_", "-") + sep + value


def _split_flags(tokens: Sequence[str]) -> tuple[str | None, dict[str, str | bool]]:
    """Walk the tokens after `serve`: one positional model path, then known flags only."""
    model: str | None = None
    flags: dict[str, str | bool] = {}
    unknown: list[str] = []
    extra: list[str] = []
    items = [normalise_flag(t) for t in tokens]
    i = 0
    while i < len(items):
        token = items[i]
        i += 1
        if not token.startswith("-"):
            if model is not None:
                extra.append(token)
            else:
                model = token
            continue
        name, has_value, inline = token.partition("=")
        if name not in ACCEPTED_FLAGS:
            unknown.append(name)
            continue
        if name in flags:
            raise UsageError(f"flag given twice: {name}")
        if name in _SWITCHES:
            if has_value:
                raise UsageError(f"{name} takes no value")
            flags[name] = True
        elif has_value:
            flags[name] = inline
        elif i < len(items) and not items[i].startswith("--"):
            flags[name] = tokens[i]
            i += 1
        else:
            raise UsageError(f"{name} needs a value")
    if unknown:
        raise UsageError(
            "unrecognized arguments: "
            + " ".join(unknown)
            + " (the vLLM simulator accepts only: "
            + " ".join(ACCEPTED_FLAGS)
            + ")"
        )
    if extra:
        raise UsageError(f"unexpected extra arguments: {extra}")
    return model, flags


def parse_serve(tokens: Sequence[str]) -> ServeArgs:
    """Validate the arguments after `vllm serve`; raise `UsageError` on anything wrong."""
    model, raw = _split_flags(tokens)
    if not model:
        raise UsageError("the model path (first argument of `vllm serve`) is required")
    values: dict[str, Any] = {}
    for name, text in raw.items():
        if name in _CONVERTERS:
            try:
                values[name] = _CONVERTERS[name](str(text))
            except ValueError as exc:
                raise UsageError(f"argument {name}: invalid value {text!r}: {exc}") from exc
        else:
            values[name] = text
    return ServeArgs(
        model=model,
        served_model_name=str(values.get("--served-model-name", model)),
        host=str(values.get("--host", "0.0.0.0")),
        port=values.get("--port", 8000),
        max_num_batched_tokens=values.get("--max-num-batched-tokens"),
        max_model_len=values.get("--max-model-len", 16384),
        max_num_seqs=values.get("--max-num-seqs"),
        trust_remote_code=bool(values.get("--trust-remote-code", False)),
        enable_prefix_caching=not values.get("--no-enable-prefix-caching", False),
        mm_processor_cache_gb=values.get("--mm-processor-cache-gb"),
        gpu_memory_utilization=values.get("--gpu-memory-utilization", 0.9),
        compilation_config=values.get("--compilation-config"),
        additional_config=values.get("--additional-config"),
    )
