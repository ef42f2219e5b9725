"""Shared fixtures. Plain `pytest` needs no GPU and no network; GPU tests carry the `gpu` marker."""

import os

import pytest

# Tests never reach a hub; the tiny models are shipped in the repository.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# torch's OpenMP threads spin at the end of every parallel region (libgomp's default). Where two
# actors compute at once on 2 cores (learner and critic, async rollout and update, two Tune trials)
# or other jobs share the machine, the spinning threads hold the cores the working ones need: the
# tiny model's update ran 8x slower with 2 threads than with 1. Passive threads sleep instead.
# Set before torch loads here, it reaches every Ray worker and driver process the tests start.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_collection_modifyitems(config, items):
    shared_ray_first(items)
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def shared_ray_first(items: list) -> None:
    """The files whose tests share `shared_ray` run first, one after another, each file's tests in
    their order: one Ray per test process serves them all (scripts/test.sh runs two, each taking
    whole files in this order). In path order they alternate with files that start a Ray of their
    own or want none, and each such turn stopped and started the shared one (about 4 s)."""
    shared = {item.path for item in items if "shared_ray" in item.fixturenames}
    items.sort(key=lambda item: item.path not in shared)  # stable: the order within each part is kept


@pytest.fixture(scope="session")
def tiny_model_path():
    """The tiny model shipped in the repository (never one built on this machine)."""
    from relay.models.shipped import shipped_model

    return str(shipped_model("tiny"))


# Test files whose tests share the local Ray of `shared_ray` (filled once collection is done).
SHARED_RAY_FILES: set = set()


def pytest_collection_finish(session):
    SHARED_RAY_FILES.update(item.path for item in session.items if "shared_ray" in item.fixturenames)


@pytest.fixture(scope="module")
def shared_ray():
    """One local Ray for consecutive test files that ask for it: starting one takes seconds (8 on a
    busy 2-core machine) and most files need the same one, without the dashboard (about 1 GB).
    Logical CPUs above the 2 cores: the synchronous loop's phases do not overlap. It stops before a
    file that does not ask for it (one that starts its own Ray, or wants none) and at the end;
    what a file leaves behind (named actors, placement groups) is removed after it."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=6, include_dashboard=False, namespace="relay", log_to_driver=False)
    yield
    if ray.is_initialized():
        from ray._raylet import PlacementGroupID
        from ray.util.placement_group import PlacementGroup

        for actor in ray.util.list_named_actors(all_namespaces=True):
            try:
                ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]))
            except ValueError:  # gone since it was listed
                pass
        for pg_id, pg in ray.util.placement_group_table().items():
            if pg["state"] != "REMOVED":
                ray.util.remove_placement_group(PlacementGroup(PlacementGroupID(bytes.fromhex(pg_id))))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield  # the test's fixtures first: a file's actors go before its Ray
    if item.path in SHARED_RAY_FILES and (nextitem is None or nextitem.path not in SHARED_RAY_FILES):
        import ray

        ray.shutdown()
    return result


def pytest_sessionfinish(session, exitstatus):
    session.config.relay_exit_status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """The last hook, once every result and the summary are out: leave with the session's status
    without the interpreter's teardown, where a native library's destructor (Ray's core worker, a
    torch process group left by an actor test) has crashed the process after every test passed."""
    import sys

    status = getattr(config, "relay_exit_status", None)
    if status is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
