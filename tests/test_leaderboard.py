"""The published leaderboard boards: the shipped table, the catalog, ``leaderboard:NAME[@BOARD]``.

The official README has three boards (the paper's 2024-07, 2025-03 and 2026-02); the shipped
``pytest_gta/leaderboard.csv`` must hold exactly the reference table's rows, every model on any
board must be reachable from the catalog, and wherever a leaderboard row is shown (the row beside
a catalog model's run, a ``--gta-baseline=leaderboard:...`` comparison) the terminal, the JSON
report and the HTML report say which board it came from.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gta.errors import GtaDataError, GtaUsageError
from pytest_gta.models import catalog
from pytest_gta.models.base import resolve_spec
from pytest_gta.models.generation import GenerationSettings
from pytest_gta.report.baseline import leaderboard_baseline
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA, gta
from tests.helpers.paths import ROOT
from tests.helpers.scripted_server import ScriptedServer
from tests.test_gates import report_of, write_predictions

#: The official table as the task's authors keep it, beside the repository (absent elsewhere).
REFERENCE = ROOT.parent / "shared" / "reference" / "leaderboard.csv"
BOARDS = ["2024-07", "2025-03", "2026-02"]
PROVIDERS = ("openai", "anthropic", "vllm")


def read_rows(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.reader(fh))


# -- the shipped table ----------------------------------------------------------------------------


def test_the_shipped_table_is_the_reference_table():
    if not REFERENCE.is_file():
        pytest.skip(f"the reference leaderboard is not at {REFERENCE}")
    reference = read_rows(REFERENCE)
    shipped = read_rows(catalog.LEADERBOARD_CSV)
    # The reference repeats the later boards' rows verbatim (a copy appended twice); a repeat
    # adds nothing, so the shipped table has each row once, in the reference's order.
    once = list(dict.fromkeys(map(tuple, reference)))
    assert [tuple(row) for row in shipped] == once
    keys = [(row[0], row[1]) for row in once[1:]]
    assert len(keys) == len(set(keys)), "the reference has two different rows for one model"


def test_boards_and_their_models():
    boards = catalog.leaderboard_boards()
    assert list(boards) == BOARDS
    assert [len(models) for models in boards.values()] == [16, 11, 13]
    assert catalog.boards_with("gpt-4o") == ["2024-07", "2025-03"]
    assert catalog.boards_with("llama-3.1-8b-instruct") == ["2025-03", "2026-02"]
    assert catalog.leaderboard_rows()["gpt-4o"]["board"] == "2025-03"
    row = catalog.leaderboard_row(catalog.find("gpt-5"))
    assert row == {
        "model": "gpt-5",
        "board": "2026-02",
        "inst_acc": 55.01,
        "tool_acc": 35.55,
        "arg_acc": 24.24,
        "summ_acc": 66.37,
        "p_f1": 78.84,
        "o_f1": 80.26,
        "l_f1": 64.66,
        "c_f1": 82.54,
        "ans_acc": 45.07,
        "ans_acc_img": 44.69,
    }


def test_a_repeated_row_is_one_row_and_a_conflicting_one_is_refused(tmp_path, monkeypatch):
    header = "board,model," + ",".join(catalog.LEADERBOARD_METRICS)
    row = "2025-03,m," + ",".join(["1"] * len(catalog.LEADERBOARD_METRICS))
    table = tmp_path / "leaderboard.csv"
    monkeypatch.setattr(catalog, "LEADERBOARD_CSV", table)
    table.write_text(f"{header}\n{row}\n{row}\n")
    catalog.leaderboard_boards.cache_clear()
    try:
        assert catalog.leaderboard_boards() == {
            "2025-03": {"m": dict(zip(header.split(","), row.split(","), strict=True))}
        }
        table.write_text(f"{header}\n{row}\n{row.replace(',1,', ',2,', 1)}\n")
        catalog.leaderboard_boards.cache_clear()
        with pytest.raises(GtaDataError, match="two different rows for m on board 2025-03"):
            catalog.leaderboard_boards()
    finally:
        catalog.leaderboard_boards.cache_clear()


# -- the catalog ----------------------------------------------------------------------------------

#: Where each model of the later boards goes without --gta-base-url: the provider and the id it
#: sends (API model id, or Hugging Face id for vLLM). Looked up, not guessed: docs/models.md says
#: where each came from; a change here must be deliberate.
ROUTES = {
    # 2025-03
    "deepseek-v3": ("openai", "deepseek-v3"),
    "qwen-max-2.5": ("openai", "qwen-max-2025-01-25"),
    "gpt-4o": ("openai", "gpt-4o"),
    "qwq-32b": ("vllm", "Qwen/QwQ-32B"),
    "deepseek-r1-distill-llama-70b": ("vllm", "deepseek-ai/DeepSeek-R1-Distill-Llama-70B"),
    "deepseek-r1-distill-llama-8b": ("vllm", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"),
    "qwen2.5-7b-instruct": ("vllm", "Qwen/Qwen2.5-7B-Instruct"),
    "llama-3.1-8b-instruct": ("vllm", "meta-llama/Llama-3.1-8B-Instruct"),
    "ministral-8b-instruct-2410": ("vllm", "mistralai/Ministral-8B-Instruct-2410"),
    "mistral-large-instruct-2411": ("vllm", "mistralai/Mistral-Large-Instruct-2411"),
    "llama-3.1-nemotron-70b-instruct-hf": ("vllm", "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF"),
    # 2026-02
    "deepseek-v3.2": ("openai", "deepseek-chat"),
    "qwen3-235b-a22b": ("openai", "qwen3-235b-a22b-instruct-2507"),
    "gpt-5": ("openai", "gpt-5-2025-08-07"),
    "gemini-2.5-pro": ("openai", "gemini-2.5-pro"),
    "claude-sonnet-4.5": ("anthropic", "claude-sonnet-4-5-20250929"),
    "kimi-k2": ("openai", "kimi-k2-0905-preview"),
    "llama-4-scout": ("vllm", "meta-llama/Llama-4-Scout-17B-16E-Instruct"),
    "grok-4": ("openai", "grok-4"),
    "qwen3-8b": ("vllm", "Qwen/Qwen3-8B"),
    "llama-3.2-3b-instruct": ("vllm", "meta-llama/Llama-3.2-3B-Instruct"),
    "qwen3-30b-a3b": ("vllm", "Qwen/Qwen3-30B-A3B"),
    "llama-3.1-70b-instruct": ("vllm", "meta-llama/Llama-3.1-70B-Instruct"),
}


@pytest.fixture
def no_base_url(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return GenerationSettings()


def test_every_model_of_every_board_resolves_in_the_catalog(no_base_url):
    later = set()
    for board, models in catalog.leaderboard_boards().items():
        for name in models:
            entry = catalog.find(name)
            assert entry is not None, f"{name} ({board}) is not in the catalog"
            assert entry.leaderboard == name
            spec = resolve_spec(name, PROVIDERS, no_base_url)
            assert spec.provider in PROVIDERS, name
            assert spec.name, name
            assert spec.entry is entry
            if spec.provider == "vllm":
                assert spec.name == entry.hf_id, name
                assert entry.stop, name
            else:
                # An API request stays the official one: the authors' configs send no stop.
                assert spec.name == entry.api_model, name
                assert not entry.stop, name
            if spec.provider == "openai" and entry.api_base:
                assert entry.api_key_env not in (None, "OPENAI_API_KEY"), name
            if board != "2024-07":
                later.add(name)
    assert later == set(ROUTES)


@pytest.mark.parametrize(("name", "route"), ROUTES.items())
def test_later_boards_routes(name, route, no_base_url):
    spec = resolve_spec(name, PROVIDERS, no_base_url)
    assert (spec.provider, spec.name) == route


@pytest.mark.parametrize(
    ("served", "name"),
    [
        # The ids of the authors' 2026-02 config (opencompass/configs/eval_gta_bench.py).
        ("deepseek-chat", "deepseek-v3.2"),
        ("qwen/qwen3-235b-a22b-07-25", "qwen3-235b-a22b"),
        ("gpt-5-2025-08-07", "gpt-5"),
        ("google/gemini-2.5-pro", "gemini-2.5-pro"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4.5"),
        ("kimi-k2-0905-preview", "kimi-k2"),
        ("meta-llama/llama-4-scout", "llama-4-scout"),
        ("grok-4", "grok-4"),
        # Weights behind an API default: vllm/HF_ID finds the same entry.
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b"),
        ("moonshotai/Kimi-K2-Instruct-0905", "kimi-k2"),
    ],
)
def test_the_official_served_ids_find_their_entry(served, name):
    entry = catalog.find(served)
    assert entry is not None
    assert entry.name == name


# -- leaderboard:NAME[@BOARD] ---------------------------------------------------------------------


def test_a_name_takes_the_newest_board_and_at_board_a_given_one():
    assert leaderboard_baseline("GPT-4o").board == "2025-03"
    assert leaderboard_baseline("gpt-4o@2024-07").board == "2024-07"
    assert leaderboard_baseline("llama-3.1-8b-instruct").board == "2026-02"
    row = leaderboard_baseline("llama-3.1-8b-instruct@2025-03")
    assert (row.board, row.l_f1) == ("2025-03", 47.3)


ON_BOARD = [(m, b) for b, models in catalog.leaderboard_boards().items() for m in models]


@given(st.sampled_from(ON_BOARD))
def test_every_published_row_is_reachable_by_board(pair):
    model, board = pair
    row = leaderboard_baseline(f"{model.upper()}@ {board} ")
    expected = catalog.leaderboard_boards()[board][model]
    assert (row.model, row.board) == (model, board)
    assert row.ans_acc == float(expected["ans_acc"])


@given(st.sampled_from(sorted(catalog.leaderboard_rows())), st.text(max_size=12))
def test_a_board_that_lacks_the_model_is_a_usage_error(model, board):
    has = catalog.boards_with(model)
    if board.strip() in has:
        return
    with pytest.raises(GtaUsageError) as info:
        leaderboard_baseline(f"{model}@{board}")
    message = str(info.value)
    assert message.startswith(f"--gta-baseline=leaderboard:{model}@{board}: ")
    assert f"{model} is on the {', '.join(has)} board(s)" in message
    assert f"leaderboard:{model} for the newest ({has[-1]})" in message


def black_box(pytester: pytest.Pytester, predictions: Path, *extra: str) -> Any:
    return gta(
        pytester,
        SAMPLE_DATA,
        f"--gta-model=opencompass:{predictions}",
        "--gta-mode=e2e",
        FAST_SIM,
        "--gta-report-html=r.html",
        *extra,
        report="r.json",
    ).result


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "gpt-4o@2026-02",
            "--gta-baseline=leaderboard:gpt-4o@2026-02: gpt-4o is not on the 2026-02 board; "
            "gpt-4o is on the 2024-07, 2025-03 board(s). Write leaderboard:gpt-4o@BOARD with "
            "one of those, or leaderboard:gpt-4o for the newest (2025-03)",
        ),
        (
            "kimi-k2@2025-3",
            "--gta-baseline=leaderboard:kimi-k2@2025-3: no board '2025-3' (the boards: 2024-07, "
            "2025-03, 2026-02); kimi-k2 is on the 2026-02 board(s).",
        ),
        ("gpt-4o@", "--gta-baseline=leaderboard:gpt-4o@: no board ''"),
        ("gpt-6@2026-02", "--gta-baseline=leaderboard:gpt-6@2026-02: no such model"),
    ],
)
def test_bad_board_specs_are_usage_errors(pytester, tmp_path, sample_dataset, spec, message):
    predictions = write_predictions(tmp_path / "p", sample_dataset, bad=True)
    result = black_box(pytester, predictions, f"--gta-baseline=leaderboard:{spec}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_the_newest_board_is_named_in_terminal_json_and_html(pytester, tmp_path, sample_dataset):
    predictions = write_predictions(tmp_path / "p", sample_dataset, bad=True)
    result = black_box(pytester, predictions, "--gta-baseline=leaderboard:gpt-4o")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    comparison = report_of(pytester, "r")["comparison"]
    assert (comparison["kind"], comparison["board"]) == ("leaderboard", "2025-03")
    assert comparison["baseline"] == "leaderboard:gpt-4o"
    assert comparison["baseline_model"] == "gpt-4o (leaderboard 2025-03)"
    assert comparison["metrics"]["e2e"]["ans_acc"]["baseline"] == 41.52
    title = "Comparison with leaderboard:gpt-4o (board 2025-03), end-to-end"
    assert title in result.stdout.str()
    html = (pytester.path / "r.html").read_text()
    assert title in html
    assert "baseline: leaderboard:gpt-4o (board 2025-03)" in html  # the plot's series


def test_a_catalog_model_and_a_given_board_are_named(pytester, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused")
    with ScriptedServer(models=["meta-llama/Llama-3.1-8B-Instruct"]) as server:
        result = pytester.runpytest(
            SAMPLE_DATA,
            "--gta-model=llama-3.1-8b-instruct",
            f"--gta-base-url={server.url}",
            "--gta-mode=step,e2e",
            "--gta-ids=0,1",
            FAST_SIM,
            "--gta-report=r.json",
            "--gta-report-html=r.html",
            "--gta-baseline=leaderboard:gpt-4o@2024-07",
        )
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    report = report_of(pytester, "r")
    # The row beside the run: the newest board with the model (it is on 2025-03 too).
    assert report["leaderboard"]["board"] == "2026-02"
    assert report["leaderboard"]["model"] == "llama-3.1-8b-instruct"
    assert report["comparison"]["board"] == "2024-07"
    assert report["comparison"]["baseline_model"] == "gpt-4o (leaderboard 2024-07)"
    text = result.stdout.str()
    html = (pytester.path / "r.html").read_text()
    for output in (text, html):
        assert "leaderboard 2026-02: llama-3.1-8b-instruct [react]" in output
        assert "Comparison with leaderboard:gpt-4o@2024-07, step-by-step" in output
        assert "(board 2024-07)" not in output  # the spec already names it
    # The plot's bar for the row's L F1 (47.30 on 2026-02).
    assert "leaderboard 2026-02: llama-3.1-8b-instruct: 47.3%" in html
