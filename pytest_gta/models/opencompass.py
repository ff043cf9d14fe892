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
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytest_gta.dataset import Dataset, Query
from pytest_gta.errors import GtaUsageError
from pytest_gta.models.base import ModelContext, ModelSpec, Recorded
from pytest_gta.types import Mode

DEFAULT_STEM = "gta_bench"


def find_prediction_files(path: Path) -> list[Path]:
    """The prediction files behind ``path`` in the order OpenCompass concatenates them.

    Raises:
        GtaUsageError: when nothing usable is there.
    """
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise GtaUsageError(f"--gta-model=opencompass:{path}: no such file or directory")
    families: dict[str, list[Path]] = {}
    for stem in sorted({re.sub(r"_\d+$", "", p.stem) for p in path.glob("*.json")}):
        if (path / f"{stem}.json").is_file():
            families[stem] = [path / f"{stem}.json"]
            continue
        chunks: list[Path] = []
        while (path / f"{stem}_{len(chunks)}.json").is_file():
            chunks.append(path / f"{stem}_{len(chunks)}.json")
        if chunks:
            families[stem] = chunks
    if DEFAULT_STEM in families:
        return families[DEFAULT_STEM]
    if len(families) == 1:
        return next(iter(families.values()))
    found = ", ".join(p.name for p in sorted(path.glob("*.json"))) or "no .json files"
    raise GtaUsageError(
        f"--gta-model=opencompass:{path}: expected {DEFAULT_STEM}.json or "
        f"{DEFAULT_STEM}_0.json, {DEFAULT_STEM}_1.json, ... (found: {found}); "
        "pass the prediction file itself if it has another name"
    )


def load_records(files: list[Path]) -> list[dict[str, Any]]:
    """Per-query records of all files, in official position order."""
    records: list[dict[str, Any]] = []
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise GtaUsageError(f"{file}: not a readable JSON prediction file: {exc}") from None
        if not isinstance(data, dict):
            raise GtaUsageError(f"{file}: expected an object keyed '0', '1', ...")
        for i in range(len(data)):
            record = data.get(str(i))
            if not isinstance(record, dict) or not isinstance(record.get("prediction"), list):
                raise GtaUsageError(
                    f"{file}: entry {str(i)!r} is missing or has no 'prediction' list "
                    f"(OpenCompass numbers entries 0..{len(data) - 1})"
                )
            records.append(record)
    return records


def detect_mode(records: list[dict[str, Any]], source: str) -> Mode:
    """Step files hold one dict per step; end-to-end files hold ``[steps]`` per query."""
    modes = set()
    for record in records:
        prediction = record["prediction"]
        if prediction:
            modes.add("e2e" if isinstance(prediction[0], list) else "step")
    if len(modes) != 1:
        what = "both step and end-to-end entries" if modes else "no predictions at all"
        raise GtaUsageError(f"{source}: cannot tell the mode: the files hold {what}")
    return "e2e" if "e2e" in modes else "step"


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


class OpenCompassPredictions:
    """Recorded predictions of one mode, paired with the dataset by position."""

    protocol = "react"

    def __init__(self, source: Path, dataset: Dataset, recorded_root: str | None = None) -> None:
        self.source = source
        self.dataset = dataset
        self.files = find_prediction_files(source)
        self.records = load_records(self.files)
        self.mode: Mode = detect_mode(self.records, str(source))
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
            if query.position >= len(self.records):
                break
            gold = self.records[query.position].get("gold")
            if gold is None:
                continue
            recorded = gold if self.mode == "step" else (gold[0] if gold else [])
            names = [
                m["tool_calls"][0]["function"]["name"]
                for m in recorded
                if isinstance(m, dict) and "tool_calls" in m
            ]
            expected = [name for name, _ in query.reference_calls]
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
        """The record at the query's position, if the files have one for this mode."""
        if mode != self.mode or query.position >= len(self.records):
            return None
        record = self.records[query.position]
        prediction = record["prediction"]
        gold = record.get("gold")
        if mode == "e2e":
            prediction = prediction[0] if prediction else []
            gold = gold[0] if gold else None
        if gold is None:
            return Recorded(self._local(prediction), self._reference_gold(query))
        return Recorded(list(prediction), list(gold))


def make_opencompass(spec: ModelSpec, context: ModelContext) -> OpenCompassPredictions:
    """Entry point for ``--gta-model=opencompass:<path>``."""
    if not spec.name:
        raise GtaUsageError(
            "--gta-model=opencompass needs the predictions: --gta-model=opencompass:PATH "
            "(a gta_bench*.json file or the directory holding them)"
        )
    path = Path(spec.name).expanduser()
    if not path.is_absolute():
        path = context.invocation_dir / path
    root = context.options.get("recorded_root")
    model = OpenCompassPredictions(path, context.dataset, root)
    wrong = [m for m in context.modes if m != model.mode]
    if wrong:
        raise GtaUsageError(
            f"--gta-model={spec.raw} holds {model.mode} predictions but --gta-mode asks for "
            f"{','.join(context.modes)}; pass --gta-mode={model.mode} (OpenCompass writes the "
            "two modes to separate prediction files)"
        )
    return model
