"""The benchmark's sim stack on the real Pulumi engine, and the changes it goes through.

    with BenchFleet.create(Shape(cards=2, vllm_load_s=60), ports=21000) as fleet:
        fleet.apply("a", all_at_once=False)   # seconds the change took

A stack of its own (a file backend in a temporary folder, the harness of the end-to-end tests,
`tests/e2e/pulumi_stack.PulumiStack`), its own ports and container names, and random tokens.
The changes flip between two values, so a change can be made again and again:

- **a** a vLLM flag (`maxNumBatchedTokens` 8192 / 16384): every card's vLLM and PaddleX replaced;
- **b** a PaddleX pipeline setting (`pipelineBatchSize` 64 / 128): every card's PaddleX replaced;
- **c** a new gateway image (`gatewayImage`, two tags of paddleocr-fleet/gateway:latest that differ
  by a label): the gateway handed over to a new container;
- **d** one card recycled (`fleetctl recycle --card 0`): its PaddleX restarted, drained first.

"All at once" is the same `pulumi up` with `maxUnavailableCards` = the number of cards (every
card in one wave); it applies to a and b, which replace cards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.pulumi_stack import PulumiStack, changed

REPO = Path(__file__).resolve().parents[2]
GATEWAY_IMAGE = "paddleocr-fleet/gateway:latest"
BENCH_TAGS = ("paddleocr-fleet/gateway:rollout-bench-a", "paddleocr-fleet/gateway:rollout-bench-b")
FLIPS = {
    "a": ("maxNumBatchedTokens", ("8192", "16384")),
    "b": ("pipelineBatchSize", ("64", "128")),
    "c": ("gatewayImage", BENCH_TAGS),
}
SCENARIOS = {
    "a": "vLLM flag (`maxNumBatchedTokens`)",
    "b": "PaddleX setting (`pipelineBatchSize`)",
    "c": "gateway image (`gatewayImage`)",
    "d": "recycle one card (`fleetctl recycle`)",
}
ALL_AT_ONCE = ("a", "b")
"""The changes that replace cards: the ones with an all-at-once counterpart."""


@dataclass(frozen=True)
class Shape:
    """What the stack deploys."""

    cards: int
    vllm_load_s: float = 60.0
    vllm_per_card: int = 1
    paddlex_per_vllm: int = 2

    @property
    def per_card(self) -> int:
        """PaddleX instances of a card (what the gateway dispatches to)."""
        return self.vllm_per_card * self.paddlex_per_vllm


def docker(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], input=stdin, capture_output=True, text=True, check=False
    )


def ensure_bench_images() -> None:
    """Two gateway images that differ only by a label (scenario c switches between them),
    rebuilt on each run so they follow paddleocr-fleet/gateway:latest."""
    for tag in BENCH_TAGS:
        dockerfile = f"FROM {GATEWAY_IMAGE}\nLABEL paddleocr-fleet.rollout-bench={tag}\n"
        done = docker("build", "-q", "-t", tag, "-", stdin=dockerfile)
        if done.returncode != 0:
            raise RuntimeError(f"docker build {tag}: {done.stderr.strip()[-500:]}")


class BenchFleet:
    """One stack, created and brought up by `create`, destroyed on exit."""

    def __init__(self, stack: PulumiStack, shape: Shape, port: int, root: Path, dirs: list[str]):
        self.stack, self.shape, self.port, self.root = stack, shape, port, root
        self.dirs = dirs
        """The host folders the stack mounts (its model and jobs folders), removed at the end."""
        self.values = {scenario: values[0] for scenario, (_, values) in FLIPS.items()}
        self.values["a"], self.values["b"] = "16384", "128"  # the defaults, as created
        self.user_token = stack.name + "-user-" + os.urandom(8).hex()
        self.admin_token = stack.name + "-admin-" + os.urandom(8).hex()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def user(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.user_token}"}

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}

    @classmethod
    def create(cls, shape: Shape, port: int, name: str | None = None) -> BenchFleet:
        """A stack on ports `port` (gateway), +1 (its keeper), +25.. (vLLM), +120.. (PaddleX)."""
        name = name or f"rollout-bench-{shape.cards}c-" + os.urandom(3).hex()
        remove_leftovers(port)
        ensure_bench_images()
        root = Path(tempfile.mkdtemp(prefix="paddleocr-fleet-rollout-bench-"))
        model_dir = tempfile.mkdtemp(prefix="paddleocr-fleet-model-")
        os.chmod(model_dir, 0o777)
        jobs_dir = tempfile.mkdtemp(prefix="paddleocr-fleet-jobs-")
        config = {
            "accelerator": "sim",
            "cards": str(shape.cards),
            "vllmPerCard": str(shape.vllm_per_card),
            "paddlexPerVllm": str(shape.paddlex_per_vllm),
            "modelDir": model_dir,
            "vllmBasePort": str(port + 25),
            "paddlexBasePort": str(port + 120),
            "gatewayPort": str(port),
            "gatewayContainerName": container_prefix(port),
            "keeperPort": str(port + 1),
            "gatewayImage": BENCH_TAGS[0],
            "gatewayJobsDir": jobs_dir,
            "simVllmLoadSeconds": f"{shape.vllm_load_s:g}",
            "maxUnavailableCards": "1",
            "drainTimeout": "120",
            "vllmReadyTimeout": str(int(shape.vllm_load_s) + 300),
            "paddlexReadyTimeout": "300",
            "readyPollInterval": "1",
        }
        stack = PulumiStack.create(root, name, config)
        fleet = cls(stack, shape, port, root, [model_dir, jobs_dir])
        stack.set_config(
            {
                "tokens": json.dumps({"bench": fleet.user_token}),
                "adminTokens": json.dumps({"ops": fleet.admin_token}),
            },
            secret=True,
        )
        try:
            stack.up()
        except BaseException:
            fleet.close()
            raise
        return fleet

    def __enter__(self) -> BenchFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        args = ["destroy", "--stack", self.stack.name, "--yes", "--non-interactive"]
        self.stack.run(args, check=False)
        remove_leftovers(self.port)
        for path in [self.root, *self.dirs]:
            shutil.rmtree(path, ignore_errors=True)

    def apply(self, scenario: str, all_at_once: bool = False) -> float:
        """Make change `scenario` (rolling, or all cards in one wave); seconds it took (the
        `pulumi up`, or the `fleetctl recycle`)."""
        if scenario == "d":
            if all_at_once:
                raise ValueError("recycling has no all-at-once form")
            return self.recycle(card=0)
        if scenario not in FLIPS:
            raise ValueError(f"no scenario {scenario!r} (one of {', '.join(SCENARIOS)})")
        if all_at_once and scenario not in ALL_AT_ONCE:
            raise ValueError(f"scenario {scenario} replaces no card: no all-at-once form")
        key, values = FLIPS[scenario]
        value = values[1] if self.values[scenario] == values[0] else values[0]
        width = self.shape.cards if all_at_once else 1
        self.stack.set_config({key: value, "maxUnavailableCards": str(width)})
        started = time.monotonic()
        steps = self.stack.up()
        took = time.monotonic() - started
        if not changed(steps):
            raise RuntimeError(f"{key} {self.values[scenario]} -> {value} changed nothing")
        self.values[scenario] = value
        return took

    def recycle(self, card: int) -> float:
        outputs = self.root / "outputs.json"
        outputs.write_text(json.dumps(self.stack.outputs()))
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "PADDLEOCR_FLEET_ADMIN_TOKEN": self.admin_token,
        }
        argv = [sys.executable, "-m", "fleetctl", "recycle", "--card", str(card),
                "--outputs", str(outputs)]  # fmt: skip
        started = time.monotonic()
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
        took = time.monotonic() - started
        if done.returncode != 0:
            raise RuntimeError(
                f"fleetctl recycle exited {done.returncode}: {done.stdout}{done.stderr}"
            )
        return took


def container_prefix(port: int) -> str:
    return f"paddleocr-fleet-gateway-rollout-bench-{port}"


def remove_leftovers(port: int) -> None:
    """The containers of an interrupted run on these ports (their names carry the ports)."""
    ports = "|".join(str(p) for p in range(port + 25, port + 220))
    pattern = re.compile(rf"^{re.escape(container_prefix(port))}|-({ports})-sim-")
    names = docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    for name in names:
        if pattern.search(name):
            docker("rm", "-f", name)
