"""Hot reload of the config file: mtime/size/hash polling plus SIGHUP.

A changed file is parsed; a valid one is handed to ``apply`` (an atomic, synchronous swap on the
event loop), an invalid one is refused with a log line and the old config stays. A file is
only parsed again when its content hash changes, so a broken file is reported once.

Usage::

    watcher = ConfigWatcher(path, apply=runtime.apply, interval=lambda: 1.0)
    watcher.start()            # poll task + SIGHUP handler (main thread only)
    watcher.reload_now("test") # force a read, returns True if a new config was applied
    await watcher.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
from collections.abc import Callable
from pathlib import Path

from gateway.config.settings import Settings, parse_settings_text
from gateway.errors import ConfigError

log = logging.getLogger("gateway.reload")


class ConfigWatcher:
    """Watch one config file and apply valid changes."""

    def __init__(
        self,
        path: str | Path,
        apply: Callable[[Settings], None],
        interval: Callable[[], float],
        on_result: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self._apply = apply
        self._interval = interval
        self._on_result = on_result or (lambda result: None)
        self._stat: tuple[int, int] | None = None
        self._hash: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._stat_and_hash()

    def _stat_and_hash(self) -> bytes | None:
        try:
            st = self.path.stat()
            data = self.path.read_bytes()
        except OSError:
            return None
        self._stat = (st.st_mtime_ns, st.st_size)
        self._hash = hashlib.sha256(data).hexdigest()
        return data

    def check(self) -> bool:
        """Poll once; apply the file if its content changed. Returns True if applied."""
        try:
            st = self.path.stat()
        except OSError as exc:
            if self._stat is not None:
                log.error(
                    "config reload refused: %s: %s; keeping the previous config", self.path, exc
                )
                self._stat = None
                self._on_result("failure")
            return False
        if (st.st_mtime_ns, st.st_size) == self._stat:
            return False
        return self.reload_now("file changed", only_if_changed=True)

    def reload_now(self, reason: str = "requested", *, only_if_changed: bool = False) -> bool:
        """Read, validate and apply the file now. Returns True if a new config was applied."""
        previous = self._hash
        data = self._stat_and_hash()
        if data is None:
            log.error(
                "config reload refused: cannot read %s; keeping the previous config", self.path
            )
            self._on_result("failure")
            return False
        if only_if_changed and self._hash == previous:
            return False
        try:
            settings = parse_settings_text(data.decode("utf-8", "replace"), str(self.path))
        except ConfigError as exc:
            log.error("config reload refused (%s): %s; keeping the previous config", reason, exc)
            self._on_result("failure")
            return False
        try:
            self._apply(settings)
        except Exception as exc:
            log.exception("config reload failed while applying: %s", exc)
            self._on_result("failure")
            return False
        log.warning(
            "config reloaded from %s (%s): %d upstreams, mode %s",
            self.path,
            reason,
            len(settings.upstreams),
            settings.load_balance.mode,
        )
        self._on_result("success")
        return True

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval())
            try:
                self.check()
            except Exception:
                log.exception("config poll failed")

    def _on_sighup(self) -> None:
        self.reload_now("SIGHUP")

    def start(self, poll: bool = True) -> None:
        """Start polling (unless ``poll`` is False) and install the SIGHUP handler."""
        loop = asyncio.get_running_loop()
        if poll and self._task is None:
            self._task = loop.create_task(self._run(), name="config-watch")
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError, AttributeError):
            loop.add_signal_handler(signal.SIGHUP, self._on_sighup)

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError, AttributeError):
            loop.remove_signal_handler(signal.SIGHUP)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
