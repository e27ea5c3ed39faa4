"""CPU time of a whole process tree, read from /proc, so the figure holds on a busy machine.

A process tree's CPU is the sum, over the root and every live descendant, of
``utime + stime + cutime + cstime`` from ``/proc/<pid>/stat``: a live process's own time plus
that of its children already waited for. A worker that exits during a run therefore still counts
(its time moves into its parent's ``cutime`` when the parent reaps it). Descendants are found by
their parent pid, scanning every ``/proc/<pid>/stat``, so children started after the first
reading (``--workers``, on-demand PDF readers) count too.

Usage::

    meter = TreeMeter(gateway_pid)      # reads the tree's CPU now
    ...                                 # the load runs
    cpu_s = meter.read()                # CPU seconds the tree used since

``machine_busy()`` is the whole machine's busy and total jiffies (``/proc/stat``), for telling
how loaded the machine was meanwhile.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStat:
    """What this module reads of one ``/proc/<pid>/stat``."""

    pid: int
    ppid: int
    cpu_ticks: int  # utime + stime + cutime + cstime
    sys_ticks: int = 0  # stime + cstime: the part spent in the kernel


def parse_stat(text: str) -> ProcStat:
    """One ``/proc/<pid>/stat`` line. The command name (2nd field) may hold spaces and ``)``."""
    head, _, rest = text.rpartition(")")
    pid = int(head.split("(", 1)[0])
    f = rest.split()  # f[0] is field 3 (state); utime is field 14
    user, sys, c_user, c_sys = (int(x) for x in f[11:15])
    return ProcStat(pid, int(f[1]), user + sys + c_user + c_sys, sys + c_sys)


def read_stat(pid: int) -> ProcStat | None:
    """The stat of ``pid``, or None if it is gone (or not readable)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return parse_stat(fh.read())
    except (OSError, ValueError, IndexError):
        return None


def all_stats() -> dict[int, ProcStat]:
    """Every process's stat, by pid."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = read_stat(int(name))
            if st is not None:
                out[st.pid] = st
    return out


def tree(root: int, stats: dict[int, ProcStat] | None = None) -> list[ProcStat]:
    """``root`` and its live descendants (empty if ``root`` is gone)."""
    stats = all_stats() if stats is None else stats
    if root not in stats:
        return []
    children: dict[int, list[int]] = {}
    for st in stats.values():
        children.setdefault(st.ppid, []).append(st.pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(stats[pid])
        todo.extend(children.get(pid, ()))
    return out


def tree_cpu_s(root: int) -> float:
    """CPU seconds used so far by ``root``, its live descendants and the children they reaped."""
    return tree_times(root)[0]


def tree_times(root: int) -> tuple[float, float]:
    """:func:`tree_cpu_s`, and the part of it spent in the kernel (system time)."""
    stats = tree(root)
    cpu = sum(st.cpu_ticks for st in stats)
    return cpu / TICKS_PER_S, sum(st.sys_ticks for st in stats) / TICKS_PER_S


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine since boot (the ``cpu`` line of /proc/stat)."""
    with open("/proc/stat") as fh:
        vals = [int(x) for x in fh.readline().split()[1:9]]
    idle = vals[3] + vals[4]  # idle + iowait
    return sum(vals) - idle, sum(vals)


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
        busy, total = machine_busy()
        d_total = total - self.start[1]
        if d_total <= 0:
            return 0.0
        return (busy - self.start[0]) / d_total * (os.cpu_count() or 1)
