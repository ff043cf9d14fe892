"""The browser harness (tests/helpers/browser.py) sees what the HTML report's test relies on.

Real Chromium, real HTTP server: a page's script runs before the DOM is dumped, a request the
page makes reaches the logging server, a Content-Security-Policy blocks it and says so on the
console, an inline script runs only when its hash is in the policy, a screenshot is a PNG of
the window's size, and a browser that hangs or is interrupted leaves no process behind. Each
check is paired with the case where it must come out the other way, so the harness is shown to
fail as well as pass. ``.ci/run`` installs Debian's chromium and sets
``PYTEST_GTA_REQUIRE_CHROMIUM=1``, so there a missing browser fails these tests.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.browser import (
    BrowserError,
    Chromium,
    RequestLog,
    chromiums_own,
    serve_directory,
)
from tests.helpers.paths import ROOT
from tests.helpers.processes import default_sigint

pytestmark = pytest.mark.slow

# An icon in the page itself: without one, Chromium asks the page's server for /favicon.ico.
NO_FAVICON = '<link rel="icon" href="data:,">'
# 1x1 transparent PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)
# A page that never yields: Chromium never gets to dump it.
SPIN = "<!doctype html><html><body><p>spinning</p><script>while (true) {}</script></body></html>"


def page(body: str, head: str = NO_FAVICON) -> str:
    return f"<!doctype html><html><head>{head}</head><body>{body}</body></html>"


def csp(policy: str) -> str:
    return f'<meta http-equiv="Content-Security-Policy" content="{policy}">'


def sha256_source(script: str) -> str:
    """A CSP hash source: base64 of the SHA-256 of the script's exact text."""
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()


def seen(server: RequestLog) -> list[tuple[str, str, int]]:
    return [(r.method, r.path, r.status) for r in server.requests]


def processes() -> Iterator[tuple[int, str, int, int]]:
    """``(pid, state, ppid, pgrp)`` of every process, read from /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        state, ppid, pgrp = text[text.rindex(")") + 2 :].split()[:3]
        yield int(stat.parent.name), state, int(ppid), int(pgrp)


def live_members(group: int) -> list[int]:
    """Processes of process group ``group`` that are not zombies."""
    return [pid for pid, state, _, pgrp in processes() if pgrp == group and state not in "ZX"]


def children_of(parent: int) -> list[int]:
    return [pid for pid, _, ppid, _ in processes() if ppid == parent]


def wait_until_gone(group: int) -> list[int]:
    """The group's live members once SIGKILL has had time to land (empty when all are gone)."""
    deadline = time.monotonic() + 30
    while (left := live_members(group)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_dump_dom_shows_the_dom_the_page_script_built(chromium: Chromium, tmp_path: Path):
    script = """
      const rows = document.getElementById("rows");
      for (const id of ["e2e-1", "e2e-2", "e2e-3"]) {
        const row = document.createElement("tr");
        row.dataset.case = id;
        row.textContent = id;
        rows.append(row);
      }
      console.log("built " + rows.children.length + " rows");
      setTimeout(() => { document.body.dataset.late = "fired"; }, 2000);
    """
    (tmp_path / "page.html").write_text(page(f'<table id="rows"></table><script>{script}</script>'))
    with serve_directory(tmp_path) as server:
        result = chromium.dump_dom(server.url("page.html"))

    assert re.findall(r'data-case="([^"]+)"', result.dom) == ["e2e-1", "e2e-2", "e2e-3"]
    # The 2 s timer fired: the virtual time budget let the page finish, not just parse.
    assert 'data-late="fired"' in result.dom
    assert any('"built 3 rows"' in line for line in result.console), result.stderr
    assert result.csp_violations == []
    assert seen(server) == [("GET", "/page.html", 200)]


def test_without_csp_the_page_request_reaches_the_server(chromium: Chromium, tmp_path: Path):
    (tmp_path / "pixel.png").write_bytes(PIXEL)
    with serve_directory(tmp_path) as server:
        (tmp_path / "page.html").write_text(page(f'<img src="{server.url("pixel.png")}">'))
        result = chromium.dump_dom(server.url("page.html"))

    assert seen(server) == [("GET", "/page.html", 200), ("GET", "/pixel.png", 200)]
    assert {r.host for r in server.requests} == {server.origin}
    assert result.csp_violations == []


def test_a_strict_csp_blocks_the_request_and_says_so(chromium: Chromium, tmp_path: Path):
    (tmp_path / "pixel.png").write_bytes(PIXEL)
    with serve_directory(tmp_path) as server:
        pixel = server.url("pixel.png")
        # No icon link: the policy alone also keeps Chromium from asking for /favicon.ico.
        head = csp("default-src 'none'; img-src data:")
        (tmp_path / "page.html").write_text(page(f'<img src="{pixel}">', head=head))
        result = chromium.dump_dom(server.url("page.html"))

    assert seen(server) == [("GET", "/page.html", 200)]
    assert len(result.csp_violations) == 1, result.stderr
    assert pixel in result.csp_violations[0]
    assert "img-src data:" in result.csp_violations[0]


def test_an_inline_script_runs_only_when_its_hash_is_in_the_policy(
    chromium: Chromium, tmp_path: Path
):
    allowed = 'document.getElementById("a").textContent = "a ran";'
    refused = 'document.getElementById("b").textContent = "b ran";'
    head = csp(f"default-src 'none'; script-src '{sha256_source(allowed)}'")
    body = (
        '<p id="a">a waiting</p><p id="b">b waiting</p>'
        f"<script>{allowed}</script><script>{refused}</script>"
    )
    (tmp_path / "page.html").write_text(page(body, head=head))
    with serve_directory(tmp_path) as server:
        result = chromium.dump_dom(server.url("page.html"))

    assert '<p id="a">a ran</p>' in result.dom
    assert '<p id="b">b waiting</p>' in result.dom
    assert len(result.csp_violations) == 1, result.stderr
    violation = result.csp_violations[0]
    assert "inline script" in violation
    # Chromium names the hash the refused script would need: ours is computed the same way.
    assert sha256_source(refused) in violation
    assert seen(server) == [("GET", "/page.html", 200)]


def test_screenshot_is_a_png_of_the_window(chromium: Chromium, tmp_path: Path, artifacts_dir: Path):
    from PIL import Image

    body = (
        '<div id="box" style="width:100vw;height:100vh;background:rgb(255,0,0)"></div>'
        "<script>document.body.style.margin = '0';</script>"
    )
    (tmp_path / "page.html").write_text(page(body))
    shot = artifacts_dir / "browser-harness-screenshot.png"
    with serve_directory(tmp_path) as server:
        chromium.screenshot(server.url("page.html"), shot, window=(800, 600))

    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (800, 600)
    # The page, not a blank window: the script removed the body's margin, the box fills it.
    with Image.open(shot) as image:
        assert image.convert("RGB").getpixel((0, 0)) == (255, 0, 0)
        assert image.convert("RGB").getpixel((799, 599)) == (255, 0, 0)
    assert seen(server) == [("GET", "/page.html", 200)]


def test_file_url_and_the_proxy_see_every_request(chromium: Chromium, tmp_path: Path):
    script = 'document.getElementById("x").textContent = "from file";'
    body = f'<p id="x">static</p><img src="http://example.invalid/beacon.png"><script>{script}</script>'
    local = tmp_path / "page.html"
    local.write_text(page(body))
    with serve_directory(tmp_path) as proxy:
        result = chromium.dump_dom(local.as_uri(), proxy=proxy.proxy)

    assert '<p id="x">from file</p>' in result.dom
    # Through the proxy even a request to another host is logged (and never forwarded).
    assert [(r.method, r.target, r.status) for r in proxy.page_requests] == [
        ("GET", "http://example.invalid/beacon.png", 502)
    ]
    # Whatever else came through is Chromium's own, to the hosts the harness knows about.
    others = [r.host for r in proxy.requests if not r.host.startswith("example.invalid")]
    assert all(chromiums_own(host) for host in others), others
    assert not chromiums_own("fonts.googleapis.com:443")


def test_a_page_that_never_finishes_fails_and_leaves_no_process(chromium: Chromium, tmp_path: Path):
    local = tmp_path / "spin.html"
    local.write_text(SPIN)
    impatient = Chromium(chromium.binary, timeout_s=5)
    with pytest.raises(BrowserError, match=r"did not finish loading .* within 5 s") as failure:
        impatient.dump_dom(local.as_uri())

    named = re.search(r"process group (\d+)", str(failure.value))
    assert named is not None, failure.value
    assert wait_until_gone(int(named.group(1))) == []


def test_ctrl_c_leaves_no_chromium_behind(chromium: Chromium, tmp_path: Path):
    local = tmp_path / "spin.html"
    local.write_text(SPIN)
    code = (
        "import sys; from tests.helpers.browser import Chromium; "
        "Chromium(sys.argv[1], timeout_s=600).dump_dom(sys.argv[2])"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, chromium.binary, local.as_uri()],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        # Interrupt once Chromium runs its own children (the page is loading), so the signal
        # lands while the harness waits on it.
        browser = None
        deadline = time.monotonic() + 120
        while child.poll() is None and time.monotonic() < deadline:
            browser = next(iter(children_of(child.pid)), None)
            if browser is not None and children_of(browser):
                break
            time.sleep(0.1)
        assert browser is not None, "chromium never started under the child"
        os.kill(child.pid, signal.SIGINT)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
        child.wait()

    assert "KeyboardInterrupt" in err
    assert wait_until_gone(browser) == []
