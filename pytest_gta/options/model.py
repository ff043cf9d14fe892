"""The model under evaluation and how every call to it is made: ``--gta-model`` and friends.

Its part of the settings is :class:`ModelSettings`: the model's name, where recorded
predictions came from, the response cache's directory and the
:class:`~pytest_gta.models.generation.GenerationSettings` every adapter is given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import (
    OPT_BASE_URL,
    OPT_CACHE,
    OPT_CACHE_DIR,
    OPT_CONCURRENCY,
    OPT_EPOCH,
    OPT_MAX_CONCURRENCY,
    OPT_MAX_REPLY_BYTES,
    OPT_MAX_TOKENS,
    OPT_MODEL,
    OPT_MODEL_ARGS,
    OPT_PROTOCOL,
    OPT_RECORDED_ROOT,
    OPT_RETRIES,
    OPT_SEED,
    OPT_SERVED_MODEL,
    OPT_TEMPERATURE,
    OPT_TIMEOUT,
)
from pytest_gta.models.generation import (
    CACHE_MODES,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_MAX_TOKENS,
    DEFAULT_RETRIES,
    DEFAULT_TEMPERATURE,
    DEFAULT_TIMEOUT,
    OFFICIAL_TEMPERATURE,
    CacheMode,
    GenerationSettings,
)
from pytest_gta.options.core import (
    Feature,
    Given,
    OptionSpec,
    choice,
    fields,
    int_at_least,
    int_range,
    number,
    out_of_range,
)
from pytest_gta.urls import check_url
from pytest_gta.vocabulary import PROTOCOLS, ProtocolName

#: The ranges of the numeric options. Several reach a C API: a seed must fit llama.cpp's uint32
#: after ``--gta-epochs`` adds to it; a timeout must fit the socket's timeval.
RANGES: dict[str, tuple[float, float]] = {
    OPT_TEMPERATURE: (0.0, 2.0),
    OPT_MAX_TOKENS: (1, 1_000_000),
    OPT_SEED: (0, 2**31 - 1),
    OPT_TIMEOUT: (0.001, 86_400.0),
    OPT_RETRIES: (0, 100),
    OPT_MAX_CONCURRENCY: (1, 10_000),
    OPT_EPOCH: (0, 1_000_000),
    OPT_MAX_REPLY_BYTES: (1024, 2**30),
}
#: ``--gta-max-reply-bytes`` suffixes (binary: a MiB is 2**20 bytes).
BYTE_UNITS = {"kib": 2**10, "mib": 2**20, "gib": 2**30}


def is_self_check(model: str | None) -> bool:
    """Whether ``model`` checks the harness (oracle, mock) rather than being evaluated.

    Without an installed dataset such runs use the bundled sample (and say so) instead of
    stopping; a model under evaluation never silently runs on the sample.
    """
    return model is not None and (model in ("oracle", "mock") or model.startswith("mock:"))


def parse_temperature(value: str) -> float:
    """A sampling temperature in [0, 2]."""
    low, high = RANGES[OPT_TEMPERATURE]
    return number(
        value,
        OPT_TEMPERATURE,
        f"give a temperature between 0 and 2 (default {DEFAULT_TEMPERATURE}; "
        f"{OFFICIAL_TEMPERATURE} reproduces the official runs)",
        minimum=low,
        maximum=high,
    )


def parse_max_tokens(value: str) -> int:
    """A positive number of tokens per reply."""
    low, high = int_range(RANGES, OPT_MAX_TOKENS)
    hint = f"give a positive number of tokens (official: {DEFAULT_MAX_TOKENS})"
    return int_at_least(value, OPT_MAX_TOKENS, hint, low, maximum=high)


def parse_seed(value: str) -> int:
    """A seed >= 0 that every engine takes (llama.cpp's is a uint32, the APIs' an int64)."""
    low, high = int_range(RANGES, OPT_SEED)
    return int_at_least(value, OPT_SEED, "give an integer seed", low, maximum=high)


def parse_protocol(value: str) -> ProtocolName:
    """``react`` (the official text protocol) or ``native`` (provider function calling)."""
    return choice(
        value,
        PROTOCOLS,
        OPT_PROTOCOL,
        "react (the official ReAct text protocol, comparable with the leaderboard) or native "
        "(the provider's function calling)",
    )


def parse_timeout(value: str) -> float:
    """Seconds per model request."""
    low, high = RANGES[OPT_TIMEOUT]
    hint = "give a positive number of seconds"
    return number(value, OPT_TIMEOUT, hint, minimum=low, maximum=high)


def parse_max_reply_bytes(value: str) -> int:
    """Bytes an endpoint's reply may have: a count, or one with ``KiB``, ``MiB``, ``GiB``."""
    low, high = int_range(RANGES, OPT_MAX_REPLY_BYTES)
    hint = f"give a size in bytes, e.g. 8MiB or 8388608 (default: {DEFAULT_MAX_REPLY_BYTES:,})"
    text = value.strip().lower()
    unit = 1
    for suffix, size in BYTE_UNITS.items():
        if text.endswith(suffix):
            text, unit = text.removesuffix(suffix).strip(), size
            break
    try:
        count = int(text) * unit if text.isascii() and text.isdigit() else low - 1
    except ValueError:  # past Python's digit limit
        count = low - 1
    if not low <= count <= high:
        raise out_of_range(OPT_MAX_REPLY_BYTES, value, hint, low, high)
    return count


def parse_retries(value: str) -> int:
    """Retries after a transient failure (0 allowed)."""
    low, high = int_range(RANGES, OPT_RETRIES)
    hint = f"give a number of retries >= 0 (default {DEFAULT_RETRIES})"
    return int_at_least(value, OPT_RETRIES, hint, low, maximum=high)


def parse_max_concurrency(value: str) -> int:
    """Requests in flight per endpoint and process."""
    low, high = int_range(RANGES, OPT_MAX_CONCURRENCY)
    hint = f"give a positive number of requests (default {DEFAULT_MAX_CONCURRENCY})"
    return int_at_least(value, OPT_MAX_CONCURRENCY, hint, low, maximum=high)


def parse_cache(value: str) -> CacheMode:
    """``off``, ``read``, ``write`` or ``readwrite``."""
    return choice(
        value, CACHE_MODES, OPT_CACHE, "off, read, write or readwrite (default readwrite)"
    )


def parse_epoch(value: str) -> int:
    """A sampling epoch >= 0."""
    low, high = int_range(RANGES, OPT_EPOCH)
    return int_at_least(value, OPT_EPOCH, "give an epoch number >= 0", low, maximum=high)


def parse_model_args(value: str) -> dict[str, Any]:
    """``key=value,...`` (values read as JSON when they parse, else as text) or a JSON object."""
    text = value.strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise pytest.UsageError(f"{OPT_MODEL_ARGS}: not a JSON object: {exc}") from None
        if not isinstance(parsed, dict):
            raise pytest.UsageError(f"{OPT_MODEL_ARGS}: give a JSON object or key=value pairs")
        return parsed
    args: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise pytest.UsageError(
                f"{OPT_MODEL_ARGS}={value}: {item!r} is not key=value; write e.g. "
                f"{OPT_MODEL_ARGS}=tensor_parallel_size=4,max_model_len=8192"
            )
        try:
            args[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            args[key.strip()] = raw.strip()
    return args


def parse_url(value: str) -> str:
    """An http(s) URL with a host (:func:`pytest_gta.urls.check_url`), without a final /."""
    try:
        # Checked again without the final slashes: ``http://host /`` would end in a space.
        return check_url(check_url(value, OPT_BASE_URL).rstrip("/"), OPT_BASE_URL)
    except GtaUsageError as exc:
        raise pytest.UsageError(str(exc)) from None


@dataclass(frozen=True)
class ModelSettings:
    """The model under evaluation and how it is called."""

    #: ``--gta-model``; ``None``: no GTA cases are collected.
    name: str | None = None
    #: ``--gta-recorded-root``: the dataset root recorded in OpenCompass prediction files.
    recorded_root: str | None = None
    #: The rows ``generation.*``: how every model call is made.
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    #: ``--gta-cache-dir``; ``None``: ``gta-responses`` in the pytest cache directory.
    cache_dir: Path | None = None


ROWS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_MODEL,
        "MODEL",
        "model to evaluate; enables the GTA cases: oracle, mock:SCRIPT.json, "
        "opencompass:PREDICTIONS, or provider/model",
        setting="name",
        doc_default="none",
        doc="the model to evaluate; giving one turns the GTA cases on (see [Models](models.md))",
    ),
    OptionSpec(
        OPT_RECORDED_ROOT,
        "DIR",
        "dataset root recorded in opencompass prediction files (default: detected from paths)",
        setting="recorded_root",
        doc_default="detected",
        doc="dataset root recorded in OpenCompass prediction files",
    ),
    OptionSpec(
        OPT_BASE_URL,
        "URL",
        "OpenAI-compatible endpoint (vLLM, LMDeploy, llama.cpp...), e.g. http://gpu:8000/v1 "
        "(default: $OPENAI_BASE_URL)",
        parse=parse_url,
        setting="generation.base_url",
        doc_default="`$OPENAI_BASE_URL` for `openai/...` and catalog names",
        doc="an OpenAI-compatible endpoint (vLLM, LMDeploy, llama.cpp, a gateway): "
        "`http://gpu:8000/v1`",
    ),
    OptionSpec(
        OPT_SERVED_MODEL,
        "NAME",
        "model name to send to the endpoint (default: detected from its /models list)",
        setting="generation.served_model",
        doc_default="detected from `/models`",
        doc="the model name to send to the endpoint",
    ),
    OptionSpec(
        OPT_MODEL_ARGS,
        "K=V,...",
        "extra engine/provider arguments, e.g. tensor_parallel_size=4,max_model_len=8192",
        parse=parse_model_args,
        default_factory=dict,
        setting="generation.model_args",
        doc_default="none",
        doc="extra engine/provider arguments: `tensor_parallel_size=4,max_model_len=8192`, "
        '`vision=true`, `stop=["</s>"]`, or a JSON object',
    ),
    OptionSpec(
        OPT_TEMPERATURE,
        "T",
        f"sampling temperature (default: {DEFAULT_TEMPERATURE}; {OFFICIAL_TEMPERATURE} "
        "reproduces the official runs)",
        parse=parse_temperature,
        default=DEFAULT_TEMPERATURE,
        setting="generation.temperature",
        doc_default="`0`",
        doc="sampling temperature; `0.7` reproduces the official runs",
        doc_range="{low} to {high}",
    ),
    OptionSpec(
        OPT_MAX_TOKENS,
        "N",
        f"max tokens per reply (default: {DEFAULT_MAX_TOKENS}, as official)",
        parse=parse_max_tokens,
        default=DEFAULT_MAX_TOKENS,
        setting="generation.max_tokens",
        doc_default="`512`",
        doc="max tokens per reply (official); ReAct requests apply the official window cap on top",
        doc_range="{low} to {high}",
    ),
    OptionSpec(
        OPT_SEED,
        "N",
        "sampling seed sent to providers that accept one",
        parse=parse_seed,
        setting="generation.seed",
        doc_default="none",
        doc="sampling seed, sent to providers that take one",
        doc_range="{low} to {high} (each epoch adds one; every engine takes it)",
    ),
    OptionSpec(
        OPT_PROTOCOL,
        "NAME",
        "react (official ReAct text protocol, default) or native (provider function calling)",
        parse=parse_protocol,
        default="react",
        setting="generation.protocol",
        doc_default="`react`",
        doc="`react` (the official text protocol, comparable with the leaderboard) or `native` "
        "(function calling)",
    ),
    OptionSpec(
        OPT_TIMEOUT,
        "SECONDS",
        f"timeout of one model request, from the connect to the reply's last byte (default: "
        f"{DEFAULT_TIMEOUT:g})",
        parse=parse_timeout,
        default=DEFAULT_TIMEOUT,
        setting="generation.timeout",
        doc_default="`120`",
        doc="timeout of one model request as a whole, from the connect to the reply's last byte "
        "(a server trickling bytes times out too); each retry gets its own, so a call ends "
        f"within (`{OPT_RETRIES}` + 1) x the timeout plus the backoff",
        doc_range="{low} to {high} seconds",
    ),
    OptionSpec(
        OPT_MAX_REPLY_BYTES,
        "SIZE",
        f"bytes read of one reply from a model or tool endpoint, e.g. 8MiB; a larger reply is "
        f"the model's failed turn, or the tool call's error (default: {DEFAULT_MAX_REPLY_BYTES:,})",
        parse=parse_max_reply_bytes,
        default=DEFAULT_MAX_REPLY_BYTES,
        setting="generation.max_reply_bytes",
        doc_default="`8MiB`",
        doc="bytes read of one reply from a model or tool endpoint (`8388608`, `512KiB`, "
        "`1GiB`); see [Limits](#limits-on-what-an-endpoint-sends)",
        doc_range="{low} to {high} (1 KiB to 1 GiB)",
    ),
    OptionSpec(
        OPT_RETRIES,
        "N",
        f"retries on 429/5xx/timeouts/connection errors (default: {DEFAULT_RETRIES})",
        parse=parse_retries,
        default=DEFAULT_RETRIES,
        setting="generation.retries",
        doc_default="`5`",
        doc="retries on 429, 408, 5xx, timeouts and connection errors (exponential backoff with "
        "jitter, honouring `Retry-After`)",
        doc_range="{low} to {high}",
    ),
    OptionSpec(
        OPT_MAX_CONCURRENCY,
        "N",
        f"requests in flight per endpoint and process (default: {DEFAULT_MAX_CONCURRENCY})",
        parse=parse_max_concurrency,
        default=DEFAULT_MAX_CONCURRENCY,
        setting="generation.max_concurrency",
        doc_default="`64`",
        doc="a cap on requests in flight per endpoint and process, whatever "
        f"`{OPT_CONCURRENCY}` says (lower it for a rate-limited API)",
        doc_range="{low} to {high}",
    ),
    OptionSpec(
        OPT_CACHE,
        "MODE",
        "response cache: off, read, write or readwrite (default: readwrite)",
        parse=parse_cache,
        default="readwrite",
        setting="generation.cache",
        doc_default="`readwrite`",
        doc="response cache: `off`, `read`, `write`, `readwrite`",
    ),
    OptionSpec(
        OPT_CACHE_DIR,
        "DIR",
        "response cache directory (default: gta-responses in the pytest cache dir)",
        kind="path",
        setting="cache_dir",
        doc_default="`gta-responses` in the pytest cache dir",
        doc="where cached responses live",
    ),
    OptionSpec(
        OPT_EPOCH,
        "N",
        "sampling epoch: with temperature > 0 each epoch gets its own cached samples (default: 0)",
        parse=parse_epoch,
        default=0,
        setting="generation.epoch",
        doc_default="`0`",
        doc="with temperature > 0, each epoch has its own cached samples",
        doc_range="{low} to {high}",
    ),
)
FEATURE = Feature("model", ROWS, RANGES)


def settings(given: Given) -> ModelSettings:
    """The model's part of the settings, from the rows' resolved values."""
    return ModelSettings(
        **fields(ROWS, given), generation=GenerationSettings(**fields(ROWS, given, "generation"))
    )
