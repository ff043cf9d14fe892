"""Proves that ``tests/helpers/hf_server.py`` is a Hub that ``snapshot_download`` accepts.

What in-process tests must patch (huggingface_hub 2.4.0). ``huggingface_hub.constants`` reads
its environment once, at import, so setting ``HF_ENDPOINT``/``HF_HOME``/``HF_HUB_OFFLINE`` with
``monkeypatch.setenv`` in a process that has already imported huggingface_hub changes nothing.
The values that matter for ``snapshot_download`` must be patched on the module as well (the
``hub_env`` fixture below does both, env for subprocesses and constants for this process):

``ENDPOINT`` and ``HUGGINGFACE_CO_URL_TEMPLATE``
    ``HfApi`` (repo info, tree) reads ``ENDPOINT``, but file URLs (``hf_hub_url``, used for every
    HEAD/GET of a file) are built from ``HUGGINGFACE_CO_URL_TEMPLATE``, which was formatted from
    ``ENDPOINT`` at import. Patching only ``ENDPOINT`` sends the file requests to huggingface.co.
``HF_HUB_CACHE`` (plus ``HF_HOME``, ``HF_ASSETS_CACHE``, ``HF_XET_CACHE``)
    The default ``cache_dir``; otherwise the user's real ``~/.cache/huggingface/hub`` is used.
    (``scan_cache_dir`` imported ``HF_HUB_CACHE`` by value: pass it ``cache_dir`` explicitly.)
``HF_TOKEN_PATH`` and ``HF_STORED_TOKENS_PATH``
    Where the login token file is read from when ``HF_TOKEN`` is unset; otherwise a developer's
    own ``hf auth login`` token is sent to the test server. ``HF_TOKEN`` itself is read from
    ``os.environ`` on every request, so ``monkeypatch.setenv``/``delenv`` is enough for it.
``HF_HUB_OFFLINE``
    ``is_offline_mode()`` returns this constant; every request huggingface_hub makes checks it.
``HF_HUB_DISABLE_TELEMETRY`` (and ``AGENT_HARNESSES_PATH``)
    Unless telemetry is off, the first User-Agent built in a process fetches
    ``{ENDPOINT}/api/agent-harnesses`` (cached in-process and in ``AGENT_HARNESSES_PATH``, under
    the import-time ``HF_HOME``), so whether a given test sees that request depends on the order
    tests run in, and it writes into the real home. Turning telemetry off removes the request.

The alternative is a subprocess with the environment set before huggingface_hub is imported.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import huggingface_hub
import pytest
from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tests.helpers.hf_server import PointAt, git_blob_oid, serve_hf_repo

FILES = {
    "README.md": b"---\nlicense: apache-2.0\n---\n# GTA\n",
    "dataset/dataset.json": b'{"0": {"tools": [], "dialogs": []}}',
    "image/image_1.jpg": b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40 + b"\xff\xd9",
    "image/image 2.png": b"\x89PNG\r\n\x1a\n not really",
    "image/nested/deeper/note.txt": "ünïcode\n".encode(),
}


def download() -> Path:
    return Path(snapshot_download(repo_id="Jize1/GTA", repo_type="dataset"))


def assert_snapshot(path: Path, files: dict[str, bytes]) -> None:
    on_disk = {p.relative_to(path).as_posix() for p in path.rglob("*") if not p.is_dir()}
    assert on_disk == set(files)
    for name, data in files.items():
        assert (path / name).read_bytes() == data, name


def test_snapshot_download_gets_every_file(hub_env: PointAt) -> None:
    with serve_hf_repo(FILES) as hub:
        cache = hub_env(hub.url)
        path = download()

    repo_dir = cache / "datasets--Jize1--GTA"
    assert path == repo_dir / "snapshots" / hub.commit
    assert_snapshot(path, FILES)
    # "main" was resolved to the commit, and each blob is stored under its ETag (git blob sha1).
    assert (repo_dir / "refs" / "main").read_text() == hub.commit
    assert {p.name for p in (repo_dir / "blobs").iterdir()} == {
        git_blob_oid(d) for d in FILES.values()
    }

    api = "/api/datasets/Jize1/GTA"
    resolve = f"/datasets/Jize1/GTA/resolve/{hub.commit}/"
    quoted = {name: quote(name) for name in FILES}  # what hf_hub_url does
    assert sorted((m, p) for m, p, _ in hub.requests) == sorted(
        [
            ("GET", f"{api}/revision/main"),
            ("GET", f"{api}/tree/{hub.commit}?recursive=true&expand=false"),
            *[("HEAD", resolve + q) for q in quoted.values()],
            *[("GET", resolve + q) for q in quoted.values()],
        ]
    )
    assert all("authorization" not in headers for _, _, headers in hub.requests)


def test_second_download_only_resolves_main(hub_env: PointAt) -> None:
    with serve_hf_repo(FILES) as hub:
        hub_env(hub.url)
        first = download()
        hub.requests.clear()
        assert download() == first
    assert hub.paths() == ["/api/datasets/Jize1/GTA/revision/main"]


def test_local_dir_download(hub_env: PointAt, tmp_path: Path) -> None:
    target = tmp_path / "gta"
    with serve_hf_repo(FILES) as hub:
        cache = hub_env(hub.url)
        path = snapshot_download(repo_id="Jize1/GTA", repo_type="dataset", local_dir=target)
        hub.requests.clear()
        snapshot_download(repo_id="Jize1/GTA", repo_type="dataset", local_dir=target)
    assert Path(path) == target.resolve()
    for name, data in FILES.items():
        assert (target / name).read_bytes() == data
    assert (target / ".cache" / "huggingface").is_dir()  # metadata lives next to the files
    assert not (cache / "datasets--Jize1--GTA" / "blobs").exists()
    assert hub.paths() == ["/api/datasets/Jize1/GTA/revision/main"]


def test_tree_pagination(hub_env: PointAt) -> None:
    with serve_hf_repo(FILES, tree_page_size=2) as hub:
        hub_env(hub.url)
        assert_snapshot(download(), FILES)
    tree_pages = [p for p in hub.paths("GET") if "/tree/" in p]
    # 5 files and 4 directories (dataset, image, image/nested, image/nested/deeper), 2 a page.
    assert len(tree_pages) == 5
    assert all("cursor=" in p for p in tree_pages[1:])


def test_private_repo_needs_the_token(hub_env: PointAt, monkeypatch: pytest.MonkeyPatch) -> None:
    with serve_hf_repo(FILES, token="hf_test_secret") as hub:
        hub_env(hub.url)
        with pytest.raises(HfHubHTTPError) as anonymous:
            download()
        # The Hub's bare 401 becomes RepositoryNotFoundError only on an https:// endpoint.
        assert type(anonymous.value) is HfHubHTTPError
        assert anonymous.value.response.status_code == 401
        assert "Invalid username or password." in str(anonymous.value)

        monkeypatch.setenv("HF_TOKEN", "hf_wrong")
        with pytest.raises(HfHubHTTPError, match="Invalid credentials in Authorization header"):
            download()

        hub.requests.clear()
        monkeypatch.setenv("HF_TOKEN", "hf_test_secret")
        assert_snapshot(download(), FILES)
    assert hub.requests
    assert all(h.get("authorization") == "Bearer hf_test_secret" for _, _, h in hub.requests)


def test_gated_repo_raises_gated_error(hub_env: PointAt, monkeypatch: pytest.MonkeyPatch) -> None:
    with serve_hf_repo(FILES, token="hf_test_secret", gated=True) as hub:
        hub_env(hub.url)
        with pytest.raises(GatedRepoError):
            download()
        monkeypatch.setenv("HF_TOKEN", "hf_test_secret")
        assert_snapshot(download(), FILES)


def test_missing_repo(hub_env: PointAt) -> None:
    with serve_hf_repo(FILES, missing=True) as hub:
        hub_env(hub.url)
        with pytest.raises(RepositoryNotFoundError):
            download()
    assert hub.paths() == ["/api/datasets/Jize1/GTA/revision/main"]


def test_wrong_repo_type_or_revision(hub_env: PointAt) -> None:
    with serve_hf_repo(FILES) as hub:
        hub_env(hub.url)
        with pytest.raises(RepositoryNotFoundError):
            snapshot_download(repo_id="Jize1/GTA")  # a model repo of that name
        with pytest.raises(RevisionNotFoundError):
            snapshot_download(repo_id="Jize1/GTA", repo_type="dataset", revision="v9")


def test_offline_with_empty_cache_makes_no_request(hub_env: PointAt) -> None:
    with serve_hf_repo(FILES) as hub:
        hub_env(hub.url, offline=True)
        with pytest.raises(LocalEntryNotFoundError) as offline:
            download()
    assert isinstance(offline.value.__cause__, OfflineModeIsEnabled)
    assert hub.requests == []


def test_offline_with_cache_returns_snapshot(hub_env: PointAt) -> None:
    with serve_hf_repo(FILES) as hub:
        hub_env(hub.url)
        online = download()
        hub.requests.clear()
        hub_env(hub.url, offline=True)
        assert download() == online
    assert hub.requests == []
    assert_snapshot(online, FILES)


def test_resolve_headers_and_ranges() -> None:
    data = FILES["image/image_1.jpg"]
    with serve_hf_repo(FILES) as hub:
        url = f"{hub.url}/datasets/Jize1/GTA/resolve/main/image/image_1.jpg"
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD")) as head:
            assert head.status == 200
            assert head.headers["ETag"] == f'"{git_blob_oid(data)}"'
            assert head.headers["X-Repo-Commit"] == hub.commit
            assert head.headers["Content-Length"] == str(len(data))
            assert head.read() == b""
        for spec, first, last in (("100-199", 100, 199), ("100-", 100, None), ("-7", -7, None)):
            request = urllib.request.Request(url, headers={"Range": f"bytes={spec}"})
            with urllib.request.urlopen(request) as part:
                assert part.status == 206
                assert part.read() == data[first : None if last is None else last + 1]
        request = urllib.request.Request(url, headers={"Range": f"bytes={len(data)}-"})
        with pytest.raises(urllib.error.HTTPError) as unsatisfiable:
            urllib.request.urlopen(request)
        assert unsatisfiable.value.code == 416
        assert unsatisfiable.value.headers["Content-Range"] == f"bytes */{len(data)}"
        unsatisfiable.value.close()
        with pytest.raises(urllib.error.HTTPError) as absent:
            urllib.request.urlopen(url.replace("image_1.jpg", "nope.jpg"))
        assert absent.value.code == 404
        assert absent.value.headers["X-Error-Code"] == "EntryNotFound"
        assert absent.value.headers["X-Repo-Commit"] == hub.commit
        absent.value.close()


def test_env_alone_does_not_reach_an_imported_huggingface_hub(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = (constants.ENDPOINT, constants.HF_HUB_CACHE, constants.is_offline_mode())
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HOME", "/nonexistent/hf_home")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0" if before[2] else "1")
    assert (constants.ENDPOINT, constants.HF_HUB_CACHE, constants.is_offline_mode()) == before
    url = huggingface_hub.hf_hub_url("Jize1/GTA", "README.md", repo_type="dataset")
    assert not url.startswith("http://127.0.0.1:9")
    # Patching ENDPOINT alone is not enough either: file URLs come from the template.
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    url = huggingface_hub.hf_hub_url("Jize1/GTA", "README.md", repo_type="dataset")
    assert not url.startswith("http://127.0.0.1:9")
