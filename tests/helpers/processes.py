"""What the tests need for child processes they start and interrupt."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """``preexec_fn`` of a child a test interrupts: SIGINT back to its default disposition.

    A shell starts background jobs with SIGINT ignored, children inherit that, and Python
    then installs no KeyboardInterrupt handler, so a Ctrl-C test would see its signal ignored.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
