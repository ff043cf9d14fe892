"""OCR on the CPU with RapidOCR (PaddleOCR's models on ONNX Runtime; no torch, no downloads).

The official GTA OCR tool (AgentLego on EasyOCR) prints one line per detected text region:
``(x1, y1, x2, y2) text``, the integer corners of the region's axis-aligned box, joined by
newlines (an empty string when nothing is found). This module produces the same format so the
model reads local output exactly as it would read the official one. Regions are put in reading
order (lines top to bottom, each line left to right) because the model reasons over the text in
the order it is listed.

The bundled PP-OCR recogniser tends to drop the spaces between Latin words ("12ElmStreet");
the text is reported as recognised, without guessing spaces back in.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import ToolResult
from tool_backends.paths import argument, open_rgb, resolve_image

#: ONNX Runtime threads per session. Tool calls may run in parallel with model calls and with
#: other xdist workers, so one engine should not claim every core of the machine.
INTRA_OP_THREADS = 2

_ENGINE: Any = None
_ENGINE_LOCK = threading.Lock()
_CALL_LOCK = threading.Lock()


@dataclass(frozen=True)
class Region:
    """One recognised text region and its axis-aligned pixel box."""

    x1: int
    y1: int
    x2: int
    y2: int
    text: str

    def format(self) -> str:
        """The region as the official OCR tool prints it."""
        return f"({self.x1}, {self.y1}, {self.x2}, {self.y2}) {self.text}"


#: One line of the official tool's answer: the box's integer corners, a space, the text.
LINE = re.compile(r"^\((-?\d+), (-?\d+), (-?\d+), (-?\d+)\) (.*)$")


def parse_output(text: str) -> list[Region]:
    """The regions of an OCR answer in the official format, in the order written.

    The inverse of :meth:`Region.format` over the lines of a text: used to compare our answers
    with the reference ones (``benchmarks/ocr_agreement.py``). A line that is not a region
    (text with a line break in it) belongs to the region before it; text before any region
    gets an empty box at the origin, so that no recognised character is lost.

    Args:
        text: An OCR tool's answer, one region a line.

    Returns:
        The regions, their texts stripped.
    """
    regions: list[Region] = []
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            x1, y1, x2, y2 = (int(n) for n in match.groups()[:4])
            regions.append(Region(x1, y1, x2, y2, match.group(5).strip()))
        elif line.strip():
            last = regions.pop() if regions else Region(0, 0, 0, 0, "")
            joined = f"{last.text}\n{line.strip()}" if last.text else line.strip()
            regions.append(Region(last.x1, last.y1, last.x2, last.y2, joined))
    return regions


def _engine() -> Any:
    """The process's RapidOCR engine, created on first use (model load takes about a second)."""
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            with warnings.catch_warnings():
                # Third-party import and session set-up; keep their noise out of the run.
                warnings.simplefilter("ignore", DeprecationWarning)
                from rapidocr_onnxruntime import RapidOCR  # type: ignore[import-untyped]

                _ENGINE = RapidOCR(intra_op_num_threads=INTRA_OP_THREADS, inter_op_num_threads=1)
        return _ENGINE


def to_region(quad: Sequence[Sequence[float]], text: str) -> Region:
    """The axis-aligned integer box around a detected quadrilateral.

    Args:
        quad: Four ``(x, y)`` corners as the detector returns them.
        text: The recognised text.

    Returns:
        The region with ``x1, y1`` top-left and ``x2, y2`` bottom-right.
    """
    xs = [float(point[0]) for point in quad]
    ys = [float(point[1]) for point in quad]
    return Region(round(min(xs)), round(min(ys)), round(max(xs)), round(max(ys)), str(text).strip())


def reading_order(regions: Sequence[Region]) -> list[Region]:
    """Sort regions into lines (top to bottom), each line left to right.

    A region joins the current line when its vertical centre falls within the vertical extent
    of the line's first region; this keeps a price printed a pixel or two higher than its label
    on the label's line, where a plain sort by ``y1`` would interleave them.

    Args:
        regions: Regions in any order.

    Returns:
        The regions in reading order.
    """
    lines: list[list[Region]] = []
    for region in sorted(regions, key=lambda r: ((r.y1 + r.y2) / 2, r.x1)):
        centre = (region.y1 + region.y2) / 2
        if lines and lines[-1][0].y1 <= centre <= lines[-1][0].y2:
            lines[-1].append(region)
        else:
            lines.append([region])
    return [region for line in lines for region in sorted(line, key=lambda r: (r.x1, r.y1))]


def recognise(path: Path) -> list[Region]:
    """Run OCR on one image file.

    Args:
        path: An image file (already checked by :func:`~tool_backends.paths.resolve_image`).

    Returns:
        The non-empty text regions in reading order.

    Raises:
        GtaToolError: The file is not a readable image, or is too large to decode.
    """
    image = open_rgb(path)
    engine = _engine()
    # One engine per process; ONNX Runtime sessions are thread-safe, but RapidOCR keeps
    # per-call settings on the engine object, so calls are serialised.
    with _CALL_LOCK:
        result, _elapsed = engine(image)
    regions = [to_region(item[0], item[1]) for item in result or ()]
    return reading_order([r for r in regions if r.text])


def ocr(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """The GTA ``OCR`` tool: every text region of ``image`` with its box.

    Args:
        invocation: The call; its ``image`` argument names the picture.
        context: The call's context (allowed directories).

    Returns:
        One ``(x1, y1, x2, y2) text`` line per region, or an empty text when none is found.

    Raises:
        GtaToolError: The image argument is refused or unreadable.
    """
    path = resolve_image(argument(invocation, "image"), context)
    return ToolResult.text("\n".join(region.format() for region in recognise(path)))
