"""Every ``--gta-*`` flag's name, defined once (the core layer: any module may name a flag).

The option table (:mod:`pytest_gta.options`) registers each of these, and every message that
names an option (a model's usage error, a report's note, a tool backend's hint) takes its
name from here, so a rename is one line. ``tests/test_flags.py`` refuses a ``--gta-...``
literal in any other module's code. Grouped by the feature module of :mod:`pytest_gta.options`
that owns the option.
"""

from __future__ import annotations

# -- the model under evaluation and how it generates (options/model.py) -------------------------
OPT_MODEL = "--gta-model"
OPT_RECORDED_ROOT = "--gta-recorded-root"
OPT_BASE_URL = "--gta-base-url"
OPT_SERVED_MODEL = "--gta-served-model"
OPT_MODEL_ARGS = "--gta-model-args"
OPT_TEMPERATURE = "--gta-temperature"
OPT_MAX_TOKENS = "--gta-max-tokens"
OPT_SEED = "--gta-seed"
OPT_PROTOCOL = "--gta-protocol"
OPT_TIMEOUT = "--gta-timeout"
OPT_MAX_REPLY_BYTES = "--gta-max-reply-bytes"
OPT_RETRIES = "--gta-retries"
OPT_MAX_CONCURRENCY = "--gta-max-concurrency"
OPT_CACHE = "--gta-cache"
OPT_CACHE_DIR = "--gta-cache-dir"
OPT_EPOCH = "--gta-epoch"

# -- the dataset and the data commands (options/data.py) ---------------------------------------
OPT_DATA = "--gta-data"
OPT_DATA_DIR = "--gta-data-dir"
OPT_DOWNLOAD = "--gta-download"
OPT_DOWNLOAD_URL = "--gta-download-url"
OPT_ALLOW_UNVERIFIED = "--gta-allow-unverified"
OPT_RECORD_MANIFEST = "--gta-record-manifest"
OPT_DATA_INFO = "--gta-data-info"

# -- GTA's tools over MCP (options/mcp.py) -------------------------------------------------------
OPT_MCP_SERVE = "--gta-mcp-serve"
OPT_MCP_TRANSPORT = "--gta-mcp-transport"
OPT_MCP_QUERY = "--gta-mcp-query"
OPT_MCP_PORT = "--gta-mcp-port"

# -- which cases run, how often, how long, how many at once (options/cases.py) --------------------
OPT_MODE = "--gta-mode"
OPT_LIMIT = "--gta-limit"
OPT_IDS = "--gta-ids"
OPT_ONLY = "--gta-only"
OPT_MAX_TURNS = "--gta-max-turns"
OPT_CONCURRENCY = "--gta-concurrency"
OPT_EPOCHS = "--gta-epochs"
OPT_SHARD = "--gta-shard"

# -- tool backends, cassettes and the sandbox (options/tools.py) ----------------------------------
OPT_TOOLS = "--gta-tools"
OPT_TOOL_CASSETTES = "--gta-tool-cassettes"
OPT_TOOL_RECORD = "--gta-tool-record"
OPT_SANDBOX = "--gta-sandbox"
OPT_TOOL_FAULTS = "--gta-tool-faults"
OPT_TOOLS_WITHOUT = "--gta-tools-without"
OPT_TOOLS_NONE = "--gta-tools-none"

# -- scoring (options/scoring.py) -----------------------------------------------------------------
OPT_SIM_MODEL = "--gta-sim-model"
OPT_SIM_THRESHOLD = "--gta-sim-threshold"

# -- the run's outputs (options/report.py) -------------------------------------------------------
OPT_REPORT = "--gta-report"
OPT_REPORT_MD = "--gta-report-md"
OPT_REPORT_HTML = "--gta-report-html"
OPT_REPORT_HTML_MAX_MB = "--gta-report-html-max-mb"
OPT_INSPECT_LOG = "--gta-inspect-log"
OPT_LABEL = "--gta-label"

# -- the session's budget (options/budget.py) ----------------------------------------------------
OPT_MAX_TOKENS_TOTAL = "--gta-max-tokens-total"
OPT_MAX_COST = "--gta-max-cost"
OPT_PRICE = "--gta-price"

# -- merging shards and comparing runs (options/comparison.py) -----------------------------------
OPT_MERGE = "--gta-merge"
OPT_COMPARE = "--gta-compare"
OPT_COMPARE_REF = "--gta-compare-ref"
OPT_LEADERBOARD_ROWS = "--gta-leaderboard-rows"

# -- intervals and tests (options/stats.py) ------------------------------------------------------
OPT_CONFIDENCE = "--gta-confidence"
OPT_BOOTSTRAP_SAMPLES = "--gta-bootstrap-samples"

# -- the baseline (options/baseline.py) ----------------------------------------------------------
OPT_BASELINE = "--gta-baseline"
OPT_BASELINE_LENIENT = "--gta-baseline-lenient"
OPT_RERUN_REGRESSIONS = "--gta-rerun-regressions"

# -- the gates (options/gates.py) ----------------------------------------------------------------
OPT_FAIL_UNDER = "--gta-fail-under"
OPT_FAIL_ON_REGRESSION = "--gta-fail-on-regression"
OPT_ALPHA = "--gta-alpha"
OPT_MIN_DROP = "--gta-min-drop"

# -- one model server for the session (options/serving.py) ---------------------------------------
OPT_SERVE = "--gta-serve"
OPT_SERVE_COMMAND = "--gta-serve-command"
OPT_SERVE_TIMEOUT = "--gta-serve-timeout"

# -- the agent under test (options/agents.py) ----------------------------------------------------
OPT_AGENT = "--gta-agent"
OPT_AGENT_COMMAND = "--gta-agent-command"
OPT_AGENT_ENV = "--gta-agent-env"
OPT_AGENT_TIMEOUT = "--gta-agent-timeout"
OPT_AGENT_NETWORK = "--gta-agent-network"
OPT_AGENT_IN_PROCESS = "--gta-agent-in-process"
OPT_REQUIRE_ISOLATION = "--gta-require-isolation"

# -- GTA-Workflow's checkpoint judge (options/workflow.py) ---------------------------------------
OPT_EVALPACK_ROOT = "--gta-evalpack-root"
OPT_JUDGE = "--gta-judge"
OPT_JUDGE_BASE_URL = "--gta-judge-base-url"
OPT_JUDGE_API = "--gta-judge-api"
OPT_JUDGE_THRESHOLD = "--gta-judge-threshold"
OPT_JUDGE_TIMEOUT = "--gta-judge-timeout"


def dest(flag: str) -> str:
    """The argparse dest and ini key of ``flag`` (``--gta-x-y``: ``gta_x_y``)."""
    return flag.removeprefix("--").replace("-", "_")
