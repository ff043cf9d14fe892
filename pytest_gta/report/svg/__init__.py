"""Dependency-free inline-SVG charts for the self-contained HTML report.

The HTML report must open offline under a strict Content-Security-Policy (``default-src
'none'; img-src data:; style-src 'unsafe-inline'``), and the same plots go into pytest-html
extras, where they are shown on their own. So the plots are drawn here, on the controller, as
SVG strings with nothing to fetch: no scripts, fonts, images, ``href`` or ``url()``, colours as
``fill`` attributes (right standalone) plus a ``series-N`` class per series (a page can
restyle). Pure stdlib, because a plotting library would be a heavy dependency of every
``pip install pytest-gta`` for a few kinds of chart, and string building is fast: a
229-query run's plots take a few milliseconds.

Everything drawn comes from a run report, which is outside data: labels are cleaned (lone
surrogates and characters XML forbids become U+FFFD) and escaped, and the output is pure ASCII
(other characters as character references), so it embeds in any page whatever its encoding.
Hostile numbers (NaN, infinities, negative, huge, non-numbers) are shown as ``n/a`` or clamped,
never a traceback or a broken picture. The output is deterministic: the same input gives the
same string, so a report can be diffed and cached.
"""

from pytest_gta.report.svg.bars import grouped_bars, stacked_bars
from pytest_gta.report.svg.draw import MAX_WIDTH, MIN_WIDTH, PALETTE, Series
from pytest_gta.report.svg.histogram import histograms
from pytest_gta.report.svg.points import Curve, Estimate, Spot, curves, interval_dots, scatter

__all__ = [
    "MAX_WIDTH",
    "MIN_WIDTH",
    "PALETTE",
    "Curve",
    "Estimate",
    "Series",
    "Spot",
    "curves",
    "grouped_bars",
    "histograms",
    "interval_dots",
    "scatter",
    "stacked_bars",
]
