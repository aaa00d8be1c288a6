"""The voice-agent frameworks' side of ``bench clients``: run in ``.venv-clients`` (LiveKit
Agents and Pipecat, pinned in tests/clients/requirements.txt), never imported by the gateway.

Reads one JSON request a line on stdin (``{"client", "url", "text"}``) and answers one JSON line
on stdout: ``{"first_ms", "total_ms", "audio_s"}`` (first audio = the framework hands its first
audio frame to the agent, measured from the call) or ``{"error"}``. Only the standard library and
the clients are imported here: this venv has none of the gateway's dependencies.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
import warnings
from typing import Any

RATE = 24000


async def livekit(url: str, text: str, **options: Any) -> dict[str, float]:
    from livekit.plugins import openai as lk_openai

    tts = lk_openai.TTS(base_url=url + "/v1", api_key="unused", **options)
    first, samples = None, 0
    try:
        t0 = time.perf_counter()
        async with tts.synthesize(text) as stream:
            async for event in stream:
                first = first or time.perf_counter()
                samples += event.frame.samples_per_channel
    finally:
        await tts.aclose()
    return _result(t0, first, samples)


async def pipecat(url: str, text: str) -> dict[str, float]:
    import openai
    from pipecat.frames.frames import EndFrame, Frame, StartFrame, TTSAudioRawFrame, TTSSpeakFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.openai.tts import OpenAITTSService
    from pipecat.workers.runner import WorkerRunner

    class Sink(FrameProcessor):
        def __init__(self) -> None:
            super().__init__()
            self.started, self.first, self.samples = asyncio.Event(), None, 0

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, StartFrame):
                self.started.set()
            elif isinstance(frame, TTSAudioRawFrame):
                self.first = self.first or time.perf_counter()
                self.samples += len(frame.audio) // 2
            await self.push_frame(frame, direction)

    sink, http = Sink(), openai.DefaultAsyncHttpxClient()
    tts = OpenAITTSService(api_key="unused", base_url=url + "/v1", http_client=http)
    worker = PipelineWorker(Pipeline([tts, sink]), params=PipelineParams(audio_out_sample_rate=RATE))
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        await sink.started.wait()  # the pipeline's own start-up is not the TTS's latency
        t0 = time.perf_counter()
        await worker.queue_frames([TTSSpeakFrame(text), EndFrame()])
        await running
    finally:
        await http.aclose()
    return _result(t0, sink.first, sink.samples)


def _result(t0: float, first: float | None, samples: int) -> dict[str, float]:
    if first is None:
        raise RuntimeError("no audio")
    return {
        "first_ms": round((first - t0) * 1000, 1),
        "total_ms": round((time.perf_counter() - t0) * 1000, 1),
        "audio_s": round(samples / RATE, 3),
    }


CLIENTS = {
    "livekit-default": lambda url, text: livekit(url, text),  # gpt-4o-mini-tts: OpenAI's SSE events
    "livekit-tts-1": lambda url, text: livekit(url, text, model="tts-1", response_format="pcm"),
    "pipecat": pipecat,
}


async def main() -> None:
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        request = json.loads(line)
        try:
            answer = await CLIENTS[request["client"]](request["url"], request["text"])
        except Exception as exc:  # reported to the bench, which shows it in its table
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    warnings.simplefilter("ignore", DeprecationWarning)  # the frameworks' own, on every call
    logging.basicConfig(level=logging.ERROR)
    try:
        from loguru import logger  # pipecat's logger: its per-frame debug lines would flood stderr

        logger.remove()
        logger.add(sys.stderr, level="WARNING")
    except ImportError:
        pass
    asyncio.run(main())
