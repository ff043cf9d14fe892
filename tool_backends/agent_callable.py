"""The agent's callable inside its sandbox: its task, its tools, its import, its call.

:mod:`tool_backends.agent_launcher` runs a callable agent (``--gta-agent``) in a process of the
case's own: this file, in ``child`` mode (``python -I agent_launcher.py child FDS``), or a fork
of a warm sandbox that imported the callable once (:mod:`tool_backends.agent_cases`). Either way
:func:`child` builds the task the host described (an ``AgentTask`` with the host's fields and
methods, ``task.tools`` relaying each call to the host), calls the callable, and sends back what
it returned, or the exception it raised, as one frame. Inside the sandbox ``import pytest_gta``
gives a stand-in with ``AgentTask``, ``AgentResult`` and ``Usage`` (:func:`stand_in_package`):
the package itself is not shown. Standard library only, like the launcher.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import importlib.util
import inspect
import json
import os
import sys
import threading
import traceback
import types
from collections.abc import Callable, Mapping
from typing import IO, Any

try:
    from tool_backends import sandbox_worker as worker
except ImportError:  # in the sandbox, which shows no package: the sibling file, bound beside
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import sandbox_worker as worker  # type: ignore[import-not-found,no-redef]

#: The deliverables directory's name in the agent's scratch directory (GTA-Workflow).
DELIVERABLES = "deliverables"

Message = dict[str, Any]


def sibling(name: str) -> Any:
    """A module of this directory: from the package on the host, bound beside this file inside."""
    try:
        return importlib.import_module(f"tool_backends.{name}")
    except ImportError:
        return importlib.import_module(name)


@dataclasses.dataclass(frozen=True)
class Usage:
    """Tokens an agent counted itself (``pytest_gta.Usage``'s fields)."""

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    cached_calls: int = 0


@dataclasses.dataclass(frozen=True)
class AgentResult:
    """``pytest_gta.AgentResult`` as the sandbox offers it: the answer, images, usage."""

    answer: str
    images: tuple[str, ...] = ()
    usage: Usage | None = None


class ToolClient:
    """``task.tools``: the case's tools, each call relayed to the harness, which logs it."""

    def __init__(self, schemas: list[dict[str, Any]], to_host: IO[bytes], from_host: IO[bytes]):
        self._schemas = schemas
        self._out, self._in = to_host, from_host
        self._lock = threading.Lock()

    def schemas(self) -> list[dict[str, Any]]:
        """The case's tools: ``name``, ``description`` and ``inputSchema``."""
        return [dict(s) for s in self._schemas]

    def call(self, name: str, /, **arguments: Any) -> str:
        """Call tool ``name`` with keyword ``arguments``; its output text (or error message)."""
        return self.call_json(name, arguments)

    def call_json(self, name: str, arguments: Any) -> str:
        """Call tool ``name`` with any JSON value as its arguments."""
        with self._lock:
            worker.send(self._out, {"call": {"name": str(name), "arguments": arguments}})
            reply = worker.receive(self._in)
        return str((reply or {}).get("reply", "the harness is gone"))


def _image_bytes(self: Any) -> list[bytes]:
    """The input images' bytes."""
    out = []
    for path in self.image_paths:
        with open(path, "rb") as handle:
            out.append(handle.read())
    return out


def _to_json(self: Any) -> dict[str, Any]:
    """The query file's content."""
    return dict(QUERY)


def _write_query_file(self: Any, path: str) -> str:
    """Write :meth:`to_json` to ``path``."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(QUERY, handle, ensure_ascii=False, indent=1)
    return path


def task_class(names: list[str]) -> type:
    """``pytest_gta.AgentTask`` inside the sandbox: the host's fields, the same methods.

    ``names`` is the host class's own list of fields, so the two cannot drift apart.
    """
    return dataclasses.make_dataclass(
        "AgentTask",
        [(name, Any, dataclasses.field(default=None)) for name in names],
        frozen=True,
        namespace={
            "image_bytes": _image_bytes,
            "to_json": _to_json,
            "write_query_file": _write_query_file,
        },
    )


def make_task(names: list[str], tools: ToolClient) -> Any:
    """The case's task, each field from the query file."""
    known = {
        **QUERY,
        "text": QUERY.get("query"),
        "image_paths": tuple(QUERY.get("images", ())),
        "tool_schemas": tuple(QUERY.get("tools", ())),
        "tools": tools,
        "workdir": os.getcwd(),
        "deliverables_dir": os.path.join(os.getcwd(), DELIVERABLES),
    }
    return TASK_CLASS[0](**{name: known.get(name) for name in names})


#: The task's class, made once its fields are known (for ``import pytest_gta``).
TASK_CLASS: list[type] = []
QUERY: dict[str, Any] = {}


def stand_in_package() -> None:
    """``import pytest_gta`` inside the sandbox gives these classes (the package is not shown)."""
    module = types.ModuleType("pytest_gta")
    module.__dict__.update(AgentTask=TASK_CLASS[0], AgentResult=AgentResult, Usage=Usage)
    module.__path__ = []
    sys.modules["pytest_gta"] = module


def load(spec: Mapping[str, Any]) -> Callable[..., Any]:
    """The agent's callable: from its file, or its module found on the given import path."""
    sys.path[:0] = [p for p in spec.get("path", []) if isinstance(p, str)]
    stand_in_package()
    if spec.get("file"):
        found = importlib.util.spec_from_file_location("_gta_agent", spec["file"])
        if found is None or found.loader is None:
            raise ImportError(f"{spec['file']} is not a Python module")
        module = importlib.util.module_from_spec(found)
        sys.modules["_gta_agent"] = module
        found.loader.exec_module(module)
    else:
        module = importlib.import_module(spec["module"])
    function = getattr(module, spec["attr"], None)
    if function is None:
        where = spec.get("file") or spec["module"]
        raise AttributeError(f"{where} has no attribute {spec['attr']!r}")
    if not callable(function):
        raise TypeError(f"{spec['attr']} is a {type(function).__name__}, not callable")
    return function  # type: ignore[no-any-return]


def result_frame(value: Any) -> Message:
    """The callable's return value as the host reads it."""
    if isinstance(value, str):
        return {"result": {"answer": value}}
    answer = getattr(value, "answer", None)
    if answer is not None and hasattr(value, "images"):
        usage = getattr(value, "usage", None)
        counted = None
        if usage is not None:
            names = ("input_tokens", "output_tokens", "calls", "cached_calls")
            counted = {n: int(getattr(usage, n, 0) or 0) for n in names}
        return {
            "result": {
                "answer": answer if isinstance(answer, str) else None,
                "answer_type": type(answer).__name__,
                "images": [str(p) for p in getattr(value, "images", ()) or ()],
                "usage": counted,
            }
        }
    return {"result": {"answer": None, "answer_type": type(value).__name__}}


def error_record(exc: BaseException) -> Message:
    """An exception of the agent's, as the host reports it: type, message, traceback's end."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-6)
    record = {"type": type(exc).__name__, "message": str(exc)[:2000]}
    record["traceback"] = "".join(lines)[-4000:]
    return record


def child(fds: list[str], function: Callable[..., Any] | None = None) -> None:
    """The callable's process: load it (unless ``function`` is it), call it, send the result.

    ``fds``: the pipes from and to the launcher, which relays to the host.
    """
    from_host = os.fdopen(int(fds[0]), "rb")
    to_host = os.fdopen(int(fds[1]), "wb")
    request = worker.receive(from_host) or {}
    QUERY.update(request.get("query", {}))
    spec = request.get("spec", {})
    tools = ToolClient(list(QUERY.get("tools", [])), to_host, from_host)
    if not TASK_CLASS:
        TASK_CLASS.append(task_class(spec.get("task_fields", [])))
    try:
        if spec.get("probe"):
            value: Any = sibling("agent_probe").probe(spec["probe"])
        elif spec.get("check"):
            if function is None:
                load(spec)
            value = "ok"
        else:
            task = make_task(spec["task_fields"], tools)
            value = (function or load(spec))(task)
            if inspect.isawaitable(value):
                value = asyncio.run(_awaited(value))
        frame = result_frame(value)
    except BaseException as exc:  # the agent's failure, reported in its case
        frame = {"error": error_record(exc)}
    worker.send(to_host, frame)


async def _awaited(value: Any) -> Any:
    return await value
