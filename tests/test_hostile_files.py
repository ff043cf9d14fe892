"""Hostile files around a run: outputs at odd paths, FIFOs where files belong (issue 23).

Outputs the user names (``--gta-report``, ``--gta-report-md``, ``--gta-report-html``) are written
where a shell redirection would write them: through symlinks, in place into devices, FIFOs and
the run's own stdout, and never by renaming a new file over a link or a device node. A write
that fails (``/dev/full``) is an error naming the option, with a non-zero exit status.

Files read from outside (``dataset.json``, ``toolmeta.json``, prediction chunks, cache and
cassette entries) must be regular files: a FIFO in their place used to block the run forever.
Each FIFO test has a watchdog that unblocks a hung reader after :data:`HANG_S` seconds, so a
regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import stat
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gta.errors import GtaUsageError
from pytest_gta.files import write_output
from pytest_gta.models.cache import MAX_TOKENS, SCHEMA, CacheEntryWarning, ResponseCache
from pytest_gta.models.opencompass import OpenCompassPredictions
from pytest_gta.types import ModelOutput, ToolCall, Usage
from tests.helpers.gta_run import BOTH_MODES, FAST_SIM, NO_HYPOTHESIS, SAMPLE_DATA, gta_process
from tests.helpers.gta_run import ORACLE as ORACLE_MODEL
from tests.helpers.paths import SAMPLE
from tests.test_opencompass import e2e_records
from tests.test_shard import _paths as tree_paths

#: A reader blocked on a FIFO this long is a hang: the watchdog opens the FIFO's write end.
HANG_S = 10.0
ORACLE = ["--gta-model=oracle", "--gta-mode=step", "--gta-limit=2", FAST_SIM, "-p", "no:randomly"]


class Watchdog:
    """Unblocks whoever reads ``fifo`` after :data:`HANG_S` s (a reader sees end of file)."""

    def __init__(self, fifo: Path) -> None:
        self.fifo = fifo
        self.fired = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + HANG_S
        while not self._stop.wait(0.05) and time.monotonic() < deadline:
            pass
        while not self._stop.is_set():
            try:  # succeeds only while a reader has the FIFO open
                os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
                self.fired = True
            except OSError:
                pass
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@contextlib.contextmanager
def fifo_at(path: Path) -> Iterator[Watchdog]:
    """A FIFO at ``path`` (replacing a file there), watched for readers that hang on it."""
    if path.is_file() or path.is_symlink():
        path.unlink()
    os.mkfifo(path)
    dog = Watchdog(path)
    started = time.monotonic()
    try:
        yield dog
    finally:
        dog.stop()
    assert not dog.fired, f"a reader blocked on {path} for {HANG_S} s"
    assert time.monotonic() - started < HANG_S  # bound: catches a reader blocked on the FIFO


class FifoReader:
    """Reads a FIFO in a thread until its writer closes it, as ``cat fifo`` would."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        # Opened now, without blocking, so that a writer finds a reader from the start.
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.data = b""
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if not ready:
                continue
            chunk = os.read(self.fd, 1 << 16)
            if chunk:
                self.data += chunk
            elif self.data:  # the writer closed it (before any writer, reads also see EOF)
                break
            else:
                time.sleep(0.01)
        os.close(self.fd)

    def result(self) -> bytes:
        self._thread.join(60)
        return self.data


def output_text(result: pytest.RunResult) -> str:
    return result.stdout.str() + result.stderr.str()


def assert_clean(result: pytest.RunResult) -> None:
    text = output_text(result)
    assert "Traceback" not in text
    assert "INTERNALERROR" not in text


# ---------------------------------------------------------------------------------------------
# Item 11: outputs at user-given paths


def test_report_through_a_symlink_replaces_the_target_and_keeps_the_link(pytester):
    target = pytester.path / "reports" / "real.json"
    target.parent.mkdir()
    target.write_text("old")
    link = pytester.path / "gta.json"
    link.symlink_to(target)
    dangling = pytester.path / "page.html"
    dangling.symlink_to(pytester.path / "reports" / "new.html")  # its target does not exist yet
    result = pytester.runpytest(*ORACLE, f"--gta-report={link}", f"--gta-report-html={dangling}")
    assert result.ret == 0
    assert link.is_symlink()
    assert dangling.is_symlink()
    assert json.loads(target.read_text())["model"] == "oracle"
    assert (pytester.path / "reports" / "new.html").read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in (pytester.path / "reports").iterdir()) == [
        "new.html",
        "real.json",
    ]  # no temporary file left beside them
    assert_clean(result)


def test_report_through_a_symlink_to_a_fifo_reaches_its_reader(pytester):
    reader = FifoReader(pytester.path / "pipe")
    link = pytester.path / "summary.md"
    link.symlink_to(pytester.path / "pipe")
    result = pytester.runpytest(*ORACLE, f"--gta-report-md={link}")
    assert result.ret == 0
    text = reader.result().decode()
    assert text.startswith("# GTA results")
    assert "## Table 4, step-by-step mode (percent)" in text
    assert link.is_symlink()
    assert stat.S_ISFIFO(os.stat(pytester.path / "pipe").st_mode)
    assert_clean(result)


def test_report_to_a_fifo_nobody_reads_is_an_error_not_a_hang(pytester):
    fifo = pytester.path / "pipe"
    os.mkfifo(fifo)
    started = time.monotonic()
    result = pytester.runpytest(*ORACLE, f"--gta-report={fifo}")
    assert time.monotonic() - started < HANG_S  # bound: catches a reader blocked on the FIFO
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [f"pytest-gta: could not write {fifo} (--gta-report): a FIFO that no process reads;*"]
    )
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert_clean(result)


def test_report_to_dev_null_keeps_the_device(pytester):
    result = pytester.runpytest(*ORACLE, "--gta-report=/dev/null", "--gta-report-md=/dev/null")
    assert result.ret == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    result.stdout.fnmatch_lines(["report written to /dev/null"])
    assert_clean(result)


def test_report_to_dev_full_is_an_error_naming_the_option(pytester):
    result = pytester.runpytest(*ORACLE, "--gta-report=/dev/full", "--gta-report-html=/dev/full")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*GTA results*",
            "pytest-gta: could not write /dev/full (--gta-report): No space left on device;*",
            "pytest-gta: could not write /dev/full (--gta-report-html): No space left on device;*",
        ]
    )
    assert "report written to /dev/full" not in result.stdout.str()
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    assert os.stat("/dev/full").st_rdev == os.makedev(1, 7)
    assert_clean(result)


def test_merge_to_dev_full_is_an_error(pytester):
    shard = pytester.path / "shard.json"
    assert pytester.runpytest(*ORACLE, f"--gta-report={shard}").ret == 0
    result = pytester.runpytest(f"--gta-merge={shard}", SAMPLE_DATA, "--gta-report-md=/dev/full")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["pytest-gta: could not write /dev/full (--gta-report-md): No space left on device"]
    )
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_report_to_the_runs_own_stdout_redirected_to_a_file(tmp_path):
    """``--gta-report-md=/dev/stdout > out.txt``: the report lands between the run's lines.

    Through a link of our own to ``/proc/self/fd/1`` (what ``/dev/stdout`` is), so that a
    regression cannot replace the system's ``/dev/stdout``. Writing through a fresh open of the
    link would start at offset 0 and overwrite what the run had printed.
    """
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    out = tmp_path / "out.txt"
    with out.open("wb") as fh:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *NO_HYPOTHESIS, "-p", "no:cacheprovider", *ORACLE],
            cwd=tmp_path,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
            | {"PYTEST_ADDOPTS": f"--gta-data=sample --gta-report-md={link}"},
            timeout=120,
            check=False,
        )
    text = out.read_text()
    assert done.returncode == 0, text
    assert link.is_symlink()
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if "test session starts" in line)
    # The progress line has no newline yet when the session ends: the report follows on it.
    markdown = next(i for i, line in enumerate(lines) if line.endswith("[100%]# GTA results"))
    tables = next(i for i, line in enumerate(lines) if " GTA results " in line)
    assert header < markdown < tables  # written at session end, before the terminal's tables
    assert "## Outcomes" in lines[markdown:tables]
    assert "2 passed" in lines[-1]


@pytest.mark.parametrize("kind", ["file", "symlink", "dangling"])
def test_write_output_replaces_files_atomically(tmp_path, kind):
    target = tmp_path / "sub" / "out.txt"
    path = target
    if kind != "file":
        path = tmp_path / "link"
        path.symlink_to(target)
    if kind != "dangling":
        target.parent.mkdir()
        target.write_text("old")
    write_output(path, "new")
    assert target.read_text() == "new"
    assert path.is_symlink() == (kind != "file")


def test_write_output_refuses_a_symlink_loop(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        write_output(tmp_path / "a", "x")


# ---------------------------------------------------------------------------------------------
# Item 12: FIFOs where outside files belong


@pytest.mark.parametrize("name", ["dataset.json", "toolmeta.json"])
def test_fifo_in_the_dataset_is_a_usage_error(pytester, name):
    data = pytester.path / "data"
    shutil.copytree(SAMPLE, data)
    with fifo_at(data / name):
        result = pytester.runpytest(*ORACLE, f"--gta-data={data}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*- {name}: is a FIFO, not a regular file"])
    assert_clean(result)


def test_fifo_dataset_for_data_info(pytester):
    data = pytester.path / "data"
    shutil.copytree(SAMPLE, data)
    with fifo_at(data / "dataset.json"):
        result = pytester.runpytest(f"--gta-data={data}", "--gta-data-info")
    assert result.ret != 0
    assert "dataset.json: is a FIFO, not a regular file" in output_text(result)
    assert_clean(result)


def test_fifo_report_to_merge_is_a_usage_error(pytester):
    fifo = pytester.path / "shard.json"
    with fifo_at(fifo):
        result = pytester.runpytest(f"--gta-merge={fifo}", SAMPLE_DATA)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{fifo}: is a FIFO, not a regular file;*"])


def test_fifo_mock_script_is_a_usage_error(pytester):
    fifo = pytester.path / "script.json"
    with fifo_at(fifo):
        result = pytester.runpytest(f"--gta-model=mock:{fifo}", SAMPLE_DATA)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is a FIFO, not a regular file" in output_text(result)
    assert_clean(result)


def test_fifo_cache_entry_is_a_miss_with_a_warning(tmp_path):
    cache = ResponseCache(tmp_path)
    key = ResponseCache.key({"q": 1})
    path = tmp_path / key[:2] / f"{key}.json"
    path.parent.mkdir()
    with fifo_at(path), pytest.warns(CacheEntryWarning, match="is a FIFO"):
        assert cache.get(key) is None
    output = ModelOutput("Final Answer: 4", Usage(3, 1))
    cache.put(key, output, {})  # the fresh answer replaces the FIFO
    assert path.is_file()
    assert cache.get(key) == output


def test_fifo_cassette_entry_is_a_miss(sample_dataset, tmp_path):
    from tool_backends.cassettes import Cassettes, portable_arguments

    cassettes = Cassettes(tmp_path / "cassettes")
    arguments = {"expression": "1+1"}
    portable, hashes = portable_arguments(arguments, sample_dataset, tmp_path)
    entry = (
        tmp_path
        / "cassettes"
        / "Calculator"
        / f"{Cassettes.key('Calculator', portable, hashes)}.json"
    )
    entry.parent.mkdir(parents=True)
    with fifo_at(entry):
        assert cassettes.lookup("Calculator", arguments, sample_dataset, tmp_path) is None


# ---------------------------------------------------------------------------------------------
# Item 15a: a chunked prediction directory is read whole or refused


def chunked(directory: Path, dataset: Any, chunks: int = 3) -> list[Path]:
    """``gta_bench_0.json``, ... holding the sample's end-to-end records, numbered per chunk."""
    records = e2e_records(dataset)
    size = -(-len(records) // chunks)
    paths = []
    for n in range(chunks):
        part = records[n * size : (n + 1) * size]
        path = directory / f"gta_bench_{n}.json"
        path.write_text(json.dumps({str(i): r for i, r in enumerate(part)}))
        paths.append(path)
    return paths


def test_all_chunks_are_read(tmp_path, sample_dataset):
    paths = chunked(tmp_path, sample_dataset)
    source = OpenCompassPredictions(tmp_path, sample_dataset)
    assert source.files == paths
    assert len(source.entries) == len(sample_dataset)


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink-to-directory"])
def test_chunk_that_is_not_a_file_is_a_usage_error(tmp_path, sample_dataset, kind):
    chunk = chunked(tmp_path, sample_dataset)[1]
    chunk.unlink()
    if kind == "directory":
        chunk.mkdir()
    elif kind == "fifo":
        os.mkfifo(chunk)
    else:
        chunk.symlink_to(tmp_path)
    expected = "a FIFO" if kind == "fifo" else "a directory"
    with pytest.raises(GtaUsageError) as info:
        OpenCompassPredictions(tmp_path, sample_dataset)
    assert str(info.value) == (
        f"--gta-model=opencompass:{tmp_path}: gta_bench_1.json is {expected}, not a prediction "
        "file; the chunks gta_bench_0.json, gta_bench_1.json, ... must all be files"
    )


def test_missing_chunk_is_a_usage_error(tmp_path, sample_dataset):
    chunked(tmp_path, sample_dataset)[1].unlink()
    with pytest.raises(GtaUsageError, match=r"gta_bench_1\.json is missing but gta_bench_2\.json"):
        OpenCompassPredictions(tmp_path, sample_dataset)


def test_single_prediction_file_that_is_a_fifo(tmp_path, sample_dataset):
    with fifo_at(tmp_path / "gta_bench.json"):
        with pytest.raises(GtaUsageError, match=r"gta_bench.json is a FIFO"):
            OpenCompassPredictions(tmp_path, sample_dataset)
        with pytest.raises(GtaUsageError, match=r"is a FIFO, not a prediction"):
            OpenCompassPredictions(tmp_path / "gta_bench.json", sample_dataset)


def test_chunk_fifo_black_box(pytester, sample_dataset):
    chunk = chunked(pytester.path, sample_dataset)[1]
    chunk.unlink()
    with fifo_at(chunk):
        result = pytester.runpytest(
            SAMPLE_DATA, f"--gta-model=opencompass:{pytester.path}", "--gta-mode=e2e"
        )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gta_bench_1.json is a FIFO, not a prediction*"])
    assert_clean(result)


# ---------------------------------------------------------------------------------------------
# Item 15b: a cache entry is used only when it is the entry of this request


def good_entry(key: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "key": key,
        "model": "m",
        "output": {
            "text": "Final Answer: 4",
            "tool_calls": [{"id": "c1", "name": "OCR", "arguments": {"image": "x"}}],
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    }


GOOD_OUTPUT = ModelOutput("Final Answer: 4", Usage(3, 1), (ToolCall("OCR", {"image": "x"}, "c1"),))


def cache_with(tmp_path: Path, entry: Any) -> tuple[ResponseCache, str, Path]:
    cache = ResponseCache(tmp_path)
    key = ResponseCache.key({"q": 1})
    path = tmp_path / key[:2] / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry))
    return cache, key, path


def test_good_entry_is_a_hit(tmp_path):
    cache, key, _ = cache_with(tmp_path, {})
    cache_with(tmp_path, good_entry(key))
    assert cache.get(key) == GOOD_OUTPUT


BAD = {
    "other-key": (lambda e: e.update(key="0" * 64), "it is the entry of another request"),
    "no-key": (lambda e: e.pop("key"), "it is the entry of another request"),
    "old-schema": (lambda e: e.update(schema="pytest-gta-response/0"), "schema"),
    "no-schema": (lambda e: e.pop("schema"), "schema None"),
    "negative-input": (lambda e: e["output"]["usage"].update(input_tokens=-5), "token counts"),
    "negative-output": (lambda e: e["output"]["usage"].update(output_tokens=-1), "token counts"),
    "huge-usage": (lambda e: e["output"]["usage"].update(input_tokens=10**400), "token counts"),
    "bool-usage": (lambda e: e["output"]["usage"].update(input_tokens=True), "token counts"),
    "float-usage": (lambda e: e["output"]["usage"].update(output_tokens=1.5), "token counts"),
}


@pytest.mark.parametrize("change", BAD.values(), ids=BAD.keys())
def test_bad_entry_is_a_warned_miss_and_rewritten(tmp_path, change):
    cache, key, path = cache_with(tmp_path, {})
    entry = good_entry(key)
    change[0](entry)
    path.write_text(json.dumps(entry))
    with pytest.warns(CacheEntryWarning) as caught:
        assert cache.get(key) is None
    message = str(caught[0].message)
    assert message.startswith(f"pytest-gta: response cache entry {path} not used (")
    assert change[1] in message
    assert (cache.hits, cache.misses) == (0, 1)
    cache.put(key, GOOD_OUTPUT, {"model": "m"})
    assert cache.get(key) == GOOD_OUTPUT


def _mutations(key: str) -> st.SearchStrategy[Any]:
    """Entries with one node replaced: valid values, wrong types, negative and huge numbers."""
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=10),
        st.just(key),
        st.just(SCHEMA),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )
    paths = [
        ("schema",),
        ("key",),
        ("output",),
        ("output", "text"),
        ("output", "tool_calls"),
        ("output", "tool_calls", 0),
        ("output", "tool_calls", 0, "name"),
        ("output", "tool_calls", 0, "arguments"),
        ("output", "tool_calls", 0, "id"),
        ("output", "usage"),
        ("output", "usage", "input_tokens"),
        ("output", "usage", "output_tokens"),
    ]
    return st.tuples(st.sampled_from(paths), leaves)


def _valid(entry: Any, key: str) -> bool:
    """Whether ``entry`` is what ``put`` writes for ``key`` (the oracle of the property)."""
    if not isinstance(entry, dict) or entry.get("schema") != SCHEMA or entry.get("key") != key:
        return False
    output = entry.get("output")
    if not isinstance(output, dict) or not isinstance(output.get("text"), str):
        return False
    calls, usage = output.get("tool_calls", []), output.get("usage") or {}
    if not isinstance(calls, list) or not isinstance(usage, dict):
        return False
    for call in calls:
        if not (
            isinstance(call, dict)
            and isinstance(call.get("name"), str)
            and isinstance(call.get("arguments"), dict)
            and isinstance(call.get("id", ""), str)
        ):
            return False
    return all(
        usage.get(k) is None or (type(usage.get(k)) is int and 0 <= usage[k] <= MAX_TOKENS)
        for k in ("input_tokens", "output_tokens")
    )


KEY = ResponseCache.key({"q": 1})


@settings(max_examples=150, deadline=None)
@given(edits=st.lists(_mutations(KEY), min_size=1, max_size=3))
def test_property_cache_entries_are_used_only_when_valid(tmp_path_factory, edits):
    entry: Any = good_entry(KEY)
    for path, value in edits:
        node = entry
        for step in path[:-1]:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                node = None
                break
        if isinstance(node, dict) or (isinstance(node, list) and path[-1] == 0 and node):
            node[path[-1]] = value
        elif path == ("output",) or len(path) == 1:
            entry[path[0]] = value
    root = tmp_path_factory.mktemp("cache")
    cache, key, path = cache_with(root, entry)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hit = cache.get(key)
    if _valid(entry, key):
        assert hit is not None
        assert not caught
        assert hit.usage is not None
        assert hit.usage.input_tokens >= 0
        assert hit.usage.output_tokens >= 0
    else:
        assert hit is None
        assert [w.category for w in caught] == [CacheEntryWarning]
        assert str(path) in str(caught[0].message)


# ---------------------------------------------------------------------------------------------
# Item 14: every reader of a report checks what it reads


@pytest.fixture(scope="module")
def oracle_file(tmp_path_factory) -> Path:
    """A real report of both modes (a subprocess: pytester is per test)."""
    where = tmp_path_factory.mktemp("report")
    run = gta_process(
        where, FAST_SIM, ORACLE_MODEL, SAMPLE_DATA, BOTH_MODES, "--gta-limit=6", report="r.json"
    )
    return run.report_path


@pytest.fixture
def oracle_report(oracle_file: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(oracle_file.read_text())
    return report


def _first_call(report: dict[str, Any]) -> dict[str, Any]:
    return next(
        step
        for case in report["cases"]
        for step in case["steps"]
        if isinstance(step, dict) and step.get("tool_calls")
    )


@pytest.mark.parametrize("function", ["OCR", ["OCR", {"image": "x"}], None, 7])
def test_merge_of_a_call_that_is_not_an_object_renders_the_page(pytester, oracle_report, function):
    """A step is kept as recorded (an OpenCompass entry may hold anything where the official
    evaluator reads nothing), so the page shows it rather than crash on it."""
    report = json.loads(json.dumps(oracle_report))
    _first_call(report)["tool_calls"][0]["function"] = function
    (pytester.path / "shard.json").write_text(json.dumps(report))
    result = pytester.runpytest(
        "--gta-merge=shard.json", SAMPLE_DATA, "--gta-report-html=page.html"
    )
    assert result.ret == 0, output_text(result)
    page = (pytester.path / "page.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "plot-calls" in page
    assert_clean(result)


MALFORMED = {
    "modes": (("settings", "modes"), 5, "settings.modes is 5: Input should be a valid list"),
    "mode-name": (("settings", "modes"), ["bogus"], "settings.modes[0] is 'bogus': Input should"),
    "ids": (("settings", "ids"), [1], "settings.ids[0] is 1: Input should be a valid string"),
    "routes": (("settings", "tool_routes"), {"OCR": []}, "settings.tool_routes.OCR is []: "),
    "generation": (("settings", "generation"), [], "settings.generation is []: Input should be"),
    "threshold": (("settings", "sim_threshold"), float("nan"), "settings.sim_threshold is NaN"),
    "board": (("leaderboard",), {"model": "m"}, "leaderboard.board is missing"),
    "board-metric": (
        ("leaderboard",),
        {"model": "m", "board": "b", "ans_acc": "high"},
        "leaderboard.ans_acc is 'high': Input should be a valid integer or a valid number",
    ),
    "timing": (("timings", "main", "cpu_s"), "slow", "timings.main.cpu_s is 'slow': "),
    "cost": (("usage", "cost_usd"), -1.0, "usage.cost_usd is -1.0: Input should be greater"),
    "score": (("cases", 0, "score"), float("inf"), "cases[0].score is Infinity: "),
    "duration": (("cases", 0, "duration"), -3, "cases[0].duration is -3: Input should be greater"),
    "reply": (("cases", 0, "replies"), [{"text": "x"}], 'cases[0].replies[0] is {"text": "x"}: '),
    "backend": (("cases", 0, "backends"), {"OCR": 1}, "cases[0].backends.OCR is 1: Input should"),
    "property": (("cases", 0, "properties", "gta_x"), [1], "cases[0].properties.gta_x is [1]: "),
    "tokens": (
        ("cases", 0, "usage"),
        {"input_tokens": -4, "output_tokens": 0, "calls": 1, "cached_calls": 0},
        "cases[0].usage.input_tokens is -4: Input should be greater than or equal to 0",
    ),
    "primitive": (
        ("cases", 0, "primitives", "steps", 2, "answer"),
        ["f32", 1e308],
        'cases[0].primitives.steps[2].answer is ["f32", 1e+308]: 1e+308 overflows a float32',
    ),
}


@pytest.mark.parametrize("edit", MALFORMED.values(), ids=MALFORMED.keys())
@pytest.mark.parametrize("option", ["--gta-merge", "--gta-baseline"])
def test_malformed_report_field_is_a_usage_error_naming_it(pytester, oracle_report, edit, option):
    path, value, message = edit
    report = json.loads(json.dumps(oracle_report))
    holder = report
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    (pytester.path / "bad.json").write_text(json.dumps(report))
    (pytester.path / "good.json").write_text(json.dumps(oracle_report))
    if option == "--gta-merge":
        result = pytester.runpytest("--gta-merge=bad.json", SAMPLE_DATA)
        label = "bad.json"
    else:
        result = pytester.runpytest("--gta-merge=good.json", SAMPLE_DATA, "--gta-baseline=bad.json")
        label = "--gta-baseline bad.json"
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output_text(result)
    assert f"pytest-gta: {label}: {message}" in result.stderr.str()
    assert_clean(result)


def _deep(levels: int) -> Any:
    value: Any = "deep"
    for _ in range(levels):
        value = [value]
    return value


HOSTILE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, -1, 7, 2**63, -(10**30), 10**300, 1e308, -1e308, 1e-320]),
    st.sampled_from([float("inf"), float("-inf"), float("nan")]),
    st.text(max_size=8),
    st.sampled_from(["step", "e2e", "passed", "error", "<script>alert(1)</script>"]),
    st.lists(st.one_of(st.integers(), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.integers(1, 70).map(_deep),
)


#: One edit: (depth choice, path choice, remove rather than replace, the new value).
EDITS = st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.booleans(), HOSTILE_VALUES),
    min_size=1,
    max_size=3,
)


def _edited(report: dict[str, Any], edits: list[tuple[int, int, bool, Any]]) -> dict[str, Any]:
    """``report`` with nodes replaced or removed, nodes of every depth chosen alike."""
    report = json.loads(json.dumps(report))
    for depth_choice, path_choice, remove, value in edits:
        by_depth: dict[int, list[tuple[Any, ...]]] = {}
        for path in list(tree_paths(report))[1:]:
            by_depth.setdefault(min(len(path), 6), []).append(path)
        if not by_depth:
            break
        depths = sorted(by_depth)
        paths = by_depth[depths[depth_choice % len(depths)]]
        path = paths[path_choice % len(paths)]
        holder: Any = report
        for key in path[:-1]:
            holder = holder[key]
        if remove and isinstance(holder, dict):
            del holder[path[-1]]
        else:
            holder[path[-1]] = value
    return report


def merge_and_render(shard: Path, baseline: Path | None, dataset: Any) -> str:
    """What ``--gta-merge SHARD [--gta-baseline BASELINE]`` does in-process; the HTML page."""
    from pytest_gta.outward import Cleaner
    from pytest_gta.report import merge
    from pytest_gta.report.baseline import comparable_run, compare_run, read_baseline
    from pytest_gta.report.html import render_html
    from pytest_gta.report.junit import junit_xml
    from pytest_gta.report.table import render_markdown, render_text
    from pytest_gta.results.io import load_report
    from pytest_gta.results.report import RunReport

    reports = [load_report(shard, str(shard))]
    notes = merge.coverage_warnings(reports)
    merge.check_same_run(reports)
    report = merge.merge_reports(reports, dataset, notes, samples=20)
    if baseline is not None:
        threshold = report.settings.sim_threshold
        run = comparable_run(
            dataset.sha256,
            report.settings.modes,
            report.protocol,
            sim_model=report.settings.sim_model,
            sim_threshold=None if threshold is None else float(threshold),
        )
        found, differences = read_baseline(str(baseline), str(baseline), run, True)
        compare_run(
            report, dataset, baseline=found, differences=differences, level=0.95, samples=20
        )
    report = RunReport.model_validate(Cleaner().value(report.to_json_value()))
    json.dumps(report.to_json_value(), allow_nan=False)
    render_text(report)
    render_markdown(report)
    junit_xml(report, "pytest")
    return render_html(report, dataset, None)


@settings(max_examples=200, deadline=None)
@given(edits=EDITS, as_baseline=st.booleans())
def test_property_a_mutated_report_merges_or_is_a_usage_error(
    tmp_path_factory, oracle_file, sample_dataset, edits, as_baseline
):
    where = tmp_path_factory.mktemp("mutated")
    good = oracle_file
    bad = where / "bad.json"
    bad.write_text(json.dumps(_edited(json.loads(good.read_text()), edits)))
    shard, baseline = (good, bad) if as_baseline else (bad, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a NumPy overflow is a defect too
        try:
            page, refused = merge_and_render(shard, baseline, sample_dataset), ""
        except GtaUsageError as exc:
            page, refused = "", str(exc)
    if refused:
        assert f"{bad}: " in refused.splitlines()[0]  # names the file (and the field after it)
    else:
        assert page.startswith("<!DOCTYPE html>")


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
def test_session_page_shows_a_recorded_call_that_is_not_an_object(pytester, sample_dataset):
    """The official evaluator never reads a step-mode call paired with a reference answer, so
    such an OpenCompass entry is scored and recorded as it is; the page used to crash on it."""
    from tests.test_opencompass import step_records

    data = step_records(sample_dataset)
    data["0"]["prediction"][2] = {"role": "assistant", "tool_calls": [{"function": "OCR"}]}
    (pytester.path / "gta_bench.json").write_text(json.dumps(data))
    result = pytester.runpytest(
        SAMPLE_DATA,
        f"--gta-model=opencompass:{pytester.path / 'gta_bench.json'}",
        "--gta-mode=step",
        FAST_SIM,
        "--gta-report-html=page.html",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the model's misses, nothing else
    assert (pytester.path / "page.html").read_text().startswith("<!DOCTYPE html>")
    assert_clean(result)
