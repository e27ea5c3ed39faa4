"""Documents served per PaddleX instance since its last restart, from the gateway's counters.

The gateway counts its attempts per upstream and outcome in ``/metrics``
(``gateway_upstream_rq_total{upstream,outcome}``; with several worker processes one series per
``worker``, each its own counter). Those counters start again at zero whenever a gateway
process does (a restart, a handover to a new container, a worker restarted), and they span the
instance's restarts. So the recycler counts increases itself, the way Prometheus' ``increase()``
does: per series, the growth since the last scrape, or the whole value after a drop (a reset).
A series first seen after the first scrape started at zero since then. What happened before
the recycler's first scrape is unknown: its counts start at zero (recycling later, never
sooner). Attempts that never reached the instance (``connect_error``) are not counted.

    counter = ServedCounter()
    counter.observe(attempt_samples(metrics_text))   # every check
    counter.served("http://10.0.0.2:9120")           # since its last restart, as far as seen
    counter.reset("http://10.0.0.2:9120")            # it restarted
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

ATTEMPTS = "gateway_upstream_rq_total"
NOT_REACHED = frozenset({"connect_error"})

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
"""(upstream URL, the series' other labels)."""


def attempt_samples(metrics_text: str) -> dict[SeriesKey, float]:
    """The gateway's attempt counters that reached an instance, per series."""
    out: dict[SeriesKey, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name != ATTEMPTS or sample.labels.get("outcome") in NOT_REACHED:
                continue
            labels = dict(sample.labels)
            upstream = labels.pop("upstream", "")
            out[(upstream, tuple(sorted(labels.items())))] = sample.value
    return out


class ServedCounter:
    """Attempts per upstream URL since each one's last :meth:`reset` (see module doc)."""

    def __init__(self) -> None:
        self._last: dict[SeriesKey, float] | None = None
        self._served: dict[str, float] = {}

    def observe(self, samples: Mapping[SeriesKey, float]) -> None:
        """Add what each series grew by since the last observation (the first is a baseline)."""
        if self._last is not None:
            for key, value in samples.items():
                before = self._last.get(key, 0.0)
                grown = value - before if value >= before else value
                self._served[key[0]] = self._served.get(key[0], 0.0) + grown
        self._last = dict(samples)

    def served(self, url: str) -> int:
        return int(self._served.get(url, 0.0))

    def reset(self, url: str) -> None:
        self._served.pop(url, None)
