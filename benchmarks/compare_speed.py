"""``pytest --gta-compare`` over 20 reports of the whole release: under 5 s (issue 26).

Runs the oracle on the real release (``--data PATH``; by default ``$PYTEST_GTA_RELEASE``, else
``../shared/gta_release`` beside the checkout) once, in both modes (458 cases), ``-n 2``; or
takes that run's report from ``--from REPORT``. From it, ``--reports`` (20) valid reports of
different runs are made: each gets its own label and start date (a nightly history), and a
share of its answers (from 0 % to about 40 %, a different set per run) is made wrong in the
cases' metric primitives, then the report is rebuilt from its cases by ``--gta-merge``'s own
code, so every number in it is what a run with those answers would have reported. They are
written to one directory, as a nightly job keeps them.

Then, ``--repeat`` times each, the medians of:

* ``pytest --gta-compare DIR --gta-report --gta-report-md [--gta-report-html]``, end to end in a
  fresh interpreter: starting Python and pytest, reading and checking the 20 reports, the
  comparison, printing, the files (the HTML page when this version has it);
* ``build_comparison`` alone, in this process, on the reports already read;

printed side by side with the 5 s target.

    python benchmarks/compare_speed.py [--data PATH | --from REPORT] [--reports 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.release import oracle_command, release_path  # noqa: E402
from pytest_gta.report.merge import merge_reports  # noqa: E402
from pytest_gta.report.runs import build_comparison  # noqa: E402
from pytest_gta.results.io import dump_report, load_report, parse_report  # noqa: E402
from pytest_gta.results.report import RunReport  # noqa: E402
from pytest_gta.session.compare_command import (  # noqa: E402
    CompareSettings,
    Found,
    comparison_of,
    group_runs,
    run_inputs,
)
from pytest_gta.validation import load_dataset  # noqa: E402

TARGET_S = 5.0
#: The first night of the made-up history.
FIRST_NIGHT = datetime(2026, 11, 1, 2, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Timing:
    """Medians of wall and CPU seconds (CPU: this process's, or its children's for a command).

    On a shared machine the wall time is what the load left over; the CPU time is the work.
    """

    wall: float
    cpu: float


def _cpu(children: bool) -> float:
    if children:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime
    return time.process_time()


def median_seconds(repeat: int, work: Callable[[], Any], *, children: bool = False) -> Timing:
    """The medians of ``repeat`` calls of ``work``."""
    walls, cpus = [], []
    for _ in range(repeat):
        cpu, start = _cpu(children), time.perf_counter()
        work()
        walls.append(time.perf_counter() - start)
        cpus.append(_cpu(children) - cpu)
    return Timing(statistics.median(walls), statistics.median(cpus))


def oracle_report(data: Path, where: Path) -> Path:
    """The oracle's report on ``data``, both modes, two xdist workers."""
    run = subprocess.run(
        oracle_command(data, "--gta-report=oracle.json"),
        cwd=where,
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode not in (0, 1):
        sys.exit(f"the run failed ({run.returncode}):\n{run.stdout[-3000:]}{run.stderr[-2000:]}")
    return where / "oracle.json"


def _wrong(primitives: dict[str, Any]) -> None:
    """The case's answer scored 0 (a step-mode case: its last answer step)."""
    holders = [primitives, *[s for s in primitives.get("steps", []) if isinstance(s, dict)]]
    for holder in reversed(holders):
        answer = holder.get("answer")
        if isinstance(answer, list) and len(answer) == 2:
            holder["answer"] = [answer[0], 0.0]
            return


def variant(base: dict[str, Any], n: int, dataset: Any) -> RunReport:
    """Run ``n`` of the history: its label and date, and a share of its answers wrong."""
    report = json.loads(json.dumps(base))
    rng = random.Random(n)
    share = 0.4 * n / 20
    for case in report["cases"]:
        if case["primitives"] is not None and rng.random() < share:
            _wrong(case["primitives"])
            case["outcome"], case["score"] = "failed", 0.0
    night = FIRST_NIGHT + timedelta(days=n)
    label = f"nightly-{night:%Y-%m-%d}"
    # Built again as --gta-merge builds a report, then named and dated as that night's run.
    rebuilt = merge_reports([parse_report(f"run {n}", report)], dataset)
    stamp = night.isoformat().replace("+00:00", "Z")
    identity = rebuilt.identity.model_copy(
        update={"label": label, "label_given": True, "started_at": stamp, "finished_at": stamp}
    )
    return rebuilt.model_copy(
        update={
            "merged": None,
            "label": label,
            "identity": identity,
            "duration_s": base.get("duration_s"),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", metavar="PATH", help="the GTA release (default: found)")
    parser.add_argument("--from", dest="source", metavar="REPORT", help="the oracle's report")
    parser.add_argument("--reports", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    repeat = max(1, args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        if args.source:
            source = Path(args.source).absolute()
            data = Path(json.loads(source.read_text())["dataset"]["path"])
        else:
            data = release_path(args.data)
            source = oracle_report(data, where)
        dataset = load_dataset(data)
        base = json.loads(source.read_text())
        history = where / "reports"
        history.mkdir()
        for n in range(args.reports):
            report = variant(base, n, dataset)
            (history / f"run-{n:02d}.json").write_text(dump_report(report))
        cases = len(base["cases"])
        html = importlib.util.find_spec("pytest_gta.report.runs_html") is not None
        outputs = ["--gta-report=cmp.json", "--gta-report-md=cmp.md"]
        if html:
            outputs.append("--gta-report-html=cmp.html")
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--gta-compare",
            str(history),
            *outputs,
        ]

        def end_to_end() -> subprocess.CompletedProcess[str]:
            done = subprocess.run(command, cwd=where, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit(f"--gta-compare failed ({done.returncode}):\n{done.stderr[-3000:]}")
            return done

        # Once untimed: Python's and pytest's bytecode caches (assertion rewriting compiles
        # every module of an entry-point plugin) are written as on any machine's second run.
        end_to_end()
        cli = median_seconds(repeat, end_to_end, children=True)
        comparison = json.loads((where / "cmp.json").read_text())
        reports = sorted(history.glob("*.json"))
        found = Found([load_report(p, p.name) for p in reports])
        assert len(group_runs(found.reports)) == args.reports
        settings = CompareSettings()
        built = comparison_of(found, dataset, settings)
        inputs, _notes = run_inputs(found, dataset, settings)
        build = median_seconds(
            repeat, lambda: build_comparison(inputs, dataset, samples=settings.samples)
        )
        read = median_seconds(repeat, lambda: [load_report(p, p.name) for p in reports])
        built_metrics = [r.metrics.to_json_value() for r in built.runs]
        if built_metrics != [r["metrics"] for r in comparison["runs"]]:
            sys.exit("the command's numbers differ from build_comparison's")
        accuracy = [round(r["metrics"]["e2e"]["ans_acc"], 1) for r in comparison["runs"]]
        print(
            f"{args.reports} reports x {cases} cases (the oracle on {data}, both modes, "
            f"answers made wrong in 0 to {40 * (args.reports - 1) / 20:.0f} % of the cases: "
            f"AnsAcc {accuracy[0]} ... {accuracy[-1]}); pages: JSON, markdown"
            f"{', HTML' if html else ''}"
        )
        print()
        print(f"| what | wall s | CPU s | wall / the {TARGET_S:g} s target |")
        print("|---|---:|---:|---:|")
        for what, timing in (
            ("`pytest --gta-compare DIR`, end to end", cli),
            ("reading and checking the reports", read),
            ("`build_comparison` alone", build),
        ):
            print(
                f"| {what} | {timing.wall:.2f} | {timing.cpu:.2f} | {timing.wall / TARGET_S:.0%} |"
            )
        cached = "off" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
        print(
            f"(medians of {repeat}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
            f"CPUs; bytecode cache {cached})"
        )
        shutil.rmtree(history)


if __name__ == "__main__":
    main()
