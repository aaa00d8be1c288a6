"""The sagemaker engine's ``stream`` transport: ``InvokeEndpointWithBidirectionalStream``.

One stream per segment through the HTTP/2 SDK ``aws-sdk-sagemaker-runtime-http2`` (Python
3.12+, extra ``sagemaker-http2``) on its CRT transport, the one that streams both ways. Request
PayloadParts carry the container's control messages (``start`` with ``format=pcm``, ``text``,
``end``) as ``UTF8`` parts; the endpoint's sidecar makes each one WebSocket frame to the
container and each container frame one response PayloadPart: a text frame (a JSON event)
``DataType=UTF8``, a binary frame (PCM) ``BINARY``; ``PARTIAL`` parts are joined up to the
next ``COMPLETE``. The container's ``words`` events (see ``engines.container``) become
``WordTimes`` when asked for. After ``done`` the input is closed, which ends the stream and the
container's socket. No pool of open streams: idle ones would count in
``ConcurrentRequestsPerModel``, the metric the endpoint scales on.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import sys
from collections.abc import AsyncGenerator
from typing import Any

from ..errors import EngineError, EngineTimeout, NotReady
from ..kokoro.timestamps import WordTimes, words_event
from .container import SAMPLE_RATE, container_event

log = logging.getLogger(__name__)

OPEN_TIMEOUT_S = 10.0  # opening a stream: TLS, HTTP/2, the sidecar's socket to the container
CLOSE_TIMEOUT_S = 2.0
HTTP2_HINT = (
    "the sagemaker engine's stream mode needs Python 3.12+ and the HTTP/2 SDK: "
    "pip install -e '.[sagemaker-http2]' (or set sagemaker_mode=batch)"
)


def require_http2_sdk() -> None:
    """Import the HTTP/2 SDK and its CRT transport now, or fail saying what to install."""
    if sys.version_info < (3, 12):
        raise ImportError(f"{HTTP2_HINT}; this is Python {sys.version.split()[0]}")
    try:
        for module in ("aws_sdk_sagemaker_runtime_http2.client", "smithy_http.aio.crt", "awscrt.io"):
            importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{HTTP2_HINT} ({exc})") from exc


def crt_transport(ca_file: str = "") -> Any:
    """The SDK's CRT HTTP client (the one that streams both ways), trusting only ``ca_file``'s
    CAs when one is given."""
    return _crt_client_class()(ca_file)


_CRT_CLIENT: list[type] = []  # the class below, built once on first use (its base is an optional import)


def _crt_client_class() -> type:
    if _CRT_CLIENT:
        return _CRT_CLIENT[0]
    from copy import deepcopy

    from awscrt import io
    from smithy_http.aio.crt import AWSCRTHTTPClient

    class GatewayCRTClient(AWSCRTHTTPClient):  # type: ignore[misc]
        """AWSCRTHTTPClient with an optional CA file, and quiet about request bodies ended late."""

        def __init__(self, ca_file: str = "", eventloop: Any = None, client_config: Any = None) -> None:
            super().__init__(eventloop=eventloop, client_config=client_config)
            self.ca_file = ca_file
            if ca_file:
                options = io.TlsContextOptions()
                options.override_default_trust_store_from_path(ca_filepath=ca_file)
                self._tls_ctx = io.ClientTlsContext(options)

        def __deepcopy__(self, memo: Any) -> GatewayCRTClient:  # the SDK deep-copies its config
            return GatewayCRTClient(self.ca_file, eventloop=self._eventloop, client_config=deepcopy(self._config))

        async def _await_response(self, stream: Any) -> Any:
            # CRT writes the request's END_STREAM from a task of its own; when the service has
            # already ended the stream (an error answered before the input ended) that write
            # fails and, unretrieved, would be logged as an error at garbage collection
            writer = getattr(stream, "_writer", None)
            if isinstance(writer, asyncio.Task):
                writer.add_done_callback(_reap_body_writer)
            return await super()._await_response(stream)

    _CRT_CLIENT.append(GatewayCRTClient)
    return GatewayCRTClient


def _reap_body_writer(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("request body ended after the stream had: %s", task.exception())


def service_error(exc: BaseException) -> EngineError:
    """An SDK or transport failure as an ``EngineError`` carrying the service's code."""
    while type(exc).__name__ == "SmithyError" and exc.__cause__ is not None:  # the SDK wraps transport errors
        exc = exc.__cause__
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    if isinstance(exc, OSError) or type(exc).__name__ == "AwsCrtError":  # no answer from the service at all
        return EngineError(f"SageMaker endpoint unreachable: {message}", code="engine_unavailable")
    code = getattr(exc, "error_code", None) or type(exc).__name__  # ModelStreamError -> StreamBroken, ...
    return EngineError(f"SageMaker {type(exc).__name__}: {message}", code=code)


async def _close(stream: Any) -> None:
    """End the input (the service then closes the container's socket) and drop the output."""
    for step in (stream.input_stream.close, stream.close):  # close() also reaps a failed output
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await step()


class StreamTransport:
    """Segments as bidirectional streams to one endpoint; one retry of a stream that fails to open."""

    def __init__(self, endpoint: str, *, region: str, endpoint_url: str, ca_file: str, timeout_s: float) -> None:
        self.endpoint, self.region, self.endpoint_url, self.ca_file = endpoint, region, endpoint_url, ca_file
        self.timeout_s = timeout_s
        self.retries = 0  # streams opened again after a connection failure: lets tests see it
        self._client: Any = None

    def require_client(self) -> Any:
        if self._client is None:
            raise NotReady("the sagemaker engine is not started")
        return self._client

    async def connect(self) -> None:
        if self._client is not None:
            return
        from aws_sdk_sagemaker_runtime_http2.client import AsyncSageMakerRuntimeHTTP2Client
        from aws_sdk_sagemaker_runtime_http2.config import AsyncSageMakerRuntimeHTTP2Config

        overrides: dict[str, Any] = {"transport": crt_transport(self.ca_file)}
        if self.endpoint_url:
            overrides["endpoint_uri"] = self.endpoint_url
        if self.region:
            overrides["region"] = self.region
        config = await AsyncSageMakerRuntimeHTTP2Config.resolve(**overrides)
        self._client = AsyncSageMakerRuntimeHTTP2Client(config=config)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def synthesize(
        self, text: str, voice: str, speed: float, timestamps: bool = False
    ) -> AsyncGenerator[bytes | WordTimes, None]:
        from awscrt.exceptions import AwsCrtError
        from smithy_core.exceptions import SmithyError

        stream = None
        try:
            for attempt in (1, 2):
                try:
                    stream, output = await self._open(text, voice, speed)
                    break
                except (SmithyError, AwsCrtError, OSError) as exc:
                    # no answer at all, no audio yet: a pooled HTTP/2 connection the service had
                    # just closed looks like this, and a fresh one serves the retry
                    if attempt > 1 or service_error(exc).code != "engine_unavailable":
                        raise
                    log.warning("stream to %s failed to open (%s); retrying once", self.endpoint, exc)
                    self.retries += 1
            async for item in self._read_reply(output, timestamps):
                yield item
        except (SmithyError, AwsCrtError, OSError) as exc:
            raise service_error(exc) from exc
        finally:
            if stream is not None:
                await _close(stream)

    async def _open(self, text: str, voice: str, speed: float) -> tuple[Any, Any]:
        from aws_sdk_sagemaker_runtime_http2.models import (
            InvokeEndpointWithBidirectionalStreamInput,
            RequestPayloadPart,
            RequestStreamEventPayloadPart,
        )

        # one segment already: the container must not cut its first clause off again
        messages = (
            # text_frontend: the text is this gateway's spoken form already
            {
                "type": "start",
                "format": "pcm",
                "voice": voice,
                "speed": speed,
                "first_clause": False,
                "text_frontend": False,
            },
            {"type": "text", "text": text},
            {"type": "end"},
        )
        try:
            async with asyncio.timeout(OPEN_TIMEOUT_S):
                request = InvokeEndpointWithBidirectionalStreamInput(endpoint_name=self.endpoint)
                stream = await self.require_client().invoke_endpoint_with_bidirectional_stream(request)
                try:
                    for message in messages:
                        part = RequestPayloadPart(
                            bytes_=json.dumps(message).encode(), data_type="UTF8", completion_state="COMPLETE"
                        )
                        await stream.input_stream.send(RequestStreamEventPayloadPart(value=part))
                    _, output = await stream.await_output()
                except BaseException:
                    await _close(stream)
                    raise
        except TimeoutError:
            raise EngineTimeout(f"no stream to endpoint {self.endpoint} within {OPEN_TIMEOUT_S:g} s") from None
        return stream, output

    async def _read_reply(self, output: Any, timestamps: bool = False) -> AsyncGenerator[bytes | WordTimes, None]:
        """PCM from BINARY parts until the container's ``done`` (a UTF8 part); with
        ``timestamps``, its ``words`` events as ``WordTimes``."""
        pending, odd = bytearray(), b""
        timeout = self.timeout_s
        while True:
            try:
                async with asyncio.timeout(timeout):
                    event = await output.receive()
            except TimeoutError:
                raise EngineTimeout(f"the endpoint sent nothing for {timeout:g} s") from None
            if event is None:
                raise EngineError("the endpoint ended the stream before the reply was done", code="engine_unavailable")
            part = getattr(event, "value", None)
            if part is None or not hasattr(part, "bytes_"):
                log.warning("ignoring an unknown response event: %r", event)
                continue
            pending += part.bytes_ or b""
            if part.completion_state == "PARTIAL":
                continue
            data, pending = bytes(pending), bytearray()
            if part.data_type == "UTF8":
                event = container_event(data, SAMPLE_RATE, "the endpoint")
                if event.get("type") == "done":
                    return
                if timestamps and (times := words_event(event, SAMPLE_RATE, "the endpoint")) is not None:
                    yield times
                continue
            data = odd + data  # keep chunks whole 16-bit samples, whatever the parts' sizes
            cut = len(data) - len(data) % 2
            odd = data[cut:]
            if cut:
                yield data[:cut]
