"""Wall time of an agent under test at ``--gta-concurrency 16`` against model latency (issue 25).

The same method as ``benchmarks/concurrency.py``, for the agent path: the real GTA release
(``--data PATH``; by default ``$PYTEST_GTA_RELEASE``, else ``../shared/gta_release`` beside the
checkout), its 229 queries, end to end with ``--gta-tools=replay``, run by one of the examples
(``examples/``) through ``--gta-agent`` or ``--gta-agent-command``: each case's tools over the
MCP gateway, its model requests through the recording proxy to a fake model on 127.0.0.1
(``tests/helpers/agent_model_server.py``) that answers every request after a fixed latency like a
perfect model speaking function calls: the reference call of the turn, then the reference
answer (past a chain that ends on a call, the ``oracle``'s closing answer).

A perfect agent makes one model request per turn, as the project's own loop does: one per
reference assistant message plus one closing answer per chain that ends on a call (786 on the
release). The ideal wall time is ``calls x latency / slots`` with ``slots`` the episodes in
flight (``--gta-concurrency``, one request per episode at a time), floored by the longest
chain (``benchmarks.concurrency.ideal_seconds``). Wall time includes start-up (pytest, the
similarity model) and, for a command agent, a Python process per case.

The run is also checked: the fake model's request count must be the expected one, no case may
error, and with ``--compare`` (the default) the end-to-end metrics and per-case outcomes must
equal those of an ``--gta-model=oracle`` run on the same data (timed too, as the project's own
loop with no model latency). The script exits 1 when a check fails.

    python benchmarks/agent_concurrency.py [--agent cli|openai-agents] [--latency 1.0]
        [--concurrency 16] [--data PATH] [--queries N] [--no-compare]
        [--sim-model all-mpnet-base-v2]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.concurrency import (  # noqa: E402
    PYTEST,
    Config,
    case_results,
    expected_calls,
    ideal_seconds,
    timed,
)
from benchmarks.release import RELEASE_ENV, release_path  # noqa: E402
from pytest_gta.validation import load_dataset  # noqa: E402
from tests.helpers.agent_model_server import AgentModelServer  # noqa: E402

SERVED = "fake-gta-fc"
EXAMPLES = ROOT / "examples"
AGENTS = ("cli", "openai-agents")


def agent_option(agent: str) -> str:
    """The option that runs the example ``agent``."""
    if agent == "openai-agents":
        return f"--gta-agent={EXAMPLES / 'openai_agents_agent.py'}:agent"
    words = [sys.executable, str(EXAMPLES / "cli_agent.py")]
    words += ["{mcp_url}", "{query_file}", "{model_url}", "{model}"]
    return "--gta-agent-command=" + shlex.join(words)


@dataclass
class Run:
    """One timed pytest run."""

    label: str
    returncode: int
    wall: float
    cpu_s: float
    controller_mb: float | None
    others_mb: float | None
    report: dict[str, Any] = field(repr=False)
    output: str = field(repr=False, default="")


def run_pytest(label: str, args: list[str], workdir: Path) -> Run:
    """``python -m pytest ARGS`` as a subprocess, timed, with its CPU (all processes) and memory."""
    report_path = workdir / f"{label}.json"
    log_path = workdir / f"{label}.log"
    command = [*PYTEST, "-n", "0", f"--gta-report={report_path}", *args]
    wall, returncode, usage, rss = timed(command, workdir, log_path)
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    return Run(
        label=label,
        returncode=returncode,
        wall=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        controller_mb=rss.controller_mb(),
        others_mb=rss.others_mb(),
        report=report,
        output=log_path.read_text(errors="replace"),
    )


def problems(run: Run, calls: int, expected: int) -> list[str]:
    """Why the agent run cannot be trusted."""
    if run.returncode not in (0, 1) or not run.report:
        tail = "\n".join(run.output.splitlines()[-15:])
        return [f"{run.label}: pytest exited {run.returncode} without a report:\n{tail}"]
    out = []
    outcomes = run.report.get("outcomes") or {}
    if outcomes.get("error"):
        out.append(f"{run.label}: {outcomes['error']} case(s) errored (see the report's cases)")
    if calls != expected:
        out.append(f"{run.label}: the fake model answered {calls} requests, expected {expected}")
    counted = (run.report.get("usage") or {}).get("calls")
    if counted != calls:
        out.append(f"{run.label}: the report counts {counted} model calls, the fake model {calls}")
    return out


def outcomes(report: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Per case: outcome and score (``case_results`` minus the replies, which differ)."""
    return {case_id: result[:2] for case_id, result in case_results(report).items()}


def differences(agent: Run, oracle: Run) -> list[str]:
    """Where the agent's run differs from the oracle's: metrics, then cases."""
    out = []
    if agent.report.get("metrics") != oracle.report.get("metrics"):
        out.append(
            f"metrics differ: agent {agent.report.get('metrics')} oracle "
            f"{oracle.report.get('metrics')}"
        )
    mine, theirs = outcomes(agent.report), outcomes(oracle.report)
    for case_id in sorted(set(mine) | set(theirs)):
        if mine.get(case_id) != theirs.get(case_id):
            out.append(f"case {case_id}: agent {mine.get(case_id)} oracle {theirs.get(case_id)}")
    return out


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agent", choices=AGENTS, default="cli", help="the example (cli)")
    parser.add_argument("--latency", type=float, default=1.0, help="model latency, seconds")
    parser.add_argument("--concurrency", type=int, default=16, help="--gta-concurrency (16)")
    parser.add_argument(
        "--data", metavar="PATH", help=f"the GTA release (default: ${RELEASE_ENV}, else ../shared)"
    )
    parser.add_argument("--queries", type=int, help="the first N queries (default: all)")
    parser.add_argument(
        "--no-compare", action="store_true", help="skip the oracle run and the comparison"
    )
    parser.add_argument(
        "--sim-model",
        default="all-mpnet-base-v2",
        help="--gta-sim-model of the runs (default: the official all-mpnet-base-v2)",
    )
    args = parser.parse_args()
    if args.latency < 0 or args.concurrency < 1 or (args.queries is not None and args.queries < 1):
        parser.error("give a latency >= 0, a concurrency >= 1 and a positive number of queries")
    data = release_path(args.data)
    dataset = load_dataset(data)
    queries = min(args.queries or len(dataset), len(dataset))
    config = Config(0, args.concurrency)
    expected = expected_calls(dataset, queries, "e2e")
    ideal = ideal_seconds(dataset, queries, "e2e", config, args.latency)
    common = [
        f"--gta-data={data}",
        "--gta-mode=e2e",
        "--gta-tools=replay",
        f"--gta-limit={queries}",
        f"--gta-sim-model={args.sim_model}",
    ]
    print(
        f"agent {args.agent}; fake model latency {args.latency:g} s; {queries} queries of {data}; "
        f"--gta-concurrency {args.concurrency}; similarity model {args.sim_model}; "
        f"{os.cpu_count()} CPUs; model calls expected: {expected}",
        flush=True,
    )
    broken: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gta-agent-concurrency-") as tmp:
        with AgentModelServer(dataset, args.latency, SERVED) as server:
            agent = run_pytest(
                "agent",
                [
                    f"--gta-model=openai/{SERVED}",
                    f"--gta-base-url={server.url}",
                    f"--gta-served-model={SERVED}",
                    "--gta-cache=off",
                    f"--gta-concurrency={args.concurrency}",
                    f"--gta-max-concurrency={args.concurrency}",
                    agent_option(args.agent),
                    *common,
                ],
                Path(tmp),
            )
            calls, peak, unknown = server.model.calls, server.model.peak, server.model.unknown
        print(f"  agent: {calls} model calls in {agent.wall:.1f} s", flush=True)
        broken += problems(agent, calls, expected)
        if unknown:
            broken.append(f"the fake model did not recognise {unknown} request(s)")
        oracle = None
        if not args.no_compare:
            oracle = run_pytest("oracle", ["--gta-model=oracle", *common], Path(tmp))
            print(f"  oracle: {oracle.wall:.1f} s", flush=True)
            if oracle.returncode not in (0, 1) or not oracle.report:
                broken.append(f"the oracle run exited {oracle.returncode} without a report")
            else:
                broken += differences(agent, oracle)
    per_call = agent.cpu_s * 1000 / calls if calls else float("nan")
    print()
    print(
        "| run | model calls | peak in flight | wall s | ideal s | wall/ideal "
        "| CPU ms/call | peak RSS MB (controller / largest other) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {args.agent} agent, `--gta-concurrency {args.concurrency}` | {calls} | {peak} "
        f"| {agent.wall:.1f} | {ideal:.1f} | {agent.wall / ideal:.2f} | {per_call:.0f} "
        f"| {_mb(agent.controller_mb)} / {_mb(agent.others_mb)} |"
    )
    if oracle is not None:
        print(
            f"| `--gta-model=oracle` (project's loop, no latency) | - | - | {oracle.wall:.1f} | - "
            f"| - | - | {_mb(oracle.controller_mb)} / {_mb(oracle.others_mb)} |"
        )
    print()
    if oracle is not None and not broken:
        print(f"metrics and per-case outcomes equal the oracle's ({len(outcomes(oracle.report))})")
    for problem in broken[:30]:
        print(f"PROBLEM: {problem}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
