"""Turning deliverables into what the judge is sent: PDFs of text files, frames of videos.

The official evaluator converts HTML, TXT, MD and JSON with ``wkhtmltopdf`` into
``<stem>.pdf``. That renders a model-written page with a browser engine that follows links and
reads local files into the PDF, which then goes to the judge; here the file's text is laid out
into a PDF by :func:`text_pdf` instead (the tags of HTML dropped), in-process and without any
network or file access beyond the file itself. The judge receives a PDF under the same name,
with the same text, without the page's styling: docs/workflow.md says so.

Video frames come from ``ffmpeg`` with the official filter (``fps=4/10``), run with a time and
memory limit, only the ``file`` protocol allowed, in a directory of its own.
"""

from __future__ import annotations

import html.parser
import os
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

from pytest_gta.judge.protocol import VIDEO_FPS, converted_name

#: The most bytes of a text deliverable read for conversion (the rest is cut, and says so).
MAX_TEXT_BYTES = 2_000_000
#: Seconds and bytes of address space an ffmpeg run may take.
FFMPEG_TIMEOUT = 120.0
FFMPEG_MEMORY = 2 << 30

_PAGE_LINES = 60
_LINE_CHARS = 95


class _Text(html.parser.HTMLParser):
    """The visible text of an HTML page, one block per line."""

    BLOCKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def file_text(path: str) -> str:
    """A text deliverable's text (HTML without its tags), cut at :data:`MAX_TEXT_BYTES`."""
    with open(path, "rb") as handle:
        raw = handle.read(MAX_TEXT_BYTES + 1)
    text = raw[:MAX_TEXT_BYTES].decode("utf-8", errors="replace")
    if Path(path).suffix.lower() in (".html", ".htm"):
        parser = _Text()
        parser.feed(text)
        parser.close()
        text = "".join(parser.parts)
    if len(raw) > MAX_TEXT_BYTES:
        text += f"\n[... cut at {MAX_TEXT_BYTES} bytes]"
    return text


def _wrap(text: str) -> list[str]:
    lines: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\t", "    ").split("\n"):
        line = "".join(ch if ch.isprintable() else "?" for ch in line)
        while len(line) > _LINE_CHARS:
            lines.append(line[:_LINE_CHARS])
            line = line[_LINE_CHARS:]
        lines.append(line)
    return lines


def _pdf_string(line: str) -> str:
    # Helvetica's WinAnsi covers Latin-1; anything else is shown as '?'.
    data = line.encode("latin-1", errors="replace").decode("latin-1")
    return "(" + data.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def text_pdf(text: str) -> bytes:
    """A plain PDF (A4, Helvetica 10 pt) showing ``text``, one page per 60 lines."""
    lines = _wrap(text) or [""]
    pages = [lines[i : i + _PAGE_LINES] for i in range(0, len(lines), _PAGE_LINES)]
    objects: list[bytes] = []
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for i, page in enumerate(pages):
        body = "BT /F1 10 Tf 12 TL 50 800 Td " + " ".join(f"{_pdf_string(x)} '" for x in page)
        stream = (body + " ET").encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def convert_to_pdf(path: str, workdir: str) -> str | None:
    """``<stem>.pdf`` of a text deliverable in a fresh directory, or ``None`` (unreadable)."""
    try:
        text = file_text(path)
    except OSError:
        return None
    out = Path(tempfile.mkdtemp(dir=workdir)) / converted_name(path)
    out.write_bytes(text_pdf(text))
    return str(out)


def _limits() -> None:  # pragma: no cover (runs in the child)
    resource.setrlimit(resource.RLIMIT_AS, (FFMPEG_MEMORY, FFMPEG_MEMORY))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def ffmpeg_binary() -> str | None:
    """The ``ffmpeg`` the frames come from (``$PYTEST_GTA_FFMPEG`` or ``PATH``), if any."""
    return os.environ.get("PYTEST_GTA_FFMPEG") or shutil.which("ffmpeg")


def video_frames(path: str, workdir: str) -> list[str]:
    """The official frames of a video (``frame_001.jpg``...), sorted; none if ffmpeg fails.

    Raises:
        FileNotFoundError: no ffmpeg (the official code fails the task there too).
    """
    binary = ffmpeg_binary()
    if binary is None:
        raise FileNotFoundError(
            "ffmpeg is needed to show a video deliverable to the judge (apt-get install ffmpeg, "
            "or set PYTEST_GTA_FFMPEG)"
        )
    out_dir = tempfile.mkdtemp(dir=workdir)
    command = [binary, "-nostdin", "-protocol_whitelist", "file", "-i", path]
    command += ["-vf", f"fps={VIDEO_FPS}", os.path.join(out_dir, "frame_%03d.jpg")]
    try:
        subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=FFMPEG_TIMEOUT,
            preexec_fn=_limits,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pass
    return [str(p) for p in sorted(Path(out_dir).glob("*.jpg"))]
