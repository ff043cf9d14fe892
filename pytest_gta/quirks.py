"""The real release's quirks: shapes and contents the official pipeline accepts and scores.

The GTA release is not as regular as a hand-made dataset. Sixteen reference chains end without
a final answer, two end on a call that nothing answered, a few reference calls are ones the
official parser itself rejects, and some reference answers do not satisfy their own whitelist.
The official loader (OpenCompass ``GTABenchDataset.load``/``organize_dialogs``) and evaluator
accept all of it, so the harness must run and score these queries exactly as they do; what it
adds is that each class of quirk is *named*, once, with the queries it affects and how they are
scored, so that nobody takes a dataset quirk for a harness bug (or a harness bug for a quirk).

A quirk may also say in which modes even a perfect replay of the reference chain cannot pass
(:attr:`Quirk.fails`): those are the cases the ``oracle`` fails on the release, and a failure of
the oracle that no quirk explains is a defect of the harness.

Everything here is computed from the data alone and cheaply (no model, no similarity model),
except :data:`WEAK_SUBJECTIVE`, which needs the similarity score a run computed. The kinds that
make a reference unsound are the erratum's too (:mod:`pytest_gta.erratum_build` writes
``pytest_gta/erratum.json`` from them), so every report also scores the release without them.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_gta.dataset import Dataset, Query
from pytest_gta.flags import OPT_DATA_INFO, OPT_SIM_THRESHOLD
from pytest_gta.protocol.react import ArgumentError, convert_arguments, parse_action_input
from pytest_gta.scoring.answer import iscorrect
from pytest_gta.vocabulary import IMAGEGEN_TOOLS, MODES, Mode

#: The placeholder the release ships for every generated image (reference image outputs).
GENERATED_IMAGE = "image/dummy_generated_image.jpg"


@dataclass(frozen=True)
class QuirkKind:
    """A class of quirk: what it is and how the official pipeline (and so the harness) scores it."""

    key: str
    #: A few words, for one-line listings.
    title: str
    #: How queries of this kind are run and scored.
    scoring: str


NO_FINAL_ANSWER = QuirkKind(
    "no_final_answer",
    "reference chain ends without a final answer",
    "every assistant message is a step, so step mode asks the tool calls only (the last one "
    "with the summarize prompt, as the official harness does) and has no summary step; end to "
    "end, image queries score Ans+I from the image tools' arguments (AnsAcc has no reference "
    "for them)",
)
UNANSWERED_CALL = QuirkKind(
    "unanswered_call",
    "reference call with no tool reply",
    "the call is a step like any other; the replay tools serve it what the tool declares "
    f"(an image output: the release's {GENERATED_IMAGE}), since the chain recorded nothing",
)
ANSWER_NOT_IN_CHAIN = QuirkKind(
    "answer_not_in_chain",
    "reference answer but no final answer step",
    "the query counts in the SummAcc and AnsAcc denominators, but no step-mode step can earn "
    "its SummAcc share and a replay of the chain has no answer to give end to end",
)
DUPLICATE_TOOL = QuirkKind(
    "duplicate_tool",
    "tool listed twice in the query's tools",
    "offered once, as the official harness keys its tools by name; the paper's tools-per-query "
    f"count (and {OPT_DATA_INFO}'s) counts the list as written",
)
CALL_WITH_TEXT = QuirkKind(
    "call_with_text",
    "reference call carrying text",
    "the message is a tool-call step (the official get_response_type checks tool_calls "
    "first); its text is neither shown to the model nor scored",
)
REJECTED_CALL = QuirkKind(
    "rejected_call",
    "reference call the official parser rejects",
    "an argument the tool does not declare, a required one missing, or arguments that are not "
    "a JSON object: the official parser answers ARGS_ERROR to the reference call itself, so "
    "its step counts for ToolAcc but never for InstAcc or ArgAcc, and end to end the call "
    "errors for every model",
)
MISSING_FILE = QuirkKind(
    "missing_file",
    "reference call names a file the dataset lacks",
    "the official parser answers API_ERROR (FileNotFoundError) to the reference call itself: "
    "its step counts for ToolAcc and ArgAcc but never for InstAcc, and end to end the call "
    "errors for every model",
)
FOREIGN_OUTPUT = QuirkKind(
    "foreign_output",
    "reference image output names no file of the dataset",
    "(in the release: paths on the authors' Windows machine); step-mode prompts show them as "
    "written, as the official harness does, and the replay "
    f"tools serve the release's {GENERATED_IMAGE} in its place (the file it ships for "
    "generated images)",
)
ANSWER_MISSES_REFERENCE = QuirkKind(
    "answer_misses_reference",
    "reference answer fails its own whitelist",
    "scored as written: the official pattern wraps each alias in \\b, which beside a "
    "non-word character ('-2', '$2697', '50%') only matches next to a letter or digit, so a "
    "reference answer such as '-2' misses its own alias (and a few do not name it at all); no "
    "replay of the chain passes, in either mode",
)
WEAK_SUBJECTIVE = QuirkKind(
    "weak_subjective_reference",
    "reference answer below the similarity threshold",
    "the reference's own final answer is less similar to the three reference answers than "
    f"{OPT_SIM_THRESHOLD}: SummAcc and AnsAcc give it its (continuous) similarity, and a replay "
    "case fails",
)

#: Every kind, in the order listings show them.
KINDS: tuple[QuirkKind, ...] = (
    NO_FINAL_ANSWER,
    UNANSWERED_CALL,
    ANSWER_NOT_IN_CHAIN,
    DUPLICATE_TOOL,
    CALL_WITH_TEXT,
    REJECTED_CALL,
    MISSING_FILE,
    FOREIGN_OUTPUT,
    ANSWER_MISSES_REFERENCE,
    WEAK_SUBJECTIVE,
)
_BY_KEY = {kind.key: kind for kind in KINDS}


@dataclass(frozen=True)
class Quirk:
    """One quirk of one query."""

    kind: QuirkKind
    qid: str
    #: Where and what, e.g. ``dialogs[3]: DrawBox lacks the required 'image'``.
    detail: str
    #: Modes in which even a perfect replay of the reference chain cannot pass.
    fails: tuple[Mode, ...] = field(default=())


def _final_answer(query: Query) -> Mapping[str, Any] | None:
    last = query.dialogs[-1]
    if last.get("role") == "assistant" and "tool_calls" not in last:
        return last
    return None


def _answered(dialogs: Sequence[Mapping[str, Any]], index: int) -> bool:
    """Whether the call at ``dialogs[index]`` is followed by its tool message."""
    return index + 1 < len(dialogs) and dialogs[index + 1].get("role") == "tool"


def _call_problem(dataset: Dataset, query: Query, arguments: Any, name: str) -> Quirk | None:
    """What the official parser says to a reference call: ARGS_ERROR, API_ERROR or nothing."""
    meta = dataset.toolmeta.get(name)
    if meta is None:
        return None  # validation refuses a tool toolmeta.json lacks
    raw = json.dumps(arguments)
    try:
        parsed = parse_action_input(raw, meta)
    except ArgumentError as exc:
        return Quirk(REJECTED_CALL, query.qid, f"{name}: {exc}")
    try:
        convert_arguments(meta, {k: dataset.absolutize(v) for k, v in parsed.items()})
    except (OSError, ValueError, TypeError, NotImplementedError, OverflowError) as exc:
        return Quirk(MISSING_FILE, query.qid, f"{name}: {exc!r}")
    return None


def query_quirks(dataset: Dataset, query: Query) -> list[Quirk]:
    """The quirks of one query, in dialog order, each with the modes a replay cannot pass."""
    dialogs = query.dialogs
    out: list[Quirk] = []
    final = _final_answer(query)
    if final is None:
        ending = "a tool's output" if dialogs[-1].get("role") == "tool" else "a call"
        out.append(Quirk(NO_FINAL_ANSWER, query.qid, f"ends on {ending}"))
        if query.gt_answer:
            out.append(
                Quirk(ANSWER_NOT_IN_CHAIN, query.qid, f"{query.type} answer", fails=("e2e",))
            )
    repeated = [n for n, k in Counter(query.listed_tools).items() if k > 1]
    if repeated:
        out.append(Quirk(DUPLICATE_TOOL, query.qid, f"tools: {', '.join(repeated)}"))
    rejected: list[tuple[int, str]] = []
    working: set[str] = set()
    for call in query.calls:
        where = f"dialogs[{call.index}]"
        message = dialogs[call.index]
        if not _answered(dialogs, call.index):
            out.append(Quirk(UNANSWERED_CALL, query.qid, f"{where}: {call.name}"))
        if isinstance(message.get("content"), str) and message["content"]:
            out.append(Quirk(CALL_WITH_TEXT, query.qid, f"{where}: {call.name}"))
        problem = _call_problem(dataset, query, call.arguments, call.name)
        if problem is None:
            working.add(call.name)
        else:
            rejected.append((len(out), call.name))
            out.append(Quirk(problem.kind, query.qid, f"{where}: {problem.detail}"))
        if _answered(dialogs, call.index):
            content = dialogs[call.index + 1].get("content")
            if isinstance(content, Mapping) and content.get("type") == "image":
                path = content.get("content")
                if isinstance(path, str) and not dataset_file(dataset, path):
                    out.append(
                        Quirk(FOREIGN_OUTPUT, query.qid, f"dialogs[{call.index + 1}]: {path}")
                    )
    # A rejected call's step errs in step mode. End to end the error only sinks an image query
    # whose Ans+I needs that image tool and gets no error-free call to it from the chain (a
    # text answer can still be right; official answer_acc_w_imggen skips errored calls).
    for position, name in rejected:
        sinks = query.type == "image" and name in IMAGEGEN_TOOLS and name not in working
        out[position] = replace(out[position], fails=("step", "e2e") if sinks else ("step",))
    if final is not None and isinstance(query.gt_answer, dict):
        answer = final.get("content")
        if isinstance(answer, str) and not iscorrect(answer, query.gt_answer):
            out.append(Quirk(ANSWER_MISSES_REFERENCE, query.qid, f"answer {answer!r}", fails=MODES))
    return out


def dataset_file(dataset: Dataset, path: str) -> bool:
    """Whether ``path`` (as the data writes it) names a file of the dataset."""
    return os.path.join(dataset.root_str, path) in dataset.all_files


def find_quirks(dataset: Dataset, queries: Iterable[Query] | None = None) -> list[Quirk]:
    """The quirks of ``queries`` (default: all), in dataset order."""
    chosen = dataset if queries is None else queries
    return [quirk for query in chosen for quirk in query_quirks(dataset, query)]


def summarize(quirks: Sequence[Quirk]) -> list[dict[str, Any]]:
    """Per kind (in :data:`KINDS` order): what, how scored, which queries; for the report."""
    out = []
    for kind in KINDS:
        mine = [q for q in quirks if q.kind is kind]
        if not mine:
            continue
        queries = list(dict.fromkeys(q.qid for q in mine))
        out.append(
            {
                "kind": kind.key,
                "title": kind.title,
                "scoring": kind.scoring,
                "queries": queries,
                "details": [f"{q.qid}: {q.detail}" for q in mine],
                "replay_fails": {
                    mode: list(dict.fromkeys(q.qid for q in mine if mode in q.fails))
                    for mode in MODES
                    if any(mode in q.fails for q in mine)
                },
            }
        )
    return out


def _ids(queries: Sequence[str], shown: int) -> str:
    head = ", ".join(queries[:shown])
    return head + (f", ... ({len(queries) - shown} more)" if len(queries) > shown else "")


def summary_lines(summary: Sequence[Mapping[str, Any]], *, shown: int = 20) -> list[str]:
    """One line per kind: ``N queries (ids): title``."""
    lines = []
    for entry in summary:
        queries = [str(q) for q in entry.get("queries", [])]
        noun = "query" if len(queries) == 1 else "queries"
        lines.append(f"{entry.get('title')}: {len(queries)} {noun} ({_ids(queries, shown)})")
    return lines


def kind_of(key: str) -> QuirkKind | None:
    """The kind named ``key`` (as reports write it), if there is one."""
    return _BY_KEY.get(key)


@dataclass(frozen=True)
class FailedReplay:
    """A case a replay of the reference chain failed, with the quirk that explains it."""

    case_id: str
    qid: str
    mode: str
    #: ``None``: no quirk of the data explains the failure (a harness defect).
    kind: QuirkKind | None


def explain_replay_failures(
    dataset: Dataset,
    failed: Iterable[tuple[str, str, str, float | None]],
    threshold: float,
) -> list[FailedReplay]:
    """Attribute each failed case of a reference replay (``oracle``) to a dataset quirk.

    Args:
        dataset: The data the replay ran on.
        failed: ``(case id, query id, mode, answer similarity or None)`` per failed case; the
            similarity is the case's subjective answer score, when it has one.
        threshold: ``--gta-sim-threshold``, below which a subjective answer fails.
    """
    by_query: dict[str, list[Quirk]] = {}
    out = []
    for case_id, qid, mode, similarity in failed:
        if qid not in dataset.queries:
            continue
        quirks = by_query.setdefault(qid, query_quirks(dataset, dataset[qid]))
        kind = next((q.kind for q in quirks if mode in q.fails), None)
        if (
            kind is None
            and dataset[qid].type == "subjective"
            and similarity is not None
            and similarity < threshold
        ):
            kind = WEAK_SUBJECTIVE
        out.append(FailedReplay(case_id, qid, mode, kind))
    return out


def replay_failure_notes(failures: Sequence[FailedReplay], model: str) -> list[str]:
    """The run's notes on a replay's failed cases: one per quirk kind, then the unexplained."""
    notes = []
    for kind in KINDS:
        cases = [f.case_id for f in failures if f.kind is kind]
        if cases:
            notes.append(
                f"{model}: {len(cases)} case(s) cannot pass on this data, a dataset quirk "
                f"({kind.title}; see docs/dataset.md): {', '.join(cases)}"
            )
    unexplained = [f.case_id for f in failures if f.kind is None]
    if unexplained:
        notes.append(
            f"{model}: {len(unexplained)} failed case(s) that no dataset quirk explains, which "
            f"points at the harness (please report it): {', '.join(unexplained)}"
        )
    return notes
