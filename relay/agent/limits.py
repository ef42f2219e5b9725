"""How long an agent loop's episode may run: turns, tool turns, tokens and calls per turn."""

from __future__ import annotations

from dataclasses import dataclass

from relay.config import RolloutConfig, ToolsConfig


@dataclass(frozen=True)
class AgentLimits:
    max_turns: int = 4  # model turns per episode
    max_tool_turns: int = 3  # model turns that may call tools
    max_tokens_per_turn: int = 64
    max_total_tokens: int = 512  # response tokens: model and observation tokens together
    max_calls_per_turn: int = 16  # tool calls run per turn; the rest are one error the model reads

    def __post_init__(self):
        if self.max_turns < 1 or self.max_tool_turns < 0 or self.max_tokens_per_turn < 1 or self.max_calls_per_turn < 1:
            raise ValueError(f"invalid agent limits: {self}")
        if self.max_total_tokens < self.max_tokens_per_turn:
            raise ValueError(
                f"max_total_tokens ({self.max_total_tokens}) < max_tokens_per_turn ({self.max_tokens_per_turn})"
            )

    @classmethod
    def of(cls, r: RolloutConfig, tl: ToolsConfig) -> AgentLimits:
        """The limits rollout.* and tools.* set (validate() has checked them): max_tool_turns only
        with tools.enabled, max_tokens_per_turn defaults to rollout.max_new_tokens."""
        return cls(
            max_turns=r.max_turns,
            max_tool_turns=tl.max_tool_turns if tl.enabled else 0,
            max_tokens_per_turn=r.max_tokens_per_turn or r.max_new_tokens,
            max_total_tokens=r.max_total_tokens,
            max_calls_per_turn=tl.max_calls_per_turn,
        )
