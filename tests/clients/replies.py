"""Replies for the client tests and what the fake engine makes of them.

Every sentence of a reply names its client, so none is a repeat the gateway's cache would
serve without synthesis (and so without the gate); the gate word is in the last sentence,
after a few seconds of audio. Names are letters only, so the gateway speaks them as written.
"""

from __future__ import annotations

import re

RATE = 24000
WORD_SAMPLES = 5760  # the fake engine: 180 ms of tone and 60 ms of silence a word at 24 kHz


def reply(client: str) -> str:
    # letters only: the gateway's text front-end says "tts-1" and "=" as words of their own
    client = " ".join(re.findall(r"[A-Za-z]+", client))
    return (
        f"Thanks for waiting, I have checked the {client} account for you. "
        f"Your {client} order shipped this morning from our warehouse in Ohio. "
        f"The Zebra will bring the {client} parcel on Thursday."
    )


def expected_samples(text: str, rate: int = RATE) -> int:
    return len(text.split()) * WORD_SAMPLES * rate // RATE
