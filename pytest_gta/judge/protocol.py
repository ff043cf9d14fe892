"""The official judge's pure parts, quirks included (SPEC-like facts of GTA-2's evaluator).

Every function here reproduces what ``GPTEvaluator`` does with the same Python operations on
the same raw JSON values, so that a hostile or odd tree (a string weight, a node that is a
list) fails or scores exactly where the official one does: parity is checked against numbers
the official code produced, and a "cleaner" reading would drift from them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Literal

#: The official judge model (``EVAL_OPENAI_MODEL``'s default) and its sampling temperature.
OFFICIAL_MODEL = "gpt-5.2"
TEMPERATURE = 0.2

#: File suffixes uploaded as they are (the official ``SUPPORTED_FILE_EXT``).
UPLOADED = frozenset(
    {".pdf", ".png", ".jpg", ".jpeg", ".webp", ".mp3", ".wav", ".m4a", ".mp4", ".mov", ".webm"}
)
#: Suffixes converted to ``<stem>.pdf`` before upload (wkhtmltopdf in the official code).
CONVERTED = frozenset({".html", ".txt", ".md", ".json"})
IMAGE = frozenset({".png", ".jpg", ".jpeg", ".webp"})
AUDIO = frozenset({".mp3", ".wav", ".m4a"})
VIDEO = frozenset({".mp4", ".mov", ".webm"})

#: Frames per 10 seconds of video the official ffmpeg call extracts (``fps=4/10``).
VIDEO_FPS = "4/10"

FileKind = Literal["image", "audio", "video", "file"]
Handling = Literal["upload", "convert", "skip"]

_NUMBER = re.compile(r"\d+(\.\d+)?")


def file_kind(path: str) -> FileKind:
    """How the judge shows a file, by its suffix (the official ``_infer_file_type``)."""
    ext = PurePath(path).suffix.lower()
    if ext in IMAGE:
        return "image"
    if ext in AUDIO:
        return "audio"
    if ext in VIDEO:
        return "video"
    return "file"


def handling(path: str) -> Handling:
    """Whether a file is uploaded as is, converted to PDF first, or silently left out.

    CSV, DOCX, XLSX, PPTX and every other suffix are left out: the judge never hears of them.
    """
    suffix = PurePath(path).suffix.lower()
    if suffix in UPLOADED:
        return "upload"
    if suffix in CONVERTED:
        return "convert"
    return "skip"


def converted_name(path: str) -> str:
    """The name a converted file uploads under: ``<stem>.pdf`` (two stems collide)."""
    return PurePath(path).stem + ".pdf"


def audio_note(path: str) -> str:
    """The one line an audio file becomes in the judge's input (it is uploaded, then unused)."""
    return f"[Attached audio file exists: {os.path.basename(path)}]"


def normalize_tree(tree: Any) -> dict[str, Any]:
    """The root node: a list becomes the root's children, a lone node its only child.

    Raises:
        ValueError: neither a list nor an object (the official message).
    """
    if isinstance(tree, list):
        return {"id": "root", "sub_tasks": tree}
    if isinstance(tree, dict):
        if "sub_tasks" not in tree:
            return {"id": "root", "sub_tasks": [tree]}
        return tree
    raise ValueError("Invalid checkpoint tree")


def _flatten(obj: Any) -> list[Any]:
    """Lists and tuples flattened depth first; anything else is one item (``None``: none)."""
    if obj is None:
        return []
    if isinstance(obj, (list, tuple)):
        out: list[Any] = []
        for item in obj:
            out.extend(_flatten(item))
        return out
    return [obj]


def final_answer(trace: Any) -> str:
    """The last non-blank assistant content (or bare string) of a trace, stripped, or ``""``."""
    for item in reversed(_flatten(trace)):
        if isinstance(item, dict):
            if item.get("role") == "assistant":
                content = item.get("content")
                if isinstance(content, str) and content.strip():
                    return content.strip()
        elif isinstance(item, str) and item.strip():
            return item.strip()
    return ""


def task_text(origin_prompt: Any) -> str:
    """The original task as the prompt shows it: a list's items joined by newlines."""
    if not origin_prompt:
        return ""
    if isinstance(origin_prompt, list):
        return "\n".join(origin_prompt)
    return str(origin_prompt)


def leaf_prompt(node: dict[str, Any], trace: Any, origin_prompt: Any) -> str:
    """The official leaf prompt, word for word (``_build_leaf_prompt``)."""
    req = node.get("requirements", "(none)")
    task = task_text(origin_prompt)
    answer = final_answer(trace) or "(empty)"
    return f"""
You are a professional LLM Agent evaluator. All of the generated files(converted to pdf) and images from the LLM Agent are uploaded, videos are converted to several image frames, and audio files are checked for existence.

Original task:
{task}

Final answer:
{answer}

Checkpoint requirement:
{req}

Please score this checkpoint from 0 to 10. If required files are missing, give a low score.

Only output valid JSON:
{{"score": number, "analysis": "short explanation (<80 words)"}}
""".strip()  # noqa: E501 (the official prompt's line, kept whole)


@dataclass(frozen=True)
class ParsedScore:
    """A leaf's score as the official parser read the reply (an ``int`` where it gives one)."""

    score: float | int
    analysis: Any
    #: ``json``, ``regex`` (the first number anywhere) or ``none`` (no number: 0).
    how: str


def parse_score(text: str) -> ParsedScore:
    """The official ``_parse_score``: JSON clamped to 0-10, else the first number, else 0.

    Python's ``min``/``max`` keep the official types: a JSON score above 10 becomes the ``int``
    10, ``NaN`` becomes 10, and ``"-3"`` in prose reads as 3 (the pattern has no sign).
    """
    try:
        data = json.loads(text)
        s = float(data.get("score", 0))
        return ParsedScore(max(0, min(10, s)), data.get("analysis", ""), "json")
    except Exception:
        pass
    m = _NUMBER.search(text)
    if m:
        return ParsedScore(min(10, float(m.group())), "regex fallback", "regex")
    return ParsedScore(0, "parse failed", "none")


@dataclass(frozen=True)
class AttachedFile:
    """One deliverable the judge is shown, as the official code normalises it."""

    path: str
    kind: FileKind


def attached(files: Any) -> list[AttachedFile]:
    """The files of a task in order, flattened (``_flatten_files`` + ``_normalize_file``).

    Raises:
        TypeError: an object entry without a usable ``path`` (the official code fails there,
            and so the whole task does).
    """
    out: list[AttachedFile] = []
    for item in _flatten(files):
        if isinstance(item, dict):
            path = item.get("path")
            kind = file_kind(path)  # type: ignore[arg-type]  # None raises, as officially
            if path:
                out.append(AttachedFile(str(path), kind))
        elif isinstance(item, str) and item.strip():
            out.append(AttachedFile(item.strip(), file_kind(item.strip())))
    return out


def leaves(root: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Leaves in the order the judge visits them (for planning; the walk itself is in .walk)."""
    children = root.get("sub_tasks", [])
    if not children:
        yield root
        return
    for child in children:
        yield from leaves(child)
