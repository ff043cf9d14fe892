"""Checking a field of outside JSON, so that every message names the field and what was wanted.

The report reader (:mod:`.schema`) and the identity reader (:mod:`.identity`) share these
checks: a bad field is a :class:`~pytest_gta.errors.GtaUsageError` naming the file (when one was
read), the field's path and where such files come from, never a traceback.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from pytest_gta.errors import GtaUsageError

#: A field that is not there (``None`` is JSON null); messages show it as ``absent``.
ABSENT = object()
KIND_NAMES: dict[type | None, str] = {
    None: "null",
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true/false",
}


def show_value(value: Any) -> str:
    """A value as a message shows it: JSON, cut to 200 characters (``absent`` for none)."""
    if value is ABSENT:
        return "absent"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 200 else text[:197] + "..."


def kind_of(value: Any) -> str:
    """How a message names the JSON kind of ``value``."""
    kind = None if value is None else type(value)
    return KIND_NAMES.get(kind, type(value).__name__)


class FieldReader:
    """Checks the fields of one loaded document.

    Each message names the file (``label``; nothing where none was read), the field and where
    such documents come from (``how``).
    """

    def __init__(self, label: str, how: str) -> None:
        self.label = label
        self.how = how

    @property
    def hint(self) -> str:
        """What ends a message: where such reports come from (nothing where none is said)."""
        return f"; {self.how}" if self.how else ""

    def fail(self, text: str) -> GtaUsageError:
        """The error to raise, naming the file where one was read."""
        return GtaUsageError(f"{self.label}: {text}" if self.label else text)

    def get(self, obj: Mapping[str, Any], key: str, where: str, *kinds: type | None) -> Any:
        """``obj[key]``, which must be one of ``kinds`` (``None``: null); else a usage error."""
        value = obj.get(key, ABSENT)
        name = f"{where}{key}"
        if value is ABSENT:
            raise self.fail(f"{name} is missing{self.hint}")
        for kind in kinds:
            if kind is None and value is None:
                return value
            if kind is not None and isinstance(value, kind):
                if isinstance(value, bool) and kind in (int, float):
                    continue
                return value
        wanted = " or ".join(dict.fromkeys(KIND_NAMES[k] for k in kinds))
        raise self.fail(f"{name} is {kind_of(value)}, not {wanted}{self.hint}")

    def number(self, obj: Mapping[str, Any], key: str, where: str, *kinds: type | None) -> Any:
        """:meth:`get` for a number that must also be finite (a report never holds NaN)."""
        value = self.get(obj, key, where, *kinds)
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(f"{where}{key} is {value}, not a finite number{self.hint}")
        return value

    def count(self, obj: Mapping[str, Any], key: str, where: str) -> None:
        """A count (tokens, calls): a whole number from 0, or null."""
        value = self.get(obj, key, where, int, None)
        if value is not None and value < 0:
            raise self.fail(f"{where}{key} is {value}, not a count{self.hint}")

    def seconds(self, obj: Mapping[str, Any], key: str, where: str) -> None:
        """A duration: a finite number of seconds from 0."""
        value = self.number(obj, key, where, int, float)
        if value < 0:
            raise self.fail(f"{where}{key} is {value}, not a number of seconds{self.hint}")

    def each(self, values: Any, name: str, test: Callable[[Any], bool], what: str) -> None:
        """Every item of a list (or value of an object) passes ``test``; else a usage error."""
        items = values.values() if isinstance(values, dict) else values
        for item in items:
            if not test(item):
                shown = show_value(repr(item) if isinstance(item, str) else item)
                raise self.fail(f"{name} holds {kind_of(item)} {shown}, not {what}{self.hint}")

    def text(self, obj: Mapping[str, Any], key: str, where: str, *, null: bool = False) -> Any:
        """A text field (or null, if ``null``)."""
        return self.get(obj, key, where, str, None) if null else self.get(obj, key, where, str)
