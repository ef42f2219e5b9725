"""What every relay actor has, written once: the Ray node it runs on, and its `__repr__`; and
the addresses a member of a group (a rank group, the weight-broadcast group) binds and joins on.

Every actor class derives from `RelayActor`; the roles with more to share derive from the
classes built on it, each beside the code it plumbs: `RankGroupMember` (actors/rank_group.py) for
the learner, reference and critic, `SendsWeights` and `ReceivesWeights` (actors/weight_ends.py)
for the two ends of the weight sync. actors/actor_class.py reads the methods of the bases too,
from their source, so the driver starts these classes by name without importing them.
"""

from __future__ import annotations

import ray


class RelayActor:
    """`repr_format` is what the dashboard's Repr column and Ray's error messages show, filled in
    from the actor's attributes (`"env-{index}, {calls} calls"`). Each field it names is a class
    attribute, declared once with its starting value: Ray calls __repr__ on the half-built
    instance when __init__ raises, and a repr that raised in turn would hide that error. The
    work then sets the fields as it goes, so reading them never waits on anything."""

    repr_format = ""

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


class _Fields:
    """The actor's attributes as the mapping str.format_map reads."""

    def __init__(self, actor: RelayActor):
        self.actor = actor

    def __getitem__(self, name: str):
        return getattr(self.actor, name)
