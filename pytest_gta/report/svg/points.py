"""Charts of points on value axes: intervals per row, curves over k, and a scatter with a front.

The comparison of several runs (:mod:`pytest_gta.report.runs_html`) needs what bars cannot show
well: many runs' estimates of one metric with their intervals (a forest plot, where the axis
need not start at zero, so close runs stay apart), curves over the number of epochs k, and the
trade-off of two quantities with the efficient front drawn. The same rules as the bar charts
hold: pure ASCII output, every label cleaned and escaped, hostile numbers shown as ``n/a`` or
left out, nothing external, deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_gta.report.svg import draw

ROW_H = 18.0
PLOT_H = 220.0
#: Left margin of the curve and scatter charts: room for the y tick labels.
Y_AXIS_W = 44.0


@dataclass(frozen=True)
class Estimate:
    """One row of :func:`interval_dots`: a value, its interval, and whether it is published.

    Attributes:
        label: The row's label (a run's label, a leaderboard row).
        value: The point estimate; ``None`` (or NaN, a non-number) is drawn as ``n/a``.
        interval: ``(low, high)`` drawn as a whisker, or ``None``.
        published: A published number (a leaderboard row): drawn as a hollow diamond, so that
            it is never mistaken for a measured run.
        strong: Drawn bold (the best value of its column).
    """

    label: str
    value: float | None
    interval: tuple[float, float] | None = None
    published: bool = False
    strong: bool = False


@dataclass(frozen=True)
class Curve:
    """One line of :func:`curves`: a value per x (``None``: no point there)."""

    name: str
    values: Sequence[float | None]
    color: str = ""


@dataclass(frozen=True)
class Spot:
    """One point of :func:`scatter`; ``None`` coordinates leave it out (listed in the desc)."""

    label: str
    x: float | None
    y: float | None


def _value(raw: object) -> float | None:
    """A finite number kept within +-``draw.CAP``, so axis arithmetic cannot overflow."""
    value = draw.finite(raw)
    return None if value is None else max(-draw.CAP, min(draw.CAP, value))


def _whisker(raw: object) -> tuple[float, float] | None:
    """An interval's ends, ordered and kept within +-``draw.CAP`` (infinite ends at the cap)."""
    ends = draw.interval(raw)
    if ends is None:
        return None
    return max(-draw.CAP, min(draw.CAP, ends[0])), max(-draw.CAP, min(draw.CAP, ends[1]))


def _span(
    values: Sequence[float], floor: float | None, ceiling: float | None
) -> tuple[float, float]:
    """A padded, rounded axis range covering ``values``, kept within ``[floor, ceiling]``."""
    low, high = min(values), max(values)
    if high - low > 1e-9 * max(1.0, abs(low), abs(high)):
        pad = (high - low) * 0.08
    else:  # one value (or values too close to tell apart): a range around it
        pad = abs(high) * 0.1 if abs(high) > 1e-300 else 1.0
    low, high = low - pad, high + pad
    step = _step(high - low)
    low, high = math.floor(low / step) * step, math.ceil(high / step) * step
    if floor is not None:
        low = max(low, floor)
    if ceiling is not None:
        high = min(high, ceiling)
    if not high > low:
        high = low + step
    return low, high


def _step(extent: float, wanted: int = 5) -> float:
    """A round tick step giving about ``wanted`` ticks over ``extent``."""
    raw = extent / wanted
    if not math.isfinite(raw) or raw <= 0:
        return 1.0
    unit = 10.0 ** math.floor(math.log10(raw))
    fraction = raw / unit
    nice = 1.0 if fraction <= 1 else 2.0 if fraction <= 2 else 5.0 if fraction <= 5 else 10.0
    return nice * unit


def _ticks(low: float, high: float, step: float) -> list[float]:
    """The multiples of ``step`` within ``[low, high]`` (at most 30)."""
    first = math.ceil(low / step - 1e-9)
    out = []
    for k in range(first, first + 30):
        tick = k * step
        if tick > high + step * 1e-9:
            break
        out.append(0.0 if abs(tick) < step * 1e-9 else tick)
    return out


def _label(tick: float, step: float, unit: str) -> str:
    decimals = 0 if step >= 1 else min(6, math.ceil(-math.log10(step)))
    return draw.fmt(tick, decimals) + unit


def _x_axis(
    left: float,
    plot_w: float,
    span: tuple[float, float],
    y0: float,
    y1: float,
    unit: str,
    *,
    whole: bool = False,
) -> tuple[list[str], list[str]]:
    """Vertical grid lines over ``[y0, y1]`` and tick labels below, for a ``span`` x range.

    ``whole``: only whole-number ticks (a count such as k has no tick at 1.5).
    """
    low, high = span
    wanted = max(2, min(6, int(plot_w // 70)))
    step = _step(high - low, wanted)
    if whole:
        step = max(step, 1.0)
    grid, labels = [], []
    for tick in _ticks(low, high, step):
        x = left + plot_w * (tick - low) / (high - low)
        grid.append(_grid_line(x, y0, x, y1))
        labels.append(_tick(x, y1 + 14, _label(tick, step, unit), "middle"))
    return grid, labels


def _grid_line(x1: float, y1: float, x2: float, y2: float) -> str:
    c = draw.coord
    return (
        f'<line class="grid" x1="{c(x1)}" y1="{c(y1)}" x2="{c(x2)}" y2="{c(y2)}" '
        f'stroke="{draw.GRID}" stroke-width="1"/>'
    )


def _tick(x: float, y: float, text: str, anchor: str) -> str:
    return draw.text(x, y, text, size=draw.TICK_SIZE, anchor=anchor, cls="tick", fill=draw.MUTED)


def _y_axis(
    left: float, width: float, span: tuple[float, float], y0: float, plot_h: float, unit: str
) -> list[str]:
    """Horizontal grid lines and tick labels left of the plot, for a ``span`` y range."""
    low, high = span
    step = _step(high - low, 4)
    out = []
    for tick in _ticks(low, high, step):
        y = y0 + plot_h - plot_h * (tick - low) / (high - low)
        out.append(_grid_line(left, y, left + width, y))
        out.append(_tick(left - 4, y + 4, _label(tick, step, unit), "end"))
    return out


def _pct_bounds(unit: str, values: Sequence[float]) -> tuple[float | None, float | None]:
    """Percentages within 0..100, unless a value is beyond (InstAcc can be: docs/dataset.md)."""
    if unit != "%":
        return None, None
    return min(0.0, *values), max(100.0, *values)


def interval_dots(
    title: str,
    rows: Sequence[Estimate],
    *,
    unit: str = "%",
    width: int = 640,
    description: str = "",
    color: str = draw.PALETTE[0],
) -> str:
    """A forest plot: one row per estimate, a dot with its interval's whisker.

    For one metric across many runs: the axis covers the values and intervals (not from zero,
    so runs a point apart stay apart; percentages stay within 0..100), runs are filled dots,
    published numbers hollow diamonds, the best value bold.

    Args:
        title: Shown above the chart and as its accessible name.
        rows: Top to bottom.
        unit: Appended to values and ticks; ``"%"`` keeps the axis within 0..100.
        width: Pixel width (kept within 320..10000); the height follows the rows.
        description: The ``<desc>``; empty lists every row's value and interval.
        color: The dots' colour: ``#rgb``, ``#rrggbb`` or a colour name.

    Returns:
        One ``<svg>`` element as a string.

    Raises:
        ValueError: ``color`` is not a plain colour.
    """
    width = draw.clamp_width(width)
    if not rows:
        return draw.no_data(title, description, width)
    title, unit = draw.clean(title), draw.clean(unit)
    draw.check_series([draw.Series("dots", [], None, color)], 0)
    labels = [draw.clean(r.label) for r in rows]
    values = [_value(r.value) for r in rows]
    whiskers = [
        _whisker(r.interval) if v is not None and not r.published else None
        for r, v in zip(rows, values, strict=True)
    ]
    ends = [v for v in values if v is not None]
    ends += [e for iv in whiskers if iv is not None for e in iv]
    texts = ["n/a" if v is None else draw.fmt(v, 2) + unit for v in values]
    if not description:
        description = f"{title}: " + "; ".join(
            f"{label} {text}"
            + (f" [{draw.fmt(iv[0], 2)}, {draw.fmt(iv[1], 2)}]" if iv is not None else "")
            + (" (published)" if r.published else "")
            for label, text, iv, r in zip(labels, texts, whiskers, rows, strict=True)
        )
    parts = []
    label_w = min(max(draw.text_px(s, draw.LABEL_SIZE) for s in labels), width * 0.4)
    value_w = max(draw.text_px(t, draw.VALUE_SIZE) for t in texts) + 8
    left = draw.PAD + label_w + 8
    plot_w = max(width - left - value_w - draw.PAD, 40.0)
    y0 = draw.TITLE_H + 4
    y1 = y0 + len(rows) * ROW_H
    height = y1 + draw.AXIS_H + draw.PAD / 2
    parts = draw.open_svg(title, draw.clean(description), width, height)
    parts.append(draw.title_text(title, width))
    if not ends:
        parts.append(draw.text(width / 2, y0 + 14, "no values", anchor="middle", fill=draw.MUTED))
        return draw.close(parts)
    span = _span(ends, *_pct_bounds(unit, ends))
    low, high = span

    def x_of(value: float) -> float:
        return left + plot_w * (min(max(value, low), high) - low) / (high - low)

    grid, ticks = _x_axis(left, plot_w, span, y0, y1, unit)
    parts += grid
    for i, row in enumerate(rows):
        mid = y0 + i * ROW_H + ROW_H / 2
        parts.append(
            draw.text(
                left - 8,
                mid + 4,
                labels[i],
                anchor="end",
                cls="category",
                bold=row.strong,
                max_px=label_w,
            )
        )
        v, iv = values[i], whiskers[i]
        if v is None:
            parts.append(
                draw.text(
                    left + 4, mid + 4, "n/a", size=draw.VALUE_SIZE, cls="value", fill=draw.MUTED
                )
            )
            continue
        tip = draw.esc(f"{labels[i]}: {texts[i]}")
        if iv is not None:
            a, b = draw.coord(x_of(iv[0])), draw.coord(x_of(iv[1]))
            lo_y, hi_y, mid_y = draw.coord(mid - 4), draw.coord(mid + 4), draw.coord(mid)
            parts.append(
                f'<path class="whisker" d="M{a} {mid_y}H{b}M{a} {lo_y}V{hi_y}M{b} {lo_y}V{hi_y}" '
                f'stroke="{draw.TEXT}" stroke-width="1.2" fill="none"/>'
            )
            tip += draw.esc(f" [{draw.fmt(iv[0], 2)}, {draw.fmt(iv[1], 2)}]")
        x, m = draw.coord(x_of(v)), draw.coord(mid)
        if row.published:
            parts.append(
                f'<path class="mark published" d="M{x} {draw.coord(mid - 6)}l6 6l-6 6l-6 -6z" '
                f'fill="#ffffff" stroke="{draw.TEXT}" stroke-width="1.5">'
                f"<title>{tip} (published)</title></path>"
            )
        else:
            parts.append(
                f'<circle class="dot" cx="{x}" cy="{m}" r="4.5" fill="{color}">'
                f"<title>{tip}</title></circle>"
            )
        parts.append(
            draw.text(
                left + plot_w + 6,
                mid + 4,
                texts[i],
                size=draw.VALUE_SIZE,
                cls="value",
                bold=row.strong,
            )
        )
    parts += ticks
    return draw.close(parts)


def curves(
    title: str,
    xs: Sequence[float],
    lines: Sequence[Curve],
    *,
    unit: str = "%",
    x_label: str = "",
    whole_x: bool = False,
    width: int = 640,
    description: str = "",
) -> str:
    """Lines over shared x values, a legend per line (such as pass^k and pass@k over k).

    Args:
        title: Shown above the chart and as its accessible name.
        xs: The x values, increasing (non-finite ones are left out with their points).
        lines: One value per x each; a ``None`` leaves a gap.
        unit: Appended to y ticks; ``"%"`` keeps the y axis within 0..100.
        x_label: Said under the x axis.
        whole_x: Ticks on whole x values only (x counts something).
        width: Pixel width (kept within 320..10000).
        description: The ``<desc>``; empty lists every line's points.

    Returns:
        One ``<svg>`` element as a string.

    Raises:
        ValueError: A line does not have one value per x, or its colour is not a plain colour.
    """
    draw.check_series([draw.Series(c.name, c.values, None, c.color) for c in lines], len(xs))
    width = draw.clamp_width(width)
    title, unit, x_label = draw.clean(title), draw.clean(unit), draw.clean(x_label)
    names = [draw.clean(c.name) for c in lines]
    colors = draw.colors([draw.Series(c.name, c.values, None, c.color) for c in lines])
    px = [_value(x) for x in xs]
    points = [
        [
            (x, y)
            for x, v in zip(px, c.values, strict=True)
            if x is not None and (y := _value(v)) is not None
        ]
        for c in lines
    ]
    if not description:
        description = f"{title}: " + "; ".join(
            f"{n}: " + ", ".join(f"{draw.fmt(x, 0)} {draw.fmt(y, 2)}{unit}" for x, y in p)
            for n, p in zip(names, points, strict=True)
        )
    if not any(points):
        return draw.no_data(title, description, width)
    all_x = [x for p in points for x, _ in p]
    all_y = [y for p in points for _, y in p]
    x_span = (
        (min(all_x), max(all_x)) if max(all_x) > min(all_x) else (min(all_x) - 1, max(all_x) + 1)
    )
    y_span = _span(all_y, *_pct_bounds(unit, all_y))
    legend_h = draw.legend_height(names, width)
    y0 = draw.TITLE_H + legend_h + 8
    left = draw.PAD + Y_AXIS_W
    plot_w = width - left - draw.PAD * 2
    height = y0 + PLOT_H + draw.AXIS_H + (16 if x_label else 0) + draw.PAD / 2
    parts = draw.open_svg(title, draw.clean(description), width, height)
    parts.append(draw.title_text(title, width))
    parts += draw.legend(names, colors, draw.TITLE_H, width)
    parts += _y_axis(left, plot_w, y_span, y0, PLOT_H, unit)
    grid, ticks = _x_axis(left, plot_w, x_span, y0, y0 + PLOT_H, "", whole=whole_x)
    parts += grid

    def at(x: float, y: float) -> str:
        sx = left + plot_w * (x - x_span[0]) / (x_span[1] - x_span[0])
        fy = (min(max(y, y_span[0]), y_span[1]) - y_span[0]) / (y_span[1] - y_span[0])
        return f"{draw.coord(sx)} {draw.coord(y0 + PLOT_H - PLOT_H * fy)}"

    for j, pts in enumerate(points):
        if not pts:
            continue
        parts.append(
            f'<path class="curve series-{j}" d="M' + "L".join(at(x, y) for x, y in pts) + '" '
            f'fill="none" stroke="{colors[j]}" stroke-width="2">'
            f"<title>{draw.esc(names[j])}</title></path>"
        )
        for x, y in pts:
            cx, cy = at(x, y).split(" ")
            parts.append(
                f'<circle class="point series-{j}" cx="{cx}" cy="{cy}" r="3" fill="{colors[j]}">'
                f"<title>{draw.esc(f'{names[j]}: k={draw.fmt(x, 0)} {draw.fmt(y, 2)}{unit}')}"
                "</title></circle>"
            )
    parts += ticks
    if x_label:
        parts.append(
            draw.text(left + plot_w / 2, height - 6, x_label, anchor="middle", cls="axis-label")
        )
    return draw.close(parts)


def scatter(
    title: str,
    spots: Sequence[Spot],
    *,
    front: Sequence[str] = (),
    x_label: str = "",
    y_label: str = "",
    x_unit: str = "",
    y_unit: str = "%",
    width: int = 640,
    description: str = "",
) -> str:
    """Labelled points on two value axes, the points named in ``front`` joined as a line.

    For trade-offs (cost or time per case against AnsAcc): each run a labelled dot, the
    efficient front (the runs no other beats on both axes) a stepped line through them in x
    order, its dots ringed.

    Args:
        title: Shown above the chart and as its accessible name.
        spots: The points; one with a missing coordinate is left out and said in the desc.
        front: Labels of the points on the front.
        x_label: Said under the x axis.
        y_label: Said above the y axis.
        x_unit: Appended to x ticks.
        y_unit: Appended to y ticks; ``"%"`` keeps the y axis within 0..100.
        width: Pixel width (kept within 320..10000).
        description: The ``<desc>``; empty lists every point.

    Returns:
        One ``<svg>`` element as a string.
    """
    width = draw.clamp_width(width)
    title, x_label, y_label = draw.clean(title), draw.clean(x_label), draw.clean(y_label)
    x_unit, y_unit = draw.clean(x_unit), draw.clean(y_unit)
    shown = [
        (draw.clean(s.label), x, y)
        for s in spots
        if (x := _value(s.x)) is not None and (y := _value(s.y)) is not None
    ]
    on_front = {draw.clean(label) for label in front}
    if not description:
        description = f"{title}: " + "; ".join(
            f"{label} x {draw.fmt(x, 4)}{x_unit}, y {draw.fmt(y, 2)}{y_unit}"
            + (" (front)" if label in on_front else "")
            for label, x, y in shown
        )
    if not shown:
        return draw.no_data(title, description, width)
    # From zero: a cost or a time is read against nothing spent.
    x_span = _span([x for _, x, _ in shown] + [0.0], 0.0, None)
    ys = [y for _, _, y in shown]
    y_span = _span(ys, *_pct_bounds(y_unit, ys))
    y0 = draw.TITLE_H + (18 if y_label else 4)
    left = draw.PAD + Y_AXIS_W
    plot_w = width - left - draw.PAD * 2
    height = y0 + PLOT_H + draw.AXIS_H + (16 if x_label else 0) + draw.PAD / 2
    parts = draw.open_svg(title, draw.clean(description), width, height)
    parts.append(draw.title_text(title, width))
    if y_label:
        parts.append(draw.text(draw.PAD, draw.TITLE_H + 10, y_label, cls="axis-label"))
    parts += _y_axis(left, plot_w, y_span, y0, PLOT_H, y_unit)
    grid, ticks = _x_axis(left, plot_w, x_span, y0, y0 + PLOT_H, x_unit)
    parts += grid

    def at(x: float, y: float) -> tuple[float, float]:
        fx = (min(max(x, x_span[0]), x_span[1]) - x_span[0]) / (x_span[1] - x_span[0])
        fy = (min(max(y, y_span[0]), y_span[1]) - y_span[0]) / (y_span[1] - y_span[0])
        return left + plot_w * fx, y0 + PLOT_H - PLOT_H * fy

    chain = sorted((x, y) for label, x, y in shown if label in on_front)
    if chain:
        # A stepped line: from each front point the next is reached by paying more (x) for
        # more (y), the staircase of the best y reachable at each x.
        path = []
        for n, (x, y) in enumerate(chain):
            sx, sy = at(x, y)
            if n:
                path.append(f"H{draw.coord(sx)}")
            path.append(f"V{draw.coord(sy)}" if n else f"M{draw.coord(sx)} {draw.coord(sy)}")
        parts.append(
            f'<path class="front" d="{"".join(path)}" fill="none" stroke="{draw.PALETTE[5]}" '
            'stroke-width="2" stroke-dasharray="6 3"/>'
        )
    for n, (label, x, y) in enumerate(shown):
        sx, sy = at(x, y)
        front_cls = " on-front" if label in on_front else ""
        tip = f"{label}: {draw.fmt(x, 4)}{x_unit}, {draw.fmt(y, 2)}{y_unit}" + (
            " (on the front)" if front_cls else ""
        )
        color = draw.PALETTE[n % len(draw.PALETTE)]
        ring = f' stroke="{draw.TEXT}" stroke-width="2"' if front_cls else ""
        parts.append(
            f'<circle class="spot{front_cls}" cx="{draw.coord(sx)}" cy="{draw.coord(sy)}" r="5" '
            f'fill="{color}"{ring}><title>{draw.esc(tip)}</title></circle>'
        )
        anchor = "end" if sx > left + plot_w * 0.7 else "start"
        parts.append(
            draw.text(
                sx + (-8 if anchor == "end" else 8),
                sy - 6,
                label,
                size=draw.VALUE_SIZE,
                anchor=anchor,
                cls="spot-label",
                max_px=plot_w * 0.45,
            )
        )
    parts += ticks
    if x_label:
        parts.append(
            draw.text(left + plot_w / 2, height - 6, x_label, anchor="middle", cls="axis-label")
        )
    return draw.close(parts)
