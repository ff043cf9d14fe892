"""Where a dataset comes from: the Hugging Face Hub, an HTTP(S) URL, or a local zip/directory.

Each source turns into something on local disk (a zip file or a directory) that the installer
unpacks and verifies; nothing here decides whether the data is good. HTTP downloads go to a
``.part`` file beside a small JSON note of what it is, so an interrupted download is resumed
with a ``Range`` request next time (or restarted when the server's file changed), and a file is
only called complete when its length matches what the server announced.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from pytest_gta.errors import GtaDataError
from pytest_gta.flags import OPT_DOWNLOAD, OPT_DOWNLOAD_URL

if TYPE_CHECKING:
    import httpx2

HF_REPO = "Jize1/GTA"
RELEASE_URL = "https://github.com/open-compass/GTA/releases/download/v0.1.0/gta_dataset.zip"
#: GTA-Workflow (GTA-2): what ``--gta-download=workflow`` tries, in this order.
WORKFLOW_HF_REPO = "Jize1/GTA-Workflow"
WORKFLOW_RELEASE_URL = (
    "https://github.com/open-compass/GTA/releases/download/v0.2.0/gta_workflow_dataset.zip"
)

Log = Callable[[str], None]


class SourceUnavailable(GtaDataError):
    """This source cannot deliver (network down, not found, offline); try the next one."""


class _Transient(Exception):
    """A status worth retrying (429, 5xx)."""


@dataclass(frozen=True)
class Fetched:
    """A source's data on local disk."""

    path: Path
    #: ``zip`` or ``dir``.
    kind: str
    #: What to record and print: the URL, ``hf:Jize1/GTA@<commit>``, or the local path.
    origin: str
    #: Delete ``path`` once installed (a finished download), or leave it (a user's file).
    owned: bool = False


def hf_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for no network (huggingface_hub's own truthy values)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def is_url(value: str) -> bool:
    """Whether ``value`` is an http(s) or file URL rather than a path."""
    return urlparse(value).scheme in ("http", "https", "file")


def fetch_local(value: str, base: Path) -> Fetched:
    """A zip file or a directory given by path (or ``file://`` URL)."""
    parsed = urlparse(value)
    raw = unquote(parsed.path) if parsed.scheme == "file" else value
    path = (base / Path(raw).expanduser()).absolute()
    if path.is_dir():
        return Fetched(path, "dir", str(path))
    if path.is_file():
        return Fetched(path, "zip", str(path))
    raise GtaDataError(
        f"{OPT_DOWNLOAD_URL}={value}: {path} does not exist; give a gta_dataset.zip, a dataset "
        "directory, or an http(s) URL"
    )


@dataclass(frozen=True)
class HttpSettings:
    """Timeouts and retries of a download."""

    timeout: float = 60.0
    attempts: int = 4
    backoff: float = 0.5


def _part_paths(downloads: Path, url: str) -> tuple[Path, Path]:
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    name = Path(urlparse(url).path).name or "download"
    part = downloads / f"{name}.{key}.part"
    return part, part.with_suffix(".json")


def fetch_url(url: str, downloads: Path, log: Log, settings: HttpSettings | None = None) -> Fetched:
    """Download ``url`` into ``downloads``, resuming a previous partial download when possible.

    Raises:
        SourceUnavailable: the host could not be reached or answered with an error status.
        GtaDataError: the body kept ending before the announced length.
    """
    import httpx2

    settings = settings or HttpSettings()
    downloads.mkdir(parents=True, exist_ok=True)
    part, note = _part_paths(downloads, url)
    last_error = ""
    with httpx2.Client(follow_redirects=True, timeout=settings.timeout) as client:
        for attempt in range(settings.attempts):
            if attempt:
                time.sleep(settings.backoff * 2 ** (attempt - 1))
            try:
                done = _download_once(client, url, part, note, log)
            except (httpx2.UnsupportedProtocol, httpx2.InvalidURL) as exc:
                raise SourceUnavailable(f"not a URL that can be downloaded ({exc})") from None
            except httpx2.ConnectError as exc:
                last_error = f"cannot connect ({exc})"
                continue
            except _Transient as exc:
                last_error = str(exc)
                log(f"  {last_error}; retrying")
                continue
            except httpx2.TimeoutException as exc:
                last_error = f"timed out ({type(exc).__name__})"
                continue
            except httpx2.TransportError as exc:
                have = part.stat().st_size if part.exists() else 0
                last_error = f"connection broke after {have} bytes ({exc})"
                log(f"  {last_error}; resuming")
                continue
            if done:
                final = part.with_suffix(".zip")
                os.replace(part, final)
                note.unlink(missing_ok=True)
                return Fetched(final, "zip", url, owned=True)
            have = part.stat().st_size if part.exists() else 0
            last_error = f"the body ended early ({have} bytes received)"
            log(f"  {last_error}; resuming")
    if part.exists() and part.stat().st_size:
        raise GtaDataError(
            f"download of {url} is incomplete after {settings.attempts} attempts: {last_error}. "
            f"The partial file {part} is kept and the next {OPT_DOWNLOAD} resumes it."
        )
    part.unlink(missing_ok=True)
    note.unlink(missing_ok=True)
    raise SourceUnavailable(last_error or "no answer")


def _download_once(client: httpx2.Client, url: str, part: Path, note: Path, log: Log) -> bool:
    """One GET (ranged when a partial file exists); True when the file is complete."""
    have = part.stat().st_size if part.exists() else 0
    validator = None
    if have and note.is_file():
        try:
            validator = json.loads(note.read_text(encoding="utf-8")).get("validator")
        except (OSError, json.JSONDecodeError):
            validator = None
    headers = {"Accept-Encoding": "identity"}
    if have and validator:
        headers["Range"] = f"bytes={have}-"
        headers["If-Range"] = validator
    elif have:
        have = 0
    with client.stream("GET", url, headers=headers) as response:
        if response.status_code == 416 and have:
            # Our partial file is already whole (or stale): start over to be sure.
            part.unlink(missing_ok=True)
            return False
        if response.status_code == 429 or response.status_code >= 500:
            raise _Transient(f"HTTP {response.status_code} {response.reason_phrase}")
        if response.status_code >= 400:
            raise SourceUnavailable(f"HTTP {response.status_code} {response.reason_phrase}")
        resumed = response.status_code == 206 and have > 0
        if not resumed:
            have = 0
        length_header = response.headers.get("Content-Length")
        expected = int(length_header) + have if length_header and length_header.isdigit() else None
        etag = response.headers.get("ETag") or response.headers.get("Last-Modified")
        note.write_text(json.dumps({"url": url, "validator": etag}), encoding="utf-8")
        log(
            f"  {'resuming at ' + str(have) + ' bytes' if resumed else 'downloading'}"
            f"{f' ({expected} bytes)' if expected else ''}"
        )
        with part.open("ab" if resumed else "wb") as out:
            for chunk in response.iter_raw():
                out.write(chunk)
        size = part.stat().st_size
    if expected is not None and size != expected:
        return False
    return True


def fetch_hf(repo_id: str, revision: str | None, log: Log) -> Fetched:
    """A snapshot of the dataset repo through ``huggingface_hub`` (its cache, env and token).

    ``HF_ENDPOINT``, ``HF_HOME``/``HF_HUB_CACHE``, ``HF_HUB_OFFLINE`` and ``HF_TOKEN`` (or a
    saved login) are honoured because the hub library reads them itself.
    """
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError:
        raise SourceUnavailable("huggingface_hub is not installed") from None
    try:
        path = snapshot_download(repo_id=repo_id, repo_type="dataset", revision=revision)
    except LocalEntryNotFoundError as exc:
        cause = exc.__cause__ or exc
        reason = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
        if hf_offline():
            reason = "HF_HUB_OFFLINE is set"
        raise SourceUnavailable(
            f"{reason}, and {repo_id} is not in the local Hugging Face cache"
        ) from None
    except HfHubHTTPError as exc:
        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None)
        hint = ""
        if status in (401, 403):
            hint = "; a private or gated copy needs HF_TOKEN (or hf auth login)"
        elif status == 404:
            hint = f"; no dataset repo {repo_id} at this endpoint (HF_ENDPOINT)"
        raise SourceUnavailable(f"{type(exc).__name__} (HTTP {status}){hint}") from None
    except Exception as exc:  # any failure of this source means: try the next one
        raise SourceUnavailable(f"{type(exc).__name__}: {exc}") from None
    snapshot = Path(path)
    commit = snapshot.name
    log(f"  snapshot {commit} in {snapshot}")
    return Fetched(snapshot, "dir", f"hf:{repo_id}@{commit}")
