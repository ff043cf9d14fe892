"""Text from reports and datasets, shown in a terminal or a markdown page, is shown literally.

A report is a file anyone can edit, and ``--gta-compare`` and ``--gta-merge`` read reports of
other machines: a label, a field's value or a file name may hold an escape sequence (which sets
a terminal's title or clears its screen) or markdown (which renders an image from anywhere in a
job summary). Messages and tables show such text escaped; markdown shows it as written.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gta.outward import terminal_text
from pytest_gta.report.runs_text import render_markdown
from pytest_gta.report.table import STRONG_OFF, STRONG_ON, markdown_text, strong
from pytest_gta.results.io import parse_comparison
from tests.helpers.gta_run import SAMPLE_DATA, gta
from tests.helpers.report_builders import TODAY

#: What must never reach a terminal raw: C0/C1 controls but newline and tab, DEL, bidi overrides.
TERMINAL_ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: What markdown acts on (escaped by markdown_text).
MARKDOWN_ACTIVE = "\\`*[]<>&|"
#: A label no markdown page should render: an image fetched from elsewhere, a link, a new column.
HOSTILE_LABEL = "nightly|<img src=https://example.invalid/p.png> [x](https://example.invalid) *!*"


@given(st.text())
def test_terminal_text_leaves_no_control_character(text):
    shown = terminal_text(text)
    assert not TERMINAL_ACTIVE.search(shown)
    if not TERMINAL_ACTIVE.search(text):
        assert shown == text  # ordinary text, newlines and tabs included, is untouched


def test_terminal_text_shows_an_escape_sequence_as_its_escape():
    assert terminal_text("a\x1b]0;title\x07b\u202ec\n\td") == "a\\x1b]0;title\\x07b\\u202ec\n\td"


def _unescaped(shown: str) -> str:
    """``shown`` with each backslash pair removed: what markdown would still act on."""
    return re.sub(r"\\.", "", shown)


@given(st.text())
def test_markdown_text_leaves_nothing_for_markdown_to_act_on(text):
    shown = markdown_text(text.replace(STRONG_ON, "").replace(STRONG_OFF, ""))
    assert "\n" not in shown
    assert "\r" not in shown
    assert not TERMINAL_ACTIVE.search(shown)
    assert not set(_unescaped(shown)) & set(MARKDOWN_ACTIVE)


@given(st.text(alphabet=st.characters(categories=["L", "N", "Zs"])))
def test_plain_text_is_unchanged_in_markdown(text):
    assert markdown_text(text) == text


def test_only_the_renderers_marks_become_bold():
    assert markdown_text(strong("96.79")) == "**96.79**"
    assert markdown_text("**not bold**") == "\\*\\*not bold\\*\\*"
    assert markdown_text(strong("a|b")) == "**a\\|b**"


def test_a_hostile_label_is_shown_literally_in_the_comparisons_markdown():
    data = json.loads((TODAY / "comparison.json").read_text())
    label = data["runs"][0]["label"]
    text = json.dumps(data).replace(json.dumps(label), json.dumps(HOSTILE_LABEL))
    page = render_markdown(parse_comparison("cmp.json", json.loads(text)))
    assert HOSTILE_LABEL not in page
    escaped = markdown_text(HOSTILE_LABEL)
    assert f"- run {escaped}: " in page
    assert f"| {escaped} | **" in page  # a table row: the label one cell, the best value bold
    for line in page.splitlines():
        assert "<img" not in _unescaped(line), line
        assert "](" not in _unescaped(line) or "\\]" in line, line


@pytest.mark.slow
@pytest.mark.parametrize("command", ["--gta-compare", "--gta-merge"])
def test_a_reports_escape_sequence_reaches_the_terminal_escaped(pytester, command):
    report = json.loads((TODAY / "wrong.json").read_text())
    report["schema"] = "pytest-gta-report/9\x1b]0;pwned\x07\x1b[2J"
    (pytester.path / "edited.json").write_text(json.dumps(report))
    run = gta(pytester, command, "edited.json", SAMPLE_DATA)
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    assert "\x1b" not in run.output
    assert "schema is pytest-gta-report/9\\x1b]0;pwned\\x07\\x1b[2J: the report was written" in (
        run.output
    )


@pytest.mark.slow
def test_the_comparisons_markdown_file_shows_a_hostile_label_literally(pytester):
    report = json.loads((TODAY / "wrong.json").read_text())
    report["label"] = report["identity"]["label"] = HOSTILE_LABEL
    report["identity"]["label_given"] = True
    (pytester.path / "hostile.json").write_text(json.dumps(report))
    run = gta(
        pytester,
        "--gta-compare",
        "hostile.json",
        "--gta-report-md=cmp.md",
        SAMPLE_DATA,
        report="cmp.json",
    )
    assert run.ret == 0, run.output
    assert run.report["runs"][0]["label"] == HOSTILE_LABEL  # the JSON keeps it as it is
    page = (pytester.path / "cmp.md").read_text()
    assert HOSTILE_LABEL not in page
    assert markdown_text(HOSTILE_LABEL) in page
