"""A role whose node exists but is full: the driver says after a while which placement groups wait
and what the cluster has free, and stops past resources.placement_timeout_s in one line
(relay_trainer/feasibility.py wait_placed), instead of a silent wait and a bare GetTimeoutError."""

import pytest
import ray
from ray.util.placement_group import placement_group, remove_placement_group

from relay.failures import RunFailed
from relay_trainer.feasibility import wait_placed


def test_a_group_with_no_room_is_named_with_what_is_free_then_stops(shared_ray, capsys):
    total = ray.cluster_resources()["CPU"]
    blocker = placement_group([{"CPU": total}], name="other-run/learner")
    ray.get(blocker.ready(), timeout=60)
    waiting = placement_group([{"CPU": 1}, {"CPU": 1}], name="my-run/rollout")
    try:
        with pytest.raises(RunFailed) as stopped:
            wait_placed([waiting], timeout_s=3.0, say_after_s=1.0)
        line = capsys.readouterr().out.strip()
        assert line == (
            "relay: waiting for room: my-run/rollout (2 x 1 CPU) not placed after 1 s; "
            f"the cluster has 0 of {total:g} CPU free (other runs or jobs hold the rest) "
            "(up to 3 s, resources.placement_timeout_s)"
        )
        assert str(stopped.value) == (
            "the Ray cluster has no room for my-run/rollout (2 x 1 CPU) after 3 s (resources.placement_timeout_s); "
            f"the cluster has 0 of {total:g} CPU free (other runs or jobs hold the rest)"
        )
        remove_placement_group(blocker)  # room again: the same group is placed, and nothing is said
        wait_placed([waiting], timeout_s=60.0, say_after_s=30.0)
        assert capsys.readouterr().out == ""
    finally:
        for group in (blocker, waiting):
            remove_placement_group(group)
