"""How well the word timestamps hold: cut the audio at the times given, let Whisper listen.

For every reply (several texts, voices, speeds; PCM and MP3 through a real gateway on
loopback) the audio is decoded as a player would (MP3 through PyAV: the encoder's lead-in
stays in, as the contract's times expect), cut into windows of ``--window`` words at the
word boundaries the gateway sent in its ``words`` events, and each window (with a little
silence either side) is transcribed by Whisper tiny.en (``bench.wer``, offline). A window's
recall is the share of its words that Whisper hears, in order (longest common subsequence
after ``wer.normalize``); "clean" counts windows heard exactly as their words, nothing lost,
nothing from a neighbour.

The same windows moved by -100/+100/-250/+250 ms are scored as well: where the times are
right, a moved window loses the start or the end of a word and hears part of a neighbour,
so it must score clearly worse. A table that shows no drop means the method could not see a
shift of that size, not that the times are right.

``--direct`` measures without the gateway: the embedded engine's split model gives the
duration predictor's output (``StreamingVocoder.encode`` -> ``Encoded.durations``), the
exact vocoder the audio, and ``gateway.kokoro.timestamps.word_times`` the word spans on it. Word
tokens there come from pairing the text's words with the phoneme string's space-separated
groups (``guess_tokens``), with punctuation taken off the groups: exact for texts without
numbers, which is what ``TEXTS`` holds. Prints tables; writes
``bench-results/timestamps.json`` (``timestamps-direct.json`` with ``--direct``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import wer
from .common import RESULTS_DIR, quiet_logs, recorded, report, table, write_json

log = logging.getLogger(__name__)

SHIFTS_MS = (0, -100, 100, -250, 250)
# no digits: the direct path's word tokens are exact for these (see the docstring)
TEXTS = (
    "The train to the airport leaves from the second platform, and it takes about forty minutes.",
    "Please send the report to the whole team before Friday, then call the office.",
    "My sister painted the kitchen yellow, but the garden fence is still green.",
)
VOICES = ("af_heart", "am_michael", "bf_emma")
SPEEDS = (0.8, 1.0, 1.3)
FORMATS = ("pcm", "mp3")
PAD_S = 0.25  # silence either side of a window: Whisper hears a short clip better framed
_PHONEME_PUNCT = ';:,.!?—…"()“”«»¡¿'

Transcriber = Callable[[np.ndarray, int], str]


@dataclass(frozen=True, slots=True)
class Clip:
    """A reply's audio as played (float32 mono) and its words as sent: ``{word, start_ms, end_ms}``."""

    audio: np.ndarray
    rate: int
    words: tuple[dict[str, Any], ...]


def windows(words: Sequence[dict[str, Any]], size: int = 3) -> list[list[dict[str, Any]]]:
    """Consecutive windows of ``size`` words; a shorter remainder joins the window before it
    (unless there is none), so no window is a lone word."""
    out = [list(words[i : i + size]) for i in range(0, len(words), size)]
    if len(out) > 1 and len(out[-1]) < min(2, size):
        last = out.pop()
        out[-1] = out[-1] + last
    return out


def heard(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """How many reference words the hypothesis holds, in order (longest common subsequence)."""
    row = [0] * (len(hypothesis) + 1)
    for r in reference:
        prev = 0
        for j, h in enumerate(hypothesis, 1):
            prev, row[j] = row[j], prev + 1 if r == h else max(row[j], row[j - 1])
    return row[-1]


def cut(clip: Clip, window: Sequence[dict[str, Any]], shift_ms: int, pad_s: float = PAD_S) -> np.ndarray:
    """The window's audio, moved by ``shift_ms``, framed by ``pad_s`` of silence."""
    start = round((window[0]["start_ms"] + shift_ms) * clip.rate / 1000)
    end = round((window[-1]["end_ms"] + shift_ms) * clip.rate / 1000)
    start, end = max(0, start), min(len(clip.audio), max(end, 0))
    pad = np.zeros(round(pad_s * clip.rate), np.float32)
    return np.concatenate([pad, clip.audio[start : max(start, end)], pad])


def score(
    clip: Clip, *, size: int = 3, shifts: Sequence[int] = SHIFTS_MS, transcribe: Transcriber | None = None
) -> dict[int, dict[str, Any]]:
    """Per shift (ms): words, words heard, recall, clean windows and what Whisper heard."""
    listen = transcribe or (lambda pcm, rate: wer.transcribe(pcm, rate))
    out: dict[int, dict[str, Any]] = {}
    for shift in shifts:
        words = hits = clean = 0
        rows = []
        for window in windows(clip.words, size):
            ref = wer.normalize(" ".join(w["word"] for w in window))
            text = listen(cut(clip, window, shift), clip.rate)
            hyp = wer.normalize(text)
            got = heard(ref, hyp)
            words, hits, clean = words + len(ref), hits + got, clean + (hyp == ref)
            rows.append({"words": " ".join(w["word"] for w in window), "heard": text, "hits": got})
        out[shift] = {
            "words": words,
            "hits": hits,
            "recall": hits / words if words else 0.0,
            "clean": clean,
            "windows": len(rows),
            "detail": rows,
        }
    return out


# -- the direct path: the model and gateway/kokoro/timestamps.py, no gateway --------------------------
def _tokens(text: str, phonemes: str) -> list[Any]:
    from gateway.kokoro.timestamps import Token, guess_tokens

    return [Token(t.text, t.phonemes.strip(_PHONEME_PUNCT)) for t in guess_tokens(text, phonemes)]


async def direct_clip(engine: Any, text: str, voice: str, speed: float, mode: str = "exact") -> Clip:
    """``text`` through the split model (encoder, then ``mode`` of the vocoder), with word
    spans from the encoder's durations; needs ``engine.wait_vocoder(voice)`` to be True."""
    from gateway.kokoro.timestamps import word_times
    from gateway.kokoro.vocoder.chunked import FRAME, voiced_span

    model, vocoder = engine.model, engine.vocoder
    phonemes = await engine.phonemes(text, voice)
    ids = [model.vocab[c] for c in phonemes]
    style = model.style(voice)[len(ids) - 1].reshape(1, 256)

    def run() -> tuple[np.ndarray, Any, int]:
        enc = vocoder.encode(ids, style, speed)
        if enc.durations is None or int(enc.durations.sum()) != enc.frames:
            raise RuntimeError("the encoder's durations do not add up to its frames")
        audio = np.concatenate([np.zeros(0, np.float32), *vocoder.stream_encoded(enc, style, voice, mode=mode)])
        start, _ = voiced_span(enc.energy, vocoder.policy.lead, vocoder.policy.tail)
        return audio, enc.durations, start * FRAME

    audio, durations, trim = await asyncio.to_thread(run)
    spans = word_times(_tokens(text, phonemes), phonemes, durations, trim_start=trim, length=len(audio))
    rate = engine.sample_rate
    return Clip(audio, rate, tuple(spans.to_ms(0, rate)))


# -- the gateway path -------------------------------------------------------------------------
async def gateway_clip(http: Any, url: str, text: str, voice: str, speed: float, fmt: str, channel: str = "ws") -> Clip:
    """One reply over a channel; the audio decoded as a player plays it, the words as sent."""
    from gateway.audio.decode import decode_audio

    from .client import sse_stream, ws_stream

    options = {"voice": voice, "speed": speed, "format": fmt}
    if channel == "ws":
        result = await ws_stream(http, url + "/v1/stream/ws", text=text, options=options)
    else:
        result = await sse_stream(http, url + "/v1/stream/sse", text=text, **options)
    if result.error or not result.done:
        raise RuntimeError(f"{channel} {fmt} {voice} {speed}: no reply ({result.error})")
    ready = (result.of("ready") or [{}])[0]
    decoded = decode_audio(result.audio, fmt, sample_rate=int(ready.get("sample_rate", 24000)))
    words = tuple(w for event in result.of("words") for w in event.get("words", []))
    return Clip(decoded.samples, decoded.sample_rate, words)


# -- running and reporting ----------------------------------------------------------------------
def cell(where: str, voice: str, speed: float, scores: list[dict[int, dict[str, Any]]]) -> dict[str, Any]:
    """Scores of several replies summed into one row of the table."""
    shifts = list(scores[0]) if scores else []
    total = {s: {k: sum(sc[s][k] for sc in scores) for k in ("words", "hits", "clean", "windows")} for s in shifts}
    for s in shifts:
        t = total[s]
        t["recall"] = round(t["hits"] / t["words"], 3) if t["words"] else None
    return {
        "format": where,
        "voice": voice,
        "speed": speed,
        "shifts": total,
        "replies": [{str(s): sc[s] for s in sc} for sc in scores],
    }


def render(cells: Sequence[dict[str, Any]]) -> str:
    shifts = [s for s in SHIFTS_MS if s]
    head = [
        "format",
        "voice",
        "speed",
        "windows",
        "recall 0",
        *(f"{s:+d} ms" for s in shifts),
        *(f"ratio {s:+d}" for s in shifts),
        "clean 0",
        *(f"clean {s:+d}" for s in shifts),
    ]
    rows = []
    for c in cells:
        sh = c["shifts"]
        base = sh[0]["recall"] or 0.0
        rows.append(
            [
                c["format"],
                c["voice"],
                f"{c['speed']:.1f}",
                sh[0]["windows"],
                f"{base:.2f}",
                *(f"{sh[s]['recall']:.2f}" for s in shifts),
                *(f"{sh[s]['recall'] / base:.2f}" if base else "-" for s in shifts),
                f"{sh[0]['clean']}/{sh[0]['windows']}",
                *(f"{sh[s]['clean']}" for s in shifts),
            ]
        )
    return (
        "word recall of Whisper tiny.en on windows cut at the sent word times, and on the "
        "same windows moved (ratio: to the unmoved windows)\n" + table(head, rows)
    )


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    texts = TEXTS[: args.texts]
    out: dict[str, Any] = {
        "bench": "timestamps-direct" if args.direct else "timestamps",
        "channel": args.channel,
        "texts": list(texts),
        "window_words": args.window,
        "shifts_ms": list(SHIFTS_MS),
    }
    with recorded(out):
        out["cells"] = await _direct(args, texts) if args.direct else await _through_gateway(args, texts)
    return out


async def _direct(args: argparse.Namespace, texts: Sequence[str]) -> list[dict[str, Any]]:
    from gateway.config import Settings
    from gateway.engines.embedded import EmbeddedEngine

    cells: list[dict[str, Any]] = []
    engine = EmbeddedEngine(Settings(embedded_vocoder="exact"))
    await engine.start()
    try:
        for voice in args.voices:
            if not await engine.wait_vocoder(voice):
                raise SystemExit(f"the split model is not available: {engine.vocoder_status}")
            for speed in args.speeds:
                clips = [await direct_clip(engine, t, voice, speed, args.vocoder) for t in texts]
                cells.append(
                    cell(
                        f"model/{args.vocoder}",
                        voice,
                        speed,
                        [await asyncio.to_thread(score, c, size=args.window) for c in clips],
                    )
                )
                log.info("%s %s: recall %s", voice, speed, cells[-1]["shifts"][0]["recall"])
    finally:
        await engine.aclose()
    return cells


async def _through_gateway(args: argparse.Namespace, texts: Sequence[str]) -> list[dict[str, Any]]:
    import aiohttp

    from .common import bench_settings, gateway

    cells: list[dict[str, Any]] = []
    settings = bench_settings("embedded", args.set, cache_mb=0)
    async with gateway(settings) as target, aiohttp.ClientSession() as http:
        for fmt in args.formats:
            for voice in args.voices:
                for speed in args.speeds:
                    clips = [await gateway_clip(http, target.url, t, voice, speed, fmt, args.channel) for t in texts]
                    if not all(c.words for c in clips):
                        log.warning(
                            "%s %s %s: the gateway sent no `words` events; nothing to measure (try --direct)",
                            fmt,
                            voice,
                            speed,
                        )
                        continue
                    cells.append(
                        cell(fmt, voice, speed, [await asyncio.to_thread(score, c, size=args.window) for c in clips])
                    )
                    log.info("%s %s %s: recall %s", fmt, voice, speed, cells[-1]["shifts"][0]["recall"])
    return cells


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench timestamps", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--direct", action="store_true", help="the engine's split model, no gateway")
    p.add_argument("--voices", default=",".join(VOICES))
    p.add_argument("--speeds", default=",".join(str(s) for s in SPEEDS))
    p.add_argument("--formats", default=",".join(FORMATS), help="gateway path: pcm, mp3")
    p.add_argument("--channel", choices=("ws", "sse"), default="ws")
    p.add_argument("--texts", type=int, default=len(TEXTS), help=f"how many texts (1-{len(TEXTS)})")
    p.add_argument("--window", type=int, default=3, help="words per window")
    p.add_argument("--vocoder", default="exact", help="--direct: exact, frozen-first or frozen")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="gateway setting, e.g. --set embedded_vocoder=exact (repeatable)",
    )
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    args.voices = [v for v in args.voices.split(",") if v]
    args.speeds = [float(s) for s in args.speeds.split(",") if s]
    args.formats = [f for f in args.formats.split(",") if f]
    if not 1 <= args.texts <= len(TEXTS) or args.window < 1:
        p.error(f"--texts must be 1-{len(TEXTS)} and --window at least 1")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    quiet_logs()
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    out = asyncio.run(bench(args))
    path = write_json(args.out, out["bench"], out)
    m0, m1 = out["machine_start"], out["machine_end"]
    report(
        render(out["cells"]) + f"\n{out['elapsed_s']} s; load average {m0['loadavg_1m']} -> "
        f"{m1['loadavg_1m']} on {m0['cpus']} CPUs; results in {path}"
    )
    return 0
