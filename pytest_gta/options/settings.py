"""The run's settings: one frozen part per feature, resolved once in ``pytest_configure``.

:class:`GtaSettings` holds no option of its own: each feature module of
:mod:`pytest_gta.options` owns its part (``settings.model.generation``, ``settings.report.html``,
``settings.agent.timeout``, ...), and :func:`resolve_settings` builds the parts from the rows'
resolved values, then the ones with rules of their own (the data, the baseline, the agent).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_gta.gates import GateSettings
from pytest_gta.options import (
    agents,
    baseline,
    budget,
    cases,
    comparison,
    data,
    gates,
    model,
    report,
    scoring,
    serving,
    stats,
    tools,
    workflow,
)
from pytest_gta.options.agents import AgentSettings
from pytest_gta.options.baseline import BaselineSettings
from pytest_gta.options.budget import BudgetSettings
from pytest_gta.options.cases import CaseSettings
from pytest_gta.options.comparison import ComparisonSettings
from pytest_gta.options.core import resolve
from pytest_gta.options.data import DataSettings
from pytest_gta.options.model import ModelSettings
from pytest_gta.options.report import ReportSettings
from pytest_gta.options.scoring import ScoringSettings
from pytest_gta.options.serving import ServeSettings
from pytest_gta.options.stats import StatsSettings
from pytest_gta.options.table import OPTIONS
from pytest_gta.options.tools import ToolSettings
from pytest_gta.options.workflow import WorkflowSettings
from pytest_gta.outward import register_run_secrets


@dataclass(frozen=True)
class GtaSettings:
    """The resolved ``--gta-*`` settings of a session, one part per feature."""

    #: Where pytest was started: what relative paths of the command line are relative to.
    invocation_dir: Path
    data: DataSettings
    model: ModelSettings = field(default_factory=ModelSettings)
    cases: CaseSettings = field(default_factory=CaseSettings)
    tools: ToolSettings = field(default_factory=ToolSettings)
    scoring: ScoringSettings = field(default_factory=ScoringSettings)
    report: ReportSettings = field(default_factory=ReportSettings)
    budget: BudgetSettings = field(default_factory=BudgetSettings)
    comparison: ComparisonSettings = field(default_factory=ComparisonSettings)
    stats: StatsSettings = field(default_factory=StatsSettings)
    baseline: BaselineSettings = field(default_factory=BaselineSettings)
    gates: GateSettings = field(default_factory=GateSettings)
    serve: ServeSettings = field(default_factory=ServeSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    workflow: WorkflowSettings = field(default_factory=WorkflowSettings)

    @property
    def active(self) -> bool:
        """Whether a model was given, i.e. GTA cases are collected automatically."""
        return self.model.name is not None


def resolve_settings(config: pytest.Config) -> GtaSettings:
    """CLI > environment > ini > default, parsed and checked once, for every feature's part.

    The rows are resolved in ``--help`` order, so with several bad values the first one listed
    is the error; then the data, the agent and the Inspect AI logs are checked.
    """
    given = {spec.dest: resolve(config, spec) for spec in OPTIONS if spec.setting}
    chosen = model.settings(given)
    selected = cases.settings(given)
    compared_with = baseline.settings(config, given)
    dataset = data.settings(config, chosen.name)
    agent = agents.settings(config, given, selected.modes, chosen.name)
    outputs = report.settings(given)
    report.check_inspect_log(outputs.inspect_log)
    chosen_tools = tools.settings(given, selected.modes)
    chosen_gates = gates.settings(given)
    gates.check_robustness(chosen_gates, chosen_tools.faults is not None)
    return GtaSettings(
        invocation_dir=config.invocation_params.dir,
        data=dataset,
        model=chosen,
        cases=selected,
        tools=chosen_tools,
        scoring=scoring.settings(given),
        report=outputs,
        budget=budget.settings(given),
        comparison=comparison.settings(given),
        stats=stats.settings(given),
        baseline=compared_with,
        gates=chosen_gates,
        serve=serving.settings(given),
        agent=agent,
        workflow=workflow.settings(config, given),
    )


def configure_settings(config: pytest.Config) -> GtaSettings:
    """The session's settings (``pytest_configure``), every credential they carry registered.

    The command line's first: before anything can print or write one, credentials in URLs of
    any argument or variable are secrets; then the base URL's and the model arguments' own.
    """
    register_run_secrets(config.invocation_params.args)
    settings = resolve_settings(config)
    generation = settings.model.generation
    register_run_secrets([generation.base_url or ""], generation.model_args)
    return settings
