"""Where things are in the checkout, for tests that read its files or run its scripts."""

from __future__ import annotations

from pathlib import Path

#: This package: helper scripts that tests start by path live here.
HELPERS = Path(__file__).resolve().parent
#: The self-tests (``tests/``).
TESTS = HELPERS.parent
#: The checkout's root.
ROOT = TESTS.parent
#: The 17-query sample bundled with the plugin, in GTA's layout.
SAMPLE = ROOT / "fixtures" / "gta_sample"
