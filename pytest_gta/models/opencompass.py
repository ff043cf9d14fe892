"""``opencompass:<path>``: re-score prediction files written by the official OpenCompass harness.

No model is called: every case and metric comes from the recorded steps. ``<path>`` is one
prediction file or a directory holding ``gta_bench.json`` or its chunks ``gta_bench_0.json``,
``gta_bench_1.json``, ... (read in that order; each chunk numbers its entries from 0, and
positions continue across chunks, exactly as OpenCompass's evaluation task concatenates them).
Entry *n* belongs to the *n*-th query of the dataset, which is how the official evaluator pairs
predictions with ``gt_answer``.

Scoring uses the recorded ``gold`` and predictions verbatim, as the official evaluator does, so
absolute paths recorded on another machine score exactly as they did there. The dataset root
recorded in the files (detected from the paths, or given with ``--gta-recorded-root``) is mapped
onto ``--gta-data`` only where the files are compared with the local dataset: a consistency
check, and files without ``gold`` (then the local reference chain is used and the recorded
paths are rewritten to the local root).

Files come from elsewhere and may be damaged. A file that cannot be used at all (unreadable, not
UTF-8 JSON, nested too deeply, not an object of records, no detectable mode) is a usage error
naming it. An entry the official evaluator could not score (it would crash on it, see
:func:`~pytest_gta.scoring.metrics.check_steps`) errors on its own case, naming the file, the
entry and the field, and the other cases are scored; whatever that evaluator scores is scored.
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from pytest_gta import jsonsafe
from pytest_gta.dataset import Dataset, Query
from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.files import special_kind
from pytest_gta.flags import OPT_MODE, OPT_MODEL
from pytest_gta.models.base import BaseRecordedSource, ModelContext, ModelSpec, Recorded
from pytest_gta.scoring.metrics import check_steps
from pytest_gta.vocabulary import Mode, ProtocolName

DEFAULT_STEM = "gta_bench"


def find_prediction_files(path: Path) -> list[Path]:
    """The prediction files behind ``path`` in the order OpenCompass concatenates them.

    Raises:
        GtaUsageError: when nothing usable is there.
    """
    if path.is_file():
        return [path]
    if not path.is_dir():
        kind = special_kind(path)
        raise GtaUsageError(
            f"{OPT_MODEL}=opencompass:{path}: "
            + (f"is {kind}, not a prediction file" if kind else "no such file or directory")
        )
    families: dict[str, list[Path]] = {}
    for stem in sorted({re.sub(r"_\d+$", "", p.stem) for p in path.glob("*.json")}):
        single = path / f"{stem}.json"
        kind = special_kind(single)
        if kind is not None:
            raise GtaUsageError(
                f"{OPT_MODEL}=opencompass:{path}: {single.name} is {kind}, not a prediction file"
            )
        if single.is_file():
            families[stem] = [single]
            continue
        chunks = _chunks(path, stem)
        if chunks:
            families[stem] = chunks
    if DEFAULT_STEM in families:
        return families[DEFAULT_STEM]
    if len(families) == 1:
        return next(iter(families.values()))
    found = ", ".join(p.name for p in sorted(path.glob("*.json"))) or "no .json files"
    raise GtaUsageError(
        f"{OPT_MODEL}=opencompass:{path}: expected {DEFAULT_STEM}.json or "
        f"{DEFAULT_STEM}_0.json, {DEFAULT_STEM}_1.json, ... (found: {found}); "
        "pass the prediction file itself if it has another name"
    )


def _chunks(path: Path, stem: str) -> list[Path]:
    """``stem_0.json``, ``stem_1.json``, ... in ``path``: all of them, or a usage error.

    OpenCompass concatenates the chunks of a split inference in number order; a chunk that is
    missing, or that is a directory or a FIFO under a chunk's name, would silently drop every
    query after it (their cases skipped as "not recorded"), so either is refused, naming it.

    Raises:
        GtaUsageError: a chunk is not a regular file, or the numbers have a gap.
    """
    numbers = sorted(
        int(match.group(1))
        for p in path.glob(f"{glob.escape(stem)}_*.json")
        if (match := re.fullmatch(rf"{re.escape(stem)}_(0|[1-9]\d*)\.json", p.name))
    )
    chunks: list[Path] = []
    for n in numbers:
        file = path / f"{stem}_{n}.json"
        kind = special_kind(file)
        if kind is not None:
            raise GtaUsageError(
                f"{OPT_MODEL}=opencompass:{path}: {file.name} is {kind}, not a prediction "
                f"file; the chunks {stem}_0.json, {stem}_1.json, ... must all be files"
            )
        if n != len(chunks):
            raise GtaUsageError(
                f"{OPT_MODEL}=opencompass:{path}: {stem}_{len(chunks)}.json is missing but "
                f"{file.name} is there; OpenCompass numbers the chunks from 0 without gaps: "
                "copy the missing chunk"
            )
        chunks.append(file)
    return chunks


#: How to repair a prediction file that cannot be used at all.
REDO_HINT = "re-copy the file, or re-run the OpenCompass inference that wrote it"


class Entry(NamedTuple):
    """One query's record, and where it was read (messages name the file and the entry)."""

    file: Path
    key: str
    record: dict[str, Any]

    @property
    def label(self) -> str:
        """``gta_bench_1.json: entry '3'``."""
        return f"{self.file.name}: entry {self.key!r}"


def load_entries(files: list[Path]) -> list[Entry]:
    """Per-query records of all files, in official position order.

    Raises:
        GtaUsageError: a file is unreadable, not UTF-8 JSON, nested too deeply, or not an
            object of records keyed ``"0"``, ``"1"``, ... each with a ``prediction`` list.
    """
    entries: list[Entry] = []
    for file in files:
        try:
            data = jsonsafe.read_json(file)
        except FileNotFoundError:
            raise GtaUsageError(f"{file}: no such file") from None
        except jsonsafe.JsonInputError as exc:
            raise GtaUsageError(
                f"{file}: not a readable JSON prediction file: {exc}; {REDO_HINT}"
            ) from None
        if not isinstance(data, dict):
            raise GtaUsageError(
                f"{file}: expected an object keyed '0', '1', ... as OpenCompass writes "
                "prediction files; pass a gta_bench*.json file from its predictions directory"
            )
        for i in range(len(data)):
            record = data.get(str(i))
            if not isinstance(record, dict) or not isinstance(record.get("prediction"), list):
                raise GtaUsageError(
                    f"{file}: entry {str(i)!r} is missing or has no 'prediction' list "
                    f"(OpenCompass numbers entries 0..{len(data) - 1}); {REDO_HINT}"
                )
            entries.append(Entry(file, str(i), record))
    return entries


def detect_mode(entries: list[Entry], source: str) -> Mode:
    """Step files hold one object per step; end-to-end files hold ``[steps]`` per query.

    An entry whose first prediction is neither says nothing about the mode; its own case
    reports what is wrong with it.

    Raises:
        GtaUsageError: no entry tells the mode, or entries tell both.
    """
    found: dict[Mode, list[str]] = {"step": [], "e2e": []}
    for entry in entries:
        prediction = entry.record["prediction"]
        if prediction and isinstance(prediction[0], list | dict):
            found["e2e" if isinstance(prediction[0], list) else "step"].append(entry.label)
    modes = [mode for mode, labels in found.items() if labels]
    if len(modes) == 1:
        return modes[0]
    if not modes:
        raise GtaUsageError(
            f"{source}: cannot tell the mode: no entry's 'prediction' starts with a step object "
            "(step mode) or a list of steps (end-to-end mode)"
        )
    shown = {
        mode: ", ".join(labels[:3]) + (" ..." if len(labels) > 3 else "")
        for mode, labels in found.items()
    }
    raise GtaUsageError(
        f"{source}: cannot tell the mode: the files hold both step entries ({shown['step']}) "
        f"and end-to-end entries ({shown['e2e']}); OpenCompass writes each mode to its own "
        "files: pass one mode's files, or repair the odd entries"
    )


class RecordedSteps(NamedTuple):
    """An entry's steps as the official loops see them, named as messages name them."""

    predictions: list[Any]
    #: ``None`` when the file records no reference chain (the local one is used instead).
    gold: list[Any] | None
    pred_at: str
    gold_at: str


def recorded_steps(record: dict[str, Any], mode: Mode) -> RecordedSteps | str:
    """The steps of one entry, or why the official evaluator could not even iterate them.

    A string or an object where a list of steps belongs is iterated by the official loops
    (characters, keys) and only breaks them once an element is read as a step; it is kept
    here the same way, so exactly those entries fail in :func:`check_steps`.
    """
    prediction: list[Any] = record["prediction"]
    gold = record.get("gold")
    if mode == "step":
        if gold is None or isinstance(gold, list):
            return RecordedSteps(prediction, gold, "prediction", "gold")
        if isinstance(gold, str | dict) and not (prediction and gold):
            return RecordedSteps(prediction, list(gold), "prediction", "gold")
        return "gold: must be a list of steps"
    episode = prediction[0] if prediction else []
    if not isinstance(episode, list):
        return "prediction[0]: must be a list of steps (the episode)"
    if not gold:
        return RecordedSteps(episode, None, "prediction[0]", "gold[0]")
    if not isinstance(gold, list | str):
        return "gold: must be a list holding the reference chain"
    chain = gold[0]
    if chain is None:
        return RecordedSteps(episode, None, "prediction[0]", "gold[0]")
    if not isinstance(chain, list | str | dict):
        return "gold[0]: must be a list of steps (the reference chain)"
    return RecordedSteps(episode, list(chain), "prediction[0]", "gold[0]")


def _call_name(step: dict[str, Any]) -> Any:
    """The called tool's name, or ``None`` where the record has none to read."""
    calls = step["tool_calls"]
    if isinstance(calls, list) and calls and isinstance(calls[0], dict):
        function = calls[0].get("function")
        if isinstance(function, dict):
            return function.get("name")
    return None


def _strings(obj: Any, depth: int = 0) -> Iterator[str]:
    if depth > 8:
        return
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _strings(value, depth + 1)
    elif isinstance(obj, list):
        for value in obj:
            yield from _strings(value, depth + 1)


def detect_recorded_root(records: list[dict[str, Any]], dataset: Dataset) -> str | None:
    """The dataset root the predictions were recorded with, judged from absolute file paths."""
    relative = {
        os.path.relpath(p, dataset.root_str).replace(os.sep, "/") for p in dataset.all_files
    }
    votes: Counter[str] = Counter()
    for record in records:
        for text in _strings([record.get("gold"), record.get("prediction")]):
            if not text.startswith("/") and not re.match(r"^[A-Za-z]:[\\/]", text):
                continue
            parts = text.replace("\\", "/").split("/")
            for n in (1, 2, 3):
                if len(parts) > n and "/".join(parts[-n:]) in relative:
                    votes["/".join(parts[:-n])] += 1
                    break
    if not votes:
        return None
    return votes.most_common(1)[0][0]


def map_paths(obj: Any, old_root: str, new_root: str) -> Any:
    """Rewrite strings under ``old_root`` to the same place under ``new_root``."""
    if isinstance(obj, str):
        for sep in ("/", "\\"):
            if obj.startswith(old_root + sep):
                return new_root + "/" + obj[len(old_root) + 1 :].replace("\\", "/")
        return obj
    if isinstance(obj, dict):
        return {k: map_paths(v, old_root, new_root) for k, v in obj.items()}
    if isinstance(obj, list):
        return [map_paths(v, old_root, new_root) for v in obj]
    return obj


class OpenCompassPredictions(BaseRecordedSource):
    """Recorded predictions of one mode, paired with the dataset by position."""

    protocol: ProtocolName = "react"

    def __init__(self, source: Path, dataset: Dataset, recorded_root: str | None = None) -> None:
        self.source = source
        self.dataset = dataset
        self.files = find_prediction_files(source)
        self.entries = load_entries(self.files)
        self.records = [entry.record for entry in self.entries]
        self.mode: Mode = detect_mode(self.entries, str(source))
        self.name = f"opencompass:{source.name}"
        self.recorded_root = recorded_root or detect_recorded_root(self.records, dataset)
        self.warnings: list[str] = []
        if len(self.records) > len(dataset):
            self.warnings.append(
                f"{source}: {len(self.records)} recorded entries for a dataset of "
                f"{len(dataset)} queries; the extra entries are ignored"
            )
        self._check_consistency()

    def _local(self, obj: Any) -> Any:
        if self.recorded_root is None or self.recorded_root == self.dataset.root_str:
            return obj
        return map_paths(obj, self.recorded_root, self.dataset.root_str)

    def _reference_gold(self, query: Query) -> list[dict[str, Any]]:
        dialogs = self.dataset.reference_dialogs(query)
        if self.mode == "step":
            return [dialogs[i] for i in query.assistant_indices]
        return dialogs[1:]

    def _check_consistency(self) -> None:
        differing = []
        for query in self.dataset:
            if query.position >= len(self.entries):
                break
            steps = recorded_steps(self.entries[query.position].record, self.mode)
            if isinstance(steps, str) or steps.gold is None:
                continue  # a malformed entry errors on its own case, with the reason
            names = [_call_name(m) for m in steps.gold if isinstance(m, dict) and "tool_calls" in m]
            expected = [call.name for call in query.calls]
            if names != expected:
                differing.append(query.qid)
        if differing:
            shown = ", ".join(differing[:10]) + (" ..." if len(differing) > 10 else "")
            self.warnings.append(
                f"{self.source}: the recorded reference chains of {len(differing)} queries "
                f"({shown}) differ from {self.dataset.root}; are these predictions for another "
                "dataset version? Scores use the recorded references."
            )

    def recorded(self, query: Query, mode: Mode) -> Recorded | None:
        """The record at the query's position, if the files have one for this mode.

        Raises:
            GtaInfrastructureError: the entry cannot be scored (the official evaluator would
                crash on it); only this case errors, the others are scored.
        """
        if mode != self.mode or query.position >= len(self.entries):
            return None
        entry = self.entries[query.position]
        steps = recorded_steps(entry.record, mode)
        if isinstance(steps, str):
            raise _unscorable(entry, steps)
        predictions, gold, gold_at = steps.predictions, steps.gold, steps.gold_at
        if gold is None:
            predictions = self._local(predictions)
            gold, gold_at = self._reference_gold(query), "the local reference"
        problem = check_steps(
            mode, predictions, gold, query.gt_answer, pred_at=steps.pred_at, gold_at=gold_at
        )
        if problem is not None:
            raise _unscorable(entry, problem)
        return Recorded(list(predictions), list(gold))


def _unscorable(entry: Entry, problem: str) -> GtaInfrastructureError:
    # An error of this case only: the other entries of the file are still scored.
    return GtaInfrastructureError(
        f"{entry.label}: {problem} (the official evaluator cannot score this entry either; "
        "repair it or re-run its inference)"
    )


def make_opencompass(spec: ModelSpec, context: ModelContext) -> OpenCompassPredictions:
    """Entry point for ``--gta-model=opencompass:<path>``."""
    if not spec.name:
        raise GtaUsageError(
            f"{OPT_MODEL}=opencompass needs the predictions: {OPT_MODEL}=opencompass:PATH "
            "(a gta_bench*.json file or the directory holding them)"
        )
    path = Path(spec.name).expanduser()
    if not path.is_absolute():
        path = context.invocation_dir / path
    model = OpenCompassPredictions(path, context.dataset, context.recorded_root)
    wrong = [m for m in context.modes if m != model.mode]
    if wrong:
        raise GtaUsageError(
            f"{OPT_MODEL}={spec.raw} holds {model.mode} predictions but {OPT_MODE} asks for "
            f"{','.join(context.modes)}; pass {OPT_MODE}={model.mode} (OpenCompass writes the "
            "two modes to separate prediction files)"
        )
    return model
