"""Faults the vLLM simulator injects on request: a bad release to test a canary gate against.

``VLLM_SIM_FAULTS`` holds a JSON object (the stack's ``simVllmFaults``, rendered by
components/render/vllm.py); every key is optional::

    {"garble": 0.25, "empty": 0.1, "fail": 0.05, "slowShare": 0.5, "slowSeconds": 2, "seed": 7}

Each chat completion gets at most one of the content faults, ``garble`` (its text replaced,
character by character, by random letters and digits: far from the good answer), ``empty``
(an empty text) or ``fail`` (HTTP 500 with vLLM's JSON error body), with those shares, so
their sum may not exceed 1; independently of that, ``slowShare`` of the completions take
``slowSeconds`` longer. Without the variable (or with ``{}``) every answer is the good one.

The choice is deterministic: completion number *n* (0, 1, ... in arrival order, per process)
draws its fault from SHA-256 of ``seed`` and *n*, so a client that sends its requests one at a
time sees the same faults on every run, and a test can count the shares.

Usage::

    faults = parse_faults('{"garble": 0.25, "seed": 1}')
    injector = FaultInjector(faults)
    decision = injector.next()           # Decision(number=0, kind=None, delay=0.0)
    if decision.kind == "garble":
        text = garble(text, faults.seed, decision.number)
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import string
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import count
from typing import Literal

from .args import json_object

FAULTS_ENV = "VLLM_SIM_FAULTS"
"""The environment variable the simulator reads its faults from."""

FaultKind = Literal["garble", "empty", "fail"]
CONTENT_KINDS: tuple[FaultKind, ...] = ("garble", "empty", "fail")
"""The faults that change an answer; a completion gets at most one of them."""

_SHARE_KEYS = ("garble", "empty", "fail", "slowShare")
_KEYS = (*_SHARE_KEYS, "slowSeconds", "seed")
_GARBLE_ALPHABET = string.ascii_letters + string.digits


@dataclass(frozen=True)
class Faults:
    """Shares (0 to 1) of the completions that get each fault, and the seed of the choice.

    >>> Faults(garble=0.25).active
    True
    >>> Faults().active
    False
    """

    garble: float = 0.0
    empty: float = 0.0
    fail: float = 0.0
    slow_share: float = 0.0
    slow_seconds: float = 0.0
    seed: int = 0

    @property
    def active(self) -> bool:
        """Whether any completion can differ from the good answer at all."""
        content = self.garble + self.empty + self.fail
        return content > 0 or (self.slow_share > 0 and self.slow_seconds > 0)

    def describe(self) -> str:
        """One line for the log: ``garble 25%, slow 50% +2s (seed 7)``."""
        parts = [f"{k} {getattr(self, k):.0%}" for k in CONTENT_KINDS if getattr(self, k)]
        if self.slow_share and self.slow_seconds:
            parts.append(f"slow {self.slow_share:.0%} +{self.slow_seconds:g}s")
        return (", ".join(parts) or "none") + f" (seed {self.seed})"


def _number(key: str, value: object, *, low: float, high: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key}: must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < low or (high is not None and number > high):
        bounds = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
        raise ValueError(f"{key}: must be {bounds}, got {value!r}")
    return number


def parse_faults(text: str) -> Faults:
    """Validate the JSON text of ``VLLM_SIM_FAULTS``; raise ``ValueError`` naming the problem.

    >>> parse_faults('{"fail": 0.05, "slowShare": 1, "slowSeconds": 0.5}').slow_seconds
    0.5
    >>> parse_faults('{"garble": 0.7, "empty": 0.4}')
    Traceback (most recent call last):
    ...
    ValueError: garble + empty + fail: must be <= 1, got 1.1
    """
    raw = json_object(text)
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed: must be an integer, got {seed!r}")
    shares = {key: _number(key, raw.get(key, 0), low=0, high=1) for key in _SHARE_KEYS}
    faults = Faults(
        garble=shares["garble"],
        empty=shares["empty"],
        fail=shares["fail"],
        slow_share=shares["slowShare"],
        slow_seconds=_number("slowSeconds", raw.get("slowSeconds", 0), low=0, high=None),
        seed=seed,
    )
    total = faults.garble + faults.empty + faults.fail
    if total > 1 + 1e-9:
        raise ValueError(f"garble + empty + fail: must be <= 1, got {total:g}")
    return faults


def faults_from_env(environ: Mapping[str, str] | None = None) -> Faults:
    """The faults ``VLLM_SIM_FAULTS`` asks for (none when unset or blank).

    >>> faults_from_env({"VLLM_SIM_FAULTS": '{"empty": 1}'}).empty
    1.0
    """
    text = (os.environ if environ is None else environ).get(FAULTS_ENV, "").strip()
    if not text:
        return Faults()
    try:
        return parse_faults(text)
    except ValueError as exc:
        raise ValueError(f"{FAULTS_ENV}: {exc}") from None


def _uniform(seed: int, number: int, purpose: str) -> float:
    """A stable draw in [0, 1) for completion ``number``."""
    digest = hashlib.sha256(f"{seed}:{number}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class Decision:
    """What happens to one completion: its number, its content fault, its added delay."""

    number: int
    kind: FaultKind | None
    delay: float


class FaultInjector:
    """Numbers the completions in arrival order and decides each one's fault.

    >>> injector = FaultInjector(Faults(fail=1.0))
    >>> injector.next()
    Decision(number=0, kind='fail', delay=0.0)
    """

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self._numbers = count()

    def next(self) -> Decision:
        """The decision for the next completion."""
        number = next(self._numbers)
        faults = self.faults
        kind: FaultKind | None = None
        if faults.garble or faults.empty or faults.fail:
            draw = _uniform(faults.seed, number, "content")
            bound = 0.0
            for candidate in CONTENT_KINDS:
                bound += getattr(faults, candidate)
                if draw < bound:
                    kind = candidate
                    break
        delay = 0.0
        if faults.slow_share and _uniform(faults.seed, number, "slow") < faults.slow_share:
            delay = faults.slow_seconds
        return Decision(number, kind, delay)


def garble(text: str, seed: int, number: int) -> str:
    """``text`` with every character but whitespace replaced by a different random letter or
    digit (stable for a seed and completion number): the same length and line structure, but
    a normalised edit distance to the original close to 1.

    >>> garble("sim-vllm:9031 model=x", 0, 3) == garble("sim-vllm:9031 model=x", 0, 3)
    True
    >>> garble("ab cd", 0, 0)[2]
    ' '
    """
    rng = random.Random(f"garble:{seed}:{number}")
    out: list[str] = []
    for char in text:
        if char.isspace():
            out.append(char)
            continue
        replacement = rng.choice(_GARBLE_ALPHABET)
        while replacement == char:
            replacement = rng.choice(_GARBLE_ALPHABET)
        out.append(replacement)
    return "".join(out)
