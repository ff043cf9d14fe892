"""Calculator, Solver and Plot: the GTA tools that evaluate what the model wrote.

They answer like AgentLego's tools so that scores match the official harness: the Calculator
returns ``str()`` of the expression's value (``"2+3*4"`` gives ``"14"``, ``"sqrt(16)"`` gives
``"4.0"``), the Solver runs a SymPy program and returns ``str(solution())``, and Plot runs a
Matplotlib program whose ``solution()`` returns a Figure, saved as a PNG. Unlike AgentLego, all
three run in :mod:`tool_backends.sandbox` (never in the pytest process) and the Calculator uses
``simpleeval`` instead of ``eval``, since the expression is untrusted model output.
"""

from __future__ import annotations

import uuid

from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import ResultItem, ToolResult
from tool_backends.sandbox import worker

#: Wall-clock limits per call, in seconds; an expression needs far less time than a program.
CALCULATOR_TIMEOUT_S = 5.0
CODE_TIMEOUT_S = 10.0


def _argument(invocation: ToolInvocation, name: str) -> str:
    """The text argument ``name``, or a tool error the model can act on."""
    value = invocation.arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        raise GtaToolError(f"{invocation.name} needs the text argument {name!r}")
    return value


def calculator(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """Evaluate one Python expression with the ``math`` functions, as AgentLego's Calculator."""
    expression = _argument(invocation, "expression")
    result = worker().run("calculator", expression, timeout=CALCULATOR_TIMEOUT_S)
    return ToolResult.text(result.text or "")


def solver(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """Run a SymPy program that defines ``solution()`` and return ``str(solution())``."""
    command = _argument(invocation, "command")
    result = worker().run("solver", command, timeout=CODE_TIMEOUT_S)
    return ToolResult.text(result.text or "")


def plot(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """Run a Matplotlib program whose ``solution()`` returns a Figure; return it as a PNG."""
    command = _argument(invocation, "command")
    result = worker().run("plot", command, timeout=CODE_TIMEOUT_S)
    if result.png is None:
        raise GtaToolError("Plot produced no image")
    context.output_dir.mkdir(parents=True, exist_ok=True)
    path = (context.output_dir / f"plot-{uuid.uuid4().hex[:12]}.png").resolve()
    path.write_bytes(result.png)
    return ToolResult((ResultItem("image", str(path)),))
