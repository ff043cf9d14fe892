"""The GTA-Workflow file generators' building half, run in the code sandbox.

What a model asks a generator for (20,000 slides, a 160,000-character word for ReportLab to
wrap, a million cells) can take minutes and gigabytes of python-pptx, ReportLab, python-docx or
openpyxl, so none of it is built in the pytest process: :mod:`tool_backends.workflow_files`
checks the arguments, resolves and reads the images to embed, and runs this module's text in the
code sandbox (:mod:`tool_backends.sandbox`, the call kind ``generator``) with the result of that
as a JSON spec, under the sandbox's time, memory and output limits. A builder returns the file's
bytes, which the host writes into the case's output directory, or the official failure text
(``An error occurred: ...``), which the host turns into a tool error.

Like :mod:`tool_backends.workflow_parsers`, this module needs nothing but the standard library at
its top (the sandbox shows the Python paths, not this checkout), and its third-party imports are
inside the builders that use them. Its text holds no Markdown fence: the sandbox takes a program
out of its first one.

A spec's ``pieces`` are the content's parts in order, with the ``{{image_n}}`` placeholders
already replaced by the host: ``["text", TEXT]``, ``["image", INDEX]`` (into ``images``, base64
bytes with their suffix) or ``["missing", LINE]`` (the official line for an image that cannot be
used).
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import re
from collections.abc import Iterator
from typing import Any
from xml.sax.saxutils import escape

#: The font the official DOCX and PPTX generators name for CJK text.
CJK_FONT = "SimSun"
#: ReportLab's built-in CID font for Chinese (no font file needed).
PDF_CJK_FONT = "STSong-Light"
#: What the official generators answer when building fails (``An error occurred: {e}``).
FAILED = "An error occurred: "

#: A Markdown line of the light renderer: heading, list item or plain text.
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
ITEM = re.compile(r"^\s*(?:[*+-]|\d+\.)\s+(.*)$")
INLINE = re.compile(r"(\*\*[^*]+\*\*|\*[^*]+\*|`[^`]+`)")


def load(data: str) -> Any:
    """The spec the host appended (base64 of its JSON)."""
    return json.loads(base64.b64decode(data))


def failed(error: BaseException) -> str:
    """The official failure text of a generator."""
    return f"{FAILED}{error}"


def _images(spec: Any) -> list[str]:
    """The spec's images, written into the call's own directory; their paths by index.

    Files rather than streams: python-docx, python-pptx and ReportLab all take a path, and the
    call's directory is its scratch space (bounded, removed after the call).
    """
    paths = []
    for index, (encoded, suffix) in enumerate(spec.get("images", [])):
        path = os.path.join(os.getcwd(), f"image-{index}{suffix}")
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(encoded))
        paths.append(path)
    return paths


def blocks(content: str, markdown: bool) -> Iterator[tuple[str, str]]:
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


def runs(text: str) -> Iterator[tuple[str, str]]:
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


def build_csv(spec: Any) -> bytes | str:
    """CsvFileGenerator: the rows through ``csv.writer`` (its own CRLF line ends)."""
    out = io.StringIO(newline="")
    try:
        csv.writer(out).writerows(spec["rows"])
    except (csv.Error, TypeError, ValueError) as error:
        return failed(error)
    return out.getvalue().encode("utf-8")


def build_xlsx(spec: Any) -> bytes | str:
    """XlsxFileGenerator: a one-sheet workbook of the rows (openpyxl)."""
    import openpyxl  # third-party, imported by the one builder that needs it

    book = openpyxl.Workbook()
    sheet = book.active
    out = io.BytesIO()
    try:
        for row in spec["rows"]:
            sheet.append(row)
        book.save(out)
    except Exception as error:  # openpyxl refuses cells in many ways (TypeError, ValueError...)
        return failed(error)
    return out.getvalue()


def build_html(spec: Any) -> bytes | str:
    """HtmlFileGenerator: the markup (out of its fence), in an HTML5 skeleton if it has none."""
    code = str(spec["html"])
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
    return content.encode("utf-8")


def build_docx(spec: Any) -> bytes | str:
    """DocxFileGenerator: paragraphs (or light Markdown) and the embedded images (python-docx)."""
    import docx  # third-party, imported by the one builder that needs it
    from docx.oxml.ns import qn
    from docx.shared import Inches, Pt

    markdown = spec["markdown"]
    document = docx.Document()
    normal: Any = document.styles["Normal"]
    normal.font.name = CJK_FONT
    normal.font.size = Pt(12)
    normal.element.rPr.rFonts.set(qn("w:eastAsia"), CJK_FONT)
    out = io.BytesIO()
    try:
        images = _images(spec)
        for kind, value in spec["pieces"]:
            if kind == "image":
                document.add_picture(images[value], width=Inches(5))
                continue
            if kind == "missing":
                document.add_paragraph(value)
                continue
            for block, text in blocks(value, markdown):
                if block.startswith("heading"):
                    paragraph = document.add_heading(level=int(block[-1]))
                elif block in ("bullet", "number"):
                    style = "List Bullet" if block == "bullet" else "List Number"
                    paragraph = document.add_paragraph(style=style)
                else:
                    paragraph = document.add_paragraph()
                spans = runs(text) if markdown else iter([("plain", text)])
                for style, span in spans:
                    run = paragraph.add_run(span)
                    run.bold = style == "bold" or None
                    run.italic = style == "italic" or None
                    if style == "code":
                        run.font.name = "Courier New"
        document.save(out)
    except Exception as error:  # python-docx and Pillow (embedded images) raise many kinds
        return failed(error)
    return out.getvalue()


def _pdf_text(text: str) -> str:
    """Text as a ReportLab paragraph's markup: escaped, line breaks kept."""
    return escape(text).replace("\n", "<br/>")


def build_pdf(spec: Any) -> bytes | str:
    """PdfFileGenerator: paragraphs (or light Markdown) and the embedded images (ReportLab)."""
    from reportlab.lib.pagesizes import letter  # third-party: only this builder needs it
    from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
    from reportlab.lib.units import inch
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont
    from reportlab.platypus import Image, Paragraph, SimpleDocTemplate, Spacer

    markdown = spec["markdown"]
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
    out = io.BytesIO()
    try:
        images = _images(spec)
        for kind, value in spec["pieces"]:
            if kind == "image":
                image = Image(images[value])
                if image.drawWidth > 5 * inch:
                    image.drawHeight *= 5 * inch / image.drawWidth
                    image.drawWidth = 5 * inch
                story += [Spacer(1, 12), image, Spacer(1, 12)]
                continue
            if kind == "missing":
                story.append(Paragraph(_pdf_text(value), style("Normal", value)))
                continue
            for block, text in blocks(value, markdown):
                name = {"heading1": "Heading1", "heading2": "Heading2"}.get(block, "Normal")
                if block.startswith("heading") and name == "Normal":
                    name = "Heading3"
                prefix = "• " if block == "bullet" else ""
                story.append(Paragraph(prefix + _pdf_text(text), style(name, text)))
        SimpleDocTemplate(out, pagesize=letter).build(story)
    except Exception as error:  # ReportLab and Pillow (embedded images) raise many kinds
        return failed(error)
    return out.getvalue()


def build_pptx(spec: Any) -> bytes | str:
    """PptxFileGenerator: a title-and-content slide per object, images on it (python-pptx)."""
    import pptx  # third-party, imported by the one builder that needs it
    from pptx.util import Inches

    presentation = pptx.Presentation()
    out = io.BytesIO()
    try:
        images = _images(spec)
        for item in spec["slides"]:
            slide = presentation.slides.add_slide(presentation.slide_layouts[1])
            if slide.shapes.title is not None:
                slide.shapes.title.text = item["title"]
            frame = slide.placeholders[1].text_frame
            frame.text = ""
            frame.word_wrap = True
            for kind, value in item["pieces"]:
                if kind == "image":
                    path = images[value]
                    slide.shapes.add_picture(path, Inches(1), Inches(3.5), width=Inches(4))
                elif kind == "text":  # officially, a missing image is skipped
                    frame.add_paragraph().text = value.strip()
        presentation.save(out)
    except Exception as error:  # python-pptx and Pillow (embedded images) raise many kinds
        return failed(error)
    return out.getvalue()
