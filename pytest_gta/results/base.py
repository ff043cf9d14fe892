"""What every class of the results model shares: strict JSON, no NaN, absent keys stay absent.

A report crosses machines and versions (``--gta-merge`` reads shards' reports, ``--gta-baseline``
an earlier run's, dashboards ingest them), so the classes validate as a careful reader would:
numbers are numbers (``true`` is not 1, ``"1"`` is not 1), floats are finite, and a key the class
does not know is refused, so a misspelt field is an error rather than a silent default.

Two kinds of optional field keep the file's shape exactly as written:

* :func:`omitted` fields are left out of the JSON when they are ``None`` (the agent's run of a
  case that had no agent, a report's ``comparison`` without a baseline);
* fields that may be absent *and* may be ``null`` when present use pydantic's ``MISSING``
  sentinel (a gate verdict's ``p_drop``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from pytest_gta.errors import GtaUsageError

__all__ = ["Doc", "Extensible", "JsonObject", "Number", "PerMode", "Scalar", "omitted"]

#: A number as JSON has it: an ``int`` stays an ``int`` (``3``, not ``3.0``) when written back.
Number = int | float
#: A JUnit-style property value: what a ``gta_*`` property may hold.
Scalar = str | bool | int | float | None
#: A JSON object whose content the project does not define (a tool backend's description of
#: itself, a dataset statistic's breakdown): typed as JSON, checked as JSON.
JsonObject = dict[str, JsonValue]


class Doc(BaseModel):
    """A section of a report or of a case: strict, closed, finite, documented field by field.

    Each field's docstring is its description in the published JSON Schema (docs/schema/), so
    the schema and the code say the same thing; :mod:`pytest_gta.results.jsonschema` reads
    them when it makes the schema (pydantic's ``use_attribute_docstrings`` would read every
    class's source at import, half a second of every run).
    """

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        allow_inf_nan=False,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        protected_namespaces=(),
    )

    def to_json_value(self) -> Any:
        """The builtins :func:`json.dumps` writes (``model_dump`` in Python mode, by alias)."""
        return self.model_dump(mode="python", by_alias=True)


class Extensible(Doc):
    """A run's report, of any benchmark: a ``pytest_gta_update_report`` hook may add fields.

    The report's own fields are as strict as any section's; what a hook adds (a checkpoint's
    name, a dashboard's key) is any JSON, kept in :attr:`hook_fields` and written after them.
    """

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, JsonValue] = Field(init=False)

    @property
    def hook_fields(self) -> dict[str, JsonValue]:
        """Fields a ``pytest_gta_update_report`` hook added: written after the known ones."""
        extra = self.__pydantic_extra__
        if extra is None:
            extra = self.__pydantic_extra__ = {}
        return extra


def _is_none(value: object) -> bool:
    return value is None


def omitted(default: Any = None) -> Any:
    """A field that is left out of the JSON while it is ``None`` (its default)."""
    return Field(default=default, exclude_if=_is_none)


S = TypeVar("S")
E = TypeVar("E")


class PerMode(Doc, Generic[S, E]):
    """A value per evaluation mode (``step``, ``e2e``), keyed by mode as the report writes it.

    A mode the run did not have is absent (``{}`` for a run of neither). :meth:`get` reads a
    mode by name for code that loops over :data:`~pytest_gta.vocabulary.MODES`.
    """

    step: S | None = omitted()
    e2e: E | None = omitted()

    def get(self, mode: str) -> S | E | None:
        """The value of ``mode`` (``None``: the run did not have it)."""
        if mode == "step":
            return self.step
        if mode == "e2e":
            return self.e2e
        return None

    def modes(self) -> list[str]:
        """The modes that have a value, in report order."""
        return [mode for mode in ("step", "e2e") if self.get(mode) is not None]

    def items(self) -> Iterator[tuple[str, S | E]]:
        """``(mode, value)`` of the modes that have one, in report order."""
        for mode in ("step", "e2e"):
            value = self.get(mode)
            if value is not None:
                yield mode, value

    def __contains__(self, mode: object) -> bool:
        return isinstance(mode, str) and self.get(mode) is not None

    def __bool__(self) -> bool:
        return self.step is not None or self.e2e is not None


D = TypeVar("D", bound=Doc)


def validated(cls: type[D], data: object, label: str, what: str) -> D:
    """``data`` read into ``cls``; a usage error naming ``label`` and the first wrong field.

    Raises:
        GtaUsageError: ``{label}: not a {what} ({field}: {why})``.
    """
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise GtaUsageError(f"{label}: not a {what} ({where}: {first['msg']})") from None
