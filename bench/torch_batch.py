"""Micro-batching on the torch engine: B segments in one forward pass against B single calls.

    python -m bench.torch_batch [--device cpu|cuda] [--batches 1,2,4] [--segments 4] [--reps 1]
                                [--max-phonemes 30] [--frames 3] [--threads N] [--out FILE]

The segments are real agent-reply segments (``bench/data/torch_phonemes.json``, as
``bench.torch_cuda`` uses: phonemes by misaki, so the machine needs neither misaki nor spaCy),
taken in order, the first ``--segments`` of at most ``--max-phonemes`` (0: any length; the
short default keeps a CPU run within minutes), alternating two voice packs. Per repetition, side by
side in one run: every segment alone (``KModel``'s own forward, seeded as the engine does), then
for each B the same segments in batches of B (``gateway.engines.kokoro_batch.forward_batch``,
what the engine runs). Printed per B: audio made, wall time alone and batched, the throughput
gain (alone / batched), the padding the batches computed (padded frames / real frames), the
latency a segment sees (its batch's wall against its own call), and the largest sample
difference between a segment's batched and lone audio (float rounding: the two must agree).

The weights are RANDOM (Kokoro-82M's architecture; duration head set to ``--frames`` frames a
token, about the real model's pace): the compute per second of audio is the real model's, the
audio is noise. Prints; never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .torch_cuda import DATA, RATE, build

FRAME = 600  # samples per duration frame


def segments_of(data: dict[str, Any], count: int, longest: int) -> list[str]:
    phonemes = [
        s["phonemes"] for r in data["replies"] for s in r["segments"] if not longest or len(s["phonemes"]) <= longest
    ]
    if len(phonemes) < count:
        raise SystemExit(f"the phoneme file holds {len(phonemes)} segments, fewer than {count}")
    return phonemes[:count]


class Bench:
    def __init__(self, model: Any, vocab: dict[str, int], device: str) -> None:
        import torch

        self.model, self.vocab, self.device, self.torch = model, vocab, device, torch
        torch.manual_seed(1)
        self.packs = [torch.randn(510, 1, 256) * 0.3 for _ in range(2)]

    def style(self, k: int, phonemes: str) -> Any:
        return self.packs[k % 2][len(phonemes) - 1]

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    def alone(self, k: int, phonemes: str) -> tuple[float, Any]:
        from gateway.engines.kokoro_batch import seeded

        self._sync()
        t0 = time.perf_counter()
        seeded()
        with self.torch.inference_mode():
            audio = self.model(phonemes, self.style(k, phonemes).to(self.device), 1.0)
        self._sync()
        return time.perf_counter() - t0, audio.float().cpu().numpy().ravel()

    def batched(self, ks: Sequence[int], segments: Sequence[str]) -> tuple[float, list[Any]]:
        from gateway.engines.kokoro_batch import Item, forward_batch

        items = [
            Item(tuple(self.vocab[p] for p in s if p in self.vocab), self.style(k, s), 1.0)
            for k, s in zip(ks, segments)
        ]
        self._sync()
        t0 = time.perf_counter()
        out = forward_batch(self.model, items)
        self._sync()
        return time.perf_counter() - t0, [audio for audio, _ in out]


def one_rep(bench: Bench, segments: list[str], sizes: list[int]) -> dict[str, Any]:
    singles = [bench.alone(k, s) for k, s in enumerate(segments)]
    rep: dict[str, Any] = {
        "alone_s": [t for t, _ in singles],
        "audio_s": sum(a.size for _, a in singles) / RATE,
        "sizes": {},
    }
    for size in sizes:
        walls, padded, diff = [], 0, 0.0
        for start in range(0, len(segments), size):
            ks = list(range(start, min(start + size, len(segments))))
            wall, audio = bench.batched(ks, [segments[k] for k in ks])
            walls.append((wall, ks))
            padded += max(a.size for a in audio) // FRAME * len(ks)
            diff = max(diff, *(float(abs(a - singles[k][1]).max()) for a, k in zip(audio, ks)))
        real = sum(a.size for _, a in singles) // FRAME
        latency = [wall / singles[k][0] for wall, ks in walls for k in ks]
        rep["sizes"][size] = {
            "batched_s": sum(w for w, _ in walls),
            "padding": padded / real,
            "latency_x": statistics.median(latency),
            "max_diff": diff,
        }
    return rep


def table(reps: list[dict[str, Any]], sizes: list[int]) -> str:
    alone = statistics.median(sum(r["alone_s"]) for r in reps)
    audio = reps[0]["audio_s"]
    head = (
        f"{'B':>3} {'audio s':>8} {'alone s':>8} {'batched s':>9} {'gain':>6} {'RTF':>7} "
        f"{'padding':>8} {'latency':>8} {'max diff':>9}"
    )
    lines = [head, "-" * len(head)]
    for size in sizes:
        batched = statistics.median(r["sizes"][size]["batched_s"] for r in reps)
        gains = [sum(r["alone_s"]) / r["sizes"][size]["batched_s"] for r in reps]
        row = reps[-1]["sizes"][size]
        lines.append(
            f"{size:>3} {audio:>8.2f} {alone:>8.2f} {batched:>9.2f} {statistics.median(gains):>5.2f}x "
            f"{batched / audio:>7.4f} {row['padding']:>7.2f}x {row['latency_x']:>7.2f}x "
            f"{max(r['sizes'][size]['max_diff'] for r in reps):>9.1e}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.torch_batch")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", default="1,2,4", help="batch sizes B, comma-separated")
    parser.add_argument("--segments", type=int, default=4, help="segments per repetition (a multiple of each B)")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--max-phonemes", type=int, default=30, help="segments up to this long (0: any)")
    parser.add_argument("--frames", type=int, default=3, help="frames (25 ms) per token")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [int(b) for b in args.batches.split(",")]
    data = json.loads(Path(args.data).read_text("utf-8"))
    segments = segments_of(data, args.segments, args.max_phonemes)
    bench = Bench(build(data["vocab"], args.frames, args.device), data["vocab"], args.device)
    bench.alone(0, segments[0])  # warm-up: allocator, kernels
    bench.batched([0, 1], segments[:2])
    load = os.getloadavg()[0]
    reps = [one_rep(bench, segments, sizes) for _ in range(args.reps)]
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu, {os.cpu_count()} cores"
    print(
        f"{name}, {torch.get_num_threads()} threads; torch {torch.__version__}; random weights, {args.frames} "
        f"frames a token; {len(segments)} segments ({', '.join(str(len(s)) for s in segments)} phonemes); "
        f"median of {args.reps}; load average {load:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    print(table(reps, sizes))
    print(
        "gain: B single calls' time / the batches' time for the same segments (throughput); padding: "
        "frames computed / frames kept; latency: a segment's batch time / its own call's time (median)"
    )
    if args.out:
        Path(args.out).write_text(json.dumps({"device": name, "frames": args.frames, "reps": reps}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
