"""Dataset statistics comparable with the paper's Table 3 and Figure 3.

A user who installed the data from a mirror, or filtered it, should see at a glance whether it
is the 229-query release: the same counts the paper publishes, computed from the files. A
query's *steps* are its reference tool calls (the paper's 2..8 histogram sums to its 728 calls);
its *tools* are the distinct tools of its reference chain; its *category combination* joins the
categories of those tools in the paper's order P, O, L, C.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from pytest_gta.vocabulary import CATEGORY_NAMES, QUERY_TYPES, tool_category

if TYPE_CHECKING:
    from pytest_gta.dataset import Dataset

#: Letters of Figure 3(b), in its order.
CATEGORY_LETTERS = {"perception": "P", "operation": "O", "logic": "L", "creativity": "C"}
_LETTER_ORDER = "POLC"

#: The published counts of GTA v1 (paper Table 3, Section 3.4, Figure 3(a); SPEC section 2).
PAPER: dict[str, Any] = {
    "queries": 229,
    "queries_by_type": {"objective": 156, "subjective": 16, "image": 57},
    "text_answer_queries": 172,
    "images": 252,
    "tool_calls": 728,
    "tools": 14,
    "steps_per_query": {"2": 44, "3": 130, "4": 36, "5": 13, "6": 2, "7": 3, "8": 1},
    "tools_per_query": {"1": 17, "2": 147, "3": 50, "4": 15},
}

#: The counts that must equal the paper's for data to pass as the release without a manifest.
RELEASE_KEYS = tuple(PAPER)


def _histogram(values: list[int]) -> dict[str, int]:
    counts = Counter(values)
    return {str(k): counts[k] for k in sorted(counts)}


def combination(categories: set[str]) -> str:
    """``P+L``-style name of a set of categories (``none`` for custom tools only)."""
    letters = sorted(
        (CATEGORY_LETTERS[c] for c in categories if c in CATEGORY_LETTERS), key=_LETTER_ORDER.index
    )
    return "+".join(letters) or "none"


def dataset_statistics(dataset: Dataset) -> dict[str, Any]:
    """The counts of ``dataset`` (JSON-ready; histogram keys are strings)."""
    queries = list(dataset)
    by_type = Counter(q.type for q in queries)
    steps: list[int] = []
    tools_per_query: list[int] = []
    combos: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    used_in: Counter[str] = Counter()
    distinct_files: set[str] = set()
    images = 0
    for query in queries:
        names = [call.name for call in query.calls]
        steps.append(len(names))
        distinct = set(names)
        tools_per_query.append(len(distinct))
        combos[combination({tool_category(n) for n in distinct})] += 1
        calls.update(names)
        used_in.update(distinct)
        for ref in query.files:
            images += ref.type == "image"
            distinct_files.add(ref.path)
    categories = Counter(tool_category(name) for name in calls.elements())
    return {
        "queries": len(queries),
        "queries_by_type": {t: by_type.get(t, 0) for t in QUERY_TYPES},
        "text_answer_queries": by_type.get("objective", 0) + by_type.get("subjective", 0),
        "images": images,
        "distinct_files": len(distinct_files),
        "tool_calls": sum(steps),
        "tools": len(calls),
        "toolmeta_tools": len(dataset.toolmeta),
        "steps_per_query": _histogram(steps),
        "tools_per_query": _histogram(tools_per_query),
        "category_combinations": dict(sorted(combos.items(), key=lambda kv: (-kv[1], kv[0]))),
        "calls_by_category": {c: categories.get(c, 0) for c in CATEGORY_NAMES},
        "tools_used": {
            name: {"calls": calls[name], "queries": used_in[name], "category": tool_category(name)}
            for name in sorted(calls, key=lambda n: (-calls[n], n))
        },
    }


def release_mismatches(stats: dict[str, Any]) -> list[str]:
    """How ``stats`` differ from the paper's published counts (empty: they all agree)."""
    return [
        f"{key}: {stats.get(key)!r} (paper: {PAPER[key]!r})"
        for key in RELEASE_KEYS
        if stats.get(key) != PAPER[key]
    ]


def _hist_line(hist: dict[str, int]) -> str:
    return "  ".join(f"{k}: {v}" for k, v in hist.items()) or "-"


def format_statistics(stats: dict[str, Any]) -> list[str]:
    """Lines for the terminal: the counts beside the paper's, then the distributions."""
    rows: list[tuple[str, str | tuple[str, str]]] = [
        ("queries", "queries"),
        ("  objective", ("queries_by_type", "objective")),
        ("  subjective", ("queries_by_type", "subjective")),
        ("  image generation", ("queries_by_type", "image")),
        ("queries with text answers", "text_answer_queries"),
        ("images (query files)", "images"),
        ("tool calls", "tool_calls"),
        ("tools used", "tools"),
    ]

    def get(source: dict[str, Any], key: str | tuple[str, str]) -> Any:
        if isinstance(key, tuple):
            return source.get(key[0], {}).get(key[1], "-")
        return source.get(key, "-")

    lines = [f"  {'':<28}{'this dataset':>14}{'paper':>8}"]
    for label, key in rows:
        lines.append(f"  {label:<28}{get(stats, key)!s:>14}{get(PAPER, key)!s:>8}")
    lines.append(f"  distinct input files: {stats['distinct_files']}")
    lines.append(f"  tools described in toolmeta.json: {stats['toolmeta_tools']}")
    lines.append(f"  steps per query:  {_hist_line(stats['steps_per_query'])}")
    lines.append(f"    paper:          {_hist_line(PAPER['steps_per_query'])}")
    lines.append(f"  tools per query:  {_hist_line(stats['tools_per_query'])}")
    lines.append(f"    paper:          {_hist_line(PAPER['tools_per_query'])}")
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
    return lines
