"""A small sim fleet under the real Pulumi engine, for the end-to-end tests of one module each.

    with sim_stack("rolling", ports=18000, secrets=TOKENS, cards="2") as fleet:
        fleet.stack.up()
        fleet.set(maxNumBatchedTokens="8192")

Each module picks its own block of ports (`ports` + 25 for the vLLM, + 120 for PaddleX, + 101 and
+ 102 for the gateway and its keeper) and its own gateway container name, so modules never touch
each other's containers; containers of an interrupted earlier run of the same module are removed
first, and everything the stack created is destroyed at the end (a failed destroy is a failure).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from bench.rollout.load import CapacitySampler, ClientLoad, summarize
from components.plan import FleetPlan, build_plan
from components.settings import load_settings
from tests.e2e.pulumi_stack import PulumiStack, Step
from tests.e2e.test_fleet_on_docker import docker, labelled_containers, temp_model_dir


class SimStack:
    """The stack, its name and the config it was last given (and so its plan)."""

    def __init__(self, stack: PulumiStack, config: dict[str, str], gateway_name: str):
        self.stack, self.config, self.gateway_name = stack, dict(config), gateway_name

    @property
    def name(self) -> str:
        return self.stack.name

    @property
    def label(self) -> str:
        """The label every container of this stack carries."""
        return f"paddleocr-fleet.stack=paddleocr-fleet/{self.name}"

    @property
    def plan(self) -> FleetPlan:
        return build_plan(load_settings(self.config))

    @property
    def url(self) -> str:
        return self.plan.entry_url

    def set(self, **values: str) -> None:
        self.config.update(values)
        self.stack.set_config(values)

    def remove(self, key: str) -> None:
        self.config.pop(key)
        self.stack.remove_config(key)


def sim_config(ports: int, gateway_name: str, **overrides: str | None) -> dict[str, str]:
    """One sim card (one vLLM, two PaddleX), the prebuilt gateway image, short waits; an
    override of None leaves that key out."""
    config = {
        "accelerator": "sim",
        "cards": "1",
        "vllmPerCard": "1",
        "paddlexPerVllm": "2",
        "vllmBasePort": str(ports + 25),
        "paddlexBasePort": str(ports + 120),
        "gatewayPort": str(ports + 101),
        "keeperPort": str(ports + 102),
        "gatewayContainerName": gateway_name,
        "gatewayImage": "paddleocr-fleet/gateway:latest",
        "gatewayJobsDir": tempfile.mkdtemp(prefix="paddleocr-fleet-jobs-"),
        "vllmReadyTimeout": "180",
        "paddlexReadyTimeout": "180",
        "readyPollInterval": "1",
        **overrides,
    }
    return {key: value for key, value in config.items() if value is not None}


@contextlib.contextmanager
def sim_stack(
    module: str,
    ports: int,
    secrets: Mapping[str, str] | None = None,
    plugins: str | None = None,
    **overrides: str | None,
) -> Iterator[SimStack]:
    """A stack named after `module` (and a random suffix) with `sim_config` and `overrides`, on
    the plugin set `plugins` (tests/pulumi_sets.py; None: the default set)."""
    gateway_name = f"paddleocr-fleet-gateway-{module}"
    block = re.compile(rf"-{ports // 1000}[0-9]{{3}}-sim-")
    for name in docker("ps", "-a", "--format", "{{.Names}}").stdout.split():
        if name.startswith(gateway_name) or block.search(name):
            docker("rm", "-f", name)  # leftovers of an interrupted run
    model_dir = temp_model_dir()
    config = sim_config(ports, gateway_name, modelDir=model_dir, **overrides)
    root = Path(tempfile.mkdtemp(prefix=f"paddleocr-fleet-{module}-"))
    name = f"{module}-{os.urandom(3).hex()}"
    stack = PulumiStack.create(root, name, config, secrets, plugins=plugins)
    fleet = SimStack(stack, config, gateway_name)
    try:
        yield fleet
    finally:
        left, why = {}, ""
        if labelled_containers(fleet.label):
            args = ["destroy", "--stack", fleet.name, "--yes", "--non-interactive"]
            done = stack.run(args, check=False)
            left, why = labelled_containers(fleet.label), done.stdout[-3000:] + done.stderr[-2000:]
            for name in left:  # a failed destroy leaves nothing running behind the test
                docker("rm", "-f", name)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(model_dir, ignore_errors=True)
        shutil.rmtree(config["gatewayJobsDir"], ignore_errors=True)
        assert not left, f"destroy left {sorted(left)}:\n{why}"


def up_under_load(
    fleet: SimStack, user: Mapping[str, str], admin: Mapping[str, str], **config: str
) -> tuple[dict[str, Any], list[Step]]:
    """`config` set and `pulumi up` run while 8 clients send documents through the gateway
    (2 s of load before and after): what the clients saw during the update
    (`bench.rollout.load.summarize`) and the update's steps."""
    with (
        ClientLoad(fleet.url, clients=8, headers=dict(user)) as load,
        CapacitySampler(fleet.url, dict(admin)) as capacity,
    ):
        time.sleep(2)
        began = load.now()
        fleet.set(**config)
        steps = fleet.stack.up()
        ended = load.now()
        time.sleep(2)
    return summarize(load.results, capacity.samples, (began, ended)), steps


def first(steps: list[Step], name: str, op: str) -> Step:
    """The first step of resource `name` with `op`."""
    return next(s for s in steps if s.name == name and s.op == op)


def tokens(user: str, admin: str) -> dict[str, str]:
    """The stack secrets of one user token and one admin token."""
    return {"tokens": json.dumps({"team-a": user}), "adminTokens": json.dumps({"ops": admin})}
