"""The release's erratum: reading ``pytest_gta/erratum.json`` and matching it to a dataset.

The file (``gta-erratum/1``, typed in :mod:`pytest_gta.results.erratum`) names the queries of
the GTA release whose reference is faulty or whose answer depends on the live web, with the
evidence. It ships with the package and is versioned with it; its faulty-reference entries are
computed from the release by :mod:`pytest_gta.erratum_build` (the quirks the oracle meets), its
live-web entries are chosen by hand. docs/dataset.md ("The erratum") lists them.

An entry applies to a query by content: :func:`query_sha256` digests what the query asks and
what its reference is (dialogs, ``gt_answer``, files, tool names), so the release, a subset of
it or a copy under other ids get the entries of their unchanged queries, and a query changed in
any way (a fixed whitelist, another image) gets none. The reader is strict, as for every file
from outside: whatever the file holds, a :class:`~pytest_gta.errors.GtaUsageError` naming the
file and the field, never a traceback.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pytest_gta.dataset import Dataset, Query
from pytest_gta.errors import GtaUsageError
from pytest_gta.jsonsafe import JsonInputError, read_json
from pytest_gta.results.erratum import (
    ERRATUM_VERSION,
    ErratumEntry,
    ErratumFile,
    ErratumNote,
    ErratumUse,
)
from pytest_gta.results.io import field_problem, show_value

__all__ = [
    "ERRATUM_PATH",
    "Erratum",
    "load_erratum",
    "parse_erratum",
    "query_sha256",
    "shipped_erratum",
]

#: The erratum that ships with the package.
ERRATUM_PATH = Path(__file__).resolve().parent / "erratum.json"
#: Ends every message about an erratum file: where it comes from.
HOW = "the erratum is pytest_gta/erratum.json, written by python -m pytest_gta.erratum_build"
#: Larger than any erratum (the release's is a few tens of kilobytes).
MAX_ERRATUM_BYTES = 4 * 1024 * 1024


def query_content(query: Query) -> dict[str, Any]:
    """What an erratum entry is about: the query's dialogs, answer, files and tool names."""
    return {
        "dialogs": [dict(message) for message in query.dialogs],
        "gt_answer": query.gt_answer,
        "files": [[f.type, f.path, f.url] for f in query.files],
        "tools": list(query.listed_tools or query.tool_names),
    }


def query_sha256(query: Query) -> str:
    """sha256 of the query's content as canonical JSON (sorted keys, ASCII, no spaces)."""
    text = json.dumps(
        query_content(query), sort_keys=True, ensure_ascii=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class Erratum:
    """An erratum read and checked (:func:`load_erratum`), ready to match queries."""

    #: How messages and reports name it (its path as given).
    label: str
    file: ErratumFile
    #: The entries by the content digest of their query.
    by_content: Mapping[str, tuple[ErratumEntry, ...]]

    @property
    def version(self) -> str:
        """``gta-erratum/1``."""
        return self.file.version

    @property
    def kinds(self) -> Mapping[str, str]:
        """Kind -> what it means, in the file's order."""
        return self.file.kinds

    def entries_for(self, query: Query) -> tuple[ErratumEntry, ...]:
        """The entries of ``query`` (none: its reference is sound, as far as the erratum knows)."""
        return self.by_content.get(query_sha256(query), ())

    def notes_for(self, query: Query) -> list[ErratumNote]:
        """The entries of ``query`` as its cases carry them."""
        return [entry.note() for entry in self.entries_for(query)]

    def of_dataset(
        self, dataset: Dataset, qids: Iterable[str] | None = None
    ) -> dict[str, tuple[ErratumEntry, ...]]:
        """Query id -> its entries, for the queries of ``qids`` (default: all) it names."""
        chosen = dataset.queries if qids is None else dict.fromkeys(qids)
        out = {}
        for qid in chosen:
            query = dataset.queries.get(qid)
            entries = self.entries_for(query) if query is not None else ()
            if entries:
                out[qid] = entries
        return out

    def use(self, dataset: Dataset, named: Mapping[str, Iterable[ErratumEntry]]) -> ErratumUse:
        """The report's ``dataset.erratum``: this erratum, and the queries of ``named`` by kind."""
        by_kind: dict[str, list[str]] = {}
        for kind in self.kinds:
            ids = [qid for qid, entries in named.items() if any(e.kind == kind for e in entries)]
            if ids:
                by_kind[kind] = ids
        return ErratumUse(
            version=self.version,
            dataset_sha256=self.file.dataset_sha256,
            same_dataset=dataset.sha256 == self.file.dataset_sha256,
            kinds=dict(self.kinds),
            queries=by_kind,
        )


def _shown(value: Any) -> str:
    """A value as messages show it: a string quoted, anything else as JSON, cut short."""
    return show_value(repr(value) if isinstance(value, str) else value)


def parse_erratum(label: str, data: Any) -> Erratum:
    """Check a loaded erratum and read it.

    Raises:
        GtaUsageError: naming ``label`` and the first field that is missing or wrong (another
            version names both versions).
    """
    version = data.get("version") if isinstance(data, dict) else None
    if version != ERRATUM_VERSION:
        if isinstance(version, str) and version.startswith("gta-erratum/"):
            raise GtaUsageError(
                f"{label}: version is {_shown(version)}: this pytest-gta reads "
                f"{ERRATUM_VERSION} only; {HOW}"
            )
        raise GtaUsageError(
            f"{label}: not an erratum (version {_shown(version)}, expected "
            f"{ERRATUM_VERSION!r}); {HOW}"
        )
    try:
        file = ErratumFile.model_validate(data)
    except ValidationError as exc:
        problem = field_problem(exc, ErratumFile, "erratum")
        raise GtaUsageError(f"{label}: {problem}; {HOW}") from None
    by_content: dict[str, list[ErratumEntry]] = {}
    first: dict[tuple[str, str], int] = {}
    for index, entry in enumerate(file.entries):
        where = f"{label}: entries[{index}]"
        if entry.kind not in file.kinds:
            raise GtaUsageError(
                f"{where}.kind is {_shown(entry.kind)}: not one of the erratum's kinds "
                f"({', '.join(file.kinds)}); {HOW}"
            )
        before = first.setdefault((entry.query_sha256, entry.kind), index)
        if before != index:
            raise GtaUsageError(
                f"{where} names query {_shown(entry.query)} with kind {entry.kind}, as "
                f"entries[{before}] does; {HOW}"
            )
        by_content.setdefault(entry.query_sha256, []).append(entry)
    order = {kind: i for i, kind in enumerate(file.kinds)}
    return Erratum(
        label,
        file,
        {
            digest: tuple(sorted(entries, key=lambda e: order[e.kind]))
            for digest, entries in by_content.items()
        },
    )


def load_erratum(path: Path, label: str | None = None) -> Erratum:
    """Read and check an erratum file (see :func:`parse_erratum`).

    Raises:
        GtaUsageError: the file is missing, unreadable, too large, not JSON or not an erratum.
    """
    name = str(path) if label is None else label
    try:
        size = path.stat().st_size
        if size > MAX_ERRATUM_BYTES:
            raise GtaUsageError(
                f"{name}: {size} bytes is larger than any erratum ({MAX_ERRATUM_BYTES} at most); "
                f"{HOW}"
            )
        data = read_json(path)
    except FileNotFoundError:
        raise GtaUsageError(f"{name}: no such file; {HOW}") from None
    except (OSError, JsonInputError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise GtaUsageError(f"{name}: {text}; {HOW}") from None
    return parse_erratum(name, data)


@functools.cache
def shipped_erratum() -> Erratum:
    """The erratum that ships with the package (read once per process)."""
    return load_erratum(ERRATUM_PATH, "pytest_gta/erratum.json")
