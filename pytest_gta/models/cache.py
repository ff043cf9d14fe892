"""The on-disk response cache: content-addressed, atomic, shared by xdist workers.

A key is the sha256 of the canonical JSON of everything that determines a response: the
adapter's identity (provider, endpoint, model), the exact payload sent (messages with their
images inlined, so an image's bytes are part of the key; tool schemas), the sampling settings
and, for sampled generations, the epoch. Each entry is one small JSON file written to a temporary
name and renamed into place, so concurrent writers (``-n 8``) never leave a torn file and the
last identical answer wins. A re-run of an interrupted session reads back every answer it
already paid for.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pytest_gta.files import write_atomic
from pytest_gta.models.generation import CacheMode
from pytest_gta.types import ModelOutput, ToolCall, Usage

SCHEMA = "pytest-gta-response/1"


class ResponseCache:
    """Responses by content address under ``root`` (``<root>/<k[:2]>/<k>.json``)."""

    def __init__(self, root: Path, mode: CacheMode = "readwrite") -> None:
        self.root = root
        self.mode = mode
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(material: dict[str, Any]) -> str:
        """sha256 of the canonical JSON of ``material``."""
        text = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    @property
    def readable(self) -> bool:
        """Whether lookups are allowed (``read``/``readwrite``)."""
        return self.mode in ("read", "readwrite")

    @property
    def writable(self) -> bool:
        """Whether new answers are stored (``write``/``readwrite``)."""
        return self.mode in ("write", "readwrite")

    def get(self, key: str) -> ModelOutput | None:
        """The cached output, or ``None`` (a missing or unreadable entry is a miss)."""
        if not self.readable:
            return None
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
            output = _decode(entry["output"])
        except (OSError, ValueError, KeyError, TypeError):
            self.misses += 1
            return None
        self.hits += 1
        return output

    def put(self, key: str, output: ModelOutput, about: dict[str, Any]) -> None:
        """Store ``output`` atomically (best effort: a full disk never fails a case)."""
        if not self.writable:
            return
        entry = {"schema": SCHEMA, "key": key, **about, "output": _encode(output)}
        try:
            write_atomic(self._path(key), json.dumps(entry, ensure_ascii=False))
        except OSError:
            pass


def _encode(output: ModelOutput) -> dict[str, Any]:
    usage = output.usage or Usage()
    return {
        "text": output.text,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in output.tool_calls
        ],
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
    }


def _decode(raw: dict[str, Any]) -> ModelOutput:
    usage = raw.get("usage") or {}
    calls = tuple(
        ToolCall(str(c["name"]), dict(c["arguments"]), str(c.get("id", "")))
        for c in raw.get("tool_calls", [])
    )
    return ModelOutput(
        text=str(raw["text"]),
        usage=Usage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))),
        tool_calls=calls,
    )
