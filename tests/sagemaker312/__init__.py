"""Tests that need Python 3.12+: the SageMaker bidirectional stream through its HTTP/2 SDK."""
