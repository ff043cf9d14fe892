"""Writing the erratum (``pytest_gta/erratum.json``) from the release: its unsound references.

The faulty-reference entries are not chosen by hand: they are the quirks of
:mod:`pytest_gta.quirks` that make a reference unsound (:data:`UNSOUND`), computed here from the
release itself, with an evidence sentence each that describes the fault without quoting the
reference answer. A subjective reference too weak for its own threshold needs the similarity
model, so it is computed with the one named. The live-web entries are judgement (a question
about a price, a ranking, who holds an office now): they are kept from the file as they are,
their digests brought up to date. Run, with the release where ``--gta-data`` would find it::

    python -m pytest_gta.erratum_build ../shared/gta_release --sim-model all-MiniLM-L6-v2
    python -m pytest_gta.erratum_build ../shared/gta_release --check   # exit status 1 if stale

Kinds of quirk left out, and why: a tool listed twice, a call carrying text and a reference
image output that names no file are shapes the official pipeline takes in its stride; the
reference they give is sound (docs/dataset.md).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_gta.dataset import Dataset, Query
from pytest_gta.erratum import ERRATUM_PATH, load_erratum, query_sha256
from pytest_gta.errors import GtaUsageError
from pytest_gta.quirks import (
    ANSWER_MISSES_REFERENCE,
    ANSWER_NOT_IN_CHAIN,
    MISSING_FILE,
    NO_FINAL_ANSWER,
    REJECTED_CALL,
    UNANSWERED_CALL,
    WEAK_SUBJECTIVE,
    Quirk,
    QuirkKind,
    query_quirks,
)
from pytest_gta.results.erratum import ERRATUM_VERSION, ErratumEntry, ErratumFile
from pytest_gta.results.io import dump_json
from pytest_gta.scoring.answer import blacklist_hit, whitelist_hits
from pytest_gta.scoring.similarity import (
    SentenceSimilarity,
    Similarity,
    resolve_sim_model,
    simscore,
)
from pytest_gta.validation import load_dataset

#: The quirks that make a reference unsound, in the erratum's order of kinds. Each either sinks
#: a perfect replay (the oracle fails the case) or asks the model something the reference
#: contradicts (a chain without a final answer is asked its last call with the summarize
#: prompt, which says not to call a tool).
UNSOUND: tuple[QuirkKind, ...] = (
    NO_FINAL_ANSWER,
    UNANSWERED_CALL,
    ANSWER_NOT_IN_CHAIN,
    REJECTED_CALL,
    MISSING_FILE,
    ANSWER_MISSES_REFERENCE,
    WEAK_SUBJECTIVE,
)
#: The kind chosen by hand: a question whose answer is what the web said when the data was made.
LIVE_WEB = "live_web"
KINDS: dict[str, str] = {
    **{kind.key: kind.title for kind in UNSOUND},
    LIVE_WEB: "answer depends on the live web when the data was written",
}
#: What the erratum says it is about.
RELEASE = "GTA v1 release (open-compass/GTA v0.1.0 gta_dataset.zip, Hugging Face Jize1/GTA)"
#: The threshold a subjective reference is held to (``--gta-sim-threshold``'s default).
THRESHOLD = 0.5
#: What a stale file's message says to run.
COMMAND = "python -m pytest_gta.erratum_build"
_EXCEPTION = re.compile(r"""^\w+\((['"])(.*)\1\)$""")


def _final_answer(query: Query) -> str | None:
    last = query.dialogs[-1]
    content = last.get("content")
    if last.get("role") == "assistant" and "tool_calls" not in last and isinstance(content, str):
        return content
    return None


def _whitelist_evidence(query: Query) -> str:
    """Why the chain's own answer fails its reference, without quoting either."""
    answer = _final_answer(query) or ""
    ref = query.gt_answer
    hits = whitelist_hits(answer, ref)
    missed = [group for group, hit in zip(ref["whitelist"], hits, strict=True) if not hit]
    parts = []
    if missed:
        inside = sum(any(str(a).lower() in answer.lower() for a in g) for g in missed)
        parts.append(
            f"the reference chain's final answer misses {len(missed)} of its {len(hits)} "
            "whitelist group(s)"
        )
        if inside == len(missed):
            parts.append(
                "each missed alias is in the answer, but the official \\b-wrapped pattern "
                "cannot match it beside its non-word first or last character, so no answer "
                "written that way passes"
            )
        elif inside:
            parts.append(f"{inside} of them by the \\b quirk, the rest not named at all")
        else:
            parts.append("the answer names no alias of the missed group(s)")
    if blacklist_hit(answer, ref) is not None:
        parts.append("the answer hits the blacklist")
    return "; ".join(parts)


def _call_evidence(quirks: Sequence[Quirk]) -> str:
    """A rejected or missing-file call's evidence, from the quirks' details."""
    out = []
    for quirk in quirks:
        where, _, rest = quirk.detail.partition(": ")
        name, _, problem = rest.partition(": ")
        found = _EXCEPTION.match(problem)
        problem = found.group(2) if found else problem
        if quirk.kind is MISSING_FILE:
            out.append(
                f"the reference call to {name} at {where} names a file the dataset lacks "
                f"({problem}): the official parser answers it with an API error"
            )
        else:
            out.append(
                f"the official parser rejects the reference call to {name} at {where} ({problem})"
            )
    return "; ".join(out)


def _evidence(kind: QuirkKind, query: Query, quirks: Sequence[Quirk]) -> str:
    """The evidence sentence of one kind of fault of one query."""
    if kind is NO_FINAL_ANSWER:
        return (
            f"the reference chain {quirks[0].detail} and gives no final answer, so step mode "
            "asks its last call with the summarize prompt, which says not to call a tool"
        )
    if kind is UNANSWERED_CALL:
        calls = ", ".join(q.detail.replace(": ", " (", 1) + ")" for q in quirks)
        return f"no tool reply follows the reference call at {calls}"
    if kind is ANSWER_NOT_IN_CHAIN:
        return (
            f"the query has an {query.type} reference answer that its chain never gives: no "
            "step can earn SummAcc for it, and a replay has no answer to give end to end"
        )
    if kind is ANSWER_MISSES_REFERENCE:
        return _whitelist_evidence(query)
    return _call_evidence(quirks)


def _entry(query: Query, kind: str, evidence: str) -> ErratumEntry:
    return ErratumEntry(
        query=query.qid, query_sha256=query_sha256(query), kind=kind, evidence=evidence
    )


def faulty_entries(
    dataset: Dataset, similarity: Similarity | None = None, sim_model: str = ""
) -> list[ErratumEntry]:
    """The faulty-reference entries of ``dataset``: its quirks of the :data:`UNSOUND` kinds.

    With ``similarity`` (the model named ``sim_model``), also the subjective queries whose
    chain's own final answer is less similar to its references than :data:`THRESHOLD`.
    """
    out = []
    for query in dataset:
        quirks = query_quirks(dataset, query)
        for kind in UNSOUND:
            mine = [q for q in quirks if q.kind is kind]
            if mine:
                out.append(_entry(query, kind.key, _evidence(kind, query, mine)))
        answer = _final_answer(query)
        if similarity is None or query.type != "subjective" or answer is None:
            continue
        score = float(simscore(similarity, answer, query.gt_answer))
        if score < THRESHOLD:
            out.append(
                _entry(
                    query,
                    WEAK_SUBJECTIVE.key,
                    f"the reference chain's final answer is only {score:.2f} similar "
                    f"({sim_model}) to the closest of its {len(query.gt_answer)} reference "
                    f"answers, below the default threshold {THRESHOLD}",
                )
            )
    return out


def erratum_of(
    dataset: Dataset, faulty: Sequence[ErratumEntry], curated: Sequence[ErratumEntry]
) -> ErratumFile:
    """The erratum of ``dataset``: computed and curated entries, in dataset order then kinds.

    A curated entry is kept by its query id, its digest taken from ``dataset``.
    """
    kept = [
        entry.model_copy(update={"query_sha256": query_sha256(dataset[entry.query])})
        for entry in curated
        if entry.kind == LIVE_WEB and entry.query in dataset.queries
    ]
    order = {kind: i for i, kind in enumerate(KINDS)}
    entries = sorted(
        [*faulty, *kept], key=lambda e: (dataset[e.query].position, order.get(e.kind, 99))
    )
    return ErratumFile(
        version=ERRATUM_VERSION,
        dataset=RELEASE,
        dataset_sha256=dataset.sha256,
        kinds=dict(KINDS),
        entries=entries,
    )


def _curated(path: Path) -> list[ErratumEntry]:
    if not path.is_file():
        return []
    return [e for e in load_erratum(path).file.entries if e.kind == LIVE_WEB]


def _similarity(name: str) -> tuple[Similarity, str]:
    return SentenceSimilarity(resolve_sim_model(name)), name


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or ``--check``) the erratum from the release; 1 when a check finds it stale."""
    parser = argparse.ArgumentParser(prog=COMMAND)
    parser.add_argument("release", type=Path, help="the GTA release's directory")
    parser.add_argument("--sim-model", default="all-MiniLM-L6-v2")
    parser.add_argument("--output", type=Path, default=ERRATUM_PATH)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    try:
        dataset = load_dataset(args.release)
        similarity, name = _similarity(args.sim_model)
        erratum = erratum_of(
            dataset, faulty_entries(dataset, similarity, name), _curated(args.output)
        )
    except GtaUsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    text = dump_json(erratum.to_json_value())
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
        if current != text:
            print(f"{args.output} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
