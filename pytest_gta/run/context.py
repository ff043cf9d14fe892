"""What running the cases of one process needs, handed to the run layer as one object.

The session (:class:`pytest_gta.session.state.GtaState`) builds the dataset, the model, the tool
backends and the scorer on first use and knows the settings; the run layer is given the parts
it uses in a :class:`RunContext`, so an episode, the pool that runs episodes ahead and the
batches before the loop never reach back up into the session, and a test builds one directly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_gta.dataset import Dataset, Query
from pytest_gta.models.base import BaseModelAdapter, BaseRecordedSource
from pytest_gta.models.generation import GenerationSettings
from pytest_gta.run.agent_under_test import Agent, Gateway, Proxy
from pytest_gta.run.loops import MAX_TURNS
from pytest_gta.tools import ToolSet
from pytest_gta.vocabulary import DEFAULT_AGENT_TIMEOUT, Mode

if TYPE_CHECKING:
    from pytest_gta.results.case import Verdict
    from pytest_gta.scoring.metrics import E2ECaseScore, StepCaseScore
    from pytest_gta.scoring.similarity import Similarity


def needs_similarity(query: Query, mode: Mode) -> bool:
    """Whether scoring this case embeds text: subjective answers, image queries end to end."""
    return query.type == "subjective" or (mode == "e2e" and query.type == "image")


class Scores(Protocol):
    """What the run layer asks of a scorer (:class:`pytest_gta.run.runner.Scorer`).

    A protocol rather than the class, so that this light module does not import NumPy and the
    scoring formulas on the plugin's import path.
    """

    def similarity(self) -> Similarity:
        """The similarity model (loaded on first call)."""
        ...

    def score(
        self,
        mode: Mode,
        query: Query,
        predictions: list[dict[str, Any]],
        gold: list[dict[str, Any]],
    ) -> tuple[StepCaseScore | E2ECaseScore, Verdict]:
        """The case's metric primitives and its verdict."""
        ...


@dataclass(frozen=True)
class RunContext:
    """Everything the run layer reads: built parts and the settings' values, nothing more."""

    dataset: Dataset
    #: The model under evaluation (an adapter, or a source of recorded predictions).
    model: BaseModelAdapter | BaseRecordedSource
    scorer: Scores
    #: The tool backends; ``None`` where none take part (step mode only, recorded predictions).
    tools: ToolSet | None
    #: Where tools write the files they produce (one directory per process).
    output_dir: Path
    #: ``--gta-max-turns``.
    max_turns: int = MAX_TURNS
    #: Episodes a process runs at once: ``--gta-concurrency``, else the model's own.
    concurrency: int = 1
    #: A token or cost budget is set (``--gta-max-tokens-total``, ``--gta-max-cost``): work
    #: runs in pytest's order, so the calls the budget paid for belong to the reported cases.
    budgeted: bool = False
    #: ``--gta-sim-model``, as progress lines name it.
    sim_model: str = ""
    #: In an xdist worker, the indices of the session's items queued for it so far (it learns
    #: its cases as the controller sends them); ``None`` in a process that runs every item.
    queued: Callable[[], Sequence[int]] | None = None
    #: The agent under test (``--gta-agent``, ``--gta-agent-command``); ``None``: the project's
    #: own loop drives the model.
    agent: Agent | None = None
    #: ``--gta-agent-timeout``: seconds one case's agent may run.
    agent_timeout: float = DEFAULT_AGENT_TIMEOUT
    #: The process's MCP gateway and recording model proxy, started on first use by the
    #: session (``None`` from ``proxy``: recorded predictions, with no model to ask).
    gateway: Callable[[], Gateway] | None = None
    proxy: Callable[[], Proxy | None] | None = None
    #: The run's generation settings (what an agent's task says of temperature and tokens).
    generation: GenerationSettings | None = None
    #: Where the agent's deliverables land (GTA-Workflow cases); ``None``: none are kept.
    deliverables_dir: Path | None = None

    @property
    def worker(self) -> bool:
        """Whether this process is an xdist worker, which never batches its cases ahead."""
        return self.queued is not None
