"""The GTA domain model: a dataset of queries, each with its reference chain.

What is here is read-only and cheap: the loaded data (:class:`Dataset`, :class:`Query`) and the
paths the official loader derives from it. Loading and validating a directory is
:mod:`pytest_gta.validation`; the words the data uses (query types, tool categories) are
:mod:`pytest_gta.vocabulary`.

Paths follow the official loader (OpenCompass ``gta_bench.py``): the dataset root is made
absolute without resolving symlinks, file entries become ``<root>/<path>``, and a string argument
of a reference tool call is rewritten to ``<root>/<value>`` only when that exact joined path is a
file under the root.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pytest_gta.errors import DatasetProblem
from pytest_gta.types import ToolMeta
from pytest_gta.vocabulary import QueryType, tool_category


def call_function(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``function`` (``name``, ``arguments``) of a message's first tool call.

    GTA scores only ``tool_calls[0]`` of an assistant message, in the dataset and in every
    record format derived from it; this is the one place that digs it out.
    """
    function: Mapping[str, Any] = message["tool_calls"][0]["function"]
    return function


@dataclass(frozen=True)
class ReferenceCall:
    """A tool call of a reference chain, as the data writes it (relative paths)."""

    #: Index into the query's ``dialogs`` of the assistant message that makes the call.
    index: int
    name: str
    #: An object, or a raw string (a quirk the official parser rejects; see pytest_gta.quirks).
    arguments: Mapping[str, Any] | str


@dataclass(frozen=True)
class FileRef:
    """An input file of a query."""

    type: str
    path: str
    url: str | None = None


@dataclass(frozen=True)
class Query:
    """One GTA query with its reference chain, exactly as the data gives it."""

    qid: str
    position: int
    tools: tuple[ToolMeta, ...]
    files: tuple[FileRef, ...]
    dialogs: tuple[Mapping[str, Any], ...]
    gt_answer: Any
    #: The names of the ``tools`` list as written, a name listed twice included (query 47 of
    #: the release); the agent is offered each tool once (``tools``).
    listed_tools: tuple[str, ...] = ()

    @property
    def type(self) -> QueryType:
        """``objective`` (whitelist/blacklist), ``subjective`` (reference texts) or ``image``."""
        if self.gt_answer is None:
            return "image"
        if isinstance(self.gt_answer, dict):
            return "objective"
        return "subjective"

    @property
    def text(self) -> str:
        """The user's question."""
        return str(self.dialogs[0]["content"])

    @property
    def tool_names(self) -> tuple[str, ...]:
        """Names of the tools offered to the agent for this query, in data order."""
        return tuple(t.name for t in self.tools)

    @cached_property
    def calls(self) -> tuple[ReferenceCall, ...]:
        """The reference chain's tool calls, in order (relative paths, as the data has them)."""
        calls = []
        for index, message in enumerate(self.dialogs):
            if message.get("role") == "assistant" and message.get("tool_calls"):
                function = call_function(message)
                calls.append(ReferenceCall(index, str(function["name"]), function["arguments"]))
        return tuple(calls)

    @property
    def called_tools(self) -> tuple[str, ...]:
        """The tools the reference chain calls, each once, in order of first call."""
        return tuple(dict.fromkeys(call.name for call in self.calls))

    @property
    def categories(self) -> tuple[str, ...]:
        """Categories of the reference chain's tools (sorted, unique, ``none`` omitted)."""
        return tuple(sorted({tool_category(c.name) for c in self.calls} - {"none"}))

    @property
    def assistant_indices(self) -> tuple[int, ...]:
        """Indices into ``dialogs`` of the assistant messages (one step-mode call each)."""
        return tuple(i for i, m in enumerate(self.dialogs) if m.get("role") == "assistant")


@dataclass
class Dataset:
    """A loaded, validated dataset. Query order is the order of the keys in ``dataset.json``."""

    root: Path
    queries: dict[str, Query]
    toolmeta: dict[str, ToolMeta]
    sha256: str
    warnings: list[DatasetProblem] = field(default_factory=list)
    #: Whether a case's tools may name only its own input files (GTA-Workflow), not every
    #: file of the dataset's data directories (GTA-Atomic, whose reference chains read other
    #: queries' images and the generated-image placeholder; see :mod:`pytest_gta.reach`).
    case_files_only: bool = False
    #: The tools a run left out (:meth:`without_tools`): the report's ``tools_left_out``.
    left_out: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Query]:
        return iter(self.queries.values())

    def __len__(self) -> int:
        return len(self.queries)

    def __getitem__(self, qid: str) -> Query:
        return self.queries[qid]

    @property
    def root_str(self) -> str:
        """The absolute root as the official loader spells it (``Path.absolute``, no resolve)."""
        return str(self.root)

    def file_path(self, ref: FileRef) -> str:
        """Absolute path of an input file, spelled as the official loader does."""
        return str((self.root / ref.path).absolute())

    def abs_files(self, query: Query) -> list[str]:
        """Absolute paths of a query's input files."""
        return [self.file_path(f) for f in query.files]

    @cached_property
    def data_dirs(self) -> tuple[str, ...]:
        """Real paths of the directories that hold the queries' input files (``image/``).

        Both the directory a file is named in and the one its symlinks lead to (validation
        keeps both inside the dataset).
        """
        found: dict[str, None] = {}
        for query in self.queries.values():
            for ref in query.files:
                named = self.file_path(ref)
                try:
                    found[os.path.realpath(os.path.dirname(named))] = None
                    found[os.path.dirname(os.path.realpath(named))] = None
                except ValueError:  # a NUL byte: no directory has that name
                    continue
        return tuple(found)

    @cached_property
    def all_files(self) -> frozenset[str]:
        """Every file under the root, spelled ``os.path.join(dirpath, name)``."""
        # Official organize_dialogs lists files with os.walk(root) and tests membership of
        # os.path.join(root, value): the exact same spelling must be reproduced.
        paths = set()
        for dirpath, _dirs, files in os.walk(self.root_str):
            for name in files:
                paths.add(os.path.join(dirpath, name))
        return frozenset(paths)

    def absolutize(self, value: Any) -> Any:
        """Rewrite a reference argument to an absolute path when it names a dataset file."""
        if isinstance(value, str):
            joined = os.path.join(self.root_str, value)
            if joined in self.all_files:
                return joined
        return value

    def reference_dialogs(self, query: Query) -> list[dict[str, Any]]:
        """The query's dialogs with file arguments made absolute (official ``organize_dialogs``).

        Tool outputs are left as written, only the arguments of assistant tool calls change.
        """
        out: list[dict[str, Any]] = []
        for message in query.dialogs:
            if message.get("role") == "tool":
                out.append(
                    {
                        "role": "tool",
                        "name": message.get("name"),
                        "content": copy.deepcopy(message.get("content")),
                    }
                )
            elif message.get("role") == "assistant" and "tool_calls" in message:
                msg = copy.deepcopy(dict(message))
                args = call_function(msg)["arguments"]
                if isinstance(args, dict):  # raw-string arguments stay as written
                    for key, value in list(args.items()):
                        args[key] = self.absolutize(value)
                out.append(msg)
            else:
                out.append(copy.deepcopy(dict(message)))
        return out

    def tool_metas(self, query: Query) -> list[ToolMeta]:
        """Metas of the tools offered for ``query``.

        Names and order come from the query (only its chain's tools are offered); the
        descriptions come from ``toolmeta.json`` as in the official harness, falling back to the
        query's own copy for tools the file does not describe.
        """
        return [self.toolmeta.get(t.name, t) for t in query.tools]

    def tool_names(self) -> tuple[str, ...]:
        """Every tool the data names: ``toolmeta.json``'s, then the queries' own, each once."""
        named = dict.fromkeys(self.toolmeta)
        for query in self.queries.values():
            named.update(dict.fromkeys(query.tool_names))
        return tuple(named)

    def without_tools(self, names: Collection[str]) -> Dataset:
        """This dataset with the tools ``names`` neither offered nor described (an ablation).

        The queries keep their reference chains: a call the model makes to a removed tool is
        the official invalid action, and the scorer compares against the same reference.
        """
        gone = set(names)
        queries = {
            qid: dataclasses.replace(q, tools=tuple(t for t in q.tools if t.name not in gone))
            for qid, q in self.queries.items()
        }
        toolmeta = {name: meta for name, meta in self.toolmeta.items() if name not in gone}
        left_out = (*self.left_out, *(n for n in names if n not in self.left_out))
        return dataclasses.replace(self, queries=queries, toolmeta=toolmeta, left_out=left_out)

    def select(self, ids: Sequence[str] | None = None, limit: int | None = None) -> list[Query]:
        """Queries chosen by ``--gta-ids`` and ``--gta-limit``, in dataset order."""
        chosen = list(self.queries.values())
        if ids is not None:
            wanted = set(ids)
            chosen = [q for q in chosen if q.qid in wanted]
        if limit is not None:
            chosen = chosen[:limit]
        return chosen


def bundled_sample_path(kind: str = "atomic") -> Path:
    """Location of a sample dataset shipped with the package (``atomic`` or ``workflow``).

    Wheels carry it inside the package (``pytest_gta/_sample``, ``_workflow_sample``); an
    editable install or a source checkout reads ``fixtures/gta_sample`` (or
    ``fixtures/gta_workflow_sample``) next to the package.
    """
    here = Path(__file__).resolve().parent
    inside, outside, marker = ("_sample", "gta_sample", "dataset.json")
    if kind == "workflow":
        inside, outside, marker = ("_workflow_sample", "gta_workflow_sample", "end.json")
    packaged = here / inside
    if (packaged / marker).is_file():
        return packaged
    return here.parent / "fixtures" / outside
