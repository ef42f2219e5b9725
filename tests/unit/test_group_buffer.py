"""relay/run/pipeline.py: the bounded group buffer of training.mode one_step_off / async (no Ray)."""

import json

from relay.run.pipeline import GroupBuffer, pipeline_metrics, sample_from_json, sample_to_json, staleness_metrics
from relay.types import FinishReason, Sample


def group(index: int, version: int, n: int = 2) -> list[Sample]:
    return [Sample(prompt_ids=[1], response_ids=[2], group_id=index, weight_version=version) for _ in range(n)]


def test_room_keeps_every_group_within_max_staleness_when_taken_in_order():
    buf = GroupBuffer(prompts_per_step=4, max_staleness=1, ordered=True)
    assert buf.room(version=0) == 8  # steps 0 and 1 may be rolled out on version 0
    buf.started(list(range(8)))
    assert buf.room(version=0) == 0
    for i in range(8):
        buf.put(group(i, version=0))
    groups, stale = buf.take()
    assert [g.index for g in groups] == [0, 1, 2, 3] and not stale and buf.next_step == 1
    assert buf.room(version=0) == 0  # step 1 trains on v1: a group started now on v0 would be trained at step 2
    assert buf.room(version=1) == 4


def test_max_staleness_zero_is_the_synchronous_loop():
    buf = GroupBuffer(prompts_per_step=2, max_staleness=0, ordered=True)
    assert buf.room(0) == 2
    buf.started([0, 1])
    buf.put(group(0, 0) + group(1, 0))
    assert buf.take()[0] is not None
    assert buf.room(0) == 0 and buf.room(1) == 2


def test_room_stops_at_the_last_step():
    buf = GroupBuffer(prompts_per_step=4, max_staleness=2, ordered=False, next_step=3, steps=4)
    assert buf.room(version=3) == 4


def test_ordered_take_waits_for_a_lower_index_in_flight():
    buf = GroupBuffer(prompts_per_step=2, max_staleness=1, ordered=True)
    buf.started([0, 1, 2])
    buf.put(group(1, 0) + group(2, 0))
    assert buf.take()[0] is None  # group 0 is still rolling out
    buf.put(group(0, 0))
    assert [g.index for g in buf.take()[0]] == [0, 1]


def test_unordered_take_takes_the_oldest_finished_groups_and_drops_stale_ones():
    buf = GroupBuffer(prompts_per_step=2, max_staleness=1, ordered=False, next_step=3)
    buf.started([0, 5, 6, 7])
    buf.put(group(0, version=1) + group(5, version=3) + group(6, version=2) + group(7, version=3))
    groups, stale = buf.take()
    assert [g.index for g in stale] == [0]  # 3 - 1 = 2 versions behind
    assert [g.index for g in groups] == [6, 5]  # oldest version first, then index
    assert all(3 - s.weight_version <= 1 for g in groups for s in g.samples)


def test_state_round_trips_through_json():
    buf = GroupBuffer(prompts_per_step=1, max_staleness=1, ordered=True)
    buf.started([4])
    s = group(4, 2)
    s[0].token_rewards, s[0].turn_spans, s[0].finish_reason = {3: 0.5}, [(0, 1)], FinishReason.STOP
    buf.put(s)
    again = GroupBuffer(prompts_per_step=1, max_staleness=1, ordered=True)
    again.load_state_dict(json.loads(json.dumps(buf.state_dict())))
    assert again.ready[4].samples == s
    assert sample_from_json(json.loads(json.dumps(sample_to_json(s[0])))) == s[0]


def test_staleness_and_idle_metrics():
    samples = group(0, 3) + group(1, 4)
    assert staleness_metrics(samples, 4) == {
        "weights/staleness_min": 0.0,
        "weights/staleness_mean": 0.5,
        "weights/staleness_max": 1.0,
        "weights/mixed_samples": 0.0,  # rollout.partial: samples whose tokens came from several versions
    }
    m = pipeline_metrics(samples, 4, {"time/step_s": 2.0, "time/rollout_s": 0.5}, rollout_idle_s=4.0)
    assert m["idle/learner"] == 0.25 and m["idle/rollout"] == 1.0 and m["time/learner_wait_s"] == 0.5


def test_pipeline_keys_are_validated_together():
    from relay.config import Config, ConfigError, load_config

    problems = []
    try:
        load_config(
            None,
            [
                "training.mode=fast",
                "training.max_staleness=-1",
                "training.stale_groups=keep",
                "training.groups_per_call=-2",
                "rollout.max_live_episodes=-1",
            ],
        )
    except ConfigError as e:
        problems = e.problems
    keys = ("training.mode", "training.max_staleness", "training.stale_groups", "training.groups_per_call")
    for key in (*keys, "rollout.max_live_episodes"):
        assert any(p.startswith(key) for p in problems), (key, problems)
    assert Config().training.mode == "sync"


def test_a_group_put_twice_is_a_bug_not_a_second_copy():
    """A redone call's groups (a rollout worker died) arrive once; a second copy must never reach a step."""
    import pytest

    buf = GroupBuffer(prompts_per_step=2, max_staleness=1, ordered=False)
    buf.started([0, 1])
    buf.put(group(0, 0))
    with pytest.raises(RuntimeError, match="group 0 is already in the buffer"):
        buf.put(group(0, 0))
