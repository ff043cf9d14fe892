"""The bundled GTA-Workflow sample, its eval packs and the scripted judge are self-consistent.

No official code is needed: this checks the data the judge re-implementation is compared with
(``fixtures/gta_workflow_sample/``, ``tests/data/workflow/``) and that the scripted judge
(``tests/helpers/judge_server.py``) answers the real ``openai`` SDK the way the official
evaluator calls it. ``benchmarks/official_workflow_judge.py`` recorded the official scores.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.helpers.judge_server import JudgeServer, ResponseCall, Upload, requirement_of
from tests.helpers.paths import ROOT

SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
DATA = ROOT / "tests" / "data" / "workflow"
PACKS = {"pack.json": "official_scores.json", "pack_edge.json": "official_scores_edge.json"}
#: The one attached file the pack names but does not ship (the judge's missing-file case).
MISSING = "deliverables/3/speaker_notes.pdf"


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


END: dict[str, Any] = load(SAMPLE / "end.json")
SCRIPT: dict[str, Any] = load(DATA / "judge_script.json")


def leaves(tree: Any) -> Iterator[str]:
    """The requirements the official judge asks about, rooting a tree as it does."""
    if isinstance(tree, list):
        tree = {"id": "root", "sub_tasks": tree}
    elif isinstance(tree, dict) and "sub_tasks" not in tree:
        tree = {"id": "root", "sub_tasks": [tree]}
    if isinstance(tree, dict):
        yield from walk(tree)


def walk(node: dict[str, Any]) -> Iterator[str]:
    children = node.get("sub_tasks", [])
    if not children:
        yield str(node.get("requirements", "(none)"))
    elif isinstance(children, list):
        for child in children:
            if isinstance(child, dict):
                yield from walk(child)


def depth(node: Any) -> int:
    if isinstance(node, list):
        return max((depth(child) for child in node), default=0)
    children = node.get("sub_tasks") if isinstance(node, dict) else None
    return 1 + depth(children) if isinstance(children, list) else 1


def nodes(node: Any) -> Iterator[dict[str, Any]]:
    for child in node if isinstance(node, list) else [node]:
        yield child
        yield from nodes(child.get("sub_tasks") or [])


# -- the sample ----------------------------------------------------------------------------------


def test_the_sample_has_every_shape_the_loader_and_judge_handle() -> None:
    trees = [item["sub_tasks"] for item in END.values()]
    assert 6 <= len(END) <= 10
    assert {depth(t) for t in trees} >= {1, 2, 3}
    assert any(isinstance(t, list) for t in trees)
    assert any(isinstance(t, dict) for t in trees)
    weights = [n.get("weight", "missing") for t in trees for n in nodes(t)]
    assert "missing" in weights
    assert 0 in weights
    assert any(isinstance(w, float) for w in weights)
    assert any("files" not in item for item in END.values())
    assert {f["type"] for item in END.values() for f in item.get("files", [])} >= {
        "file",
        "image",
        "audio",
        "video",
    }
    calls = [m for item in END.values() for m in item["dialogs"] if m.get("tool_calls")]
    assert calls
    assert all(c["tool_calls"][0]["type"] == "function" for c in calls)
    assert any(m.get("role") == "tool" for item in END.values() for m in item["dialogs"])


def test_the_sample_files_are_real_small_and_all_named() -> None:
    named = set()
    for item in END.values():
        first = item["dialogs"][0]
        assert first["role"] == "user"
        assert first["content"]
        assert first["resources"] == item.get("files", [])
        named |= {f["path"] for f in item.get("files", [])}
    on_disk = {f"files/{p.name}" for p in (SAMPLE / "files").iterdir()}
    assert named == on_disk
    assert all((SAMPLE / p).stat().st_size < 200_000 for p in named)
    assert (SAMPLE / "files" / "report.pdf").read_bytes().startswith(b"%PDF-")
    assert (SAMPLE / "files" / "letter.docx").read_bytes().startswith(b"PK")


def test_toolmeta_lists_the_37_workflow_tools() -> None:
    metas = load(SAMPLE / "toolmeta.json")
    tools = list(metas)  # keyed by name, as the atomic toolmeta.json (the loader iterates keys)
    assert len(tools) == len(set(tools)) == 37
    assert all(metas[t]["name"] == t for t in tools)
    calls = {
        m["tool_calls"][0]["function"]["name"]
        for item in END.values()
        for m in item["dialogs"]
        if m.get("tool_calls")
    }
    assert calls <= set(tools)


# -- the packs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PACKS)
def test_every_pack_task_is_a_sample_task(name: str) -> None:
    tasks = load(DATA / name)["tasks"]
    assert [str(t["task_id"]) for t in tasks] == list(END)


def test_the_main_pack_is_built_from_the_sample_as_the_official_builder_does() -> None:
    pack = load(DATA / "pack.json")
    assert pack["schema_version"] == 1
    for task in pack["tasks"]:
        item = END[str(task["task_id"])]
        assert task["origin_prompt"] == [str(item["dialogs"][0]["content"])]
        assert task["full_tree"] == item["sub_tasks"]


def attached(files: Any) -> Iterator[str]:
    if isinstance(files, str):
        yield files
    elif isinstance(files, list):
        for entry in files:
            yield from attached(entry)
    elif isinstance(files, dict):
        yield files["path"]


@pytest.mark.parametrize("name", PACKS)
def test_attached_files_resolve_from_the_pack_directory(name: str) -> None:
    paths = [p for t in load(DATA / name)["tasks"] for p in attached(t["attached_files"])]
    assert all(not Path(p).is_absolute() for p in paths)
    assert [p for p in paths if not (DATA / p).is_file()] == (
        [MISSING] if name == "pack.json" else []
    )


def test_the_deliverables_cover_every_file_type_the_judge_treats_differently() -> None:
    tasks = load(DATA / "pack.json")["tasks"]
    suffixes = {Path(p).suffix for t in tasks for p in attached(t["attached_files"])}
    assert suffixes >= set(
        ".pdf .png .jpg .jpeg .webp .mp3 .wav .m4a .mp4 .mov .webm .html .txt .md .json .csv"
        " .docx .xlsx .pptx".split()
    )
    stems = [Path(p).stem for t in tasks for p in attached(t["attached_files"])]
    assert "notes" in stems
    assert stems.count("notes") == 2
    assert any(isinstance(e, list) for t in tasks for e in t["attached_files"])
    outputs = [t["assistant_outputs"] for t in tasks]
    assert any(isinstance(o, str) for o in outputs)
    assert any(isinstance(o, list) and isinstance(o[0], list) for o in outputs)
    assert any(isinstance(o, list) and isinstance(o[0], dict) for o in outputs)
    shipped = [p for p in (DATA / "deliverables").rglob("*") if p.is_file()]
    assert all(p.stat().st_size < 200_000 for p in shipped)


def test_every_requirement_has_a_scripted_reply_or_is_meant_for_the_default() -> None:
    asked = {
        r for name in PACKS for t in load(DATA / name)["tasks"] for r in leaves(t["full_tree"])
    }
    unscripted = asked - set(SCRIPT["replies"])
    assert unscripted == set(SCRIPT["default_expected"])
    assert set(SCRIPT["replies"]) <= asked, "a scripted reply no tree asks for"


# -- the recorded official scores ----------------------------------------------------------------


@pytest.mark.parametrize(("name", "scores"), PACKS.items())
def test_the_official_scores_cover_every_task(name: str, scores: str) -> None:
    pack = load(DATA / name)
    recorded = load(DATA / scores)
    assert set(recorded["tasks"]) == {str(t["task_id"]) for t in pack["tasks"]}
    assert recorded["summary"]["n_total"] == len(pack["tasks"])
    assert recorded["summary"]["n_done"] == len(pack["tasks"])
    for task in recorded["tasks"].values():
        assert task["status"] in ("ok", "error")
        assert (task["score"] is None) == (task["status"] == "error")
    ok = [t["score"] for t in recorded["tasks"].values() if t["status"] == "ok"]
    assert recorded["summary"]["mean_ok_score"] == pytest.approx(sum(ok) / len(ok))


@pytest.mark.parametrize("scores", PACKS.values())
def test_the_recorded_requests_follow_the_script(scores: str) -> None:
    replies = SCRIPT["replies"]
    for request in load(DATA / scores)["requests"]:
        if request["kind"] == "response":
            reply = replies.get(request["requirement"], SCRIPT["default"])
            assert request["status"] == (reply if isinstance(reply, int) else 200)
            assert request["model"] == "gpt-5.2"
            assert request["temperature"] == 0.2
        else:
            failing = SCRIPT["upload_failures"].get(request["filename"])
            assert request["status"] == (failing or 200)


# -- the scripted judge through the openai SDK ---------------------------------------------------


def prompt(requirement: str) -> str:
    return f"Original task:\nx\n\nCheckpoint requirement:\n{requirement}\n\nPlease score it."


def ask(client: openai.OpenAI, requirement: str, file_id: str | None = None) -> str:
    content: list[Any] = [{"type": "input_text", "text": prompt(requirement)}]
    if file_id:
        content.append({"type": "input_image", "file_id": file_id})
    response = client.responses.create(
        model="gpt-5.2", input=[{"role": "user", "content": content}], temperature=0.2
    )
    return response.output_text


def test_the_judge_answers_uploads_and_responses_from_the_script() -> None:
    logo = SAMPLE / "files" / "logo.png"
    with JudgeServer.from_script(DATA / "judge_script.json") as judge:
        client = openai.OpenAI(api_key="sk-dummy", base_url=judge.base_url, max_retries=2)
        with logo.open("rb") as handle:
            uploaded = client.files.create(file=handle, purpose="user_data")
        assert uploaded.id == "file-1"
        assert uploaded.filename == "logo.png"
        requirement = "Sales growth of 8% is stated."
        assert ask(client, requirement, uploaded.id) == SCRIPT["replies"][requirement]
        assert ask(client, "not in the script") == SCRIPT["default"]
        with pytest.raises(openai.BadRequestError):
            client.files.create(file=("street.webp", b"RIFF"), purpose="user_data")
    upload, first, second, failed = judge.requests
    assert isinstance(upload, Upload)
    assert isinstance(failed, Upload)
    assert (upload.filename, upload.content_type, upload.purpose) == (
        "logo.png",
        "image/png",
        "user_data",
    )
    assert upload.sha256 == hashlib.sha256(logo.read_bytes()).hexdigest()
    assert (failed.filename, failed.status, failed.file_id) == ("street.webp", 400, None)
    assert isinstance(first, ResponseCall)
    assert isinstance(second, ResponseCall)
    assert first.requirement == requirement
    assert second.requirement == "not in the script"
    assert first.body["input"][0]["content"][1] == {"type": "input_image", "file_id": "file-1"}
    assert judge.filename_of("file-1") == "logo.png"


def test_a_scripted_status_fails_every_time_and_the_sdk_gives_up_after_three() -> None:
    with JudgeServer(replies={"broken": 500}) as judge:
        client = openai.OpenAI(api_key="sk-dummy", base_url=judge.base_url, max_retries=2)
        with pytest.raises(openai.InternalServerError):
            ask(client, "broken")
    assert [(r.requirement, r.status) for r in judge.response_calls()] == [("broken", 500)] * 3


def test_the_requirement_is_read_from_the_first_input_text_block() -> None:
    body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": prompt("A")}]}]}
    assert requirement_of(body) == "A"
    assert requirement_of({"input": [{"content": [{"type": "input_text", "text": "x"}]}]}) is None
    assert requirement_of({"input": "text"}) is None
