"""The pieces every chart of :mod:`pytest_gta.report.svg` is drawn with.

Text made safe for XML and measured roughly (labels are cut to fit, the full text kept as a
tooltip), numbers made safe for display (``n/a`` for NaN, non-numbers and the like), axis
ticks, and the SVG elements themselves (root, text, bar, legend, axis). The charts lay out with
these and decide nothing about safety themselves.
"""

from __future__ import annotations

import functools
import html
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Okabe & Ito's colour-blind-safe palette (2008), the yellow last: it has the least contrast
#: on white. Series beyond it cycle, their ``series-N`` class still tells them apart.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#999999", "#F0E442")

#: Narrower than this and labels, bars and value labels no longer fit side by side.
MIN_WIDTH = 320
MAX_WIDTH = 10_000
#: Finite values above this are drawn (and summed, in stacked bars) as this, so that a sum of
#: hostile huge values stays finite.
CAP = 1e300

TEXT = "#222222"
MUTED = "#666666"
GRID = "#dddddd"
PAD = 10
TITLE_SIZE = 14
LABEL_SIZE = 12
VALUE_SIZE = 11
TICK_SIZE = 10
TITLE_H = 28
LEGEND_ROW = 18
LEGEND_TEXT_MAX = 180.0
AXIS_H = 24
ELLIPSIS = "\u2026"

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
            intervals); ``None`` entries get no whisker. Ignored by stacked bars.
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


def clean(text: object) -> str:
    """Text that XML can hold: forbidden characters to U+FFFD, line breaks to spaces."""
    s = text if isinstance(text, str) else str(text)
    return _BREAKS.sub(" ", _INVALID_XML.sub("\ufffd", s))


def esc(text: str) -> str:
    """Cleaned text escaped for element content and attributes, as pure ASCII."""
    escaped = html.escape(text, quote=True)
    return escaped.encode("ascii", "xmlcharrefreplace").decode("ascii")


@functools.lru_cache(maxsize=4096)
def char_em(ch: str) -> float:
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


def text_px(text: str, size: float) -> float:
    """Estimated width of cleaned text at a font size."""
    return size * sum(char_em(ch) for ch in text)


def fit(text: str, max_px: float, size: float) -> str:
    """Text cut to an estimated width, ending in an ellipsis when it was cut."""
    if text_px(text, size) <= max_px:
        return text
    budget = max_px - size * char_em(ELLIPSIS)
    used = 0.0
    kept = []
    for ch in text:
        used += size * char_em(ch)
        if used > budget:
            break
        kept.append(ch)
    return "".join(kept).rstrip() + ELLIPSIS


# ---------------------------------------------------------------------------------------------
# Numbers


def real(value: Any) -> float | None:
    """A number as a float (infinities kept), or None for NaN and non-numbers."""
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if math.isnan(number) else number


def finite(value: Any) -> float | None:
    """A finite number as a float, or None: what gets a bar; anything else is ``n/a``."""
    number = real(value)
    return number if number is not None and math.isfinite(number) else None


def coord(x: float) -> str:
    """A coordinate: one decimal (a tenth of a pixel is invisible), no trailing ``.0``."""
    if not math.isfinite(x):
        x = 0.0
    s = f"{x:.1f}"
    if s.endswith(".0"):
        s = s[:-2]
    return "0" if s == "-0" else s


def fmt(value: float, decimals: int) -> str:
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


def decimals(values: Sequence[float | None]) -> int:
    """Counts as integers, anything else with one decimal."""
    return 0 if all(v is None or v.is_integer() for v in values) else 1


def ticks(top: float, plot_w: float) -> list[float]:
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


def tick_label(tick: float, top: float, unit: str) -> str:
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


def open_svg(title: str, description: str, width: int, height: float) -> list[str]:
    """The root element with its accessible name and description.

    No ``id`` anywhere: several charts inline in one page would repeat it.
    """
    h = coord(math.ceil(height))
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{h}" '
        f'viewBox="0 0 {width} {h}" font-family="sans-serif" font-size="{LABEL_SIZE}">',
        f"<title>{esc(title)}</title>",
        f"<desc>{esc(description)}</desc>",
    ]


def text(
    x: float,
    y: float,
    text: str,
    *,
    size: float = LABEL_SIZE,
    anchor: str = "start",
    cls: str = "label",
    fill: str = TEXT,
    bold: bool = False,
    max_px: float | None = None,
) -> str:
    """A text element; cut to ``max_px`` with the full text kept as its tooltip."""
    shown = text if max_px is None else fit(text, max_px, size)
    weight = ' font-weight="bold"' if bold else ""
    anchor_attr = "" if anchor == "start" else f' text-anchor="{anchor}"'
    element = (
        f'<text class="{cls}" x="{coord(x)}" y="{coord(y)}" font-size="{coord(size)}" fill="{fill}"'
        f"{anchor_attr}{weight}>{esc(shown)}</text>"
    )
    if shown == text:
        return element
    return f"<g><title>{esc(text)}</title>{element}</g>"


def rect(x: float, y: float, w: float, h: float, *, cls: str, fill: str, tip: str) -> str:
    """A bar with its own tooltip."""
    return (
        f'<rect class="{cls}" x="{coord(x)}" y="{coord(y)}" width="{coord(max(w, 0.0))}" '
        f'height="{coord(max(h, 0.0))}" fill="{fill}"><title>{esc(tip)}</title></rect>'
    )


def title_text(title: str, width: int) -> str:
    """The visible chart title (the root's ``<title>`` is for assistive technology)."""
    return text(
        PAD,
        18,
        title,
        size=TITLE_SIZE,
        cls="chart-title",
        bold=True,
        max_px=width - 2 * PAD,
    )


def close(parts: list[str]) -> str:
    """The chart's elements as one string, the root closed."""
    parts.append("</svg>")
    return "".join(parts)


def no_data(title: str, description: str, width: int) -> str:
    """A small valid chart that says there is nothing to draw."""
    title = clean(title)
    desc = clean(description) or "No data."
    parts = open_svg(title, desc, width, 64)
    parts.append(title_text(title, width))
    parts.append(text(width / 2, 48, "no data", anchor="middle", cls="no-data", fill=MUTED))
    return close(parts)


def clamp_width(width: Any) -> int:
    """The requested width kept within what the layout can use."""
    try:
        return max(MIN_WIDTH, min(MAX_WIDTH, int(width)))
    except (TypeError, ValueError, OverflowError):
        return MIN_WIDTH


def colors(series: Sequence[Series]) -> list[str]:
    """Each series' colour: its own, or the palette's by its index (cycling)."""
    return [s.color or PALETTE[i % len(PALETTE)] for i, s in enumerate(series)]


def legend(names: Sequence[str], colors: Sequence[str], y: float, width: int) -> list[str]:
    """Legend entries in rows that wrap at the chart's width; ``y`` is the first row's top."""
    parts: list[str] = []
    x = float(PAD)
    for i, (name, color) in enumerate(zip(names, colors, strict=True)):
        shown = fit(name, LEGEND_TEXT_MAX, LABEL_SIZE)
        entry_w = 14 + text_px(shown, LABEL_SIZE) + 16
        if x > PAD and x + entry_w > width - PAD:
            x = float(PAD)
            y += LEGEND_ROW
        parts.append(
            f'<g class="legend series-{i}">'
            f'<rect x="{coord(x)}" y="{coord(y + 3)}" width="10" height="10" fill="{color}"/>'
            + text(x + 14, y + 12, name, cls="legend-label", max_px=LEGEND_TEXT_MAX)
            + "</g>"
        )
        x += entry_w
    return parts


def legend_height(names: Sequence[str], width: int) -> float:
    """Height the legend of these names takes, rows included."""
    rows, x = 1, float(PAD)
    for name in names:
        entry_w = 14 + text_px(fit(name, LEGEND_TEXT_MAX, LABEL_SIZE), LABEL_SIZE) + 16
        if x > PAD and x + entry_w > width - PAD:
            rows += 1
            x = float(PAD)
        x += entry_w
    return rows * LEGEND_ROW


def axis(
    left: float, plot_w: float, top: float, y0: float, y1: float, unit: str
) -> tuple[list[str], list[str]]:
    """Grid lines (drawn under the bars) and tick labels below the plot."""
    grid: list[str] = []
    labels: list[str] = []
    for tick in ticks(top, plot_w):
        x = left + plot_w * (tick / top)
        grid.append(
            f'<line class="grid" x1="{coord(x)}" y1="{coord(y0)}" x2="{coord(x)}" y2="{coord(y1)}" '
            f'stroke="{GRID if tick else MUTED}" stroke-width="1"/>'
        )
        labels.append(
            text(
                x,
                y1 + 14,
                tick_label(tick, top, unit),
                size=TICK_SIZE,
                anchor="middle",
                cls="tick",
                fill=MUTED,
            )
        )
    return grid, labels


def check_series(series: Sequence[Series], n: int) -> None:
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


def interval(raw: Any) -> tuple[float, float] | None:
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
    low, high = real(low_raw), real(high_raw)
    if low is None or high is None:
        return None
    return (low, high) if low <= high else (high, low)
