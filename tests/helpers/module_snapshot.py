"""pytester's snapshot of ``sys.modules``, restored in one read (used by tests/conftest.py)."""

from __future__ import annotations

import sys
from typing import Any


def restore_sys_modules(snapshot: Any) -> None:
    """pytester's ``SysModulesSnapshot.restore``, reading ``sys.modules`` in one C call.

    pytester's own reads it item by item and calls back into Python between items, so an import
    in a background thread of the worker (an earlier test's server or service) could change it
    mid-read: ``RuntimeError: dictionary changed size during iteration`` ended an in-process run
    once in the fast tier. ``list(sys.modules.items())`` runs no Python code, so no other thread
    runs inside it.
    """
    preserve = snapshot._SysModulesSnapshot__preserve
    saved = snapshot._SysModulesSnapshot__saved
    if preserve:
        saved.update((name, module) for name, module in list(sys.modules.items()) if preserve(name))
    sys.modules.clear()
    sys.modules.update(saved)
