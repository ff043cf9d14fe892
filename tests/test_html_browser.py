"""The HTML report in a real browser: headless Chromium renders the page of a run on the sample.

The run is real (the oracle on both modes, its tools replayed from the committed cassettes); the
page is served by a local HTTP server that logs every request, and Chromium (Debian's package;
CI installs it) dumps the DOM after the page's script ran and takes screenshots, kept under the
artifacts directory for a human to look at. Checked: the tables, the plots, every case row and a
drill-down with its images are there; the script ran (``data-ready``); no request left the page
(the server saw only the page itself, and Chromium reported no Content-Security-Policy
violation).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers.browser import serve_directory
from tests.helpers.gta_run import FAST_SIM, NO_HYPOTHESIS
from tests.helpers.paths import SAMPLE
from tests.test_html_report import Page

pytestmark = pytest.mark.slow

DRILLDOWN = "e2e-10"


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    """A real run of the sample (both modes) with ``--gta-report-html``, once for the module."""
    import subprocess
    import sys

    where = tmp_path_factory.mktemp("html-run")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *NO_HYPOTHESIS,
            "-p",
            "no:cacheprovider",
            "--gta-model=oracle",
            "--gta-tools=strict-replay",
            f"--gta-tool-cassettes={SAMPLE.parent / 'cassettes'}",
            FAST_SIM,
            "--gta-mode=step,e2e",
            "--gta-report=report.json",
            "--gta-report-html=report.html",
            "-n",
            "2",
            "-q",
        ],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return where


def test_the_report_renders_in_chromium_with_no_network(chromium, report_dir, artifacts_dir):
    report = json.loads((report_dir / "report.json").read_text())
    with serve_directory(report_dir) as server:
        url = server.url("report.html")
        result = chromium.dump_dom(f"{url}#case={DRILLDOWN}", window=(1400, 1400))
        shot = chromium.screenshot(url, artifacts_dir / "html-report.png", window=(1400, 2400))
        drill = chromium.screenshot(
            f"{url}#case={DRILLDOWN}",
            artifacts_dir / "html-report-drilldown.png",
            window=(1400, 1400),
        )
    dom = result.dom
    assert shot.returncode == 0
    assert drill.returncode == 0
    # The script ran to its end and saw no policy violation.
    assert 'data-ready="1"' in dom
    assert 'data-csp-violations="0"' in dom
    assert result.csp_violations == []
    assert shot.csp_violations == []
    # Only the page itself was fetched: no script, style, font or image came over the network.
    paths = [r.path for r in server.page_requests]
    assert paths == ["/report.html"] * 3, paths
    # Tables, plots and every case row are in the rendered DOM.
    for title in ("Table 4, step-by-step mode", "Table 4, end-to-end mode", "Table 5", "Outcomes"):
        assert title in dom
    assert len(re.findall(r"<figure id=\"plot-", dom)) >= 6
    assert dom.count("<svg") >= 6
    rows = [a["data-id"] for t, a in Page(dom).elements if t == "tr" and "data-id" in a]
    assert rows == [c["id"] for c in report["cases"]]
    assert f"{len(rows)} of {len(rows)} cases" in dom
    # The drill-down the URL named was opened by the script, its images filled in from the page.
    panel = dom[dom.index('<section id="drilldown"') :]
    panel = panel[: panel.index('</section><div id="lightbox"')]
    assert f'data-case="{DRILLDOWN}"' in panel
    assert "hidden" not in panel[: panel.index(">")]
    assert "reference chain" in panel
    assert "Generated images" in panel
    assert "Scoring" in panel
    sources = re.findall(
        r'<img alt="[^"]*" data-key="[^"]+" src="(data:image/[a-z]+);base64,', panel
    )
    case = next(c for c in report["cases"] if c["id"] == DRILLDOWN)
    assert len(sources) >= len(set(case["images"].values()))
    # Screenshots for a human (CI keeps the artifacts directory).
    for name in ("html-report.png", "html-report-drilldown.png"):
        data = (artifacts_dir / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        assert len(data) > 20_000, "a blank page compresses to far less"


def test_filters_narrow_the_rows_in_the_browser(chromium, report_dir, tmp_path):
    # A copy of the page with the mode filter preset (as a user's browser restores a form); the
    # page's own script applies the filters on load, so the rows and the count must follow.
    text = (report_dir / "report.html").read_text()
    preset = text.replace(
        '<option value="step">step</option>', '<option value="step" selected>step</option>', 1
    )
    assert preset != text
    (tmp_path / "filtered.html").write_text(preset)
    result = chromium.dump_dom((tmp_path / "filtered.html").as_uri())
    shown = [
        (a["data-id"], "hidden" in a)
        for t, a in Page(result.dom).elements
        if t == "tr" and "data-id" in a
    ]
    visible = [case for case, hidden in shown if not hidden]
    assert visible
    assert all(case.startswith("step-") for case in visible)
    assert f"{len(visible)} of {len(shown)} cases" in result.dom
