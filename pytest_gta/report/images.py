"""The images a run's cases saw and made, stored once by content and scaled for reports.

A case's input images (the dataset's files) and the images its tools produced (DrawBox, AddText,
Plot, TextToImage outputs in the run's output directory) are what a reader of the HTML report
wants to see, but a worker's output directory is private to it and a full run holds hundreds of
images. So each case, in the process that ran it, adds its images to one store shared by the
session: a file is keyed by the sha256 of its bytes (an image used by twenty cases is stored
once), and kept as a thumbnail and a bounded "full" version, so a 229-query report stays a few
MB. The case's detail payload then carries only ``{path as written: key}``.

Pillow (``pytest-gta[tools]``) scales the images. Without it the original bytes of a known image
format are kept as they are, up to :data:`RAW_LIMIT`; larger ones are left out, with the reason.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gta.files import file_lock, inside, write_atomic_bytes

#: Longest side of a thumbnail, in pixels (a case row's drill-down shows several side by side).
THUMB_PX = 240
#: Longest side of the "full size" version shown on click: enough to read text in an image.
FULL_PX = 1024
#: Images larger than this on disk are not read at all (a hostile or broken tool output).
MAX_SOURCE_BYTES = 64 * 1024 * 1024
#: Without Pillow, images up to this size are kept unscaled; larger ones are left out.
RAW_LIMIT = 2 * 1024 * 1024
#: Images with more pixels than this are not decoded (decompression bombs).
MAX_PIXELS = 80_000_000
#: Extensions of files a tool argument or result may name as an image.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp")
#: Magic numbers of the formats a browser shows, with their MIME types.
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def sniff(data: bytes) -> str | None:
    """The MIME type of image bytes a browser can show, from their magic number."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(frozen=True)
class StoredImage:
    """One stored image: its versions' files (names inside the store) and what it was."""

    key: str
    thumb: str
    full: str
    mime_thumb: str
    mime_full: str
    width: int
    height: int

    def to_json(self) -> dict[str, Any]:
        """The store's index entry."""
        return {
            "thumb": self.thumb,
            "full": self.full,
            "mime_thumb": self.mime_thumb,
            "mime_full": self.mime_full,
            "width": self.width,
            "height": self.height,
        }

    @classmethod
    def from_json(cls, key: str, raw: Mapping[str, Any]) -> StoredImage:
        """An index entry read back; raises ``KeyError``/``TypeError``/``ValueError`` if broken."""
        return cls(
            key=key,
            thumb=str(raw["thumb"]),
            full=str(raw["full"]),
            mime_thumb=str(raw["mime_thumb"]),
            mime_full=str(raw["mime_full"]),
            width=int(raw["width"]),
            height=int(raw["height"]),
        )


class ImageStore:
    """A directory of content-addressed, scaled images shared by a session's processes.

    Every write is atomic (a temporary file renamed into place) and an image's versions are
    written before its index entry, so a reader never sees half an image; two processes adding
    the same image write the same bytes, and the second one's rename is harmless.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        #: Why images were left out (unreadable, too large, not an image), for the report's notes.
        self.problems: list[str] = []

    def _entry_path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> StoredImage | None:
        """The stored image with this key, or ``None`` (never stored, or a broken entry)."""
        if not key.isalnum():
            return None
        try:
            raw = json.loads(self._entry_path(key).read_text(encoding="utf-8"))
            image = StoredImage.from_json(key, raw)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        for name in (image.thumb, image.full):
            if os.sep in name or name.startswith(".") or not (self.root / name).is_file():
                return None
        return image

    def read(self, image: StoredImage, version: str) -> bytes | None:
        """The bytes of a version (``thumb`` or ``full``), or ``None`` if it went missing."""
        name = image.thumb if version == "thumb" else image.full
        try:
            return (self.root / name).read_bytes()
        except OSError:
            return None

    def data_uri(self, image: StoredImage, version: str) -> str | None:
        """A ``data:`` URI of a version, what a self-contained page can show."""
        data = self.read(image, version)
        if data is None:
            return None
        mime = image.mime_thumb if version == "thumb" else image.mime_full
        return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"

    def add(self, path: Path) -> str | None:
        """Store the image at ``path`` (once per content); its key, or ``None`` with a problem."""
        try:
            size = path.stat().st_size
            if size > MAX_SOURCE_BYTES:
                self.problems.append(f"{path}: {size} bytes, larger than the limit; left out")
                return None
            data = path.read_bytes()
        except OSError as exc:
            self.problems.append(f"{path}: {exc.strerror or exc}")
            return None
        if sniff(data) is None:
            self.problems.append(f"{path}: not an image a browser shows (PNG, JPEG, GIF, WebP)")
            return None
        key = hashlib.sha256(data).hexdigest()[:32]
        if self.get(key) is not None:
            return key
        with file_lock(self.root / ".lock"):
            if self.get(key) is not None:
                return key
            image = self._scaled(key, data) or self._raw(key, data)
            if image is None:
                return None
            write_atomic_bytes(self._entry_path(key), json.dumps(image.to_json()).encode())
        return key

    def _raw(self, key: str, data: bytes) -> StoredImage | None:
        """The original bytes as both versions (no Pillow, or Pillow could not read them)."""
        if len(data) > RAW_LIMIT:
            self.problems.append(
                f"image {key}: {len(data)} bytes and no Pillow to scale it; left out "
                "(pip install pillow)"
            )
            return None
        mime = sniff(data) or "application/octet-stream"
        name = f"{key}.raw{_suffix(mime)}"
        write_atomic_bytes(self.root / name, data)
        return StoredImage(key, name, name, mime, mime, 0, 0)

    def _scaled(self, key: str, data: bytes) -> StoredImage | None:
        """A thumbnail and a bounded full version, with Pillow; ``None`` without it."""
        try:
            from PIL import Image, ImageOps
        except ImportError:
            return None
        try:
            Image.MAX_IMAGE_PIXELS = MAX_PIXELS
            with Image.open(io.BytesIO(data)) as opened:
                width, height = opened.size
                # JPEG decodes at 1/2, 1/4 or 1/8 scale directly: the slow part becomes cheap.
                opened.draft("RGB", (FULL_PX, FULL_PX))
                image = ImageOps.exif_transpose(opened)
                image.load()
        except Exception as exc:
            self.problems.append(f"image {key}: Pillow cannot read it ({exc})")
            return None
        # Photos as JPEG; images with transparency or few colours (plots, drawn boxes) as PNG.
        lossless = image.mode in ("RGBA", "LA", "P", "1", "L") and data.startswith(b"\x89PNG")
        versions = {}
        for version, bound in (("full", FULL_PX), ("thumb", THUMB_PX)):
            copy = image.copy()
            copy.thumbnail((bound, bound))
            versions[version] = _encode(copy, lossless)
        names = {}
        for version, (mime, encoded) in versions.items():
            names[version] = f"{key}.{version}{_suffix(mime)}"
            write_atomic_bytes(self.root / names[version], encoded)
        return StoredImage(
            key,
            names["thumb"],
            names["full"],
            versions["thumb"][0],
            versions["full"][0],
            width,
            height,
        )


def _encode(image: Any, lossless: bool) -> tuple[str, bytes]:
    out = io.BytesIO()
    if lossless:
        image.save(out, format="PNG", optimize=False)
        return "image/png", out.getvalue()
    if image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    image.save(out, format="JPEG", quality=75)
    return "image/jpeg", out.getvalue()


def _suffix(mime: str) -> str:
    return {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif"}.get(mime, ".img")


# --------------------------------------------------------------------------------------------
# Which images a case has


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string inside a JSON-like value (bounded depth: records come from outside)."""
    if depth > 20:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item, depth + 1)


def image_paths(
    files: Iterable[str], steps: Iterable[Any], roots: Iterable[Path]
) -> dict[str, Path]:
    """The images of a case: ``{path as written: file}``, input files first, then its steps'.

    A string in the steps counts when it names an image file (by extension) that exists inside
    one of ``roots`` (the dataset and the run's output directory): tool arguments and image
    results are written as such paths, relative to the dataset or absolute.
    """
    resolved_roots = [os.path.realpath(root) for root in roots]
    found: dict[str, Path] = {}
    candidates = [*files, *(s for step in steps for s in _strings(step))]
    for written in candidates:
        if written in found or len(written) > 4096 or "\x00" in written:
            continue
        if not written.lower().endswith(IMAGE_SUFFIXES):
            continue
        for root in resolved_roots:
            path = os.path.realpath(os.path.join(root, written))
            if inside(path, root) and os.path.isfile(path):
                found[written] = Path(path)
                break
    return found


def store_case_images(
    store: ImageStore, files: Iterable[str], steps: Iterable[Any], roots: Iterable[Path]
) -> dict[str, str]:
    """Add a case's images to the store: ``{path as written: key}`` of those stored."""
    keys = {}
    for written, path in image_paths(files, steps, roots).items():
        key = store.add(path)
        if key is not None:
            keys[written] = key
    return keys
