"""Per-call cost of the fault layer (``--gta-tool-faults``) beside the runner without it.

Every producer's tool call passes :meth:`pytest_gta.tools.ToolSet.runner`; with a fault spec the
call is drawn a fault first (a hash of seed, query, epoch, call index and tool) and logged when
it meets one. This script times the same calls through three runners, interleaved call by call
in one process so that machine noise hits all of them alike:

* ``no faults``: the runner as every run has it (the ideal: what the layer must add to);
* ``rate 0.0001``: the layer in place, drawing for every call, faulting almost none;
* ``rate 0.5``: half the calls faulted (``error`` and ``empty``: no backend call, the log kept).

The calls are every recorded call of the bundled sample, answered by the ``replay`` backend.
Overhead is per call: the layered runner's time minus the plain one's, same call, same round;
the target is under 1 ms (issue 41). The table gives the median and p90 in microseconds,
and the ratio.

    python benchmarks/tool_faults.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_gta.dataset import Dataset, Query, bundled_sample_path
from pytest_gta.errors import GtaToolError
from pytest_gta.faults import parse_fault_spec
from pytest_gta.tools import (
    ToolBackendContext,
    ToolContext,
    ToolSet,
    adopt_backend,
    parse_tool_specs,
)
from pytest_gta.validation import load_dataset
from tool_backends.replay import make_replay

SPECS = {"rate 0.0001": "error=0.0001,seed=1", "rate 0.5": "error=0.25,empty=0.25,seed=1"}


def _calls(dataset: Dataset) -> list[tuple[Query, Any, dict[str, Any]]]:
    """Every reference call of the sample: (query, meta, absolute arguments)."""
    out = []
    for query in dataset:
        metas = {m.name: m for m in dataset.tool_metas(query)}
        for call in query.calls:
            if call.name in metas and isinstance(call.arguments, dict):
                arguments = {k: dataset.absolutize(v) for k, v in call.arguments.items()}
                out.append((query, metas[call.name], arguments))
    return out


def _time(run: Any, meta: Any, arguments: dict[str, Any]) -> float:
    start = time.perf_counter()
    try:
        run(meta, arguments, arguments)
    except GtaToolError:
        pass
    return time.perf_counter() - start


def main() -> None:
    """Time the calls and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    dataset = load_dataset(bundled_sample_path())
    with tempfile.TemporaryDirectory() as tmp:
        backend = adopt_backend(
            make_replay(
                parse_tool_specs("replay")[0],
                ToolBackendContext(dataset=dataset, invocation_dir=Path(tmp)),
            )
        )
        sets = {"no faults": ToolSet([backend])}
        sets.update(
            {name: ToolSet([backend], faults=parse_fault_spec(s)) for name, s in SPECS.items()}
        )
        calls = _calls(dataset)
        seconds: dict[str, list[float]] = {name: [] for name in sets}
        for _ in range(args.rounds):
            for query, meta, arguments in calls:
                for name, toolset in sets.items():
                    # A runner per case, as a run makes one: its own call counter and log.
                    context = ToolContext(dataset, query, Path(tmp))
                    run = toolset.runner({meta.name: backend}, context)
                    seconds[name].append(_time(run, meta, arguments))
    base = seconds["no faults"]
    n = len(base)
    print(f"{len(calls)} calls of the bundled sample x {args.rounds} rounds = {n} per runner")
    print(f"{'runner':<14}{'median us':>11}{'p90 us':>9}{'overhead med us':>17}{'ratio':>8}")
    for name, times in seconds.items():
        over = [t - b for t, b in zip(times, base, strict=True)]
        median = statistics.median(times) * 1e6
        p90 = statistics.quantiles(times, n=10)[-1] * 1e6
        ratio = statistics.median(times) / statistics.median(base)
        print(
            f"{name:<14}{median:>11.1f}{p90:>9.1f}{statistics.median(over) * 1e6:>17.1f}"
            f"{ratio:>8.2f}"
        )


if __name__ == "__main__":
    main()
