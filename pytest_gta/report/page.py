"""What the self-contained HTML pages share: escaping, clipping, the assets, the scripted shell.

The run's page (:mod:`pytest_gta.report.html`) and the GTA-Workflow page
(:mod:`pytest_gta.report.workflow_html`) are one shell: the packaged stylesheet, ``report.js``
(filters, sorting, search, drill-downs from ``<template id="t-ID">``, the image viewer) allowed
by its sha256 in a strict Content-Security-Policy, so nothing else runs and nothing is fetched.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

#: Text of a tool output or reply beyond this many characters is cut, saying so.
MAX_TEXT = 20_000
_SURROGATES = re.compile("[\ud800-\udfff]")


def esc(value: Any) -> str:
    """Text for HTML (attributes included), never markup."""
    return html.escape(str(value), quote=True)


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut at ``limit`` characters, saying how many more there were."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters)"


def asset(name: str) -> str:
    """The text of one of the report's packaged assets (``report/assets/NAME``)."""
    return resources.files("pytest_gta.report").joinpath("assets").joinpath(name).read_text("utf-8")


def scripted_page(
    title: str, body: str, templates: str, images: Mapping[str, Mapping[str, str]]
) -> str:
    """A whole page run by ``report.js`` under its strict Content-Security-Policy.

    Args:
        title: The page's title (escaped here).
        body: Markup from the ``<header>`` to ``<main>``'s content (``<main>`` opened, not
            closed): the drill-down panel, the image viewer, ``templates`` and the images'
            JSON follow it inside ``<main>``.
        templates: The drill-downs, ``<template id="t-ID">`` each.
        images: ``{key: {thumb, full?}}`` as ``data:`` URIs, for ``img[data-key]``.
    """
    script = asset("report.js")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = (
        "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )
    data = json.dumps(images, separators=(",", ":")).replace("</", "<\\/")
    page = (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title><style>{asset('report.css')}</style></head>"
        f"<body>{body}"
        '<section id="drilldown" hidden></section>'
        '<div id="lightbox" hidden><img alt="full size"><p></p></div>'
        f"{templates}"
        f'<script type="application/json" id="gta-images">{data}</script>'
        f"</main><script>{script}</script></body></html>\n"
    )
    return _SURROGATES.sub("\ufffd", page)
