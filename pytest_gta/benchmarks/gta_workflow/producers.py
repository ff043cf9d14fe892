"""Producing a GTA-Workflow deliverable by running something: the project's loop or an agent.

Both reuse the atomic run's machinery unchanged: a task is shown to it as an end-to-end query
(:func:`as_query`: the task's text and input files, every tool of ``toolmeta.json`` that a
backend offers), so the ReAct loop (Lagent's protocol, ``--gta-max-turns`` turns, 10 being the
official run's) and the agent under test (its sandbox, the MCP server, the model proxy) run it
as they run an atomic query. What the tools write lands in the case's own output directory;
those files and the run's final answer are the deliverable. The report keeps what the producer
did as an atomic case keeps it: the loop's turns and recorded steps, or the agent's run, its
server-side tool log and its model exchanges.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pytest_gta.case import Case
from pytest_gta.dataset import Dataset, FileRef, Query
from pytest_gta.errors import GtaUnavailableError
from pytest_gta.evalpack import DEVIATION
from pytest_gta.flags import OPT_AGENT, OPT_MODEL, OPT_TOOLS
from pytest_gta.run.benchmark import QueryView
from pytest_gta.run.episode import play
from pytest_gta.run.workflow import Deliverable, output_files
from pytest_gta.session.state import GtaState
from pytest_gta.tools import ToolSet
from pytest_gta.types import ToolMeta, ToolParam
from pytest_gta.workflow_data import WorkflowDataset, WorkflowTask


def _meta(raw: object) -> ToolMeta | None:
    """A tool's description from a ``toolmeta.json`` entry (an object, or a bare name)."""
    if isinstance(raw, str):
        return ToolMeta(raw, "", (), ())
    if not isinstance(raw, dict):
        return None
    name = raw.get("name") or raw.get("tool_name") or raw.get("id")
    if not name:
        return None
    params: dict[str, tuple[ToolParam, ...]] = {}
    for kind in ("inputs", "outputs"):
        items = raw.get(kind)
        found = []
        for item in items if isinstance(items, list) else ():
            if isinstance(item, dict) and isinstance(item.get("type"), str):
                found.append(
                    ToolParam(
                        type=str(item["type"]),
                        name=item.get("name") if isinstance(item.get("name"), str) else None,
                        description=str(item.get("description") or ""),
                        optional=bool(item.get("optional", False)),
                        default=item.get("default"),
                        filetype=item.get("filetype"),
                    )
                )
        params[kind] = tuple(found)
    return ToolMeta(
        str(name), str(raw.get("description") or ""), params["inputs"], params["outputs"]
    )


def as_query(task: WorkflowTask, metas: tuple[ToolMeta, ...], root: Path) -> Query:
    """The task as an end-to-end query: its prompt, its files, the offered tools, no reference."""
    files = tuple(
        FileRef(
            kind, str(Path(path).relative_to(root)) if Path(path).is_relative_to(root) else path
        )
        for kind, path in task.files
    )
    return Query(
        qid=task.task_id,
        position=0,
        tools=metas,
        files=files,
        dialogs=({"role": "user", "content": task.prompt},),
        gt_answer="",
        listed_tools=tuple(m.name for m in metas),
    )


def as_dataset(workflow: WorkflowDataset, offered: set[str] | None) -> Dataset:
    """The Workflow dataset as the atomic machinery reads one (tools limited to ``offered``)."""
    metas = tuple(m for m in map(_meta, workflow.toolmeta) if m is not None)
    if offered is not None:
        metas = tuple(m for m in metas if m.name in offered)
    queries = {t.task_id: as_query(t, metas, workflow.root) for t in workflow}
    # A task's tools name its own files only (pytest_gta.reach): no reference chain needs more.
    tools = {m.name: m for m in metas}
    return Dataset(workflow.root, queries, tools, sha256="", case_files_only=True)


class WorkflowProducers:
    """Runs the project's loop or the agent under test on a task, in the case's directory."""

    def __init__(self, state: GtaState) -> None:
        self.state = state
        self._offered: set[str] | None = None

    def view(self, workflow: WorkflowDataset) -> QueryView:
        """The tasks as queries (the tools: every one for the backends, the offered ones else).

        The tool backends are built seeing every tool ``toolmeta.json`` names (building them
        may read the dataset); the model and the agent are offered only those a backend offers
        (none without a backend).
        """

        def offered(toolset: ToolSet | None) -> Dataset:
            backends = toolset.backends if toolset is not None else []
            self._offered = {n for n in workflow.tools if any(b.offers(n) for b in backends)}
            return as_dataset(workflow, self._offered)

        return QueryView(every=as_dataset(workflow, None), offered=offered)

    def check(self) -> None:
        """A model or an agent is there to run the tasks (``--gta-model``'s own checks)."""
        if self.state.settings.model.name is None:
            raise pytest.UsageError(f"{OPT_MODEL} is needed to run GTA-Workflow tasks")

    def producer(self, from_pack: bool) -> str:
        """What produces the deliverables: ``evalpack``, ``agent`` or ``model``."""
        if from_pack:
            return "evalpack"
        return "agent" if self.state.settings.agent.spec is not None else "model"

    def header_lines(self, from_pack: bool) -> list[str]:
        """Where deliverables come from."""
        if from_pack:
            return [
                "gta: deliverables from the eval pack (nothing runs; the judge scores them)",
                f"gta: {DEVIATION}",
            ]
        agent = self.state.settings.agent.spec
        if agent is not None:
            return [f"gta: deliverables from the agent under test {agent} ({OPT_AGENT})"]
        offered = sorted(self._offered or ())
        return [
            "gta: deliverables from the project's ReAct loop (Lagent protocol, "
            f"{self.state.settings.cases.max_turns} turns); tools offered: "
            f"{', '.join(offered) or 'none'} ({OPT_TOOLS})"
        ]

    def produce(
        self, task: WorkflowTask, epoch: int, workdir: Path, workflow: WorkflowDataset
    ) -> Deliverable:
        """Run the task; the deliverable is the final answer and the files in ``workdir``."""
        dataset = self.state.dataset()
        query = dataset.queries[task.task_id]
        ctx = dataclasses.replace(
            self.state.run_context(), output_dir=workdir, deliverables_dir=workdir / "deliverables"
        )
        if ctx.tools is None and ctx.agent is None:
            raise GtaUnavailableError(f"a GTA-Workflow run needs tool backends ({OPT_TOOLS})")
        (workdir / "deliverables").mkdir(exist_ok=True)
        model = self.state.model()
        played = play(Case("e2e", query, epoch), ctx, model)  # type: ignore[arg-type]
        predictions = played.episode.predictions
        returns = [p for p in predictions if isinstance(p, dict) and p.get("role") == "tool"]
        tools: list[str] = []
        for p in predictions:
            for call in p.get("tool_calls", ()) if isinstance(p, dict) else ():
                name = call.get("function", {}).get("name") if isinstance(call, dict) else None
                if isinstance(name, str) and name not in tools:
                    tools.append(name)
        usage = played.usage
        agent = played.agent
        return Deliverable(
            origin_prompt=[task.prompt],
            trace=predictions,
            files=output_files(workdir),
            tree=task.tree,
            producer="agent" if ctx.agent is not None else "model",
            tool_calls=len(returns),
            tool_call_errors=sum(1 for r in returns if r.get("content") is None),
            tools=tools,
            usage=usage,
            replies=[turn.reply for turn in played.episode.turns],
            agent=None if agent is None else agent.outcome.to_json(),
            tool_log=None if agent is None else agent.tool_log,
            exchanges=None if agent is None else agent.exchanges,
            faults=played.fault_entries(),
        )
