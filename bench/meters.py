"""What a load run measures besides its clients' figures: payload durations, the machine's and a
process's CPU (from /proc, no psutil), py-spy profiles, and the MP3 encoders alone."""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)


def payload_seconds(data: bytes, fmt: str, rate: int) -> float:
    if fmt == "pcm":
        return len(data) / 2 / rate
    from gateway.audio.mp3 import iter_frames

    return sum(h.duration_s for _, h in iter_frames(data))


def raise_fd_limit(_: object = None) -> int:
    """Raise the soft open-file limit to the hard one (children inherit it); return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine: how much CPU everything else took."""
    values = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    total = sum(values[:8])
    return total - values[3] - values[4], total


def busy_fraction(before: tuple[float, float], after: tuple[float, float]) -> float:
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total else 0.0


async def py_spy_top(pid: int, seconds: float, top: int = 12, *, subprocesses: bool = False) -> list[tuple[str, float]]:
    """Sample ``pid`` with py-spy; the functions where it spends its CPU, as shares of samples."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(exe).exists():
        log.warning("py-spy is not installed: no profile")
        return []
    fd, raw = tempfile.mkstemp(suffix=".txt")
    os.close(fd)
    proc = await asyncio.create_subprocess_exec(
        exe,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(max(1, int(seconds))),
        "--rate",
        "50",
        "--format",
        "raw",
        "--nonblocking",
        "-o",
        raw,
        *(["--subprocesses"] if subprocesses else []),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await proc.wait()
    counts: collections.Counter[str] = collections.Counter()
    for line in Path(raw).read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():  # self time: the innermost frame, without its line number
            leaf = stack.rsplit(";", 1)[-1]
            counts[leaf.rsplit(":", 1)[0] + ")" if ":" in leaf else leaf] += int(n)
    Path(raw).unlink(missing_ok=True)
    total = sum(counts.values()) or 1
    return [(name, round(n / total, 4)) for name, n in counts.most_common(top)]


def encoder_speeds(seconds: float = 20.0) -> dict[str, float]:
    """x real time of each MP3 encoder alone on one core (64 kbps, 24 kHz, 200 ms chunks)."""
    import av

    from gateway.audio.encoders import Mp3Encoder

    rng = np.random.default_rng(7)  # tones + noise: LAME's cost barely depends on content
    t = np.arange(int(24000 * seconds)) / 24000
    pcm = (8000 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t) + rng.normal(0, 800, t.size)).astype(np.int16)
    chunks = [pcm[i : i + 4800] for i in range(0, pcm.size, 4800)]
    started = time.process_time()
    lame = Mp3Encoder(sample_rate=24000, bitrate=64)
    for chunk in chunks:
        lame.encode(chunk.tobytes())
    lame.flush()
    lame_s = time.process_time() - started
    started = time.process_time()
    ctx = av.CodecContext.create("libmp3lame", "w")
    ctx.sample_rate, ctx.layout, ctx.format, ctx.bit_rate = 24000, "mono", "s16p", 64000
    ctx.open()
    for n, chunk in enumerate(chunks):
        frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16p", layout="mono")
        frame.sample_rate, frame.pts = 24000, n * 4800
        ctx.encode(frame)
    ctx.encode(None)
    pyav_s = time.process_time() - started
    return {"lameenc_x_realtime": round(seconds / lame_s, 1), "pyav_x_realtime": round(seconds / pyav_s, 1)}
