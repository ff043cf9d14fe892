"""Which files one case's tool calls may name: the case's own, never the benchmark's.

A tool serves a case, not the benchmark. Every file argument of every tool call (a model's in
the project's loop, an agent's over MCP, any backend: ``local``, ``workflow``, ``replay``,
``agentlego``, ``api``, ``vlm``) is judged here, once, on its real path (symlinks and ``..``
resolved), by :meth:`Reach.judge`:

- ``withheld``: one of the benchmark's own files at the dataset's root
  (:data:`BENCHMARK_FILES`: the tasks with their reference answers or checkpoint trees, and the
  tool descriptions), found by its real path or, for a hard link elsewhere, by its inode. A
  ``ReadCSV`` of GTA-Workflow's ``end.json`` would otherwise hand an agent every checkpoint's
  requirement and weight. The call is refused with a message saying so, whatever else allows.
- ``visible``: the case's own input files, anything under the case's output directory (what its
  earlier calls made) and, for GTA-Atomic, every file of the dataset's data directories (the
  directories that hold its queries' input files, ``image/``): the official reference chains of
  queries 50, 108, 135 and 225 read another query's image, and those of the image-editing
  queries the placeholder ``image/dummy_generated_image.jpg``, which the official harness finds
  anywhere on its machine, so narrowing GTA-Atomic further would change the reference numbers.
  GTA-Workflow has no such chain: a task's tools see its own files alone
  (:attr:`pytest_gta.dataset.Dataset.case_files_only`).
- ``outside``: anything else, which the protocol answers as a missing file, whether or not it
  exists, so that a model cannot map the machine
  (:func:`pytest_gta.protocol.react.convert_arguments`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pytest_gta.files import inside

if TYPE_CHECKING:
    from pytest_gta.dataset import Dataset, Query

#: The benchmark's own files at a dataset's root: GTA-Atomic's queries with their reference
#: chains and answers, GTA-Workflow's tasks with their checkpoint trees, the tool descriptions.
BENCHMARK_FILES = ("dataset.json", "end.json", "toolmeta.json")

Verdict = Literal["visible", "withheld", "outside"]


def withheld_message(value: str) -> str:
    """What a call naming one of the benchmark's own files is told (its observation)."""
    return (
        f"{value[:200]!r} is one of the benchmark's own files (its tasks, answers, checkpoints or "
        "tool descriptions), which no tool reads; name the task's own files or a file an "
        "earlier call made"
    )


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return found.st_dev, found.st_ino


@dataclass(frozen=True)
class Reach:
    """The files one case's calls may name, as real paths (see the module's docstring)."""

    #: Where a relative path is looked up (the dataset root, as the official loader spells it).
    base: str
    #: Directories whose every file a call may name (the output directory, data directories).
    directories: tuple[str, ...]
    #: Single files a call may name (the case's input files, by their real paths).
    files: frozenset[str] = frozenset()
    #: The benchmark's own files, by real path: refused whatever else allows.
    withheld: frozenset[str] = frozenset()
    #: ``(st_dev, st_ino)`` of those files, so that a hard link to one is refused too.
    withheld_ids: frozenset[tuple[int, int]] = frozenset()

    @classmethod
    def of_directories(cls, directories: Iterable[str], base: str = "") -> Reach:
        """Every file under ``directories`` (real paths), nothing withheld (step mode)."""
        return cls(base, tuple(directories))

    def judge(self, real: str) -> Verdict:
        """Whether a call may name the file at ``real`` (a real path: symlinks resolved)."""
        if real in self.withheld:
            return "withheld"
        if self.withheld_ids and _identity(real) in self.withheld_ids:
            return "withheld"
        if real in self.files or any(inside(real, d) for d in self.directories):
            return "visible"
        return "outside"

    def judge_path(self, value: str, base: str | None = None) -> Verdict:
        """:meth:`judge` of a path as a call spells it (relative to ``base``, else :attr:`base`).

        A path no file system can hold (a NUL byte, a lone surrogate) is ``outside``.
        """
        candidate = value if os.path.isabs(value) else os.path.join(base or self.base, value)
        try:
            real = os.path.realpath(candidate)
        except ValueError:
            return "outside"
        return self.judge(real)


def benchmark_files(root: Path | str) -> tuple[frozenset[str], frozenset[tuple[int, int]]]:
    """The real paths and inodes of the :data:`BENCHMARK_FILES` a dataset root holds."""
    paths: set[str] = set()
    ids: set[tuple[int, int]] = set()
    for name in BENCHMARK_FILES:
        candidate = os.path.join(root, name)
        if not os.path.lexists(candidate):
            continue
        paths.add(os.path.realpath(candidate))
        found = _identity(candidate)
        if found is not None:
            ids.add(found)
    return frozenset(paths), frozenset(ids)


def withholding(root: Path | str) -> Reach:
    """A reach that shows nothing and withholds ``root``'s benchmark files (to test a path)."""
    withheld, ids = benchmark_files(root)
    return Reach(str(root), (), frozenset(), withheld, ids)


def case_reach(dataset: Dataset, query: Query, output_dirs: Sequence[Path | str]) -> Reach:
    """What the calls of ``query``'s case may name: its files, its outputs, never the benchmark's.

    Args:
        dataset: The dataset (its root, its data directories unless ``case_files_only``).
        query: The case's query or task (its ``files`` are the case's inputs).
        output_dirs: Where the case's tools write (each wholly visible).
    """
    withheld, ids = benchmark_files(dataset.root_str)
    directories = tuple(os.path.realpath(d) for d in output_dirs)
    if not dataset.case_files_only:
        directories += dataset.data_dirs
    files = set()
    for ref in query.files:
        try:
            files.add(os.path.realpath(dataset.file_path(ref)))
        except ValueError:  # a NUL byte: no file has that name
            continue
    return Reach(dataset.root_str, directories, frozenset(files), withheld, ids)
