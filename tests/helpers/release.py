"""Where the real GTA release is looked for, by the tests and the benchmarks alike.

``$PYTEST_GTA_RELEASE``, else the shared copy beside the checkout (``../shared/gta_release``).
It is read in place, never copied into the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers.paths import ROOT

#: Names the release's directory, replacing the default.
RELEASE_ENV = "PYTEST_GTA_RELEASE"
#: Where the release is looked for when :data:`RELEASE_ENV` is unset.
DEFAULT_RELEASE = ROOT.parent / "shared" / "gta_release"


def find_release() -> Path | None:
    """The real GTA release's directory, or ``None`` where this machine has none."""
    chosen = os.environ.get(RELEASE_ENV)
    path = Path(chosen) if chosen else DEFAULT_RELEASE
    return path.absolute() if (path / "dataset.json").is_file() else None
