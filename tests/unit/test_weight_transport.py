"""Weight-sync encodings (relay/weights/transfer.py): the object-store payload, and the broadcast group
with the gloo backend in plain processes; and which transport `auto` picks (relay_trainer/weights.py)."""

from __future__ import annotations

import io
import multiprocessing as mp

import torch

from relay.config import ResourcesConfig, RoleResources
from relay.weights.transfer import BroadcastPlan, WeightGroup, WeightPayload, listen

SECRET = b"relay-test-secret-0123456789abcdef"  # a run draws its own (relay_trainer/weights.py)


def state_dict(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(11, 6, generator=g)
    return {
        "embed.weight": embed,
        "norm.weight": torch.randn(6, generator=g).to(torch.bfloat16),  # odd byte counts and dtypes
        "count": torch.tensor([3, 1, 4], dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "big.weight": torch.randn(40, 40, generator=g),
        "lm_head.weight": embed,  # tied: the same tensor under two names
    }


def test_plan_buckets_align_and_dedupe_tied_weights():
    sd = state_dict(0)
    plan = BroadcastPlan.of(sd, bucket_limit=4096)
    assert plan.aliases == {"lm_head.weight": "embed.weight"}
    names = [s.name for bucket in plan.buckets for s in bucket]
    assert sorted(names) == sorted(set(sd) - {"lm_head.weight"})
    # big.weight (6400 bytes) would overflow the 4096-byte limit: it starts a bucket of its own
    assert [[s.name for s in bucket] for bucket in plan.buckets][1:] == [["big.weight"]]
    for bucket, size in zip(plan.buckets, plan.bucket_bytes):
        assert all(s.offset % 16 == 0 and s.offset + s.nbytes <= size for s in bucket)


def _receiver(rank: int, world: int, port: int, plan, queue) -> None:
    group = WeightGroup("127.0.0.1", port, rank, world, "gloo", tag="test", local_host="127.0.0.1", secret=SECRET)
    for round_ in range(3):
        stream = group.receive(plan)
        if round_ == 1:  # a consumer that stops after one tensor (an engine error): drain keeps the group in step
            next(iter(stream))
            stream.drain()
            continue
        pairs = [(k, v.clone()) for k, v in stream]  # clone: views die with their bucket
        names = [k for k, _ in pairs]
        assert names.index("lm_head.weight") == names.index("embed.weight") + 1  # tied names travel together
        # as bytes: a tensor put on the queue as is passes a file descriptor that only a live process
        # can hand over, and this one may have exited by the time the test reads it
        buffer = io.BytesIO()
        torch.save(dict(pairs), buffer)
        queue.put((rank, buffer.getvalue()))


def test_gloo_broadcast_delivers_every_tensor_bit_exactly():
    ctx = mp.get_context("spawn")
    sock = listen("127.0.0.1")
    port = sock.getsockname()[1]
    first, second = state_dict(1), state_dict(2)
    plan = BroadcastPlan.of(first, bucket_limit=4096)
    queue = ctx.Queue()
    procs = [ctx.Process(target=_receiver, args=(rank, 3, port, plan, queue)) for rank in (1, 2)]
    for p in procs:
        p.start()
    group = WeightGroup(
        "127.0.0.1", port, 0, 3, "gloo", tag="test", local_host="127.0.0.1", listen_socket=sock, secret=SECRET
    )
    group.send(first, plan)
    group.send(state_dict(9), plan)  # read partly, then drained
    group.send(second, plan)  # the group is still in step
    got = [queue.get(timeout=120) for _ in range(4)]
    for p in procs:
        p.join(timeout=60)
    for rank in (1, 2):
        rounds = [torch.load(io.BytesIO(sd)) for r, sd in got if r == rank]
        for sent, received in zip((first, second), rounds):
            assert received.keys() == sent.keys()
            for name, t in sent.items():
                assert received[name].dtype == t.dtype and torch.equal(received[name], t), name


def test_object_store_payload_round_trips_every_dtype_and_keeps_ties():
    import pickle

    sd = state_dict(3)
    payload = pickle.loads(pickle.dumps(WeightPayload.of(sd)))  # as the object store carries it
    assert set(payload.arrays) == set(sd) - {"lm_head.weight"} and payload.bf16 == {"norm.weight"}
    assert payload.nbytes == sum(t.numel() * t.element_size() for name, t in sd.items() if name != "lm_head.weight")
    got = payload.tensors()
    assert got.keys() == sd.keys()
    assert all(got[k].dtype == t.dtype and torch.equal(got[k], t) for k, t in sd.items())
    assert got["lm_head.weight"] is got["embed.weight"]


def test_auto_picks_broadcast_only_between_whole_gpus():
    from relay_trainer.weights import broadcast_backend, uses_broadcast

    def res(learner_gpus, rollout_gpus, sync="auto"):
        return ResourcesConfig(
            learner=RoleResources(gpus=learner_gpus), rollout=RoleResources(gpus=rollout_gpus), weight_sync=sync
        )

    assert not uses_broadcast(res(0, 0)) and not uses_broadcast(res(0.5, 0.5)) and not uses_broadcast(res(1, 0))
    assert uses_broadcast(res(1, 1)) and broadcast_backend(res(1, 1)) == "nccl"
    assert uses_broadcast(res(0.5, 0.5, "broadcast")) and broadcast_backend(res(0.5, 0.5)) == "gloo"
    assert not uses_broadcast(res(1, 1, "object_store"))
