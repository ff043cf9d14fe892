"""What every section of the comparison page shares: numbers, links, tables, figures.

The page (:mod:`pytest_gta.report.runs_html`) and its sections on the statistics across runs
(:mod:`pytest_gta.report.runs_html_stats`) write numbers, intervals, run labels and tables the
same way: a run is named by a link to its own report and its column number in the matrix
everywhere, and a ``javascript:`` value is never a link. One module holds that, below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote, urlsplit

from pytest_gta.report.page import esc
from pytest_gta.report.plots import Plot
from pytest_gta.results.comparison import Comparison
from pytest_gta.results.report import Interval

#: Schemes a run's ``html`` may link with; anything else (``javascript:``) is shown as text.
LINK_SCHEMES = ("http", "https", "file")


def num(value: float | None, decimals: int = 2) -> str:
    """A number as the page's cells show it (``n/a``: undefined)."""
    return "n/a" if value is None else f"{float(value):.{decimals}f}"


def span(pair: tuple[float, float] | None) -> str:
    """An interval's ends as ``[low, high]`` ("" without one)."""
    return "" if pair is None else f"[{pair[0]:.2f}, {pair[1]:.2f}]"


def ends(interval: Interval) -> tuple[float, float] | None:
    """An interval's two ends, or ``None`` where one is undefined."""
    low, high = interval.low, interval.high
    return None if low is None or high is None else (low, high)


def muted(text: str) -> str:
    """A sentence in the page's muted style: what a section lacks, how to read it."""
    return f'<p class="muted">{esc(text)}</p>'


def href(target: object) -> str | None:
    """A run report's path or URL as a link target, or ``None`` when it cannot be one.

    A path is percent-encoded (spaces, ``#``); a URL keeps its own encoding but only with a
    scheme in :data:`LINK_SCHEMES`, so a ``javascript:`` or ``data:`` value is never a link.
    """
    text = target.strip() if isinstance(target, str) else ""
    if not text:
        return None
    try:
        scheme = urlsplit(text).scheme.lower()
    except ValueError:
        return None
    if scheme in LINK_SCHEMES:
        return text
    if len(scheme) > 1:
        return None
    # A plain path (a one-letter "scheme" is a Windows drive).
    return quote(text.replace("\\", "/"), safe="/:~._-")


class Runs:
    """The comparison's runs by label: their index (for colours and matrix columns) and link."""

    def __init__(self, comparison: Comparison) -> None:
        self.runs = comparison.runs
        self.labels = [run.label for run in self.runs]
        self.index = {label: i for i, label in reversed(list(enumerate(self.labels)))}
        self.reference = comparison.reference

    def link(self, label: str) -> str:
        """The label as HTML, linked to the run's own report when there is one."""
        text = esc(label)
        index = self.index.get(label)
        target = href(self.runs[index].html) if index is not None else None
        if target is None:
            return text
        return f'<a class="run-link" href="{esc(target)}">{text}</a>'

    def badge(self, label: str) -> str:
        """The run's number (its matrix column), and ``reference`` for the reference run."""
        index = self.index.get(label)
        parts = [] if index is None else [f'<span class="run-no">{index + 1}</span>']
        if label == self.reference:
            parts.append('<span class="ref">reference</span>')
        return " ".join(parts)


def table_html(
    caption: str, headers: Sequence[str], rows: Sequence[str], cls: str = "cmp-table"
) -> str:
    """A table of the page: its caption, its head and its rows' markup as given."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return (
        f'<table class="{cls}"><caption>{esc(caption)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def level(comparison: Comparison) -> str:
    """The comparison's confidence level as a percentage (``95%``)."""
    return f"{comparison.level * 100:g}%"


def plots_html(plots: Sequence[Plot], empty: str) -> str:
    """Figures in the run report's grid, or a sentence when there are none."""
    if not plots:
        return muted(empty)
    figures = "".join(
        f'<figure id="{esc(p.slug)}">{p.svg}<figcaption>{esc(p.caption)}</figcaption></figure>'
        for p in plots
    )
    return f'<div class="plots">{figures}</div>'
