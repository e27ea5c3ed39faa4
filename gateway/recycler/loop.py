"""The recycler's loop: observe, decide (:mod:`.policy`), recycle one instance, repeat.

Each check reads the gateway's ``/metrics`` (documents served, :mod:`.counters`) and
``/upstreams`` (states), and each instance's container (start time, memory) from the host's
engine. A recycle: drain the instance at the gateway (waiting up to the drain timeout for what
it holds), restart its container (the idle entrypoint starts the kept service script again:
components/render.paddlex_idle_argv), wait for its ``/health``, undrain. The undrain runs even
when a step failed (the gateway's health checks keep a broken instance out), except when
another instance of the same card was drained meanwhile: someone else (a rollout, `fleetctl
recycle --card`) is working on that card, and their undrain, or the drain's own ``ttl_s``,
takes it back. Each recycle is one log line ``recycled {json}``: instance, reason, each step's
seconds, outcome.

    Recycler(config, Engine(config.docker_socket), GatewayAdmin(...)).run()
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from gateway.recycler.config import InstanceConfig, RecyclerConfig
from gateway.recycler.counters import ServedCounter, attempt_samples
from gateway.recycler.engine import ContainerState, Engine, EngineError
from gateway.recycler.policy import MB, Decision, Limits, Observation, choose

log = logging.getLogger("gateway.recycler")

DRAINED = ("draining", "drained")
TTL_MARGIN_S = 120.0


class GatewayCallError(Exception):
    """The gateway refused or failed a call of the recycler's (the message says which and why);
    not :class:`gateway.errors.GatewayError`, which the gateway answers its own callers with."""


class GatewayAdmin:
    """The gateway's admin routes the recycler calls."""

    def __init__(self, url: str, token: str | None, timeout_s: float = 30.0) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=url.rstrip("/"), headers=headers, timeout=timeout_s, trust_env=False
        )

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            r = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise GatewayCallError(f"{path}: the gateway does not answer: {exc}") from None
        if r.status_code != 200:
            raise GatewayCallError(f"{path}: HTTP {r.status_code}: {r.text[:300]}")
        return r

    def metrics(self) -> str:
        return self._call("GET", "/metrics").text

    def states(self) -> dict[str, str]:
        return {u["url"]: u["state"] for u in self._call("GET", "/upstreams").json()["upstreams"]}

    def drain(self, url: str, wait_s: float, ttl_s: float) -> dict[str, Any]:
        body = {"upstreams": [url], "wait_s": wait_s, "ttl_s": ttl_s}
        answer: dict[str, Any] = self._call(
            "POST", "/admin/drain", json=body, timeout=wait_s + 30
        ).json()
        return answer

    def undrain(self, url: str) -> None:
        self._call("POST", "/admin/undrain", json={"upstreams": [url]})


def healthy(url: str, timeout_s: float = 5.0) -> bool:
    try:
        return httpx.get(url, timeout=timeout_s, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


class Recycler:
    def __init__(
        self,
        config: RecyclerConfig,
        engine: Engine,
        gateway: GatewayAdmin,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config, self.engine, self.gateway, self.clock = config, engine, gateway, clock
        self.limits = Limits(config.max_memory_mb, config.max_documents, config.min_uptime_s)
        self.counter = ServedCounter()
        self._seen: dict[str, ContainerState] = {}
        self._waiting = ""
        self.recycling: InstanceConfig | None = None
        """The instance between its drain and its undrain (undrained on a stop)."""

    def run(self) -> None:
        log.info(
            "recycler of host %s: %d PaddleX instance(s), limits: memory %s MB, documents %s, "
            "min uptime %gs, every %gs",
            self.config.host,
            len(self.config.instances),
            self.config.max_memory_mb,
            self.config.max_documents,
            self.config.min_uptime_s,
            self.config.check_interval_s,
        )
        while True:
            started = time.monotonic()
            self.check()
            time.sleep(max(0.0, self.config.check_interval_s - (time.monotonic() - started)))

    def check(self) -> dict[str, Any] | None:
        """One round: observe, decide, maybe recycle (its record), None when nothing was."""
        try:
            self.counter.observe(attempt_samples(self.gateway.metrics()))
            states = self.gateway.states()
        except GatewayCallError as exc:
            log.warning("check skipped: %s", exc)
            return None
        observations = [self.observe(inst, states) for inst in self.config.instances]
        decision = choose(observations, self.limits, states)
        self._say_waiting(decision)
        if decision.instance is None:
            return None
        inst = next(i for i in self.config.instances if i.url == decision.instance.url)
        return self.recycle(inst, decision.instance, decision.reason)

    def _say_waiting(self, decision: Decision) -> None:
        if decision.reason != self._waiting and decision.instance is None and decision.reason:
            log.info("%s", decision.reason)
        self._waiting = "" if decision.instance else decision.reason

    def observe(self, inst: InstanceConfig, states: dict[str, str]) -> Observation:
        state = states.get(inst.url, "unknown")
        try:
            container = self.engine.inspect(inst.container)
            memory = self.engine.memory(inst.container) if container.running else None
        except EngineError as exc:
            log.warning("%s", exc)
            return Observation(inst.url, inst.container, inst.card, state, False, None, None, 0)
        before = self._seen.get(inst.url)
        if before is not None and (before.id, before.started_at) != (
            container.id,
            container.started_at,
        ):
            self.counter.reset(inst.url)  # restarted or replaced by someone else
        self._seen[inst.url] = container
        uptime = None
        if container.started_at is not None:
            uptime = (self.clock() - container.started_at).total_seconds()
        return Observation(
            inst.url,
            inst.container,
            inst.card,
            state,
            container.running,
            uptime,
            memory,
            self.counter.served(inst.url),
        )

    def recycle(self, inst: InstanceConfig, obs: Observation, reason: str) -> dict[str, Any]:
        cfg = self.config
        ttl = cfg.drain_timeout_s + cfg.stop_grace_s + cfg.ready_timeout_s + TTL_MARGIN_S
        record: dict[str, Any] = {
            "host": cfg.host,
            "instance": inst.url,
            "container": inst.container,
            "card": inst.card,
            "reason": reason,
            "memory_mb": None if obs.memory_bytes is None else round(obs.memory_bytes / MB),
            "documents": obs.served,
        }
        log.info("recycling %s: %s; draining ...", inst.container, reason)
        begun = time.monotonic()
        undrain = True
        try:
            self.recycling = inst
            answer = self.gateway.drain(inst.url, cfg.drain_timeout_s, ttl)
            record["drain_s"] = round(time.monotonic() - begun, 2)
            record["in_flight_at_restart"] = int(answer.get("in_flight", 0))
            step = time.monotonic()
            self.engine.restart(inst.container, cfg.stop_grace_s)
            self.counter.reset(inst.url)
            self._seen[inst.url] = self.engine.inspect(inst.container)
            record["restart_s"] = round(time.monotonic() - step, 2)
            step = time.monotonic()
            ready = self._wait_ready(inst)
            record["ready_s"] = round(time.monotonic() - step, 2)
            record["ok"] = ready
            if not ready:
                record["error"] = f"no /health within {cfg.ready_timeout_s:g}s"
            undrain = not self._card_taken(inst)
        except (GatewayCallError, EngineError) as exc:
            record["ok"] = False
            record["error"] = str(exc)
        finally:
            if undrain:
                try:
                    self.gateway.undrain(inst.url)
                except GatewayCallError as exc:
                    record["undrain_error"] = str(exc)
            else:
                record["left_drained"] = "another instance of the card was drained meanwhile"
            self.recycling = None
        record["total_s"] = round(time.monotonic() - begun, 2)
        log.log(logging.INFO if record["ok"] else logging.ERROR, "recycled %s", json.dumps(record))
        return record

    def _wait_ready(self, inst: InstanceConfig) -> bool:
        deadline = time.monotonic() + self.config.ready_timeout_s
        while time.monotonic() < deadline:
            if healthy(inst.health_url):
                return True
            time.sleep(0.5)
        return False

    def _card_taken(self, inst: InstanceConfig) -> bool:
        """Whether another instance of `inst`'s card is drained now (someone else's drain)."""
        mates = [i.url for i in self.config.instances if i.card == inst.card and i.url != inst.url]
        if not mates:
            return False
        states = self.gateway.states()
        return any(states.get(url) in DRAINED for url in mates)

    def stop(self) -> None:
        """On SIGTERM: take back the instance this recycler holds drained, if any."""
        if self.recycling is not None:
            try:
                self.gateway.undrain(self.recycling.url)
            except GatewayCallError as exc:
                log.warning("undrain on stop failed: %s", exc)
