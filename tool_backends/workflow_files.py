"""The GTA-Workflow file generators: CSV, DOCX, PDF, PPTX, XLSX and HTML.

Each takes what the official tool takes (``agentlego/benchmark.py`` of open-compass/GTA):
``filename`` (without its extension), the content (``data_str``, a JSON list of rows, for CSV
and XLSX; ``content`` with ``{{image_n}}`` placeholders and ``image_paths``, a comma-separated
list, for DOCX and PDF; ``slides_content_str``, a JSON list of ``{"title", "content"}``, for
PPTX; ``html_code`` for HTML) and answers the new file's path. Files land in the run's output
directory only (:func:`tool_backends.workflow_io.output_path`), and images are embedded only
from the dataset and the output directory: an image path outside them, or missing, becomes the
official ``[图片文件未找到: PATH]`` line in the document.

The official tools answer a failure as a string in place of the file (``'An error occurred:
...'``); here it is a tool error with the same text, so that the call is recorded as failed.

Libraries: python-docx, python-pptx and openpyxl (MIT), ReportLab (BSD); each imported inside
the generator that needs it, so the backend loads without them and offers only what is there.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from xml.sax.saxutils import escape

from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import ResultItem, ToolResult
from tool_backends.paths import argument, required_text, resolve_image, text_argument
from tool_backends.workflow_io import output_path

#: The official message for ``data_str`` that is not JSON (CSV and XLSX).
BAD_ROWS = (
    "Invalid data format: data should be a JSON-formatted string representing a list of lists."
)
#: The official message for ``slides_content_str`` that is not JSON.
BAD_SLIDES = "Invalid format: slides_content_str must be a JSON list of objects."
#: A placeholder for the n-th image of ``image_paths``.
PLACEHOLDER = re.compile(r"(\{\{image_\d+\}\})")
#: The font the official DOCX and PPTX generators name for CJK text.
CJK_FONT = "SimSun"
#: ReportLab's built-in CID font for Chinese (no font file needed).
PDF_CJK_FONT = "STSong-Light"
#: Rows and cells a CSV or XLSX may have (a JSON list of a million rows is not a table).
MAX_CELLS = 1_000_000


def _file(path: Path) -> ToolResult:
    return ToolResult((ResultItem("file", str(path.absolute())),))


def _failed(error: Exception) -> GtaToolError:
    return GtaToolError(f"An error occurred: {error}")


def _rows(invocation: ToolInvocation) -> list[Any]:
    raw = required_text(invocation, "data_str")
    try:
        rows = json.loads(raw)
    except json.JSONDecodeError:
        raise GtaToolError(BAD_ROWS) from None
    if not isinstance(rows, list):
        raise _failed(TypeError(f"expected a list of rows, got {type(rows).__name__}"))
    cells = sum(len(row) if isinstance(row, (list, str)) else 1 for row in rows)
    if cells > MAX_CELLS:
        raise _failed(ValueError(f"{cells} cells, more than {MAX_CELLS}"))
    return rows


def csv_file(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """CsvFileGenerator(filename, data_str): a CSV of the JSON rows."""
    rows = _rows(invocation)
    path = output_path(invocation, context, required_text(invocation, "filename"), ".csv")
    try:
        with path.open("w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows(rows)
    except (csv.Error, TypeError, ValueError) as error:
        raise _failed(error) from None
    return _file(path)


def xlsx_file(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """XlsxFileGenerator(filename, data_str): a one-sheet workbook of the JSON rows."""
    import openpyxl  # third-party and heavy: only this generator needs it

    rows = _rows(invocation)
    path = output_path(invocation, context, required_text(invocation, "filename"), ".xlsx")
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    try:
        for row in rows:
            sheet.append(row)
        book.save(path)
    except Exception as error:  # openpyxl refuses cells in many ways (TypeError, ValueError...)
        raise _failed(error) from None
    return _file(path)


def html_file(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """HtmlFileGenerator(filename, html_code): the markup, in an HTML5 skeleton if it has none."""
    code = required_text(invocation, "html_code")
    fence = "`" * 3
    if f"{fence}html" in code:
        code = code.split(f"{fence}html")[1].split(fence)[0]
    elif fence in code:
        code = code.split(fence)[1].split(fence)[0]
    content = code.strip()
    if "<html" not in content.lower():
        content = (
            '<!doctype html>\n<html>\n  <head>\n    <meta charset="utf-8" />\n'
            "    <title>Document</title>\n  </head>\n  <body>\n"
            f"{content}\n  </body>\n</html>\n"
        )
    path = output_path(invocation, context, required_text(invocation, "filename"), ".html")
    path.write_text(content, encoding="utf-8")
    return _file(path)


def _image_paths(invocation: ToolInvocation) -> list[str]:
    raw = text_argument(invocation, "image_paths") or ""
    return [p.strip() for p in raw.split(",") if p.strip()]


class Missing(NamedTuple):
    """An image placeholder with no usable image: the official line that stands for it."""

    line: str


def _image(index: int, paths: list[str], context: ToolContext) -> Path | Missing:
    """The image of placeholder ``index`` (1-based), or the official line that replaces it."""
    if not 0 < index <= len(paths):
        return Missing(f"[缺失图片路径: {{{{image_{index}}}}}]")
    try:
        return resolve_image(paths[index - 1], context)
    except GtaToolError:
        return Missing(f"[图片文件未找到: {paths[index - 1]}]")


def _pieces(content: str, paths: list[str], context: ToolContext) -> Iterator[Path | Missing | str]:
    """The content's text parts and images, in order (placeholders replaced)."""
    for part in PLACEHOLDER.split(content):
        found = re.fullmatch(r"\{\{image_(\d+)\}\}", part)
        if found:
            yield _image(int(found.group(1)), paths, context)
        elif part.strip():
            yield part


def _flag(invocation: ToolInvocation, name: str) -> bool:
    value = argument(invocation, name)
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


#: A Markdown line of the light renderer: heading, list item or plain text.
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
ITEM = re.compile(r"^\s*(?:[*+-]|\d+\.)\s+(.*)$")
INLINE = re.compile(r"(\*\*[^*]+\*\*|\*[^*]+\*|`[^`]+`)")


def _blocks(content: str, markdown: bool) -> Iterator[tuple[str, str]]:
    """(kind, text) blocks: ``paragraph`` split on blank lines, or Markdown's headings and items.

    ``kind`` is ``paragraph``, ``heading1`` to ``heading6``, ``bullet`` or ``number``.
    """
    if not markdown:
        for paragraph in content.split("\n\n"):
            if paragraph.strip():
                yield "paragraph", paragraph
        return
    for line in content.splitlines():
        if not line.strip() or line.strip().startswith("`" * 3):
            continue
        heading = HEADING.match(line)
        item = ITEM.match(line)
        if heading:
            yield f"heading{len(heading.group(1))}", heading.group(2)
        elif item:
            numbered = line.strip()[:1].isdigit()
            yield ("number" if numbered else "bullet"), item.group(1)
        else:
            yield "paragraph", line


def _runs(text: str) -> Iterator[tuple[str, str]]:
    """(style, text) runs of Markdown's inline ``**bold**``, ``*italic*`` and code spans."""
    for token in INLINE.split(text):
        if token.startswith("**") and token.endswith("**") and len(token) > 4:
            yield "bold", token[2:-2]
        elif token.startswith("`") and token.endswith("`") and len(token) > 2:
            yield "code", token[1:-1]
        elif token.startswith("*") and token.endswith("*") and len(token) > 2:
            yield "italic", token[1:-1]
        elif token:
            yield "plain", token


def docx_file(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """DocxFileGenerator(filename, content, image_paths, render_markdown): a Word document."""
    import docx  # third-party and heavy: only this generator needs it
    from docx.oxml.ns import qn
    from docx.shared import Inches, Pt

    content = required_text(invocation, "content")
    paths = _image_paths(invocation)
    markdown = _flag(invocation, "render_markdown")
    path = output_path(invocation, context, required_text(invocation, "filename"), ".docx")
    document = docx.Document()
    normal: Any = document.styles["Normal"]
    normal.font.name = CJK_FONT
    normal.font.size = Pt(12)
    normal.element.rPr.rFonts.set(qn("w:eastAsia"), CJK_FONT)
    try:
        for piece in _pieces(content, paths, context):
            if isinstance(piece, Path):
                document.add_picture(str(piece), width=Inches(5))
                continue
            if isinstance(piece, Missing):
                document.add_paragraph(piece.line)
                continue
            for kind, text in _blocks(piece, markdown):
                if kind.startswith("heading"):
                    paragraph = document.add_heading(level=int(kind[-1]))
                elif kind in ("bullet", "number"):
                    style = "List Bullet" if kind == "bullet" else "List Number"
                    paragraph = document.add_paragraph(style=style)
                else:
                    paragraph = document.add_paragraph()
                spans = _runs(text) if markdown else iter([("plain", text)])
                for style, span in spans:
                    run = paragraph.add_run(span)
                    run.bold = style == "bold" or None
                    run.italic = style == "italic" or None
                    if style == "code":
                        run.font.name = "Courier New"
        document.save(str(path))
    except Exception as error:  # python-docx and Pillow (embedded images) raise many kinds
        raise _failed(error) from None
    return _file(path)


def _pdf_text(text: str) -> str:
    """Text as a ReportLab paragraph's markup: escaped, line breaks kept."""
    return escape(text).replace("\n", "<br/>")


def pdf_file(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """PdfFileGenerator(filename, content, image_paths, render_markdown): a PDF (ReportLab)."""
    from reportlab.lib.pagesizes import letter  # third-party: only this generator needs it
    from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
    from reportlab.lib.units import inch
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont
    from reportlab.platypus import Image, Paragraph, SimpleDocTemplate, Spacer

    content = required_text(invocation, "content")
    paths = _image_paths(invocation)
    markdown = _flag(invocation, "render_markdown")
    path = output_path(invocation, context, required_text(invocation, "filename"), ".pdf")
    if PDF_CJK_FONT not in pdfmetrics.getRegisteredFontNames():
        pdfmetrics.registerFont(UnicodeCIDFont(PDF_CJK_FONT))
    styles = getSampleStyleSheet()

    def style(name: str, text: str) -> ParagraphStyle:
        base = styles[name]
        try:
            text.encode("latin-1")
        except UnicodeEncodeError:  # Helvetica has no CJK glyphs
            return ParagraphStyle(f"{name}-cjk", parent=base, fontName=PDF_CJK_FONT)
        return base

    story: list[Any] = []
    try:
        for piece in _pieces(content, paths, context):
            if isinstance(piece, Path):
                image = Image(str(piece))
                if image.drawWidth > 5 * inch:
                    image.drawHeight *= 5 * inch / image.drawWidth
                    image.drawWidth = 5 * inch
                story += [Spacer(1, 12), image, Spacer(1, 12)]
                continue
            if isinstance(piece, Missing):
                story.append(Paragraph(_pdf_text(piece.line), style("Normal", piece.line)))
                continue
            for kind, text in _blocks(piece, markdown):
                name = {"heading1": "Heading1", "heading2": "Heading2"}.get(kind, "Normal")
                if kind.startswith("heading") and name == "Normal":
                    name = "Heading3"
                prefix = "• " if kind == "bullet" else ""
                story.append(Paragraph(prefix + _pdf_text(text), style(name, text)))
        SimpleDocTemplate(str(path), pagesize=letter).build(story)
    except Exception as error:  # ReportLab and Pillow (embedded images) raise many kinds
        raise _failed(error) from None
    return _file(path)


def pptx_file(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """PptxFileGenerator(filename, slides_content_str, image_paths): a slide per object."""
    import pptx  # third-party and heavy: only this generator needs it
    from pptx.util import Inches

    raw = required_text(invocation, "slides_content_str")
    try:
        slides = json.loads(raw)
    except json.JSONDecodeError:
        raise GtaToolError(BAD_SLIDES) from None
    if not isinstance(slides, list) or not all(isinstance(s, dict) for s in slides):
        raise GtaToolError(BAD_SLIDES)
    paths = _image_paths(invocation)
    path = output_path(invocation, context, required_text(invocation, "filename"), ".pptx")
    presentation = pptx.Presentation()
    try:
        for item in slides:
            slide = presentation.slides.add_slide(presentation.slide_layouts[1])
            if slide.shapes.title is not None:
                slide.shapes.title.text = str(item.get("title", ""))
            frame = slide.placeholders[1].text_frame
            frame.text = ""
            frame.word_wrap = True
            for piece in _pieces(str(item.get("content", "")), paths, context):
                if isinstance(piece, Path):
                    slide.shapes.add_picture(str(piece), Inches(1), Inches(3.5), width=Inches(4))
                elif not isinstance(piece, Missing):  # officially, a missing image is skipped
                    frame.add_paragraph().text = piece.strip()
        presentation.save(str(path))
    except Exception as error:  # python-pptx and Pillow (embedded images) raise many kinds
        raise _failed(error) from None
    return _file(path)
