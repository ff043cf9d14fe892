"""Rendering the HTML report of a 229-query run (issue 14: under 5 seconds on 2 cores).

Builds a 229-query dataset from the bundled sample (each query a copy of a sample query with its
own, distinct input images, so the page has as many images as the real benchmark's 252), runs
the oracle on it in both modes (458 cases; tools replay the reference outputs) with
``--gta-report-html``, then renders the page again from the JSON report and the run's image
store, several times, and prints the render time beside the floor: writing the same report as
JSON (what any report costs), and the 5 s budget. The page's size is printed too.

    python benchmarks/html_report.py [--queries 229] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gta.report.html import render_html  # noqa: E402
from pytest_gta.report.images import ImageStore  # noqa: E402
from pytest_gta.validation import load_dataset  # noqa: E402

SAMPLE = ROOT / "fixtures" / "gta_sample"
BUDGET_S = 5.0


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=229)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        make_dataset(where / "data", args.queries)
        started = time.perf_counter()
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                "--gta-model=oracle",
                f"--gta-data={where / 'data'}",
                "--gta-tools=replay",
                "--gta-sim-model=all-MiniLM-L6-v2",
                "--gta-mode=step,e2e",
                "--gta-report=r.json",
                "--gta-report-html=r.html",
                f"--basetemp={where / 'basetemp'}",
                "-n",
                "2",
            ],
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
        dataset = load_dataset(where / "data")
        store = ImageStore(where / "basetemp" / "gta-images0")
        renders, dumps = [], []
        page = ""
        for _ in range(args.repeat):
            start = time.perf_counter()
            page = render_html(report, dataset, store)
            renders.append(time.perf_counter() - start)
            start = time.perf_counter()
            json.dumps(report, indent=2)
            dumps.append(time.perf_counter() - start)
        render_s, dump_s = statistics.median(renders), statistics.median(dumps)
        images = len(list(store.root.glob("*.json")))
        print(
            f"{len(report['cases'])} cases ({args.queries} queries, both modes), {images} stored "
            f"images; the run itself took {run_s:.1f} s"
        )
        print()
        print("| what | seconds | ratio |")
        print("|---|---:|---:|")
        print(f"| JSON report (floor) | {dump_s:.3f} | 1.0x |")
        print(f"| HTML report | {render_s:.3f} | {render_s / dump_s:.1f}x the floor |")
        print(f"| budget | {BUDGET_S:.1f} | render at {render_s / BUDGET_S:.0%} of it |")
        print()
        size, json_size = len(page.encode()) / 1e6, len(json.dumps(report)) / 1e6
        print(f"page: {size:.1f} MB (JSON report {json_size:.1f} MB)")


if __name__ == "__main__":
    main()
