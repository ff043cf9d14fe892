"""Reading JSON that came from outside, so that no input can crash the session.

``json.loads`` fails in more ways than :class:`json.JSONDecodeError`: text nested a few thousand
levels deep raises :class:`RecursionError`, a number with more than 4,300 digits raises a plain
:class:`ValueError` (CPython's int-conversion limit), bytes that are not UTF-8 raise
:class:`UnicodeDecodeError`, and a structure nested just under the parser's limit loads fine but
then breaks every recursive walk after it (``copy.deepcopy``, execnet's serializer, ``==``).
Every loader of outside data (datasets, prediction files, mock scripts, cache entries, cassettes,
model replies) goes through :func:`loads` or :func:`read_json`, which turn all of that into one
:class:`JsonInputError` whose message says what is wrong, for the caller to attach the file and
field to.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_gta.files import NotRegularFileError, read_data

#: Deeper than anything GTA writes (a dataset is about 8 levels deep, a prediction file about
#: 10): anything beyond this is hostile or broken, and refusing it keeps recursion bounded.
MAX_DEPTH = 64


class JsonInputError(ValueError):
    """Outside JSON that cannot be used; the message says why, without a traceback."""


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of lists and dicts in ``value``, counted without recursion.

    Counting stops once ``limit`` is exceeded (the result is then ``limit + 1``), so hostile
    input costs at most one pass over what was loaded.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        level += 1
        if level > limit:
            return limit + 1
        deepest = max(deepest, level)
        stack.extend((child, level) for child in children)
    return deepest


def loads(
    text: str | bytes,
    *,
    max_depth: int = MAX_DEPTH,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """``json.loads`` whose every failure is a :class:`JsonInputError`.

    ``NaN`` and ``Infinity`` are accepted, as Python's ``json`` (and the official harness, which
    wrote them) accepts them; writers of strict JSON must handle them (see
    :mod:`pytest_gta.outward`).

    Raises:
        JsonInputError: not UTF-8, not JSON, a number too long to convert, or nested deeper
            than ``max_depth`` levels.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonInputError(f"not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    try:
        value = json.loads(text, object_pairs_hook=object_pairs_hook)
    except json.JSONDecodeError as exc:
        raise JsonInputError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise JsonInputError(f"nested too deeply (more than {max_depth} levels)") from None
    except ValueError as exc:
        if "digits" in str(exc):  # CPython's "Exceeds the limit (4300 digits) for integer..."
            raise JsonInputError(
                f"a number has more than {sys.get_int_max_str_digits()} digits"
            ) from None
        raise JsonInputError(f"a value cannot be read: {exc}") from None
    if depth(value, max_depth) > max_depth:
        raise JsonInputError(f"nested too deeply (more than {max_depth} levels)")
    return value


def read_json(
    path: Path,
    *,
    max_depth: int = MAX_DEPTH,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """Read and parse a JSON file.

    A FIFO, a device or a directory in the file's place is refused without reading it (a FIFO
    would block the read forever; see :func:`~pytest_gta.files.read_data`).

    Raises:
        FileNotFoundError: the file does not exist (callers usually word this themselves).
        JsonInputError: the file cannot be read or parsed (see :func:`loads`), or is not a
            regular file.
    """
    try:
        data = read_data(path)
    except FileNotFoundError:
        raise
    except NotRegularFileError as exc:
        raise JsonInputError(str(exc)) from None
    except OSError as exc:
        raise JsonInputError(f"cannot be read: {exc.strerror or exc}") from None
    return loads(data, max_depth=max_depth, object_pairs_hook=object_pairs_hook)
