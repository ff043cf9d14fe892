"""A real headless Chromium and a logging HTTP server, for tests of pages a browser renders.

The HTML report must render with its script run and must not touch the network when viewed.
Both claims need a real browser: ``Chromium`` runs the installed binary as a subprocess
(``--dump-dom`` for the DOM after the page's script ran, ``--screenshot`` for a PNG) and
collects what its console said, Content-Security-Policy violations included. ``serve_directory``
is a real ``http.server`` on 127.0.0.1 that logs every request it gets; passed to Chromium as
its proxy (``proxy=server.proxy``) it also logs every request to any other host, so "the
page made no request" is checked against everything the browser sent, not only what happened
to be aimed at the test's own server.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

#: Environment variable naming the browser binary to use instead of the one found on PATH.
BINARY_ENV = "PYTEST_GTA_CHROMIUM"
#: Browser names tried on PATH, in order (Debian's package, Ubuntu's, Google's build).
NAMES = ("chromium", "chromium-browser", "google-chrome")
INSTALL_HINT = "apt-get install chromium (or set PYTEST_GTA_CHROMIUM to a Chromium binary)"

# Chromium's own traffic, which would otherwise reach the network while a test looks at a
# page: component and safe-browsing updates, network time, sync and sign-in, metrics and crash
# uploads, translation and optimisation hints. Measured through the logging proxy: without
# these flags Chromium 156 contacts clients2.google.com, update.googleapis.com,
# redirector.gvt1.com and accounts.google.com on every start; with them it still asks
# update.googleapis.com for one component (the optimisation guide's on-device model manifest)
# and opens accounts.google.com, whatever the flags say, so the last rule makes every host
# but loopback unresolvable: nothing Chromium starts on its own leaves the machine.
QUIET_FLAGS = (
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--disable-extensions",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-breakpad",
    "--safebrowsing-disable-auto-update",
    "--metrics-recording-only",
    "--no-pings",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-features=Translate,OptimizationHints,OptimizationGuideModelDownloading,"
    "MediaRouter,DialMediaRouteProvider,AutofillServerCommunication,NetworkTimeServiceQuerying,"
    "CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions",
    "--password-store=basic",
    "--mute-audio",
    "--hide-scrollbars",
    # Containers often have a 64 MB /dev/shm, too small for a 1280x2000 page.
    "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
)
#: The hosts Chromium (150 to 156) still contacts on its own under ``QUIET_FLAGS`` (seen only
#: through a proxy, which resolves names for it); ``RequestLog.page_requests`` leaves them out.
#: Seen: update.googleapis.com, accounts.google.com, www.google.com,
#: android.clients.google.com; any host under google.com counts (a page's own request to
#: Google, such as fonts.googleapis.com, still shows).
CHROMIUM_OWN_HOSTS = frozenset({"update.googleapis.com", "google.com"})

# Chromium logs a console message as ``INFO:CONSOLE:12] "text", source: url (12)`` (156) or
# ``INFO:CONSOLE(12)] ...`` (older builds).
_CONSOLE = re.compile(r"\bCONSOLE[(:]\d*")


def chromiums_own(host: str) -> bool:
    """Whether ``host`` (``name:port``) is one Chromium contacts on its own."""
    name = host.rsplit(":", 1)[0]
    return any(name == own or name.endswith(f".{own}") for own in CHROMIUM_OWN_HOSTS)


class BrowserError(AssertionError):
    """Chromium did not give a result (timed out, failed, or wrote no screenshot).

    An ``AssertionError`` so that pytest reports it as the test's failure, with the message.
    """


def find_chromium() -> str | None:
    """The Chromium binary to run: ``$PYTEST_GTA_CHROMIUM`` if set, else the first on PATH.

    Returns:
        Its path, or None when there is none (or the variable names no executable).
    """
    chosen = os.environ.get(BINARY_ENV)
    if chosen:
        return shutil.which(chosen)
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass(frozen=True)
class Request:
    """One request the server received, as the client sent it."""

    method: str
    #: The request target as sent: ``/page.html``, or ``http://host/x`` and ``host:443`` when
    #: the server was the browser's proxy.
    target: str
    #: The path part of ``target`` (``""`` for CONNECT).
    path: str
    #: The ``Host`` header (for CONNECT, the target).
    host: str
    status: int


@dataclass
class RequestLog:
    """A running ``serve_directory`` server: where it is and what it was asked for."""

    root: Path
    port: int = 0
    _requests: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def origin(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def proxy(self) -> str:
        """The value for ``Chromium(...)(proxy=...)``: this server as the browser's proxy."""
        return f"http://{self.origin}"

    def url(self, name: str) -> str:
        """The URL of file ``name`` under the served root."""
        return f"http://{self.origin}/{name.lstrip('/')}"

    @property
    def requests(self) -> list[Request]:
        """Every request so far, in arrival order (404s and refused proxy requests too)."""
        with self._lock:
            return list(self._requests)

    @property
    def page_requests(self) -> list[Request]:
        """``requests`` less Chromium's own to ``CHROMIUM_OWN_HOSTS``: what the page asked for."""
        return [r for r in self.requests if not chromiums_own(r.host)]

    def record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)


def _handler(log: RequestLog) -> type[SimpleHTTPRequestHandler]:
    class Handler(SimpleHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # A client that keeps a connection open cannot hold the server's shutdown forever.
        timeout = 30
        #: The request target as the client sent it (``path`` is rewritten to serve a file).
        target = ""

        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(log.root), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _own(self) -> tuple[str, bool]:
            """The path asked for, and whether it is for this server (not a proxied host)."""
            if self.path.startswith(("http://", "https://")):
                parts = urlsplit(self.path)
                return parts.path or "/", parts.netloc == log.origin
            return self.path.split("?", 1)[0], True

        def _record(self, path: str, status: int) -> None:
            host = self.headers.get("Host", "")
            if self.command == "CONNECT" and not host:
                # Chromium may send a CONNECT without a Host header: its target names the host.
                host = self.target
            log.record(Request(self.command, self.target, path, host, status))

        def _refuse(self, path: str, status: int) -> None:
            self._record(path, status)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def send_head(self):  # type: ignore[no-untyped-def]
            self.target = self.path
            path, own = self._own()
            if not own:
                # Proxied: a request for another host, which this server never forwards.
                self._refuse(path, 502)
                return None
            self.path = path
            if not Path(self.translate_path(path)).is_file():
                self._refuse(path, 404)
                return None
            self._record(path, 200)
            return super().send_head()

        def do_POST(self) -> None:
            # Logged and refused; the body is never read, so the connection cannot be reused.
            self.target = self.path
            self.close_connection = True
            self._refuse(self._own()[0], 405)

        do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_POST

        def do_CONNECT(self) -> None:
            # An HTTPS request through the proxy: logged, never tunnelled.
            self.target = self.path
            self._refuse("", 405)
            self.close_connection = True

    return Handler


@contextmanager
def serve_directory(root: Path) -> Iterator[RequestLog]:
    """Serve the files under ``root`` on 127.0.0.1 until the block ends, logging each request.

    When the block ends the server waits for its open connections, so ``requests`` read after
    the block holds every request that reached it, late ones included.
    """
    log = RequestLog(Path(root))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(log))
    httpd.daemon_threads = False
    httpd.block_on_close = True
    log.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield log
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=30)


@dataclass(frozen=True)
class BrowserResult:
    """What one Chromium run gave."""

    command: tuple[str, ...]
    returncode: int
    #: stdout: the serialised DOM after the page's script ran, for ``dump_dom``.
    dom: str
    stderr: str

    @property
    def console(self) -> list[str]:
        """Every console message Chromium logged (the page's ``console.*`` and its own)."""
        return [line for line in self.stderr.splitlines() if _CONSOLE.search(line)]

    @property
    def csp_violations(self) -> list[str]:
        """The console messages about Content Security Policy: what the page's CSP blocked."""
        return [line for line in self.console if "Content Security Policy" in line]


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL Chromium's whole process group: its renderer, GPU and zygote children too."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


@dataclass(frozen=True)
class Chromium:
    """The installed Chromium, run headless once per call with a fresh profile."""

    binary: str
    #: Seconds a run may take before it is killed and the test fails.
    timeout_s: float = 90.0

    def dump_dom(
        self,
        url: str,
        *,
        budget_ms: int = 5000,
        window: tuple[int, int] = (1280, 2000),
        proxy: str | None = None,
    ) -> BrowserResult:
        """Load ``url``, let its script run for ``budget_ms`` of virtual time, return the DOM.

        Args:
            url: An ``http://`` or ``file://`` URL.
            budget_ms: Virtual time the page gets (timers fire, scripts finish) before the
                dump.
            window: Viewport width and height in CSS pixels.
            proxy: Route every request through this proxy (``RequestLog.proxy``), loopback
                included, so that the proxy's log shows everything the browser sent.
        """
        return self._run(url, ["--dump-dom"], budget_ms=budget_ms, window=window, proxy=proxy)

    def screenshot(
        self,
        url: str,
        path: Path,
        *,
        window: tuple[int, int] = (1280, 2000),
        budget_ms: int = 5000,
        proxy: str | None = None,
    ) -> BrowserResult:
        """Load ``url`` like ``dump_dom`` and write a PNG of the viewport (``window``) to ``path``.

        Raises:
            BrowserError: Chromium wrote no file at ``path``.
        """
        path = Path(path).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        result = self._run(
            url, [f"--screenshot={path}"], budget_ms=budget_ms, window=window, proxy=proxy
        )
        if not path.is_file():
            raise BrowserError(f"chromium wrote no screenshot at {path}{_tail(result.stderr)}")
        return result

    def _run(
        self,
        url: str,
        action: list[str],
        *,
        budget_ms: int,
        window: tuple[int, int],
        proxy: str | None,
    ) -> BrowserResult:
        with tempfile.TemporaryDirectory(
            prefix="gta-chromium-", ignore_cleanup_errors=True
        ) as profile:
            command = [
                self.binary,
                "--headless",
                "--disable-gpu",
                f"--user-data-dir={profile}",
                # Chromium's own sandbox cannot start as root (CI containers).
                *(["--no-sandbox"] if os.geteuid() == 0 else []),
                "--enable-logging=stderr",
                "--v=0",
                f"--virtual-time-budget={budget_ms}",
                f"--window-size={window[0]},{window[1]}",
                *QUIET_FLAGS,
                *([f"--proxy-server={proxy}", "--proxy-bypass-list=<-loopback>"] if proxy else []),
                *action,
                url,
            ]
            # Its own session: a Ctrl-C at the terminal reaches only pytest, which then kills
            # the whole group here; nothing of Chromium outlives the call.
            with subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            ) as process:
                try:
                    out, err = process.communicate(timeout=self.timeout_s)
                except subprocess.TimeoutExpired:
                    _kill_group(process)
                    out, err = process.communicate()
                    raise BrowserError(
                        f"chromium did not finish loading {url} within {self.timeout_s:g} s "
                        f"and was killed (process group {process.pid}); a page script that "
                        f"never yields, or a request that never gets an answer, does this"
                        f"{_tail(err.decode(errors='replace'))}"
                    ) from None
                finally:
                    _kill_group(process)
        result = BrowserResult(
            tuple(command),
            process.returncode,
            out.decode(errors="replace"),
            err.decode(errors="replace"),
        )
        if result.returncode != 0:
            raise BrowserError(
                f"chromium exited with status {result.returncode} on {url}{_tail(result.stderr)}"
            )
        return result


def _tail(stderr: str, lines: int = 20) -> str:
    kept = stderr.strip().splitlines()[-lines:]
    return "\nchromium's stderr (last lines):\n" + "\n".join(kept) if kept else ""
