"""The option machinery every feature's rows share: the row, the parsers' helpers, resolution.

An option is one :class:`OptionSpec` row in the feature module that owns it; registration
(:func:`register`) and resolution (:func:`resolve`) both walk the rows, so the two cannot
disagree (they once did: ini paths resolved against the current directory for some options
and against the ini file for others). A value is parsed by a small function that raises
:class:`pytest.UsageError` saying what is allowed; the same function parses the environment's
and the ini file's values, so every route fails alike. Resolution is CLI > environment > ini >
default, once, in ``pytest_configure``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

from pytest_gta.flags import dest

#: One word of a vocabulary (a literal type) that a ``choose ...`` option takes.
Word = TypeVar("Word", bound=str)
#: The allowed range of a numeric option, both ends included (docs/options.md lists them).
Ranges = Mapping[str, tuple[float, float]]
#: Characters of a refused value quoted in a usage error (a 10**30-digit value is not echoed).
SHOWN_VALUE = 40


def shown(value: str) -> str:
    """``value`` as a usage error quotes it: cut at :data:`SHOWN_VALUE` characters."""
    return value if len(value) <= SHOWN_VALUE else value[:SHOWN_VALUE] + "..."


def plain(number: float) -> str:
    """``2,147,483,647``, ``0.001``, ``1e-09``: a range's end as a person writes it."""
    if float(number).is_integer():
        return f"{int(number):,}"
    return f"{number:g}"


def int_range(ranges: Ranges, flag: str) -> tuple[int, int]:
    """The range of the integer option ``flag``."""
    low, high = ranges[flag]
    return int(low), int(high)


def out_of_range(flag: str, value: str, hint: str, low: float, high: float) -> pytest.UsageError:
    """The usage error of a number outside ``low..high``: the option, the value, the range."""
    allowed = f"allowed: {plain(low)} to {plain(high)}"
    return pytest.UsageError(f"{flag}={shown(value)}: {hint} ({allowed})")


def usage_error(message: str) -> pytest.UsageError:
    """A usage error that names the plugin (``pytest-gta: ...``), as the serve options' do."""
    return pytest.UsageError(f"pytest-gta: {message}")


def int_at_least(
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


def number(
    value: str, flag: str, hint: str, *, minimum: float = 0.0, maximum: float | None = None
) -> float:
    """A finite number in ``minimum..maximum`` (NaN, infinities and 1e308 refused alike)."""
    try:
        parsed = float(value)
    except ValueError:
        parsed = float("nan")
    # ``not >=`` so that NaN, which compares false with everything, is refused too.
    if not parsed >= minimum or parsed == float("inf"):
        if maximum is None:
            raise pytest.UsageError(f"{flag}={shown(value)}: {hint}")
        raise out_of_range(flag, value, hint, minimum, maximum)
    if maximum is not None and parsed > maximum:
        raise out_of_range(flag, value, hint, minimum, maximum)
    return parsed


def choice(value: str, choices: tuple[Word, ...], flag: str, explained: str) -> Word:
    """One of ``choices`` (typed as the literal it is), else a usage error as ``explained``."""
    for option in choices:
        if value.strip() == option:
            return option
    raise pytest.UsageError(f"{flag}={value}: choose {explained}")


def parse_text(value: str) -> str:
    """Any non-empty text."""
    if not value.strip():
        raise pytest.UsageError("an empty value was given to a --gta-* option")
    return value.strip()


#: ``value``: text parsed by ``parse``; ``path``: the same, then made absolute (see
#: :func:`option_base`); ``flag``: a command on the command line only (``--gta-download``), no
#: ini twin; ``bool``: an on switch with a boolean ini twin (``--gta-allow-unverified``);
#: ``paths``: a command taking one or more paths (``--gta-merge``), no ini twin; ``optional``:
#: a value that may be left out (``--gta-fail-on-regression`` alone means its ``const``);
#: ``command``: a command whose value may be left out (``--gta-download`` alone means its
#: ``const``), no ini twin.
Kind = Literal["value", "path", "flag", "bool", "paths", "optional", "command"]
#: Where a resolved value came from, in precedence order.
Source = Literal["cli", "env", "ini", "default"]


@dataclass(frozen=True)
class OptionSpec:
    """Everything about one ``--gta-*`` option: registration, resolution and its docs row.

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
    #: An ``optional`` option's value when the flag is given alone.
    const: Any = None
    #: An environment variable between the command line and the ini file (the machine's choice
    #: beats the project's).
    env: str | None = None
    #: The field of the owning feature's settings part it fills (``generation.x``: of
    #: :class:`~pytest_gta.models.generation.GenerationSettings`); ``None`` for commands and for
    #: options their feature resolves with extra rules.
    setting: str | None = None
    #: Its row of docs/options.md's table (``python -m pytest_gta.options.doc`` writes it):
    #: the default as a reader needs it, and what it does.
    doc_default: str = ""
    doc: str = ""
    #: Its row of the ranges table, ``{low}`` and ``{high}`` filled from its range.
    doc_range: str | None = None

    @property
    def dest(self) -> str:
        """The argparse dest."""
        return dest(self.flag)

    @property
    def ini(self) -> str | None:
        """The ini key; commands have none (they are not something a project pins)."""
        return None if self.kind in ("flag", "paths", "command") else self.dest

    def fallback(self) -> Any:
        """The default value, fresh when it is mutable."""
        return self.default_factory() if self.default_factory else self.default


@dataclass(frozen=True)
class Feature:
    """One feature's options: its rows and the :class:`GtaSettings` part they fill."""

    #: The :class:`~pytest_gta.options.settings.GtaSettings` field of its part (``None``:
    #: commands only, no part).
    name: str | None
    rows: tuple[OptionSpec, ...]
    #: The numeric ranges of its options (docs/options.md lists them).
    ranges: Ranges


def register(parser: pytest.Parser, specs: Iterable[OptionSpec]) -> None:
    """Register ``specs`` (in ``--help`` order) and their ini twins under the GTA group."""
    group = parser.getgroup("gta", "GTA tool-agent benchmark (pytest-gta)")
    for spec in specs:
        if spec.kind == "paths":
            group.addoption(
                spec.flag, dest=spec.dest, metavar=spec.metavar, nargs="+", help=spec.help
            )
        elif spec.kind == "flag":
            group.addoption(
                spec.flag, dest=spec.dest, action="store_true", default=spec.default, help=spec.help
            )
        elif spec.kind in ("optional", "command"):
            group.addoption(
                spec.flag,
                dest=spec.dest,
                metavar=spec.metavar,
                nargs="?",
                const=spec.const,
                type=spec.parse,
                default=None,
                help=spec.help,
            )
            if spec.ini is not None:
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


def resolve(config: pytest.Config, spec: OptionSpec) -> Resolved:
    """``spec`` resolved CLI > environment > ini > default, parsed and checked.

    A ``path`` option comes back absolute (:func:`resolve_path`); a ``flag`` or ``bool`` one as
    a bool.
    """
    given = _given(config, spec)
    value, source, origin = given if given else (spec.fallback(), "default", "default")
    if spec.kind == "path" and value is not None:
        value = resolve_path(config, value, source)
    elif spec.kind == "paths":
        value = [resolve_path(config, v, source) for v in value or ()]
    elif spec.kind in ("flag", "bool"):
        value = bool(value)
    return Resolved(value, source, origin)


#: Every row's resolved value, by dest (:func:`pytest_gta.options.settings.resolve_settings`).
Given = Mapping[str, Resolved]


def fields(rows: Iterable[OptionSpec], given: Given, section: str = "") -> dict[str, Any]:
    """The settings part's fields that ``rows`` fill, from their resolved values.

    ``section``: only the rows whose setting is ``section.name`` (by ``name``); without it, the
    rows whose setting has no section.
    """
    found: dict[str, Any] = {}
    for spec in rows:
        if spec.setting is None:
            continue
        part, _, name = spec.setting.rpartition(".")
        if part == section:
            found[name] = given[spec.dest].value
    return found
