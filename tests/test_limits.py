"""Every limit bounds: reply sizes, whole-request deadlines, numeric options, URLs (issue 23).

Endpoints are real servers on 127.0.0.1 (tests/helpers/hostile_server.py) that stream without end,
trickle one byte at a time (headers too) or compress; the adapters talk to them through their
real SDKs. Black-box runs check that a case ends as the issue asks (the model's failed turn for
an oversized model reply, an error for a trickling endpoint, within the timeout) with its report
written. Hypothesis throws text and numbers at every numeric and URL option: each gives a
setting in its documented range or a usage error naming the option, never a traceback.
"""

from __future__ import annotations

import gc
import gzip
import json
import math
import re
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gta.endpoint import ReplyTooLarge, bound_client, size_text
from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.models import chat
from pytest_gta.models.base import ModelContext, make_model
from pytest_gta.models.generation import DEFAULT_MAX_REPLY_BYTES, GenerationSettings
from pytest_gta.options import OPTIONS, RANGES
from pytest_gta.options.model import parse_max_reply_bytes, parse_url
from pytest_gta.shard import Shard, shard_items
from pytest_gta.types import CaseContext, ChatMessage, ModelRequest
from pytest_gta.urls import check_url
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA
from tests.helpers.hostile_server import HostileServer, compressed, stream_forever, trickle
from tests.helpers.scripted_server import ScriptedServer, Step, anthropic_message, chat_completion
from tool_backends.http_client import request_with_retries

REQUEST = ModelRequest((ChatMessage("user", "hi"),), (), CaseContext("0", "e2e", 0))
LIMIT = 64 * 1024
#: What a server gets sent past the limit before the client stops: one chunk of httpcore's
#: reads, and what the kernel's socket buffers take (several MB on loopback) until it closes.
SLACK = 16 * 2**20


@pytest.fixture(autouse=True)
def _environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(chat, "BACKOFF_BASE", 0.001)


def adapter(provider: str, server: HostileServer, dataset: Any, **generation: Any):
    base_url = server.url if provider == "openai" else server.base
    model_name = "openai/x" if provider == "openai" else "anthropic/claude-pytest-gta-test"
    context = ModelContext(
        dataset,
        ("step", "e2e"),
        Path.cwd(),
        generation=GenerationSettings(base_url=base_url, **generation),
    )
    model = make_model(model_name, context)
    assert isinstance(model, chat.ChatAdapter)
    return model


PROVIDERS = ["openai", "anthropic"]


# -- item 7: no reply is read past --gta-max-reply-bytes ------------------------------------------


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("length", [None, 100 * 2**20], ids=["chunked", "announced"])
def test_an_endless_reply_is_the_models_failed_turn_read_no_further(
    provider, length, sample_dataset
):
    with HostileServer(stream_forever(length=length, prefix=b'{"choices": "')) as server:
        model = adapter(provider, server, sample_dataset, max_reply_bytes=LIMIT, retries=3)
        for _ in range(2):  # the SDKs import modules on their first calls: not traced
            model.generate(REQUEST)
        # Earlier tests' garbage is not this call's memory: collected first. Their sockets may
        # sit in cycles that the collector breaks before their client's close (a ResourceWarning
        # of another test's, raised here as an error under worksteal's order): not this test's.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        before = server.sent
        tracemalloc.start()
        output = model.generate(REQUEST)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        sent, requests = server.sent - before, server.requests
    assert output.text == (
        "[pytest-gta: the reply is larger than 64 KiB (--gta-max-reply-bytes)"
        + (": it announced 104857600 bytes" if length else "")
        + "; it was not read further]"
    )
    assert output.usage is not None
    assert output.usage.calls == 1
    assert requests == 3  # one per call: the model's answer is not retried
    # tracemalloc sees every thread of the process (earlier tests' servers too): a bound far
    # below the 100 MB or endless reply, not the call's own ~0.3 MB.
    assert peak < 16 * 2**20
    assert sent < LIMIT + SLACK  # what the server got into the sockets, not 100 MB


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_adapter_closes_its_connections_when_the_session_ends(provider, sample_dataset):
    """In a process that runs on after pytest (pytester, an IDE), connections left open for
    the garbage collector surfaced as a ResourceWarning in whatever test ran then."""
    with HostileServer(stream_forever()) as server:
        model = adapter(provider, server, sample_dataset, max_reply_bytes=LIMIT)
        model.generate(REQUEST)
        assert not model.client._client.is_closed
        model.close()
        assert model.client._client.is_closed


def test_an_oversized_reply_is_not_cached(sample_dataset, tmp_path):
    from pytest_gta.models.cache import ResponseCache

    with HostileServer(stream_forever()) as server:
        context = ModelContext(
            sample_dataset,
            ("step", "e2e"),
            Path.cwd(),
            generation=GenerationSettings(base_url=server.url, max_reply_bytes=LIMIT),
            cache=ResponseCache(tmp_path, "readwrite"),
        )
        model = make_model("openai/x", context)
        first = model.generate(REQUEST)
        second = model.generate(REQUEST)
        assert first == second
        assert server.requests == 2


def test_a_reply_under_the_limit_is_read_whole(sample_dataset):
    text = "Final Answer: " + "x" * (LIMIT - 1000)
    body = json.dumps(chat_completion(text)).encode()
    assert len(body) < LIMIT
    with HostileServer(compressed(body, "identity")) as server:
        output = adapter("openai", server, sample_dataset, max_reply_bytes=LIMIT).generate(REQUEST)
    assert output.text == text


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_compressed_reply_is_refused_unread(provider, sample_dataset):
    reply = chat_completion("ok") if provider == "openai" else anthropic_message([])
    # A gzip bomb: 10 MB of zeros after the JSON would inflate far past the limit.
    bomb = gzip.compress(json.dumps(reply).encode() + b" " * 10_000_000)
    assert len(bomb) < LIMIT
    with HostileServer(compressed(bomb)) as server:
        output = adapter(provider, server, sample_dataset, max_reply_bytes=LIMIT).generate(REQUEST)
    assert output.text.startswith("[pytest-gta: the reply is compressed (gzip) although")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_adapters_ask_for_uncompressed_replies(provider, sample_dataset):
    with ScriptedServer(models=["x"]) as server:
        if provider == "anthropic":
            server.default = Step(anthropic_message([{"type": "text", "text": "Final Answer: ok"}]))
        model = adapter(provider, server, sample_dataset)  # type: ignore[arg-type]
        assert model.generate(REQUEST).text == "Final Answer: ok"
        (request,) = server.requests
    assert {k.lower(): v for k, v in request.headers.items()}["accept-encoding"] == "identity"


def test_a_client_whose_pools_cannot_be_reached_is_refused():
    client = httpx2.Client(transport=httpx2.MockTransport(lambda r: httpx2.Response(200)))
    with pytest.raises(RuntimeError, match="httpx2's internals changed"):
        bound_client(LIMIT, client)  # a mock transport has no pool to bound


@pytest.mark.parametrize(("size", "text"), [(2**23, "8 MiB"), (1536 * 1024, "1536 KiB")])
def test_size_text(size, text):
    assert size_text(size) == text


def test_a_tool_service_answering_too_much_errors_the_case():
    with HostileServer(stream_forever()) as server:
        with pytest.raises(GtaInfrastructureError) as info:
            request_with_retries(
                "POST",
                server.base + "/search",
                service="Serper at x",
                what="POST",
                timeout=10,
                retries=2,
                backoff=0.01,
                max_reply_bytes=LIMIT,
            )
        assert server.requests == 1
    assert str(info.value) == (
        "Serper at x answered POST, but the reply is larger than 64 KiB "
        "(--gta-max-reply-bytes); it was not read further"
    )


def test_the_agentlego_backend_reads_its_tool_list_within_the_limit(sample_dataset):
    from pytest_gta.tools import ToolBackendContext, ToolSpec
    from tool_backends.agentlego import make_agentlego

    with HostileServer(stream_forever(prefix=b'{"paths": {"')) as server:
        context = ToolBackendContext(sample_dataset, Path.cwd(), max_reply_bytes=LIMIT)
        backend = make_agentlego(ToolSpec("agentlego", "agentlego", server.base), context)
    assert backend.unreachable is not None
    assert "the reply is larger than 64 KiB (--gta-max-reply-bytes)" in backend.unreachable


# -- item 8: --gta-timeout bounds the whole request ------------------------------------------------


@pytest.mark.slow  # 2 s in a full run: slow by cost (issue 39)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_a_trickling_endpoint_times_out_within_the_timeout(provider, headers_too, sample_dataset):
    reply = chat_completion("Final Answer: ok") if provider == "openai" else anthropic_message([])
    body = json.dumps(reply).encode()
    with HostileServer(trickle(body, 0.05, headers_too=headers_too)) as s:
        model = adapter(provider, s, sample_dataset, timeout=1.0, retries=1)
        start = time.monotonic()
        with pytest.raises(GtaInfrastructureError) as info:
            model.generate(REQUEST)
        elapsed = time.monotonic() - start
        assert s.requests == 2
    # Two attempts of at least 1 s each (a floor a loaded machine cannot break); the ceiling is
    # what the trickle takes for one reply without the whole-request timeout, several times
    # more than two timed-out attempts, so it tells "bounded" from "not bounded" without
    # depending on how busy the machine is.
    assert elapsed >= 2.0  # bound: a floor, which a busy machine only raises
    assert elapsed < len(body) * 0.05  # bound: unbounded, the trickle takes many times longer
    message = str(info.value)
    assert "giving up after 2 attempts" in message
    assert "timed out" in message
    assert "the whole request took longer than its 1 s timeout" in message


def test_a_trickling_tool_service_times_out():
    body = b'"' + b"x" * 1000 + b'"'
    with HostileServer(trickle(body, 0.05)) as server:
        start = time.monotonic()
        with pytest.raises(GtaInfrastructureError, match="did not answer POST in time"):
            request_with_retries(
                "POST",
                server.base + "/OCR",
                service="agentlego server",
                what="POST",
                timeout=httpx2.Timeout(1.0, connect=0.5),
                retries=0,
                backoff=0.01,
            )
    # Not a timing: unbounded, the trickle takes 50 s; bounded, about 1 s.
    assert time.monotonic() - start < len(body) * 0.05 / 4  # bound: catches an unbounded read


def test_black_box_trickle_ends_in_time_with_a_report(pytester):
    reply = json.dumps(chat_completion("Final Answer: ok")).encode()
    # One byte a second, as in the issue: the reply alone would take minutes to arrive.
    with HostileServer(trickle(reply, 1.0, headers_too=True)) as server:
        start = time.monotonic()
        result = pytester.runpytest_subprocess(
            SAMPLE_DATA,
            FAST_SIM,
            "--gta-model=openai/x",
            f"--gta-base-url={server.url}",
            "--gta-mode=step,e2e",
            "--gta-ids=0",
            "--gta-timeout=2",
            "--gta-retries=0",
            "--gta-cache=off",
            "--gta-report=r.json",
            timeout=90,
        )
        elapsed = time.monotonic() - start
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    assert "Traceback" not in output
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["outcomes"] == {"passed": 0, "failed": 0, "error": 2, "skipped": 0}
    for case in report["cases"]:
        assert "the whole request took longer than its 2 s timeout" in case["message"]
    # Both cases' requests run at once; pytest, xdist and the similarity model take seconds
    # (more on two busy cores), the reply itself over 300.
    assert elapsed < 2 + 45  # bound: catches a hang (the reply alone would take minutes)


def test_black_box_an_endless_reply_is_a_failed_case_with_a_report(pytester):
    with HostileServer(stream_forever(prefix=b'{"choices": [{"message": {"content": "')) as s:
        result = pytester.runpytest_subprocess(
            SAMPLE_DATA,
            FAST_SIM,
            "--gta-model=openai/x",
            f"--gta-base-url={s.url}",
            "--gta-mode=step,e2e",
            "--gta-ids=0",
            "--gta-max-reply-bytes=64KiB",
            "--gta-max-turns=2",
            "--gta-cache=off",
            "--gta-report=r.json",
            timeout=60,
        )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["outcomes"] == {"passed": 0, "failed": 2, "error": 0, "skipped": 0}
    for case in report["cases"]:
        assert case["replies"]
        assert all("larger than 64 KiB (--gta-max-reply-bytes)" in r for r in case["replies"])
    assert report["settings"]["generation"]["max_reply_bytes"] == LIMIT


# -- item 9: numeric options have ranges, checked before anything is built -------------------------

NUMERIC = {spec.flag: spec for spec in OPTIONS if spec.flag in RANGES}
ABSURD = ["-1", "nan", "NaN", "inf", "-inf", "1e308", str(10**30), "9" * 5000, "", " ", "x"]


def test_every_ranged_option_is_an_option():
    assert set(NUMERIC) == set(RANGES)


def in_range(flag: str, value: Any) -> bool:
    low, high = RANGES[flag]
    if flag == "--gta-shard":
        return 1 <= value.index <= value.total <= high
    numbers = value if isinstance(value, tuple) else (value,)
    return all(math.isfinite(n) and low <= n <= high for n in numbers)


def check_value(flag: str, text: str) -> None:
    """``text`` parses to a value in range, or is a usage error naming the flag and range."""
    spec = NUMERIC[flag]
    tracemalloc.start()
    try:
        value = spec.parse(text)
    except pytest.UsageError as exc:
        message = str(exc)
        assert message.startswith(f"{flag}="), message
        assert len(message) < 400
        if "allowed:" not in message:  # not a number at all, or K > N: the hint says the form
            assert "give" in message
    else:
        assert in_range(flag, value), (flag, text, value)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 2**20  # nothing is built per unit of the value


@pytest.mark.parametrize("flag", sorted(RANGES))
@pytest.mark.parametrize("text", ABSURD)
def test_absurd_numbers_are_usage_errors(flag, text):
    if flag == "--gta-shard":
        text = f"1/{text}"
    elif flag == "--gta-price":
        text = f"{text},1"
    with pytest.raises(pytest.UsageError, match=f"^{flag}="):
        NUMERIC[flag].parse(text)


@pytest.mark.parametrize("flag", sorted(RANGES))
def test_range_ends_are_accepted_and_one_past_refused(flag):
    low, high = RANGES[flag]
    integer = float(low).is_integer() and float(high).is_integer() and flag != "--gta-timeout"

    def form(n: float) -> str:
        text = str(int(n)) if integer and flag != "--gta-report-html-max-mb" else repr(float(n))
        if flag == "--gta-shard":
            return f"1/{text}"
        return f"{text},{text}" if flag == "--gta-price" else text

    for end in (low, high):
        assert in_range(flag, NUMERIC[flag].parse(form(end)))
    step = 1 if integer else max(abs(high) * 1e-6, 1e-9)
    with pytest.raises(pytest.UsageError, match=r"\(allowed: "):
        NUMERIC[flag].parse(form(high + step))


numbers = st.one_of(
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=30),
    st.sampled_from(ABSURD),
)


@settings(max_examples=60, deadline=None)
@given(flag=st.sampled_from(sorted(RANGES)), text=numbers, other=numbers)
def test_any_text_is_a_setting_in_range_or_a_usage_error(flag, text, other):
    if flag in ("--gta-shard", "--gta-price"):
        text = f"{text}{'/' if flag == '--gta-shard' else ','}{other}"
    check_value(flag, text)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--gta-shard=1/99999999999", "--gta-shard=1/99999999999: *(allowed: 1 to 100,000)"),
        ("--gta-shard=1/100000000", "--gta-shard=1/100000000: *(allowed: 1 to 100,000)"),
        ("--gta-epochs=100000000", "--gta-epochs=100000000: *(allowed: 1 to 1,000)"),
        ("--gta-timeout=1e308", "--gta-timeout=1e308: *(allowed: 0.001 to 86,400)"),
        ("--gta-seed=-1", "--gta-seed=-1: *(allowed: 0 to 2,147,483,647)"),
        ("--gta-price=inf,1", "--gta-price=inf: *(allowed: 0 to 1,000,000)"),
        ("--gta-max-reply-bytes=0", "--gta-max-reply-bytes=0: *(allowed: 1,024 to 1,073,741,824)"),
        (f"--gta-max-turns={10**30}", "--gta-max-turns=1000000000000000000000000000000: *"),
    ],
)
def test_black_box_absurd_numbers_exit_4_naming_the_option(pytester, option, message):
    start = time.monotonic()
    result = pytester.runpytest("--gta-model=oracle", SAMPLE_DATA, option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert time.monotonic() - start < 30  # bound: catches a hang on an absurd number


def test_an_ini_value_out_of_range_names_the_ini_key(pytester):
    pytester.makeini("[pytest]\ngta_epochs = 1e9\n")
    result = pytester.runpytest("--gta-model=oracle", SAMPLE_DATA)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option gta_epochs: --gta-epochs=1e9: give how many*"])


@pytest.mark.slow  # 5 s in a full run: slow by cost (issue 39)
def test_many_shards_cost_nothing_per_shard(pytester):
    """The split builds one bucket per case at most, whatever N (the cause of the OOM)."""
    pytester.makepyfile(test_x="def test_x(): pass")
    items = pytester.getitems("def test_a(): pass\ndef test_b(): pass")
    tracemalloc.start()
    kept, dropped, selection = shard_items(items, Shard(7, 10**11))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 2**20
    assert (kept, len(dropped), selection.cases) == ([], 2, ())


@pytest.mark.parametrize(
    ("text", "size"),
    [("8MiB", 8 * 2**20), ("8388608", 8 * 2**20), ("512 KiB", 2**19), ("1GiB", 2**30)],
)
def test_max_reply_bytes_takes_binary_units(text, size):
    assert parse_max_reply_bytes(text) == size


def test_the_default_reply_limit_is_8_mib():
    assert DEFAULT_MAX_REPLY_BYTES == 8 * 2**20
    assert GenerationSettings().max_reply_bytes == DEFAULT_MAX_REPLY_BYTES


# -- item 13: a malformed URL is a usage error naming where it came from ---------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--gta-model=openai/x", "--gta-base-url=http://[::1"],
            "ERROR: --gta-base-url=http://[::1: not a URL (Invalid IPv6 URL); give the endpoint's*",
        ),
        (
            ["--gta-model=oracle", "--gta-tools=agentlego=http://[::1", "--gta-mode=e2e"],
            "ERROR: --gta-tools=agentlego=http://[::1: not a URL (Invalid IPv6 URL); give*16180",
        ),
        (
            ["--gta-model=openai/x", "--gta-base-url=http://host:99999/v1"],
            "ERROR: --gta-base-url=http://host:99999/v1: not a URL (Port out of range*",
        ),
        (
            ["--gta-model=openai/x", "--gta-base-url=http:///v1"],
            "ERROR: --gta-base-url=http:///v1: the URL names no host*",
        ),
        (
            ["--gta-model=openai/x", "--gta-base-url=ftp://host/v1"],
            "ERROR: --gta-base-url=ftp://host/v1: give the endpoint's http(s) URL*",
        ),
    ],
    ids=["base-url-ipv6", "agentlego-ipv6", "port", "no-host", "scheme"],
)
def test_black_box_a_malformed_url_exits_4_naming_the_option(pytester, args, message):
    result = pytester.runpytest(SAMPLE_DATA, FAST_SIM, *args)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert "INTERNALERROR" not in output
    result.stderr.fnmatch_lines([message])


def test_a_malformed_base_url_in_the_environment_names_the_variable(sample_dataset, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://[::1")
    context = ModelContext(sample_dataset, ("e2e",), Path.cwd())
    with pytest.raises(GtaUsageError, match=r"^OPENAI_BASE_URL=http://\[::1: not a URL"):
        make_model("openai/x", context)


urls = st.one_of(
    st.text(max_size=40),
    st.builds(
        "{}://{}{}{}".format,
        st.sampled_from(["http", "https", "ftp", "", "HTTP"]),
        st.text(alphabet="[]:@.%/ab1-_ \t\x00é", max_size=12),
        st.sampled_from(["", ":80", ":0", ":99999", ":-1", ":x", "]"]),
        st.text(alphabet="/?#[]@ a%", max_size=8),
    ),
)


@settings(max_examples=200, deadline=None)
@given(text=urls)
def test_any_url_text_is_a_usable_url_or_a_usage_error(text):
    try:
        url = parse_url(text)
    except pytest.UsageError as exc:
        message = str(exc)
    else:
        message = ""
    if message:
        assert message.startswith("--gta-base-url=")
        return
    parsed = httpx2.URL(url)  # what the SDK does with it: never an InvalidURL
    assert parsed.scheme in ("http", "https")
    assert parsed.host
    assert check_url(url, "x") == url


def test_reply_limit_error_is_found_behind_sdk_wrappers():
    from pytest_gta.endpoint import reply_limit_of

    inner = ReplyTooLarge("too big", LIMIT)
    outer = RuntimeError("wrapped, as an SDK wraps what its client raised")
    outer.__cause__ = inner
    assert reply_limit_of(outer) is inner
    assert reply_limit_of(ValueError("x")) is None


def test_docs_list_every_range():
    text = (Path(__file__).parent.parent / "docs" / "options.md").read_text()
    rows = dict(re.findall(r"^\| `(--gta-[a-z-]+)` \| (.+) \|$", text, re.M))
    for flag, (low, high) in RANGES.items():
        if flag == "--gta-shard":
            assert f"N <= {int(high):,}" in rows[flag]
            continue
        shown = [f"{int(n):,}" if float(n).is_integer() else f"{n:g}" for n in (low, high)]
        assert rows[flag].startswith(f"{shown[0]} to {shown[1]}"), (flag, rows[flag])


def test_merging_a_shard_of_an_absurd_split_costs_nothing_per_shard():
    from types import SimpleNamespace

    from pytest_gta.report.merge import coverage_warnings

    shard = SimpleNamespace(index=1, total=10**11, spec="1/100000000000", cases=[])
    report = SimpleNamespace(
        report=SimpleNamespace(shard=shard), cases=[], label="shard 1/100000000000", name="r"
    )
    tracemalloc.start()
    (warning,) = coverage_warnings([report])  # type: ignore[list-item]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 2**20
    assert warning.startswith("shard(s) 2/100000000000, 3/100000000000, ")
    assert " and 99,999,999,979 more not given to --gta-merge" in warning
