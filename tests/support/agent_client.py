"""A WebSocket client that holds a conversation with the gateway's agent, turn by turn."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp


class Talk:
    """One socket; ``turn`` sends a prompt and reads that turn's events up to ``done`` or ``error``
    (or ``cancelled``). Audio frames are recorded as ``("audio", {"bytes": n})``."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.seen: list[tuple[str, dict[str, Any]]] = []  # everything, all turns

    async def turn(
        self,
        prompt: str,
        *,
        on_audio: Callable[[], Any] | None = None,
        cancel_on_audio: bool = False,
        deadline_s: float = 30.0,
    ) -> list[tuple[str, dict[str, Any]]]:
        await self.ws.send_json({"type": "prompt", "prompt": prompt})
        events: list[tuple[str, dict[str, Any]]] = []
        async with asyncio.timeout(deadline_s):  # a hang fails the test instead of stalling it
            while True:
                msg = await self.ws.receive()
                if msg.type == aiohttp.WSMsgType.BINARY:
                    first = not any(k == "audio" for k, _ in events)
                    events.append(("audio", {"bytes": len(msg.data)}))
                    if first and on_audio is not None:
                        on_audio()
                    if first and cancel_on_audio:
                        await self.ws.send_json({"type": "cancel"})
                    continue
                if msg.type != aiohttp.WSMsgType.TEXT:
                    raise AssertionError(f"the socket ended mid-turn: {msg.type} {self.ws.close_code}")
                body = json.loads(msg.data)
                events.append((body.pop("type"), body))
                if events[-1][0] in ("done", "error", "cancelled"):
                    break
        self.seen += events
        return events


def texts(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [body["delta"] for kind, body in events if kind == "text"]


def heard(events: list[tuple[str, dict[str, Any]]]) -> str:
    """The sentences whose audio arrived before the turn ended: what the listener heard."""
    said: dict[int, str] = {}
    current, out = -1, []
    for kind, body in events:
        if kind == "sentence":
            said[body["index"]] = body["text"]
            current = body["index"]
        elif kind == "audio" and current >= 0 and said.get(current) is not None:
            out.append(said.pop(current))
    return " ".join(out)


async def fails_then_recovers(
    http: aiohttp.ClientSession, ws_url: str, replies: list[Any], failing: Any, code: str
) -> dict[str, Any]:
    """On one socket, a turn the agent's stand-in answers with ``failing`` (queued on its
    ``replies``, then "Back again." after it), which must end in an ``error`` of ``code``, then
    one that works: a failed turn never ends the conversation. The failed turn's ``error`` body."""
    replies.extend([failing, type(failing)(["Back again."])])
    async with http.ws_connect(ws_url) as ws:
        talk = Talk(ws)
        failed = await talk.turn("Hello?")
        assert failed[-1][0] == "error" and failed[-1][1]["code"] == code
        ok = await talk.turn("Hello again?")
        assert texts(ok) == ["Back again."] and ok[-1][0] == "done"
    return failed[-1][1]
