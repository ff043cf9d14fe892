"""One similarity model per run: the xdist controller serves it to the workers on 127.0.0.1.

The official similarity model (all-mpnet-base-v2 on PyTorch) costs each process that loads it
about 850 MB and several seconds; eight xdist workers each loading it would need 7 GB before
the first case is scored. So the controller, the one process of a run that lives from start to
end, loads it once, in a background thread started as the workers start (the load overlaps
their start-up and first model requests), and answers their ``sim(a, b)`` calls over a local
HTTP socket. Workers then import neither torch nor sentence-transformers.

The numbers are those of a run without xdist, bit for bit: the same process kind runs the same
library calls on the same texts (each text encoded alone, as the official evaluator does), and
a float32 crosses JSON exactly (float32 -> float64 -> shortest repr -> float64 -> float32).
Requests carry a per-run token so that no other local process can use the service.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

import numpy as np

from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.loopback import QuickHTTPServer
from pytest_gta.scoring.similarity import Similarity

#: Header that carries the run's token.
TOKEN_HEADER = "X-Pytest-Gta-Token"
#: Set by pytest-gta's own test session only (``tests/conftest.py``): one service for every
#: pytest the tests start, as a JSON list of ``{"model": NAME, "url": URL, "token": TOKEN}``, so
#: that a run started by a test does not import torch and load its model again (issue 39).
SHARED_SERVICE_VARIABLE = "PYTEST_GTA_TEST_SIMILARITY"
#: Largest request body accepted (two texts; a model's reply is at most a few MB).
MAX_BODY = 64 * 1024 * 1024


class SimilarityService:
    """The controller's similarity model, loaded once in the background, served to workers."""

    def __init__(self, factory: Callable[[], Similarity]) -> None:
        self._factory = factory
        self._similarity: Similarity | None = None
        self._error: str | None = None
        self._loaded = threading.Event()
        self.token = secrets.token_hex(16)
        #: Seconds the load took (``None`` until it finished).
        self.load_seconds: float | None = None
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._threads = [
            threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},  # close() waits up to one interval
                name="gta-sim-serve",
                daemon=True,
            ),
            threading.Thread(target=self._load, name="gta-sim-load", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @property
    def url(self) -> str:
        """Where workers send their pairs."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/sim"

    def _load(self) -> None:
        start = time.perf_counter()
        try:
            similarity = self._factory()
            load = getattr(similarity, "load", None)
            if callable(load):
                load()
            self._similarity = similarity
        except Exception as exc:  # the cases that need it become errors with this message
            self._error = f"{type(exc).__name__}: {exc}"
        self.load_seconds = round(time.perf_counter() - start, 3)
        self._loaded.set()

    def sims(self, pairs: list[tuple[str, str]]) -> list[float]:
        """``sim(a, b)`` for each pair, once the model is loaded.

        Raises:
            GtaInfrastructureError: the model did not load.
        """
        self._loaded.wait()
        if self._similarity is None:
            raise GtaInfrastructureError(f"the similarity model did not load: {self._error}")
        return [float(self._similarity.sim(a, b)) for a, b in pairs]

    def close(self) -> None:
        """Stop serving (the load thread, if still running, ends with the process)."""
        self._server.shutdown()
        self._server.server_close()


def shared_service(model: str) -> tuple[str, str] | None:
    """``(url, token)`` of the test session's service for ``model``, if it serves that one.

    Raises:
        GtaUsageError: the variable is set but is not what the test session writes.
    """
    raw = os.environ.get(SHARED_SERVICE_VARIABLE)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        value = None
    keys = ("model", "url", "token")
    if not isinstance(value, list) or not all(
        isinstance(entry, dict) and all(isinstance(entry.get(k), str) for k in keys)
        for entry in value
    ):
        raise GtaUsageError(
            f"${SHARED_SERVICE_VARIABLE} must be a JSON list of objects with the strings "
            "'model', 'url' and 'token'; only pytest-gta's own test session sets it: unset it"
        )
    for entry in value:
        if entry["model"] == model:
            return entry["url"], entry["token"]
    return None


class _Server(QuickHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A worker that vanished mid-request (killed, crashed) is normal, not a traceback.

        xdist replaces a crashed worker and reports its case; the answer this service was
        about to send has nobody to read it. Anything else is a bug and is printed as usual.
        """
        if isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipe, ConnectionReset
            return
        super().handle_error(request, client_address)


def _handler(service: SimilarityService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the terminal belongs to pytest."""

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            """``{"pairs": [[a, b], ...]}`` -> ``{"sims": [float, ...]}``."""
            if not secrets.compare_digest(self.headers.get(TOKEN_HEADER, ""), service.token):
                self._answer(403, {"error": "wrong token"})
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                if not 0 <= length <= MAX_BODY:
                    raise ValueError(f"body of {length} bytes")
                pairs = _pairs(json.loads(self.rfile.read(length)))
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                self._answer(400, {"error": f"bad request: {exc}"})
                return
            try:
                sims = service.sims(pairs)
            except GtaInfrastructureError as exc:
                self._answer(503, {"error": str(exc)})
                return
            except Exception as exc:  # a text the model cannot take: the caller's case errors
                self._answer(500, {"error": f"{type(exc).__name__}: {exc}"})
                return
            self._answer(200, {"sims": sims})

    return Handler


def _pairs(payload: Any) -> list[tuple[str, str]]:
    pairs = payload.get("pairs") if isinstance(payload, dict) else None
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(t, str) for t in p) for p in pairs
    ):
        raise ValueError("expected {'pairs': [[text, text], ...]}")
    return [(a, b) for a, b in pairs]


class RemoteSimilarity:
    """A worker's view of the controller's similarity model (see :class:`SimilarityService`)."""

    def __init__(self, url: str, token: str, timeout: float = 3600.0) -> None:
        self.url = url
        self._token = token
        #: Generous: the first call waits while the controller loads the model.
        self.timeout = timeout

    def sim(self, a: str, b: str) -> np.float32:
        """``max(0, cos(embed(a), embed(b)))`` computed by the controller, as ``float32``.

        Raises:
            GtaInfrastructureError: the controller's service failed or cannot be reached.
        """
        # Lone surrogates survive: json escapes them and the controller reads them back as is.
        body = json.dumps({"pairs": [[a, b]]}).encode()
        request = urllib.request.Request(
            self.url,
            data=body,
            headers={"Content-Type": "application/json", TOKEN_HEADER: self._token},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = _error_of(exc)
            raise GtaInfrastructureError(
                f"the controller's similarity service answered {exc.code}: {detail}"
            ) from None
        except (OSError, ValueError) as exc:
            raise GtaInfrastructureError(
                f"the controller's similarity service at {self.url} failed: {exc}"
            ) from None
        sims = answer.get("sims") if isinstance(answer, dict) else None
        if not isinstance(sims, list) or len(sims) != 1 or not isinstance(sims[0], float):
            raise GtaInfrastructureError(
                f"the controller's similarity service answered {str(answer)[:200]!r}"
            )
        value: np.float32 = np.float32(sims[0])
        return value


def _error_of(exc: urllib.error.HTTPError) -> str:
    try:
        payload = json.loads(exc.read())
    except (OSError, ValueError):
        return exc.reason or "no detail"
    return str(payload.get("error", payload)) if isinstance(payload, dict) else str(payload)
