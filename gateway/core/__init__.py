"""The core: one reply from text to encoded payloads, and the sessions and scheduling around it.

It knows engines only through their contract (``gateway.engines``, ``gateway.engines.base``),
never an HTTP request, a transport or a concrete engine (``docs/ARCHITECTURE.md``).
"""
