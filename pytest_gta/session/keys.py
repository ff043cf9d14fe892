"""Where a fixture leaves what its phase's report must carry; :func:`attach` puts it there.

Light on purpose: :mod:`pytest_gta.plugin` imports it in every pytest process, GTA or not.
"""

from __future__ import annotations

from typing import Any

import pytest

#: ``user_properties`` key of a finished case (:func:`pytest_gta.results.io.case_to_wire`'s JSON),
#: on the setup report only: too big for JUnit XML, which writes the item's properties.
DETAIL_KEY = "gta_detail"
#: ``user_properties`` key saying why the session stopped early (budget); kept out of the XML.
STOPPED_KEY = "gta_stopped"

#: Properties for the report of the phase that produced them, not for the item: the case's
#: detail payload (too big for JUnit XML, which writes the item's ``user_properties``) and a
#: budget stop (not a property of the case).
REPORT_ONLY = pytest.StashKey[list[tuple[str, Any]]]()

#: pytest-html extras (``report.extras``) for the report of the phase that made them.
REPORT_EXTRAS = pytest.StashKey[list[dict[str, Any]]]()


def report_only(item: pytest.Item) -> list[tuple[str, Any]]:
    """Where a fixture puts properties for the report of the phase it runs in."""
    return item.stash.setdefault(REPORT_ONLY, [])


def report_extras(item: pytest.Item) -> list[dict[str, Any]]:
    """Where a fixture puts pytest-html extras for the report of the phase it runs in."""
    return item.stash.setdefault(REPORT_EXTRAS, [])


def attach(item: pytest.Item, report: pytest.TestReport) -> None:
    """Move what the phase left for its report (properties, pytest-html extras) onto ``report``."""
    extra = item.stash.get(REPORT_ONLY, None)
    if extra:
        report.user_properties.extend(extra)
        extra.clear()
    extras = item.stash.get(REPORT_EXTRAS, None)
    if extras:
        # pytest-html's documented attribute; its own makereport keeps what is already there.
        report.extras = [*getattr(report, "extras", []), *extras]  # type: ignore[attr-defined]
        extras.clear()
