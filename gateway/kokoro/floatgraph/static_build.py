"""The static int8 graph behind ``embedded_precision = "int8-static"``, built from the shipped bytes.

The generator's 50 convolutions (``GROUPS``: the harmonic source's path and the six resblocks)
run as onnxruntime's fused ``QLinearConv`` (VNNI / AMX-INT8) instead of the shipped dynamic
``ConvInteger``; everything else, the text side included, stays exactly as shipped, so the
durations (and so the words' times) do not move. Each convolution's input range is calibrated
(``METHOD``) and its output channels equalized by their peaks (``static_int8.equalize``), on
``Calibration``: ``FEEDS``, six reply sentences of the bench corpus (none of the quality
sentences), phonemized once by misaki for the voice that reads each (American or British), so
building needs no G2P. A voice not installed is replaced by the first installed one.
docs/STATIC_INT8.md has the variants measured and why this one (the streaming vocoder's own
calibration sentences measured 0.1 dB worse).

The calibration is fixed by its inputs, so ``Calibration.key`` (a hash of ``VERSION``, the
variant, the tokens and the style vectors) names the cached graph together with the shipped
model's hash (``gateway.kokoro.floatgraph.graph_bytes``): a change to any of them builds anew.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

VERSION = 2  # bump when the recipe below changes (groups, method, feeds, rewrite)
GROUPS = "noise,resblocks"  # static_int8.select: the generator's convolutions
METHOD = "p99.999"  # the convolutions' input ranges; outputs equalized per channel
SHIPPED_WEIGHTS = False  # keep the shipped weight codes exactly (static_int8.shipped_weights)
# (voice, misaki phonemes) of bench.corpus.REPLIES' first six sentences of six words or more,
# as bench.static_int8 calibrates (its doubled full stops included)
FEEDS = (
    ("af_heart", "ʃˈʊɹ, ˌI kæn hˈɛlp wɪð ðˈæt."),
    ("am_michael", "jˌʊɹ tˈAbᵊl fɔɹ fˈɔɹ ɪz bˈʊkt fɔɹ sˈɛvən."),
    ("bf_emma", "jˌuː wɪl ɡɛt ɐ tˈɛkst wˌɛn ɪt ɪz ɹˈɛdi.."),
    ("af_heart", "jˌʊɹ dˈɛntɪst vˈɪzət ɪz nˈW ˌɔn mˈʌndˌA æt nˈIn."),
    ("am_michael", "ðə klˈɪnɪk wɪl ɹəmˈInd ju ðə dˈA bəfˈɔɹ.."),
    ("bf_emma", "ˌQkˈA, sˌQ ðə tɹˈAn tə bˈɒstən lˈiːvz fɹɒm plˈatfɔːm sˈɪks at ˈAt fˌɪftˈiːn."),
)


@dataclass(frozen=True, slots=True, eq=False)
class Calibration:
    """The feeds the ranges are measured on: token ids and one style row per feed."""

    tokens: tuple[tuple[int, ...], ...]
    styles: tuple[np.ndarray, ...]  # [1, 256] each
    voices: tuple[str, ...]

    def key(self) -> str:
        from .static_int8 import saturates  # 7-bit weights where the CPU's kernels would saturate

        digest = hashlib.sha256(f"{VERSION}|{GROUPS}|{METHOD}|{SHIPPED_WEIGHTS}|{saturates()}".encode())
        for ids, style in zip(self.tokens, self.styles):
            digest.update(np.asarray(ids, np.int64).tobytes())
            digest.update(np.ascontiguousarray(style, np.float32).tobytes())
        return digest.hexdigest()

    def feeds(self) -> list[dict[str, np.ndarray]]:
        return [
            {
                "tokens": np.array([[0, *ids, 0]], dtype=np.int64),
                "style": np.asarray(style, np.float32).reshape(1, 256),
                "speed": np.array([1.0], dtype=np.float32),
            }
            for ids, style in zip(self.tokens, self.styles)
        ]


def calibration(packs: Mapping[str, np.ndarray], vocab: Mapping[str, int]) -> Calibration:
    """``FEEDS`` with the installed voice packs (id -> [510, 1, 256])."""
    if not packs:
        raise ValueError("int8-static needs at least one voice pack to calibrate on")
    tokens, styles, voices = [], [], []
    for voice, phonemes in FEEDS:
        voice = voice if voice in packs else sorted(packs)[0]
        ids = tuple(vocab[c] for c in phonemes if c in vocab)
        tokens.append(ids)
        styles.append(np.asarray(packs[voice][len(ids) - 1], np.float32).reshape(1, 256))
        voices.append(voice)
    return Calibration(tuple(tokens), tuple(styles), tuple(dict.fromkeys(voices)))


def default_calibration() -> Calibration:
    """``calibration`` on the voice store's packs (for builds outside the engine)."""
    from ..parts import load_vocab, load_voice_packs

    return calibration(load_voice_packs().packs, load_vocab())


def build(int8: bytes, calib: Calibration) -> bytes:
    """The static graph from the shipped bytes (already checked against their hash)."""
    import onnx

    from . import static_int8 as si

    t0 = time.perf_counter()
    shipped = onnx.load_from_string(int8)
    names = si.select(shipped, GROUPS)
    floated = si.float_convs(shipped, names)
    observed, peaks = si.observe_for_equalize(floated, names, calib.feeds())
    floated, equalized = si.equalize(floated, names, peaks)
    static = si.quantize(floated, names, {**observed.ranges(METHOD), **equalized})
    if SHIPPED_WEIGHTS:
        static = si.shipped_weights(static, shipped, names)
    log.info(
        "built the static int8 graph (%d convolutions, %d calibration feeds read by %s) in %.1f s",
        len(names),
        len(calib.tokens),
        ", ".join(calib.voices),
        time.perf_counter() - t0,
    )
    return bytes(static.SerializeToString())
