"""What identifies a run (``--gta-label``, the report's ``label``, ``identity``), its model time.

Black-box runs on the bundled sample: the label given and made up (with a model and with an
agent under test), the git commit of a real repository made in the pytester directory (clean,
then dirty after an edit, none outside a repository), the dates, and ``gta_model_s`` against a
real OpenAI-compatible server on 127.0.0.1 that waits 0.2 s before each reply. Then the merge of
shards, the reader of older reports (:func:`identity_of`) and hostile identities.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gta.errors import GtaUsageError
from pytest_gta.options.report import parse_label
from pytest_gta.provenance import git_state, label_problem, parse_utc
from pytest_gta.results.io import parse_report
from pytest_gta.results.migrate import default_label
from tests.helpers.gta_run import FAST_SIM, ORACLE, SAMPLE_DATA, XDIST, GtaRun, gta, gta_process
from tests.helpers.oracle_server import OracleServer
from tests.helpers.paths import HELPERS
from tests.helpers.references import AGENT_ENV
from tests.test_gates import JSON, write_predictions

AGENTS = HELPERS / "gta_agents.py"
#: The oracle on the sample, end to end.
BASE = (ORACLE, SAMPLE_DATA, FAST_SIM)
#: The smallest real run: one objective query (no similarity model needed).
ONE = (*BASE, "--gta-ids=0")
#: What every OpenAI-compatible server here waits before each reply.
LATENCY = 0.2
IDENTITY_KEYS = {
    "label",
    "label_given",
    "model",
    "protocol",
    "agent",
    "git",
    "started_at",
    "finished_at",
    "dataset_sha256",
    "pytest_gta",
}


def git(cwd: Path, *args: str) -> str:
    """``git *args`` in ``cwd`` as a user would run it (no inherited ``GIT_*`` variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.org",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.org",
    )
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def make_repository(path: Path) -> str:
    """A git repository at ``path`` with one commit on branch ``trunk``; its commit."""
    git(path, "init", "-q", "-b", "trunk")
    (path / "tracked.txt").write_text("one\n")
    git(path, "add", "tracked.txt")
    git(path, "commit", "-q", "-m", "first")
    return git(path, "rev-parse", "HEAD")


def utc(text: str) -> datetime:
    parsed = parse_utc(text)
    assert parsed is not None, text
    assert parsed.utcoffset() == timezone.utc.utcoffset(None)
    assert text.endswith("Z"), text
    assert len(text) == len("2026-02-01T03:04:05Z"), text
    return parsed


def properties_of(xml_text: str) -> dict[str, str]:
    suite = ET.fromstring(xml_text).find("testsuite")
    assert suite is not None
    holder = suite.find("properties")
    assert holder is not None
    return {p.get("name", ""): p.get("value", "") for p in holder.iter("property")}


# -- label and identity ----------------------------------------------------------------------


def test_given_label_in_the_report_terminal_junit_and_html(pytester):
    run = gta(
        pytester,
        *ONE,
        "--gta-label=ckpt-1200 nightly",
        "--junitxml=junit.xml",
        "--gta-report-html=report.html",
    )
    assert run.ret == 0, run.output[-3000:]
    report = run.report
    identity = report["identity"]
    assert set(identity) == IDENTITY_KEYS
    assert report["label"] == identity["label"] == "ckpt-1200 nightly"
    assert identity["label_given"] is True
    assert identity["model"] == report["model"] == "oracle"
    assert identity["protocol"] == "react"
    assert identity["agent"] is None
    assert identity["dataset_sha256"] == report["dataset"]["sha256"]
    assert identity["pytest_gta"] == report["settings"]["pytest_gta"]
    assert utc(identity["started_at"]) <= utc(identity["finished_at"])
    run.result.stdout.fnmatch_lines(
        ["model: oracle  protocol: react*", "label: ckpt-1200 nightly*"]
    )
    suite = properties_of((pytester.path / "junit.xml").read_text())
    assert suite["gta_label"] == "ckpt-1200 nightly"
    page = (pytester.path / "report.html").read_text()
    assert "<title>GTA report: ckpt-1200 nightly</title>" in page
    assert "<dt>label</dt><dd>ckpt-1200 nightly</dd>" in page
    assert f"<dt>started</dt><dd>{identity['started_at']}</dd>" in page


def test_default_label_with_a_model(pytester):
    run = gta(pytester, *ONE)
    assert run.ret == 0, run.output[-3000:]
    report = run.report
    assert report["label"] == "oracle [react]" == default_label("oracle", "react")
    assert report["identity"]["label_given"] is False
    # A made-up label says nothing the model line does not: it is not shown again.
    assert "label:" not in run.result.stdout.str()


def test_default_label_with_an_agent(pytester):
    spec = f"{AGENTS}:replay"
    run = gta(pytester, *ONE, "--gta-tools=replay", f"--gta-agent={spec}", AGENT_ENV)
    assert run.ret == 0, run.output[-3000:]
    identity = run.report["identity"]
    assert run.report["label"] == identity["label"] == f"oracle [agent {spec}]"
    assert identity["agent"] == spec == run.report["settings"]["agent"]["name"]
    assert identity["protocol"] is None  # the agent talks to its model its own way
    # No request reached the harness's model: the agent's model time is unknown, not zero.
    assert "gta_model_s" not in run.report["cases"][0]["properties"]


def test_label_given_in_the_ini_file(pytester):
    pytester.makeini("[pytest]\ngta_label = from the ini\n")
    run = gta(pytester, *ONE)
    assert run.ret == 0, run.output[-3000:]
    assert run.report["label"] == "from the ini"
    assert run.report["identity"]["label_given"] is True


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "cannot be empty"),
        ("  ", "cannot be empty"),
        ("a\tb", "U+0009"),
        ("x\x1b[31m", "U+001B"),
    ],
)
def test_bad_label_is_a_usage_error_naming_the_option(pytester, value, problem):
    run = gta(pytester, *ONE, f"--gta-label={value}")
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gta-label=" in run.output
    assert problem in run.output


def test_label_parser():
    assert parse_label("  ckpt 7  ") == "ckpt 7"
    assert parse_label("Qwen2.5 · ReAct ✓") == "Qwen2.5 · ReAct ✓"
    for hidden in ("\u202e", "\u2066", "\u2028", "\x85", "\x00"):
        with pytest.raises(pytest.UsageError, match="--gta-label"):
            parse_label(f"run{hidden}1")


# -- git ----------------------------------------------------------------------------------------


def test_commit_of_the_rootdir_repository_clean_then_dirty(pytester, tmp_path, monkeypatch):
    commit = make_repository(pytester.path)
    # A GIT_DIR left in the environment (a hook, a wrapper) must not change what is recorded.
    other = tmp_path / "other"
    other.mkdir()
    make_repository(other)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    run = gta(pytester, *ONE)
    assert run.ret == 0, run.output[-3000:]
    found = run.report["identity"]["git"]
    assert found == {
        "commit": commit,
        "short": git(pytester.path, "rev-parse", "--short", "HEAD"),
        "dirty": False,  # the run's own files (the report) are untracked
        "branch": "trunk",
    }
    run.result.stdout.fnmatch_lines([f"commit: {found['short']} on trunk  started: *"])

    (pytester.path / "tracked.txt").write_text("two\n")
    again = gta(pytester, *ONE, "--junitxml=junit.xml")
    assert again.report["identity"]["git"]["dirty"] is True
    assert again.report["identity"]["git"]["commit"] == commit
    assert "dirty" in again.result.stdout.str()
    suite = properties_of((pytester.path / "junit.xml").read_text())
    assert suite["gta_commit"] == commit
    assert suite["gta_commit_dirty"] == "true"


def test_detached_head_has_no_branch(tmp_path):
    commit = make_repository(tmp_path)
    git(tmp_path, "checkout", "-q", "--detach")
    (tmp_path / "sub").mkdir()
    state = git_state(tmp_path / "sub")  # found from a directory inside the repository
    assert state is not None
    assert (state.commit, state.branch, state.dirty) == (commit, None, False)


def test_no_repository_no_git_state(pytester):
    assert git_state(pytester.path) is None, "the pytester directory is inside a repository"
    run = gta(pytester, *ONE)
    assert run.report["identity"]["git"] is None
    assert "commit:" not in run.result.stdout.str()


def test_without_git_or_with_a_hanging_one(tmp_path, monkeypatch):
    make_repository(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    assert git_state(tmp_path) is None  # no git on the PATH
    hanging = bin_dir / "git"
    hanging.write_text("#!/bin/sh\nexec /bin/sleep 30\n")
    hanging.chmod(0o755)
    started = datetime.now(timezone.utc)
    assert git_state(tmp_path, timeout=0.3) is None
    assert (datetime.now(timezone.utc) - started).total_seconds() < 10  # bound: catches a hang


# -- model time ----------------------------------------------------------------------------------


@pytest.fixture
def slow_model(sample_dataset: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A perfect model behind a real OpenAI-compatible server, 0.2 s per reply."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-identity-test")
    with OracleServer(sample_dataset, latency=LATENCY) as server:
        yield server


def model_run(pytester: pytest.Pytester, server: OracleServer, *args: str) -> GtaRun:
    run = gta(
        pytester,
        SAMPLE_DATA,
        FAST_SIM,
        "--gta-model=openai/oracle-http",
        f"--gta-base-url={server.url}",
        "--gta-mode=step,e2e",
        "--gta-ids=0,1",
        *args,
    )
    assert run.ret == 0, run.output[-3000:]
    return run


@pytest.mark.parametrize("concurrency", ["1", "4"], ids=["serial", "pool"])
def test_model_time_of_each_case(pytester, slow_model, concurrency):
    run = model_run(pytester, slow_model, "--gta-cache=off", f"--gta-concurrency={concurrency}")
    report = run.report
    total = 0.0
    for case in report["cases"]:
        props = case["properties"]
        calls = props["gta_model_calls"]
        assert calls >= 1
        # Each call waited at least the server's latency; the case's time is theirs, not the
        # session's clock: far less than the ceiling, whatever the machine.
        assert props["gta_model_s"] > 0.15 * calls, case["id"]  # bound: a floor (0.2 s a reply)
        assert props["gta_model_s"] < (LATENCY + 5.0) * calls, case["id"]  # bound: a ceiling
        total += props["gta_model_s"]
    assert report["usage"]["model_s"] == pytest.approx(total, abs=1e-5)
    assert report["usage"]["calls"] == slow_model.calls


def test_replies_from_the_cache_make_no_request_and_keep_no_time(pytester, slow_model):
    cache = pytester.path / "responses"
    options = ("--gta-concurrency=1", f"--gta-cache-dir={cache}")
    model_run(pytester, slow_model, *options)
    paid = slow_model.calls
    # What the cache keeps is the reply, not how long the model took to give it: a replay's
    # model time is its own (the lookup's), never the paid call's 0.2 s again.
    entries = [json.loads(path.read_text()) for path in cache.rglob("*.json")]
    assert entries
    assert all(set(entry["output"]) == {"text", "tool_calls", "usage"} for entry in entries)
    again = model_run(pytester, slow_model, *options).report
    assert slow_model.calls == paid  # no request reached the server
    for case in again["cases"]:
        props = case["properties"]
        assert props["gta_model_calls"] == 0
        assert props["gta_cached_calls"] >= 1
        assert props["gta_model_s"] >= 0  # counted, as the lookups' own time


def test_replayed_predictions_have_no_model_time(pytester, tmp_path, sample_dataset):
    predictions = write_predictions(tmp_path / "oc", sample_dataset, bad=False)
    model = f"--gta-model=opencompass:{predictions}"
    run = gta(pytester, SAMPLE_DATA, FAST_SIM, model, "--gta-ids=0,1")
    assert run.ret == 0, run.output[-3000:]
    report = run.report
    assert all("gta_model_s" not in c["properties"] for c in report["cases"])
    assert report["usage"]["model_s"] == 0.0
    assert report["label"] == default_label(report["model"], report["protocol"])


# -- xdist and --gta-merge ---------------------------------------------------------------------


def test_xdist_controller_writes_the_same_identity(pytester):
    make_repository(pytester.path)
    serial = gta(pytester, *BASE, "--gta-ids=0,1", "--gta-label=L", report="serial.json").report
    workers = gta(pytester, *BASE, "--gta-ids=0,1", "--gta-label=L", *XDIST, report="xdist.json")
    assert workers.ret == 0, workers.output[-3000:]
    parallel = workers.report
    assert parallel["label"] == serial["label"] == "L"
    same = {k: v for k, v in serial["identity"].items() if not k.endswith("_at")}
    assert {k: v for k, v in parallel["identity"].items() if not k.endswith("_at")} == same
    assert parallel["identity"]["git"] is not None
    assert all("gta_model_s" in c["properties"] for c in parallel["cases"])


def test_merge_keeps_the_first_identity_and_spans_the_dates(pytester):
    make_repository(pytester.path)
    for k in (1, 2):
        shard = gta(
            pytester,
            *BASE,
            "--gta-ids=0,1",
            "--gta-label=nightly",
            f"--gta-shard={k}/2",
            report=f"s{k}.json",
        )
        assert shard.ret == 0, shard.output[-3000:]
    # Dates set by hand, so that the earliest start and the latest finish are in different files.
    dates = {
        "s1.json": ("2026-02-01T03:00:00Z", "2026-02-01T03:05:00Z"),
        "s2.json": ("2026-02-01T02:59:00Z", "2026-02-01T03:04:00Z"),
    }
    shards = {}
    for name, (start, end) in dates.items():
        path = pytester.path / name
        data = json.loads(path.read_text())
        data["identity"]["started_at"], data["identity"]["finished_at"] = start, end
        path.write_text(json.dumps(data))
        shards[name] = data
    merged = gta(pytester, "--gta-merge", "s1.json", "s2.json", "--junitxml=m.xml", report="m.json")
    assert merged.ret == 0, merged.output[-3000:]
    report = merged.report
    identity = report["identity"]
    first = shards["s1.json"]["identity"]
    assert report["label"] == "nightly"
    assert {k: v for k, v in identity.items() if not k.endswith("_at")} == {
        k: v for k, v in first.items() if not k.endswith("_at")
    }
    assert (identity["started_at"], identity["finished_at"]) == (
        "2026-02-01T02:59:00Z",
        "2026-02-01T03:05:00Z",
    )
    model_s = sum(d["usage"]["model_s"] for d in shards.values())
    assert report["usage"]["model_s"] == pytest.approx(model_s, abs=1e-5)
    assert properties_of((pytester.path / "m.xml").read_text())["gta_label"] == "nightly"
    assert not [n for n in report["notes"] if "different labels" in n]


# -- reading identities ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A report as this version writes it, with an agent (its identity has no protocol)."""
    cwd = tmp_path_factory.mktemp("written")
    return gta_process(
        cwd, *ONE, "--gta-tools=replay", f"--gta-agent={AGENTS}:replay", AGENT_ENV
    ).report


def old(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` as a version before identities wrote it."""
    data = copy.deepcopy(report)
    del data["label"], data["identity"], data["usage"]["model_s"]
    for case in data["cases"]:
        case["properties"].pop("gta_model_s", None)
    return data


def identity_of(report: Any) -> dict[str, Any]:
    """What identifies the run of ``report`` (a loaded JSON report), as JSON; no file named."""
    identity: dict[str, Any] = parse_report("", report, "").report.run_identity().to_json_value()
    return identity


def test_identity_of_an_older_report(written):
    data = old(written)
    parsed = parse_report("old.json", data)  # older reports still load
    assert len(parsed.cases) == len(written["cases"])
    identity = identity_of(data)
    assert identity == {
        **written["identity"],
        "git": None,
        "started_at": None,
        "finished_at": None,
    }
    assert identity_of(written) == written["identity"]
    # A version before identities with a label a hook gave it.
    assert identity_of({**data, "label": "mine"})["label_given"] is True


def test_identity_errors_name_the_field(written):
    cases = [
        (("identity", "git", "commit"), "abc", "identity.git.commit is 'abc': not a git commit"),
        (("identity", "git", "short"), "zzzz", "short 'zzzz' is not an abbreviation of the"),
        (("identity", "started_at"), "yesterday", "identity.started_at is 'yesterday': not an"),
        (
            ("identity", "started_at"),
            "2026-02-01T03:04:05",
            "not an ISO 8601 date with a time zone",
        ),
        (("identity", "label_given"), "yes", "identity.label_given is 'yes': Input should be a"),
        (("identity", "label"), "a\nb", "identity.label is 'a\\nb': a label cannot hold"),
        (("identity",), [], "identity is []: Input should be a valid dictionary"),
        (("label",), 7, "label is 7: Input should be a valid string"),
    ]
    report = copy.deepcopy(written)
    report["identity"]["git"] = {
        "commit": "a" * 40,
        "short": "aaaaaaa",
        "dirty": True,
        "branch": None,
    }
    identity_of(report)
    for path, value, message in cases:
        data = copy.deepcopy(report)
        holder = data
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = value
        with pytest.raises(GtaUsageError) as caught:
            identity_of(data)
        assert message in str(caught.value), str(caught.value)
        # The file reader names the file and the same field.
        with pytest.raises(GtaUsageError, match=r"^run\.json: "):
            parse_report("run.json", data)
    bad_seconds = copy.deepcopy(report)
    bad_seconds["usage"]["model_s"] = -1
    with pytest.raises(GtaUsageError, match=r"usage\.model_s is -1: Input should be greater"):
        parse_report("run.json", bad_seconds)


IDENTITY_FIELDS = st.sampled_from(
    sorted(IDENTITY_KEYS | {"git.commit", "git.short", "git.dirty", "git.branch"})
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_hostile_identity_is_a_usage_error_or_read(written, data):
    report = copy.deepcopy(written)
    report["identity"]["git"] = {
        "commit": "b" * 40,
        "short": "bbbbbbb",
        "dirty": False,
        "branch": "x",
    }
    for _ in range(data.draw(st.integers(1, 3))):
        field = data.draw(IDENTITY_FIELDS)
        holder = report["identity"]
        *parents, key = field.split(".")
        for parent in parents:
            holder = holder[parent] if isinstance(holder.get(parent), dict) else {}
        if data.draw(st.booleans()):
            holder.pop(key, None)
        else:
            holder[key] = data.draw(JSON)
    if data.draw(st.booleans()):
        report["identity"] = data.draw(JSON)
    try:
        identity = identity_of(report)
    except GtaUsageError as exc:
        text = str(exc)
        assert text.startswith(("identity", "label")), text
        assert "Traceback" not in text
        return
    assert set(identity) == IDENTITY_KEYS
    assert isinstance(identity["label"], str)
    assert label_problem(identity["label"]) is None
    assert identity["git"] is None or len(identity["git"]["commit"]) in (40, 64)
    for key in ("started_at", "finished_at"):
        assert identity[key] is None or parse_utc(identity[key]) is not None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_labels_are_one_visible_line(text):
    problem = label_problem(text)
    if problem is not None:
        with pytest.raises(pytest.UsageError, match=r"^--gta-label="):
            parse_label(text)
        return
    parsed = parse_label(text)
    assert parsed == text.strip()
    assert parsed
    assert not any(c in parsed for c in "\n\r\t\x1b\x00\u202e")
