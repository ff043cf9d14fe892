"""Command-line options, their ini twins, and the frozen settings they resolve to.

Every option is ``--gta-*`` with dest ``gta_*`` and, where a project would pin it, an ini key of
the same name. Values are parsed by small functions that raise :class:`pytest.UsageError` with a
message saying what is allowed; the same functions parse ini values, so both routes fail alike.
Resolution (CLI > ini > default) happens once, in ``pytest_configure``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

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

DEFAULT_MODES: tuple[Mode, ...] = ("e2e",)
DEFAULT_TOOLS = "replay"
DEFAULT_SIM_MODEL = "all-mpnet-base-v2"
DEFAULT_SIM_THRESHOLD = 0.5
DEFAULT_MAX_TURNS = 10
DATA_DIR_DEFAULT = Path("data") / "gta_dataset"

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


def _positive_int(value: str, flag: str, hint: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise pytest.UsageError(f"{flag}={value}: {hint}")
    return number


def parse_limit(value: str) -> int:
    """A positive number of queries."""
    return _positive_int(
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
    return _positive_int(
        value,
        OPT_MAX_TURNS,
        f"give a positive number of turns (official: {DEFAULT_MAX_TURNS})",
    )


def parse_tools(value: str) -> str:
    """Backend list ``name[=arg],...``; names are checked against the registry later."""
    if not [v for v in value.split(",") if v.strip()]:
        raise pytest.UsageError(f"{OPT_TOOLS} is empty; pass e.g. {OPT_TOOLS}={DEFAULT_TOOLS}")
    return value


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
        "dataset directory in the official layout (default: data/gta_dataset under the rootdir "
        "if present, else the bundled sample)",
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


@dataclass(frozen=True)
class GtaSettings:
    """The resolved ``--gta-*`` settings of a session."""

    model: str | None
    data: Path
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


def _resolve_data(config: pytest.Config) -> tuple[Path, str]:
    from pytest_gta.dataset import bundled_sample_path

    cli = config.getoption("gta_data")
    if cli is not None:
        return (config.invocation_params.dir / Path(cli).expanduser()).absolute(), OPT_DATA
    ini = config.getini("gta_data")
    if ini:
        base = config.inipath.parent if config.inipath else config.rootpath
        return (base / Path(str(ini)).expanduser()).absolute(), "ini gta_data"
    default = config.rootpath / DATA_DIR_DEFAULT
    if (default / "dataset.json").is_file():
        return default.absolute(), str(DATA_DIR_DEFAULT)
    return bundled_sample_path(), "bundled sample"


def _path(config: pytest.Config, value: str | None) -> Path | None:
    if value is None:
        return None
    return (config.invocation_params.dir / Path(value).expanduser()).absolute()


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
    data, data_source = _resolve_data(config)
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
    )
