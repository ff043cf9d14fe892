from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.dataset import Dataset, Query
from pytest_gta.errors import GtaInfrastructureError
from pytest_gta.models.base import BaseModelAdapter
from pytest_gta.models.oracle import CLOSING_ANSWER, OracleModel
from pytest_gta.protocol import react as p
from pytest_gta.quirks import GENERATED_IMAGE
from pytest_gta.run import loops
from pytest_gta.tools import ToolContext, ToolSet
from pytest_gta.types import ChatMessage, ModelOutput, ModelRequest, ResultItem, Usage
from pytest_gta.validation import load_dataset
from tests.helpers.paths import SAMPLE
from tests.helpers.run_context import play_e2e
from tool_backends.replay import ReplayBackend

#: Every query of the sample, the release's irregular chain shapes (13-16) included.
SAMPLE_IDS = list(json.loads((SAMPLE / "dataset.json").read_text()))
SUMMARIZE = "Please summarize the chat history and give a final answer. Do not call any tools."
FORCE_STOP = "You should directly give results\n based on history information."


class Scripted(BaseModelAdapter):
    """A fake model: replies from a list (the last one repeats) or from a function."""

    def __init__(self, replies: Sequence[str] | Callable[[ModelRequest], str]) -> None:
        self.replies = replies
        self.requests: list[ModelRequest] = []

    def generate(self, request: ModelRequest) -> ModelOutput:
        self.requests.append(request)
        if callable(self.replies):
            return ModelOutput(self.replies(request), Usage(10, 2))
        n = len(self.requests) - 1
        return ModelOutput(self.replies[min(n, len(self.replies) - 1)], Usage(10, 2))


class Batched(Scripted):
    def __init__(self, replies: Sequence[str], drop: int = 0) -> None:
        super().__init__(replies)
        self.drop = drop
        self.batches: list[int] = []

    def generate(self, request: ModelRequest) -> ModelOutput:
        raise AssertionError("generate_batch must be used")

    def generate_batch(self, requests: Sequence[ModelRequest]) -> list[ModelOutput]:
        self.batches.append(len(requests))
        self.requests.extend(requests)
        return [ModelOutput(r) for r in self.replies][: len(requests) - self.drop]


def raw_data(sample_root: Path) -> dict[str, Any]:
    return json.loads((sample_root / "dataset.json").read_text(encoding="utf-8"))


def abs_image(dataset: Dataset, name: str) -> str:
    return str(dataset.root / "image" / name)


def recorded_call(function: dict[str, Any]) -> dict[str, Any]:
    """The prediction step an error-free call records: no thought, no error key."""
    return {
        "role": "assistant",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": function["name"], "arguments": function["arguments"]},
            }
        ],
    }


def replay_runner(dataset: Dataset, query: Query, tmp_path: Path) -> p.ToolRunner:
    tools = ToolSet([ReplayBackend()])
    return tools.runner(tools.route(query), ToolContext(dataset, query, tmp_path))


def roles(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.role for m in messages]


def call(name: str, arguments: dict[str, Any]) -> str:
    return f"Action:{name}\nAction Input:{json.dumps(arguments)}"


# --------------------------------------------------------------------------------------------
# Step mode: requests


@pytest.mark.parametrize("qid", SAMPLE_IDS)
def test_step_requests_one_per_reference_assistant_message(sample_dataset, sample_root, qid):
    dialogs = raw_data(sample_root)[qid]["dialogs"]
    assistant = [i for i, m in enumerate(dialogs) if m["role"] == "assistant"]
    query = sample_dataset[qid]
    pairs = loops.step_requests(sample_dataset, query)
    assert [r.case.index for r, _ in pairs] == assistant
    assert all((r.case.qid, r.case.mode) == (qid, "step") for r, _ in pairs)
    reference = sample_dataset.reference_dialogs(query)
    assert [gold for _, gold in pairs] == [reference[i] for i in assistant]
    if dialogs[-1]["role"] == "assistant" and "tool_calls" not in dialogs[-1]:
        assert pairs[-1][1] == {"role": "assistant", "content": dialogs[-1]["content"]}
    else:
        # 13 and 14 have no final answer: the last step is their last call (14's carries text)
        assert "tool_calls" in pairs[-1][1]
        assert pairs[-1][0].case.index == query.calls[-1].index


@pytest.mark.parametrize("qid", SAMPLE_IDS)
def test_step_request_role_pattern(sample_dataset, qid):
    query = sample_dataset[qid]
    pairs = loops.step_requests(sample_dataset, query)
    for n, (request, _) in enumerate(pairs):
        last = n == len(pairs) - 1
        expected = ["system", "system", "user"] + ["assistant", "system"] * n + ["user"] * last
        assert roles(request.messages) == expected
        assert request.messages[0].content == p.render_system_prompt(
            sample_dataset.tool_metas(query)
        )
        assert request.tools == tuple(sample_dataset.tool_metas(query))
        assert request.protocol == "react"
        assert (request.messages[-1].content == SUMMARIZE) is last


def test_step_requests_exact_messages(sample_dataset, sample_root):
    query = sample_dataset["0"]
    raw = raw_data(sample_root)["0"]["dialogs"]
    receipt = abs_image(sample_dataset, "image_0.jpg")
    pairs = loops.step_requests(sample_dataset, query)
    assert len(pairs) == 3
    opening = [
        ChatMessage("system", f"The related files are at `{receipt}`"),
        ChatMessage("user", "How much did I spend on fruit on this shopping trip?"),
    ]
    assert list(pairs[0][0].messages[1:]) == opening
    assert list(pairs[2][0].messages[1:]) == [
        *opening,
        ChatMessage("assistant", f'Action:OCR\nAction Input:{{"image": "{receipt}"}}'),
        ChatMessage("system", raw[2]["content"]["content"]),
        ChatMessage(
            "assistant", 'Action:Calculator\nAction Input:{"expression": "1.29+3.45+4.50"}'
        ),
        ChatMessage("system", "9.24"),
        ChatMessage("user", SUMMARIZE),
    ]
    assert pairs[0][1] == {
        "role": "assistant",
        "tool_calls": [
            {"type": "function", "function": {"name": "OCR", "arguments": {"image": receipt}}}
        ],
        "thought": "I need to read the items and prices on the receipt.",
    }


def test_step_files_message_lists_every_file(sample_dataset):
    request, _ = loops.step_requests(sample_dataset, sample_dataset["3"])[0]
    first = abs_image(sample_dataset, "image_8.jpg")
    second = abs_image(sample_dataset, "image_6.jpg")
    assert request.messages[1] == ChatMessage(
        "system", f"The related files are at `{first}`, `{second}`"
    )


def test_step_image_outputs_as_written_arguments_absolute(sample_dataset):
    pairs = loops.step_requests(sample_dataset, sample_dataset["10"])
    last = pairs[-1][0].messages
    tool_outputs = [m.content for m in last[3:] if m.role == "system"]
    assert tool_outputs[1:] == ["[image](image/dummy_generated_image.jpg)"] * 2
    dummy = abs_image(sample_dataset, "dummy_generated_image.jpg")
    assert last[7] == ChatMessage(
        "assistant",
        "Action:AddText\nAction Input:"
        + json.dumps({"image": dummy, "text": "Best month: June (215 units)", "position": "mt"}),
    )
    assert not any(m.content.startswith("Response:") for m in last)


def test_step_messages_have_no_thought(sample_dataset):
    for query in sample_dataset:
        for request, _ in loops.step_requests(sample_dataset, query):
            for message in request.messages[1:]:
                if message.role == "assistant":
                    assert message.content.startswith("Action:")
                    assert "Thought:" not in message.content


# --------------------------------------------------------------------------------------------
# Step mode: run


@pytest.mark.parametrize("qid", SAMPLE_IDS)
def test_run_step_oracle_predictions(sample_dataset, sample_root, qid):
    query = sample_dataset[qid]
    episode = loops.run_step(sample_dataset, query, OracleModel(sample_dataset))
    reference = sample_dataset.reference_dialogs(query)
    gold = [reference[i] for i in query.assistant_indices]
    assert episode.mode == "step"
    assert episode.gold == gold
    expected = []
    for message in gold:
        if message.get("tool_calls"):
            function = message["tool_calls"][0]["function"]
            expected.append(recorded_call(function))
        else:
            expected.append({"role": "assistant", "content": " " + message["content"]})
    assert episode.predictions == expected
    assert [t.record.state for t in episode.turns] == ["SUCCESS"] * len(gold)
    assert all(t.record.result == (ResultItem("text", "Dummy Result"),) for t in episode.turns[:-1])


def test_run_step_arguments_are_absolute_in_predictions(sample_dataset):
    episode = loops.run_step(sample_dataset, sample_dataset["2"], OracleModel(sample_dataset))
    balls = abs_image(sample_dataset, "image_5.jpg")
    args = [s["tool_calls"][0]["function"]["arguments"] for s in episode.predictions[:-1]]
    assert args == [{"image": balls, "text": "ball"}, {"image": balls, "text": "red ball"}]


def test_run_step_validates_without_executing(sample_dataset, tmp_path):
    missing = str(tmp_path / "nope.jpg")
    model = Scripted(
        [
            call("CountGivenObject", {"image": missing, "text": "ball"}),
            call("CountGivenObject", {"image": "image/image_5.jpg", "text": "ball"}),
            "Final Answer:5",
        ]
    )
    episode = loops.run_step(sample_dataset, sample_dataset["2"], model)
    assert episode.predictions == [
        {
            "role": "assistant",
            "error": {
                "type": "API_ERROR",
                "msg": f"FileNotFoundError(\"No such file: '{missing}'\")",
            },
            "tool_calls": [
                {
                    "type": "function",
                    "function": {
                        "name": "CountGivenObject",
                        "arguments": {"image": missing, "text": "ball"},
                    },
                }
            ],
        },
        {
            "role": "assistant",
            "error": {
                "type": "API_ERROR",
                "msg": "FileNotFoundError(\"No such file: 'image/image_5.jpg'\")",
            },
            "tool_calls": [
                {
                    "type": "function",
                    "function": {
                        "name": "CountGivenObject",
                        "arguments": {"image": "image/image_5.jpg", "text": "ball"},
                    },
                }
            ],
        },
        {"role": "assistant", "content": "5"},
    ]


@pytest.mark.parametrize(
    ("reply", "prediction"),
    [
        (
            "  \n I am not sure. \n",
            {
                "role": "assistant",
                "error": {"type": "API_ERROR", "msg": "Please follow the format"},
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {"name": "NoAction", "arguments": {"text": ""}},
                    }
                ],
            },
        ),
        (
            'Action:OCR\nAction Input:{"image": "x"}',
            {
                "role": "assistant",
                "error": {"type": "API_ERROR", "msg": '{"image": "x"}'},
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {
                            "name": "InvalidAction",
                            "arguments": {"text": '{"image": "x"}'},
                        },
                    }
                ],
            },
        ),
        (
            'Action:CountGivenObject\nAction Input:{"image": "x"}',
            {
                "role": "assistant",
                "error": {"type": "ARGS_ERROR", "msg": "missing required arguments: {'text'}"},
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {"name": "CountGivenObject", "arguments": '{"image": "x"}'},
                    }
                ],
            },
        ),
        ("\n\nFinal Answer: five \n\n", {"role": "assistant", "content": " five"}),
    ],
    ids=["no-action", "tool-not-offered", "args-error", "finish-stripped-reply"],
)
def test_run_step_records(sample_dataset, reply, prediction):
    episode = loops.run_step(sample_dataset, sample_dataset["2"], Scripted([reply]))
    assert episode.predictions == [prediction] * 3
    assert [t.reply for t in episode.turns] == [reply.strip()] * 3


def test_run_step_turns_keep_requests_and_usage(sample_dataset):
    query = sample_dataset["0"]
    model = Scripted(["Final Answer:x"])
    episode = loops.run_step(sample_dataset, query, model)
    assert [t.messages for t in episode.turns] == [r.messages for r in model.requests]
    assert [r.case.index for r in model.requests] == [1, 3, 5]
    assert episode.usage == Usage(30, 6)


def test_run_step_uses_generate_batch(sample_dataset):
    model = Batched(["Final Answer:a", "Final Answer:b", "Final Answer:c"])
    episode = loops.run_step(sample_dataset, sample_dataset["0"], model)
    assert model.batches == [3]
    assert [s["content"] for s in episode.predictions] == ["a", "b", "c"]
    assert episode.usage == Usage(0, 0)


def test_run_step_generate_batch_wrong_count_raises(sample_dataset):
    model = Batched(["Final Answer:a"] * 3, drop=1)
    with pytest.raises(RuntimeError, match="returned 2 outputs for 3 requests"):
        loops.run_step(sample_dataset, sample_dataset["0"], model)


# --------------------------------------------------------------------------------------------
# E2e mode


@pytest.mark.parametrize("qid", SAMPLE_IDS)
def test_e2e_episode_oracle_with_replay(sample_dataset, sample_root, tmp_path, qid):
    query = sample_dataset[qid]
    raw = raw_data(sample_root)[qid]["dialogs"]
    runner = replay_runner(sample_dataset, query, tmp_path)
    episode = play_e2e(sample_dataset, query, OracleModel(sample_dataset), runner)
    reference = sample_dataset.reference_dialogs(query)
    assert episode.mode == "e2e"
    assert episode.gold == reference[1:]
    placeholder = {"type": "image", "content": str(sample_dataset.root / GENERATED_IMAGE)}
    expected: list[dict[str, Any]] = []
    for message, original in zip(reference[1:], raw[1:], strict=True):
        if message["role"] == "assistant" and message.get("tool_calls"):
            function = message["tool_calls"][0]["function"]
            expected.append(recorded_call(function))
        elif message["role"] == "tool":
            content = dict(original["content"])
            if content["type"] == "image":
                # 16's outputs are paths on the authors' machine: replay serves the placeholder
                written = sample_dataset.root / content["content"]
                content = (
                    placeholder if not written.is_file() else {**content, "content": str(written)}
                )
            expected.append({"role": "tool", "content": [content]})
        else:
            expected.append({"role": "assistant", "content": " " + original["content"]})
    closing = 0
    if raw[-1]["role"] == "tool":  # 13: ends on its image; the oracle closes the episode
        expected.append({"role": "assistant", "content": " " + CLOSING_ANSWER})
        closing = 1
    elif "tool_calls" in raw[-1]:  # 14: the unanswered DrawBox gets the placeholder, and the
        # oracle answers with the text that call carries
        expected += [
            {"role": "tool", "content": [placeholder]},
            {"role": "assistant", "content": " " + raw[-1]["content"]},
        ]
        closing = 1
    assert episode.predictions == expected
    assert len(episode.turns) == len(query.assistant_indices) + closing
    assert all(t.record.state == "SUCCESS" for t in episode.turns)


@pytest.mark.parametrize("qid", SAMPLE_IDS)
def test_e2e_episode_role_pattern(sample_dataset, tmp_path, qid):
    query = sample_dataset[qid]
    runner = replay_runner(sample_dataset, query, tmp_path)
    episode = play_e2e(sample_dataset, query, OracleModel(sample_dataset), runner)
    for n, turn in enumerate(episode.turns):
        assert roles(turn.messages) == ["system", "user", "user"] + ["assistant", "system"] * n
        assert turn.messages[0].content == p.render_system_prompt(sample_dataset.tool_metas(query))


def test_e2e_episode_exact_history(sample_dataset, sample_root, tmp_path):
    query = sample_dataset["0"]
    raw = raw_data(sample_root)["0"]["dialogs"]
    receipt = abs_image(sample_dataset, "image_0.jpg")
    replies = [
        f'  Thought: read it\nAction:OCR\nAction Input:{{"image": "{receipt}"}}\n\n',
        '\nAction:Calculator\nAction Input:{"expression": "1.29+3.45+4.50"}  ',
        "Final Answer: $9.24 \n",
    ]
    model = Scripted(replies)
    runner = replay_runner(sample_dataset, query, tmp_path)
    episode = play_e2e(sample_dataset, query, model, runner)
    system = ChatMessage("system", p.render_system_prompt(sample_dataset.tool_metas(query)))
    opening = [
        system,
        ChatMessage("user", f"The related files are at `{receipt}`"),
        ChatMessage("user", "How much did I spend on fruit on this shopping trip?"),
    ]
    second = [
        *opening,
        ChatMessage("assistant", replies[0].strip()),
        ChatMessage("system", "Response:" + raw[2]["content"]["content"] + "\n"),
    ]
    third = [
        *second,
        ChatMessage("assistant", replies[1].strip()),
        ChatMessage("system", "Response:9.24\n"),
    ]
    assert [list(r.messages) for r in model.requests] == [opening, second, third]
    assert [list(t.messages) for t in episode.turns] == [opening, second, third]
    assert [t.reply for t in episode.turns] == [r.strip() for r in replies]
    assert [r.case.index for r in model.requests] == [0, 1, 2]
    assert all((r.case.qid, r.case.mode) == ("0", "e2e") for r in model.requests)
    assert episode.predictions[-1] == {"role": "assistant", "content": " $9.24"}
    assert len(episode.predictions) == 5
    assert episode.usage == Usage(30, 6)


def test_e2e_episode_image_observation_is_absolute(sample_dataset, tmp_path):
    query = sample_dataset["11"]
    runner = replay_runner(sample_dataset, query, tmp_path)
    episode = play_e2e(sample_dataset, query, OracleModel(sample_dataset), runner)
    dummy = abs_image(sample_dataset, "dummy_generated_image.jpg")
    assert episode.turns[2].messages[-1] == ChatMessage("system", f"Response:[image]({dummy})\n")
    assert episode.turns[3].messages[-1] == ChatMessage("system", f"Response:[image]({dummy})\n")


@pytest.mark.parametrize("max_turns", [1, 3])
def test_e2e_episode_force_stop_only_on_last_turn_request(sample_dataset, tmp_path, max_turns):
    query = sample_dataset["0"]
    model = Scripted(["I keep thinking."])
    runner = replay_runner(sample_dataset, query, tmp_path)
    episode = play_e2e(sample_dataset, query, model, runner, max_turns=max_turns)
    assert len(model.requests) == max_turns
    for n, request in enumerate(model.requests):
        pattern = ["system", "user", "user"] + ["assistant", "system"] * n
        if n == max_turns - 1:
            assert roles(request.messages) == [*pattern, "system"]
            assert request.messages[-1] == ChatMessage("system", FORCE_STOP)
        else:
            assert roles(request.messages) == pattern
            assert all(m.content != FORCE_STOP for m in request.messages)
    no_action = {
        "role": "assistant",
        "error": {"type": "API_ERROR", "msg": "Please follow the format"},
        "tool_calls": [
            {"type": "function", "function": {"name": "NoAction", "arguments": {"text": ""}}}
        ],
    }
    assert episode.predictions == [no_action, {"role": "tool", "content": None}] * max_turns
    assert all(
        m == ChatMessage("system", "Response:Please follow the format\n")
        for m in model.requests[-1].messages[4::2]
    )


def test_e2e_episode_default_is_ten_turns_and_ends_on_a_tool_step(sample_dataset, tmp_path):
    query = sample_dataset["0"]
    receipt = abs_image(sample_dataset, "image_0.jpg")
    model = Scripted([call("OCR", {"image": receipt})])
    runner = replay_runner(sample_dataset, query, tmp_path)
    episode = play_e2e(sample_dataset, query, model, runner)
    assert loops.MAX_TURNS == 10
    assert len(model.requests) == 10
    assert len(episode.predictions) == 20
    assert [s["role"] for s in episode.predictions] == ["assistant", "tool"] * 10
    assert episode.predictions[-2] == {
        "role": "assistant",
        "tool_calls": [
            {"type": "function", "function": {"name": "OCR", "arguments": {"image": receipt}}}
        ],
    }
    assert episode.predictions[-1]["role"] == "tool"
    assert episode.predictions[-1]["content"][0]["content"].startswith("(127, 44, 313, 67)")
    assert not any(s.get("content") == p.DEFAULT_RESPONSE for s in episode.predictions)
    assert [r.messages[-1].content == FORCE_STOP for r in model.requests] == [False] * 9 + [True]


def test_e2e_episode_error_observations(sample_dataset, tmp_path):
    query = sample_dataset["0"]
    other = abs_image(sample_dataset, "image_9.jpg")
    replies = [
        'Action:Solver\nAction Input:{"command": "x"}',
        "Action:OCR\nAction Input:{image}",
        call("OCR", {"image": other}),
        "Final Answer:no idea",
    ]
    model = Scripted(replies)
    runner = replay_runner(sample_dataset, query, tmp_path)
    episode = play_e2e(sample_dataset, query, model, runner)
    observations = [m.content for m in model.requests[-1].messages[4::2]]
    assert observations[:2] == [
        'Response:{"command": "x"}\n',
        "Response:invalid json format: {image}\n",
    ]
    assert observations[2].startswith("Response:replay has no recorded output for OCR")
    assert observations[2].endswith("\n")
    states = [(t.record.type, t.record.state) for t in episode.turns]
    assert states == [
        ("InvalidAction", "API_ERROR"),
        ("OCR", "ARGS_ERROR"),
        ("OCR", "API_ERROR"),
        ("FinishAction", "SUCCESS"),
    ]
    assert episode.predictions[1::2][:3] == [{"role": "tool", "content": None}] * 3
    assert episode.predictions[2]["tool_calls"][0]["function"]["arguments"] == "{image}"
    assert episode.predictions[4]["tool_calls"][0]["function"]["arguments"] == {"image": other}


def test_e2e_episode_finish_first_turn(sample_dataset, tmp_path):
    query = sample_dataset["0"]
    model = Scripted(["Thought: easy\nAction:OCR\nAction Input:{}\nFinal Answer: 9.24"])
    runner = replay_runner(sample_dataset, query, tmp_path)
    episode = play_e2e(sample_dataset, query, model, runner)
    assert episode.predictions == [{"role": "assistant", "content": " 9.24"}]
    assert len(model.requests) == 1


def test_e2e_episode_finish_action(sample_dataset, tmp_path):
    query = sample_dataset["0"]
    model = Scripted(['Action: FinishAction\nAction Input: "$9.24"'])
    runner = replay_runner(sample_dataset, query, tmp_path)
    episode = play_e2e(sample_dataset, query, model, runner)
    assert episode.predictions == [{"role": "assistant", "content": "$9.24"}]


def test_e2e_episode_relative_path_needs_base_dir(sample_dataset, tmp_path):
    query = sample_dataset["0"]
    replies = [call("OCR", {"image": "image/image_0.jpg"}), "Final Answer:x"]
    runner = replay_runner(sample_dataset, query, tmp_path)
    without = play_e2e(sample_dataset, query, Scripted(replies), runner)
    assert without.turns[0].record.state == "API_ERROR"
    assert without.turns[0].record.errmsg == (
        "FileNotFoundError(\"No such file: 'image/image_0.jpg'\")"
    )
    with_base = play_e2e(
        sample_dataset, query, Scripted(replies), runner, base_dir=sample_dataset.root
    )
    assert with_base.turns[0].record.state == "SUCCESS"
    assert with_base.predictions[0]["tool_calls"][0]["function"]["arguments"] == {
        "image": "image/image_0.jpg"
    }
    assert with_base.predictions[1]["content"][0]["content"].startswith("(127, 44, 313, 67)")


def test_e2e_episode_infrastructure_error_propagates(sample_dataset):
    query = sample_dataset["0"]
    receipt = abs_image(sample_dataset, "image_0.jpg")

    def down(meta, arguments, converted):
        raise GtaInfrastructureError("tool server unreachable")

    model = Scripted([call("OCR", {"image": receipt})])
    with pytest.raises(GtaInfrastructureError, match="tool server unreachable"):
        play_e2e(sample_dataset, query, model, down)
    assert len(model.requests) == 1


def test_e2e_opening(sample_dataset):
    query = sample_dataset["9"]
    first = abs_image(sample_dataset, "image_0.jpg")
    second = abs_image(sample_dataset, "image_10.jpg")
    assert loops.e2e_opening(sample_dataset, query) == [
        ChatMessage("user", f"The related files are at `{first}`, `{second}`"),
        ChatMessage("user", query.dialogs[0]["content"]),
    ]


# --------------------------------------------------------------------------------------------
# A query without files


@pytest.fixture
def no_files_dataset(sample_root: Path, tmp_path: Path) -> Dataset:
    root = tmp_path / "data"
    root.mkdir()
    shutil.copy(sample_root / "toolmeta.json", root / "toolmeta.json")
    meta = json.loads((sample_root / "toolmeta.json").read_text(encoding="utf-8"))["Calculator"]
    data = {
        "q": {
            "tools": [meta],
            "files": [],
            "dialogs": [
                {"role": "user", "content": "What is 2+3?"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "type": "function",
                            "function": {"name": "Calculator", "arguments": {"expression": "2+3"}},
                        }
                    ],
                },
                {"role": "tool", "name": "Calculator", "content": {"type": "text", "content": "5"}},
                {"role": "assistant", "content": "5"},
            ],
            "gt_answer": {"whitelist": [["5"]], "blacklist": None},
        }
    }
    (root / "dataset.json").write_text(json.dumps(data), encoding="utf-8")
    return load_dataset(root)


def test_no_files_step_requests(no_files_dataset):
    pairs = loops.step_requests(no_files_dataset, no_files_dataset["q"])
    assert [roles(r.messages) for r, _ in pairs] == [
        ["system", "user"],
        ["system", "user", "assistant", "system", "user"],
    ]
    assert list(pairs[1][0].messages[1:]) == [
        ChatMessage("user", "What is 2+3?"),
        ChatMessage("assistant", 'Action:Calculator\nAction Input:{"expression": "2+3"}'),
        ChatMessage("system", "5"),
        ChatMessage("user", SUMMARIZE),
    ]


def test_no_files_e2e(no_files_dataset, tmp_path):
    query = no_files_dataset["q"]
    runner = replay_runner(no_files_dataset, query, tmp_path)
    model = Scripted([call("Calculator", {"expression": "2+3"}), "Final Answer:5"])
    episode = play_e2e(no_files_dataset, query, model, runner)
    assert loops.e2e_opening(no_files_dataset, query) == [ChatMessage("user", "What is 2+3?")]
    assert roles(model.requests[1].messages) == ["system", "user", "assistant", "system"]
    assert model.requests[1].messages[-1] == ChatMessage("system", "Response:5\n")
    assert episode.predictions[-1] == {"role": "assistant", "content": "5"}


# --------------------------------------------------------------------------------------------
# generate_all / Episode


def test_generate_all_without_batch_calls_generate_in_order(sample_dataset):
    requests = [r for r, _ in loops.step_requests(sample_dataset, sample_dataset["0"])]
    model = Scripted(lambda r: f"reply {r.case.index}")
    outputs = loops.generate_all(model, requests)
    assert [o.text for o in outputs] == ["reply 1", "reply 3", "reply 5"]
    assert model.requests == requests


def test_episode_usage_ignores_turns_without_usage():
    record = p.ActionRecord("FinishAction", {"text": "x"})
    episode = loops.Episode(
        "e2e",
        [],
        [],
        [
            loops.Turn((), "a", record, Usage(5, 1)),
            loops.Turn((), "b", record, None),
            loops.Turn((), "c", record, Usage(7, 3)),
        ],
    )
    assert episode.usage == Usage(12, 4)


def test_single_step_query_gets_the_summarize_message(no_files_dataset):
    root = no_files_dataset.root
    data = json.loads((root / "dataset.json").read_text(encoding="utf-8"))
    data["q"]["dialogs"] = [data["q"]["dialogs"][0], data["q"]["dialogs"][-1]]
    (root / "dataset.json").write_text(json.dumps(data), encoding="utf-8")
    dataset = load_dataset(root)
    pairs = loops.step_requests(dataset, dataset["q"])
    assert len(pairs) == 1
    assert list(pairs[0][0].messages[1:]) == [
        ChatMessage("user", "What is 2+3?"),
        ChatMessage("user", SUMMARIZE),
    ]
    assert pairs[0][1] == {"role": "assistant", "content": "5"}


def test_prefetched_step_answers_are_one_batch(sample_dataset):
    from pytest_gta.types import ModelOutput

    class Batching(BaseModelAdapter):
        name = "batching"
        protocol = "react"

        def __init__(self):
            self.batches = []

        def generate(self, request):
            return self.generate_batch([request])[0]

        def generate_batch(self, requests):
            self.batches.append(len(requests))
            return [ModelOutput(f"Final Answer: {r.case.qid}-{r.case.index}") for r in requests]

    model = Batching()
    queries = [sample_dataset["0"], sample_dataset["3"]]
    requests = [r for q in queries for r, _ in loops.step_requests(sample_dataset, q)]
    prefetched = loops.Prefetched.run(model, requests)
    assert model.batches == [len(requests)]
    episodes = [loops.run_step(sample_dataset, q, prefetched) for q in queries]
    assert model.batches == [len(requests)]  # every answer came from the one batch
    assert episodes[1].turns[0].reply == f"Final Answer: 3-{queries[1].assistant_indices[0]}"
    # Already taken, or asked with other messages: the model answers.
    loops.run_step(sample_dataset, queries[0], prefetched)
    assert model.batches == [len(requests), len(queries[0].assistant_indices)]
    assert prefetched.name == "batching"
