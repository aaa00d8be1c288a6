"""A local stand-in for the SageMaker runtime service, relaying to a REAL model container.

Tests (and local trials) point the ``sagemaker`` engine at it instead of the service. It
serves the two runtime routes the engine uses and forwards each to a model container
(``gateway.web.container``) the way the service and its in-instance sidecar do:

* ``POST /endpoints/{name}/invocations`` (``InvokeEndpoint``, what boto3 calls): an aiohttp
  app over HTTP/1.1 (``make_invocations_app``). The body goes to the container's
  ``POST /invocations``; a container answer of 4xx/5xx comes back as the service's
  ``ModelError`` (424, with ``OriginalStatusCode`` and ``OriginalMessage``).
* ``POST /endpoints/{name}/invocations-bidirectional-stream``
  (``InvokeEndpointWithBidirectionalStream``): an ASGI app (``BidiApp``) for hypercorn, since
  the SDK speaks it over HTTP/2 and only over TLS (``serve_bidi``; ``make_test_certs`` makes a
  CA and a server certificate). The request body is a stream of SigV4-signed event-stream
  frames, each wrapping one ``PayloadPart``; every part becomes one WebSocket frame to the
  container's ``/invocations-bidirectional-stream`` (DataType ``UTF8`` a text frame, else
  binary). Every container frame comes back as one ``PayloadPart`` (text ``UTF8``, binary
  ``BINARY``), cut into ``PARTIAL`` parts above ``max_part_bytes`` as the service may do.
  When the client ends its input the container's socket is closed (code 1000) and the
  response ends; when the container closes the socket with any other code (or drops it) the
  stream ends with a ``ModelStreamError`` (``StreamBroken``).

Requests must carry a SigV4 ``Authorization`` header and signed frames; signatures are not
verified (no secrets here). The event-stream codecs are the SDK's own, so this module's
bidirectional half needs the ``sagemaker-http2`` extra (Python 3.12+); the batch half needs
only aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import io
import ipaddress
import json
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

log = logging.getLogger(__name__)

EVENT_STREAM = "application/vnd.amazon.eventstream"
VARIANT = "AllTraffic"
STREAM_PATH = re.compile(r"/endpoints/([^/]+)/invocations-bidirectional-stream")
CONTAINER_STREAM = "/invocations-bidirectional-stream"

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class StubStats:
    """What the stand-in saw: lets tests check what crossed the wire (mutable counters)."""

    invocations: int = 0
    streams: int = 0
    parts_in: int = 0  # request PayloadParts relayed to the container
    parts_out: int = 0  # response PayloadParts sent back
    unsigned_frames: int = 0
    stream_errors: list[str] = field(default_factory=list)  # ModelStreamError codes sent


@dataclass
class Stub:
    container: str  # the model container's base URL, e.g. http://127.0.0.1:8080
    endpoints: frozenset[str] = frozenset({"kokoro"})
    max_part_bytes: int = 0  # > 0: container frames above this go back as PARTIAL parts
    stats: StubStats = field(default_factory=StubStats)


def _signed(authorization: str) -> bool:
    return authorization.startswith("AWS4-HMAC-SHA256 ") and "/sagemaker/aws4_request" in authorization


def _error_body(kind: str, message: str, **extra: Any) -> tuple[dict[str, str], bytes]:
    body = {"message": message, "Message": message, **extra}
    return {"x-amzn-ErrorType": kind, "Content-Type": "application/json"}, json.dumps(body).encode()


# -- InvokeEndpoint (HTTP/1.1, boto3) ----------------------------------------------------------
def make_invocations_app(stub: Stub) -> web.Application:
    """``POST /endpoints/{name}/invocations`` relayed to the container's ``/invocations``."""

    async def invocations(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if not _signed(request.headers.get("Authorization", "")):
            headers, body = _error_body("MissingAuthenticationTokenException", "Missing Authentication Token")
            return web.Response(status=403, headers=headers, body=body)
        if name not in stub.endpoints:
            headers, body = _error_body("ValidationError", f"Endpoint {name} of account 000000000000 not found.")
            return web.Response(status=400, headers=headers, body=body)
        stub.stats.invocations += 1
        forward = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")}
        async with aiohttp.ClientSession() as http:
            async with http.post(stub.container + "/invocations", data=await request.read(), headers=forward) as resp:
                data, status, kind = await resp.read(), resp.status, resp.content_type
        if status >= 400:
            headers, body = _error_body(
                "ModelError",
                f'Received client error ({status}) from primary with message "{data.decode(errors="replace")}".',
                OriginalStatusCode=status,
                OriginalMessage=data.decode(errors="replace"),
            )
            return web.Response(status=424, headers=headers, body=body)
        return web.Response(body=data, headers={"Content-Type": kind, "x-Amzn-Invoked-Production-Variant": VARIANT})

    app = web.Application(client_max_size=6 * 1024 * 1024)  # the service's own payload limit
    app.router.add_post("/endpoints/{name}/invocations", invocations)
    return app


# -- InvokeEndpointWithBidirectionalStream (HTTP/2 over TLS, the SDK) ---------------------------
class BidiApp:
    """The bidirectional route as an ASGI app (hypercorn serves it over HTTP/2)."""

    def __init__(self, stub: Stub) -> None:
        from smithy_json import JSONCodec

        _tolerate_late_data()
        self.stub = stub
        self.codec = JSONCodec()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # nothing to set up: acknowledge startup, then shutdown
            for phase in ("startup", "shutdown"):
                await receive()
                await send({"type": f"lifespan.{phase}.complete"})
            return
        if scope["type"] != "http":
            return
        match = STREAM_PATH.fullmatch(scope["path"])
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if scope["method"] != "POST" or match is None:
            return await self._fail(send, 404, "UnknownOperationException", f"no route {scope['path']}")
        if not _signed(headers.get("authorization", "")):
            return await self._fail(send, 403, "MissingAuthenticationTokenException", "Missing Authentication Token")
        if match.group(1) not in self.stub.endpoints:
            return await self._fail(
                send,
                400,
                "InputValidationError",
                f"Endpoint {match.group(1)} of account 000000000000 not found.",
                ErrorCode="ValidationError",
            )
        path = headers.get("x-amzn-sagemaker-model-invocation-path", CONTAINER_STREAM.lstrip("/"))
        query = headers.get("x-amzn-sagemaker-model-query-string")
        url = self.stub.container.replace("http", "ws", 1) + "/" + path + (f"?{query}" if query else "")
        async with aiohttp.ClientSession() as http:
            try:
                ws = await http.ws_connect(url, autoping=True, max_msg_size=0)
            except (aiohttp.ClientError, OSError) as exc:
                return await self._fail(send, 424, "ModelError", f"cannot reach the model container: {exc}")
            self.stub.stats.streams += 1
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", EVENT_STREAM.encode()),
                        (b"x-amzn-invoked-production-variant", VARIANT.encode()),
                    ],
                }
            )
            inbound = asyncio.create_task(self._pump_in(ws, receive))
            try:
                await self._pump_out(ws, send)
            finally:
                inbound.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await inbound
                await ws.close()
            with contextlib.suppress(Exception):  # a client that already went away needs no end
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _fail(self, send: Send, status: int, kind: str, message: str, **extra: Any) -> None:
        headers, body = _error_body(kind, message, **extra)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _pump_in(self, ws: aiohttp.ClientWebSocketResponse, receive: Receive) -> None:
        """Signed request frames -> one WebSocket frame per PayloadPart; input end -> close."""
        buffer = bytearray()
        ended = False
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            buffer += message.get("body", b"")
            for outer in self._take_events(buffer):
                if not {":date", ":chunk-signature"} <= outer.message.headers.keys():
                    self.stub.stats.unsigned_frames += 1
                if not outer.message.payload:  # the signed empty frame: the client is done
                    ended = True
                elif not ended:
                    await self._forward(ws, outer.message.payload)
            # the socket (and so the response) closes once the body has ended, not at the end
            # frame: the client's END_STREAM right after it must not race the response's end
            if not message.get("more_body", False):
                break
        await ws.close()

    def _take_events(self, buffer: bytearray) -> list[Any]:
        from smithy_aws_event_stream.events import Event

        events = []
        while len(buffer) >= 4:
            size = int.from_bytes(buffer[:4], "big")
            if len(buffer) < size:
                break
            events.append(Event.decode(io.BytesIO(bytes(buffer[:size]))))
            del buffer[:size]
        return events

    async def _forward(self, ws: aiohttp.ClientWebSocketResponse, signed_payload: bytes) -> None:
        from aws_sdk_sagemaker_runtime_http2.models import _RequestStreamEventDeserializer
        from smithy_aws_event_stream._private.deserializers import EventDeserializer
        from smithy_aws_event_stream.events import Event

        inner = Event.decode(io.BytesIO(signed_payload))
        event = _RequestStreamEventDeserializer().deserialize(
            EventDeserializer(event=inner, payload_codec=self.codec, is_client_mode=False)
        )
        part = event.value
        self.stub.stats.parts_in += 1
        data = part.bytes_ or b""
        if part.data_type == "UTF8":
            await ws.send_str(data.decode("utf-8"))
        else:  # BINARY is the service's default
            await ws.send_bytes(data)

    async def _pump_out(self, ws: aiohttp.ClientWebSocketResponse, send: Send) -> None:
        """Container frames -> PayloadParts until the socket closes; an error close -> ModelStreamError."""
        from aws_sdk_sagemaker_runtime_http2.models import (
            ModelStreamError,
            ResponsePayloadPart,
            ResponseStreamEventModelStreamError,
            ResponseStreamEventPayloadPart,
        )

        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                data, kind = msg.data.encode(), "UTF8"
            elif msg.type == aiohttp.WSMsgType.BINARY:
                data, kind = msg.data, "BINARY"
            else:
                break
            for piece, state in self._split(data):
                part = ResponsePayloadPart(bytes_=piece, data_type=kind, completion_state=state)
                await self._send_event(send, ResponseStreamEventPayloadPart(value=part))
                self.stub.stats.parts_out += 1
        if ws.close_code not in (None, aiohttp.WSCloseCode.OK):
            self.stub.stats.stream_errors.append("StreamBroken")
            error = ModelStreamError(
                message=f"the model container closed the stream (WebSocket {ws.close_code})", error_code="StreamBroken"
            )
            await self._send_event(send, ResponseStreamEventModelStreamError(value=error))

    def _split(self, data: bytes) -> list[tuple[bytes, str]]:
        size = self.stub.max_part_bytes
        if size <= 0 or len(data) <= size:
            return [(data, "COMPLETE")]
        pieces = [data[i : i + size] for i in range(0, len(data), size)]
        return [(p, "PARTIAL") for p in pieces[:-1]] + [(pieces[-1], "COMPLETE")]

    async def _send_event(self, send: Send, event: Any) -> None:
        from smithy_aws_event_stream._private.serializers import EventSerializer

        serializer = EventSerializer(payload_codec=self.codec, is_client_mode=False)
        event.serialize(serializer)
        message = serializer.get_result()
        if message is None:
            raise RuntimeError(f"the SDK serialized no event message for {event!r}")
        await send({"type": "http.response.body", "body": message.encode(), "more_body": True})


def _tolerate_late_data() -> None:
    """Let hypercorn ignore DATA on a stream whose response has already ended.

    hypercorn forgets an HTTP/2 stream as soon as its response is complete, while the client
    may still be sending on it (an error answered before the input ended; the end frame after
    a ModelStreamError). A DATA frame for the forgotten stream then raises KeyError and takes
    the whole connection, and every stream on it, down. The service would reset the stream;
    here the late bytes are acknowledged (so the connection's flow-control window stays open)
    and dropped.
    """
    import h2.events
    from hypercorn.protocol.h2 import H2Protocol

    original = H2Protocol._handle_events
    if getattr(original, "tolerates_late_data", False):
        return

    async def handle_events(self: H2Protocol, events: list[h2.events.Event]) -> None:
        for event in events:  # one at a time: a stream is known only once its RequestReceived is handled
            if isinstance(event, h2.events.DataReceived) and event.stream_id not in self.streams:
                self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            else:
                await original(self, [event])

    handle_events.tolerates_late_data = True  # type: ignore[attr-defined]
    H2Protocol._handle_events = handle_events  # type: ignore[method-assign]


async def serve_bidi(
    stub: Stub, port: int, certs: TlsFiles, host: str = "127.0.0.1", stop: asyncio.Event | None = None
) -> None:
    """Serve ``BidiApp`` with hypercorn over TLS (HTTP/2 by ALPN) until ``stop`` is set."""
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"{host}:{port}"]
    config.certfile, config.keyfile = str(certs.cert), str(certs.key)
    config.errorlog = log
    config.accesslog = None
    config.graceful_timeout = 1.0
    config.keep_alive_timeout = 75.0  # as a service's front end would; not hypercorn's 5 s
    stop = stop or asyncio.Event()
    try:
        await serve(BidiApp(stub), config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
    except ssl.SSLError as exc:  # a client still writing while the server says goodbye: over anyway
        log.debug("stand-in stopped with a TLS error from a connection still open: %s", exc)


# -- a CA and a server certificate, made at test time -------------------------------------------
@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca: Path  # the CA certificate (PEM): what the client trusts
    cert: Path  # the server certificate for localhost and 127.0.0.1 (PEM)
    key: Path  # its private key (PEM)


def make_test_certs(folder: Path, hostname: str = "localhost") -> TlsFiles:
    """A throwaway CA and a server certificate signed by it (EC P-256, valid for a day)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def build(subject: str, issuer: x509.Name | None, key: Any, sign_key: Any, ca: bool) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
            )
        else:
            builder = (
                builder.add_extension(
                    x509.SubjectAlternativeName(
                        [x509.DNSName(hostname), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                    ),
                    critical=False,
                )
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(
                    x509.AuthorityKeyIdentifier.from_issuer_public_key(sign_key.public_key()), critical=False
                )
            )
        return builder.sign(sign_key, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_cert = build("gateway test CA", None, ca_key, ca_key, ca=True)
    server_cert = build(hostname, ca_cert.subject, server_key, ca_key, ca=False)
    folder.mkdir(parents=True, exist_ok=True)
    certs = TlsFiles(folder / "ca.pem", folder / "server.pem", folder / "server-key.pem")
    certs.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    certs.cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    certs.key.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return certs
