"""What the GTA-Workflow tools share: where their files go, their arguments, ffmpeg.

The official tools (``agentlego/benchmark.py`` of open-compass/GTA) write to
``os.path.join(output_dir, filename + ext)`` with a model-chosen ``filename`` and
``output_dir``, so a model could write anywhere (``../../.bashrc``, ``/etc``). Here a file a tool
makes always lands inside the run's output directory: ``output_dir`` may name a directory inside
it (relative to it, or absolute and inside it), ``filename`` must be a plain name (no separator,
no ``..``, no control character), and each call writes into a fresh directory of its own, so two
cases (or two epochs of one) that choose the same name never overwrite each other's file while
the name the model chose is kept.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_gta.errors import GtaToolError
from pytest_gta.files import inside
from pytest_gta.tools import ToolContext, ToolInvocation
from tool_backends.paths import argument, text_argument

#: The longest file name a model may choose (most filesystems stop at 255 bytes).
MAX_NAME_CHARS = 120
#: Seconds one ffmpeg or ffprobe run may take before it is killed.
FFMPEG_TIMEOUT_S = 120.0
#: The largest input file (audio, video, document) a workflow tool opens.
MAX_INPUT_BYTES = 200 << 20


@dataclass(frozen=True)
class PlannedOutput:
    """Where a tool's file will go, checked but not yet created (:func:`plan_output`)."""

    #: The output directory itself (the containment's bound).
    root: Path
    #: The directory inside it that the call's own folder goes into.
    base: Path
    #: The folder's prefix (the tool's name).
    prefix: str
    #: The file's name, extension included.
    name: str

    def create(self) -> Path:
        """A fresh folder of the call's own in :attr:`base`; the file's path inside it.

        Raises:
            GtaToolError: the folder would lie outside the output directory (the place changed
                since it was checked).
        """
        folder = self.base / f"{self.prefix}-{uuid.uuid4().hex[:12]}"
        folder.mkdir(parents=True, exist_ok=True)
        if not inside(os.path.realpath(folder), os.path.realpath(self.root)):
            raise GtaToolError(
                f"refused output_dir: {str(self.base)!r} leads out of the output directory"
            )
        return folder / self.name


def plan_output(
    invocation: ToolInvocation, context: ToolContext, default_stem: str, suffix: str
) -> PlannedOutput:
    """Where a tool's file goes (see :func:`output_path`), checked before any work, not created.

    Raises:
        GtaToolError: ``filename`` or ``output_dir`` would leave the output directory.
    """
    name = text_argument(invocation, "filename")
    if name is None or name in ("", "None"):
        name = default_stem
    name = safe_name(name)
    if not name.lower().endswith(suffix.lower()):
        name += suffix
    root = Path(os.path.abspath(context.output_dir))
    base = _output_base(text_argument(invocation, "output_dir"), root)
    return PlannedOutput(root, base, invocation.name, name)


def output_path(
    invocation: ToolInvocation, context: ToolContext, default_stem: str, suffix: str
) -> Path:
    """Where a tool's file goes: ``filename`` (or ``default_stem``) + ``suffix``, confined.

    Args:
        invocation: The call (its ``filename`` and ``output_dir`` arguments, if any).
        context: The call's context; the file lies under its ``output_dir``.
        default_stem: The name when the call gives no ``filename``.
        suffix: The extension with its dot (added unless the name already ends with it).

    Returns:
        An absolute path inside a new directory of the run's output directory.

    Raises:
        GtaToolError: ``filename`` or ``output_dir`` would leave the output directory.
    """
    return plan_output(invocation, context, default_stem, suffix).create()


def safe_name(name: str) -> str:
    """``name`` if it is a plain file name; a tool error otherwise.

    Raises:
        GtaToolError: a path separator, ``..``, a control character or an overlong name.
    """
    if (
        "/" in name
        or "\\" in name
        or name.strip() in ("", ".", "..")
        or ".." in name
        or any(unicodedata.category(c).startswith("C") for c in name)
    ):
        raise GtaToolError(
            f"refused filename {name[:80]!r}: give a plain file name without a directory, "
            "'..' or control characters (files are written to the run's output directory)"
        )
    if len(name) > MAX_NAME_CHARS:
        raise GtaToolError(f"filename is {len(name)} characters, more than {MAX_NAME_CHARS}")
    return name.strip()


def _output_base(given: str | None, root: Path) -> Path:
    """The directory ``output_dir`` names inside ``root`` (``root`` itself by default).

    Raises:
        GtaToolError: it lies outside ``root``, after ``..`` and symlinks.
    """
    if given is None or given in ("", "None", "."):
        return root
    candidate = given if os.path.isabs(given) else os.path.join(root, given)
    try:
        real = os.path.realpath(candidate)
    except ValueError:
        raise GtaToolError(f"invalid output_dir {given[:80]!r}") from None
    if not inside(real, os.path.realpath(root)):
        raise GtaToolError(
            f"refused output_dir {given[:80]!r}: files may only be written inside the run's "
            f"output directory {str(root)!r} (leave output_dir out to use it)"
        )
    return Path(real)


@functools.cache
def module_text(module_file: str) -> str:
    """The text of a module the code sandbox runs (its parsers, its builders).

    Its text rather than an import, for the reason :func:`~tool_backends.sandbox_pool.
    worker_source` gives: the sandbox shows the Python paths, not this checkout.
    """
    text = Path(module_file).read_text(encoding="utf-8")
    # The worker takes a program out of its first Markdown fence (the Solver's rule).
    assert "`" * 3 not in text, f"{Path(module_file).name} must not contain a Markdown fence"
    return text


def sandbox_program(module_file: str, call: str) -> str:
    """A program for the code sandbox: the module's text, then ``solution()`` returning ``call``.

    ``call`` is an expression over the module's functions and literal data (the host's part).
    """
    return f"{module_text(module_file)}\n\ndef solution():\n    return {call}\n"


def number(invocation: ToolInvocation, name: str, default: float) -> float:
    """A numeric argument (a JSON number or a numeric string); ``default`` when left out.

    Raises:
        GtaToolError: the value is not a finite number.
    """
    value = argument(invocation, name)
    if value is None or value == "None":
        return default
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise GtaToolError(f"{name} must be a number, got {value!r}") from None
    if result != result or result in (float("inf"), float("-inf")):
        raise GtaToolError(f"{name} must be a finite number, got {value!r}")
    return result


def whole(invocation: ToolInvocation, name: str, default: int, low: int, high: int) -> int:
    """A whole-number argument within ``[low, high]``; ``default`` when left out.

    Raises:
        GtaToolError: not a whole number, or out of range.
    """
    value = number(invocation, name, float(default))
    if value != int(value) or not low <= value <= high:
        raise GtaToolError(f"{name} must be a whole number from {low} to {high}, got {value!r}")
    return int(value)


def checked_size(path: Path, limit: int = MAX_INPUT_BYTES) -> int:
    """The size of an input file, refused past ``limit`` bytes.

    Raises:
        GtaToolError: the file is larger than ``limit``.
    """
    size = path.stat().st_size
    if size > limit:
        raise GtaToolError(f"{path.name} is {size} bytes, more than the {limit} a tool reads")
    return size


def ffmpeg_program(name: str = "ffmpeg") -> str:
    """The path of ``ffmpeg`` (or ``ffprobe``).

    Raises:
        GtaToolError: it is not installed.
    """
    found = shutil.which(name)
    if found is None:
        raise GtaToolError(f"{name} is not installed here (Debian: apt-get install ffmpeg)")
    return found


def run_ffmpeg(
    arguments: Sequence[str],
    program: str = "ffmpeg",
    stdin: bytes = b"",
    timeout: float = FFMPEG_TIMEOUT_S,
) -> bytes:
    """Run ffmpeg (or ffprobe) with ``arguments``; its standard output.

    The input is outside data: ffmpeg's decoders run in their own process, killed after
    ``timeout`` seconds (a tool passes what is left of its call's :data:`FFMPEG_TIMEOUT_S`,
    :class:`FfmpegBudget`), and a failure is a tool error with the end of ffmpeg's message.

    Raises:
        GtaToolError: ffmpeg failed or took too long.
    """
    command = [ffmpeg_program(program), "-hide_banner", *arguments]
    if program == "ffmpeg":
        command[2:2] = ["-nostdin", "-loglevel", "error"]
    try:
        done = subprocess.run(
            command, input=stdin, capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise GtaToolError(f"{program} took longer than {timeout:.3g} s") from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        tail = message[-1] if message else f"exit status {done.returncode}"
        raise GtaToolError(f"{program} failed: {tail[:300]}")
    return done.stdout


class FfmpegBudget:
    """The ffmpeg time one call of a video tool has left.

    A video tool runs ffmpeg up to three times (probe, decode, encode); together they get
    :data:`FFMPEG_TIMEOUT_S`, and none runs past the case's own deadline
    (:meth:`~pytest_gta.tools.ToolContext.time_left`).
    """

    def __init__(self, context: ToolContext) -> None:
        self.context = context
        self.ends = time.monotonic() + FFMPEG_TIMEOUT_S

    def left(self) -> float:
        """Seconds the next ffmpeg run may take.

        Raises:
            GtaToolError: the call's ffmpeg time, or the case's, is spent.
        """
        left = self.ends - time.monotonic()
        if left <= 0:
            raise GtaToolError(f"ffmpeg took longer than {FFMPEG_TIMEOUT_S:.0f} s in this call")
        return self.context.time_left(left)
