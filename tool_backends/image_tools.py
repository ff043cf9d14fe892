"""The GTA image-editing tools ``DrawBox`` and ``AddText``, drawn with Pillow.

They follow AgentLego's tools of the same names, which GTA's reference chains were recorded with:
the arguments are parsed the same way (numbers pulled out of strings like ``"(x1, y1, x2, y2)"``,
AddText's nine placement codes used as Pillow text anchors at a margin of 1/20 of the width, a
font size scaled with the image height), the source image is never modified, and the result is
a new PNG in the run's output directory whose absolute path is the tool's ``image`` output, so a
later call can edit it further.
"""

from __future__ import annotations

import re
from typing import Any

from PIL import Image, ImageColor, ImageDraw, ImageFont

from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import ResultItem, ToolResult
from tool_backends.paths import argument, new_output_path, open_rgb, resolve_image

_NUMBER = re.compile(r"[-+]?\d*\.?\d+")
#: AddText's placement codes: horizontal l/m/r, then vertical t/m/b (Pillow anchor names).
POSITIONS = ("lt", "lm", "lb", "mt", "mm", "mb", "rt", "rm", "rb")
BOX_COLOR = (255, 0, 0)
LABEL_TEXT_COLOR = (255, 255, 255)
#: Far beyond any image, yet below where Pillow's C integers overflow (near 9.2e18 it raises
#: SystemError or OverflowError instead of drawing nothing).
MAX_COORDINATE = 1e18


def parse_numbers(value: Any, count: int, what: str) -> tuple[float, ...]:
    """Pull exactly ``count`` numbers out of a string such as ``"(10, 20, 30, 40)"``.

    Args:
        value: The argument as the model passed it.
        count: How many numbers it must contain.
        what: The expected format, for the error message.

    Returns:
        The numbers in order.

    Raises:
        GtaToolError: The value is not a string, has a different count of numbers, or a number
            too large to be a pixel coordinate.
    """
    matches = _NUMBER.findall(value) if isinstance(value, str) else []
    if len(matches) != count:
        raise GtaToolError(f"expected {what}, got {value!r}")
    numbers = tuple(float(m) for m in matches)
    if not all(abs(n) <= MAX_COORDINATE for n in numbers):  # also refuses inf (310+ digits)
        raise GtaToolError(f"expected {what} in pixels, got {value!r}: a number is out of range")
    return numbers


def _color(value: Any) -> tuple[int, ...]:
    """A Pillow colour from a name or ``#rrggbb``; anything else is the model's mistake."""
    try:
        return tuple(ImageColor.getrgb(str(value).strip()))
    except ValueError as exc:
        raise GtaToolError(
            f"unknown color {value!r}; use a colour name such as 'red' or 'white', or '#rrggbb'"
        ) from exc


def _font_size(image: Image.Image) -> int:
    """AgentLego's estimate: 18 px on an image 336 px high, scaled with the height."""
    return max(10, int(image.height / 336 * 18))


def _save(image: Image.Image, context: ToolContext, stem: str) -> ToolResult:
    """Write the result as PNG in the output directory and return it as an image output."""
    path = new_output_path(context, stem, ".png")
    image.save(path, format="PNG")
    return ToolResult((ResultItem("image", str(path)),))


def draw_box(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """The GTA ``DrawBox`` tool: outline a rectangle, optionally captioned, on a copy of an image.

    The caption sits on a filled label just above the box's top-left corner (inside the box when
    there is no room above), so it stays readable on any background.

    Args:
        invocation: The call: ``image``, ``bbox`` as ``"(x1, y1, x2, y2)"`` and an optional
            ``annotation``.
        context: The call's context (allowed directories, output directory).

    Returns:
        The edited image's path as an ``image`` output.

    Raises:
        GtaToolError: A refused image path, an unreadable or oversized image, a malformed box
            or one whose corners are swapped.
    """
    path = resolve_image(argument(invocation, "image"), context)
    x1, y1, x2, y2 = parse_numbers(argument(invocation, "bbox"), 4, "a bbox '(x1, y1, x2, y2)'")
    if x2 < x1 or y2 < y1:
        raise GtaToolError(
            f"bbox {argument(invocation, 'bbox')!r}: (x1, y1) must be the top-left and "
            "(x2, y2) the bottom-right corner"
        )
    image = open_rgb(path)
    draw = ImageDraw.Draw(image)
    width = max(2, round(min(image.size) / 150))
    draw.rectangle((x1, y1, x2, y2), outline=BOX_COLOR, width=width)
    annotation = argument(invocation, "annotation")
    if annotation is not None and str(annotation).strip():
        text = str(annotation).strip()
        font = ImageFont.load_default(size=_font_size(image))
        left, top, right, bottom = draw.textbbox((x1, y1 - width), text, font=font, anchor="lb")
        if top < 0:  # no room above the box: put the label inside its top-left corner
            left, top, right, bottom = draw.textbbox(
                (x1 + width, y1 + width), text, font=font, anchor="lt"
            )
        pad = 2
        draw.rectangle((left - pad, top - pad, right + pad, bottom + pad), fill=BOX_COLOR)
        draw.text((left, top), text, font=font, fill=LABEL_TEXT_COLOR, anchor="lt")
    return _save(image, context, "DrawBox")


def add_text(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """The GTA ``AddText`` tool: write text on a copy of an image.

    ``position`` is either a point ``"(x, y)"``, used as the text's left-bottom corner, or one
    of the placement codes ``lt lm lb mt mm mb rt rm rb`` (left/middle/right, top/middle/bottom),
    which anchor the text at that side or corner of the image with a margin of 1/20 of the
    width, as AgentLego's AddText does.

    Args:
        invocation: The call: ``image``, ``text``, ``position`` and an optional ``color``
            (default red).
        context: The call's context (allowed directories, output directory).

    Returns:
        The edited image's path as an ``image`` output.

    Raises:
        GtaToolError: A refused image path, an unreadable or oversized image, an unknown
            position or colour, or no text.
    """
    path = resolve_image(argument(invocation, "image"), context)
    text = argument(invocation, "text")
    if text is None or not str(text):
        raise GtaToolError("AddText needs a non-empty 'text'")
    color_value = argument(invocation, "color")
    color = _color("red" if color_value is None or str(color_value).strip() == "" else color_value)
    position = str(argument(invocation, "position") or "").strip()
    image = open_rgb(path)
    w, h = image.size
    margin = w // 20
    code = position.lower()
    if code in POSITIONS:
        xs = {"l": margin, "m": w // 2, "r": w - margin}
        ys = {"t": margin, "m": h // 2, "b": h - margin}
        xy: tuple[float, float] = (xs[code[0]], ys[code[1]])
        anchor = code
    else:
        x, y = parse_numbers(position, 2, f"a position '(x, y)' or one of {', '.join(POSITIONS)}")
        xy = (x, y)
        anchor = "lb"
    font = ImageFont.load_default(size=_font_size(image))
    ImageDraw.Draw(image).text(xy, str(text), fill=color, font=font, anchor=anchor)
    return _save(image, context, "AddText")
