"""The GTA image-editing tools ``DrawBox`` and ``AddText``, drawn with Pillow.

They draw what the official tools draw (the GTA fork of AgentLego,
``tools/image_editing/draw_box.py`` and ``add_text.py``, which GTA's reference chains were
recorded with), with the same Pillow calls in the same order, so the same arguments give the same
picture and the same failures:

* ``DrawBox`` parses ``bbox`` by pulling every number out of the text (``"(x1, y1, x2, y2)"``,
  ``"55, 495, 497, 519"``; anything but exactly four numbers is
  ``ValueError('Expected 4 numbers, got ...')``), blends a translucent red rectangle with a red
  outline onto an RGBA copy, writes ``annotation`` in red with its left-bottom corner 5 px
  above the box, and returns the RGB result. Swapped corners are Pillow's ``ValueError``.
* ``AddText`` writes ``text`` on a copy in the image's own mode, in ``color`` (a Pillow colour,
  default red), at ``position``: exactly one of the nine codes ``lt lm lb mt mm mb rt rm rb``
  (left/middle/right, top/middle/bottom of the image, a margin of 1/20 of the width in, used as
  Pillow's text anchor), else a point ``"(x, y)"`` as the text's left-bottom corner; anything else
  is ``ValueError('Invalid position string.')``.

Both size the font as the official tools do (``int(height / 336 * 18)`` px, so an image under
19 px high fails as Pillow refuses a 0 px font) and fail with the official text, ``repr`` of the
exception. The result is a new PNG in the run's output directory (as AgentLego saves an image
output) whose absolute path is the tool's ``image`` output, so a later call can edit it further;
the source image is never modified. What is added is safety: images are read only from the
dataset and the output directory (:mod:`tool_backends.paths`), an oversized image is refused
before it is decoded, and a box far outside the image is clipped before Pillow fills it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import ResultItem, ToolResult
from tool_backends.paths import (
    argument,
    new_output_path,
    open_image,
    required_text,
    resolve_image,
    text_argument,
)

#: ``agentlego.utils.parse_multi_float``'s number pattern: no exponents, no thousands separators.
_NUMBER = re.compile(r"[-+]?\d*\.?\d+")
#: AddText's placement codes: horizontal l/m/r, then vertical t/m/b (Pillow anchor names).
POSITIONS = ("lt", "lm", "lb", "mt", "mm", "mb", "rt", "rm", "rb")
BOX_FILL = (255, 0, 0, 64)
BOX_RED = (255, 0, 0, 255)
#: How far above the box DrawBox puts the annotation's baseline, in pixels.
LABEL_GAP = 5
#: How far outside the image a box's clipped edges stay, in pixels (see ``_clip``).
CLIP_MARGIN = 4


def parse_numbers(value: str, count: int) -> tuple[float, ...]:
    """Every number in ``value``, which must hold exactly ``count`` of them.

    As ``agentlego.utils.parse_multi_float``: a number is digits with an optional sign and
    decimal point, wherever it stands (``"(1, 2)"``, ``"x=1 y=2"`` and ``"1,2"`` all give
    ``(1.0, 2.0)``); ``"29,000"`` is two numbers.

    Raises:
        ValueError: another count of numbers, with the official message.
    """
    matches = _NUMBER.findall(value)
    if len(matches) != count:
        raise ValueError(f"Expected {count} numbers, got {value}.")
    return tuple(float(m) for m in matches)


@contextlib.contextmanager
def official_failures() -> Iterator[None]:
    """Turn what the drawing raises into the official failure text, ``repr(exception)``.

    AgentLego's ``LagentTool`` wrapper records any exception of a tool as ``errmsg=repr(e)``;
    our own refusals (a path outside the dataset, an oversized image) pass through as they are.
    """
    try:
        yield
    except GtaToolError:
        raise
    except Exception as exc:
        raise GtaToolError(repr(exc)) from exc


def _font(image: Image.Image) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """The official font: Pillow's default at 18 px for an image 336 px high, scaled."""
    return ImageFont.load_default(size=int(image.size[1] / 336 * 18))


def _clip(box: tuple[float, float, float, float], size: tuple[int, int]) -> tuple[float, ...]:
    """The box with coordinates far beyond the image pulled in to just outside it.

    Pillow fills a rectangle row by row over its whole height, so ``(0, 0, 1e12, 1e12)`` keeps
    the process busy for seconds; :data:`CLIP_MARGIN` pixels past the edge the outline is just
    as invisible and the fill covers the same pixels (Pillow draws a rectangle up to a pixel
    beyond its corners, hence the margin). An infinite coordinate (a number of 310 digits) is
    clipped too: Pillow would turn it into a garbage integer and take seconds over it.
    """
    width, height = size
    limits = ((-CLIP_MARGIN, width + CLIP_MARGIN), (-CLIP_MARGIN, height + CLIP_MARGIN)) * 2
    return tuple(min(max(v, low), high) for v, (low, high) in zip(box, limits, strict=True))


def _save(image: Image.Image, context: ToolContext, stem: str) -> ToolResult:
    """Write the result as PNG in the output directory and return it as an image output."""
    path = new_output_path(context, stem, ".png")
    try:
        image.save(path, format="PNG")  # a mode PNG cannot hold fails here, as officially
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return ToolResult((ResultItem("image", str(path)),))


def _source(invocation: ToolInvocation, context: ToolContext) -> Path:
    """The image argument, confined to the dataset and the output directory."""
    return resolve_image(argument(invocation, "image"), context)


def draw_box(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """The GTA ``DrawBox`` tool: a translucent red box, optionally captioned, on a copy.

    Args:
        invocation: The call: ``image``, ``bbox`` as ``"(x1, y1, x2, y2)"`` and an optional
            ``annotation``.
        context: The call's context (allowed directories, output directory).

    Returns:
        The edited image's path as an ``image`` output.

    Raises:
        GtaToolError: A refused image path, an unreadable or oversized image, or what the
            official tool raises (``repr``): a bbox without exactly four numbers, swapped
            corners, an image too small for a font.
    """
    path = _source(invocation, context)
    bbox = required_text(invocation, "bbox")
    annotation = text_argument(invocation, "annotation")
    with official_failures():
        picture = open_image(path).convert("RGBA")
        canvas = Image.new("RGBA", picture.size, (0, 0, 0, 0))
        draw = ImageDraw.Draw(canvas)
        font = _font(picture)
        x1, y1, x2, y2 = parse_numbers(bbox, 4)
        # Pillow's own checks, made before clipping can make the corners equal.
        if x2 < x1:
            raise ValueError("x1 must be greater than or equal to x0")
        if y2 < y1:
            raise ValueError("y1 must be greater than or equal to y0")
        draw.rectangle(_clip((x1, y1, x2, y2), picture.size), fill=BOX_FILL, outline=BOX_RED)
        if annotation:
            draw.text((x1, y1 - LABEL_GAP), annotation, fill=BOX_RED, anchor="lb", font=font)
        return _save(Image.alpha_composite(picture, canvas).convert("RGB"), context, "DrawBox")


def add_text(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """The GTA ``AddText`` tool: write text on a copy of an image.

    Args:
        invocation: The call: ``image``, ``text``, ``position`` (a placement code or
            ``"(x, y)"``) and an optional ``color`` (default red).
        context: The call's context (allowed directories, output directory).

    Returns:
        The edited image's path as an ``image`` output.

    Raises:
        GtaToolError: A refused image path, an unreadable or oversized image, or what the
            official tool raises (``repr``): an unknown position or colour, multi-line text at
            a top or bottom anchor, an image too small for a font.
    """
    path = _source(invocation, context)
    text = required_text(invocation, "text")
    position = required_text(invocation, "position")
    color = text_argument(invocation, "color")
    with official_failures():
        picture = open_image(path)
        draw = ImageDraw.Draw(picture)
        font = _font(picture)
        width, height = picture.size
        margin = width // 20
        if position in POSITIONS:
            xs = {"l": margin, "m": width // 2, "r": width - margin}
            ys = {"t": margin, "m": height // 2, "b": height - margin}
            xy: tuple[float, float] = (xs[position[0]], ys[position[1]])
            anchor = position
        else:
            anchor = "lb"
            try:
                x, y = parse_numbers(position, 2)
            except ValueError:
                raise ValueError("Invalid position string.") from None
            xy = (x, y)
        draw.text(xy, text, anchor=anchor, fill="red" if color is None else color, font=font)
        return _save(picture, context, "AddText")
