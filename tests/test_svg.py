"""Inline-SVG charts: every output parsed back and its geometry checked against the input.

Each chart is parsed with ``xml.etree.ElementTree`` and checked for what the HTML report's
Content-Security-Policy and a standalone pytest-html extra need (one ``<svg>`` root with
``role="img"``, ``<title>``, ``<desc>``, a ``viewBox``, nothing external). Bar widths, whiskers,
totals and bin counts are read back from the rects and their tooltips and compared with values
computed here independently; Hypothesis throws arbitrary unicode and floats at all three charts.
"""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_gta.report.svg import PALETTE, Series, grouped_bars, histograms, stacked_bars

NS = "http://www.w3.org/2000/svg"
GEOMETRY = ("x", "y", "x1", "x2", "y1", "y2", "width", "height")
#: Elements that load, run or style something: none may appear under the report's CSP.
FORBIDDEN_TAGS = {"script", "image", "use", "a", "foreignObject", "style", "font", "font-face"}
HOSTILE = '<script>alert("x")</script> & \'q\' "dq" ]]> <!-- -->'


def q(tag: str) -> str:
    return f"{{{NS}}}{tag}"


def local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def classes(el: ET.Element) -> set[str]:
    return set((el.get("class") or "").split())


def parse(svg: str) -> ET.Element:
    """Parse a chart and check everything any chart must satisfy."""
    assert svg.isascii()
    root = ET.fromstring(svg)
    assert root.tag == q("svg")
    assert root.get("role") == "img"
    assert root.get("font-family") == "sans-serif"
    first, second = list(root)[:2]
    assert first.tag == q("title")
    assert second.tag == q("desc")
    assert second.text
    width, height = float(root.get("width", "nan")), float(root.get("height", "nan"))
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}"
    assert width >= 320
    assert height > 0
    for el in root.iter():
        assert local(el.tag) not in FORBIDDEN_TAGS
        for name, value in el.attrib.items():
            assert "href" not in name
            assert not name.startswith("on")
            assert "url(" not in value
            assert "javascript" not in value.lower()
            if name in GEOMETRY:
                number = float(value)
                assert math.isfinite(number)
                assert -1 <= number <= max(width, height) + 1, (el.tag, name, value)
                if name in ("width", "height") and el is not root:
                    assert number >= 0
        if el.tag == q("rect") and "bar" in classes(el):
            assert el.find(q("title")) is not None, "every bar has its own tooltip"
            assert float(el.get("x", "0")) + float(el.get("width", "0")) <= width + 0.1
    return root


def bars(root: ET.Element, series: int | None = None) -> list[ET.Element]:
    wanted = "bar" if series is None else f"series-{series}"
    return [el for el in root.iter(q("rect")) if {"bar", wanted} <= classes(el)]


def tip(el: ET.Element) -> str:
    title = el.find(q("title"))
    assert title is not None
    return title.text or ""


def texts(root: ET.Element, cls: str) -> list[str]:
    return [el.text or "" for el in root.iter(q("text")) if cls in classes(el)]


def all_text(root: ET.Element) -> Iterator[str]:
    for el in root.iter():
        if el.text:
            yield el.text


def whisker_ends(el: ET.Element) -> tuple[float, float]:
    """x of a whisker's two ends, from its path ``M<start> <y>H<end>...``."""
    match = re.match(r"M([-\d.]+) [-\d.]+H([-\d.]+)", el.get("d", ""))
    assert match
    return float(match[1]), float(match[2])


def width_of(el: ET.Element) -> float:
    return float(el.get("width", "nan"))


def is_xml_char(ch: str) -> bool:
    """The XML 1.0 ``Char`` production, written out from the specification."""
    cp = ord(ch)
    return (
        cp in (0x9, 0xA, 0xD)
        or 0x20 <= cp <= 0xD7FF
        or 0xE000 <= cp <= 0xFFFD
        or 0x10000 <= cp <= 0x10FFFF
    )


def expected_text(raw: str) -> str:
    """What a label becomes: non-XML characters to U+FFFD, line breaks and tabs to spaces."""
    return "".join(" " if ch in "\t\n\r" else ch if is_xml_char(ch) else "\ufffd" for ch in raw)


# ---------------------------------------------------------------------------------------------
# grouped bars


def test_bar_widths_are_proportional_to_values() -> None:
    values = [95.1, 50.0, 25.0, 0.0]
    root = parse(grouped_bars("m", ["a", "b", "c", "d"], [Series("run", values)], unit="%"))
    widths = [width_of(el) for el in bars(root)]
    assert len(widths) == 4
    # The default scale of a percentage is 100: the plot width is the 95.1 bar's / 0.951.
    plot = widths[0] / 0.951
    for value, width in zip(values, widths, strict=True):
        assert width == pytest.approx(plot * value / 100, abs=0.1)
    assert texts(root, "value") == ["95.1%", "50.0%", "25.0%", "0.0%"]
    assert [tip(el) for el in bars(root)] == [
        "a, run: 95.1%",
        "b, run: 50.0%",
        "c, run: 25.0%",
        "d, run: 0.0%",
    ]


def test_default_scale_is_the_largest_value_or_interval_end() -> None:
    series = [Series("n", [2, 4], [(1, 3), (3, 8)])]
    root = parse(grouped_bars("m", ["a", "b"], series))
    first, second = (width_of(el) for el in bars(root))
    assert second / first == pytest.approx(2, abs=0.01)
    left = float(bars(root)[0].get("x", "nan"))
    plot = second / (4 / 8)
    whiskers = [el for el in root.iter(q("path")) if "whisker" in classes(el)]
    assert whisker_ends(whiskers[1])[1] == pytest.approx(left + plot, abs=0.2)
    # Counts get integer labels; the tooltip carries the interval.
    assert texts(root, "value") == ["2", "4"]
    assert tip(bars(root)[1]) == "b, n: 4 [3, 8]"
    # The interval of an unmeasured value is not drawn, so it does not set the scale either.
    root = parse(
        grouped_bars("m", ["a", "b", "c"], [Series("n", [2, 1, None], [None] * 2 + [(0, 99)])])
    )
    assert width_of(bars(root)[1]) == pytest.approx(width_of(bars(root)[0]) / 2, abs=0.1)
    assert texts(root, "tick")[-1] == "2"


def test_max_value_clamps_bars_and_bad_max_value_falls_back() -> None:
    series = [Series("s", [100.0, 50.0, 200.0])]
    root = parse(grouped_bars("m", ["a", "b", "c"], series, max_value=100))
    full, half, over = (width_of(el) for el in bars(root))
    assert half == pytest.approx(full / 2, abs=0.1)
    assert over == full
    assert texts(root, "value")[2] == "200"
    for bad in (float("nan"), float("inf"), 0.0, -3.0):
        root = parse(grouped_bars("m", ["a", "b", "c"], series, max_value=bad))
        assert [width_of(el) for el in bars(root)][1] == pytest.approx(full / 4, abs=0.1)


def test_whiskers_only_where_intervals_are_given() -> None:
    run = Series("run", [90.0, 50.0, None, 40.0], [(85.0, 95.0), None, (1.0, 2.0), (30.0, 45.0)])
    board = Series("board", [80.0, 60.0, 70.0, 10.0])
    root = parse(grouped_bars("m", list("abcd"), [run, board], unit="%"))
    whiskers = [el for el in root.iter(q("path")) if "whisker" in classes(el)]
    # One per measured value with an interval: none for the missing interval, none for the
    # unmeasured value (its interval alone would be a claim without a measurement), none for
    # the series without intervals.
    assert len(whiskers) == 2
    assert all(classes(el) == {"whisker", "series-0"} for el in whiskers)
    left = float(bars(root)[0].get("x", "nan"))
    plot = width_of(bars(root, 0)[0]) / 0.9
    spans = []
    for el in whiskers:
        start, end = whisker_ends(el)
        spans.append(((start - left) / plot * 100, (end - left) / plot * 100))
    assert spans == [
        (pytest.approx(85, abs=0.1), pytest.approx(95, abs=0.1)),
        (pytest.approx(30, abs=0.1), pytest.approx(45, abs=0.1)),
    ]
    assert [tip(el) for el in bars(root, 0)] == [
        "a, run: 90.0% [85.0%, 95.0%]",
        "b, run: 50.0%",
        "d, run: 40.0% [30.0%, 45.0%]",
    ]


def test_hostile_intervals_are_ordered_clamped_or_dropped() -> None:
    intervals: list[Any] = [
        (95.0, 85.0),  # swapped
        (-math.inf, math.inf),  # unbounded: clamped to the axis
        (math.nan, 3.0),  # NaN: no whisker
        (1.0, 2.0, 3.0),  # malformed: no whisker
        None,
    ]
    series = Series("s", [90.0, 50.0, 20.0, 10.0, 5.0], intervals)
    root = parse(grouped_bars("m", list("abcde"), [series], unit="%"))
    whiskers = [el for el in root.iter(q("path")) if "whisker" in classes(el)]
    assert len(whiskers) == 2
    left = float(bars(root)[0].get("x", "nan"))
    plot = width_of(bars(root)[0]) / 0.9
    start, end = whisker_ends(whiskers[1])
    assert start == pytest.approx(left, abs=0.1)
    assert end == pytest.approx(left + plot, abs=0.1)
    assert tip(bars(root)[0]) == "a, s: 90.0% [85.0%, 95.0%]"


@pytest.mark.parametrize(
    "missing",
    [None, math.nan, math.inf, -math.inf, "12", 10**400, object()],
    ids=["none", "nan", "inf", "-inf", "str", "huge-int", "object"],
)
def test_unmeasured_values_are_na_not_zero(missing: Any) -> None:
    run = Series("run", [80.0, missing])
    root = parse(grouped_bars("m", ["a", "b"], [run, Series("base", [70.0, 60.0])], unit="%"))
    assert [tip(el) for el in bars(root, 0)] == ["a, run: 80.0%"]
    assert len(bars(root, 1)) == 2
    (na,) = [el for el in root.iter(q("g")) if "na" in classes(el)]
    assert classes(na) == {"na", "series-0"}
    assert tip(na) == "b, run: n/a"
    assert texts(na, "value") == ["n/a"]
    desc = root.find(q("desc"))
    assert desc is not None
    assert "b: run n/a, base 60.0%" in (desc.text or "")


def test_negative_and_huge_values_are_clamped_and_labelled() -> None:
    values = [-5.0, 1e308, 5e-324, 3.0]
    root = parse(grouped_bars("m", list("abcd"), [Series("s", values)]))
    widths = [width_of(el) for el in bars(root)]
    assert widths[0] == 0
    assert widths[2] == 0
    assert widths[3] == 0
    assert widths[1] > 100
    assert texts(root, "value") == ["-5.0", "1e+308", "0.0", "3.0"]


def test_legend_only_with_several_series() -> None:
    one = parse(grouped_bars("m", ["a"], [Series("run", [1.0])]))
    assert not [el for el in one.iter(q("g")) if "legend" in classes(el)]
    series = [Series("run", [1.0]), Series("board", [2.0]), Series("base", [3.0], color="#123")]
    root = parse(grouped_bars("m", ["a"], series))
    legend = [el for el in root.iter(q("g")) if "legend" in classes(el)]
    assert [sorted(classes(el)) for el in legend] == [["legend", f"series-{i}"] for i in range(3)]
    assert [texts(el, "legend-label") for el in legend] == [["run"], ["board"], ["base"]]
    swatches = [el.find(q("rect")) for el in legend]
    assert [el.get("fill") for el in swatches if el is not None] == [*PALETTE[:2], "#123"]
    assert [el.get("fill") for el in bars(root)] == [*PALETTE[:2], "#123"]


def test_labels_are_escaped_text_never_markup() -> None:
    svg = grouped_bars(
        HOSTILE,
        [HOSTILE, "b"],
        [Series(HOSTILE, [1.0, 2.0]), Series("ok", [3.0, 4.0])],
        unit=" & <u>",
        description=HOSTILE,
    )
    root = parse(svg)
    assert "<script" not in svg
    assert {local(el.tag) for el in root.iter()} <= {
        "svg", "title", "desc", "text", "g", "rect", "line", "path"
    }  # fmt: skip
    assert root.findtext(q("title")) == HOSTILE
    assert root.findtext(q("desc")) == HOSTILE
    assert tip(bars(root, 0)[0]) == f"{HOSTILE}, {HOSTILE}: 1 & <u>"
    assert "4 & <u>" in texts(root, "value")


def test_long_labels_are_cut_with_the_full_text_on_hover() -> None:
    long = "RegionAttributeDescription of a very long tool name " * 3
    root = parse(grouped_bars("m", [long, "OCR"], [Series("s", [1.0, 2.0])]))
    shown = texts(root, "category")
    assert shown[1] == "OCR"
    assert shown[0].endswith("\u2026")
    assert long.startswith(shown[0][:-1])
    assert len(shown[0]) < len(long)
    holders = [el for el in root.iter(q("g")) if el.find(q("text")) is not None]
    assert any(tip(el) == long for el in holders)
    assert tip(bars(root)[0]).startswith(long)


def test_forty_categories_do_not_overlap() -> None:
    tools = [f"Tool{i:02d}" for i in range(40)]
    series = [
        Series(name, [(i * 7 + k * 13) % 100 for i in range(40)], [(1.0, 2.0)] * 40)
        for k, name in enumerate(("tool accuracy", "argument accuracy", "baseline"))
    ]
    svg = grouped_bars("Per tool", tools, series, unit="%")
    root = parse(svg)
    height = float(root.get("height", "nan"))
    rects = bars(root)
    assert len(rects) == 120
    rows: dict[str, tuple[float, float]] = {}
    for el in rects:
        category = tip(el).split(",")[0]
        top, bottom = (
            float(el.get("y", "nan")),
            float(el.get("y", "nan")) + float(el.get("height", "nan")),
        )
        low, high = rows.get(category, (top, bottom))
        rows[category] = (min(low, top), max(high, bottom))
    assert list(rows) == tools
    spans = list(rows.values())
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
    assert spans[-1][1] < height
    label_ys = [
        float(el.get("y", "nan")) for el in root.iter(q("text")) if "category" in classes(el)
    ]
    assert all(b - a >= 14 for a, b in itertools.pairwise(label_ys))
    # Each label sits within its group's rows.
    assert all(low <= y <= high + 4 for y, (low, high) in zip(label_ys, spans, strict=True))
    ten = parse(
        grouped_bars("Per tool", tools[:10], [Series(s.name, s.values[:10]) for s in series])
    )
    assert float(ten.get("height", "nan")) < height


@pytest.mark.parametrize("chart", [grouped_bars, stacked_bars])
def test_length_mismatch_names_the_series(chart: Any) -> None:
    with pytest.raises(ValueError, match=r"series 'baseline' has 2 values for 3 categories"):
        chart("m", list("abc"), [Series("run", [1, 2, 3]), Series("baseline", [1, 2])])
    with pytest.raises(ValueError, match=r"series 'run' has 1 values for 0 categories"):
        chart("m", [], [Series("run", [1])])


def test_interval_length_mismatch_and_bad_colour_name_the_series() -> None:
    with pytest.raises(ValueError, match=r"series 'run' has 1 intervals for 2 categories"):
        grouped_bars("m", ["a", "b"], [Series("run", [1, 2], [(0, 1)])])
    with pytest.raises(ValueError, match=r"series 'run' has color 'url\(http://x\)'"):
        grouped_bars("m", ["a"], [Series("run", [1], color="url(http://x)")])


def test_empty_inputs_say_no_data() -> None:
    charts = [
        grouped_bars("Nothing <here>", [], []),
        grouped_bars("t", ["a"], []),
        grouped_bars("t", [], [Series("s", [])]),
        stacked_bars("t", [], []),
        stacked_bars("t", ["a"], []),
        histograms("t", []),
        histograms("t", [("a", []), ("b", [math.nan])]),
    ]
    for svg in charts:
        root = parse(svg)
        assert texts(root, "no-data") == ["no data"]
        assert not bars(root)
    assert ET.fromstring(charts[0]).findtext(q("title")) == "Nothing <here>"


def test_no_external_references() -> None:
    series = [Series("run", [1.0, None], [(0.5, 2.0), None]), Series("base", [2.0, 3.0])]
    for svg in (
        grouped_bars("m", ["a", "b"], series, unit="%"),
        stacked_bars("m", ["a", "b"], series),
        histograms("m", [("a", [0.1, 0.5]), ("b", [])]),
    ):
        parse(svg)
        # The only URL is the namespace name, which nothing fetches.
        assert svg.count("http") == 1
        assert svg.count(NS) == 1
        assert "url(" not in svg
        assert "href" not in svg
        assert "@import" not in svg


def test_output_is_deterministic_and_compact() -> None:
    series = [
        Series("run", [95.123, None, 3.0], [(90.0, 99.0), None, None]),
        Series("b", [1, 2, 3]),
    ]
    first = grouped_bars("m", ["a", "b", "c"], series, unit="%")
    assert first == grouped_bars("m", ["a", "b", "c"], series, unit="%")
    assert not re.search(r'="-?\d+\.0"', first), "coordinates carry no trailing .0"
    assert not re.search(r'="-?\d+\.\d\d', first), "coordinates have one decimal at most"
    assert "95.1%" in texts(parse(first), "value")


def test_width_is_kept_usable() -> None:
    for requested, actual in ((10, 320), (-5, 320), (100_000, 10_000), (800, 800)):
        root = parse(grouped_bars("m", ["a"], [Series("s", [1.0])], width=requested))
        assert root.get("width") == str(actual)


# ---------------------------------------------------------------------------------------------
# stacked bars


def test_stacked_segments_and_totals() -> None:
    ok = Series("successful", [3, 4, None, 0])
    failed = Series("failed", [1, 0, None, 2])
    root = parse(stacked_bars("Calls", ["OCR", "Plot", "Solver", "Calc"], [ok, failed]))
    assert texts(root, "total") == ["4", "4", "n/a", "2"]
    # Zero and unmeasured segments add nothing to see or hover.
    assert [tip(el) for el in bars(root)] == [
        "OCR, successful: 3",
        "OCR, failed: 1",
        "Plot, successful: 4",
        "Calc, failed: 2",
    ]
    first, second, plot_only, calc = bars(root)
    assert float(second.get("x", "nan")) == pytest.approx(
        float(first.get("x", "nan")) + width_of(first), abs=0.1
    )
    assert width_of(first) + width_of(second) == pytest.approx(width_of(plot_only), abs=0.15)
    assert width_of(calc) == pytest.approx(width_of(plot_only) / 2, abs=0.1)
    legend = [texts(el, "legend-label") for el in root.iter(q("g")) if "legend" in classes(el)]
    assert legend == [["successful"], ["failed"]]
    single = parse(stacked_bars("Calls", ["a"], [Series("all", [2])]))
    assert [el for el in single.iter(q("g")) if "legend" in classes(el)]


def test_stacked_hostile_values() -> None:
    parts = [
        Series("a", [math.nan, -3, 1e308, 1.5]),
        Series("b", [math.inf, 2, 1e308, 2.5]),
    ]
    root = parse(stacked_bars("m", list("wxyz"), parts))
    totals = texts(root, "total")
    assert totals[0] == "n/a"
    assert totals[1] == "2.0"
    assert totals[3] == "4.0"
    assert [tip(el) for el in bars(root)][:1] == ["x, b: 2.0"]
    huge = [el for el in bars(root) if tip(el).startswith("y,")]
    assert len(huge) == 2
    assert sum(width_of(el) for el in huge) > 100


# ---------------------------------------------------------------------------------------------
# histograms


def bin_counts(root: ET.Element, group: int) -> list[int]:
    return [int(tip(el).rsplit(": ", 1)[1]) for el in bars(root, group)]


def test_histogram_bin_counts_match_an_independent_count() -> None:
    edges = [0.0, 0.05, 0.1, 0.15, 0.5, 0.95, 1.0]
    scattered = [(i * 0.6180339887) % 1 for i in range(229)]
    root = parse(histograms("Scores", [("edges", edges), ("scattered", scattered)]))
    assert bin_counts(root, 0) == [2, 2, 0, 0, 0, 1, 0, 0, 0, 2]
    reference = Counter(min(int(v * 10), 9) for v in scattered)
    assert bin_counts(root, 1) == [reference[k] for k in range(10)]
    assert [tip(el).rsplit(": ", 1)[0] for el in bars(root, 0)][::9] == [
        "edges, [0.0, 0.1)",
        "edges, [0.9, 1.0]",
    ]
    assert texts(root, "group") == ["edges", "scattered"]
    stats = texts(root, "stats")
    assert stats[0] == f"n=7, mean {sum(edges) / 7:.2f}"
    assert stats[1] == f"n=229, mean {sum(scattered) / 229:.2f}"


def test_histograms_share_one_count_scale() -> None:
    root = parse(histograms("s", [("small", [0.5]), ("big", [0.5] * 4 + [0.1] * 2)], bins=5))
    heights = {tip(el): float(el.get("height", "nan")) for el in bars(root)}
    unit = heights["big, [0.4, 0.6): 4"] / 4
    assert heights["small, [0.4, 0.6): 1"] == pytest.approx(unit, abs=0.1)
    assert heights["big, [0.0, 0.2): 2"] == pytest.approx(2 * unit, abs=0.1)
    assert heights["small, [0.0, 0.2): 0"] == 0
    assert "the tallest bar counts 4" in texts(root, "note")[0]


def test_histogram_hostile_values_and_empty_groups() -> None:
    values: list[Any] = [0.5, math.nan, math.inf, -2.0, 7.0, None, "0.5"]
    root = parse(histograms("s", [("odd", values), ("empty", [])], bins=4))
    assert bin_counts(root, 0) == [1, 0, 1, 1]
    assert texts(root, "stats") == ["n=3, mean 1.83, 2 outside, 4 n/a", "n=0"]
    assert texts(root, "no-data") == ["no data"]
    assert not bars(root, 1)


def test_histogram_edges_with_other_ranges() -> None:
    root = parse(histograms("s", [("g", [-1.0, 0.25, 3.0])], bins=4, low=-1.0, high=3.0))
    labels = [tip(el).rsplit(": ", 1)[0] for el in bars(root)]
    assert labels == ["g, [-1, 0)", "g, [0, 1)", "g, [1, 2)", "g, [2, 3]"]
    assert bin_counts(root, 0) == [1, 1, 0, 1]
    quarter = parse(histograms("s", [("g", [0.3])], bins=4))
    assert tip(bars(quarter)[1]) == "g, [0.25, 0.50): 1"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bins": 0}, "bins=0"),
        ({"bins": 2.5}, "bins=2.5"),
        ({"bins": True}, "bins=True"),
        ({"low": 1.0, "high": 1.0}, "low=1.0, high=1.0"),
        ({"low": math.nan}, "low=nan"),
        ({"low": -1e308, "high": 1e308}, "low=-1e+308"),
    ],
)
def test_histogram_bad_layout_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        histograms("s", [("g", [0.5])], **kwargs)


def test_many_histograms_wrap_into_rows() -> None:
    groups = [(f"type {i}", [i / 10]) for i in range(9)]
    root = parse(histograms("s", groups, width=640))
    tops = sorted(
        {float(el.get("y", "nan")) for el in root.iter(q("text")) if "group" in classes(el)}
    )
    assert len(tops) == 3
    assert len(bars(root)) == 90


# ---------------------------------------------------------------------------------------------
# properties

LABEL_CHARS = st.one_of(
    st.characters(),
    st.integers(0xD800, 0xDFFF).map(chr),  # lone surrogates, as a bad decode leaves them
    st.integers(0, 0x20).map(chr),  # control characters XML forbids
    st.sampled_from("<>&\"'\ufffe\uffff\u202e\u0301"),
)
LABELS = st.text(LABEL_CHARS, max_size=60)
NUMBERS = st.one_of(
    st.none(),
    st.floats(),
    st.floats(min_value=-1e308, max_value=1e308),
    st.integers(min_value=-(10**400), max_value=10**400),
)
INTERVALS = st.one_of(st.none(), st.tuples(NUMBERS, NUMBERS))


@st.composite
def bar_inputs(draw: st.DrawFn) -> tuple[list[str], list[Series]]:
    categories = draw(st.lists(LABELS, max_size=8))
    n = len(categories)
    series = draw(
        st.lists(
            st.builds(
                Series,
                name=LABELS,
                values=st.lists(NUMBERS, min_size=n, max_size=n),
                intervals=st.one_of(st.none(), st.lists(INTERVALS, min_size=n, max_size=n)),
            ),
            max_size=4,
        )
    )
    return categories, series


@pytest.mark.slow  # 2 s in a full run: slow by cost (issue 39)
@settings(max_examples=150)
@given(inputs=bar_inputs(), title=LABELS, unit=LABELS, max_value=NUMBERS)
@example(
    inputs=(["\ud800"], [Series("\udfff", [math.nan], [(math.inf, -math.inf)])]),
    title="\x00",
    unit="%",
    max_value=None,
)
def test_grouped_bars_always_well_formed(
    inputs: tuple[list[str], list[Series]], title: str, unit: str, max_value: Any
) -> None:
    categories, series = inputs
    svg = grouped_bars(title, categories, series, unit=unit, max_value=max_value)
    root = parse(svg)
    assert root.findtext(q("title")) == expected_text(title)
    assert svg == grouped_bars(title, categories, series, unit=unit, max_value=max_value)
    if categories and series:
        measured = sum(math.isfinite(v) for s in series for v in map(finite_or_nan, s.values))
        assert len(bars(root)) == measured
        for el in bars(root):
            assert any(tip(el).startswith(expected_text(c) + ", ") for c in categories)


def finite_or_nan(value: Any) -> float:
    try:
        return float(value) if value is not None else math.nan
    except OverflowError:
        return math.nan


@settings(max_examples=100)
@given(inputs=bar_inputs(), title=LABELS)
def test_stacked_bars_always_well_formed(
    inputs: tuple[list[str], list[Series]], title: str
) -> None:
    categories, parts = inputs
    root = parse(stacked_bars(title, categories, parts))
    if categories and parts:
        assert len(texts(root, "total")) == len(categories)


@settings(max_examples=100)
@given(
    groups=st.lists(st.tuples(LABELS, st.lists(NUMBERS, max_size=30)), max_size=6),
    title=LABELS,
    bins=st.integers(1, 40),
)
def test_histograms_always_well_formed(
    groups: list[tuple[str, list[Any]]], title: str, bins: int
) -> None:
    root = parse(histograms(title, groups, bins=bins))
    finite = [[v for v in map(finite_or_nan, values) if math.isfinite(v)] for _, values in groups]
    if any(finite):
        for g, values in enumerate(finite):
            counts = bin_counts(root, g)
            assert sum(counts) == len(values)
            assert len(counts) == (bins if values else 0)
