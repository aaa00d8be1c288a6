"""Amazon Bedrock's ``ConverseStream`` through boto3 (``pip install -e '.[bedrock]'``).

boto3 blocks, so each reply is read in a thread of its own: it calls ``converse_stream`` and
hands every event to the event loop through a queue. When the listener cancels, the response's
socket is shut down, which ends the thread's blocked read at once. Credentials and
region come from the standard AWS chain (``agent_region`` and ``agent_url`` override the
region and the endpoint, for a VPC endpoint or a local stand-in).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from .base import AgentError, AgentTimeout, AgentUnavailable, Message, redact

_END = object()


class BedrockConverse:
    backend = "bedrock"

    def __init__(
        self, model: str, *, region: str = "", endpoint_url: str = "", max_tokens: int = 0, timeout_s: float = 30.0
    ) -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise ImportError("the bedrock agent needs boto3: pip install -e '.[bedrock]'") from exc
        if not model:
            raise ValueError("the bedrock agent needs agent_model (a Bedrock model or inference profile id)")
        self.model = self.label = model
        self.max_tokens = max_tokens
        wait = timeout_s if timeout_s > 0 else 60.0
        config = Config(connect_timeout=wait, read_timeout=wait, retries={"total_max_attempts": 1})
        self._make_client: Callable[[], Any] = lambda: boto3.client(
            "bedrock-runtime", region_name=region or None, endpoint_url=endpoint_url or None, config=config
        )
        self._client: Any = None
        self._lock = threading.Lock()

    async def aclose(self) -> None:
        pass

    def _client_now(self) -> Any:
        with self._lock:  # boto3 clients are thread-safe once made; making one is not
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def request(self, messages: list[Message]) -> dict[str, Any]:
        """``converse_stream``'s arguments: system prompts apart, text content blocks."""
        args: dict[str, Any] = {
            "modelId": self.model,
            "messages": [
                {"role": m["role"], "content": [{"text": m["content"]}]} for m in messages if m["role"] != "system"
            ],
        }
        if system := [{"text": m["content"]} for m in messages if m["role"] == "system"]:
            args["system"] = system
        if self.max_tokens > 0:
            args["inferenceConfig"] = {"maxTokens": self.max_tokens}
        return args

    async def stream(self, messages: list[Message]) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()
        stop = threading.Event()
        held: dict[str, Any] = {}  # the response's event stream, once there is one

        def put(item: object) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def read() -> None:
            try:
                events = self._client_now().converse_stream(**self.request(messages))["stream"]
                held["stream"] = events
                for event in events:
                    if stop.is_set():
                        break
                    put(event)
            except Exception as exc:  # handed to the event loop, which translates it
                if not stop.is_set():
                    put(exc)
            finally:
                if "stream" in held:
                    held["stream"].close()
                if not stop.is_set():
                    put(_END)

        threading.Thread(target=read, name="bedrock-converse", daemon=True).start()
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, Exception):
                    raise translate(item) from None
                if text := item.get("contentBlockDelta", {}).get("delta", {}).get("text"):  # type: ignore[attr-defined]
                    yield text
        finally:
            stop.set()
            if "stream" in held:  # the reply is abandoned: end the thread's blocked read now
                _abort(held["stream"])


def _abort(events: Any) -> None:
    """Shut the response's socket down. ``close()`` would wait for the blocked read to end;
    a shutdown ends it at once (urllib3 then raises in the reading thread, which closes)."""
    sock = getattr(getattr(getattr(events, "_raw_stream", None), "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def translate(exc: Exception) -> AgentError:
    """botocore's errors -> the agent's: unreachable, timed out, or an error from the service."""
    from botocore import exceptions as bx

    name = type(exc).__name__
    if isinstance(exc, bx.ReadTimeoutError):
        return AgentTimeout(f"Bedrock sent nothing in time: {name}")
    if isinstance(
        exc,
        (
            bx.EndpointConnectionError,
            bx.ConnectTimeoutError,
            bx.NoCredentialsError,
            bx.NoRegionError,
            bx.PartialCredentialsError,
        ),
    ):
        return AgentUnavailable(f"cannot reach Bedrock: {redact(str(exc))}")
    if isinstance(exc, bx.ClientError):  # an HTTP error, or an exception event inside the stream
        err = exc.response.get("Error", {})
        return AgentError(f"Bedrock answered {err.get('Code', name)}: {redact(str(err.get('Message', '')))}")
    return AgentError(f"the Bedrock stream broke mid-reply: {name}")
