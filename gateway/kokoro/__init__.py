"""Kokoro-82M's own pieces: G2P and vocab, voice packs, the voice catalog and store, word times
from predicted durations, the ONNX model and its sessions, the split and chunked vocoder, float
graphs and torch weights. No engine, no session, no HTTP (``docs/ARCHITECTURE.md``).
"""
