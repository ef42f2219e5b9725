import pytest
import ray


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray per module, without the dashboard (which costs about 1 GB and seconds).
    Logical CPUs above the 2 cores: the synchronous loop's phases do not overlap."""
    ray.init(num_cpus=6, include_dashboard=False, namespace="relay", log_to_driver=False)
    yield
    ray.shutdown()
