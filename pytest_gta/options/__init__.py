"""Command-line options, their ini twins, and the frozen settings they resolve to.

Every option is ``--gta-*`` with dest ``gta_*`` and, where a project would pin it, an ini key of
the same name; each flag's name is defined once, in :mod:`pytest_gta.flags`. One module per
feature owns its options: its :class:`~pytest_gta.options.core.OptionSpec` rows (help, parser,
default, range, docs row), its parsers and its frozen part of the settings:

- :mod:`.model`: the model and how it is called (:class:`~.model.ModelSettings`, with the
  :class:`~pytest_gta.models.generation.GenerationSettings`)
- :mod:`.data`: the dataset and the data commands (:class:`~.data.DataSettings`)
- :mod:`.mcp`: ``--gta-mcp-serve`` and its options (a command: no part)
- :mod:`.cases`: modes, selection, epochs, shards, turns, concurrency
  (:class:`~.cases.CaseSettings`)
- :mod:`.tools`: backends, cassettes, the sandbox (:class:`~.tools.ToolSettings`)
- :mod:`.scoring`: the similarity model and threshold (:class:`~.scoring.ScoringSettings`)
- :mod:`.report`: the outputs and the run's label (:class:`~.report.ReportSettings`)
- :mod:`.budget`: tokens, cost, prices (:class:`~.budget.BudgetSettings`)
- :mod:`.comparison`: ``--gta-merge``, ``--gta-compare`` (:class:`~.comparison.ComparisonSettings`)
- :mod:`.stats`: the intervals' level and resamples (:class:`~.stats.StatsSettings`)
- :mod:`.baseline`: the baseline (:class:`~.baseline.BaselineSettings`)
- :mod:`.gates`: the gates (:class:`pytest_gta.gates.GateSettings`)
- :mod:`.serving`: the managed model server (:class:`~.serving.ServeSettings`)
- :mod:`.agents`: the agent under test (:class:`~.agents.AgentSettings`)

:mod:`.core` is the machinery they share (the row, the parsers' helpers, CLI > environment >
ini > default resolution, path resolution); :mod:`.table` puts the rows in ``--help`` order,
registers and resolves them; :mod:`.settings` composes :class:`GtaSettings` from the parts;
:mod:`.doc` writes docs/options.md's tables from the rows.
"""

from __future__ import annotations

from pytest_gta.options.core import OptionSpec, Resolved, option_base, resolve_path
from pytest_gta.options.settings import GtaSettings, configure_settings, resolve_settings
from pytest_gta.options.table import (
    OPTIONS,
    OPTIONS_BY_DEST,
    RANGES,
    pytest_addoption,
    resolve_option,
)

__all__ = [
    "OPTIONS",
    "OPTIONS_BY_DEST",
    "RANGES",
    "GtaSettings",
    "OptionSpec",
    "Resolved",
    "configure_settings",
    "option_base",
    "pytest_addoption",
    "resolve_option",
    "resolve_path",
    "resolve_settings",
]
