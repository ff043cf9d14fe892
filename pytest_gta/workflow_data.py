"""A GTA-Workflow dataset (GTA-2): ``end.json``, ``toolmeta.json`` and the task files.

Read as the official loader reads it (``GTABenchDataset.load(path, mode="end")`` in
open-compass/GTA) and as its agent runner takes a task (``run_agents.load_tasks``): the file
is an object keyed by task id; a task's prompt is its first dialog message's ``content``
(``""`` when missing), its files are the ``files`` entries that are objects with a ``path``
(resolved under the dataset's root, and refused when they lead out of it, as GTA-Atomic's
are), its checkpoint tree is ``sub_tasks`` (``[]`` when missing: the judge then scores the
root itself), and the tools are every entry of ``toolmeta.json`` (objects named by ``name``,
``tool_name`` or ``id``, or plain strings).
What the official loader would crash on is a usage error here, naming the file and the task.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gta import jsonsafe
from pytest_gta.errors import GtaUsageError
from pytest_gta.files import inside
from pytest_gta.reach import BENCHMARK_FILES, Reach, withholding

END_FILE = "end.json"
TOOLMETA_FILE = "toolmeta.json"
#: The tool categories of the board's P/O/L/C-SR columns (perception, operation, logic,
#: creativity), for the tools of GTA-Workflow; a tool not listed is in none.
TOOL_CATEGORIES: dict[str, str] = {
    **dict.fromkeys(
        (
            "OCR ImageDescription CountGivenObject MathOCR RegionAttributeDescription ReadCSV "
            "ReadDOCX ReadPDF ReadPPTX ReadXLSX ImageQualityTest SoundCharacteristicExtraction "
            "VideoDescription VideoObjectDetection VideoOCR SpeechToText"
        ).split(),
        "perception",
    ),
    **dict.fromkeys(
        (
            "DrawBox AddText GoogleSearch CsvFileGenerator DocxFileGenerator PdfFileGenerator "
            "PptxFileGenerator XlsxFileGenerator HtmlFileGenerator AudioClipTool NoiseReduction "
            "PitchShifting VideoClip AddTextVideoTool"
        ).split(),
        "operation",
    ),
    **dict.fromkeys("Calculator Solver Plot Prover".split(), "logic"),
    **dict.fromkeys("TextToImage ImageStylization TextToVideoTool".split(), "creativity"),
}


def is_workflow_dir(path: Path) -> bool:
    """Whether ``path`` holds a GTA-Workflow dataset (an ``end.json``, no atomic dataset)."""
    return (path / END_FILE).is_file() and not (path / "dataset.json").is_file()


@dataclass(frozen=True)
class WorkflowTask:
    """One GTA-Workflow task: what the agent is given and the tree it is judged on."""

    task_id: str
    prompt: str
    #: The task's input files, absolute (``(declared type, path)``).
    files: tuple[tuple[str, str], ...]
    #: The checkpoint tree as the dataset has it (``sub_tasks``; any JSON, read by the judge).
    tree: Any
    #: The dialog as the dataset has it (its first message is the task).
    dialogs: tuple[Any, ...]
    #: Tools the reference dialog calls (for the category columns; may be empty).
    reference_tools: tuple[str, ...]

    @property
    def categories(self) -> tuple[str, ...]:
        """Tool categories the task involves, from its reference tool calls, sorted."""
        found = {TOOL_CATEGORIES[t] for t in self.reference_tools if t in TOOL_CATEGORIES}
        return tuple(sorted(found))


@dataclass(frozen=True)
class WorkflowDataset:
    """The tasks of one dataset directory and the tools they may use."""

    root: Path
    tasks: tuple[WorkflowTask, ...]
    tools: tuple[str, ...]
    toolmeta: tuple[Any, ...]

    def __iter__(self) -> Iterator[WorkflowTask]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def get(self, task_id: str) -> WorkflowTask | None:
        """The task with this id, if the dataset has it."""
        return next((t for t in self.tasks if t.task_id == task_id), None)

    def select(
        self, ids: Sequence[str] | None = None, limit: int | None = None
    ) -> list[WorkflowTask]:
        """The tasks named by ``ids`` (all when ``None``), at most ``limit``, in dataset order."""
        chosen = [t for t in self.tasks if ids is None or t.task_id in ids]
        return chosen if limit is None else chosen[:limit]


def _called_tools(dialogs: Sequence[Any]) -> tuple[str, ...]:
    names: list[str] = []
    for message in dialogs:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if isinstance(name, str) and name not in names:
                names.append(name)
    return tuple(names)


def _tool_names(toolmeta: Any, where: Path) -> tuple[str, ...]:
    # The official loader iterates the file: a list's entries, or an object's keys (the
    # atomic toolmeta.json's layout, keyed by tool name).
    if not isinstance(toolmeta, (list, dict)):
        raise GtaUsageError(f"{where}: expected a list of tools (objects or names), or an object")
    names: list[str] = []
    for tool in toolmeta:
        name = None
        if isinstance(tool, dict):
            name = tool.get("name") or tool.get("tool_name") or tool.get("id")
        elif isinstance(tool, str):
            name = tool
        if name:
            names.append(str(name))
    return tuple(names)


def _inside(root: Path, path: str, what: str, guard: Reach) -> str:
    """The absolute path of a task file (as the official loader spells it), kept in the dataset.

    The official loader joins ``path`` to the dataset root, so ``../x``, an absolute path or a
    link in the dataset can name any file of the machine, which the agent's sandbox would then
    show the agent and the tools would read. A task's files must lie inside the dataset, after
    ``..`` and symlinks (as :mod:`pytest_gta.validation` keeps GTA-Atomic's), and be none of the
    benchmark's own files (``end.json``, ``toolmeta.json``: ``guard`` withholds them); a missing
    file is the run's business, as officially.

    Raises:
        GtaUsageError: naming the task, the field, the path and where it leads.
    """
    target = root / path
    try:
        real = os.path.realpath(target)
    except ValueError:  # a NUL byte: no file has that name
        raise GtaUsageError(f"{root / END_FILE}: {what} {path[:200]!r} is no file name") from None
    lexical = os.path.normpath(target)
    if not inside(lexical, str(root)) or not inside(real, os.path.realpath(root)):
        raise GtaUsageError(
            f"{root / END_FILE}: {what} {path[:200]!r} leads out of the dataset directory "
            f"{root} (to {real}); a task's files must lie inside it: copy the file there"
        )
    if guard.judge(real) == "withheld":
        raise GtaUsageError(
            f"{root / END_FILE}: {what} {path[:200]!r} is one of the dataset's own files "
            f"({', '.join(BENCHMARK_FILES)}), not an input of the task"
        )
    return str(target.absolute())


def _task(root: Path, key: str, item: Any, where: Path, guard: Reach) -> WorkflowTask:
    if not isinstance(item, dict):
        raise GtaUsageError(f"{where}: task {key!r} is {type(item).__name__}, not an object")
    dialogs = item.get("dialogs", [])
    if not isinstance(dialogs, list):
        raise GtaUsageError(f"{where}: task {key!r}: 'dialogs' must be a list of messages")
    first = dialogs[0] if dialogs else {}
    prompt = str(first.get("content") or "") if isinstance(first, dict) else ""
    files: list[tuple[str, str]] = []
    raw_files = item.get("files", [])
    for index, entry in enumerate(raw_files if isinstance(raw_files, list) else ()):
        if isinstance(entry, dict) and "path" in entry:
            path = entry["path"]
            if not isinstance(path, str):
                raise GtaUsageError(f"{where}: task {key!r}: a file's 'path' must be a string")
            field = f"files[{index}].path"
            checked = _inside(root, path, f"task {key!r}: {field}", guard)
            files.append((str(entry.get("type")), checked))
    return WorkflowTask(
        task_id=key,
        prompt=prompt,
        files=tuple(files),
        tree=item.get("sub_tasks", []),
        dialogs=tuple(dialogs),
        reference_tools=_called_tools(dialogs),
    )


def load_workflow(path: Path) -> WorkflowDataset:
    """Read a GTA-Workflow dataset directory.

    Raises:
        GtaUsageError: no ``end.json``, or one the official loader could not read either.
    """
    root = path.absolute()
    end = root / END_FILE
    data = jsonsafe.read_json_or_usage_error(end, str(end))
    if not isinstance(data, dict):
        raise GtaUsageError(f"{end}: expected an object keyed by task id")
    guard = withholding(root)
    tasks = tuple(_task(root, str(key), item, end, guard) for key, item in data.items())
    toolmeta: Any = []
    meta_path = root / TOOLMETA_FILE
    if meta_path.is_file():
        toolmeta = jsonsafe.read_json_or_usage_error(meta_path, str(meta_path))
    tools = _tool_names(toolmeta, meta_path)
    entries = tuple(toolmeta.values()) if isinstance(toolmeta, dict) else tuple(toolmeta)
    return WorkflowDataset(root, tasks, tools, entries)
