"""The command that removes the images a stack built, run for real on the Docker engine."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile

import pytest

from components.render import image_cleanup_command

pytestmark = pytest.mark.docker
PREFIX = f"pdtest-cleanup-{os.getpid()}"


def docker(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["docker", *args], input=stdin, capture_output=True, check=False)


def new_image(tag: str, content: str) -> str:
    """A tiny image of its own (one file), tagged `tag`; returns its id."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = content.encode()
        info = tarfile.TarInfo("marker")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert docker("import", "-", tag, stdin=buffer.getvalue()).returncode == 0
    return docker("image", "inspect", "-f", "{{.Id}}", tag).stdout.decode().strip()


def exists(ref: str) -> bool:
    return docker("image", "inspect", ref).returncode == 0


def cleanup(tag: str, image_id: str) -> None:
    subprocess.run(["sh", "-c", image_cleanup_command(tag, image_id)], check=True)


@pytest.fixture
def images(docker_engine):
    yield
    listed = docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.decode().split()
    for ref in (r for r in listed if r.startswith(PREFIX)):
        docker("image", "rm", "-f", ref)


def test_on_destroy_the_stacks_own_image_goes(images):
    image = new_image(f"{PREFIX}-gw:stack", "one")
    cleanup(f"{PREFIX}-gw:stack", image)
    assert not exists(f"{PREFIX}-gw:stack") and not exists(image)


def test_an_image_another_tag_names_only_loses_the_stacks_tag(images):
    image = new_image(f"{PREFIX}-gw:stack", "shared")
    assert docker("tag", image, f"{PREFIX}-other:keep").returncode == 0
    cleanup(f"{PREFIX}-gw:stack", image)
    assert not exists(f"{PREFIX}-gw:stack")
    assert exists(f"{PREFIX}-other:keep") and exists(image)


def test_after_a_rebuild_the_predecessor_goes_and_the_new_image_stays(images):
    old = new_image(f"{PREFIX}-gw:stack", "v1")
    new = new_image(f"{PREFIX}-gw:stack", "v2")  # the tag moves to the rebuilt image
    cleanup(f"{PREFIX}-gw:stack", old)
    assert not exists(old)
    assert exists(new) and exists(f"{PREFIX}-gw:stack")
