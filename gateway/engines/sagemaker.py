"""The sagemaker engine: synthesis on a SageMaker AI real-time endpoint running the model container.

Two modes (setting ``sagemaker_mode``):

* ``stream`` (default): one ``InvokeEndpointWithBidirectionalStream`` per segment through the
  HTTP/2 SDK (Python 3.12+): ``sagemaker_stream.StreamTransport``.
* ``batch``: one ``InvokeEndpoint`` per segment through boto3 (the container's
  ``POST /invocations``, ``format=pcm``); the segment's PCM arrives whole. Python 3.11 works.

Credentials and region come from the standard AWS chain; ``sagemaker_region``,
``sagemaker_endpoint_url`` (a VPC endpoint, or ``tests.support.sagemaker_stub`` in tests) and
``sagemaker_ca_file`` (the CAs to trust for it) override it.

Errors: the service's (``ModelStreamError``, ``InputValidationError``, ``ModelError``, ...)
become ``EngineError`` with the service's code (its ``ErrorCode``, else the error's name); a
container ``error`` event keeps the container's code (``unknown_voice`` as ``BadRequest``).

Word timestamps: in ``stream`` mode the container's ``words`` events are forwarded as
``WordTimes`` (declared, since the model container sends them whenever its engine has them; one
whose engine has none sends none, and then none come); ``batch`` replies are PCM only.

Voices: an endpoint lists none, so they are configured (``sagemaker_voices``, comma-separated;
default: Kokoro-82M's English voices, as the GPU container serves). The container still checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..errors import EngineError, EngineTimeout, GatewayError
from ..kokoro.parts import choose_default, describe_voices
from ..kokoro.timestamps import WordTimes
from .base import EngineBase
from .container import SAMPLE_RATE, container_error
from .sagemaker_stream import OPEN_TIMEOUT_S, StreamTransport, crt_transport, require_http2_sdk

log = logging.getLogger(__name__)

__all__ = ["SageMakerEngine", "SageMakerOptions", "batch_error", "crt_transport"]
MODES = ("stream", "batch")
DEFAULT_VOICES = ("af_heart", "af_bella", "af_nicole", "af_sarah", "am_michael", "am_fenrir", "bf_emma", "bm_george")
BATCH_CHUNK_BYTES = 9600  # 200 ms of PCM per chunk handed on from a whole batch reply
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
    def from_settings(cls, settings: Settings) -> SageMakerOptions:
        def get(name: str, default: Any) -> Any:  # settings a Settings without them leaves at the default
            return getattr(settings, f"sagemaker_{name}", default)

        voices = tuple(v.strip() for v in str(get("voices", "")).split(",") if v.strip())
        return cls(
            endpoint=settings.sagemaker_endpoint,
            region=settings.sagemaker_region,
            mode=get("mode", "stream"),
            endpoint_url=get("endpoint_url", ""),
            ca_file=get("ca_file", ""),
            voices=voices or DEFAULT_VOICES,
            max_concurrency=int(get("max_concurrency", 16)),
        )


class SageMakerEngine(EngineBase):
    """No streaming inside a segment; the voices are configured (an endpoint lists none)."""

    name = "sagemaker"
    sample_rate = SAMPLE_RATE

    def __init__(self, settings: Settings, options: SageMakerOptions | None = None) -> None:
        super().__init__()
        self.options = options or SageMakerOptions.from_settings(settings)
        self.timeout_s = settings.synth_timeout_s
        o = self.options
        if not o.endpoint:
            raise ValueError("the sagemaker engine needs sagemaker_endpoint (the endpoint's name)")
        if o.mode not in MODES:
            raise ValueError(f"sagemaker_mode must be one of {', '.join(MODES)}, got {o.mode!r}")
        if o.mode == "stream":
            require_http2_sdk()  # fail at construction, not on the first request
        self.max_concurrency = o.max_concurrency
        default = choose_default(o.voices, settings.default_voice)
        self.declare(voices=describe_voices(o.voices, default), default_voice=default, timestamps=o.mode == "stream")
        self.stream = StreamTransport(
            o.endpoint, region=o.region, endpoint_url=o.endpoint_url, ca_file=o.ca_file, timeout_s=self.timeout_s
        )
        self._boto: Any = None  # the boto3 client (batch mode)

    @property
    def retries(self) -> int:
        """Streams opened again after a connection failure: lets tests see it."""
        return self.stream.retries

    async def start(self) -> None:
        if self.options.mode == "stream":
            await self.stream.connect()
        elif self._boto is None:
            self._boto = await asyncio.to_thread(self._boto_client)
        log.info(
            "sagemaker engine: endpoint %s (%s mode) at %s",
            self.options.endpoint,
            self.options.mode,
            self.options.endpoint_url or "the regional service URL",
        )

    def _boto_client(self) -> Any:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise ImportError(f"{BOTO_HINT} ({exc})") from exc
        config = Config(
            connect_timeout=OPEN_TIMEOUT_S,
            read_timeout=self.timeout_s,
            retries={"mode": "standard", "max_attempts": 2},
            max_pool_connections=self.max_concurrency,
        )
        return boto3.client(
            "sagemaker-runtime",
            region_name=self.options.region or None,
            endpoint_url=self.options.endpoint_url or None,
            verify=self.options.ca_file or None,
            config=config,
        )

    async def aclose(self) -> None:
        self._boto = None
        await self.stream.aclose()

    async def synthesize(
        self,
        text: str,
        *,
        voice: str,
        speed: float,
        vocoder: str | None = None,
        buffered_s: float = 0.0,
        waiting: bool = False,
        timestamps: bool = False,
    ) -> AsyncGenerator[bytes | WordTimes, None]:
        """Yield the endpoint's PCM for ``text`` (stream mode with ``timestamps``: the words
        before their audio); closing early ends the call (and the container's work)."""
        source: AsyncGenerator[bytes | WordTimes, None]
        if self.options.mode == "batch":
            self.require(self._boto)
            source = self._batch(text, voice, speed)
        else:
            self.stream.require_client()
            source = self.stream.synthesize(text, voice, speed, timestamps)
        async with contextlib.aclosing(source) as chunks:
            async for item in chunks:
                yield item

    # -- batch: InvokeEndpoint --------------------------------------------------------------------
    async def _batch(self, text: str, voice: str, speed: float) -> AsyncGenerator[bytes, None]:
        # the text is this gateway's spoken form already: the container must not read it again
        body = json.dumps(
            {"text": text, "voice": voice, "speed": speed, "format": "pcm", "text_frontend": False}
        ).encode()
        timeout = self.timeout_s
        try:
            async with asyncio.timeout(timeout):
                pcm = await asyncio.to_thread(self._invoke, body)
        except TimeoutError:
            raise EngineTimeout(f"endpoint {self.options.endpoint} took over {timeout:g} s") from None
        pcm = pcm[: len(pcm) - len(pcm) % 2]
        for start in range(0, len(pcm), BATCH_CHUNK_BYTES):
            yield pcm[start : start + BATCH_CHUNK_BYTES]

    def _invoke(self, body: bytes) -> bytes:
        """One blocking ``InvokeEndpoint`` (on a worker thread): the segment's whole PCM."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self._boto.invoke_endpoint(
                EndpointName=self.options.endpoint, Body=body, ContentType="application/json", Accept="audio/pcm"
            )
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
