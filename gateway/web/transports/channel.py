"""The one channel base: a session's events -> a wire, with its byte accounting and metrics.

A channel subclass says only how one event is written (``write``, returning the bytes it took
on the wire). The base validates a session's options and opens it, sends its events until
``done`` or ``error`` (``pump``), completes ``done`` with what the wire carried (``wire_bytes``
for the audio, ``wire_bytes_total`` for everything, ``channel``), and counts sessions, bytes,
errors and time to first audio under the channel's ``name``. The WebSocket channel, the SSE
channel and the model container's socket are its subclasses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...core.options import StreamOptions, parse_options
from ...core.stream import Event, StreamSession
from ...errors import GatewayError
from ..state import Gateway


class Channel:
    name = "channel"  # the metrics label and ``done.channel``

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.session: StreamSession | None = None
        self.audio_wire = 0  # wire bytes of this reply's audio
        self.total_wire = 0  # wire bytes of everything this reply sent
        self.last_error: Event | None = None  # the last ``error`` sent (its cause picks a close code)
        # label lookups once per session, not per payload (2-4% of CPU at 1,000 sessions)
        self._audio_bytes = gw.metrics.bytes.labels(self.name, "audio")
        self._wire_bytes = gw.metrics.bytes.labels(self.name, "wire")

    def between_replies(self) -> bool:
        """Open with no reply in flight, kept for the next one (only sockets that outlive a
        reply): a shutdown closes it at once."""
        return False

    async def write(self, event: Event) -> int:
        """Put one event on the wire; return the bytes it took there."""
        raise NotImplementedError

    async def send(self, event: Event) -> int:
        wire = await self.write(event)
        self.total_wire += wire
        return wire

    @contextlib.contextmanager
    def counted(self) -> Iterator[None]:
        m = self.gw.metrics
        m.sessions.labels(self.name).inc()
        m.active.labels(self.name).inc()
        try:
            yield
        finally:
            m.active.labels(self.name).dec()

    async def options_for(self, fields: dict[str, Any]) -> StreamOptions:
        """``fields`` (query, body or ``start``) validated, once the engine has loaded (its
        voices are known then): ``BadRequest`` otherwise."""
        await self.gw.wait_ready()
        return parse_options(fields, self.gw.settings, self.gw.engine)

    def new_session(self, options: StreamOptions) -> StreamSession:
        gw = self.gw
        return StreamSession(gw.engine, options, gw.settings, agent=gw.agent, metrics=gw.metrics, hub=gw.hub)

    async def admitted_session(self, options: StreamOptions) -> StreamSession:
        """A new session the engine's real-time budget admits (``ready.queued_ms`` says how long
        it waits first); ``Overloaded``, with the forecast wait as ``retry_after``, if it cannot."""
        session = self.new_session(options)
        try:
            session.admit()
        except GatewayError:
            await session.aclose()
            raise
        return session

    async def pump(self, session: StreamSession) -> str:
        """Send the session's events until ``done`` or ``error``; return the last one's type."""
        last = ""
        async for event in session.events():
            last = event.type
            if event.type == "error":
                self.last_error = event
            if event.type == "done":
                event = self._done(event)
            wire = await self.send(event)
            self._observe(event, wire)
            if event.type == "cancelled":  # byte accounting is per reply
                self.reset_counts()
        return last

    def reset_counts(self) -> None:
        self.audio_wire = self.total_wire = 0

    def _done(self, event: Event) -> Event:
        fields = event.fields
        if fields.get("ttfb_ms") is not None:
            self.gw.metrics.ttfb.labels(self.name).observe(fields["ttfb_ms"] / 1000)
        return Event(
            "done", {**fields, "wire_bytes": self.audio_wire, "wire_bytes_total": self.total_wire, "channel": self.name}
        )

    def _observe(self, event: Event, wire: int) -> None:
        if event.type == "audio":
            self.audio_wire += wire
            self._audio_bytes.inc(len(event.audio))
            self._wire_bytes.inc(wire)
        elif event.type == "error":
            self.gw.metrics.errors.labels(self.name, str(event.fields.get("code"))).inc()
