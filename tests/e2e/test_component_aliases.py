"""A stack deployed before the fleet became a component replaces nothing (issue 22 part 4).

Up to BASE, `Fleet` and `HostImages` were plain classes: the Docker providers, the images, the
stack's reference to itself and every card and gateway sat at the stack's root. Now they are
children of the `Fleet` component, and their URNs changed with their parent: without aliases
the engine would delete and create every one of them (and, a provider's URN changing, every
container on it). Here the real engine runs BASE's program on a small sim stack, then this
checkout's on the same state: the preview and the update may create the new components and
must otherwise do only what BASE's program does itself on a second update (every resource
`same` but the recycler's container, whose disabled healthcheck's zero timings Docker filled
from the image's: an update in place each time). Two more steps are allowed: the stack's
reference to itself is a read, not a managed resource (the engine takes no aliases for reads),
read again on every update anyway; its old entry is `discard`ed, which only forgets it from
the state. And that recycler is replaced once, its healthcheck's timings now given
(components/recycler.py `NO_HEALTHCHECK`); after that a preview plans nothing.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.e2e.gateway_view import upstream_states
from tests.e2e.pulumi_stack import REPO, Step
from tests.e2e.sim_stack import sim_stack, tokens

pytestmark = pytest.mark.docker

BASE = "b7e57f9"
"""The last main revision before the fleet was a component (after the keeper's handover, which
by itself replaces the gateway's and keeper's containers once, by handover: new arguments)."""
PROGRAM = ("Pulumi.yaml", "__main__.py", "components", "config", "gateway")
"""The program and what it imports (the old `components.render` reads `gateway.settings`)."""
STACK_REFERENCE = "pulumi:pulumi:StackReference"
RECYCLE = json.dumps({"maxDocuments": 100000})
NEW_COMPONENTS = {"paddleocr-fleet:index:Fleet", "paddleocr-fleet:fleet:HostImages"}
CONTAINER = "docker:index/container:Container"
RECYCLER_REPLACED = {
    (op, CONTAINER, "local-recycler") for op in ("replace", "create-replacement", "delete-replaced")
}
"""BASE's recycler, its healthcheck's timings left at zero, is replaced once."""
COMMAND = "command:local:Command"
GROUP_STEPS = {
    ("create", COMMAND, "local-card-0-vllm-0-in-service"),
    ("update", COMMAND, "local-card-0-in-service"),
}
"""Rolling by vLLM group: each group's in-service step is new, and the card's own step, retired,
is updated in place to a no-op (its old `delete`, a drain of the whole card, never runs)."""
READY_CHANGED = {
    ("update", COMMAND, name) for name in ("local-gateway-ready", "local-gateway-keeper-ready")
}
"""The gateway's and the keeper's readiness waits, changed since BASE (they pass on a serving
file in the `serving` state alone), run again in place."""


def base_program() -> bytes:
    """BASE's program as a tar archive (fails in CI, skips elsewhere, when git or the revision
    is missing: a shallow clone)."""
    done = subprocess.run(
        ["git", "-C", str(REPO), "archive", BASE, *PROGRAM],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        reason = f"`git archive {BASE}` failed: {done.stderr.decode()[:300]}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return done.stdout


def swap_program(project: Path, archive: bytes | None, keep: Path) -> None:
    """Put BASE's program (`archive`) in `project`, keeping this checkout's in `keep`; with
    None, put back the one kept."""
    for name in PROGRAM:
        target = project / name
        if archive is not None:
            shutil.move(target, keep / name)
        elif target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
    if archive is None:
        for name in PROGRAM:
            shutil.move(keep / name, project / name)
        return
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(project, filter="data")
    # the harness points the project at the test's virtualenv
    shutil.copy2(keep / "Pulumi.yaml", project / "Pulumi.yaml")


def ops(steps: list[Step]) -> Counter[str]:
    return Counter(step.op for step in steps)


def not_same(steps: list[Step]) -> set[tuple[str, str, str]]:
    """(op, type, name) of every step that is neither `same`, nor a read (a refresh's or the
    stack reference's), nor the creation of one of the new components, nor the stack
    reference's old entry forgotten. By type and name: a re-parented resource's URN differs."""
    return {
        (step.op, step.type, step.name)
        for step in steps
        if step.op not in {"same", "refresh", "read"}
        and not (step.op == "create" and step.type in NEW_COMPONENTS)
        and not (step.op == "discard" and step.type == STACK_REFERENCE)
    }


def shown(found: set[tuple[str, str, str]]) -> str:
    return "\n".join(" ".join(step) for step in sorted(found))


def test_a_stack_of_the_previous_main_replaces_nothing(docker_engine, tmp_path):
    archive = base_program()
    admin = "aliases-admin-" + os.urandom(8).hex()
    secrets = tokens("aliases-user-" + os.urandom(8).hex(), admin)
    # the gateway with its keeper, and the recyclers' token and container: every kind of child
    # but the balancer and Prometheus (tests/components/test_stack.py checks their aliases)
    with sim_stack("aliases", 26000, secrets, paddlexPerVllm="1", recycle=RECYCLE) as fleet:
        project = fleet.stack.project
        swap_program(project, archive, tmp_path)
        first = fleet.stack.up()
        assert ops(first)["create"] >= 10, ops(first)
        assert not any(step.type in NEW_COMPONENTS for step in first)  # BASE's tree indeed
        # What BASE's program itself does on its next update (the recycler container's
        # healthcheck, read back with the image's timings, shows as an update every time)
        base = not_same(fleet.stack.preview())
        print("BASE again:", shown(base) or "nothing")
        assert {op for op, _, _ in base} <= {"update"}, shown(base)
        swap_program(project, None, tmp_path)

        preview = fleet.stack.preview()
        print("preview:", dict(ops(preview)))
        expected = base | RECYCLER_REPLACED | READY_CHANGED | GROUP_STEPS
        assert not not_same(preview) - expected, shown(not_same(preview) - expected)
        assert ops(preview)["same"] >= 10, ops(preview)
        update = fleet.stack.up()
        print("update:", dict(ops(update)))
        assert not not_same(update) - expected, shown(not_same(update) - expected)
        upstreams = httpx.get(
            f"{fleet.url}/upstreams", headers={"Authorization": f"Bearer {admin}"}, timeout=10
        )
        assert "drained" not in upstream_states(upstreams.json()).values(), upstreams.text
        again = not_same(fleet.stack.preview())
        assert not again, shown(again)  # the recycler's update too is gone for good
        created = {(s.op, s.type, s.name) for s in update if s.op == "create"}
        assert {kind for _, kind, _ in created - GROUP_STEPS} == NEW_COMPONENTS

        types = {r["type"]: r.get("parent", "") for r in fleet.stack.state()}
        assert types["pulumi:providers:docker"].endswith("::fleet")  # re-parented, not replaced
        assert types[STACK_REFERENCE].endswith("::fleet")
