"""Command-line options, their ini twins, and the frozen settings they resolve to.

Every option is ``--gta-*`` with dest ``gta_*`` and, where a project would pin it, an ini key of
the same name. Values are parsed by small functions that raise :class:`pytest.UsageError` with a
message saying what is allowed; the same functions parse ini values, so both routes fail alike.
Resolution (CLI > ini > default) happens once, in ``pytest_configure``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_gta.models.generation import (
    CACHE_MODES,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_TOKENS,
    DEFAULT_RETRIES,
    DEFAULT_TEMPERATURE,
    DEFAULT_TIMEOUT,
    OFFICIAL_TEMPERATURE,
    PROTOCOLS,
    CacheMode,
    GenerationSettings,
    Protocol,
)
from pytest_gta.types import MODES, Mode

OPT_MODEL = "--gta-model"
OPT_DATA = "--gta-data"
OPT_MODE = "--gta-mode"
OPT_TOOLS = "--gta-tools"
OPT_SIM_MODEL = "--gta-sim-model"
OPT_SIM_THRESHOLD = "--gta-sim-threshold"
OPT_REPORT = "--gta-report"
OPT_REPORT_MD = "--gta-report-md"
OPT_LIMIT = "--gta-limit"
OPT_IDS = "--gta-ids"
OPT_RECORDED_ROOT = "--gta-recorded-root"
OPT_MAX_TURNS = "--gta-max-turns"
OPT_BASE_URL = "--gta-base-url"
OPT_SERVED_MODEL = "--gta-served-model"
OPT_MODEL_ARGS = "--gta-model-args"
OPT_TEMPERATURE = "--gta-temperature"
OPT_MAX_TOKENS = "--gta-max-tokens"
OPT_SEED = "--gta-seed"
OPT_PROTOCOL = "--gta-protocol"
OPT_TIMEOUT = "--gta-timeout"
OPT_RETRIES = "--gta-retries"
OPT_MAX_CONCURRENCY = "--gta-max-concurrency"
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
ENV_DATA_DIR = "GTA_DATA_DIR"
TOOL_RECORD_MODES = ("none", "new", "all")
#: ``--gta-sandbox``: the best available, or insist on one (mirrors tool_backends.sandbox).
SANDBOX_MODES = ("auto", "bubblewrap", "rlimit")

DEFAULT_MODES: tuple[Mode, ...] = ("e2e",)
DEFAULT_TOOLS = "replay"
DEFAULT_SIM_MODEL = "all-mpnet-base-v2"
DEFAULT_SIM_THRESHOLD = 0.5
DEFAULT_MAX_TURNS = 10
DATA_DIR_DEFAULT = Path("data")
DATASET_NAME = "gta_dataset"
DATA_DIR_DEFAULT_SOURCE = f"{DATA_DIR_DEFAULT}/ under the rootdir"
#: ``--gta-data=sample``: the 13-query sample shipped with the plugin.
SAMPLE_KEYWORD = "sample"
#: The data source of a self-check (or model-less) run that fell back to the sample.
SAMPLE_FALLBACK = "bundled sample: no dataset installed in"


def is_self_check(model: str | None) -> bool:
    """Whether ``model`` checks the harness (oracle, mock) rather than being evaluated.

    Without an installed dataset such runs use the bundled sample (and say so) instead of
    stopping; a model under evaluation never silently runs on the sample.
    """
    return model is not None and (model in ("oracle", "mock") or model.startswith("mock:"))


T = TypeVar("T")


def parse_modes(value: str) -> tuple[Mode, ...]:
    """``step``, ``e2e`` or ``step,e2e`` (any order, no repeats)."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items or any(v not in MODES for v in items) or len(set(items)) != len(items):
        raise pytest.UsageError(
            f"{OPT_MODE}={value}: choose step, e2e or step,e2e "
            "(step = step-by-step on the reference chain, e2e = the model drives the tools)"
        )
    return tuple(m for m in MODES if m in items)


def _int_at_least(value: str, flag: str, hint: str, minimum: int = 1) -> int:
    try:
        number = int(value)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise pytest.UsageError(f"{flag}={value}: {hint}")
    return number


def parse_limit(value: str) -> int:
    """A positive number of queries."""
    return _int_at_least(
        value, OPT_LIMIT, f"give a positive number of queries, e.g. {OPT_LIMIT}=20"
    )


def parse_ids(value: str) -> tuple[str, ...]:
    """Comma-separated query ids (the keys of ``dataset.json``)."""
    ids = tuple(v.strip() for v in value.split(",") if v.strip())
    if not ids:
        raise pytest.UsageError(f"{OPT_IDS}={value!r}: give query ids like {OPT_IDS}=3,17,42")
    return ids


def parse_threshold(value: str) -> float:
    """A similarity in [0, 1]."""
    try:
        threshold = float(value)
    except ValueError:
        threshold = -1.0
    if not 0.0 <= threshold <= 1.0:
        raise pytest.UsageError(
            f"{OPT_SIM_THRESHOLD}={value}: give a similarity between 0 and 1 (default "
            f"{DEFAULT_SIM_THRESHOLD})"
        )
    return threshold


def parse_max_turns(value: str) -> int:
    """A positive number of model turns per end-to-end episode."""
    return _int_at_least(
        value,
        OPT_MAX_TURNS,
        f"give a positive number of turns (official: {DEFAULT_MAX_TURNS})",
    )


def parse_tools(value: str) -> str:
    """Backend list ``name[=arg],...``; names are checked against the registry later."""
    if not [v for v in value.split(",") if v.strip()]:
        raise pytest.UsageError(f"{OPT_TOOLS} is empty; pass e.g. {OPT_TOOLS}={DEFAULT_TOOLS}")
    return value


def _number(value: str, flag: str, hint: str, *, minimum: float = 0.0) -> float:
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not number >= minimum or number == float("inf"):
        raise pytest.UsageError(f"{flag}={value}: {hint}")
    return number


def parse_temperature(value: str) -> float:
    """A sampling temperature in [0, 2]."""
    temperature = _number(
        value,
        OPT_TEMPERATURE,
        f"give a temperature between 0 and 2 (default {DEFAULT_TEMPERATURE}; "
        f"{OFFICIAL_TEMPERATURE} reproduces the official runs)",
    )
    if temperature > 2:
        raise pytest.UsageError(f"{OPT_TEMPERATURE}={value}: give a temperature between 0 and 2")
    return temperature


def parse_max_tokens(value: str) -> int:
    """A positive number of tokens per reply."""
    return _int_at_least(
        value, OPT_MAX_TOKENS, f"give a positive number of tokens (official: {DEFAULT_MAX_TOKENS})"
    )


def parse_seed(value: str) -> int:
    """Any integer seed."""
    try:
        return int(value)
    except ValueError:
        raise pytest.UsageError(f"{OPT_SEED}={value}: give an integer seed") from None


def parse_protocol(value: str) -> Protocol:
    """``react`` (the official text protocol) or ``native`` (provider function calling)."""
    for protocol in PROTOCOLS:
        if value.strip() == protocol:
            return protocol
    raise pytest.UsageError(
        f"{OPT_PROTOCOL}={value}: choose react (the official ReAct text protocol, comparable "
        "with the leaderboard) or native (the provider's function calling)"
    )


def parse_timeout(value: str) -> float:
    """Seconds per model request."""
    seconds = _number(value, OPT_TIMEOUT, "give a positive number of seconds", minimum=0.001)
    return seconds


def parse_retries(value: str) -> int:
    """Retries after a transient failure (0 allowed)."""
    hint = f"give a number of retries >= 0 (default {DEFAULT_RETRIES})"
    return _int_at_least(value, OPT_RETRIES, hint, minimum=0)


def parse_max_concurrency(value: str) -> int:
    """Requests in flight per endpoint and process."""
    return _int_at_least(
        value,
        OPT_MAX_CONCURRENCY,
        f"give a positive number of requests (default {DEFAULT_MAX_CONCURRENCY})",
    )


def parse_cache(value: str) -> CacheMode:
    """``off``, ``read``, ``write`` or ``readwrite``."""
    for mode in CACHE_MODES:
        if value.strip() == mode:
            return mode
    raise pytest.UsageError(
        f"{OPT_CACHE}={value}: choose off, read, write or readwrite (default readwrite)"
    )


def parse_epoch(value: str) -> int:
    """A sampling epoch >= 0."""
    return _int_at_least(value, OPT_EPOCH, "give an epoch number >= 0", minimum=0)


def parse_max_tokens_total(value: str) -> int:
    """A positive token budget for the session."""
    return _int_at_least(
        value, OPT_MAX_TOKENS_TOTAL, "give a positive number of tokens (input + output)"
    )


def parse_max_cost(value: str) -> float:
    """A positive cost budget in USD."""
    return _number(value, OPT_MAX_COST, "give a positive amount in USD", minimum=1e-9)


def parse_price(value: str) -> tuple[float, float]:
    """``IN,OUT`` in USD per million tokens."""
    parts = value.split(",")
    try:
        prices = tuple(float(p) for p in parts)
    except ValueError:
        prices = ()
    if len(prices) != 2 or any(not p >= 0 for p in prices):
        raise pytest.UsageError(
            f"{OPT_PRICE}={value}: give input,output prices in USD per million tokens, e.g. 2.5,10"
        )
    return prices[0], prices[1]


def _choice(value: str, choices: tuple[str, ...], flag: str, explained: str) -> str:
    """One of ``choices``, else a usage error listing them as ``explained`` says."""
    if value.strip() not in choices:
        raise pytest.UsageError(f"{flag}={value}: choose {explained}")
    return value.strip()


def parse_tool_record(value: str) -> str:
    """``none``, ``new`` (record calls not yet in the cassettes) or ``all`` (re-record)."""
    return _choice(
        value,
        TOOL_RECORD_MODES,
        OPT_TOOL_RECORD,
        "none, new (record calls the cassettes lack) or all (re-record every call)",
    )


def parse_sandbox(value: str) -> str:
    """``auto``, ``bubblewrap`` (required: refuse to run model code without it) or ``rlimit``."""
    return _choice(
        value,
        SANDBOX_MODES,
        OPT_SANDBOX,
        "auto (bubblewrap when it works here, else the rlimit fallback), bubblewrap (required) "
        "or rlimit",
    )


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
    """An http(s) URL."""
    url = value.strip()
    if not url.startswith(("http://", "https://")):
        raise pytest.UsageError(
            f"{OPT_BASE_URL}={value}: give the endpoint's http(s) URL, e.g. "
            "http://127.0.0.1:8000/v1"
        )
    return url.rstrip("/")


def parse_text(value: str) -> str:
    """Any non-empty text."""
    if not value.strip():
        raise pytest.UsageError("an empty value was given to a --gta-* option")
    return value.strip()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``--gta-*`` options and their ini twins under one group."""
    group = parser.getgroup("gta", "GTA tool-agent benchmark (pytest-gta)")

    def add(
        flag: str, parse: Callable[[str], Any], metavar: str, help_text: str, ini: bool = True
    ) -> None:
        dest = flag[2:].replace("-", "_")
        group.addoption(flag, dest=dest, metavar=metavar, type=parse, default=None, help=help_text)
        if ini:
            parser.addini(dest, help=f"default for {flag}", default=None)

    add(
        OPT_MODEL,
        parse_text,
        "MODEL",
        "model to evaluate; enables the GTA cases: oracle, mock:SCRIPT.json, "
        "opencompass:PREDICTIONS, or provider/model",
    )
    add(
        OPT_DATA,
        parse_text,
        "DIR",
        f"dataset directory in the official layout, or '{SAMPLE_KEYWORD}' for the bundled sample "
        f"(default: {DATASET_NAME} in the data directory)",
    )
    add(
        OPT_DATA_DIR,
        parse_text,
        "DIR",
        f"where datasets are installed and looked up (default: ${ENV_DATA_DIR}, else "
        f"{DATA_DIR_DEFAULT}/ under the rootdir)",
    )
    group.addoption(
        OPT_DOWNLOAD,
        dest="gta_download",
        action="store_true",
        default=False,
        help="fetch, verify and unpack the GTA dataset into the data directory, then exit",
    )
    add(
        OPT_DOWNLOAD_URL,
        parse_text,
        "URL_OR_PATH",
        "download from this URL, zip or directory instead of Hugging Face and the GitHub release",
    )
    group.addoption(
        OPT_ALLOW_UNVERIFIED,
        dest="gta_allow_unverified",
        action="store_true",
        default=None,
        help="install data that fails the manifest's sha256s or the paper's counts (mirrors)",
    )
    parser.addini(
        "gta_allow_unverified",
        type="bool",
        default=False,
        help=f"default for {OPT_ALLOW_UNVERIFIED}",
    )
    group.addoption(
        OPT_RECORD_MANIFEST,
        dest="gta_record_manifest",
        action="store_true",
        default=False,
        help="with --gta-download: record the verified files' sha256s in data/manifest.json",
    )
    group.addoption(
        OPT_DATA_INFO,
        dest="gta_data_info",
        action="store_true",
        default=False,
        help="print the installed dataset's origin, verification and statistics, then exit",
    )
    add(OPT_MODE, parse_modes, "MODES", "step, e2e or step,e2e (default: e2e)")
    add(
        OPT_TOOLS,
        parse_tools,
        "BACKENDS",
        f"tool backends in priority order, name[=arg],... (default: {DEFAULT_TOOLS})",
    )
    add(
        OPT_SIM_MODEL,
        parse_text,
        "NAME_OR_PATH",
        f"sentence-transformers model for similarity scores (default: {DEFAULT_SIM_MODEL}, "
        "as the official evaluator)",
    )
    add(
        OPT_SIM_THRESHOLD,
        parse_threshold,
        "SIM",
        f"similarity at which a subjective answer passes (default: {DEFAULT_SIM_THRESHOLD}; "
        "the metric itself stays continuous)",
    )
    add(OPT_REPORT, parse_text, "PATH", "write the JSON report here")
    add(OPT_REPORT_MD, parse_text, "PATH", "write the metric tables as markdown here")
    add(OPT_LIMIT, parse_limit, "N", "run only the first N queries")
    add(OPT_IDS, parse_ids, "IDS", "run only these query ids, e.g. 3,17,42")
    add(
        OPT_RECORDED_ROOT,
        parse_text,
        "DIR",
        "dataset root recorded in opencompass prediction files (default: detected from paths)",
    )
    add(
        OPT_MAX_TURNS,
        parse_max_turns,
        "N",
        f"model turns per end-to-end episode (default: {DEFAULT_MAX_TURNS}, as official)",
    )
    add(
        OPT_BASE_URL,
        parse_url,
        "URL",
        "OpenAI-compatible endpoint (vLLM, LMDeploy, llama.cpp...), e.g. http://gpu:8000/v1 "
        "(default: $OPENAI_BASE_URL)",
    )
    add(
        OPT_SERVED_MODEL,
        parse_text,
        "NAME",
        "model name to send to the endpoint (default: detected from its /models list)",
    )
    add(
        OPT_MODEL_ARGS,
        parse_model_args,
        "K=V,...",
        "extra engine/provider arguments, e.g. tensor_parallel_size=4,max_model_len=8192",
    )
    add(
        OPT_TEMPERATURE,
        parse_temperature,
        "T",
        f"sampling temperature (default: {DEFAULT_TEMPERATURE}; {OFFICIAL_TEMPERATURE} "
        "reproduces the official runs)",
    )
    add(
        OPT_MAX_TOKENS,
        parse_max_tokens,
        "N",
        f"max tokens per reply (default: {DEFAULT_MAX_TOKENS}, as official)",
    )
    add(OPT_SEED, parse_seed, "N", "sampling seed sent to providers that accept one")
    add(
        OPT_PROTOCOL,
        parse_protocol,
        "NAME",
        "react (official ReAct text protocol, default) or native (provider function calling)",
    )
    add(
        OPT_TIMEOUT,
        parse_timeout,
        "SECONDS",
        f"timeout of one model request (default: {DEFAULT_TIMEOUT:g})",
    )
    add(
        OPT_RETRIES,
        parse_retries,
        "N",
        f"retries on 429/5xx/timeouts/connection errors (default: {DEFAULT_RETRIES})",
    )
    add(
        OPT_MAX_CONCURRENCY,
        parse_max_concurrency,
        "N",
        f"requests in flight per endpoint and process (default: {DEFAULT_MAX_CONCURRENCY})",
    )
    add(
        OPT_CACHE,
        parse_cache,
        "MODE",
        "response cache: off, read, write or readwrite (default: readwrite)",
    )
    add(
        OPT_CACHE_DIR,
        parse_text,
        "DIR",
        "response cache directory (default: gta-responses in the pytest cache dir)",
    )
    add(
        OPT_EPOCH,
        parse_epoch,
        "N",
        "sampling epoch: with temperature > 0 each epoch gets its own cached samples (default: 0)",
    )
    add(
        OPT_MAX_TOKENS_TOTAL,
        parse_max_tokens_total,
        "N",
        "stop the session cleanly once the model calls used N tokens (input + output)",
    )
    add(
        OPT_MAX_COST,
        parse_max_cost,
        "USD",
        "stop the session cleanly once the model calls cost this much (catalog or --gta-price)",
    )
    add(
        OPT_TOOL_CASSETTES,
        parse_text,
        "DIR",
        "tool cassette directory: replay/strict-replay read it, --gta-tool-record writes it",
    )
    add(
        OPT_TOOL_RECORD,
        parse_tool_record,
        "MODE",
        "record live tool answers into --gta-tool-cassettes: none (default), new or all",
    )
    add(
        OPT_PRICE,
        parse_price,
        "IN,OUT",
        "USD per million input and output tokens, for --gta-max-cost",
    )
    add(
        OPT_SANDBOX,
        parse_sandbox,
        "KIND",
        "where model-written code (Calculator, Solver, Plot) runs: auto (default), bubblewrap "
        "(required) or rlimit",
    )


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
    sandbox: str = "auto"
    #: Where datasets are installed (``--gta-data-dir``); the default dataset is ``gta_dataset``.
    data_dir: Path = DATA_DIR_DEFAULT

    @property
    def active(self) -> bool:
        """Whether a model was given, i.e. GTA cases are collected automatically."""
        return self.model is not None


def _value(config: pytest.Config, name: str, parse: Callable[[str], T]) -> tuple[T | None, str]:
    """(parsed value, where it came from) for option ``name`` (dest form), CLI first."""
    cli = config.getoption(name)
    if cli is not None:
        return cli, "cli"
    ini = config.getini(name)
    if ini:
        try:
            return parse(str(ini)), "ini"
        except pytest.UsageError as exc:
            raise pytest.UsageError(f"ini option {name}: {exc}") from None
    return None, "default"


def _ini_base(config: pytest.Config) -> Path:
    """What a relative path in the ini file is relative to."""
    return config.inipath.parent if config.inipath else config.rootpath


def resolve_data_dir(config: pytest.Config) -> tuple[Path, str]:
    """``--gta-data-dir`` > ``$GTA_DATA_DIR`` > ini ``gta_data_dir`` > ``data/`` under the rootdir.

    The environment beats the ini file: it is the machine's choice (a CI cache), the ini the
    project's.
    """
    import os

    cli = config.getoption("gta_data_dir")
    if cli is not None:
        return (config.invocation_params.dir / Path(cli).expanduser()).absolute(), OPT_DATA_DIR
    env = os.environ.get(ENV_DATA_DIR, "").strip()
    if env:
        return (config.invocation_params.dir / Path(env).expanduser()).absolute(), ENV_DATA_DIR
    ini = config.getini("gta_data_dir")
    if ini:
        base = _ini_base(config)
        return (base / Path(str(ini)).expanduser()).absolute(), "ini gta_data_dir"
    return (config.rootpath / DATA_DIR_DEFAULT).absolute(), DATA_DIR_DEFAULT_SOURCE


def _named_data(value: str, base: Path) -> Path:
    from pytest_gta.dataset import bundled_sample_path

    if value == SAMPLE_KEYWORD:
        return bundled_sample_path()
    return (base / Path(value).expanduser()).absolute()


def _resolve_data(
    config: pytest.Config, model: str | None, data_dir: Path, data_dir_source: str
) -> tuple[Path | None, str]:
    from pytest_gta.dataset import bundled_sample_path

    cli = config.getoption("gta_data")
    if cli is not None:
        source = "bundled sample" if cli == SAMPLE_KEYWORD else OPT_DATA
        return _named_data(cli, config.invocation_params.dir), source
    ini = config.getini("gta_data")
    if ini:
        base = _ini_base(config)
        source = "bundled sample" if ini == SAMPLE_KEYWORD else "ini gta_data"
        return _named_data(str(ini), base), source
    installed = data_dir / DATASET_NAME
    if (installed / "dataset.json").is_file():
        if data_dir_source == DATA_DIR_DEFAULT_SOURCE:
            return installed.absolute(), str(DATA_DIR_DEFAULT / DATASET_NAME)
        return installed.absolute(), f"{DATASET_NAME} in the data directory from {data_dir_source}"
    if model is None or is_self_check(model):
        # Without a model nothing is evaluated: user tests are collected from the sample and skip.
        return bundled_sample_path(), f"{SAMPLE_FALLBACK} {data_dir}"
    return None, f"no dataset installed in {data_dir}"


def _path(config: pytest.Config, value: str | None) -> Path | None:
    if value is None:
        return None
    return (config.invocation_params.dir / Path(value).expanduser()).absolute()


def _config_path(config: pytest.Config, value: str | None, source: str) -> Path | None:
    """A path option: relative to the invocation dir on the CLI, to the ini file in ini."""
    if value is None:
        return None
    if source == "ini":
        base = _ini_base(config)
        return (base / Path(value).expanduser()).absolute()
    return _path(config, value)


def resolve_settings(config: pytest.Config) -> GtaSettings:
    """CLI > ini > default, parsed and checked once."""
    model, _ = _value(config, "gta_model", parse_text)
    modes, _ = _value(config, "gta_mode", parse_modes)
    tools, _ = _value(config, "gta_tools", parse_tools)
    sim_model, _ = _value(config, "gta_sim_model", parse_text)
    threshold, _ = _value(config, "gta_sim_threshold", parse_threshold)
    report, _ = _value(config, "gta_report", parse_text)
    report_md, _ = _value(config, "gta_report_md", parse_text)
    limit, _ = _value(config, "gta_limit", parse_limit)
    ids, _ = _value(config, "gta_ids", parse_ids)
    recorded_root, _ = _value(config, "gta_recorded_root", parse_text)
    max_turns, _ = _value(config, "gta_max_turns", parse_max_turns)
    data_dir, data_dir_source = resolve_data_dir(config)
    data, data_source = _resolve_data(config, model, data_dir, data_dir_source)
    base_url, _ = _value(config, "gta_base_url", parse_url)
    served_model, _ = _value(config, "gta_served_model", parse_text)
    model_args, _ = _value(config, "gta_model_args", parse_model_args)
    temperature, _ = _value(config, "gta_temperature", parse_temperature)
    max_tokens, _ = _value(config, "gta_max_tokens", parse_max_tokens)
    seed, _ = _value(config, "gta_seed", parse_seed)
    protocol, _ = _value(config, "gta_protocol", parse_protocol)
    timeout, _ = _value(config, "gta_timeout", parse_timeout)
    retries, _ = _value(config, "gta_retries", parse_retries)
    concurrency, _ = _value(config, "gta_max_concurrency", parse_max_concurrency)
    cache, _ = _value(config, "gta_cache", parse_cache)
    cache_dir, _ = _value(config, "gta_cache_dir", parse_text)
    epoch, _ = _value(config, "gta_epoch", parse_epoch)
    max_tokens_total, _ = _value(config, "gta_max_tokens_total", parse_max_tokens_total)
    max_cost, _ = _value(config, "gta_max_cost", parse_max_cost)
    price, _ = _value(config, "gta_price", parse_price)
    cassettes, cassettes_from = _value(config, "gta_tool_cassettes", parse_text)
    tool_record, _ = _value(config, "gta_tool_record", parse_tool_record)
    sandbox, _ = _value(config, "gta_sandbox", parse_sandbox)
    generation = GenerationSettings(
        temperature=DEFAULT_TEMPERATURE if temperature is None else temperature,
        max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
        seed=seed,
        protocol=protocol or "react",
        base_url=base_url,
        served_model=served_model,
        model_args=model_args or {},
        timeout=timeout or DEFAULT_TIMEOUT,
        retries=DEFAULT_RETRIES if retries is None else retries,
        max_concurrency=concurrency or DEFAULT_MAX_CONCURRENCY,
        cache=cache or "readwrite",
        epoch=epoch or 0,
    )
    return GtaSettings(
        model=model,
        data=data,
        data_source=data_source,
        modes=modes or DEFAULT_MODES,
        tools=tools or DEFAULT_TOOLS,
        sim_model=sim_model or DEFAULT_SIM_MODEL,
        sim_threshold=DEFAULT_SIM_THRESHOLD if threshold is None else threshold,
        report=_path(config, report),
        report_md=_path(config, report_md),
        limit=limit,
        ids=ids,
        recorded_root=recorded_root,
        max_turns=max_turns or DEFAULT_MAX_TURNS,
        invocation_dir=config.invocation_params.dir,
        generation=generation,
        cache_dir=_path(config, cache_dir),
        max_tokens_total=max_tokens_total,
        max_cost=max_cost,
        price=price,
        tool_cassettes=_config_path(config, cassettes, cassettes_from),
        tool_record=tool_record or "none",
        sandbox=sandbox or "auto",
        data_dir=data_dir,
    )
