"""A GTA case: one query in one mode, with its id and the marks that select it.

The id (``e2e-17``) is a contract: it ends every node id (``gta::test_query[e2e-17]``), keys mock
scripts and cassettes, names cases in reports, and is how the controller recognises the case of
a crashed xdist worker from its node id alone. With ``--gta-epochs`` above 1 each repetition is
its own case and its id says which sampling epoch it is (``e2e-17@epoch1``), so node ids stay
stable from run to run and ``--lf`` reruns the very repetitions that failed. It is written and
read here only.

Kept free of scoring and NumPy: the entry module registers the markers in every session.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass

from pytest_gta.dataset import Query
from pytest_gta.flags import OPT_DATA, OPT_MODEL
from pytest_gta.vocabulary import CATEGORIES, MODES, QUERY_TYPES, Mode

#: Between a case id and its epoch when a run repeats cases (``--gta-epochs``).
EPOCH_TAG = "@epoch"

#: A case id as a parametrized node id shows it; the first one wins.
_IN_NODEID = re.compile(rf"\[({'|'.join(MODES)})-(.+?)(?:{EPOCH_TAG}(\d+))?\]", re.S)

_MARK_TEXT = {
    "gta_mode_step": "GTA cases in step-by-step mode (the model predicts each reference step)",
    "gta_mode_e2e": "GTA cases in end-to-end mode (the model drives the tools itself)",
    "gta_type_objective": "GTA queries whose answer is matched against whitelist/blacklist",
    "gta_type_subjective": "GTA queries whose answer is scored by similarity to references",
    "gta_type_image": "GTA image-generation queries (scored on the image tools' arguments)",
}


def mark_name(prefix: str, value: str) -> str:
    """A marker name for a data-derived value (``gta_tool_OCR``)."""
    return f"{prefix}_{re.sub(r'[^0-9A-Za-z_]', '_', value)}"


@dataclass(frozen=True)
class Case:
    """One pytest case: a query evaluated in one mode."""

    mode: Mode
    query: Query
    #: The sampling epoch its model requests carry (``--gta-epoch``, plus the repetition).
    epoch: int = 0
    #: Whether the run repeats cases (``--gta-epochs`` above 1): the id then names the epoch.
    repeated: bool = False

    @staticmethod
    def format_id(mode: str, qid: str, epoch: int | None = None) -> str:
        """The id of the case ``(mode, qid)``: ``e2e-17``, or ``e2e-17@epoch1`` in a repetition."""
        base = f"{mode}-{qid}"
        return base if epoch is None else f"{base}{EPOCH_TAG}{epoch}"

    @staticmethod
    def find_in_nodeid(nodeid: str) -> tuple[Mode, str, int | None] | None:
        """``(mode, qid, epoch)`` of a node id's case; the epoch is ``None`` unless repeated."""
        match = _IN_NODEID.search(nodeid)
        if match is None:
            return None
        mode: Mode = "step" if match.group(1) == "step" else "e2e"
        epoch = None if match.group(3) is None else int(match.group(3))
        return mode, match.group(2), epoch

    @property
    def id(self) -> str:
        """Stable id used in node ids and reports: ``e2e-17`` (``e2e-17@epoch1`` repeated)."""
        return self.format_id(self.mode, self.query.qid, self.epoch if self.repeated else None)

    def marks(self) -> list[str]:
        """Marker names derived from the data, for ``-m`` selection."""
        names = ["gta", f"gta_mode_{self.mode}", f"gta_type_{self.query.type}"]
        names += [f"gta_category_{c}" for c in self.query.categories]
        names += [mark_name("gta_tool", t) for t in self.query.called_tools]
        return names

    def __repr__(self) -> str:
        return f"Case({self.id})"


def static_marks() -> list[str]:
    """The marks every session declares, whatever the data (``pytest --markers`` lists them)."""
    names = ["gta", *(f"gta_mode_{m}" for m in MODES), *(f"gta_type_{t}" for t in QUERY_TYPES)]
    names += [f"gta_category_{c}" for c in CATEGORIES]
    names += [mark_name("gta_tool", t) for tools in CATEGORIES.values() for t in tools]
    return names


class MarkRegistry:
    """The GTA markers declared in a session, static and data-derived, each declared once.

    ``declare`` adds one ``markers`` ini line (``config.addinivalue_line``), so that
    ``--strict-markers`` accepts marks that only the dataset knows.
    """

    def __init__(self, declare: Callable[[str], None]) -> None:
        self._declare = declare
        self._names: set[str] = set()

    @classmethod
    def with_static_marks(cls, declare: Callable[[str], None]) -> MarkRegistry:
        """A registry that declared every session's marks (:func:`static_marks`) already."""
        registry = cls(declare)
        for name in static_marks():
            registry.register(name)
        return registry

    def register(self, name: str) -> None:
        """Declare ``name`` (once) with its ``pytest --markers`` text."""
        if name not in self._names:
            self._names.add(name)
            self._declare(f"{name}: {describe_mark(name)}")

    @property
    def names(self) -> list[str]:
        """Every marker declared so far, sorted."""
        return sorted(self._names)


def mark_hint(markexpr: str, marks: list[str], active: bool) -> list[str]:
    """Why ``-m markexpr`` selected no GTA case: no model, or marks that do not exist."""
    if not active:
        return [
            f"pytest-gta: -m {markexpr!r} selected nothing: GTA cases (and their gta_* marks) are "
            f"collected only with {OPT_MODEL}, e.g. {OPT_MODEL}=oracle {OPT_DATA}=sample"
        ]
    lines = []
    lowered = {m.lower(): m for m in marks}
    for word in dict.fromkeys(re.findall(r"\bgta\w*", markexpr)):
        if word in marks:
            continue
        close = difflib.get_close_matches(word.lower(), list(lowered), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(lowered[c] for c in close)}?" if close else ""
        lines.append(
            f"pytest-gta: no GTA case has the mark {word!r} (marks are case-sensitive){hint}"
        )
    shown = ", ".join(marks)
    lines.append(
        f"pytest-gta: the GTA marks of this run: {shown} (pytest --markers describes each)"
    )
    return lines


def describe_mark(name: str) -> str:
    """The ``pytest --markers`` text of a GTA marker, one per marker."""
    if name == "gta":
        return f"every GTA case (pytest-gta); marks exist only with {OPT_MODEL}"
    if name in _MARK_TEXT:
        return _MARK_TEXT[name]
    if name.startswith("gta_category_"):
        category = name.removeprefix("gta_category_")
        tools = ", ".join(CATEGORIES.get(category, ()))
        return f"GTA queries whose reference chain uses a {category} tool ({tools})"
    if name.startswith("gta_tool_"):
        return f"GTA queries whose reference chain calls {name.removeprefix('gta_tool_')}"
    return "selects GTA cases (pytest-gta)"
