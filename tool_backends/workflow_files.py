"""The GTA-Workflow file generators: CSV, DOCX, PDF, PPTX, XLSX and HTML.

Each takes what the official tool takes (``agentlego/benchmark.py`` of open-compass/GTA):
``filename`` (without its extension), the content (``data_str``, a JSON list of rows, for CSV
and XLSX; ``content`` with ``{{image_n}}`` placeholders and ``image_paths``, a comma-separated
list, for DOCX and PDF; ``slides_content_str``, a JSON list of ``{"title", "content"}``, for
PPTX; ``html_code`` for HTML) and answers the new file's path. Files land in the run's output
directory only (:func:`tool_backends.workflow_io.plan_output`, checked before anything is
built), and images are embedded only from what the case may name
(:func:`tool_backends.paths.resolve_image`): an image path outside it, or missing, becomes the
official ``[图片文件未找到: PATH]`` line in the document.

Building is the part a model can make arbitrarily expensive (20,000 slides ran 15 minutes in the
pytest process; a 160,000-character word took ReportLab 5 s to wrap), so it never runs here:
this module checks the arguments, reads the images and runs
:mod:`tool_backends.workflow_builders` in the code sandbox (a fresh child of a sandboxed worker
per call) with an input limit (:data:`MAX_INPUT_BYTES`), a time limit
(:data:`GENERATOR_TIMEOUT_S`, or the time left before the case's deadline), the sandbox's memory
limit and an output limit (the sandbox's reply limit); the host writes the bytes it returns.
A call past a limit is a tool error naming the limit, never a hang of the run.

The official tools answer a failure as a string in place of the file (``'An error occurred:
...'``); here it is a tool error with the same text, so that the call is recorded as failed.

Libraries: python-docx, python-pptx and openpyxl (MIT), ReportLab (BSD), imported in the
sandbox by the builder that needs each; the backend offers only the generators whose library is
installed.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import ResultItem, ToolResult
from tool_backends import workflow_builders
from tool_backends.paths import argument, required_text, resolve_image, text_argument
from tool_backends.sandbox import default_sandbox
from tool_backends.workflow_io import checked_size, plan_output, sandbox_program

#: The official message for ``data_str`` that is not JSON (CSV and XLSX).
BAD_ROWS = (
    "Invalid data format: data should be a JSON-formatted string representing a list of lists."
)
#: The official message for ``slides_content_str`` that is not JSON.
BAD_SLIDES = "Invalid format: slides_content_str must be a JSON list of objects."
#: A placeholder for the n-th image of ``image_paths``.
PLACEHOLDER = re.compile(r"(\{\{image_\d+\}\})")
#: Rows and cells a CSV or XLSX may have (a JSON list of a million rows is not a table).
MAX_CELLS = 1_000_000
#: The most a generator is given to build from: its text and the images to embed, as the
#: sandbox gets them (JSON, base64). Past it the call is refused before anything is built.
MAX_INPUT_BYTES = 16 << 20
#: The largest image a generator embeds.
MAX_IMAGE_BYTES = 10 << 20
#: Seconds a generator may build in the sandbox (the readers' limit).
GENERATOR_TIMEOUT_S = 20.0


def _build(
    invocation: ToolInvocation,
    context: ToolContext,
    builder: str,
    spec: dict[str, Any],
    suffix: str,
) -> ToolResult:
    """Build the file in the sandbox with ``builder(spec)``; write it; the official answer.

    Raises:
        GtaToolError: the file name or directory is refused, the input is over
            :data:`MAX_INPUT_BYTES`, the builder failed (the official text) or hit a limit.
    """
    planned = plan_output(invocation, context, required_text(invocation, "filename"), suffix)
    encoded = base64.b64encode(json.dumps(spec).encode("utf-8")).decode("ascii")
    if len(encoded) > MAX_INPUT_BYTES:
        raise GtaToolError(
            f"{invocation.name}: its content and images are {len(encoded)} bytes as the sandbox "
            f"gets them, more than the {MAX_INPUT_BYTES} a file generator builds from"
        )
    program = sandbox_program(workflow_builders.__file__, f"{builder}(load({encoded!r}))")
    timeout = context.time_left(GENERATOR_TIMEOUT_S)
    try:
        result = default_sandbox().run("generator", program, timeout=timeout)
    except GtaToolError as error:
        if str(error).startswith(workflow_builders.FAILED):
            raise  # the official text of a generator that failed
        raise GtaToolError(f"{invocation.name} did not finish: {error}") from None
    if result.data is None:  # pragma: no cover - the sandbox answers a generator with a file
        raise GtaToolError(f"{invocation.name} built no file")
    path = planned.create()
    path.write_bytes(result.data)
    return ToolResult((ResultItem("file", str(path.absolute())),))


def _rows(invocation: ToolInvocation) -> list[Any]:
    raw = required_text(invocation, "data_str")
    try:
        rows = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        raise GtaToolError(BAD_ROWS) from None
    if not isinstance(rows, list):
        raise GtaToolError(
            workflow_builders.failed(
                TypeError(f"expected a list of rows, got {type(rows).__name__}")
            )
        )
    cells = sum(len(row) if isinstance(row, (list, str)) else 1 for row in rows)
    if cells > MAX_CELLS:
        raise GtaToolError(
            workflow_builders.failed(ValueError(f"{cells} cells, more than {MAX_CELLS}"))
        )
    return rows


def csv_file(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """CsvFileGenerator(filename, data_str): a CSV of the JSON rows."""
    return _build(invocation, context, "build_csv", {"rows": _rows(invocation)}, ".csv")


def xlsx_file(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """XlsxFileGenerator(filename, data_str): a one-sheet workbook of the JSON rows."""
    return _build(invocation, context, "build_xlsx", {"rows": _rows(invocation)}, ".xlsx")


def html_file(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """HtmlFileGenerator(filename, html_code): the markup, in an HTML5 skeleton if it has none."""
    spec = {"html": required_text(invocation, "html_code")}
    return _build(invocation, context, "build_html", spec, ".html")


class _Images:
    """The images a document embeds: each path resolved and read once, by index in the spec."""

    def __init__(self, invocation: ToolInvocation, context: ToolContext) -> None:
        raw = text_argument(invocation, "image_paths") or ""
        self.paths = [p.strip() for p in raw.split(",") if p.strip()]
        self.context = context
        self.encoded: list[tuple[str, str]] = []
        self._index: dict[Path, int] = {}

    def piece(self, index: int) -> list[Any]:
        """The piece of placeholder ``index`` (1-based): the image, or the official line.

        Raises:
            GtaToolError: the image is larger than :data:`MAX_IMAGE_BYTES`.
        """
        if not 0 < index <= len(self.paths):
            return ["missing", f"[缺失图片路径: {{{{image_{index}}}}}]"]
        try:
            path = resolve_image(self.paths[index - 1], self.context)
        except GtaToolError:
            return ["missing", f"[图片文件未找到: {self.paths[index - 1]}]"]
        if path not in self._index:
            checked_size(path, MAX_IMAGE_BYTES)
            self._index[path] = len(self.encoded)
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            self.encoded.append((data, path.suffix[:10]))
        return ["image", self._index[path]]

    def pieces(self, content: str) -> list[list[Any]]:
        """The content's text parts and images, in order (placeholders replaced)."""
        out: list[list[Any]] = []
        for part in PLACEHOLDER.split(content):
            found = re.fullmatch(r"\{\{image_(\d+)\}\}", part)
            if found:
                out.append(self.piece(int(found.group(1))))
            elif part.strip():
                out.append(["text", part])
        return out


def _flag(invocation: ToolInvocation, name: str) -> bool:
    value = argument(invocation, name)
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _document(invocation: ToolInvocation, context: ToolContext) -> dict[str, Any]:
    """The spec of a DOCX or PDF: its pieces, its images, whether it is Markdown."""
    images = _Images(invocation, context)
    pieces = images.pieces(required_text(invocation, "content"))
    markdown = _flag(invocation, "render_markdown")
    return {"pieces": pieces, "images": images.encoded, "markdown": markdown}


def docx_file(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """DocxFileGenerator(filename, content, image_paths, render_markdown): a Word document."""
    return _build(invocation, context, "build_docx", _document(invocation, context), ".docx")


def pdf_file(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """PdfFileGenerator(filename, content, image_paths, render_markdown): a PDF (ReportLab)."""
    return _build(invocation, context, "build_pdf", _document(invocation, context), ".pdf")


def pptx_file(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """PptxFileGenerator(filename, slides_content_str, image_paths): a slide per object."""
    raw = required_text(invocation, "slides_content_str")
    try:
        slides = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        raise GtaToolError(BAD_SLIDES) from None
    if not isinstance(slides, list) or not all(isinstance(s, dict) for s in slides):
        raise GtaToolError(BAD_SLIDES)
    images = _Images(invocation, context)
    built = [
        {
            "title": str(item.get("title", "")),
            "pieces": images.pieces(str(item.get("content", ""))),
        }
        for item in slides
    ]
    spec = {"slides": built, "images": images.encoded}
    return _build(invocation, context, "build_pptx", spec, ".pptx")
