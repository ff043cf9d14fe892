"""GTA-Workflow's audio tools, on soundfile (libsndfile) and NumPy/SciPy (all BSD).

AudioClipTool, NoiseReduction, PitchShifting and SoundCharacteristicExtraction.

The official tools (``agentlego/benchmark.py`` of open-compass/GTA) use pydub, noisereduce and
librosa; librosa pulls numba and noisereduce's newer releases torch, so the same computations
are written here on NumPy and SciPy:

* AudioClipTool cuts ``[start_time, end_time)`` seconds (defaults 0 and 10, as officially) and
  writes the official default format, MP3 (libsndfile 1.1+), else WAV.
* NoiseReduction is spectral gating (noisereduce's stationary method): a per-frequency threshold
  from the quietest frames, a smoothed mask, and the masked STFT inverted.
* PitchShifting is librosa's ``pitch_shift``: resampled to 22050 Hz, time-stretched by a phase
  vocoder, then resampled back to its length, so frequencies move by ``2**(n_steps/12)``. The
  official tool takes ``n_steps`` from its constructor (default 0: unchanged); a call may pass
  ``n_steps`` here.
* SoundCharacteristicExtraction answers the official JSON (MFCC, spectral centroid, rolloff,
  zero-crossing rate: mean and variance of each) computed as librosa computes them at 22050 Hz
  (Slaney mel filters, power in dB with an 80 dB floor, orthonormal DCT-II), close to librosa's
  numbers but not bit-identical.

Audio arguments are file paths (``audio: str`` officially), confined like every file argument;
a file libsndfile cannot decode, or one over :data:`MAX_SAMPLES`, is a tool error.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
from scipy import signal as sp
from scipy.fft import dct
from scipy.ndimage import uniform_filter
from scipy.signal import resample, resample_poly

from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolContext, ToolInvocation
from pytest_gta.types import ResultItem, ToolResult
from tool_backends.paths import argument, resolve_file
from tool_backends.workflow_io import checked_size, number, output_path

#: Samples (frames times channels) a tool decodes at most: three minutes of stereo at 48 kHz
#: (the STFT of NoiseReduction holds about 16 bytes per sample and channel).
MAX_SAMPLES = 180 * 48_000 * 2
#: The rate the official PitchShifting and SoundCharacteristicExtraction work at.
ANALYSIS_RATE = 22_050
N_FFT = 2048
HOP = 512


def _audio(invocation: ToolInvocation, context: ToolContext) -> tuple[Path, np.ndarray, int]:
    """The ``audio`` argument's path, samples (frames x channels, float64) and rate."""
    path = resolve_file(argument(invocation, "audio"), context, "audio")
    checked_size(path)
    try:
        info = soundfile.info(str(path))
        if info.frames * info.channels > MAX_SAMPLES:
            raise GtaToolError(f"{path.name} holds more than {MAX_SAMPLES} samples")
        data, rate = soundfile.read(str(path), dtype="float64", always_2d=True)
    except GtaToolError:
        raise
    except Exception as error:  # libsndfile's errors (soundfile.LibsndfileError, RuntimeError)
        raise GtaToolError(f"cannot read audio {path.name}: {error}") from None
    return path, data, int(rate)


def _write(path: Path, data: np.ndarray, rate: int) -> Path:
    """Write samples; a format libsndfile cannot write (``.mp3`` on an old one) becomes WAV."""
    try:
        soundfile.write(str(path), data, rate)
    except Exception:  # soundfile.LibsndfileError / TypeError: no writer for this extension
        path = path.with_suffix(".wav")
        soundfile.write(str(path), data, rate)
    return path


def _audio_result(path: Path) -> ToolResult:
    return ToolResult((ResultItem("audio", str(path.absolute())),))


def audio_clip(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """AudioClipTool(audio, start_time, end_time, filename): the clip, as MP3 (else WAV)."""
    start = number(invocation, "start_time", 0.0)
    end = number(invocation, "end_time", 10.0)
    if start < 0 or end <= start:
        raise GtaToolError(
            "Invalid start_time/end_time: must be non-negative and end_time > start_time"
        )
    _, data, rate = _audio(invocation, context)
    clip = data[int(start * 1000) * rate // 1000 : int(end * 1000) * rate // 1000]
    if len(clip) == 0:
        raise GtaToolError(f"the audio is {len(data) / rate:.3f} s long: nothing from {start} s")
    stem = f"audio_clip_{start:.3f}_{end:.3f}".replace(".", "_")
    return _audio_result(_write(output_path(invocation, context, stem, ".mp3"), clip, rate))


def _stft(signal: np.ndarray, hop: int = HOP) -> np.ndarray:
    spectrum: np.ndarray = sp.stft(signal, nperseg=N_FFT, noverlap=N_FFT - hop, boundary="even")[2]
    return spectrum


def _istft(spectrum: np.ndarray, length: int, hop: int = HOP) -> np.ndarray:
    _, restored = sp.istft(spectrum, nperseg=N_FFT, noverlap=N_FFT - hop, boundary=True)
    out = np.zeros(length)
    out[: min(length, len(restored))] = restored[:length]
    return out


def _gate(channel: np.ndarray) -> np.ndarray:
    """One channel with stationary spectral gating (noisereduce's ``stationary=True`` idea)."""
    spectrum = _stft(channel)
    db = 20 * np.log10(np.abs(spectrum) + 1e-10)
    frames = db.shape[1]
    quiet = np.argsort(db.mean(axis=0))[: max(1, frames // 10)]
    noise = db[:, quiet]
    threshold = noise.mean(axis=1) + 1.5 * noise.std(axis=1)
    mask = (db > threshold[:, None]).astype(float)
    mask = uniform_filter(mask, size=(3, 5))
    return _istft(spectrum * mask, len(channel))


def noise_reduction(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """NoiseReduction(audio): the audio with its stationary noise gated out, as WAV."""
    _, data, rate = _audio(invocation, context)
    cleaned = np.stack([_gate(data[:, c]) for c in range(data.shape[1])], axis=1)
    path = output_path(invocation, context, "denoised", ".wav")
    return _audio_result(_write(path, cleaned, rate))


def _mono(data: np.ndarray, rate: int) -> np.ndarray:
    """The mean of the channels, resampled to :data:`ANALYSIS_RATE` (librosa's ``load``)."""
    mono: np.ndarray = data.mean(axis=1)
    if rate == ANALYSIS_RATE:
        return mono
    common = math.gcd(rate, ANALYSIS_RATE)
    resampled: np.ndarray = resample_poly(mono, ANALYSIS_RATE // common, rate // common)
    return resampled


def _phase_vocoder(spectrum: np.ndarray, rate: float) -> np.ndarray:
    """The STFT played ``rate`` times faster, phases advanced coherently (librosa's algorithm)."""
    steps = np.arange(0, spectrum.shape[1], rate)
    advance = np.linspace(0, np.pi * HOP, spectrum.shape[0])
    padded = np.pad(spectrum, [(0, 0), (0, 2)])
    phase = np.angle(spectrum[:, 0])
    out = np.zeros((spectrum.shape[0], len(steps)), dtype=complex)
    for t, step in enumerate(steps):
        left, right = padded[:, int(step)], padded[:, int(step) + 1]
        alpha = step % 1.0
        out[:, t] = ((1 - alpha) * np.abs(left) + alpha * np.abs(right)) * np.exp(1j * phase)
        delta = np.angle(right) - np.angle(left) - advance
        delta -= 2 * np.pi * np.round(delta / (2 * np.pi))
        phase = phase + advance + delta
    return out


def shift_pitch(signal: np.ndarray, steps: float) -> np.ndarray:
    """``signal`` (at :data:`ANALYSIS_RATE`) with its frequencies times ``2**(steps/12)``."""
    if steps == 0:
        return signal
    rate = 2.0 ** (-steps / 12)
    stretched_length = round(len(signal) / rate)
    stretched = _istft(_phase_vocoder(_stft(signal), rate), stretched_length)
    shifted: np.ndarray = resample(stretched, len(signal))
    return shifted


def pitch_shifting(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """PitchShifting(audio[, n_steps]): the audio at 22050 Hz, ``n_steps`` semitones higher."""
    steps = number(invocation, "n_steps", 0.0)
    if not -48 <= steps <= 48:
        raise GtaToolError(f"n_steps must be from -48 to 48 semitones, got {steps}")
    path, data, rate = _audio(invocation, context)
    shifted = shift_pitch(_mono(data, rate), steps)
    suffix = path.suffix or ".wav"
    target = output_path(invocation, context, f"{path.stem}_pitchshift_{steps:+.1f}", suffix)
    return _audio_result(_write(target, shifted, ANALYSIS_RATE))


def _hz_to_mel(hz: Any) -> Any:
    hz = np.asarray(hz, dtype=float)
    linear = hz / (200.0 / 3)
    log_part = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(hz >= 1000.0, log_part, linear)


def _mel_to_hz(mel: Any) -> Any:
    mel = np.asarray(mel, dtype=float)
    linear = mel * (200.0 / 3)
    log_part = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0))
    return np.where(mel >= 15.0, log_part, linear)


def mel_filters(rate: int, n_mels: int = 128) -> np.ndarray:
    """Slaney-normalised triangular mel filters over the STFT's bins (librosa's default)."""
    bins = np.linspace(0, rate / 2, N_FFT // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(rate / 2), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - bins[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights: np.ndarray = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (edges[2 : n_mels + 2] - edges[:n_mels]))[:, None]
    return weights


def characteristics(
    signal: np.ndarray, rate: int = ANALYSIS_RATE, n_mfcc: int = 13
) -> dict[str, Any]:
    """The official tool's features of a mono signal: mean and variance of each over time."""
    padded = np.pad(signal, N_FFT // 2, mode="constant")
    count = 1 + max(0, (len(padded) - N_FFT) // HOP)
    frames = np.stack([padded[i * HOP : i * HOP + N_FFT] for i in range(count)], axis=1)
    window = np.hanning(N_FFT + 1)[:-1]
    magnitude = np.abs(np.fft.rfft(frames * window[:, None], axis=0))
    power_db = 10 * np.log10(np.maximum(1e-10, mel_filters(rate) @ magnitude**2))
    power_db = np.maximum(power_db, power_db.max() - 80.0)
    mfcc = dct(power_db, axis=0, type=2, norm="ortho")[:n_mfcc]
    freqs = np.linspace(0, rate / 2, N_FFT // 2 + 1)
    total = magnitude.sum(axis=0)
    centroid = (freqs[:, None] * magnitude).sum(axis=0) / np.maximum(total, 1e-10)
    cumulative = np.cumsum(magnitude, axis=0)
    rolloff = freqs[np.argmax(cumulative >= 0.85 * cumulative[-1:], axis=0)]
    signs = np.signbit(frames)
    crossings = (signs[1:] != signs[:-1]).mean(axis=0)

    def stats(values: np.ndarray) -> dict[str, float]:
        return {"mean": float(values.mean()), "var": float(values.var())}

    return {
        "mfcc": {"mean": mfcc.mean(axis=1).tolist(), "var": mfcc.var(axis=1).tolist()},
        "spectral_centroid": stats(centroid),
        "spectral_rolloff": stats(rolloff),
        "zero_crossing_rate": stats(crossings),
    }


def sound_characteristics(invocation: ToolInvocation, context: ToolContext) -> ToolResult:
    """SoundCharacteristicExtraction(audio): the official JSON of features."""
    _, data, rate = _audio(invocation, context)
    features = characteristics(_mono(data, rate))
    return ToolResult.text(json.dumps(features, indent=2))
