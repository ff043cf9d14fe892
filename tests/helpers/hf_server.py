"""A real HTTP server on 127.0.0.1 that impersonates the Hugging Face Hub for one repository.

``huggingface_hub.snapshot_download`` (checked against huggingface_hub 2.4.0) runs against it
unchanged once the client points at ``server.url`` (see ``tests/test_hf_server_selfcheck.py``
for what must be patched besides ``HF_ENDPOINT``). Every file is served as a regular git file
(no LFS, no Xet): its ETag is the git blob sha1, exactly as the Hub sends it for such files.

Routes (``{type}`` is ``models``, ``datasets`` or ``spaces``; ``{prefix}`` is ``""``,
``"datasets/"`` or ``"spaces/"``; ``{rev}`` is ``main`` or the 40-hex commit, percent-encoded
as the client sends it):

``GET|HEAD /api/{type}/{repo_id}`` and ``/api/{type}/{repo_id}/revision/{rev}``
    Repo info JSON; ``sha`` is the commit ``rev`` resolves to (what ``repo_info`` and
    ``snapshot_download`` use to resolve ``main``). ``?blobs=true`` adds ``size``/``blobId`` to
    the siblings; ``expand`` is accepted and ignored.
``GET|HEAD /api/{type}/{repo_id}/tree/{rev}[/{path}]?recursive=&expand=&cursor=``
    Tree listing: ``{"type": "file", "oid": <blob sha1>, "size", "path"}`` and
    ``{"type": "directory", "oid": <tree sha1>, "size": 0, "path"}`` entries, paginated like the
    Hub (1000 entries a page, 50 with ``expand``; next page in a ``Link: <...>; rel="next"``
    header with an opaque ``cursor``).
``GET|HEAD /{prefix}{repo_id}/resolve/{rev}/{path}``
    The file: ``200`` with ``Content-Length``, ``ETag: "<blob sha1>"``, ``X-Repo-Commit``,
    ``Accept-Ranges: bytes``, ``Content-Disposition``; a single ``Range: bytes=a-b`` / ``a-`` /
    ``-n`` gets ``206`` with ``Content-Range`` (``416`` with ``Content-Range: bytes */N`` when
    unsatisfiable). No ``Location``/``X-Linked-Etag``/``X-Linked-Size``: the Hub sends those
    only for LFS files it redirects to its CDN.
``GET /api/agent-harnesses``
    An empty agent registry: huggingface_hub fetches ``{ENDPOINT}/api/agent-harnesses`` once per
    process to build its User-Agent unless ``constants.HF_HUB_DISABLE_TELEMETRY`` is set.

What ``snapshot_download(repo_id, repo_type="dataset")`` sends, in order: ``GET
/api/datasets/{repo_id}/revision/main`` (resolves ``main``), ``GET
/api/datasets/{repo_id}/tree/{commit}?recursive=true&expand=false`` (skipped once
``trees/{commit}.json`` is cached), then per file not yet cached ``HEAD`` and ``GET
/datasets/{repo_id}/resolve/{commit}/{path}`` (``Accept-Encoding: identity`` on the HEAD; a
``Range`` only when resuming a broken transfer). Every request carries
``X-HF-Download-Counter: 1`` and, with a token, ``Authorization: Bearer <token>``.

Errors, with the Hub's ``X-Error-Code``/``X-Error-Message`` headers and ``{"error": ...}`` body:

- unknown revision: ``404``, ``X-Error-Code: RevisionNotFound`` (-> ``RevisionNotFoundError``);
- unknown file: ``404``, ``X-Error-Code: EntryNotFound`` plus ``X-Repo-Commit`` (the client
  records the miss under ``.no_exist``; -> ``RemoteEntryNotFoundError``);
- ``missing=True``, another repo id or another repo type: ``404``, ``X-Error-Code: RepoNotFound``
  (-> ``RepositoryNotFoundError``), to every caller. The Hub answers that only to an
  authenticated caller; it gives an anonymous one the bare ``401`` below (which becomes
  ``RepositoryNotFoundError`` only on an ``https://`` endpoint, see next item).
- ``token=...`` (a private repo): a request without ``Authorization: Bearer <token>`` gets the
  Hub's anti-enumeration answer, a bare ``401`` (no ``X-Error-Code``) with
  ``X-Error-Message: Invalid username or password.`` and ``WWW-Authenticate``; a wrong token gets
  ``401`` ``Invalid credentials in Authorization header``. huggingface_hub maps a bare 401 to
  ``RepositoryNotFoundError`` only when the URL matches its ``REPO_API_REGEX``, which requires
  ``https://``; against this ``http://`` server the same answer raises the base class
  ``HfHubHTTPError`` with ``response.status_code == 401``. Catch ``HfHubHTTPError`` and look at
  the status to handle both.
- ``gated=True`` (needs ``token``): the API routes stay public (``"gated": "auto"`` in the repo
  info) and ``resolve`` answers ``401`` with ``X-Error-Code: GatedRepo`` (-> ``GatedRepoError``, a
  ``RepositoryNotFoundError``, on any scheme) until the token is sent.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import mimetypes
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from pytest_gta.loopback import QuickHTTPServer

#: ``point_at(url, offline=False)`` of the ``hub_env`` fixture (tests/conftest.py).
PointAt = Callable[..., Path]

#: ``repo_type`` -> (API path segment, resolve URL prefix), as huggingface_hub builds them.
_TYPES = {
    "model": ("models", ""),
    "dataset": ("datasets", "datasets/"),
    "space": ("spaces", "spaces/"),
}
#: A fixed date, so that the commit (and everything derived from it) depends on the files only.
_DATE = "2024-05-01T00:00:00.000Z"
_GIT_IDENTITY = b"pytest-gta <tests@pytest-gta.invalid> 1714521600 +0000"
_AGENT_REGISTRY: dict[str, Any] = {"standardEnvVars": [], "harnesses": {}}


def git_blob_oid(data: bytes) -> str:
    """The git blob sha1 of ``data``: the ETag the Hub sends for a regular (non-LFS) file."""
    return _git_oid(b"blob", data)


def _git_oid(kind: bytes, body: bytes) -> str:
    return hashlib.sha1(b"%s %d\0" % (kind, len(body)) + body).hexdigest()


def _check_path(path: str) -> None:
    parts = path.split("/")
    if not path or any(part in ("", ".", "..") for part in parts) or "\\" in path:
        raise ValueError(f"not a repo file path: {path!r}")


def _git_trees(blobs: dict[str, str]) -> dict[str, str]:
    """Tree sha1 of every directory ('' is the root) of files given as path -> blob sha1."""
    root: dict[str, Any] = {}
    for path, oid in blobs.items():
        *dirs, name = path.split("/")
        node = root
        for part in dirs:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"{path!r} needs {part!r} to be a directory, but it is a file")
            node = child
        if name in node:
            raise ValueError(f"{path!r} is both a file and a directory")
        node[name] = oid
    trees: dict[str, str] = {}

    def walk(node: dict[str, Any], prefix: str) -> str:
        entries = []
        for name, value in node.items():
            if isinstance(value, dict):
                oid = walk(value, f"{prefix}{name}/")
                entries.append((f"{name}/", b"40000 %s\0" % name.encode() + bytes.fromhex(oid)))
            else:
                entries.append((name, b"100644 %s\0" % name.encode() + bytes.fromhex(value)))
        # Git orders tree entries by name, a directory's name compared as if it ended in "/".
        oid = _git_oid(b"tree", b"".join(raw for _, raw in sorted(entries)))
        trees[prefix.rstrip("/")] = oid
        return oid

    walk(root, "")
    return trees


@dataclass
class HfRepoServer:
    """What ``serve_hf_repo`` yields: the endpoint, the repo it serves and the requests it got."""

    url: str
    repo_id: str
    repo_type: str
    files: dict[str, bytes]
    #: The commit ``main`` points at: a real git commit sha1 over the files' tree.
    commit: str
    #: Every request, in arrival order: ``(method, path with query string, headers)``, the
    #: header names lower-cased (HTTP header names are case-insensitive; httpx sends lower case).
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    blob_oids: dict[str, str] = field(default_factory=dict)
    tree_oids: dict[str, str] = field(default_factory=dict)

    def paths(self, method: str | None = None) -> list[str]:
        """The paths (with query) requested so far, optionally only those of one method."""
        return [p for m, p, _ in list(self.requests) if method is None or m == method]


@contextmanager
def serve_hf_repo(
    files: dict[str, bytes],
    *,
    repo_id: str = "Jize1/GTA",
    repo_type: str = "dataset",
    token: str | None = None,
    missing: bool = False,
    gated: bool = False,
    tree_page_size: int = 1000,
) -> Iterator[HfRepoServer]:
    """Serve ``files`` (repo path -> bytes, nested paths allowed) as ``repo_id`` at ``main``.

    Args:
        files: The repository's content.
        repo_id: ``namespace/name``.
        repo_type: ``model``, ``dataset`` or ``space``.
        token: Make the repo private: every request must carry ``Authorization: Bearer <token>``.
        missing: Answer ``404 RepoNotFound`` for the repo (after the token check, as the Hub does).
        gated: With ``token``: a gated repo, whose API is public but whose files need the token.
        tree_page_size: Entries per tree page (the Hub's is 1000); lower it to test pagination.
    """
    if repo_type not in _TYPES:
        raise ValueError(f"unknown repo type {repo_type!r}")
    if gated and token is None:
        raise ValueError("a gated repo needs a token")
    for path in files:
        _check_path(path)
    blob_oids = {path: git_blob_oid(data) for path, data in files.items()}
    tree_oids = _git_trees(blob_oids)
    commit_body = b"tree %s\nauthor %s\ncommitter %s\n\nSnapshot for tests\n" % (
        tree_oids[""].encode(),
        _GIT_IDENTITY,
        _GIT_IDENTITY,
    )
    repo = _Repo(
        files=dict(files),
        blob_oids=blob_oids,
        tree_oids=tree_oids,
        commit=_git_oid(b"commit", commit_body),
        repo_id=repo_id,
        repo_type=repo_type,
        token=token,
        missing=missing,
        gated=gated,
        page_size=tree_page_size,
    )
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.repo = repo
    state = HfRepoServer(
        url=f"http://127.0.0.1:{httpd.server_address[1]}",
        repo_id=repo_id,
        repo_type=repo_type,
        files=repo.files,
        commit=repo.commit,
        requests=httpd.log,
        blob_oids=blob_oids,
        tree_oids=tree_oids,
    )
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="hf-server", daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        httpd.drop_connections()
        thread.join()


@dataclass
class _Repo:
    files: dict[str, bytes]
    blob_oids: dict[str, str]
    tree_oids: dict[str, str]
    commit: str
    repo_id: str
    repo_type: str
    token: str | None
    missing: bool
    gated: bool
    page_size: int

    def resolve(self, revision: str) -> str | None:
        """The commit a revision names (a branch or the full sha), None if unknown."""
        return self.commit if revision in ("main", self.commit) else None

    def entries(self, base: str, recursive: bool) -> list[dict[str, Any]] | None:
        """Tree entries under ``base`` ('' for the root), None if ``base`` is not a directory."""
        if base not in self.tree_oids:
            return None
        prefix = f"{base}/" if base else ""
        found: list[dict[str, Any]] = []
        for path in sorted(self.tree_oids):
            if (
                path.startswith(prefix)
                and path != base
                and (recursive or "/" not in path[len(prefix) :])
            ):
                found.append(
                    {"type": "directory", "oid": self.tree_oids[path], "size": 0, "path": path}
                )
        for path in sorted(self.files):
            if path.startswith(prefix) and (recursive or "/" not in path[len(prefix) :]):
                found.append(
                    {
                        "type": "file",
                        "oid": self.blob_oids[path],
                        "size": len(self.files[path]),
                        "path": path,
                    }
                )
        return found


class _Server(QuickHTTPServer):
    daemon_threads = True
    repo: _Repo

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, dict[str, str]]] = []
        self.connections: list[socket.socket] = []
        self.ids = itertools.count(1)

    def drop_connections(self) -> None:
        """Close kept-alive connections, so that their handler threads end."""
        with self.lock:
            connections, self.connections = self.connections, []
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Reply(Exception):
    """Raised by route code to answer right away."""

    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None):
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


def _error(status: int, message: str, code: str | None = None, **headers: str) -> _Reply:
    if code is not None:
        headers["X-Error-Code"] = code
    return _Reply(status, {"error": message}, {"X-Error-Message": message, **headers})


_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    server_version = "hf-server"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections.append(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.lock:
                if self.connection in self.server.connections:
                    self.server.connections.remove(self.connection)

    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _handle(self) -> None:
        with self.server.lock:
            headers = {key.lower(): value for key, value in self.headers.items()}
            self.server.log.append((self.command, self.path, headers))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        try:
            self._route()
        except _Reply as reply:
            self._send(reply.status, reply.body, reply.headers)

    def _send(self, status: int, body: Any, headers: dict[str, str]) -> None:
        if isinstance(body, bytes):
            data = body
        else:
            data = b"" if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json; charset=utf-8", **headers}
        self.send_response(status)
        self.send_header("X-Request-Id", f"Root=1-hf-server-{next(self.server.ids)}")
        for key, value in headers.items():
            self.send_header(key, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    # -- routing -------------------------------------------------------------------------------

    def _route(self) -> None:
        repo = self.server.repo
        split = urlsplit(self.path)
        raw_path, query = split.path, parse_qs(split.query)
        if self.command not in ("GET", "HEAD"):
            raise _error(405, "Method not allowed", Allow="GET, HEAD")
        if raw_path == "/api/agent-harnesses":
            raise _Reply(200, _AGENT_REGISTRY)
        api_type, url_prefix = _TYPES[repo.repo_type]
        api_base = f"/api/{api_type}/{repo.repo_id}"
        resolve_base = f"/{url_prefix}{repo.repo_id}/resolve/"
        if raw_path == api_base or raw_path.startswith(api_base + "/"):
            self._authorize(file=False)
            self._api(raw_path[len(api_base) :], query)
        elif raw_path.startswith(resolve_base):
            self._authorize(file=True)
            self._resolve(raw_path[len(resolve_base) :])
        elif raw_path.startswith("/api/") or "/resolve/" in raw_path:
            # Another repo, or this one under the wrong repo type.
            self._authorize(file=False)
            raise _error(404, "Repository not found", "RepoNotFound")
        raise _error(404, "Sorry, we can't find the page you are looking for.")

    def _authorize(self, *, file: bool) -> None:
        repo = self.server.repo
        if repo.token is None:
            return
        sent = self.headers.get("Authorization")
        if sent is not None and sent != f"Bearer {repo.token}":
            raise _error(401, "Invalid credentials in Authorization header")
        if sent is not None:
            return
        if repo.gated and file:
            kind = repo.repo_type
            raise _error(
                401,
                f"Access to {kind} {repo.repo_id} is restricted. You must have access to it and be"
                " authenticated to access it. Please log in.",
                "GatedRepo",
            )
        if not repo.gated:
            raise _error(
                401,
                "Invalid username or password.",
                **{"WWW-Authenticate": 'Bearer realm="Authentication required", charset="UTF-8"'},
            )

    def _revision(self, encoded: str) -> str:
        revision = unquote(encoded)
        commit = self.server.repo.resolve(revision)
        if commit is None:
            raise _error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    def _api(self, rest: str, query: dict[str, list[str]]) -> None:
        repo = self.server.repo
        if repo.missing:
            raise _error(404, "Repository not found", "RepoNotFound")
        if rest == "" or rest.startswith("/revision/"):
            encoded = rest[len("/revision/") :] if rest else "main"
            raise _Reply(200, self._info(self._revision(encoded), query))
        match = re.fullmatch(r"/tree/([^/]+)(/.*)?", rest)
        if match is None:
            raise _error(404, "Sorry, we can't find the page you are looking for.")
        self._revision(match.group(1))
        base = unquote((match.group(2) or "/")[1:]).strip("/")
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        expand = query.get("expand", ["false"])[0].lower() in ("1", "true")
        entries = repo.entries(base, recursive)
        if entries is None:
            raise _error(404, f"{base} does not exist on {match.group(1)}", "EntryNotFound")
        size = min(repo.page_size, 50) if expand else repo.page_size
        try:
            start = int(base64.urlsafe_b64decode(query.get("cursor", ["MA=="])[0]).decode())
        except ValueError:
            raise _error(400, "Invalid cursor") from None
        headers = {}
        if start + size < len(entries):
            cursor = base64.urlsafe_b64encode(str(start + size).encode()).decode()
            params = {k: v[0] for k, v in query.items() if k != "cursor"} | {"cursor": cursor}
            next_url = f"{self._origin()}{urlsplit(self.path).path}?{urlencode(params)}"
            headers["Link"] = f'<{next_url}>; rel="next"'
        raise _Reply(200, entries[start : start + size], headers)

    def _origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _info(self, commit: str, query: dict[str, list[str]]) -> dict[str, Any]:
        repo = self.server.repo
        blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings: list[dict[str, Any]] = []
        for path in sorted(repo.files):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling |= {"size": len(repo.files[path]), "blobId": repo.blob_oids[path]}
            siblings.append(sibling)
        return {
            "_id": commit[:24],
            "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0] if "/" in repo.repo_id else None,
            "sha": commit,
            "lastModified": _DATE,
            "createdAt": _DATE,
            "private": repo.token is not None and not repo.gated,
            "gated": "auto" if repo.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
            "usedStorage": sum(len(data) for data in repo.files.values()),
        }

    def _resolve(self, rest: str) -> None:
        repo = self.server.repo
        if repo.missing:
            raise _error(404, "Repository not found", "RepoNotFound")
        encoded_revision, _, encoded_path = rest.partition("/")
        commit = self._revision(encoded_revision)
        path = unquote(encoded_path)
        if path not in repo.files:
            raise _error(404, "Entry not found", "EntryNotFound", **{"X-Repo-Commit": commit})
        data = repo.files[path]
        name = path.rsplit("/", 1)[-1]
        ascii_name = name.encode("ascii", "replace").decode()
        disposition = f"inline; filename*=UTF-8''{quote(name)}; filename=\"{ascii_name}\";"
        headers = {
            "Content-Type": mimetypes.guess_type(name)[0] or "application/octet-stream",
            "Content-Disposition": disposition,
            "ETag": f'"{repo.blob_oids[path]}"',
            "X-Repo-Commit": commit,
            "Accept-Ranges": "bytes",
            "Vary": "Origin, Accept",
        }
        ranged = self._range(len(data))
        if ranged is None:
            raise _Reply(200, data, headers)
        if isinstance(ranged, str):  # unsatisfiable
            raise _Reply(416, b"", headers | {"Content-Range": f"bytes */{len(data)}"})
        first, last = ranged
        headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
        raise _Reply(206, data[first : last + 1], headers)

    def _range(self, length: int) -> tuple[int, int] | str | None:
        """The single byte range asked for, 'unsatisfiable', or None for the whole file."""
        header = self.headers.get("Range")
        match = _RANGE.match(header.strip()) if header else None
        if match is None or match.groups() == ("", ""):
            return None  # absent, multi-range or malformed: RFC 9110 lets us send it all
        first, last = match.groups()
        if first == "":
            suffix = int(last)
            if suffix == 0 or length == 0:
                return "unsatisfiable"
            return max(length - suffix, 0), length - 1
        start = int(first)
        if last != "" and int(last) < start:
            return None  # an invalid range-spec: ignore the header
        if start >= length:
            return "unsatisfiable"
        return start, length - 1 if last == "" else min(int(last), length - 1)
