"""The erratum of a dataset (``gta-erratum/1``), typed: what ``pytest_gta/erratum.json`` holds.

Some GTA queries cannot be scored fairly as released: their reference is faulty (an answer that
fails its own whitelist, a chain without a final answer, a reference call the official parser
rejects, ...) or their answer is what the live web said when the data was written (a price, a
ranking, a company's CEO). The erratum names each such query once per kind of fault, with its
evidence: a sentence that describes the fault without quoting the reference answer, so the
package never becomes an answer key. :mod:`pytest_gta.erratum` reads it and matches it to a
dataset; every case of a named query carries its :class:`ErratumNote` s, and the report gives
the paper's metrics a second time over the queries it does not name.

An entry is tied to the query's content (:attr:`ErratumEntry.query_sha256`), not only to its
id: a dataset that holds the release's query unchanged (the release itself, a subset of it,
the same query under another id) gets the entry; a query changed in any way does not.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from pytest_gta.results.base import Doc

__all__ = [
    "ERRATUM_VERSION",
    "ErratumEntry",
    "ErratumFile",
    "ErratumNote",
    "ErratumUse",
]

#: The version this code reads and writes; another is refused with both versions named.
ERRATUM_VERSION = "gta-erratum/1"


def check_sha256(value: str) -> str:
    """A sha256 digest as the erratum writes one: 64 lower-case hex digits."""
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError("not a sha256 digest (64 lower-case hex digits)")
    return value


def check_line(value: str) -> str:
    """One line of visible text (an evidence sentence, a title)."""
    if not value.strip() or any(c in value for c in "\r\n") or not value.isprintable():
        raise ValueError("must be one line of printable text")
    return value


#: A sha256 digest: 64 lower-case hex digits.
Sha256 = Annotated[str, AfterValidator(check_sha256)]
#: One line of printable text.
Line = Annotated[str, Field(min_length=1, max_length=400), AfterValidator(check_line)]


class ErratumNote(Doc):
    """A fault of the case's query, as the erratum names it (its kind and its evidence)."""

    kind: str
    """``answer_misses_reference``, ``no_final_answer``, ``live_web``, ... (the erratum's
    ``kinds``)."""
    evidence: str
    """What is wrong, in a sentence that does not quote the reference answer."""


class ErratumEntry(Doc):
    """One fault of one query."""

    query: str = Field(min_length=1, max_length=64)
    """The query's id in the dataset the erratum was written for."""
    query_sha256: Sha256
    """sha256 of the query's content (:func:`pytest_gta.erratum.query_sha256`): the entry applies
    to a query of any dataset whose content has this digest, and to no other."""
    kind: str = Field(min_length=1, max_length=64)
    """One of the erratum's ``kinds``."""
    evidence: Line
    """What is wrong, in a sentence that does not quote the reference answer."""

    def note(self) -> ErratumNote:
        """The entry as a case carries it."""
        return ErratumNote(kind=self.kind, evidence=self.evidence)


class ErratumFile(Doc):
    """An erratum file (``pytest_gta/erratum.json``)."""

    version: str
    """``gta-erratum/1``."""
    dataset: Line
    """Which dataset it was written for, in words."""
    dataset_sha256: Sha256
    """sha256 of that dataset's ``dataset.json``."""
    kinds: dict[str, Line]
    """Kind -> what it means, in a few words; every entry's kind is one of these."""
    entries: list[ErratumEntry]
    """In dataset order, then in the order of ``kinds``; a query may have several kinds (each
    one of ``kinds``, and once: the reader checks both)."""


class ErratumUse(Doc):
    """The erratum the run's queries were checked against (docs/dataset.md, "The erratum")."""

    version: str
    """``gta-erratum/1``."""
    dataset_sha256: str
    """sha256 of the ``dataset.json`` the erratum was written for (the GTA release)."""
    same_dataset: bool
    """The run's dataset is that one (else its queries were matched one by one, by content)."""
    kinds: dict[str, str]
    """Kind -> what it means, every kind of the erratum."""
    queries: dict[str, list[str]]
    """Kind -> the run's queries the erratum names for it, in dataset order (``{}``: none, and
    ``metrics_sound`` equals ``metrics``)."""

    def named(self) -> list[str]:
        """The run's queries the erratum names, of any kind (each once)."""
        return list(dict.fromkeys(q for ids in self.queries.values() for q in ids))
