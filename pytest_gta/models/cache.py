"""The on-disk response cache: content-addressed, atomic, shared by xdist workers.

A key is the sha256 of the canonical JSON of everything that determines a response: the
adapter's identity (provider, endpoint, model), the exact payload sent (messages with their
images inlined, so an image's bytes are part of the key; tool schemas), the sampling settings
and, for sampled generations, the epoch. Each entry is one small JSON file written to a temporary
name and renamed into place, so concurrent writers (``-n 8``) never leave a torn file and the
last identical answer wins. A re-run of an interrupted session reads back every answer it
already paid for.

One :class:`ResponseCache` is shared by the threads of a process (``--gta-concurrency``): an
entry is only ever read whole or written by rename, and the hit and miss counters are kept under
a lock. Identical requests in flight at once are each sent (the cache does not hold one back to
wait for the other's answer); they leave one entry.

The key's canonical JSON and the entry's text follow :mod:`pytest_gta.disk_records`, as the tool
cassettes do.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

from pytest_gta import jsonsafe
from pytest_gta.disk_records import digest, dump_entry
from pytest_gta.files import write_atomic
from pytest_gta.models.generation import CacheMode
from pytest_gta.types import ModelOutput, ToolCall, Usage

SCHEMA = "pytest-gta-response/1"


class CacheEntryWarning(UserWarning):
    """A response-cache entry was not used: it does not hold what its name says.

    The entry costs a miss (the model is asked again) and is replaced by the fresh answer.
    """


#: The largest token count an entry may claim: JSON's exact-integer range. Counts feed the
#: budget and the cost (a float), which a count like ``10**400`` would overflow.
MAX_TOKENS = 2**53


class ResponseCache:
    """Responses by content address under ``root`` (``<root>/<k[:2]>/<k>.json``)."""

    def __init__(self, root: Path, mode: CacheMode = "readwrite") -> None:
        self.root = root
        self.mode = mode
        self.hits = 0
        self.misses = 0
        self._counting = threading.Lock()

    @staticmethod
    def key(material: dict[str, Any]) -> str:
        """sha256 of the canonical JSON of ``material``."""
        return digest(material)

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
        """The cached output, or ``None`` (a missing or unusable entry is a miss).

        An entry is used only when it is what :meth:`put` writes for this very request: this
        schema, this key, an output of the right types with token counts that are whole numbers
        from 0 to :data:`MAX_TOKENS`. Anything else (an entry copied under another request's
        name, a foreign schema, negative usage, a FIFO in its place) is a miss with a
        :class:`CacheEntryWarning` naming the file; the fresh answer is written over it.
        """
        if not self.readable:
            return None
        path = self._path(key)
        output: ModelOutput | None = None
        try:
            entry = jsonsafe.read_json(path)
        except FileNotFoundError:
            problem = None
        except (OSError, jsonsafe.JsonInputError) as exc:
            problem = str(exc)
        else:
            output, problem = _check_entry(entry, key)
        if problem is not None:
            warnings.warn(
                f"pytest-gta: response cache entry {path} not used ({problem}); treated as a "
                "miss (the fresh answer replaces it when the cache is written)",
                CacheEntryWarning,
                stacklevel=2,
            )
        with self._counting:
            if output is None:
                self.misses += 1
            else:
                self.hits += 1
        return output

    def put(self, key: str, output: ModelOutput, about: dict[str, Any]) -> None:
        """Store ``output`` atomically (best effort: a full disk never fails a case)."""
        if not self.writable:
            return
        entry = {"schema": SCHEMA, "key": key, **about, "output": _encode(output)}
        try:
            write_atomic(self._path(key), dump_entry(entry))
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


def _check_entry(entry: Any, key: str) -> tuple[ModelOutput | None, str | None]:
    """The output of an entry read for ``key``, or ``None`` and why it cannot be used."""
    if not isinstance(entry, dict):
        return None, "not a JSON object"
    if entry.get("schema") != SCHEMA:
        return None, f"schema {_short(entry.get('schema'))}, expected {SCHEMA!r}"
    if entry.get("key") != key:
        return None, f"it is the entry of another request (key {_short(entry.get('key'))})"
    output = _decode(entry.get("output"))
    if output is None:
        return None, (
            "its output is not text, tool calls and token counts from 0 to "
            f"{MAX_TOKENS} as pytest-gta writes them"
        )
    return output, None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _count(value: Any) -> int | None:
    """A token count as :func:`_encode` writes it (a missing one is 0), else ``None``."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS:
        return value
    return None


def _decode(raw: Any) -> ModelOutput | None:
    """The output :func:`_encode` wrote, or ``None`` when ``raw`` is not of that shape."""
    if not isinstance(raw, dict) or not isinstance(raw.get("text"), str):
        return None
    usage = raw.get("usage") or {}
    calls = raw.get("tool_calls", [])
    if not isinstance(usage, dict) or not isinstance(calls, list):
        return None
    decoded = []
    for call in calls:
        if not (
            isinstance(call, dict)
            and isinstance(call.get("name"), str)
            and isinstance(call.get("arguments"), dict)
            and isinstance(call.get("id", ""), str)
        ):
            return None
        decoded.append(ToolCall(call["name"], call["arguments"], call.get("id", "")))
    input_tokens = _count(usage.get("input_tokens"))
    output_tokens = _count(usage.get("output_tokens"))
    if input_tokens is None or output_tokens is None:
        return None
    return ModelOutput(raw["text"], Usage(input_tokens, output_tokens), tuple(decoded))
