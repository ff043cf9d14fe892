"""Where tools may read files from and write their results to, for every backend.

A model chooses the file arguments of a tool call, so a tool that opened whatever it was given
would let a model (or a prompt injected into a query) read any file on the machine, for example
``/etc/passwd`` or ``../../secrets``, and a remote backend (``agentlego``, ``api``, ``vlm``) would
upload it; a ``ReadCSV`` of the dataset's ``end.json`` would hand it the checkpoints it is judged
on. File arguments are therefore confined to what the case may name
(:attr:`pytest_gta.tools.ToolContext.reach`, :mod:`pytest_gta.reach`): its input files, the
output directory (where DrawBox and AddText put the images that later calls edit further) and,
for GTA-Atomic, the dataset's data directories; the benchmark's own files are refused by name.
Containment is checked on real paths, so ``..`` segments and symlinks that lead out are refused
too.

Pillow is imported only by the functions that decode images: the remote backends use this
module for paths alone and do not need Pillow installed.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gta.errors import GtaToolError
from pytest_gta.reach import withheld_message
from pytest_gta.tools import ToolContext, ToolInvocation

if TYPE_CHECKING:
    from PIL import Image


def resolve_image(value: Any, context: ToolContext) -> Path:
    """Turn a model-given image argument into the real path of a file the tool may open.

    Relative paths are taken relative to the dataset root, as the official harness does
    (``image/image_0.jpg``); absolute paths are accepted as they are. Either way the path must
    resolve, after following symlinks, to an existing file the case may name
    (:attr:`~pytest_gta.tools.ToolContext.reach`: its input files, its outputs, for GTA-Atomic
    the dataset's data directories; never the benchmark's own files).

    Args:
        value: The argument as the model passed it.
        context: The call's context.

    Returns:
        The real (symlink-free, absolute) path of the image.

    Raises:
        GtaToolError: The value is not a path, names one of the benchmark's files, points
            outside what the case may name, or names no existing file. The message is what the
            model sees as the observation.
    """
    return resolve_file(value, context, "image")


def resolve_file(value: Any, context: ToolContext, what: str = "file") -> Path:
    """Turn a model-given file argument into the real path of a file the tool may open.

    The rules of :func:`resolve_image`, for any kind of file (``audio``, ``video``, a
    document); ``what`` names the kind in the messages.

    Raises:
        GtaToolError: The value is not a path, names one of the benchmark's files, points
            outside what the case may name, or names no existing file.
    """
    if not isinstance(value, str) or not value.strip():
        raise GtaToolError(f"expected {_article(what)} {what} path, got {value!r}")
    root = context.dataset.root_str
    candidate = value if os.path.isabs(value) else os.path.join(root, value)
    try:
        real = os.path.realpath(candidate)
    except ValueError:  # a NUL byte, or a lone surrogate no file name can hold
        raise GtaToolError(f"invalid {what} path {value!r}") from None
    verdict = context.reach.judge(real)
    if verdict == "withheld":
        raise GtaToolError(withheld_message(value))
    if verdict == "outside":
        raise GtaToolError(
            f"{what} path {value!r} is not one of the task's files or the run's outputs; pass "
            "a path of the task's files (the dataset-relative one, such as 'image/image_0.jpg') "
            "or a path a previous tool returned"
        )
    if not os.path.isfile(real):
        raise GtaToolError(f"No such {what} file: {value!r}")
    return Path(real)


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def new_output_path(context: ToolContext, stem: str, suffix: str) -> Path:
    """A fresh file name in the run's output directory for a tool's result.

    The name carries a random UUID, so concurrent calls (threads, xdist workers sharing the
    directory) never overwrite each other's results and no lock or counter file is needed.

    Args:
        context: The call's context; its ``output_dir`` is created if missing.
        stem: Readable prefix, usually the tool's name; unsafe characters are replaced.
        suffix: File extension including the dot, e.g. ``".png"``.

    Returns:
        An absolute path that does not exist yet.
    """
    output_dir = Path(os.path.abspath(context.output_dir))
    output_dir.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._") or "output"
    return output_dir / f"{safe}-{uuid.uuid4().hex}{suffix}"


def save_output_file(data: bytes, tool: str, extension: str, context: ToolContext) -> str:
    """Write a file a remote tool produced into the run's output directory; its absolute path.

    Names are unique so parallel calls and repeated calls of one tool never overwrite each
    other; the path is what the model passes to a later call, which :func:`resolve_image`
    accepts because it lies in the output directory.

    Args:
        data: The file's bytes, decoded from the service's answer.
        tool: The tool's name, the file name's prefix.
        extension: File extension including the dot, e.g. ``".png"``.
        context: The call's context; its ``output_dir`` is created if missing.

    Returns:
        The absolute path of the new file.
    """
    context.output_dir.mkdir(parents=True, exist_ok=True)
    path = context.output_dir / f"{tool}-{uuid.uuid4().hex[:12]}{extension}"
    path.write_bytes(data)
    return str(path.absolute())


def argument(invocation: ToolInvocation, name: str) -> Any:
    """One argument of a call, preferring the harness's type-converted form.

    Args:
        invocation: The call.
        name: The argument's name.

    Returns:
        The converted value when present, else the raw JSON one, else ``None``.
    """
    if name in invocation.converted:
        return invocation.converted[name]
    return invocation.arguments.get(name)


def text_argument(invocation: ToolInvocation, name: str) -> str | None:
    """A text argument as AgentLego's ``DefaultParser`` hands it to a tool: ``str()`` of it.

    Args:
        invocation: The call.
        name: The argument's name.

    Returns:
        The converted or raw value as text (a JSON ``null`` is ``"None"``, as the official
        parser converts it with ``str``), or ``None`` when the call leaves the argument out
        and the tool's default applies.
    """
    for given in (invocation.converted, invocation.arguments):
        if name in given:
            value = given[name]
            return value if isinstance(value, str) else str(value)
    return None


def required_text(invocation: ToolInvocation, name: str) -> str:
    """A required text argument (see :func:`text_argument`).

    The protocol refuses a call that leaves a required argument out (``ARGS_ERROR``), so only a
    direct call gets here without it; it fails as calling the official tool's ``apply`` would.

    Raises:
        GtaToolError: the argument is missing.
    """
    value = text_argument(invocation, name)
    if value is None:
        missing = TypeError(
            f"{invocation.name}.apply() missing 1 required positional argument: {name!r}"
        )
        raise GtaToolError(repr(missing))
    return value


@contextmanager
def _decoding(path: Path) -> Iterator[None]:
    """Turn any failure to decode the image at ``path`` into a tool error naming the file.

    The file is outside data (a dataset image, or one a model pointed at), and Pillow's decoders
    fail on hostile files in many ways beyond ``OSError`` (``SyntaxError`` from broken PNG
    chunks, ``ValueError``, ``struct.error``, ``EOFError``, ``DecompressionBombError``, and the
    ``DecompressionBombWarning`` a strict warnings filter raises). Whatever the decoder raises,
    the image cannot be used, and the model that chose it sees why.
    """
    try:
        yield
    except GtaToolError:
        raise
    except Exception as exc:
        reason = str(exc) or type(exc).__name__
        raise GtaToolError(f"cannot read image {str(path)!r}: {reason}") from exc


def _open_checked(path: Path) -> Image.Image:
    """Open ``path`` (its header only) and refuse a size past ``Image.MAX_IMAGE_PIXELS``.

    Pillow only warns between one and two times that limit and would then decode, allocating
    gigabytes for a small file whose header claims, say, 60000x60000 pixels.
    """
    from PIL import Image

    image = Image.open(path)
    width, height = image.size
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        image.close()
        raise GtaToolError(
            f"cannot read image {str(path)!r}: it claims {width}x{height} pixels, more than "
            f"the {limit} an image tool accepts"
        )
    return image


def open_rgb(path: Path) -> Image.Image:
    """Load an image fully into memory as RGB, turning unreadable files into tool errors.

    Args:
        path: A path returned by :func:`resolve_image`.

    Returns:
        A detached RGB copy (the file is closed; editing it never touches the source).

    Raises:
        GtaToolError: The file is not an image Pillow can read, or is too large to decode.
    """
    with _decoding(path), _open_checked(path) as source:
        image: Image.Image = source.convert("RGB")
    return image


def open_image(path: Path) -> Image.Image:
    """Load an image fully into memory in its own mode (AgentLego's ``ImageIO.to_pil().copy()``).

    Args:
        path: A path returned by :func:`resolve_image`.

    Returns:
        A detached copy (the file is closed; editing it never touches the source).

    Raises:
        GtaToolError: The file is not an image Pillow can read, or is too large to decode.
    """
    with _decoding(path), _open_checked(path) as source:
        image: Image.Image = source.copy()
    return image


def image_size(path: Path) -> tuple[int, int]:
    """The ``(width, height)`` an image's header declares, without decoding its pixels.

    Args:
        path: A path returned by :func:`resolve_image`.

    Returns:
        The image's size in pixels.

    Raises:
        GtaToolError: The file is not an image Pillow can read, or is too large to decode.
    """
    with _decoding(path), _open_checked(path) as source:
        size: tuple[int, int] = source.size
    return size
