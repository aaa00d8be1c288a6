#!/usr/bin/env python3
"""Entry point: ``python run_gateway.py [serve|container|synth|bench|loadtest|deploy] ...``."""

import sys

from gateway.ops.cli import main

if __name__ == "__main__":
    sys.exit(main())
