"""A role with several ranks (learner, reference, critic): N actors in one placement group that
form a torch.distributed group with FSDP2 inside (relay/update/fsdp.py), and the one handle the driver
holds for them.

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

from actors.plumbing import RelayActor, member_host, on_rank_group, store_host
from actors.restarts import restart


class RankMember:
    """One rank's end, held by the Learner, Reference or Critic actor: rank 0 binds the group's
    address (loopback when every rank shares its node), then every rank joins. Its torch imports
    are in its methods: the driver imports this module for RankGroup and never loads torch."""

    def __init__(self):
        self.rank, self.world_size, self.socket = 0, 1, None
        self.sharded = False  # joined a rank group: the actor's model is FSDP-sharded

    def listen(self, one_node: bool) -> tuple[str, int]:
        from relay.weights.transfer import listen

        host = store_host(one_node)
        self.socket = listen(host)
        return host, self.socket.getsockname()[1]

    def join(self, host: str, port: int, rank: int, world_size: int, backend: str) -> None:
        from relay.update.fsdp import init_rank_group

        init_rank_group(host, port, rank, world_size, backend, member_host(host), listen_socket=self.socket)
        self.rank, self.world_size, self.sharded = rank, world_size, True


class RankGroupMember(RelayActor):
    """The Learner, the Reference and the Critic: one actor, or one rank of their role's group.
    Each holds `ranks` (its RankMember), `model`, `device` and `training` (the config section
    whose FSDP options shard the model). Once the rank joins, its model is sharded and
    `_after_sharding` remakes what was built on the whole parameters (the optimizer, ...)."""

    @on_rank_group("not_on_group")  # RankGroup.join calls it on rank 0
    def listen_for_rank_group(self, one_node: bool) -> tuple[str, int]:
        return self.ranks.listen(one_node)

    @on_rank_group("not_on_group")  # RankGroup.join calls it on each rank, with its rank
    def join_rank_group(self, host: str, port: int, rank: int, world_size: int, backend: str) -> None:
        from relay.update.fsdp import shard_model

        self.ranks.join(host, port, rank, world_size, backend)
        shard_model(self.model, self.training, self.device)
        self._after_sharding(rank)

    def _after_sharding(self, rank: int) -> None:
        """Nothing by default (the Reference's frozen model needs nothing more)."""


class UpdatingRankGroupMember(RankGroupMember):
    """The Learner and the Critic: they train their model, with an optimizer made again over the
    sharded parameters, and show how the last update went (fields of their `repr_format`)."""

    updates, tokens_per_s, update_seconds = 0, 0.0, None

    @property
    def last_update(self) -> str:
        return "no update yet" if self.update_seconds is None else f"last update {self.update_seconds:.2f} s"

    def _after_sharding(self, rank: int) -> None:
        self._make_optimizer()


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

    def __repr__(self) -> str:
        return f"RankGroup({len(self.ranks)} ranks)"
