"""The HTML report of an oracle run on the real GTA release, photographs and all; its erratum.

One real run (the oracle, both modes, ``-n 2``, ``--gta-report-html`` at the default 10 MB
limit, markdown and JUnit XML beside it) serves every test here. The release's 242 distinct
images (its photographs and the placeholder it ships for generated images) weigh more than the
limit at full size, so the page must keep every thumbnail, drop full sizes to fit, and say so;
and, served over loopback to headless Chromium with the server as the browser's proxy, it must
run its script with no Content-Security-Policy violation and ask for nothing but itself. Every
case the oracle fails is one the erratum names, and every output shows the erratum.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.options.report import DEFAULT_REPORT_HTML_MAX_MB
from tests.helpers.browser import serve_directory
from tests.helpers.gta_run import BOTH_MODES, FAST_SIM, ORACLE, XDIST, gta_process
from tests.test_erratum import NAMED
from tests.test_html_report import Page

pytestmark = pytest.mark.slow

LIMIT = int(DEFAULT_REPORT_HTML_MAX_MB * 1024 * 1024)
#: A query whose chain ends on an image-generation call: its drill-down shows the input
#: photograph and the generated image (the release's placeholder), closed by the oracle.
DRILLDOWN = "e2e-12"
IMAGES = re.compile(r'<script type="application/json" id="gta-images">(.*?)</script>', re.S)


@pytest.fixture(scope="module")
def release_run(release_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory of one oracle run of the release with its JSON and HTML reports."""
    where = tmp_path_factory.mktemp("release-html")
    run = gta_process(
        where,
        ORACLE,
        f"--gta-data={release_root}",
        BOTH_MODES,
        FAST_SIM,
        "--gta-report-html=report.html",
        "--gta-report-md=report.md",
        "--junitxml=junit.xml",
        *XDIST,
        report="report.json",
        check=False,
    )
    # The oracle fails the cases the release's quirks doom (exit 1), and nothing errors.
    assert run.ret == 1, run.output[-6000:]
    assert (where / "report.html").is_file(), run.output[-3000:]
    (where / "output.txt").write_text(run.output)
    return where


@pytest.fixture(scope="module")
def report(release_run: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((release_run / "report.json").read_text())
    return loaded


def page_images(page: str) -> dict[str, dict[str, str]]:
    found = IMAGES.search(page)
    assert found is not None
    images: dict[str, dict[str, str]] = json.loads(found.group(1).replace("<\\/", "</"))
    return images


def test_the_page_keeps_every_thumbnail_within_its_limit(
    release_run: Path, report: dict[str, Any]
) -> None:
    assert len(report["cases"]) == 458
    assert report["outcomes"]["error"] == 0
    page = (release_run / "report.html").read_text()
    size = (release_run / "report.html").stat().st_size
    assert size <= LIMIT
    # The run's images: every key a case refers to (a photograph can be referred to by its
    # relative and its absolute path; the page carries each image once).
    keys = {key for case in report["cases"] for key in (case.get("images") or {}).values()}
    assert len(keys) > 200
    images = page_images(page)
    assert set(images) == keys
    assert all(re.match(r"data:image/(jpeg|png);base64,", e["thumb"]) for e in images.values())
    fulls = sum("full" in entry for entry in images.values())
    assert 0 < fulls < len(images)
    # The page says what it reduced, and no image was left out.
    notes = re.findall(r'<p class="warn">([^<]*)</p>', page)
    said = [n for n in notes if "--gta-report-html-max-mb" in n]
    assert len(said) == 1, notes
    found = re.search(
        r"(\d+) full-size image\(s\) are shown as thumbnails only and 0 image", said[0]
    )
    assert found is not None, said[0]
    # Images whose thumbnail is their full size have no separate full entry either.
    assert 0 < int(found[1]) <= len(images) - fulls
    # Full sizes were dropped only as far as needed: the next one would not have fitted.
    assert size > LIMIT * 0.9


def test_the_page_renders_in_chromium_asking_for_nothing_but_itself(
    chromium: Any, release_run: Path, report: dict[str, Any]
) -> None:
    with serve_directory(release_run) as server:
        result = chromium.dump_dom(
            f"{server.url('report.html')}#case={DRILLDOWN}", proxy=server.proxy
        )
    dom = result.dom
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'data-ready="1"' in dom
    assert 'data-csp-violations="0"' in dom
    assert result.csp_violations == []
    # Through the proxy, every request the page made reached this server: only the page.
    asked = server.page_requests
    assert [(r.method, r.path) for r in asked] == [("GET", "/report.html")], [
        (r.method, r.target, r.host) for r in asked
    ]
    rows = [a["data-id"] for t, a in Page(dom).elements if t == "tr" and "data-id" in a]
    assert rows == [case["id"] for case in report["cases"]]
    # The drill-down the URL named shows its photograph and generated image from the page.
    panel = dom[dom.index('<section id="drilldown"') :]
    panel = panel[: panel.index('</section><div id="lightbox"')]
    assert f'data-case="{DRILLDOWN}"' in panel
    shown = set(re.findall(r'<img alt="[^"]*" data-key="([^"]+)" src="data:image/', panel))
    case = next(c for c in report["cases"] if c["id"] == DRILLDOWN)
    assert shown == set(case["images"].values())
    assert len(shown) == 2


def test_every_case_the_oracle_fails_is_in_the_erratum_and_every_output_says_so(
    release_run: Path, report: dict[str, Any]
) -> None:
    failed = [c for c in report["cases"] if c["outcome"] != "passed"]
    assert len(failed) == 33  # 17 step, 16 end to end (tests/test_release.py's REPLAY_FAILS)
    erratum = report["dataset"]["erratum"]
    assert erratum["same_dataset"] is True
    named = {q for ids in erratum["queries"].values() for q in ids}
    assert named == NAMED
    assert {c["query_id"] for c in failed} <= named
    assert all(c.get("erratum") for c in failed)
    # Over the 193 sound queries a replay is perfect where no similarity is involved: every
    # reference call is accepted and matched (officially ArgAcc is 99.28, 5 calls error).
    for mode in ("step", "e2e"):
        assert report["denominators_sound"][mode]["queries"] == 193
        sound = report["metrics_sound"][mode]
        assert (sound["tool_call"], sound["tool_call_error"]) == (471, 0)
        assert report["metrics"][mode]["tool_call_error"] == 5
    assert report["metrics_sound"]["step"]["tool_acc"] == 100.0
    assert report["metrics_sound"]["step"]["arg_acc"] == 100.0
    assert report["metrics"]["step"]["arg_acc"] < 99.3
    # AnsAcc: the objective answers all pass; the subjective ones score their similarity.
    assert report["metrics_sound"]["e2e"]["ans_acc"] == pytest.approx(98.36, abs=0.05)
    output = (release_run / "output.txt").read_text()
    assert "erratum gta-erratum/1: 36 of the run's 229 queries have a faulty reference" in output
    # InstAcc above 100 is the official formula's: image queries' answer steps count, their
    # queries (no reference answer) do not.
    row = r"^  sound refs only \(193 of 229 queries\)\s+106\.58\s+100\.00\s+100\.00\s"
    assert re.search(row, output, re.M), output[-4000:]
    markdown = (release_run / "report.md").read_text()
    assert len(re.findall(r"^- query \d+ \(", markdown, re.M)) == 42  # an item per entry
    assert markdown.count("|   sound refs only (193 of 229 queries) |") == 2
    junit = (release_run / "junit.xml").read_text()
    assert junit.count('name="gta_erratum"') == 72  # both cases of the 36 queries
    page = (release_run / "report.html").read_text()
    assert page.count('<section class="erratum">') == 72
    assert page.count("<td>  sound refs only (193 of 229 queries)</td>") == 2
