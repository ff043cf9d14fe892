"""Tool cassettes: what live tool backends answered, recorded to a committable directory.

An entry is keyed by the tool and its arguments in portable form: file arguments inside the
dataset become dataset-relative paths *and* the sha256 of the file's bytes, so an entry replays
on any machine and never for a different image. Outputs are stored as text, or as the produced
file copied next to the entry. Each entry is one JSON file written to a temporary name and
renamed into place, after the files it names, so a reader never finds a torn entry or one whose
files are missing. Nothing else is stored: no backend URL, no header, no key.

Recording from many threads (``--gta-concurrency``) and xdist workers at once: an entry is
written under an exclusive lock on its cassette directory (a lock file in the system's temporary
directory, so nothing is added to the committed directory), so two calls that share a key never
interleave their files, and with ``--gta-tool-record=new`` the first answer stays and the second
call records nothing. An entry's text depends only on the call and its answer: the arguments are
written sorted by name, whatever order the model wrote them in, so the directory's content does
not depend on which thread finished first. (A live tool that answers the same call differently
twice in one run leaves whichever answer was recorded first; with ``all``, the last.)

Layout: ``<dir>/<Tool>/<key>.json`` plus ``<dir>/<Tool>/<key>-<n>.<ext>`` for file outputs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_gta.dataset import Dataset
from pytest_gta.disk_records import digest, dump_entry, read_entry
from pytest_gta.errors import GtaInfrastructureError
from pytest_gta.files import (
    NotRegularFileError,
    copy_regular,
    file_lock,
    inside,
    sha256_file,
    write_atomic,
)
from pytest_gta.tools import Recorder, ToolContext, ToolInvocation
from pytest_gta.types import ResultItem, ToolResult

SCHEMA = "pytest-gta-cassette/1"


def _candidate(value: str, root: str) -> str:
    """The file a path argument names: absolute as given, else under the dataset root."""
    return os.path.normpath(value if os.path.isabs(value) else os.path.join(root, value))


def normalise_argument(value: Any, dataset: Dataset) -> Any:
    """A file argument inside the dataset as its dataset-relative path; anything else unchanged."""
    if not isinstance(value, str):
        return value
    root = dataset.root_str
    candidate = _candidate(value, root)
    if candidate.startswith(root + os.sep) and os.path.exists(candidate):
        return os.path.relpath(candidate, root).replace(os.sep, "/")
    return value


def portable_arguments(
    arguments: Mapping[str, Any], dataset: Dataset, output_dir: Path | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """(arguments with dataset files as relative paths, sha256 of every file argument).

    Files the run produced (in ``output_dir``) are keyed by content alone: their names are
    random, their bytes are what the tool sees. Only files a tool may read count (those in the
    dataset or the output directory, links resolved): any other string is just text, so a
    model that writes ``/proc/self/environ`` into an argument has nothing of it read, hashed
    or recorded.
    """
    portable: dict[str, Any] = {}
    hashes: dict[str, str] = {}
    visible = [os.path.realpath(dataset.root_str)]
    if output_dir is not None:
        visible.append(os.path.realpath(output_dir))
    for key, value in arguments.items():
        portable[key] = normalise_argument(value, dataset)
        if not isinstance(value, str):
            continue
        candidate = _candidate(value, dataset.root_str)
        try:
            real = os.path.realpath(candidate)
        except ValueError:  # a NUL byte: no file's name
            continue
        if not any(inside(real, root) for root in visible) or not os.path.isfile(real):
            continue
        hashes[key] = sha256_file(Path(candidate))
        if output_dir is not None and candidate.startswith(str(output_dir) + os.sep):
            portable[key] = "<output>"
    return portable, hashes


def _usable(output: Any) -> bool:
    """Whether a stored output has the shape :meth:`Cassettes.record` writes.

    A file output must name a file beside the entry: a hand-edited or hostile cassette must not
    make replay copy ``../../secret`` into the run as a tool result.
    """
    if not isinstance(output, dict) or not isinstance(output.get("type"), str):
        return False
    if "file" not in output:
        return True
    name = output["file"]
    return isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name


class Cassettes:
    """A cassette directory: look calls up, record answers."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def key(tool: str, arguments: Mapping[str, Any], hashes: Mapping[str, str]) -> str:
        """Content address of a call."""
        return digest({"tool": tool, "arguments": dict(arguments), "files": dict(hashes)})[:32]

    def _entry(self, tool: str, key: str) -> Path:
        return self.root / tool / f"{key}.json"

    def _lock_path(self) -> Path:
        """The lock file of this cassette directory, outside it (users commit the directory).

        Keyed by the directory's real path, so every process that records into it shares it.
        """
        where = digest({"cassettes": os.path.realpath(self.root)})[:24]
        return Path(tempfile.gettempdir()) / f"pytest-gta-cassettes-{where}.lock"

    def lookup(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        dataset: Dataset,
        output_dir: Path,
    ) -> ToolResult | None:
        """The recorded result of this call, or ``None``."""
        portable, hashes = portable_arguments(arguments, dataset, output_dir)
        key = self.key(tool, portable, hashes)
        entry = read_entry(self._entry(tool, key))
        outputs = entry.get("outputs", []) if entry is not None else None
        if not isinstance(outputs, list) or not all(_usable(o) for o in outputs):
            return None
        items = []
        for n, output in enumerate(outputs):
            if "file" in output:
                source = self.root / tool / output["file"]
                target = output_dir / f"cassette-{key}-{n}{source.suffix}"
                if not target.exists():
                    try:
                        output_dir.mkdir(parents=True, exist_ok=True)
                        self._copy_out(source, target)
                    except (OSError, ValueError):  # gone, unreadable or unnameable: a miss
                        return None
                items.append(ResultItem(output["type"], str(target)))
            else:
                items.append(ResultItem(output["type"], output.get("content")))
        return ToolResult(tuple(items))

    def _copy_out(self, source: Path, target: Path) -> None:
        """Copy a recorded output file into the run, refusing anything but a regular file.

        A cassette directory is shared data (committed, downloaded, unpacked from an archive)
        and git keeps symbolic links: an output that links to ``/proc/self/environ`` or a
        private picture would be copied into the run's output directory, shown to the model
        and embedded in the HTML report. The same goes for a tool directory that links out of
        the cassettes. Such a cassette is broken, not a miss: the case errors and says which
        file to fix.

        Raises:
            GtaInfrastructureError: ``source`` is a link, a FIFO, a device or a directory, or
                lies outside the cassette directory once its directories' links are resolved.
        """
        problem = None
        if not inside(os.path.realpath(source.parent), os.path.realpath(self.root)):
            problem = f"its directory leads out of the cassette directory {self.root}"
        else:
            try:
                copy_regular(source, target)
            except NotRegularFileError as exc:
                problem = f"{exc}; a cassette output must be a regular file"
        if problem is not None:
            raise GtaInfrastructureError(
                f"tool cassette output {source} is refused: {problem} (re-record the entry, "
                "or remove it)"
            )

    def record(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        result: ToolResult,
        dataset: Dataset,
        output_dir: Path,
        *,
        overwrite: bool,
    ) -> bool:
        """Store a call's result; ``False`` when an entry exists and ``overwrite`` is off."""
        portable, hashes = portable_arguments(arguments, dataset, output_dir)
        key = self.key(tool, portable, hashes)
        entry_path = self._entry(tool, key)
        if entry_path.exists() and not overwrite:
            return False
        # flock: each ``with`` opens the lock file anew, so threads exclude each other too.
        with file_lock(self._lock_path()):
            if entry_path.exists() and not overwrite:
                return False  # another thread or worker recorded it meanwhile
            self._write(tool, key, entry_path, portable, hashes, result)
        return True

    @staticmethod
    def _write(
        tool: str,
        key: str,
        entry_path: Path,
        portable: Mapping[str, Any],
        hashes: Mapping[str, str],
        result: ToolResult,
    ) -> None:
        """Copy the result's files beside the entry, then write the entry (under the lock)."""
        entry_path.parent.mkdir(parents=True, exist_ok=True)
        outputs: list[dict[str, Any]] = []
        for n, item in enumerate(result.items):
            content = item.content
            if item.type != "text" and isinstance(content, str) and os.path.isfile(content):
                name = f"{key}-{n}{Path(content).suffix or '.bin'}"
                try:
                    copy_regular(Path(content), entry_path.parent / name)
                except NotRegularFileError as exc:
                    # Our tools write regular files; a link is nothing to commit to a cassette.
                    raise GtaInfrastructureError(f"{tool} output not recorded: {exc}") from None
                outputs.append({"type": item.type, "file": name})
            else:
                outputs.append({"type": item.type, "content": content})
        entry = {
            "schema": SCHEMA,
            "tool": tool,
            "arguments": dict(sorted(portable.items())),
            "files": dict(sorted(hashes.items())),
            "outputs": outputs,
        }
        write_atomic(entry_path, dump_entry(entry, indent=1) + "\n")


def make_recorder(directory: Path, *, overwrite: bool) -> Recorder:
    """A recorder of live answers into the cassette directory ``directory``.

    The ``cassettes`` entry point of ``pytest_gta.tool_recorders``, which
    :func:`pytest_gta.tools.make_recorder` loads for ``--gta-tool-record``. With ``overwrite``
    (``all``) a new answer replaces a recorded one; without (``new``) the first answer recorded
    for a call stays.
    """
    cassettes = Cassettes(directory)

    def record(invocation: ToolInvocation, context: ToolContext, result: ToolResult) -> None:
        cassettes.record(
            invocation.name,
            invocation.arguments,
            result,
            context.dataset,
            context.output_dir,
            overwrite=overwrite,
        )

    return record
