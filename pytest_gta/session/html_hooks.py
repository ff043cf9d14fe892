"""pytest-html integration: each GTA case's row shows its score and carries its transcript.

Only pytest-html's documented surface is used: the ``extras`` a test report carries (an HTML
extra with the case's drill-down, image extras with the images its tools made, built with
``pytest_html.extras``) and its hooks (a "GTA score" column, the run's tables in the summary).
pytest-html stays optional: this module is registered only when its plugin is active, and its
hooks are marked optional so pytest never complains about hook names it does not know.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pytest

from pytest_gta.case import Case
from pytest_gta.options import GtaSettings
from pytest_gta.report.explain import generated_images
from pytest_gta.report.html import case_detail
from pytest_gta.report.images import ImageStore
from pytest_gta.report.page import esc
from pytest_gta.results.case import CaseResult
from pytest_gta.session.collector import Collector

#: Name of the registered hook object.
PLUGIN_NAME = "pytest-gta-html"
#: A small stylesheet for the extra, scoped to it (pytest-html's page has its own styles).
_STYLE = (
    "<style>.gta-case pre{white-space:pre-wrap;background:#f6f8fa;padding:4px;margin:2px 0}"
    ".gta-case .diverge{background:#ffebe9}.gta-case .diverge-why{color:#cf222e;font-weight:600}"
    ".gta-case .pair{display:grid;grid-template-columns:1fr 1fr;gap:12px}"
    ".gta-case img{max-width:240px;max-height:240px}.gta-case .role{font-size:11px;color:#57606a}"
    ".gta-case table{border-collapse:collapse}.gta-case td,.gta-case th{border:1px solid #d0d7de;"
    "padding:2px 6px}</style>"
)


def case_extras(
    case: Case,
    result: CaseResult,
    store: ImageStore | None,
    settings: GtaSettings,
) -> list[dict[str, Any]]:
    """The pytest-html extras of a finished case: its drill-down, then its generated images."""
    # pytest-html is optional (this runs only with --html): not imported where it is absent.
    from pytest_html import extras  # type: ignore[import-untyped]

    view = result
    keys: Mapping[str, Any] = result.images

    def image(written: str) -> str:
        key = keys.get(written)
        stored = store.get(key) if store is not None and isinstance(key, str) else None
        uri = store.data_uri(stored, "thumb") if store is not None and stored else None
        if uri is None:
            return ""
        return f'<img src="{esc(uri)}" alt="{esc(written)}" title="{esc(written)}">'

    fragment = case_detail(view, case.query, threshold=settings.scoring.sim_threshold, image=image)
    out = [extras.html(f'<div class="gta-case">{_STYLE}{fragment}</div>')]
    for written in generated_images(view):
        key = keys.get(written)
        stored = store.get(key) if store is not None and isinstance(key, str) else None
        data = store.read(stored, "full") if store is not None and stored else None
        if stored is None or data is None:
            continue
        name = written.rsplit("/", 1)[-1]
        content = base64.b64encode(data).decode("ascii")
        if stored.mime_full == "image/png":
            out.append(extras.png(content, name=name))
        elif stored.mime_full == "image/jpeg":
            out.append(extras.jpg(content, name=name))
    return out


def _score(report: pytest.TestReport) -> str:
    for name, value in report.user_properties:
        if name == "gta_score" and isinstance(value, int | float):
            return f"{float(value):.3f}"
    return ""


class GtaHtmlHooks:
    """pytest-html hooks on the controller: the score column and the summary's tables."""

    def __init__(self, config: pytest.Config, collector: Collector) -> None:
        self.config = config
        self.collector = collector

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        """A sortable "GTA score" column after the test id."""
        cells.insert(2, '<th class="sortable" data-column-type="gtaScore">GTA score</th>')

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        """The case's score (empty for tests that are not GTA cases)."""
        cells.insert(2, f'<td class="col-gtaScore">{_score(report)}</td>')

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str], session: pytest.Session
    ) -> None:
        """The run's header and the paper's tables, as the terminal prints them."""
        report = self.collector.report
        if report is not None:
            kind = self.collector.reporting.finisher.kind
            postfix.append(
                f"<h2>{esc(kind.title + ' results')}</h2><style>.gta-summary table"
                "{border-collapse:collapse}"
                ".gta-summary td,.gta-summary th{border:1px solid #d0d7de;padding:2px 8px}"
                "</style>" + kind.summary_html(report)
            )
