"""What leaves a pytest-gta process: values every writer accepts, with no secret in them.

Everything a run writes or sends between processes (the terminal, JUnit XML, the JSON and
markdown reports, the response cache, tool cassettes, xdist's transport of test reports) may
carry text that came from outside: a model's reply, a tool's output, a prediction file. Such text
can hold what no writer accepts (a lone surrogate makes UTF-8 encoders and execnet fail, a NaN is
not JSON, a 5,000-digit integer cannot even be turned into a string) and what must never be
written (an API key a model or a tool managed to read). :class:`Cleaner` turns any value into
JSON-able builtins with those problems removed, and is applied at every exit, whatever path a
value took to get there.

Secrets are the values of the environment variables the plugin knows to hold credentials (the
provider and vendor API keys, ``HF_TOKEN``, the Serper and Mathpix keys) and of any variable
named like one (``*_API_KEY``, ``*_TOKEN``, ...); each occurrence becomes ``[redacted $NAME]``.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_gta.jsonsafe import MAX_DEPTH

#: Credentials the plugin or its tools read, by name.
SECRET_VARIABLES = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "SERPER_API_KEY",
    "MATHPIX_APP_ID",
    "MATHPIX_APP_KEY",
    "GTA_VLM_API_KEY",
)
#: Any variable named like a credential is treated as one (vendor keys of the catalog, CI tokens).
SECRET_SUFFIXES = ("_API_KEY", "_APP_KEY", "_TOKEN", "_SECRET", "_SECRET_KEY", "_PASSWORD")
#: Shorter values ("1", "EMPTY", "true") are not secrets and would redact ordinary words.
MIN_SECRET_LENGTH = 8
#: Integers longer than this cannot be written by ``json`` (CPython's 4,300-digit limit).
MAX_INT_BITS = 4096

_SURROGATE = re.compile("[\ud800-\udfff]")


def is_secret_name(name: str) -> bool:
    """Whether the environment variable ``name`` holds a credential."""
    upper = name.upper()
    return upper in SECRET_VARIABLES or upper.endswith(SECRET_SUFFIXES)


def secrets(environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """``(name, value)`` of every secret in the environment, longest value first."""
    env = os.environ if environ is None else environ
    found = {
        (name, value.strip())
        for name, value in env.items()
        if is_secret_name(name) and len(value.strip()) >= MIN_SECRET_LENGTH
    }
    return tuple(sorted(found, key=lambda item: (-len(item[1]), item[0])))


@functools.lru_cache(maxsize=8)
def _pattern(found: tuple[tuple[str, str], ...]) -> tuple[re.Pattern[str], dict[str, str]] | None:
    if not found:
        return None
    names: dict[str, str] = {}
    for name, value in found:
        names.setdefault(value, name)
    alternation = "|".join(re.escape(value) for value in names)
    return re.compile(alternation), names


def redact(text: str, found: tuple[tuple[str, str], ...] | None = None) -> str:
    """``text`` with every secret value replaced by ``[redacted $NAME]``."""
    compiled = _pattern(secrets() if found is None else found)
    if compiled is None:
        return text
    pattern, names = compiled
    return pattern.sub(lambda m: f"[redacted ${names[m.group(0)]}]", text)


def redact_value(value: Any) -> Any:
    """``value`` with secrets redacted in every string, and nothing else changed.

    For stores that must keep what they hold exactly (the response cache, tool cassettes):
    lone surrogates and NaN survive there, a key does not.
    """
    found = secrets()
    if not found:
        return value
    return _redact_strings(value, found, 0)


def _redact_strings(value: Any, found: tuple[tuple[str, str], ...], level: int) -> Any:
    if isinstance(value, str):
        return redact(value, found)
    if level >= MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        return {
            _redact_strings(k, found, level + 1): _redact_strings(v, found, level + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact_strings(v, found, level + 1) for v in value]
    return value


def clean_text(text: str, found: tuple[tuple[str, str], ...] | None = None) -> str:
    """Text any UTF-8 writer accepts (lone surrogates become U+FFFD), with secrets redacted."""
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)
    return redact(text, found)


@dataclass
class Cleaner:
    """Turns values into JSON-able builtins for writing; counts what it had to change.

    Non-finite floats become ``None`` (strict JSON has no NaN), integers too long to print and
    structures nested deeper than :data:`~pytest_gta.jsonsafe.MAX_DEPTH` become a short
    placeholder, tuples become lists, mapping keys become strings, other objects their
    ``str()``; all text goes through :func:`clean_text`.
    """

    nonfinite: int = 0
    truncated: int = 0

    def __post_init__(self) -> None:
        self._secrets = secrets()

    def text(self, value: str) -> str:
        """One string, cleaned."""
        return clean_text(value, self._secrets)

    def value(self, value: Any, level: int = 0) -> Any:
        """A cleaned copy of ``value`` (see the class docstring)."""
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, int):
            if value.bit_length() > MAX_INT_BITS:
                self.truncated += 1
                return f"<integer of about {int(value.bit_length() * 0.30103)} digits>"
            return int(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                self.nonfinite += 1
                return None
            return float(value)
        if level >= MAX_DEPTH and isinstance(value, Mapping | list | tuple | set | frozenset):
            self.truncated += 1
            return "<nested too deeply>"
        if isinstance(value, Mapping):
            return {self._key(k): self.value(v, level + 1) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [self.value(v, level + 1) for v in value]
        number = _number(value)
        if number is not None:
            return self.value(number, level)
        return self.text(str(value))

    def _key(self, key: Any) -> str:
        return self.text(key if isinstance(key, str) else str(key))

    def notes(self) -> list[str]:
        """What the report should say about the changes made."""
        out = []
        if self.nonfinite:
            out.append(
                f"{self.nonfinite} value(s) were not finite numbers (NaN or Infinity, e.g. in "
                "prediction files) and are written as null, since JSON has no such numbers"
            )
        if self.truncated:
            out.append(
                f"{self.truncated} value(s) were too long or too deeply nested to write and "
                "are replaced by a short placeholder"
            )
        return out


def _number(value: Any) -> int | float | None:
    """NumPy and other numeric scalars as a Python number, else ``None``."""
    import numbers

    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def clean(value: Any) -> Any:
    """A cleaned copy of ``value`` (see :class:`Cleaner`), when the counts are not needed."""
    return Cleaner().value(value)


def clean_pairs(pairs: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``user_properties``-style ``(name, value)`` pairs, cleaned for transport and writing."""
    cleaner = Cleaner()
    return [(cleaner.text(str(name)), cleaner.value(value)) for name, value in pairs]


def clean_report(report: Any) -> None:
    """Clean a ``TestReport`` in place: properties, failure text and captured output.

    A failure's representation is replaced by its (cleaned) text only when cleaning changed
    something, so ordinary tracebacks keep pytest's rich rendering.
    """
    report.user_properties = clean_pairs(report.user_properties)
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        path, line, reason = longrepr
        report.longrepr = (path, line, clean_text(str(reason)))
    elif longrepr is not None:
        text = str(longrepr)
        cleaned = clean_text(text)
        if cleaned != text:
            report.longrepr = cleaned
    report.sections = [(clean_text(str(t)), clean_text(str(c))) for t, c in report.sections]
    extras = getattr(report, "extras", None)
    if isinstance(extras, list) and extras:
        # pytest-html's extras: the case's transcript is in an HTML extra.
        report.extras = Cleaner().value(extras)


class _RedactingFilter(logging.Filter):
    """Redacts secrets from pytest-gta's log records (live logging prints them as they come)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = clean_text(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


#: The loggers pytest-gta emits on (a logger's filters do not apply to its children).
LOGGERS = ("pytest_gta", "pytest_gta.models")


def install_log_filter() -> None:
    """Redact secrets in everything pytest-gta's loggers emit (idempotent)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _RedactingFilter) for f in logger.filters):
            logger.addFilter(_RedactingFilter())
