"""Tool cassettes, replay fall-through, strict-replay, and the local backend end to end."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from PIL import Image

from pytest_gta.errors import GtaInfrastructureError, GtaToolError, GtaToolMiss, GtaUsageError
from pytest_gta.tools import RECORDER_GROUP, ToolContext, ToolInvocation, ToolSet, make_recorder
from pytest_gta.types import ResultItem, ToolResult
from pytest_gta.validation import load_dataset
from tests.helpers.gta_run import FAST_SIM
from tool_backends import cassettes as cassettes_module
from tool_backends.cassettes import Cassettes, portable_arguments
from tool_backends.replay import ReplayBackend


class Live:
    """A live backend that counts its calls and answers text or an image file."""

    name = "live"

    def __init__(self, output: Path | None = None) -> None:
        self.calls = 0
        self.output = output

    def offers(self, tool: str) -> bool:
        return True

    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        self.calls += 1
        if self.output is not None:
            return ToolResult((ResultItem("image", str(self.output)),))
        return ToolResult.text(f"live answer {self.calls}")


def ocr_invocation(dataset, query, image: str) -> ToolInvocation:
    meta = next(m for m in dataset.tool_metas(query) if m.name == "OCR")
    return ToolInvocation(meta, {"image": image}, {"image": image})


def test_record_then_replay_with_live_backends_gone(sample_dataset, sample_root, tmp_path):
    query = sample_dataset["0"]
    context = ToolContext(sample_dataset, query, tmp_path / "out")
    cassettes = Cassettes(tmp_path / "cassettes")
    live = Live()
    invocation = ocr_invocation(sample_dataset, query, f"{sample_root}/image/image_0.jpg")
    # The recorder of --gta-tool-record, found in the registry as the plugin finds it.
    tools = ToolSet([live], make_recorder(tmp_path / "cassettes", overwrite=False))
    run = tools.runner(tools.route(query), context)
    assert run(invocation.tool, dict(invocation.arguments), {}).format() == "live answer 1"
    entry = next((tmp_path / "cassettes" / "OCR").glob("*.json"))
    saved = json.loads(entry.read_text())
    assert saved["arguments"] == {"image": "image/image_0.jpg"}  # portable, not absolute
    assert len(saved["files"]["image"]) == 64  # keyed by the image's bytes too
    # Replay alone, no live backend: the recorded answer, for the dataset-relative spelling too.
    strict = ToolSet([ReplayBackend(cassettes, strict=True)])
    run = strict.runner(strict.route(query), context)
    assert run(invocation.tool, {"image": "image/image_0.jpg"}, {}).format() == "live answer 1"
    assert live.calls == 1


@pytest.mark.parametrize(("overwrite", "kept"), [(False, "live answer 1"), (True, "live answer 2")])
def test_the_registered_recorder_keeps_the_first_answer_unless_it_overwrites(
    sample_dataset, sample_root, tmp_path, overwrite, kept
):
    """``new`` (no overwrite) keeps the first recorded answer of a call, ``all`` the last."""
    query = sample_dataset["0"]
    context = ToolContext(sample_dataset, query, tmp_path / "out")
    tools = ToolSet([Live()], make_recorder(tmp_path / "cassettes", overwrite=overwrite))
    run = tools.runner(tools.route(query), context)
    invocation = ocr_invocation(sample_dataset, query, f"{sample_root}/image/image_0.jpg")
    for _ in range(2):
        run(invocation.tool, dict(invocation.arguments), {})
    assert len(list((tmp_path / "cassettes" / "OCR").glob("*.json"))) == 1
    replay = ReplayBackend(Cassettes(tmp_path / "cassettes"), strict=True)
    assert replay.call(invocation, context).format() == kept


def test_recording_without_a_registered_recorder_names_the_entry_point_group(tmp_path, monkeypatch):
    """An install whose metadata lacks the recorder says where it should be registered."""
    real = importlib.metadata.entry_points
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        lambda group: [] if group == RECORDER_GROUP else real(group=group),
    )
    with pytest.raises(GtaUsageError) as raised:
        make_recorder(tmp_path, overwrite=False)
    assert str(raised.value) == (
        "--gta-tool-record: no 'cassettes' recorder is registered under the "
        "'pytest_gta.tool_recorders' entry-point group (reinstall pytest-gta)"
    )


def test_cassettes_are_keyed_by_file_content(sample_dataset, sample_root, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(sample_root, root)
    copy = load_dataset(root)
    query = copy["0"]
    cassettes = Cassettes(tmp_path / "cassettes")
    cassettes.record(
        "OCR", {"image": "image/image_0.jpg"}, ToolResult.text("x"), copy, tmp_path, overwrite=False
    )
    assert cassettes.lookup("OCR", {"image": "image/image_0.jpg"}, copy, tmp_path) is not None
    (root / "image" / "image_0.jpg").write_bytes(b"another picture")
    assert cassettes.lookup("OCR", {"image": "image/image_0.jpg"}, copy, tmp_path) is None
    del query


def test_image_outputs_are_copied_into_the_cassette(sample_dataset, sample_root, tmp_path):
    query = sample_dataset["0"]
    produced = tmp_path / "made.png"
    produced.write_bytes(b"\x89PNG fake")
    cassettes = Cassettes(tmp_path / "cassettes")
    result = ToolResult((ResultItem("image", str(produced)),))
    cassettes.record(
        "DrawBox",
        {"image": "image/image_0.jpg", "bbox": "(1, 2, 3, 4)"},
        result,
        sample_dataset,
        tmp_path / "out",
        overwrite=False,
    )
    produced.unlink()
    hit = cassettes.lookup(
        "DrawBox",
        {"image": f"{sample_root}/image/image_0.jpg", "bbox": "(1, 2, 3, 4)"},
        sample_dataset,
        tmp_path / "out",
    )
    assert hit is not None
    path = Path(hit.items[0].content)
    assert path.parent == tmp_path / "out"
    assert path.read_bytes() == b"\x89PNG fake"
    del query


def test_replay_miss_falls_through_but_strict_replay_names_the_call(sample_dataset, tmp_path):
    query = sample_dataset["0"]
    context = ToolContext(sample_dataset, query, tmp_path)
    invocation = ocr_invocation(sample_dataset, query, "image/image_5.jpg")
    live = Live()
    tools = ToolSet([ReplayBackend(), live])
    run = tools.runner(tools.route(query), context)
    assert run(invocation.tool, dict(invocation.arguments), {}).format() == "live answer 1"
    alone = ToolSet([ReplayBackend()])
    with pytest.raises(GtaToolMiss, match=r"no recorded output for OCR .*image_5"):
        alone.runner(alone.route(query), context)(
            invocation.tool, {"image": "image/image_5.jpg"}, {}
        )
    strict = ToolSet([ReplayBackend(strict=True), live])
    with pytest.raises(GtaToolError, match=r"no recorded output for OCR") as info:
        strict.runner(strict.route(query), context)(
            invocation.tool, {"image": "image/image_5.jpg"}, {}
        )
    assert not isinstance(info.value, GtaToolMiss)
    assert live.calls == 1


def test_record_needs_a_cassette_dir(pytester):
    result = pytester.runpytest("--gta-model=oracle", "--gta-tool-record=new")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gta-tool-record needs --gta-tool-cassettes=DIR" in result.stderr.str()


LOCAL_SCRIPT = {
    "responses": {
        "e2e-0": [
            'Action: OCR\nAction Input: {"image": "{data}/image/image_0.jpg"}',
            'Action: Calculator\nAction Input: {"expression": "21.08 - 11.84"}',
            "Final Answer: 9.24",
        ],
    },
    "default": "Final Answer: unknown",
}


@pytest.mark.slow
def test_local_tools_end_to_end_record_and_replay(pytester, tmp_path):
    """A scripted model calls local tools on the real receipt; the answers are recorded and then
    replayed with the live backend gone."""
    script = pytester.path / "script.json"
    script.write_text(json.dumps(LOCAL_SCRIPT))
    cassettes = tmp_path / "cassettes"
    common = [
        FAST_SIM,
        f"--gta-model=mock:{script}",
        "--gta-ids=0",
        "--gta-report=r.json",
        f"--gta-tool-cassettes={cassettes}",
    ]
    result = pytester.runpytest(*common, "--gta-tools=local", "--gta-tool-record=new")
    result.assert_outcomes(passed=1)
    assert "gta: tools OCR: local, Calculator: local" in result.stdout.str()
    report = json.loads((pytester.path / "r.json").read_text())
    case = report["cases"][0]
    assert case["backends"] == {"OCR": "local", "Calculator": "local"}
    ocr_output = case["steps"][1]["content"][0]["content"]
    assert "TOTAL" in ocr_output
    assert "21.08" in ocr_output
    # str(eval(...)), as the official Calculator: float arithmetic shows.
    assert case["steps"][3]["content"][0]["content"] == "9.239999999999998"
    assert report["settings"]["tool_routes"] == {"OCR": "local", "Calculator": "local"}
    assert report["settings"]["tool_backends"]["local"]["sandbox"] in ("bubblewrap", "rlimit")
    assert len(list(cassettes.glob("*/*.json"))) == 2
    replayed = pytester.runpytest(*common, "--gta-tools=strict-replay")
    replayed.assert_outcomes(passed=1)
    again = json.loads((pytester.path / "r.json").read_text())["cases"][0]
    assert again["steps"] == case["steps"]


def test_missing_key_skips_the_query_and_says_which(pytester, monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    result = pytester.runpytest(
        FAST_SIM, "--gta-model=oracle", "--gta-ids=4", "--gta-tools=local,api", "-rs"
    )
    result.assert_outcomes(skipped=1)
    text = result.stdout.str()
    assert "no tool backend offers GoogleSearch" in text
    assert "SERPER_API_KEY" in text
    assert "gta: tools OCR: local, GoogleSearch: -" in text


def action(tool: str, arguments: dict) -> str:
    return f"Thought: use {tool}\nAction: {tool}\nAction Input: {json.dumps(arguments)}"


@pytest.mark.slow
def test_mock_model_drives_every_local_tool_on_real_images(pytester, sample_dataset):
    """The acceptance run: OCR reads the receipt, Solver solves the printed equation, Plot makes
    a PNG, AddText and DrawBox change pixels, Calculator computes, all through ``local``."""
    from PIL import Image, ImageChops

    solver = (
        "from sympy import symbols, solve\ndef solution():\n    x = symbols('x')\n"
        "    return solve(2*x**2 - 3*x - 20, x)\n"
    )
    plot = (
        "import matplotlib.pyplot as plt\ndef solution():\n    fig = plt.figure()\n"
        "    plt.plot([1, 2, 3], [42, 38, 55])\n    return fig\n"
    )
    script = {
        "responses": {
            "e2e-0": [
                action("OCR", {"image": "{data}/image/image_0.jpg"}),
                action("Calculator", {"expression": "round(21.08 - 11.84, 2)"}),
                "Final Answer: 9.24",
            ],
            "e2e-1": [action("Solver", {"command": solver}), "Final Answer: 4"],
            "e2e-10": [
                action("Plot", {"command": plot}),
                action(
                    "AddText",
                    {"image": "{data}/image/image_2.jpg", "text": "June", "position": "mt"},
                ),
                "Final Answer: done",
            ],
            "e2e-11": [
                action(
                    "DrawBox",
                    {
                        "image": "{data}/image/image_5.jpg",
                        "bbox": "(688, 256, 752, 320)",
                        "annotation": "green",
                    },
                ),
                "Final Answer: done",
            ],
        },
    }
    path = pytester.path / "script.json"
    path.write_text(json.dumps(script))
    pytester.runpytest(
        FAST_SIM,
        f"--gta-model=mock:{path}",
        "--gta-ids=0,1,10,11",
        "--gta-tools=local,replay",
        "--gta-report=r.json",
    )
    cases = {c["id"]: c for c in json.loads((pytester.path / "r.json").read_text())["cases"]}
    assert all(c["outcome"] != "error" for c in cases.values())

    def output(case: str, step: int):
        return cases[case]["steps"][step]["content"][0]

    assert "21.08" in output("e2e-0", 1)["content"]  # the receipt's total, read by OCR
    assert output("e2e-0", 3)["content"] == "9.24"
    assert output("e2e-1", 1)["content"] == "[-5/2, 4]"

    def load(path) -> Image.Image:
        with Image.open(path) as image:
            return image.convert("RGB")

    with Image.open(output("e2e-10", 1)["content"]) as plotted:
        assert plotted.format == "PNG"
        assert plotted.size[0] > 100
    root = sample_dataset.root
    for case, step, source in (("e2e-10", 3, "image_2.jpg"), ("e2e-11", 1, "image_5.jpg")):
        made = load(output(case, step)["content"])
        original = load(root / "image" / source)
        assert made.size == original.size
        assert ImageChops.difference(made, original).getbbox() is not None
    drawn = load(output("e2e-11", 1)["content"])
    original = load(root / "image" / "image_5.jpg")
    # The box border changed; a far corner did not.
    assert drawn.getpixel((688, 288)) != original.getpixel((688, 288))
    assert drawn.getpixel((5, 5)) == original.getpixel((5, 5))


SHIPPED = Path(__file__).resolve().parent.parent / "fixtures" / "cassettes"


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
def test_shipped_sample_cassettes_replay_without_local_tools(pytester):
    """The cassettes recorded from the local tools on the sample replay under strict-replay,
    with no tool installed or run: every local-tool call of the oracle hits a cassette."""
    result = pytester.runpytest(
        FAST_SIM,
        "--gta-model=oracle",
        "--gta-tools=strict-replay",
        f"--gta-tool-cassettes={SHIPPED}",
        "--gta-report=r.json",
    )
    result.assert_outcomes(passed=17)
    cases = {c["id"]: c for c in json.loads((pytester.path / "r.json").read_text())["cases"]}
    ocr = cases["e2e-0"]["steps"][1]["content"][0]["content"]
    assert "21.08" in ocr
    assert "12ElmStreet" in ocr  # RapidOCR's text, from the cassette, not the reference output
    # The call the chain left unanswered (14) and the ones it answered with paths on another
    # machine (16) get the image DrawBox drew, not the placeholder or the foreign path.
    for case, step in (("e2e-14", 3), ("e2e-16", 3), ("e2e-16", 5)):
        drawn = cases[case]["steps"][step]["content"][0]["content"]
        assert Path(drawn).name.startswith("cassette-"), (case, drawn)
        assert Path(drawn).suffix == ".png"
    entries = list(SHIPPED.glob("*/*.json"))
    assert {e.parent.name for e in entries} == {
        "OCR",
        "Calculator",
        "Solver",
        "Plot",
        "DrawBox",
        "AddText",
    }
    for entry in entries:
        assert not json.loads(entry.read_text())["arguments"].get("image", "").startswith("/")


def _record_many(root: str, sample: str, worker: int) -> None:
    dataset = load_dataset(Path(sample))
    cassettes = Cassettes(Path(root))
    for i in range(30):
        result = ToolResult.text(f"answer {i}")
        cassettes.record(
            "Calculator",
            {"expression": f"{i}+1"},
            result,
            dataset,
            Path(root),
            overwrite=worker % 2 == 0,
        )


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
def test_concurrent_recording_never_tears_an_entry(sample_root, sample_dataset, tmp_path):
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    procs = [
        context.Process(target=_record_many, args=(str(tmp_path), str(sample_root), w))
        for w in range(4)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    cassettes = Cassettes(tmp_path)
    for i in range(30):
        hit = cassettes.lookup("Calculator", {"expression": f"{i}+1"}, sample_dataset, tmp_path)
        assert hit is not None
        assert hit.format() == f"answer {i}"
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]


def test_record_new_keeps_and_all_replaces(sample_dataset, tmp_path):
    cassettes = Cassettes(tmp_path)
    args = {"expression": "1+1"}
    assert cassettes.record(
        "Calculator", args, ToolResult.text("2"), sample_dataset, tmp_path, overwrite=False
    )
    assert not cassettes.record(
        "Calculator", args, ToolResult.text("3"), sample_dataset, tmp_path, overwrite=False
    )
    assert cassettes.lookup("Calculator", args, sample_dataset, tmp_path).format() == "2"
    assert cassettes.record(
        "Calculator", args, ToolResult.text("3"), sample_dataset, tmp_path, overwrite=True
    )
    assert cassettes.lookup("Calculator", args, sample_dataset, tmp_path).format() == "3"


# -- recording from many threads and processes at once ---------------------------------------------


def _answer(tmp_path: Path, who: int) -> ToolResult:
    """A two-part answer whose parts both name ``who``: text, and an image file's bytes."""
    image = tmp_path / f"answer-{who}.png"
    image.write_bytes(f"image of {who}".encode())
    return ToolResult((ResultItem("text", f"text of {who}"), ResultItem("image", str(image))))


@pytest.mark.parametrize("overwrite", [False, True])
def test_threads_recording_the_same_calls_keep_each_entry_whole(
    sample_dataset, tmp_path, overwrite
):
    root = tmp_path / "cassettes"
    cassettes = Cassettes(root)
    answers = [_answer(tmp_path, who) for who in range(8)]

    def record(job: tuple[int, int]) -> bool:
        who, call = job
        return cassettes.record(
            "Plot",
            {"command": f"plot {call}"},
            answers[who],
            sample_dataset,
            tmp_path / "out",
            overwrite=overwrite,
        )

    jobs = [(who, call) for call in range(20) for who in range(8)]
    with ThreadPoolExecutor(8) as threads:
        recorded = list(threads.map(record, jobs))
    if not overwrite:
        assert sum(recorded) == 20  # the first answer of each call stays; the others add nothing
    entries = sorted((root / "Plot").glob("*.json"))
    assert len(entries) == 20
    for entry in entries:
        saved = json.loads(entry.read_text())
        text, image = saved["outputs"]
        who = text["content"].removeprefix("text of ")
        # Never one call's text with another call's image.
        assert (root / "Plot" / image["file"]).read_text() == f"image of {who}"
    assert not [p for p in root.rglob(".*") if p.is_file()]


def test_an_entry_does_not_depend_on_argument_order(sample_dataset, tmp_path):
    result = ToolResult.text("(1, 2, 3, 4), score 0.9")
    arguments = {"image": "image/image_0.jpg", "text": "dog", "top1": True}
    for where, order in (("a", list(arguments)), ("b", list(reversed(arguments)))):
        in_order = {name: arguments[name] for name in order}
        Cassettes(tmp_path / where).record(
            "TextToBbox", in_order, result, sample_dataset, tmp_path, overwrite=False
        )
    (first,) = (tmp_path / "a" / "TextToBbox").glob("*.json")
    (second,) = (tmp_path / "b" / "TextToBbox").glob("*.json")
    assert first.name == second.name
    assert first.read_bytes() == second.read_bytes()


def _record_first(root: str, sample: str, worker: int) -> int:
    """Record the same 20 calls as every other worker; how many of them this one recorded."""
    dataset = load_dataset(Path(sample))
    cassettes = Cassettes(Path(root))
    won = 0
    for i in range(20):
        result = ToolResult.text(f"answer {i} from {worker}")
        args = {"expression": f"{i}*2"}
        won += cassettes.record("Calculator", args, result, dataset, Path(root), overwrite=False)
    return won


def test_processes_recording_the_same_calls_record_each_once(sample_root, tmp_path):
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        won = pool.starmap(_record_first, [(str(tmp_path), str(sample_root), w) for w in range(3)])
    assert sum(won) == 20
    assert len(list((tmp_path / "Calculator").glob("*.json"))) == 20


# -- outputs that are not regular files -----------------------------------------------------------


def _recorded_image(sample_dataset, tmp_path) -> tuple[Cassettes, Path, dict[str, str]]:
    """A cassette with one DrawBox entry whose output is a PNG beside it."""
    produced = tmp_path / "made.png"
    Image.new("RGB", (8, 8), "blue").save(produced)
    cassettes = Cassettes(tmp_path / "cassettes")
    arguments = {"image": "image/image_0.jpg", "bbox": "(1, 2, 3, 4)"}
    result = ToolResult((ResultItem("image", str(produced)),))
    cassettes.record("DrawBox", arguments, result, sample_dataset, tmp_path, overwrite=False)
    (output,) = (tmp_path / "cassettes" / "DrawBox").glob("*.png")
    return cassettes, output, arguments


def _private(tmp_path: Path) -> Path:
    private = tmp_path / "elsewhere" / "private.png"
    private.parent.mkdir()
    Image.new("RGB", (8, 8), "red").save(private)
    return private


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory", "linked-tool-directory"])
def test_an_output_that_is_not_a_regular_file_is_refused_naming_it(sample_dataset, tmp_path, kind):
    cassettes, output, arguments = _recorded_image(sample_dataset, tmp_path)
    private = _private(tmp_path)
    output.unlink()
    if kind == "symlink":
        output.symlink_to(private)
    elif kind == "fifo":
        os.mkfifo(output)
    elif kind == "directory":
        output.mkdir()
    else:  # the tool's directory links to one that holds a private file of the output's name
        shutil.move(output.parent, tmp_path / "moved")
        shutil.copy(private, tmp_path / "moved" / output.name)
        output.parent.symlink_to(tmp_path / "moved")
    out = tmp_path / "out"
    with pytest.raises(GtaInfrastructureError) as info:
        cassettes.lookup("DrawBox", arguments, sample_dataset, out)
    message = str(info.value)
    assert f"tool cassette output {output} is refused" in message
    expected = {
        "symlink": "is a symbolic link",
        "fifo": "is a FIFO, not a regular file",
        "directory": "is a directory, not a regular file",
        "linked-tool-directory": "leads out of the cassette directory",
    }[kind]
    assert expected in message
    assert not list(out.glob("*")) if out.exists() else True


def test_a_regular_output_still_replays(sample_dataset, tmp_path):
    cassettes, output, arguments = _recorded_image(sample_dataset, tmp_path)
    hit = cassettes.lookup("DrawBox", arguments, sample_dataset, tmp_path / "out")
    assert hit is not None
    assert Path(hit.items[0].content).read_bytes() == output.read_bytes()


def test_a_linked_tool_output_is_not_recorded(sample_dataset, tmp_path):
    link = tmp_path / "link.png"
    link.symlink_to(_private(tmp_path))
    cassettes = Cassettes(tmp_path / "cassettes")
    result = ToolResult((ResultItem("image", str(link)),))
    with pytest.raises(GtaInfrastructureError, match="is a symbolic link"):
        cassettes.record(
            "Plot", {"command": "x"}, result, sample_dataset, tmp_path, overwrite=False
        )
    assert not list((tmp_path / "cassettes").rglob("*.png"))


def test_arguments_naming_files_outside_are_never_read(sample_dataset, tmp_path, monkeypatch):
    """A text argument that names a file elsewhere is text: nothing of it is read or hashed."""
    opened = []
    monkeypatch.setattr(
        cassettes_module, "sha256_file", lambda path: opened.append(str(path)) or "0" * 64
    )
    private = _private(tmp_path)
    _, hashes = portable_arguments(
        {"expression": str(private), "image": "image/image_0.jpg", "x": "/proc/self/environ"},
        sample_dataset,
        tmp_path / "out",
    )
    assert list(hashes) == ["image"]
    assert opened == [os.path.realpath(sample_dataset.root / "image" / "image_0.jpg")]


def test_replay_of_a_linked_output_errors_the_case_and_copies_nothing(pytester, tmp_path):
    """The oracle replays query 16 from a copy of the shipped cassettes whose DrawBox output
    was replaced by a link to a private picture: the case errors naming the file, and the
    picture reaches neither the run's output directory nor the HTML report."""
    cassettes = tmp_path / "cassettes"
    shutil.copytree(SHIPPED, cassettes)
    private = _private(tmp_path)
    for output in (cassettes / "DrawBox").glob("*.png"):
        output.unlink()
        output.symlink_to(private)
    result = pytester.runpytest(
        FAST_SIM,
        "--gta-model=oracle",
        "--gta-tools=strict-replay",
        "--gta-mode=e2e",
        "--gta-ids=16",
        f"--gta-tool-cassettes={cassettes}",
        "--gta-report=r.json",
        "--gta-report-html=r.html",
        "--basetemp=basetemp",
    )
    result.assert_outcomes(errors=1)
    (case,) = json.loads((pytester.path / "r.json").read_text())["cases"]
    assert "tool cassette output" in case["message"]
    assert "is a symbolic link" in case["message"]
    copies = [
        p
        for p in pytester.path.rglob("*")
        if p.is_file() and p.read_bytes() == private.read_bytes()
    ]
    assert not copies
    report = json.loads((pytester.path / "r.json").read_text())
    assert not report["cases"][0].get("images")
