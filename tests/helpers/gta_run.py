"""One way for the self-tests to run the plugin and read what it wrote.

Every black-box test does the same three things: start pytest with some ``--gta-*`` options (in
process through ``pytester``, or as a fresh ``python -m pytest``), wait for it, and read the JSON
report. :func:`gta` and :func:`gta_process` do that and return a :class:`GtaRun` that holds the
outcome and reads the report on demand, so that a change to how a run is started (a new default
flag, where the report goes) is one edit here rather than one per test module.

The options that nearly every run passes are constants here too: the spelling of an option
changes in one place, and a test's argument list shows what is particular to it. A run that
stopped because :data:`FAST_SIM`'s model is not installed is skipped with its install hint (a
failure in CI): :meth:`GtaRun.needs_fast_sim`.

``tests/conftest.py`` marks a test ``slow`` when it starts a pytest subprocess or xdist workers:
:func:`gta` with ``fresh_process=True`` or with ``-n`` among its arguments, and :func:`gta_process`,
are recognised there by their spelling (``SUBPROCESS_SIGNS``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.optional import require

#: The small packaged similarity model keeps black-box runs fast; parity tests that need the
#: official model say so.
FAST_SIM = "--gta-sim-model=all-MiniLM-L6-v2"
#: What a run with :data:`FAST_SIM` says where that model is not installed.
FAST_SIM_MISSING = f"{FAST_SIM}: model not found"
#: The 17-query sample bundled with the plugin.
SAMPLE_DATA = "--gta-data=sample"
#: The replay of the reference calls: a run that needs no model.
ORACLE = "--gta-model=oracle"
#: Both of the paper's modes (the default is step-by-step only).
BOTH_MODES = "--gta-mode=step,e2e"
#: Two xdist workers, the setting every integration test is also run with.
XDIST = ("-n", "2")
#: Where :func:`gta` asks for the JSON report unless told otherwise.
REPORT = "gta.json"
#: Hypothesis's pytest plugin imports the whole of Hypothesis in every pytest process's terminal
#: summary (0.65 s of CPU here, a third of a small run); the runs the tests start hold no
#: Hypothesis test, and on CI's two cores those imports added up to minutes (issue 39).
NO_HYPOTHESIS = ("-p", "no:hypothesispytest")
#: Options that keep a subprocess's run independent of the outer one's plugins and cache.
ISOLATED = ("-p", "no:cacheprovider", "-p", "no:randomly", *NO_HYPOTHESIS)
#: An in-process run inherits the outer session's ``filterwarnings = error`` and takes over
#: ``sys.unraisablehook``: an object of an earlier test that the garbage collector happens to
#: finalise during one of the run's cases (an unclosed socket) would fail that case, at random.
#: A user's run has neither; the outer tests still see their own unraisable exceptions.
IN_PROCESS = (
    "-W",
    "ignore::pytest.PytestUnraisableExceptionWarning",
    "-W",
    "ignore::pytest.PytestUnhandledThreadExceptionWarning",
)


#: Report keys whose values are clock readings: two runs of the same cases differ only there.
TIMED_KEYS = frozenset(
    {"duration", "duration_s", "timings", "model_s", "gta_model_s", "started_at", "finished_at"}
)


def untimed(value: Any) -> Any:
    """``value`` (a report or a part of one) without :data:`TIMED_KEYS`, at any depth.

    For tests that compare two runs of the same cases (serial and xdist, shards and their
    merge): the numbers must be equal, the seconds cannot be.
    """
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in TIMED_KEYS}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def read_report(path: Path) -> dict[str, Any]:
    """A JSON report as written by ``--gta-report`` (or ``--gta-merge``)."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@dataclass
class GtaRun:
    """A finished pytest run and the report it was asked to write."""

    result: pytest.RunResult | subprocess.CompletedProcess[str]
    #: Where ``--gta-report`` pointed; it may be missing when the run failed early.
    report_path: Path
    _report: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def ret(self) -> int:
        """The run's exit status."""
        if isinstance(self.result, subprocess.CompletedProcess):
            return self.result.returncode
        return int(self.result.ret)

    @property
    def output(self) -> str:
        """Everything the run printed (stdout, then stderr), for failure messages."""
        if isinstance(self.result, subprocess.CompletedProcess):
            return self.result.stdout + self.result.stderr
        return self.result.stdout.str() + "\n" + self.result.stderr.str()

    def needs_fast_sim(self) -> None:
        """Skip (fail in CI) a run that stopped for want of :data:`FAST_SIM`'s model.

        Most runs with :data:`FAST_SIM` never load it (objective queries need no similarity),
        so the tests do not all ``require("similarity")`` up front; a run that did need it and
        found it missing is skipped with the install hint here, rather than failing on a
        missing report or an exit status, and fails under ``PYTEST_GTA_REQUIRE_SIMILARITY``.
        """
        __tracebackhide__ = True  # a skip or failure is reported at the test's line
        if FAST_SIM_MISSING in self.output:
            require("similarity")

    @property
    def report(self) -> dict[str, Any]:
        """The JSON report, read once; a missing report fails with the run's output."""
        __tracebackhide__ = True
        if self._report is None:
            if not self.report_path.is_file():
                self.needs_fast_sim()
                pytest.fail(
                    f"no report at {self.report_path}; the run said:\n{self.output[-3000:]}"
                )
            self._report = read_report(self.report_path)
        return self._report


def gta(
    pytester: pytest.Pytester,
    *args: str,
    report: str | Path | None = REPORT,
    fresh_process: bool = False,
) -> GtaRun:
    """``pytest *args --gta-report=<report>`` in ``pytester``'s directory.

    Args:
        pytester: the test's pytester; the run happens in its directory.
        *args: the run's options, flags from this module among them (nothing is implied: a
            test reads as the command line it runs).
        report: the report's path, relative to the pytester directory; ``None`` asks for none
            (and leaves any ``--gta-report`` in ``args`` alone). A report left by an earlier
            run in the same directory is removed first, so a run that writes none cannot pass
            for one that did.
        fresh_process: run in a fresh interpreter (``runpytest_subprocess``) rather than in
            process; for what an in-process run cannot show (signals, process-global state).
    """
    __tracebackhide__ = True
    path = pytester.path / (report if report is not None else REPORT)
    extra: tuple[str, ...] = ()
    if report is not None:
        path.unlink(missing_ok=True)
        extra = (f"--gta-report={path}",)
    if fresh_process:
        run = GtaRun(pytester.runpytest_subprocess(*args, *extra), path)
    else:
        run = GtaRun(pytester.runpytest(*IN_PROCESS, *args, *extra), path)
    run.needs_fast_sim()
    return run


def gta_process(
    cwd: Path, *args: str, report: str = REPORT, timeout: float = 600, check: bool = True
) -> GtaRun:
    """``python -m pytest *args --gta-report=<report>`` in ``cwd``, for module-scoped fixtures.

    pytester is per test; a report that several tests read is made once by a subprocess here.
    ``check`` fails the calling fixture, with the run's output, when the run exits non-zero.
    """
    __tracebackhide__ = True
    path = cwd / report
    path.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *ISOLATED, "-q", *args, f"--gta-report={path}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    run = GtaRun(done, path)
    run.needs_fast_sim()
    if check and done.returncode != 0:
        pytest.fail(f"pytest {' '.join(args)} exited {done.returncode}:\n{run.output[-3000:]}")
    return run


def without_hypothesis(
    getpytestargs: Callable[[Any], tuple[str, ...]],
) -> Callable[[Any], tuple[str, ...]]:
    """pytester's ``_getpytestargs`` (``python -mpytest``) followed by :data:`NO_HYPOTHESIS`.

    tests/conftest.py installs it, so that every ``runpytest_subprocess`` and ``spawn_pytest``
    of the suite starts without Hypothesis's plugin.
    """

    def args(self: Any) -> tuple[str, ...]:
        return (*getpytestargs(self), *NO_HYPOTHESIS)

    return args
