"""The parsers of ReadCSV, ReadDOCX, ReadPDF, ReadPPTX, ReadXLSX and Prover's Z3 call.

They take what a model chose (a file it wrote or named, an SMT-LIB2 text it wrote), and the
libraries under them (lxml, zip, pypdf's object parser, Z3's C++ parser and solver) can be made
to take gigabytes or hours by a small hostile input (a zip bomb, a deep PDF object graph, an
undecidable formula). So they never run in the pytest process: :mod:`tool_backends.workflow_readers`
runs this module's text in the code sandbox (:mod:`tool_backends.sandbox`, the call kind
``reader``) with the file's bytes appended, under the sandbox's time, memory and file limits.
Like :mod:`tool_backends.sandbox_worker` this module needs nothing but the standard library at
its top (the sandbox shows the Python paths, not this checkout), and its third-party imports are
inside the functions that use them (heavy, and each reader needs only its own).

Each reader returns the text the official tool (``agentlego/benchmark.py`` of open-compass/GTA)
returns. The official ReadCSV and ReadXLSX go through pandas (``read_csv``/``read_excel`` then
``to_csv(index=False)``); here the standard ``csv`` module and openpyxl give the same rows
without pandas, so numbers keep the spelling the file has (pandas would print ``3`` read from
an XLSX float cell as ``3.0`` only when the column holds floats).
"""

from __future__ import annotations

import base64
import csv
import io
from typing import Any


def decode(data: str) -> bytes:
    """The file's bytes, as the host appended them (base64)."""
    return base64.b64decode(data)


def _csv_text(rows: Any) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow(["" if cell is None else cell for cell in row])
    return out.getvalue()


def read_csv(data: bytes) -> str:
    """ReadCSV: the file's rows written back as CSV text (the official ``to_csv`` shape)."""
    text = data.decode("utf-8-sig")
    return _csv_text(csv.reader(io.StringIO(text, newline="")))


def read_docx(data: bytes) -> str:
    """ReadDOCX: each paragraph's text, one per line (python-docx, as the official tool)."""
    import docx  # third-party, imported by the one reader that needs it

    document = docx.Document(io.BytesIO(data))
    return "\n".join(paragraph.text for paragraph in document.paragraphs)


def read_pdf(data: bytes) -> str:
    """ReadPDF: each page's extracted text, one page per line (pypdf, PyPDF2's successor)."""
    import pypdf  # third-party, imported by the one reader that needs it

    reader = pypdf.PdfReader(io.BytesIO(data))
    return "\n".join(page.extract_text() for page in reader.pages)


def read_pptx(data: bytes) -> str:
    """ReadPPTX: the text of every shape that has text, slide by slide (python-pptx)."""
    import pptx  # third-party, imported by the one reader that needs it

    presentation = pptx.Presentation(io.BytesIO(data))
    texts = []
    for slide in presentation.slides:
        for shape in slide.shapes:
            if hasattr(shape, "text"):
                texts.append(shape.text)
    return "\n".join(texts)


def read_xlsx(data: bytes) -> str:
    """ReadXLSX: the first sheet's rows as CSV text (openpyxl, values not formulas)."""
    import openpyxl  # third-party, imported by the one reader that needs it

    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sheet = book.worksheets[0]
        return _csv_text(sheet.iter_rows(values_only=True))
    finally:
        book.close()


#: The official Prover's answers (``Prover.apply``), word for word (full-width punctuation
#: included).
PROVED = "证明成功：定理为重言式。"  # noqa: RUF001
COUNTEREXAMPLE = "定理不成立，反例："  # noqa: RUF001
UNKNOWN = "证明结果未知。"
PARSE_FAILED = "解析定理失败: "


def prove(theorem: str, timeout_ms: int) -> str:
    """Prover: whether the conjunction of the SMT-LIB2 assertions is valid, with Z3.

    As the official tool: the assertions' conjunction F is valid when Not(F) is unsatisfiable;
    a model of Not(F) is the counterexample. Z3 stops after ``timeout_ms`` (answered as
    unknown), well before the sandbox's own limit would kill the call.
    """
    import z3  # third-party, imported by the one function that needs it

    try:
        assertions = z3.parse_smt2_string(theorem)
    except Exception as error:  # Z3Exception, and whatever else its parser raises
        return f"{PARSE_FAILED}{error}"
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(z3.Not(z3.And(assertions)))
    result = solver.check()
    if result == z3.unsat:
        return PROVED
    if result == z3.sat:
        return f"{COUNTEREXAMPLE}{solver.model()}"
    return UNKNOWN
