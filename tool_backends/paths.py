"""Where the ``local`` tools may read images from and write their results to.

A model chooses the file arguments of a tool call, so a local tool that opened whatever it was
given would let a model (or a prompt injected into a query) read any file on the machine, for
example ``/etc/passwd`` or ``../../secrets``. Image arguments are therefore confined to the
dataset root and the run's output directory (where DrawBox and AddText put the images that later
calls edit further). Containment is checked on real paths, so ``..`` segments and symlinks that
lead out of those directories are refused too.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolContext, ToolInvocation


def _inside(path: str, root: str) -> bool:
    """Whether the real path ``path`` is ``root`` itself or lies below it."""
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives on Windows: certainly not inside
        return False


def allowed_roots(context: ToolContext) -> tuple[str, ...]:
    """The real paths of the directories tools may read images from.

    Args:
        context: The call's context (its dataset root and output directory).

    Returns:
        The dataset root and the output directory, symlinks resolved.
    """
    return (
        os.path.realpath(context.dataset.root_str),
        os.path.realpath(context.output_dir),
    )


def resolve_image(value: Any, context: ToolContext) -> Path:
    """Turn a model-given image argument into the real path of a file the tool may open.

    Relative paths are taken relative to the dataset root, as the official harness does
    (``image/image_0.jpg``); absolute paths are accepted as they are. Either way the path must
    resolve, after following symlinks, to an existing file inside the dataset root or the run's
    output directory.

    Args:
        value: The argument as the model passed it.
        context: The call's context.

    Returns:
        The real (symlink-free, absolute) path of the image.

    Raises:
        GtaToolError: The value is not a path, points outside the allowed directories, or names
            no existing file. The message is what the model sees as the observation.
    """
    if not isinstance(value, str) or not value.strip():
        raise GtaToolError(f"expected an image path, got {value!r}")
    if "\x00" in value:
        raise GtaToolError(f"invalid image path {value!r}")
    root = context.dataset.root_str
    candidate = value if os.path.isabs(value) else os.path.join(root, value)
    real = os.path.realpath(candidate)
    if not any(_inside(real, allowed) for allowed in allowed_roots(context)):
        raise GtaToolError(
            f"image path {value!r} is outside the dataset directory and the run's output "
            "directory; pass a dataset-relative path such as 'image/image_0.jpg' or a path a "
            "previous tool returned"
        )
    if not os.path.isfile(real):
        raise GtaToolError(f"No such image file: {value!r}")
    return Path(real)


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


def open_rgb(path: Path) -> Image.Image:
    """Load an image fully into memory as RGB, turning unreadable files into tool errors.

    Args:
        path: A path returned by :func:`resolve_image`.

    Returns:
        A detached RGB copy (the file is closed; editing it never touches the source).

    Raises:
        GtaToolError: The file is not an image Pillow can read.
    """
    try:
        source = Image.open(path)
        with source:
            image: Image.Image = source.convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise GtaToolError(f"cannot read image {str(path)!r}: {exc}") from exc
    return image
