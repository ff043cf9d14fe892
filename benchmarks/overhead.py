"""Harness overhead on the real GTA release: collection, and runs against model time (SPEC 7).

Two parts, both on the release (``--data PATH``; by default ``$PYTEST_GTA_RELEASE``, else
``../shared/gta_release`` beside the checkout) or, with ``--sample``, on the bundled sample:

* ``collect``: ``pytest --collect-only`` of the 458 cases (``--gta-model=oracle
  --gta-mode=step,e2e``: the dataset loaded and validated, every case made) against the floor,
  a plain ``pytest --collect-only`` in the same empty directory (pytest, its plugins and
  pytest-gta's import, no dataset). The median of ``--repeat`` runs of each, and the difference:
  what collecting the benchmark costs before anything runs.
* ``runs``: a fake OpenAI-compatible model on loopback answers every chat completion after a
  fixed latency (always ``Final Answer: 4``: one call per case), one request at a time
  (``--gta-concurrency=1``), and each run's wall time is printed next to the ideal
  ``calls x latency / workers`` and next to the same run with the oracle (no model, no
  latency): the ratio is what the harness costs on top of the model (collection, prompts,
  parsing, scoring, reports, pytest and xdist start-up), measured side by side in one run.

    python benchmarks/overhead.py [--data PATH | --sample] [--parts collect,runs]
        [--repeat 3] [--latency 0.2] [--workers 0,2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.release import release_path  # noqa: E402
from tests.helpers.scripted_server import ScriptedServer, Step, chat_completion  # noqa: E402

#: Left out of every timed pytest: the cache plugin writes files, Hypothesis (a dev extra here)
#: spends about a second in its summary; neither is the harness.
QUIET = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-q")
PARTS = ("collect", "runs")


def timed(command: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Wall seconds of one subprocess, and what it printed."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, done


def collect(data: str, repeat: int) -> None:
    """Median ``--collect-only`` seconds with and without the GTA cases, and the case count."""
    pytest = [sys.executable, "-m", "pytest", *QUIET, "--collect-only"]
    gta = [f"--gta-data={data}", "--gta-model=oracle", "--gta-mode=step,e2e"]
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        floor, cases = [], []
        count = "?"
        for _ in range(repeat):
            floor.append(timed(pytest, where)[0])
            seconds, done = timed([*pytest, *gta], where)
            if done.returncode != 0:
                sys.exit(f"collection failed ({done.returncode}):\n{done.stdout[-3000:]}")
            cases.append(seconds)
            count = str(sum(1 for line in done.stdout.splitlines() if "::test_query[" in line))
    plain, full = statistics.median(floor), statistics.median(cases)
    print(f"collection, median of {repeat} runs (seconds)")
    print("| what | seconds |")
    print("|---|---:|")
    print(f"| `pytest --collect-only` (floor) | {plain:.2f} |")
    print(f"| `... {' '.join(gta[1:])}` ({count} cases) | {full:.2f} |")
    print(f"| the cases' own cost | {full - plain:.2f} |")
    print()


def measure(
    url: str | None, data: str, workers: int, modes: str
) -> tuple[float, dict[str, object]]:
    """Wall time of one pytest run and its JSON report (``url=None``: the oracle, no model)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        command = [
            sys.executable,
            "-m",
            "pytest",
            *QUIET,
            *(["--gta-model=oracle"] if url is None else ["--gta-model=openai/fake"]),
            *([] if url is None else [f"--gta-base-url={url}", "--gta-concurrency=1"]),
            f"--gta-data={data}",
            f"--gta-mode={modes}",
            "--gta-cache=off",
            "--gta-sim-model=all-MiniLM-L6-v2",
            f"--gta-report={report}",
            "-n",
            str(workers),
        ]
        wall, done = timed(command, Path(tmp))
        if not report.is_file():
            sys.exit(f"the run wrote no report ({done.returncode}):\n{done.stdout[-3000:]}")
        return wall, json.loads(report.read_text())


def runs(data: str, latency: float, workers: list[int], modes: str) -> None:
    """Wall time, ideal time and their ratio per worker count, beside the oracle's wall time."""
    answer = Step(chat_completion("Thought: done\nFinal Answer: 4"), delay=latency)
    print(f"runs: fake model latency {latency:.3f} s, one request at a time, modes {modes}")
    header = ("workers", "calls", "wall s", "ideal s", "wall/ideal", "overhead s", "oracle s")
    print("  ".join(f"{h:>10}" for h in header))
    with ScriptedServer(models=["fake"], default=answer) as server:
        for count in workers:
            before = len(server.requests)
            wall, report = measure(server.url, data, count, modes)
            calls = len(server.requests) - before
            usage = report["usage"]
            assert isinstance(usage, dict)
            assert usage["calls"] == calls, (usage, calls)
            # The same run with the oracle: the fixed cost of pytest, xdist and scoring alone.
            oracle, _ = measure(None, data, count, modes)
            ideal = calls * latency / max(count, 1)
            row = (count, calls, wall, ideal, wall / ideal, wall - ideal, oracle)
            print("  ".join(f"{v:>10.2f}" if isinstance(v, float) else f"{v:>10}" for v in row))


def main() -> None:
    """Run the parts asked for and print their tables."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", metavar="PATH", help="the GTA release (default: found)")
    parser.add_argument("--sample", action="store_true", help="the bundled sample instead")
    parser.add_argument("--parts", default="collect,runs", help="collect, runs or both")
    parser.add_argument("--repeat", type=int, default=3, help="collection runs per median")
    parser.add_argument("--latency", type=float, default=0.2, help="model latency in seconds")
    parser.add_argument("--workers", default="0,2", help="xdist worker counts to compare")
    parser.add_argument("--modes", default="step,e2e")
    args = parser.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not parts or any(p not in PARTS for p in parts):
        parser.error(f"--parts: {args.parts!r}: give collect, runs or collect,runs")
    if args.sample and args.data is not None:
        parser.error("--data and --sample: give one")
    data = "sample" if args.sample else str(release_path(args.data))
    print(f"data: {data}")
    if "collect" in parts:
        collect(data, max(1, args.repeat))
    if "runs" in parts:
        runs(data, args.latency, [int(w) for w in args.workers.split(",")], args.modes)


if __name__ == "__main__":
    main()
