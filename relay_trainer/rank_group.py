"""The one handle the driver holds for a role with several ranks (learner, reference, critic):
N actors in one placement group forming a torch.distributed group with FSDP2 inside; each rank's
end is actors/rank_group.py.

The handle has the methods the role's single actor has, each with `.remote(...)` returning one
object ref, so the driver reads the same for 1 or N ranks. Each method says how the group calls
it, where it is defined (`@on_rank_group`, actors/plumbing.py): most run on every rank (the ranks
meet in collectives) and rank 0's return value is the group's: it gathers the others' rows, and
only it sends weights or writes the Hugging Face folder. The weight-group set-up calls go to
rank 0 alone: it is the learner's member of the learner -> rollout group. A method that
declares neither is not on the group: calling it raises AttributeError, never reaches rank 0 alone.
"""

from __future__ import annotations

import ray

from actors.restarts import restart


class _AllRanks:
    """`group.<method>.remote(...)`: every rank runs the method; rank 0's result is returned."""

    def __init__(self, group: RankGroup, method: str):
        self.group, self.method = group, method

    def remote(self, *args, **kwargs):
        self.group.raise_failed_peers()
        # one copy in the object store, read by every rank, instead of one per call
        args = [a if isinstance(a, ray.ObjectRef) else ray.put(a) for a in args]
        refs = [getattr(rank, self.method).remote(*args, **kwargs) for rank in self.group.ranks]
        self.group.peer_refs += refs[1:]
        return refs[0]


class _RankZero:
    """`group.<method>.remote(...)` for a method only rank 0 runs (it alone is in the weight group)."""

    def __init__(self, group: RankGroup, method: str):
        self.group, self.method = group, method

    def remote(self, *args, **kwargs):
        return getattr(self.group.ranks[0], self.method).remote(*args, **kwargs)


def rank_group_calls(cls: type) -> dict[str, str]:
    """{method: how a rank group calls it} of every method of `cls` (the actor class, or the
    stand-in the driver starts it by) that declares `@on_rank_group`."""
    calls = {}
    for name in dir(cls):
        how = getattr(getattr(cls, name, None), "rank_group", None)
        if how is not None:
            calls[name] = how
    return calls


class RankGroup:
    """The driver's handle on the ranks of `cls` (see the module docstring)."""

    def __init__(self, ranks: list, cls: type):
        self.ranks, self.role_class = ranks, cls.__name__
        self.peer_refs: list = []  # results of ranks 1.. (None): checked for errors at the next call
        self.backend = ""  # torch.distributed's, set by join
        for method, how in rank_group_calls(cls).items():
            if how == "every_rank":
                setattr(self, method, _AllRanks(self, method))
            elif how == "rank_zero":
                setattr(self, method, _RankZero(self, method))

    def __getattr__(self, name: str):
        # only for names the group lacks: a method left undeclared fails here, at its first call
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(
            f"a rank group of {self.__dict__.get('role_class')} has no method {name!r}: the method declares no "
            f"@on_rank_group(...) (actors/plumbing.py), or declares not_on_group"
        )

    def join(self, backend: str) -> None:
        """Form the torch.distributed group (the ranks' constructors done) and shard the models."""
        self.backend, self.peer_refs = backend, []
        nodes = ray.get([r.node_id.remote() for r in self.ranks])
        host, port = ray.get(self.ranks[0].listen_for_rank_group.remote(one_node=len(set(nodes)) == 1))
        world = len(self.ranks)
        ray.get([r.join_rank_group.remote(host, port, i, world, backend) for i, r in enumerate(self.ranks)])

    def restart(self, ranks: list, timeout_s: float) -> bool:
        """Restart `ranks` (killed, each replacement waited for), then form the group again: a
        group that lost a rank has a dead member in its process group, and a survivor may wait
        inside a collective, so every rank not already replaced must be among `ranks`. False when
        a replacement does not answer within `timeout_s`."""
        if not all(restart(ranks, timeout_s)):
            return False
        self.join(self.backend)
        return True

    def raise_failed_peers(self) -> None:
        """Raise the error of a rank other than 0 whose call failed (rank 0's the driver sees)."""
        if self.peer_refs:
            done, self.peer_refs = ray.wait(self.peer_refs, num_returns=len(self.peer_refs), timeout=0)
            ray.get(done)

    def ray_actors(self) -> list:
        """The Ray actors this handle stands for (actors/supervision.py, role_actors)."""
        return list(self.ranks)

    def __repr__(self) -> str:
        return f"RankGroup({len(self.ranks)} ranks)"
