"""How often the local OCR (RapidOCR) agrees with the real release's reference OCR (not a test).

The official GTA deployment ran EasyOCR (AgentLego's ``OCR`` tool, paragraph mode); the release's
reference outputs are what it printed, one ``(x1, y1, x2, y2) text`` line per region. This script
runs our ``OCR`` tool on the image of every OCR reference call of the real release (131 calls)
and compares the two answers call by call:

* text similarity: ``difflib``'s ratio between the two recognised texts, each the regions'
  texts in the printed order, lower-cased, with all whitespace removed (PP-OCR drops the
  spaces between Latin words, and paragraphs against lines put spaces elsewhere);
* reference words found: the share of the reference's words (runs of letters and digits,
  lower-cased) that occur in our whitespace-free text, and the other way round, ours found in
  the reference's (order-free, so a different reading order costs nothing here);
* regions located: the share of reference regions whose box centre lies inside one of our boxes,
  and of ours inside one of the reference's (EasyOCR merges lines into paragraphs, so boxes are
  compared by containment, not IoU).

Eight reference answers (queries 0, 1, 27, 28, 31, 34, 35, 37) separate their lines with a
literal backslash and ``n`` instead of a line break; they are read with line breaks. Query 108's
reference call names query 107's image (``image_288.jpg``, a drinks menu) while its recorded
answer reads the query's own ``image_289.jpg`` (a CPU price list); it is compared as written, so
it agrees hardly at all.

Words are micro-averaged over all calls; the other measures are per-call means and medians. It
prints a summary table and, with ``--calls``, one row per call. It needs the release
(``--release``, else ``$PYTEST_GTA_RELEASE``, else ``../shared/gta_release``) and takes about
2 s a call on one core.

    python benchmarks/ocr_agreement.py [--release PATH] [--limit N] [--calls]
"""

from __future__ import annotations

import argparse
import difflib
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gta.dataset import call_function  # noqa: E402
from pytest_gta.tools import ToolContext, ToolInvocation  # noqa: E402
from pytest_gta.validation import load_dataset  # noqa: E402
from tests.helpers.release import find_release  # noqa: E402
from tool_backends import ocr  # noqa: E402

_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Agreement:
    """How one call's answer compares with its reference answer."""

    qid: str
    similarity: float
    reference_words: int
    reference_words_found: int
    our_words: int
    our_words_found: int
    reference_regions_located: float
    our_regions_located: float
    seconds: float


def squeezed(regions: Sequence[ocr.Region]) -> str:
    """The regions' texts in order, lower-cased, every whitespace removed."""
    return "".join("".join(region.text.split()).lower() for region in regions)


def words(regions: Sequence[ocr.Region]) -> list[str]:
    """The lower-cased runs of letters and digits of the regions' texts."""
    return [w.lower() for region in regions for w in _WORD.findall(region.text)]


def located(regions: Sequence[ocr.Region], boxes: Sequence[ocr.Region]) -> float:
    """The share of ``regions`` whose box centre lies inside one of ``boxes`` (1.0 for none)."""
    if not regions:
        return 1.0

    def inside(region: ocr.Region) -> bool:
        x, y = (region.x1 + region.x2) / 2, (region.y1 + region.y2) / 2
        return any(b.x1 <= x <= b.x2 and b.y1 <= y <= b.y2 for b in boxes)

    return sum(inside(region) for region in regions) / len(regions)


def compare(
    qid: str, ours: Sequence[ocr.Region], reference: Sequence[ocr.Region], seconds: float
) -> Agreement:
    """Every measure of one call (see the module docstring)."""
    our_text, reference_text = squeezed(ours), squeezed(reference)
    matcher = difflib.SequenceMatcher(None, our_text, reference_text, autojunk=False)
    reference_words, our_words = words(reference), words(ours)
    return Agreement(
        qid,
        matcher.ratio() if our_text or reference_text else 1.0,
        len(reference_words),
        sum(w in our_text for w in reference_words),
        len(our_words),
        sum(w in reference_text for w in our_words),
        located(reference, ours),
        located(ours, reference),
        seconds,
    )


def summary(rows: Sequence[Agreement]) -> list[tuple[str, str]]:
    """The table's rows: a measure and its value over all calls."""
    similarity = [r.similarity for r in rows]
    found = sum(r.reference_words_found for r in rows)
    found_share = found / max(1, sum(r.reference_words for r in rows))
    ours = sum(r.our_words_found for r in rows) / max(1, sum(r.our_words for r in rows))
    located_ours = statistics.mean(r.our_regions_located for r in rows)
    return [
        ("calls", f"{len(rows)}"),
        ("text similarity, mean", f"{statistics.mean(similarity):.3f}"),
        ("text similarity, median", f"{statistics.median(similarity):.3f}"),
        ("calls with similarity >= 0.9", share(sum(s >= 0.9 for s in similarity), len(rows))),
        ("calls with similarity >= 0.5", share(sum(s >= 0.5 for s in similarity), len(rows))),
        ("calls with the same text", share(sum(s == 1.0 for s in similarity), len(rows))),
        ("reference words found in ours", f"{found_share:.1%}"),
        ("our words found in the reference", f"{ours:.1%}"),
        (
            "reference regions located, mean",
            f"{statistics.mean(r.reference_regions_located for r in rows):.1%}",
        ),
        ("our regions located, mean", f"{located_ours:.1%}"),
        ("seconds per call, median", f"{statistics.median(r.seconds for r in rows):.2f}"),
    ]


def share(count: int, total: int) -> str:
    """``"97 (74.0%)"``."""
    return f"{count} ({count / max(1, total):.1%})"


def main() -> None:
    """Run the OCR tool on every OCR reference call and print the agreement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", type=Path, default=None, help="the real release's folder")
    parser.add_argument("--limit", type=int, default=None, help="only the first N calls")
    parser.add_argument("--calls", action="store_true", help="also print one row per call")
    options = parser.parse_args()
    root = options.release or find_release()
    if root is None:
        parser.error("the real GTA release was not found: pass --release PATH")
    dataset = load_dataset(root)
    meta = dataset.toolmeta["OCR"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for query in dataset:
            dialogs = dataset.reference_dialogs(query)
            for index, message in enumerate(dialogs):
                if message.get("role") != "assistant" or not message.get("tool_calls"):
                    continue
                function = call_function(message)
                if function["name"] != "OCR" or len(rows) == options.limit:
                    continue
                arguments = dict(function["arguments"])
                invocation = ToolInvocation(meta, arguments, arguments)
                start = time.perf_counter()
                answer = ocr.ocr(invocation, ToolContext(dataset, query, Path(tmp)))
                seconds = time.perf_counter() - start
                written = str(dialogs[index + 1]["content"]["content"])
                reference = ocr.parse_output(written.replace("\\n", "\n"))
                ours = ocr.parse_output(answer.format())
                rows.append(compare(query.qid, ours, reference, seconds))
    if options.calls:
        print("| query | similarity | reference words found | our words found | seconds |")
        print("|---|---:|---:|---:|---:|")
        for r in rows:
            print(
                f"| {r.qid} | {r.similarity:.3f} | {r.reference_words_found}/{r.reference_words}"
                f" | {r.our_words_found}/{r.our_words} | {r.seconds:.2f} |"
            )
        print()
    print("| measure | value |")
    print("|---|---:|")
    for name, value in summary(rows):
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
