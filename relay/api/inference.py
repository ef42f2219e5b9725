"""Inference from Python on relay's engines: text in, text and token ids out.

    engine = create_inference_engine("tiny", backend="hf")            # or "vllm", "sglang"; config={...}
    output = engine.generate(["2+3="], max_tokens=8, temperature=0.7, top_p=0.9)
    output.sequences   # ["5", ...]                   output.tokens  # np.ndarray (batch, seq_len), padded

    multi_turn = MultiTurnInferenceEngine(engine, max_turns=5, system_prompt="You are a helpful assistant.")
    multi_turn.start_conversation("Hello"); reply = multi_turn.step(max_tokens=32)
    episode = multi_turn.run_episode(environment=my_env, initial_prompt="Start playing.", max_turns=5)

    BatchInferenceManager(engine, batch_size=32).generate_batch(prompts, max_tokens=256)

The engines are relay's rollout engines (relay/engines/, named in relay/config/engine_registry.py),
and run_episode runs an episode through relay's agent loop (relay/agent/loop.py), the one the rollout
workers train on: token-in, token-out, tool calls through the tool manager's parser and registry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from relay.agent.loop import AgentLimits, AgentLoop
from relay.config.engine_registry import ENGINES
from relay.engines import engine_class
from relay.engines.base import Engine, SamplingParams
from relay.envs.base import ResetResult, StepResult
from relay.envs.chat import ChatFormat
from relay.envs.trajectory import Trajectory
from relay.models.resolve import model_folder
from relay.types import Sample

# create_inference_engine's config keys that every engine takes as arguments; the rest pass to the engine untouched
ENGINE_ARGUMENTS = ("dtype", "tokenizer_path", "trust_remote_code")


@dataclass
class GenerationOutput:
    sequences: list[str]  # the generated text of each prompt
    tokens: np.ndarray  # (batch, seq_len) generated token ids, right-padded with pad_token_id
    token_ids: list[list[int]]  # the same, unpadded
    logprobs: list[list[float]]  # the engine's logprob of each generated token
    finish_reasons: list[str]  # "stop" or "length"


class InferenceEngine:
    """A relay engine behind text prompts. `.engine` is the engine itself (token ids in and out)."""

    def __init__(self, engine: Engine, backend: str):
        self.engine, self.backend = engine, backend
        self.tokenizer = engine.tokenizer
        self.chat = ChatFormat(self.tokenizer, None, "auto")  # relay's rendering of messages (relay/envs/chat.py)

    def padded(self, token_ids: list[list[int]]) -> np.ndarray:
        """(batch, longest) int64 array, right-padded with the tokenizer's pad id (else its EOS)."""
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        tokens = np.full((len(token_ids), max((len(t) for t in token_ids), default=0)), pad, dtype=np.int64)
        for i, t in enumerate(token_ids):
            tokens[i, : len(t)] = t
        return tokens

    def generate(
        self,
        prompts: list[str] | str,
        max_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        chat: bool = False,
        seed: int | None = None,
    ) -> GenerationOutput:
        """One completion per prompt. chat=True renders each prompt as a user message through the
        tokenizer's chat template; else the text is tokenized as it is."""
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        if chat:
            ids = [self.chat.prompt_ids([{"role": "user", "content": p}]) for p in prompts]
        else:
            ids = [self.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
        return self.generate_ids(ids, max_tokens, temperature, top_p, seed)

    def generate_ids(
        self, prompt_ids: list[list[int]], max_tokens: int, temperature: float, top_p: float, seed: int | None = None
    ) -> GenerationOutput:
        sampling = SamplingParams(n=1, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
        completions = [group[0] for group in self.engine.generate(prompt_ids, sampling)]
        token_ids = [list(c.token_ids) for c in completions]
        return GenerationOutput(
            sequences=[self.tokenizer.decode(t, skip_special_tokens=True) for t in token_ids],
            tokens=self.padded(token_ids),
            token_ids=token_ids,
            logprobs=[list(c.logprobs) for c in completions],
            finish_reasons=[c.finish_reason for c in completions],
        )


def create_inference_engine(
    model_path: str, backend: str = "hf", config: Mapping[str, Any] | None = None
) -> InferenceEngine:
    """A relay engine on `model_path` (a folder, a hub name, a .gguf, or a shipped name: `tiny`).
    backend: a name in relay/config/engine_registry.py (hf, vllm, sglang). config: dtype,
    trust_remote_code, tokenizer_path, and the engine's own options (vLLM: tensor_parallel_size,
    max_model_len, ...; hf: model.generate's), passed untouched."""
    if backend not in ENGINES:
        raise ValueError(f"create_inference_engine: backend {backend!r} is not one of {', '.join(ENGINES)}")
    config = dict(config or {})
    arguments = {k: config.pop(k) for k in ENGINE_ARGUMENTS if k in config}
    if backend == "hf" and config.get("tensor_parallel_size", 1) == 1:
        config.pop("tensor_parallel_size", None)  # one process: the only size the hf engine has
    if ENGINES[backend].can.max_lora_adapter_rank > 0:
        config.setdefault("lora", None)
    cls = engine_class(backend)
    folder = model_folder(model_path, "model_path")
    return InferenceEngine(cls(folder, **arguments, **config), backend)


# ------------------------------------------------------------------------------ many turns


@dataclass
class EpisodeResult:
    """One episode run_episode ran: the model's turns, the environment's trajectory, the Sample."""

    responses: list[str]  # the model's turns, as text
    trajectory: Trajectory  # states, actions, rewards, dones (with an environment), tool calls
    sample: Sample  # token ids, logprobs, loss mask: what training would read
    total_reward: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {**self.trajectory.summary(), "responses": len(self.responses)}

    def __iter__(self) -> Iterator[str]:
        return iter(self.responses)

    def __len__(self) -> int:
        return len(self.responses)

    def __getitem__(self, i: int) -> str:
        return self.responses[i]


class MultiTurnInferenceEngine:
    """A conversation over an InferenceEngine (start_conversation, step), and whole episodes
    against an environment (run_episode), with tool calls when enable_tools and a tool_manager."""

    def __init__(
        self,
        engine: InferenceEngine,
        max_turns: int = 5,
        system_prompt: str | None = None,
        tool_manager: Any = None,
        enable_tools: bool = False,
        max_total_tokens: int = 512,
    ):
        if enable_tools and tool_manager is None:
            raise ValueError("MultiTurnInferenceEngine: enable_tools=True needs a tool_manager (MultiTurnManager)")
        self.engine, self.max_turns, self.system_prompt = engine, max_turns, system_prompt
        self.tool_manager, self.enable_tools = tool_manager, enable_tools
        self.max_total_tokens = max_total_tokens
        self.messages: list[dict[str, str]] = []

    # -- a conversation, one turn at a time

    def start_conversation(self, initial_prompt: str) -> None:
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        self.messages = [*system, {"role": "user", "content": initial_prompt}]

    def add_message(self, role: str, content: str) -> None:
        self.messages.append({"role": role, "content": content})

    def step(self, max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0) -> str:
        """The model's next reply to the conversation so far (appended to it). With tools on, a
        tool call in the reply is run and its result added as the next message."""
        if not self.messages:
            raise ValueError("MultiTurnInferenceEngine.step: call start_conversation(prompt) first")
        ids = self.engine.chat.prompt_ids(self.messages)
        reply = self.engine.generate_ids([ids], max_tokens, temperature, top_p).sequences[0]
        self.add_message("assistant", reply)
        if self.enable_tools:
            turn = self.tool_manager.step(reply, None)
            if turn.observation:
                self.add_message("tool" if self.tool_manager.parser.result_role else "user", turn.observation)
        return reply

    # -- a whole episode, through relay's agent loop

    def run_episode(
        self,
        environment: Any = None,
        initial_prompt: str | None = None,
        max_turns: int | None = None,
        max_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> EpisodeResult:
        """One episode: the environment's reset() observation (after initial_prompt, when given) is
        the first user message; each model turn is a tool call (with tools on) or the environment's
        action, whose observation is the next message, until done or max_turns."""
        turns = max_turns or self.max_turns
        manager = self.tool_manager if self.enable_tools else None
        limits = AgentLimits(
            max_turns=turns,
            max_tool_turns=turns if manager is not None else 0,
            max_tokens_per_turn=max_tokens,
            max_total_tokens=max(self.max_total_tokens, max_tokens),
        )
        env_calls: dict[str, Any] = {}
        if environment is not None:
            env_calls = {"env_reset": _reset_with(environment, initial_prompt), "env_step": _step_with(environment)}
        loop = AgentLoop(
            self.engine.engine,
            self.engine.tokenizer,
            limits,
            parser=manager.parser if manager is not None else None,
            run_tools=(lambda calls: [manager.registry.call(c) for c in calls]) if manager is not None else None,
            tool_schemas=manager.registry.schemas() if manager is not None else None,
            system_prompt=self.system_prompt,
            **env_calls,
        )
        row = {"prompt": initial_prompt or ""}
        sampling = SamplingParams(n=1, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
        sample = loop.run([row], sampling)[0]
        trajectory = Trajectory.from_sample(sample)
        return EpisodeResult(list(sample.turn_texts), trajectory, sample, float(sum(trajectory.rewards)))


def _reset_with(environment: Any, initial_prompt: str | None):
    def reset(ids: list[str], rows: list[dict]) -> list[ResetResult]:
        observation = str(environment.reset())
        if initial_prompt:
            observation = f"{initial_prompt}\n\n{observation}" if observation else initial_prompt
        prefix = environment.get_prompt_prefix() if hasattr(environment, "get_prompt_prefix") else ""
        return [ResetResult(observation=observation, prompt_prefix=prefix or "") for _ in ids]

    return reset


def _step_with(environment: Any):
    def step(ids: list[str], actions: list[str]) -> list[StepResult]:
        results = []
        for action in actions:
            observation, reward, done, info = environment.step(action)
            results.append(StepResult(str(observation), float(reward), bool(done), dict(info or {})))
        return results

    return step


class BatchInferenceManager:
    """Many prompts through one engine, batch_size at a time, in order."""

    def __init__(self, engine: InferenceEngine, batch_size: int = 32):
        if batch_size < 1:
            raise ValueError(f"BatchInferenceManager: batch_size must be >= 1, got {batch_size}")
        self.engine, self.batch_size = engine, batch_size

    def generate_batch(self, prompts: list[str], max_tokens: int = 256, **sampling: Any) -> GenerationOutput:
        outputs = [
            self.engine.generate(prompts[i : i + self.batch_size], max_tokens=max_tokens, **sampling)
            for i in range(0, len(prompts), self.batch_size)
        ]
        token_ids = [t for o in outputs for t in o.token_ids]
        return GenerationOutput(
            sequences=[s for o in outputs for s in o.sequences],
            tokens=self.engine.padded(token_ids),
            token_ids=token_ids,
            logprobs=[lp for o in outputs for lp in o.logprobs],
            finish_reasons=[r for o in outputs for r in o.finish_reasons],
        )
