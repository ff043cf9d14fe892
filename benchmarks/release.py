"""Where the benchmarks find the real GTA release: where the project's tests find it.

``--data PATH`` when given, else ``$PYTEST_GTA_RELEASE``, else ``../shared/gta_release`` beside
the checkout (``tests/helpers/release.py``'s ``find_release``, so a benchmark and the tests never
disagree about which copy they measured). The release is read in place, never copied.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.release import RELEASE_ENV, find_release  # noqa: E402

__all__ = ["RELEASE_ENV", "oracle_command", "release_path"]


def release_path(given: str | None) -> Path:
    """``--data``, else the release where the tests look for it; exits naming both when absent."""
    if given is not None:
        path = Path(given)
        if not (path / "dataset.json").is_file():
            raise SystemExit(f"--data {given}: no dataset.json there")
        return path.absolute()
    found = find_release()
    if found is None:
        chosen = os.environ.get(RELEASE_ENV)
        default = ROOT.parent / "shared" / "gta_release"
        where = (
            f"${RELEASE_ENV} ({chosen}) has no dataset.json (it replaces the default, {default})"
            if chosen
            else f"${RELEASE_ENV} is unset and {default} has no dataset.json"
        )
        raise SystemExit(
            f"no GTA release found: {where}; set {RELEASE_ENV} or pass --data PATH (a directory "
            "with dataset.json, toolmeta.json and image/), or run on a dataset generated from "
            "the bundled sample with --generated"
        )
    return found


def oracle_command(data: Path, *extra: str) -> list[str]:
    """``python -m pytest`` of the oracle on ``data`` in both modes, with the fast similarity
    model and two xdist workers (``extra``: the reports to write and the like)."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--gta-model=oracle",
        f"--gta-data={data}",
        "--gta-sim-model=all-MiniLM-L6-v2",
        "--gta-mode=step,e2e",
        *extra,
        "-n",
        "2",
    ]
