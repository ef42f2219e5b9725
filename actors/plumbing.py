"""What every relay actor has, written once: the Ray node it runs on, and its `__repr__`; the
declaration of how a rank group calls a method (`on_rank_group`); and the addresses a member of a
group (a rank group, the weight-broadcast group) binds and joins on.

Every actor class derives from `RelayActor`; the roles with more to share derive from the
classes built on it, each beside the code it plumbs: `RankGroupMember` (actors/rank_group.py) for
the learner, reference and critic, `SendsWeights` and `ReceivesWeights` (actors/weight_ends.py)
for the two ends of the weight sync. relay_trainer/actor_class.py reads the methods of the bases too,
from their source, so the driver starts these classes by name without importing them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import ray

# How a rank group (relay_trainer/rank_group.py) calls a method of its role, declared on the method, as
# verl's @register(dispatch_mode=...) does:
#   every_rank     every rank runs it (the ranks meet in collectives); rank 0's result is the group's
#   rank_zero      rank 0 alone (it alone is in the weight group, or answers for the node)
#   not_on_group   the group has no such method: the group calls it on each rank itself
#                  (listen_for_rank_group, join_rank_group), or only a single actor answers it
#                  (state, load_state: a rank group checkpoints by shards)
# A method of a rank-group role that declares nothing is not on the group either; a unit test
# checks that every method the driver calls on these roles declares one (tests/unit/test_rank_group.py).
RankGroupCall = Literal["every_rank", "rank_zero", "not_on_group"]
RANK_GROUP_CALLS = ("every_rank", "rank_zero", "not_on_group")


def on_rank_group(how: RankGroupCall) -> Callable[[Callable], Callable]:
    """Declare how a rank group calls the decorated method (see RankGroupCall above). The driver,
    which never imports the actor's module, reads the same declaration from its source
    (relay_trainer/actor_class.py)."""
    if how not in RANK_GROUP_CALLS:
        raise ValueError(f"on_rank_group: {how!r} is not one of {RANK_GROUP_CALLS}")

    def declare(method: Callable) -> Callable:
        method.rank_group = how
        return method

    return declare


class RelayActor:
    """`repr_format` is what the dashboard's Repr column and Ray's error messages show, filled in
    from the actor's attributes (`"env-{index}, {calls} calls"`). Each field it names is a class
    attribute, declared once with its starting value: Ray calls __repr__ on the half-built
    instance when __init__ raises, and a repr that raised in turn would hide that error. The
    work then sets the fields as it goes, so reading them never waits on anything."""

    repr_format = ""

    @on_rank_group("rank_zero")
    def node_id(self) -> str:
        """This process's Ray node, so the driver can tell whether every group member shares one."""
        return ray.get_runtime_context().get_node_id()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.repr_format.format_map(_Fields(self))})"


def store_host(one_node: bool) -> str:
    """Where a group's first member binds the group's store: loopback when every member shares its
    node, so nothing listens on an outward interface; else this node's address."""
    return "127.0.0.1" if one_node else ray.util.get_node_ip_address()


def member_host(store: str) -> str:
    """This member's own address in a group whose store listens at `store` (its peers reach it there)."""
    return store if store == "127.0.0.1" else ray.util.get_node_ip_address()


def peak_rss_mb() -> float:
    """This actor process's peak resident memory, in MB (peak_memory_mb: benchmarks/weight_sync.py reads it)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Fields:
    """The actor's attributes as the mapping str.format_map reads."""

    def __init__(self, actor: RelayActor):
        self.actor = actor

    def __getitem__(self, name: str):
        return getattr(self.actor, name)
