"""bench.cpucap: a process capped at a share of a core, in a real CPU cgroup (root)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bench.cpucap import CpuCapError, CpuCaps, cgroup_root
from bench.procstat import tree_cpu_s


def _caps() -> CpuCaps:
    try:
        return CpuCaps(prefix="paddleocr-test")
    except (CpuCapError, OSError) as exc:
        pytest.skip(f"no CPU cgroup here: {exc}")


def _cpu_over(pid: int, seconds: float) -> float:
    start, t0 = tree_cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (tree_cpu_s(pid) - start) / (time.monotonic() - t0)


def test_a_capped_busy_loop_gets_its_share_and_is_released_after():
    caps = _caps()
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with caps:
            group = caps.cap(loop.pid, 0.2)
            assert str(loop.pid) in (group / "cgroup.procs").read_text().split()
            capped = _cpu_over(loop.pid, 1.5)
        assert not group.exists()
        root, _ = cgroup_root()
        assert str(loop.pid) in (root / "cgroup.procs").read_text().split()
        assert capped < 0.45, capped  # 0.2 of a core, with room for the clock ticks' grain
        assert capped > 0.05, capped
    finally:
        loop.kill()
        loop.wait()


@pytest.mark.parametrize("cores", [0, -1, 1000])
def test_a_share_outside_the_machine_is_refused(cores):
    caps = _caps()
    with caps, pytest.raises(ValueError, match="cores"):
        caps.cap(1, cores)


def test_a_process_that_is_gone_is_refused_and_its_group_removed():
    caps = _caps()
    caps.check()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with caps, pytest.raises(CpuCapError, match=str(gone.pid)):
        caps.cap(gone.pid, 0.5)
    root, _ = cgroup_root()
    assert not list(root.glob("paddleocr-test-*"))
