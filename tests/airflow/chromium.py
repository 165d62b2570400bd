"""A real headless Chromium (Debian's ``chromium``) driven over the DevTools protocol.

No browser driver can be downloaded here, so this speaks the protocol itself over a websocket
(``websocket-client``): start ``chromium --headless`` with a free debugging port and its own
profile, attach to its page, set a cookie, navigate, wait for the page to load and evaluate
JavaScript in it. When ``chromium`` is missing, :func:`ensure_chromium` installs it with
``apt-get install -y chromium`` (as ``make test`` does).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from itertools import count
from pathlib import Path
from typing import Any

import websocket

__all__ = ["Chromium", "ensure_chromium"]

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


def ensure_chromium() -> str:
    """The path of ``chromium``, installed with apt-get when it is missing."""
    found = shutil.which("chromium")
    if found is None:
        subprocess.run(
            ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
            check=True,
            capture_output=True,
            env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            timeout=900,
        )
        found = shutil.which("chromium")
    assert found is not None, "chromium is not installed (apt-get install -y chromium)"
    return found


class Chromium:
    """One headless Chromium with one page; ``with Chromium(profile) as browser: ...``."""

    def __init__(self, profile: Path, *, timeout: float = 30) -> None:
        self.timeout = timeout
        profile.mkdir(parents=True, exist_ok=True)
        active = profile / "DevToolsActivePort"
        active.unlink(missing_ok=True)  # a previous browser's
        self.process = subprocess.Popen(
            [ensure_chromium(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=(profile / "chromium.log").open("wb"),
        )
        try:
            self._ws = self._attach(active, timeout)
        except BaseException:
            self.process.kill()
            self.process.wait(timeout=10)
            raise
        self._ids = count(1)
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _attach(self, active: Path, timeout: float) -> websocket.WebSocket:
        """The websocket of the browser's page, once its debugging port is open."""
        deadline = time.monotonic() + timeout
        while not (active.exists() and active.read_text().strip()):
            assert self.process.poll() is None, (
                f"chromium exited: see {active.parent / 'chromium.log'}"
            )
            assert time.monotonic() < deadline, "chromium did not open its debugging port"
            time.sleep(0.1)
        port = int(active.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            [page] = [t for t in json.load(r) if t["type"] == "page"][:1]
        return websocket.create_connection(
            page["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True
        )

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events in between are dropped)."""
        ident = next(self._ids)
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == ident:
                assert "error" not in message, (method, message["error"])
                return message.get("result", {})

    def set_cookie(self, url: str, name: str, value: str) -> None:
        self.call("Network.setCookie", url=url, name=name, value=value, httpOnly=True)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited when it is a promise)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def goto(self, url: str) -> str:
        """Navigate to ``url`` and wait until the page has loaded; the URL it ended at (after
        redirects)."""
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")
        return str(self.evaluate("location.href"))

    def wait_for(self, condition: str) -> Any:
        """Poll a JavaScript expression until it is truthy; its value."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                value = self.evaluate(condition)
            except AssertionError:  # the page is between documents
                value = None
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {condition}"
            time.sleep(0.1)

    def text(self, selector: str) -> str:
        """The visible text of the first element ``selector`` matches ('' if none)."""
        return str(
            self.evaluate(
                f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText || ''"
            )
        )

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:  # already gone
            pass
        self._ws.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
