"""The one option table: every feature's rows in ``--help`` order, registered and resolved.

Each feature module of :mod:`pytest_gta.options` owns its rows, parsers and ranges; this module
only puts them together. :data:`HELP_ORDER` is the order ``pytest --help`` lists the options in
(and docs/options.md's table), kept as it was when the options lived in one table.
"""

from __future__ import annotations

import pytest

from pytest_gta import flags
from pytest_gta.options import (
    agents,
    baseline,
    budget,
    cases,
    comparison,
    data,
    gates,
    mcp,
    model,
    report,
    scoring,
    serving,
    stats,
    tools,
    workflow,
)
from pytest_gta.options.core import Feature, OptionSpec, Resolved, register, resolve

#: Every feature, each with its rows and (most) its part of the settings.
FEATURES: tuple[Feature, ...] = (
    model.FEATURE,
    data.FEATURE,
    mcp.FEATURE,
    cases.FEATURE,
    tools.FEATURE,
    scoring.FEATURE,
    report.FEATURE,
    budget.FEATURE,
    comparison.FEATURE,
    stats.FEATURE,
    baseline.FEATURE,
    gates.FEATURE,
    serving.FEATURE,
    agents.FEATURE,
    workflow.FEATURE,
)
#: The options as ``pytest --help`` lists them.
HELP_ORDER: tuple[str, ...] = (
    flags.OPT_MODEL,
    flags.OPT_DATA,
    flags.OPT_DATA_DIR,
    flags.OPT_DOWNLOAD,
    flags.OPT_DOWNLOAD_URL,
    flags.OPT_ALLOW_UNVERIFIED,
    flags.OPT_RECORD_MANIFEST,
    flags.OPT_DATA_INFO,
    flags.OPT_MCP_SERVE,
    flags.OPT_MCP_TRANSPORT,
    flags.OPT_MCP_QUERY,
    flags.OPT_MCP_PORT,
    flags.OPT_MODE,
    flags.OPT_TOOLS,
    flags.OPT_SIM_MODEL,
    flags.OPT_SIM_THRESHOLD,
    flags.OPT_REPORT,
    flags.OPT_REPORT_MD,
    flags.OPT_REPORT_HTML,
    flags.OPT_REPORT_HTML_MAX_MB,
    flags.OPT_INSPECT_LOG,
    flags.OPT_LABEL,
    flags.OPT_LIMIT,
    flags.OPT_IDS,
    flags.OPT_ONLY,
    flags.OPT_RECORDED_ROOT,
    flags.OPT_MAX_TURNS,
    flags.OPT_BASE_URL,
    flags.OPT_SERVED_MODEL,
    flags.OPT_MODEL_ARGS,
    flags.OPT_TEMPERATURE,
    flags.OPT_MAX_TOKENS,
    flags.OPT_SEED,
    flags.OPT_PROTOCOL,
    flags.OPT_TIMEOUT,
    flags.OPT_MAX_REPLY_BYTES,
    flags.OPT_RETRIES,
    flags.OPT_MAX_CONCURRENCY,
    flags.OPT_CONCURRENCY,
    flags.OPT_CACHE,
    flags.OPT_CACHE_DIR,
    flags.OPT_EPOCH,
    flags.OPT_EPOCHS,
    flags.OPT_MAX_TOKENS_TOTAL,
    flags.OPT_MAX_COST,
    flags.OPT_TOOL_CASSETTES,
    flags.OPT_TOOL_RECORD,
    flags.OPT_TOOL_FAULTS,
    flags.OPT_TOOLS_WITHOUT,
    flags.OPT_TOOLS_NONE,
    flags.OPT_PRICE,
    flags.OPT_SHARD,
    flags.OPT_MERGE,
    flags.OPT_COMPARE,
    flags.OPT_COMPARE_REF,
    flags.OPT_LEADERBOARD_ROWS,
    flags.OPT_CONFIDENCE,
    flags.OPT_BOOTSTRAP_SAMPLES,
    flags.OPT_BASELINE,
    flags.OPT_BASELINE_LENIENT,
    flags.OPT_RERUN_REGRESSIONS,
    flags.OPT_FAIL_UNDER,
    flags.OPT_FAIL_ON_REGRESSION,
    flags.OPT_ALPHA,
    flags.OPT_MIN_DROP,
    flags.OPT_SANDBOX,
    flags.OPT_SERVE,
    flags.OPT_SERVE_COMMAND,
    flags.OPT_SERVE_TIMEOUT,
    flags.OPT_AGENT,
    flags.OPT_AGENT_COMMAND,
    flags.OPT_AGENT_ENV,
    flags.OPT_AGENT_TIMEOUT,
    flags.OPT_AGENT_NETWORK,
    flags.OPT_AGENT_IN_PROCESS,
    flags.OPT_REQUIRE_ISOLATION,
    flags.OPT_EVALPACK_ROOT,
    flags.OPT_JUDGE,
    flags.OPT_JUDGE_BASE_URL,
    flags.OPT_JUDGE_API,
    flags.OPT_JUDGE_THRESHOLD,
    flags.OPT_JUDGE_TIMEOUT,
)
_BY_FLAG: dict[str, OptionSpec] = {spec.flag: spec for f in FEATURES for spec in f.rows}
#: Every option, in ``--help`` order.
OPTIONS: tuple[OptionSpec, ...] = tuple(_BY_FLAG[flag] for flag in HELP_ORDER)
OPTIONS_BY_DEST: dict[str, OptionSpec] = {spec.dest: spec for spec in OPTIONS}
#: The allowed range of every numeric option, both ends included (docs/options.md lists them).
#: Wide enough for any real run, narrow enough that no value can exhaust the machine.
RANGES: dict[str, tuple[float, float]] = {
    flag: bounds for f in FEATURES for flag, bounds in f.ranges.items()
}


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``--gta-*`` options and their ini twins under one group."""
    register(parser, OPTIONS)


def resolve_option(config: pytest.Config, dest: str) -> Resolved:
    """Option ``dest`` resolved CLI > environment > ini > default, parsed and checked."""
    return resolve(config, OPTIONS_BY_DEST[dest])
