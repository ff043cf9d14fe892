"""Command-line options, their ini twins, and the frozen settings they resolve to.

Every option is ``--gta-*`` with dest ``gta_*`` and, where a project would pin it, an ini key of
the same name. Values are parsed by small functions that raise :class:`pytest.UsageError` with a
message saying what is allowed; the same functions parse ini values, so both routes fail alike.
Each option is one row of :data:`OPTIONS`, which both registration and resolution walk, so the
two cannot disagree (they once did: ini paths resolved against the current directory for some
options and against the ini file for others). Resolution (CLI > ini > default, with
``$GTA_DATA_DIR`` between CLI and ini) happens once, in ``pytest_configure``.

Why this module is long (one of the two allowed over 700 lines, docs/development.md): it is the
option table, one row per option with its parser, range and help beside it, and the settings it
resolves to. Splitting the rows from their parsers would put one option in two places.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

from pytest_gta.dataset import bundled_sample_path
from pytest_gta.errors import GtaUsageError
from pytest_gta.gates import (
    ALL,
    OPT_ALPHA,
    OPT_FAIL_ON_REGRESSION,
    OPT_FAIL_UNDER,
    OPT_MIN_DROP,
    Floor,
    GateSettings,
    MetricRef,
    parse_alpha,
    parse_fail_on_regression,
    parse_fail_under,
    parse_min_drop,
)
from pytest_gta.models.catalog import LEADERBOARD_PREFIX
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
from pytest_gta.provenance import label_problem
from pytest_gta.shard import Shard
from pytest_gta.urls import check_url
from pytest_gta.vocabulary import (
    AGENT_PLACEHOLDERS,
    MODES,
    PROTOCOLS,
    SANDBOX_MODES,
    Mode,
    ProtocolName,
    SandboxMode,
)

OPT_MODEL = "--gta-model"
OPT_DATA = "--gta-data"
OPT_MODE = "--gta-mode"
OPT_TOOLS = "--gta-tools"
OPT_SIM_MODEL = "--gta-sim-model"
OPT_SIM_THRESHOLD = "--gta-sim-threshold"
OPT_REPORT = "--gta-report"
OPT_REPORT_MD = "--gta-report-md"
OPT_REPORT_HTML = "--gta-report-html"
OPT_REPORT_HTML_MAX_MB = "--gta-report-html-max-mb"
OPT_INSPECT_LOG = "--gta-inspect-log"
#: What brings ``inspect_ai`` for ``--gta-inspect-log`` (pytest_gta.report.inspect_log).
INSPECT_EXTRA = 'pip install "pytest-gta[inspect]"'
OPT_LIMIT = "--gta-limit"
OPT_IDS = "--gta-ids"
OPT_RECORDED_ROOT = "--gta-recorded-root"
OPT_MAX_TURNS = "--gta-max-turns"
OPT_BASE_URL = "--gta-base-url"
OPT_SERVED_MODEL = "--gta-served-model"
OPT_SERVE = "--gta-serve"
OPT_SERVE_COMMAND = "--gta-serve-command"
OPT_SERVE_TIMEOUT = "--gta-serve-timeout"
OPT_MODEL_ARGS = "--gta-model-args"
OPT_TEMPERATURE = "--gta-temperature"
OPT_MAX_TOKENS = "--gta-max-tokens"
OPT_SEED = "--gta-seed"
OPT_PROTOCOL = "--gta-protocol"
OPT_TIMEOUT = "--gta-timeout"
OPT_MAX_REPLY_BYTES = "--gta-max-reply-bytes"
OPT_RETRIES = "--gta-retries"
OPT_MAX_CONCURRENCY = "--gta-max-concurrency"
OPT_CONCURRENCY = "--gta-concurrency"
OPT_CACHE = "--gta-cache"
OPT_CACHE_DIR = "--gta-cache-dir"
OPT_EPOCH = "--gta-epoch"
OPT_MAX_TOKENS_TOTAL = "--gta-max-tokens-total"
OPT_MAX_COST = "--gta-max-cost"
OPT_PRICE = "--gta-price"
OPT_TOOL_CASSETTES = "--gta-tool-cassettes"
OPT_TOOL_RECORD = "--gta-tool-record"
OPT_DOWNLOAD = "--gta-download"
OPT_DOWNLOAD_URL = "--gta-download-url"
OPT_DATA_DIR = "--gta-data-dir"
OPT_ALLOW_UNVERIFIED = "--gta-allow-unverified"
OPT_RECORD_MANIFEST = "--gta-record-manifest"
OPT_DATA_INFO = "--gta-data-info"
OPT_SANDBOX = "--gta-sandbox"
OPT_SHARD = "--gta-shard"
OPT_MERGE = "--gta-merge"
OPT_COMPARE = "--gta-compare"
OPT_COMPARE_REF = "--gta-compare-ref"
OPT_LEADERBOARD_ROWS = "--gta-leaderboard-rows"
OPT_EPOCHS = "--gta-epochs"
OPT_BASELINE = "--gta-baseline"
OPT_BASELINE_LENIENT = "--gta-baseline-lenient"
OPT_RERUN_REGRESSIONS = "--gta-rerun-regressions"
OPT_CONFIDENCE = "--gta-confidence"
OPT_BOOTSTRAP_SAMPLES = "--gta-bootstrap-samples"
OPT_AGENT = "--gta-agent"
OPT_AGENT_COMMAND = "--gta-agent-command"
OPT_AGENT_ENV = "--gta-agent-env"
OPT_AGENT_TIMEOUT = "--gta-agent-timeout"
OPT_LABEL = "--gta-label"
DEFAULT_CONFIDENCE = 0.95
DEFAULT_BOOTSTRAP_SAMPLES = 2000
ENV_DATA_DIR = "GTA_DATA_DIR"
#: One word of a vocabulary (a literal type) that a ``choose ...`` option takes.
Word = TypeVar("Word", bound=str)
TOOL_RECORD_MODES = ("none", "new", "all")
#: ``--gta-serve``: whether one model server is started for the session (session/model_server.py).
ServeMode = Literal["auto", "vllm", "none"]
SERVE_MODES: tuple[ServeMode, ...] = ("auto", "vllm", "none")
#: A 72B model's weights take minutes to load from a network disk.
DEFAULT_SERVE_TIMEOUT = 1800.0
#: What a ``--gta-serve-command`` template may name.
PLACEHOLDERS = ("port", "model", "host")

DEFAULT_MODES: tuple[Mode, ...] = ("e2e",)
DEFAULT_TOOLS = "replay"
DEFAULT_SIM_MODEL = "all-mpnet-base-v2"
DEFAULT_SIM_THRESHOLD = 0.5
DEFAULT_MAX_TURNS = 10
#: The allowed range of every numeric option, both ends included (docs/options.md lists them).
#: Wide enough for any real run, narrow enough that no value can exhaust the machine: several
#: size what is built (``--gta-epochs`` cases, ``--gta-bootstrap-samples`` arrays of samples x
#: cases, ``--gta-concurrency`` threads) or reach a C API (a seed must fit llama.cpp's uint32
#: after ``--gta-epochs`` adds to it; a timeout must fit the socket's timeval).
RANGES: dict[str, tuple[float, float]] = {
    OPT_LIMIT: (1, 1_000_000),
    OPT_SIM_THRESHOLD: (0.0, 1.0),
    OPT_MAX_TURNS: (1, 1000),
    OPT_TEMPERATURE: (0.0, 2.0),
    OPT_MAX_TOKENS: (1, 1_000_000),
    OPT_SEED: (0, 2**31 - 1),
    OPT_TIMEOUT: (0.001, 86_400.0),
    OPT_RETRIES: (0, 100),
    OPT_MAX_CONCURRENCY: (1, 10_000),
    OPT_CONCURRENCY: (1, 1024),
    OPT_EPOCH: (0, 1_000_000),
    OPT_EPOCHS: (1, 1000),
    OPT_CONFIDENCE: (0.5, 0.999),
    OPT_BOOTSTRAP_SAMPLES: (100, 20_000),
    OPT_MAX_TOKENS_TOTAL: (1, 10**12),
    OPT_REPORT_HTML_MAX_MB: (1.0, 100_000.0),
    OPT_MAX_COST: (1e-9, 1e9),
    OPT_PRICE: (0.0, 1e6),
    OPT_SHARD: (1, 100_000),
    OPT_MAX_REPLY_BYTES: (1024, 2**30),
    OPT_AGENT_TIMEOUT: (0.1, 86_400.0),
}


DATA_DIR_DEFAULT = Path("data")
DATASET_NAME = "gta_dataset"
DATA_DIR_DEFAULT_SOURCE = f"{DATA_DIR_DEFAULT}/ under the rootdir"
#: ``--gta-data=sample``: the 17-query sample shipped with the plugin.
SAMPLE_KEYWORD = "sample"
#: The data source of a self-check (or model-less) run that fell back to the sample.
SAMPLE_FALLBACK = "bundled sample: no dataset installed in"


def is_self_check(model: str | None) -> bool:
    """Whether ``model`` checks the harness (oracle, mock) rather than being evaluated.

    Without an installed dataset such runs use the bundled sample (and say so) instead of
    stopping; a model under evaluation never silently runs on the sample.
    """
    return model is not None and (model in ("oracle", "mock") or model.startswith("mock:"))


def parse_modes(value: str) -> tuple[Mode, ...]:
    """``step``, ``e2e`` or ``step,e2e`` (any order, no repeats)."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items or any(v not in MODES for v in items) or len(set(items)) != len(items):
        raise pytest.UsageError(
            f"{OPT_MODE}={value}: choose step, e2e or step,e2e "
            "(step = step-by-step on the reference chain, e2e = the model drives the tools)"
        )
    return tuple(m for m in MODES if m in items)


#: Characters of a refused value quoted in a usage error (a 10**30-digit value is not echoed).
SHOWN_VALUE = 40


def shown(value: str) -> str:
    """``value`` as a usage error quotes it: cut at :data:`SHOWN_VALUE` characters."""
    return value if len(value) <= SHOWN_VALUE else value[:SHOWN_VALUE] + "..."


def _int_range(flag: str) -> tuple[int, int]:
    low, high = RANGES[flag]
    return int(low), int(high)


def _plain(number: float) -> str:
    """``2,147,483,647``, ``0.001``, ``1e-09``: a range's end as a person writes it."""
    if float(number).is_integer():
        return f"{int(number):,}"
    return f"{number:g}"


def out_of_range(flag: str, value: str, hint: str, low: float, high: float) -> pytest.UsageError:
    """The usage error of a number outside ``low..high``: the option, the value, the range."""
    allowed = f"allowed: {_plain(low)} to {_plain(high)}"
    return pytest.UsageError(f"{flag}={shown(value)}: {hint} ({allowed})")


def _int_at_least(
    value: str, flag: str, hint: str, minimum: int = 1, *, maximum: int | None = None
) -> int:
    """An integer in ``minimum..maximum``, else a usage error naming the option and the range.

    Every integer option has a ``maximum`` (docs/options.md lists them): an absurd count is a
    typo, and some counts size what is allocated (``--gta-epochs`` cases, bootstrap arrays),
    so they are refused here, before anything is built. Text that is no integer, including one
    past Python's 4,300-digit limit, is refused the same way.
    """
    try:
        number = int(value)
    except ValueError:
        number = minimum - 1
    if number < minimum or (maximum is not None and number > maximum):
        if maximum is None:
            raise pytest.UsageError(f"{flag}={shown(value)}: {hint}")
        raise out_of_range(flag, value, hint, minimum, maximum)
    return number


def parse_limit(value: str) -> int:
    """A positive number of queries."""
    low, high = _int_range(OPT_LIMIT)
    hint = f"give a positive number of queries, e.g. {OPT_LIMIT}=20"
    return _int_at_least(value, OPT_LIMIT, hint, low, maximum=high)


def parse_ids(value: str) -> tuple[str, ...]:
    """Comma-separated query ids (the keys of ``dataset.json``)."""
    ids = tuple(v.strip() for v in value.split(",") if v.strip())
    if not ids:
        raise pytest.UsageError(f"{OPT_IDS}={value!r}: give query ids like {OPT_IDS}=3,17,42")
    return ids


def parse_threshold(value: str) -> float:
    """A similarity in [0, 1]."""
    low, high = RANGES[OPT_SIM_THRESHOLD]
    hint = f"give a similarity between 0 and 1 (default {DEFAULT_SIM_THRESHOLD})"
    return _number(value, OPT_SIM_THRESHOLD, hint, minimum=low, maximum=high)


def parse_max_turns(value: str) -> int:
    """A positive number of model turns per end-to-end episode."""
    low, high = _int_range(OPT_MAX_TURNS)
    hint = f"give a positive number of turns (official: {DEFAULT_MAX_TURNS})"
    return _int_at_least(value, OPT_MAX_TURNS, hint, low, maximum=high)


def parse_tools(value: str) -> str:
    """Backend list ``name[=arg],...``; names are checked against the registry later."""
    if not [v for v in value.split(",") if v.strip()]:
        raise pytest.UsageError(f"{OPT_TOOLS} is empty; pass e.g. {OPT_TOOLS}={DEFAULT_TOOLS}")
    return value


def _number(
    value: str, flag: str, hint: str, *, minimum: float = 0.0, maximum: float | None = None
) -> float:
    """A finite number in ``minimum..maximum`` (NaN, infinities and 1e308 refused alike)."""
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    # ``not >=`` so that NaN, which compares false with everything, is refused too.
    if not number >= minimum or number == float("inf"):
        if maximum is None:
            raise pytest.UsageError(f"{flag}={shown(value)}: {hint}")
        raise out_of_range(flag, value, hint, minimum, maximum)
    if maximum is not None and number > maximum:
        raise out_of_range(flag, value, hint, minimum, maximum)
    return number


def parse_temperature(value: str) -> float:
    """A sampling temperature in [0, 2]."""
    low, high = RANGES[OPT_TEMPERATURE]
    return _number(
        value,
        OPT_TEMPERATURE,
        f"give a temperature between 0 and 2 (default {DEFAULT_TEMPERATURE}; "
        f"{OFFICIAL_TEMPERATURE} reproduces the official runs)",
        minimum=low,
        maximum=high,
    )


def parse_max_tokens(value: str) -> int:
    """A positive number of tokens per reply."""
    low, high = _int_range(OPT_MAX_TOKENS)
    hint = f"give a positive number of tokens (official: {DEFAULT_MAX_TOKENS})"
    return _int_at_least(value, OPT_MAX_TOKENS, hint, low, maximum=high)


def parse_seed(value: str) -> int:
    """A seed >= 0 that every engine takes (llama.cpp's is a uint32, the APIs' an int64)."""
    low, high = _int_range(OPT_SEED)
    return _int_at_least(value, OPT_SEED, "give an integer seed", low, maximum=high)


def _choice(value: str, choices: tuple[Word, ...], flag: str, explained: str) -> Word:
    """One of ``choices`` (typed as the literal it is), else a usage error as ``explained``."""
    for choice in choices:
        if value.strip() == choice:
            return choice
    raise pytest.UsageError(f"{flag}={value}: choose {explained}")


def parse_protocol(value: str) -> ProtocolName:
    """``react`` (the official text protocol) or ``native`` (provider function calling)."""
    return _choice(
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
    return _number(value, OPT_TIMEOUT, hint, minimum=low, maximum=high)


#: ``--gta-max-reply-bytes`` suffixes (binary: a MiB is 2**20 bytes).
BYTE_UNITS = {"kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_max_reply_bytes(value: str) -> int:
    """Bytes an endpoint's reply may have: a count, or one with ``KiB``, ``MiB``, ``GiB``."""
    low, high = _int_range(OPT_MAX_REPLY_BYTES)
    hint = f"give a size in bytes, e.g. 8MiB or 8388608 (default: {DEFAULT_MAX_REPLY_BYTES:,})"
    text = value.strip().lower()
    unit = 1
    for suffix, size in BYTE_UNITS.items():
        if text.endswith(suffix):
            text, unit = text.removesuffix(suffix).strip(), size
            break
    try:
        number = int(text) * unit if text.isascii() and text.isdigit() else low - 1
    except ValueError:  # past Python's digit limit
        number = low - 1
    if not low <= number <= high:
        raise out_of_range(OPT_MAX_REPLY_BYTES, value, hint, low, high)
    return number


def parse_retries(value: str) -> int:
    """Retries after a transient failure (0 allowed)."""
    low, high = _int_range(OPT_RETRIES)
    hint = f"give a number of retries >= 0 (default {DEFAULT_RETRIES})"
    return _int_at_least(value, OPT_RETRIES, hint, low, maximum=high)


def parse_max_concurrency(value: str) -> int:
    """Requests in flight per endpoint and process."""
    low, high = _int_range(OPT_MAX_CONCURRENCY)
    hint = f"give a positive number of requests (default {DEFAULT_MAX_CONCURRENCY})"
    return _int_at_least(value, OPT_MAX_CONCURRENCY, hint, low, maximum=high)


def parse_concurrency(value: str) -> int:
    """Episodes a process runs at once."""
    low, high = _int_range(OPT_CONCURRENCY)
    hint = "give a positive number of episodes, e.g. --gta-concurrency=16"
    return _int_at_least(value, OPT_CONCURRENCY, hint, low, maximum=high)


def parse_cache(value: str) -> CacheMode:
    """``off``, ``read``, ``write`` or ``readwrite``."""
    return _choice(
        value, CACHE_MODES, OPT_CACHE, "off, read, write or readwrite (default readwrite)"
    )


def parse_epoch(value: str) -> int:
    """A sampling epoch >= 0."""
    low, high = _int_range(OPT_EPOCH)
    return _int_at_least(value, OPT_EPOCH, "give an epoch number >= 0", low, maximum=high)


def parse_epochs(value: str) -> int:
    """How many times each case runs: 1 or more."""
    low, high = _int_range(OPT_EPOCHS)
    hint = "give how many times each case runs, e.g. 5 (default: 1)"
    return _int_at_least(value, OPT_EPOCHS, hint, low, maximum=high)


def parse_baseline(value: str) -> str:
    """A previous ``--gta-report`` file, or ``leaderboard:NAME[@BOARD]`` (checked when read)."""
    text = value.strip()
    if not text or text == LEADERBOARD_PREFIX:
        raise pytest.UsageError(
            f"{OPT_BASELINE}={value!r}: give a previous --gta-report JSON file, or "
            f"{LEADERBOARD_PREFIX}NAME for an official leaderboard row (e.g. "
            f"{LEADERBOARD_PREFIX}gpt-4o, the newest board that has it, or "
            f"{LEADERBOARD_PREFIX}gpt-4o@2024-07 for a given board)"
        )
    return text


def parse_confidence(value: str) -> float:
    """The confidence level of the intervals, e.g. 0.95."""
    low, high = RANGES[OPT_CONFIDENCE]
    hint = "give a level between 0.5 and 0.999, e.g. 0.95"
    return _number(value, OPT_CONFIDENCE, hint, minimum=low, maximum=high)


def parse_bootstrap_samples(value: str) -> int:
    """Resamples of the bootstrap and permutation tests: at least 100."""
    low, high = _int_range(OPT_BOOTSTRAP_SAMPLES)
    hint = f"give at least 100 resamples (default: {DEFAULT_BOOTSTRAP_SAMPLES})"
    return _int_at_least(value, OPT_BOOTSTRAP_SAMPLES, hint, low, maximum=high)


def parse_max_tokens_total(value: str) -> int:
    """A positive token budget for the session."""
    low, high = _int_range(OPT_MAX_TOKENS_TOTAL)
    hint = "give a positive number of tokens (input + output)"
    return _int_at_least(value, OPT_MAX_TOKENS_TOTAL, hint, low, maximum=high)


#: Default size limit of the HTML report (its images are left out beyond it, with a note).
DEFAULT_REPORT_HTML_MAX_MB = 10.0


def parse_report_html_max_mb(value: str) -> float:
    """The HTML report's size limit in MB: at least 1 (the page itself needs some room)."""
    low, high = RANGES[OPT_REPORT_HTML_MAX_MB]
    hint = f"give a size in MB, at least 1 (default: {DEFAULT_REPORT_HTML_MAX_MB:g})"
    return _number(value, OPT_REPORT_HTML_MAX_MB, hint, minimum=low, maximum=high)


def parse_max_cost(value: str) -> float:
    """A positive cost budget in USD."""
    low, high = RANGES[OPT_MAX_COST]
    hint = "give a positive amount in USD"
    return _number(value, OPT_MAX_COST, hint, minimum=low, maximum=high)


def parse_price(value: str) -> tuple[float, float]:
    """``IN,OUT`` in USD per million tokens."""
    hint = "give input,output prices in USD per million tokens, e.g. 2.5,10"
    parts = value.split(",")
    if len(parts) != 2:
        raise pytest.UsageError(f"{OPT_PRICE}={shown(value)}: {hint}")
    low, high = RANGES[OPT_PRICE]
    prices = [_number(p, OPT_PRICE, hint, minimum=low, maximum=high) for p in parts]
    return prices[0], prices[1]


def parse_tool_record(value: str) -> str:
    """``none``, ``new`` (record calls not yet in the cassettes) or ``all`` (re-record)."""
    return _choice(
        value,
        TOOL_RECORD_MODES,
        OPT_TOOL_RECORD,
        "none, new (record calls the cassettes lack) or all (re-record every call)",
    )


def parse_sandbox(value: str) -> SandboxMode:
    """``auto``, ``bubblewrap`` (required: refuse to run model code without it) or ``rlimit``."""
    return _choice(
        value,
        SANDBOX_MODES,
        OPT_SANDBOX,
        "auto (bubblewrap when it works here, else the rlimit fallback), bubblewrap (required) "
        "or rlimit",
    )


def usage_error(message: str) -> pytest.UsageError:
    """A usage error that names the plugin (``pytest-gta: ...``), as the serve options' do."""
    return pytest.UsageError(f"pytest-gta: {message}")


def template_words(
    template: str,
    *,
    flag: str = OPT_SERVE_COMMAND,
    placeholders: tuple[str, ...] = PLACEHOLDERS,
    required: str | None = "port",
    what: str = "server",
    example: str = "'python -m sglang.launch_server --model-path {model} --host {host} "
    "--port {port}'",
) -> list[str]:
    """The words of a command template (``--gta-serve-command``), checked; no shell is involved.

    ``--gta-agent-command`` checks its template here too, with its own ``placeholders`` and
    nothing ``required``.

    Raises:
        pytest.UsageError: unbalanced quotes, no words, a stray brace, a placeholder other
            than ``placeholders`` (with no conversion or format spec), or no ``{required}``
            (for a server: the plugin could not tell it where to listen).
    """
    shown_flag = f"{flag}={template!r}"
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise usage_error(f"{shown_flag}: {exc} (balance the quotes)") from None
    if not words:
        raise usage_error(f"{shown_flag}: give the {what}'s command, e.g. {example}")
    seen: set[str] = set()
    allowed = ", ".join("{" + p + "}" for p in placeholders)
    for word in words:
        try:
            fields = list(string.Formatter().parse(word))
        except ValueError as exc:
            hint = "write {{ and }} for literal braces"
            raise usage_error(f"{shown_flag}: {exc} in {word!r}; {hint}") from None
        for _, name, spec, conversion in fields:
            if name is None:
                continue
            if name not in placeholders or spec or conversion:
                raise usage_error(
                    f"{shown_flag}: unknown placeholder {{{name}"
                    f"{'!' + conversion if conversion else ''}"
                    f"{':' + spec if spec else ''}}} in {word!r}; the template may use {allowed}"
                )
            seen.add(name)
    if required is not None and required not in seen:
        raise usage_error(f"{shown_flag}: put {{{required}}} where the server takes its port")
    return words


def parse_serve_command(value: str) -> str:
    """An option parser: the template, checked by :func:`template_words`."""
    template_words(value)
    return value.strip()


def parse_serve(value: str) -> ServeMode:
    """``auto``, ``vllm`` or ``none``."""
    for mode in SERVE_MODES:
        if value.strip() == mode:
            return mode
    raise usage_error(
        f"{OPT_SERVE}={value}: choose auto (one managed server for an open-weight model under "
        "xdist or --gta-concurrency above 1), vllm (always vllm serve) or none"
    )


def parse_serve_timeout(value: str) -> float:
    """Seconds the server may take to answer ``/health``."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    # At most a day (docs/options.md): 1e308 would overflow the socket's timeval.
    if not 0 < seconds <= 86_400:
        raise usage_error(
            f"{OPT_SERVE_TIMEOUT}={value[:40]}: give a positive number of seconds, at most "
            f"86,400 (default {DEFAULT_SERVE_TIMEOUT:g}: a 72B model takes minutes to load)"
        )
    return seconds


def parse_shard(value: str) -> Shard:
    """``K/N``: shard K (from 1) of N."""
    low, high = _int_range(OPT_SHARD)
    index, sep, total = value.strip().partition("/")
    try:
        shard = Shard(int(index), int(total)) if sep else None
    except ValueError:
        shard = None
    hint = f"give K/N with 1 <= K <= N, e.g. {OPT_SHARD}=2/3 runs the second of three shards"
    if shard is None or not 1 <= shard.index <= shard.total:
        raise pytest.UsageError(f"{OPT_SHARD}={shown(value)}: {hint}")
    if shard.total > high:
        raise out_of_range(OPT_SHARD, value, f"{hint}; N", low, high)
    return shard


def parse_model_args(value: str) -> dict[str, Any]:
    """``key=value,...`` (values read as JSON when they parse, else as text) or a JSON object."""
    import json

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


#: Seconds one case's agent may run before its process group is stopped (``--gta-agent-timeout``).
DEFAULT_AGENT_TIMEOUT = 600.0
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_agent(value: str) -> str:
    """``MODULE:CALLABLE`` or ``path/to/file.py:CALLABLE``; imported when the session starts."""
    text = value.strip()
    module, colon, name = text.rpartition(":")
    if not colon or not module.strip() or not name.strip().isidentifier():
        raise usage_error(
            f"{OPT_AGENT}={shown(value)}: give MODULE:CALLABLE (e.g. my_agent:solve) or "
            "path/to/agent.py:CALLABLE"
        )
    return f"{module.strip()}:{name.strip()}"


def agent_words(template: str) -> list[str]:
    """The words of a ``--gta-agent-command`` template, checked (see :func:`template_words`)."""
    return template_words(
        template,
        flag=OPT_AGENT_COMMAND,
        placeholders=AGENT_PLACEHOLDERS,
        required=None,
        what="agent",
        example="'python my_agent.py --mcp {mcp_url} --query {query_file}'",
    )


def parse_agent_command(value: str) -> str:
    """An option parser: the agent's command template, checked by :func:`agent_words`."""
    agent_words(value)
    return value.strip()


def parse_agent_env(value: str) -> tuple[str, ...]:
    """``NAME,...``: environment variables passed on to a ``--gta-agent-command`` agent."""
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    bad = [n for n in names if not _ENV_NAME.fullmatch(n)]
    if not names or bad:
        raise usage_error(
            f"{OPT_AGENT_ENV}={shown(value)}: give environment variable names separated by "
            "commas, e.g. HF_HOME,MY_AGENT_CONFIG"
        )
    return names


def parse_agent_timeout(value: str) -> float:
    """Seconds one case's agent may run."""
    low, high = RANGES[OPT_AGENT_TIMEOUT]
    hint = f"give seconds one case's agent may run (default: {DEFAULT_AGENT_TIMEOUT:g})"
    return _number(value, OPT_AGENT_TIMEOUT, hint, minimum=low, maximum=high)


def parse_leaderboard_rows(value: str) -> tuple[str, ...]:
    """``BOARD|NAME[,...]``: the leaderboard rows set below ``--gta-compare``'s runs.

    Only split here: whether a name is a board or a model is the leaderboard's to say, and
    the comparison names the boards and close model names when one is neither.
    """
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    if not names:
        raise usage_error(
            f"{OPT_LEADERBOARD_ROWS}={shown(value)}: give leaderboard boards (every row of "
            "one, e.g. 2026-02) or model names, separated by commas"
        )
    return names


def parse_text(value: str) -> str:
    """Any non-empty text."""
    if not value.strip():
        raise pytest.UsageError("an empty value was given to a --gta-* option")
    return value.strip()


def parse_label(value: str) -> str:
    """A run's name in reports and comparisons: one visible line (surrounding spaces dropped)."""
    problem = label_problem(value)
    if problem is not None:
        raise pytest.UsageError(
            f"{OPT_LABEL}={shown(value)!r}: {problem} (a label names the run on one visible line)"
        )
    return value.strip()


#: ``value``: text parsed by ``parse``; ``path``: the same, then made absolute (see
#: :func:`option_base`); ``flag``: a command on the command line only (``--gta-download``), no
#: ini twin; ``bool``: an on switch with a boolean ini twin (``--gta-allow-unverified``);
#: ``paths``: a command taking one or more paths (``--gta-merge``), no ini twin; ``optional``:
#: a value that may be left out (``--gta-fail-on-regression`` alone means :data:`ALL`).
Kind = Literal["value", "path", "flag", "bool", "paths", "optional"]
#: Where a resolved value came from, in precedence order.
Source = Literal["cli", "env", "ini", "default"]


@dataclass(frozen=True)
class OptionSpec:
    """Everything about one ``--gta-*`` option: registration and resolution both walk these.

    Names follow the one namespace (``--gta-x-y``, dest and ini key ``gta_x_y``), so they are
    derived from ``flag`` rather than stated again.
    """

    flag: str
    metavar: str | None
    help: str
    kind: Kind = "value"
    parse: Callable[[str], Any] = parse_text
    #: The value when neither the command line, the environment nor the ini file gives one; a
    #: relative path default is relative to the rootdir.
    default: Any = None
    #: For a mutable default, as :func:`dataclasses.field` has it.
    default_factory: Callable[[], Any] | None = None
    #: An environment variable between the command line and the ini file (the machine's choice
    #: beats the project's).
    env: str | None = None
    #: The :class:`GtaSettings` field it fills (``generation.x``: of
    #: :class:`~pytest_gta.models.generation.GenerationSettings`); ``None`` for commands and for
    #: the data options, which :func:`resolve_settings` resolves with extra rules.
    setting: str | None = None

    @property
    def dest(self) -> str:
        """The argparse dest."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def ini(self) -> str | None:
        """The ini key; commands have none (they are not something a project pins)."""
        return None if self.kind in ("flag", "paths") else self.dest

    def fallback(self) -> Any:
        """The default value, fresh when it is mutable."""
        return self.default_factory() if self.default_factory else self.default


# -- GTA's tools over MCP (``python -m pytest_gta.mcp``; pytest_gta.session.mcp_command) ----------
OPT_MCP_SERVE = "--gta-mcp-serve"
OPT_MCP_TRANSPORT = "--gta-mcp-transport"
OPT_MCP_QUERY = "--gta-mcp-query"
OPT_MCP_PORT = "--gta-mcp-port"
MCP_TRANSPORTS = ("http", "stdio")
#: Ports ``--gta-mcp-port`` accepts (0: any free port).
MCP_PORT_RANGE = (0, 65535)


def parse_mcp_transport(value: str) -> str:
    """``http`` (streamable HTTP on 127.0.0.1) or ``stdio``."""
    name = value.strip().lower()
    if name not in MCP_TRANSPORTS:
        raise pytest.UsageError(
            f"{OPT_MCP_TRANSPORT}={shown(value)}: give one of {', '.join(MCP_TRANSPORTS)}"
        )
    return name


def parse_mcp_port(value: str) -> int:
    """A TCP port on 127.0.0.1; 0 picks a free one."""
    low, high = MCP_PORT_RANGE
    return _int_at_least(
        value, OPT_MCP_PORT, "give a TCP port (0: any free port)", low, maximum=high
    )


#: Every option, in ``--help`` order.
OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_MODEL,
        "MODEL",
        "model to evaluate; enables the GTA cases: oracle, mock:SCRIPT.json, "
        "opencompass:PREDICTIONS, or provider/model",
        setting="model",
    ),
    # A path or the sample keyword, with an installed default: see _resolve_data.
    OptionSpec(
        OPT_DATA,
        "DIR",
        f"dataset directory in the official layout, or '{SAMPLE_KEYWORD}' for the bundled sample "
        f"(default: {DATASET_NAME} in the data directory)",
    ),
    OptionSpec(
        OPT_DATA_DIR,
        "DIR",
        f"where datasets are installed and looked up (default: ${ENV_DATA_DIR}, else "
        f"{DATA_DIR_DEFAULT}/ under the rootdir)",
        kind="path",
        default=DATA_DIR_DEFAULT,
        env=ENV_DATA_DIR,
    ),
    OptionSpec(
        OPT_DOWNLOAD,
        None,
        "fetch, verify and unpack the GTA dataset into the data directory, then exit",
        kind="flag",
        default=False,
    ),
    # A URL or a local path: the installer tells them apart, relative to option_base.
    OptionSpec(
        OPT_DOWNLOAD_URL,
        "URL_OR_PATH",
        "download from this URL, zip or directory instead of Hugging Face and the GitHub release",
    ),
    OptionSpec(
        OPT_ALLOW_UNVERIFIED,
        None,
        "install data that fails the manifest's sha256s or the paper's counts (mirrors)",
        kind="bool",
        default=False,
    ),
    OptionSpec(
        OPT_RECORD_MANIFEST,
        None,
        "with --gta-download: record the verified files' sha256s in data/manifest.json",
        kind="flag",
        default=False,
    ),
    OptionSpec(
        OPT_DATA_INFO,
        None,
        "print the installed dataset's origin, verification and statistics, then exit",
        kind="flag",
        default=False,
    ),
    OptionSpec(
        OPT_MCP_SERVE,
        None,
        "serve the tools as an MCP server (what python -m pytest_gta.mcp runs) until Ctrl-C",
        kind="flag",
        default=False,
    ),
    OptionSpec(
        OPT_MCP_TRANSPORT,
        "TRANSPORT",
        "with --gta-mcp-serve: http (streamable HTTP on 127.0.0.1, the default) or stdio",
        parse=parse_mcp_transport,
        default="http",
    ),
    OptionSpec(
        OPT_MCP_QUERY,
        "ID",
        "with --gta-mcp-serve: serve this query's tools and files (default: all 14 tools)",
    ),
    OptionSpec(
        OPT_MCP_PORT,
        "PORT",
        "with --gta-mcp-serve: the port on 127.0.0.1 (default: 0, any free port)",
        parse=parse_mcp_port,
        default=0,
    ),
    OptionSpec(
        OPT_MODE,
        "MODES",
        "step, e2e or step,e2e (default: e2e)",
        parse=parse_modes,
        default=DEFAULT_MODES,
        setting="modes",
    ),
    OptionSpec(
        OPT_TOOLS,
        "BACKENDS",
        f"tool backends in priority order, name[=arg],... (default: {DEFAULT_TOOLS})",
        parse=parse_tools,
        default=DEFAULT_TOOLS,
        setting="tools",
    ),
    OptionSpec(
        OPT_SIM_MODEL,
        "NAME_OR_PATH",
        f"sentence-transformers model for similarity scores (default: {DEFAULT_SIM_MODEL}, "
        "as the official evaluator)",
        default=DEFAULT_SIM_MODEL,
        setting="sim_model",
    ),
    OptionSpec(
        OPT_SIM_THRESHOLD,
        "SIM",
        f"similarity at which a subjective answer passes (default: {DEFAULT_SIM_THRESHOLD}; "
        "the metric itself stays continuous)",
        parse=parse_threshold,
        default=DEFAULT_SIM_THRESHOLD,
        setting="sim_threshold",
    ),
    OptionSpec(OPT_REPORT, "PATH", "write the JSON report here", kind="path", setting="report"),
    OptionSpec(
        OPT_REPORT_MD,
        "PATH",
        "write the metric tables as markdown here",
        kind="path",
        setting="report_md",
    ),
    OptionSpec(
        OPT_REPORT_HTML,
        "PATH",
        "write a self-contained HTML report here (tables, plots, every case's transcript and "
        "images; opens offline)",
        kind="path",
        setting="report_html",
    ),
    OptionSpec(
        OPT_REPORT_HTML_MAX_MB,
        "MB",
        f"size limit of the HTML report; full-size images beyond it are left out, with a note "
        f"(default: {DEFAULT_REPORT_HTML_MAX_MB:g})",
        parse=parse_report_html_max_mb,
        default=DEFAULT_REPORT_HTML_MAX_MB,
        setting="report_html_max_mb",
    ),
    OptionSpec(
        OPT_INSPECT_LOG,
        "DIR",
        "write the run as Inspect AI eval logs into this directory, one per mode, for "
        f"'inspect view' (needs {INSPECT_EXTRA})",
        kind="path",
        setting="inspect_log",
    ),
    OptionSpec(
        OPT_LABEL,
        "TEXT",
        "name this run in its report and in --gta-compare tables (default: 'MODEL [PROTOCOL]', "
        "or 'MODEL [agent AGENT]')",
        parse=parse_label,
        setting="label",
    ),
    OptionSpec(OPT_LIMIT, "N", "run only the first N queries", parse=parse_limit, setting="limit"),
    OptionSpec(
        OPT_IDS, "IDS", "run only these query ids, e.g. 3,17,42", parse=parse_ids, setting="ids"
    ),
    OptionSpec(
        OPT_RECORDED_ROOT,
        "DIR",
        "dataset root recorded in opencompass prediction files (default: detected from paths)",
        setting="recorded_root",
    ),
    OptionSpec(
        OPT_MAX_TURNS,
        "N",
        f"model turns per end-to-end episode (default: {DEFAULT_MAX_TURNS}, as official)",
        parse=parse_max_turns,
        default=DEFAULT_MAX_TURNS,
        setting="max_turns",
    ),
    OptionSpec(
        OPT_BASE_URL,
        "URL",
        "OpenAI-compatible endpoint (vLLM, LMDeploy, llama.cpp...), e.g. http://gpu:8000/v1 "
        "(default: $OPENAI_BASE_URL)",
        parse=parse_url,
        setting="generation.base_url",
    ),
    OptionSpec(
        OPT_SERVED_MODEL,
        "NAME",
        "model name to send to the endpoint (default: detected from its /models list)",
        setting="generation.served_model",
    ),
    OptionSpec(
        OPT_MODEL_ARGS,
        "K=V,...",
        "extra engine/provider arguments, e.g. tensor_parallel_size=4,max_model_len=8192",
        parse=parse_model_args,
        default_factory=dict,
        setting="generation.model_args",
    ),
    OptionSpec(
        OPT_TEMPERATURE,
        "T",
        f"sampling temperature (default: {DEFAULT_TEMPERATURE}; {OFFICIAL_TEMPERATURE} "
        "reproduces the official runs)",
        parse=parse_temperature,
        default=DEFAULT_TEMPERATURE,
        setting="generation.temperature",
    ),
    OptionSpec(
        OPT_MAX_TOKENS,
        "N",
        f"max tokens per reply (default: {DEFAULT_MAX_TOKENS}, as official)",
        parse=parse_max_tokens,
        default=DEFAULT_MAX_TOKENS,
        setting="generation.max_tokens",
    ),
    OptionSpec(
        OPT_SEED,
        "N",
        "sampling seed sent to providers that accept one",
        parse=parse_seed,
        setting="generation.seed",
    ),
    OptionSpec(
        OPT_PROTOCOL,
        "NAME",
        "react (official ReAct text protocol, default) or native (provider function calling)",
        parse=parse_protocol,
        default="react",
        setting="generation.protocol",
    ),
    OptionSpec(
        OPT_TIMEOUT,
        "SECONDS",
        f"timeout of one model request, from the connect to the reply's last byte (default: "
        f"{DEFAULT_TIMEOUT:g})",
        parse=parse_timeout,
        default=DEFAULT_TIMEOUT,
        setting="generation.timeout",
    ),
    OptionSpec(
        OPT_MAX_REPLY_BYTES,
        "SIZE",
        f"bytes read of one reply from a model or tool endpoint, e.g. 8MiB; a larger reply is "
        f"the model's failed turn, or the tool call's error (default: {DEFAULT_MAX_REPLY_BYTES:,})",
        parse=parse_max_reply_bytes,
        default=DEFAULT_MAX_REPLY_BYTES,
        setting="generation.max_reply_bytes",
    ),
    OptionSpec(
        OPT_RETRIES,
        "N",
        f"retries on 429/5xx/timeouts/connection errors (default: {DEFAULT_RETRIES})",
        parse=parse_retries,
        default=DEFAULT_RETRIES,
        setting="generation.retries",
    ),
    OptionSpec(
        OPT_MAX_CONCURRENCY,
        "N",
        f"requests in flight per endpoint and process (default: {DEFAULT_MAX_CONCURRENCY})",
        parse=parse_max_concurrency,
        default=DEFAULT_MAX_CONCURRENCY,
        setting="generation.max_concurrency",
    ),
    OptionSpec(
        OPT_CONCURRENCY,
        "N",
        "episodes (step prompts, end-to-end episodes) a process runs at once (default: what "
        "fits the model: 16 over HTTP, 1 for a single-threaded engine)",
        parse=parse_concurrency,
        setting="concurrency",
    ),
    OptionSpec(
        OPT_CACHE,
        "MODE",
        "response cache: off, read, write or readwrite (default: readwrite)",
        parse=parse_cache,
        default="readwrite",
        setting="generation.cache",
    ),
    OptionSpec(
        OPT_CACHE_DIR,
        "DIR",
        "response cache directory (default: gta-responses in the pytest cache dir)",
        kind="path",
        setting="cache_dir",
    ),
    OptionSpec(
        OPT_EPOCH,
        "N",
        "sampling epoch: with temperature > 0 each epoch gets its own cached samples (default: 0)",
        parse=parse_epoch,
        default=0,
        setting="generation.epoch",
    ),
    OptionSpec(
        OPT_EPOCHS,
        "K",
        "run every case K times (sampling epochs from --gta-epoch on): metrics are the mean over "
        "epochs with their spread, each query gets a pass rate (default: 1)",
        parse=parse_epochs,
        default=1,
        setting="epochs",
    ),
    OptionSpec(
        OPT_MAX_TOKENS_TOTAL,
        "N",
        "stop the session cleanly once the model calls used N tokens (input + output)",
        parse=parse_max_tokens_total,
        setting="max_tokens_total",
    ),
    OptionSpec(
        OPT_MAX_COST,
        "USD",
        "stop the session cleanly once the model calls cost this much (catalog or --gta-price)",
        parse=parse_max_cost,
        setting="max_cost",
    ),
    OptionSpec(
        OPT_TOOL_CASSETTES,
        "DIR",
        "tool cassette directory: replay/strict-replay read it, --gta-tool-record writes it",
        kind="path",
        setting="tool_cassettes",
    ),
    OptionSpec(
        OPT_TOOL_RECORD,
        "MODE",
        "record live tool answers into --gta-tool-cassettes: none (default), new or all",
        parse=parse_tool_record,
        default="none",
        setting="tool_record",
    ),
    OptionSpec(
        OPT_PRICE,
        "IN,OUT",
        "USD per million input and output tokens, for --gta-max-cost",
        parse=parse_price,
        setting="price",
    ),
    OptionSpec(
        OPT_SHARD,
        "K/N",
        "run shard K of N: the selected cases split deterministically, balanced by reference "
        "steps; merge the shards' reports with --gta-merge",
        parse=parse_shard,
        setting="shard",
    ),
    OptionSpec(
        OPT_MERGE,
        "REPORT",
        "rebuild one run's tables and report (--gta-report, --gta-report-md, --junitxml) from "
        "the --gta-report files of its shards, then exit",
        kind="paths",
    ),
    OptionSpec(
        OPT_COMPARE,
        "REPORT",
        "set runs side by side from their --gta-report files or directories of them (the "
        "paper's tables with one row per run, paired tests, the per-query matrix, "
        "reliability, cost and time; --gta-report, --gta-report-md, --gta-report-html), then "
        "exit",
        kind="paths",
    ),
    OptionSpec(
        OPT_COMPARE_REF,
        "LABEL",
        "the run of --gta-compare that the others are tested against, by label (default: the "
        "first)",
        setting="compare_ref",
    ),
    OptionSpec(
        OPT_LEADERBOARD_ROWS,
        "BOARD|NAME,...",
        "published leaderboard rows below --gta-compare's runs: a board (e.g. 2026-02, every "
        "row) or model names (each one's newest row)",
        parse=parse_leaderboard_rows,
        default=(),
        setting="leaderboard_rows",
    ),
    OptionSpec(
        OPT_CONFIDENCE,
        "LEVEL",
        f"confidence level of the metrics' intervals (default: {DEFAULT_CONFIDENCE:g})",
        parse=parse_confidence,
        default=DEFAULT_CONFIDENCE,
        setting="confidence",
    ),
    OptionSpec(
        OPT_BOOTSTRAP_SAMPLES,
        "N",
        f"resamples of the bootstrap intervals and permutation tests (default: "
        f"{DEFAULT_BOOTSTRAP_SAMPLES})",
        parse=parse_bootstrap_samples,
        default=DEFAULT_BOOTSTRAP_SAMPLES,
        setting="bootstrap_samples",
    ),
    OptionSpec(
        OPT_BASELINE,
        "REPORT",
        "compare with a previous --gta-report JSON case by case (paired differences, p-values, "
        f"flipped cases), or with {LEADERBOARD_PREFIX}NAME[@BOARD], an official leaderboard row "
        "(the newest board that has NAME, or BOARD, e.g. 2025-03)",
        parse=parse_baseline,
        setting="baseline",
    ),
    OptionSpec(
        OPT_BASELINE_LENIENT,
        None,
        "compare with a baseline whose dataset, modes, protocol or scoring settings differ "
        "(noted in the report) instead of refusing",
        kind="bool",
        default=False,
        setting="baseline_lenient",
    ),
    OptionSpec(
        OPT_RERUN_REGRESSIONS,
        None,
        "run only the cases that regressed against the baseline in the last run (like --lf)",
        kind="flag",
        default=False,
        setting="rerun_regressions",
    ),
    OptionSpec(
        OPT_FAIL_UNDER,
        "METRIC=VALUE,...",
        "gate: fail the run when a metric is below its floor (percent), e.g. "
        "ans_acc=45,tool_acc=60; with any gate, gates and errors decide the exit status",
        parse=parse_fail_under,
        setting="fail_under",
    ),
    OptionSpec(
        OPT_FAIL_ON_REGRESSION,
        "METRIC,...",
        "gate: fail the run on a significant drop against --gta-baseline, in the named metrics "
        "or (the flag alone) in every metric both runs measured",
        kind="optional",
        parse=parse_fail_on_regression,
        setting="fail_on_regression",
    ),
    OptionSpec(
        OPT_ALPHA,
        "ALPHA",
        "significance level of --gta-fail-on-regression (one-sided; default: 0.05)",
        parse=parse_alpha,
        default=0.05,
        setting="alpha",
    ),
    OptionSpec(
        OPT_MIN_DROP,
        "POINTS",
        "a regression must also drop more than this many points (default: 0)",
        parse=parse_min_drop,
        default=0.0,
        setting="min_drop",
    ),
    OptionSpec(
        OPT_SANDBOX,
        "KIND",
        "where model-written code (Calculator, Solver, Plot) runs: auto (default), bubblewrap "
        "(required) or rlimit",
        parse=parse_sandbox,
        default="auto",
        setting="sandbox",
    ),
    OptionSpec(
        OPT_SERVE,
        "KIND",
        "start one model server for the session: auto (default: for an open-weight model under "
        "xdist or --gta-concurrency above 1, without a base URL), vllm or none",
        parse=parse_serve,
        default="auto",
        setting="serve",
    ),
    OptionSpec(
        OPT_SERVE_COMMAND,
        "TEMPLATE",
        "command of the OpenAI-compatible server to start instead of vllm serve, with {port}, "
        "{model} and {host}, e.g. 'llama-server -m model.gguf --port {port}'",
        parse=parse_serve_command,
        setting="serve_command",
    ),
    OptionSpec(
        OPT_SERVE_TIMEOUT,
        "SECONDS",
        f"how long the model server may take to answer /health (default: "
        f"{DEFAULT_SERVE_TIMEOUT:g})",
        parse=parse_serve_timeout,
        default=DEFAULT_SERVE_TIMEOUT,
        setting="serve_timeout",
    ),
    OptionSpec(
        OPT_AGENT,
        "MODULE:CALLABLE",
        "evaluate your own agent: a (sync or async) callable given each case's task (query, "
        "images, MCP URL, tools, model URL); end-to-end mode only",
        parse=parse_agent,
        setting="agent",
    ),
    OptionSpec(
        OPT_AGENT_COMMAND,
        "TEMPLATE",
        "evaluate an agent program, run per case without a shell, its answer read from stdout "
        "or {answer_file}; placeholders {mcp_url} {query_file} {model_url} {anthropic_url} "
        "{model} {answer_file} {case_id}",
        parse=parse_agent_command,
        setting="agent_command",
    ),
    OptionSpec(
        OPT_AGENT_ENV,
        "NAME,...",
        "environment variables passed on to --gta-agent-command (it gets only PATH, HOME, the "
        "locale and the proxy's URLs otherwise)",
        parse=parse_agent_env,
        default=(),
        setting="agent_env",
    ),
    OptionSpec(
        OPT_AGENT_TIMEOUT,
        "SECONDS",
        f"how long one case's agent may run; then it is stopped and the case errors (default: "
        f"{DEFAULT_AGENT_TIMEOUT:g})",
        parse=parse_agent_timeout,
        default=DEFAULT_AGENT_TIMEOUT,
        setting="agent_timeout",
    ),
)
OPTIONS_BY_DEST: dict[str, OptionSpec] = {spec.dest: spec for spec in OPTIONS}


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``--gta-*`` options and their ini twins under one group."""
    group = parser.getgroup("gta", "GTA tool-agent benchmark (pytest-gta)")
    for spec in OPTIONS:
        if spec.kind == "paths":
            group.addoption(
                spec.flag, dest=spec.dest, metavar=spec.metavar, nargs="+", help=spec.help
            )
        elif spec.kind == "flag":
            group.addoption(
                spec.flag, dest=spec.dest, action="store_true", default=spec.default, help=spec.help
            )
        elif spec.kind == "optional":
            group.addoption(
                spec.flag,
                dest=spec.dest,
                metavar=spec.metavar,
                nargs="?",
                const=ALL,
                type=spec.parse,
                default=None,
                help=spec.help,
            )
            parser.addini(spec.dest, help=f"default for {spec.flag}", default=None)
        elif spec.kind == "bool":
            # None, not False: an absent flag must let the ini value through.
            group.addoption(
                spec.flag, dest=spec.dest, action="store_true", default=None, help=spec.help
            )
            parser.addini(
                spec.dest, type="bool", default=spec.default, help=f"default for {spec.flag}"
            )
        else:
            group.addoption(
                spec.flag,
                dest=spec.dest,
                metavar=spec.metavar,
                type=spec.parse,
                default=None,
                help=spec.help,
            )
            parser.addini(spec.dest, help=f"default for {spec.flag}", default=None)


@dataclass(frozen=True)
class GtaSettings:
    """The resolved ``--gta-*`` settings of a session."""

    model: str | None
    #: ``None`` when no dataset is installed and none was named (a usage error once needed).
    data: Path | None
    data_source: str
    modes: tuple[Mode, ...]
    tools: str
    sim_model: str
    sim_threshold: float
    report: Path | None
    report_md: Path | None
    limit: int | None
    ids: tuple[str, ...] | None
    recorded_root: str | None
    max_turns: int
    invocation_dir: Path
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    cache_dir: Path | None = None
    max_tokens_total: int | None = None
    max_cost: float | None = None
    price: tuple[float, float] | None = None
    tool_cassettes: Path | None = None
    tool_record: str = "none"
    #: ``--gta-sandbox``: auto, bubblewrap or rlimit.
    sandbox: SandboxMode = "auto"
    #: Where datasets are installed (``--gta-data-dir``); the default dataset is ``gta_dataset``.
    data_dir: Path = DATA_DIR_DEFAULT
    #: ``--gta-concurrency``; ``None``: the model's own default (see pytest_gta.run.pipeline).
    concurrency: int | None = None
    #: ``--gta-shard``: which part of the selected cases this job runs (``None``: all).
    shard: Shard | None = None
    #: ``--gta-serve``: auto, vllm or none (see pytest_gta.session.model_server).
    serve: ServeMode = "auto"
    #: ``--gta-serve-command``: the server template, checked; ``None``: vllm serve.
    serve_command: str | None = None
    #: ``--gta-serve-timeout``: seconds the server may take to become healthy.
    serve_timeout: float = DEFAULT_SERVE_TIMEOUT
    #: ``--gta-epochs``: how many times each case runs.
    epochs: int = 1
    #: ``--gta-baseline``: an absolute report path, ``leaderboard:NAME``, or ``None``.
    baseline: str | None = None
    baseline_lenient: bool = False
    rerun_regressions: bool = False
    #: ``--gta-confidence`` and ``--gta-bootstrap-samples``: the intervals and tests.
    confidence: float = DEFAULT_CONFIDENCE
    bootstrap_samples: int = DEFAULT_BOOTSTRAP_SAMPLES
    #: The gates (:mod:`pytest_gta.gates`).
    fail_under: tuple[Floor, ...] | None = None
    fail_on_regression: tuple[MetricRef, ...] | str | None = None
    alpha: float = 0.05
    min_drop: float = 0.0
    #: ``--gta-report-html`` and its size limit in MB.
    report_html: Path | None = None
    report_html_max_mb: float = DEFAULT_REPORT_HTML_MAX_MB
    #: ``--gta-inspect-log``: the directory of the run's Inspect AI logs.
    inspect_log: Path | None = None
    #: ``--gta-agent`` (``MODULE:CALLABLE``) or ``--gta-agent-command`` (a checked template);
    #: at most one is set. ``None`` and ``None``: the project's own loop.
    agent: str | None = None
    agent_command: str | None = None
    #: ``--gta-agent-env``: variables a command agent is given besides the allow-list.
    agent_env: tuple[str, ...] = ()
    #: ``--gta-agent-timeout``: seconds one case's agent may run.
    agent_timeout: float = DEFAULT_AGENT_TIMEOUT
    #: ``--gta-compare-ref``: the reference run's label (``None``: the first run).
    compare_ref: str | None = None
    #: ``--gta-leaderboard-rows``: boards and model names, as given.
    leaderboard_rows: tuple[str, ...] = ()
    #: ``--gta-label``: the run's name in its report (``None``: the default label).
    label: str | None = None

    @property
    def gates(self) -> GateSettings:
        """The gates of the run (none configured: pytest's exit status as usual)."""
        return GateSettings(
            self.fail_under or (), self.fail_on_regression or (), self.alpha, self.min_drop
        )

    @property
    def agent_spec(self) -> str | None:
        """The agent under test as the report and header name it (``None``: no agent)."""
        return self.agent or self.agent_command

    @property
    def active(self) -> bool:
        """Whether a model was given, i.e. GTA cases are collected automatically."""
        return self.model is not None


@dataclass(frozen=True)
class Resolved:
    """An option's value and where it came from."""

    value: Any
    source: Source
    #: The source in a message's words: the flag, the variable, ``ini <key>`` or ``default``.
    origin: str


def option_base(config: pytest.Config, source: Source) -> Path:
    """What a relative path from ``source`` is relative to.

    The command line and the environment belong to the shell, so the directory pytest runs
    in; an ini value belongs to the project, so the ini file's directory (docs/options.md promises
    this, and it makes the value mean the same from any subdirectory); a default, the rootdir.
    """
    if source == "ini":
        return config.inipath.parent if config.inipath else config.rootpath
    if source == "default":
        return config.rootpath
    return config.invocation_params.dir


def resolve_path(config: pytest.Config, value: str | Path, source: Source) -> Path:
    """``value`` made absolute against :func:`option_base` (``~`` expanded)."""
    return (option_base(config, source) / Path(value).expanduser()).absolute()


def _given(config: pytest.Config, spec: OptionSpec) -> tuple[Any, Source, str] | None:
    """(value, source, origin) from the command line, environment or ini file, first wins."""
    cli = config.getoption(spec.dest)
    # A command's store_true default is False, a bool switch's None: neither was given.
    if cli is not None and cli is not False:
        return cli, "cli", spec.flag
    env = os.environ.get(spec.env, "").strip() if spec.env else ""
    if spec.env and env:
        try:
            return spec.parse(env), "env", spec.env
        except pytest.UsageError as exc:
            raise pytest.UsageError(f"environment variable {spec.env}: {exc}") from None
    if spec.ini is None:
        return None
    ini = config.getini(spec.ini)
    if not ini:
        return None
    if spec.kind == "bool":
        return bool(ini), "ini", f"ini {spec.ini}"
    try:
        return spec.parse(str(ini)), "ini", f"ini {spec.ini}"
    except pytest.UsageError as exc:
        raise pytest.UsageError(f"ini option {spec.ini}: {exc}") from None


def resolve_option(config: pytest.Config, dest: str) -> Resolved:
    """Option ``dest`` resolved CLI > environment > ini > default, parsed and checked.

    A ``path`` option comes back absolute (:func:`resolve_path`); a ``flag`` or ``bool`` one as
    a bool.
    """
    spec = OPTIONS_BY_DEST[dest]
    given = _given(config, spec)
    value, source, origin = given if given else (spec.fallback(), "default", "default")
    if spec.kind == "path" and value is not None:
        value = resolve_path(config, value, source)
    elif spec.kind == "paths":
        value = [resolve_path(config, v, source) for v in value or ()]
    elif spec.kind in ("flag", "bool"):
        value = bool(value)
    return Resolved(value, source, origin)


def resolve_data_dir(config: pytest.Config) -> tuple[Path, str]:
    """``--gta-data-dir`` > ``$GTA_DATA_DIR`` > ini ``gta_data_dir`` > ``data/`` under the rootdir.

    The environment beats the ini file: it is the machine's choice (a CI cache), the ini the
    project's.
    """
    resolved = resolve_option(config, "gta_data_dir")
    where = DATA_DIR_DEFAULT_SOURCE if resolved.source == "default" else resolved.origin
    return resolved.value, where


def _resolve_data(
    config: pytest.Config, model: str | None, data_dir: Path, data_dir_source: str
) -> tuple[Path | None, str]:

    named = resolve_option(config, "gta_data")
    if named.value == SAMPLE_KEYWORD:
        return bundled_sample_path(), "bundled sample"
    if named.value is not None:
        return resolve_path(config, named.value, named.source), named.origin
    installed = data_dir / DATASET_NAME
    if (installed / "dataset.json").is_file():
        if data_dir_source == DATA_DIR_DEFAULT_SOURCE:
            return installed.absolute(), str(DATA_DIR_DEFAULT / DATASET_NAME)
        return installed.absolute(), f"{DATASET_NAME} in the data directory from {data_dir_source}"
    if model is None or is_self_check(model):
        # Without a model nothing is evaluated: user tests are collected from the sample and skip.
        return bundled_sample_path(), f"{SAMPLE_FALLBACK} {data_dir}"
    return None, f"no dataset installed in {data_dir}"


def check_agent(fields: dict[str, Any]) -> None:
    """Refuse agent settings that cannot work together (both agent options, step mode).

    Raises:
        pytest.UsageError: naming the options and what to do instead.
    """
    if fields["agent"] and fields["agent_command"]:
        raise usage_error(
            f"{OPT_AGENT} and {OPT_AGENT_COMMAND} both name the agent under test; give one"
        )
    if (fields["agent"] or fields["agent_command"]) and "step" in fields["modes"]:
        flag = OPT_AGENT if fields["agent"] else OPT_AGENT_COMMAND
        raise usage_error(
            f"{flag} runs in end-to-end mode only: step mode replays the reference prefix into a "
            f"model's prompt one step at a time, and an agent runs its own loop from the query "
            f"to the answer; use {OPT_MODE}=e2e (the default)"
        )


def check_inspect_log(fields: dict[str, Any]) -> None:
    """``--gta-inspect-log`` needs ``inspect_ai``: say so now, not after the run.

    Asked without importing it (a heavy package the plugin never loads unless it writes a log).

    Raises:
        pytest.UsageError: it is not installed, with the install that brings it.
    """
    if fields["inspect_log"] is not None and importlib.util.find_spec("inspect_ai") is None:
        raise usage_error(
            f"{OPT_INSPECT_LOG} writes Inspect AI logs through the inspect_ai package, which is "
            f"not installed; {INSPECT_EXTRA}"
        )


def resolve_settings(config: pytest.Config) -> GtaSettings:
    """CLI > ini > default, parsed and checked once, for every option the table maps to a field."""
    fields: dict[str, Any] = {}
    generation: dict[str, Any] = {}
    for spec in OPTIONS:
        if spec.setting is None:
            continue
        section, _, name = spec.setting.rpartition(".")
        (generation if section == "generation" else fields)[name] = resolve_option(
            config, spec.dest
        ).value
    baseline = resolve_option(config, "gta_baseline")
    if baseline.value is not None and not baseline.value.startswith(LEADERBOARD_PREFIX):
        fields["baseline"] = str(resolve_path(config, baseline.value, baseline.source))
    data_dir, data_dir_source = resolve_data_dir(config)
    data, data_source = _resolve_data(config, fields["model"], data_dir, data_dir_source)
    agent = resolve_option(config, "gta_agent")
    target, _, name = (agent.value or "").rpartition(":")
    if agent.source == "ini" and (target.endswith(".py") or "/" in target):
        # A file named in the ini file is the project's: relative to the ini file, as paths are.
        fields["agent"] = f"{resolve_path(config, target, agent.source)}:{name}"
    check_agent(fields)
    check_inspect_log(fields)
    return GtaSettings(
        **fields,
        data=data,
        data_source=data_source,
        invocation_dir=config.invocation_params.dir,
        generation=GenerationSettings(**generation),
        data_dir=data_dir,
    )
