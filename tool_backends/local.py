"""``local``: the GTA tools that run on this machine's CPU, with no server and no key.

OCR (RapidOCR), Calculator, Solver and Plot (model-written code, evaluated as the official tools
evaluate it, in a sandboxed subprocess), DrawBox and AddText (Pillow, drawn as the official
tools draw). Each tool is a function
``(invocation, context) -> ToolResult`` in its own module, imported on first use, so a run that
never calls Plot never imports matplotlib. Tools whose module or dependency is missing are not
offered, so routing falls through to the next backend in ``--gta-tools`` (or skips the case,
naming the tool).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path

from pytest_gta.tools import (
    BaseToolBackend,
    ToolBackendContext,
    ToolContext,
    ToolInvocation,
    ToolSpec,
)
from pytest_gta.types import ToolResult
from pytest_gta.vocabulary import SandboxMode
from tool_backends.sandbox import configured_sandbox, describe_backend

ToolFunction = Callable[[ToolInvocation, ToolContext], ToolResult]

#: Tool name -> ("module", "function", modules it needs installed).
LOCAL_TOOLS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "OCR": ("tool_backends.ocr", "ocr", ("rapidocr_onnxruntime", "PIL")),
    "Calculator": ("tool_backends.code_tools", "calculator", ()),
    "Solver": ("tool_backends.code_tools", "solver", ("sympy",)),
    "Plot": ("tool_backends.code_tools", "plot", ("matplotlib",)),
    "DrawBox": ("tool_backends.image_tools", "draw_box", ("PIL",)),
    "AddText": ("tool_backends.image_tools", "add_text", ("PIL",)),
}


def _available(module: str, needs: tuple[str, ...]) -> bool:
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False
    return found and all(importlib.util.find_spec(n) is not None for n in needs)


#: The tools that run model-written code in :mod:`tool_backends.sandbox`.
CODE_TOOLS = frozenset({"Calculator", "Solver", "Plot"})


class LocalBackend(BaseToolBackend):
    """Serves the CPU tools whose implementation and dependencies are installed."""

    name = "local"

    def __init__(self, sandbox: SandboxMode = "auto", hidden: tuple[Path, ...] = ()) -> None:
        self.tools = {
            tool: (module, function)
            for tool, (module, function, needs) in LOCAL_TOOLS.items()
            if _available(module, needs)
        }
        self._functions: dict[str, ToolFunction] = {}
        self.isolation = None
        if CODE_TOOLS & set(self.tools):
            self.isolation = configured_sandbox(sandbox, hidden)

    def describe(self) -> dict[str, object]:
        """For the report: the tools served here and how model-written code is isolated."""
        return describe_backend(self.tools, self.isolation)

    def offers(self, tool: str) -> bool:
        """Whether ``tool`` runs locally here."""
        return tool in self.tools

    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        """Run the tool's function (imported on first use)."""
        function = self._functions.get(invocation.name)
        if function is None:
            module, attribute = self.tools[invocation.name]
            function = getattr(importlib.import_module(module), attribute)
            self._functions[invocation.name] = function
        return function(invocation, context)


def make_local(spec: ToolSpec, context: ToolBackendContext) -> LocalBackend:
    """Entry point for ``--gta-tools=local`` (``--gta-sandbox`` is ``context.sandbox``)."""
    return LocalBackend(context.sandbox, (context.dataset.root,))
