"""ReadCSV, ReadDOCX, ReadPDF, ReadPPTX, ReadXLSX and Prover: parsing what a model chose.

Each resolves the file (one the case may name, :mod:`pytest_gta.reach`: never the benchmark's
own ``end.json`` or ``dataset.json``; at most :data:`MAX_DOCUMENT_BYTES`), then runs
:mod:`tool_backends.workflow_parsers` in the code sandbox with the file's bytes: a fresh child
of a sandboxed worker per call, with a time limit (:data:`READER_TIMEOUT_S`, or the time left
before the case's deadline), a memory limit and no network, exactly as the Solver runs model
code. Whatever the parser raises on a hostile file (a truncated zip, an XML bomb, a broken PDF
cross-reference table) comes back as a tool error the model sees, never a traceback of the run.
"""

from __future__ import annotations

import base64

from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import ToolResult
from tool_backends import workflow_parsers
from tool_backends.paths import argument, required_text, resolve_file
from tool_backends.sandbox import default_sandbox
from tool_backends.workflow_io import checked_size, sandbox_program

#: The largest document a reader takes (base64 in the sandbox request: 4/3 of it).
MAX_DOCUMENT_BYTES = 10 << 20
#: Seconds a reader call may run in the sandbox.
READER_TIMEOUT_S = 20.0
#: Z3's own limit, under :data:`READER_TIMEOUT_S`, so a hard formula is "unknown", not killed.
PROVER_TIMEOUT_MS = 10_000


def run_parser(call: str, timeout: float = READER_TIMEOUT_S) -> str:
    """Run ``call`` (an expression over the parsers' functions) in the sandbox; its text.

    ``timeout``: :data:`READER_TIMEOUT_S`, or the time left before the case's deadline.

    Raises:
        GtaToolError: the parser raised, or hit a limit.
        GtaInfrastructureError: the sandbox did not start.
    """
    program = sandbox_program(workflow_parsers.__file__, call)
    result = default_sandbox().run("reader", program, timeout=timeout)
    return result.text or ""


def _read(invocation: ToolInvocation, context: ToolContext, name: str, function: str) -> ToolResult:
    path = resolve_file(argument(invocation, name), context, "file")
    checked_size(path, MAX_DOCUMENT_BYTES)
    encoded = base64.b64encode(path.read_bytes()).decode("ascii")
    try:
        text = run_parser(f"{function}(decode({encoded!r}))", context.time_left(READER_TIMEOUT_S))
        return ToolResult.text(text)
    except GtaToolError as error:
        raise GtaToolError(f"{invocation.name} cannot read {path.name}: {error}") from None


def read_csv(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """ReadCSV(csv_file): the CSV's content as CSV text."""
    return _read(invocation, context, "csv_file", "read_csv")


def read_docx(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """ReadDOCX(file): the document's paragraphs, one per line."""
    return _read(invocation, context, "file", "read_docx")


def read_pdf(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """ReadPDF(file): each page's text."""
    return _read(invocation, context, "file", "read_pdf")


def read_pptx(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """ReadPPTX(file): the text of every shape with text."""
    return _read(invocation, context, "file", "read_pptx")


def read_xlsx(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """ReadXLSX(file): the first sheet as CSV text."""
    return _read(invocation, context, "file", "read_xlsx")


def prover(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """Prover(theorem): Z3 on the SMT-LIB2 text; the official answer (proved or counterexample)."""
    theorem = required_text(invocation, "theorem")
    call = f"prove({theorem!r}, {PROVER_TIMEOUT_MS})"
    return ToolResult.text(run_parser(call, context.time_left(READER_TIMEOUT_S)))
