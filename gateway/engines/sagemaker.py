"""The sagemaker engine: synthesis on a SageMaker AI real-time endpoint running the model container.

Two modes (setting ``sagemaker_mode``):

* ``stream`` (default): one ``InvokeEndpointWithBidirectionalStream`` per segment through the
  HTTP/2 SDK ``aws-sdk-sagemaker-runtime-http2`` (Python 3.12+, extra ``sagemaker-http2``) on
  its CRT transport, the one that streams both ways. Request PayloadParts carry the
  container's control messages (``start`` with ``format=pcm``, ``text``, ``end``) as ``UTF8``
  parts; the endpoint's sidecar makes each one WebSocket frame to the container and each
  container frame one response PayloadPart: a text frame (a JSON event) ``DataType=UTF8``, a
  binary frame (PCM) ``BINARY``; ``PARTIAL`` parts are joined up to the next ``COMPLETE``.
  After ``done`` the input is closed, which ends the stream and the container's socket. No
  pool of open streams: idle ones would count in ``ConcurrentRequestsPerModel``, the metric
  the endpoint scales on.
* ``batch``: one ``InvokeEndpoint`` per segment through boto3 (the container's
  ``POST /invocations``, ``format=pcm``); the segment's PCM arrives whole. Python 3.11 works.

Credentials and region come from the standard AWS chain; ``sagemaker_region``,
``sagemaker_endpoint_url`` (a VPC endpoint, or ``tests.support.sagemaker_stub`` in tests) and
``sagemaker_ca_file`` (the CAs to trust for it) override it.

Errors: the service's (``ModelStreamError``, ``InputValidationError``, ``ModelError``, ...)
become ``EngineError`` with the service's code (its ``ErrorCode``, else the error's name); a
container ``error`` event keeps the container's code (``unknown_voice`` as ``BadRequest``).

Voices: an endpoint lists none, so they are configured (``sagemaker_voices``, comma-separated;
default: Kokoro-82M's English voices, as the GPU container serves). The container still checks.
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import sys
from dataclasses import dataclass
from typing import Any, AsyncIterator

from ..config import Settings
from ..errors import BadRequest, EngineError, EngineTimeout, GatewayError, NotReady
from .base import Voice
from .container import CLIENT_ERRORS
from .kokoro import PREFERRED_VOICES, describe_voice

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000
MODES = ("stream", "batch")
DEFAULT_VOICES = ("af_heart", "af_bella", "af_nicole", "af_sarah", "am_michael", "am_fenrir", "bf_emma", "bm_george")
OPEN_TIMEOUT_S = 10.0  # opening a stream: TLS, HTTP/2, the sidecar's socket to the container
CLOSE_TIMEOUT_S = 2.0
BATCH_CHUNK_BYTES = 9600  # 200 ms of PCM per chunk handed on from a whole batch reply
HTTP2_HINT = ("the sagemaker engine's stream mode needs Python 3.12+ and the HTTP/2 SDK: "
              "pip install -e '.[sagemaker-http2]' (or set sagemaker_mode=batch)")
BOTO_HINT = "the sagemaker engine's batch mode needs boto3: pip install -e '.[sagemaker]'"


@dataclass(frozen=True, slots=True)
class SageMakerOptions:
    endpoint: str
    region: str = ""  # "": the AWS chain's region (AWS_REGION, the profile)
    mode: str = "stream"
    endpoint_url: str = ""  # "": the service's regional URL
    ca_file: str = ""  # "": the system's trusted CAs
    voices: tuple[str, ...] = DEFAULT_VOICES
    max_concurrency: int = 16  # segments in flight; admission allows a few times more sessions

    @classmethod
    def from_settings(cls, settings: Settings) -> "SageMakerOptions":
        def get(name: str, default: Any) -> Any:  # settings a Settings without them leaves at the default
            return getattr(settings, f"sagemaker_{name}", default)

        voices = tuple(v.strip() for v in str(get("voices", "")).split(",") if v.strip())
        return cls(endpoint=settings.sagemaker_endpoint, region=settings.sagemaker_region,
                   mode=get("mode", "stream"), endpoint_url=get("endpoint_url", ""), ca_file=get("ca_file", ""),
                   voices=voices or DEFAULT_VOICES, max_concurrency=int(get("max_concurrency", 16)))


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

        def __deepcopy__(self, memo: Any) -> "GatewayCRTClient":  # the SDK deep-copies its config
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


def _reap_body_writer(task: "asyncio.Task[Any]") -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("request body ended after the stream had: %s", task.exception())


def container_error(event: dict[str, Any]) -> GatewayError:
    """The container's ``error`` event as the gateway error it stands for."""
    code, message = str(event.get("code", "engine_error")), str(event.get("message", ""))
    if code in CLIENT_ERRORS:
        return BadRequest(message, code=code)
    return EngineError(f"container: {message}", code=code)


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


class SageMakerEngine:
    name = "sagemaker"
    vocoder_modes: tuple[str, ...] = ()  # no streaming inside a segment
    sample_rate = SAMPLE_RATE

    def __init__(self, settings: Settings, options: SageMakerOptions | None = None) -> None:
        self.settings = settings
        self.options = options or SageMakerOptions.from_settings(settings)
        if not self.options.endpoint:
            raise ValueError("the sagemaker engine needs sagemaker_endpoint (the endpoint's name)")
        if self.options.mode not in MODES:
            raise ValueError(f"sagemaker_mode must be one of {', '.join(MODES)}, got {self.options.mode!r}")
        if self.options.mode == "stream":
            require_http2_sdk()  # fail at construction, not on the first request
        self.max_concurrency = self.options.max_concurrency
        ids = self.options.voices
        default = settings.default_voice if settings.default_voice in ids else \
            next((v for v in PREFERRED_VOICES if v in ids), ids[0])
        self._voices = tuple(describe_voice(v, v == default) for v in ids)
        self._default = default
        self._client: Any = None  # the HTTP/2 SDK client (stream) or a boto3 client (batch)
        self.retries = 0  # streams opened again after a connection failure: lets tests see it

    @property
    def voices(self) -> tuple[Voice, ...]:
        return self._voices

    @property
    def default_voice(self) -> str:
        return self._default

    async def start(self) -> None:
        if self._client is not None:
            return
        if self.options.mode == "stream":
            self._client = await self._stream_client()
        else:
            self._client = await asyncio.to_thread(self._boto_client)
        log.info("sagemaker engine: endpoint %s (%s mode) at %s", self.options.endpoint, self.options.mode,
                 self.options.endpoint_url or "the regional service URL")

    async def _stream_client(self) -> Any:
        from aws_sdk_sagemaker_runtime_http2.client import AsyncSageMakerRuntimeHTTP2Client
        from aws_sdk_sagemaker_runtime_http2.config import AsyncSageMakerRuntimeHTTP2Config

        overrides: dict[str, Any] = {"transport": crt_transport(self.options.ca_file)}
        if self.options.endpoint_url:
            overrides["endpoint_uri"] = self.options.endpoint_url
        if self.options.region:
            overrides["region"] = self.options.region
        config = await AsyncSageMakerRuntimeHTTP2Config.resolve(**overrides)
        return AsyncSageMakerRuntimeHTTP2Client(config=config)

    def _boto_client(self) -> Any:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise ImportError(f"{BOTO_HINT} ({exc})") from exc
        config = Config(connect_timeout=OPEN_TIMEOUT_S, read_timeout=self.settings.synth_timeout_s,
                        retries={"mode": "standard", "max_attempts": 2},
                        max_pool_connections=self.max_concurrency)
        return boto3.client("sagemaker-runtime", region_name=self.options.region or None,
                            endpoint_url=self.options.endpoint_url or None,
                            verify=self.options.ca_file or None, config=config)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self.options.mode == "stream":
            await client.close()

    async def synthesize(self, text: str, *, voice: str, speed: float, vocoder: str | None = None,
                         buffered_s: float = 0.0) -> AsyncIterator[bytes]:
        """Yield the endpoint's PCM for ``text``; closing early ends the call (and the container's work)."""
        if self._client is None:
            raise NotReady("the sagemaker engine is not started")
        source = self._batch(text, voice, speed) if self.options.mode == "batch" else self._stream(text, voice, speed)
        async with contextlib.aclosing(source) as chunks:
            async for pcm in chunks:
                yield pcm

    # -- stream: InvokeEndpointWithBidirectionalStream ------------------------------------------
    async def _stream(self, text: str, voice: str, speed: float) -> AsyncIterator[bytes]:
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
                    log.warning("stream to %s failed to open (%s); retrying once", self.options.endpoint, exc)
                    self.retries += 1
            async for pcm in self._read_reply(output):
                yield pcm
        except (SmithyError, AwsCrtError, OSError) as exc:
            raise service_error(exc) from exc
        finally:
            if stream is not None:
                await _close(stream)

    async def _open(self, text: str, voice: str, speed: float) -> tuple[Any, Any]:
        from aws_sdk_sagemaker_runtime_http2.models import (
            InvokeEndpointWithBidirectionalStreamInput, RequestPayloadPart, RequestStreamEventPayloadPart)

        messages = ({"type": "start", "format": "pcm", "voice": voice, "speed": speed},
                    {"type": "text", "text": text}, {"type": "end"})
        try:
            async with asyncio.timeout(OPEN_TIMEOUT_S):
                request = InvokeEndpointWithBidirectionalStreamInput(endpoint_name=self.options.endpoint)
                stream = await self._client.invoke_endpoint_with_bidirectional_stream(request)
                try:
                    for message in messages:
                        part = RequestPayloadPart(bytes_=json.dumps(message).encode(), data_type="UTF8",
                                                  completion_state="COMPLETE")
                        await stream.input_stream.send(RequestStreamEventPayloadPart(value=part))
                    _, output = await stream.await_output()
                except BaseException:
                    await _close(stream)
                    raise
        except TimeoutError:
            raise EngineTimeout(f"no stream to endpoint {self.options.endpoint} within {OPEN_TIMEOUT_S:g} s") from None
        return stream, output

    async def _read_reply(self, output: Any) -> AsyncIterator[bytes]:
        """PCM from BINARY parts until the container's ``done`` (a UTF8 part)."""
        pending, odd = bytearray(), b""
        timeout = self.settings.synth_timeout_s
        while True:
            try:
                async with asyncio.timeout(timeout):
                    event = await output.receive()
            except TimeoutError:
                raise EngineTimeout(f"the endpoint sent nothing for {timeout:g} s") from None
            if event is None:
                raise EngineError("the endpoint ended the stream before the reply was done", code="engine_unavailable")
            part = getattr(event, "value", None)
            if not hasattr(part, "bytes_"):
                log.warning("ignoring an unknown response event: %r", event)
                continue
            pending += part.bytes_ or b""
            if part.completion_state == "PARTIAL":
                continue
            data, pending = bytes(pending), bytearray()
            if part.data_type == "UTF8":
                if self._on_event(data):
                    return
                continue
            data = odd + data  # keep chunks whole 16-bit samples, whatever the parts' sizes
            cut = len(data) - len(data) % 2
            odd = data[cut:]
            if cut:
                yield data[:cut]

    def _on_event(self, data: bytes) -> bool:
        """Handle one JSON event of the container; True at the segment's end."""
        try:
            event = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            event = None
        if not isinstance(event, dict):
            raise EngineError(f"the endpoint sent a malformed event: {data[:80]!r}")
        kind = event.get("type")
        if kind == "ready" and event.get("sample_rate") not in (None, self.sample_rate):
            raise EngineError(f"the endpoint speaks {event['sample_rate']} Hz, expected {self.sample_rate}")
        if kind == "error":
            raise container_error(event)
        return kind == "done"

    # -- batch: InvokeEndpoint --------------------------------------------------------------------
    async def _batch(self, text: str, voice: str, speed: float) -> AsyncIterator[bytes]:
        body = json.dumps({"text": text, "voice": voice, "speed": speed, "format": "pcm"}).encode()
        timeout = self.settings.synth_timeout_s
        try:
            async with asyncio.timeout(timeout):
                pcm = await asyncio.to_thread(self._invoke, body)
        except TimeoutError:
            raise EngineTimeout(f"endpoint {self.options.endpoint} took over {timeout:g} s") from None
        pcm = pcm[:len(pcm) - len(pcm) % 2]
        for start in range(0, len(pcm), BATCH_CHUNK_BYTES):
            yield pcm[start:start + BATCH_CHUNK_BYTES]

    def _invoke(self, body: bytes) -> bytes:
        """One blocking ``InvokeEndpoint`` (on a worker thread): the segment's whole PCM."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self._client.invoke_endpoint(EndpointName=self.options.endpoint, Body=body,
                                                    ContentType="application/json", Accept="audio/pcm")
            return bytes(response["Body"].read())
        except ClientError as exc:
            raise batch_error(exc.response) from exc
        except BotoCoreError as exc:
            raise EngineError(f"SageMaker endpoint unreachable: {exc}", code="engine_unavailable") from exc


def batch_error(response: dict[str, Any]) -> GatewayError:
    """A botocore error response as a gateway error: the container's own where it gave one."""
    error = response.get("Error", {})
    code, message = str(error.get("Code") or "ClientError"), str(error.get("Message") or "")
    if code == "ModelError":  # the container answered 4xx/5xx: its body says why
        with contextlib.suppress(json.JSONDecodeError, TypeError, KeyError):
            inner = json.loads(response.get("OriginalMessage") or "")["error"]
            if isinstance(inner, dict) and "code" in inner:
                return container_error(inner)
    return EngineError(f"SageMaker {code}: {message}", code=code)
