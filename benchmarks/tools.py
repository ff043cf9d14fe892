"""Per-call latency of the local tools (not a test).

Each row of ``BENCHMARKS`` is a tool name and the arguments of one typical call; the script calls
the ``local`` backend's function for it a few times after a warm-up and prints the median and
worst latency. The first call of a code tool also starts the sandbox worker, shown separately.

    python benchmarks/tools.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gta.tools import ToolContext, ToolInvocation  # noqa: E402
from pytest_gta.types import ToolResult  # noqa: E402
from pytest_gta.validation import load_dataset  # noqa: E402
from tool_backends import code_tools, image_tools, ocr, sandbox  # noqa: E402

ToolFunction = Callable[[ToolInvocation, ToolContext], ToolResult]

SOLVER = """
from sympy import symbols, solve
def solution():
    x = symbols('x')
    return solve(x**2 - 5*x + 6, x)
"""
PLOT = """
import matplotlib.pyplot as plt
def solution():
    figure = plt.figure()
    plt.plot([1, 2, 3], [1, 4, 9])
    return figure
"""

#: (tool, function, arguments): add a row to benchmark another local tool.
BENCHMARKS: list[tuple[str, ToolFunction, dict[str, Any]]] = [
    ("Calculator", code_tools.calculator, {"expression": "sqrt(16) + 2*3"}),
    ("Solver", code_tools.solver, {"command": SOLVER}),
    ("Plot", code_tools.plot, {"command": PLOT}),
    ("OCR", ocr.ocr, {"image": "image/image_0.jpg"}),
    (
        "DrawBox",
        image_tools.draw_box,
        {"image": "image/image_0.jpg", "bbox": "(60, 500, 380, 530)"},
    ),
    (
        "AddText",
        image_tools.add_text,
        {"image": "image/image_0.jpg", "text": "paid", "position": "mm"},
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    options = parser.parse_args()
    dataset = load_dataset(ROOT / "fixtures" / "gta_sample")
    query = next(iter(dataset.queries.values()))
    with tempfile.TemporaryDirectory() as tmp:
        context = ToolContext(dataset, query, Path(tmp))
        print(f"sandbox: {sandbox.sandbox_kind()}")
        for tool, function, arguments in BENCHMARKS:
            meta = dataset.toolmeta[tool]
            invocation = ToolInvocation(meta, arguments, arguments)
            start = time.perf_counter()
            function(invocation, context)
            first = time.perf_counter() - start
            times = []
            for _ in range(options.repeat):
                start = time.perf_counter()
                function(invocation, context)
                times.append(time.perf_counter() - start)
            print(
                f"{tool:<12} first {first * 1000:8.1f} ms   median "
                f"{statistics.median(times) * 1000:7.1f} ms   max {max(times) * 1000:7.1f} ms"
                f"   ({options.repeat} calls)"
            )


if __name__ == "__main__":
    main()
