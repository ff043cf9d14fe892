"""An official GTA-Workflow eval pack (``agent_app_eval``'s format), read for re-scoring.

``--gta-model=evalpack:PACK.json`` scores the deliverables a pack holds without running
anything, as ``agent_app_eval/score_with_gpt52.py`` does: per task its ``origin_prompt``, its
trace (``assistant_outputs``: the first trace when it is a list of traces), its
``attached_files`` (strings only; a relative path is found from the pack's directory, then
from each directory above it, then from the working directory, since the official builder
writes them relative to its repository's root; an absolute path of another machine is found by
its tail) and its ``full_tree``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gta import jsonsafe
from pytest_gta.errors import GtaUsageError
from pytest_gta.examples import sample_pack

PREFIX = "evalpack:"
#: ``evalpack:sample``: the bundled Workflow sample's pack, which the wheel ships with its files.
SAMPLE = "sample"


def pack_path(spec: str, base: Path) -> Path:
    """The file ``evalpack:PACK.json`` (or ``evalpack:sample``) names, relative to ``base``.

    ``sample`` is the shipped pack (:func:`pytest_gta.examples.sample_pack`), the same on a
    wheel and an editable install; a file of yours named ``sample`` is ``evalpack:./sample``.
    """
    name = spec.removeprefix(PREFIX)
    if name == SAMPLE:
        return sample_pack()
    raw = Path(name).expanduser()
    return raw if raw.is_absolute() else base / raw


@dataclass(frozen=True)
class PackTask:
    """One task's deliverable as the official scorer reads it from the pack."""

    task_id: str
    origin_prompt: Any
    trace: Any
    files: Any
    tree: Any


def select_trace(field: Any) -> Any:
    """The first trace of ``[[steps], ...]``; anything else as it is (``_select_trace``)."""
    if isinstance(field, list) and field:
        first = field[0]
        if isinstance(first, list):
            return first
    return field


def _resolve(path: str, bases: list[Path]) -> str:
    if os.path.isabs(path):
        return path if os.path.exists(path) else _moved(path, bases)
    candidates = [(base / path).resolve() for base in bases]
    found = next((c for c in candidates if c.exists()), candidates[0])
    return str(found)


def _moved(path: str, bases: list[Path]) -> str:
    """An absolute path of another machine, found under ``bases`` by its tail (else as is).

    A pack built elsewhere names deliverables by absolute paths of that machine
    (``/home/me/GTA/agent_app_eval/out/3/files/a.pdf``); where the pack and its files were
    copied together, the longest tail of at least a directory and a file that exists under
    the pack's directory (or above it) is the file. A missing file stays missing.
    """
    parts = Path(path).parts[1:]
    for start in range(len(parts) - 1):
        tail = Path(*parts[start:])
        for base in bases:
            candidate = base / tail
            if candidate.is_file():
                return str(candidate.resolve())
    return path


def resolve_files(files: Any, pack_dir: Path) -> Any:
    """``attached_files`` as the official ``_abs_paths`` leaves them, made absolute."""
    bases = [pack_dir, *pack_dir.parents, Path.cwd()]
    if files is None:
        return []
    if isinstance(files, list):
        return [_resolve(p, bases) for p in files if isinstance(p, str) and p.strip()]
    if isinstance(files, str):
        return _resolve(files, bases)
    return files


def _task_id(value: Any, where: str) -> str:
    try:
        return str(int(value))
    except (TypeError, ValueError, OverflowError):
        raise GtaUsageError(f"{where}: 'task_id' {value!r} is not a whole number") from None


def read_pack(path: Path) -> dict[str, PackTask]:
    """The pack's tasks by task id (as strings, the way ``end.json`` keys them).

    Raises:
        GtaUsageError: the file is missing, not JSON, not a pack, or names a task twice.
    """
    pack = jsonsafe.read_json_or_usage_error(path, f"{PREFIX}{path}")
    tasks = pack.get("tasks") if isinstance(pack, dict) else None
    tasks = tasks or []
    if not isinstance(tasks, list):
        raise GtaUsageError(f"{PREFIX}{path}: 'tasks' must be a list (an eval pack's tasks)")
    out: dict[str, PackTask] = {}
    pack_dir = path.absolute().parent
    for index, task in enumerate(tasks):
        if not isinstance(task, dict):
            continue
        tid = _task_id(task.get("task_id"), f"{PREFIX}{path}: tasks[{index}]")
        if tid in out:
            raise GtaUsageError(f"{PREFIX}{path}: tasks[{index}]: task_id {tid} appears twice")
        out[tid] = PackTask(
            task_id=tid,
            origin_prompt=task.get("origin_prompt"),
            trace=select_trace(task.get("assistant_outputs")),
            files=resolve_files(task.get("attached_files"), pack_dir),
            tree=task.get("full_tree"),
        )
    return out
