"""``bench ttfb --frontend-compare``: first audio with the text front-end on against off.

It speaks the markdown replies (``bench.corpus.MARKDOWN_REPLIES``: lists, headings, emoji,
links, numbers) on the WebSocket with ``text_frontend`` true and false, alternating request by
request on the same gateway, and reports first audio for each and the ratio on/off (the
front-end's own cost, without a gateway: ``bench text``). The two speak different text (off says
the markup as written), so the first segment, and its audio, can differ too: each run's first
segment is in the JSON.
"""

from __future__ import annotations

import argparse
from typing import Any

import aiohttp

from .common import Target, summarize, table
from .remote import RemoteClient

__all__ = ["render_frontend", "run_frontend_compare"]

# the front-end's first use imports its tables (emoji, numbers): warm every part of it
MARKDOWN_WARMUP = "**Hi** there 👋, warming up: $5 at 7:30 on Dec 6, call 555-0100. Not counted."
FRONTEND = {"frontend on": True, "frontend off": False}  # variant -> ``text_frontend``


async def run_frontend_compare(
    http: aiohttp.ClientSession,
    client: RemoteClient,
    t: Target,
    fields: dict[str, Any],
    texts: list[str],
    args: argparse.Namespace,
    note: str = "",
) -> dict[str, Any]:
    """The WebSocket with ``text_frontend`` on and off, alternating on every reply (per-sentence
    audio, as the ``ws`` row: ``vocoder=exact`` where the engine streams inside a segment)."""
    from .ttfb import stream_probe, vocoder_ready  # the main bench's helpers (it imports this module)

    chunked = not args.no_vocoder and await vocoder_ready(http, t)
    per_sentence = {**fields, "vocoder": "exact"} if chunked else fields
    probes = {v: stream_probe(t, "ws", per_sentence, client, text_frontend=on) for v, on in FRONTEND.items()}
    for probe in probes.values():
        await probe(http, MARKDOWN_WARMUP)  # not counted
    runs = []
    for rep in range(args.reps):
        for i, text in enumerate(texts):
            # on then off, then off then on: neither always follows the other
            order = list(FRONTEND) if (rep * len(texts) + i) % 2 == 0 else list(reversed(FRONTEND))
            for v in order:
                runs.append({"channel": v, "rep": rep, "reply": i, **await probes[v](http, text)})
    result = summarize(runs, baseline="frontend off")
    on, off = (result["channels"][v]["ttfb"] for v in FRONTEND)
    result["ratio_on_off"] = {"mean": round(on.mean / off.mean, 3), "median": round(on.median / off.median, 3)}
    result.update(note=note, request=per_sentence)
    return result


def render_frontend(out: dict[str, Any]) -> str:
    """``--frontend-compare``: first audio per engine with the front-end on and off, and on/off."""
    headers = ["engine", "ws, text front-end", "n", "mean ms", "median", "p90", "on vs off", "last audio ms"]
    headers.append("stalls (runs, total)")
    from .ttfb import channel_rows

    rows = channel_rows(out["engines"], (("mean_pct", "{:+.1f}%"),))
    lines = [table(headers, rows)]
    for name, res in out["engines"].items():
        if "skipped" in res:
            lines.append(f"{name}: {res['skipped']}")
            continue
        r = res["ratio_on_off"]
        lines.append(f"{name}: first audio, front-end on/off: mean {r['mean']:.3f}, median {r['median']:.3f}")
    return "\n".join(lines)
