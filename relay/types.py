"""The one record type that crosses actors (Sample) and its padded tensor view (Batch).

Layout: prompts left-padded to P, responses right-padded to R, so the response
of every row starts at column P and the learner slices logits[:, P-1 : P-1+R].
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a Batch is built or sliced: processes that only pass Samples
    import torch  # (an EnvPool scoring with a reward function) never pay its seconds and memory


class FinishReason(enum.StrEnum):
    """Why an episode ended. str-valued: `FinishReason.STOP == "stop"`, and metric keys and logs
    show the value."""

    STOP = "stop"  # the model ended (EOS, stop token or stop string), or the environment said done
    LENGTH = "length"  # the turn reached rollout.max_tokens_per_turn (single-turn: max_new_tokens)
    MAX_TURNS = "max_turns"  # no model turn left to read a tool result or an observation with
    BUDGET = "budget"  # the episode's response-token budget cut a turn, or left no room after an observation
    ENV_ERROR = "env_error"  # the environment raised (the error is in meta["env"]["error"])


@dataclass
class Sample:
    """One episode: single-turn, with tools or with an environment, made by the agent loop
    (relay/agent/loop.py), so every path fills the same fields with the same meaning."""

    prompt_ids: list[int]
    # Everything after the prompt: model tokens and (multi-turn) observation tokens, exactly as
    # the engine saw and produced them. Never re-tokenized from text.
    response_ids: list[int] = field(default_factory=list)
    rollout_logprobs: list[float] = field(default_factory=list)  # per response token; 0 where loss_mask=0
    loss_mask: list[int] = field(default_factory=list)  # 1 on model tokens, 0 on observations
    reward: float = 0.0
    # Why the reward function gave no usable reward (it raised, or returned NaN, inf or a non-number):
    # such a sample is counted and never trained on (relay/envs/scoring.py neutralizes it).
    reward_error: str | None = None
    group_id: int = 0  # samples drawn from the same prompt share it (GRPO / RLOO groups)
    weight_version: int = 0  # the oldest weights that produced a token of it (min of token_versions)
    # Per response token, the weight version of the turn (or, with rollout.partial, of the chunk)
    # that produced it; observation tokens take the version of the turn before them.
    token_versions: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None  # None until a rollout ends the episode
    turn_spans: list[tuple[int, int]] = field(default_factory=list)  # [start, end) in response_ids per model turn
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    # Per-token rewards from environments (index into response_ids -> reward), added to the
    # final reward at the last token for token-level estimators (GAE).
    token_rewards: dict[int, float] = field(default_factory=dict)
    # What reward functions read. ground_truth: the task row's "ground_truth" (None if it has none).
    ground_truth: Any = None
    response_text: str = ""  # the whole response decoded, observations included (special tokens skipped)
    final_text: str = ""  # the last model turn's text (single-turn: the same as response_text)
    turn_texts: list[str] = field(default_factory=list)  # each model turn's text, in order
    # Everything else: "episode_id", "worker" (the rollout worker's index), "agent" (turn and tool
    # counts), "env" (first_observation, actions, observations, rewards, dones, infos, error)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.finish_reason is not None:  # "stop" -> FinishReason.STOP; an unknown reason fails here
            self.finish_reason = FinishReason(self.finish_reason)

    @property
    def num_model_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass
class Batch:
    """Padded tensors for B samples. Shapes: prompts [B,P], responses/masks [B,R], rows [B].

    from_samples fills the rollout's tensors; the driver adds the rest of a step's tensors
    (old/ref logprobs, values, advantages, returns) as the actors compute them."""

    prompts: torch.Tensor  # [B,P] long, left-padded
    responses: torch.Tensor  # [B,R] long, right-padded
    attention_mask: torch.Tensor  # [B,P+R] long
    position_ids: torch.Tensor  # [B,P+R] long
    loss_mask: torch.Tensor  # [B,R] float
    rollout_logprobs: torch.Tensor  # [B,R] float
    rewards: torch.Tensor  # [B] float
    group_ids: torch.Tensor  # [B] long
    token_rewards: torch.Tensor  # [B,R] float (environment per-token rewards; zeros if none)
    # Set by the driver during a step (None until then):
    old_logprobs: torch.Tensor | None = None  # [B,R] float32, the learner's, before this step's update
    ref_logprobs: torch.Tensor | None = None  # [B,R] float32, the reference policy's (when a KL term is on)
    values: torch.Tensor | None = None  # [B,R] float32, the critic's (PPO/GAE), 0 where loss_mask is 0
    advantages: torch.Tensor | None = None  # [B,R] float32, 0 where loss_mask is 0
    returns: torch.Tensor | None = None  # [B,R] float32, the critic's targets, 0 where loss_mask is 0

    @property
    def input_ids(self) -> torch.Tensor:
        import torch

        return torch.cat([self.prompts, self.responses], dim=1)

    @property
    def prompt_width(self) -> int:
        return self.prompts.shape[1]

    def __len__(self) -> int:
        return self.prompts.shape[0]

    def select(self, idx: torch.Tensor | list[int]) -> Batch:
        """Rows idx of every tensor."""
        import torch

        idx = torch.as_tensor(idx, dtype=torch.long, device=self.prompts.device)
        return self._map(lambda t: t.index_select(0, idx))

    def to(self, device: torch.device | str) -> Batch:
        """Every tensor on `device`."""
        return self._map(lambda t: t.to(device))

    def _map(self, fn) -> Batch:
        """A Batch of fn(tensor) for every tensor field; fields not set yet stay None."""
        return Batch(**{f.name: None if (t := getattr(self, f.name)) is None else fn(t) for f in fields(self)})

    @classmethod
    def from_samples(cls, samples: list[Sample], pad_id: int) -> Batch:
        import torch

        P = max(len(s.prompt_ids) for s in samples)
        R = max(1, max(len(s.response_ids) for s in samples))
        # Padded Python lists first, then one tensor per field: a tensor op per row costs more than
        # the rest of the batch's preparation (64 rows: 2.3 ms against 0.4 ms).
        left = [P - len(s.prompt_ids) for s in samples]
        right = [R - len(s.response_ids) for s in samples]
        prompts = torch.tensor([[pad_id] * n + s.prompt_ids for s, n in zip(samples, left)], dtype=torch.long)
        responses = torch.tensor([s.response_ids + [pad_id] * n for s, n in zip(samples, right)], dtype=torch.long)
        attn = torch.tensor([[0] * a + [1] * (P + R - a - b) + [0] * b for a, b in zip(left, right)], dtype=torch.long)
        loss_mask = torch.tensor([s.loss_mask + [0] * n for s, n in zip(samples, right)], dtype=torch.float)
        logprobs = torch.tensor([s.rollout_logprobs + [0.0] * n for s, n in zip(samples, right)], dtype=torch.float)
        token_rewards = torch.zeros((len(samples), R))
        for i, s in enumerate(samples):
            for t, rew in s.token_rewards.items():
                token_rewards[i, t] += rew
        # Positions count only real tokens, matching what HF generate uses with left padding.
        position_ids = (attn.cumsum(-1) - 1).clamp(min=0)
        return cls(
            prompts=prompts,
            responses=responses,
            attention_mask=attn,
            position_ids=position_ids,
            loss_mask=loss_mask,
            rollout_logprobs=logprobs,
            rewards=torch.tensor([s.reward for s in samples], dtype=torch.float),
            group_ids=torch.tensor([s.group_id for s in samples], dtype=torch.long),
            token_rewards=token_rewards,
        )
