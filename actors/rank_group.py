"""A role with several ranks (learner, reference, critic): N actors in one placement group that
form a torch.distributed group with FSDP2 inside (relay/update/fsdp.py). This is each rank's end;
the one handle the driver holds for them is relay_trainer/rank_group.py's RankGroup.
"""

from __future__ import annotations

from actors.plumbing import RelayActor, member_host, on_rank_group, store_host


class RankMember:
    """One rank's end, held by the Learner, Reference or Critic actor: rank 0 binds the group's
    address (loopback when every rank shares its node), then every rank joins. Its torch imports
    are in its methods: the driver reads this module's source and never loads torch."""

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
