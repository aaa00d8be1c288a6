"""A client's JSON, decoded into an object or refused as ``invalid_json`` (400).

``json.loads`` raises more than ``JSONDecodeError`` on hostile input: ``RecursionError`` for
deep nesting (a thousand ``[`` are enough, well under any size limit), a plain ``ValueError``
for an integer over Python's 4300-digit limit, ``UnicodeDecodeError`` for bytes that are not
UTF-8. Every route and channel that reads a client's JSON decodes it here, so that each of
those is the client's error, never a 500 or a dropped socket. Bodies are decoded from their
bytes (JSON is UTF-8), never through a charset the request names.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import BadRequest


def decode_object(data: str | bytes, what: str = "the body must be a JSON object") -> dict[str, Any]:
    """``data`` as a JSON object; ``BadRequest`` (``invalid_json``) saying ``what`` if not."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        value = None
    if not isinstance(value, dict):
        raise BadRequest(what, code="invalid_json")
    return value
