"""Dataset statistics comparable with the paper's Table 3 and Figure 3.

A user who installed the data from a mirror, or filtered it, should see at a glance whether it
is the 229-query release: the same counts the paper publishes, computed from the files, each
counting what the paper counts. Worked out on the real release:

- *steps* are what step mode scores: a query's reference tool calls plus its final answer when
  the query has a text answer. They total 728, the paper's "total tool calls" (Table 3, and
  Figure 6's "ground truth tool calls"); the tool calls proper are 557 (SPEC section 2).
- *tools per query* counts the query's ``tools`` list as written: query 47 lists TextToBbox
  twice, and only that count gives the paper's 17/147/50/15.
- *images* are the picture files of ``image/`` (252), the generated-image placeholder aside;
  the queries use 249 of them.

A query's *category combination* joins the categories of its chain's tools in the paper's
order P, O, L, C.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gta.quirks import GENERATED_IMAGE
from pytest_gta.vocabulary import CATEGORY_NAMES, QUERY_TYPES, tool_category

if TYPE_CHECKING:
    from pytest_gta.dataset import Dataset
    from pytest_gta.workflow_data import WorkflowDataset

#: Letters of Figure 3(b), in its order.
CATEGORY_LETTERS = {"perception": "P", "operation": "O", "logic": "L", "creativity": "C"}
_LETTER_ORDER = "POLC"
#: What counts as a picture in ``image/``.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")

#: The published counts of GTA v1 (paper Table 3, Section 3.4, Figure 3; SPEC section 2).
PAPER: dict[str, Any] = {
    "queries": 229,
    "queries_by_type": {"objective": 156, "subjective": 16, "image": 57},
    "text_answer_queries": 172,
    "images": 252,
    "steps": 728,
    "tools": 14,
    "steps_per_query": {"2": 44, "3": 130, "4": 36, "5": 13, "6": 2, "7": 3, "8": 1},
    "tools_per_query": {"1": 17, "2": 147, "3": 50, "4": 15},
}

#: The counts the paper and the real release count alike, all equal on the release: data that
#: reproduces them passes for the release where no manifest entry identifies it. (The paper's
#: step histogram is not among them: see :data:`RELEASE_DIFFERENCES`.)
PAPER_KEYS = (
    "queries",
    "queries_by_type",
    "text_answer_queries",
    "images",
    "steps",
    "tools",
    "tools_per_query",
)

#: sha256 of the real release's ``dataset.json`` (the files of ``../shared/gta_release``).
RELEASE_SHA256 = "a6ee050d7ba99d9777a2005fac9654eb8c88f890989b54f89b5bc2134287998e"

#: Why the real release differs from the paper where it does (checked against the release).
RELEASE_DIFFERENCES = {
    "steps_per_query": (
        "two queries fall one bin apart (same 229 queries, 2-8 steps, 728 in all): the "
        "paper's Figure 3(a) was counted on chains slightly different from the released ones"
    ),
}


def _histogram(values: list[int]) -> dict[str, int]:
    counts = Counter(values)
    return {str(k): counts[k] for k in sorted(counts)}


def combination(categories: set[str]) -> str:
    """``P+L``-style name of a set of categories (``none`` for custom tools only)."""
    letters = sorted(
        (CATEGORY_LETTERS[c] for c in categories if c in CATEGORY_LETTERS), key=_LETTER_ORDER.index
    )
    return "+".join(letters) or "none"


def image_files(dataset: Dataset) -> list[str]:
    """The pictures of ``image/``, dataset-relative and sorted.

    The generated-image placeholder is left aside: this is what the paper's "252 image files"
    counts.
    """
    folder = os.path.join(dataset.root_str, "image")
    found = []
    for path in dataset.all_files:
        if os.path.dirname(path) == folder and path.lower().endswith(IMAGE_SUFFIXES):
            relative = os.path.relpath(path, dataset.root_str).replace(os.sep, "/")
            if relative != GENERATED_IMAGE:
                found.append(relative)
    return sorted(found)


def dataset_statistics(dataset: Dataset) -> dict[str, Any]:
    """The counts of ``dataset`` (JSON-ready; histogram keys are strings)."""
    queries = list(dataset)
    by_type = Counter(q.type for q in queries)
    steps: list[int] = []
    calls_per_query: list[int] = []
    tools_per_query: list[int] = []
    combos: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    used_in: Counter[str] = Counter()
    referenced: set[str] = set()
    query_images = 0
    for query in queries:
        names = [call.name for call in query.calls]
        calls_per_query.append(len(names))
        final = query.dialogs[-1]
        answered = final.get("role") == "assistant" and "tool_calls" not in final
        steps.append(len(names) + int(bool(query.gt_answer) and answered))
        distinct = set(names)
        tools_per_query.append(len(query.listed_tools or query.tools))
        combos[combination({tool_category(n) for n in distinct})] += 1
        calls.update(names)
        used_in.update(distinct)
        for ref in query.files:
            query_images += ref.type == "image"
            referenced.add(ref.path)
    categories = Counter(tool_category(name) for name in calls.elements())
    pictures = image_files(dataset)
    return {
        "queries": len(queries),
        "queries_by_type": {t: by_type.get(t, 0) for t in QUERY_TYPES},
        "text_answer_queries": by_type.get("objective", 0) + by_type.get("subjective", 0),
        "images": len(pictures),
        "query_images": query_images,
        "distinct_files": len(referenced),
        "unused_images": [p for p in pictures if p not in referenced],
        "steps": sum(steps),
        "tool_calls": sum(calls_per_query),
        "tools": len(calls),
        "toolmeta_tools": len(dataset.toolmeta),
        "steps_per_query": _histogram(steps),
        "tool_calls_per_query": _histogram(calls_per_query),
        "tools_per_query": _histogram(tools_per_query),
        "category_combinations": dict(sorted(combos.items(), key=lambda kv: (-kv[1], kv[0]))),
        "calls_by_category": {c: categories.get(c, 0) for c in CATEGORY_NAMES},
        "tools_used": {
            name: {"calls": calls[name], "queries": used_in[name], "category": tool_category(name)}
            for name in sorted(calls, key=lambda n: (-calls[n], n))
        },
    }


def paper_mismatches(stats: dict[str, Any]) -> list[str]:
    """How ``stats`` differ from the paper on :data:`PAPER_KEYS` (empty: they all agree)."""
    return [
        f"{key}: {_shown(stats.get(key))} (paper: {_shown(PAPER[key])})"
        for key in PAPER_KEYS
        if stats.get(key) != PAPER[key]
    ]


def differences(stats: dict[str, Any], sha256: str | None = None) -> list[str]:
    """Every count that differs from the paper's, each with why where it is known.

    The reasons were established on the real release, so they are given for it alone
    (``sha256`` of its ``dataset.json``); other data gets the bare difference.
    """
    known = RELEASE_DIFFERENCES if sha256 == RELEASE_SHA256 else {}
    lines = []
    for key, paper in PAPER.items():
        if stats.get(key) == paper:
            continue
        here = _shown(stats.get(key))
        line = f"{key.replace('_', ' ')}: {here} here, {_shown(paper)} in the paper"
        lines.append(f"{line}: {known[key]}" if key in known else line)
    return lines


def _shown(value: Any) -> str:
    return _hist_line(value) if isinstance(value, dict) else str(value)


def _hist_line(hist: dict[str, int]) -> str:
    return "  ".join(f"{k}: {v}" for k, v in hist.items()) or "-"


def format_statistics(stats: dict[str, Any], sha256: str | None = None) -> list[str]:
    """Lines for the terminal: the counts beside the paper's, the distributions, the differences.

    ``sha256`` (of ``dataset.json``) says whether the data is the real release, whose
    differences from the paper are explained.
    """
    rows: list[tuple[str, str | tuple[str, str]]] = [
        ("queries", "queries"),
        ("  objective", ("queries_by_type", "objective")),
        ("  subjective", ("queries_by_type", "subjective")),
        ("  image generation", ("queries_by_type", "image")),
        ("queries with text answers", "text_answer_queries"),
        ("images (files in image/)", "images"),
        ("steps (calls + text answers)", "steps"),
        ("  tool calls", "tool_calls"),
        ("tools used", "tools"),
    ]

    def get(source: dict[str, Any], key: str | tuple[str, str]) -> Any:
        if isinstance(key, tuple):
            return source.get(key[0], {}).get(key[1], "-")
        return source.get(key, "-")

    lines = [f"  {'':<30}{'this dataset':>14}{'paper':>8}"]
    for label, key in rows:
        lines.append(f"  {label:<30}{get(stats, key)!s:>14}{get(PAPER, key)!s:>8}")
    lines.append(
        "  (the paper's 'total tool calls', 728, counts the steps: every reference tool call "
        "and each text answer)"
    )
    unused = stats.get("unused_images") or []
    lines.append(
        f"  images used by the queries: {stats['distinct_files']}"
        + (f" (no query uses {', '.join(unused)})" if unused else "")
    )
    lines.append(f"  tools described in toolmeta.json: {stats['toolmeta_tools']}")
    lines.append(f"  steps per query:       {_hist_line(stats['steps_per_query'])}")
    lines.append(f"    paper:               {_hist_line(PAPER['steps_per_query'])}")
    lines.append(f"  tool calls per query:  {_hist_line(stats['tool_calls_per_query'])}")
    lines.append(f"  tools per query:       {_hist_line(stats['tools_per_query'])}")
    lines.append(f"    paper:               {_hist_line(PAPER['tools_per_query'])}")
    lines.append(
        "  category combinations (P perception, O operation, L logic, C creativity): "
        + _hist_line(stats["category_combinations"])
    )
    lines.append(
        "  tool calls by category: "
        + "  ".join(f"{k}: {v}" for k, v in stats["calls_by_category"].items())
    )
    lines.append("  tools used (calls / queries):")
    for name, used in stats["tools_used"].items():
        lines.append(f"    {name:<28}{used['calls']:>5}{used['queries']:>6}  {used['category']}")
    found = differences(stats, sha256)
    lines.append(
        "  differences from the paper:" if found else "  every count above equals the paper's"
    )
    lines += [f"    {line}" for line in found]
    return lines


def tree_shape(tree: Any) -> tuple[int, int, int] | None:
    """(depth, leaves, nodes) of a checkpoint tree as the judge walks it; ``None``: not a tree.

    A list is the root's children, a lone node without ``sub_tasks`` the root's only child (as
    :func:`pytest_gta.judge.protocol.normalize_tree`); the root is depth 0 and not counted as a
    node, and an empty tree is one leaf, the root (the judge then scores the task itself).
    """
    if isinstance(tree, dict) and "sub_tasks" in tree:
        children: Any = tree["sub_tasks"]
    elif isinstance(tree, dict):
        children = [tree]
    else:
        children = tree
    if not isinstance(children, list):
        return None
    if not children:
        return 0, 1, 0
    depth = leaves = nodes = 0
    stack: list[tuple[Any, int]] = [(child, 1) for child in children]
    while stack:
        node, level = stack.pop()
        if not isinstance(node, dict):
            return None
        nodes += 1
        below = node.get("sub_tasks", [])
        if not isinstance(below, list):
            return None
        if below:
            stack.extend((child, level + 1) for child in below)
        else:
            leaves += 1
            depth = max(depth, level)
    return depth, leaves, nodes


def workflow_statistics(dataset: WorkflowDataset) -> dict[str, Any]:
    """What ``--gta-data-info`` shows of a GTA-Workflow dataset: tasks, files, tools, trees."""
    tasks: list[dict[str, Any]] = []
    suffixes: Counter[str] = Counter()
    called: Counter[str] = Counter()
    depths: list[int] = []
    leaves: list[int] = []
    missing: list[str] = []
    invalid: list[str] = []
    files: set[str] = set()
    for task in dataset:
        shape = tree_shape(task.tree)
        if shape is None:
            invalid.append(task.task_id)
        else:
            depths.append(shape[0])
            leaves.append(shape[1])
        for _kind, path in task.files:
            files.add(path)
            suffixes[Path(path).suffix.lower() or "(none)"] += 1
            if not Path(path).is_file():
                missing.append(f"{task.task_id}: {Path(path).relative_to(dataset.root)}")
        called.update(task.reference_tools)
        tasks.append(
            {
                "id": task.task_id,
                "files": len(task.files),
                "depth": None if shape is None else shape[0],
                "leaves": None if shape is None else shape[1],
                "checkpoints": None if shape is None else shape[2],
                "tools": list(task.reference_tools),
            }
        )
    return {
        "tasks": len(dataset),
        "files": sum(t["files"] for t in tasks),
        "distinct_files": len(files),
        "files_by_suffix": dict(sorted(suffixes.items())),
        "missing_files": missing,
        "tools": list(dataset.tools),
        "tools_called": dict(sorted(called.items())),
        "tree_depths": _histogram(depths),
        "leaves_per_task": _histogram(leaves),
        "leaves": sum(leaves),
        "invalid_trees": invalid,
        "per_task": tasks,
    }


def format_workflow_statistics(stats: dict[str, Any]) -> list[str]:
    """Lines for the terminal: a GTA-Workflow dataset's counts, then one line per task."""
    tools = stats["tools"]
    lines = [
        f"  tasks: {stats['tasks']}",
        f"  task files: {stats['files']} ({stats['distinct_files']} distinct; by suffix: "
        f"{_hist_line(stats['files_by_suffix'])})",
        f"  tools in toolmeta.json: {len(tools)}" + (f" ({', '.join(tools)})" if tools else ""),
        f"  tools the reference dialogs call (tasks): {_hist_line(stats['tools_called'])}",
        f"  checkpoint tree depths (tasks): {_hist_line(stats['tree_depths'])}",
        f"  leaves per task (tasks): {_hist_line(stats['leaves_per_task'])}; "
        f"{stats['leaves']} leaves in all, each judged once per task",
    ]
    if stats["missing_files"]:
        lines.append(f"  files named but missing: {', '.join(stats['missing_files'])}")
    if stats["invalid_trees"]:
        lines.append(
            "  trees the judge cannot walk (the task errors): " + ", ".join(stats["invalid_trees"])
        )
    lines.append(f"  {'task':<12}{'files':>6}{'depth':>7}{'leaves':>8}  tools called")
    for task in stats["per_task"]:
        depth = "-" if task["depth"] is None else task["depth"]
        leaves = "-" if task["leaves"] is None else task["leaves"]
        shown = ", ".join(task["tools"]) or "-"
        lines.append(f"  {task['id']:<12}{task['files']:>6}{depth!s:>7}{leaves!s:>8}  {shown}")
    return lines
