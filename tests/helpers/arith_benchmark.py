"""A third benchmark, written only against pytest-gta's public seam (issue 40): arithmetic.

Registered under the ``pytest_gta.benchmarks`` entry-point group by the tests (a dist-info
directory on the path), as a third party's package registers it; nothing of it is in
``pytest_gta/``. ``--gta-model`` picks a deterministic solver: ``exact`` answers right,
``sloppy`` is off by one on odd ids, ``crash`` raises on id 3 (an infrastructure error).
"""

from __future__ import annotations

import json
from typing import Any

from pytest_gta.benchmarks.scored import Scored, ScoredBenchmark
from pytest_gta.errors import GtaInfrastructureError
from pytest_gta.run.benchmark import BenchmarkContext

DATA_FILE = "arith.json"


class Arith(ScoredBenchmark):
    """Sums and products, scored exactly and within one."""

    name = "arith"

    def cases(self) -> list[tuple[str, Any]]:
        assert self.data is not None
        loaded = json.loads((self.data / DATA_FILE).read_text(encoding="utf-8"))
        return [(str(case["id"]), case) for case in loaded["cases"]]

    def marks(self, case_id: str, payload: Any) -> tuple[str, ...]:
        return (f"gta_arith_{payload['op']}",)

    def run(self, payload: Any, model: str) -> Scored:
        a, b, op = payload["a"], payload["b"], payload["op"]
        truth = a + b if op == "add" else a * b
        if model == "crash" and payload["id"] == "3":
            raise GtaInfrastructureError("the solver's endpoint is down")
        answer = truth + (int(payload["id"]) % 2 if model == "sloppy" else 0)
        return Scored(
            scores={"exact": float(answer == truth), "close": float(abs(answer - truth) <= 1)},
            passed=answer == truth,
            message=f"{a} {op} {b} = {answer}, not {truth}" if answer != truth else "",
            detail={"answer": answer, "truth": truth},
        )


def make(context: BenchmarkContext) -> Arith | None:
    """The entry point: the data directory holds ``arith.json``."""
    if context.data is None or not (context.data / DATA_FILE).is_file():
        return None
    return Arith(context)
