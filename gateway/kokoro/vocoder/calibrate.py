"""Per-voice statistics for the frozen vocoder, measured by running the exact one on a few sentences.

The frozen vocoder needs, for every instance norm, a per-channel mean and variance, and for
every int8 quantizer a scale and zero point. They are measured with the probe model (the exact
vocoder, also returning them) on ``SENTENCES`` and pooled per voice: norms as if the sentences
were one long recording (length-weighted means, variances around the pooled mean); quantizer
ranges averaged, then turned back into a scale and zero point.

Calibrating one voice takes about ten seconds on two cores, so each voice's result is cached
in its own ``.npz`` whose name carries the model's SHA-256, the voice and ``VERSION``: a new
model or a change to this recipe never reads a stale file, and a voice is calibrated only
when it is first used.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .names import CROP, ENERGY, F0, FEATURES, Statistic

log = logging.getLogger(__name__)

VERSION = 2  # bump when the graph surgery, the sentences, the pooling or the file layout change

# Kokoro phonemes (misaki) of assistant-style sentences, short to long, with and without
# clauses. Not the sentences the quality figures are measured on.
SENTENCES = (
    "ʃˈʊɹ, ˌI kæn hˈɛlp wɪð ðˈæt.",
    "ˌOkˈA, sˌO ðə tɹˈAn tə bˈɔstən lˈivz fɹʌm plˈætfˌɔɹm sˈɪks æt ˈAt fˌɪftˈin.",
    "jˌʊɹ pˈækɪʤ wʌz dəlˈɪvəɹd ðɪs ˌæftəɹnˈun ænd lˈɛft wɪð ðə fɹˈʌnt dˈɛsk ʌv jʊɹ bˈɪldɪŋ.",
    "ɡˈʊd mˈɔɹnɪŋ!",
    "ˌI ʧˈɛkt jʊɹ əkˈWnt, ænd ˈɛvəɹiθˌɪŋ lˈʊks fˈIn, bˌʌt ðə nˈɛkst pˈAmᵊnt ɪz dˈu ɪn tˈu "
    "wˈiks, sˌO plˈiz kˈip sˌʌm mˈʌni ɪn ɪt.",
    "wˌɪʧ wˈʌn wʊd ju lˈIk?",
    "hˈɪɹ ɪz hˌW tə sˈɛt ˌʌp ðə pɹˈɪntəɹ: plˈʌɡ ɪt ˈɪn, tˈɜɹn ɪt ˌɔn, ænd ˈOpᵊn ðə sˈɛTɪŋz ˌɔn jʊɹ lˈæptˌɑp.",
)

Stats = dict[str, np.ndarray]
Encode = Callable[[list[int], np.ndarray, float], tuple[np.ndarray, np.ndarray, np.ndarray]]


def measure(
    probe: Any,
    features: np.ndarray,
    f0: np.ndarray,
    energy: np.ndarray,
    style: np.ndarray,
    statistics: Sequence[Statistic],
) -> Stats:
    """Every statistic the exact vocoder computes on this input (one probe run)."""
    names = [s.name for s in statistics]
    crop = np.array([0, f0.shape[1]], np.int64)
    outs = probe.run(names, {FEATURES: features, F0: f0, ENERGY: energy, "style": style, CROP: crop})
    return dict(zip(names, outs))


def _quant_range(scale: float, zero_point: int) -> tuple[float, float]:
    return -zero_point * scale, (255 - zero_point) * scale


def _quant_params(lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point the way DynamicQuantizeLinear derives them from a range."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max(hi - lo, 1e-12) / 255.0
    zero_point = np.clip(np.rint(-lo / scale), 0, 255)
    return np.array(scale, np.float32), np.array(zero_point, np.uint8)


def pool(samples: Sequence[Stats], weights: Sequence[float], statistics: Sequence[Statistic]) -> Stats:
    """One set of statistics standing for all ``samples`` (weights: their lengths)."""
    w = np.asarray(weights, np.float64) / float(np.sum(weights))
    out: Stats = {}
    for stat in statistics:
        if stat.kind == "mean":
            var = stat.name[:-4] + "var"
            means = np.stack([s[stat.name].astype(np.float64) for s in samples])
            second = np.stack([s[var].astype(np.float64) for s in samples]) + means**2
            mean = np.tensordot(w, means, axes=1)
            out[stat.name] = mean.astype(np.float32)
            out[var] = (np.tensordot(w, second, axes=1) - mean**2).astype(np.float32)
        elif stat.kind == "scale":
            zp = stat.name[:-5] + "zero_point"
            ranges = np.array([_quant_range(float(s[stat.name]), int(s[zp])) for s in samples])
            lo, hi = w @ ranges
            out[stat.name], out[zp] = _quant_params(float(lo), float(hi))
    return out


class Stopped(Exception):
    """Calibration was asked to stop (the engine is closing)."""


def calibrate(
    encode: Encode,
    probe: Any,
    statistics: Sequence[Statistic],
    voices: Mapping[str, np.ndarray],
    vocab: Mapping[str, int],
    sentences: Sequence[str] = SENTENCES,
    stop: threading.Event | None = None,
) -> dict[str, Stats]:
    """Pooled statistics for each voice over ``sentences`` (phoneme strings).

    ``stop``, once set, ends the work at the next sentence with ``Stopped``.
    """
    out: dict[str, Stats] = {}
    for voice, pack in voices.items():
        samples, weights = [], []
        for phonemes in sentences:
            if stop is not None and stop.is_set():
                raise Stopped(f"calibration of {voice} stopped")
            tokens = [vocab[c] for c in phonemes if c in vocab]
            style = np.asarray(pack[len(tokens) - 1], np.float32).reshape(1, 256)
            features, f0, energy = encode(tokens, style, 1.0)
            samples.append(measure(probe, features, f0, energy, style, statistics))
            weights.append(features.shape[2])
        out[voice] = pool(samples, weights, statistics)
    return out


def default_cache_dir() -> Path:
    """The user's cache folder (``$XDG_CACHE_HOME`` or ~/.cache), never the repository."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kokoro-gateway"


def model_digest(model_bytes: bytes, sha256: str | None = None) -> str:
    """The cache key of a model: its SHA-256 (``sha256`` when the caller has it), shortened."""
    return (sha256 or hashlib.sha256(model_bytes).hexdigest())[:16]


def cache_path(cache_dir: Path, digest: str, voice: str, sentences: Sequence[str] = SENTENCES) -> Path:
    """The cache file for this model (``model_digest``), voice, recipe version and sentences."""
    recipe = hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:8]
    return cache_dir / f"kokoro-vocoder-stats-{digest}-{recipe}-{voice}-v{VERSION}.npz"


def load_cached(path: Path, statistics: Sequence[Statistic]) -> Stats | None:
    """One voice's cached statistics when the file has every statistic, else None."""
    try:
        with np.load(path) as npz:
            data = {k: npz[k] for k in npz.files}
    except (OSError, ValueError):
        return None
    if not all(s.name in data for s in statistics):
        return None
    return {s.name: data[s.name] for s in statistics}


def save_cached(path: Path, stats: Stats) -> None:
    """Write atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, allow_pickle=False, **stats)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def timed_calibrate(*args: Any, **kwargs: Any) -> tuple[dict[str, Stats], float]:
    t0 = time.perf_counter()
    stats = calibrate(*args, **kwargs)
    elapsed = time.perf_counter() - t0
    log.info("calibrated the frozen vocoder for %d voices in %.1f s", len(stats), elapsed)
    return stats, elapsed
