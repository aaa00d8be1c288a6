"""Streaming text-to-speech gateway for voice agents (Kokoro-82M)."""

__version__ = "0.1.0"
