"""CPU time and memory of a whole process tree (psutil), so the figure holds on a busy machine.

A process tree's CPU is the sum, over the root and every live descendant, of its user and
system time plus (``reaped``, the default) that of its children already waited for: a worker
that exits during a run therefore still counts (its time moves into its parent's children's
times when the parent reaps it). Descendants are looked up at every reading, so children
started after the first one (``--workers``, on-demand PDF readers) count too.

Usage::

    meter = TreeMeter(gateway_pid)      # reads the tree's CPU now
    ...                                 # the load runs
    cpu_s = meter.read()                # CPU seconds the tree used since

``machine_busy()`` is the whole machine's busy and total CPU seconds, for telling how loaded
the machine was meanwhile; ``CpuMeter`` puts both together for several named processes.
"""

from __future__ import annotations

import contextlib
import os
import time

import psutil

_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


def tree(root: int) -> list[psutil.Process]:
    """``root`` and its live descendants (empty if ``root`` is gone)."""
    try:
        proc = psutil.Process(root)
        return [proc, *proc.children(recursive=True)]
    except _GONE:
        return []


def tree_times(root: int, reaped: bool = True) -> tuple[float, float]:
    """CPU seconds used so far by ``root`` and its live descendants (with ``reaped``, and the
    children they waited for), and the part of it spent in the kernel (system time)."""
    cpu = kernel = 0.0
    for proc in tree(root):
        try:
            t = proc.cpu_times()
        except _GONE:
            continue
        own_sys = t.system + (t.children_system if reaped else 0.0)
        cpu += t.user + own_sys + (t.children_user if reaped else 0.0)
        kernel += own_sys
    return cpu, kernel


def tree_cpu_s(root: int, reaped: bool = True) -> float:
    """:func:`tree_times`'s CPU seconds."""
    return tree_times(root, reaped)[0]


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of ``pid`` alone (no children), 0 if it is gone."""
    try:
        t = psutil.Process(pid).cpu_times()
    except _GONE:
        return 0.0
    return t.user + t.system


def rss_bytes(root: int) -> int:
    """Resident memory of a process and its live descendants."""
    total = 0
    for proc in tree(root):
        with contextlib.suppress(*_GONE):
            total += proc.memory_info().rss
    return total


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot (idle and iowait are not busy)."""
    t = psutil.cpu_times()
    total = t.user + t.nice + t.system + t.idle + t.iowait + t.irq + t.softirq + t.steal
    return total - t.idle - t.iowait, total


def busy_cores(start: tuple[float, float], end: tuple[float, float]) -> float:
    """Busy cores of the machine between two :func:`machine_busy` readings (2.0: two cores)."""
    d_total = end[1] - start[1]
    if d_total <= 0:
        return 0.0
    return (end[0] - start[0]) / d_total * (os.cpu_count() or 1)


class TreeMeter:
    """CPU seconds a process tree uses from its creation on; ``read()`` may be called repeatedly."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.start = tree_cpu_s(root)

    def read(self) -> float:
        return tree_cpu_s(self.root) - self.start


class MachineMeter:
    """Busy cores of the whole machine over a window (2.0 = two cores busy)."""

    def __init__(self) -> None:
        self.start = machine_busy()

    def read(self) -> float:
        return busy_cores(self.start, machine_busy())


class CpuMeter:
    """CPU use (in cores, 1.0 = one core busy) of named processes over a window, plus
    ``other``: what the rest of the machine used meanwhile (someone else's tests, builds).

    Live user and system time only (no reaped children's); the tree of each process but this
    one, the load generator, whose children (fleet, gateway) are measured apart."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.tree = {k: p != os.getpid() for k, p in pids.items()}
        self.t0 = time.monotonic()
        self.c0 = {k: self._cpu(k) for k in pids}
        self.s0 = machine_busy()

    def _cpu(self, name: str) -> float:
        pid = self.pids[name]
        return tree_cpu_s(pid, reaped=False) if self.tree[name] else cpu_s(pid)

    def read(self) -> dict[str, float]:
        dt = max(1e-6, time.monotonic() - self.t0)
        out = {k: round((self._cpu(k) - self.c0[k]) / dt, 3) for k in self.pids}
        now = machine_busy()
        if now[1] > self.s0[1]:
            out["other"] = round(max(0.0, busy_cores(self.s0, now) - sum(out.values())), 3)
        return out
