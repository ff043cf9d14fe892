"""The controller's similarity service: the same float32 as in process, errors as case errors."""

from __future__ import annotations

import hashlib
import http.client
import json
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.scoring.service import (
    SHARED_SERVICE_VARIABLE,
    TOKEN_HEADER,
    RemoteSimilarity,
    SimilarityService,
    shared_service,
)
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA

#: A conftest for the runs under test: which heavy modules each process imported.
HEAVY_MODULES = """
import json, sys

def pytest_sessionfinish(session):
    worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
    heavy = sorted(m for m in ("torch", "sentence_transformers") if m in sys.modules)
    with open(f"modules-{worker}.json", "w") as fh:
        json.dump(heavy, fh)
"""


class HashSimilarity:
    """A deterministic stand-in whose values use every bit of a float32."""

    def __init__(self) -> None:
        self.loads = 0

    def load(self) -> None:
        self.loads += 1

    def sim(self, a: str, b: str) -> np.float32:
        digest = hashlib.sha256((a + "\x00" + b).encode("utf-8", "surrogatepass")).digest()
        value: np.float32 = np.frombuffer(digest[:4], dtype=np.uint32)[0].astype(
            np.float32
        ) / np.float32(2**32)
        return value


@pytest.fixture(scope="module")
def served() -> Any:
    local = HashSimilarity()
    service = SimilarityService(lambda: local)
    yield service, local, RemoteSimilarity(service.url, service.token, timeout=30)
    service.close()


texts = st.text(
    alphabet=st.characters(codec=None, exclude_categories=()), max_size=200
)  # lone surrogates included


@settings(max_examples=60)
@given(a=texts, b=texts)
def test_remote_values_are_the_local_ones_bit_for_bit(served, a, b):
    _, local, remote = served
    got = remote.sim(a, b)
    assert isinstance(got, np.float32)
    assert got.tobytes() == local.sim(a, b).tobytes()


def test_the_model_loads_once(served):
    service, local, remote = served
    remote.sim("a", "b")
    remote.sim("c", "d")
    assert local.loads == 1
    assert service.load_seconds is not None


def test_a_wrong_token_is_refused(served):
    service, _, _ = served
    with pytest.raises(GtaInfrastructureError, match="403"):
        RemoteSimilarity(service.url, "not-the-token", timeout=10).sim("a", "b")


def test_a_model_that_does_not_load_errors_the_cases_with_its_reason():
    def broken() -> Any:
        raise OSError("weights are missing from /models/mpnet")

    service = SimilarityService(broken)
    try:
        remote = RemoteSimilarity(service.url, service.token, timeout=10)
        with pytest.raises(GtaInfrastructureError, match="weights are missing"):
            remote.sim("a", "b")
    finally:
        service.close()


def test_a_gone_service_is_an_infrastructure_error():
    service = SimilarityService(HashSimilarity)
    url, token = service.url, service.token
    service.close()
    with pytest.raises(GtaInfrastructureError, match="similarity service"):
        RemoteSimilarity(url, token, timeout=5).sim("a", "b")


@settings(max_examples=40)
@given(
    body=st.one_of(
        st.binary(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
            lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
            max_leaves=20,
        ).map(lambda v: json.dumps(v).encode()),
        st.integers(min_value=1, max_value=400).map(lambda n: b"[" * n * 100),
    )
)
def test_hostile_bodies_get_a_400_and_the_service_goes_on(served, body):
    service, _, remote = served
    address = urlparse(service.url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    connection.request("POST", "/sim", body=body, headers={TOKEN_HEADER: service.token})
    response = connection.getresponse()
    answer = response.read()
    connection.close()
    if response.status == 200:  # a well-formed request that happened to be generated
        assert "sims" in json.loads(answer)
    else:
        assert response.status == 400
    assert remote.sim("still", "serving") == HashSimilarity().sim("still", "serving")


def test_workers_import_no_torch_and_the_controller_loads_once(pytester, monkeypatch):
    """Under xdist the controller loads the model; workers stay small (no torch at all).

    And ``$PYTEST_GTA_TEST_SIMILARITY`` (tests/conftest.py): a run started by a test asks the
    session's service, no process of it imports torch, and the numbers are those of the runs
    that load their own model.
    """
    assert shared_service("all-MiniLM-L6-v2") is not None  # the session's autouse fixture
    pytester.makeconftest(HEAVY_MODULES)
    args = (SAMPLE_DATA, FAST_SIM, "--gta-model=oracle", "--gta-mode=step,e2e")
    shared = pytester.runpytest_subprocess(*args, "--gta-report=shared.json", "-n", "2")
    shared.assert_outcomes(passed=34)  # 17 sample queries x 2 modes
    for process in ("main", "gw0", "gw1"):
        assert json.loads((pytester.path / f"modules-{process}.json").read_text()) == []
    assert "loading the similarity model" not in shared.stdout.str()
    # The run's own model (the real path): the controller loads it, the workers do not.
    monkeypatch.delenv(SHARED_SERVICE_VARIABLE)
    result = pytester.runpytest_subprocess(*args, "--gta-report=gta.json", "-n", "2")
    result.assert_outcomes(passed=34)
    for worker in ("gw0", "gw1"):
        assert json.loads((pytester.path / f"modules-{worker}.json").read_text()) == []
    assert json.loads((pytester.path / "modules-main.json").read_text()) != []
    report = json.loads((pytester.path / "gta.json").read_text())
    assert "similarity_load_s" in report["timings"]["main"]
    assert not any("similarity_load_s" in report["timings"][w] for w in ("gw0", "gw1"))
    single = pytester.runpytest_subprocess(*args, "--gta-report=one.json")
    single.assert_outcomes(passed=34)
    assert json.loads((pytester.path / "modules-main.json").read_text()) != []
    reports = [json.loads((pytester.path / n).read_text()) for n in ("one.json", "shared.json")]
    for other in reports:
        assert other["metrics"] == report["metrics"]
        assert [c["score"] for c in other["cases"]] == [c["score"] for c in report["cases"]]


@pytest.mark.parametrize(
    "value",
    ["not json", "{}", "[[]]", "[" * 9999, '[{"model": "m", "url": 1, "token": "t"}]'],
)
def test_a_malformed_shared_service_variable_is_a_usage_error_naming_it(monkeypatch, value):
    monkeypatch.setenv(SHARED_SERVICE_VARIABLE, value)
    with pytest.raises(GtaUsageError, match=r"\$PYTEST_GTA_TEST_SIMILARITY must be a JSON list"):
        shared_service("all-MiniLM-L6-v2")


def test_the_shared_service_serves_its_own_model_only(monkeypatch):
    value = {"model": "all-MiniLM-L6-v2", "url": "http://127.0.0.1:1/sim", "token": "t"}
    monkeypatch.setenv(SHARED_SERVICE_VARIABLE, json.dumps([value]))
    assert shared_service("all-MiniLM-L6-v2") == ("http://127.0.0.1:1/sim", "t")
    assert shared_service("all-mpnet-base-v2") is None
    monkeypatch.delenv(SHARED_SERVICE_VARIABLE)
    assert shared_service("all-MiniLM-L6-v2") is None


def test_a_client_that_vanishes_while_it_waits_is_no_traceback(capfd):
    """An xdist worker killed (``kill -9``) while it waits for the model's load: its socket is
    reset, and the answer the service then writes has nobody to read it."""
    import socket
    import struct
    import threading
    import time

    release = threading.Event()
    answered = threading.Event()
    loading = threading.Event()

    class Slow(HashSimilarity):
        def load(self) -> None:
            loading.set()
            release.wait(30)

        def sim(self, a: str, b: str) -> np.float32:
            answered.set()
            return super().sim(a, b)

    service = SimilarityService(Slow)
    try:
        url = urlparse(service.url)
        body = json.dumps({"pairs": [["a", "b"]] * 2000}).encode()  # more than one TCP segment
        client = socket.create_connection((url.hostname, url.port))
        client.sendall(
            f"POST {url.path} HTTP/1.1\r\nHost: x\r\n{TOKEN_HEADER}: {service.token}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert loading.wait(30)  # the request is read; the handler waits for the model
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset, as the kernel sends for a killed process
        release.set()
        assert answered.wait(30)
        # The handler writes its answer into the reset connection and ends: wait for its thread
        # (socketserver names it after process_request_thread) rather than for a while.
        deadline = time.monotonic() + 30
        while any("process_request_thread" in t.name for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the handler never finished"  # bound: a hang
            time.sleep(0.01)
        # the service goes on serving the other workers
        assert float(RemoteSimilarity(service.url, service.token).sim("a", "b")) >= 0
    finally:
        service.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
    assert "BrokenPipe" not in err, err
    assert "ConnectionReset" not in err, err
