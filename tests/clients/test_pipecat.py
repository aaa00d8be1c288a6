"""Pipecat's ``OpenAITTSService`` (``pipecat-ai``), unchanged but for ``base_url``, in a real
``Pipeline`` (a ``PipelineWorker`` run by a ``WorkerRunner``): the whole reply arrives as PCM audio frames, the
first of them while the reply's last segment is still held back by the fake engine's gate."""

from __future__ import annotations

import asyncio
import contextlib

import openai
from pipecat.frames.frames import EndFrame, ErrorFrame, Frame, TTSAudioRawFrame, TTSSpeakFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.workers.runner import WorkerRunner

from .conftest import Gate, Gateway
from .replies import RATE, expected_samples, reply


class AudioSink(FrameProcessor):
    """The end of the pipeline: counts the audio the service produced."""

    def __init__(self, gate: Gate) -> None:
        super().__init__()
        self.gate, self.audio, self.rates, self.errors = gate, bytearray(), set(), []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.gate.first_audio()
            self.audio += frame.audio
            self.rates.add(frame.sample_rate)
        elif isinstance(frame, ErrorFrame):
            self.errors.append(frame.error)
        await self.push_frame(frame, direction)


async def test_pipecat_openai_tts_in_a_pipeline_streams_the_whole_reply(gateway: Gateway, gate: Gate) -> None:
    text = reply("pipecat")
    http = openai.DefaultAsyncHttpxClient()  # ours to close: the service leaves its client open
    tts = OpenAITTSService(api_key="unused", base_url=gateway.url + "/v1", http_client=http)
    sink = AudioSink(gate)
    worker = PipelineWorker(Pipeline([tts, sink]), params=PipelineParams(audio_out_sample_rate=RATE))
    await worker.queue_frames([TTSSpeakFrame(text), EndFrame()])
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    opener = asyncio.create_task(gate.open_if_starved())
    try:
        await asyncio.wait_for(runner.run(), 60)
    finally:
        opener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await opener
        await http.aclose()
    assert not sink.errors
    assert gate.shut_at_first_audio is True, "first audio came only after the last segment was synthesized"
    assert sink.rates == {RATE}
    assert len(sink.audio) == expected_samples(text) * 2
