"""Reports written by earlier versions of pytest-gta, brought to the current shape on read.

Every report this project has written says ``pytest-gta-report/1``; what grew since the first
one is additive, so an old report is read by filling in what it lacks from what it has:

* no ``label``/``identity`` (before run identities): the identity from ``model``, ``protocol``,
  ``settings.agent`` and ``dataset.sha256``, without commit or dates;
* a case without ``usage``/``model_s`` (before they were typed fields): from its
  ``gta_tokens_*``, ``gta_*_calls`` and ``gta_model_s`` properties;
* a case without ``verdict`` (before the verdict was kept whole): ``null``, which
  :func:`pytest_gta.report.build.complete_verdicts` fills in where the dataset is at hand
  (``--gta-merge``), from the very primitives the scorer recorded;
* before 2026-11-26, reports lacked what later versions record (``interrupted_by``, the dataset's
  ``quirks``, a case's ``epoch`` and ``images``, the intervals and epochs of 2026-11-24): the
  values those versions meant are filled in (``null``, nothing, one epoch, the pass rates of the
  cases' outcomes), so such a report merges and compares as it did then;
* a case without ``primitives`` (before ``--gta-merge`` existed, 2026-11-24) cannot be merged:
  the reader says to re-run it.

The functions take the loaded JSON and return JSON; anything of the wrong kind is left for the
classes to refuse with a message that names the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_gta.provenance import label_problem

__all__ = ["default_label", "migrate_case", "migrate_report", "old_identity"]

#: The properties a case's usage was kept in before it was a typed field.
_USAGE = {
    "gta_tokens_in": "input_tokens",
    "gta_tokens_out": "output_tokens",
    "gta_model_calls": "calls",
    "gta_cached_calls": "cached_calls",
}


def default_label(model: str, protocol: str | None, agent: str | None = None) -> str:
    """A run's label when ``--gta-label`` gave none: ``model [protocol]``, ``model [agent X]``.

    The model and how it was asked are what tell most runs apart; a team that runs one model
    twice (two checkpoints behind one name, two prompts) names its runs with ``--gta-label``.
    """
    return f"{model} [agent {agent}]" if agent is not None else f"{model} [{protocol}]"


def old_identity(report: Mapping[str, Any]) -> dict[str, Any]:
    """The identity of a report written before identities: no commit, no dates.

    Fields of the wrong kind are passed on as they are, for the classes to name.
    """
    model = report.get("model")
    settings = report.get("settings")
    settings = settings if isinstance(settings, Mapping) else {}
    agent_setting = settings.get("agent")
    name = agent_setting.get("name") if isinstance(agent_setting, Mapping) else None
    agent = name if isinstance(name, str) else None
    protocol = None if agent is not None else report.get("protocol")
    dataset = report.get("dataset")
    sha256 = dataset.get("sha256") if isinstance(dataset, Mapping) else None
    version = settings.get("pytest_gta")
    label = report.get("label")
    made = (
        default_label(model, protocol, agent)
        if isinstance(model, str) and (protocol is None or isinstance(protocol, str))
        else None
    )
    # A report labelled by a hook but without an identity: its label, as given.
    given = isinstance(label, str) and label != made and label_problem(label) is None
    return {
        "label": label if given else made,
        "label_given": given,
        "model": model,
        "protocol": protocol,
        "agent": agent,
        "git": None,
        "started_at": None,
        "finished_at": None,
        "dataset_sha256": sha256,
        "pytest_gta": version if isinstance(version, str) else None,
    }


def migrate_case(raw: Any) -> Any:
    """A case entry in the current shape (see the module docstring); other values as they are."""
    if not isinstance(raw, dict):
        return raw
    case = dict(raw)
    properties = case.get("properties")
    props = properties if isinstance(properties, Mapping) else {}
    if "usage" not in case:
        found = {key: props[name] for name, key in _USAGE.items() if name in props}
        case["usage"] = None if not found else {key: found.get(key, 0) for key in _USAGE.values()}
    if "model_s" not in case:
        case["model_s"] = props.get("gta_model_s")
    case.setdefault("verdict", None)
    # Before sampling epochs and the HTML report's images (2026-11-24).
    case.setdefault("epoch", None)
    case.setdefault("images", {})
    return case


def migrate_report(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A report in the current shape (see the module docstring)."""
    report = dict(raw)
    if "identity" not in report:
        identity = old_identity(report)
        report["identity"] = identity
        report.setdefault("label", identity["label"])
    elif "label" not in report:
        identity = report["identity"]
        report["label"] = identity.get("label") if isinstance(identity, Mapping) else None
    settings = report.get("settings")
    if isinstance(settings, dict):
        # Settings reports gained over time; older ones did not have them.
        report["settings"] = {
            **settings,
            **{key: settings.get(key) for key in _LATER_SETTINGS},
        }
    cases = report.get("cases")
    if isinstance(cases, list):
        report["cases"] = [migrate_case(case) for case in cases]
    dataset = report.get("dataset")
    if isinstance(dataset, dict):
        # The quirks a run met (2026-11-25); the install record and statistics (2026-11-23).
        report["dataset"] = {"install": None, "statistics": {}, "quirks": [], **dataset}
    report.setdefault("interrupted_by", None)
    if "metrics_ci" not in report:
        # Before intervals and epochs (2026-11-24): no intervals, one epoch, the pass rates
        # from the cases' outcomes, as the report of the time showed them.
        report["metrics_ci"] = {}
        report.setdefault("pass_rate", _pass_rates(report.get("cases")))
        report.setdefault("epochs", 1)
        for key in ("metrics_by_epoch", "metrics_spread", "query_pass_rates"):
            report.setdefault(key, {})
    return _in_order(report)


def _pass_rates(cases: Any) -> dict[str, float]:
    """Per mode, the percent of the cases that ran (not skipped) that passed."""
    counts: dict[str, list[int]] = {}
    for case in cases if isinstance(cases, list) else []:
        if not isinstance(case, dict) or case.get("outcome") == "skipped":
            continue
        mode = case.get("mode")
        if mode in ("step", "e2e"):
            slot = counts.setdefault(mode, [0, 0])
            slot[0] += case.get("outcome") == "passed"
            slot[1] += 1
    return {
        mode: counts[mode][0] / counts[mode][1] * 100 for mode in ("step", "e2e") if mode in counts
    }


#: Settings a report records since a later version (``null`` in an older report's).
_LATER_SETTINGS = ("sandbox", "shard", "server", "agent", "budget")

#: The top-level keys in the order the current writer writes them (others follow, as they were).
_ORDER = (
    "schema",
    "benchmark",
    "model",
    "protocol",
    "label",
    "identity",
    "leaderboard",
    "usage",
)


def _in_order(report: dict[str, Any]) -> dict[str, Any]:
    head = {key: report[key] for key in _ORDER if key in report}
    return {**head, **{k: v for k, v in report.items() if k not in head}}
