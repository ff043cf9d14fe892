"""Records kept on disk between runs: their content-address keys and their JSON text.

Two stores keep such records: the model's response cache (:mod:`pytest_gta.models.cache`) and
the tool cassettes of the ``replay`` backend (``tool_backends/cassettes.py``). Both name an
entry by the hash of what determines it, write it as one JSON file (renamed into place with
:func:`pytest_gta.files.write_atomic`) and read back files that other processes wrote or people
edited by hand. The rules for that are here, once, so that a key computed by one store's code
is the key the other's would compute, and neither store depends on the other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_gta import jsonsafe
from pytest_gta.outward import redact_value


def digest(material: Any) -> str:
    """sha256 (hex) of the canonical JSON of ``material``.

    ``surrogatepass`` keeps keys of valid text byte-identical to plain UTF-8 (existing caches
    and cassettes stay valid) while text with a lone surrogate, which a model can emit inside a
    JSON string, gets a key instead of a ``UnicodeEncodeError``.
    """
    text = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def dump_entry(entry: Mapping[str, Any], indent: int | None = None) -> str:
    r"""An entry as JSON text that reads back as exactly the text it holds.

    ASCII with ``\u`` escapes: a lone surrogate, which UTF-8 cannot encode, survives the round
    trip instead of failing the write. Secrets (API keys a model or tool echoed) are redacted:
    these files are kept and committed.
    """
    return json.dumps(redact_value(entry), indent=indent, ensure_ascii=True)


def read_entry(path: Path) -> dict[str, Any] | None:
    """The JSON object stored at ``path``, or ``None`` when it is missing or unusable.

    Entries are an optimisation written by other processes (or edited by hand): a torn, foreign
    or hostile one (not UTF-8, nested too deeply, numbers past Python's digit limit) must cost a
    miss, never the run.
    """
    try:
        entry = jsonsafe.read_json(path)
    except (OSError, jsonsafe.JsonInputError):
        return None
    return entry if isinstance(entry, dict) else None
