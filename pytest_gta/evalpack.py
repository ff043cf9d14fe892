"""An official GTA-Workflow eval pack (``agent_app_eval``'s format), read for re-scoring.

``--gta-model=evalpack:PACK.json`` scores the deliverables a pack holds without running
anything, as ``agent_app_eval/score_with_gpt52.py`` does: per task its ``origin_prompt``, its
trace (``assistant_outputs``: the first trace when it is a list of traces), its
``attached_files`` (strings only) and its ``full_tree``.

Attached files are sent to the judge, so a pack may reach only its own tree and the roots the
user names (``--gta-evalpack-root``): a relative path is looked up under the pack's directory,
then under each root; an absolute path of another machine is found by its tail under the same
directories; and a file that is found outside them, through ``..``, an absolute path or a
symlink, refuses the whole pack (a usage error naming the task, the file and the option) before
anything is judged. The official scorer uploads whatever path exists (``/home/me/.aws/...``
included), so a pack from elsewhere could otherwise send any readable file of this machine to a
remote judge. A file found nowhere is judged without, as officially.

One deviation, said in the run's report and header (:data:`DEVIATION`): the official scorer
resolves a relative path from one directory above its repository (``Path(__file__).parents[2]``
of ``agent_app_eval/score_with_gpt52.py``) while its builder writes them relative to the
repository itself, so officially such files are missing and tasks are judged without them;
here they are found (under the pack's directory or a root), and judged with them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gta import jsonsafe
from pytest_gta.errors import GtaUsageError
from pytest_gta.examples import sample_pack
from pytest_gta.files import inside
from pytest_gta.flags import OPT_EVALPACK_ROOT

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


#: What a run scoring a pack says about where its files come from.
DEVIATION = (
    "eval pack: attached files are looked up under the pack's directory and "
    f"{OPT_EVALPACK_ROOT} only (never above them); relative ones found there are judged with "
    "them, where the official scorer resolves them one directory above its repository and "
    "judges without them (docs/workflow.md)"
)


class OutsideThePack(GtaUsageError):
    """A pack's attached file that lies outside the pack's directory and the named roots."""


@dataclass(frozen=True)
class PackReach:
    """Where a pack's attached files may come from: its directory, then the named roots."""

    #: The directories looked in, in order (the pack's first), as given.
    bases: tuple[Path, ...]
    #: Their real paths: a file must resolve inside one of them.
    allowed: tuple[str, ...]

    @classmethod
    def of(cls, pack_dir: Path, roots: Sequence[Path] = ()) -> PackReach:
        """The reach of a pack in ``pack_dir`` with the extra ``roots``."""
        bases = (pack_dir, *roots)
        return cls(bases, tuple(os.path.realpath(b) for b in bases))

    def holds(self, real: str) -> bool:
        """Whether the real path ``real`` lies under the pack's directory or a root."""
        return any(inside(real, allowed) for allowed in self.allowed)


def _real(path: Path | str) -> str | None:
    """The real path of an existing file or directory (``None``: nothing there)."""
    try:
        real = os.path.realpath(path)
    except ValueError:  # a NUL byte, a lone surrogate: no file has that name
        return None
    return real if os.path.exists(real) else None


def _refused(path: str, real: str, reach: PackReach) -> OutsideThePack:
    where = ", ".join(str(b) for b in reach.bases)
    return OutsideThePack(
        f"attached file {path[:200]!r} leads to {real}, outside the eval pack's directory and "
        f"{OPT_EVALPACK_ROOT} ({where}); a pack may attach files under those only: copy the "
        f"file into the pack's directory or name its directory with {OPT_EVALPACK_ROOT}=DIR"
    )


def _resolve(path: str, reach: PackReach) -> str:
    if os.path.isabs(path):
        real = _real(path)
        if real is None:
            return _moved(path, reach)
        if not reach.holds(real):
            raise _refused(path, real, reach)
        return real
    for base in reach.bases:
        real = _real(base / path)
        if real is None:
            continue
        if not reach.holds(real):
            raise _refused(path, real, reach)
        return real
    # Found nowhere: the judge goes without it, as officially (named as written: no spelling
    # of a missing file may normalise into an existing one).
    return str(reach.bases[0] / path)


def _moved(path: str, reach: PackReach) -> str:
    """An absolute path of another machine, found under the reach by its tail (else as is).

    A pack built elsewhere names deliverables by absolute paths of that machine
    (``/home/me/GTA/agent_app_eval/out/3/files/a.pdf``); where the pack and its files were
    copied together, the longest tail of at least a directory and a file that exists under the
    pack's directory (or a root) is the file. A missing file stays missing.

    Raises:
        OutsideThePack: the file found by its tail is a link that leads out of the reach.
    """
    parts = Path(path).parts[1:]
    for start in range(len(parts) - 1):
        tail = Path(*parts[start:])
        for base in reach.bases:
            candidate = base / tail
            if not candidate.is_file():
                continue
            real = os.path.realpath(candidate)
            if not reach.holds(real):
                raise _refused(path, real, reach)
            return real
    return path


def resolve_files(files: Any, pack_dir: Path, roots: Sequence[Path] = ()) -> Any:
    """``attached_files`` as the official ``_abs_paths`` leaves them, made absolute and kept in.

    Raises:
        OutsideThePack: a file found outside the pack's directory and ``roots``.
    """
    reach = PackReach.of(pack_dir, roots)
    if files is None:
        return []
    if isinstance(files, list):
        return [_resolve(p, reach) for p in files if isinstance(p, str) and p.strip()]
    if isinstance(files, str):
        return _resolve(files, reach)
    return files


def _task_id(value: Any, where: str) -> str:
    try:
        return str(int(value))
    except (TypeError, ValueError, OverflowError):
        raise GtaUsageError(f"{where}: 'task_id' {value!r} is not a whole number") from None


def read_pack(path: Path, roots: Sequence[Path] = ()) -> dict[str, PackTask]:
    """The pack's tasks by task id (as strings, the way ``end.json`` keys them).

    ``roots``: directories besides the pack's own that its attached files may come from
    (``--gta-evalpack-root``).

    Raises:
        GtaUsageError: the file is missing, not JSON, not a pack, names a task twice, or
            attaches a file outside its directory and ``roots``.
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
        try:
            files = resolve_files(task.get("attached_files"), pack_dir, roots)
        except OutsideThePack as exc:
            raise GtaUsageError(
                f"{PREFIX}{path}: tasks[{index}] (task {tid}): attached_files: {exc}"
            ) from None
        out[tid] = PackTask(
            task_id=tid,
            origin_prompt=task.get("origin_prompt"),
            trace=select_trace(task.get("assistant_outputs")),
            files=files,
            tree=task.get("full_tree"),
        )
    return out
