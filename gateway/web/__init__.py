"""The HTTP edge: the aiohttp app, its routes and channels (``transports/``), who is asking
(proxies, tokens, Origin, admission) and errors translated to the wire. It drives the core and
loads engines only by import string (``docs/ARCHITECTURE.md``).
"""
