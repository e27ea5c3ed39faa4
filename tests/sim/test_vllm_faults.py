"""The vLLM simulator's injected faults (`VLLM_SIM_FAULTS`): a bad release on the real HTTP API.

Requests go one at a time, so completion *n* is the *n*-th request and the shares are the same
on every run; the tolerances still allow any seed.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass

import httpx
import pytest

from sim.vllm.faults import FAULTS_ENV, FaultInjector, Faults, faults_from_env, garble, parse_faults
from sim.vllm.images import describe_image_url

from .helpers import (
    MODEL,
    VLLM_FLAGS,
    Processes,
    free_port,
    normalised_edit_distance,
    png_b64,
    wait_http_ok,
)
from .test_vllm_metrics import scrape

IMAGE_URL = "data:image/png;base64," + png_b64(60, 40, "page")


@dataclass(frozen=True)
class Answer:
    """One completion as the client saw it."""

    status: int
    text: str | None
    error: dict[str, object] | None
    seconds: float


def start(procs: Processes, faults: dict[str, object] | None) -> tuple[str, int]:
    """A loaded vLLM simulator with `faults` as its VLLM_SIM_FAULTS (unset when None)."""
    port = free_port()
    env = {} if faults is None else {FAULTS_ENV: json.dumps(faults)}
    proc = procs.vllm(port, env=env)
    wait_http_ok(f"http://127.0.0.1:{port}/health", timeout=20, proc=proc)
    return f"http://127.0.0.1:{port}", port


def request(i: int) -> dict[str, object]:
    """The i-th request: an image and a prompt of its own, as PaddleX sends them."""
    content = [
        {"type": "image_url", "image_url": {"url": IMAGE_URL}},
        {"type": "text", "text": f"OCR: page {i}"},
    ]
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "temperature": 0}


def good_text(port: int, i: int) -> str:
    """What the simulator answers the i-th request without faults (its format, spelt out)."""
    return (
        f'sim-vllm:{port} model={MODEL} prompt="OCR: page {i}" '
        f"image={describe_image_url(IMAGE_URL)}"
    )


def ask(url: str, count: int) -> list[Answer]:
    """`count` completions, one at a time."""
    answers = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(count):
            started = time.monotonic()
            response = client.post("/v1/chat/completions", json=request(i))
            seconds = time.monotonic() - started
            body = response.json()
            if response.status_code == 200:
                text = body["choices"][0]["message"]["content"]
                answers.append(Answer(200, text, None, seconds))
            else:
                answers.append(Answer(response.status_code, None, body.get("error"), seconds))
    return answers


def classify(answer: Answer, good: str) -> str:
    """good, garble, empty or fail: what the client can tell from the answer alone."""
    if answer.status != 200:
        return "fail"
    if answer.text == good:
        return "good"
    return "empty" if answer.text == "" else "garble"


def test_without_faults_every_answer_is_the_good_one(procs: Processes) -> None:
    settings: tuple[dict[str, object] | None, ...] = (None, {}, {"seed": 3, "slowShare": 0})
    for faults in settings:
        url, port = start(procs, faults)
        answers = ask(url, 40)
        assert [a.text for a in answers] == [good_text(port, i) for i in range(40)], faults
        counted = scrape(url)
        assert counted["vllm:request_success_total{finished_reason=stop}"] == 40
        assert all(counted[f"vllm_sim_injected_faults_total{{kind={k}}}"] == 0 for k in KINDS)


KINDS = ("garble", "empty", "fail", "slow")


def test_garble_share_and_distance(procs: Processes) -> None:
    url, port = start(procs, {"garble": 0.25, "seed": 1})
    answers = ask(url, 400)
    kinds = [classify(a, good_text(port, i)) for i, a in enumerate(answers)]
    counts = Counter(kinds)
    assert set(counts) == {"good", "garble"}
    share = counts["garble"] / 400
    assert 0.20 <= share <= 0.30, f"garbled {share:.1%} of 400, asked for 25%"
    distances = [
        normalised_edit_distance(a.text or "", good_text(port, i))
        for i, (a, kind) in enumerate(zip(answers, kinds, strict=True))
        if kind == "garble"
    ]
    assert min(distances) > 0.5, f"a garbled answer is too close to the good one: {distances}"
    # the same completion numbers, whatever the seed's draws: the client can predict them
    injector = FaultInjector(Faults(garble=0.25, seed=1))
    assert [injector.next().kind or "good" for _ in range(400)] == kinds
    assert scrape(url)["vllm_sim_injected_faults_total{kind=garble}"] == counts["garble"]
    print(f"garbled {share:.1%}, normalised edit distance {min(distances):.2f} at least")


def test_mixed_faults_shares_empty_answers_and_vllm_errors(procs: Processes) -> None:
    shares = {"garble": 0.2, "empty": 0.1, "fail": 0.1}
    url, port = start(procs, {**shares, "seed": 7})
    answers = ask(url, 400)
    kinds = [classify(a, good_text(port, i)) for i, a in enumerate(answers)]
    counts = Counter(kinds)
    for kind, share in shares.items():
        measured = counts[kind] / 400
        assert abs(measured - share) <= 0.05, f"{kind}: {measured:.1%} of 400, asked {share:.0%}"
    assert abs(counts["good"] / 400 - 0.6) <= 0.06
    for answer in answers:
        if answer.status != 200:
            assert answer.status == 500 and answer.error is not None
            assert answer.error["type"] == "InternalServerError" and answer.error["code"] == 500
            assert "simulated engine failure" in str(answer.error["message"])
    counted = scrape(url)
    for kind in shares:
        assert counted[f"vllm_sim_injected_faults_total{{kind={kind}}}"] == counts[kind]
    assert counted["vllm:request_success_total{finished_reason=stop}"] == 400 - counts["fail"]
    print({k: f"{v / 400:.1%}" for k, v in sorted(counts.items())})


def test_slow_share_adds_its_seconds(procs: Processes) -> None:
    slow_seconds = 0.4
    url, _ = start(procs, {"slowShare": 0.5, "slowSeconds": slow_seconds, "seed": 1})
    answers = ask(url, 30)
    assert all(a.status == 200 for a in answers)
    slow = [i for i, a in enumerate(answers) if a.seconds >= slow_seconds]
    fast = [a.seconds for a in answers if a.seconds < slow_seconds]
    assert 0.3 <= len(slow) / 30 <= 0.7, f"{len(slow)} of 30 slow, asked for half"
    injector = FaultInjector(Faults(slow_share=0.5, slow_seconds=slow_seconds, seed=1))
    assert slow == [i for i in range(30) if injector.next().delay]
    assert max(fast) < slow_seconds / 2, f"an answer not picked was slow too: {max(fast):.2f}s"
    assert scrape(url)["vllm_sim_injected_faults_total{kind=slow}"] == len(slow)
    print(f"slow {len(slow)} of 30, the others {max(fast) * 1000:.0f} ms at most")


def test_invalid_faults_stop_the_simulator_with_exit_2(procs: Processes) -> None:
    argv = [sys.executable, "-m", "sim.vllm", "serve", f"/data/{MODEL}", *VLLM_FLAGS]
    argv += ["--host", "127.0.0.1", "--port", str(free_port())]
    proc = procs.start(argv, {"VLLM_SIM_LOAD_SECONDS": "0", FAULTS_ENV: '{"garble": 1.5}'})
    assert proc.wait(timeout=30) == 2
    output = proc.stdout.read() if proc.stdout else ""
    assert f"{FAULTS_ENV}: garble: must be in [0, 1], got 1.5" in output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"garble": -0.1}', "garble: must be in [0, 1], got -0.1"),
        ('{"slowShare": 2}', "slowShare: must be in [0, 1], got 2"),
        ('{"slowSeconds": -1}', "slowSeconds: must be >= 0, got -1"),
        ('{"empty": "half"}', "empty: must be a number, got 'half'"),
        ('{"fail": true}', "fail: must be a number, got True"),
        ('{"garble": 0.5, "empty": 0.3, "fail": 0.3}', "garble + empty + fail: must be <= 1"),
        ('{"seed": 1.5}', "seed: must be an integer"),
        ('{"garbel": 0.5}', "unknown key 'garbel'"),
        ('{"slowSeconds": Infinity}', "slowSeconds: must be >= 0, got inf"),
        ("[0.5]", "must be a JSON object"),
        ("{garble: 1}", "not valid JSON"),
    ],
)
def test_invalid_faults_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_faults(text)
    assert message in str(info.value)


def test_unset_or_blank_means_no_faults() -> None:
    assert faults_from_env({}) == Faults() == faults_from_env({FAULTS_ENV: " "})
    assert not Faults(slow_share=1.0).active  # no seconds: nothing changes
    with pytest.raises(ValueError, match=f"^{FAULTS_ENV}: "):
        faults_from_env({FAULTS_ENV: "{"})


def test_the_choice_follows_the_shares_over_many_completions() -> None:
    faults = Faults(garble=0.3, empty=0.1, fail=0.05, slow_share=0.5, slow_seconds=2, seed=11)
    injector = FaultInjector(faults)
    decisions = [injector.next() for _ in range(20000)]
    kinds: Counter[str] = Counter(d.kind or "good" for d in decisions)
    for kind, share in (("garble", 0.3), ("empty", 0.1), ("fail", 0.05), ("good", 0.55)):
        assert abs(kinds[kind] / 20000 - share) < 0.015, (kind, kinds[kind])
    slow = sum(1 for d in decisions if d.delay == 2)
    assert abs(slow / 20000 - 0.5) < 0.015 and all(d.delay in (0, 2) for d in decisions)
    other_seed = FaultInjector(Faults(garble=0.3, seed=12))
    assert [d.kind == "garble" for d in decisions[:200]] != [
        other_seed.next().kind == "garble" for _ in range(200)
    ]


def test_garbled_text_is_far_from_any_text() -> None:
    """Whitespace stays: far from any text that is not mostly whitespace (no answer is)."""
    rng = random.Random(5)
    for number in range(200):
        length = rng.randint(1, 300)
        text = "".join(rng.choice("abc xyz|#$-:=\n0123") for _ in range(length))
        if sum(c.isspace() for c in text) > 0.4 * len(text):
            continue
        garbled = garble(text, 0, number)
        assert len(garbled) == len(text) and garbled == garble(text, 0, number)
        assert [c.isspace() for c in garbled] == [c.isspace() for c in text]
        assert normalised_edit_distance(garbled, text) > 0.5, (text, garbled)
