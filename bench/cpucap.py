"""Cap a process at a fraction of a core (a CPU cgroup of its own), to emulate a host whose
cores are the gateway's own on a machine that the load generator and the fleet share.

On 2 cores, wrk and the fleet need about 0.4 of them at the gateway's rates, so two workers
never get two cores and "2 workers against 1" measures the machine. Capping each worker at
``cores`` (say 0.8) leaves the others what they need: one worker then has 0.8 of a core and two
have 0.8 each, as on a host with two slower cores of the gateway's own.

Needs root and the CPU controller: cgroup v2 (``cpu.max``) where ``/sys/fs/cgroup`` is the
unified hierarchy, else cgroup v1 (``cpu.cfs_quota_us`` under ``/sys/fs/cgroup/cpu``).

Usage::

    with CpuCaps() as caps:
        caps.check()                  # CpuCapError now, before anything starts
        caps.cap(worker_pid, 0.8)     # its own group: 8 ms of CPU per 10 ms
        ...                           # measure
    # the processes are back in the root group, the groups removed
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

PERIOD_US = 10_000  # short, so that a throttled worker waits milliseconds, not 100 ms
MIN_CORES = 0.1  # the kernel's smallest quota is 1 ms per period


class CpuCapError(RuntimeError):
    """No CPU controller this process can use (not root, or no cgroup CPU controller)."""


def machine_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def cgroup_root() -> tuple[Path, int]:
    """The CPU controller's root folder and the cgroup version (2 or 1)."""
    unified = Path("/sys/fs/cgroup")
    controllers = unified / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        subtree = unified / "cgroup.subtree_control"
        if "cpu" not in subtree.read_text().split():
            try:
                subtree.write_text("+cpu")  # groups below the root get cpu.max
            except OSError as exc:
                raise CpuCapError(
                    f"cannot enable the cpu controller below the root: {exc}"
                ) from None
        return unified, 2
    v1 = unified / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1, 1
    raise CpuCapError("no cgroup CPU controller (no v2 cpu.max, no v1 cpu.cfs_quota_us)")


class CpuCaps:
    """CPU groups made by this run, each holding one capped process; removed on exit."""

    def __init__(self, prefix: str = "paddleocr-bench") -> None:
        self.root, self.version = cgroup_root()
        self.prefix = prefix
        self.groups: list[Path] = []

    def check(self) -> None:
        """Make and remove one group: CpuCapError if this process may not."""
        probe = self.root / f"{self.prefix}-{os.getpid()}-probe"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as exc:
            raise CpuCapError(f"cannot make a CPU group in {self.root} (root?): {exc}") from None

    def cap(self, pid: int, cores: float) -> Path:
        """Move ``pid`` (all its threads) into a new group allowed ``cores`` of CPU time."""
        if not MIN_CORES <= cores <= machine_cores():
            raise ValueError(
                f"cores: {cores}; from {MIN_CORES} to this machine's {machine_cores()}"
            )
        group = self.root / f"{self.prefix}-{os.getpid()}-{pid}"
        try:
            group.mkdir()
        except OSError as exc:
            raise CpuCapError(f"cannot make a CPU group in {self.root} (root?): {exc}") from None
        self.groups.append(group)
        quota = int(cores * PERIOD_US)
        try:
            if self.version == 2:
                (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            else:
                (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (group / "cpu.cfs_quota_us").write_text(str(quota))
            (group / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            raise CpuCapError(f"cannot cap process {pid} in {group}: {exc}") from None
        return group

    def close(self) -> None:
        """Every capped process still alive back to the root group; the groups removed (a
        group that cannot be is named on stderr)."""
        for group in self.groups:
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (self.root / "cgroup.procs").write_text(pid)
            try:
                group.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                print(f"cpucap: {group} left behind: {exc}", file=sys.stderr)
        self.groups.clear()

    def __enter__(self) -> CpuCaps:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
