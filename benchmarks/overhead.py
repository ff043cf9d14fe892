"""Harness overhead against model time (SPEC section 7).

Serves a fake OpenAI-compatible model on loopback that answers every chat completion after a
fixed latency, runs the bundled sample through ``pytest --gta-model=openai/...`` with and without
xdist, and prints the wall time next to the ideal: ``calls x latency / concurrency``. The ratio
is what the harness costs on top of the model (collection, prompts, parsing, scoring, reports,
pytest and xdist start-up), measured side by side in one run.

    python benchmarks/overhead.py [--latency 0.2] [--workers 0,2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.scripted_server import ScriptedServer, Step, chat_completion  # noqa: E402


def measure(url: str | None, workers: int, modes: str) -> tuple[float, dict[str, object]]:
    """Wall time of one pytest run and its JSON report (``url=None``: the oracle, no model)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            *(["--gta-model=oracle"] if url is None else ["--gta-model=openai/fake"]),
            *([] if url is None else [f"--gta-base-url={url}"]),
            f"--gta-mode={modes}",
            "--gta-cache=off",
            "--gta-sim-model=all-MiniLM-L6-v2",
            f"--gta-report={report}",
            "-n",
            str(workers),
        ]
        start = time.perf_counter()
        subprocess.run(command, cwd=tmp, capture_output=True, check=False)
        wall = time.perf_counter() - start
        return wall, json.loads(report.read_text())


def main() -> None:
    """Print wall time, ideal time and their ratio per worker count."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency", type=float, default=0.2, help="model latency in seconds")
    parser.add_argument("--workers", default="0,2", help="xdist worker counts to compare")
    parser.add_argument("--modes", default="step,e2e")
    args = parser.parse_args()
    answer = Step(chat_completion("Thought: done\nFinal Answer: 4"), delay=args.latency)
    print(f"fake model latency {args.latency:.3f} s, bundled sample, modes {args.modes}")
    header = ("workers", "calls", "wall s", "ideal s", "wall/ideal", "overhead s", "oracle s")
    print("  ".join(f"{h:>10}" for h in header))
    with ScriptedServer(models=["fake"], default=answer) as server:
        for workers in (int(w) for w in args.workers.split(",")):
            before = len(server.requests)
            wall, report = measure(server.url, workers, args.modes)
            calls = len(server.requests) - before
            usage = report["usage"]
            assert isinstance(usage, dict)
            assert usage["calls"] == calls, (usage, calls)
            # The same run with the oracle: the fixed cost of pytest, xdist and scoring alone.
            oracle, _ = measure(None, workers, args.modes)
            ideal = calls * args.latency / max(workers, 1)
            row = (workers, calls, wall, ideal, wall / ideal, wall - ideal, oracle)
            print("  ".join(f"{v:>10.2f}" if isinstance(v, float) else f"{v:>10}" for v in row))


if __name__ == "__main__":
    main()
