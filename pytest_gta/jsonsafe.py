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

import contextlib
import gc
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pytest_gta.errors import GtaUsageError
from pytest_gta.files import NotRegularFileError, read_data

#: Deeper than anything GTA writes (a dataset is about 8 levels deep, a prediction file about
#: 10): anything beyond this is hostile or broken, and refusing it keeps recursion bounded.
MAX_DEPTH = 64
#: What :func:`depth` descends into (a tuple, not ``dict | list | tuple``: faster to test).
_CONTAINERS = (dict, list, tuple)


class JsonInputError(ValueError):
    """Outside JSON that cannot be used; the message says why, without a traceback."""


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of lists and dicts in ``value``, counted level by level without recursion.

    Counting stops once ``limit`` is exceeded (the result is then ``limit + 1``), so hostile
    input costs at most one pass over what was loaded. Only containers are carried to the next
    level: a report's 100,000 strings and numbers are looked at once, in a comprehension (this
    pass is a fifth of reading a report, so it is kept tight).
    """
    level = [value] if isinstance(value, _CONTAINERS) else []
    deepest = 0
    while level:
        deepest += 1
        if deepest > limit:
            return limit + 1
        children: list[Any] = []
        for item in level:
            children.extend(item.values() if isinstance(item, dict) else item)
        level = [child for child in children if isinstance(child, _CONTAINERS)]
    return deepest


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a large tree of objects is built.

    Loading a report makes about half a million objects (JSON values, then the typed model's):
    each allocation burst triggers collections that walk every object still alive, so reading
    20 reports spent 40 % of its time in the collector, which finds nothing (JSON trees have no
    cycles). Reference counting still frees everything; the previous state is restored, so
    nested uses are safe.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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
        with collection_paused():
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


def read_json_or_usage_error(path: Path, label: str) -> Any:
    """:func:`read_json` whose every failure is a usage error naming ``label``.

    ``label`` is the file as the user gave it (``evalpack:pack.json``, a report's path).
    """
    try:
        return read_json(path)
    except FileNotFoundError:
        raise GtaUsageError(f"{label}: no such file") from None
    except JsonInputError as exc:
        raise GtaUsageError(f"{label}: {exc}") from None
