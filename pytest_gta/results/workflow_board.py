"""The published GTA-Workflow boards: ``leaderboard_workflow.csv`` and ``leaderboard_harness.csv``.

The April 2026 (GTA-2) board has two Workflow tables, transcribed by hand from the authors'
figure (open-compass/GTA at 37c2b60, ``figs/leaderboard_gta2.jpg``): Table VI, one row per model
with the columns of :class:`~pytest_gta.results.workflow.WorkflowTable`, and Table VII, agent
harnesses on a 30-task subset with Root Score, Leaf SR, Root SR, time and cost. Both ship in the
package beside the atomic ``leaderboard.csv`` and are read here into typed rows; a file with a
missing column, a row of the wrong width or a value that is not a number is refused with the
file, line and column.

A row is chosen by name (:func:`select_rows`, :func:`find_row`): a board (``2026-04``: every
row of its Workflow table), a model (its newest Workflow row, case-insensitive), a harness
(``openclaw``: its newest harness row) or ``harness`` (every harness row of the newest board).
"""

from __future__ import annotations

import csv
import difflib
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from pytest_gta.errors import GtaUsageError
from pytest_gta.results.base import Doc, omitted

HERE = Path(__file__).resolve().parent.parent
WORKFLOW_CSV = HERE / "leaderboard_workflow.csv"
HARNESS_CSV = HERE / "leaderboard_harness.csv"
#: The table's columns, in the board's order (percentages; Root Score 0-10).
METRICS = ("tool_sr", "p_sr", "o_sr", "l_sr", "c_sr", "root_score", "leaf_sr", "root_sr")
WORKFLOW_HEADER = ("board", "table", "model", "group", *METRICS)
HARNESS_METRICS = ("root_score", "leaf_sr", "root_sr")
HARNESS_HEADER = (
    "board",
    "table",
    "harness",
    "model",
    "comparison",
    "tasks",
    *HARNESS_METRICS,
    "total_time_min",
    "total_cost_usd",
    "score_per_cost",
)
#: ``--gta-leaderboard-rows=harness``: every harness row of the newest board.
HARNESS = "harness"


class WorkflowColumns(Doc):
    """The GTA-2 board's Workflow columns (percentages; root score 0-10), ``None`` where unknown.

    A run's table and a published row have them alike, so the renderers read either.
    """

    tool_sr: float | None
    p_sr: float | None
    o_sr: float | None
    l_sr: float | None
    c_sr: float | None
    root_score: float | None
    """The mean root score (a run's: the official mean over the tasks the judge scored)."""
    leaf_sr: float | None
    root_sr: float | None


class WorkflowBoardRow(WorkflowColumns):
    """One published row: a model's Workflow table, or a harness's (Table VII)."""

    board: str
    """The board, ``YYYY-MM``."""
    table: Literal["workflow", "harness"]
    model: str
    harness: str | None = omitted()
    """The agent harness (harness rows)."""
    group: str | None = omitted()
    """``open`` or ``closed`` weights (model rows); ``controlled`` or ``system`` (harness rows)."""
    tasks: int | None = omitted()
    """The tasks the row is over, where the board says (harness rows: a 30-task subset)."""
    total_time_min: float | None = omitted()
    total_cost_usd: float | None = omitted()
    extra: dict[str, float] = Field(default_factory=dict, exclude_if=lambda v: not v)
    """Other published numbers of the row (``score_per_cost``)."""

    @property
    def label(self) -> str:
        """How tables name it: ``MODEL@BOARD``, ``HARNESS/MODEL@BOARD`` for a harness row."""
        name = f"{self.harness}/{self.model}" if self.harness else self.model
        return f"{name}@{self.board}"

    def value(self, metric: str) -> float | None:
        """A column by name (``root_score``)."""
        found = getattr(self, metric, None)
        return float(found) if isinstance(found, int | float) else None


@dataclass(frozen=True)
class WorkflowBoards:
    """Both tables, oldest board first."""

    models: tuple[WorkflowBoardRow, ...]
    harnesses: tuple[WorkflowBoardRow, ...]

    @property
    def boards(self) -> list[str]:
        """The boards, oldest first."""
        return sorted({r.board for r in (*self.models, *self.harnesses)})


def _number(path: Path, line: int, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise GtaUsageError(
            f"{path}:{line}: column {column} is {text!r}, not a non-negative number"
        )
    return value


def _rows(path: Path, header: Sequence[str], table: str) -> list[dict[str, str]]:
    """The file's rows, each checked for the header's width and its ``table``; line numbers."""
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            lines = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise GtaUsageError(f"{path}: not a readable leaderboard CSV ({exc})") from None
    if not lines or tuple(c.strip() for c in lines[0]) != tuple(header):
        got = ",".join(lines[0]) if lines else "(empty file)"
        raise GtaUsageError(f"{path}:1: the header must be {','.join(header)}; it is {got}")
    rows = []
    for number, cells in enumerate(lines[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise GtaUsageError(
                f"{path}:{number}: {len(cells)} values for the header's {len(header)} columns"
            )
        row = {k: v.strip() for k, v in zip(header, cells, strict=True)}
        if row["table"] != table or not row["board"] or not row["model"]:
            raise GtaUsageError(
                f"{path}:{number}: a {table} row needs a board, table={table} and a model"
            )
        row["_line"] = str(number)
        rows.append(row)
    return rows


def read_boards(workflow: Path = WORKFLOW_CSV, harness: Path = HARNESS_CSV) -> WorkflowBoards:
    """Read and check both tables.

    Raises:
        GtaUsageError: a missing or unreadable file, a header without the board's columns, a
            row of the wrong width, a value that is not a number, or a row given twice; the
            message names the file and line.
    """
    models: dict[tuple[str, str], WorkflowBoardRow] = {}
    for row in _rows(workflow, WORKFLOW_HEADER, "workflow"):
        line = int(row["_line"])
        values = {m: _number(workflow, line, m, row[m]) for m in METRICS}
        key = (row["board"], row["model"].lower())
        if key in models:
            raise GtaUsageError(f"{workflow}:{line}: {row['model']} is on {row['board']} twice")
        models[key] = WorkflowBoardRow.model_validate(
            {
                "board": row["board"],
                "table": "workflow",
                "model": row["model"],
                "group": row["group"],
                **values,
            }
        )
    harnesses: dict[tuple[str, str], WorkflowBoardRow] = {}
    for row in _rows(harness, HARNESS_HEADER, "harness"):
        line = int(row["_line"])
        values = {m: _number(harness, line, m, row[m]) for m in HARNESS_METRICS}
        tasks = _number(harness, line, "tasks", row["tasks"])
        key = (row["board"], row["harness"].lower())
        if key in harnesses or not row["harness"]:
            raise GtaUsageError(
                f"{harness}:{line}: harness {row['harness']!r} is missing or on {row['board']} "
                "twice"
            )
        harnesses[key] = WorkflowBoardRow.model_validate(
            {
                "board": row["board"],
                "table": "harness",
                "model": row["model"],
                "harness": row["harness"],
                "group": row["comparison"],
                **dict.fromkeys(("tool_sr", "p_sr", "o_sr", "l_sr", "c_sr")),
                **values,
                "tasks": int(tasks),
                "total_time_min": _number(harness, line, "total_time_min", row["total_time_min"]),
                "total_cost_usd": _number(harness, line, "total_cost_usd", row["total_cost_usd"]),
                "extra": {
                    "score_per_cost": _number(
                        harness, line, "score_per_cost", row["score_per_cost"]
                    )
                },
            }
        )
    order = sorted(models, key=lambda k: k[0])
    return WorkflowBoards(
        models=tuple(models[k] for k in order),
        harnesses=tuple(harnesses[k] for k in sorted(harnesses, key=lambda k: k[0])),
    )


@functools.cache
def shipped_boards() -> WorkflowBoards:
    """The boards that ship in the package, read once."""
    return read_boards()


def _newest(rows: Sequence[WorkflowBoardRow], key: str) -> dict[str, WorkflowBoardRow]:
    newest: dict[str, WorkflowBoardRow] = {}
    for row in sorted(rows, key=lambda r: r.board):
        newest[(getattr(row, key) or "").lower()] = row
    return newest


def _unknown(option: str, name: str, boards: WorkflowBoards) -> GtaUsageError:
    known = [r.model for r in boards.models] + [r.harness or "" for r in boards.harnesses]
    lowered = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(lowered[c] for c in close)}?" if close else ""
    return GtaUsageError(
        f"{option}: {name!r} is neither a GTA-Workflow board nor a model or harness on one{hint} "
        f"(the boards: {', '.join(boards.boards)}; the models: "
        f"{', '.join(dict.fromkeys(r.model for r in boards.models))}; the harnesses: "
        f"{', '.join(dict.fromkeys(r.harness or '' for r in boards.harnesses))}, or {HARNESS} "
        "for all of them)"
    )


def select_rows(
    names: Sequence[str], option: str, boards: WorkflowBoards | None = None
) -> list[WorkflowBoardRow]:
    """The rows ``names`` choose, in that order, each once (see the module docstring).

    Raises:
        GtaUsageError: a name that is none of them, listing what there is.
    """
    boards = boards or shipped_boards()
    models, harnesses = _newest(boards.models, "model"), _newest(boards.harnesses, "harness")
    chosen: dict[str, WorkflowBoardRow] = {}
    for raw in names:
        name = raw.strip()
        if name in boards.boards:
            rows = [r for r in boards.models if r.board == name]
        elif name.lower() == HARNESS:
            newest = max((r.board for r in boards.harnesses), default="")
            rows = [r for r in boards.harnesses if r.board == newest]
        elif name.lower() in models:
            rows = [models[name.lower()]]
        elif name.lower() in harnesses:
            rows = [harnesses[name.lower()]]
        else:
            raise _unknown(f"{option}={name}", name, boards)
        for row in rows:
            chosen.setdefault(row.label, row)
    return list(chosen.values())


def find_row(spec: str, option: str, boards: WorkflowBoards | None = None) -> WorkflowBoardRow:
    """The one row ``NAME`` or ``NAME@BOARD`` names (a model or a harness).

    Raises:
        GtaUsageError: an unknown name, an unknown board, or a board without the name.
    """
    boards = boards or shipped_boards()
    name, at, board = (part.strip() for part in spec.partition("@"))
    rows = [
        r
        for r in (*boards.models, *boards.harnesses)
        if name.lower() in (r.model.lower(), (r.harness or "").lower())
        and (r.table == "workflow" or name.lower() == (r.harness or "").lower())
    ]
    if not rows:
        raise _unknown(option, name, boards)
    if not at:
        return max(rows, key=lambda r: r.board)
    for row in rows:
        if row.board == board:
            return row
    has = sorted({r.board for r in rows})
    raise GtaUsageError(
        f"{option}: {name} is not on a {board!r} GTA-Workflow board; it is on "
        f"{', '.join(has)} (write {name}@BOARD with one of those, or {name} for the newest)"
    )
