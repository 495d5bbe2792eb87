"""A small Chrome DevTools Protocol client: headless Chromium driven over one websocket.

Enough for UI tests: open a page, wait for a JavaScript condition, evaluate expressions,
click at a point, and save a full-page screenshot. Uses the system `chromium` and the
`websocket-client` package; nothing is downloaded.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket


def chromium_path() -> str | None:
    """The system Chromium, or None (tests skip with the setup command to run)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class CdpError(RuntimeError):
    """The browser said no, or a condition never became true."""


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, width: int = 1400, height: int = 1000) -> None:
        exe = chromium_path()
        if exe is None:
            raise CdpError("chromium is not installed: run scripts/setup.sh")
        self.profile = Path(tempfile.mkdtemp(prefix="kp-cdp-"))
        self.proc = subprocess.Popen(
            [
                exe,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                f"--window-size={width},{height}",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise CdpError("chromium did not start its DevTools endpoint")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            pages = [p for p in json.load(r) if p.get("type") == "page"]
        self.ws = websocket.create_connection(
            pages[0]["webSocketDebuggerUrl"], timeout=30, suppress_origin=True
        )
        self._ids = itertools.count(1)
        self.console: list[str] = []
        self.send("Runtime.enable")
        self.send("Page.enable")

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Call a CDP method and return its result (events on the way are kept as console)."""
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("method") == "Runtime.exceptionThrown":
                d = msg["params"]["exceptionDetails"]
                self.console.append(f"exception: {d.get('exception', {}).get('description')}")
            elif msg.get("method") == "Runtime.consoleAPICalled":
                self.console.append(
                    " ".join(
                        str(a.get("value", a.get("description", ""))) for a in msg["params"]["args"]
                    )
                )
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise CdpError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expr: str) -> Any:
        """Evaluate `expr` in the page (promises awaited) and return its JSON value."""
        res = self.send("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise CdpError(f"{expr[:80]}: {res['exceptionDetails'].get('exception', {})}")
        return res["result"].get("value")

    def wait(self, expr: str, timeout: float = 30) -> Any:
        """Wait until `expr` is truthy in the page; its value."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.eval(expr)
            except CdpError:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise CdpError(f"timed out waiting for {expr!r}; console: {self.console[-5:]}")
            time.sleep(0.1)

    def goto(self, url: str, ready: str = "document.readyState === 'complete'") -> None:
        self.send("Page.navigate", url=url)
        time.sleep(0.05)
        self.wait(ready)

    def click(self, x: float, y: float) -> None:
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page (not just the window)."""
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        shot = self.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={
                "x": 0,
                "y": 0,
                "width": size["width"],
                "height": min(size["height"], 6000),
                "scale": 1,
            },
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
