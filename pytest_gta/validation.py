"""Loading and validating a GTA dataset directory.

The official layout is ``dataset.json`` + ``toolmeta.json`` + ``image/``. A benchmark run is only
as good as its data, so loading checks everything the harness relies on and reports *every*
problem at once, each naming the file, the query id and the field, instead of failing later with
a traceback in the middle of a run.

The data is outside input, so a path's spelling is kept (:mod:`pytest_gta.dataset` explains the
official rules) but its target is not trusted: a file whose symlinks lead out of the resolved
root is refused, and so is anything nested deeper than :data:`pytest_gta.jsonsafe.MAX_DEPTH`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytest_gta import jsonsafe
from pytest_gta.dataset import Dataset, FileRef, Query
from pytest_gta.errors import DatasetError, DatasetProblem
from pytest_gta.files import inside, sha256_file
from pytest_gta.types import ToolMeta, ToolParam

INPUT_TYPES = ("image", "text", "audio", "bool", "int", "float", "file")
OUTPUT_TYPES = (*INPUT_TYPES, "video")

#: Why an entry nested deeper than :data:`pytest_gta.jsonsafe.MAX_DEPTH` is refused.
TOO_DEEP = f"nested too deeply (more than {jsonsafe.MAX_DEPTH} levels)"


def _duplicate_checking_pairs(duplicates: list[list[str]]) -> Any:
    """An ``object_pairs_hook`` that records each object's repeated keys (innermost first)."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        repeated = []
        for key, value in pairs:
            if key in out:
                repeated.append(key)
            out[key] = value
        duplicates.append(repeated)
        return out

    return hook


def _read_json(path: Path, problems: list[DatasetProblem], duplicates: list[str]) -> Any:
    """Parse a JSON file; ``duplicates`` receives the keys repeated in its top-level object.

    A file that parses but is nested deeper than :data:`~pytest_gta.jsonsafe.MAX_DEPTH` is still
    returned, so that the caller can name the query and field at fault (and skip them); any
    other failure is one problem for the whole file.
    """
    per_object: list[list[str]] = []
    try:
        value = jsonsafe.read_json(path, object_pairs_hook=_duplicate_checking_pairs(per_object))
    except FileNotFoundError:
        problems.append(DatasetProblem(path.name, None, None, "file not found"))
        return None
    except jsonsafe.JsonInputError as exc:
        per_object.clear()
        try:
            # Parsing again without the depth bound tells "too deep, but loadable" (whose culprit
            # can be named) from everything else; only broken files pay for the second parse.
            value = jsonsafe.read_json(
                path,
                max_depth=sys.maxsize,
                object_pairs_hook=_duplicate_checking_pairs(per_object),
            )
        except (OSError, jsonsafe.JsonInputError):
            problems.append(DatasetProblem(path.name, None, None, str(exc)))
            return None
        if not isinstance(value, dict):
            problems.append(DatasetProblem(path.name, None, None, str(exc)))
            return None
    # The hook sees the innermost objects first: the top-level object is the last one.
    if isinstance(value, dict) and per_object:
        duplicates.extend(per_object[-1])
    return value


def _deep_part(value: Any, budget: int) -> str:
    """Where in ``value`` (deeper than ``budget`` levels) the excess lies, as a field path.

    The path follows object keys and the list items that are objects, as every named field of
    a GTA file is reached (``dialogs[1].tool_calls[0].function.arguments.image``); it stops where
    the data has no more names, at the culprit's own nesting.
    """
    where = ""
    for _ in range(8):
        if isinstance(value, dict):
            children: Iterator[tuple[str, Any]] = ((f".{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            children = ((f"[{i}]", v) for i, v in enumerate(value) if isinstance(v, dict))
        else:
            break
        budget -= 1
        step = next(((n, c) for n, c in children if jsonsafe.depth(c, budget) > budget), None)
        if step is None:
            break
        where += step[0]
        value = step[1]
    return where.removeprefix(".")


def _refuse_deep(check: _Checker, raw: dict[str, Any], keyed_by_query: bool) -> set[str]:
    """Report the entries of ``raw`` nested deeper than ``MAX_DEPTH``; return their keys.

    Such an entry loads (Python's parser goes to about 1,000 levels) but would break every
    recursive walk after it (``copy.deepcopy`` of the reference dialogs, ``repr`` in a message,
    execnet), so it is refused before anything looks inside it.
    """
    budget = jsonsafe.MAX_DEPTH - 1  # the file's own object is the first level
    refused = set()
    for key, value in raw.items():
        if jsonsafe.depth(value, budget) <= budget:
            continue
        refused.add(key)
        where = _deep_part(value, budget)
        if keyed_by_query:
            check.add(key, where or None, TOO_DEEP)
        else:
            check.add(None, f"{key}.{where}" if where else key, TOO_DEEP)
    return refused


def _escape(root_real: str, path: Path) -> str | None:
    """The real path of the file ``path`` when it lies outside the dataset, else ``None``.

    A dataset file is read and, under the native protocol, sent to the model endpoint: a link
    to ``/etc/passwd`` or ``~/.ssh`` (or an ``image/`` directory that links to ``/etc``) would
    ship that file off the machine. Links that stay inside the dataset are fine, and so is a
    path that names no file (nothing can be sent; other checks say whether it must exist).
    """
    if not os.path.isfile(path):  # also False for NUL-bearing or unencodable names
        return None
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return None
    return None if inside(real, root_real) else real


class _Checker:
    """Collects problems for one file while walking its structure."""

    def __init__(self, file: str, problems: list[DatasetProblem]) -> None:
        self.file = file
        self.problems = problems

    def add(self, query: str | None, where: str | None, message: str) -> None:
        self.problems.append(DatasetProblem(self.file, query, where, message))

    def param(self, query: str | None, where: str, raw: Any, kind: str) -> ToolParam | None:
        if not isinstance(raw, dict):
            self.add(query, where, f"must be an object, got {type(raw).__name__}")
            return None
        allowed = INPUT_TYPES if kind == "input" else OUTPUT_TYPES
        ptype = raw.get("type")
        if ptype not in allowed:
            self.add(query, f"{where}.type", f"{ptype!r} is not one of {', '.join(allowed)}")
            return None
        name = raw.get("name")
        if kind == "input" and (not isinstance(name, str) or not name):
            self.add(query, f"{where}.name", "an input needs a non-empty string name")
            return None
        description = raw.get("description")
        if description is not None and not isinstance(description, str):
            self.add(query, f"{where}.description", "must be a string or null")
            return None
        return ToolParam(
            type=str(ptype),
            name=name if isinstance(name, str) else None,
            description=description,
            optional=bool(raw.get("optional", False)),
            default=raw.get("default"),
            filetype=raw.get("filetype"),
        )

    def meta(self, query: str | None, where: str, raw: Any) -> ToolMeta | None:
        if not isinstance(raw, dict):
            self.add(query, where, f"a tool meta must be an object, got {type(raw).__name__}")
            return None
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            self.add(query, f"{where}.name", "a tool needs a non-empty string name")
            return None
        description = raw.get("description")
        if not isinstance(description, str):
            self.add(query, f"{where}.description", f"tool {name!r} needs a string description")
            return None
        params: dict[str, list[ToolParam]] = {}
        ok = True
        for kind in ("inputs", "outputs"):
            items = raw.get(kind)
            if not isinstance(items, list):
                self.add(query, f"{where}.{kind}", f"tool {name!r} needs a list of {kind}")
                ok = False
                continue
            parsed = [
                self.param(query, f"{where}.{kind}[{i}]", item, kind[:-1])
                for i, item in enumerate(items)
            ]
            if any(p is None for p in parsed):
                ok = False
            params[kind] = [p for p in parsed if p is not None]
        if not ok:
            return None
        names = [p.name for p in params["inputs"]]
        if len(set(names)) != len(names):
            self.add(query, f"{where}.inputs", f"tool {name!r} repeats an input name")
            return None
        return ToolMeta(name, description, tuple(params["inputs"]), tuple(params["outputs"]))


def _check_alias_groups(
    check: _Checker, warn: _Checker, qid: str, where: str, groups: list[Any]
) -> bool:
    """Alias groups must be lists of strings; empty ones are odd but scored, so only warned."""
    ok = True
    for i, group in enumerate(groups):
        if not isinstance(group, list) or not all(isinstance(a, str) for a in group):
            check.add(qid, f"{where}[{i}]", "must be a list of alias strings")
            ok = False
        elif not group or not all(group):
            # The official regex turns an empty alternative into r"\b(?:)\b", which matches
            # almost any text: scored as the official evaluator would, but worth a look.
            warn.add(qid, f"{where}[{i}]", "has an empty alias or no alias: it matches any word")
    return ok


def _check_gt_answer(check: _Checker, warn: _Checker, qid: str, gt: Any) -> bool:
    if gt is None:
        return True
    if isinstance(gt, list):
        if not all(isinstance(s, str) for s in gt):
            check.add(qid, "gt_answer", "a subjective answer must be a list of reference strings")
            return False
        if not gt:
            warn.add(qid, "gt_answer", "no reference answers: the query is never counted")
        return True
    if not isinstance(gt, dict):
        check.add(
            qid,
            "gt_answer",
            f"must be an object with whitelist/blacklist, a list of reference answers, or null; "
            f"got {type(gt).__name__}",
        )
        return False
    ok = True
    whitelist = gt.get("whitelist")
    if not isinstance(whitelist, list):
        check.add(qid, "gt_answer.whitelist", "must be a list of alias groups")
        ok = False
    else:
        if not whitelist:
            warn.add(qid, "gt_answer.whitelist", "is empty: every answer counts as correct")
        ok = _check_alias_groups(check, warn, qid, "gt_answer.whitelist", whitelist) and ok
    if "blacklist" not in gt:
        # The official evaluator reads gt_answer["blacklist"] unconditionally.
        check.add(qid, "gt_answer.blacklist", "missing (use null or [] for none)")
        ok = False
    blacklist = gt.get("blacklist")
    if blacklist is not None:
        if not isinstance(blacklist, list):
            check.add(qid, "gt_answer.blacklist", "must be a list of alias groups, [] or null")
            ok = False
        else:
            ok = _check_alias_groups(check, warn, qid, "gt_answer.blacklist", blacklist) and ok
    extra = set(gt) - {"whitelist", "blacklist"}
    if extra:
        warn.add(qid, "gt_answer", f"unknown keys {sorted(extra)} are ignored")
    return ok


def _check_dialogs(
    check: _Checker,
    qid: str,
    dialogs: Any,
    tools: dict[str, ToolMeta],
    toolmeta: dict[str, ToolMeta],
    warnings: _Checker,
) -> bool:
    """Refuse what no loader can read; leave the release's quirks to :mod:`pytest_gta.quirks`.

    The official loader accepts a chain that ends on a tool's output or on a call nothing
    answered, a call that also carries text, and arguments a tool does not declare (its
    evaluator scores all of them), so those load and are named as quirks. What is refused is
    what breaks a read of the official loader or evaluator: a message that is not an object, a
    call without ``tool_calls[0].function.name``, a tool the query or toolmeta.json lacks, a
    tool message with no call before it, a second user message, an answer before the end.
    """
    if not isinstance(dialogs, list) or not dialogs:
        check.add(qid, "dialogs", "must be a non-empty list of messages")
        return False
    ok = True
    first = dialogs[0]
    if (
        not isinstance(first, dict)
        or first.get("role") != "user"
        or not isinstance(first.get("content"), str)
    ):
        check.add(qid, "dialogs[0]", "must be the user's question {role: user, content: str}")
        ok = False
    # The names the last call's tool_calls name: a tool message may answer any entry (only
    # tool_calls[0] is scored).
    pending: tuple[str, ...] | None = None
    for i, msg in enumerate(dialogs[1:], start=1):
        where = f"dialogs[{i}]"
        if not isinstance(msg, dict):
            check.add(qid, where, "must be an object")
            ok = False
            continue
        role = msg.get("role")
        if role == "assistant" and "tool_calls" in msg:
            calls = msg.get("tool_calls")
            if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
                check.add(qid, f"{where}.tool_calls", "must be a non-empty list of calls")
                ok = False
                continue
            function = calls[0].get("function")
            if not isinstance(function, dict):
                check.add(qid, f"{where}.tool_calls[0].function", "must be an object")
                ok = False
                continue
            name = function.get("name")
            args = function.get("arguments")
            if not isinstance(name, str):
                check.add(qid, f"{where}.tool_calls[0].function.name", "must be a string")
                ok = False
                continue
            if name not in tools:
                offered = ", ".join(tools) or "none"
                check.add(
                    qid,
                    f"{where}.tool_calls[0].function.name",
                    f"unknown tool {name!r}: not in this query's tools ({offered})",
                )
                ok = False
            elif name not in toolmeta:
                check.add(
                    qid,
                    f"{where}.tool_calls[0].function.name",
                    f"tool {name!r} is not described in toolmeta.json",
                )
                ok = False
            if not isinstance(args, dict | str):
                # A raw string is a quirk the official parser rejects (ARGS_ERROR); anything
                # else has no reading at all.
                check.add(
                    qid,
                    f"{where}.tool_calls[0].function.arguments",
                    f"must be an object (or a raw string), got {type(args).__name__}",
                )
                ok = False
            pending = tuple(
                str(c["function"].get("name"))
                for c in calls
                if isinstance(c, dict) and isinstance(c.get("function"), dict)
            )
        elif role == "tool":
            if pending is None:
                check.add(qid, where, "tool message without a preceding tool call")
                ok = False
            elif msg.get("name") not in pending:
                check.add(
                    qid,
                    f"{where}.name",
                    f"tool message for {msg.get('name')!r} does not match the call to "
                    f"{pending[0]!r}",
                )
                ok = False
            content = msg.get("content")
            if content is not None and (
                not isinstance(content, dict)
                or not isinstance(content.get("type"), str)
                or "content" not in content
            ):
                check.add(
                    qid,
                    f"{where}.content",
                    "must be {type: text|image, content: ...} or null",
                )
                ok = False
        elif role == "assistant":
            if not isinstance(msg.get("content"), str):
                # Nothing reads the reference answer text; only its position matters.
                warnings.add(qid, f"{where}.content", "the reference answer is not a string")
            if i != len(dialogs) - 1:
                check.add(qid, where, "the final answer must be the last message")
                ok = False
        elif role == "user":
            check.add(qid, where, "GTA queries have one user message; found another")
            ok = False
        else:
            check.add(qid, f"{where}.role", f"unknown role {role!r}")
            ok = False
    return ok


def _check_link(
    check: _Checker, qid: str, where: str, rel: str, root: Path, root_real: str
) -> bool:
    """Refuse a dataset path whose symlinks lead out of the dataset (see :func:`_escape`)."""
    real = _escape(root_real, root / rel)
    if real is None:
        return True
    check.add(
        qid,
        where,
        f"{rel!r} leads out of the dataset directory (to {real}); copy the file into "
        f"{root} instead of linking to it",
    )
    return False


def _check_image_outputs(
    check: _Checker, qid: str, dialogs: Any, root: Path, root_real: str
) -> bool:
    """Reference image outputs are shown to vision models too: confine them like the files."""
    ok = True
    for i, msg in enumerate(dialogs if isinstance(dialogs, list) else ()):
        if not isinstance(msg, dict) or msg.get("role") != "tool":
            continue
        content = msg.get("content")
        if not isinstance(content, dict) or content.get("type") != "image":
            continue
        if isinstance(content.get("content"), str):
            where = f"dialogs[{i}].content.content"
            ok = _check_link(check, qid, where, content["content"], root, root_real) and ok
    return ok


def dataset_sha256(root: Path) -> str:
    """Identify a dataset version by the sha256 of its ``dataset.json``."""
    return sha256_file(root / "dataset.json")


def load_dataset(root: str | os.PathLike[str]) -> Dataset:
    """Load and validate a dataset directory.

    Raises:
        DatasetError: listing every problem (file, query, field) when the data is unusable.
    """
    root_path = Path(root).absolute()
    problems: list[DatasetProblem] = []
    warnings: list[DatasetProblem] = []
    if not root_path.is_dir():
        raise DatasetError(
            root_path,
            [DatasetProblem(str(root_path), None, None, "is not a directory")],
        )

    meta_dups: list[str] = []
    raw_meta = _read_json(root_path / "toolmeta.json", problems, meta_dups)
    toolmeta: dict[str, ToolMeta] = {}
    meta_check = _Checker("toolmeta.json", problems)
    for key in meta_dups:
        meta_check.add(None, key, "tool described twice")
    if raw_meta is not None:
        if not isinstance(raw_meta, dict):
            meta_check.add(None, None, "must be an object keyed by tool name")
        else:
            deep_tools = _refuse_deep(meta_check, raw_meta, keyed_by_query=False)
            for key, value in raw_meta.items():
                if key in deep_tools:
                    continue
                meta = meta_check.meta(None, key, value)
                if meta is None:
                    continue
                if meta.name != key:
                    meta_check.add(None, f"{key}.name", f"{meta.name!r} does not match its key")
                    continue
                toolmeta[key] = meta

    data_dups: list[str] = []
    raw = _read_json(root_path / "dataset.json", problems, data_dups)
    check = _Checker("dataset.json", problems)
    warn = _Checker("dataset.json", warnings)
    queries: dict[str, Query] = {}
    if raw is not None and not isinstance(raw, dict):
        check.add(None, None, "must be an object keyed by query id")
        raw = None
    for key in data_dups:
        check.add(key, None, "query id appears twice")
    if raw is not None and not raw:
        check.add(None, None, "holds no queries")
    deep_queries = _refuse_deep(check, raw, keyed_by_query=True) if raw else set()
    root_real = os.path.realpath(root_path)
    for position, (qid, item) in enumerate((raw or {}).items()):
        if qid in deep_queries:
            continue
        if not isinstance(item, dict):
            check.add(qid, None, f"must be an object, got {type(item).__name__}")
            continue
        missing = [k for k in ("tools", "files", "dialogs", "gt_answer") if k not in item]
        if missing:
            check.add(qid, None, f"missing field(s) {', '.join(missing)}")
            continue
        ok = True
        metas: dict[str, ToolMeta] = {}
        listed: list[str] = []
        if not isinstance(item["tools"], list) or not item["tools"]:
            check.add(qid, "tools", "must be a non-empty list of tool metas")
            ok = False
        else:
            for i, raw_tool in enumerate(item["tools"]):
                meta = check.meta(qid, f"tools[{i}]", raw_tool)
                if meta is None:
                    ok = False
                else:
                    # A tool listed twice is offered once (a quirk; see pytest_gta.quirks).
                    listed.append(meta.name)
                    metas.setdefault(meta.name, meta)
        files: list[FileRef] = []
        if not isinstance(item["files"], list):
            check.add(qid, "files", "must be a list of {type, path, url}")
            ok = False
        else:
            for i, raw_file in enumerate(item["files"]):
                where = f"files[{i}]"
                if not isinstance(raw_file, dict) or not isinstance(raw_file.get("path"), str):
                    check.add(qid, where, "must be an object with a string path")
                    ok = False
                    continue
                rel = raw_file["path"]
                target = (root_path / rel).absolute()
                if Path(rel).is_absolute() or ".." in Path(rel).parts:
                    check.add(qid, f"{where}.path", f"{rel!r} must be relative to the dataset root")
                    ok = False
                elif not target.is_file():
                    check.add(qid, f"{where}.path", f"missing file {rel!r} (looked at {target})")
                    ok = False
                else:
                    ok = _check_link(check, qid, f"{where}.path", rel, root_path, root_real) and ok
                files.append(FileRef(str(raw_file.get("type", "image")), rel, raw_file.get("url")))
        dialogs_ok = _check_dialogs(check, qid, item["dialogs"], metas, toolmeta, warn)
        outputs_ok = _check_image_outputs(check, qid, item["dialogs"], root_path, root_real)
        gt_ok = _check_gt_answer(check, warn, qid, item["gt_answer"])
        if not (ok and dialogs_ok and outputs_ok and gt_ok):
            continue
        queries[qid] = Query(
            qid=qid,
            position=position,
            tools=tuple(metas.values()),
            files=tuple(files),
            dialogs=tuple(item["dialogs"]),
            gt_answer=item["gt_answer"],
            listed_tools=tuple(listed),
        )
    if problems:
        raise DatasetError(root_path, problems)
    return Dataset(
        root=root_path,
        queries=queries,
        toolmeta=toolmeta,
        sha256=dataset_sha256(root_path),
        warnings=warnings,
    )
