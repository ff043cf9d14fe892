"""Per-call overhead of GTA's tools over MCP against calling the backend directly (issue 25).

An agent under test calls tools through :class:`pytest_gta.mcp.gateway.McpGateway`: a real
``mcp.Client`` over streamable HTTP on 127.0.0.1, the case's secret path, the SDK's server,
:class:`pytest_gta.mcp.calls.CaseTools` (validation as an end-to-end turn, the log) and then the
backend. This script times the same calls three ways, interleaved call by call in one process so
that machine noise hits all of them alike:

* ``backend``: ``backend.call(invocation, context)`` alone, what the tool itself costs;
* ``CaseTools.call``: validation, routing and logging added (what an in-process agent pays);
* ``MCP`` (``auto``: the SDK's current protocol, and ``legacy``: the handshake-era protocol
  that MCP 1.x clients such as most agent frameworks speak): the full path over loopback.

The calls are every recorded call of the bundled sample that the ``replay`` backend answers
(OCR, TextToBbox, CountGivenObject... with their recorded arguments, file paths made absolute)
and a ``Calculator`` on the ``local`` backend (a sandboxed subprocess per call: a slow tool,
where the overhead is a smaller share). Overhead is per call: MCP minus backend, same call,
same round; the table gives the median and p90 of each, in milliseconds.

    python benchmarks/mcp_overhead.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mcp

from pytest_gta.dataset import Dataset, bundled_sample_path
from pytest_gta.mcp.calls import CaseTools
from pytest_gta.mcp.gateway import McpGateway
from pytest_gta.tools import (
    ToolBackendContext,
    ToolContext,
    ToolInvocation,
    ToolSet,
    ToolSpec,
    make_backend,
)
from pytest_gta.validation import load_dataset

FILE_TYPES = ("image", "audio", "file")


def absolute(dataset: Dataset, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Recorded arguments with dataset-relative file paths made absolute (as agents pass them)."""
    meta = dataset.toolmeta[tool]
    out = {}
    for key, value in arguments.items():
        param = meta.input(key)
        if param is not None and param.type in FILE_TYPES and not os.path.isabs(str(value)):
            value = str(dataset.root / str(value))
        out[key] = value
    return out


def replay_calls(
    dataset: Dataset, tools: ToolSet, out: Path
) -> list[tuple[str, str, dict[str, Any]]]:
    """(query id, tool, arguments) of every sample call the replay backend answers."""
    chosen = []
    for query in dataset.queries.values():
        case = CaseTools(dataset, query, tools, out, max_calls=10**9)
        for call in query.calls:
            if not isinstance(call.arguments, dict):
                continue
            arguments = absolute(dataset, call.name, call.arguments)
            if case.call(call.name, arguments).ok:
                chosen.append((query.qid, call.name, arguments))
    return chosen


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(function: Callable[[], Any]) -> float:
    start = time.perf_counter()
    function()
    return (time.perf_counter() - start) * 1000


async def measure(
    label: str,
    dataset: Dataset,
    backend_name: str,
    calls: list[tuple[str, str, dict[str, Any]]],
    rounds: int,
    out: Path,
) -> dict[str, list[float]]:
    """Milliseconds per call of each path, and the per-call overhead of MCP over the backend."""
    tools = ToolSet(
        [make_backend(ToolSpec(backend_name, backend_name), ToolBackendContext(dataset, out))]
    )
    samples: dict[str, list[float]] = {
        k: [] for k in ("backend", "calls", "mcp-auto", "mcp-legacy", "over-auto", "over-legacy")
    }
    with McpGateway() as gateway:
        endpoints = {}
        for qid in dict.fromkeys(q for q, _, _ in calls):
            case = CaseTools(dataset, dataset.queries[qid], tools, out / qid, max_calls=10**9)
            endpoints[qid] = (case, gateway.open(case))
        async with mcp.Client(endpoints[calls[0][0]][1].url) as probe:
            del probe  # the first connection warms the SDK's imports and the loop
        async with contextlib.AsyncExitStack() as stack:
            clients = {
                (qid, mode): await stack.enter_async_context(mcp.Client(endpoint.url, mode=mode))
                for qid, (_, endpoint) in endpoints.items()
                for mode in ("auto", "legacy")
            }
            for qid, tool, arguments in calls:  # warm up: the sandbox, caches, connections
                endpoints[qid][0].call(tool, arguments)
                for mode in ("auto", "legacy"):
                    await clients[qid, mode].call_tool(tool, arguments)
            for _ in range(rounds):
                for qid, tool, arguments in calls:
                    case, _ = endpoints[qid]
                    meta = dataset.toolmeta[tool]
                    backend = tools.backends[0]
                    context = ToolContext(dataset, dataset.queries[qid], out / qid)
                    invocation = ToolInvocation(meta, arguments, arguments)
                    direct = timed(lambda: backend.call(invocation, context))  # noqa: B023
                    samples["backend"].append(direct)
                    samples["calls"].append(timed(lambda: case.call(tool, arguments)))  # noqa: B023
                    for mode in ("auto", "legacy"):
                        start = time.perf_counter()
                        result = await clients[qid, mode].call_tool(tool, arguments)
                        took = (time.perf_counter() - start) * 1000
                        if result.is_error:
                            raise SystemExit(f"{label}: {tool} failed over MCP: {result.content}")
                        samples[f"mcp-{mode}"].append(took)
                        samples[f"over-{mode}"].append(took - direct)
    return samples


def row(label: str, name: str, values: list[float]) -> str:
    return (
        f"| {label} | {name} | {len(values)} | {statistics.median(values):.2f} | "
        f"{percentile(values, 0.9):.2f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="times each call is repeated")
    args = parser.parse_args()
    dataset = load_dataset(bundled_sample_path())
    with tempfile.TemporaryDirectory(prefix="gta-mcp-bench-") as tmp:
        out = Path(tmp)
        replay = ToolSet(
            [make_backend(ToolSpec("replay", "replay"), ToolBackendContext(dataset, out))]
        )
        workloads = [
            (
                "replay (sample's recorded calls)",
                "replay",
                replay_calls(dataset, replay, out / "probe"),
            ),
            (
                "local Calculator (sandboxed)",
                "local",
                [("0", "Calculator", {"expression": "1.29+3.45+4.50"})],
            ),
        ]
        print(
            f"python {sys.version.split()[0]}, mcp {mcp_version()}, {os.cpu_count()} CPUs, "
            f"{args.rounds} rounds\n"
        )
        print("| calls | path | n | median ms | p90 ms |")
        print("|---|---|---:|---:|---:|")
        worst = 0.0
        for label, backend, calls in workloads:
            rounds = args.rounds if backend == "replay" else max(5, args.rounds // 2)
            samples = asyncio.run(measure(label, dataset, backend, calls, rounds, out / backend))
            names = {
                "backend": "backend alone",
                "calls": "CaseTools.call (validation + log)",
                "mcp-auto": "MCP, streamable HTTP (current protocol)",
                "mcp-legacy": "MCP, streamable HTTP (handshake-era protocol)",
                "over-auto": "**overhead** MCP - backend (current)",
                "over-legacy": "**overhead** MCP - backend (handshake-era)",
            }
            for key, name in names.items():
                print(row(label, name, samples[key]))
            if backend == "replay":
                worst = statistics.median(samples["over-auto"])
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"\nmedian overhead on the replay calls (current protocol): {worst:.2f} ms "
            f"(target: under 5 ms); load average {load:.1f} on {os.cpu_count()} CPUs"
        )
    return 0


def mcp_version() -> str:
    from importlib.metadata import version

    return version("mcp")


if __name__ == "__main__":
    sys.exit(main())
