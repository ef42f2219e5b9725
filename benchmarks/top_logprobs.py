"""What top-k logprobs cost when asked for, and that they cost nothing when not.

    .venv/bin/python benchmarks/top_logprobs.py [--rounds 20]

One process, the tiny model on the HF engine, one torch thread. Engine: one generate of 16 prompts
x 8 samples x 16 new tokens with SamplingParams.top_logprobs = 0, 5 and 20, taking turns round by
round (medians); k = 0 runs none of the top-k code, and its tokens and logprobs are checked equal to
k = 20's. Endpoint: chat and completions requests (8 samples each) through the real `openai`
client with k = 0 and 20 (the alternatives' texts decoded, laid out, sent and parsed), taking turns.
CPU time is the process's, every thread's (client, HTTP server, engine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace

import torch

from relay.endpoint.server import EndpointServer
from relay.engines.base import SamplingParams
from relay.engines.hf import HFEngine
from relay.envs.arithmetic import make_rows
from relay.models.shipped import shipped_model
from relay.models.tiny import encode_chat

SAMPLING = SamplingParams(n=8, temperature=1.0, max_tokens=16, seed=0)
KS = (0, 5, 20)


def engine_cost(engine: HFEngine, rounds: int) -> dict:
    prompts = [encode_chat(engine.tokenizer, row["prompt"]) for row in make_rows(16, seed=3, digits=2)]
    times: dict[int, list[float]] = {k: [] for k in KS}
    outputs = {}
    for _ in range(2):  # warm
        for k in KS:
            engine.generate(prompts, replace(SAMPLING, top_logprobs=k))
    for _ in range(rounds):
        for k in KS:
            t = time.process_time()
            outputs[k] = engine.generate(prompts, replace(SAMPLING, top_logprobs=k))
            times[k].append(time.process_time() - t)
    same = [[(c.token_ids, c.logprobs) for c in g] for g in outputs[0]] == [
        [(c.token_ids, c.logprobs) for c in g] for g in outputs[20]
    ]
    tokens = sum(len(c.token_ids) for g in outputs[0] for c in g)
    ms = {k: statistics.median(v) * 1000 for k, v in times.items()}
    return {
        "tokens_per_call": tokens,
        **{f"top_{k}_cpu_ms": round(ms[k], 2) for k in KS},
        **{f"top_{k}_cost": f"{100 * (ms[k] / ms[0] - 1):+.1f}%" for k in KS[1:]},
        "same_tokens_and_logprobs": same,
    }


def endpoint_cost(server: EndpointServer, rounds: int) -> dict:
    """Chat (top_logprobs) and completions (logprobs) requests of 8 samples, with k = 0 and 20."""
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key=server.token, max_retries=0)
    # "a b c d": a prompt the tiny model continues for most of the 16 tokens (its task's answers are two)
    common = dict(model="m", max_tokens=16, n=8, seed=1)
    chat = lambda k: client.chat.completions.create(  # noqa: E731
        messages=[{"role": "user", "content": "a b c d"}], logprobs=True, top_logprobs=k, **common
    )
    text = lambda k: client.completions.create(prompt="a b c d", logprobs=k, **common)  # noqa: E731
    result = {}
    for route, call in (("chat", chat), ("completions", text)):
        times: dict[int, list[float]] = {0: [], 20: []}
        for _ in range(2):
            call(0), call(20)
        tokens = []
        for _ in range(rounds):
            for k in times:
                t = time.process_time()
                reply = call(k)
                times[k].append(time.process_time() - t)
                tokens.append(reply.usage.completion_tokens)
        ms = {k: statistics.median(v) * 1000 for k, v in times.items()}
        result[route] = {
            "tokens_per_request": statistics.median(tokens),
            "top_0_cpu_ms": round(ms[0], 2),
            "top_20_cpu_ms": round(ms[20], 2),
            "cost_ms": round(ms[20] - ms[0], 2),
        }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    engine = HFEngine(str(shipped_model("tiny")))
    server = EndpointServer(engine, max_tokens=16)
    try:
        result = {"engine": engine_cost(engine, args.rounds), "endpoint": endpoint_cost(server, args.rounds)}
    finally:
        server.shutdown()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
