"""The comparison page (``report/runs_html.py``): structure, escaping, robustness, Chromium.

The comparison is real: four runs of the bundled sample made by the plugin itself (the oracle
on both modes with its own HTML report, a mock model that knows nothing, an OpenCompass
prediction file on end-to-end mode, and a real OpenAI-compatible server sampled three epochs
with some queries wrong at some seeds, priced), put side by side by
:func:`pytest_gta.report.runs.build_comparison`. The page is parsed back for its structure; a
Hypothesis test feeds it perturbed comparisons (keys dropped, values of the wrong type) through
the comparison's reader, which refuses them with a usage error or lets them through to a page;
and headless Chromium renders it with a logging proxy that sees every request.
"""

from __future__ import annotations

import copy
import html
import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.errors import GtaUsageError
from pytest_gta.report.runs import RunInput, build_comparison
from pytest_gta.report.runs_html import render_comparison_html
from pytest_gta.report.runs_html_parts import href
from pytest_gta.report.svg import Curve, Estimate, Spot, curves, interval_dots, scatter
from pytest_gta.results.comparison import Comparison
from pytest_gta.results.io import load_report, parse_comparison
from pytest_gta.vocabulary import QUERY_TYPES
from tests.helpers.browser import serve_directory
from tests.helpers.gta_run import BOTH_MODES, FAST_SIM, ORACLE, SAMPLE_DATA, gta_process
from tests.helpers.oracle_server import OracleServer
from tests.test_gates import sampled_wrong, sampling, write_predictions
from tests.test_results_schema import assert_valid_comparison
from tests.test_svg import parse

HOSTILE = '<script>alert("x")</script> & "q"'
#: The runs of the real comparison, in its order; the first is the reference.
LABELS = ("oracle", HOSTILE, "opencompass good", "sampled x3")
#: The queries the sampled run asks (1 and 4 are wrong at some seeds: flaky).
SAMPLED_IDS = ("0", "1", "4", "7", "10")


# --------------------------------------------------------------------------------------------
# The real comparison


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory, sample_dataset: Any) -> Path:
    """Four real runs of the sample, each with its JSON report (the oracle's with its page)."""
    where = tmp_path_factory.mktemp("runs")
    gta_process(
        where,
        SAMPLE_DATA,
        ORACLE,
        BOTH_MODES,
        FAST_SIM,
        "--gta-report-html=oracle.html",
        report="oracle.json",
    )
    script = {
        "default": "Thought: no idea.\nFinal Answer: I do not know.",
        "responses": {"e2e-2": [{"error": "the endpoint is down"}]},
    }
    (where / "script.json").write_text(json.dumps(script))
    mock = f"--gta-model=mock:{where / 'script.json'}"
    gta_process(where, SAMPLE_DATA, mock, BOTH_MODES, FAST_SIM, report="mock.json", check=False)
    good = write_predictions(where / "good", sample_dataset, bad=False)
    gta_process(where, SAMPLE_DATA, f"--gta-model=opencompass:{good}", FAST_SIM, report="good.json")
    with (
        pytest.MonkeyPatch.context() as patch,
        OracleServer(sample_dataset, sampled=sampled_wrong) as server,
    ):
        patch.setenv("OPENAI_API_KEY", "sk-compare-test")
        gta_process(
            where,
            SAMPLE_DATA,
            *sampling(server.url),
            f"--gta-ids={','.join(SAMPLED_IDS)}",
            "--gta-price=2,8",
            FAST_SIM,
            report="sampled.json",
            check=False,
        )
    return where


def comparison_of(where: Path, dataset: Any, **kwargs: Any) -> Comparison:
    files = ("oracle.json", "mock.json", "good.json", "sampled.json")
    inputs = []
    for label, name in zip(LABELS, files, strict=True):
        read = load_report(where / name, name)
        html = "oracle.html" if name == "oracle.json" else None
        inputs.append(RunInput(label, (name,), read.report, html))
    return build_comparison(inputs, dataset, samples=200, **kwargs)


@pytest.fixture(scope="module")
def comparison(runs_dir: Path, sample_dataset: Any) -> Comparison:
    return comparison_of(runs_dir, sample_dataset, leaderboard=["gpt-4o"])


@pytest.fixture(scope="module")
def written(comparison: Comparison) -> dict[str, Any]:
    """The comparison's JSON, as its ``--gta-report`` file has it (what the edits start from)."""
    data: dict[str, Any] = comparison.to_json_value()
    data = json.loads(json.dumps(data, allow_nan=False))
    assert_valid_comparison(data)
    return data


def page_of(data: Any) -> str:
    """The page of a comparison's JSON, read by the comparison's reader."""
    return render_comparison_html(parse_comparison("cmp.json", data))


@pytest.fixture(scope="module")
def page(comparison: Comparison, runs_dir: Path) -> str:
    text = render_comparison_html(comparison)
    (runs_dir / "compare.html").write_text(text, encoding="utf-8")
    return text


# --------------------------------------------------------------------------------------------
# Reading the page back


class Tree(HTMLParser):
    """Elements with their attributes and text, and each table's rows of cells."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.tables: list[dict[str, Any]] = []
        self._stack: list[dict[str, Any]] = []
        self._row: list[dict[str, Any]] | None = None
        self._cell: dict[str, Any] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attributes))
        if tag == "table":
            self._stack.append({"attrs": attributes, "caption": "", "rows": []})
        elif tag == "tr" and self._stack:
            self._row = []
            self._stack[-1]["rows"].append({"attrs": attributes, "cells": self._row})
        elif tag in ("td", "th") and self._row is not None:
            self._cell = {"tag": tag, "attrs": attributes, "text": "", "html": []}
            self._row.append(self._cell)
        elif self._cell is not None:
            self._cell["html"].append((tag, attributes))

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._stack:
            self.tables.append(self._stack.pop())
        elif tag in ("td", "th"):
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data
        elif self._stack and self.elements and self.elements[-1][0] == "caption":
            self._stack[-1]["caption"] += data

    def table(self, caption_start: str) -> dict[str, Any]:
        found = [t for t in self.tables if t["caption"].startswith(caption_start)]
        assert len(found) == 1, [t["caption"] for t in self.tables]
        return found[0]


def svgs(text: str) -> list[str]:
    return re.findall(r"<svg .*?</svg>", text, flags=re.S)


# --------------------------------------------------------------------------------------------
# Structure


def _table4(comparison: Comparison, mode: str) -> Any:
    table = comparison.tables.table4.get(mode)
    assert table is not None
    return table


def test_every_run_has_its_row_in_table4_and_the_leaderboard_rows_are_published(
    comparison: Comparison, page: str
) -> None:
    tree = Tree(page)
    for mode, title in (("step", "step-by-step"), ("e2e", "end-to-end")):
        table = tree.table(f"Table 4, {title} mode")
        rows = table["rows"][1:]
        expected = _table4(comparison, mode).rows
        assert [r["attrs"]["data-label"] for r in rows] == [r.label for r in expected]
        having = [r.label for r in comparison.runs if mode in r.modes]
        assert [r.label for r in expected if r.kind == "run"] == having
        assert len(having) == (4 if mode == "e2e" else 2)
        for row, want in zip(rows, expected, strict=True):
            published = "published" in row["cells"][0]["text"]
            assert published == (want.kind == "leaderboard")
            assert row["attrs"]["class"] == want.kind
            # Every value as the comparison has it (two decimals), the interval beneath.
            for cell, metric in zip(
                row["cells"][1:], _table4(comparison, mode).columns, strict=True
            ):
                value = want.values.get(metric)
                shown = "n/a" if value is None else f"{value:.2f}"
                assert cell["text"].startswith(shown)
                if want.ci.get(metric):
                    low, high = want.ci[metric]
                    assert f"[{low:.2f}, {high:.2f}]" in cell["text"]
    # The step table has no leaderboard row only if the board has no step numbers.
    assert any(r.kind == "leaderboard" for r in _table4(comparison, "e2e").rows)


def test_the_best_cells_are_marked_bold_as_the_comparison_says(
    comparison: Comparison, page: str
) -> None:
    tree = Tree(page)
    marked = 0
    for mode, title in (("step", "step-by-step"), ("e2e", "end-to-end")):
        data = _table4(comparison, mode)
        table = tree.table(f"Table 4, {title} mode")
        for row in table["rows"][1:]:
            label = row["attrs"]["data-label"]
            for cell, metric in zip(row["cells"][1:], data.columns, strict=True):
                best = label in data.best.get(metric, [])
                assert ("best" in cell["attrs"].get("class", "")) == best, (label, metric)
                assert (("b", {}) in cell["html"]) == best
                marked += best
    assert marked >= 10


def test_the_matrix_has_one_row_per_query_and_mode(
    comparison: Comparison, page: str, sample_dataset: Any
) -> None:
    tree = Tree(page)
    matrices = [t for t in tree.tables if t["attrs"].get("class") == "matrix"]
    assert [t["attrs"]["data-mode"] for t in matrices] == ["step", "e2e"]
    for table in matrices:
        mode = table["attrs"]["data-mode"]
        rows = [r for r in table["rows"] if r["attrs"].get("class", "").startswith("q")]
        grouped = [q.qid for t in QUERY_TYPES for q in sample_dataset if q.type == t]
        assert [r["attrs"]["data-q"] for r in rows] == grouped
        want = {q.query_id: q for q in comparison.matrix.queries if q.mode == mode}
        for row in rows:
            query = want[row["attrs"]["data-q"]]
            assert ("flipped" in row["attrs"]["class"]) == query.flip
            cells = row["cells"][2:]
            assert len(cells) == len(LABELS)
            for cell, label in zip(cells, LABELS, strict=True):
                got = query.cells[label]
                if got.epochs == 0:
                    assert cell["attrs"]["class"].split()[0] == "N"
                elif got.epochs > 1:
                    assert cell["text"] == f"{got.passed}/{got.epochs}"
                else:
                    assert got.outcome is not None
                    assert cell["attrs"]["class"][0] == got.outcome[0].upper()
                versus = query.versus_reference.get(label)
                assert ("rg" in cell["attrs"]["class"].split()) == (versus == "regressed")
                assert ("fx" in cell["attrs"]["class"].split()) == (versus == "fixed")
        # A group row per query type present, before its queries.
        groups = [r for r in table["rows"] if r["attrs"].get("class") == "group"]
        assert len(groups) == len({q.type for q in sample_dataset})
    # The mock fails everything the oracle passes, so queries flip, and some regressed.
    assert any(q.flip for q in comparison.matrix.queries)
    assert 'class="F rg"' in page
    # The sampled run's epochs: a query with 2 of 3 passed (query 1 is wrong at odd seeds).
    assert ">2/3</td>" in page


def test_plots_one_per_metric_with_every_run_and_the_fronts(
    comparison: Comparison, page: str
) -> None:
    for mode, table in comparison.tables.table4.items():
        for metric in table.columns:
            figure = page[page.index(f'<figure id="plot-{mode}-{metric}">') :]
            chart = parse(figure[figure.index("<svg") : figure.index("</svg>") + 6])
            dots = [e for e in chart.iter() if e.get("class") == "dot"]
            marks = [e for e in chart.iter() if (e.get("class") or "").startswith("mark")]
            rows = table.rows
            measured = [r for r in rows if r.kind == "run" and r.values.get(metric) is not None]
            assert len(dots) == len(measured)
            assert len(marks) == sum(r.kind == "leaderboard" for r in rows)
    # Reliability curves: the sampled run has three epochs.
    assert '<figure id="plot-e2e-pass_hat_k">' in page
    assert '<figure id="plot-e2e-pass_at_k">' in page
    # The time front has every e2e run; the cost front only the priced run.
    assert '<figure id="plot-front-time">' in page
    cost = comparison.front.cost
    assert [p.label for p in cost.points] == ["sampled x3"]
    assert '<figure id="plot-front-cost">' in page
    for label, reason in cost.left_out.items():
        assert html.escape(f"{label}: left out of the cost front: {reason}") in page
    for chart in svgs(page):
        parse(chart)


def test_reliability_lists_flaky_queries_and_pass_k(comparison: Comparison, page: str) -> None:
    tree = Tree(page)
    table = tree.table("Reliability, end-to-end mode")
    rel = comparison.runs[3].reliability.e2e
    assert rel is not None
    assert rel.flaky == ["1", "4"]
    row = next(r for r in table["rows"] if "sampled x3" in r["cells"][0]["text"])
    texts = [c["text"] for c in row["cells"]]
    assert texts[1] == "3"
    assert texts[2:5] == [f"{rel.pass_hat_k[k]:.2f}" for k in ("1", "2", "3")]
    # Five queries, 1 and 4 passed in 2 of 3 epochs: pass^k = mean C(c,k)/C(3,k).
    assert texts[2:5] == ["86.67", "73.33", "60.00"]
    assert texts[5:8] == ["86.67", "100.00", "100.00"]
    assert texts[5:8] == [f"{rel.pass_at_k[k]:.2f}" for k in ("1", "2", "3")]
    assert texts[8].startswith("2")
    assert "1, 4" in texts[8]


def test_paired_tests_against_the_reference(comparison: Comparison, page: str) -> None:
    tree = Tree(page)
    table = tree.table("Paired against oracle, end-to-end mode")
    paired = comparison.paired.runs
    assert set(paired) == set(LABELS[1:])
    mock = next(r for r in table["rows"][1:] if HOSTILE in r["cells"][0]["text"])
    e2e = paired[HOSTILE].metrics.e2e
    assert e2e is not None
    ans = e2e["ans_acc"]
    assert ans.difference is not None
    assert ans.p_value is not None
    headers = [c["text"] for c in table["rows"][0]["cells"]]
    cell = mock["cells"][headers.index("AnsAcc")]
    assert cell["text"].startswith(f"{ans.difference:+.2f}")
    assert f"p={ans.p_value:.3g}" in cell["text"]
    # The mock is far worse on 17 queries: significant, and marked so.
    assert ans.p_value < 0.05
    assert "sig worse" in cell["attrs"]["class"]
    assert "significant" in cell["text"]


def test_links_only_where_a_run_has_its_own_report(comparison: Comparison, page: str) -> None:
    links = [a for t, a in Tree(page).elements if t == "a" and "run-link" in a.get("class", "")]
    assert links
    assert {a["href"] for a in links} == {"oracle.html"}
    # Without any html, no run link at all.
    bare = comparison.model_copy(deep=True)
    for run in bare.runs:
        run.html = None
    assert 'class="run-link"' not in render_comparison_html(bare)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("runs/a b.html", "runs/a%20b.html"),
        ("../r#1.html", "../r%231.html"),
        ("https://ci.example/r.html", "https://ci.example/r.html"),
        ("javascript:alert(1)", None),
        ("data:text/html,x", None),
        ("", None),
        (None, None),
        (3, None),
    ],
)
def test_href(target: Any, expected: str | None) -> None:
    assert href(target) == expected


def test_labels_and_ids_are_text_never_markup(page: str, written: dict[str, Any]) -> None:
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "<script" not in page
    hostile = copy.deepcopy(written)
    hostile["notes"].append("</style><script>alert(1)</script>")
    hostile["matrix"]["queries"][0]["query_id"] = '"><img src=x onerror=alert(1)>'
    hostile["runs"][0]["html"] = 'x.html" onclick="alert(1)'
    text = page_of(hostile)
    assert "<script" not in text
    assert "<img" not in text
    assert ' onclick="' not in text
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in text
    assert "&lt;/style&gt;&lt;script&gt;" in text


def test_no_external_reference_and_no_script(page: str) -> None:
    tree = Tree(page)
    for tag, attrs in tree.elements:
        assert tag not in ("script", "img", "iframe", "object", "embed", "link") or (
            tag == "link" and attrs.get("href") == "data:,"
        )
        assert "src" not in attrs
        if tag == "a":
            assert attrs["href"].startswith("#") or attrs["href"] == "oracle.html"
    assert "url(" not in page
    assert "@import" not in page
    assert "default-src &#x27;none&#x27;" in page


# --------------------------------------------------------------------------------------------
# Missing pieces and perturbed comparisons


def _no_front(x: str) -> dict[str, Any]:
    return {"x": x, "points": [], "front": [], "left_out": {}}


def test_missing_pieces_are_said_not_raised(written: dict[str, Any]) -> None:
    step_only = copy.deepcopy(written)
    del step_only["tables"]["table4"]["e2e"]
    for run in step_only["runs"]:
        run["reliability"] = {
            "step": {"epochs": 1, "k": [1], "pass_hat_k": {}, "pass_at_k": {}, "flaky": []}
        }
        run["cost"]["cost_per_case"] = None
    step_only["front"] = {"cost": _no_front("cost_per_case"), "time": _no_front("wall_per_case_s")}
    step_only["matrix"]["queries"][0]["cells"] = {}
    step_only["paired"]["runs"] = {}
    text = page_of(step_only)
    assert "No run has end-to-end mode" in text
    assert "Every run has one epoch" in text
    assert "No front to draw" in text
    assert "No paired tests" in text
    bare = {**written, "runs": [], "matrix": {"runs": [], "queries": [], "groups": []}}
    text = page_of(bare)
    assert "The comparison has no runs." in text
    assert "No per-query matrix" in text


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "cmp.json: not a pytest-gta comparison (schema None"),
        ({"schema": "pytest-gta-comparison/2"}, "cmp.json: schema is pytest-gta-comparison/2: "),
        ({"schema": "pytest-gta-comparison/1", "runs": "nonsense"}, "cmp.json: "),
    ],
)
def test_what_is_not_a_comparison_is_a_usage_error(data: Any, message: str) -> None:
    with pytest.raises(GtaUsageError) as refusal:
        page_of(data)
    assert str(refusal.value).startswith(message)


def test_a_bad_field_is_named(written: dict[str, Any]) -> None:
    broken = copy.deepcopy(written)
    broken["runs"][1]["cost"]["cases"] = "many"
    with pytest.raises(GtaUsageError) as refusal:
        page_of(broken)
    assert str(refusal.value).startswith("cmp.json: runs[1].cost.cases is 'many': ")
    broken = {**written, "reference": "nobody"}
    with pytest.raises(GtaUsageError, match="the reference 'nobody' is not a run's label"):
        page_of(broken)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into a JSON value (dict keys and list indexes)."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            out += _paths(item, (*prefix, index))
    return out


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_perturbed_comparisons_are_refused_or_rendered(
    written: dict[str, Any], data: st.DataObject
) -> None:
    base = written
    paths = [p for p in _paths(base) if p]
    edits = data.draw(st.lists(st.tuples(st.sampled_from(paths), st.booleans(), JUNK), max_size=6))
    broken = copy.deepcopy(base)
    for path, delete, junk in edits:
        parent: Any = broken
        try:
            for key in path[:-1]:
                parent = parent[key]
            if delete and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = junk
        except (KeyError, IndexError, TypeError):
            continue
    try:
        text = page_of(broken)
    except GtaUsageError as exc:
        message = str(exc)
    else:
        message = ""
    if message:
        assert message.startswith("cmp.json: "), message
        return
    assert text.startswith("<!DOCTYPE html>")
    assert text.endswith("</html>\n")
    for chart in svgs(text):
        ET.fromstring(chart)


# --------------------------------------------------------------------------------------------
# The chart kinds the page adds to report/svg


def test_interval_dots_place_dots_whiskers_and_published_marks() -> None:
    chart = parse(
        interval_dots(
            "AnsAcc",
            [
                Estimate("a", 40.0, (35.0, 45.0)),
                Estimate("b", 60.0, (55.0, 65.0), strong=True),
                Estimate("GPT-4", 50.0, published=True),
                Estimate("c", None),
            ],
        )
    )
    dots = [e for e in chart.iter() if e.get("class") == "dot"]
    assert len(dots) == 2
    xa, xb = (float(d.get("cx")) for d in dots)
    mark = next(e for e in chart.iter() if e.get("class") == "mark published")
    xm = float(re.match(r"M([\d.]+)", mark.get("d")).group(1))
    assert xa < xm < xb
    assert abs((xm - xa) - (xb - xm)) < 0.2  # 50 halfway between 40 and 60
    whiskers = [e.get("d") for e in chart.iter() if e.get("class") == "whisker"]
    assert len(whiskers) == 2
    texts = ["".join(e.itertext()) for e in chart.iter() if e.get("class") == "value"]
    assert texts == ["40.00%", "60.00%", "50.00%", "n/a"]
    bold = [e for e in chart.iter() if e.get("font-weight") == "bold" and e.get("class") == "value"]
    assert ["".join(b.itertext()) for b in bold] == ["60.00%"]


def test_curves_and_scatter_with_front() -> None:
    chart = parse(
        curves(
            "pass^k",
            [1, 2, 3],
            [Curve("a", [80.0, 70.0, 65.0]), Curve("b", [60.0, None, 50.0])],
            whole_x=True,
        )
    )
    points = [e for e in chart.iter() if (e.get("class") or "").startswith("point")]
    assert len(points) == 5
    ticks = ["".join(e.itertext()) for e in chart.iter() if e.get("class") == "tick"]
    assert "1.5" not in ticks
    chart = parse(
        scatter(
            "cost",
            [
                Spot("cheap", 0.001, 40.0),
                Spot("dear", 0.004, 70.0),
                Spot("bad", 0.005, 30.0),
                Spot("no cost", None, 50.0),
            ],
            front=["cheap", "dear"],
        )
    )
    spots = [e for e in chart.iter() if "spot" in (e.get("class") or "").split()]
    assert len(spots) == 3
    on_front = [e for e in chart.iter() if e.get("class") == "spot on-front"]
    assert len(on_front) == 2
    (front,) = [e for e in chart.iter() if e.get("class") == "front"]
    assert front.get("d").count("H") == 1


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.tuples(
            st.text(max_size=30),
            st.one_of(st.none(), st.floats()),
            st.floats(),
            st.floats(),
            st.booleans(),
        ),
        max_size=8,
    )
)
def test_point_charts_always_well_formed(values: list[Any]) -> None:
    rows = [Estimate(t, v, (lo, hi), published=p) for t, v, lo, hi, p in values]
    parse(interval_dots("t", rows, unit="" if len(values) % 2 else "%"))
    xs = list(range(1, len(values) + 1))
    parse(curves("t", xs, [Curve("c", [v for _, v, *_ in values])]))
    parse(
        scatter(
            "t", [Spot(t, lo, hi) for t, _, lo, hi, _ in values], front=[t for t, *_ in values[:2]]
        )
    )


# --------------------------------------------------------------------------------------------
# Size and the browser


def test_page_size_for_twenty_runs_of_458_cases(written: dict[str, Any]) -> None:
    # 20 runs, every one the shape of the real ones, over 229 queries x 2 modes.
    big = _scaled(written, runs=20, queries=229)
    text = page_of(big)
    size = len(text.encode("utf-8"))
    rows = Counter(re.findall(r'<tr class="q[ "]', text))
    assert sum(rows.values()) == 458
    assert size < 1_500_000, size


def _scaled(comparison: dict[str, Any], *, runs: int, queries: int) -> dict[str, Any]:
    """``comparison`` with ``runs`` runs (copies of its own) and ``queries`` queries per mode."""
    big = copy.deepcopy(comparison)
    originals = big["runs"]
    labels = [f"{originals[i % len(originals)]['label'][:20]} #{i}" for i in range(runs)]
    big["runs"] = [dict(originals[i % len(originals)], label=labels[i]) for i in range(runs)]
    big["reference"] = labels[0]
    for table in big["tables"]["table4"].values():
        kept = [r for r in table["rows"] if r["kind"] == "run"][:1]
        table["rows"] = [dict(kept[0], label=label) for label in labels] + [
            r for r in table["rows"] if r["kind"] == "leaderboard"
        ]
    old = big["matrix"]["queries"]
    new = []
    for mode in ("step", "e2e"):
        mine = [q for q in old if q["mode"] == mode]
        for n in range(queries):
            q = mine[n % len(mine)]
            cells = list(q["cells"].values())
            new.append(
                dict(
                    q,
                    query_id=str(n),
                    cells={label: cells[i % len(cells)] for i, label in enumerate(labels)},
                    versus_reference={label: "same" for label in labels},
                )
            )
    big["matrix"] = {"runs": labels, "queries": new, "groups": []}
    return big


@pytest.mark.slow
def test_the_page_renders_in_chromium_with_no_network(
    chromium: Any, runs_dir: Path, page: str, comparison: Comparison, artifacts_dir: Path
) -> None:
    with serve_directory(runs_dir) as server:
        url = server.url("compare.html")
        result = chromium.dump_dom(url, window=(1400, 1400), proxy=server.proxy)
        shot = chromium.screenshot(
            url, artifacts_dir / "compare-html.png", window=(1400, 3000), proxy=server.proxy
        )
    assert result.csp_violations == []
    assert shot.csp_violations == []
    # Only the page itself was fetched, through the proxy that sees every request.
    assert [r.path for r in server.page_requests] == ["/compare.html"] * 2
    tree = Tree(result.dom)
    table = tree.table("Table 4, end-to-end mode")
    assert [r["attrs"]["data-label"] for r in table["rows"][1:]] == [
        r.label for r in _table4(comparison, "e2e").rows
    ]
    rows = [a for t, a in tree.elements if t == "tr" and "data-q" in a]
    assert len(rows) == len(comparison.matrix.queries)
    assert result.dom.count("<svg") >= len(svgs(page)) >= 10
    data = (artifacts_dir / "compare-html.png").read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 50_000, "a blank page compresses to far less"
