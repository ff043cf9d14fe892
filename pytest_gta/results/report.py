"""The run's report (``pytest-gta-report/1``): what ``--gta-report`` writes, typed by section.

:class:`RunReport` is the report as the session builds it, ``pytest_gta_update_report`` changes
it, the renderers show it, and ``--gta-merge``, ``--gta-baseline`` and ``--gta-compare`` read it
back (:mod:`pytest_gta.results.io`). Its JSON is this class's fields in this order; the JSON
Schema published in docs/schema/ is generated from these classes. A hook's own fields live in
:attr:`RunReport.hook_fields` (written at the report's top level, after the known ones), so
everything else stays typed.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import MISSING, AfterValidator, Field, JsonValue, model_validator

from pytest_gta.provenance import label_problem, parse_utc
from pytest_gta.results.base import Doc, Extensible, JsonObject, Number, PerMode, omitted
from pytest_gta.results.case import CaseResult
from pytest_gta.results.erratum import ErratumUse
from pytest_gta.results.primitives import ErrorCounts
from pytest_gta.results.robustness import RobustnessSection

__all__ = [
    "SCHEMA",
    "SCHEMA_FAMILY",
    "AgentSettings",
    "BaselineComparison",
    "Budget",
    "ByType",
    "CallCounts",
    "DatasetInfo",
    "E2EDenominators",
    "E2EIntervals",
    "E2EMetrics",
    "E2ESpread",
    "Flipped",
    "FlippedCase",
    "FloorVerdict",
    "GatesVerdict",
    "GitInfo",
    "Identity",
    "Interval",
    "LeaderboardRow",
    "MergeInfo",
    "MetricComparison",
    "OutcomeCounts",
    "Quirk",
    "RegressionVerdict",
    "RunReport",
    "RunSettings",
    "RunUsage",
    "SandboxSummary",
    "ShardInfo",
    "Spread",
    "StepDenominators",
    "StepIntervals",
    "StepMetrics",
    "StepSpread",
    "TypeStats",
]

#: The version this code writes and reads; another is refused, a newer one named as such.
SCHEMA = "pytest-gta-report/1"
#: What every report's schema starts with (a file without it is not a report of ours).
SCHEMA_FAMILY = "pytest-gta-report/"


# --------------------------------------------------------------------------------------------
# Who ran what


def check_commit(value: str) -> str:
    """A git object name: 40 hex digits (64 in a SHA-256 repository)."""
    if len(value) not in (40, 64) or any(c not in "0123456789abcdef" for c in value):
        raise ValueError("not a git commit (40 or 64 lower-case hex digits)")
    return value


class GitInfo(Doc):
    """The commit of the project under test (the repository around the rootdir)."""

    commit: Annotated[str, AfterValidator(check_commit)]
    """40 hex digits (64 in a SHA-256 repository)."""
    short: str = Field(min_length=1)
    dirty: bool | None
    """Tracked files differed from the commit (``null``: ``git status`` did not answer in time)."""
    branch: str | None
    """``null``: a detached HEAD."""

    @model_validator(mode="after")
    def _short_of_commit(self) -> GitInfo:
        if not self.commit.startswith(self.short):
            raise ValueError(f"short {self.short!r} is not an abbreviation of the commit")
        return self


def check_label(value: str) -> str:
    """A run's label: one visible line of text (``ValueError`` says why not)."""
    problem = label_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def check_date(value: str) -> str:
    """An ISO 8601 date with its time zone."""
    if parse_utc(value) is None:
        raise ValueError("not an ISO 8601 date with a time zone")
    return value


#: A run's label: one visible line (tables set labels side by side).
RunLabel = Annotated[str, AfterValidator(check_label)]
#: A date as reports write it: ISO 8601 with a time zone (``2026-02-01T03:04:05Z``).
UtcDate = Annotated[str, AfterValidator(check_date)]


class Identity(Doc):
    """What tells this run from the others a team keeps (``--gta-compare`` orders by it)."""

    label: RunLabel
    """``--gta-label``, else ``MODEL [PROTOCOL]`` or ``MODEL [agent AGENT]``."""
    label_given: bool
    """Whether the label was given (``--gta-label``) rather than made up."""
    model: str
    protocol: str | None
    """``react`` or ``native``; ``null`` with an agent under test, which talks to its model its
    own way."""
    agent: str | None
    """The agent under test (its callable or command); ``null``: the project's own loop."""
    git: GitInfo | None
    started_at: UtcDate | None
    """ISO 8601 UTC (``null`` only in an identity filled in for an old report)."""
    finished_at: UtcDate | None
    dataset_sha256: str
    pytest_gta: str | None
    """The pytest-gta version that ran (``null``: an old report that did not say)."""


class LeaderboardRow(Doc):
    """An official leaderboard row, as numbers (percent)."""

    model: str
    board: str
    inst_acc: Number | None = omitted()
    tool_acc: Number | None = omitted()
    arg_acc: Number | None = omitted()
    summ_acc: Number | None = omitted()
    p_f1: Number | None = omitted()
    o_f1: Number | None = omitted()
    l_f1: Number | None = omitted()
    c_f1: Number | None = omitted()
    ans_acc: Number | None = omitted()
    ans_acc_img: Number | None = omitted()

    def get(self, metric: str) -> Number | None:
        """A metric's published value by name (``None``: the row has none)."""
        value = getattr(self, metric, None) if metric not in ("model", "board") else None
        return value if isinstance(value, int | float) else None


class RunUsage(Doc):
    """The run's model usage: token totals, cost and model time."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    calls: int = Field(ge=0)
    cached_calls: int = Field(ge=0)
    cost_usd: Number | None = Field(ge=0)
    """USD of the calls not served from the cache (``null``: no prices known)."""
    model_s: Number | MISSING = Field(default=MISSING, ge=0)
    """Seconds the cases waited on the model (the cases' ``model_s``; absent in reports written
    before it was measured)."""


class ShardInfo(Doc):
    """``--gta-shard``'s selection: which cases this job ran of the split."""

    spec: str
    """``K/N``."""
    index: int = Field(ge=1)
    total: int = Field(ge=1)
    selected: int
    """Cases selected before the split."""
    cases: list[str]
    """This shard's case ids."""


class Quirk(Doc):
    """A quirk of the dataset that the run's queries met (docs/dataset.md)."""

    kind: str
    title: str
    scoring: str
    """How the harness scores such a query."""
    queries: list[str]
    details: list[str]
    replay_fails: dict[str, list[str]]
    """Per mode, the queries whose reference replay cannot pass because of it."""


class DatasetInfo(Doc):
    """Which data the run scored, and what it holds."""

    path: str
    sha256: str
    """sha256 of the dataset's ``dataset.json``."""
    queries: int
    selected: int
    """Queries of the run's selection."""
    source: str
    """How the dataset was found (an option, the installed one, the bundled sample)."""
    install: JsonObject | None
    """What ``--gta-download`` recorded when it installed the dataset."""
    statistics: JsonObject
    """The dataset's counts (docs/dataset.md)."""
    quirks: list[Quirk]
    erratum: ErratumUse | None = omitted()
    """The erratum the run's queries were checked against (absent in older reports)."""


# --------------------------------------------------------------------------------------------
# How it ran


class SandboxSummary(Doc):
    """Where model-written code ran, and whether its results are isolated from the answers."""

    mode: JsonValue
    isolated: JsonValue
    not_isolated: JsonValue
    summary: JsonValue


def agent_title(name: str) -> str:
    """An agent's callable or command as a table shows it: short.

    Paths become their last part and a command's placeholders are left out:
    ``examples/openai_agents_agent.py:agent`` is ``openai_agents_agent.py:agent``,
    ``.venv/bin/python examples/cli_agent.py {mcp_url} {query_file}`` is ``python cli_agent.py``.
    """
    words = [w for w in name.split() if not (w.startswith("{") and w.endswith("}"))]
    return " ".join(w.rstrip("/").rsplit("/", 1)[-1] or w for w in words) or name


class ProbeFinding(Doc):
    """One thing the start-up probe tried inside the agents' sandbox, and what it got."""

    check: str
    held: bool
    """Whether the sandbox held: the attempt failed (or, for a service, succeeded)."""
    detail: str


class AgentIsolation(Doc):
    """How the agent under test was isolated from the harness (docs/agents.md, "Isolation")."""

    mechanism: str
    """``bubblewrap``, ``namespaces``, ``plain`` (none) or ``in-process``."""
    isolated: bool
    """False when any gap could let the agent read the answers, the keys or other cases."""
    network: str
    """``--gta-agent-network``: ``case`` or ``open``."""
    guarantees: list[str]
    gaps: list[str]
    attempts: list[str] = Field(default_factory=list)
    """What was tried and not used, and why: where the agent is not isolated, the reason (each
    mechanism and its error); where it is, a slower way taken (a sandbox started per case)."""
    probe: list[ProbeFinding] = Field(default_factory=list)
    """What the start-up probe tried in the agents' very sandbox (empty: no probe ran)."""


class AgentSettings(Doc):
    """The agent under test and how it runs."""

    name: str
    kind: Literal["python", "command"]
    timeout: Number
    env: list[str] = Field(default_factory=list)
    """The environment variables ``--gta-agent-env`` passes on (names only)."""
    isolation: AgentIsolation | None = omitted()
    """How the agent was isolated (absent in reports written before isolation existed)."""


class Budget(Doc):
    """The session's stops: ``--gta-max-tokens-total`` and ``--gta-max-cost``."""

    max_tokens_total: int | None
    max_cost: Number | None


class RunSettings(Doc):
    """How the run ran and scored (what a baseline must share, what a merge checks)."""

    modes: list[Literal["step", "e2e"]]
    tools: str | None
    """``--gta-tools`` when tool backends took part."""
    tool_routes: dict[str, str] | None
    """Which backend serves each tool (``a > b``: b gets what a has no recording of)."""
    tool_backends: dict[str, JsonObject] | None
    """What each tool backend says about itself."""
    sandbox: SandboxSummary | None
    sim_model: str | None
    sim_threshold: Number | None
    limit: int | None = Field(ge=0)
    ids: list[str] | None
    max_turns: int | None
    shard: str | None
    """``--gta-shard``'s ``K/N``."""
    generation: JsonObject | None
    """Generation settings when the model generates (never a secret)."""
    server: JsonObject | None
    """The managed model server (``--gta-serve``): command, URL, log, start time."""
    agent: AgentSettings | None
    budget: Budget | None
    pytest_gta: str
    """The pytest-gta version that ran."""
    tool_faults: str | None = omitted()
    """``--gta-tool-faults`` in its canonical form (absent: no faults injected)."""
    tools_left_out: list[str] | None = omitted()
    """The tools ``--gta-tools-without`` or ``--gta-tools-none`` left out (absent: none)."""


# --------------------------------------------------------------------------------------------
# The numbers


class StepMetrics(Doc):
    """Table 4, step-by-step mode (percent; ``null``: no denominator)."""

    inst_acc: Number | None
    tool_acc: Number | None
    arg_acc: Number | None
    summ_acc: Number | None
    tool_call: Number | None
    tool_call_error: Number | None


class E2EMetrics(Doc):
    """Table 4, end-to-end mode (percent; ``null``: no denominator)."""

    ans_acc: Number | None
    ans_acc_img: Number | None
    p_f1: Number | None
    o_f1: Number | None
    l_f1: Number | None
    c_f1: Number | None
    tool_call: Number | None
    tool_call_error: Number | None


class NoMetrics(Doc):
    """An empty object: no case of the mode finished without an error."""


class Interval(Doc):
    """A bootstrap interval (``low``/``high`` ``null`` where it cannot be computed)."""

    low: float | None
    high: float | None
    level: float
    method: str


class StepIntervals(Doc):
    """The step-mode metrics' intervals, and the pass rate's."""

    inst_acc: Interval
    tool_acc: Interval
    arg_acc: Interval
    summ_acc: Interval
    pass_rate: Interval


class E2EIntervals(Doc):
    """The end-to-end metrics' intervals, and the pass rate's."""

    ans_acc: Interval
    ans_acc_img: Interval
    p_f1: Interval
    o_f1: Interval
    l_f1: Interval
    c_f1: Interval
    pass_rate: Interval


class Spread(Doc):
    """A metric over the epochs of a repeated run."""

    std: float
    min: float
    max: float
    epochs: int


class StepSpread(Doc):
    """Each step-mode metric's spread over epochs (``null``: never measured)."""

    inst_acc: Spread | None
    tool_acc: Spread | None
    arg_acc: Spread | None
    summ_acc: Spread | None
    tool_call: Spread | None
    tool_call_error: Spread | None


class E2ESpread(Doc):
    """Each end-to-end metric's spread over epochs (``null``: never measured)."""

    ans_acc: Spread | None
    ans_acc_img: Spread | None
    p_f1: Spread | None
    o_f1: Spread | None
    l_f1: Spread | None
    c_f1: Spread | None
    tool_call: Spread | None
    tool_call_error: Spread | None


class CallCounts(Doc):
    """Predicted tool calls that succeeded and failed (Figure 6)."""

    successful: int
    failed: int


class StepDenominators(Doc):
    """What the step-mode percentages are of."""

    queries: int
    answer_queries: int
    reference_tool_calls: int
    reference_steps: int


class E2EDenominators(Doc):
    """What the end-to-end percentages are of."""

    queries: int
    answer_queries: int
    reference_tool_calls: int


class OutcomeCounts(Doc):
    """Cases by outcome."""

    passed: int
    failed: int
    error: int
    skipped: int

    def get(self, outcome: str) -> int:
        """The count of ``outcome`` (0 for an unknown one)."""
        return int(getattr(self, outcome, 0)) if outcome in OUTCOME_NAMES else 0


OUTCOME_NAMES = ("passed", "failed", "error", "skipped")


class TypeStats(Doc):
    """The cases of one query type."""

    cases: int
    passed: int
    mean_score: float


ByType = dict[str, TypeStats]


# --------------------------------------------------------------------------------------------
# Against a baseline, and the gates


class MetricComparison(Doc):
    """One metric against the baseline over the matched queries."""

    baseline: Number | None
    this: Number | None
    difference: Number | None
    ci: Interval
    p_value: float | None
    p_drop: float | None
    """One-sided p-value of "this run is worse"."""
    test: str


class FlippedCase(Doc):
    """A query whose pass rate changed against the baseline."""

    id: str
    mode: Literal["step", "e2e"]
    query_id: str
    baseline_pass_rate: float
    pass_rate: float
    outcomes: list[str]
    nodeids: list[str]


class Flipped(Doc):
    """The queries that regressed and those that were fixed, in dataset order."""

    regressed: list[FlippedCase]
    fixed: list[FlippedCase]


class MatchedCases(Doc):
    """How many queries both runs have, and how many only one."""

    matched: int
    only_this_run: int
    only_baseline: int


class BaselineComparison(Doc):
    """The run against ``--gta-baseline`` (a report, paired; or a leaderboard row, unpaired)."""

    kind: Literal["report", "leaderboard"]
    baseline: str
    """The baseline as given (a path, or ``leaderboard:NAME``)."""
    baseline_model: str | None
    board: str | MISSING | None = MISSING
    """The board of a leaderboard baseline."""
    paired: bool
    level: float
    methods: dict[str, str]
    cases: PerMode[MatchedCases, MatchedCases]
    differences: list[str]
    """How the baseline's run differs, where ``--gta-baseline-lenient`` let it through."""
    metrics: PerMode[dict[str, MetricComparison], dict[str, MetricComparison]]
    flipped: Flipped


class FloorVerdict(Doc):
    """``--gta-fail-under``: a metric against its floor."""

    gate: Literal["fail_under"]
    metric: str
    floor: float
    value: float | None
    passed: bool
    reason: str


class RegressionVerdict(Doc):
    """``--gta-fail-on-regression``: a metric's drop against the baseline."""

    gate: Literal["fail_on_regression"]
    metric: str
    difference: float | MISSING | None = MISSING
    """Points of change (absent where the metric could not be compared)."""
    p_drop: float | MISSING | None = MISSING
    passed: bool
    reason: str


class GatesVerdict(Doc):
    """The gates' verdict: it and the harness errors decide the exit status (SPEC section 7)."""

    passed: bool
    alpha: float
    min_drop: float
    verdicts: list[FloorVerdict | RegressionVerdict]


class MergeInfo(Doc):
    """``--gta-merge``: the reports merged and the shards they were."""

    reports: list[str]
    shards: list[str]


# --------------------------------------------------------------------------------------------
# The report


class RunReport(Extensible):
    """The run's report (see the module docstring)."""

    schema_: str = Field(alias="schema")
    """``pytest-gta-report/1``."""
    benchmark: Literal["gta-atomic"] = "gta-atomic"
    """The task family the run is of (a GTA-Workflow report says ``gta-workflow``); the one
    reader (:func:`pytest_gta.results.io.parse_any_report`) reads each kind by it, and
    ``--gta-merge``, ``--gta-baseline`` and ``--gta-compare`` refuse to mix kinds. Absent in a
    report written before pytest-gta ran another benchmark (read as ``gta-atomic``)."""
    model: str
    protocol: str
    label: RunLabel
    """The run's label (``identity.label``, unless a hook renamed the run)."""
    identity: Identity
    leaderboard: LeaderboardRow | None
    """The model's newest official row, printed beside the run."""
    usage: RunUsage
    stopped: str | None
    """Why the session stopped early (a budget), if it did."""
    interrupted: bool
    interrupted_by: str | None
    timings: dict[str, dict[str, Number]] | None
    """Seconds spent loading and generating ahead, per process."""
    shard: ShardInfo | None
    dataset: DatasetInfo
    settings: RunSettings
    metrics: PerMode[StepMetrics, E2EMetrics]
    """Table 4 (the mean over epochs in a repeated run); errored cases count as wrong."""
    metrics_ci: PerMode[StepIntervals, E2EIntervals]
    metrics_excluding_errors: PerMode[StepMetrics | NoMetrics, E2EMetrics | NoMetrics]
    metrics_sound: PerMode[StepMetrics | NoMetrics, E2EMetrics | NoMetrics] | None = omitted()
    """Table 4 again, by the same formulas, over the cases whose query the erratum does not name
    (``dataset.erratum``): beside ``metrics``, never instead (absent in older reports)."""
    pass_rate: PerMode[float, float]
    """Percent of the mode's cases that passed."""
    epochs: int
    metrics_by_epoch: PerMode[dict[str, StepMetrics], dict[str, E2EMetrics]]
    metrics_spread: PerMode[StepSpread, E2ESpread]
    query_pass_rates: PerMode[dict[str, float], dict[str, float]]
    """Per query, the share of its epochs that passed (repeated runs)."""
    errors: PerMode[ErrorCounts, ErrorCounts]
    """Table 5: errored calls by class."""
    tool_calls: PerMode[CallCounts, CallCounts]
    denominators: PerMode[StepDenominators, E2EDenominators]
    denominators_sound: PerMode[StepDenominators, E2EDenominators] | None = omitted()
    """What ``metrics_sound``'s percentages are of (absent in older reports)."""
    outcomes: OutcomeCounts
    outcomes_by_mode: PerMode[OutcomeCounts, OutcomeCounts]
    by_type: PerMode[ByType, ByType]
    notes: list[str]
    cases: list[CaseResult]
    merged: MergeInfo | None = omitted()
    comparison: BaselineComparison | None = omitted()
    gates: GatesVerdict | None = omitted()
    robustness: RobustnessSection | None = omitted()
    """The tool faults the run's cases met (``--gta-tool-faults``; absent: none injected)."""
    duration_s: float | None = omitted()
    """Seconds the session took (a merged report has none)."""

    @property
    def title(self) -> str:
        """How the tables name the run: ``MODEL [agent NAME]`` or ``MODEL [PROTOCOL]``.

        An agent under test talks to its model its own way: the protocol the model would have
        been asked in is not the run's (:func:`agent_title` shortens the agent's name).
        """
        agent = self.settings.agent
        if agent is not None and agent.name:
            return f"{self.model} [agent {agent_title(agent.name)}]"
        return f"{self.model} [{self.protocol}]"

    def run_identity(self) -> Identity:
        """What identifies the run: its ``identity``, under the report's ``label``.

        A hook may have renamed the run, and the label is what every table shows.
        """
        if self.label == self.identity.label:
            return self.identity
        return self.identity.model_copy(update={"label": self.label})
