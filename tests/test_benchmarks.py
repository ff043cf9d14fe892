"""The benchmark scripts under ``benchmarks/`` still run and still measure what they claim.

``benchmarks/concurrency.py`` is run for real (a tiny latency, a few queries, every config
shape: no xdist, ``-n 2``, serial on a subset) and its table and its identical-results check are
read back; its pieces (the generated dataset, the fake model's answers, the ideal) are checked
against the package's own loops and the ``oracle`` model, on the generated set and on the real
release (its calls counted as the script expects them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gta.dataset import Dataset, Query
from pytest_gta.models.oracle import CLOSING_ANSWER, OracleModel, render_reference
from pytest_gta.run import loops
from pytest_gta.types import ModelOutput, ModelRequest, ResultItem, ToolMeta, ToolResult
from pytest_gta.validation import load_dataset
from tests.helpers.optional import require
from tests.helpers.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "concurrency.py"


def load_script(path: Path = SCRIPT, name: str = "gta_concurrency_benchmark") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


bench = load_script()


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = bench.make_dataset(tmp_path_factory.mktemp("data") / "gta", 30)
    return load_dataset(root)


def wire(messages: Any) -> list[dict[str, Any]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def test_generated_dataset_loads_with_distinct_queries(generated: Any) -> None:
    assert [q.qid for q in generated] == [str(n) for n in range(30)]
    assert len({q.text for q in generated}) == 30
    assert not generated.warnings
    # Query 17 is the (17-query) sample's query 0 again, under a new id and text.
    assert generated["17"].text.endswith("[copy 17]")
    assert generated["17"].gt_answer == generated["0"].gt_answer
    assert generated["17"].dialogs[1:] == generated["0"].dialogs[1:]


def test_fake_model_answers_step_prompts_like_the_oracle(generated: Any) -> None:
    model = bench.PerfectModel(generated, latency=0)
    for query in generated:
        for request, gold in loops.step_requests(generated, query):
            assert model.reply(wire(request.messages)) == render_reference(gold)
    assert model.reply([{"role": "user", "content": "a query nobody asked"}]) is None


def drive(
    dataset: Dataset, query: Query, answer: Any
) -> tuple[loops.Episode, list[tuple[str, Any]]]:
    """An end-to-end episode of ``query`` answered by ``answer``, its tools answering "ok"."""
    called = []

    def run_tool(meta: ToolMeta, arguments: dict[str, Any], raw: dict[str, Any]) -> ToolResult:
        called.append((meta.name, arguments))
        return ToolResult((ResultItem("text", "ok"),))

    steps = loops.e2e_episode(dataset, query, "react", run_tool)
    request = next(steps)
    try:
        while True:
            request = steps.send(answer(request))
    except StopIteration as done:
        return done.value, called


def fake_answer(model: Any) -> Any:
    def answer(request: ModelRequest) -> ModelOutput:
        reply = model.reply(wire(request.messages))
        assert reply is not None
        return ModelOutput(reply)

    return answer


def test_fake_model_drives_an_e2e_episode_to_the_reference(generated: Any) -> None:
    model = bench.PerfectModel(generated, latency=0)
    query = generated["5"]  # the sample's longest chain: 7 turns
    episode, called = drive(generated, query, fake_answer(model))
    assert len(episode.turns) == len(query.assistant_indices) == 7
    assert episode.turns[-1].record.is_finish
    reference = generated.reference_dialogs(query)
    assert called == [
        (call.name, reference[call.index]["tool_calls"][0]["function"]["arguments"])
        for call in query.calls
    ]


def test_ideal_caps_slots_by_the_workload(generated: Any) -> None:
    config = bench.Config.parse("0x32")
    calls = sum(len(q.assistant_indices) for q in list(generated)[:4])
    assert bench.ideal_seconds(generated, 4, "step", config, 1.0) == calls / min(32, calls)
    # e2e: 4 episodes, one request each in flight; the longest chain is a floor.
    assert bench.ideal_seconds(generated, 4, "e2e", config, 1.0) == max(calls / 4, 6)
    assert bench.ideal_seconds(generated, 4, "step", bench.Config.parse("0x1"), 0.5) == calls / 2
    assert bench.Config.parse(" 2 x 16 ") == bench.Config(2, 16)


def test_fake_model_makes_the_oracles_calls_on_the_release(release_dataset: Dataset) -> None:
    # The release's 557 reference calls drive the fake model: one step prompt per reference
    # assistant message (557 calls + 213 final answers), and end to end the same replies the
    # `oracle` model gives, a closing answer after each of the 16 chains that end on a call.
    model = bench.PerfectModel(release_dataset, latency=0)
    oracle = OracleModel(release_dataset)
    assert sum(len(q.calls) for q in release_dataset) == 557
    assert bench.expected_calls(release_dataset, 229, "step") == 770
    assert bench.expected_calls(release_dataset, 229, "e2e") == 786
    # The serial config's first 40 queries: 107 calls + 35 answers; 12, 14, 15, 34, 35 closed.
    assert bench.expected_calls(release_dataset, 40, "step") == 142
    assert bench.expected_calls(release_dataset, 40, "e2e") == 147
    step_prompts = 0
    closed: list[str] = []
    for query in release_dataset:
        for request, gold in loops.step_requests(release_dataset, query):
            assert model.reply(wire(request.messages)) == render_reference(gold), query.qid
            step_prompts += 1
        fake, _ = drive(release_dataset, query, fake_answer(model))
        real, _ = drive(release_dataset, query, oracle.generate)
        assert [t.reply for t in fake.turns] == [t.reply for t in real.turns], query.qid
        assert len(fake.turns) == bench.episode_calls(release_dataset, query, "e2e")
        assert fake.turns[-1].record.is_finish, query.qid
        if len(fake.turns) > len(query.assistant_indices):
            closed.append(fake.turns[-1].reply)
    assert step_prompts == 770
    # 34 and 35 close with the text their last call carries, the others with the oracle's.
    assert len(closed) == 16
    assert closed.count(f"Final Answer: {CLOSING_ANSWER}") == 14


def test_fake_model_tells_apart_queries_alike_but_for_their_image(release_dataset: Dataset) -> None:
    # "Can you explain this meme?" is the text of queries 54 to 63, each with its own image.
    model = bench.PerfectModel(release_dataset, latency=0)
    alike = [q for q in release_dataset if q.text == "Can you explain this meme?"]
    assert [q.qid for q in alike] == [str(n) for n in range(54, 64)]
    for query in alike:
        request, gold = next(iter(loops.step_requests(release_dataset, query)))
        assert model.find(wire(request.messages)) == query.qid
        assert model.reply(wire(request.messages)) == render_reference(gold)
    # Without its files message the query cannot be told apart: no guess.
    assert model.find([{"role": "user", "content": "Can you explain this meme?"}]) is None


def test_release_path_names_both_places_when_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_GTA_RELEASE", str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit) as raised:
        bench.release_path(None)
    message = str(raised.value)
    assert f"$PYTEST_GTA_RELEASE ({tmp_path / 'nowhere'}) has no dataset.json" in message
    assert str(ROOT.parent / "shared" / "gta_release") in message
    assert "--data PATH" in message
    assert "--generated" in message
    monkeypatch.delenv("PYTEST_GTA_RELEASE")
    monkeypatch.setattr(sys.modules[bench.release_path.__module__], "find_release", lambda: None)
    with pytest.raises(SystemExit, match=r"\$PYTEST_GTA_RELEASE is unset and .*gta_release has"):
        bench.release_path(None)
    with pytest.raises(SystemExit, match=r"no dataset\.json"):
        bench.release_path(str(tmp_path))


@given(st.text(max_size=20))
def test_configs_parse_or_name_the_option(text: str) -> None:
    if re.fullmatch(r"\s*\d+\s*x\s*0*[1-9]\d*\s*", text, re.ASCII):
        config = bench.Config.parse(text)
        assert config.concurrency >= 1
        assert config.workers >= 0
    else:
        with pytest.raises(SystemExit, match=r"(?s)--configs: .* is not WORKERSxCONCURRENCY"):
            bench.Config.parse(text)


#: Query 0's text as the generated dataset spells it, so that some messages name a real query.
QUERY_0 = json.loads((ROOT / "fixtures/gta_sample/dataset.json").read_text())["0"]["dialogs"][0]
MESSAGE_VALUES = (
    st.none()
    | st.integers()
    | st.text()
    | st.sampled_from(["assistant", "user", f"{QUERY_0['content']} [copy 0]"])
    | st.lists(st.dictionaries(st.sampled_from(["type", "text"]), st.text()))
)


@given(messages=st.lists(st.dictionaries(st.sampled_from(["role", "content"]), MESSAGE_VALUES)))
def test_fake_model_never_breaks_on_hostile_messages(generated: Any, messages: Any) -> None:
    reply = bench.PerfectModel(generated, latency=0).reply(messages)
    assert reply is None or isinstance(reply, str)


@pytest.mark.slow
def test_script_prints_the_table_and_identical_results(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(SCRIPT),
        "--latency=0.01",
        "--generated",
        "--queries=4",
        "--serial-queries=2",
        "--modes=e2e",
        "--configs=0x4,2x2,0x1",
        "--sim-model=all-MiniLM-L6-v2",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| e2e |")]
    assert [row.split("|")[2].strip() for row in rows] == [
        "`-n 0 --gta-concurrency 4`",
        "`-n 2 --gta-concurrency 2`",
        "`-n 0 --gta-concurrency 1 (2 queries)`",
    ]
    # The first 4 sample chains take 3+3+3+6 calls, the first 2 take 6: the server counted them.
    assert [int(row.split("|")[3]) for row in rows] == [15, 15, 6]
    for row in rows:
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert min(float(cells[4]), float(cells[5]), float(cells[7])) > 0
        assert re.fullmatch(r"\d+ / (\d+|-)", cells[8]), cells[8]
    assert rows[1].split("|")[-2].strip().split(" / ")[1] != "-"  # -n 2 has workers
    assert "per-case results identical across configs (10 cases compared)" in done.stdout
    assert "PROBLEM" not in done.stdout
    assert json.dumps("dummy") not in done.stdout


# ---------------------------------------------------------------------------- OCR agreement


def test_ocr_agreement_measures() -> None:
    agreement = load_script(ROOT / "benchmarks" / "ocr_agreement.py", "gta_ocr_agreement")
    region = agreement.ocr.Region
    reference = [region(0, 0, 100, 20, "Total Due"), region(0, 30, 100, 50, "12.50")]
    same = agreement.compare("1", reference, reference, 0.5)
    # Words are runs of letters and digits: total, due, 12, 50.
    assert (same.similarity, same.reference_words_found, same.our_words_found) == (1.0, 4, 4)
    assert same.reference_regions_located == same.our_regions_located == 1.0
    # PP-OCR's dropped spaces and another reading order: every word is still found.
    ours = [region(2, 31, 98, 49, "12.50"), region(1, 1, 99, 19, "TotalDue")]
    moved = agreement.compare("1", ours, reference, 0.5)
    assert 0 < moved.similarity < 1
    assert (moved.reference_words_found, moved.reference_words) == (4, 4)
    assert (moved.our_words_found, moved.our_words) == (3, 3)
    assert moved.reference_regions_located == 1.0
    missed = agreement.compare("1", ours[:1], reference, 0.5)
    assert (missed.reference_words_found, missed.reference_regions_located) == (2, 0.5)
    rows = dict(agreement.summary([same, moved, missed]))
    assert rows["calls"] == "3"
    assert rows["calls with the same text"] == "1 (33.3%)"
    assert rows["reference words found in ours"] == f"{10 / 12:.1%}"


# ---------------------------------------------------------------------------- the agent's sandbox


@pytest.mark.slow
def test_isolation_benchmark_prints_each_path_beside_the_unsandboxed_one(tmp_path: Path) -> None:
    require("bubblewrap")
    script = ROOT / "benchmarks" / "isolation.py"
    done = subprocess.run(
        [sys.executable, str(script), "--cases", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mechanism: bubblewrap" in done.stdout
    assert re.search(r"load before: [\d.]+ \(1 min\), [\d.]+ \(5 min\) on \d+ cores", done.stdout)
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| c")]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        ("command", "unsandboxed (a subprocess)"),
        ("command", "warm sandbox (a fork per case)"),
        ("command", "a sandbox per case (fallback)"),
        ("callable", "unsandboxed (--gta-agent-in-process)"),
        ("callable", "warm sandbox (a fork per case)"),
        ("callable", "a sandbox per case (fallback)"),
    ]
    for row in rows:
        median, p90, added = (cell.strip() for cell in row[2:])
        assert 0 <= float(median) <= float(p90)
        assert added == "-" or re.fullmatch(r"[+-]\d+\.\d", added)
    assert "- warm start, the callable's import, the probe: " in done.stdout


# ---------------------------------------------------------------------------- Workflow tasks


@pytest.mark.slow  # three Workflow runs of the sample: slow by cost (issue 40)
def test_workflow_concurrency_script_prints_its_table(tmp_path: Path) -> None:
    """``benchmarks/workflow_concurrency.py`` runs end to end: its table, each run's cases."""
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "workflow_concurrency.py"),
        "--latency=0.01",
        "--concurrency=1,4",
    ]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| `--gta-concurrency")]
    assert [row.split("|")[1].strip() for row in rows] == [
        "`--gta-concurrency 1`",
        "`--gta-concurrency 4`",
        "`--gta-concurrency 4`, judge latency 0 (the harness alone)",
    ]
    calls = {int(row.split("|")[2]) for row in rows}
    assert len(calls) == 1  # every run made the same judge calls
    assert int(rows[0].split("|")[3]) == 1  # serial: one request in flight at a time
    assert "every run's cases, metrics and requests equal the serial run's" in done.stdout
    assert "PROBLEM" not in done.stdout
