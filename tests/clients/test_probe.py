"""``bench clients``'s probe (``bench/clients_probe.py``), run as the bench runs it: a process of
this venv answering one JSON line per request, for each framework, so the bench cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import ROOT, Gateway
from .replies import RATE, WORD_SAMPLES

TEXT = "The probe asks every framework for this reply. It has two sentences."


def test_the_bench_probe_measures_every_framework(gateway: Gateway) -> None:
    names = ("livekit-default", "livekit-tts-1", "pipecat")
    requests = "".join(json.dumps({"client": n, "url": gateway.url, "text": TEXT}) + "\n" for n in names)
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "clients_probe.py")],
        input=requests,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
    )
    answers = dict(zip(names, map(json.loads, done.stdout.splitlines())))
    seconds = len(TEXT.split()) * WORD_SAMPLES / RATE
    for name, answer in answers.items():
        assert "error" not in answer, (name, answer)
        assert 0 < answer["first_ms"] <= answer["total_ms"]
        assert seconds <= answer["audio_s"] <= seconds + 0.12, (name, answer)  # MP3's frames, LiveKit's marker
    assert len(answers) == 3
