"""GTA-Workflow's image and video tools, on Pillow, NumPy and the system's ``ffmpeg``.

ImageQualityTest, VideoClip, AddTextVideoTool, TextToVideoTool and VideoOCR.

The official tools (``agentlego/benchmark.py`` of open-compass/GTA) read and write video with
OpenCV; here Debian's ``ffmpeg`` and ``ffprobe`` programs do it, run as subprocesses (never
linked) with a time limit (:func:`tool_backends.workflow_io.run_ffmpeg`), and frames are drawn
with Pillow. Videos are written as H.264 MP4 without sound, as the official OpenCV writer writes
them (``mp4v``, no audio track).

* ImageQualityTest answers the official line, ``Laplacian variance: V, Blurry: B`` (OpenCV's
  3x3 Laplacian of the grey image, reflected borders, threshold 100), then a second line with
  classic no-reference measures: resolution, brightness (mean grey), RMS contrast (grey
  standard deviation) and noise (Immerkaer's sigma estimate).
* VideoClip cuts ``[start_time, end_time)`` (defaults 0 and 10 s, as officially).
* AddTextVideoTool draws ``text`` on every frame at ``position`` ("x,y", the text's left-bottom
  corner, as OpenCV's ``putText``) in ``color`` ("B,G,R"), ``font_scale`` times a 30 px font.
* TextToVideoTool renders ``num_frames`` frames of ``resolution`` at ``fps``: a square moving
  across a light background with the description's first 32 characters, as the official
  "lite" generator draws them.
* VideoOCR reads every ``frame_skip``-th frame with the ``local`` backend's OCR (RapidOCR) and
  answers ``Frame N: (x1, y1, x2, y2) text | ...`` per frame, the official format; at most
  :data:`MAX_OCR_FRAMES` frames per call (the model is told the ``frame_skip`` that fits).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import ResultItem, ToolResult
from tool_backends import ocr
from tool_backends.paths import argument, open_rgb, resolve_file, resolve_image, text_argument
from tool_backends.workflow_io import (
    FfmpegBudget,
    checked_size,
    number,
    output_path,
    run_ffmpeg,
    whole,
)

#: The official ImageQualityTest's default threshold.
BLUR_THRESHOLD = 100.0
#: Frames VideoOCR reads at most in one call (RapidOCR takes about a second a frame).
MAX_OCR_FRAMES = 60
#: Frames and pixels a drawn video may have at most, and the bytes of RGB frames a tool holds.
MAX_FRAMES = 1800
MAX_PIXELS = 1920 * 1080
MAX_FRAME_BYTES = 512 << 20
#: OpenCV's FONT_HERSHEY_SIMPLEX at scale 1 is about this many pixels tall, cap to descender.
FONT_PX = 30


def _video_result(path: Path) -> ToolResult:
    return ToolResult((ResultItem("video", str(path.absolute())),))


def _grey(image: Image.Image) -> np.ndarray:
    rgb = np.asarray(image, dtype=np.float64)
    grey = 0.299 * rgb[..., 0] + 0.587 * rgb[..., 1] + 0.114 * rgb[..., 2]
    return np.asarray(np.clip(np.rint(grey), 0, 255), dtype=np.float64)


def _filter3(grey: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    padded = np.pad(grey, 1, mode="reflect")
    height, width = grey.shape
    out = np.zeros_like(grey)
    for dy in range(3):
        for dx in range(3):
            if kernel[dy, dx]:
                out += kernel[dy, dx] * padded[dy : dy + height, dx : dx + width]
    return out


LAPLACIAN = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], dtype=np.float64)
NOISE = np.array([[1, -2, 1], [-2, 4, -2], [1, -2, 1]], dtype=np.float64)


@dataclass(frozen=True)
class Quality:
    """The measures of one image."""

    width: int
    height: int
    laplacian_variance: float
    brightness: float
    contrast: float
    noise_sigma: float

    def format(self) -> str:
        """The official first line, then the other measures."""
        blurry = self.laplacian_variance < BLUR_THRESHOLD
        return (
            f"Laplacian variance: {self.laplacian_variance:.2f}, Blurry: {blurry}\n"
            f"Resolution: {self.width}x{self.height}, Brightness: {self.brightness:.2f}, "
            f"Contrast: {self.contrast:.2f}, Noise sigma: {self.noise_sigma:.2f}"
        )


def measure(image: Image.Image) -> Quality:
    """The quality measures of an RGB image."""
    grey = _grey(image)
    height, width = grey.shape
    noise = 0.0
    if height > 2 and width > 2:
        inner = np.abs(_filter3(grey, NOISE))[1:-1, 1:-1]
        noise = float(np.sqrt(np.pi / 2) * inner.sum() / (6 * (width - 2) * (height - 2)))
    return Quality(
        width,
        height,
        float(_filter3(grey, LAPLACIAN).var()),
        float(grey.mean()),
        float(grey.std()),
        noise,
    )


def image_quality(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """ImageQualityTest(image): the Laplacian variance and blur flag, then other measures."""
    image = open_rgb(resolve_image(argument(invocation, "image"), context))
    return ToolResult.text(measure(image).format())


@dataclass(frozen=True)
class VideoInfo:
    """What ffprobe says of a video's first video stream."""

    width: int
    height: int
    fps: float
    duration: float


def probe(path: Path, budget: FfmpegBudget) -> VideoInfo:
    """The size, frame rate and duration of a video (ffprobe, within the call's time left).

    Raises:
        GtaToolError: the file has no decodable video stream.
    """
    checked_size(path)
    out = run_ffmpeg(
        [
            "-v", "error", "-select_streams", "v:0", "-print_format", "json",
            "-show_entries", "stream=width,height,avg_frame_rate:format=duration", str(path),
        ],
        program="ffprobe",
        timeout=budget.left(),
    )  # fmt: skip
    try:
        found = json.loads(out)
        stream = found["streams"][0]
        top, _, bottom = str(stream["avg_frame_rate"]).partition("/")
        fps = float(top) / float(bottom or 1)
        info = VideoInfo(
            int(stream["width"]), int(stream["height"]), fps, float(found["format"]["duration"])
        )
    except (KeyError, IndexError, ValueError, ZeroDivisionError, TypeError):
        raise GtaToolError(f"cannot read video {path.name}: no video stream found") from None
    if info.width * info.height > MAX_PIXELS or info.width < 1 or info.fps <= 0:
        raise GtaToolError(f"cannot read video {path.name}: {info.width}x{info.height} frames")
    return info


def _video(
    invocation: ToolInvocation, context: ToolContext, budget: FfmpegBudget
) -> tuple[Path, VideoInfo]:
    path = resolve_file(argument(invocation, "video"), context, "video")
    return path, probe(path, budget)


#: The encoder's settings: H.264 that every player reads, even sides (yuv420p needs them).
ENCODE = ["-an", "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
          "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "-movflags", "+faststart"]  # fmt: skip


def video_clip(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """VideoClip(video, start_time, end_time, filename): the clip as MP4."""
    start = number(invocation, "start_time", 0.0)
    end = number(invocation, "end_time", 10.0)
    if start < 0 or end <= start:
        raise GtaToolError(
            "Invalid start_time/end_time: must be non-negative and end_time > start_time"
        )
    budget = FfmpegBudget(context)
    path, info = _video(invocation, context, budget)
    if start >= info.duration:
        raise GtaToolError(f"the video is {info.duration:.3f} s long: nothing from {start} s")
    stem = f"clip_{start:.3f}_{end:.3f}".replace(".", "_")
    target = output_path(invocation, context, stem, ".mp4")
    arguments = ["-ss", f"{start:.3f}", "-to", f"{end:.3f}", "-i", str(path), *ENCODE]
    run_ffmpeg(["-y", *arguments, str(target)], timeout=budget.left())
    return _video_result(target)


def _check_frames(count: float, width: int, height: int) -> None:
    """Refuse a video whose RGB frames would take more than :data:`MAX_FRAME_BYTES`.

    Raises:
        GtaToolError: too many frames, or too many bytes of them.
    """
    if count > MAX_FRAMES or count * width * height * 3 > MAX_FRAME_BYTES:
        raise GtaToolError(
            f"{int(count)} frames of {width}x{height} are more than a video tool draws "
            f"(at most {MAX_FRAMES} frames and {MAX_FRAME_BYTES >> 20} MiB of them)"
        )


def _encode(frames: list[np.ndarray], fps: float, target: Path, budget: FfmpegBudget) -> None:
    """Write RGB frames (all one size) as an MP4 (within the call's time left)."""
    height, width = frames[0].shape[:2]
    raw = b"".join(np.ascontiguousarray(f, dtype=np.uint8).tobytes() for f in frames)
    source = ["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-r", f"{fps}"]
    arguments = ["-y", *source, "-i", "pipe:0", *ENCODE, str(target)]
    run_ffmpeg(arguments, stdin=raw, timeout=budget.left())


def _decode(path: Path, info: VideoInfo, budget: FfmpegBudget, every: int = 1) -> list[np.ndarray]:
    """Every ``every``-th frame of a video as RGB arrays (within the call's time left)."""
    chosen = ["-vf", f"select=not(mod(n\\,{every}))", "-vsync", "vfr"] if every > 1 else []
    arguments = ["-i", str(path), *chosen, "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"]
    raw = run_ffmpeg(arguments, timeout=budget.left())
    size = info.width * info.height * 3
    shape = (info.height, info.width, 3)
    starts = range(0, len(raw) - size + 1, size)
    return [np.frombuffer(raw[i : i + size], np.uint8).reshape(shape) for i in starts]


def _pair(raw: str | None, default: tuple[int, ...], count: int, name: str) -> tuple[int, ...]:
    if raw is None or raw == "None":
        return default
    try:
        values = tuple(int(float(v.strip())) for v in raw.strip("()[] ").split(","))
    except ValueError:
        values = ()
    if len(values) != count:
        example = "50,50" if count == 2 else "255,255,255"
        raise GtaToolError(f'{name} must be a string in the format "{example}", got {raw!r}')
    return values


def _font(size: float) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=max(6.0, size))


def add_text_video(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """AddTextVideoTool(video, text, position, font_scale, color, thickness, filename)."""
    text = text_argument(invocation, "text") or "Hello, World!"
    x, y = _pair(text_argument(invocation, "position"), (50, 50), 2, "position")
    blue, green, red = _pair(text_argument(invocation, "color"), (255, 255, 255), 3, "color")
    if not all(0 <= v <= 255 for v in (blue, green, red)):
        raise GtaToolError("color values must be in range [0, 255]")
    scale = number(invocation, "font_scale", 1.0)
    if not 0 < scale <= 20:
        raise GtaToolError("font_scale must be > 0 (at most 20)")
    thickness = whole(invocation, "thickness", 2, 0, 50)
    budget = FfmpegBudget(context)
    path, info = _video(invocation, context, budget)
    _check_frames(info.duration * info.fps, info.width, info.height)
    font = _font(FONT_PX * scale)
    frames = []
    for frame in _decode(path, info, budget):
        image = Image.fromarray(frame)
        ImageDraw.Draw(image).text(
            (x, y), text, fill=(red, green, blue), font=font, anchor="ls",
            stroke_width=max(0, thickness - 1) // 2, stroke_fill=(red, green, blue),
        )  # fmt: skip
        frames.append(np.asarray(image))
    if not frames:
        raise GtaToolError(f"cannot read video {path.name}: no frames decoded")
    snippet = "".join(c for c in text[:20] if c.isalnum() or c in " _").replace(" ", "_")
    target = output_path(invocation, context, f"video_with_text_{snippet}", ".mp4")
    _encode(frames, info.fps, target, budget)
    return _video_result(target)


def _resolution(raw: str | None) -> tuple[int, int]:
    """The official parse of ``"width,height"`` (at least 16 each; 128x128 when unreadable)."""
    try:
        parts = (raw or "128,128").split(",")
        width, height = max(16, int(float(parts[0]))), max(16, int(float(parts[1])))
    except (ValueError, IndexError):
        return 128, 128
    if width * height > MAX_PIXELS:
        raise GtaToolError(f"resolution {width}x{height} is more than {MAX_PIXELS} pixels")
    return width, height


def _frame(width: int, height: int, t: int, total: int, text: str) -> np.ndarray:
    image = Image.new("RGB", (width, height), (240, 240, 240))
    draw = ImageDraw.Draw(image)
    margin = max(4, min(width, height) // 16)
    side = max(8, min(width, height) // 6)
    progress = t / max(1, total - 1)
    left = margin + int((width - 2 * margin - side) * progress)
    top = margin + int((height - 2 * margin - side) * (0.5 - 0.5 * progress))
    colour = (50 + (t * 30) % 205, 80 + (t * 50) % 175, 110 + (t * 70) % 145)
    draw.rectangle((left, top, left + side, top + side), fill=colour)
    draw.text((margin, height - margin - 12), text[:32], fill=(30, 30, 30), font=_font(11))
    return np.asarray(image)


def text_to_video(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """TextToVideoTool(description, num_frames, resolution, fps, filename): a drawn MP4."""
    description = text_argument(invocation, "description") or ""
    count = whole(invocation, "num_frames", 8, 1, MAX_FRAMES)
    fps = whole(invocation, "fps", 8, 1, 60)
    width, height = _resolution(text_argument(invocation, "resolution"))
    _check_frames(count, width, height)
    budget = FfmpegBudget(context)
    frames = [_frame(width, height, t, count, description) for t in range(count)]
    target = output_path(invocation, context, "text_to_video", ".mp4")
    _encode(frames, fps, target, budget)
    return _video_result(target)


def video_ocr(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """VideoOCR(video, frame_skip): the text of every ``frame_skip``-th frame, per frame."""
    every = whole(invocation, "frame_skip", 1, 1, 1_000_000)
    budget = FfmpegBudget(context)
    path, info = _video(invocation, context, budget)
    estimated = int(info.duration * info.fps) + 1
    if estimated / every > MAX_OCR_FRAMES:
        least = -(-estimated // MAX_OCR_FRAMES)
        raise GtaToolError(
            f"VideoOCR would read about {estimated // every} frames of {path.name}; at most "
            f"{MAX_OCR_FRAMES} per call: pass frame_skip of at least {least}"
        )
    lines = []
    with tempfile.TemporaryDirectory(prefix="gta-videoocr-") as scratch:
        for index, frame in enumerate(_decode(path, info, budget, every)):
            picture = Path(scratch) / f"frame-{index}.png"
            Image.fromarray(frame).save(picture)
            regions = ocr.recognise(picture)
            found = " | ".join(region.format() for region in regions)
            lines.append(f"Frame {index * every}: {found}")
    return ToolResult.text("\n".join(lines))
