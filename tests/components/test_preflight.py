"""The preflight: containers that hold the plan's names and that the stack's state does not own.

The real `docker ps` path runs in tests/e2e/test_main_job.py; here the docker CLI on PATH is a
script that prints what `docker ps -a --no-trunc --format ...` prints.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from components.plan import build_plan
from components.preflight import (
    Existing,
    conflicts,
    main,
    owned_ids,
    parse_listing,
    pending_operations,
    planned_names,
    report,
)
from components.settings import load_settings
from components.stack_file import stack_config

DEMO = {"accelerator": "sim", "cards": "1"}


def _state(*ids: str) -> dict:
    resources = [{"type": "pulumi:pulumi:Stack", "urn": "urn:stack"}]
    resources += [{"type": "docker:index/container:Container", "id": i} for i in ids]
    return {"version": 3, "deployment": {"resources": resources}}


def test_planned_names_cover_every_container_of_the_plan():
    plan = build_plan(load_settings(DEMO))
    names = planned_names(plan)["local"]
    assert "vllm-sim-paddleocr-9025-sim-0" in names and "paddle-9170-sim-0" in names
    assert plan.gateway.container_name in names
    assert plan.gateway.keeper is not None and plan.gateway.keeper.container_name in names
    assert len(names) == 2 + 6 + 2 == len(set(names))


def test_owned_ids_read_the_containers_of_an_export_and_a_new_stack_owns_none():
    assert owned_ids(_state("a" * 64, "b" * 64)) == {"a" * 64, "b" * 64}
    assert owned_ids({"version": 3, "deployment": {}}) == set()
    assert owned_ids({}) == set()


def test_a_same_named_container_the_state_does_not_own_is_a_conflict():
    plan = build_plan(load_settings(DEMO))
    host = plan.hosts[0]
    existing = [
        Existing(
            "1" * 64, "vllm-sim-paddleocr-9025-sim-0", "paddleocr-fleet/demo"
        ),  # another checkout
        Existing("2" * 64, "paddle-9120-sim-0", ""),  # the replaced system's, same name
        Existing("3" * 64, "paddle-9130-sim-0", "paddleocr-fleet/demo"),  # this stack's own
        Existing("4" * 64, "unrelated", ""),
    ]
    found = conflicts(host, planned_names(plan)["local"], existing, owned={"3" * 64})
    assert [c.container.name for c in found] == [
        "vllm-sim-paddleocr-9025-sim-0",
        "paddle-9120-sim-0",
    ]
    text = report(found, "demo")
    assert (
        "vllm-sim-paddleocr-9025-sim-0 on host local (111111111111, labelled paddleocr-fleet/demo)"
        in text
    )
    assert "paddle-9120-sim-0 on host local (222222222222, no fleet label)" in text
    assert "docker rm -f vllm-sim-paddleocr-9025-sim-0 paddle-9120-sim-0" in text


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    """A `docker` on PATH that lists the containers written to its listing file."""
    listing = tmp_path / "listing.tsv"
    listing.write_text("")
    script = tmp_path / "bin" / "docker"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\ncat {listing}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Pulumi.demo.yaml").write_text(
        "config:\n  paddleocr-fleet:accelerator: sim\n  paddleocr-fleet:cards: '1'\n"
        # secrets as `pulumi config set --secret --path` writes them: only Pulumi decrypts them
        "  paddleocr-fleet:tokens:\n    demo:\n      secure: v1:YmFyYmF6\n"
        "  paddleocr-fleet:adminTokens:\n    ops:\n      secure: v1:Zm9vYmFy\n"
    )
    return listing


def test_main_passes_when_only_its_own_containers_hold_the_names(fake_docker, tmp_path, capsys):
    fake_docker.write_text(f"{'5' * 64}\tvllm-sim-paddleocr-9025-sim-0\tpaddleocr-fleet/demo\n")
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state("5" * 64)))
    assert main(["--stack", "demo", "--state", str(state)]) == 0
    assert capsys.readouterr().err == ""


def test_main_names_a_foreign_container_and_fails(fake_docker, tmp_path, capsys):
    fake_docker.write_text(f"{'6' * 64}\tvllm-sim-paddleocr-9035-sim-0\tpaddleocr-fleet/demo\n")
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state()))
    assert main(["--stack", "demo", "--state", str(state)]) == 1
    err = capsys.readouterr().err
    assert "1 container(s) already hold names that stack 'demo' gives its own" in err
    assert "docker rm -f vllm-sim-paddleocr-9035-sim-0" in err


def test_main_reports_a_config_error_by_its_key(fake_docker, tmp_path, capsys):
    (tmp_path / "Pulumi.demo.yaml").write_text("config:\n  paddleocr-fleet:cards: 'many'\n")
    state = tmp_path / "state.json"
    state.write_text("{}")
    assert main(["--stack", "demo", "--state", str(state)]) == 2
    assert "cards" in capsys.readouterr().err


def test_the_listing_reads_every_name_of_a_row_and_skips_what_is_not_a_row():
    listing = (
        f"{'7' * 64}\tpaddle-9120-sim-0,web/db\tpaddleocr-fleet/demo\n"  # a legacy link's alias
        f"{'8' * 64}\tplain\t\n"
        "\n"
        "garbage-without-tabs\n"
    )
    assert parse_listing(listing) == [
        Existing("7" * 64, "paddle-9120-sim-0", "paddleocr-fleet/demo"),
        Existing("8" * 64, "plain", ""),
    ]


def test_a_pending_update_is_named_beside_the_conflicts():
    plan = build_plan(load_settings(DEMO))
    found = conflicts(
        plan.hosts[0],
        planned_names(plan)["local"],
        [Existing("9" * 64, "paddle-9120-sim-0", "paddleocr-fleet/demo")],
        owned=set(),
    )
    state = {"deployment": {"pending_operations": [{"type": "creating"}]}}
    assert pending_operations(state) == 1 and pending_operations({}) == 0
    assert "1 pending operation(s) of an interrupted update" in report(found, "demo", 1)
    assert "pending" not in report(found, "demo", 0)


def test_a_secret_inside_a_host_keeps_the_host_and_its_shape(fake_docker, tmp_path, capsys):
    (tmp_path / "Pulumi.demo.yaml").write_text(
        "config:\n"
        "  paddleocr-fleet:hosts:\n"
        "    - name: npu-a\n"
        "      endpoint: unix:///var/run/docker.sock\n"
        "      accelerator: sim\n"
        "      cardIds: [0]\n"
        "      buildArgs:\n"
        "        PIP_INDEX_URL:\n"
        "          secure: v1:c2VjcmV0\n"
    )
    assert stack_config(tmp_path / "Pulumi.demo.yaml")["hosts"] == (
        '[{"name": "npu-a", "endpoint": "unix:///var/run/docker.sock", "accelerator": "sim", '
        '"cardIds": [0], '
        '"buildArgs": {"PIP_INDEX_URL": "[secret]"}}]'
    )
    fake_docker.write_text(f"{'a' * 64}\tvllm-sim-paddleocr-9025-sim-0\t\n")
    state = tmp_path / "state.json"
    state.write_text("{}")
    assert main(["--stack", "demo", "--state", str(state)]) == 1
    assert "vllm-sim-paddleocr-9025-sim-0 on host npu-a" in capsys.readouterr().err


def test_a_state_file_that_is_not_an_export_is_a_clear_error(fake_docker, tmp_path, capsys):
    state = tmp_path / "state.json"
    state.write_text("not json")
    assert main(["--stack", "demo", "--state", str(state)]) == 2
    assert "not a stack export" in capsys.readouterr().err
