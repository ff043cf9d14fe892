"""The official judge's pure parts (``pytest_gta.judge``), the pack reader and the loader."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gta.errors import GtaUsageError
from pytest_gta.evalpack import read_pack, select_trace
from pytest_gta.judge.files import text_pdf
from pytest_gta.judge.protocol import (
    final_answer,
    handling,
    leaf_prompt,
    normalize_tree,
    parse_score,
)
from pytest_gta.judge.walk import LeafReply, judge
from pytest_gta.workflow_data import load_workflow

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@pytest.mark.parametrize(
    ("reply", "score", "how"),
    [
        ('{"score": 8, "analysis": "ok"}', 8.0, "json"),
        ('{"score": 15}', 10, "json"),
        ('{"score": -2}', 0, "json"),
        ('{"score": "7.5"}', 7.5, "json"),
        ('{"score": NaN}', 10, "json"),
        ('{"score": -Infinity}', 0, "json"),
        ('{"score": null, "x": 4}', 4.0, "regex"),
        ("[3, 9]", 3.0, "regex"),
        ("8", 8.0, "regex"),
        ('```json\n{"score": 6}\n```', 6.0, "regex"),
        ("I give -3 points", 3.0, "regex"),
        ("12 out of 10", 10, "regex"),
        ("no digits here", 0, "none"),
        ("", 0, "none"),
    ],
)
def test_reply_shapes_read_as_the_official_parser_reads_them(
    reply: str, score: float, how: str
) -> None:
    parsed = parse_score(reply)
    assert (parsed.score, parsed.how) == (score, how)
    assert type(parsed.score) is type(score)


@given(st.text())
def test_any_reply_is_a_score_from_0_to_10(text: str) -> None:
    score = parse_score(text).score
    assert 0 <= score <= 10
    assert not math.isnan(score)


def test_final_answer_is_the_last_non_blank_assistant_content() -> None:
    trace = [
        {"role": "assistant", "content": " first "},
        {"role": "tool", "content": "x"},
        {"role": "assistant", "content": "  "},
    ]
    assert final_answer(trace) == "first"
    assert final_answer([[{"role": "user", "content": "q"}]]) == ""
    assert final_answer("plain answer ") == "plain answer"
    prompt = leaf_prompt({"id": "a"}, [], ["line 1", "line 2"])
    assert "Original task:\nline 1\nline 2\n\nFinal answer:\n(empty)" in prompt
    assert "Checkpoint requirement:\n(none)\n" in prompt


def test_trees_files_and_weights_follow_the_official_walk() -> None:
    assert normalize_tree([]) == {"id": "root", "sub_tasks": []}
    assert normalize_tree({"id": "a"}) == {"id": "root", "sub_tasks": [{"id": "a"}]}
    with pytest.raises(ValueError, match="Invalid checkpoint tree"):
        normalize_tree("x")
    assert [handling(n) for n in ("a.PDF", "b.md", "c.csv", "d.docx", "e.mp4")] == [
        "upload",
        "convert",
        "skip",
        "skip",
        "upload",
    ]
    scores = iter(["9", '{"score": 3}', "5"])
    asked: list[str] = []

    def call(prompt: str, files: Any) -> LeafReply:
        asked.append(prompt)
        return LeafReply(next(scores))

    tree = [
        {"id": "a", "weight": 2},
        {"id": "b", "sub_tasks": [{"id": "b1"}, {"id": "b2", "weight": 0}]},
    ]
    result = judge(tree, [], "task", [], call)
    assert result.root_score == pytest.approx((9 * 2 + 3) / 3)
    assert len(asked) == 3
    bad = judge([{"id": "a"}, {"id": "b", "weight": "2"}], [], "t", [], lambda p, f: LeafReply("4"))
    assert result.error is None
    assert bad.root_score is None
    assert bad.error is not None
    assert bad.error.startswith("TypeError")
    assert [n.score for n in bad.nodes if n.leaf] == [4.0, 4.0]  # both judged before the failure


@given(JSON)
@settings(max_examples=150)
def test_any_tree_is_scored_or_fails_the_task_never_raises(tree: Any) -> None:
    result = judge(tree, [], "task", [], lambda p, f: LeafReply("5"))
    assert (result.root_score is None) == (result.error is not None)


@given(JSON)
@settings(max_examples=100)
def test_any_pack_is_read_or_a_usage_error(
    tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    path = tmp_path_factory.mktemp("pack") / "pack.json"
    path.write_text(json.dumps({"tasks": data}, allow_nan=True), encoding="utf-8")
    with contextlib.suppress(GtaUsageError):
        read_pack(path)


def test_pack_errors_name_the_file_and_task(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"tasks": [{"task_id": "x"}]}', encoding="utf-8")
    with pytest.raises(GtaUsageError, match=r"p.json: tasks\[0\]: 'task_id' 'x'"):
        read_pack(path)
    path.write_text('{"tasks": [{"task_id": 1}, {"task_id": "1"}]}', encoding="utf-8")
    with pytest.raises(GtaUsageError, match="appears twice"):
        read_pack(path)
    path.write_text("{", encoding="utf-8")
    with pytest.raises(GtaUsageError, match="invalid JSON"):
        read_pack(path)
    assert select_trace([[{"role": "assistant"}], []]) == [{"role": "assistant"}]


@given(JSON)
@settings(max_examples=100)
def test_any_end_json_loads_or_is_a_usage_error(
    tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    root = tmp_path_factory.mktemp("wf")
    (root / "end.json").write_text(json.dumps(data, allow_nan=True), encoding="utf-8")
    with contextlib.suppress(GtaUsageError):
        load_workflow(root)


def test_text_pdf_is_a_pdf_with_the_text() -> None:
    pdf = text_pdf("hello (world)\n" * 100)
    assert pdf.startswith(b"%PDF-1.4")
    assert pdf.rstrip().endswith(b"%%EOF")
    assert b"(hello \\(world\\))" in pdf
    assert pdf.count(b"/Type /Page ") == 2


def test_pack_paths_are_found_from_the_pack_and_by_their_tail(tmp_path: Path) -> None:
    here = tmp_path / "runs" / "pack"
    (here / "out" / "3").mkdir(parents=True)
    (here / "out" / "3" / "a.pdf").write_bytes(b"%PDF-1.4")
    (tmp_path / "top.png").write_bytes(b"png")
    pack = here / "pack.json"
    files = ["out/3/a.pdf", "top.png", "/elsewhere/GTA/out/3/a.pdf", "/elsewhere/a.pdf", "no.pdf"]
    pack.write_text(json.dumps({"tasks": [{"task_id": 3, "attached_files": files}]}))
    resolved = read_pack(pack)["3"].files
    assert resolved == [
        str(here / "out" / "3" / "a.pdf"),
        str(here / "top.png"),  # never looked for above the pack: missing, judged without
        str(here / "out" / "3" / "a.pdf"),
        "/elsewhere/a.pdf",  # a lone file name is not enough to say it moved
        str(here / "no.pdf"),
    ]
    # A directory the user names (--gta-evalpack-root) is looked in after the pack's own.
    assert read_pack(pack, [tmp_path])["3"].files[1] == str(tmp_path / "top.png")
