"""Loading, validating and path handling of GTA dataset directories (``pytest_gta.dataset``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_gta import dataset as dataset_module
from pytest_gta.dataset import Dataset, ReferenceCall, bundled_sample_path
from pytest_gta.errors import DatasetError, DatasetProblem, GtaError
from pytest_gta.quirks import GENERATED_IMAGE, find_quirks
from pytest_gta.validation import load_dataset
from pytest_gta.vocabulary import tool_category

# The categories of SPEC section 5, written out here so the tests do not borrow the module's table.
SPEC_CATEGORIES = {
    "OCR": "perception",
    "ImageDescription": "perception",
    "RegionAttributeDescription": "perception",
    "TextToBbox": "perception",
    "DrawBox": "operation",
    "AddText": "operation",
    "GoogleSearch": "operation",
    "Calculator": "logic",
    "Solver": "logic",
    "Plot": "logic",
    "MathOCR": "logic",
    "CountGivenObject": "logic",
    "TextToImage": "creativity",
    "ImageStylization": "creativity",
}


# --------------------------------------------------------------------------------------------
# Helpers


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2), encoding="utf-8")


@pytest.fixture
def data_copy(sample_root: Path, tmp_path: Path) -> Path:
    """A private copy of the sample dataset that a test may break."""
    root = tmp_path / "data"
    shutil.copytree(sample_root, root)
    return root


def edit_dataset(root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = read_json(root / "dataset.json")
    change(data)
    write_json(root / "dataset.json", data)


def edit_toolmeta(root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    meta = read_json(root / "toolmeta.json")
    change(meta)
    write_json(root / "toolmeta.json", meta)


def load_error(root: Path) -> DatasetError:
    with pytest.raises(DatasetError) as info:
        load_dataset(root)
    return info.value


def matching(
    error: DatasetError, file: str, query: str | None, field: str | None, fragment: str
) -> list[DatasetProblem]:
    return [
        p
        for p in error.problems
        if p.file == file and p.query == query and p.field == field and fragment in p.message
    ]


def describe(error: DatasetError) -> str:
    return "\n".join(repr(p) for p in error.problems)


def tool_meta(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "inputs": [
            {
                "type": "text",
                "name": "text",
                "description": None,
                "optional": False,
                "default": None,
                "filetype": None,
            }
        ],
        "outputs": [
            {
                "type": "text",
                "name": None,
                "description": None,
                "optional": False,
                "default": None,
                "filetype": None,
            }
        ],
    }


# --------------------------------------------------------------------------------------------
# The sample loads


def test_sample_loads_with_expected_ids_and_types(sample_root: Path) -> None:
    raw = read_json(sample_root / "dataset.json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset = load_dataset(sample_root)
    assert [str(w.message) for w in caught] == []
    assert isinstance(dataset, Dataset)
    assert len(dataset) == 17
    assert list(dataset.queries) == [str(i) for i in range(17)]
    assert [q.qid for q in dataset] == list(raw)
    assert [q.position for q in dataset] == list(range(17))
    types = [q.type for q in dataset]
    assert types == ["objective"] * 7 + ["subjective"] * 3 + ["image"] * 5 + ["objective"] * 2
    assert dataset.warnings == []


def test_sample_uses_every_one_of_the_14_tools(sample_dataset: Dataset) -> None:
    offered = {name for q in sample_dataset for name in q.tool_names}
    called = {call.name for q in sample_dataset for call in q.calls}
    assert offered == set(SPEC_CATEGORIES)
    assert called == set(SPEC_CATEGORIES)
    assert set(sample_dataset.toolmeta) == set(SPEC_CATEGORIES)


def test_sample_sha256_is_that_of_dataset_json_bytes(
    sample_root: Path, sample_dataset: Dataset
) -> None:
    expected = hashlib.sha256((sample_root / "dataset.json").read_bytes()).hexdigest()
    assert sample_dataset.sha256 == expected


def test_sha256_changes_with_the_data(data_copy: Path) -> None:
    before = load_dataset(data_copy).sha256
    with (data_copy / "dataset.json").open("a", encoding="utf-8") as fh:
        fh.write("\n")
    after = load_dataset(data_copy)
    assert after.sha256 != before
    assert after.sha256 == hashlib.sha256((data_copy / "dataset.json").read_bytes()).hexdigest()


@pytest.mark.parametrize("qid", ["3", "7", "12", "13", "14", "15"])
def test_query_properties_follow_the_json(
    sample_root: Path, sample_dataset: Dataset, qid: str
) -> None:
    item = read_json(sample_root / "dataset.json")[qid]
    query = sample_dataset[qid]
    gt = item["gt_answer"]
    expected_type = "image" if gt is None else "objective" if isinstance(gt, dict) else "subjective"
    assert query.type == expected_type
    assert query.qid == qid
    assert query.text == item["dialogs"][0]["content"]
    listed = tuple(t["name"] for t in item["tools"])
    assert query.listed_tools == listed
    assert query.tool_names == tuple(dict.fromkeys(listed))  # offered once (query 13)
    expected_calls = tuple(
        ReferenceCall(
            i, m["tool_calls"][0]["function"]["name"], m["tool_calls"][0]["function"]["arguments"]
        )
        for i, m in enumerate(item["dialogs"])
        if m["role"] == "assistant" and "tool_calls" in m
    )
    assert query.calls == expected_calls
    for call in expected_calls:
        if call.index + 1 < len(item["dialogs"]):  # query 14's last call has no reply
            assert query.dialogs[call.index + 1]["role"] == "tool"  # the message answering it
    assert query.called_tools == tuple(dict.fromkeys(c.name for c in expected_calls))
    expected_categories = tuple(sorted({SPEC_CATEGORIES[c.name] for c in expected_calls}))
    assert query.categories == expected_categories
    assert query.assistant_indices == tuple(
        i for i, m in enumerate(item["dialogs"]) if m["role"] == "assistant"
    )
    assert [f.path for f in query.files] == [f["path"] for f in item["files"]]
    assert query.gt_answer == gt


def test_query_properties_concrete_values(sample_dataset: Dataset) -> None:
    q3 = sample_dataset["3"]
    assert q3.type == "objective"
    assert q3.tool_names == ("CountGivenObject", "OCR", "Calculator")
    assert [call.name for call in q3.calls] == [
        "CountGivenObject",
        "CountGivenObject",
        "OCR",
        "Calculator",
        "Calculator",
    ]
    assert q3.calls[0] == ReferenceCall(
        1, "CountGivenObject", {"image": "image/image_8.jpg", "text": "coffee cup"}
    )
    assert q3.called_tools == ("CountGivenObject", "OCR", "Calculator")
    assert 11 not in [call.index for call in q3.calls]  # the final answer
    assert q3.categories == ("logic", "perception")
    assert q3.assistant_indices == (1, 3, 5, 7, 9, 11)
    assert q3.text.startswith("The first picture shows what my two friends and I ordered")

    q12 = sample_dataset["12"]
    assert q12.type == "image"
    assert q12.gt_answer is None
    assert q12.categories == ("creativity", "operation", "perception")
    assert q12.assistant_indices == (1, 3, 5, 7, 9)

    q7 = sample_dataset["7"]
    assert q7.type == "subjective"
    assert len(q7.gt_answer) == 3


def test_sample_has_the_release_shapes_a_replay_passes(sample_dataset: Dataset) -> None:
    """Queries 13-16 carry the release's quirks that a perfect replay passes, and only those."""
    quirks = [(q.qid, q.kind.key, q.detail, q.fails) for q in find_quirks(sample_dataset)]
    assert quirks == [
        ("13", "no_final_answer", "ends on a tool's output", ()),
        ("13", "duplicate_tool", "tools: Plot", ()),
        ("14", "no_final_answer", "ends on a call", ()),
        ("14", "unanswered_call", "dialogs[3]: DrawBox", ()),
        ("14", "call_with_text", "dialogs[3]: DrawBox", ()),
        ("15", "call_with_text", "dialogs[3]: GoogleSearch", ()),
        (
            "16",
            "foreign_output",
            "dialogs[4]: C:\\Users\\annotator\\generated\\image\\20240412_5e1d.png",
            (),
        ),
        (
            "16",
            "foreign_output",
            "dialogs[6]: C:\\Users\\annotator\\generated\\image\\20240412_a07c.png",
            (),
        ),
    ]
    q13, q14, q15, q16 = (sample_dataset[q] for q in ("13", "14", "15", "16"))
    assert q13.listed_tools == ("Plot", "MathOCR", "Plot")
    assert q13.tool_names == ("Plot", "MathOCR")
    assert q13.dialogs[-1]["content"] == {"type": "image", "content": GENERATED_IMAGE}
    assert (q14.type, q14.dialogs[-1]["role"], q14.calls[-1].name) == (
        "image",
        "assistant",
        "DrawBox",
    )
    assert q14.dialogs[-1]["content"].startswith("Green Leaf Pharmacy")
    assert q15.tool_names == ("GoogleSearch", "Calculator", "OCR")
    assert "Calculator" not in q15.called_tools  # offered, never called
    assert q15.dialogs[-1] == {"role": "assistant", "content": q15.dialogs[-1]["content"]}
    assert q16.type == "objective"
    assert [c.arguments["image"] for c in q16.calls] == ["image/image_6.jpg"] * 3


@pytest.mark.parametrize(("name", "category"), sorted(SPEC_CATEGORIES.items()))
def test_tool_category_matches_spec(name: str, category: str) -> None:
    assert tool_category(name) == category


def test_tool_category_of_custom_tool_is_none(sample_dataset: Dataset) -> None:
    assert tool_category("MyCustomTool") == "none"
    assert sample_dataset.toolmeta["OCR"].category == "perception"


def test_toolmeta_from_file(sample_root: Path, sample_dataset: Dataset) -> None:
    raw = read_json(sample_root / "toolmeta.json")
    search = sample_dataset.toolmeta["GoogleSearch"]
    assert search.description == raw["GoogleSearch"]["description"]
    assert search.required == ("query",)
    k = search.input("k")
    assert k is not None
    assert k.optional is True
    assert k.default == 10
    assert k.type == "int"
    assert search.input("nope") is None


def test_dataset_mapping_protocol(sample_dataset: Dataset) -> None:
    assert sample_dataset["5"].qid == "5"
    with pytest.raises(KeyError):
        sample_dataset["17"]
    assert [q.qid for q in iter(sample_dataset)] == list(sample_dataset.queries)


# --------------------------------------------------------------------------------------------
# Paths: reference_dialogs, absolutize, abs_files


def test_reference_dialogs_make_dataset_files_absolute(sample_dataset: Dataset) -> None:
    root = str(sample_dataset.root)
    assert os.path.isabs(root)
    dialogs = sample_dataset.reference_dialogs(sample_dataset["0"])
    image = dialogs[1]["tool_calls"][0]["function"]["arguments"]["image"]
    assert image == os.path.join(root, "image/image_0.jpg")
    assert os.path.isfile(image)
    # Non-path strings stay as written.
    expression = dialogs[3]["tool_calls"][0]["function"]["arguments"]["expression"]
    assert expression == "1.29+3.45+4.50"
    # The rest of the messages is kept.
    assert dialogs[0] == {"role": "user", "content": sample_dataset["0"].text}
    assert dialogs[1]["thought"] == sample_dataset["0"].dialogs[1]["thought"]
    assert dialogs[-1] == dict(sample_dataset["0"].dialogs[-1])
    assert len(dialogs) == len(sample_dataset["0"].dialogs)


def test_reference_dialogs_do_not_touch_the_query(sample_dataset: Dataset) -> None:
    query = sample_dataset["0"]
    sample_dataset.reference_dialogs(query)
    assert query.dialogs[1]["tool_calls"][0]["function"]["arguments"] == {
        "image": "image/image_0.jpg"
    }
    assert query.calls[0] == ReferenceCall(1, "OCR", {"image": "image/image_0.jpg"})


def test_reference_dialogs_leave_tool_outputs_and_non_strings(sample_dataset: Dataset) -> None:
    root = str(sample_dataset.root)
    dialogs = sample_dataset.reference_dialogs(sample_dataset["10"])
    # The tool's output names the dummy image, a file of the dataset: it is NOT rewritten...
    assert dialogs[4] == {
        "role": "tool",
        "name": "Plot",
        "content": {"type": "image", "content": "image/dummy_generated_image.jpg"},
    }
    # ... while the same string as an argument of the next call is.
    add_text = dialogs[5]["tool_calls"][0]["function"]["arguments"]
    assert add_text["image"] == os.path.join(root, "image/dummy_generated_image.jpg")
    assert add_text["position"] == "mt"

    search = sample_dataset.reference_dialogs(sample_dataset["4"])[3]
    assert search["tool_calls"][0]["function"]["arguments"]["k"] == 3
    bbox = sample_dataset.reference_dialogs(sample_dataset["11"])[1]
    assert bbox["tool_calls"][0]["function"]["arguments"]["top1"] is False


def test_reference_dialogs_tool_content_is_a_copy(data_copy: Path) -> None:
    dataset = load_dataset(data_copy)
    query = dataset["0"]
    dialogs = dataset.reference_dialogs(query)
    dialogs[2]["content"]["content"] = "tampered"
    assert query.dialogs[2]["content"]["content"] != "tampered"


def test_reference_dialogs_dot_slash_argument_stays(data_copy: Path) -> None:
    def change(data: dict[str, Any]) -> None:
        data["0"]["dialogs"][1]["tool_calls"][0]["function"]["arguments"]["image"] = (
            "./image/image_0.jpg"
        )

    edit_dataset(data_copy, change)
    dataset = load_dataset(data_copy)
    dialogs = dataset.reference_dialogs(dataset["0"])
    assert dialogs[1]["tool_calls"][0]["function"]["arguments"]["image"] == "./image/image_0.jpg"


@pytest.mark.parametrize(
    ("value", "joined"),
    [
        pytest.param("image/image_0.jpg", True, id="file"),
        pytest.param("image/dummy_generated_image.jpg", True, id="dummy-file"),
        pytest.param("dataset.json", True, id="any-file-under-root"),
        pytest.param("./image/image_0.jpg", False, id="dot-slash"),
        pytest.param("image//image_0.jpg", False, id="double-slash"),
        pytest.param("image/../image/image_0.jpg", False, id="dotdot"),
        pytest.param("image", False, id="directory"),
        pytest.param("image/", False, id="directory-slash"),
        pytest.param("image/nope.jpg", False, id="missing-file"),
        pytest.param("Eiffel Tower height", False, id="text"),
        pytest.param("", False, id="empty"),
    ],
)
def test_absolutize_strings(sample_dataset: Dataset, value: str, joined: bool) -> None:
    expected = os.path.join(str(sample_dataset.root), value) if joined else value
    assert sample_dataset.absolutize(value) == expected


@pytest.mark.parametrize("value", [3, 2.5, False, None, ["image/image_0.jpg"]])
def test_absolutize_non_strings_unchanged(sample_dataset: Dataset, value: Any) -> None:
    assert sample_dataset.absolutize(value) == value


def test_absolutize_already_absolute_path_is_kept(sample_dataset: Dataset) -> None:
    absolute = os.path.join(str(sample_dataset.root), "image/image_0.jpg")
    assert sample_dataset.absolutize(absolute) == absolute


def test_absolutize_outside_the_root_is_kept(sample_dataset: Dataset, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.jpg"
    outside.write_bytes(b"x")
    assert sample_dataset.absolutize(str(outside)) == str(outside)


def test_abs_files(sample_dataset: Dataset) -> None:
    root = sample_dataset.root
    assert sample_dataset.abs_files(sample_dataset["3"]) == [
        str(root / "image" / "image_8.jpg"),
        str(root / "image" / "image_6.jpg"),
    ]
    for path in sample_dataset.abs_files(sample_dataset["9"]):
        assert os.path.isabs(path)
        assert os.path.isfile(path)


def test_symlinked_root_is_not_resolved(data_copy: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(data_copy, target_is_directory=True)
    dataset = load_dataset(link)
    assert dataset.root == link
    assert dataset.root_str == str(link)
    dialogs = dataset.reference_dialogs(dataset["0"])
    image = dialogs[1]["tool_calls"][0]["function"]["arguments"]["image"]
    assert image == os.path.join(str(link), "image/image_0.jpg")
    assert dataset.abs_files(dataset["0"]) == [str(link / "image" / "image_0.jpg")]


def test_relative_root_becomes_absolute(data_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(data_copy.parent)
    dataset = load_dataset(data_copy.name)
    assert dataset.root == data_copy
    assert dataset.root.is_absolute()
    image = dataset.reference_dialogs(dataset["0"])[1]["tool_calls"][0]["function"]
    assert image["arguments"]["image"] == str(data_copy / "image" / "image_0.jpg")


# --------------------------------------------------------------------------------------------
# tool_metas and select


def test_tool_metas_prefer_toolmeta_json_then_query_copy(data_copy: Path) -> None:
    def change(data: dict[str, Any]) -> None:
        data["0"]["tools"][0]["description"] = "the query's own words for OCR"
        data["0"]["tools"].append(tool_meta("MyTool", "the query's own words for MyTool"))

    edit_dataset(data_copy, change)
    file_meta = read_json(data_copy / "toolmeta.json")
    dataset = load_dataset(data_copy)
    metas = dataset.tool_metas(dataset["0"])
    assert [m.name for m in metas] == ["OCR", "Calculator", "MyTool"]
    assert metas[0].description == file_meta["OCR"]["description"]
    assert metas[1].description == file_meta["Calculator"]["description"]
    assert metas[2].description == "the query's own words for MyTool"
    assert metas[2].required == ("text",)


def test_tool_metas_only_offer_the_query_tools(sample_dataset: Dataset) -> None:
    names = [m.name for m in sample_dataset.tool_metas(sample_dataset["12"])]
    assert names == ["OCR", "TextToImage", "ImageStylization", "AddText"]


@pytest.mark.parametrize(
    ("ids", "limit", "expected"),
    [
        pytest.param(None, None, [str(i) for i in range(17)], id="all"),
        pytest.param(["5", "1", "99"], None, ["1", "5"], id="ids-in-dataset-order"),
        pytest.param(None, 2, ["0", "1"], id="limit"),
        pytest.param(["12", "3", "7"], 2, ["3", "7"], id="ids-then-limit"),
        pytest.param([], None, [], id="no-ids"),
        pytest.param(None, 0, [], id="limit-zero"),
        pytest.param(None, 100, [str(i) for i in range(17)], id="limit-above-size"),
    ],
)
def test_select(
    sample_dataset: Dataset, ids: list[str] | None, limit: int | None, expected: list[str]
) -> None:
    assert [q.qid for q in sample_dataset.select(ids, limit)] == expected


# --------------------------------------------------------------------------------------------
# Whole-file problems


def test_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    error = load_error(missing)
    assert len(error.problems) == 1
    problem = error.problems[0]
    assert problem.file == str(missing)
    assert problem.query is None
    assert "is not a directory" in problem.message
    assert str(missing) in str(error)
    assert isinstance(error, GtaError)


def test_a_file_instead_of_a_directory(tmp_path: Path) -> None:
    path = tmp_path / "dataset.json"
    path.write_text("{}")
    error = load_error(path)
    assert "is not a directory" in str(error)


@pytest.mark.parametrize("name", ["dataset.json", "toolmeta.json"])
def test_missing_json_file(data_copy: Path, name: str) -> None:
    (data_copy / name).unlink()
    error = load_error(data_copy)
    found = matching(error, name, None, None, "file not found")
    assert len(found) == 1, describe(error)
    assert f"{name}: file not found" in str(error)


def test_invalid_json_reports_line_and_column(data_copy: Path) -> None:
    (data_copy / "dataset.json").write_text('{\n  "0": {\n    oops\n  }\n}\n')
    error = load_error(data_copy)
    found = matching(error, "dataset.json", None, None, "invalid JSON")
    assert len(found) == 1, describe(error)
    assert "line 3" in found[0].message
    assert "column 5" in found[0].message
    assert "dataset.json" in str(error)


def test_invalid_json_in_toolmeta(data_copy: Path) -> None:
    (data_copy / "toolmeta.json").write_text('{"OCR": [1, 2,]}')
    error = load_error(data_copy)
    found = matching(error, "toolmeta.json", None, None, "invalid JSON")
    assert len(found) == 1, describe(error)
    assert "line 1 column 15" in found[0].message


def test_undecodable_file(data_copy: Path) -> None:
    (data_copy / "dataset.json").write_bytes(b"\xff\xfe{")
    error = load_error(data_copy)
    assert matching(error, "dataset.json", None, None, "not UTF-8 text (byte 0"), describe(error)


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        pytest.param(
            "dataset.json", "[]", "must be an object keyed by query id", id="dataset-list"
        ),
        pytest.param(
            "dataset.json", '"x"', "must be an object keyed by query id", id="dataset-str"
        ),
        pytest.param("dataset.json", "{}", "holds no queries", id="dataset-empty"),
        pytest.param(
            "toolmeta.json", "[]", "must be an object keyed by tool name", id="toolmeta-list"
        ),
    ],
)
def test_top_level_not_an_object(data_copy: Path, name: str, text: str, fragment: str) -> None:
    (data_copy / name).write_text(text)
    error = load_error(data_copy)
    assert matching(error, name, None, None, fragment), describe(error)
    assert fragment in str(error)


def test_duplicate_query_id(data_copy: Path) -> None:
    data = read_json(data_copy / "dataset.json")
    members = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in data.items()]
    members.append(f'"3": {json.dumps(data["3"])}')
    (data_copy / "dataset.json").write_text("{" + ", ".join(members) + "}")
    error = load_error(data_copy)
    found = matching(error, "dataset.json", "3", None, "appears twice")
    assert len(found) == 1, describe(error)
    assert len(error.problems) == 1, describe(error)
    assert "dataset.json: query '3'" in str(error)


def test_duplicate_tool_in_toolmeta(data_copy: Path) -> None:
    meta = read_json(data_copy / "toolmeta.json")
    members = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in meta.items()]
    members.append(f'"OCR": {json.dumps(meta["OCR"])}')
    (data_copy / "toolmeta.json").write_text("{" + ", ".join(members) + "}")
    error = load_error(data_copy)
    assert matching(error, "toolmeta.json", None, "OCR", "described twice"), describe(error)


def test_duplicate_key_inside_a_query_is_not_a_duplicate_query_id(data_copy: Path) -> None:
    text = json.dumps(read_json(data_copy / "dataset.json"))
    old = '"arguments": {"expression": "1.29+3.45+4.50"}'
    assert text.count(old) == 1
    text = text.replace(old, '"arguments": {"expression": "1+1", "expression": "1.29+3.45+4.50"}')
    (data_copy / "dataset.json").write_text(text)
    # Either accepting the file or reporting the repeated key in query "0" is fine; blaming a
    # query called "expression" is not.
    problems: list[DatasetProblem] = []
    try:
        load_dataset(data_copy)
    except DatasetError as error:
        problems = error.problems
    assert {p.query for p in problems} <= {"0"}, problems


def test_toolmeta_key_must_match_name(data_copy: Path) -> None:
    edit_toolmeta(data_copy, lambda m: m.__setitem__("Bogus", tool_meta("Other", "x")))
    error = load_error(data_copy)
    found = matching(error, "toolmeta.json", None, "Bogus.name", "does not match its key")
    assert len(found) == 1, describe(error)
    assert len(error.problems) == 1, describe(error)


def test_error_message_lists_at_most_50_problems(data_copy: Path) -> None:
    def change(meta: dict[str, Any]) -> None:
        for i in range(60):
            meta[f"Bogus{i}"] = tool_meta(f"Other{i}", "x")

    edit_toolmeta(data_copy, change)
    error = load_error(data_copy)
    assert len(error.problems) == 60
    text = str(error)
    assert "60 problem(s)" in text
    assert text.count("\n  - ") == 50
    assert "... and 10 more" in text
    assert "--gta-data" in text
    assert error.root == data_copy


# --------------------------------------------------------------------------------------------
# Defects inside a query or a tool meta


def _set_call(data: dict[str, Any], qid: str, index: int, name: str) -> None:
    data[qid]["dialogs"][index]["tool_calls"][0]["function"]["name"] = name


def _gt(qid: str, change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        edit_dataset(root, lambda d: change(d[qid]["gt_answer"]))

    return mutate


def _data(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    return lambda root: edit_dataset(root, change)


def _meta(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    return lambda root: edit_toolmeta(root, change)


def _unknown_tool(data: dict[str, Any]) -> None:
    _set_call(data, "0", 3, "Solver")
    data["0"]["dialogs"][4]["name"] = "Solver"


DEFECTS = [
    pytest.param(
        _data(lambda d: d["3"].pop("dialogs")),
        ("dataset.json", "3", None, "missing field(s) dialogs"),
        id="query-without-dialogs",
    ),
    pytest.param(
        _data(lambda d: d["3"].pop("gt_answer")),
        ("dataset.json", "3", None, "missing field(s) gt_answer"),
        id="query-without-gt_answer",
    ),
    pytest.param(
        _data(lambda d: d.__setitem__("3", ["not", "an", "object"])),
        ("dataset.json", "3", None, "must be an object"),
        id="query-not-an-object",
    ),
    pytest.param(
        lambda root: (root / "image" / "image_7.jpg").unlink(),  # only query 5 uses it
        ("dataset.json", "5", "files[0].path", "missing file 'image/image_7.jpg'"),
        id="missing-image-file",
    ),
    pytest.param(
        _data(lambda d: d["0"]["files"][0].__setitem__("path", "../data/image/image_0.jpg")),
        ("dataset.json", "0", "files[0].path", "must be relative to the dataset root"),
        id="files-path-dotdot",
    ),
    pytest.param(
        lambda root: edit_dataset(
            root, lambda d: d["0"]["files"][0].__setitem__("path", str(root / "image/image_0.jpg"))
        ),
        ("dataset.json", "0", "files[0].path", "must be relative to the dataset root"),
        id="files-path-absolute",
    ),
    pytest.param(
        _data(lambda d: d["0"]["files"][0].pop("path")),
        ("dataset.json", "0", "files[0]", "string path"),
        id="files-entry-without-path",
    ),
    pytest.param(
        _data(lambda d: d["0"].__setitem__("files", "image/image_0.jpg")),
        ("dataset.json", "0", "files", "must be a list"),
        id="files-not-a-list",
    ),
    pytest.param(
        _data(lambda d: d["1"]["tools"][1].pop("name")),
        ("dataset.json", "1", "tools[1].name", "non-empty string name"),
        id="tool-without-name",
    ),
    pytest.param(
        _data(lambda d: d["0"]["tools"][0]["inputs"][0].__setitem__("type", "picture")),
        ("dataset.json", "0", "tools[0].inputs[0].type", "'picture' is not one of"),
        id="tool-bad-input-type",
    ),
    pytest.param(
        _data(lambda d: d["0"]["tools"][0].pop("description")),
        ("dataset.json", "0", "tools[0].description", "needs a string description"),
        id="tool-without-description",
    ),
    pytest.param(
        _data(lambda d: d["0"].__setitem__("tools", [])),
        ("dataset.json", "0", "tools", "non-empty list"),
        id="tools-empty",
    ),
    pytest.param(
        _data(lambda d: d["0"]["tools"].__setitem__(0, "OCR")),
        ("dataset.json", "0", "tools[0]", "a tool meta must be an object, got str"),
        id="tool-not-an-object",
    ),
    pytest.param(
        _data(lambda d: d["0"]["tools"][0]["inputs"].__setitem__(0, "image")),
        ("dataset.json", "0", "tools[0].inputs[0]", "must be an object, got str"),
        id="tool-input-not-an-object",
    ),
    pytest.param(
        _data(lambda d: d["0"]["tools"][0]["inputs"][0].__setitem__("description", 5)),
        ("dataset.json", "0", "tools[0].inputs[0].description", "must be a string or null"),
        id="tool-input-description-not-a-string",
    ),
    pytest.param(
        _data(lambda d: d["0"]["tools"][0]["inputs"].append(d["0"]["tools"][0]["inputs"][0])),
        ("dataset.json", "0", "tools[0].inputs", "repeats an input name"),
        id="tool-repeats-an-input",
    ),
    pytest.param(
        _meta(lambda m: m["OCR"]["outputs"][0].__setitem__("type", "hologram")),
        ("toolmeta.json", None, "OCR.outputs[0].type", "'hologram' is not one of"),
        id="toolmeta-bad-output-type",
    ),
    pytest.param(
        _meta(lambda m: m.__setitem__("OCR", None)),
        ("toolmeta.json", None, "OCR", "a tool meta must be an object, got NoneType"),
        id="toolmeta-entry-not-an-object",
    ),
    pytest.param(
        _meta(lambda m: m["OCR"]["inputs"][0].__setitem__("type", "picture")),
        ("toolmeta.json", None, "OCR.inputs[0].type", "'picture' is not one of"),
        id="toolmeta-bad-input-type",
    ),
    pytest.param(
        _meta(lambda m: m["OCR"]["inputs"][0].pop("name")),
        ("toolmeta.json", None, "OCR.inputs[0].name", "non-empty string name"),
        id="toolmeta-input-without-name",
    ),
    pytest.param(
        _meta(lambda m: m["OCR"].__setitem__("outputs", None)),
        ("toolmeta.json", None, "OCR.outputs", "needs a list of outputs"),
        id="toolmeta-outputs-not-a-list",
    ),
    pytest.param(
        _data(_unknown_tool),
        (
            "dataset.json",
            "0",
            "dialogs[3].tool_calls[0].function.name",
            "unknown tool 'Solver': not in this query's tools (OCR, Calculator)",
        ),
        id="unknown-tool-in-chain",
    ),
    pytest.param(
        _meta(lambda m: m.pop("Solver")),
        (
            "dataset.json",
            "1",
            "dialogs[3].tool_calls[0].function.name",
            "tool 'Solver' is not described in toolmeta.json",
        ),
        id="tool-absent-from-toolmeta",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"][2].__setitem__("name", "Calculator")),
        (
            "dataset.json",
            "0",
            "dialogs[2].name",
            "tool message for 'Calculator' does not match the call to 'OCR'",
        ),
        id="tool-message-name-differs",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"].pop(1)),
        ("dataset.json", "0", "dialogs[1]", "tool message without a preceding tool call"),
        id="tool-message-without-call",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"][2].__setitem__("content", "9.24")),
        ("dataset.json", "0", "dialogs[2].content", "type: text|image"),
        id="tool-content-not-an-object",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"].insert(1, {"role": "assistant", "content": "early"})),
        ("dataset.json", "0", "dialogs[1]", "the final answer must be the last message"),
        id="answer-in-the-middle",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"][0].__setitem__("role", "system")),
        ("dataset.json", "0", "dialogs[0]", "must be the user's question"),
        id="first-message-not-user",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"].insert(1, {"role": "user", "content": "more"})),
        ("dataset.json", "0", "dialogs[1]", "one user message"),
        id="second-user-message",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"][5].__setitem__("role", "narrator")),
        ("dataset.json", "0", "dialogs[5].role", "unknown role 'narrator'"),
        id="unknown-role",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"].__setitem__(2, "9.24")),
        ("dataset.json", "0", "dialogs[2]", "must be an object"),
        id="message-not-an-object",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"][1]["tool_calls"][0].__setitem__("function", "OCR")),
        ("dataset.json", "0", "dialogs[1].tool_calls[0].function", "must be an object"),
        id="call-function-not-an-object",
    ),
    pytest.param(
        _data(lambda d: d["0"].__setitem__("dialogs", [])),
        ("dataset.json", "0", "dialogs", "non-empty list"),
        id="dialogs-empty",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"][1]["tool_calls"][0]["function"].__setitem__("name", 7)),
        ("dataset.json", "0", "dialogs[1].tool_calls[0].function.name", "must be a string"),
        id="call-name-not-a-string",
    ),
    pytest.param(
        _data(
            lambda d: d["0"]["dialogs"][1]["tool_calls"][0]["function"].__setitem__("arguments", 7)
        ),
        (
            "dataset.json",
            "0",
            "dialogs[1].tool_calls[0].function.arguments",
            "must be an object (or a raw string), got int",
        ),
        id="arguments-a-number",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"][1].__setitem__("tool_calls", [])),
        ("dataset.json", "0", "dialogs[1].tool_calls", "non-empty list of calls"),
        id="tool-calls-empty",
    ),
    pytest.param(
        _data(lambda d: d["0"].__setitem__("gt_answer", 42)),
        ("dataset.json", "0", "gt_answer", "got int"),
        id="gt-number",
    ),
    pytest.param(
        _data(lambda d: d["0"].__setitem__("gt_answer", "9.24")),
        ("dataset.json", "0", "gt_answer", "got str"),
        id="gt-string",
    ),
    pytest.param(
        _data(lambda d: d["7"]["gt_answer"].append(3)),
        ("dataset.json", "7", "gt_answer", "must be a list of reference strings"),
        id="gt-subjective-not-strings",
    ),
    pytest.param(
        _gt("0", lambda gt: gt.pop("whitelist")),
        ("dataset.json", "0", "gt_answer.whitelist", "must be a list of alias groups"),
        id="gt-whitelist-missing",
    ),
    pytest.param(
        _gt("0", lambda gt: gt.__setitem__("whitelist", [["9.24", 9.24]])),
        ("dataset.json", "0", "gt_answer.whitelist[0]", "must be a list of alias strings"),
        id="gt-whitelist-group-not-strings",
    ),
    pytest.param(
        _gt("3", lambda gt: gt.__setitem__("whitelist", [["15.10"], "5.03"])),
        ("dataset.json", "3", "gt_answer.whitelist[1]", "must be a list of alias strings"),
        id="gt-whitelist-group-a-string",
    ),
    pytest.param(
        _gt("0", lambda gt: gt.__setitem__("blacklist", "10")),
        ("dataset.json", "0", "gt_answer.blacklist", "must be a list of alias groups"),
        id="gt-blacklist-a-string",
    ),
    pytest.param(
        _gt("0", lambda gt: gt.__setitem__("blacklist", [["10", 10]])),
        ("dataset.json", "0", "gt_answer.blacklist[0]", "must be a list of alias strings"),
        id="gt-blacklist-group-not-strings",
    ),
    pytest.param(
        _gt("0", lambda gt: gt.pop("blacklist")),
        ("dataset.json", "0", "gt_answer.blacklist", "missing"),
        id="gt-blacklist-missing",
    ),
]


ODD_BUT_SCORED = [
    pytest.param(
        _data(lambda d: d["0"]["dialogs"][-1].__setitem__("content", None)),
        ("dataset.json", "0", "dialogs[5].content", "the reference answer is not a string"),
        id="answer-without-text",
    ),
    pytest.param(
        _data(lambda d: d["7"].__setitem__("gt_answer", [])),
        ("dataset.json", "7", "gt_answer", "no reference answers"),
        id="gt-subjective-empty",
    ),
    pytest.param(
        _gt("0", lambda gt: gt.__setitem__("whitelist", [])),
        ("dataset.json", "0", "gt_answer.whitelist", "every answer counts as correct"),
        id="gt-whitelist-empty",
    ),
    pytest.param(
        _gt("0", lambda gt: gt.__setitem__("whitelist", [["9.24", ""]])),
        ("dataset.json", "0", "gt_answer.whitelist[0]", "matches any word"),
        id="gt-whitelist-empty-alias",
    ),
    pytest.param(
        _gt("0", lambda gt: gt.__setitem__("greylist", [])),
        ("dataset.json", "0", "gt_answer", "unknown keys ['greylist'] are ignored"),
        id="gt-unknown-key",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), ODD_BUT_SCORED)
def test_odd_but_scorable_answers_are_warnings(
    data_copy: Path,
    mutate: Callable[[Path], None],
    expected: tuple[str, str, str, str],
) -> None:
    # The official evaluator scores these without failing, so the run goes ahead; the oddity is
    # reported as a warning that names the file, query and field.
    file, qid, field, fragment = expected
    mutate(data_copy)
    dataset = load_dataset(data_copy)
    assert qid in dataset.queries
    found = [
        w
        for w in dataset.warnings
        if (w.file, w.query, w.field) == (file, qid, field) and fragment in w.message
    ]
    assert len(found) == 1, dataset.warnings


def _first_argument(key: str, value: Any) -> Callable[[Path], None]:
    """Set an argument of query 0's first reference call (OCR)."""
    return _data(
        lambda d: d["0"]["dialogs"][1]["tool_calls"][0]["function"]["arguments"].__setitem__(
            key, value
        )
    )


def _negative_answer(data: dict[str, Any]) -> None:
    # Release queries 19, 69, 71...: the official \b cannot match before the minus sign.
    data["0"]["gt_answer"]["whitelist"] = [["-9.24"]]
    data["0"]["dialogs"][-1]["content"] = "-9.24"


#: Shapes of the real release that the official loader accepts: they load, with no warning,
#: and are named as quirks (pytest_gta.quirks) with the modes a reference replay cannot pass.
QUIRKY_SHAPES = [
    pytest.param(
        _data(lambda d: d["0"]["dialogs"].pop(2)),
        ("0", "unanswered_call", "dialogs[1]: OCR", ()),
        id="call-without-tool-message",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"].pop(4)),
        ("0", "unanswered_call", "dialogs[3]: Calculator", ()),
        id="inner-call-without-tool-message",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"].pop()),
        ("0", "answer_not_in_chain", "objective answer", ("e2e",)),
        id="no-final-answer",
    ),
    pytest.param(
        _data(lambda d: d["10"]["dialogs"].pop()),
        ("10", "no_final_answer", "ends on a tool's output", ()),
        id="image-query-ends-on-its-image",
    ),
    pytest.param(
        _data(lambda d: d["11"]["dialogs"].__delitem__(slice(-2, None))),
        ("11", "no_final_answer", "ends on a call", ()),
        id="ends-on-an-unanswered-call",
    ),
    pytest.param(
        _data(lambda d: d["0"]["dialogs"][1].__setitem__("content", "Reading the bill first.")),
        ("0", "call_with_text", "dialogs[1]: OCR", ()),
        id="call-carrying-text",
    ),
    pytest.param(
        _data(
            lambda d: d["0"]["dialogs"][1]["tool_calls"][0]["function"].__setitem__(
                "arguments", "image/image_0.jpg"
            )
        ),
        ("0", "rejected_call", "dialogs[1]: OCR: invalid json format", ("step",)),
        id="arguments-a-raw-string",
    ),
    pytest.param(
        _first_argument("bbox", "(1, 2, 3, 4)"),
        ("0", "rejected_call", "unknown arguments: {'bbox'}", ("step",)),
        id="undeclared-argument",
    ),
    pytest.param(
        _first_argument("image", "/image/image_447.png"),
        ("0", "missing_file", "No such file: '/image/image_447.png'", ("step",)),
        id="argument-names-a-missing-file",
    ),
    pytest.param(
        _data(lambda d: d["0"]["tools"].append(d["0"]["tools"][0])),
        ("0", "duplicate_tool", "tools: OCR", ()),
        id="tool-listed-twice",
    ),
    pytest.param(
        _data(_negative_answer),
        ("0", "answer_misses_reference", "answer '-9.24'", ("step", "e2e")),
        id="answer-misses-its-whitelist",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), QUIRKY_SHAPES)
def test_release_shapes_load_and_are_named_as_quirks(
    data_copy: Path,
    mutate: Callable[[Path], None],
    expected: tuple[str, str, str, tuple[str, ...]],
) -> None:
    qid, kind, fragment, fails = expected
    mutate(data_copy)
    dataset = load_dataset(data_copy)
    assert qid in dataset.queries
    assert not [w for w in dataset.warnings if w.query == qid], dataset.warnings
    found = [q for q in find_quirks(dataset) if q.qid == qid and q.kind.key == kind]
    assert [q for q in found if fragment in q.detail], found
    assert {m for q in found for m in q.fails} == set(fails)


@pytest.mark.parametrize(("mutate", "expected"), DEFECTS)
def test_defect_is_reported_with_file_query_and_field(
    data_copy: Path,
    mutate: Callable[[Path], None],
    expected: tuple[str, str | None, str | None, str],
) -> None:
    file, qid, field, fragment = expected
    mutate(data_copy)
    error = load_error(data_copy)
    found = matching(error, file, qid, field, fragment)
    assert len(found) == 1, describe(error)
    text = str(error)
    assert str(found[0]) in text
    assert text.count(f"  - {file}: ") >= 1
    if qid is not None:
        assert f"query {qid!r}" in str(found[0])
    if field is not None:
        assert f": {field}: " in str(found[0])
    if file == "dataset.json":
        # The defect stays in its query: no other query is blamed.
        assert {p.query for p in error.problems} == {qid}, describe(error)


@pytest.mark.parametrize(
    "blacklist",
    [None, [], [["10"]]],
    ids=["null", "empty", "groups"],
)
def test_valid_blacklists_are_accepted(data_copy: Path, blacklist: Any) -> None:
    edit_dataset(data_copy, lambda d: d["0"]["gt_answer"].__setitem__("blacklist", blacklist))
    assert load_dataset(data_copy)["0"].gt_answer["blacklist"] == blacklist


def test_query_missing_dialogs_is_named_in_the_message(data_copy: Path) -> None:
    edit_dataset(data_copy, lambda d: d["3"].pop("dialogs"))
    error = load_error(data_copy)
    assert "dataset.json: query '3': missing field(s) dialogs" in str(error)


def test_several_defects_are_all_reported(data_copy: Path) -> None:
    def change(data: dict[str, Any]) -> None:
        data["0"]["gt_answer"] = 42
        data["7"]["dialogs"][0]["role"] = "system"
        data["11"]["files"][0]["path"] = "../image_5.jpg"

    edit_dataset(data_copy, change)
    (data_copy / "image" / "image_9.jpg").unlink()
    edit_toolmeta(data_copy, lambda m: m.__setitem__("Bogus", tool_meta("Other", "x")))
    error = load_error(data_copy)
    located = sorted((p.file, p.query or "", p.field or "") for p in error.problems)
    assert located == sorted(
        [
            ("dataset.json", "0", "gt_answer"),
            ("dataset.json", "7", "dialogs[0]"),
            ("dataset.json", "11", "files[0].path"),
            ("dataset.json", "8", "files[0].path"),
            ("toolmeta.json", "", "Bogus.name"),
        ]
    )
    assert len(error.problems) == 5
    assert "5 problem(s)" in str(error)


def test_one_query_can_have_several_problems(data_copy: Path) -> None:
    def change(data: dict[str, Any]) -> None:
        data["2"]["gt_answer"] = {"whitelist": "x", "blacklist": "x", "extra": 1}
        data["2"]["files"][0]["path"] = "image/nothere.jpg"

    edit_dataset(data_copy, change)
    error = load_error(data_copy)
    fields = sorted(p.field or "" for p in error.problems if p.query == "2")
    assert fields == ["files[0].path", "gt_answer.blacklist", "gt_answer.whitelist"]


# --------------------------------------------------------------------------------------------
# Quirks: reference calls the official parser would reject


def test_reference_call_missing_required_argument_is_a_quirk(data_copy: Path) -> None:
    edit_dataset(
        data_copy, lambda d: d["0"]["dialogs"][1]["tool_calls"][0]["function"]["arguments"].clear()
    )
    dataset = load_dataset(data_copy)
    assert "0" in dataset.queries
    assert dataset.warnings == []
    [quirk] = find_quirks(dataset, [dataset["0"]])
    assert (quirk.kind.key, quirk.qid) == ("rejected_call", "0")
    assert quirk.detail == "dialogs[1]: OCR: missing required arguments: {'image'}"
    assert quirk.fails == ("step",)


def test_reference_call_with_unknown_argument_is_a_quirk(data_copy: Path) -> None:
    def change(data: dict[str, Any]) -> None:
        data["4"]["dialogs"][3]["tool_calls"][0]["function"]["arguments"]["lang"] = "en"

    edit_dataset(data_copy, change)
    dataset = load_dataset(data_copy)
    assert dataset.warnings == []
    assert [(q.kind.key, q.qid, q.detail) for q in find_quirks(dataset, [dataset["4"]])] == [
        ("rejected_call", "4", "dialogs[3]: GoogleSearch: unknown arguments: {'lang'}")
    ]


def test_omitting_an_optional_argument_is_fine(data_copy: Path) -> None:
    edit_dataset(
        data_copy, lambda d: d["4"]["dialogs"][3]["tool_calls"][0]["function"]["arguments"].pop("k")
    )
    assert load_dataset(data_copy).warnings == []


# --------------------------------------------------------------------------------------------
# The bundled sample


def test_bundled_sample_path_prefers_the_copy_inside_a_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "site-packages" / "pytest_gta"
    (package / "_sample").mkdir(parents=True)
    (package / "_sample" / "dataset.json").write_text("{}")
    monkeypatch.setattr(dataset_module, "__file__", str(package / "dataset.py"))
    assert bundled_sample_path() == package / "_sample"


def test_the_committed_sample_is_what_its_generator_writes(
    sample_root: Path, tmp_path: Path
) -> None:
    """The JSON files come from fixtures/make_gta_sample.py, whose checks they pass.

    (Images are compared by the manifest test; their bytes may vary with Pillow's JPEG encoder.)
    """
    script = sample_root.parent / "make_gta_sample.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("wrote 17 queries, 11 images, 48 tool calls to ")
    assert "recorded" not in done.stdout  # only the default output updates the manifest
    for name in ("dataset.json", "toolmeta.json"):
        assert (tmp_path / "out" / name).read_bytes() == (sample_root / name).read_bytes(), name


def test_bundled_sample_path(sample_root: Path) -> None:
    path = bundled_sample_path()
    assert path.is_dir()
    assert (path / "dataset.json").is_file()
    assert (path / "toolmeta.json").is_file()
    assert (path / "image").is_dir()
    assert (path / "dataset.json").read_bytes() == (sample_root / "dataset.json").read_bytes()
    assert len(load_dataset(path)) == 17


def test_a_call_with_several_tool_calls_may_get_several_tool_messages(data_copy: Path) -> None:
    # Only tool_calls[0] is scored, but data with parallel calls must still load.
    def change(data: dict[str, Any]) -> None:
        dialogs = data["0"]["dialogs"]
        extra = {"type": "function", "function": {"name": "OCR", "arguments": {"image": "x"}}}
        dialogs[1]["tool_calls"].append(extra)
        dialogs.insert(
            3, {"role": "tool", "name": "OCR", "content": {"type": "text", "content": ""}}
        )

    edit_dataset(data_copy, change)
    dataset = load_dataset(data_copy)
    assert [call.name for call in dataset["0"].calls] == ["OCR", "Calculator"]
