"""The broadcast weight group's store takes only entries signed with the run's secret
(relay/weights/signed_store.py): members with the secret join and get the weights bit for bit; a process
with a wrong secret, or a bare TCPStore client writing forged entries, makes the join fail with
ForgedStoreValue instead of connecting to what it wrote."""

from __future__ import annotations

import datetime
import threading

import pytest
import torch
import torch.distributed as dist

from relay.weights.signed_store import ForgedStoreValue, SignedStore
from relay.weights.transfer import BroadcastPlan, BucketMac, ForgedBucket, WeightGroup, listen

SECRET = b"this-run-secret-0123456789abcdef"


def members(secrets_by_rank: dict[int, bytes], sent: dict[str, torch.Tensor], bucket_secret: bytes | None = None):
    """Rank 0 sends `sent` to the others (threads of this process); each rank's received state
    dict, or the error its join or receive raised. `bucket_secret`: what rank 0 signs buckets with
    (as if another process had put bytes on the wire), else the run's."""
    sock = listen("127.0.0.1")
    port, world, plan, out = sock.getsockname()[1], 1 + max(secrets_by_rank), BroadcastPlan.of(sent), {}

    def member(rank: int, secret: bytes) -> None:
        try:
            group = WeightGroup(
                "127.0.0.1", port, rank, world, "gloo", "t", "127.0.0.1", sock if rank == 0 else None, secret=secret
            )
            if rank == 0:
                if bucket_secret is not None:
                    group.bucket_mac = BucketMac(bucket_secret)
                group.send(sent, plan)
            else:
                out[rank] = {name: t.clone() for name, t in group.receive(plan)}
        except Exception as e:  # the test reads it
            out[rank] = e

    threads = [threading.Thread(target=member, args=item, daemon=True) for item in secrets_by_rank.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a member hung"
    sock.detach()  # the store took the descriptor over and closes it itself
    return out


def state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(7, 5, generator=g), "b": torch.randn(3, generator=g).to(torch.bfloat16)}


def test_members_with_the_secret_join_and_receive_bit_exact_weights():
    sent = state_dict()
    out = members({0: SECRET, 1: SECRET, 2: SECRET}, sent)
    for rank in (1, 2):
        assert out[rank].keys() == sent.keys()
        assert all(out[rank][k].dtype == t.dtype and torch.equal(out[rank][k], t) for k, t in sent.items())


def test_a_bucket_not_signed_with_the_secret_is_refused():
    out = members({0: SECRET, 1: SECRET}, state_dict(), bucket_secret=b"not-this-run-secret-0123456789ab")
    assert isinstance(out[1], ForgedBucket) and "bucket 0" in str(out[1])


def test_a_member_with_a_wrong_secret_cannot_join():
    out = members({0: SECRET, 1: b"a-guessed-secret-0123456789abcde"}, state_dict())
    assert isinstance(out[0], ForgedStoreValue) and "relay-weights/t/0/1" in str(out[0])
    assert isinstance(out[1], ForgedStoreValue)  # and it cannot read the learner's entry either


def test_forged_entries_from_a_plain_store_client_fail_the_join_loudly():
    def rogue(port: int) -> None:
        client = dist.TCPStore("127.0.0.1", port, 2, is_master=False, timeout=datetime.timedelta(seconds=30))
        client.set("relay-weights/t/0/1", b"an address of the rogue's choosing")  # where rank 1's address goes

    out = members_with_rank_one_absent(rogue)
    assert isinstance(out[0], ForgedStoreValue)
    assert "not signed with this run's secret" in str(out[0])


def members_with_rank_one_absent(rogue) -> dict:
    """Rank 0 of a two-member group alone; the rogue writes rank 1's entry."""
    sock = listen("127.0.0.1")
    port, out = sock.getsockname()[1], {}

    def learner() -> None:
        try:
            WeightGroup("127.0.0.1", port, 0, 2, "gloo", "t", "127.0.0.1", sock, secret=SECRET)
        except Exception as e:
            out[0] = e

    thread = threading.Thread(target=learner, daemon=True)
    thread.start()
    rogue(port)
    thread.join(timeout=60)
    assert not thread.is_alive()
    sock.detach()  # the store took the descriptor over and closes it itself
    return out


def test_unsigned_and_tampered_values_are_refused_and_signed_ones_read_back():
    store = dist.HashStore()
    signed = SignedStore(store, SECRET)
    signed.set("k", b"value")
    assert signed.get("k") == b"value"
    raw = store.get("k")
    store.set("k", raw[:-1] + b"X")  # the value changed, the signature kept
    with pytest.raises(ForgedStoreValue):
        signed.get("k")
    store.set("k", b"short")  # no signature at all
    with pytest.raises(ForgedStoreValue):
        signed.get("k")
    store.set("other", raw)  # a valid signature moved to another key
    with pytest.raises(ForgedStoreValue):
        signed.get("other")
    with pytest.raises(ValueError):
        SignedStore(store, b"short")
