"""Key/value states for the ``transformers`` engine: growing buffers and reused prefixes.

* :func:`growing_layer_class` is a ``DynamicLayer`` that decodes into a preallocated buffer
  instead of re-allocating the cache on every token; :func:`cache_of` wraps such layers in the
  ``DynamicCache`` the model's ``forward`` expects.
* :class:`PrefixStore` keeps the states of recently seen token sequences within a memory
  budget, so a prompt that extends one of them (the next turn of an episode, the next step of
  a query) only computes its new tokens.
* :func:`plain_cache` and :func:`cache_keyword` learn from the model whether that fast path
  applies to it and how its ``forward`` takes the cache.

This module imports no torch: the classes that subclass transformers' are defined on first use.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import Any

#: Free slots a row buffer keeps beyond what it must hold, so small prefills do not re-allocate.
GROWTH = 256


def _cache_classes() -> tuple[Any, Any, Any]:
    # deferred: transformers (and torch) stay off the import path until a model loads
    from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

    return Cache, DynamicCache, DynamicLayer


def growing_layer_class() -> Any:
    """:class:`GrowingLayer`, defined on first use so that importing this module needs no torch."""
    global GrowingLayer
    if GrowingLayer is None:
        _, _, dynamic_layer = _cache_classes()

        class _GrowingLayer(dynamic_layer):  # type: ignore[misc, valid-type]
            """A full-attention cache layer that writes new states into a preallocated buffer.

            ``DynamicLayer`` concatenates on every token, re-allocating the whole cache; on a CPU
            that costs more than the attention itself once prompts reach a thousand tokens.
            """

            def __init__(self, keys: Any, values: Any, length: int) -> None:
                super().__init__()
                self.kbuf, self.vbuf, self.length = keys, values, length
                self.dtype, self.device = keys.dtype, keys.device
                self.is_initialized = True
                self.refresh()

            def refresh(self) -> None:
                """Point the views the model reads at the filled part of the buffers."""
                self.keys = self.kbuf[:, :, : self.length]
                self.values = self.vbuf[:, :, : self.length]

            def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
                added = key_states.shape[-2]
                if self.length + added > self.kbuf.shape[-2]:
                    self.kbuf = _grown(self.kbuf, self.length + added + GROWTH)
                    self.vbuf = _grown(self.vbuf, self.length + added + GROWTH)
                end = self.length + added
                self.kbuf[:, :, self.length : end] = key_states
                self.vbuf[:, :, self.length : end] = value_states
                self.length = end
                self.refresh()
                return self.keys, self.values

            def crop(self, max_length: int) -> None:
                self.length = max(0, min(self.length, max_length))
                self.refresh()

        GrowingLayer = _GrowingLayer
    return GrowingLayer


GrowingLayer: Any = None


def _grown(buffer: Any, capacity: int) -> Any:
    # deferred: torch stays off the import path until a model loads
    import torch

    shape = list(buffer.shape)
    shape[-2] = capacity
    bigger = torch.zeros(shape, dtype=buffer.dtype, device=buffer.device)
    bigger[:, :, : buffer.shape[-2]] = buffer
    return bigger


def cache_of(layers: list[Any]) -> Any:
    """A ``DynamicCache`` made of the given layers (the model only calls the Cache API on it)."""
    cache_class, dynamic_cache, _ = _cache_classes()
    cache = dynamic_cache.__new__(dynamic_cache)
    cache_class.__init__(cache, layers=layers)
    return cache


# -- what the model's cache is ----------------------------------------------------------------
def cache_keyword(model: Any) -> str:
    """The keyword of ``model.forward`` that takes the key/value cache.

    transformers 5.24 renamed ``past_key_values`` to ``cache``; the old name still works there
    but warns on every forward pass, which a project with ``filterwarnings = error`` turns into
    a failed request. Earlier releases know only the old name.
    """
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


def plain_cache(model: Any) -> list[tuple[Any, Any]] | None:
    """Zero-length states of each layer if the model's cache is plain full attention, else None.

    Learnt from one tiny forward pass: whatever the architecture says about itself, what
    matters is the cache object it actually builds.
    """
    # deferred: torch stays off the import path until a model loads
    import torch

    _, dynamic_cache, dynamic_layer = _cache_classes()
    config = model.config
    if getattr(config, "is_encoder_decoder", False) or getattr(config, "sliding_window", None):
        return None
    try:
        with torch.inference_mode():
            out = model(
                input_ids=torch.zeros((1, 2), dtype=torch.long, device=model.device),
                use_cache=True,
            )
    except Exception:
        return None
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    layers = getattr(cache, "layers", None)
    if type(cache) is not dynamic_cache or not layers:
        return None
    if any(type(layer) is not dynamic_layer for layer in layers):
        return None
    return [(layer.keys[:, :, :0].clone(), layer.values[:, :, :0].clone()) for layer in layers]


# -- reused prefixes ------------------------------------------------------------------------------
@dataclass
class StoredPrefix:
    """Key/value states of one token sequence, per layer ``(1, heads, length, head_dim)``."""

    ids: Any  # 1-D LongTensor
    kv: list[tuple[Any, Any]]
    used: float = field(default_factory=time.monotonic)

    @property
    def nbytes(self) -> int:
        """The memory its states take (keys and values of every layer)."""
        return sum(k.numel() * k.element_size() * 2 for k, _ in self.kv)


class PrefixStore:
    """Recently computed key/value states by token sequence, within a memory budget."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.entries: list[StoredPrefix] = []

    def match(self, ids: Any) -> tuple[int, StoredPrefix | None]:
        """The longest cached prefix of ``ids``: its length and the entry holding it."""
        best, found = 0, None
        for entry in self.entries:
            n = min(len(entry.ids), len(ids))
            if n <= best:
                continue
            differs = (entry.ids[:n] != ids[:n]).nonzero()
            common = int(differs[0]) if len(differs) else n
            if common > best:
                best, found = common, entry
        if found is not None:
            found.used = time.monotonic()
        return best, found

    def add(self, ids: Any, kv: list[tuple[Any, Any]]) -> None:
        """Keep ``kv`` for ``ids``, dropping entries it extends and the least recently used."""
        if not self.budget:
            return
        self.entries = [
            e
            for e in self.entries
            if not (len(e.ids) <= len(ids) and bool((e.ids == ids[: len(e.ids)]).all()))
        ]
        self.entries.append(StoredPrefix(ids, kv))
        self.entries.sort(key=lambda e: e.used)
        total = sum(e.nbytes for e in self.entries)
        while self.entries and total > self.budget:
            total -= self.entries.pop(0).nbytes
