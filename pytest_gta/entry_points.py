"""Loading a built-in part that is registered by entry point rather than imported.

The core never imports ``tool_backends`` (import-linter's ``backends-by-registry``): the
cassette recorder and the agents' sandbox live there and are found through their entry points,
so an install whose metadata lacks them says how to fix it instead of failing on an import.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from pytest_gta.errors import GtaUsageError


def load_registered(group: str, name: str, flag: str, what: str) -> Any:
    """The object the entry point ``name`` of ``group`` names, loaded.

    Raises:
        GtaUsageError: none is registered under that name (``flag`` and ``what`` say which
            option needed it, and what it is).
    """
    registered = {ep.name: ep for ep in importlib.metadata.entry_points(group=group)}
    entry = registered.get(name)
    if entry is None:
        raise GtaUsageError(
            f"{flag}: no {name!r} {what} is registered under the {group!r} entry-point group "
            "(reinstall pytest-gta)"
        )
    return entry.load()
