"""Calculator, Solver and Plot: the GTA tools that evaluate what the model wrote.

They evaluate exactly what the official tools (the GTA fork of AgentLego,
``tools/calculator/python_calculator.py`` and ``tools/python_interpreter/``) evaluate, so that a
model's call means the same here: the Calculator is Python's ``eval`` over the ``math`` names,
``max``, ``min``, ``round`` and ``sum`` with no other builtins, and returns ``str()`` of the
value (``"2+3*4"`` gives ``"14"``, ``"29,000 + 32,900"`` gives ``"(29, 32, 900)"``); the Solver
and Plot take the program out of its Markdown fence, run it after their header
(``from sympy import symbols, Eq, solve`` or ``import matplotlib.pyplot as plt``) and evaluate
``solution()``, the Solver answering its ``str()`` and Plot its Figure as a PNG. A failure is
the official text, ``repr`` of the exception (``IndentationError('unexpected indent', ...)``).

What differs is where they run, which is what makes real ``eval`` and ``exec`` of untrusted
model output safe: in :mod:`tool_backends.sandbox` (a fresh child of a sandboxed worker per call,
never the pytest process), with a memory limit the official tools lack, and with their time
limits (2 s for an expression, 20 s for a program, or less when the case's deadline comes
first: :meth:`~pytest_gta.tools.ToolContext.time_left`) enforced by killing the call.
"""

from __future__ import annotations

import uuid

from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import ResultItem, ToolResult
from tool_backends.paths import required_text
from tool_backends.sandbox import default_sandbox

#: Wall-clock limits per call, in seconds: the official ones (``func_timeout(2, ...)`` in the
#: Calculator, ``timeout=20`` in Solver and Plot).
CALCULATOR_TIMEOUT_S = 2.0
CODE_TIMEOUT_S = 20.0


def calculator(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """Evaluate one Python expression over the ``math`` names, as the official Calculator."""
    expression = required_text(invocation, "expression")
    result = default_sandbox().run(
        "calculator", expression, timeout=context.time_left(CALCULATOR_TIMEOUT_S)
    )
    return ToolResult.text(result.text or "")


def solver(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """Run a (Markdown) SymPy program that defines ``solution()``; ``str(solution())``."""
    command = required_text(invocation, "command")
    result = default_sandbox().run("solver", command, timeout=context.time_left(CODE_TIMEOUT_S))
    return ToolResult.text(result.text or "")


def plot(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """Run a (Markdown) Matplotlib program whose ``solution()`` returns a Figure; a PNG of it."""
    command = required_text(invocation, "command")
    result = default_sandbox().run("plot", command, timeout=context.time_left(CODE_TIMEOUT_S))
    if result.png is None:
        raise GtaToolError("Plot produced no image")
    context.output_dir.mkdir(parents=True, exist_ok=True)
    path = (context.output_dir / f"plot-{uuid.uuid4().hex[:12]}.png").resolve()
    path.write_bytes(result.png)
    return ToolResult((ResultItem("image", str(path)),))
