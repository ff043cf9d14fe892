"""The ``local`` backend's OCR, DrawBox and AddText tools and their image-path confinement."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageChops, ImageDraw

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


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
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


#: Region texts as the tool prints them: stripped, on one line.
ONE_LINE = st.text(st.characters(blacklist_categories=["Cc", "Zl", "Zp"]), max_size=20).map(
    str.strip
)
REGION = st.builds(
    ocr.Region, *[st.integers(-5, 5000)] * 4, text=ONE_LINE.filter(lambda t: "\x85" not in t)
)


@given(regions=st.lists(REGION, max_size=8))
def test_parse_output_reads_back_the_official_format(regions: list[ocr.Region]) -> None:
    assert ocr.parse_output("\n".join(region.format() for region in regions)) == regions


def test_parse_output_keeps_text_outside_regions() -> None:
    r = ocr.Region
    assert ocr.parse_output("stray\n(1, 2, 3, 4) a\nmore\n\n(5, 6, 7, 8) b") == [
        r(0, 0, 0, 0, "stray"),
        r(1, 2, 3, 4, "a\nmore"),
        r(5, 6, 7, 8, "b"),
    ]


# --------------------------------------------------------------------------------- DrawBox


def blend(pixel: tuple[int, ...]) -> tuple[int, ...]:
    """A pixel under DrawBox's fill: red at alpha 64 composited over it."""
    return tuple(
        round((255 if i == 0 else 0) * 64 / 255 + v * (1 - 64 / 255)) for i, v in enumerate(pixel)
    )


def test_draw_box_outlines_and_tints_the_box(data_copy: Dataset, context) -> None:
    source = data_copy.root / "image" / "image_0.jpg"
    result = call(data_copy, "DrawBox", context, image=str(source), bbox="(100, 200, 300, 400)")
    out = output_image(result, context)
    with Image.open(source) as a, Image.open(out) as b:
        before, after = a.convert("RGB"), b.convert("RGB")
    assert after.size == before.size
    for xy in ((200, 200), (100, 300), (300, 300), (200, 400)):  # on the outline
        assert after.getpixel(xy) == (255, 0, 0)
    for xy in ((200, 300), (150, 250)):  # inside: a translucent red over the picture
        got, want = after.getpixel(xy), blend(before.getpixel(xy))
        assert all(abs(g - w) <= 1 for g, w in zip(got, want, strict=True)), (xy, got, want)
    for xy in ((20, 20), (420, 630), (99, 300), (301, 300)):  # outside
        assert after.getpixel(xy) == before.getpixel(xy)
    assert ImageChops.difference(before, after).getbbox() == (100, 200, 301, 401)


def test_draw_box_annotation_sits_above_the_box(data_copy: Dataset, context) -> None:
    source = blank(context)
    result = call(
        data_copy,
        "DrawBox",
        context,
        image=str(source),
        bbox="(100, 100, 200, 200)",
        annotation="green ball",
    )
    with Image.open(output_image(result, context)) as image:
        above = image.convert("RGB").crop((0, 0, 400, 100))
    label = ImageChops.difference(above, Image.new("RGB", above.size, "white")).getbbox()
    assert label is not None
    assert label[0] >= 99  # starts at x1
    assert label[3] <= 96  # its bottom 5 px above the box
    # With no room above, the official tool draws the label off the image: only the box shows.
    result = call(
        data_copy, "DrawBox", context, image=str(source), bbox="(10, 0, 200, 200)", annotation="x"
    )
    assert changed(source, output_image(result, context)) == (10, 0, 201, 201)


@pytest.mark.parametrize(
    ("bbox", "message"),
    [
        ("(1, 2, 3)", "ValueError('Expected 4 numbers, got (1, 2, 3).')"),
        ("left", "ValueError('Expected 4 numbers, got left.')"),
        ("", "ValueError('Expected 4 numbers, got .')"),
        ("29,000, 1, 2, 3", "ValueError('Expected 4 numbers, got 29,000, 1, 2, 3.')"),
        ("(300, 10, 100, 50)", "ValueError('x1 must be greater than or equal to x0')"),
        ("(10, 300, 50, 100)", "ValueError('y1 must be greater than or equal to y0')"),
        (None, "ValueError('Expected 4 numbers, got None.')"),  # str(None), as DefaultParser
    ],
)
def test_draw_box_fails_on_bad_boxes_as_the_official_tool(
    data_copy: Dataset, context, bbox, message
) -> None:
    with pytest.raises(GtaToolError) as info:
        call(data_copy, "DrawBox", context, image="image/image_0.jpg", bbox=bbox)
    assert str(info.value) == message
    assert not context.output_dir.exists() or not list(context.output_dir.glob("DrawBox-*"))


def test_draw_box_reads_numbers_wherever_they_stand(data_copy: Dataset, context) -> None:
    """The release writes boxes as ``(x1, y1, x2, y2)``, ``x1, y1, x2, y2`` and ``x1,y1,x2,y2``."""
    source = blank(context)
    for bbox in (
        "(10, 20, 30, 40)",
        "10, 20, 30, 40",
        "10,20,30,40",
        "left 10 top 20 right 30 bottom 40",
    ):
        result = call(data_copy, "DrawBox", context, image=str(source), bbox=bbox)
        assert changed(source, output_image(result, context)) == (10, 20, 31, 41)


def test_a_tiny_image_fails_as_officially(data_copy: Dataset, context) -> None:
    """The official font is ``int(height / 336 * 18)`` px: 0 under 19 px, which Pillow refuses."""
    source = blank(context, (40, 18))
    with pytest.raises(GtaToolError, match=r"^ValueError\('font size must be greater than 0"):
        call(data_copy, "DrawBox", context, image=str(source), bbox="(1, 1, 5, 5)")
    with pytest.raises(GtaToolError, match=r"^ValueError\('font size must be greater than 0"):
        call(data_copy, "AddText", context, image=str(source), text="x", position="mm")


NUMBER = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).map(lambda v: round(v, 2))


@given(
    numbers=st.lists(NUMBER, min_size=4, max_size=4), layout=st.sampled_from(["({})", "{}", "[{}]"])
)
def test_parse_numbers_reads_back_what_was_written(numbers: list[float], layout: str) -> None:
    text = layout.format(", ".join(repr(n) for n in numbers))
    assert image_tools.parse_numbers(text, 4) == tuple(numbers)
    with pytest.raises(ValueError, match=r"^Expected 3 numbers, got "):
        image_tools.parse_numbers(text, 3)


#: Near the 60x40 image's edges, where Pillow's own overdraw could show, or far beyond them.
COORDINATE = st.one_of(st.integers(-12, 72), st.integers(-3000, 3000))


@settings(max_examples=100, deadline=None)
@example(xs=[0, 0], ys=[-2, -1])
@example(xs=[-7, 70], ys=[-5, -5])
@example(xs=[59, 66], ys=[40, 44])
@given(
    xs=st.lists(COORDINATE, min_size=2, max_size=2), ys=st.lists(COORDINATE, min_size=2, max_size=2)
)
def test_clipping_a_box_changes_no_pixel(xs: list[int], ys: list[int]) -> None:
    """Clipping to just outside the image draws what the unclipped box draws."""
    (x1, x2), (y1, y2) = sorted(xs), sorted(ys)
    size = (60, 40)
    pictures = []
    for box in ((x1, y1, x2, y2), image_tools._clip((x1, y1, x2, y2), size)):
        canvas = Image.new("RGBA", size, (0, 0, 0, 0))
        ImageDraw.Draw(canvas).rectangle(
            box, fill=image_tools.BOX_FILL, outline=image_tools.BOX_RED
        )
        pictures.append(canvas.tobytes())
    assert pictures[0] == pictures[1]


def test_a_huge_box_is_drawn_at_once(data_copy: Dataset, context) -> None:
    """Unclipped, Pillow fills ``(0, 0, 1e12, 1e12)`` row by row for seconds."""
    source = blank(context)
    start = time.monotonic()
    result = call(
        data_copy, "DrawBox", context, image=str(source), bbox=f"(0, 0, {10**12}, {10**12})"
    )
    assert time.monotonic() - start < 2  # bound: catches an unclipped fill
    assert changed(source, output_image(result, context)) == (0, 0, 400, 300)


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
        ({"position": "somewhere"}, "ValueError('Invalid position string.')"),
        ({"position": "(1, 2, 3)"}, "ValueError('Invalid position string.')"),
        ({"position": "MT"}, "ValueError('Invalid position string.')"),  # the codes are exact
        ({"position": " mt"}, "ValueError('Invalid position string.')"),
        (
            {"position": "mt", "color": "notacolour"},
            "ValueError(\"unknown color specifier: 'notacolour'\")",
        ),
        ({"position": "mt", "color": ""}, "ValueError(\"unknown color specifier: ''\")"),
        (
            {"position": "mb", "text": "two\nlines"},
            "ValueError('anchor not supported for multiline text')",
        ),
    ],
)
def test_add_text_fails_as_the_official_tool(
    data_copy: Dataset, context, arguments, message
) -> None:
    arguments = {"image": "image/image_0.jpg", "text": "hi", **arguments}
    with pytest.raises(GtaToolError) as info:
        call(data_copy, "AddText", context, **arguments)
    assert str(info.value) == message


def test_add_text_keeps_the_image_mode_and_accepts_empty_text(data_copy: Dataset, context) -> None:
    """As the official tool: drawn on a copy in the source's own mode; no text draws nothing."""
    source = new_output_path(context, "gray", ".png")
    Image.new("L", (400, 300), 255).save(source)
    result = call(data_copy, "AddText", context, image=str(source), text="", position="mm")
    with Image.open(output_image(result, context)) as image:
        assert image.mode == "L"
    assert changed(source, output_image(result, context)) is None
    result = call(data_copy, "AddText", context, image=str(source), text="x", position="lm")
    assert changed(source, output_image(result, context)) is not None


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
        with pytest.raises(GtaToolError, match="is not one of the task's files"):
            resolve_image(value, context)
        for tool, extra in (("OCR", {}), ("DrawBox", {"bbox": "(1, 1, 5, 5)"})):
            with pytest.raises(GtaToolError, match="is not one of the task's files"):
                call(data_copy, tool, context, image=value, **extra)


def test_refuses_the_benchmarks_own_files(data_copy: Dataset, context) -> None:
    for value in ("dataset.json", "image/../toolmeta.json", str(data_copy.root / "dataset.json")):
        for tool, extra in (("OCR", {}), ("DrawBox", {"bbox": "(1, 1, 5, 5)"})):
            with pytest.raises(GtaToolError, match="is one of the benchmark's own files"):
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


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
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
