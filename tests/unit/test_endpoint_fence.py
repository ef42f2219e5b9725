"""Requests outside episodes against weight loads (relay/endpoint/fence.py), made deterministic with
events: a request that arrives during a load waits for it and is generated on the new weights; a
load waits for the engine call in flight, then goes before the requests waiting; every reply says
which weights generated it (`weight_version`, x-relay-weight-version), through the real `openai`
client. Without the fence, the first case answers from weights half loaded."""

from __future__ import annotations

import copy
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import torch

from relay.endpoint.fence import EngineFence, FencedEngine
from relay.endpoint.server import EndpointServer
from relay.engines.base import Completion, SamplingParams
from relay.engines.hf import HFEngine
from relay.models.tokenizer import build_tiny_tokenizer

WAIT_S = 30.0


class TwoHalvesEngine:
    """Weights `a` and `b`, loaded one at a time from the stream given; each generated token's
    logprob tells a weight's value (-1 - a, -1 - b), so a reply from half-loaded weights shows.
    `hold`: generate waits for it (cleared: the next generate blocks), `entered` says it did."""

    def __init__(self):
        self.tokenizer = copy.deepcopy(build_tiny_tokenizer())
        self.a = self.b = 0.0
        self.weight_version = 0
        self.hold, self.entered = threading.Event(), threading.Event()
        self.hold.set()

    def generate(self, prompts, sampling):
        self.entered.set()
        assert self.hold.wait(WAIT_S)
        ids = [5, 6][: sampling.max_tokens]
        return [[Completion(ids, [-1 - self.a, -1 - self.b][: len(ids)], "length")] for _ in prompts]

    def update_weights(self, weights, version):
        for name, value in weights:
            setattr(self, name, value)
        self.weight_version = version


def paused_stream(value: float, half: threading.Event, go_on: threading.Event):
    """Weights a, then (once `go_on` is set) b: `half` is set while the engine holds only a."""
    yield "a", value
    half.set()
    assert go_on.wait(WAIT_S)
    yield "b", value


@pytest.fixture
def served():
    engine = TwoHalvesEngine()
    server = EndpointServer(engine, max_tokens=2, batch_wait_s=0.001)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=server.token, max_retries=0)
    threads = ThreadPoolExecutor(4)
    yield engine, server, client, threads
    engine.hold.set()
    threads.shutdown(wait=True)
    server.shutdown()


def eventually(condition, timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def ask(client):
    """A completions request outside episodes: (its logprobs, the weight version it names)."""
    raw = client.completions.with_raw_response.create(model="m", prompt=[3], max_tokens=2, logprobs=0)
    reply = raw.parse()
    assert raw.headers["x-relay-weight-version"] == str(reply.weight_version)
    return reply.choices[0].logprobs.token_logprobs, reply.weight_version


def test_a_request_during_a_weight_load_waits_for_it(served):
    engine, server, client, threads = served
    half, go_on = threading.Event(), threading.Event()
    load = threads.submit(server.engine.update_weights, paused_stream(1.0, half, go_on), 1)
    assert half.wait(WAIT_S) and (engine.a, engine.b) == (1.0, 0.0)  # the engine holds half the new weights
    reply = threads.submit(ask, client)
    assert server.engine.fence.wait_until(lambda f: f.generates_waiting == 1)  # the request is at the fence
    assert not reply.done() and not engine.entered.is_set() and server.engine.fence.loading
    go_on.set()
    load.result(WAIT_S)
    assert reply.result(WAIT_S) == ([-2.0, -2.0], 1)  # all new weights, and it says so


def test_a_load_waits_for_the_call_in_flight_then_goes_first(served):
    engine, server, client, threads = served
    engine.hold.clear()
    first = threads.submit(ask, client)
    assert engine.entered.wait(WAIT_S)  # generating, on version 0
    load = threads.submit(server.engine.update_weights, [("a", 1.0), ("b", 1.0)], 1)
    assert server.engine.fence.wait_until(lambda f: f.loads_waiting == 1)
    assert engine.weight_version == 0 and engine.a == 0.0  # nothing loaded under the call
    second = threads.submit(ask, client)  # arrives while the load waits: it comes after the load
    assert eventually(lambda: len(server.queue.queue) == 1)  # queued behind the call in flight
    engine.hold.set()
    assert first.result(WAIT_S) == ([-1.0, -1.0], 0)
    load.result(WAIT_S)
    assert second.result(WAIT_S) == ([-2.0, -2.0], 1)


def test_the_fence_is_reentrant_on_one_thread():
    """rollout.partial loads staged weights between two chunks of the rollout's own generate."""
    fence = EngineFence()
    with fence.generating():
        with fence.loading_weights():
            assert fence.loading
        assert not fence.loading

    def other_thread():
        with fence.loading_weights():
            pass

    other = threading.Thread(target=other_thread)
    other.start()
    other.join(WAIT_S)
    assert not other.is_alive()  # free again for another thread


def test_replies_name_the_weights_that_generated_them(tiny_model_path):
    torch.set_num_threads(1)
    engine = HFEngine(tiny_model_path)
    server = EndpointServer(engine, max_tokens=4)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=server.token, max_retries=0)
        chat = lambda c: c.chat.completions.with_raw_response.create(  # noqa: E731
            model="m", messages=[{"role": "user", "content": "12+34"}], temperature=0
        )
        raw = chat(client)
        assert raw.headers["x-relay-weight-version"] == "0" and raw.parse().weight_version == 0
        server.engine.update_weights(dict(engine.model.state_dict()), version=3)
        assert chat(client).parse().weight_version == 3
        server.open(["v"], SamplingParams(temperature=1.0, seed=1))
        try:
            in_episode = openai.OpenAI(base_url=server.episode_url("v"), api_key=server.token, max_retries=0)
            raw = chat(in_episode)
        finally:
            [call] = server.close(["v"])["v"].calls
        assert raw.headers["x-relay-weight-version"] == "3" and call.choices[0].version == 3
    finally:
        server.shutdown()


def test_a_rollout_worker_that_serves_fences_its_engine(tiny_model_path):
    """The worker's own generate, the endpoint's and its weight loads share one fence."""
    from actors.rollout import RolloutWorker
    from relay.config import load_config
    from relay.config.role_settings import RolloutSettings
    from relay.weights.transfer import WeightPayload

    cfg = load_config(None, ["endpoint.enabled=true", "endpoint.host=127.0.0.1"])
    worker = RolloutWorker(RolloutSettings.of(cfg), tiny_model_path, worker_index=0, num_threads=1, endpoint_token="k")
    try:
        assert isinstance(worker.engine, FencedEngine)
        assert worker.agent.engine is worker.engine and worker.endpoint.engine is worker.engine
        inner, hold, entered = worker.engine.engine, threading.Event(), threading.Event()
        generate = inner.generate

        def held(*args, **kwargs):
            entered.set()
            assert hold.wait(WAIT_S)
            return generate(*args, **kwargs)

        inner.generate = held
        with ThreadPoolExecutor(2) as threads:
            client = openai.OpenAI(base_url=worker.endpoint.url + "/v1", api_key="k", max_retries=0)
            reply = threads.submit(client.completions.create, model="m", prompt="12+34=", max_tokens=2, temperature=0)
            assert entered.wait(WAIT_S)
            payload = WeightPayload.of(dict(inner.model.state_dict()))
            load = threads.submit(worker.update_weights, payload, 5)
            assert worker.engine.fence.wait_until(lambda f: f.loads_waiting == 1)
            assert worker.engine.weight_version == 0
            hold.set()
            assert reply.result(WAIT_S).weight_version == 0 and load.result(WAIT_S) >= 0
        assert worker.engine.weight_version == 5 == worker.weights_version
    finally:
        worker.endpoint.shutdown()


def test_rollout_partial_loads_staged_weights_inside_its_own_fenced_generate(tiny_model_path):
    """Staged weights load between two chunks of the rollout's generate, which holds the fence:
    the same thread goes on (no deadlock), and outside requests wait for both."""
    from actors.rollout import RolloutWorker
    from relay.config import load_config
    from relay.config.role_settings import RolloutSettings
    from relay.envs.arithmetic import make_rows
    from relay.weights.transfer import WeightPayload

    overrides = ["training.mode=async", "rollout.partial=true", "rollout.partial_chunk=1", "rollout.n=2"]
    cfg = load_config(None, [*overrides, "endpoint.enabled=true", "endpoint.host=127.0.0.1"])
    worker = RolloutWorker(RolloutSettings.of(cfg), tiny_model_path, worker_index=0, num_threads=1)
    try:
        payload = WeightPayload.of(dict(worker.engine.engine.model.state_dict()))
        assert worker.update_weights(payload, 1) == 0.0  # staged for the rollout's next pause
        done: list = []
        rollout = threading.Thread(target=lambda: done.append(worker.rollout(make_rows(2, 0, 2), 0, 0)), daemon=True)
        rollout.start()
        rollout.join(WAIT_S)
        assert done, "the rollout did not finish"
        samples, _ = done[0]
        assert worker.staged.loads == 1 and worker.weights_version == 1 == worker.engine.weight_version
        assert any(1 in s.token_versions for s in samples)
    finally:
        worker.endpoint.shutdown()


def test_a_colocated_worker_holds_the_fence_while_the_learner_uses_the_module(tiny_model_path):
    """resources.colocate: the engine generates from the learner's own module, which an update
    changes in place: an outside request waits for the update and names its version."""
    from actors.colocated import ColocatedWorker
    from relay.config import load_config
    from relay.config.role_settings import ColocatedSettings

    cfg = load_config(None, ["resources.colocate=true", "endpoint.enabled=true", "endpoint.host=127.0.0.1"])
    worker = ColocatedWorker(ColocatedSettings.of(cfg), tiny_model_path, 1, endpoint_token="k")
    server = worker.worker.endpoint
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        with ThreadPoolExecutor(1) as threads:
            with worker.module_in_use():  # as update() holds it
                reply = threads.submit(client.completions.create, model="m", prompt="12+34=", max_tokens=2)
                assert server.engine.fence.wait_until(lambda f: f.generates_waiting == 1)
                worker.use_trained_weights(4)
            assert reply.result(WAIT_S).weight_version == 4
    finally:
        server.shutdown()
