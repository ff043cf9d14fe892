"""Histograms as small multiples: one panel per group on a shared count scale."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from pytest_gta.report.svg import draw


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
    lo_f, hi_f = draw.finite(low), draw.finite(high)
    if lo_f is None or hi_f is None or not lo_f < hi_f or not math.isfinite(hi_f - lo_f):
        raise ValueError(
            f"low={low!r}, high={high!r}: give finite bounds with low < high "
            "(for scores, low=0.0 and high=1.0)"
        )
    width = draw.clamp_width(width)
    title = draw.clean(title)
    edges, edge_texts = _edges(lo_f, hi_f, bins)
    inner = edges[1:-1]

    panels: list[tuple[str, list[int], int, int, float | None]] = []
    for label, values in groups:
        counts = [0] * bins
        numbers = [draw.finite(v) for v in values]
        finite = [v for v in numbers if v is not None]
        outside = 0
        for v in finite:
            if v < lo_f or v > hi_f:
                outside += 1
            counts[bisect.bisect_right(inner, min(max(v, lo_f), hi_f))] += 1
        # Each term is at most the largest value over n, so the sum cannot overflow.
        mean = math.fsum(v / len(finite) for v in finite) if finite else None
        panels.append((draw.clean(label), counts, len(numbers) - len(finite), outside, mean))
    if not panels or not any(sum(p[1]) for p in panels):
        return draw.no_data(title, description, width)

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
    cols = max(1, min(len(panels), int((width - 2 * draw.PAD + gap) // (150 + gap))))
    panel_w = (width - 2 * draw.PAD - gap * (cols - 1)) / cols
    plot_h, panel_h, row_gap = 64.0, 112.0, 14.0
    rows = math.ceil(len(panels) / cols)
    y0 = float(draw.TITLE_H)
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
    out = draw.open_svg(title, draw.clean(description), width, height)
    out.append(draw.title_text(title, width))
    bin_w = panel_w / bins
    bar_w = bin_w - 1 if bin_w >= 5 else bin_w * 0.8
    for g, (label, counts, n_a, outside, mean) in enumerate(panels):
        px = draw.PAD + (g % cols) * (panel_w + gap)
        py = y0 + (g // cols) * (panel_h + row_gap)
        base = py + 34 + plot_h
        color = draw.PALETTE[g % len(draw.PALETTE)]
        out.append(draw.text(px, py + 12, label, cls="group", bold=True, max_px=panel_w))
        out.append(
            draw.text(
                px,
                py + 26,
                stats(n_a, outside, counts, mean),
                size=draw.VALUE_SIZE,
                cls="stats",
                fill=draw.MUTED,
                max_px=panel_w,
            )
        )
        if not sum(counts):
            out.append(
                draw.text(
                    px + panel_w / 2,
                    base - plot_h / 2,
                    "no data",
                    anchor="middle",
                    cls="no-data",
                    fill=draw.MUTED,
                )
            )
        else:
            for k, count in enumerate(counts):
                h = plot_h * count / ymax
                out.append(
                    draw.rect(
                        px + k * bin_w + (bin_w - bar_w) / 2,
                        base - h,
                        bar_w,
                        h,
                        cls=f"bar series-{g}",
                        fill=color,
                        tip=f"{label}, {bin_name(k)}: {count}",
                    )
                )
        x1, x2, y = draw.coord(px), draw.coord(px + panel_w), draw.coord(base)
        out.append(
            f'<line class="axis" x1="{x1}" y1="{y}" x2="{x2}" y2="{y}" '
            f'stroke="{draw.MUTED}" stroke-width="1"/>'
        )
        for x, text, anchor in (
            (px, edge_texts[0], "start"),
            (px + panel_w, edge_texts[-1], "end"),
        ):
            out.append(
                draw.text(
                    x,
                    base + 12,
                    text,
                    size=draw.TICK_SIZE,
                    anchor=anchor,
                    cls="tick",
                    fill=draw.MUTED,
                )
            )
    out.append(
        draw.text(
            draw.PAD,
            height - 8,
            f"Shared count scale: the tallest bar counts {ymax}.",
            size=draw.TICK_SIZE,
            cls="note",
            fill=draw.MUTED,
            max_px=width - 2 * draw.PAD,
        )
    )
    return draw.close(out)
