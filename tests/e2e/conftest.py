import pytest


@pytest.fixture(scope="module")
def ray_session(shared_ray):
    """The runs' local Ray: the one consecutive test files share (tests/conftest.py)."""
