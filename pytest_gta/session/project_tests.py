"""A GTA run started inside a project: that project's tests and pytest configuration.

pytest collects from the directory it runs in, and loads that directory's ``pytest.ini`` and
``conftest.py`` files: a CI job that runs GTA from its repository's root once got the
repository's own tests in ``gta.xml`` among the GTA cases, and a conftest hook that marked every
item marked the GTA cases too, without a word (issue 38). pytest's conventions stay: nothing is
dropped unasked. Instead a GTA run says what joined it: the header names the ini file and the
conftest files loaded (their options, hooks and fixtures apply to the GTA cases), the collection
line and the report's notes name the tests that are not GTA cases, and ``--gta-only`` deselects
those tests through pytest's own deselection (so the summary counts them as deselected). The
header's note says how to leave the configuration out (``--noconftest``, ``-c /dev/null``,
``--rootdir``), as docs/running.md does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType

import pytest

from pytest_gta.flags import OPT_ONLY

#: Node ids a note names before it says how many more there are.
SHOWN_NODES = 5


def conftest_files(config: pytest.Config) -> list[str]:
    """The ``conftest.py`` files this process has loaded so far, sorted."""
    found = set()
    for plugin in config.pluginmanager.get_plugins():
        where = getattr(plugin, "__file__", None) if isinstance(plugin, ModuleType) else None
        if where and Path(where).name == "conftest.py":
            found.add(str(Path(where).resolve()))
    return sorted(found)


def configuration_note(config: pytest.Config) -> str | None:
    """The header's line: the ini file and conftest files that apply to this GTA run, if any."""
    parts = []
    if config.inipath is not None and config.inipath.is_file():  # not -c /dev/null
        parts.append(f"ini file {config.inipath}")
    conftests = conftest_files(config)
    if conftests:
        parts.append(f"conftest files {', '.join(conftests)}")
    if not parts:
        return None
    return (
        f"gta: the pytest configuration of this directory applies to the GTA run: "
        f"{'; '.join(parts)} (their options, hooks and fixtures act on the GTA cases; "
        "--noconftest and -c /dev/null leave them out)"
    )


def is_gta_item(item: pytest.Item, fixture: str) -> bool:
    """Whether ``item`` is a GTA case: it asks for the run's case fixture."""
    return fixture in getattr(item, "fixturenames", ())


def listed(nodeids: Sequence[str]) -> str:
    """The first node ids, then how many more."""
    shown = ", ".join(nodeids[:SHOWN_NODES])
    more = len(nodeids) - SHOWN_NODES
    return shown + (f" and {more} more" if more > 0 else "")


def project_note(nodeids: Sequence[str], deselected: bool) -> str:
    """What the collection line and the report's notes say about tests that are not GTA cases."""
    count = len(nodeids)
    if deselected:
        return f"{OPT_ONLY} deselected {count} test(s) that are not GTA cases: {listed(nodeids)}"
    return (
        f"this GTA run also collected {count} test(s) that are not GTA cases, from the "
        f"directory pytest runs in: {listed(nodeids)}; they run beside the GTA cases and appear "
        f"in its JUnit XML; {OPT_ONLY} deselects them"
    )


def split_items(
    items: list[pytest.Item], fixture: str, only: bool, config: pytest.Config
) -> list[str]:
    """The node ids of the items that are not GTA cases; with ``only``, deselected from ``items``.

    Deselected as ``-k`` deselects (``pytest_deselected``), so the terminal's "collected ...
    deselected" line counts them.
    """
    foreign = [item for item in items if not is_gta_item(item, fixture)]
    if only and foreign:
        items[:] = [item for item in items if is_gta_item(item, fixture)]
        config.hook.pytest_deselected(items=foreign)
    return [item.nodeid for item in foreign]


def notes_of(value: object) -> list[str]:
    """Notes sent between processes, checked (anything else: none)."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return []


def unique(notes: Iterable[str]) -> list[str]:
    """``notes`` without repeats, in order."""
    return list(dict.fromkeys(notes))
