"""What a new user trips over: hints, messages, progress and the checkout's own settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA
from tests.helpers.optional import require
from tests.helpers.paths import ROOT


def test_a_misspelt_mark_says_which_marks_exist(pytester):
    require("similarity")
    result = pytester.runpytest(SAMPLE_DATA, FAST_SIM, "--gta-model=oracle", "-m", "gta_tool_ocr")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(
        [
            "pytest-gta: no GTA case has the mark 'gta_tool_ocr' (marks are case-sensitive); "
            "did you mean gta_tool_OCR*",
            "pytest-gta: the GTA marks of this run: gta, *gta_tool_OCR*",
        ]
    )


def test_a_gta_mark_without_a_model_says_to_pass_one(pytester):
    pytester.makepyfile("def test_plain(): pass")
    result = pytester.runpytest("-m", "gta_type_objective")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(
        ["*GTA cases (and their gta_* marks) are collected only with --gta-model*"]
    )


def test_no_hint_when_the_mark_selected_something(pytester):
    result = pytester.runpytest(
        SAMPLE_DATA, FAST_SIM, "--gta-model=oracle", "--gta-ids=0", "-m", "gta_tool_OCR"
    )
    result.assert_outcomes(passed=1)
    assert "pytest-gta:" not in result.stdout.str()


def test_each_marker_has_its_own_text(pytester):
    result = pytester.runpytest("--markers")
    lines = {
        line.split(":")[0].removeprefix("@pytest.mark."): line
        for line in result.stdout.lines
        if line.startswith("@pytest.mark.gta")
    }
    assert "calls OCR" in lines["gta_tool_OCR"]
    assert "end-to-end" in lines["gta_mode_e2e"]
    assert "perception tool" in lines["gta_category_perception"]
    assert len({line.split(":", 1)[1] for line in lines.values()}) == len(lines)


def test_a_failed_case_shows_what_the_model_wrote(pytester):
    words = "I think the receipt says something about groceries. " * 3
    pytester.path.joinpath("script.json").write_text(json.dumps({"default": words}))
    result = pytester.runpytest(
        SAMPLE_DATA, FAST_SIM, "--gta-model=mock:script.json", "--gta-ids=0"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*e2e-0: no final answer: the episode ended on call NoAction*",
            "the model wrote: 'I think the receipt says something about groceries. I think*",
        ]
    )


def test_loads_happen_before_the_first_case_and_are_reported(pytester, own_similarity):
    """The similarity model loads in its own phase (a line per phase), not in a case's time."""
    result = pytester.runpytest_subprocess(
        SAMPLE_DATA,
        FAST_SIM,
        "--gta-model=oracle",
        "--gta-mode=e2e",
        "--gta-ids=7,8",
        "--gta-report=gta.json",
        "-n",
        "2",
    )
    result.assert_outcomes(passed=2)
    # once, in the controller, for both workers (pytest_gta.scoring.service)
    result.stdout.fnmatch_lines(["gta: loading the similarity model all-MiniLM-L6-v2 *"])
    report = json.loads(pytester.path.joinpath("gta.json").read_text())
    assert set(report["timings"]) == {"main", "gw0", "gw1"}
    assert report["timings"]["main"]["similarity_load_s"] >= 0
    result.stdout.fnmatch_lines(["loading (outside the cases' own time): *"])


def test_the_checkout_conftest_needs_no_dev_extra(tmp_path):
    """A run inside the checkout without Hypothesis (the demo's environment once had none)."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "hypothesis.py").write_text("raise ImportError('hypothesis is not installed')\n")
    env = dict(os.environ, PYTHONPATH=str(blocker))
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:hypothesispytest",
            "--co",
            "-q",
            str(ROOT / "tests" / "test_report.py"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "ImportError while loading conftest" not in done.stdout + done.stderr
