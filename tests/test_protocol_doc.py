"""docs/PROTOCOL.md cannot drift from the code.

Each name is taken from the code itself, not from a copy of it: the routes from the router that
``make_app`` builds (and the model container's), the options from the keys ``parse_options``,
``parse_speech``, the token request and the WebSocket message check actually read (a dict that
records every key looked up), the client message types from ``CLIENT_TYPES``, the error codes
from the ``GatewayError`` classes, ``httperrors``' status table and every literal code the
sources pass (``code=...``, ``{"code": ...}``, ``Fatal(close, code, ...)``), and the server events
from every ``Event("...")`` the sources build and OpenAI's ``speech.audio.*`` types. Every name
must appear in its table in PROTOCOL.md, and every table row must name something that exists.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gateway
from gateway.core.options import parse_options
from gateway.errors import GatewayError
from gateway.web import httperrors, tokens
from gateway.web.app import make_app
from gateway.web.container import make_container_app
from gateway.web.openai_speech import parse_speech
from gateway.web.state import GATEWAY
from gateway.web.transports.ws_input import CLIENT_TYPES, validate_message
from tests.conftest import fake_settings

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "PROTOCOL.md"
SOURCES = sorted((ROOT / "gateway").rglob("*.py"))
SKIP_MODULES = ("gateway.engines.sagemaker_stream",)  # needs the Python 3.12 SDK to import


class Recorder(dict):  # type: ignore[type-arg]
    """A dict that remembers every key the code looks up (``get``, ``[]``, ``in``)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def section(name: str) -> str:
    """The text of PROTOCOL.md's ``## name`` section."""
    text = DOC.read_text()
    match = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"docs/PROTOCOL.md has no section '## {name}'"
    return match.group(1)


def table_names(name: str) -> set[str]:
    """The backquoted names in the first column of the section's table rows."""
    names: set[str] = set()
    for line in section(name).splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            first = line.split("|")[1]
            names.update(re.findall(r"`([^`]+)`", first))
    return names


def assert_same(found: set[str], documented: set[str], what: str) -> None:
    missing = sorted(found - documented)
    stale = sorted(documented - found)
    assert not missing, f"{what} in the code but not in docs/PROTOCOL.md: {missing}"
    assert not stale, f"{what} in docs/PROTOCOL.md that the code no longer has: {stale}"


# --- routes -----------------------------------------------------------------------------------


def routes(app: Any) -> set[str]:
    return {f"{r.method} {r.resource.canonical}" for r in app.router.routes() if r.method != "HEAD"}


def test_every_route_is_documented() -> None:
    settings = fake_settings()
    found = routes(make_app(settings)) | {f"{r} (container)" for r in routes(make_container_app(settings))}
    assert_same(found, table_names("Routes"), "routes")


# --- options ----------------------------------------------------------------------------------


def engine_and_settings() -> tuple[Any, Any]:
    settings = fake_settings()
    return make_app(settings)[GATEWAY].engine, settings


def test_every_option_parse_options_reads_is_documented() -> None:
    engine, settings = engine_and_settings()
    raw = Recorder({"text": "Hello."})
    parse_options(raw, settings, engine)
    assert {"voice", "speed", "format", "text", "prompt", "sample_rate"} <= raw.read  # the recorder works
    assert_same(raw.read, table_names("Options"), "options")


def test_every_openai_body_field_is_documented() -> None:
    engine, settings = engine_and_settings()
    body = Recorder({"input": "Hello."})
    parse_speech(body, settings, engine)
    assert_same(body.read, table_names("OpenAI speech body"), "OpenAI speech fields")


def test_the_token_request_and_client_messages_are_documented() -> None:
    body = Recorder({})
    tokens.parse_request(body)
    assert_same(body.read, table_names("Token request"), "token request fields")
    settings = fake_settings()
    fields: set[str] = set()
    for kind in CLIENT_TYPES:
        msg = Recorder({"type": kind, "text": "Hi.", "prompt": "Hi.", "played_ms": 0})
        validate_message(msg, settings)
        fields |= {kind} | (msg.read - {"type"})
    assert_same(fields, table_names("WebSocket client messages"), "client messages and their fields")


# --- error codes and events: what the sources can emit --------------------------------------


def product_modules() -> Iterator[Any]:
    for info in pkgutil.walk_packages(gateway.__path__, "gateway."):
        if info.name not in SKIP_MODULES:
            yield importlib.import_module(info.name)


def subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)


def literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def callee(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def literal_codes(tree: ast.AST) -> Iterator[str]:
    """``code="x"``, ``{"code": "x"}``, ``Fatal(close, "x", ...)``, ``error_response(s, "x", ...)``
    and ``.get("code", "x")``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = callee(node)
            for kw in node.keywords:
                if kw.arg == "code" and (code := literal(kw.value)):
                    yield code
            if name in ("Fatal", "error_response") and len(node.args) > 1 and (code := literal(node.args[1])):
                yield code
            if name == "get" and len(node.args) == 2 and literal(node.args[0]) == "code":
                if code := literal(node.args[1]):
                    yield code
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if literal(key) == "code" and (code := literal(value)):
                    yield code


def emitted_codes() -> set[str]:
    list(product_modules())  # every GatewayError subclass defined
    codes = {GatewayError.code} | {c.code for c in subclasses(GatewayError)} | set(httperrors._CODES.values())
    for path in SOURCES:
        codes.update(literal_codes(ast.parse(path.read_text())))
    return codes


def emitted_events() -> set[str]:
    types: set[str] = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and callee(node) == "Event" and node.args:
                if (kind := literal(node.args[0])) and not kind.startswith("_"):  # "_close" is internal
                    types.add(kind)
            elif isinstance(node, ast.Dict):  # OpenAI's event types, {"type": "speech.audio.delta"}
                for key, value in zip(node.keys, node.values):
                    if literal(key) == "type" and (kind := literal(value)) and kind.startswith("speech."):
                        types.add(kind)
    return types


def test_every_error_code_is_documented() -> None:
    codes = emitted_codes()
    assert {"unknown_voice", "not_found", "slow_client", "token_expired", "agent_timeout"} <= codes
    assert_same(codes, table_names("Error codes"), "error codes")


def test_every_server_event_is_documented() -> None:
    events = emitted_events()
    assert {"ready", "audio", "done", "error", "speech.audio.delta"} <= events
    assert_same(events, table_names("Server events"), "server events")


@pytest.mark.parametrize(
    "name",
    [
        "Routes",
        "Options",
        "OpenAI speech body",
        "Token request",
        "WebSocket client messages",
        "Server events",
        "Error codes",
    ],
)
def test_each_table_is_there(name: str) -> None:
    assert table_names(name), f"the '## {name}' section of docs/PROTOCOL.md has no table"


def test_voice_fields_are_the_documented_ones() -> None:
    # a field served in /v1/voices is one the docs explain (and say where its figure comes
    # from): a `wer` of runs whose write-ups were gone was served and documented as measured
    from gateway.kokoro.voicecatalog import describe

    served = set(describe("jm_kumo").to_dict())
    for doc, anchor in (("VOICES.md", "`GET /v1/voices` gives per voice"), ("PROTOCOL.md", "| `GET /v1/voices` |")):
        text = (Path(gateway.__file__).resolve().parent.parent / "docs" / doc).read_text()
        passage = text[text.index(anchor) :].split(";")[0].split(", and on")[0]
        assert set(re.findall(r"`([a-z_]+)`", passage)) == served, doc
