"""``--gta-data-info`` and the report's ``dataset.statistics`` against counts made by hand.

The expected numbers are computed here from the raw JSON with nothing from pytest_gta, and the
tool categories are written out from the SPEC's tool table, so a bug in the plugin's counting
cannot hide in a shared helper.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from pytest_gta.datainfo import (
    PAPER,
    RELEASE_DIFFERENCES,
    RELEASE_SHA256,
    differences,
    format_statistics,
)
from pytest_gta.dataset import bundled_sample_path
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA

SAMPLE = bundled_sample_path()
LETTER = {
    "OCR": "P",
    "ImageDescription": "P",
    "RegionAttributeDescription": "P",
    "TextToBbox": "P",
    "DrawBox": "O",
    "AddText": "O",
    "GoogleSearch": "O",
    "Calculator": "L",
    "Solver": "L",
    "Plot": "L",
    "MathOCR": "L",
    "CountGivenObject": "L",
    "TextToImage": "C",
    "ImageStylization": "C",
}


def counted_by_hand(root: Path) -> dict:
    data = json.loads((root / "dataset.json").read_text())
    kinds: Counter[str] = Counter()
    steps: Counter[int] = Counter()
    calls_per_query: Counter[int] = Counter()
    tools: Counter[int] = Counter()
    combos: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    used: set[str] = set()
    for item in data.values():
        gt = item["gt_answer"]
        kinds["image" if gt is None else "objective" if isinstance(gt, dict) else "subjective"] += 1
        names = [
            m["tool_calls"][0]["function"]["name"]
            for m in item["dialogs"]
            if m["role"] == "assistant" and m.get("tool_calls")
        ]
        last = item["dialogs"][-1]
        answered = last["role"] == "assistant" and "tool_calls" not in last
        steps[len(names) + (1 if gt and answered else 0)] += 1
        calls_per_query[len(names)] += 1
        tools[len(item["tools"])] += 1
        letters = {LETTER[n] for n in names}
        combos["+".join(c for c in "POLC" if c in letters)] += 1
        calls.update(names)
        used.update(f["path"] for f in item["files"] if f["type"] == "image")
    pictures = {
        f"image/{p.name}"
        for p in (root / "image").iterdir()
        if p.suffix == ".jpg" and p.name != "dummy_generated_image.jpg"
    }
    return {
        "queries": len(data),
        "queries_by_type": {k: kinds[k] for k in ("objective", "subjective", "image")},
        "text_answer_queries": kinds["objective"] + kinds["subjective"],
        "images": len(pictures),
        "unused_images": sorted(pictures - used),
        "steps": sum(k * v for k, v in steps.items()),
        "tool_calls": sum(calls.values()),
        "tools": len(calls),
        "steps_per_query": {str(k): steps[k] for k in sorted(steps)},
        "tool_calls_per_query": {str(k): calls_per_query[k] for k in sorted(calls_per_query)},
        "tools_per_query": {str(k): tools[k] for k in sorted(tools)},
        "category_combinations": dict(combos),
        "calls": dict(calls),
    }


def test_sample_counts_by_hand_are_what_the_sample_was_built_with() -> None:
    # Pinned from fixtures/make_gta_sample.py's own summary line, so the hand count is checked too.
    expected = counted_by_hand(SAMPLE)
    assert expected["queries"] == 17
    assert expected["tool_calls"] == 48
    assert expected["queries_by_type"] == {"objective": 9, "subjective": 3, "image": 5}
    assert expected["tools"] == 14


def test_data_info_matches_the_hand_count(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest("--gta-data-info", SAMPLE_DATA, "--gta-report=info.json")
    assert result.ret == 0, result.stderr.str()
    expected = counted_by_hand(SAMPLE)
    info = json.loads((pytester.path / "info.json").read_text())["dataset"]
    stats = info["statistics"]
    for key in (
        "queries",
        "queries_by_type",
        "text_answer_queries",
        "images",
        "unused_images",
        "steps",
        "tool_calls",
        "tools",
        "steps_per_query",
        "tool_calls_per_query",
        "tools_per_query",
    ):
        assert stats[key] == expected[key], key
    assert stats["category_combinations"] == expected["category_combinations"]
    assert {t: u["calls"] for t, u in stats["tools_used"].items()} == expected["calls"]
    assert info["manifest_entry"] == "gta_sample"
    assert info["source"] == "bundled sample"
    assert info["install"] is None

    out = result.stdout.str()
    assert f"pytest-gta: dataset {SAMPLE} (bundled sample)" in out
    assert "pytest-gta: manifest entry: gta_sample" in out
    rows = {
        "queries": expected["queries"],
        "objective": expected["queries_by_type"]["objective"],
        "subjective": expected["queries_by_type"]["subjective"],
        "image generation": expected["queries_by_type"]["image"],
        "queries with text answers": expected["text_answer_queries"],
        r"images \(files in image/\)": expected["images"],
        r"steps \(calls \+ text answers\)": expected["steps"],
    }
    for label, value in rows.items():
        assert re.search(rf"^\s+{label}\s+{value}\s+\d+$", out, re.M), label
    assert re.search(rf"^\s+tool calls\s+{expected['tool_calls']}\s+-$", out, re.M)
    steps = "  ".join(f"{k}: {v}" for k, v in expected["steps_per_query"].items())
    assert f"steps per query:       {steps}" in out
    for combo, count in expected["category_combinations"].items():
        assert f"{combo}: {count}" in out


def test_every_run_report_carries_the_statistics(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest(
        "--gta-model=oracle",
        SAMPLE_DATA,
        "--gta-ids=0",
        FAST_SIM,
        "--gta-report=gta.json",
    )
    result.assert_outcomes(passed=1)
    dataset = json.loads((pytester.path / "gta.json").read_text())["dataset"]
    assert dataset["statistics"]["tool_calls"] == counted_by_hand(SAMPLE)["tool_calls"]
    assert dataset["statistics"]["queries"] == 17  # the whole dataset, not the selection
    assert dataset["selected"] == 1
    assert dataset["install"] is None


def test_the_paper_counts_are_consistent_with_themselves() -> None:
    # The SPEC's numbers: the histograms must add up to the totals they describe.
    steps = PAPER["steps_per_query"]
    assert sum(steps.values()) == PAPER["queries"]
    assert sum(int(k) * v for k, v in steps.items()) == PAPER["steps"]
    assert sum(PAPER["tools_per_query"].values()) == PAPER["queries"]
    assert sum(PAPER["queries_by_type"].values()) == PAPER["queries"]
    assert PAPER["text_answer_queries"] == PAPER["queries"] - PAPER["queries_by_type"]["image"]


def test_differences_are_listed_and_explained_only_for_the_release() -> None:
    stats = dict(PAPER)
    assert differences(stats) == []
    stats["images"] = 251
    assert differences(stats) == ["images: 251 here, 252 in the paper"]
    stats["steps_per_query"] = {"2": 229}
    assert differences(stats)[1] == "steps per query: 2: 229 here, " + (
        "2: 44  3: 130  4: 36  5: 13  6: 2  7: 3  8: 1 in the paper"
    )
    explained = differences(stats, RELEASE_SHA256)[1]
    assert explained.endswith(RELEASE_DIFFERENCES["steps_per_query"])


def test_format_shows_the_paper_beside_the_data(sample_dataset) -> None:
    from pytest_gta.datainfo import dataset_statistics

    lines = format_statistics(dataset_statistics(sample_dataset))
    assert re.fullmatch(r"\s+queries\s+17\s+229", lines[1])
    assert any(
        line.strip() == "paper:               2: 44  3: 130  4: 36  5: 13  6: 2  7: 3  8: 1"
        for line in lines
    )
