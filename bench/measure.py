"""How far one rendering of a sentence is from another: spectral distance, timbre, loudness, joins.

All in numpy, on float audio at 24 kHz. Only frames where the reference is voiced (within
40 dB of its loudest frame) count, so the silence the model pads sentences with does not
dilute the figures.

* ``lsd_db``: log-spectral distance, frame by frame (RMS over frequency of the dB difference,
  averaged over frames). It sees everything, including the fine harmonic structure, which this
  model renders chaotically: a 0.1% nudge of its input already moves it by several dB.
* ``timbre_db``: distance between the long-term average spectra (in 1/3-octave bands, each
  spectrum normalized to its own mean level): the colour of the voice, blind to loudness and
  to frame-level chaos.
* ``loudness_db``: the level difference over voiced frames.
* ``worst_join_ratio``: the step at a chunk join over the largest step near it (below 1 means
  the join is no rougher than the signal around it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RATE = 24000
N_FFT = 1024
HOP = 256
VOICED_DB = 40.0
FLOOR_DB = 80.0  # power below the reference's peak by this much counts as this much


@dataclass(frozen=True, slots=True)
class Distance:
    lsd_db: float
    timbre_db: float
    loudness_db: float  # test minus reference

    def row(self) -> str:
        return f"LSD {self.lsd_db:5.2f} dB  timbre {self.timbre_db:5.2f} dB  loud {self.loudness_db:+5.2f} dB"


def power_spectra(audio: np.ndarray) -> np.ndarray:
    """Hann-windowed power spectra, one row per hop."""
    x = np.asarray(audio, np.float64)
    if x.size < N_FFT:
        x = np.pad(x, (0, N_FFT - x.size))
    count = 1 + (x.size - N_FFT) // HOP
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(count)[:, None]
    return np.abs(np.fft.rfft(x[idx] * np.hanning(N_FFT), axis=1)) ** 2


def _voiced(power: np.ndarray) -> np.ndarray:
    level = 10 * np.log10(power.sum(axis=1) + 1e-20)
    return level > level.max() - VOICED_DB


def _bands(freq: np.ndarray) -> list[np.ndarray]:
    """1/3-octave bands from 63 Hz to the Nyquist frequency."""
    edges = 63.0 * 2.0 ** (np.arange(0, 40) / 3.0)
    edges = edges[edges < RATE / 2]
    return [(freq >= lo) & (freq < hi) for lo, hi in zip(edges[:-1], edges[1:])]


def distance(reference: np.ndarray, test: np.ndarray) -> Distance:
    """How ``test`` differs from ``reference`` (same sentence, aligned from sample 0)."""
    n = min(len(reference), len(test))
    ref, tst = power_spectra(reference[:n]), power_spectra(test[:n])
    voiced = _voiced(ref)
    floor = ref.max() * 10 ** (-FLOOR_DB / 10)
    ref_db = 10 * np.log10(np.maximum(ref[voiced], floor))
    tst_db = 10 * np.log10(np.maximum(tst[voiced], floor))
    lsd = float(np.mean(np.sqrt(np.mean((ref_db - tst_db) ** 2, axis=1))))
    freq = np.fft.rfftfreq(N_FFT, 1 / RATE)
    bands = _bands(freq)

    def ltas(p: np.ndarray) -> np.ndarray:
        mean = p.mean(axis=0)
        db = 10 * np.log10(np.array([mean[b].sum() for b in bands]) + 1e-20)
        return db - db.mean()

    timbre = float(np.sqrt(np.mean((ltas(ref[voiced]) - ltas(tst[voiced])) ** 2)))
    loud = float(10 * np.log10(tst[voiced].sum() / max(ref[voiced].sum(), 1e-20)))
    return Distance(lsd, timbre, loud)


def summary(rows: Sequence[Distance]) -> dict[str, float]:
    """Means over ``rows`` (one per sentence), and the loudness difference furthest from 0."""
    loud = [d.loudness_db for d in rows]
    return {
        "lsd_db": float(np.mean([d.lsd_db for d in rows])),
        "timbre_db": float(np.mean([d.timbre_db for d in rows])),
        "loudness_db": float(np.mean(loud)),
        "loudness_worst_db": max(loud, key=abs),
    }


def align(reference: np.ndarray, test: np.ndarray, max_lag: int = 1200) -> np.ndarray:
    """``test`` shifted (cut or padded at the start) to line up with ``reference``, by the
    lag within +-``max_lag`` samples (50 ms) that maximizes their cross-correlation over the
    first two seconds: paths that trim leading silence differently start a few ms apart."""
    n = min(len(reference), len(test), 2 * RATE)
    if n <= 2 * max_lag:
        return test
    size = 1 << int(np.ceil(np.log2(2 * n)))
    xc = np.fft.irfft(np.fft.rfft(test[:n], size) * np.conj(np.fft.rfft(reference[:n], size)), size)
    lags = np.concatenate([xc[: max_lag + 1], xc[-max_lag:]])  # lag 0..max, then -max..-1
    lag = int(np.argmax(lags))
    lag = lag if lag <= max_lag else lag - len(lags)
    if lag > 0:  # test starts late: drop its first samples
        return test[lag:]
    return np.concatenate([np.zeros(-lag, test.dtype), test])


def worst_join_ratio(audio: np.ndarray, joins: list[int], around: int = 240) -> float:
    """Largest (step at a join) / (largest step within ``around`` samples of it, join excluded)."""
    step = np.abs(np.diff(np.asarray(audio, np.float64)))
    worst = 0.0
    for j in joins:
        if not 1 <= j < len(audio):
            continue
        k = j - 1  # step[k] = audio[j] - audio[j - 1]
        lo, hi = max(0, k - around), min(len(step), k + around + 1)
        near = np.concatenate([step[lo:k], step[k + 1 : hi]])
        if near.size:
            worst = max(worst, float(step[k] / max(near.max(), 1e-9)))
    return worst
