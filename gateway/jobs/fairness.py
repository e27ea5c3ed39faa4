"""Which slices one claim takes: the fairness rule every job store applies the same way.

A store reads its candidates (slices given back or whose lease expired, and the oldest jobs
of each tenant with pages not yet in a slice), the slices running per tenant and the pages
waiting; :func:`plan_claims` then picks, in memory, what the claim takes: the tenant with the
fewest slices running goes first, then its oldest job, then page order, and a job's uncut
pages are cut into a slice of the size its caller picks. The store applies the plan in the
same transaction it read the candidates in, so SQLite and PostgreSQL share one rule.

Usage::

    taken = plan_claims(units, running, waiting, count=4, size=size)
    for t in taken:   # t.fresh: a new slice to insert, else an existing slice to lease
        ...
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# the size of the next slice: (the job's pages, the job's pages not yet in a slice, the pages
# waiting over every job (uncut, or in a slice not leased), slices leased so far in this claim)
SliceSize = Callable[[int, int, int, int], int]


@dataclass(frozen=True)
class Taken:
    """One slice of a claim: an existing slice leased again, or a new one cut (``fresh``)."""

    job_id: str
    first: int
    count: int
    attempts: int
    failed: list[str]
    fresh: bool


def unit_order(unit: dict[str, Any]) -> tuple[float, str, int]:
    """The order slices are leased in within a tenant: the oldest job first, page order."""
    return unit["created"], unit["job_id"], unit["first"]


def _drop(queues: dict[str | None, list[dict[str, Any]]], tenant: str | None) -> None:
    """Take a tenant's next unit off its queue, and the tenant off when it has no more."""
    queues[tenant].pop()
    if not queues[tenant]:
        del queues[tenant]


def plan_claims(
    units: list[dict[str, Any]],
    running: dict[str | None, int],
    waiting: int,
    count: int,
    size: SliceSize | None,
) -> list[Taken]:
    """Up to ``count`` slices out of ``units``: existing slices (``cut`` None; ``count``,
    ``attempts``, ``failed`` as stored) and uncut jobs (``cut``, ``npages``), each with
    ``job_id``, ``first``, ``tenant`` and ``created``. ``running``: slices leased now per
    tenant (updated in place); ``size`` None cuts every page left as one slice."""
    queues: dict[str | None, list[dict[str, Any]]] = {}
    for unit in sorted(units, key=unit_order):
        queues.setdefault(unit["tenant"], []).append(dict(unit))
    for queue in queues.values():
        queue.reverse()  # the oldest last: taken with pop()
    taken: list[Taken] = []
    while queues and len(taken) < count:
        # among the tenants with the fewest running, the one whose next unit is oldest
        tenant = min(queues, key=lambda t: (running.get(t, 0), unit_order(queues[t][-1])))
        unit = queues[tenant][-1]
        if unit["cut"] is None:
            _drop(queues, tenant)
            pages = unit["count"]
            taken.append(
                Taken(unit["job_id"], unit["first"], pages, unit["attempts"], unit["failed"], False)
            )
        else:
            first, left = unit["cut"], unit["npages"] - unit["cut"]
            pages = (
                left
                if size is None
                else max(1, min(left, size(unit["npages"], left, waiting, len(taken))))
            )
            unit["cut"] = unit["first"] = first + pages
            if unit["cut"] >= unit["npages"]:
                _drop(queues, tenant)
            taken.append(Taken(unit["job_id"], first, pages, 0, [], True))
        waiting -= pages
        running[tenant] = running.get(tenant, 0) + 1
    return taken


def cut_after(taken: list[Taken]) -> dict[str, int]:
    """Each job's new ``cut`` after a claim: the end of its last fresh slice."""
    cut: dict[str, int] = {}
    for t in taken:
        if t.fresh:
            cut[t.job_id] = max(cut.get(t.job_id, 0), t.first + t.count)
    return cut
