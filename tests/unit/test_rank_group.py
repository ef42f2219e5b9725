"""A rank group's fan-out is declared on the role's methods (`@on_rank_group`, actors/plumbing.py):
every method the driver calls on the learner, reference or critic declares how a group of ranks
runs it, the driver's stand-in classes carry the same declarations as the real ones, and the
group calls every rank or rank 0 alone as declared. No Ray cluster: the ranks are fakes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from relay_trainer.pools import Critic, Learner, Reference
from relay_trainer.rank_group import RankGroup, rank_group_calls

REPO = Path(__file__).resolve().parents[2]
ROLES = {"Learner": Learner, "Reference": Reference, "Critic": Critic}  # the roles create_role may shard


def methods_called_by_name() -> dict[str, list[str]]:
    """{method: ["path:line", ...]} of every `<handle>.<method>.remote(...)` in the driver's code
    (the loop, the steps, the producer, recovery, checkpoints, weights: relay_trainer/ and actors/)."""
    found: dict[str, list[str]] = {}
    for path in [*(REPO / "relay_trainer").rglob("*.py"), *(REPO / "actors").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "remote"
                and isinstance(node.func.value, ast.Attribute)
            ):
                name = node.func.value.attr
                found.setdefault(name, []).append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def public_methods(cls) -> set[str]:
    return {m for m in vars(cls) if not m.startswith("_") and callable(vars(cls)[m])}


def test_every_method_the_driver_calls_on_a_shardable_role_declares_its_fan_out():
    """A method left undeclared is not on a RankGroup at all (AttributeError at its first call),
    so it can never quietly reach rank 0 alone; this finds it before any run does."""
    called = methods_called_by_name()
    assert {"update", "compute_logprobs", "get_weights", "save_shards"} <= set(called)  # the scan sees the calls
    undeclared = [
        f"{role}.{method} (called at {', '.join(called[method][:3])})"
        for role, cls in ROLES.items()
        for method in sorted(public_methods(cls) & set(called))
        if method not in rank_group_calls(cls)
    ]
    assert not undeclared, "declare @on_rank_group(...) on:\n" + "\n".join(undeclared)


@pytest.mark.parametrize("role", sorted(ROLES))
def test_the_driver_stand_ins_carry_the_real_classes_declarations(role):
    import actors.critic
    import actors.learner

    real = {"Learner": actors.learner.Learner, "Reference": actors.learner.Reference, "Critic": actors.critic.Critic}
    assert rank_group_calls(ROLES[role]) == rank_group_calls(real[role])


class FakeRank:
    """A rank's handle: each `.method.remote()` is recorded as (rank, method)."""

    def __init__(self, index: int, log: list):
        self.index, self.log = index, log

    def __getattr__(self, method: str):
        rank = self

        class Method:
            def remote(self, *args, **kwargs):
                rank.log.append((rank.index, method))
                return f"{rank.index}:{method}"

        return Method()


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_rank_group_calls_every_rank_or_rank_zero_as_declared(role):
    log: list = []
    group = RankGroup([FakeRank(i, log) for i in range(3)], ROLES[role])
    calls = rank_group_calls(ROLES[role])
    assert "node_id" in calls and calls["node_id"] == "rank_zero"
    for method, how in sorted(calls.items()):
        log.clear()
        if how == "not_on_group":
            with pytest.raises(AttributeError, match="declares not_on_group"):
                getattr(group, method)
            continue
        assert getattr(group, method).remote() == f"0:{method}"  # rank 0's answer is the group's
        group.peer_refs = []  # the fakes' refs are not Ray's: nothing to check at the next call
        assert log == ([(i, method) for i in range(3)] if how == "every_rank" else [(0, method)]), method
    learner = RankGroup([FakeRank(0, log)], Learner)
    assert learner.update is not None and learner.get_weights is not None
    with pytest.raises(AttributeError, match="has no method 'state'"):
        learner.state.remote(as_bytes=True)  # a rank group checkpoints by shards


def test_an_undeclared_method_is_not_on_the_group():
    class Role:
        def forgotten(self):
            pass

    group = RankGroup([FakeRank(0, [])], Role)
    with pytest.raises(AttributeError, match="declares no @on_rank_group"):
        group.forgotten.remote()


def test_a_declaration_is_one_of_the_three_ways():
    from actors.plumbing import on_rank_group

    with pytest.raises(ValueError, match="not one of"):
        on_rank_group("every")
