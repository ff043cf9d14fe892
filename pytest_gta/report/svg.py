"""Dependency-free inline-SVG charts for the self-contained HTML report.

The HTML report must open offline under a strict Content-Security-Policy (``default-src
'none'; img-src data:; style-src 'unsafe-inline'``), and the same plots go into pytest-html
extras, where they are shown on their own. So the plots are drawn here, on the controller, as
SVG strings with nothing to fetch: no scripts, fonts, images, ``href`` or ``url()``, colours as
``fill`` attributes (right standalone) plus a ``series-N`` class per series (a page can
restyle). Pure stdlib, because a plotting library would be a heavy dependency of every
``pip install pytest-gta`` for three kinds of bar chart, and string building is fast: a
229-query run's plots take a few milliseconds.

Everything drawn comes from a run report, which is outside data: labels are cleaned (lone
surrogates and characters XML forbids become U+FFFD) and escaped, and the output is pure ASCII
(other characters as character references), so it embeds in any page whatever its encoding.
Hostile numbers (NaN, infinities, negative, huge, non-numbers) are shown as ``n/a`` or clamped,
never a traceback or a broken picture. The output is deterministic: the same input gives the
same string, so a report can be diffed and cached.
"""

from __future__ import annotations

import bisect
import functools
import html
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PALETTE", "Series", "grouped_bars", "histograms", "stacked_bars"]

#: Okabe & Ito's colour-blind-safe palette (2008), the yellow last: it has the least contrast
#: on white. Series beyond it cycle, their ``series-N`` class still tells them apart.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#999999", "#F0E442")

#: Narrower than this and labels, bars and value labels no longer fit side by side.
MIN_WIDTH = 320
MAX_WIDTH = 10_000
#: Finite values above this are drawn (and summed, in stacked bars) as this, so that a sum of
#: hostile huge values stays finite.
_CAP = 1e300

_TEXT = "#222222"
_MUTED = "#666666"
_GRID = "#dddddd"
_PAD = 10
_TITLE_SIZE = 14
_LABEL_SIZE = 12
_VALUE_SIZE = 11
_TICK_SIZE = 10
_TITLE_H = 28
_LEGEND_ROW = 18
_LEGEND_TEXT_MAX = 180.0
_AXIS_H = 24
_ELLIPSIS = "\u2026"

# XML 1.0 allows tab, newline, carriage return and everything from U+0020 except surrogates,
# U+FFFE and U+FFFF; in a Python str a code point in the surrogate range is always a lone one.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_BREAKS = re.compile("[\t\n\r]")
_COLOR = re.compile(r"#[0-9a-fA-F]{3}(?:[0-9a-fA-F]{3})?|[a-zA-Z]{1,32}")


@dataclass(frozen=True)
class Series:
    """One coloured series of a chart: a value (or ``None``, not measured) per category.

    Attributes:
        name: The legend label.
        values: One value per category; ``None`` (or NaN, infinity, a non-number) is drawn as
            ``n/a``, with no bar, so a missing measurement is never mistaken for zero.
        intervals: Optional ``(low, high)`` per value, drawn as whiskers (confidence
            intervals); ``None`` entries get no whisker. Ignored by :func:`stacked_bars`.
        color: ``#rgb``, ``#rrggbb`` or a colour name; empty takes the palette colour of the
            series' index. Anything else is refused: a colour is written into an attribute,
            and ``url(...)`` there would be a reference to something outside the picture.
    """

    name: str
    values: Sequence[float | None]
    intervals: Sequence[tuple[float, float] | None] | None = None
    color: str = ""


# ---------------------------------------------------------------------------------------------
# Text: cleaning, escaping, width estimates


def _clean(text: object) -> str:
    """Text that XML can hold: forbidden characters to U+FFFD, line breaks to spaces."""
    s = text if isinstance(text, str) else str(text)
    return _BREAKS.sub(" ", _INVALID_XML.sub("\ufffd", s))


def _esc(text: str) -> str:
    """Cleaned text escaped for element content and attributes, as pure ASCII."""
    escaped = html.escape(text, quote=True)
    return escaped.encode("ascii", "xmlcharrefreplace").decode("ascii")


@functools.lru_cache(maxsize=4096)
def _char_em(ch: str) -> float:
    """Rough advance width of a character in em of a sans-serif font.

    The viewer picks the actual font, so this errs wide: a label truncated a little early is
    better than one that runs into its bars.
    """
    if ch < "\x80":
        if ch in " .,:;'|!iIjl()[]ft":
            return 0.32
        if ch in "mwMW@%":
            return 0.95
        if ch.isupper():
            return 0.72
        return 0.6
    if unicodedata.combining(ch):
        return 0.0
    if unicodedata.east_asian_width(ch) in ("W", "F"):
        return 1.0
    return 0.75


def _text_px(text: str, size: float) -> float:
    """Estimated width of cleaned text at a font size."""
    return size * sum(_char_em(ch) for ch in text)


def _fit(text: str, max_px: float, size: float) -> str:
    """Text cut to an estimated width, ending in an ellipsis when it was cut."""
    if _text_px(text, size) <= max_px:
        return text
    budget = max_px - size * _char_em(_ELLIPSIS)
    used = 0.0
    kept = []
    for ch in text:
        used += size * _char_em(ch)
        if used > budget:
            break
        kept.append(ch)
    return "".join(kept).rstrip() + _ELLIPSIS


# ---------------------------------------------------------------------------------------------
# Numbers


def _real(value: Any) -> float | None:
    """A number as a float (infinities kept), or None for NaN and non-numbers."""
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if math.isnan(number) else number


def _finite(value: Any) -> float | None:
    """A finite number as a float, or None: what gets a bar; anything else is ``n/a``."""
    number = _real(value)
    return number if number is not None and math.isfinite(number) else None


def _n(x: float) -> str:
    """A coordinate: one decimal (a tenth of a pixel is invisible), no trailing ``.0``."""
    if not math.isfinite(x):
        x = 0.0
    s = f"{x:.1f}"
    if s.endswith(".0"):
        s = s[:-2]
    return "0" if s == "-0" else s


def _fmt(value: float, decimals: int) -> str:
    """A value for display: fixed decimals, three significant digits when huge."""
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "\u221e" if value > 0 else "-\u221e"
    big = 1e15 if decimals == 0 else 1e6
    s = f"{value:.3g}" if abs(value) >= big else f"{value:.{decimals}f}"
    if s.startswith("-") and float(s) == 0:
        s = s[1:]
    return s


def _decimals(values: Sequence[float | None]) -> int:
    """Counts as integers, anything else with one decimal."""
    return 0 if all(v is None or v.is_integer() for v in values) else 1


def _ticks(top: float, plot_w: float) -> list[float]:
    """Round axis ticks from 0 to ``top``, about one per 70 pixels."""
    wanted = max(1, min(5, int(plot_w // 70)))
    try:
        raw = top / wanted
        exponent = math.floor(math.log10(raw))
        unit = 10.0**exponent
        fraction = raw / unit
    except (ValueError, OverflowError, ZeroDivisionError):
        return [0.0]
    nice = 1.0 if fraction <= 1 else 2.0 if fraction <= 2 else 5.0 if fraction <= 5 else 10.0
    step = nice * unit
    if not math.isfinite(step) or step <= 0:
        return [0.0]
    ticks = []
    for k in range(wanted + 2):
        tick = k * step
        if tick > top * (1 + 1e-9):
            break
        ticks.append(tick)
    return ticks


def _tick_label(tick: float, top: float, unit: str) -> str:
    """An axis label with as many decimals as the tick step needs."""
    if tick == 0:
        return "0" + unit
    if top >= 1e6 or top < 1e-3:
        return f"{tick:.3g}{unit}"
    for decimals in range(7):
        s = f"{tick:.{decimals}f}"
        if abs(float(s) - tick) <= abs(tick) * 1e-9:
            return s + unit
    return f"{tick:.3g}{unit}"


# ---------------------------------------------------------------------------------------------
# SVG pieces


def _open(title: str, description: str, width: int, height: float) -> list[str]:
    """The root element with its accessible name and description.

    No ``id`` anywhere: several charts inline in one page would repeat it.
    """
    h = _n(math.ceil(height))
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{h}" '
        f'viewBox="0 0 {width} {h}" font-family="sans-serif" font-size="{_LABEL_SIZE}">',
        f"<title>{_esc(title)}</title>",
        f"<desc>{_esc(description)}</desc>",
    ]


def _text(
    x: float,
    y: float,
    text: str,
    *,
    size: float = _LABEL_SIZE,
    anchor: str = "start",
    cls: str = "label",
    fill: str = _TEXT,
    bold: bool = False,
    max_px: float | None = None,
) -> str:
    """A text element; cut to ``max_px`` with the full text kept as its tooltip."""
    shown = text if max_px is None else _fit(text, max_px, size)
    weight = ' font-weight="bold"' if bold else ""
    anchor_attr = "" if anchor == "start" else f' text-anchor="{anchor}"'
    element = (
        f'<text class="{cls}" x="{_n(x)}" y="{_n(y)}" font-size="{_n(size)}" fill="{fill}"'
        f"{anchor_attr}{weight}>{_esc(shown)}</text>"
    )
    if shown == text:
        return element
    return f"<g><title>{_esc(text)}</title>{element}</g>"


def _rect(x: float, y: float, w: float, h: float, *, cls: str, fill: str, tip: str) -> str:
    """A bar with its own tooltip."""
    return (
        f'<rect class="{cls}" x="{_n(x)}" y="{_n(y)}" width="{_n(max(w, 0.0))}" '
        f'height="{_n(max(h, 0.0))}" fill="{fill}"><title>{_esc(tip)}</title></rect>'
    )


def _title_text(title: str, width: int) -> str:
    """The visible chart title (the root's ``<title>`` is for assistive technology)."""
    return _text(
        _PAD,
        18,
        title,
        size=_TITLE_SIZE,
        cls="chart-title",
        bold=True,
        max_px=width - 2 * _PAD,
    )


def _close(parts: list[str]) -> str:
    parts.append("</svg>")
    return "".join(parts)


def _no_data(title: str, description: str, width: int) -> str:
    """A small valid chart that says there is nothing to draw."""
    title = _clean(title)
    desc = _clean(description) or "No data."
    parts = _open(title, desc, width, 64)
    parts.append(_title_text(title, width))
    parts.append(_text(width / 2, 48, "no data", anchor="middle", cls="no-data", fill=_MUTED))
    return _close(parts)


def _width(width: Any) -> int:
    """The requested width kept within what the layout can use."""
    try:
        return max(MIN_WIDTH, min(MAX_WIDTH, int(width)))
    except (TypeError, ValueError, OverflowError):
        return MIN_WIDTH


def _colors(series: Sequence[Series]) -> list[str]:
    return [s.color or PALETTE[i % len(PALETTE)] for i, s in enumerate(series)]


def _legend(names: Sequence[str], colors: Sequence[str], y: float, width: int) -> list[str]:
    """Legend entries in rows that wrap at the chart's width; ``y`` is the first row's top."""
    parts: list[str] = []
    x = float(_PAD)
    for i, (name, color) in enumerate(zip(names, colors, strict=True)):
        shown = _fit(name, _LEGEND_TEXT_MAX, _LABEL_SIZE)
        entry_w = 14 + _text_px(shown, _LABEL_SIZE) + 16
        if x > _PAD and x + entry_w > width - _PAD:
            x = float(_PAD)
            y += _LEGEND_ROW
        parts.append(
            f'<g class="legend series-{i}">'
            f'<rect x="{_n(x)}" y="{_n(y + 3)}" width="10" height="10" fill="{color}"/>'
            + _text(x + 14, y + 12, name, cls="legend-label", max_px=_LEGEND_TEXT_MAX)
            + "</g>"
        )
        x += entry_w
    return parts


def _legend_height(names: Sequence[str], width: int) -> float:
    """Height the legend of these names takes, rows included."""
    rows, x = 1, float(_PAD)
    for name in names:
        entry_w = 14 + _text_px(_fit(name, _LEGEND_TEXT_MAX, _LABEL_SIZE), _LABEL_SIZE) + 16
        if x > _PAD and x + entry_w > width - _PAD:
            rows += 1
            x = float(_PAD)
        x += entry_w
    return rows * _LEGEND_ROW


def _axis(
    left: float, plot_w: float, top: float, y0: float, y1: float, unit: str
) -> tuple[list[str], list[str]]:
    """Grid lines (drawn under the bars) and tick labels below the plot."""
    grid: list[str] = []
    labels: list[str] = []
    for tick in _ticks(top, plot_w):
        x = left + plot_w * (tick / top)
        grid.append(
            f'<line class="grid" x1="{_n(x)}" y1="{_n(y0)}" x2="{_n(x)}" y2="{_n(y1)}" '
            f'stroke="{_GRID if tick else _MUTED}" stroke-width="1"/>'
        )
        labels.append(
            _text(
                x,
                y1 + 14,
                _tick_label(tick, top, unit),
                size=_TICK_SIZE,
                anchor="middle",
                cls="tick",
                fill=_MUTED,
            )
        )
    return grid, labels


def _check_series(series: Sequence[Series], n: int) -> None:
    """Refuse series that do not match the categories: a silent shift would mislabel bars."""
    for s in series:
        if len(s.values) != n:
            raise ValueError(
                f"series {s.name!r} has {len(s.values)} values for {n} categories: "
                "give one value (None for not measured) per category"
            )
        if s.intervals is not None and len(s.intervals) != n:
            raise ValueError(
                f"series {s.name!r} has {len(s.intervals)} intervals for {n} categories: "
                "give one (low, high) pair or None per category, or intervals=None"
            )
        if s.color and not _COLOR.fullmatch(s.color):
            raise ValueError(
                f"series {s.name!r} has color {s.color!r}: use #rgb, #rrggbb, a colour name, "
                "or an empty string for the palette"
            )


def _interval(raw: Any) -> tuple[float, float] | None:
    """A whisker's ends, ordered; None for a missing, malformed or NaN interval.

    Infinite ends are kept: the caller clamps them to the axis, an unbounded interval is
    still information.
    """
    if raw is None:
        return None
    try:
        low_raw, high_raw = raw
    except (TypeError, ValueError):
        return None
    low, high = _real(low_raw), _real(high_raw)
    if low is None or high is None:
        return None
    return (low, high) if low <= high else (high, low)


# ---------------------------------------------------------------------------------------------
# Charts


def grouped_bars(
    title: str,
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    unit: str = "",
    max_value: float | None = None,
    width: int = 640,
    description: str = "",
    decimals: int | None = None,
) -> str:
    """Horizontal bars, one row group per category and one bar per series.

    For side-by-side comparisons such as metrics x (this run, leaderboard row, baseline) or
    tools x (tool accuracy, argument accuracy): bars of one category sit together, so the eye
    compares series within a category, and horizontal bars leave room for long labels.

    Args:
        title: Shown above the chart and as its accessible name.
        categories: Row group labels, cut with an ellipsis when long (full text on hover).
        series: The bars of each group, in order; a legend is drawn when there are several.
        unit: Appended to value labels and ticks (``"%"`` also makes the default scale 100).
        max_value: The value of a full-width bar; larger values are drawn full width. ``None``
            (or a non-finite or non-positive value) takes the largest value or interval end,
            at least 100 when ``unit`` is ``"%"``, so percentages of different charts compare.
        width: Pixel width (kept within 320..10000); the height follows the categories.
        description: The ``<desc>``; empty generates a text summary of all values, so a
            screen reader gets the data, not just the title.
        decimals: Decimals of value labels; ``None`` takes 1 for percentages and non-integer
            values, 0 for counts.

    Returns:
        One ``<svg>`` element as a string.

    Raises:
        ValueError: A series' values or intervals do not have one entry per category, or its
            colour is not a plain colour; the message names the series.
    """
    _check_series(series, len(categories))
    width = _width(width)
    if not categories or not series:
        return _no_data(title, description, width)

    title = _clean(title)
    unit = _clean(unit)
    cats = [_clean(c) for c in categories]
    names = [_clean(s.name) for s in series]
    colors = _colors(series)
    values = [[_finite(v) for v in s.values] for s in series]
    intervals = [
        [
            _interval(iv) if v is not None else None
            for iv, v in zip(s.intervals or [None] * len(cats), vals, strict=True)
        ]
        for s, vals in zip(series, values, strict=True)
    ]
    measured = [v for vals in values for v in vals if v is not None]
    highs = [iv[1] for ivs in intervals for iv in ivs if iv is not None and math.isfinite(iv[1])]
    top = _finite(max_value)
    if top is None or top <= 0:
        top = max([0.0, *measured, *highs])
        if unit == "%":
            top = max(top, 100.0)
    if top <= 0:
        top = 1.0
    if decimals is None:
        decimals = 1 if unit == "%" else _decimals(measured)
    decimals = max(0, min(6, int(decimals)))

    def label(v: float | None) -> str:
        return "n/a" if v is None else _fmt(v, decimals) + unit

    def span(iv: tuple[float, float]) -> str:
        return f" [{_fmt(iv[0], decimals)}{unit}, {_fmt(iv[1], decimals)}{unit}]"

    labels = [[label(v) for v in vals] for vals in values]
    label_w = min(max(_text_px(c, _LABEL_SIZE) for c in cats), width * 0.35)
    value_w = min(
        max(_text_px(t, _VALUE_SIZE) for row in labels for t in row) + 8,
        width * 0.25,
    )
    left = _PAD + label_w + 8
    plot_w = width - left - value_w - _PAD

    bar_h, bar_gap, group_gap = 14.0, 2.0, 10.0
    group_h = len(series) * bar_h + (len(series) - 1) * bar_gap
    legend_h = _legend_height(names, width) if len(series) > 1 else 0.0
    y0 = _TITLE_H + legend_h + 4
    y1 = y0 + len(cats) * (group_h + group_gap)
    height = y1 + _AXIS_H + _PAD / 2

    if not description:
        rows = "; ".join(
            f"{cat}: " + ", ".join(f"{n} {row[i]}" for n, row in zip(names, labels, strict=True))
            for i, cat in enumerate(cats)
        )
        description = f"Bar chart of {len(cats)} categories by {', '.join(names)}. {rows}."
    parts = _open(title, _clean(description), width, height)
    parts.append(_title_text(title, width))
    if len(series) > 1:
        parts += _legend(names, colors, _TITLE_H, width)
    grid, ticks = _axis(left, plot_w, top, y0, y1, unit)
    parts += grid

    for i, cat in enumerate(cats):
        gy = y0 + group_gap / 2 + i * (group_h + group_gap)
        parts.append(
            _text(
                left - 8,
                gy + group_h / 2 + 4,
                cat,
                anchor="end",
                cls="category",
                max_px=label_w,
            )
        )
        for j, name in enumerate(names):
            by = gy + j * (bar_h + bar_gap)
            mid = by + bar_h / 2
            v, iv, text = values[j][i], intervals[j][i], labels[j][i]
            if v is None:
                parts.append(
                    f'<g class="na series-{j}"><title>{_esc(f"{cat}, {name}: n/a")}</title>'
                    + _text(left + 4, mid + 4, "n/a", size=_VALUE_SIZE, cls="value", fill=_MUTED)
                    + "</g>"
                )
                continue
            # The ratio first: plot_w * 1e308 would overflow.
            w = plot_w * (min(max(v, 0.0), top) / top)
            tip = f"{cat}, {name}: {text}" + (span(iv) if iv is not None else "")
            parts.append(_rect(left, by, w, bar_h, cls=f"bar series-{j}", fill=colors[j], tip=tip))
            end = w
            if iv is not None:
                xl = plot_w * (min(max(iv[0], 0.0), top) / top)
                xh = plot_w * (min(max(iv[1], 0.0), top) / top)
                end = max(end, xh)
                a, b = _n(left + xl), _n(left + xh)
                lo_y, hi_y = _n(mid - 4), _n(mid + 4)
                parts.append(
                    f'<path class="whisker series-{j}" d="M{a} {_n(mid)}H{b}M{a} {lo_y}V{hi_y}'
                    f'M{b} {lo_y}V{hi_y}" stroke="{_TEXT}" stroke-width="1.2" fill="none"/>'
                )
            parts.append(
                _text(
                    left + end + 4,
                    mid + 4,
                    text,
                    size=_VALUE_SIZE,
                    cls="value",
                    max_px=value_w - 6,
                )
            )
    parts += ticks
    return _close(parts)


def stacked_bars(
    title: str,
    categories: Sequence[str],
    parts: Sequence[Series],
    *,
    width: int = 640,
    description: str = "",
) -> str:
    """Horizontal stacked counts per category, the total at the end of each bar.

    For breakdowns of a whole, such as per tool (successful, failed calls) or per mode
    (format, argument, other errors): the bar length is the total, its segments the shares.
    A part that is ``None`` (or negative, NaN, infinite) for a category adds no segment; a
    category with no measured part shows ``n/a`` as its total. Intervals are not drawn.

    Args:
        title: Shown above the chart and as its accessible name.
        categories: Row labels, cut with an ellipsis when long (full text on hover).
        parts: The segments, stacked left to right in this order, each with a legend entry.
        width: Pixel width (kept within 320..10000); the height follows the categories.
        description: The ``<desc>``; empty generates a text summary of all counts.

    Returns:
        One ``<svg>`` element as a string.

    Raises:
        ValueError: A part does not have one value per category, or its colour is not a plain
            colour; the message names the part.
    """
    _check_series(parts, len(categories))
    width = _width(width)
    if not categories or not parts:
        return _no_data(title, description, width)

    title = _clean(title)
    cats = [_clean(c) for c in categories]
    names = [_clean(p.name) for p in parts]
    colors = _colors(parts)
    raw = [[_finite(v) for v in p.values] for p in parts]
    drawn = [[None if v is None else min(max(v, 0.0), _CAP) for v in vals] for vals in raw]
    decimals = _decimals([v for vals in drawn for v in vals])
    totals: list[float | None] = []
    for i in range(len(cats)):
        column = [v for vals in drawn if (v := vals[i]) is not None]
        totals.append(math.fsum(column) if column else None)
    top = max([t for t in totals if t is not None], default=0.0) or 1.0
    total_labels = ["n/a" if t is None else _fmt(t, decimals) for t in totals]

    label_w = min(max(_text_px(c, _LABEL_SIZE) for c in cats), width * 0.35)
    value_w = min(max(_text_px(t, _VALUE_SIZE) for t in total_labels) + 8, width * 0.25)
    left = _PAD + label_w + 8
    plot_w = width - left - value_w - _PAD
    bar_h, row_gap = 16.0, 8.0
    legend_h = _legend_height(names, width)
    y0 = _TITLE_H + legend_h + 4
    y1 = y0 + len(cats) * (bar_h + row_gap)
    height = y1 + _AXIS_H + _PAD / 2

    def shown(v: float | None) -> str:
        return "n/a" if v is None else _fmt(v, decimals)

    if not description:
        rows = "; ".join(
            f"{cat}: total {total_labels[i]} ("
            + ", ".join(f"{n} {shown(vals[i])}" for n, vals in zip(names, raw, strict=True))
            + ")"
            for i, cat in enumerate(cats)
        )
        description = f"Stacked bar chart of {', '.join(names)} per category. {rows}."
    out = _open(title, _clean(description), width, height)
    out.append(_title_text(title, width))
    out += _legend(names, colors, _TITLE_H, width)
    grid, ticks = _axis(left, plot_w, top, y0, y1, "")
    out += grid
    for i, cat in enumerate(cats):
        by = y0 + row_gap / 2 + i * (bar_h + row_gap)
        mid = by + bar_h / 2
        out.append(_text(left - 8, mid + 4, cat, anchor="end", cls="category", max_px=label_w))
        x = left
        for j, name in enumerate(names):
            v = drawn[j][i]
            if not v:  # None (not measured) or 0: nothing to see or hover
                continue
            w = plot_w * (v / top)
            tip = f"{cat}, {name}: {shown(raw[j][i])}"
            out.append(_rect(x, by, w, bar_h, cls=f"bar series-{j}", fill=colors[j], tip=tip))
            x += w
        out.append(
            _text(
                x + 4,
                mid + 4,
                total_labels[i],
                size=_VALUE_SIZE,
                cls="total",
                fill=_TEXT if totals[i] is not None else _MUTED,
                max_px=value_w - 6,
            )
        )
    out += ticks
    return _close(out)


def _edges(low: float, high: float, bins: int) -> tuple[list[float], list[str]]:
    """Bin edges and their labels, with the fewest decimals that keep the edges exact."""
    edges = [low + (high - low) * i / bins for i in range(bins)] + [high]
    step = (high - low) / bins
    for decimals in range(9):
        texts = [f"{e:.{decimals}f}" for e in edges]
        if all(abs(float(t) - e) <= step * 1e-6 for t, e in zip(texts, edges, strict=True)):
            return edges, texts
    return edges, [f"{e:.6g}" for e in edges]


def histograms(
    title: str,
    groups: Sequence[tuple[str, Sequence[float]]],
    *,
    bins: int = 10,
    low: float = 0.0,
    high: float = 1.0,
    width: int = 640,
    description: str = "",
) -> str:
    """Small multiples: one histogram per group on a shared y scale.

    For distributions such as the cases' scores in [0, 1] per query type: one panel each,
    side by side, with the same bins and the same count scale, so the panels compare at a
    glance, and each labelled with its n and mean, so a tall bar from a small group is not
    over-read. Values outside ``[low, high]`` are counted in the nearest end bin (and the count
    is said in the panel); NaN, infinities and non-numbers are left out and counted as n/a.

    Args:
        title: Shown above the chart and as its accessible name.
        groups: ``(label, values)`` per panel, in order.
        bins: Equal-width bins between ``low`` and ``high``; each bin includes its low edge,
            the last one both edges.
        low: Low edge of the first bin.
        high: High edge of the last bin.
        width: Pixel width (kept within 320..10000); panels wrap into rows.
        description: The ``<desc>``; empty generates a text summary of every panel.

    Returns:
        One ``<svg>`` element as a string.

    Raises:
        ValueError: ``bins`` is not a positive integer (at most 1000), or ``low``/``high`` are
            not finite numbers with ``low < high``.
    """
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= 1000:
        raise ValueError(f"bins={bins!r}: give a whole number of bins from 1 to 1000")
    lo_f, hi_f = _finite(low), _finite(high)
    if lo_f is None or hi_f is None or not lo_f < hi_f or not math.isfinite(hi_f - lo_f):
        raise ValueError(
            f"low={low!r}, high={high!r}: give finite bounds with low < high "
            "(for scores, low=0.0 and high=1.0)"
        )
    width = _width(width)
    title = _clean(title)
    edges, edge_texts = _edges(lo_f, hi_f, bins)
    inner = edges[1:-1]

    panels: list[tuple[str, list[int], int, int, float | None]] = []
    for label, values in groups:
        counts = [0] * bins
        numbers = [_finite(v) for v in values]
        finite = [v for v in numbers if v is not None]
        outside = 0
        for v in finite:
            if v < lo_f or v > hi_f:
                outside += 1
            counts[bisect.bisect_right(inner, min(max(v, lo_f), hi_f))] += 1
        # Each term is at most the largest value over n, so the sum cannot overflow.
        mean = math.fsum(v / len(finite) for v in finite) if finite else None
        panels.append((_clean(label), counts, len(numbers) - len(finite), outside, mean))
    if not panels or not any(sum(p[1]) for p in panels):
        return _no_data(title, description, width)

    def stats(n_a: int, outside: int, counts: list[int], mean: float | None) -> str:
        text = f"n={sum(counts)}"
        if mean is not None:
            text += f", mean {mean:.2f}" if abs(mean) < 1e4 else f", mean {mean:.3g}"
        if outside:
            text += f", {outside} outside"
        if n_a:
            text += f", {n_a} n/a"
        return text

    def bin_name(k: int) -> str:
        close = "]" if k == bins - 1 else ")"
        return f"[{edge_texts[k]}, {edge_texts[k + 1]}{close}"

    ymax = max(max(p[1]) for p in panels)
    gap = 16.0
    cols = max(1, min(len(panels), int((width - 2 * _PAD + gap) // (150 + gap))))
    panel_w = (width - 2 * _PAD - gap * (cols - 1)) / cols
    plot_h, panel_h, row_gap = 64.0, 112.0, 14.0
    rows = math.ceil(len(panels) / cols)
    y0 = float(_TITLE_H)
    height = y0 + rows * panel_h + (rows - 1) * row_gap + 26

    if not description:
        summary = "; ".join(
            f"{label} ({stats(n_a, outside, counts, mean)}): "
            + ", ".join(f"{bin_name(k)} {c}" for k, c in enumerate(counts))
            for label, counts, n_a, outside, mean in panels
        )
        description = (
            f"Histograms of values from {edge_texts[0]} to {edge_texts[-1]} in {bins} bins, "
            f"one per group, on a shared count scale. {summary}."
        )
    out = _open(title, _clean(description), width, height)
    out.append(_title_text(title, width))
    bin_w = panel_w / bins
    bar_w = bin_w - 1 if bin_w >= 5 else bin_w * 0.8
    for g, (label, counts, n_a, outside, mean) in enumerate(panels):
        px = _PAD + (g % cols) * (panel_w + gap)
        py = y0 + (g // cols) * (panel_h + row_gap)
        base = py + 34 + plot_h
        color = PALETTE[g % len(PALETTE)]
        out.append(_text(px, py + 12, label, cls="group", bold=True, max_px=panel_w))
        out.append(
            _text(
                px,
                py + 26,
                stats(n_a, outside, counts, mean),
                size=_VALUE_SIZE,
                cls="stats",
                fill=_MUTED,
                max_px=panel_w,
            )
        )
        if not sum(counts):
            out.append(
                _text(
                    px + panel_w / 2,
                    base - plot_h / 2,
                    "no data",
                    anchor="middle",
                    cls="no-data",
                    fill=_MUTED,
                )
            )
        else:
            for k, count in enumerate(counts):
                h = plot_h * count / ymax
                out.append(
                    _rect(
                        px + k * bin_w + (bin_w - bar_w) / 2,
                        base - h,
                        bar_w,
                        h,
                        cls=f"bar series-{g}",
                        fill=color,
                        tip=f"{label}, {bin_name(k)}: {count}",
                    )
                )
        out.append(
            f'<line class="axis" x1="{_n(px)}" y1="{_n(base)}" x2="{_n(px + panel_w)}" '
            f'y2="{_n(base)}" stroke="{_MUTED}" stroke-width="1"/>'
        )
        for x, text, anchor in (
            (px, edge_texts[0], "start"),
            (px + panel_w, edge_texts[-1], "end"),
        ):
            out.append(
                _text(x, base + 12, text, size=_TICK_SIZE, anchor=anchor, cls="tick", fill=_MUTED)
            )
    out.append(
        _text(
            _PAD,
            height - 8,
            f"Shared count scale: the tallest bar counts {ymax}.",
            size=_TICK_SIZE,
            cls="note",
            fill=_MUTED,
            max_px=width - 2 * _PAD,
        )
    )
    return _close(out)
