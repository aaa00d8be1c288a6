"""Running it: the command line, the server and its workers, the SageMaker endpoint. It may
import every other layer; nothing imports it (``docs/ARCHITECTURE.md``).
"""
