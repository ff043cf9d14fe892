"""Every reference call of a local tool in the real release gives what the official tool gives.

Each call runs the way ``--gta-tools=local`` runs it in an end-to-end episode: the reference
arguments made absolute as the official loader does (``Dataset.reference_dialogs``), written as
the ``Action Input:`` JSON, checked and converted by :func:`pytest_gta.protocol.react.execute`
and served by the local backend through :meth:`ToolSet.runner`, on the release's own images
(``image/dummy_generated_image.jpg`` included, the file the release ships for generated
images). Its record is then compared with the official tool's answer to the same call:

* Calculator, Solver, Plot, DrawBox, AddText: ``fixtures/official_tools/release_calls.json``,
  what the official classes (the GTA fork of AgentLego behind Lagent 0.2.2's executor) answered,
  recorded by ``fixtures/official_tools/record.py`` (its docstring says how). The state, the
  exact text of a result or failure (under another Python the failure's exception class, as
  messages differ between Pythons; under another SymPy, the Solver's state only), and for
  images the size, mode and, under the recorded Pillow and Matplotlib, the very pixels.
* Calculator, again live: where CI installs the real AgentLego 0.2.0 (``GTA_AGENTLEGO_SERVER``),
  its Calculator evaluates every reference expression and a set of edge cases in its own
  interpreter, and ours must answer each the same.
* OCR: the official engine (EasyOCR) is not run here; the release's reference output is its
  answer (always a text). Every call's image is read as the tool reads it, and a spread of calls
  (:data:`OCR_CALLS`, the smallest to the largest image and every unusual mode) runs the whole
  tool, keeping this file's cost to about a minute; ``benchmarks/ocr_agreement.py`` runs them all.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from pytest_gta.dataset import Dataset, Query, call_function
from pytest_gta.protocol import react
from pytest_gta.tools import ToolContext, ToolInvocation, ToolSet
from tests.helpers.optional import agentlego_python, require
from tests.helpers.paths import ROOT
from tool_backends.local import LOCAL_TOOLS, LocalBackend
from tool_backends.paths import open_rgb, resolve_image

pytestmark = pytest.mark.slow

OFFICIAL = json.loads(
    (ROOT / "fixtures" / "official_tools" / "release_calls.json").read_text(encoding="utf-8")
)
#: Local-tool reference calls per tool in the real release (557 calls in all).
RELEASE_COUNTS = {
    "OCR": 131,
    "Calculator": 70,
    "Solver": 14,
    "Plot": 15,
    "DrawBox": 18,
    "AddText": 18,
}
#: One line of the official OCR tool's answer: the region's box, then its text.
OCR_LINE = re.compile(r"^\(\d+, \d+, \d+, \d+\) \S")
#: The local tools that take an image.
IMAGE_TOOLS = frozenset({"OCR", "DrawBox", "AddText"})
#: OCR calls that run the whole tool here (RapidOCR takes about 2 s an image on one core).
OCR_CALLS = 10


@dataclass(frozen=True)
class ReleaseCall:
    """One reference call of a local tool: where it is, and its arguments as an episode sends."""

    query: Query
    index: int
    name: str
    arguments: Any


def release_calls(dataset: Dataset, tool: str | None = None) -> list[ReleaseCall]:
    """The release's reference calls of the local tools (of ``tool``), in dataset order."""
    calls = []
    for query in dataset:
        for index, message in enumerate(dataset.reference_dialogs(query)):
            if message.get("role") != "assistant" or not message.get("tool_calls"):
                continue
            function = call_function(message)
            if function["name"] in LOCAL_TOOLS and tool in (None, function["name"]):
                calls.append(ReleaseCall(query, index, function["name"], function["arguments"]))
    return calls


@pytest.fixture(scope="module")
def backend() -> LocalBackend:
    return LocalBackend()


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("outputs")


def run(
    dataset: Dataset, call: ReleaseCall, backend: LocalBackend, outputs: Path
) -> react.ActionRecord:
    """The call as an end-to-end episode makes it with ``--gta-tools=local``.

    The reply is the call written as the reference chain writes it (``Action:`` and the JSON
    ``Action Input:``), parsed, checked and converted by the protocol, then served along the
    routes a run would take.
    """
    metas = {meta.name: meta for meta in dataset.tool_metas(call.query)}
    runner = ToolSet([backend]).runner(
        {call.name: backend}, ToolContext(dataset, call.query, outputs)
    )
    reply = react.parse_reply(react.format_reference_call(call.name, call.arguments) + "\n")
    assert reply.action == call.name
    return react.execute(reply, metas, runner)


def exception_class(errmsg: str) -> str:
    """``IndentationError`` of ``"IndentationError('unexpected indent', ...)"``."""
    return errmsg.split("(", 1)[0]


def same_versions(*packages: str) -> bool:
    """Whether this interpreter's packages are those the official answers were recorded with."""
    recorded = OFFICIAL["versions"]
    return all(metadata.version(package) == recorded[package] for package in packages)


def same_python() -> bool:
    """Whether exception texts can be compared whole (their details vary between Pythons)."""
    recorded = OFFICIAL["versions"]["python"].split(".")[:2]
    return [str(n) for n in sys.version_info[:2]] == recorded


def differences(ours: react.ActionRecord, official: dict[str, Any]) -> list[str]:
    """How our record of a call differs from the official answer (empty when it does not)."""
    where = f"query {official['qid']} {official['tool']}"
    if ours.state != official["state"]:
        return [f"{where}: {ours.state} {ours.errmsg!r}, officially {official['state']}"]
    if ours.state != "SUCCESS":
        if ours.state == "API_ERROR" and not same_python():
            got, want = exception_class(ours.errmsg or ""), exception_class(official["errmsg"])
        else:
            got, want = ours.errmsg or "", official["errmsg"]
        return [] if got == want else [f"{where}: fails with {got!r}, officially {want!r}"]
    assert ours.result is not None
    (item,) = ours.result
    (expected,) = official["result"]
    if item.type != expected["type"]:
        return [f"{where}: answers {item.type}, officially {expected['type']}"]
    if item.type == "text":
        # SymPy writes the Solver's answers; another release of it may print them otherwise.
        ok = item.content == expected["text"] or (
            official["tool"] == "Solver" and not same_versions("sympy")
        )
        return [] if ok else [f"{where}: {item.content!r}, officially {expected['text']!r}"]
    return image_differences(where, Path(str(item.content)), expected)


def image_differences(where: str, path: Path, expected: dict[str, Any]) -> list[str]:
    """Size and mode of an image output, and its pixels where the versions match."""
    with Image.open(path) as image:
        found = [list(image.size), image.mode]
        digest = hashlib.sha256(image.convert("RGBA").tobytes()).hexdigest()
    if found != [expected["size"], expected["mode"]]:
        return [f"{where}: image {found}, officially {[expected['size'], expected['mode']]}"]
    drawn_by = ("pillow", "matplotlib") if "Plot" in where else ("pillow",)
    if same_versions(*drawn_by) and digest != expected["rgba_sha256"]:
        return [f"{where}: other pixels than the official tool's under the same versions"]
    return []


def test_the_release_has_the_calls_the_official_answers_cover(release_dataset: Dataset) -> None:
    calls = release_calls(release_dataset)
    assert Counter(call.name for call in calls) == RELEASE_COUNTS
    recorded = [(c["qid"], c["index"], c["tool"]) for c in OFFICIAL["calls"]]
    assert recorded == [(c.query.qid, c.index, c.name) for c in calls if c.name != "OCR"]
    # Every file argument is a file of the release once made absolute (the generated-image
    # placeholder included); no local tool is handed query 118's Windows paths.
    for call in calls:
        image = call.arguments.get("image")
        if image is not None:
            assert image in release_dataset.all_files, (call.query.qid, image)
    assert [c.query.qid for c in calls if "image" not in c.arguments and c.name in IMAGE_TOOLS] == [
        "34",
        "35",
    ]


@pytest.mark.parametrize("tool", ["Calculator", "Solver", "Plot", "DrawBox", "AddText"])
def test_local_tools_answer_as_the_official_ones(
    tool: str, release_dataset: Dataset, backend: LocalBackend, outputs: Path
) -> None:
    calls = release_calls(release_dataset, tool)
    official = [c for c in OFFICIAL["calls"] if c["tool"] == tool]
    assert [(c.query.qid, c.index) for c in calls] == [(c["qid"], c["index"]) for c in official]
    problems = []
    for call, answer in zip(calls, official, strict=True):
        problems += differences(run(release_dataset, call, backend, outputs), answer)
    assert not problems, "\n".join(problems)


def test_the_calls_that_fail_officially_fail_here_too(
    release_dataset: Dataset, backend: LocalBackend, outputs: Path
) -> None:
    """The release's calls that fail officially, named: a perfect replay records them so."""
    expected = {
        ("12", "Plot"): ("API_ERROR", "IndentationError"),
        ("14", "Plot"): ("API_ERROR", "IndentationError"),
        ("75", "Plot"): ("API_ERROR", "SyntaxError"),
        ("76", "Plot"): ("API_ERROR", "IndentationError"),
        ("175", "Plot"): ("API_ERROR", "SyntaxError"),
        ("176", "Plot"): ("API_ERROR", "SyntaxError"),
        # No image argument: Lagent's parser refuses the call before the tool runs.
        ("34", "DrawBox"): ("ARGS_ERROR", "missing required arguments: {'image'}"),
        ("35", "DrawBox"): ("ARGS_ERROR", "missing required arguments: {'image'}"),
    }
    found = {}
    for call in release_calls(release_dataset):
        if (call.query.qid, call.name) in expected:
            record = run(release_dataset, call, backend, outputs)
            found[call.query.qid, call.name] = (record.state, exception_class(record.errmsg or ""))
    assert found == expected
    assert not {c["qid"] for c in OFFICIAL["calls"] if c["state"] != "SUCCESS"} - {
        qid for qid, _ in expected
    }


def test_query_104_adds_up_as_the_official_calculator(
    release_dataset: Dataset, backend: LocalBackend, outputs: Path
) -> None:
    """``29,000 + 32,900`` is a tuple to Python's ``eval``, so the official tool says so."""
    (call,) = [c for c in release_calls(release_dataset, "Calculator") if c.query.qid == "104"]
    assert run(release_dataset, call, backend, outputs).answer == "(29, 32, 900)"


# ------------------------------------------------------------------------------------------- OCR


def ocr_spread(calls: list[ReleaseCall], count: int) -> list[ReleaseCall]:
    """``count`` calls from the smallest image to the largest, and every image not in RGB."""
    sized = []
    for call in calls:
        with Image.open(call.arguments["image"]) as image:
            sized.append((image.size[0] * image.size[1], image.mode != "RGB", call))
    sized.sort(key=lambda entry: entry[0])
    step = (len(sized) - 1) / (count - 1)
    chosen = {round(i * step) for i in range(count)}
    return [call for i, (_, odd, call) in enumerate(sized) if i in chosen or odd]


def test_ocr_reads_every_reference_image(release_dataset: Dataset, outputs: Path) -> None:
    """The part of every OCR call before the engine: argument checks, the path, the decoding."""
    calls = release_calls(release_dataset, "OCR")
    for call in calls:
        (meta,) = [m for m in release_dataset.tool_metas(call.query) if m.name == "OCR"]
        arguments = react.parse_action_input(json.dumps(call.arguments), meta)
        converted = react.convert_arguments(meta, arguments)
        context = ToolContext(release_dataset, call.query, outputs)
        invocation = ToolInvocation(meta, arguments, converted)
        image = open_rgb(resolve_image(invocation.converted["image"], context))
        assert min(image.size) > 0
        answer = release_dataset.reference_dialogs(call.query)[call.index + 1]["content"]
        assert answer["type"] == "text"


def test_ocr_answers_a_text_as_the_official_tool(
    release_dataset: Dataset, backend: LocalBackend, outputs: Path
) -> None:
    calls = release_calls(release_dataset, "OCR")
    chosen = ocr_spread(calls, OCR_CALLS)
    assert len(chosen) >= OCR_CALLS
    for call in chosen:
        record = run(release_dataset, call, backend, outputs)
        assert record.state == "SUCCESS", (call.query.qid, record.errmsg)
        assert record.result is not None
        assert [item.type for item in record.result] == ["text"]
        for line in str(record.result[0].content).splitlines():
            assert OCR_LINE.match(line), line


# ------------------------------------------------------------- Calculator against AgentLego 0.2.0

#: Expressions beyond the release's whose official meaning is easy to get wrong.
EDGE_EXPRESSIONS = [
    "29,000 + 32,900",
    "abs(-2)",
    "math.sqrt(16) + math.pi",
    "math.nope",
    "math.nope(1)",
    "sum([1, 2, 3]) / max(1, 2)",
    "round(2.675, 2)",
    "fabs(-2) + factorial(5) + gcd(12, 18)",
    "[x * x for x in (1, 2, 3)]",
    "range(3)",
    "().__class__.__name__",
    "__import__('os')",
    "open('/etc/passwd')",
    "1/0",
    "2 +",
    "",
    "10 ** 5000",
    "inf - inf",
    "'3' * 3",
    "x",
]

OFFICIAL_CALCULATOR = """
import json, sys
from agentlego.tools import Calculator
tool = Calculator()
answers = []
for expression in json.load(sys.stdin):
    try:
        answers.append(["SUCCESS", str(tool(expression))])
    except Exception as exc:  # LagentTool's wrapper: errmsg=repr(e)
        answers.append(["API_ERROR", repr(exc)])
print(json.dumps(answers))
"""


def official_calculator(expressions: list[str]) -> list[list[str]]:
    """What the real ``agentlego.tools.Calculator`` answers to each expression."""
    require("agentlego-python")
    python = agentlego_python()
    assert python is not None
    done = subprocess.run(
        [python, "-c", OFFICIAL_CALCULATOR],
        input=json.dumps(expressions),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    answers: list[list[str]] = json.loads(done.stdout.splitlines()[-1])
    return answers


def test_calculator_agrees_with_the_real_agentlego(
    release_dataset: Dataset, backend: LocalBackend, outputs: Path
) -> None:
    calls = release_calls(release_dataset, "Calculator")
    any_query = calls[0].query
    for extra in EDGE_EXPRESSIONS:
        calls.append(ReleaseCall(any_query, -1, "Calculator", {"expression": extra}))
    official = official_calculator([call.arguments["expression"] for call in calls])
    problems = []
    for call, (state, text) in zip(calls, official, strict=True):
        record = run(release_dataset, call, backend, outputs)
        got = record.errmsg if record.state != "SUCCESS" else record.answer
        if [record.state, got] != [state, text]:
            problems.append(f"{call.arguments['expression']!r}: {got!r}, officially {text!r}")
    assert not problems, "\n".join(problems)
