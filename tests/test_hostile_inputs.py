"""Hostile inputs to the loaders and parsers end cleanly (SPEC section 7).

Every input from outside (dataset files, mock scripts, cache entries, cassettes, model replies,
image files) must end as a usage error naming the file, a scored model mistake, a cache miss or a
clean tool error: never a traceback. Unit tests pin each reproduced defect; property tests throw
random and hostile variants at the same entry points.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import io
import json
import shutil
import struct
import sys
import time
import warnings
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from pytest_gta import jsonsafe
from pytest_gta.dataset import Dataset
from pytest_gta.errors import DatasetError, GtaToolError, GtaUsageError
from pytest_gta.jsonsafe import MAX_DEPTH
from pytest_gta.models import tool_text, vllm_engine
from pytest_gta.models.anthropic_chat import parse_message
from pytest_gta.models.cache import CacheEntryWarning, ResponseCache
from pytest_gta.models.mock import load_script
from pytest_gta.models.openai_convert import parse_arguments
from pytest_gta.protocol import native
from pytest_gta.protocol import react as p
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import (
    ChatMessage,
    ModelOutput,
    ResultItem,
    ToolCall,
    ToolMeta,
    ToolParam,
    ToolResult,
    Usage,
)
from pytest_gta.validation import load_dataset
from tests.helpers.paths import SAMPLE
from tool_backends import image_tools, ocr
from tool_backends.cassettes import Cassettes, portable_arguments
from tool_backends.paths import image_size, new_output_path, open_rgb
from tool_backends.vlm import VlmBackend

TOO_DEEP = f"nested too deeply (more than {MAX_DEPTH} levels)"
HUGE_INT = "7" * 5000
INVALID_JSON = native.INVALID_JSON
FAST = settings(max_examples=150, deadline=None)
#: Stands for a hostile value in a document that is then written out as text.
MARKER = "__HOSTILE_VALUE__"


def nested(levels: int, leaf: str = "1") -> str:
    """JSON text of ``levels`` nested lists around ``leaf``."""
    return "[" * levels + leaf + "]" * levels


def nested_value(levels: int, leaf: Any = "x") -> Any:
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


# ------------------------------------------------------------------------------------------------
# Shared strategies

_leaf_texts = st.one_of(
    st.sampled_from(
        ["null", "true", "false", "NaN", "Infinity", "-Infinity", "1e999", '"\\ud83d"', '"\\udcff"']
    ),
    st.integers(-(10**30), 10**30).map(str),
    st.text(max_size=8).map(lambda s: json.dumps(s)),
)


def _containers(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.lists(children, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.lists(st.tuples(st.text(max_size=4), children), max_size=3).map(
            lambda kv: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in kv) + "}"
        ),
    )


#: JSON text (mostly valid) that Python's ``json`` chokes on or that breaks later walks: deep
#: nesting on both sides of MAX_DEPTH and of the parser's recursion limit, 4,300+ digit numbers,
#: NaN, lone surrogates.
hostile_json = st.one_of(
    st.recursive(_leaf_texts, _containers, max_leaves=12),
    st.tuples(
        st.sampled_from([MAX_DEPTH - 2, MAX_DEPTH, MAX_DEPTH + 1, 900, 5000, 100_000])
        | st.integers(0, 1500),
        st.sampled_from(["[", '{"a":']),
    ).map(lambda t: t[1] * t[0] + "1" + ("]" if t[1] == "[" else "}") * t[0]),
    st.integers(4290, 6000).map(lambda n: "9" * n),
    st.integers(4290, 6000).map(lambda n: "[" + "1" * n + "]"),
)


# ------------------------------------------------------------------------------------------------
# Item 1: dataset.json and toolmeta.json


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(SAMPLE, root)
    return root


def load_error(root: Path) -> DatasetError:
    with pytest.raises(DatasetError) as info:
        load_dataset(root)
    return info.value


def only_problem(error: DatasetError) -> str:
    assert len(error.problems) == 1, error
    return str(error.problems[0])


@pytest.mark.parametrize("name", ["dataset.json", "toolmeta.json"])
@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(nested(100_000).encode(), TOO_DEEP, id="100k-deep"),
        pytest.param(('{"0": ' + nested(100_000) + "}").encode(), TOO_DEEP, id="100k-deep-in-obj"),
        pytest.param(
            ('{"0": ' + HUGE_INT + "}").encode(),
            "a number has more than 4300 digits",
            id="5000-digits",
        ),
        pytest.param(
            b'{"0": "caf\xe9"}', "not UTF-8 text (byte 10: invalid continuation", id="latin-1"
        ),
        pytest.param(b"\xff\xfe{\x00", "not UTF-8 text (byte 0: invalid start byte)", id="utf-16"),
    ],
)
def test_unreadable_json_files_are_one_problem_naming_the_file(data, name, content, message):
    (data / name).write_bytes(content)
    first, *rest = (str(problem) for problem in load_error(data).problems)
    assert first.startswith(f"{name}: {message}")
    # Without tool descriptions the queries cannot be checked further; they say so (as before).
    assert all("is not described in toolmeta.json" in problem for problem in rest)
    assert rest == [] or name == "toolmeta.json"


def write_with(path: Path, change, hostile: str) -> None:
    """Rewrite a JSON file with ``hostile`` text where ``change`` puts the marker.

    Text, not ``json.dumps`` of a deep value: the encoder would hit the recursion limit itself.
    """
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document).replace(json.dumps(MARKER), hostile, 1))


def test_deep_but_loadable_argument_names_query_and_field(data):
    def change(dataset):
        arguments = dataset["3"]["dialogs"][1]["tool_calls"][0]["function"]["arguments"]
        arguments["image"] = MARKER

    # 900 levels load: Python's parser goes to about 1,000.
    write_with(data / "dataset.json", change, nested(900, '"x"'))
    assert only_problem(load_error(data)) == (
        f"dataset.json: query '3': dialogs[1].tool_calls[0].function.arguments.image: {TOO_DEEP}"
    )


def test_deep_toolmeta_entry_names_tool_and_field(data):
    meta = json.loads((data / "toolmeta.json").read_text())
    meta["OCR"]["inputs"][0]["default"] = nested_value(200)
    (data / "toolmeta.json").write_text(json.dumps(meta))
    problems = [str(p) for p in load_error(data).problems]
    assert f"toolmeta.json: OCR.inputs[0].default: {TOO_DEEP}" in problems
    # Not described any more, so the queries that use OCR say so too; nothing crashed.
    assert all(p.startswith(("toolmeta.json", "dataset.json")) for p in problems)


def test_the_limit_is_max_depth_for_the_whole_file(data):
    dataset = json.loads((data / "dataset.json").read_text())
    tool_output = dataset["0"]["dialogs"][2]["content"]
    # file object, query, dialogs, message, content object: 5 levels above the value.
    tool_output["content"] = nested_value(MAX_DEPTH - 5)
    (data / "dataset.json").write_text(json.dumps(dataset))
    loaded = load_dataset(data)
    assert loaded.reference_dialogs(loaded["0"])[2]["content"] == tool_output
    tool_output["content"] = nested_value(MAX_DEPTH - 4)
    (data / "dataset.json").write_text(json.dumps(dataset))
    assert only_problem(load_error(data)).startswith(
        "dataset.json: query '0': dialogs[2].content.content"
    )


def test_deep_structures_never_reach_deepcopy(data):
    """A structure deep enough to break ``copy.deepcopy`` is refused before any walk."""
    # Python's default limit: a library imported earlier in the same worker may have raised it,
    # and the depth that breaks deepcopy depends on it.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        with pytest.raises(RecursionError):  # what Dataset.reference_dialogs would have hit
            copy.deepcopy(nested_value(5000))
    finally:
        sys.setrecursionlimit(limit)

    def change(dataset):
        dataset["1"]["dialogs"][2]["content"]["content"] = MARKER

    write_with(data / "dataset.json", change, nested(600, "5"))
    assert only_problem(load_error(data)) == (
        f"dataset.json: query '1': dialogs[2].content.content: {TOO_DEEP}"
    )


# ------------------------------------------------------------------------------------------------
# Item 2: symlinks out of the dataset


def test_image_symlink_out_of_the_dataset_is_refused(data, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("API_KEY=hunter2")
    (data / "image" / "image_0.jpg").unlink()
    (data / "image" / "image_0.jpg").symlink_to(secret)
    problems = [str(p) for p in load_error(data).problems]
    assert problems == [
        f"dataset.json: query '{q}': files[0].path: 'image/image_0.jpg' leads out of the dataset "
        f"directory (to {secret}); copy the file into {data} instead of linking to it"
        for q in ("0", "9")
    ]


def test_image_directory_linked_elsewhere_is_refused(data, tmp_path):
    elsewhere = tmp_path / "etc"
    shutil.move(data / "image", elsewhere)
    (data / "image").symlink_to(elsewhere, target_is_directory=True)
    error = load_error(data)
    assert all("leads out of" in p.message for p in error.problems)
    refused = {(p.query, p.field) for p in error.problems}
    for qid, query in _raw(data).items():
        assert {(qid, f"files[{i}].path") for i in range(len(query["files"]))} <= refused
    # The reference image outputs live there too.
    assert ("10", "dialogs[4].content.content") in refused


def test_reference_image_output_linked_out_is_refused(data):
    (data / "image" / "dummy_generated_image.jpg").unlink()
    (data / "image" / "dummy_generated_image.jpg").symlink_to("/etc/hostname")
    fields = {(p.query, p.field) for p in load_error(data).problems}
    assert ("10", "dialogs[4].content.content") in fields
    assert ("12", "dialogs[8].content.content") in fields


def test_links_that_stay_inside_are_fine(data):
    (data / "image" / "image_0.jpg").rename(data / "real_0.jpg")
    (data / "image" / "image_0.jpg").symlink_to(data / "real_0.jpg")
    (data / "pictures").symlink_to(data / "image", target_is_directory=True)
    dataset = _raw(data)
    dataset["1"]["files"][0]["path"] = "pictures/image_1.jpg"
    (data / "dataset.json").write_text(json.dumps(dataset))
    loaded = load_dataset(data)
    assert loaded.abs_files(loaded["1"]) == [str(data / "pictures" / "image_1.jpg")]


def _raw(root: Path) -> dict[str, Any]:
    return json.loads((root / "dataset.json").read_text())


# ------------------------------------------------------------------------------------------------
# Item 3: mock scripts


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(nested(100_000).encode(), TOO_DEEP, id="100k-deep"),
        pytest.param(('{"default": ' + HUGE_INT + "}").encode(), "4300 digits", id="5000-digits"),
        pytest.param(b'{"default": "\xff"}', "not UTF-8 text", id="not-utf8"),
        pytest.param(b'{"default": ', "invalid JSON at line 1 column 13", id="truncated"),
        pytest.param(('{"default": ' + nested(100) + "}").encode(), TOO_DEEP, id="100-deep"),
    ],
)
def test_unusable_mock_script_is_a_usage_error_naming_the_file(tmp_path, content, message):
    script = tmp_path / "script.json"
    script.write_bytes(content)
    with pytest.raises(GtaUsageError) as info:
        load_script(script)
    text = str(info.value)
    assert text.startswith(f"--gta-model=mock:{script}: ")
    assert message in text
    assert 'a mock script is a UTF-8 JSON object {"responses"' in text


def test_mock_script_that_is_a_directory(tmp_path):
    with pytest.raises(GtaUsageError, match="is a directory, not a regular file"):
        load_script(tmp_path)


# ------------------------------------------------------------------------------------------------
# Item 4: response cache and tool cassettes


def _entry_path(cache: ResponseCache, key: str) -> Path:
    return cache.root / key[:2] / f"{key}.json"


#: The key the cache tests look up (an entry must name the request it answers).
CACHE_KEY = ResponseCache.key({"q": 1})


def _good_entry() -> dict[str, Any]:
    return {
        "schema": "pytest-gta-response/1",
        "key": CACHE_KEY,
        "output": {
            "text": "Final Answer: 4",
            "tool_calls": [{"id": "c1", "name": "OCR", "arguments": {"image": "x"}}],
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    }


def _corrupt(change):
    entry = _good_entry()
    change(entry)
    return json.dumps(entry).encode()


CORRUPT_ENTRIES = {
    "100k-deep": nested(100_000).encode(),
    "deep-output": json.dumps({"output": nested_value(200)}).encode(),
    "huge-number": (
        '{"output": {"text": "a", "usage": {"input_tokens": ' + HUGE_INT + "}}}"
    ).encode(),
    "not-utf8": b'{"output": {"text": "\xff"}}',
    "truncated": json.dumps(_good_entry()).encode()[:40],
    "not-an-object": b"[1, 2]",
    "no-output": b"{}",
    "text-not-str": _corrupt(lambda e: e["output"].update(text=3)),
    "call-not-object": _corrupt(lambda e: e["output"].update(tool_calls=["OCR"])),
    "calls-not-list": _corrupt(lambda e: e["output"].update(tool_calls={"name": "OCR"})),
    "arguments-not-object": _corrupt(lambda e: e["output"]["tool_calls"][0].update(arguments=[])),
    "name-missing": _corrupt(lambda e: e["output"]["tool_calls"][0].pop("name")),
    "id-not-str": _corrupt(lambda e: e["output"]["tool_calls"][0].update(id=7)),
    "usage-not-object": _corrupt(lambda e: e["output"].update(usage=[1, 2])),
    "tokens-infinite": _corrupt(lambda e: e["output"]["usage"].update(input_tokens=float("inf"))),
    "tokens-nan": _corrupt(lambda e: e["output"]["usage"].update(output_tokens=float("nan"))),
    "tokens-text": _corrupt(lambda e: e["output"]["usage"].update(output_tokens="7")),
}


@pytest.mark.parametrize("content", CORRUPT_ENTRIES.values(), ids=CORRUPT_ENTRIES.keys())
def test_corrupt_cache_entry_is_a_miss(tmp_path, content):
    cache = ResponseCache(tmp_path)
    key = CACHE_KEY
    path = _entry_path(cache, key)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.warns(CacheEntryWarning, match="not used"):
        assert cache.get(key) is None
    assert (cache.hits, cache.misses) == (0, 1)


def test_a_good_hand_written_entry_is_a_hit(tmp_path):
    cache = ResponseCache(tmp_path)
    key = CACHE_KEY
    _entry_path(cache, key).parent.mkdir(parents=True)
    _entry_path(cache, key).write_text(json.dumps(_good_entry()))
    assert cache.get(key) == ModelOutput(
        "Final Answer: 4", Usage(3, 1), (ToolCall("OCR", {"image": "x"}, "c1"),)
    )


def test_cache_round_trips_lone_surrogates_exactly(tmp_path):
    cache = ResponseCache(tmp_path)
    text = "Final Answer: \ud83d half an emoji, \udcff, 日本"
    output = ModelOutput(text, Usage(1, 2), (ToolCall("OCR", {"image": "\ud83d.jpg"}, "c"),))
    key = ResponseCache.key({"messages": [text]})  # keys of such text work too
    cache.put(key, output, {"model": "m\ud800"})
    stored = _entry_path(cache, key).read_bytes()
    assert stored.isascii()  # \u escapes: nothing UTF-8 could not encode
    assert ResponseCache(tmp_path).get(key) == output
    assert ResponseCache(tmp_path).get(key).text == text  # type: ignore[union-attr]


def test_cache_keys_of_valid_text_are_unchanged():
    material = {"messages": ["日本", "plain"], "n": 1}
    old = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert ResponseCache.key(material) == hashlib.sha256(old.encode("utf-8")).hexdigest()


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "out"


def _cassette_path(cassettes: Cassettes, tool: str, arguments, dataset, output_dir) -> Path:
    key = Cassettes.key(tool, *portable_arguments(arguments, dataset, output_dir))
    return cassettes.root / tool / f"{key}.json"


CORRUPT_CASSETTES = {
    "100k-deep": nested(100_000).encode(),
    "huge-number": ('{"outputs": [{"type": "text", "content": ' + HUGE_INT + "}]}").encode(),
    "not-utf8": b'{"outputs": [{"type": "text", "content": "\xff"}]}',
    "truncated": b'{"outputs": [{"type": "te',
    "not-an-object": b'"outputs"',
    "outputs-not-list": b'{"outputs": {"type": "text"}}',
    "output-not-object": b'{"outputs": ["text"]}',
    "type-not-str": b'{"outputs": [{"type": 1, "content": "x"}]}',
    "file-escapes": b'{"outputs": [{"type": "image", "file": "../../../../etc/hostname"}]}',
    "file-absolute": b'{"outputs": [{"type": "image", "file": "/etc/hostname"}]}',
    "file-missing": b'{"outputs": [{"type": "image", "file": "gone.png"}]}',
    "file-not-str": b'{"outputs": [{"type": "image", "file": 3}]}',
    "file-nul": b'{"outputs": [{"type": "image", "file": "a\\u0000.png"}]}',
    "file-surrogate": b'{"outputs": [{"type": "image", "file": "\\ud83d.png"}]}',
}


@pytest.mark.parametrize("content", CORRUPT_CASSETTES.values(), ids=CORRUPT_CASSETTES.keys())
def test_corrupt_cassette_entry_is_a_miss(dataset, tmp_path, out, content):
    cassettes = Cassettes(tmp_path / "cassettes")
    arguments = {"expression": "1+1"}
    path = _cassette_path(cassettes, "Calculator", arguments, dataset, out)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert cassettes.lookup("Calculator", arguments, dataset, out) is None


def test_cassettes_round_trip_lone_surrogates(dataset, tmp_path, out):
    cassettes = Cassettes(tmp_path / "cassettes")
    arguments = {"expression": "'\ud83d'"}
    result = ToolResult.text("\ud83d and 日本")
    assert cassettes.record("Calculator", arguments, result, dataset, out, overwrite=False)
    entry = _cassette_path(cassettes, "Calculator", arguments, dataset, out)
    assert entry.read_bytes().isascii()
    assert cassettes.lookup("Calculator", arguments, dataset, out) == result


# ------------------------------------------------------------------------------------------------
# Item 5: ReAct Action Input

OCR_META = ToolMeta("OCR", "Reads text.", (ToolParam("image", "image"),), ())


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(nested(10_000), id="10k-deep"),
        pytest.param('{"image": ' + nested(10_000) + "}", id="10k-deep-value"),
        pytest.param('{"image": ' + HUGE_INT + "}", id="5000-digits"),
        pytest.param('{"image": ' + nested(MAX_DEPTH) + "}", id="past-max-depth"),
        pytest.param('```json\n{"image": ' + HUGE_INT + "}\n```", id="fenced-5000-digits"),
    ],
)
def test_hostile_action_input_is_the_models_args_error(raw):
    with pytest.raises(p.ArgumentError) as info:
        p.parse_action_input(raw, OCR_META)
    unfenced = raw.removeprefix("```json\n").removesuffix("\n```")
    assert str(info.value) == f"invalid json format: {unfenced}"
    record = p.execute(p.ParsedReply("", "OCR", raw), {"OCR": OCR_META}, p.validate_only)
    assert (record.type, record.state, record.args) == ("OCR", "ARGS_ERROR", raw)
    assert record.errmsg == f"invalid json format: {unfenced}"


def test_depth_within_max_depth_still_parses():
    raw = '{"image": ' + nested(MAX_DEPTH - 1, '"x"') + "}"
    assert p.parse_action_input(raw, OCR_META) == {"image": nested_value(MAX_DEPTH - 1)}


def test_action_input_parsing_is_otherwise_unchanged():
    assert p.parse_action_input('```json\n{"image": "a.jpg"}\n```', OCR_META) == {"image": "a.jpg"}
    assert p.parse_action_input('{"image": NaN}', OCR_META)["image"] != 0
    with pytest.raises(p.ArgumentError, match=r"^invalid json format: \{image\}$"):
        p.parse_action_input("{image}", OCR_META)
    with pytest.raises(p.ArgumentError, match=r"^unknown arguments: \{'x'\}$"):
        p.parse_action_input('{"image": "a", "x": 1}', OCR_META)
    with pytest.raises(p.ArgumentError, match=r"^missing required arguments: \{'image'\}$"):
        p.parse_action_input("{}", OCR_META)


# ------------------------------------------------------------------------------------------------
# Item 6: native tool-call arguments

HOSTILE_ARGUMENTS = {
    "10k-deep": nested(10_000),
    "10k-deep-value": '{"image": ' + nested(10_000) + "}",
    "5000-digits": '{"image": ' + HUGE_INT + "}",
    "past-max-depth": '{"image": ' + nested(MAX_DEPTH) + "}",
    "invalid": '{"image": ',
    "not-object": '["image"]',
}


@pytest.mark.parametrize("raw", HOSTILE_ARGUMENTS.values(), ids=HOSTILE_ARGUMENTS.keys())
def test_openai_arguments_are_kept_raw(raw):
    assert parse_arguments(raw) == {INVALID_JSON: raw}


def _native_record(call: ToolCall) -> p.ActionRecord:
    parsed, _ = native.parse_output(ModelOutput("", tool_calls=(call,)))
    return p.execute(parsed, {"OCR": OCR_META}, p.validate_only)


@pytest.mark.parametrize("raw", HOSTILE_ARGUMENTS.values(), ids=HOSTILE_ARGUMENTS.keys())
def test_native_hostile_arguments_score_as_args_error(raw):
    record = _native_record(ToolCall("OCR", parse_arguments(raw), "call_0"))
    assert (record.state, record.args) == ("ARGS_ERROR", raw)
    assert record.errmsg is not None
    assert record.errmsg.startswith("invalid json format: ")


@pytest.mark.parametrize("raw", HOSTILE_ARGUMENTS.values(), ids=HOSTILE_ARGUMENTS.keys())
def test_vllm_generated_calls_with_hostile_arguments(raw):
    body = '{"name": "OCR", "arguments": ' + raw + "}"
    for text in (f"<tool_call>{body}</tool_call>", body, f"<|python_tag|>{body}", f"[{body}]"):
        _, calls = vllm_engine.parse_tool_calls(text)
        if calls:
            (call,) = calls
            assert call.name == "OCR"
            assert set(call.arguments) == {INVALID_JSON}
            assert _native_record(call).state == "ARGS_ERROR"
    call = vllm_engine.parse_call(body)
    assert call is not None
    assert set(call.arguments) == {INVALID_JSON}


def test_vllm_json_sequence_refuses_unreadable_numbers_and_depth():
    assert tool_text._json_sequence(HUGE_INT) is None
    assert tool_text._json_sequence(nested(100_000)) is None
    assert tool_text._json_sequence('{"a": 1} [2]') == [{"a": 1}, [2]]


def test_vllm_template_messages_hold_arguments_to_the_same_rules():
    message = ChatMessage("assistant", "", tool_calls=(ToolCall("OCR", {"image": "a"}, "c"),))
    (out,) = vllm_engine.template_messages([message], vision=False)
    assert out["tool_calls"][0]["function"]["arguments"] == {"image": "a"}
    deep = ToolCall("OCR", {"image": nested_value(MAX_DEPTH)}, "c")
    (out,) = vllm_engine.template_messages([ChatMessage("assistant", "", (deep,))], False)
    assert out["tool_calls"][0]["function"]["arguments"] == {
        INVALID_JSON: json.dumps(deep.arguments, ensure_ascii=False)
    }


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(nested_value(900), id="900-deep"),
        pytest.param({"image": nested_value(MAX_DEPTH)}, id="past-max-depth"),
        pytest.param({"image": 7 * 10**5000}, id="5000-digits"),
        pytest.param(["image"], id="not-object"),
        pytest.param({"image": object()}, id="not-json"),
    ],
)
def test_anthropic_tool_use_input_that_is_not_json_arguments(value):
    block = SimpleNamespace(type="tool_use", name="OCR", id="tu_1", input=value)
    output = parse_message(SimpleNamespace(content=[block], usage=None))
    (call,) = output.tool_calls
    assert set(call.arguments) == {INVALID_JSON}
    record = _native_record(call)
    assert record.state == "ARGS_ERROR"


def test_anthropic_tool_use_input_unchanged_for_real_calls():
    block = SimpleNamespace(type="tool_use", name="OCR", id="tu_1", input={"image": "a.jpg"})
    output = parse_message(SimpleNamespace(content=[block], usage=None))
    assert output.tool_calls == (ToolCall("OCR", {"image": "a.jpg"}, "tu_1"),)


# ------------------------------------------------------------------------------------------------
# Item 7: images that cannot or must not be decoded


def png_claiming(width: int, height: int) -> bytes:
    """A tiny PNG file whose header claims ``width`` x ``height`` pixels."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


def jpeg_claiming(width: int, height: int) -> bytes:
    """A real 8x8 JPEG whose start-of-frame header is rewritten to claim another size."""
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "white").save(buffer, format="JPEG")
    data = bytearray(buffer.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def real_jpeg() -> bytes:
    return (SAMPLE / "image" / "image_1.jpg").read_bytes()


def _write(context: ToolContext, data: bytes, suffix: str) -> Path:
    path = new_output_path(context, "hostile", suffix)
    path.write_bytes(data)
    return path


def _ocr(context: ToolContext, path: Path) -> ToolResult:
    meta = context.dataset.toolmeta["OCR"]
    return ocr.ocr(ToolInvocation(meta, {"image": str(path)}, {"image": str(path)}), context)


BOMBS = {
    "png-60000x60000": (png_claiming(60000, 60000), ".png"),
    "jpeg-60000x60000": (jpeg_claiming(60000, 60000), ".jpg"),
}
BROKEN = {
    "truncated-png": (png_claiming(20, 20)[:30], ".png"),
    "truncated-jpeg": (real_jpeg()[:2000], ".jpg"),
    "garbage": (b"GIF89a" + bytes(range(256)) * 4, ".gif"),
    "empty": (b"", ".png"),
    "text": (b"not an image", ".jpg"),
    "png-bad-crc": (png_claiming(20, 20)[:-5] + b"\x00\x00\x00\x00\x00", ".png"),
}


@pytest.mark.parametrize(("data", "suffix"), BOMBS.values(), ids=BOMBS.keys())
def test_decompression_bomb_is_a_tool_error_naming_the_file(context, data, suffix):
    path = _write(context, data, suffix)
    with pytest.raises(GtaToolError) as info:
        _ocr(context, path)
    assert str(info.value).startswith(f"cannot read image '{path}': Image size (3600000000 pixels)")
    for read in (open_rgb, image_size):
        with pytest.raises(GtaToolError, match="exceeds limit"):
            read(path)


def test_between_one_and_two_times_the_limit(context):
    """Pillow only warns there and would then decode gigabytes; the warning is not relied on."""
    path = _write(context, png_claiming(10000, 10000), ".png")
    with pytest.raises(GtaToolError, match="could be decompression bomb"):  # warnings as errors
        open_rgb(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        with pytest.raises(GtaToolError) as info:
            open_rgb(path)
    assert str(info.value) == (
        f"cannot read image '{path}': it claims 10000x10000 pixels, more than the "
        f"{Image.MAX_IMAGE_PIXELS} an image tool accepts"
    )


@pytest.mark.parametrize(("data", "suffix"), BROKEN.values(), ids=BROKEN.keys())
def test_broken_image_is_a_tool_error_naming_the_file(context, data, suffix):
    path = _write(context, data, suffix)
    for read in (open_rgb, lambda path: _ocr(context, path)):
        with pytest.raises(GtaToolError, match=f"^cannot read image '{path}': "):
            read(path)


def test_image_tool_errors_are_api_errors_for_the_model(dataset, context):
    path = _write(context, png_claiming(60000, 60000), ".png")
    meta = dataset.toolmeta["OCR"]

    def run(meta, arguments, converted):
        return ocr.ocr(ToolInvocation(meta, arguments, converted), context)

    reply = p.ParsedReply("", "OCR", json.dumps({"image": str(path)}))
    record = p.execute(reply, {"OCR": meta}, run)
    assert record.state == "API_ERROR"
    assert record.errmsg is not None
    assert record.errmsg.startswith(f"cannot read image '{path}'")


@pytest.mark.parametrize("tool", ["DrawBox", "AddText"])
def test_edit_tools_refuse_bombs(dataset, context, tool):
    path = str(_write(context, jpeg_claiming(60000, 60000), ".jpg"))
    args = {"image": path, "bbox": "(1, 1, 5, 5)", "text": "x", "position": "mm"}
    args = {k: v for k, v in args.items() if dataset.toolmeta[tool].input(k) is not None}
    function = {"DrawBox": image_tools.draw_box, "AddText": image_tools.add_text}[tool]
    with pytest.raises(GtaToolError, match="cannot read image"):
        function(ToolInvocation(dataset.toolmeta[tool], args, args), context)


@pytest.mark.parametrize(
    ("tool", "args", "error"),
    [
        ("DrawBox", {"bbox": "(-99999999999999999999, 0, 5, 5)", "annotation": "x"}, "SystemError"),
        ("DrawBox", {"bbox": "(0, 0, " + "9" * 400 + ", " + "9" * 400 + ")"}, None),
        ("AddText", {"text": "x", "position": "(" + "9" * 400 + ", 10)"}, "OverflowError"),
        ("AddText", {"text": "x", "position": "(99999999999999999999, 5)"}, "SystemError"),
    ],
)
def test_edit_tools_with_coordinates_out_of_range(dataset, context, tool, args, error):
    """Text this far out fails as in the official tools; a box this large is drawn at once.

    Pillow overflows its C integers on such text (SystemError, OverflowError); the box is
    clipped to the image first, instead of Pillow filling it row by row for seconds.
    """
    args = {"image": "image/image_0.jpg", **args}
    function = {"DrawBox": image_tools.draw_box, "AddText": image_tools.add_text}[tool]
    start = time.monotonic()
    if error is None:
        (item,) = function(ToolInvocation(dataset.toolmeta[tool], args, args), context).items
        assert item.type == "image"
    else:
        with pytest.raises(GtaToolError, match=rf"^{error}\("):
            function(ToolInvocation(dataset.toolmeta[tool], args, args), context)
    assert time.monotonic() - start < 5  # bound: catches an unclipped fill


def test_vlm_tools_refuse_bombs_before_asking(context):
    class NoClient:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError("the endpoint must not be asked")

    backend = VlmBackend(NoClient(), "vision-model", image_model="none")  # type: ignore[arg-type]
    path = str(_write(context, png_claiming(60000, 60000), ".png"))
    with pytest.raises(GtaToolError, match="cannot read image"):
        backend._boxes({"image": path, "text": "cat"}, context, 5.0)
    with pytest.raises(GtaToolError, match="cannot read image"):
        backend._crop({"image": path}, context, (0, 0, 5, 5))


def test_resolve_image_refuses_unencodable_names(context):
    from tool_backends.paths import resolve_image

    for value in ("\ud83d.jpg", "image/\x00.jpg"):
        with pytest.raises(GtaToolError, match="invalid image path"):
            resolve_image(value, context)


# ------------------------------------------------------------------------------------------------
# Black box: the plugin ends with a usage error, not a traceback


def _assert_clean_usage_error(result) -> str:
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output
    assert "INTERNALERROR" not in output
    return result.stderr.str()


def test_plugin_refuses_a_deeply_nested_dataset(pytester):
    root = pytester.path / "deep"
    shutil.copytree(SAMPLE, root)
    (root / "dataset.json").write_text('{"0": ' + nested(100_000) + "}")
    result = pytester.runpytest("--gta-model=oracle", f"--gta-data={root}")
    _assert_clean_usage_error(result)
    result.stderr.fnmatch_lines(["*GTA dataset * has 1 problem(s):", f"*dataset.json: {TOO_DEEP}*"])


def test_plugin_refuses_a_dataset_nested_just_under_the_parser_limit(pytester):
    root = pytester.path / "deep"
    shutil.copytree(SAMPLE, root)

    def change(dataset):
        dataset["2"]["dialogs"][1]["thought"] = MARKER

    write_with(root / "dataset.json", change, nested(600))
    result = pytester.runpytest("--gta-model=oracle", f"--gta-data={root}")
    _assert_clean_usage_error(result)
    result.stderr.fnmatch_lines([f"*dataset.json: query '2': dialogs[[]1[]].thought: {TOO_DEEP}*"])


def test_plugin_refuses_an_image_linked_out_of_the_dataset(pytester):
    root = pytester.path / "linked"
    shutil.copytree(SAMPLE, root)
    (root / "image" / "image_3.jpg").unlink()
    (root / "image" / "image_3.jpg").symlink_to("/etc/hostname")
    result = pytester.runpytest("--gta-model=oracle", f"--gta-data={root}")
    _assert_clean_usage_error(result)
    result.stderr.fnmatch_lines(
        [
            "*dataset.json: query '4': files[[]0[]].path: 'image/image_3.jpg' leads out of the "
            "dataset directory (to /etc/hostname)*"
        ]
    )


# ------------------------------------------------------------------------------------------------
# Properties: random and hostile inputs end in an allowed outcome

SAMPLE_FILES = {name: (SAMPLE / name).read_bytes() for name in ("dataset.json", "toolmeta.json")}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy of the sample whose JSON files each example rewrites (examples run in turn)."""
    root = tmp_path_factory.mktemp("hostile") / "data"
    shutil.copytree(SAMPLE, root)
    return root


def check_load(root: Path, files: dict[str, bytes]) -> Dataset | DatasetError:
    for name, content in {**SAMPLE_FILES, **files}.items():
        (root / name).write_bytes(content)
    try:
        loaded = load_dataset(root)
    except DatasetError as error:
        refused = error
    else:
        refused = None
    if refused is not None:
        assert refused.problems
        for problem in refused.problems:
            assert problem.file in ("dataset.json", "toolmeta.json")
            assert str(problem).startswith(problem.file + ": ")
        return refused
    # What the run does with a loaded dataset must not crash either.
    for query in loaded:
        loaded.reference_dialogs(query)
        loaded.tool_metas(query)
        _ = (
            query.type,
            query.text,
            query.categories,
            query.calls,
            loaded.abs_files(query),
        )
    return loaded


_file_names = st.sampled_from(sorted(SAMPLE_FILES))


@FAST
@given(name=_file_names, content=st.binary(max_size=300))
def test_property_random_bytes_as_dataset_files(scratch, name, content):
    check_load(scratch, {name: content})


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
@FAST
@given(name=_file_names, data=st.data())
def test_property_truncated_and_flipped_sample_files(scratch, name, data):
    content = bytearray(SAMPLE_FILES[name])
    flips = data.draw(
        st.lists(st.tuples(st.integers(0, len(content) - 1), st.integers(0, 255)), max_size=6)
    )
    for position, byte in flips:
        content[position] = byte
    cut = data.draw(st.integers(0, len(content)) | st.just(len(content)))
    check_load(scratch, {name: bytes(content[:cut])})


def _inject(document: Any, data: st.DataObject) -> Any:
    """Replace one randomly chosen value (any depth) of ``document`` by the marker."""
    if not isinstance(document, dict | list) or not document or data.draw(st.booleans()):
        return MARKER
    if isinstance(document, dict):
        key = data.draw(st.sampled_from(sorted(document)))
        return {**document, key: _inject(document[key], data)}
    index = data.draw(st.integers(0, len(document) - 1))
    return [*document[:index], _inject(document[index], data), *document[index + 1 :]]


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
@FAST
@given(name=_file_names, data=st.data(), hostile=hostile_json)
def test_property_hostile_json_anywhere_in_the_sample(scratch, name, data, hostile):
    document = json.loads(SAMPLE_FILES[name])
    text = json.dumps(_inject(document, data)).replace(json.dumps(MARKER), hostile, 1)
    check_load(scratch, {name: text.encode()})


_action_inputs = st.one_of(
    hostile_json,
    st.text(max_size=40),
    st.builds(lambda j: f"```json\n{j}\n```", hostile_json),
    st.builds(lambda j: '{"image": ' + j + "}", hostile_json),
)


@FAST
@given(raw=_action_inputs)
def test_property_action_input_is_a_record(raw):
    try:
        outcome: Any = p.parse_action_input(raw, OCR_META)
    except p.ArgumentError as exc:
        outcome = str(exc)
    if isinstance(outcome, str):
        assert outcome.startswith(("invalid json format: ", "unknown arguments", "missing"))
    else:
        assert set(outcome) == {"image"}
    record = p.execute(p.ParsedReply("", "OCR", raw), {"OCR": OCR_META}, p.validate_only)
    assert isinstance(record, p.ActionRecord)
    assert record.state in ("ARGS_ERROR", "API_ERROR", "SUCCESS")
    record.to_step()


@FAST
@given(raw=_action_inputs)
def test_property_native_arguments_are_a_dict_or_kept_raw(raw):
    arguments = parse_arguments(raw)
    assert isinstance(arguments, dict)
    if INVALID_JSON in arguments and len(arguments) == 1:
        assert arguments[INVALID_JSON] == raw
    assert isinstance(_native_record(ToolCall("OCR", arguments, "c")), p.ActionRecord)
    for text in (f"<tool_call>{raw}</tool_call>", raw, '{"name": "OCR", "arguments": ' + raw):
        _, calls = vllm_engine.parse_tool_calls(text)
        for call in calls:
            assert isinstance(call.arguments, dict)
            assert isinstance(_native_record(call), p.ActionRecord)


@FAST
@given(content=st.one_of(st.binary(max_size=200), hostile_json.map(str.encode)), data=st.data())
def test_property_cache_entries_are_hits_or_misses(tmp_path_factory, content, data):
    root = tmp_path_factory.mktemp("cache")
    cache = ResponseCache(root)
    key = ResponseCache.key({"q": 1})
    path = _entry_path(cache, key)
    path.parent.mkdir(parents=True)
    if data.draw(st.booleans()):  # hostile text inside an otherwise good entry
        entry = _inject(_good_entry(), data)
        content = json.dumps(entry).replace(json.dumps(MARKER), content.decode("utf-8", "replace"))
        content = content.encode("utf-8", "surrogatepass")
    path.write_bytes(content)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheEntryWarning)  # a bad entry warns: not the point here
        hit = cache.get(key)
    assert hit is None or isinstance(hit, ModelOutput)
    assert cache.hits + cache.misses == 1


_any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=30)


@FAST
@given(text=_any_text, arguments=st.dictionaries(_any_text, _any_text, max_size=3))
def test_property_cache_round_trips_any_text(tmp_path_factory, text, arguments):
    cache = ResponseCache(tmp_path_factory.mktemp("cache"))
    output = ModelOutput(text, Usage(1, 1), (ToolCall(text, arguments, text),))
    key = ResponseCache.key({"text": text, "arguments": arguments})
    cache.put(key, output, {"model": text})
    assert cache.get(key) == output


@FAST
@given(
    content=st.one_of(st.binary(max_size=200), hostile_json.map(str.encode)),
    answer=st.text(max_size=20),
)
def test_property_cassette_entries_are_results_or_misses(
    dataset, tmp_path_factory, content, answer
):
    root = tmp_path_factory.mktemp("cassettes")
    cassettes = Cassettes(root)
    arguments = {"expression": "1+1"}
    path = _cassette_path(cassettes, "Calculator", arguments, dataset, root / "out")
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    found = cassettes.lookup("Calculator", arguments, dataset, root / "out")
    assert found is None or isinstance(found, ToolResult)
    if found is not None:
        assert all(isinstance(item, ResultItem) for item in found.items)
    # Not a property of misses alone: the same place holding a real entry is a hit, every time.
    recorded = ToolResult([ResultItem("text", answer)])
    assert cassettes.record(
        "Calculator", arguments, recorded, dataset, root / "out", overwrite=True
    )
    again = cassettes.lookup("Calculator", arguments, dataset, root / "out")
    assert again is not None
    assert [(i.type, i.content) for i in again.items] == [("text", answer)]


@FAST
@given(
    content=st.one_of(
        st.binary(max_size=200),
        hostile_json.map(str.encode),
        hostile_json.map(lambda j: ('{"default": ' + j + "}").encode()),
        hostile_json.map(lambda j: ('{"responses": {"*": ' + j + "}}").encode()),
    )
)
def test_property_mock_scripts_load_or_name_the_file(tmp_path_factory, content):
    script = tmp_path_factory.mktemp("mock") / "script.json"
    script.write_bytes(content)
    try:
        outcome: Any = load_script(script)
    except GtaUsageError as exc:
        outcome = str(exc)
    if isinstance(outcome, str):
        assert str(script) in outcome
    else:
        responses, default = outcome
        assert isinstance(responses, dict)
        assert default is None or isinstance(default, str)


_image_bytes = st.sampled_from(
    [real_jpeg(), png_claiming(40, 30), jpeg_claiming(40, 30), jpeg_claiming(60000, 60000)]
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(image=_image_bytes, data=st.data())
def test_property_damaged_images_decode_or_are_tool_errors(tmp_path_factory, image, data):
    content = bytearray(image)
    for _ in range(data.draw(st.integers(0, 4))):
        content[data.draw(st.integers(0, len(content) - 1))] = data.draw(st.integers(0, 255))
    content = content[: data.draw(st.integers(0, len(content)))]
    path = tmp_path_factory.mktemp("img") / "image.jpg"
    path.write_bytes(bytes(content))
    try:
        with warnings.catch_warnings():
            # Damaged JPEGs make Pillow warn ("Corrupt EXIF data"); that is not a failure.
            warnings.simplefilter("ignore", UserWarning)
            outcome: Any = open_rgb(path)
    except GtaToolError as exc:
        outcome = str(exc)
    if isinstance(outcome, str):
        assert outcome.startswith(f"cannot read image '{path}'")
    else:
        assert outcome.mode == "RGB"


# -- the depth guard and the paused collector ---------------------------------------------------


def _depth_by_recursion(value: Any) -> int:
    """The definition :func:`pytest_gta.jsonsafe.depth` must agree with (bounded inputs only)."""
    if isinstance(value, dict):
        return 1 + max(map(_depth_by_recursion, value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max(map(_depth_by_recursion, value), default=0)
    return 0


_JSON_TREES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=40,
)


@given(_JSON_TREES, st.integers(min_value=0, max_value=8))
def test_depth_agrees_with_its_definition(value, limit):
    true_depth = _depth_by_recursion(value)
    assert jsonsafe.depth(value, limit) == (true_depth if true_depth <= limit else limit + 1)


def test_depth_stops_at_the_limit_of_a_hostile_nesting():
    deep: Any = "x"
    for _ in range(100_000):  # far past any recursion limit: counted without recursion
        deep = [deep]
    assert jsonsafe.depth(deep) == MAX_DEPTH + 1
    with pytest.raises(jsonsafe.JsonInputError, match="nested too deeply"):
        jsonsafe.loads("[" * 5000 + "]" * 5000)


def _failing_work() -> None:
    with jsonsafe.collection_paused():
        assert not gc.isenabled()
        with jsonsafe.collection_paused():  # nested: the inner one leaves it paused
            pass
        assert not gc.isenabled()
        raise RuntimeError("the work failed")


def test_the_collector_is_paused_and_restored_even_when_the_work_fails():
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        _failing_work()
    assert gc.isenabled()
    gc.disable()
    try:
        with jsonsafe.collection_paused():
            pass
        assert not gc.isenabled()  # paused by someone else before: left so
    finally:
        gc.enable()
