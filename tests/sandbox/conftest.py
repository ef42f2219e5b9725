"""The tool server the hostile-code tests share (one for the package: tests/hostile_server.py)."""

from tests.hostile_server import nothing_survives, server  # noqa: F401
