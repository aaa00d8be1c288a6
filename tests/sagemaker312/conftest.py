"""Tests of the bidirectional SageMaker path: they need Python 3.12+ and the ``sagemaker-http2`` extra.

``make test`` runs them with ``.venv312``; under an older Python they are not collected.
"""

from __future__ import annotations

import sys

collect_ignore_glob = ["test_*.py"] if sys.version_info < (3, 12) else []
