"""Hostile images and hostile image-tool arguments end as notes and tool errors, never worse.

A decompression bomb (a small PNG that declares 40000x25000 pixels) must not reach the HTML
report as its raw bytes for the browser to decode; a link or a FIFO among a case's images must
not be read. DrawBox and AddText, whatever a model passes them (a million characters of text,
coordinates of 300 digits, NaN, colours Pillow has never heard of), answer with an image or a
tool error the model sees, never an exception that errors the case.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from pytest_gta.errors import GtaToolError
from pytest_gta.report.images import MAX_PIXELS, ImageStore, declared_size
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.validation import load_dataset
from tests.helpers.gta_run import FAST_SIM
from tool_backends import image_tools

SAMPLE = Path(__file__).resolve().parent.parent / "fixtures" / "gta_sample"


def bomb_png(width: int = 40_000, height: int = 25_000) -> bytes:
    """A valid 1-bit PNG of ``width`` x ``height`` white pixels: about 150 KB on disk."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    row = b"\x00" + b"\xff" * ((width + 7) // 8)
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bomb") / "bomb.png"
    path.write_bytes(bomb_png())
    return path


# -- the report's image store -------------------------------------------------------------------


def test_a_decompression_bomb_becomes_a_placeholder_not_raw_bytes(tmp_path, bomb):
    store = ImageStore(tmp_path / "store")
    store.root.mkdir()
    key = store.add(bomb)
    assert key is not None
    stored = store.get(key)
    assert stored is not None
    assert (stored.width, stored.height) == (40_000, 25_000)
    shown = {store.read(stored, "thumb"), store.read(stored, "full")}
    assert bomb.read_bytes() not in shown
    (picture,) = shown
    with Image.open(io.BytesIO(picture)) as placeholder:
        assert placeholder.size[0] * placeholder.size[1] < 100_000
    assert any("40000x25000 pixels" in p for p in store.problems), store.problems


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
def test_between_the_limit_and_pillows_own_no_image_is_decoded(tmp_path):
    """Pillow only warns up to twice its limit; the store refuses from its own limit on."""
    path = tmp_path / "tall.png"
    path.write_bytes(bomb_png(8, MAX_PIXELS // 8 + 8))
    store = ImageStore(tmp_path / "store")
    store.root.mkdir()
    started = time.perf_counter()
    stored = store.get(store.add(path) or "")
    assert time.perf_counter() - started < 5  # bound: catches decoding the bomb
    assert stored is not None
    assert stored.thumb.endswith(".placeholder.png")


def test_without_pillow_a_bomb_is_left_out(tmp_path, bomb, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pil(name, *args, **kwargs):
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pil)
    store = ImageStore(tmp_path / "store")
    store.root.mkdir()
    assert store.add(bomb) is None
    assert any("40000x25000 pixels" in p for p in store.problems), store.problems


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_an_image_that_is_a_link_or_a_fifo_is_not_read(tmp_path, kind):
    private = tmp_path / "private.png"
    Image.new("RGB", (8, 8), "red").save(private)
    path = tmp_path / "case.png"
    if kind == "symlink":
        path.symlink_to(private)
    else:
        os.mkfifo(path)
    store = ImageStore(tmp_path / "store")
    store.root.mkdir()
    assert store.add(path) is None
    assert any(str(path) in p for p in store.problems), store.problems


@settings(max_examples=40, deadline=None)
@given(
    size=st.tuples(st.integers(1, 300), st.integers(1, 300)),
    fmt=st.sampled_from(["PNG", "GIF", "JPEG", "WEBP"]),
    lossless=st.booleans(),
)
def test_declared_size_reads_what_pillow_wrote(size, fmt, lossless):
    out = io.BytesIO()
    options = {"lossless": lossless} if fmt == "WEBP" else {}
    Image.new("RGB", size, "blue").save(out, format=fmt, **options)
    assert declared_size(out.getvalue()) == size


@given(data=st.binary(max_size=64) | st.builds(lambda b: b"\xff\xd8" + b, st.binary()))
def test_declared_size_never_raises(data):
    size = declared_size(data)
    assert size is None or all(isinstance(n, int) and n >= 0 for n in size)


def test_the_html_report_shows_a_placeholder_for_a_bomb(pytester, bomb):
    """A real run whose case images include the bomb: the page carries no byte of it."""
    data = pytester.path / "data"
    shutil.copytree(SAMPLE, data)
    shutil.copy(bomb, data / "image" / "image_0.jpg")
    result = pytester.runpytest(
        FAST_SIM,
        f"--gta-data={data}",
        "--gta-model=oracle",
        "--gta-mode=e2e",
        "--gta-ids=0",
        "--gta-report=r.json",
        "--gta-report-html=r.html",
    )
    result.assert_outcomes(passed=1)
    page = (pytester.path / "r.html").read_text()
    import base64

    raw = base64.b64encode(bomb.read_bytes()[:3000]).decode()[:2000]
    assert raw not in page
    (case,) = json.loads((pytester.path / "r.json").read_text())["cases"]
    assert case["images"], "the case still lists its image"


# -- DrawBox and AddText arguments --------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("tools")
    shutil.copytree(SAMPLE, base / "data")
    dataset = load_dataset(base / "data")
    return dataset, ToolContext(dataset, dataset["0"], base / "out")


NUMBER = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e308", "9" * 400, "-" + "9" * 400, "0.5"]),
)
TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["x" * 1_000_001, "\n" * 5000, "\x00", "\ud800", "W" * 20_000]),
)
COLOR = st.one_of(
    st.none(),
    st.sampled_from(["red", "#" + "f" * 100, "rgb(1e309, 0, 0)", "hsl(nan, 1%, 1%)", "", "\x00"]),
    st.text(max_size=20),
)


def call(dataset, context, tool: str, arguments: dict) -> str:
    invocation = ToolInvocation(dataset.toolmeta[tool], arguments, {})
    function = {"DrawBox": image_tools.draw_box, "AddText": image_tools.add_text}[tool]
    try:
        (item,) = function(invocation, context).items
    except GtaToolError as exc:
        return f"error: {exc}"
    assert Path(item.content).is_file()
    return "image"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(box=st.lists(NUMBER, min_size=0, max_size=5), annotation=st.none() | TEXT)
def test_draw_box_answers_any_arguments_with_an_image_or_a_tool_error(world, box, annotation):
    dataset, context = world
    arguments = {"image": "image/image_0.jpg", "bbox": "(" + ", ".join(box) + ")"}
    if annotation is not None:
        arguments["annotation"] = annotation
    started = time.perf_counter()
    call(dataset, context, "DrawBox", arguments)
    assert time.perf_counter() - started < 10  # bound: catches an unclipped fill


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=TEXT,
    position=st.one_of(
        st.sampled_from(["lt", "mm", "rb", "", "xx"]),
        st.tuples(NUMBER, NUMBER).map(lambda xy: f"({xy[0]}, {xy[1]})"),
    ),
    color=COLOR,
)
def test_add_text_answers_any_arguments_with_an_image_or_a_tool_error(world, text, position, color):
    dataset, context = world
    arguments = {"image": "image/image_0.jpg", "text": text, "position": position}
    if color is not None:
        arguments["color"] = color
    started = time.perf_counter()
    call(dataset, context, "AddText", arguments)
    assert time.perf_counter() - started < 10  # bound: catches an unclipped fill


def test_a_million_characters_of_text_is_the_model_s_tool_error(world):
    dataset, context = world
    for tool, arguments in (
        ("AddText", {"text": "x" * 1_000_001, "position": "lt"}),
        ("DrawBox", {"bbox": "(1, 2, 30, 40)", "annotation": "x" * 1_000_001}),
    ):
        answer = call(dataset, context, tool, {"image": "image/image_0.jpg", **arguments})
        assert answer == "error: ValueError('too many characters in string')", answer


def test_a_tall_image_that_asks_for_a_huge_font_is_a_tool_error(world):
    """The official font size grows with the image's height: 600,000 px high wants 32,142 px."""
    dataset, context = world
    context.output_dir.mkdir(exist_ok=True)
    tall = context.output_dir / "tall.png"
    Image.new("L", (2, 600_000)).save(tall)
    started = time.perf_counter()
    answer = call(dataset, context, "AddText", {"image": str(tall), "text": "W", "position": "mm"})
    assert answer.startswith("error: "), answer
    assert time.perf_counter() - started < 10  # bound: catches an unclipped fill
