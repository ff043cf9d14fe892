"""The HTML report (``--gta-report-html``), its image store, and the pytest-html integration.

Black box: real runs of the plugin on the bundled sample (pytester, with and without xdist),
the page parsed back with the standard library's HTML parser and pytest-html's own report read
back from its JSON blob. The page in a real browser is tests/test_html_browser.py.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.report import html as page
from pytest_gta.report.build import complete_verdicts
from pytest_gta.report.images import (
    THUMB_PX,
    ImageStore,
    image_paths,
    sniff,
    store_case_images,
)
from pytest_gta.results.case import Verdict
from pytest_gta.results.io import parse_report
from pytest_gta.validation import load_dataset
from tests.helpers.gta_run import FAST_SIM, gta
from tests.helpers.optional import require
from tests.helpers.paths import SAMPLE
from tests.helpers.report_models import case_result, run_report

require("pillow")
from PIL import Image  # noqa: E402

REPLAY = ["--gta-model=oracle", "--gta-tools=strict-replay", FAST_SIM]


def replay_args(*extra: str) -> list[str]:
    return [*REPLAY, f"--gta-tool-cassettes={SAMPLE.parent / 'cassettes'}", *extra]


class Page(HTMLParser):
    """What a test needs of a report page: elements by tag, attributes, and the text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._script: dict[str, str | None] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        if tag == "script":
            self._script = dict(attrs)

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self.scripts.append((self._script, data))
            self._script = None
        else:
            self.text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script = None

    def find(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [
            a
            for t, a in self.elements
            if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]

    def images(self) -> dict[str, dict[str, str]]:
        (data,) = [d for a, d in self.scripts if a.get("id") == "gta-images"]
        return json.loads(data)


def run_sample(pytester: pytest.Pytester, *extra: str) -> tuple[Any, Page, dict[str, Any]]:
    run = gta(
        pytester,
        *replay_args("--gta-mode=step,e2e", "--gta-report-html=r.html"),
        *extra,
        report="r.json",
        fresh_process=True,
    )
    text = (pytester.path / "r.html").read_text(encoding="utf-8")
    return run.result, Page(text), run.report


def test_the_page_has_every_table_plot_case_and_drilldown(pytester):
    # Under xdist: test_the_page_is_the_same_with_and_without_xdist.
    result, parsed, report = run_sample(pytester)
    assert result.ret == 0, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines([f"report written to {pytester.path / 'r.html'}"])
    text = " ".join(parsed.text)
    for title in ("Table 4, step-by-step mode", "Table 4, end-to-end mode", "Table 5", "Outcomes"):
        assert title in text
    assert report["dataset"]["sha256"] in text
    # Every case a row, every row a drill-down (a template), in the report's order.
    rows = [a["data-id"] for a in parsed.find("tr", **{"class": "case"})]
    assert rows == [c["id"] for c in report["cases"]]
    assert len(rows) == 34  # 17 sample queries x 2 modes
    templates = [a["id"] for a in parsed.find("template")]
    assert templates == [f"t-{c['id']}" for c in report["cases"]]
    figures = {a["id"] for a in parsed.find("figure")}
    assert {
        "plot-metrics-step",
        "plot-metrics-e2e",
        "plot-tools",
        "plot-f1",
        "plot-calls",
    } <= figures
    assert "plot-scores" in figures
    # Images: the sample's 11 input images and the 9 images the e2e tools made (cassettes: Plot
    # in 10 and 13, AddText in 10 and 12, DrawBox twice in 11, once in 14, twice in 16), each once.
    images = parsed.images()
    made = {
        key
        for case in report["cases"]
        for written, key in case["images"].items()
        if "gta-output" in written
    }
    assert len(made) == 9
    inputs = {
        key
        for case in report["cases"]
        for w, key in case["images"].items()
        if "gta-output" not in w
    }
    assert made | inputs == set(images)
    for entry in images.values():
        assert entry["thumb"].startswith("data:image/")
        assert entry["full"].startswith("data:image/")
    # A generated image shows in its case's drill-down, with the first divergence absent.
    for case in report["cases"]:
        for written, key in case["images"].items():
            assert f'data-key="{key}"' in (pytester.path / "r.html").read_text(), (
                case["id"],
                written,
            )


def test_the_page_is_the_same_with_and_without_xdist(pytester):
    _, serial, report_serial = run_sample(pytester)
    _, parallel, report_parallel = run_sample(pytester, "-n", "2")
    assert serial.images().keys() == parallel.images().keys()
    rows = [a["data-id"] for a in serial.find("tr", **{"class": "case"})]
    assert rows == [a["data-id"] for a in parallel.find("tr", **{"class": "case"})]
    assert report_serial["metrics"] == report_parallel["metrics"]


def test_the_page_loads_nothing_and_allows_only_its_own_script(pytester):
    _, parsed, _ = run_sample(pytester)
    text = (pytester.path / "r.html").read_text()
    (csp,) = [a["content"] for a in parsed.find("meta", http_equiv="Content-Security-Policy")]
    assert csp is not None
    assert "default-src 'none'" in csp
    assert "img-src data:" in csp
    executable = [(a, d) for a, d in parsed.scripts if a.get("type") is None]
    assert len(executable) == 1
    digest = base64.b64encode(hashlib.sha256(executable[0][1].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp
    # No attribute points anywhere but into the page.
    for _tag, attrs in parsed.elements:
        for name in ("src", "href", "action", "xlink:href"):
            value = attrs.get(name)
            assert value is None or value.startswith(("#", "data:")), (name, value)
    assert "url(http" not in text
    assert "@import" not in text


def test_a_failing_case_shows_why_and_where_it_diverged(pytester):
    # A mock model that calls the wrong tool first, then answers wrongly.
    script = pytester.path / "script.json"
    script.write_text(
        json.dumps(
            {
                "responses": {
                    "e2e-0": [
                        'Thought: add\nAction: Calculator\nAction Input: {"expression": "1+2"}',
                        "Thought: done\nFinal Answer: <script>alert(1)</script> about 3 dollars",
                    ]
                }
            }
        )
    )
    result = pytester.runpytest_subprocess(
        f"--gta-model=mock:{script}",
        "--gta-tools=replay",
        FAST_SIM,
        "--gta-ids=0",
        "--gta-report=r.json",
        "--gta-report-html=r.html",
    )
    assert result.ret == 1
    text = (pytester.path / "r.html").read_text()
    assert "<script>alert(1)" not in text
    assert "&lt;script&gt;alert(1)" in text
    assert "first divergence: expected a call to OCR; the model called Calculator" in text
    assert 'class="step call diverge"' in text
    # The scoring detail: the whitelist group that missed.
    assert "whitelist (every group must hit)" in text
    assert "missing" in text


def test_size_limit_keeps_thumbnails_and_says_so(pytester):
    _, parsed, report = run_sample(pytester, "--gta-report-html-max-mb=1", "--basetemp=bt")
    assert (pytester.path / "r.html").stat().st_size <= 1024 * 1024
    # A limit the sample's text fits under but not its full-size images: thumbnails stay.
    store = ImageStore(pytester.path / "bt" / "gta-images0")
    dataset = load_dataset(SAMPLE)
    typed = parse_report("r.json", report).report
    complete_verdicts(typed.cases, dataset, typed.settings.sim_threshold)
    without = len(page.render_html(typed, dataset, store, max_bytes=1).encode())
    limited = page.render_html(typed, dataset, store, max_bytes=without + 300_000)
    assert len(limited.encode()) <= without + 300_000
    small = Page(limited)
    text = " ".join(small.text)
    assert "--gta-report-html-max-mb" in text
    assert "thumbnails only" in text
    images = small.images()
    assert images
    assert all("thumb" in e for e in images.values())
    assert any("full" not in e for e in images.values())
    assert len(images) == len(parsed.images())


def test_bad_size_limit_is_a_usage_error(pytester):
    result = pytester.runpytest_subprocess(*replay_args("--gta-report-html-max-mb=0.5"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gta-report-html-max-mb=0.5: give a size in MB, at least 1*"])


def test_an_unwritable_page_does_not_lose_the_run(pytester):
    blocker = pytester.path / "blocked"
    blocker.write_text("a file, not a directory")
    result = pytester.runpytest_subprocess(
        *replay_args("--gta-ids=0", "--gta-report-html=blocked/r.html")
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*Table 4*", "*could not write*blocked/r.html*"])


# --------------------------------------------------------------------------------------------
# pytest-html


def blob(path: Path) -> dict[str, Any]:
    match = re.search(r'data-jsonblob="([^"]*)"', path.read_text())
    assert match, "pytest-html's data blob"
    data: dict[str, Any] = json.loads(html.unescape(match.group(1)))
    return data


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["no-xdist", "xdist"])
def test_pytest_html_rows_carry_score_transcript_and_images(pytester, xdist):
    require("pytest-html")
    result = pytester.runpytest_subprocess(
        *replay_args("--gta-ids=0,10", "--html=ph.html", "--self-contained-html"), *xdist
    )
    assert result.ret == 0, result.stdout.str()[-2000:]
    text = (pytester.path / "ph.html").read_text()
    assert "GTA score" in text
    assert "Table 4, end-to-end mode" in text
    tests = blob(pytester.path / "ph.html")["tests"]
    by_id = {k.rsplit("[", 1)[-1].rstrip("]"): v for k, v in tests.items()}
    assert set(by_id) == {"e2e-0", "e2e-10"}
    for case_id, runs in by_id.items():
        extras = [e for run in runs for e in run["extras"]]
        htmls = [e["content"] for e in extras if e["format_type"] == "html"]
        assert len(htmls) == 1
        assert case_id in htmls[0]
        assert "Scoring" in htmls[0]
        assert "reference chain" in htmls[0]
        assert 'src="data:image/' in htmls[0]
        cells = " ".join(c for run in runs for c in run["resultsTableRow"])
        assert '<td class="col-gtaScore">1.000</td>' in cells
    made = [e for run in by_id["e2e-10"] for e in run["extras"] if e["format_type"] == "image"]
    assert len(made) == 2
    assert all(e["content"].startswith("data:image/") for e in made)
    assert not [e for run in by_id["e2e-0"] for e in run["extras"] if e["format_type"] == "image"]


def test_pytest_html_without_gta_is_untouched(pytester):
    require("pytest-html")
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest_subprocess("--html=ph.html")
    assert result.ret == 0
    assert "GTA score" not in (pytester.path / "ph.html").read_text()


# --------------------------------------------------------------------------------------------
# Pure parts


def test_render_without_dataset_or_images_still_gives_a_page():
    report = run_report(
        model="m<b>",
        outcomes={"passed": 0, "failed": 1, "error": 0, "skipped": 0},
        cases=[
            case_result(
                query_id="1",
                message="<img src=x onerror=alert(1)>",
                steps=[{"role": "assistant", "content": "</template><script>x()</script>"}],
                images={"a.jpg": "../../etc/passwd"},
            )
        ],
    )
    text = page.render_html(report, None, None)
    assert "<img src=x" not in text
    assert "</template><script>x()" not in text
    assert "No images" in text
    assert "m&lt;b&gt;" in text
    Page(text)


def write_image(path: Path, size: tuple[int, int], fmt: str, color: str = "red") -> Path:
    image = Image.new("RGB", size, color)
    image.save(path, format=fmt)
    return path


def test_images_are_stored_once_and_scaled(tmp_path):
    store = ImageStore(tmp_path / "store")
    store.root.mkdir()
    big = write_image(tmp_path / "big.jpg", (3000, 1500), "JPEG")
    copy = tmp_path / "copy.jpg"
    copy.write_bytes(big.read_bytes())
    key = store.add(big)
    assert key is not None
    assert store.add(copy) == key
    stored = store.get(key)
    assert stored is not None
    assert (stored.width, stored.height) == (3000, 1500)
    thumb = Image.open(io.BytesIO(store.read(stored, "thumb") or b""))
    assert max(thumb.size) == THUMB_PX
    assert len(list(store.root.glob(f"{key}*"))) == 3  # index entry, thumb, full
    png = write_image(tmp_path / "plot.png", (100, 80), "PNG", "white")
    png_key = store.add(png)
    assert png_key is not None
    assert store.get(png_key).mime_thumb in ("image/png", "image/jpeg")


def test_not_an_image_or_a_broken_one_is_left_out_with_a_reason(tmp_path):
    store = ImageStore(tmp_path)
    text = tmp_path / "notes.png"
    text.write_text("hello")
    assert store.add(text) is None
    truncated = tmp_path / "cut.jpg"
    truncated.write_bytes(write_image(tmp_path / "ok.jpg", (64, 64), "JPEG").read_bytes()[:40])
    assert store.add(truncated) is None or store.get(store.add(truncated) or "") is not None
    assert store.add(tmp_path / "missing.jpg") is None
    assert any("notes.png" in p for p in store.problems)
    assert any("missing.jpg" in p for p in store.problems)


def test_without_pillow_small_images_are_kept_unscaled(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pil(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    source = write_image(tmp_path / "x.png", (40, 30), "PNG")
    monkeypatch.setattr(builtins, "__import__", no_pil)
    store = ImageStore(tmp_path / "s")
    store.root.mkdir()
    key = store.add(source)
    assert key is not None
    stored = store.get(key)
    assert stored is not None
    assert stored.thumb == stored.full
    assert store.read(stored, "full") == source.read_bytes()


def test_case_images_stay_inside_the_dataset_and_output(tmp_path):
    outside = write_image(tmp_path / "secret.jpg", (8, 8), "JPEG")
    dataset = load_dataset(SAMPLE)
    found = image_paths(
        ["image/image_0.jpg", "../../../../" + str(outside), str(outside)],
        [{"args": {"image": "image/image_1.jpg"}}, "image/nope.jpg"],
        [dataset.root],
    )
    assert set(found) == {"image/image_0.jpg", "image/image_1.jpg"}
    store = ImageStore(tmp_path / "s")
    store.root.mkdir()
    keys = store_case_images(store, ["image/image_0.jpg"], [], [dataset.root])
    assert list(keys) == ["image/image_0.jpg"]
    assert store.get(keys["image/image_0.jpg"])


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(
        st.binary(max_size=2048),
        st.builds(lambda b: b"\x89PNG\r\n\x1a\n" + b, st.binary(max_size=512)),
        st.builds(lambda b: b"\xff\xd8\xff" + b, st.binary(max_size=512)),
    )
)
def test_hostile_image_files_never_raise(tmp_path, data):
    store = ImageStore(tmp_path)
    path = tmp_path / "x.png"
    path.write_bytes(data)
    key = store.add(path)
    assert key is None or store.get(key) is not None
    assert sniff(data) is not None or key is None


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    entry=st.recursive(
        st.none() | st.integers() | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
        max_leaves=10,
    )
)
def test_broken_store_entries_read_as_missing(tmp_path, entry):
    store = ImageStore(tmp_path)
    (tmp_path / "abc123.json").write_text(json.dumps(entry))
    assert store.get("abc123") is None
    assert store.get("../abc") is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=20,
)
#: A well-formed call of any tool and arguments, failed or not.
CALL = st.fixed_dictionaries(
    {
        "role": st.just("assistant"),
        "tool_calls": st.lists(
            st.fixed_dictionaries(
                {"function": st.fixed_dictionaries({"name": st.text(), "arguments": JSON})}
            ),
            min_size=1,
            max_size=2,
        ),
    },
    optional={"error": JSON},
)
#: Step records as a prediction file may hold them: any JSON, or a call of any shape.
STEPS = st.lists(
    JSON
    | CALL
    | st.fixed_dictionaries(
        {"role": st.sampled_from(["assistant", "tool", "user"]), "tool_calls": JSON},
        optional={"content": JSON, "error": JSON},
    ),
    max_size=5,
)
STEP_OUTCOME = st.fixed_dictionaries(
    {
        "gt_type": st.sampled_from(["tool", "answer", "tool_return"]),
        "pred_type": st.sampled_from(["tool", "answer", "none"]),
        "error": st.sampled_from([None, "format", "args", "other"]),
        "tool_ok": st.booleans(),
        "args_ok": st.booleans(),
        "answer": st.none() | st.tuples(st.sampled_from(["bool", "f32"]), st.floats(0, 1)),
    }
)


@settings(max_examples=80)
@given(
    mode=st.sampled_from(["step", "e2e"]),
    query_id=st.sampled_from(["0", "1", "10", "not in the dataset"]),
    steps=STEPS,
    replies=st.lists(st.text(), max_size=4),
    outcomes=st.none() | st.lists(STEP_OUTCOME, max_size=4),
    turn=st.none() | st.integers(-3, 6),
    whitelist=st.none() | st.lists(st.booleans(), max_size=4),
    outcome=st.sampled_from(["passed", "failed", "error", "skipped"]),
)
def test_hostile_case_records_render(
    mode, query_id, steps, replies, outcomes, turn, whitelist, outcome
):
    """A case's recorded values (steps, replies) are outside input; its typed fields may say
    anything their types allow (a step-mode turn past the steps, a check of fewer groups)."""
    none = {"perception": 0, "operation": 0, "logic": 0, "creativity": 0}
    primitives: Any = None
    if outcomes is not None:
        primitives = (
            {"has_answer_ref": True, "steps": outcomes}
            if mode == "step"
            else {
                "has_answer_ref": True,
                "answer": None,
                "imggen": None,
                "tool_calls": len(steps),
                "tool_call_errors": 0,
                "errors": {"format": 0, "args": 0, "other": 0},
                "predicted": none,
                "reference": none,
                "hits": none,
            }
        )
    check = None if whitelist is None else {"whitelist": whitelist, "blacklist_hit": "no"}
    case = case_result(
        mode=mode,
        query_id=query_id,
        outcome=outcome,
        steps=steps,
        replies=replies,
        primitives=primitives,
        verdict=Verdict(passed=False, score=0.5, message="", turn=turn, answer_check=check),
    )
    dataset = load_dataset(SAMPLE)
    query = dataset.queries.get(query_id)
    fragment = page.case_detail(case, query, threshold=0.5, image=lambda _w: "")
    assert case.id in fragment
    Page(fragment)


def test_merged_shards_get_a_page_without_images(pytester):
    for shard in ("1/2", "2/2"):
        name = shard.replace("/", "-")
        result = pytester.runpytest_subprocess(
            *replay_args("--gta-mode=e2e", f"--gta-shard={shard}", f"--gta-report={name}.json")
        )
        assert result.ret == 0, result.stdout.str()[-2000:]
    merged = pytester.runpytest_subprocess(
        "--gta-merge", "1-2.json", "2-2.json", "--gta-report-html=merged.html"
    )
    assert merged.ret == 0, merged.stdout.str()[-2000:]
    parsed = Page((pytester.path / "merged.html").read_text())
    rows = [a["data-id"] for a in parsed.find("tr", **{"class": "case"})]
    assert sorted(rows) == sorted(f"e2e-{n}" for n in range(17))
    assert "No images" in " ".join(parsed.text)
    assert parsed.images() == {}
