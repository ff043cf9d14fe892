"""The ``workflow`` backend: GTA-2's 24 GTA-Workflow tools on real files.

Files are made here for real (a WAV with NumPy and soundfile, MP4s with ffmpeg, documents by the
generators) and read back by the readers, so each round trip checks both sides.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageFilter

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaToolError
from pytest_gta.files import inside
from pytest_gta.tools import ToolBackendContext, ToolContext, ToolInvocation, ToolSet, ToolSpec
from pytest_gta.types import ToolResult
from pytest_gta.validation import INPUT_TYPES, OUTPUT_TYPES
from tests.helpers.optional import require
from tests.helpers.paths import ROOT
from tests.helpers.release import find_release
from tool_backends import (
    workflow_audio,
    workflow_builders,
    workflow_files,
    workflow_media,
    workflow_parsers,
)
from tool_backends.workflow import (
    PERCEPTION_TOOLS,
    TOOLMETA,
    WORKFLOW_TOOLS,
    WorkflowBackend,
    make_workflow,
    workflow_metas,
)
from tool_backends.workflow_io import module_text

require("workflow")

import soundfile  # noqa: E402 - after require: the workflow extra brings it

METAS = workflow_metas()
READERS = ("ReadCSV", "ReadDOCX", "ReadPDF", "ReadPPTX", "ReadXLSX")
RATE = 22_050
#: GTA-Atomic's tools that GTA-Workflow keeps (all but TextToBbox).
ATOMIC = frozenset(
    {"Calculator", "GoogleSearch", "Plot", "Solver", "OCR", "ImageDescription",
     "CountGivenObject", "MathOCR", "DrawBox", "AddText", "TextToImage", "ImageStylization",
     "RegionAttributeDescription"}
)  # fmt: skip
PARAM_KEYS = {"type", "name", "description", "optional", "default", "filetype"}


@pytest.fixture(scope="module")
def backend() -> WorkflowBackend:
    return WorkflowBackend()


def call(backend: WorkflowBackend, context: ToolContext, tool: str, **arguments: Any) -> ToolResult:
    return backend.call(ToolInvocation(METAS[tool], arguments, {}), context)


def produced(result: ToolResult, context: ToolContext, kind: str) -> Path:
    """The one file a tool answered, checked to lie inside the run's output directory."""
    (item,) = result.items
    assert item.type == kind
    path = Path(item.content)
    assert path.is_file()
    assert inside(str(path.resolve()), str(context.output_dir.resolve()))
    return path


def text(result: ToolResult) -> str:
    (item,) = result.items
    assert item.type == "text"
    return str(item.content)


# -- registration and metadata --------------------------------------------------------------


def test_entry_point_is_registered() -> None:
    # The installed distribution may be another checkout's: the line is read from this one.
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split('[project.entry-points."pytest_gta.tools"]\n')[1].split("\n\n")[0]
    assert 'workflow = "tool_backends.workflow:make_workflow"' in section.splitlines()
    extras = text.split("[project.optional-dependencies]\n")[1].split("\n[")[0]
    assert "\nworkflow = [\n" in extras


def _toolmeta() -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(TOOLMETA.read_text("utf-8"))
    return raw


def test_toolmeta_lists_the_37_workflow_tools_in_the_official_format() -> None:
    raw = _toolmeta()
    assert len(raw) == 37
    assert set(raw) == set(WORKFLOW_TOOLS) | PERCEPTION_TOOLS | ATOMIC
    for name, meta in raw.items():
        assert meta["name"] == name
        assert set(meta) == {"name", "description", "inputs", "outputs"}
        assert all(p["type"] in INPUT_TYPES and p["name"] for p in meta["inputs"]), name
        assert all(p["type"] in OUTPUT_TYPES for p in meta["outputs"]), name
        assert all(set(p) == PARAM_KEYS for p in meta["inputs"] + meta["outputs"]), name
    assert [p["name"] for p in raw["ReadCSV"]["inputs"]] == ["csv_file"]
    assert [p["name"] for p in raw["Prover"]["inputs"]] == ["theorem"]
    assert [p["type"] for p in raw["VideoClip"]["outputs"]] == ["video"]


def test_toolmeta_keeps_the_release_atomic_tools_as_they_are() -> None:
    require("release")
    release = find_release()
    assert release is not None
    official = json.loads((release / "toolmeta.json").read_text("utf-8"))
    raw = _toolmeta()
    assert {name: official[name] for name in ATOMIC} == {name: raw[name] for name in ATOMIC}


def test_backend_serves_the_cpu_tools_and_names_what_serves_the_perception_tools(
    dataset: Dataset, context: ToolContext, tmp_path: Path
) -> None:
    require("ffmpeg")
    built = make_workflow(ToolSpec("workflow", "workflow"), ToolBackendContext(dataset, tmp_path))
    assert isinstance(built, WorkflowBackend)
    assert built.tools == set(WORKFLOW_TOOLS)
    assert built.describe()["tools"] == sorted(WORKFLOW_TOOLS)
    for tool in PERCEPTION_TOOLS:
        assert not built.offers(tool)
        reason = built.unavailable_reason(tool)
        assert reason is not None
        assert tool in reason
        assert "--gta-tools" in reason
        assert "agentlego=" in reason
        with pytest.raises(GtaToolError, match=tool):
            call(built, context, tool, video="clip.mp4")


# -- file generators and readers -------------------------------------------------------------


@pytest.mark.slow
def test_csv_and_xlsx_round_trip(backend: WorkflowBackend, context: ToolContext) -> None:
    rows = [["city", "people"], ["Paris", 2102650], ["Zürich, CH", 3.5]]
    data = json.dumps(rows)
    csv_path = produced(
        call(backend, context, "CsvFileGenerator", filename="towns", data_str=data), context, "file"
    )
    assert csv_path.name == "towns.csv"
    expected = 'city,people\nParis,2102650\n"Zürich, CH",3.5\n'
    assert text(call(backend, context, "ReadCSV", csv_file=str(csv_path))) == expected
    xlsx = produced(
        call(backend, context, "XlsxFileGenerator", filename="towns", data_str=data),
        context,
        "file",
    )
    assert text(call(backend, context, "ReadXLSX", file=str(xlsx))) == expected


@pytest.mark.slow
def test_docx_round_trip_embeds_confined_images_only(
    backend: WorkflowBackend, context: ToolContext
) -> None:
    content = "第一段 First paragraph\n\n{{image_1}}\n\nSecond paragraph {{image_2}}"
    result = call(
        backend,
        context,
        "DocxFileGenerator",
        filename="report",
        content=content,
        image_paths="image/image_0.jpg, /etc/hostname",
    )
    path = produced(result, context, "file")
    with zipfile.ZipFile(path) as archive:
        media = [n for n in archive.namelist() if n.startswith("word/media/")]
    assert len(media) == 1  # the dataset's image; /etc/hostname is outside and refused
    read = text(call(backend, context, "ReadDOCX", file=str(path)))
    assert read.splitlines() == [
        "第一段 First paragraph",
        "",
        "Second paragraph ",
        "[图片文件未找到: /etc/hostname]",
    ]


@pytest.mark.slow
def test_docx_markdown_renders_headings_lists_and_bold(
    backend: WorkflowBackend, context: ToolContext
) -> None:
    markdown = "# Title\n\n- one **bold**\n- two\n\nplain *it*"
    result = call(
        backend,
        context,
        "DocxFileGenerator",
        filename="md",
        content=markdown,
        render_markdown=True,
    )
    path = produced(result, context, "file")
    read = text(call(backend, context, "ReadDOCX", file=str(path)))
    assert read.splitlines() == ["Title", "one bold", "two", "plain it"]


@pytest.mark.slow
def test_pdf_round_trip(backend: WorkflowBackend, context: ToolContext) -> None:
    content = "Quarterly report <draft> & notes\nline two\n\n{{image_1}}\n\nThe end."
    result = call(
        backend,
        context,
        "PdfFileGenerator",
        filename="report",
        content=content,
        image_paths="image/image_0.jpg",
    )
    path = produced(result, context, "file")
    assert path.read_bytes().startswith(b"%PDF")
    read = text(call(backend, context, "ReadPDF", file=str(path)))
    for line in ("Quarterly report <draft> & notes", "line two", "The end."):
        assert line in read


@pytest.mark.slow
def test_pptx_round_trip(backend: WorkflowBackend, context: ToolContext) -> None:
    slides = [
        {"title": "Intro", "content": "Hello {{image_1}} world"},
        {"title": "两", "content": "B"},
    ]
    result = call(
        backend,
        context,
        "PptxFileGenerator",
        filename="deck",
        slides_content_str=json.dumps(slides),
        image_paths="image/image_0.jpg",
    )
    path = produced(result, context, "file")
    read = text(call(backend, context, "ReadPPTX", file=str(path)))
    # Each body placeholder starts with the empty paragraph the official tool leaves too.
    assert read.split("\n") == ["Intro", "", "Hello", "world", "两", "", "B"]
    with zipfile.ZipFile(path) as archive:
        assert len([n for n in archive.namelist() if n.startswith("ppt/media/")]) == 1


def test_html_generator_wraps_fragments(backend: WorkflowBackend, context: ToolContext) -> None:
    fence = "`" * 3
    result = call(
        backend,
        context,
        "HtmlFileGenerator",
        filename="page.html",
        html_code=f"Here:\n{fence}html\n<h1>Hi</h1>\n{fence}",
    )
    path = produced(result, context, "file")
    assert path.name == "page.html"
    page = path.read_text("utf-8")
    assert page.startswith("<!doctype html>")
    assert "<h1>Hi</h1>" in page


@pytest.mark.parametrize(
    ("arguments", "refused"),
    [
        ({"filename": "../escape"}, "refused filename"),
        ({"filename": "a/b"}, "refused filename"),
        ({"filename": "x", "output_dir": "/tmp"}, "refused output_dir"),
        ({"filename": "x", "output_dir": "../.."}, "refused output_dir"),
        ({"filename": "x\x00y"}, "refused filename"),
    ],
)
def test_generators_refuse_paths_out_of_the_output_directory(
    backend: WorkflowBackend, context: ToolContext, arguments: dict[str, str], refused: str
) -> None:
    with pytest.raises(GtaToolError, match=refused):
        call(backend, context, "CsvFileGenerator", data_str="[[1]]", **arguments)
    outside = context.output_dir.parent
    assert sorted(p.name for p in outside.iterdir() if p != context.output_dir) == []


def test_output_dir_inside_is_used(backend: WorkflowBackend, context: ToolContext) -> None:
    result = call(
        backend, context, "CsvFileGenerator", filename="t", data_str="[[1]]", output_dir="sub"
    )
    path = produced(result, context, "file")
    assert path.parent.parent == (context.output_dir / "sub").resolve()
    assert path.read_bytes() == b"1\r\n"  # csv.writer's own line ends, as officially


def test_bad_rows_give_the_official_message(backend: WorkflowBackend, context: ToolContext) -> None:
    with pytest.raises(GtaToolError, match="Invalid data format"):
        call(backend, context, "CsvFileGenerator", filename="t", data_str="[[1]")


def test_readers_refuse_files_outside_the_allowed_directories(
    backend: WorkflowBackend, context: ToolContext
) -> None:
    with pytest.raises(GtaToolError, match="is not one of the task's files or the run's outputs"):
        call(backend, context, "ReadCSV", csv_file="/etc/passwd")


@pytest.mark.parametrize("tool", READERS)
@pytest.mark.parametrize("name", ["dataset.json", "toolmeta.json", "image/../dataset.json"])
def test_readers_refuse_the_benchmarks_own_files(
    backend: WorkflowBackend, context: ToolContext, tool: str, name: str
) -> None:
    """Refused before anything is read or parsed: the answers never reach a sandbox."""
    parameter = str(METAS[tool].inputs[0].name)
    for spelled in (name, str(context.dataset.root / name)):
        with pytest.raises(GtaToolError, match="is one of the benchmark's own files"):
            call(backend, context, tool, **{parameter: spelled})


# -- the generators' limits -----------------------------------------------------------------


@pytest.mark.parametrize("module", [workflow_builders, workflow_parsers])
def test_the_sandboxs_programs_have_the_standard_library_at_their_top(module: Any) -> None:
    """The sandbox shows the Python paths, not this checkout; a fence would cut the program."""
    text = module_text(module.__file__)
    tree = ast.parse(text)
    top = {
        alias.name.split(".")[0]
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert top <= set(sys.stdlib_module_names) | {"__future__"}
    assert "`" * 3 not in text


#: A deck past anything a task asks for: python-pptx took 15 minutes on it in pytest's process.
SLIDES = json.dumps([{"title": f"Slide {n}", "content": "text " * 20} for n in range(20_000)])


@pytest.mark.slow
def test_a_20000_slide_deck_ends_at_the_generators_time_limit_as_a_tool_error(
    backend: WorkflowBackend, context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generators' own limit (20 s, as docs/tools.md says), read at each call: lowered to
    3 s here, so the test waits for the mechanism, not for the shipped number."""
    assert workflow_files.GENERATOR_TIMEOUT_S == 20.0
    monkeypatch.setattr(workflow_files, "GENERATOR_TIMEOUT_S", 3.0)
    started = time.monotonic()
    with pytest.raises(GtaToolError) as stopped:
        call(backend, context, "PptxFileGenerator", filename="deck", slides_content_str=SLIDES)
    limit = 3.0
    assert str(stopped.value) == (
        f"PptxFileGenerator did not finish: time limit exceeded ({limit:g} s wall clock)"
    )
    assert time.monotonic() - started < limit + 60  # bound: catches a hang
    assert not context.output_dir.exists() or list(context.output_dir.rglob("*.pptx")) == []


@pytest.mark.slow
def test_a_generator_call_started_near_the_cases_deadline_gets_the_time_left(
    backend: WorkflowBackend, context: ToolContext
) -> None:
    near = dataclasses.replace(context, deadline=time.monotonic() + 3)
    started = time.monotonic()
    with pytest.raises(GtaToolError, match=r"^PptxFileGenerator did not finish: time limit "):
        call(backend, near, "PptxFileGenerator", filename="deck", slides_content_str=SLIDES)
    assert time.monotonic() - started < 30  # bound: catches a hang
    with pytest.raises(GtaToolError, match="is up: this call was not run"):
        call(backend, near, "ReadCSV", csv_file="image/image_0.jpg")


def test_a_call_after_the_cases_deadline_does_not_reach_the_backend(
    dataset: Dataset, context: ToolContext
) -> None:
    class Counting:
        name = "counting"
        calls = 0

        def offers(self, tool: str) -> bool:
            return True

        def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
            Counting.calls += 1
            return ToolResult.text("ran")

    tools = ToolSet([Counting()])
    meta = METAS["CsvFileGenerator"]
    late = dataclasses.replace(context, deadline=time.monotonic() - 1)
    with pytest.raises(GtaToolError, match=r"^the task's time \(--gta-agent-timeout\) is up"):
        tools.runner({meta.name: tools.backends[0]}, late)(meta, {}, {})
    assert Counting.calls == 0
    assert tools.runner({meta.name: tools.backends[0]}, context)(meta, {}, {}).format() == "ran"


def test_generator_input_past_its_limit_is_refused_before_anything_is_built(
    backend: WorkflowBackend, context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workflow_files, "MAX_INPUT_BYTES", 4096)
    with pytest.raises(GtaToolError, match=r"more than the 4096 a file generator builds from"):
        call(backend, context, "PdfFileGenerator", filename="big", content="word " * 2000)
    assert not context.output_dir.exists() or list(context.output_dir.rglob("*")) == []


@pytest.mark.slow
def test_a_builder_that_fails_answers_the_official_text(
    backend: WorkflowBackend, context: ToolContext
) -> None:
    with pytest.raises(GtaToolError) as failed:
        call(backend, context, "XlsxFileGenerator", filename="t", data_str='[[{"a": 1}]]')
    assert str(failed.value) == "An error occurred: Cannot convert {'a': 1} to Excel"


def _truncated_docx() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>" * 1000)
    return out.getvalue()[:300]


def _claims_huge() -> bytes:
    """A zip whose one entry claims 4 GiB uncompressed."""
    data = bytearray(_zip_of({"word/document.xml": b"<w:document/>"}))
    central = data.rfind(b"PK\x01\x02")
    data[central + 24 : central + 28] = (0xFFFFFFF0).to_bytes(4, "little")
    return bytes(data)


def _zip_of(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, body in files.items():
            archive.writestr(name, body)
    return out.getvalue()


HOSTILE = [
    b"",
    _truncated_docx(),
    _claims_huge(),
    b"%PDF-1.7\n1 0 obj << /Type /Pages /Kids [1 0 R] /Count 99999999999999999999 >>\nendobj",
    b"a," + b"9" * 200_000 + b"\n",  # one field past csv's 131072-character limit
    b"PK\x03\x04" + b"\xff" * 64,
]


@pytest.mark.slow
@pytest.mark.parametrize("tool", READERS)
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=4096) | st.sampled_from(HOSTILE))
@example(HOSTILE[1])
@example(HOSTILE[2])
def test_readers_on_hostile_bytes_end_as_tool_errors(
    backend: WorkflowBackend, context: ToolContext, tool: str, data: bytes
) -> None:
    context.output_dir.mkdir(parents=True, exist_ok=True)
    path = context.output_dir / f"hostile-{tool}"
    path.write_bytes(data)
    parameter = str(METAS[tool].inputs[0].name)
    if tool == "ReadCSV" and _utf8_csv(data):  # any UTF-8 text is some CSV
        assert isinstance(text(call(backend, context, tool, **{parameter: str(path)})), str)
        return
    with pytest.raises(GtaToolError, match=f"{tool} cannot read hostile-{tool}"):
        call(backend, context, tool, **{parameter: str(path)})


def _utf8_csv(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return max((len(field) for field in data.split(b",")), default=0) < 131_072


# -- Prover ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_prover_proves_a_valid_theorem_and_refutes_a_false_one(
    backend: WorkflowBackend, context: ToolContext
) -> None:
    valid = "(declare-const x Int)\n(assert (forall ((y Int)) (> (+ y 1) y)))"
    assert text(call(backend, context, "Prover", theorem=valid)) == workflow_parsers.PROVED
    false = "(declare-const x Int)\n(assert (> (* x x) 0))"
    answer = text(call(backend, context, "Prover", theorem=false))
    assert answer == f"{workflow_parsers.COUNTEREXAMPLE}[x = 0]"
    broken = text(call(backend, context, "Prover", theorem="(assert (> y"))
    assert broken.startswith(workflow_parsers.PARSE_FAILED)


# -- ImageQualityTest -----------------------------------------------------------------------


def test_image_quality_tells_sharp_from_blurred(
    backend: WorkflowBackend, context: ToolContext
) -> None:
    context.output_dir.mkdir(parents=True)
    board = np.kron((np.indices((8, 8)).sum(axis=0) % 2) * 255, np.ones((16, 16)))
    sharp = Image.fromarray(board.astype(np.uint8)).convert("RGB")
    sharp.save(context.output_dir / "sharp.png")
    sharp.filter(ImageFilter.GaussianBlur(6)).save(context.output_dir / "blurred.png")
    found = {}
    for name in ("sharp", "blurred"):
        first, second = text(
            call(
                backend, context, "ImageQualityTest", image=str(context.output_dir / f"{name}.png")
            )
        ).splitlines()
        variance, blurry = first.removeprefix("Laplacian variance: ").split(", Blurry: ")
        found[name] = (float(variance), blurry)
        assert second.startswith("Resolution: 128x128, Brightness: 127.")
    assert found["sharp"][1] == "False"
    assert found["blurred"][1] == "True"
    assert found["sharp"][0] > 100 * found["blurred"][0]


# -- audio ----------------------------------------------------------------------------------


def _dominant(path: Path) -> float:
    data, rate = soundfile.read(str(path), always_2d=True)
    spectrum = np.abs(np.fft.rfft(data.mean(axis=1)))
    return float(np.fft.rfftfreq(len(data), 1 / rate)[spectrum.argmax()])


@pytest.fixture
def tone(context: ToolContext) -> Path:
    """Two seconds of a 440 Hz sine at 22050 Hz, in the output directory."""
    context.output_dir.mkdir(parents=True, exist_ok=True)
    t = np.arange(2 * RATE) / RATE
    path = context.output_dir / "tone.wav"
    soundfile.write(str(path), 0.5 * np.sin(2 * np.pi * 440 * t), RATE)
    return path


def test_audio_clip_cuts_the_asked_second(
    backend: WorkflowBackend, context: ToolContext, tone: Path
) -> None:
    result = call(backend, context, "AudioClipTool", audio=str(tone), start_time=0.5, end_time=1.5)
    path = produced(result, context, "audio")
    assert path.name == "audio_clip_0_500_1_500" + path.suffix
    info = soundfile.info(str(path))
    assert info.duration == pytest.approx(1.0, abs=0.03)  # MP3 frames pad the ends a little
    assert _dominant(path) == pytest.approx(440, abs=3)
    with pytest.raises(GtaToolError, match="end_time > start_time"):
        call(backend, context, "AudioClipTool", audio=str(tone), start_time=2, end_time=1)


@pytest.mark.parametrize(("steps", "expected"), [(12, 880.0), (-5, 440 * 2 ** (-5 / 12))])
def test_pitch_shifting_moves_the_dominant_frequency(
    backend: WorkflowBackend, context: ToolContext, tone: Path, steps: int, expected: float
) -> None:
    result = call(backend, context, "PitchShifting", audio=str(tone), n_steps=steps)
    path = produced(result, context, "audio")
    assert path.name == f"tone_pitchshift_{steps:+.1f}.wav"
    assert soundfile.info(str(path)).duration == pytest.approx(2.0, abs=0.01)
    assert _dominant(path) == pytest.approx(expected, rel=0.01)


def test_noise_reduction_removes_noise_and_keeps_the_tone(
    backend: WorkflowBackend, context: ToolContext
) -> None:
    context.output_dir.mkdir(parents=True)
    rng = np.random.default_rng(0)
    t = np.arange(3 * RATE) / RATE
    tone = 0.5 * np.sin(2 * np.pi * 440 * t) * (t > 1)  # the first second is noise alone
    noisy = tone + 0.05 * rng.standard_normal(len(t))
    source = context.output_dir / "noisy.wav"
    soundfile.write(str(source), noisy, RATE)
    path = produced(call(backend, context, "NoiseReduction", audio=str(source)), context, "audio")
    assert path.name == "denoised.wav"
    cleaned, _ = soundfile.read(str(path))
    before = float(np.mean(noisy[: RATE // 2] ** 2))
    after = float(np.mean(cleaned[: RATE // 2] ** 2))
    assert after < before / 10  # the noise-only part lost over 10 dB
    assert _dominant(path) == pytest.approx(440, abs=2)
    kept = float(np.mean(cleaned[2 * RATE :] ** 2)) / float(np.mean(tone[2 * RATE :] ** 2))
    assert kept > 0.7


def test_sound_characteristics_of_a_tone(
    backend: WorkflowBackend, context: ToolContext, tone: Path
) -> None:
    features = json.loads(
        text(call(backend, context, "SoundCharacteristicExtraction", audio=str(tone)))
    )
    assert set(features) == {"mfcc", "spectral_centroid", "spectral_rolloff", "zero_crossing_rate"}
    assert len(features["mfcc"]["mean"]) == len(features["mfcc"]["var"]) == 13
    assert features["spectral_centroid"]["mean"] == pytest.approx(440, rel=0.15)
    assert features["zero_crossing_rate"]["mean"] == pytest.approx(2 * 440 / RATE, rel=0.1)


def test_audio_tools_refuse_audio_past_their_limit(
    backend: WorkflowBackend, context: ToolContext, tone: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workflow_audio, "MAX_SAMPLES", RATE)
    with pytest.raises(GtaToolError, match=f"tone.wav holds more than {RATE} samples"):
        call(backend, context, "SoundCharacteristicExtraction", audio=str(tone))


def test_audio_tools_refuse_what_is_no_audio(
    backend: WorkflowBackend, context: ToolContext
) -> None:
    context.output_dir.mkdir(parents=True)
    bogus = context.output_dir / "bogus.wav"
    bogus.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    with pytest.raises(GtaToolError, match="cannot read audio"):
        call(backend, context, "NoiseReduction", audio=str(bogus))


# -- video ----------------------------------------------------------------------------------


def _ffprobe(path: Path) -> dict[str, Any]:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-print_format",
         "json", "-show_entries", "stream=width,height,nb_read_frames:format=duration", str(path)],
        capture_output=True, check=True,
    )  # fmt: skip
    found = json.loads(out.stdout)
    stream = found["streams"][0]
    return {**stream, "duration": float(found["format"]["duration"])}


@pytest.fixture
def video(context: ToolContext) -> Path:
    """Three seconds of ffmpeg's test pattern, 160x120 at 10 fps."""
    require("ffmpeg")
    context.output_dir.mkdir(parents=True, exist_ok=True)
    path = context.output_dir / "pattern.mp4"
    subprocess.run(
        [shutil.which("ffmpeg") or "ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i",
         "testsrc=duration=3:size=160x120:rate=10", "-pix_fmt", "yuv420p", str(path)],
        check=True,
    )  # fmt: skip
    return path


@pytest.mark.slow
def test_video_clip_cuts_the_asked_second(
    backend: WorkflowBackend, context: ToolContext, video: Path
) -> None:
    result = call(backend, context, "VideoClip", video=str(video), start_time=1, end_time=2)
    path = produced(result, context, "video")
    assert path.name == "clip_1_000_2_000.mp4"
    probed = _ffprobe(path)
    assert probed["nb_read_frames"] == "10"
    assert (probed["width"], probed["height"]) == (160, 120)


@pytest.mark.slow
def test_text_to_video_draws_the_frames_asked(
    backend: WorkflowBackend, context: ToolContext
) -> None:
    require("ffmpeg")
    result = call(
        backend, context, "TextToVideoTool", description="a red ball", num_frames=12,
        resolution="96,64", fps=6, filename="ball",
    )  # fmt: skip
    path = produced(result, context, "video")
    assert path.name == "ball.mp4"
    probed = _ffprobe(path)
    assert (probed["width"], probed["height"], probed["nb_read_frames"]) == (96, 64, "12")
    assert probed["duration"] == pytest.approx(2.0, abs=0.01)


def test_text_to_video_refuses_more_frames_than_it_draws(
    backend: WorkflowBackend, context: ToolContext
) -> None:
    with pytest.raises(GtaToolError, match="1800 frames of 1920x1080 are more than"):
        call(
            backend, context, "TextToVideoTool", description="x", num_frames=1800,
            resolution="1920,1080",
        )  # fmt: skip
    assert not context.output_dir.exists() or not any(context.output_dir.iterdir())


@pytest.mark.slow
def test_add_text_video_and_video_ocr_read_it_back(
    backend: WorkflowBackend, context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    require("ffmpeg")
    context.output_dir.mkdir(parents=True)
    plain = context.output_dir / "black.mp4"
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i",
         "color=c=black:size=320x160:rate=5:duration=1", "-pix_fmt", "yuv420p", str(plain)],
        check=True,
    )  # fmt: skip
    result = call(
        backend, context, "AddTextVideoTool", video=str(plain), text="HELLO 42",
        position="20,100", color="255,255,255", font_scale=2,
    )  # fmt: skip
    path = produced(result, context, "video")
    assert _ffprobe(path)["nb_read_frames"] == "5"
    monkeypatch.setattr(workflow_media, "MAX_OCR_FRAMES", 2)
    with pytest.raises(GtaToolError, match="pass frame_skip of at least 3"):
        call(backend, context, "VideoOCR", video=str(path))
    read = text(call(backend, context, "VideoOCR", video=str(path), frame_skip=3))
    frames = read.splitlines()
    assert [line.split(":")[0] for line in frames] == ["Frame 0", "Frame 3"]
    assert all("HELLO" in line.replace(" ", "") for line in frames)


@pytest.mark.slow
def test_video_tools_refuse_what_is_no_video(
    backend: WorkflowBackend, context: ToolContext
) -> None:
    require("ffmpeg")
    context.output_dir.mkdir(parents=True)
    bogus = context.output_dir / "bogus.mp4"
    bogus.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\xff" * 100)
    with pytest.raises(GtaToolError, match=r"ffprobe failed|no video stream"):
        call(backend, context, "VideoClip", video=str(bogus), start_time=0, end_time=1)
