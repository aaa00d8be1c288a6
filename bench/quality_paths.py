"""``bench quality --paths``: the same intelligibility test on every way to run Kokoro-82M.

Paths: ``int8`` (the embedded engine as shipped: the reference), ``fp32`` and ``fp16`` (the
embedded engine on the float graphs of ``gateway.kokoro.floatgraph``, on the CPU here) and ``torch``
(the ``kokoro`` engine with the weights ``convert-weights`` makes, on CPU or CUDA). Each
sentence is synthesized whole (no streaming vocoder), transcribed by Whisper and scored as in
``bench.quality``; each path's audio is also compared with the int8 path's, sentence by
sentence: log-spectral distance, timbre and loudness (``bench.measure``). The torch model's
inverse STFT is 1.5x quieter than the export's (same spectra, a different window-sum
normalization; tests/test_converted_weights.py): its distances are taken with that gain
undone, and its loudness as it comes out is reported apart. The float paths' durations move
a few frames against int8's (the duration predictor no longer sees quantized activations),
so their frame LSD includes misalignment; timbre does not.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from gateway.config import Settings, load_settings

from . import wer

log = logging.getLogger(__name__)

PATHS = ("int8", "fp32", "fp16", "torch")
TORCH_GAIN = 1.5  # the export's iSTFT over torch's, on the same spectra


def make_engine(path: str, kokoro_dir: Path, device: str) -> Any:
    if path == "torch":
        from gateway.engines.kokoro import KokoroEngine

        return KokoroEngine(
            load_settings(
                env={}, overrides={"engine": "kokoro", "kokoro_dir": str(kokoro_dir), "kokoro_device": device}
            )
        )
    from gateway.engines.embedded import EmbeddedEngine

    return EmbeddedEngine(Settings(embedded_precision=path, embedded_vocoder="off"))


def ensure_weights(kokoro_dir: Path) -> None:
    if not (kokoro_dir / "config.json").exists():
        from gateway.kokoro.convert_weights import convert

        log.info("converting the shipped weights into %s", kokoro_dir)
        convert(kokoro_dir)


async def clips_of(
    path: str, voices: list[str], sentences: tuple[str, ...], kokoro_dir: Path, device: str
) -> dict[str, list[np.ndarray]]:
    from .quality import synthesize

    engine = make_engine(path, kokoro_dir, device)
    await engine.start()
    try:
        return {v: [await synthesize(engine, s, v) for s in sentences] for v in voices}
    finally:
        await engine.aclose()


async def measure_paths(
    paths: list[str],
    voices: list[str],
    whispers: dict[str, str | None],
    sentences: tuple[str, ...],
    kokoro_dir: Path,
    device: str = "",
) -> list[dict[str, Any]]:
    from .measure import align, distance, summary

    if "torch" in paths:
        ensure_weights(kokoro_dir)
    clips = {p: await clips_of(p, voices, sentences, kokoro_dir, device) for p in dict.fromkeys(["int8", *paths])}
    cells = []
    for path in paths:
        gain = TORCH_GAIN if path == "torch" else 1.0
        for voice in voices:
            ref = clips["int8"][voice]
            rows = [distance(r, align(r, c * gain)) for r, c in zip(ref, clips[path][voice])]
            raw_loudness = float(
                np.mean([distance(r, align(r, c)).loudness_db for r, c in zip(ref, clips[path][voice])])
            )
            vs_int8 = {k: round(v, 2) for k, v in summary(rows).items()}
            for name, model in whispers.items():
                total, heard = wer.WerResult(0, 0), []
                for text, clip in zip(sentences, clips[path][voice]):
                    transcript = wer.transcribe(clip, 24000, model_path=model)
                    heard.append({"text": text, "heard": transcript})
                    total += wer.score(text, transcript)
                cells.append(
                    {
                        "path": path,
                        "voice": voice,
                        "whisper": name,
                        "wer": round(total.wer, 4),
                        "errors": total.errors,
                        "words": total.words,
                        "vs_int8": vs_int8,
                        "gain_undone": gain,
                        "loudness_as_is_db": round(raw_loudness, 2),
                        "sentences": heard,
                    }
                )
                log.info("%s %s %s: WER %.1f%%", path, voice, name, 100 * total.wer)
    return cells


def print_paths(cells: list[dict[str, Any]]) -> None:
    head = (
        f"{'path':<7} {'voice':<12} {'whisper':<8} {'WER':>14} {'LSD vs int8':>12} {'timbre':>7} "
        f"{'loudness':>9} {'as is':>7}"
    )
    lines = [head, "-" * len(head)]
    for c in cells:
        d = c["vs_int8"]
        lines.append(
            f"{c['path']:<7} {c['voice']:<12} {c['whisper']:<8} "
            f"{100 * c['wer']:6.1f}% ({c['errors']:>2}/{c['words']:>3}) {d['lsd_db']:>12.2f} "
            f"{d['timbre_db']:>7.2f} {d['loudness_db']:>+9.2f} {c['loudness_as_is_db']:>+7.2f}"
        )
    lines.append(
        "distances in dB against the int8 path's audio of the same sentence; torch with the "
        f"export's {TORCH_GAIN}x iSTFT gain applied ('as is': without it)"
    )
    print("\n".join(lines))
