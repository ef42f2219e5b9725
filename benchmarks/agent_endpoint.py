"""What the OpenAI-compatible endpoint costs: per call against a direct engine call, and throughput
with concurrent agent-program episodes against the same work as batched engine calls.

    .venv/bin/python benchmarks/agent_endpoint.py [--rounds 30] [--episodes 64] [--calls 2]

One process, the tiny model on the HF engine, one torch thread. Per call: one chat request through
the real `openai` client in an episode (template, HTTP, batcher, token record, reply) against
`engine.generate` on the same prompt ids with the same sampling; the two take turns call by call,
and medians are reported (these machines slow down in stretches: docs/benchmarks/README). Throughput:
`--episodes` agent programs at once (plain functions on threads, then `async def` ones on one event
loop), each making `--calls` chat calls that continue its history (relay/endpoint/program.py, as the
EnvPool runs them), against the same number of prompts generated
as one batched engine call per turn (what relay's own agent loop does).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from relay.endpoint.program import run_agent_programs
from relay.endpoint.server import EndpointServer
from relay.engines.base import SamplingParams
from relay.engines.hf import HFEngine
from relay.envs.chat import ChatFormat
from relay.models.shipped import shipped_model

SAMPLING = SamplingParams(temperature=1.0, max_tokens=6, seed=0)


def agent(calls: int, asynchronous: bool = False):
    def run(client, row):
        messages = [{"role": "user", "content": row["prompt"]}]
        for _ in range(calls):
            reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=6)
            messages += [reply.choices[0].message, {"role": "user", "content": "Again."}]
        return 1.0

    async def run_async(client, row):
        messages = [{"role": "user", "content": row["prompt"]}]
        for _ in range(calls):
            reply = await client.chat.completions.create(model="policy", messages=messages, max_tokens=6)
            messages += [reply.choices[0].message, {"role": "user", "content": "Again."}]
        return 1.0

    return run_async if asynchronous else run


def per_call(engine: HFEngine, server: EndpointServer, rounds: int) -> dict:
    import openai

    messages = [{"role": "user", "content": "12+34"}]
    prompt = ChatFormat(engine.tokenizer, None, "chat").prompt_ids(messages)
    server.open(["one"], SAMPLING)
    client = openai.OpenAI(base_url=server.episode_url("one"), api_key=server.token, max_retries=0)
    direct, endpoint, direct_cpu, endpoint_cpu = [], [], [], []
    for _ in range(3):  # warm both paths
        engine.generate([prompt], SAMPLING)
        client.chat.completions.create(model="policy", messages=messages)
    for _ in range(rounds):
        # wall-clock, and this process's CPU time (every thread's: client, HTTP server, engine), which a
        # loaded machine's scheduling waits do not inflate
        t, c = time.perf_counter(), time.process_time()
        engine.generate([prompt], SAMPLING)
        direct.append(time.perf_counter() - t)
        direct_cpu.append(time.process_time() - c)
        t, c = time.perf_counter(), time.process_time()
        client.chat.completions.create(model="policy", messages=messages)
        endpoint.append(time.perf_counter() - t)
        endpoint_cpu.append(time.process_time() - c)
    server.close(["one"])
    ms = lambda xs: round(statistics.median(xs) * 1000, 2)  # noqa: E731
    return {
        "direct_ms": ms(direct),
        "endpoint_ms": ms(endpoint),
        "overhead_ms": round(ms(endpoint) - ms(direct), 2),
        "direct_cpu_ms": ms(direct_cpu),
        "endpoint_cpu_ms": ms(endpoint_cpu),
        "overhead_cpu_ms": round(ms(endpoint_cpu) - ms(direct_cpu), 2),
    }


def throughput(engine: HFEngine, server: EndpointServer, episodes: int, calls: int, rounds: int) -> dict:
    fmt = ChatFormat(engine.tokenizer, None, "chat")
    rows = [{"prompt": f"{10 + i % 80}+{20 + i % 70}"} for i in range(episodes)]
    through, through_async, direct, cpu = [], [], [], {}
    for r in range(rounds):
        for asynchronous, times in ((False, through), (True, through_async)):
            ids = [f"r{r}-{asynchronous}-{i}" for i in range(episodes)]
            server.open(ids, SAMPLING)
            before = server.queue.batches
            t, c = time.perf_counter(), time.process_time()
            outcomes = run_agent_programs(
                agent(calls, asynchronous),
                [(e, rows[i], server.episode_url(e)) for i, e in enumerate(ids)],
                server.token,
            )
            times.append(time.perf_counter() - t)
            cpu.setdefault(asynchronous, []).append(time.process_time() - c)
            batches = server.queue.batches - before
            records = server.close(ids)
            assert all(o.error is None for o in outcomes) and all(len(rec.calls) == calls for rec in records.values())
        # the same turns as batched engine calls: each turn's prompts continue the last turn's tokens
        t, c = time.perf_counter(), time.process_time()
        prompts = [fmt.prompt_ids([{"role": "user", "content": row["prompt"]}]) for row in rows]
        for turn in range(calls):
            out = engine.generate(prompts, SAMPLING)
            if turn + 1 < calls:
                again = fmt.observation_ids([{"role": "user", "content": "Again."}], engine.tokenizer.eos_token_id)
                prompts = [p + group[0].token_ids + again for p, group in zip(prompts, out)]
        direct.append(time.perf_counter() - t)
        cpu.setdefault("direct", []).append(time.process_time() - c)
    e, a, d = statistics.median(through), statistics.median(through_async), statistics.median(direct)
    return {
        "episodes": episodes,
        "calls_per_episode": calls,
        "endpoint_s": round(e, 3),
        "endpoint_calls_per_s": round(episodes * calls / e, 1),
        "endpoint_async_s": round(a, 3),
        "endpoint_async_calls_per_s": round(episodes * calls / a, 1),
        "engine_calls_per_round": batches,
        "batched_engine_s": round(d, 3),
        "batched_calls_per_s": round(episodes * calls / d, 1),
        "cpu_s": {
            k: round(statistics.median(v), 3)
            for k, v in (("sync", cpu[False]), ("async", cpu[True]), ("batched", cpu["direct"]))
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30, help="per-call timings (each contender once per round)")
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--calls", type=int, default=2, help="chat calls per episode")
    ap.add_argument("--throughput-rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    engine = HFEngine(str(shipped_model("tiny")))
    server = EndpointServer(engine, max_tokens=6, max_total_tokens=512)
    try:
        result = {
            "per_call": per_call(engine, server, args.rounds),
            "concurrent": throughput(engine, server, args.episodes, args.calls, args.throughput_rounds),
        }
    finally:
        server.shutdown()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
