"""GTA-Workflow's judge: which model scores the checkpoints, how it is reached, the threshold.

Its part of the settings is :class:`WorkflowSettings`. The default judge is the official one
(``openai/gpt-5.2`` over the Responses API with the Files API); ``--gta-judge-api=chat``
renders the files here for a judge that only speaks chat completions, which is not the
official protocol and is marked so in every output. The threshold is this project's reading
of the board's success rates (docs/metrics.md): the official code computes none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from pytest_gta.flags import (
    OPT_EVALPACK_ROOT,
    OPT_JUDGE,
    OPT_JUDGE_API,
    OPT_JUDGE_BASE_URL,
    OPT_JUDGE_THRESHOLD,
    OPT_JUDGE_TIMEOUT,
    OPT_MODEL,
    OPT_TIMEOUT,
    dest,
)
from pytest_gta.options.core import (
    Feature,
    Given,
    OptionSpec,
    choice,
    fields,
    number,
    resolve_path,
    shown,
    usage_error,
)

JudgeApi = Literal["responses", "chat"]
JUDGE_APIS: tuple[JudgeApi, ...] = ("responses", "chat")
DEFAULT_JUDGE = "openai/gpt-5.2"
#: The score (0-10) at which a checkpoint counts as a success in the SR columns.
DEFAULT_THRESHOLD = 7.0
RANGES: dict[str, tuple[float, float]] = {
    OPT_JUDGE_THRESHOLD: (0.0, 10.0),
    # As --gta-timeout's range: a judge request takes at most a day.
    OPT_JUDGE_TIMEOUT: (0.001, 86_400.0),
}


def parse_judge(value: str) -> str:
    """``PROVIDER/MODEL`` (``openai/gpt-5.2``) or a bare model name the endpoint serves."""
    text = value.strip()
    if not text or text.endswith("/"):
        raise pytest.UsageError(
            f"{OPT_JUDGE}={value!r}: name the judge model, e.g. {DEFAULT_JUDGE} (the official one)"
        )
    return text


def parse_api(value: str) -> JudgeApi:
    """``responses`` (official) or ``chat``."""
    return choice(value, JUDGE_APIS, OPT_JUDGE_API, "responses (official) or chat")


def parse_roots(value: str) -> tuple[str, ...]:
    """Directories separated by commas (made absolute and checked by :func:`settings`)."""
    roots = tuple(part.strip() for part in value.split(",") if part.strip())
    if not roots:
        raise usage_error(
            f"{OPT_EVALPACK_ROOT}={shown(value)}: give the directories an eval pack's attached "
            "files may come from, separated by commas, e.g. ~/GTA"
        )
    return roots


def parse_threshold(value: str) -> float:
    """A checkpoint score from 0 to 10."""
    low, high = RANGES[OPT_JUDGE_THRESHOLD]
    hint = f"give a checkpoint score from 0 to 10 (default {DEFAULT_THRESHOLD:g})"
    return number(value, OPT_JUDGE_THRESHOLD, hint, minimum=low, maximum=high)


def parse_judge_timeout(value: str) -> float:
    """Seconds one checkpoint's judge call may take, uploads and retries included."""
    low, high = RANGES[OPT_JUDGE_TIMEOUT]
    hint = f"give a positive number of seconds (default: {OPT_TIMEOUT}'s)"
    return number(value, OPT_JUDGE_TIMEOUT, hint, minimum=low, maximum=high)


@dataclass(frozen=True)
class WorkflowSettings:
    """How GTA-Workflow deliverables are judged."""

    #: ``--gta-judge``: the judge model, ``openai/gpt-5.2`` by default.
    judge: str = DEFAULT_JUDGE
    #: ``--gta-judge-base-url``: its endpoint (else ``OPENAI_BASE_URL``/``EVAL_OPENAI_BASE_URL``).
    base_url: str | None = None
    #: ``--gta-judge-api``: ``responses`` (official) or ``chat``.
    api: JudgeApi = "responses"
    #: ``--gta-judge-threshold``: the score at which a checkpoint succeeds (SR columns).
    threshold: float = DEFAULT_THRESHOLD
    #: ``--gta-evalpack-root``: directories beside the pack's own that its attached files may
    #: come from (absolute, existing).
    evalpack_roots: tuple[Path, ...] = ()
    #: ``--gta-judge-timeout``: seconds per checkpoint call (``None``: ``--gta-timeout``'s).
    timeout: float | None = None

    def judge_timeout(self, model_timeout: float) -> float:
        """Seconds one checkpoint's call may take: ``--gta-judge-timeout``, else ``--gta-timeout``.

        One default for both: a user who bounds the run's requests with ``--gta-timeout``
        bounds the judge's too, without a second option to learn.
        """
        return model_timeout if self.timeout is None else self.timeout

    @property
    def judge_model(self) -> str:
        """The model name sent to the endpoint (``gpt-5.2`` of ``openai/gpt-5.2``)."""
        provider, _, name = self.judge.partition("/")
        return name if provider == "openai" and name else self.judge


ROWS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_EVALPACK_ROOT,
        "DIR[,DIR]",
        "directories an eval pack's attached files may come from besides the pack's own "
        "(relative names are looked up there; nothing outside is sent to the judge)",
        parse=parse_roots,
        default=(),
        setting="evalpack_roots",
        doc_default="the pack's directory only",
        doc="directories (separated by commas) whose files an eval pack "
        f"(`{OPT_MODEL}=evalpack:`) may attach besides those under its own directory, e.g. the "
        "repository root the official builder writes relative paths from; a pack naming a file "
        "outside them is a usage error (see [GTA-Workflow](workflow.md#eval-packs))",
    ),
    OptionSpec(
        OPT_JUDGE,
        "MODEL",
        f"GTA-Workflow's checkpoint judge (default: {DEFAULT_JUDGE}, the official one); its "
        "key is EVAL_OPENAI_API_KEY or OPENAI_API_KEY",
        parse=parse_judge,
        default=DEFAULT_JUDGE,
        setting="judge",
        doc_default=f"`{DEFAULT_JUDGE}`",
        doc="the model that scores GTA-Workflow checkpoints (key: `OPENAI_API_KEY` or "
        "`EVAL_OPENAI_API_KEY`, read in that order as the official scorer does); see "
        "[GTA-Workflow](workflow.md)",
    ),
    OptionSpec(
        OPT_JUDGE_BASE_URL,
        "URL",
        "the judge's endpoint (default: OPENAI_BASE_URL, EVAL_OPENAI_BASE_URL, else OpenAI's)",
        setting="base_url",
        doc_default="`$OPENAI_BASE_URL`, `$EVAL_OPENAI_BASE_URL`, else OpenAI's",
        doc="the judge's OpenAI-compatible endpoint (a chat-completions URL is cut to its "
        "base, as the official scorer does)",
    ),
    OptionSpec(
        OPT_JUDGE_API,
        "API",
        "responses (official: Files API uploads, Responses API) or chat (files rendered here; "
        "not the official protocol)",
        parse=parse_api,
        default="responses",
        setting="api",
        doc_default="`responses`",
        doc="`responses`: the official protocol; `chat`: chat completions with the files "
        "rendered locally, for judges that only speak chat (marked as not official)",
    ),
    OptionSpec(
        OPT_JUDGE_THRESHOLD,
        "SCORE",
        f"checkpoint score (0-10) counted as a success in the SR columns (default: "
        f"{DEFAULT_THRESHOLD:g}; the project's reading, see docs/metrics.md)",
        parse=parse_threshold,
        default=DEFAULT_THRESHOLD,
        setting="threshold",
        doc_default=f"`{DEFAULT_THRESHOLD:g}`",
        doc="the checkpoint score at which a leaf, a task or a category counts as a success "
        "in Leaf SR, Root SR and P/O/L/C-SR (the project's reading of the board)",
        doc_range="{low} to {high}",
    ),
    OptionSpec(
        OPT_JUDGE_TIMEOUT,
        "SECONDS",
        f"seconds one checkpoint's judge call may take, its uploads and the client's retries "
        f"included; past it the task errors (default: {OPT_TIMEOUT}'s value)",
        parse=parse_judge_timeout,
        setting="timeout",
        doc_default=f"`{OPT_TIMEOUT}`'s value (120)",
        doc="the time one checkpoint's judge call may take as a whole: its uploads, every "
        "request from the connect to the reply's last byte, and the client's two retries with "
        "their waits; a judge that hangs or trickles ends as the task's error naming this "
        "limit",
        doc_range="{low} to {high} seconds",
    ),
)
FEATURE = Feature("workflow", ROWS, RANGES)


def settings(config: pytest.Config, given: Given) -> WorkflowSettings:
    """The judge's part of the settings, with the eval pack's roots absolute and checked.

    Raises:
        pytest.UsageError: a root that is not a directory.
    """
    found = fields(ROWS, given)
    roots = given[dest(OPT_EVALPACK_ROOT)]
    absolute = []
    for root in roots.value:
        path = resolve_path(config, root, roots.source)
        if not path.is_dir():
            raise usage_error(
                f"{roots.origin}: {root!r} ({path}) is not a directory; name the directories "
                "an eval pack's attached files may come from"
            )
        absolute.append(path)
    found["evalpack_roots"] = tuple(absolute)
    return WorkflowSettings(**found)
