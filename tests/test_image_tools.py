"""The ``local`` backend's OCR, DrawBox and AddText tools and their image-path confinement."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from PIL import Image, ImageChops

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import ToolResult
from pytest_gta.validation import load_dataset
from tool_backends import image_tools, ocr
from tool_backends.local import LocalBackend
from tool_backends.paths import new_output_path, resolve_image

LINE = re.compile(r"^\((\d+), (\d+), (\d+), (\d+)\) (.+)$")
POSITIONS = ("lt", "lm", "lb", "mt", "mm", "mb", "rt", "rm", "rb")


@pytest.fixture(scope="module")
def engine() -> object:
    """Load the RapidOCR models once for the whole module."""
    return ocr._engine()


@pytest.fixture(scope="module")
def data_copy(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """A private copy of the sample dataset, so tests may add symlinks to it."""
    base = tmp_path_factory.mktemp("gta")
    shutil.copytree(Path(__file__).parent.parent / "fixtures" / "gta_sample", base / "data")
    return load_dataset(base / "data")


@pytest.fixture
def context(data_copy: Dataset, tmp_path: Path) -> ToolContext:
    return ToolContext(data_copy, data_copy["0"], tmp_path / "out")


def call(dataset: Dataset, tool: str, context: ToolContext, **arguments: object) -> ToolResult:
    invocation = ToolInvocation(dataset.toolmeta[tool], arguments, {})
    function = {"OCR": ocr.ocr, "DrawBox": image_tools.draw_box, "AddText": image_tools.add_text}
    return function[tool](invocation, context)


def output_image(result: ToolResult, context: ToolContext) -> Path:
    (item,) = result.items
    assert item.type == "image"
    path = Path(item.content)
    assert path.is_absolute()
    assert path.parent == context.output_dir
    assert path.suffix == ".png"
    return path


def blank(context: ToolContext, size: tuple[int, int] = (400, 300)) -> Path:
    path = new_output_path(context, "blank", ".png")
    Image.new("RGB", size, "white").save(path)
    return path


def changed(before: Path, after: Path) -> tuple[int, int, int, int] | None:
    with Image.open(before) as a, Image.open(after) as b:
        return ImageChops.difference(a.convert("RGB"), b.convert("RGB")).getbbox()


# ------------------------------------------------------------------------------------ OCR


def parse(text: str) -> list[tuple[tuple[int, ...], str]]:
    regions = []
    for line in text.splitlines():
        match = LINE.match(line)
        assert match, f"not in the official OCR format: {line!r}"
        regions.append((tuple(int(v) for v in match.groups()[:4]), match.group(5)))
    return regions


def test_ocr_reads_the_receipt_total(engine: object, data_copy: Dataset, context) -> None:
    result = call(data_copy, "OCR", context, image="image/image_0.jpg")
    (item,) = result.items
    assert item.type == "text"
    regions = parse(item.content)
    texts = [text for _, text in regions]
    assert "TOTAL" in texts
    i = texts.index("TOTAL")
    # Reading order keeps the amount on its label's line.
    assert texts[i + 1] == "21.08"
    box, _ = regions[i]
    assert box[0] < box[2]
    assert box[1] < box[3]
    # The reference OCR output of query 0 has TOTAL at (64, 508, 141, 524).
    reference = (64, 508, 141, 524)
    assert all(abs(a - b) <= 8 for a, b in zip(box, reference, strict=True))
    # Lines go top to bottom.
    tops = [b[1] for b, _ in regions]
    assert tops[0] == min(tops)
    assert texts[0] == "FRESHMART"
    assert texts[-1].replace(" ", "") == "THANKYOUFORSHOPPING!"


def test_ocr_of_an_empty_image_is_empty_text(engine: object, data_copy, context) -> None:
    assert call(data_copy, "OCR", context, image=str(blank(context))).format() == ""


def test_reading_order_groups_lines() -> None:
    r = ocr.Region
    regions = [r(300, 12, 340, 30, "1.29"), r(10, 50, 60, 70, "b"), r(10, 10, 80, 28, "a")]
    assert [x.text for x in ocr.reading_order(regions)] == ["a", "1.29", "b"]
    assert ocr.to_region([[1.4, 2], [9.6, 2.2], [9, 8], [1, 8]], " x ") == r(1, 2, 10, 8, "x")


# --------------------------------------------------------------------------------- DrawBox


def test_draw_box_changes_the_border_only(data_copy: Dataset, context) -> None:
    source = data_copy.root / "image" / "image_0.jpg"
    result = call(data_copy, "DrawBox", context, image=str(source), bbox="(100, 200, 300, 400)")
    out = output_image(result, context)
    with Image.open(source) as a, Image.open(out) as b:
        before, after = a.convert("RGB"), b.convert("RGB")
    assert after.size == before.size
    for xy in ((200, 200), (100, 300), (300, 300), (200, 400)):  # on the border
        assert after.getpixel(xy) != before.getpixel(xy)
        assert after.getpixel(xy) == (255, 0, 0)
    for xy in ((200, 300), (20, 20), (420, 630), (150, 250)):  # inside and far away
        assert after.getpixel(xy) == before.getpixel(xy)
    box = ImageChops.difference(before, after).getbbox()
    assert box is not None
    assert box[0] >= 95
    assert box[1] >= 195
    assert box[2] <= 306
    assert box[3] <= 406


def test_draw_box_annotation_goes_above_the_box(data_copy: Dataset, context) -> None:
    source = blank(context)
    result = call(
        data_copy,
        "DrawBox",
        context,
        image=str(source),
        bbox="(100, 100, 200, 200)",
        annotation="green ball",
    )
    box = changed(source, output_image(result, context))
    assert box is not None
    assert box[1] < 95  # the label is above the box
    assert box[3] <= 206
    # No room above: the label moves inside the box instead of off the image.
    result = call(
        data_copy,
        "DrawBox",
        context,
        image=str(source),
        bbox="(10, 0, 200, 200)",
        annotation="top",
    )
    box = changed(source, output_image(result, context))
    assert box is not None
    assert box[3] <= 206


@pytest.mark.parametrize("bbox", ["(1, 2, 3)", "left", "", "(300, 10, 100, 50)", None])
def test_draw_box_rejects_bad_boxes(data_copy: Dataset, context, bbox) -> None:
    with pytest.raises(GtaToolError, match="bbox"):
        call(data_copy, "DrawBox", context, image="image/image_0.jpg", bbox=bbox)
    assert not context.output_dir.exists() or not list(context.output_dir.glob("DrawBox-*"))


# --------------------------------------------------------------------------------- AddText


@pytest.mark.parametrize("position", POSITIONS)
def test_add_text_keyword_positions(data_copy: Dataset, context, position: str) -> None:
    source = blank(context)
    result = call(data_copy, "AddText", context, image=str(source), text="HELLO", position=position)
    out = output_image(result, context)
    box = changed(source, out)
    assert box is not None
    w, h = 400, 300
    margin, tol = w // 20, 6
    left, top, right, bottom = box
    expected_x = {"l": (left, margin), "m": ((left + right) / 2, w / 2), "r": (right, w - margin)}
    expected_y = {"t": (top, margin), "m": ((top + bottom) / 2, h / 2), "b": (bottom, h - margin)}
    got, want = expected_x[position[0]]
    assert abs(got - want) <= tol, (position, box)
    got, want = expected_y[position[1]]
    assert abs(got - want) <= tol, (position, box)
    assert right - left < w / 2  # only the text, not the whole picture
    with Image.open(out) as image:
        colors = image.convert("RGB").crop(box).getcolors(maxcolors=1 << 20) or []
        red = [c for _, c in colors if c[0] > 200 and c[1] < 80]
    assert red  # default colour is red


def test_add_text_at_a_point(data_copy: Dataset, context) -> None:
    source = blank(context)
    result = call(
        data_copy,
        "AddText",
        context,
        image=str(source),
        text="HELLO",
        position="(50, 120)",
        color="blue",
    )
    box = changed(source, output_image(result, context))
    assert box is not None
    assert abs(box[0] - 50) <= 4
    assert 105 <= box[3] <= 121  # (x, y) is the text's left-bottom corner
    assert box[2] < 200


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"position": "somewhere"}, "position"),
        ({"position": "(1, 2, 3)"}, "position"),
        ({"position": "mt", "color": "notacolour"}, "color"),
        ({"position": "mt", "text": ""}, "text"),
    ],
)
def test_add_text_rejects_bad_arguments(data_copy: Dataset, context, arguments, message) -> None:
    arguments = {"image": "image/image_0.jpg", "text": "hi", **arguments}
    with pytest.raises(GtaToolError, match=message):
        call(data_copy, "AddText", context, **arguments)


def test_outputs_can_be_edited_again(data_copy: Dataset, context) -> None:
    first = call(data_copy, "DrawBox", context, image="image/image_5.jpg", bbox="(1, 1, 50, 50)")
    second = call(
        data_copy, "AddText", context, image=first.items[0].content, text="x", position="mm"
    )
    assert output_image(second, context) != output_image(first, context)


# ----------------------------------------------------------------------------- confinement


def test_accepts_relative_absolute_and_output_paths(data_copy: Dataset, context) -> None:
    real = Path(os.path.realpath(data_copy.root / "image" / "image_0.jpg"))
    assert resolve_image("image/image_0.jpg", context) == real
    assert resolve_image(str(data_copy.root / "image" / "image_0.jpg"), context) == real
    assert resolve_image("image/../image/image_0.jpg", context) == real
    produced = blank(context)
    assert resolve_image(str(produced), context) == Path(os.path.realpath(produced))


def test_refuses_paths_outside(data_copy: Dataset, context) -> None:
    outside = data_copy.root.parent / "outside.jpg"
    shutil.copy(data_copy.root / "image" / "image_0.jpg", outside)
    link = data_copy.root / "image" / "escape.jpg"
    if not link.is_symlink():
        link.symlink_to(outside)
    for value in (
        "../outside.jpg",
        "image/../../outside.jpg",
        str(outside),
        "/etc/passwd",
        "image/escape.jpg",
    ):
        with pytest.raises(GtaToolError, match="outside"):
            resolve_image(value, context)
        for tool, extra in (("OCR", {}), ("DrawBox", {"bbox": "(1, 1, 5, 5)"})):
            with pytest.raises(GtaToolError, match="outside"):
                call(data_copy, tool, context, image=value, **extra)


def test_symlink_inside_is_allowed(data_copy: Dataset, context) -> None:
    link = data_copy.root / "image" / "alias.jpg"
    if not link.is_symlink():
        link.symlink_to(data_copy.root / "image" / "image_0.jpg")
    assert resolve_image("image/alias.jpg", context).name == "image_0.jpg"


@pytest.mark.parametrize("value", ["image/nope.jpg", None, "", 3, "image"])
def test_refuses_missing_and_non_paths(data_copy: Dataset, context, value) -> None:
    with pytest.raises(GtaToolError) as info:
        resolve_image(value, context)
    if value == "image/nope.jpg":
        assert "image/nope.jpg" in str(info.value)


def test_unreadable_image_is_a_tool_error(data_copy: Dataset, context) -> None:
    bogus = new_output_path(context, "bogus", ".jpg")
    bogus.write_text("not an image")
    with pytest.raises(GtaToolError, match="cannot read image"):
        call(data_copy, "AddText", context, image=str(bogus), text="x", position="mm")


def test_new_output_paths_are_unique(context) -> None:
    paths = {new_output_path(context, "Draw Box/../x", ".png") for _ in range(50)}
    assert len(paths) == 50
    assert all(p.parent == context.output_dir and "/" not in p.name for p in paths)


# ------------------------------------------------------------------------ through the backend


def test_local_backend_serves_the_image_tools(engine: object, data_copy: Dataset, context) -> None:
    backend = LocalBackend()
    for tool in ("OCR", "DrawBox", "AddText"):
        assert backend.offers(tool)
    meta = data_copy.toolmeta
    text = backend.call(
        ToolInvocation(meta["OCR"], {"image": "image/image_0.jpg"}, {"image": "image/image_0.jpg"}),
        context,
    )
    assert "TOTAL" in text.format()
    args = {"image": "image/image_5.jpg", "bbox": "(688, 256, 752, 320)", "annotation": "green"}
    boxed = backend.call(ToolInvocation(meta["DrawBox"], args, args), context)
    path = output_image(boxed, context)
    args = {"image": str(path), "text": "Best month", "position": "mt", "color": "black"}
    texted = backend.call(ToolInvocation(meta["AddText"], args, args), context)
    assert output_image(texted, context).exists()
    assert texted.format().startswith("[image](")
