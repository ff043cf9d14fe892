"""Wall time of a GTA-Workflow run against the judge's latency, tasks judged at once (issue 40).

The bundled Workflow sample's 8 tasks with its eval pack's deliverables
(``tests/data/workflow/pack.json``: nothing is produced, the judge's calls are the whole run),
judged over the official Responses protocol by the scripted judge of
``tests/helpers/judge_server.py`` (:class:`CountingJudge`), which answers every request (a file
upload or a Responses call, the SDK's retries of an error reply included) after a fixed
latency and counts the most it ever held at once. Each ``--gta-concurrency`` is one
``python -m pytest`` subprocess, timed from start to exit (start-up included), side by side
in one run; a run at latency 0 shows what the harness itself takes.

A task's own calls are sequential (the official walk, checkpoint by checkpoint), so the ideal
wall time is ``calls x latency / tasks in flight`` (tasks in flight: the concurrency, at most
the number of tasks), floored by the longest task's calls x latency. Each task's calls are
counted in the serial run (``--gta-concurrency 1``, always run first), whose requests arrive
task after task: a Responses call belongs to the task whose checkpoint it names, an upload to
the call after it.

Checked too: every run's cases (clock readings aside) and metrics equal the serial run's, and
its requests are the serial run's as a multiset; the script exits 1 when they are not.

    python benchmarks/workflow_concurrency.py [--latency 0.5] [--concurrency 1,8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.concurrency import PYTEST, timed  # noqa: E402
from benchmarks.official_workflow_judge import recorded_requests  # noqa: E402
from tests.helpers.gta_run import untimed  # noqa: E402
from tests.helpers.judge_server import (  # noqa: E402
    WORKFLOW_DATA,
    WORKFLOW_SAMPLE,
    CountingJudge,
    ResponseCall,
)

SCRIPT = WORKFLOW_DATA / "judge_script.json"
PACK = WORKFLOW_DATA / "pack.json"


@dataclass
class Run:
    """One timed pytest run against the judge."""

    label: str
    concurrency: int
    latency: float
    returncode: int
    wall: float
    calls: int
    peak: int
    report: dict[str, Any] = field(repr=False)
    requests: list[dict[str, Any]] = field(repr=False)
    judge: CountingJudge = field(repr=False)
    output: str = field(repr=False, default="")


def run_pytest(label: str, concurrency: int, latency: float, workdir: Path) -> Run:
    """The pack judged at ``--gta-concurrency`` against a judge with ``latency``."""
    report_path = workdir / f"{label}.json"
    log_path = workdir / f"{label}.log"
    with CountingJudge.from_script(SCRIPT) as judge:
        judge.latency = latency
        command = [
            *PYTEST,
            f"--gta-data={WORKFLOW_SAMPLE}",
            f"--gta-model=evalpack:{PACK}",
            "--gta-judge=openai/gpt-5.2",
            f"--gta-judge-base-url={judge.base_url}",
            "--gta-cache=off",
            f"--gta-concurrency={concurrency}",
            f"--gta-report={report_path}",
        ]
        wall, returncode, _, _ = timed(command, workdir, log_path)
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    return Run(
        label=label,
        concurrency=concurrency,
        latency=latency,
        returncode=returncode,
        wall=wall,
        calls=len(judge.requests),
        peak=judge.peak,
        report=report,
        requests=recorded_requests(judge, set()),
        judge=judge,
        output=log_path.read_text(errors="replace"),
    )


def calls_per_task(serial: Run) -> list[int]:
    """Each task's requests in the serial run, in pytest's order (see the module's text)."""
    leaves = [
        {c["requirement"] for c in case["checkpoints"] if c["leaf"]}
        for case in serial.report.get("cases") or []
    ]
    counts = [0] * len(leaves)
    task, pending = 0, 0
    for request in serial.judge.requests:
        if not isinstance(request, ResponseCall):
            pending += 1
            continue
        while task < len(leaves) - 1 and request.requirement not in leaves[task]:
            task += 1
        counts[task] += pending + 1
        pending = 0
    if counts:
        counts[-1] += pending
    return counts


def ideal_seconds(per_task: list[int], concurrency: int, latency: float) -> float:
    """``calls x latency / tasks in flight``, floored by the longest task's calls."""
    slots = max(1, min(concurrency, len(per_task)))
    return max(sum(per_task) * latency / slots, max(per_task, default=0) * latency)


def problems(run: Run, serial: Run) -> list[str]:
    """Why ``run`` cannot be trusted: a run that broke, or results that differ from serial."""
    if run.returncode not in (0, 1) or not run.report:
        tail = "\n".join(run.output.splitlines()[-15:])
        return [f"{run.label}: pytest exited {run.returncode} without a report:\n{tail}"]
    out = []
    if run is serial:
        return out
    mine, theirs = untimed(run.report.get("cases")), untimed(serial.report.get("cases"))
    if mine != theirs:
        out.append(f"{run.label}: the cases differ from the serial run's")
    if untimed(run.report.get("metrics")) != untimed(serial.report.get("metrics")):
        out.append(f"{run.label}: the metrics differ from the serial run's")
    multiset = Counter(json.dumps(r, sort_keys=True) for r in run.requests)
    if multiset != Counter(json.dumps(r, sort_keys=True) for r in serial.requests):
        out.append(f"{run.label}: the judge's requests differ from the serial run's")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.5, help="judge latency, seconds")
    parser.add_argument(
        "--concurrency", default="1,8", help="--gta-concurrency values, comma-separated (1,8)"
    )
    args = parser.parse_args()
    try:
        levels = sorted({int(c) for c in args.concurrency.split(",")} | {1})
    except ValueError:
        parser.error("--concurrency: comma-separated whole numbers, e.g. 1,8")
    if args.latency < 0 or levels[0] < 1:
        parser.error("give a latency >= 0 and concurrencies >= 1")
    print(
        f"judge latency {args.latency:g} s per request; the Workflow sample judged from "
        f"{PACK.name}; --gta-concurrency {', '.join(map(str, levels))}; {os.cpu_count()} CPUs",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="gta-workflow-concurrency-") as tmp:
        runs = []
        for level in levels:
            run = run_pytest(f"c{level}", level, args.latency, Path(tmp))
            print(f"  --gta-concurrency {level}: {run.wall:.1f} s", flush=True)
            runs.append(run)
        top = levels[-1]
        floor = run_pytest(f"c{top}-no-latency", top, 0.0, Path(tmp))
    serial = runs[0]
    per_task = calls_per_task(serial)
    broken = [p for run in [*runs, floor] for p in problems(run, serial)]
    print()
    print("| run | judge calls | peak in flight | wall s | ideal s | wall/ideal |")
    print("|---|---:|---:|---:|---:|---:|")
    for run in runs:
        ideal = ideal_seconds(per_task, run.concurrency, args.latency)
        ratio = run.wall / ideal if ideal else float("nan")
        print(
            f"| `--gta-concurrency {run.concurrency}` | {run.calls} | {run.peak} "
            f"| {run.wall:.1f} | {ideal:.1f} | {ratio:.2f} |"
        )
    print(
        f"| `--gta-concurrency {top}`, judge latency 0 (the harness alone) | {floor.calls} "
        f"| {floor.peak} | {floor.wall:.1f} | - | - |"
    )
    print()
    print(
        f"calls per task (serial run): {per_task}; the longest, {max(per_task, default=0)} "
        f"calls, is the floor at {max(per_task, default=0) * args.latency:g} s"
    )
    if not broken:
        print(f"every run's cases, metrics and requests equal the serial run's ({len(per_task)})")
    for problem in broken:
        print(f"PROBLEM: {problem}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
