"""The images a run's cases saw and made, stored once by content and scaled for reports.

A case's input images (the dataset's files) and the images its tools produced (DrawBox, AddText,
Plot, TextToImage outputs in the run's output directory) are what a reader of the HTML report
wants to see, but a worker's output directory is private to it and a full run holds hundreds of
images. So each case, in the process that ran it, adds its images to one store shared by the
session: a file is keyed by the sha256 of its bytes (an image used by twenty cases is stored
once), and kept as a thumbnail and a bounded "full" version, so a 229-query report stays a few
MB. The case's detail payload then carries only ``{path as written: key}``.

Pillow (``pytest-gta[tools]``) scales the images. Without it the original bytes of a known image
format are kept as they are, up to :data:`RAW_LIMIT` bytes and :data:`MAX_PIXELS` pixels as its
header declares them; others are left out, with the reason. An image Pillow refuses (a
decompression bomb: a small file that declares 40000x25000 pixels, or a broken file) is never
kept raw, since the browser would then decode it: a small placeholder picture saying why takes
its place.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import struct
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gta.files import (
    NotRegularFileError,
    file_lock,
    inside,
    open_regular,
    write_atomic_bytes,
)

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
        """Store the image at ``path`` (once per content); its key, or ``None`` with a problem.

        Only a regular file is read (never through a last-component link, never a FIFO), and
        its size is checked on the opened file.
        """
        try:
            with open_regular(path) as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > MAX_SOURCE_BYTES:
                    self.problems.append(f"{path}: {size} bytes, larger than the limit; left out")
                    return None
                data = fh.read(MAX_SOURCE_BYTES + 1)
        except NotRegularFileError as exc:
            self.problems.append(f"{exc}; left out")
            return None
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
            image = self._stored(key, data)
            if image is None:
                return None
            write_atomic_bytes(self._entry_path(key), json.dumps(image.to_json()).encode())
        return key

    def _stored(self, key: str, data: bytes) -> StoredImage | None:
        """Scaled with Pillow; without it, raw (see the module docstring)."""
        try:
            # Pillow is optional and heavy: imported where an image is stored, not at load.
            import PIL  # noqa: F401
        except ImportError:
            return self._raw(key, data)
        return self._scaled(key, data)

    def _raw(self, key: str, data: bytes) -> StoredImage | None:
        """The original bytes as both versions (no Pillow to scale them)."""
        if len(data) > RAW_LIMIT:
            self.problems.append(
                f"image {key}: {len(data)} bytes and no Pillow to scale it; left out "
                "(pip install pillow)"
            )
            return None
        size = declared_size(data)
        if size is None or size[0] * size[1] > MAX_PIXELS:
            shown = "an unreadable size" if size is None else f"{size[0]}x{size[1]} pixels"
            self.problems.append(
                f"image {key}: declares {shown} and there is no Pillow to check it; left out "
                "(pip install pillow)"
            )
            return None
        mime = sniff(data) or "application/octet-stream"
        name = f"{key}.raw{_suffix(mime)}"
        write_atomic_bytes(self.root / name, data)
        return StoredImage(key, name, name, mime, mime, 0, 0)

    def _scaled(self, key: str, data: bytes) -> StoredImage:
        """A thumbnail and a bounded full version; a placeholder for what Pillow refuses."""
        from PIL import Image, ImageOps  # heavy and optional: off the import path

        width = height = 0
        try:
            with warnings.catch_warnings():
                # Pillow only warns between its limit and twice it; the check below refuses.
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                with Image.open(io.BytesIO(data)) as opened:
                    width, height = opened.size
                    if width * height > MAX_PIXELS:
                        raise Image.DecompressionBombError(
                            f"{width}x{height} pixels, more than the {MAX_PIXELS:,} a report shows"
                        )
                    # JPEG decodes at 1/2, 1/4 or 1/8 scale directly: the slow part is cheap.
                    opened.draft("RGB", (FULL_PX, FULL_PX))
                    image = ImageOps.exif_transpose(opened)
                    image.load()
        except Exception as exc:
            if not width:  # Pillow refuses past twice its limit before saying the size
                width, height = declared_size(data) or (0, 0)
            shown = f"{width}x{height} pixels: " if width else ""
            self.problems.append(
                f"image {key}: Pillow cannot read it ({shown}{exc}); shown as a placeholder"
            )
            return self._placeholder(key, width, height, exc)
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

    def _placeholder(self, key: str, width: int, height: int, why: Exception) -> StoredImage:
        """A small picture saying an image is not shown, and why (its size if it declared one).

        Stands for an image Pillow refused, so a reader sees that the case had an image and
        why it is missing, while the browser never gets the refused bytes to decode.
        """
        from PIL import Image, ImageDraw  # heavy and optional: off the import path

        card = Image.new("RGB", (THUMB_PX, THUMB_PX // 2), (230, 230, 230))
        draw = ImageDraw.Draw(card)
        size = f"{width}x{height} pixels" if width and height else type(why).__name__
        draw.text((8, 8), "image not shown:", fill=(60, 60, 60))
        draw.text((8, 28), size[:36], fill=(60, 60, 60))
        draw.text((8, 48), "Pillow refused it", fill=(60, 60, 60))
        mime, encoded = _encode(card, lossless=True)
        name = f"{key}.placeholder{_suffix(mime)}"
        write_atomic_bytes(self.root / name, encoded)
        return StoredImage(key, name, name, mime, mime, width, height)


def declared_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` as a PNG, GIF, JPEG or WebP header declares it, without decoding.

    For keeping an image raw without Pillow: the browser decodes what it is given, so a small
    file declaring a huge size must be caught from its header alone. ``None`` when the header
    cannot be read (unknown format, truncated).
    """
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
            width, height = struct.unpack(">II", data[16:24])
            return width, height
        if data[:6] in (b"GIF87a", b"GIF89a"):
            width, height = struct.unpack("<HH", data[6:10])
            return width, height
        if data.startswith(b"\xff\xd8"):
            return _jpeg_size(data)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
    except struct.error:
        return None
    return None


#: JPEG start-of-frame markers (baseline, progressive, lossless...): they carry the size.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        if length < 2:
            return None
        at += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return (width, height) if len(data) >= 30 else None
    if chunk == b"VP8L" and data[20:21] == b"\x2f":
        (bits,) = struct.unpack("<I", data[21:25])
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


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
