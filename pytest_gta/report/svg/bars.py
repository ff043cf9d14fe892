"""Bar charts: series side by side per category, and the parts of a whole per category.

Both are horizontal, so that long labels (tool names, metric names) fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_gta.report.svg import draw


def grouped_bars(
    title: str,
    categories: Sequence[str],
    series: Sequence[draw.Series],
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
    draw.check_series(series, len(categories))
    width = draw.clamp_width(width)
    if not categories or not series:
        return draw.no_data(title, description, width)

    title = draw.clean(title)
    unit = draw.clean(unit)
    cats = [draw.clean(c) for c in categories]
    names = [draw.clean(s.name) for s in series]
    colors = draw.colors(series)
    values = [[draw.finite(v) for v in s.values] for s in series]
    intervals = [
        [
            draw.interval(iv) if v is not None else None
            for iv, v in zip(s.intervals or [None] * len(cats), vals, strict=True)
        ]
        for s, vals in zip(series, values, strict=True)
    ]
    measured = [v for vals in values for v in vals if v is not None]
    highs = [iv[1] for ivs in intervals for iv in ivs if iv is not None and math.isfinite(iv[1])]
    top = draw.finite(max_value)
    if top is None or top <= 0:
        top = max([0.0, *measured, *highs])
        if unit == "%":
            top = max(top, 100.0)
    if top <= 0:
        top = 1.0
    if decimals is None:
        decimals = 1 if unit == "%" else draw.decimals(measured)
    decimals = max(0, min(6, int(decimals)))

    def label(v: float | None) -> str:
        return "n/a" if v is None else draw.fmt(v, decimals) + unit

    def span(iv: tuple[float, float]) -> str:
        return f" [{draw.fmt(iv[0], decimals)}{unit}, {draw.fmt(iv[1], decimals)}{unit}]"

    labels = [[label(v) for v in vals] for vals in values]
    label_w = min(max(draw.text_px(c, draw.LABEL_SIZE) for c in cats), width * 0.35)
    value_w = min(
        max(draw.text_px(t, draw.VALUE_SIZE) for row in labels for t in row) + 8,
        width * 0.25,
    )
    left = draw.PAD + label_w + 8
    plot_w = width - left - value_w - draw.PAD

    bar_h, bar_gap, group_gap = 14.0, 2.0, 10.0
    group_h = len(series) * bar_h + (len(series) - 1) * bar_gap
    legend_h = draw.legend_height(names, width) if len(series) > 1 else 0.0
    y0 = draw.TITLE_H + legend_h + 4
    y1 = y0 + len(cats) * (group_h + group_gap)
    height = y1 + draw.AXIS_H + draw.PAD / 2

    if not description:
        rows = "; ".join(
            f"{cat}: " + ", ".join(f"{n} {row[i]}" for n, row in zip(names, labels, strict=True))
            for i, cat in enumerate(cats)
        )
        description = f"Bar chart of {len(cats)} categories by {', '.join(names)}. {rows}."
    parts = draw.open_svg(title, draw.clean(description), width, height)
    parts.append(draw.title_text(title, width))
    if len(series) > 1:
        parts += draw.legend(names, colors, draw.TITLE_H, width)
    grid, ticks = draw.axis(left, plot_w, top, y0, y1, unit)
    parts += grid

    for i, cat in enumerate(cats):
        gy = y0 + group_gap / 2 + i * (group_h + group_gap)
        parts.append(
            draw.text(
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
                    f'<g class="na series-{j}"><title>{draw.esc(f"{cat}, {name}: n/a")}</title>'
                    + draw.text(
                        left + 4, mid + 4, "n/a", size=draw.VALUE_SIZE, cls="value", fill=draw.MUTED
                    )
                    + "</g>"
                )
                continue
            # The ratio first: plot_w * 1e308 would overflow.
            w = plot_w * (min(max(v, 0.0), top) / top)
            tip = f"{cat}, {name}: {text}" + (span(iv) if iv is not None else "")
            parts.append(
                draw.rect(left, by, w, bar_h, cls=f"bar series-{j}", fill=colors[j], tip=tip)
            )
            end = w
            if iv is not None:
                xl = plot_w * (min(max(iv[0], 0.0), top) / top)
                xh = plot_w * (min(max(iv[1], 0.0), top) / top)
                end = max(end, xh)
                a, b = draw.coord(left + xl), draw.coord(left + xh)
                lo_y, hi_y, mid_y = draw.coord(mid - 4), draw.coord(mid + 4), draw.coord(mid)
                parts.append(
                    f'<path class="whisker series-{j}" d="M{a} {mid_y}H{b}M{a} {lo_y}V{hi_y}'
                    f'M{b} {lo_y}V{hi_y}" stroke="{draw.TEXT}" stroke-width="1.2" fill="none"/>'
                )
            parts.append(
                draw.text(
                    left + end + 4,
                    mid + 4,
                    text,
                    size=draw.VALUE_SIZE,
                    cls="value",
                    max_px=value_w - 6,
                )
            )
    parts += ticks
    return draw.close(parts)


def stacked_bars(
    title: str,
    categories: Sequence[str],
    parts: Sequence[draw.Series],
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
    draw.check_series(parts, len(categories))
    width = draw.clamp_width(width)
    if not categories or not parts:
        return draw.no_data(title, description, width)

    title = draw.clean(title)
    cats = [draw.clean(c) for c in categories]
    names = [draw.clean(p.name) for p in parts]
    colors = draw.colors(parts)
    raw = [[draw.finite(v) for v in p.values] for p in parts]
    drawn = [[None if v is None else min(max(v, 0.0), draw.CAP) for v in vals] for vals in raw]
    decimals = draw.decimals([v for vals in drawn for v in vals])
    totals: list[float | None] = []
    for i in range(len(cats)):
        column = [v for vals in drawn if (v := vals[i]) is not None]
        totals.append(math.fsum(column) if column else None)
    top = max([t for t in totals if t is not None], default=0.0) or 1.0
    total_labels = ["n/a" if t is None else draw.fmt(t, decimals) for t in totals]

    label_w = min(max(draw.text_px(c, draw.LABEL_SIZE) for c in cats), width * 0.35)
    value_w = min(max(draw.text_px(t, draw.VALUE_SIZE) for t in total_labels) + 8, width * 0.25)
    left = draw.PAD + label_w + 8
    plot_w = width - left - value_w - draw.PAD
    bar_h, row_gap = 16.0, 8.0
    legend_h = draw.legend_height(names, width)
    y0 = draw.TITLE_H + legend_h + 4
    y1 = y0 + len(cats) * (bar_h + row_gap)
    height = y1 + draw.AXIS_H + draw.PAD / 2

    def shown(v: float | None) -> str:
        return "n/a" if v is None else draw.fmt(v, decimals)

    if not description:
        rows = "; ".join(
            f"{cat}: total {total_labels[i]} ("
            + ", ".join(f"{n} {shown(vals[i])}" for n, vals in zip(names, raw, strict=True))
            + ")"
            for i, cat in enumerate(cats)
        )
        description = f"Stacked bar chart of {', '.join(names)} per category. {rows}."
    out = draw.open_svg(title, draw.clean(description), width, height)
    out.append(draw.title_text(title, width))
    out += draw.legend(names, colors, draw.TITLE_H, width)
    grid, ticks = draw.axis(left, plot_w, top, y0, y1, "")
    out += grid
    for i, cat in enumerate(cats):
        by = y0 + row_gap / 2 + i * (bar_h + row_gap)
        mid = by + bar_h / 2
        out.append(draw.text(left - 8, mid + 4, cat, anchor="end", cls="category", max_px=label_w))
        x = left
        for j, name in enumerate(names):
            v = drawn[j][i]
            if not v:  # None (not measured) or 0: nothing to see or hover
                continue
            w = plot_w * (v / top)
            tip = f"{cat}, {name}: {shown(raw[j][i])}"
            out.append(draw.rect(x, by, w, bar_h, cls=f"bar series-{j}", fill=colors[j], tip=tip))
            x += w
        out.append(
            draw.text(
                x + 4,
                mid + 4,
                total_labels[i],
                size=draw.VALUE_SIZE,
                cls="total",
                fill=draw.TEXT if totals[i] is not None else draw.MUTED,
                max_px=value_w - 6,
            )
        )
    out += ticks
    return draw.close(out)
