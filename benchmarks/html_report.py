"""The end of a run on the real GTA release: the report build and the HTML page (issue 14, 22).

Runs the oracle on the release (``--data PATH``; by default ``$PYTEST_GTA_RELEASE``, else
``../shared/gta_release`` beside the checkout) in both modes, ``-n 2``, with ``--gta-report``
and ``--gta-report-html`` at the default size limit (458 cases; the replay tools serve the
reference outputs; the page carries the release's own photographs). Then, in this process, from
the run's JSON report and image store, ``--repeat`` times each, the medians of:

* the JSON report written out (``json.dumps``): the floor any report costs;
* the report build: the run's 458 case records aggregated again into the report (the metrics,
  their bootstrap intervals, the tables' and plots' data), by the same ``build_report`` the
  controller calls at the end of a run, fed by ``--gta-merge``'s reader, then cleaned for
  output as the controller cleans it; checked to give the run's own metrics;
* the HTML page rendered at the default ``--gta-report-html-max-mb`` (10), against the 5 s
  budget.

It prints the page's size (the run's own page, and what it would be with every full-size image
kept) and the page's note on what it reduced to stay within the limit. With ``--generated``
it runs instead on a dataset of ``--queries`` queries built from the bundled sample, each with
its own copies of its images (the benchmark's first form, before the release loaded).

    python benchmarks/html_report.py [--data PATH | --generated [--queries 229]] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.release import oracle_command, release_path  # noqa: E402
from pytest_gta.options.report import DEFAULT_REPORT_HTML_MAX_MB  # noqa: E402
from pytest_gta.outward import Cleaner  # noqa: E402
from pytest_gta.report.build import complete_verdicts  # noqa: E402
from pytest_gta.report.html import render_html  # noqa: E402
from pytest_gta.report.images import ImageStore  # noqa: E402
from pytest_gta.report.merge import merge_reports  # noqa: E402
from pytest_gta.results.io import load_report, parse_report  # noqa: E402
from pytest_gta.validation import load_dataset  # noqa: E402

SAMPLE = ROOT / "fixtures" / "gta_sample"
BUDGET_S = 5.0
MIB = 1024 * 1024
#: The page's own note on what it left out (``pytest_gta.report.html``).
NOTE = re.compile(r'<p class="warn">([^<]*)</p>')


def make_dataset(target: Path, queries: int) -> None:
    """``queries`` queries cycling over the sample's, each with its own copies of its images."""
    from PIL import Image

    shutil.copytree(SAMPLE, target)
    sample = json.loads((SAMPLE / "dataset.json").read_text())
    items = list(sample.items())
    out = {}
    for n in range(queries):
        _qid, query = items[n % len(items)]
        text = json.dumps(query)
        for ref in query["files"]:
            old = ref["path"]
            new = f"image/q{n}_{Path(old).name}"
            with Image.open(SAMPLE / old) as image:
                copy = image.convert("RGB")
            copy.putpixel((0, 0), (n % 256, n // 256, 7))  # distinct content, distinct key
            copy.save(target / new, quality=90)
            text = text.replace(old, new)
        out[str(n)] = json.loads(text)
    (target / "dataset.json").write_text(json.dumps(out))


def median_seconds(repeat: int, work: Callable[[], Any]) -> tuple[float, Any]:
    """The median wall time of ``repeat`` calls of ``work``, and the last call's result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", metavar="PATH", help="the GTA release (default: found)")
    parser.add_argument(
        "--generated", action="store_true", help="a dataset built from the sample instead"
    )
    parser.add_argument("--queries", type=int, default=229, help="--generated: its size")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.generated and args.data is not None:
        parser.error("--data and --generated: give one")
    repeat = max(1, args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        if args.generated:
            data = where / "data"
            make_dataset(data, args.queries)
            source = f"{args.queries} queries generated from the bundled sample"
        else:
            data = release_path(args.data)
            source = f"the GTA release at {data}"
        started = time.perf_counter()
        run = subprocess.run(
            oracle_command(
                data,
                "--gta-tools=replay",
                "--gta-report=r.json",
                "--gta-report-html=r.html",
                f"--basetemp={where / 'basetemp'}",
            ),
            cwd=where,
            capture_output=True,
            text=True,
            check=False,
        )
        run_s = time.perf_counter() - started
        if run.returncode not in (0, 1):
            sys.exit(
                f"the run failed ({run.returncode}):\n{run.stdout[-3000:]}{run.stderr[-2000:]}"
            )
        report = json.loads((where / "r.json").read_text())
        run_page = (where / "r.html").read_bytes()
        dataset = load_dataset(data)
        store = ImageStore(where / "basetemp" / "gta-images0")
        shard = load_report(where / "r.json", "r.json")
        limit = int(DEFAULT_REPORT_HTML_MAX_MB * MIB)

        dump_s, _ = median_seconds(repeat, lambda: json.dumps(report, indent=2))
        # What the controller's build does: aggregate, then clean for output (outward JSON).
        build_s, built = median_seconds(
            repeat, lambda: Cleaner().value(merge_reports([shard], dataset).to_json_value())
        )
        if built["metrics"] != report["metrics"]:
            sys.exit("the report built again differs from the run's own metrics")
        # The page renders the typed report, its cases judged (what a report file read back gets).
        typed = parse_report("r.json", report).report
        complete_verdicts(typed.cases, dataset, typed.settings.sim_threshold)
        render_s, page = median_seconds(
            repeat, lambda: render_html(typed, dataset, store, max_bytes=limit)
        )
        whole = render_html(typed, dataset, store, max_bytes=1 << 40)
        images = len(list(store.root.glob("*.json")))
        print(
            f"{len(report['cases'])} cases ({source}, both modes), {images} stored images; "
            f"the run itself (-n 2) took {run_s:.1f} s"
        )
        print()
        print(f"| what | seconds (median of {repeat}) | ratio |")
        print("|---|---:|---:|")
        print(f"| JSON report written (floor) | {dump_s:.3f} | 1.0x |")
        cases = len(shard.cases)
        print(f"| report build ({cases} cases) | {build_s:.3f} | {build_s / dump_s:.1f}x |")
        print(f"| HTML report rendered | {render_s:.3f} | {render_s / dump_s:.1f}x |")
        print(f"| budget | {BUDGET_S:.1f} | render at {render_s / BUDGET_S:.0%} of it |")
        print()
        size = len(page.encode())
        print(
            f"page: {size / MIB:.2f} MiB (the run's own: {len(run_page) / MIB:.2f} MiB), limit "
            f"{DEFAULT_REPORT_HTML_MAX_MB:g} MiB (--gta-report-html-max-mb); with every "
            f"full-size image {len(whole.encode()) / MIB:.2f} MiB; JSON report "
            f"{len(json.dumps(report)) / MIB:.2f} MiB"
        )
        for note in NOTE.findall(page):
            print(f"page note: {note}")


if __name__ == "__main__":
    main()
