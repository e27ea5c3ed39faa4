"""A headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages ending in NUL, on the child's fds 3 and 4), so the tests need no WebSocket client
and download no browser: Debian's ``chromium`` is the browser.

Usage::

    with Browser() as browser:
        page = browser.new_page()
        page.goto("http://127.0.0.1:9101/status")
        page.eval("document.title")
        page.screenshot(Path("shot.png"))
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.monitoring.tools import require
from tests.real_components import unavailable

COMPONENT = "Chromium (headless)"


class CdpError(RuntimeError):
    pass


class Browser:
    def __init__(self, width: int = 1400, height: int = 1000) -> None:
        self.binary = require("chromium", "chromium", COMPONENT)
        self.size = (width, height)
        self._next = 0
        self._buffer = b""

    def __enter__(self) -> Browser:
        self._profile = tempfile.mkdtemp(prefix="cdp-")
        to_child, self._out = os.pipe()  # we write, chromium reads fd 3
        self._in, from_child = os.pipe()  # chromium writes fd 4, we read

        def wire() -> None:  # in the child: the pipes become fds 3 and 4, whatever they were
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child, from_child)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        argv = [
            self.binary, "--headless=new", "--remote-debugging-pipe", "--no-sandbox",
            "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--disable-dev-shm-usage", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--metrics-recording-only",
            f"--user-data-dir={self._profile}",
            f"--window-size={self.size[0]},{self.size[1]}", "about:blank",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv,
            preexec_fn=wire,
            pass_fds=(3, 4),  # kept open once wire() has put the pipes there
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child)
        os.close(from_child)
        try:  # it answers on its DevTools pipe, or it did not start
            self.call("Browser.getVersion", timeout=60)
        except CdpError as exc:
            self.__exit__()
            unavailable(COMPONENT, f"{self.binary} did not answer: {exc}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._out)
        os.close(self._in)
        # Chromium's helper processes (crashpad, the GPU and network services) may still be
        # writing the profile for a moment after the browser itself has exited
        for _ in range(50):
            try:
                shutil.rmtree(self._profile)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        shutil.rmtree(self._profile, ignore_errors=True)

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            # poll, not select: a long test run may hold descriptors above select's 1024
            poller = select.poll()
            poller.register(self._in, select.POLLIN)
            if left <= 0 or not poller.poll(left * 1000):
                raise CdpError("chromium did not answer in time")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise CdpError("chromium closed its DevTools pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        decoded: dict[str, Any] = json.loads(message)
        return decoded

    def call(
        self, method: str, session: str | None = None, timeout: float = 30, **params: Any
    ) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise CdpError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result

    def new_page(self) -> Page:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        page = Page(self, session)
        page.call("Page.enable")
        page.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.size[0], height=self.size[1], deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        return page


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.call(method, self.session, **params)

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression (promises awaited)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise CdpError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    def wait_for(self, expression: str, timeout: float = 15) -> Any:
        """Poll a JavaScript expression until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.eval(expression)
            except CdpError:
                value = None  # a navigation in progress destroys the context
            if value:
                return value
            if time.monotonic() > deadline:
                raise CdpError(f"not true after {timeout}s: {expression}")
            time.sleep(0.1)

    def screenshot(self, path: Path) -> Path:
        """A PNG of the page down to the end of its content."""
        height = self.eval("document.documentElement.scrollHeight") or self.browser.size[1]
        clip = {"x": 0, "y": 0, "width": self.browser.size[0], "height": height, "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", clip=clip)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
