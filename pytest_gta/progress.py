"""Lines that tell the user what a long phase is doing, in the terminal, while it happens.

Loading a model, loading the similarity model and generating a run's episodes in batches can
take minutes; pytest prints nothing until a case finishes. :func:`say` writes one line at once:
through the terminal reporter in the process that owns the terminal, and, in an xdist worker
(whose output pytest otherwise captures and never shows), to the worker's own standard error,
which is the terminal it inherited, prefixed with the worker's id. Global output capturing is
suspended for the write, as pytest does for its own live output.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator

import pytest

PREFIX = "gta:"
#: This process's xdist worker id, where it is one (set by :mod:`pytest_gta.session.xdist`).
WORKER_LABEL = pytest.StashKey[str]()


def say(config: pytest.Config, message: str) -> None:
    """Print ``gta: message`` now, from whichever process runs this."""
    capman = config.pluginmanager.getplugin("capturemanager")
    suspended = (
        capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
    )
    worker = config.stash.get(WORKER_LABEL, None)
    reporter = config.pluginmanager.getplugin("terminalreporter")
    with suspended:
        if worker is not None or reporter is None:
            # A worker's terminal is its standard error; so is everyone's before the terminal
            # reporter exists (pytest_configure: a model server starting) or without one.
            stream = sys.__stderr__ or sys.stderr
            label = "" if worker is None else f"[{worker}] "
            stream.write(f"{label}{PREFIX} {message}\n")
            stream.flush()
            return
        reporter.ensure_newline()
        reporter.write_line(f"{PREFIX} {message}")


@contextlib.contextmanager
def phase(config: pytest.Config, doing: str, done: str) -> Iterator[dict[str, float]]:
    """Say ``doing ...`` before a phase and ``done in N s`` after it; yields its timing."""
    say(config, f"{doing} ...")
    timing = {"seconds": 0.0}
    start = time.perf_counter()
    yield timing
    timing["seconds"] = time.perf_counter() - start
    say(config, f"{done} in {timing['seconds']:.1f} s")
