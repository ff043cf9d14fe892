"""Checking the endpoint URLs a user gives (options, environment variables, tool specs).

Apart from :mod:`pytest_gta.endpoint` (the HTTP client) so that the option table can check a
URL without loading httpx when the plugin loads.
"""

from __future__ import annotations

import os
import urllib.parse

from pytest_gta.errors import GtaUsageError


def env_base_url(variable: str) -> str | None:
    """The URL in environment variable ``variable`` (checked by :func:`check_url`), or ``None``.

    Raises:
        GtaUsageError: the variable holds something that is not an http(s) URL.
    """
    value = os.environ.get(variable, "").strip()
    return check_url(value, variable) if value else None


def check_url(value: str, where: str, example: str = "http://127.0.0.1:8000/v1") -> str:
    """``value`` as an http(s) URL with a host, stripped; else a usage error naming ``where``.

    Parsed by :mod:`urllib.parse` (a bad port or an unclosed ``[`` is its ValueError) and by
    httpx2, which sends it and is stricter (spaces, characters no host may hold).

    Raises:
        GtaUsageError: ``where=value`` (cut short) and what is wrong with it.
    """
    url = value.strip()
    shown = url if len(url) <= 80 else url[:80] + "..."
    hint = f"give the endpoint's http(s) URL, e.g. {example}"
    import httpx2  # heavy: kept off the entry module's import path (options checks URLs)

    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - the property is what checks the port
        httpx2.URL(url)
    except (ValueError, httpx2.InvalidURL) as exc:
        problem = str(exc)[:120] or type(exc).__name__
        raise GtaUsageError(f"{where}={shown}: not a URL ({problem}); {hint}") from None
    if parts.scheme not in ("http", "https"):
        raise GtaUsageError(f"{where}={shown}: {hint}")
    if not parts.hostname:
        raise GtaUsageError(f"{where}={shown}: the URL names no host; {hint}")
    return url
