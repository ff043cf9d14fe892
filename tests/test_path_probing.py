"""A model cannot map the machine: a file outside the case's files answers as a missing one.

The official parser (AgentLego ``ImageIO``: ``Path(value).exists()``) checks the whole file
system before a tool runs, so ``/root/.ssh/id_rsa`` passed on to the tool (and refused there)
while ``/root/.ssh/nope`` was ``No such file``: the answer told the model which files exist.
Here every file outside the dataset and the run's output directory is ``No such file``, in
step and end-to-end mode, whether it exists or not, whatever way it is spelled (``..``, a link
inside the dataset that leads out, a directory, ``/proc``). The benchmark's own files
(``dataset.json``, ``toolmeta.json``) are refused as such in end-to-end mode, where a tool would
read them (tests/test_tool_reach.py has the rest of that rule).
"""

from __future__ import annotations

import json
import os
import shutil
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.protocol import react as p
from pytest_gta.tools import ToolContext
from pytest_gta.types import ToolResult
from pytest_gta.validation import load_dataset
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A private dataset copy, an output directory, and files beside them that exist."""
    base = tmp_path_factory.mktemp("probe")
    root = base / "data"
    shutil.copytree(Path(__file__).parent.parent / "fixtures" / "gta_sample", root)
    (base / "private.jpg").write_bytes((root / "image" / "image_0.jpg").read_bytes())
    (base / "private_dir").mkdir()
    (root / "image" / "escape.jpg").symlink_to(base / "private.jpg")
    dataset = load_dataset(root)
    context = ToolContext(dataset, dataset["0"], base / "out")
    context.output_dir.mkdir()
    existing = [
        str(base / "private.jpg"),
        str(base / "private_dir"),
        str(root / ".." / "private.jpg"),
        str(root / "image" / "escape.jpg"),
        str(root.parent),
        "/etc/passwd",
        "/proc/self/environ",
        "/",
    ]
    return dataset, context, existing


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, meta, arguments, converted) -> ToolResult:
        self.calls += 1
        return ToolResult.text("ran")


def answer(dataset, context, value: str) -> tuple[str, str | None, int]:
    """(state, error with the path blanked, tool runs) of an OCR call on ``value``."""
    tools = {m.name: m for m in dataset.tool_metas(dataset["0"])}
    runner = Counting()
    reply = f"Action: OCR\nAction Input: {json.dumps({'image': value})}"
    record = p.execute(p.parse_reply(reply), tools, runner, visible=context.reach)
    errmsg = None if record.errmsg is None else record.errmsg.replace(value, "<path>")
    return record.state, errmsg, runner.calls


MISSING = ("API_ERROR", "FileNotFoundError(\"No such file: '<path>'\")", 0)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(
    pick=st.integers(0, 7),
    name=st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=20),
)
def test_existing_and_missing_files_outside_answer_alike(world, pick, name):
    dataset, context, existing = world
    there = existing[pick]
    assume_missing = os.path.join(os.path.dirname(there.rstrip("/")) or "/", f"no-{name}")
    if os.path.lexists(assume_missing):
        return
    assert answer(dataset, context, there) == MISSING
    assert answer(dataset, context, assume_missing) == MISSING


def test_the_case_files_still_exist(world):
    dataset, context, _ = world
    inside = str(dataset.root / "image" / "image_0.jpg")
    produced = context.output_dir / "made.png"
    produced.write_bytes(b"x")
    for value in (
        inside,
        str(produced),
        str(dataset.root / "image" / ".." / "image" / "image_0.jpg"),
    ):
        assert answer(dataset, context, value) == ("SUCCESS", None, 1)
    assert answer(dataset, context, str(dataset.root / "image" / "nope.jpg")) == MISSING


def test_no_visibility_keeps_the_official_whole_machine_check(world):
    dataset, _, existing = world
    converted = p.convert_arguments(dataset.toolmeta["OCR"], {"image": existing[0]})
    assert converted == {"image": existing[0]}


def ocr_run(pytester: pytest.Pytester, mode: str, images: list[str]) -> dict[str, Any]:
    """The report's case of query 0 run by a mock model that calls OCR on each of ``images``."""
    calls = [f"Action: OCR\nAction Input: {json.dumps({'image': path})}" for path in images]
    script = {"responses": {f"{mode}-0": [*calls, "Final Answer: 1"]}, "default": "Final Answer: 1"}
    pytester.path.joinpath("script.json").write_text(json.dumps(script))
    pytester.runpytest(
        FAST_SIM,
        "--gta-model=mock:script.json",
        f"--gta-mode={mode}",
        "--gta-ids=0",
        "--gta-tools=local",
        SAMPLE_DATA,
        "--gta-report=r.json",
    )
    (case,) = json.loads((pytester.path / "r.json").read_text())["cases"]
    return dict(case)


@pytest.mark.parametrize("mode", ["step", "e2e"])
def test_a_run_answers_alike_for_a_secret_and_a_missing_file(pytester, tmp_path, mode):
    """A real run (mock model, real local tools): the observations of both calls are equal."""
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE")
    missing = tmp_path / "id_nope"
    case = ocr_run(pytester, mode, [str(secret), str(missing)])
    errors = [step["error"] for step in case["steps"] if "error" in step]
    assert len(errors) == 2, case["steps"]
    for error, path in zip(errors, (secret, missing), strict=True):
        error["msg"] = error["msg"].replace(str(path), "<path>")
    assert errors[0] == errors[1], errors
    assert errors[0] == {
        "type": "API_ERROR",
        "msg": "FileNotFoundError(\"No such file: '<path>'\")",
    }


def test_the_projects_loop_is_refused_the_answers(pytester):
    """A real run (mock model, real local tools): OCR of dataset.json, however named, is refused."""
    dataset = Path(__file__).parent.parent / "fixtures" / "gta_sample" / "dataset.json"
    asks = [str(dataset), "dataset.json", str(dataset.parent / "image" / ".." / "toolmeta.json")]
    case = ocr_run(pytester, "e2e", asks)
    errors = [step["error"] for step in case["steps"] if "error" in step]
    assert [e["type"] for e in errors] == ["API_ERROR"] * 3
    for error, path in zip(errors, asks, strict=True):
        assert error["msg"].startswith(f"PermissionError(\"{path!r} is one of the benchmark's own")
    returns = [step for step in case["steps"] if step["role"] == "tool"]
    assert [r["content"] for r in returns] == [None, None, None]  # no tool ran
